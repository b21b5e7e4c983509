//! Graph QA (G-Retriever's benchmark: one small textual graph per question): G-Retriever and
//! Efficient G-Retriever answered by trained heads instead of an LLM.
//!
//! Library modules: [`answer`] (classes, training examples, loose hits, scores and predictions of
//! answered questions), [`data`] (the ingest tables as per-question graphs, tasks), [`encoded`] (the
//! `textgraphs` tables read back), [`pcst`] (a port of pcst_fast), [`retrieval`] (G-Retriever's
//! PCST retrieval and Efficient G-Retriever's attention retrieval), [`texthead`] (the MiniLM cross-encoder
//! answer head), [`lm`] (the language-model answer path: G-Retriever's rows with soft graph tokens).
//!
//! Stages: `textgraphs` (embeddings of every distinct text), `subgraphs` (retrieval per question),
//! `gretriever` (GNN encoders + answer heads, baselines, seeds), `mixrag` (MixRAG's experts, query-aware
//! GNN and gate, with its ablations).

pub mod answer;
pub mod data;
pub mod encoded;
pub mod gretriever;
pub mod lm;
pub mod mixrag;
pub mod pcst;
pub mod retrieval;
pub mod subgraphs;
pub mod textgraphs;
pub mod texthead;
