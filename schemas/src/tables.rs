//! Every table tgrag writes. Loaders produce the canonical input tables, stages consume and produce
//! the others (each stage declares which it writes, and every write is checked against its spec),
//! `tgrag schema` prints them. Families: knowledge base (STaRK-like), graph QA (one small textual
//! graph per question), text-attributed graph (TopoRAG inputs), and the outputs of the method
//! families (indexes, retrieval, knowledge-base methods, TopoRAG) and results (runs, scores, curves,
//! metrics, timings). Tables marked `run_dependent` hold wall-clock figures.

use crate::table::{ColType::*, Float, TableSpec, opt, opt_in, req, req_in};

/// The splits of queries and questions.
pub const SPLITS: &[&str] = &["train", "val", "test"];
/// The graph QA benchmarks (which decide the answer head).
pub const TASKS: &[&str] = &["explagraphs", "scenegraphs", "webqsp"];
/// TopoRAG's node split.
pub const TAG_SPLITS: &[&str] = &["observed", "partial"];

/// Knowledge-base nodes; `node_id` is dense (0..N) in every table tgrag writes.
pub const NODES: TableSpec = TableSpec {
    name: "nodes",
    version: 1,
    family: "knowledge base",
    doc: "One row per entity of a text-rich knowledge base.",
    run_dependent: false,
    columns: &[
        req("node_id", U32, "entity id, unique"),
        req("node_type", Utf8, "entity type (product, paper, gene, ...)"),
        req("name", Utf8, "entity name as it may appear in a query"),
        req("doc", Utf8, "the entity's document (STaRK get_doc_info text)"),
    ],
};

/// Typed knowledge-base edges (directed as stored; methods decide how to traverse them).
pub const EDGES: TableSpec = TableSpec {
    name: "edges",
    version: 1,
    family: "knowledge base",
    doc: "One row per typed relation between two existing nodes.",
    run_dependent: false,
    columns: &[req("src", U32, "source node_id"), req("dst", U32, "destination node_id"), req("relation", Utf8, "relation type")],
};

/// Queries over a knowledge base.
pub const QUERIES: TableSpec = TableSpec {
    name: "queries",
    version: 1,
    family: "knowledge base",
    doc: "Natural-language queries with their split; pattern/hops where the dataset knows them.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query id, unique"),
        req("text", Utf8, "the query"),
        req_in("split", SPLITS, "train | val | test"),
        opt("pattern", Utf8, "logical pattern, e.g. `institution>author>paper+text`"),
        opt("hops", U8, "number of relation hops of the pattern"),
    ],
};

/// Gold answers of knowledge-base queries.
pub const ANSWERS: TableSpec = TableSpec {
    name: "answers",
    version: 1,
    family: "knowledge base",
    doc: "One row per (query, gold answer node).",
    run_dependent: false,
    columns: &[req("query_id", U32, "an existing query_id"), req("node_id", U32, "an existing node_id")],
};

/// Candidate node types of a knowledge base (STaRK: Amazon products, MAG papers, Prime all).
pub const CANDIDATE_TYPES: TableSpec = TableSpec {
    name: "candidate_types",
    version: 1,
    family: "knowledge base",
    doc: "Node types whose nodes are ranking candidates; absent or empty means every node.",
    run_dependent: false,
    columns: &[req("node_type", Utf8, "a node type")],
};

/// Nodes of the small per-question graphs of graph QA (ExplaGraphs, SceneGraphs, WebQSP).
pub const GRAPH_NODES: TableSpec = TableSpec {
    name: "graph_nodes",
    version: 1,
    family: "graph QA",
    doc: "Nodes of one small textual graph per question.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph (= question) id"),
        req("node_id", U32, "node id, unique within its graph"),
        req("text", Utf8, "node text"),
    ],
};

/// Edges of the per-question graphs.
pub const GRAPH_EDGES: TableSpec = TableSpec {
    name: "graph_edges",
    version: 1,
    family: "graph QA",
    doc: "Textual edges of one small graph per question.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph id"),
        req("src", U32, "source node_id within the graph"),
        req("dst", U32, "destination node_id within the graph"),
        req("text", Utf8, "edge text (relation)"),
    ],
};

/// Questions of graph QA.
pub const QA: TableSpec = TableSpec {
    name: "qa",
    version: 3,
    family: "graph QA",
    doc: "One question per graph with its answer or label.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph id, unique"),
        req("question", Utf8, "the question"),
        req("answer", Utf8, "answer text or class label"),
        req_in("split", SPLITS, "train | val | test"),
        opt_in("task", TASKS, "explagraphs | scenegraphs | webqsp: the benchmark, which decides the answer head"),
        opt("hops", U8, "relation hops from the topic entity to the answers, where the dataset knows them (question type)"),
    ],
};

/// Nodes of a text-attributed graph (TopoRAG).
pub const TAG_NODES: TableSpec = TableSpec {
    name: "tag_nodes",
    version: 2,
    family: "text-attributed graph",
    doc: "Nodes with text, label, optional time and the observed/partial split.",
    run_dependent: false,
    columns: &[
        req("node_id", U32, "node id, unique"),
        req("text", Utf8, "full node text"),
        opt("key", Utf8, "the dataset's own node id (paper id, e-mail address)"),
        opt("label", Utf8, "class label"),
        opt("time", I64, "timestamp or year, when the dataset has one"),
        opt_in("split", TAG_SPLITS, "observed | partial (TopoRAG §6.1.1), when already split"),
    ],
};

/// Edges of a text-attributed graph.
pub const TAG_EDGES: TableSpec = TableSpec {
    name: "tag_edges",
    version: 1,
    family: "text-attributed graph",
    doc: "Edges between existing tag_nodes (undirected graphs store each edge once).",
    run_dependent: false,
    columns: &[req("src", U32, "source node_id"), req("dst", U32, "destination node_id")],
};

/// E-mails of an e-mail graph (Enron): the texts that live on the people graph's edges.
pub const EMAILS: TableSpec = TableSpec {
    name: "emails",
    version: 1,
    family: "text-attributed graph",
    doc: "One row per e-mail; sender and recipients are tag_nodes (people).",
    run_dependent: false,
    columns: &[
        req("email_id", U32, "e-mail id, unique (input order)"),
        req("file", Utf8, "where the message came from (maildir path)"),
        req("sender", U32, "the From address, a tag_nodes node_id"),
        req("recipients", ListU32, "To and Cc addresses in header order, tag_nodes node_ids"),
        opt("time", I64, "Date header as Unix seconds (UTC)"),
        req("subject", Utf8, "Subject header"),
        req("body", Utf8, "message body"),
    ],
};

/// A ranked retrieval run.
pub const RUN: TableSpec = TableSpec {
    name: "run",
    version: 1,
    family: "results",
    doc: "Ranked candidates per query; trajectory columns are filled by graph methods (MoR).",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query id"),
        req("node_id", U32, "retrieved node"),
        req("rank", U32, "1-based rank"),
        req("score", F32, "retrieval score (higher is better)"),
        req("method", Utf8, "method name (bm25, dense, mor, ...)"),
        opt("path", ListU32, "trajectory: node ids from seed to candidate"),
        opt("path_types", ListUtf8, "trajectory: node types along the path"),
        opt("path_scores", ListF32, "trajectory: BM25 score of each node on the path"),
        opt("traversal_id", U8, "which planned path reached the node first"),
        opt("dense_score", F32, "dense (embedding) score of the candidate"),
    ],
};

/// Per-query retrieval metrics.
pub const METRICS_PER_QUERY: TableSpec = TableSpec {
    name: "per_query",
    version: 1,
    family: "results",
    doc: "STaRK evaluator metrics of one method on one query.",
    run_dependent: false,
    columns: &[
        req("method", Utf8, "method name"),
        req("query_id", U32, "query id"),
        req("split", Utf8, "query split"),
        opt("pattern", Utf8, "logical pattern"),
        opt("hops", U8, "hop count"),
        req("num_answers", U32, "number of gold answers"),
        req("hit1", F64, "hit@1"),
        req("hit5", F64, "hit@5"),
        req("recall20", F64, "recall@20 (0 without answers)"),
        req("mrr", F64, "reciprocal rank of the first answer over the full candidate list"),
    ],
};

/// Aggregated retrieval metrics.
pub const METRICS_AGGREGATE: TableSpec = TableSpec {
    name: "aggregate",
    version: 1,
    family: "results",
    doc: "Mean metrics grouped by method and one of: all, split, pattern, hops.",
    run_dependent: false,
    columns: &[
        req("method", Utf8, "method name"),
        req("group_by", Utf8, "all | split | pattern | hops"),
        req("group_value", Utf8, "the group's value (`*` for all)"),
        req("n_queries", U64, "queries in the group"),
        req("hit1", F64, "mean hit@1"),
        req("hit5", F64, "mean hit@5"),
        req("recall20", F64, "mean recall@20"),
        req("mrr", F64, "mean MRR"),
    ],
};

/// A persisted BM25 index: one row per index (the global one and one per node type).
pub const BM25_INDEX: TableSpec = TableSpec {
    name: "bm25_index",
    version: 1,
    family: "indexes",
    doc: "Parameters and statistics of each persisted BM25 index (scope `*` = all nodes, else a node type).",
    run_dependent: false,
    columns: &[
        req("scope", Utf8, "`*` for the global index, else the node type it covers"),
        req("num_docs", U32, "documents (nodes) in the index"),
        req("vocab_size", U32, "distinct terms"),
        req("avg_doc_len", F32, "mean document length in tokens"),
        req("k1", F32, "BM25 k1"),
        req("b", F32, "BM25 b"),
        req("variant", Utf8, "lucene | okapi"),
        req("tokenizer", Utf8, "bm25s | simple"),
    ],
};

/// Terms of the persisted BM25 indexes.
pub const BM25_TERMS: TableSpec = TableSpec {
    name: "bm25_terms",
    version: 1,
    family: "indexes",
    doc: "The vocabulary of each BM25 index, in term-id order (first occurrence in node-id order).",
    run_dependent: false,
    columns: &[
        req("scope", Utf8, "index scope (see bm25_index)"),
        req("term_id", U32, "term id within the scope"),
        req("term", Utf8, "the token"),
        req("df", U32, "document frequency"),
        req("idf", F32, "idf of the index's variant (recomputed on load; here for readers)"),
    ],
};

/// Postings of the persisted BM25 indexes.
pub const BM25_POSTINGS: TableSpec = TableSpec {
    name: "bm25_postings",
    version: 1,
    family: "indexes",
    doc: "One row per (term, document) pair: the inverted lists, by term then node id.",
    run_dependent: false,
    columns: &[
        req("scope", Utf8, "index scope (see bm25_index)"),
        req("term_id", U32, "term id within the scope"),
        req("node_id", U32, "document (node)"),
        req("tf", U32, "term frequency in the document"),
    ],
};

/// Documents of the persisted BM25 indexes.
pub const BM25_DOCS: TableSpec = TableSpec {
    name: "bm25_docs",
    version: 1,
    family: "indexes",
    doc: "The documents of each BM25 index in index order (node id ascending) with their lengths.",
    run_dependent: false,
    columns: &[
        req("scope", Utf8, "index scope (see bm25_index)"),
        req("node_id", U32, "document (node)"),
        req("len", U32, "document length in tokens"),
    ],
};

/// Shape of the knowledge base per node type (the `graph` stage).
pub const GRAPH_STATS: TableSpec = TableSpec {
    name: "graph_stats",
    version: 1,
    family: "knowledge base",
    doc: "Per node type (and `*` for all): nodes, mean and max degree, isolated nodes; connected components on the `*` row.",
    run_dependent: false,
    columns: &[
        req("node_type", Utf8, "node type, or `*` for every node"),
        req("nodes", U64, "nodes of the type"),
        req("mean_degree", F64, "mean undirected degree"),
        req("max_degree", U64, "largest degree"),
        req("isolated", U64, "nodes without an edge"),
        opt("components", U64, "connected components (the `*` row only)"),
    ],
};

/// Node embeddings (the `dense` stage).
pub const EMBEDDINGS: TableSpec = TableSpec {
    name: "embeddings",
    version: 1,
    family: "retrieval",
    doc: "One embedding per node document (MiniLM 384-d, or the hashing width), L2-normalised.",
    run_dependent: false,
    columns: &[req("node_id", U32, "node"), req("embedding", Vector, "the embedding (one width per table)")],
};

/// One shard's partition of a stage's embeddings (`tgrag run --shard I/N`, `tgrag embed --shard
/// I/N`): a contiguous range of the texts the stage embeds, under `<stage>/shards/`. The stage's
/// full run reads the partitions of its cache key into its own table and removes them.
pub const EMBEDDING_PART: TableSpec = TableSpec {
    name: "embedding_part",
    version: 1,
    family: "retrieval",
    doc: "One shard's embeddings: one row per text of its contiguous range, in the stage's text order.",
    run_dependent: false,
    columns: &[
        req("row", U32, "the text's position in the stage's order (the partition's range, ascending)"),
        req("embedding", Vector, "the embedding (the stage's encoder)"),
    ],
};

/// Query embeddings (the `dense` stage).
pub const QUERY_EMBEDDINGS: TableSpec = TableSpec {
    name: "query_embeddings",
    version: 1,
    family: "retrieval",
    doc: "One embedding per query, by the encoder of `embeddings`.",
    run_dependent: false,
    columns: &[req("query_id", U32, "query"), req("embedding", Vector, "the embedding (the width of `embeddings`)")],
};

/// Topic entities of the training and validation queries (the `planning` stage).
pub const TOPIC_ENTITIES: TableSpec = TableSpec {
    name: "topic_entities",
    version: 1,
    family: "knowledge-base methods",
    doc: "Per query its topic nodes: names found in the query (longest match first), else the dense top-k.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query"),
        req("node_id", U32, "topic node"),
        req("method", Utf8, "name | embedding"),
        opt("span", Utf8, "the matched text (name matches only)"),
    ],
};

/// PASemiQA's relation-path training targets (the `planning` stage).
pub const RELATION_PATHS: TableSpec = TableSpec {
    name: "relation_paths",
    version: 1,
    family: "knowledge-base methods",
    doc: "Distinct shortest typed paths from a query's topic nodes to its answers, with PASemiQA's Q(z|q) = 1/|Z*|.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query"),
        req("metapath", Utf8, "MoR-style metapath with relations: `a -r-> b <-s- c`"),
        req("relations", ListUtf8, "relation hops: `rel>` along a stored edge, `<rel` against it"),
        req("types", ListUtf8, "node types along the path"),
        req("weight", F32, "Q(z|q)"),
        req("answers_reached", U32, "answers the path reaches"),
    ],
};

/// MoR's planning-graph training targets (the `planning` stage).
pub const PLANNING_GRAPHS: TableSpec = TableSpec {
    name: "planning_graphs",
    version: 1,
    family: "knowledge-base methods",
    doc: "Per training or validation query with a path: the path reaching the most answers as a metapath, with text restrictions.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query"),
        req("split", Utf8, "train | val"),
        req("metapath", Utf8, "metapath (MoR syntax with relations)"),
        req("restrictions", Utf8, "`{type: [text, …]}` as JSON"),
    ],
};

/// MoR's plans (the `mor` stage).
pub const PLANS: TableSpec = TableSpec {
    name: "plans",
    version: 1,
    family: "knowledge-base methods",
    doc: "The planner's plan of every query and the restrictions copied from the query.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query"),
        req("metapath", Utf8, "decoded plan tokens joined by spaces (empty: no plan)"),
        req("valid", Bool, "the plan parses against the KB's types and relations (else MoR falls back to BM25)"),
        req("restrictions", Utf8, "`{type: [text, …]}` as JSON"),
    ],
};

/// MoR's per-query latency (the `mor` stage).
pub const LATENCY: TableSpec = TableSpec {
    name: "latency",
    version: 1,
    family: "knowledge-base methods",
    doc: "Milliseconds per query of each MoR phase (planning: the batch time over the queries).",
    run_dependent: true,
    columns: &[
        req("query_id", U32, "query"),
        req("plan_ms", F64, "planning"),
        req("reason_ms", F64, "mixed traversal"),
        req("organize_ms", F64, "reranking"),
    ],
};

/// PASemiQA's chosen relation paths (the `pasemiqa` stage).
pub const PATHS: TableSpec = TableSpec {
    name: "paths",
    version: 1,
    family: "knowledge-base methods",
    doc: "Per query the top relation paths z with P(z|q) renormalised over them and |A_{q,z}|.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query"),
        req("rank", U32, "1-based rank of the path"),
        req("relations", Utf8, "relation hops joined by spaces"),
        req("prob", F64, "P(z|q) over the kept paths"),
        req("reached", U32, "nodes the path reaches from the topic nodes"),
        req("text_fallback", Bool, "no path reached a node: the query was ranked densely"),
    ],
};

/// TopoRAG's split of a text-attributed graph (the `toporag` stage).
pub const SPLIT: TableSpec = TableSpec {
    name: "split",
    version: 1,
    family: "toporag",
    doc: "Kept nodes (enough text) as observed or partial, with the visible and hidden words.",
    run_dependent: false,
    columns: &[
        req("node_id", U32, "node"),
        req("split", Utf8, "observed | partial"),
        req("visible", Utf8, "the text a retriever may see"),
        req("hidden", Utf8, "the text retrieval should recover (partial nodes)"),
    ],
};

/// TopoRAG's split of an e-mail corpus (the `toporag` stage on an e-mail graph).
pub const EMAIL_SPLIT: TableSpec = TableSpec {
    name: "email_split",
    version: 1,
    family: "toporag",
    doc: "Kept e-mails (distinct, enough words) as observed or partial, with the visible and hidden words.",
    run_dependent: false,
    columns: &[
        req("email_id", U32, "e-mail"),
        req("split", Utf8, "observed | partial"),
        req("visible", Utf8, "the text a retriever may see"),
        req("hidden", Utf8, "the text retrieval should recover (partial e-mails)"),
    ],
};

/// TopoRAG's retrieved nodes (the `toporag` stage).
pub const RETRIEVED: TableSpec = TableSpec {
    name: "retrieved",
    version: 1,
    family: "toporag",
    doc: "Per partial node and retriever, the observed nodes retrieved, best first.",
    run_dependent: false,
    columns: &[
        req("target", U32, "the partial node"),
        req("retriever", Utf8, "random | text | topo-proximity | topo-role"),
        req("rank", U32, "1-based rank"),
        req("node_id", U32, "retrieved node"),
        req("score", F64, "the retriever's score (cosine, −L2, 0 for random)"),
        req("text", Utf8, "the retrieved text"),
    ],
};

/// TopoRAG's retrieved e-mails (the `toporag` stage on an e-mail graph).
pub const EMAIL_RETRIEVED: TableSpec = TableSpec {
    name: "email_retrieved",
    version: 1,
    family: "toporag",
    doc: "Per partial e-mail and retriever, the observed e-mails retrieved, best first.",
    run_dependent: false,
    columns: &[
        req("target", U32, "the partial e-mail"),
        req("retriever", Utf8, "random | text | topo-proximity | topo-role"),
        req("rank", U32, "1-based rank"),
        req("email_id", U32, "retrieved e-mail"),
        req("score", F64, "the text similarity that ranked it"),
        req("text", Utf8, "the retrieved text"),
    ],
};

/// TopoRAG's context quality per target (the `toporag` stage).
pub const CONTEXT_QUALITY: TableSpec = TableSpec {
    name: "context_quality",
    version: 1,
    family: "toporag",
    doc: "Per target and retriever: the retrieved texts against the hidden text.",
    run_dependent: false,
    columns: &[
        req("target", U32, "the partial node or e-mail"),
        req("retriever", Utf8, "none | random | text | topo-proximity | topo-role"),
        req("bleu4", F64, "sentence BLEU-4 (sacrebleu)"),
        req("rouge_l_f1", F64, "ROUGE-L F1 (rouge-score)"),
        req("minilm_cosine", F64, "cosine of the embeddings (0 for an empty context)"),
    ],
};

/// TopoRAG's context quality per retriever (the `toporag` stage).
pub const CONTEXT_SUMMARY: TableSpec = TableSpec {
    name: "context_summary",
    version: 1,
    family: "toporag",
    doc: "Per retriever the mean context quality over the targets (also in `scores`).",
    run_dependent: false,
    columns: &[
        req("retriever", Utf8, "none | random | text | topo-proximity | topo-role"),
        req("targets", U64, "targets"),
        req("bleu4_mean", F64, "mean sentence BLEU-4"),
        req("bleu4_corpus", F64, "corpus BLEU-4"),
        req("rouge_l_f1_mean", F64, "mean ROUGE-L F1"),
        req("cosine_mean", F64, "mean cosine"),
    ],
};

/// TopoRAG's correlation analysis (the `toporag` stage).
pub const CORRELATION: TableSpec = TableSpec {
    name: "correlation",
    version: 1,
    family: "toporag",
    doc: "Pearson r between text cosine and proximity cosine (K = 1…5) or role L2 distance, over node pairs.",
    run_dependent: false,
    columns: &[
        req("measure", Utf8, "proximity_cosine | role_l2_distance"),
        req("k", U32, "hops of the diffusion (0 for role)"),
        req("pearson", F64, "Pearson r"),
        req("pairs", U64, "pairs of the analysis"),
        req("sampled", Bool, "the pairs are a seeded sample"),
    ],
};

/// TopoRAG's node classification (the `toporag` stage).
pub const NODE_CLASSIFICATION: TableSpec = TableSpec {
    name: "node_classification",
    version: 2,
    family: "toporag",
    doc: "Per model and retriever: test accuracy on the partial nodes at the epoch kept on validation (also in `scores`).",
    run_dependent: false,
    columns: &[
        req("model", Utf8, "gcn | sage | mlp"),
        req("retriever", Utf8, "none | random | text | topo-proximity | topo-role | oracle"),
        req("accuracy", F64, "test accuracy"),
        req("val_accuracy", F64, "validation accuracy of the kept epoch"),
        req("best_epoch", U32, "the kept epoch"),
        req("epochs", U32, "epochs run (early stopping)"),
        req("train_nodes", U32, "training nodes"),
        req("test_nodes", U32, "test nodes"),
        req("seed", U64, "training seed (weights, dropout; the split is the stage's `seed`)"),
    ],
};

/// TopoRAG's link prediction (the `toporag` stage).
pub const LINK_PREDICTION: TableSpec = TableSpec {
    name: "link_prediction",
    version: 3,
    family: "toporag",
    doc: "Per retriever: Hits@K of the edges with a partial end at the epoch kept on validation (also in `scores`).",
    run_dependent: false,
    columns: &[
        req("retriever", Utf8, "none | random | text | topo-proximity | topo-role | oracle"),
        req("k", U32, "K of Hits@K"),
        req("hits", F64, "test Hits@K"),
        req("val_hits", F64, "validation Hits@K of the kept epoch"),
        req("best_epoch", U32, "the kept epoch"),
        req("epochs", U32, "epochs run (early stopping)"),
        req("test_edges", U32, "test positives"),
        req("test_negatives", U32, "test negatives"),
        req("seed", U64, "training seed (weights, negatives; the split is the stage's `seed`)"),
    ],
};

/// Every distinct text of the graph-QA graphs, embedded once (the `textgraphs` stage).
pub const TEXTS: TableSpec = TableSpec {
    name: "texts",
    version: 1,
    family: "graph QA",
    doc: "Distinct node, edge and question texts (first-seen order) with their embeddings.",
    run_dependent: false,
    columns: &[
        req("text_id", U32, "text id (0..n)"),
        req("text", Utf8, "the text"),
        req("embedding", Vector, "MiniLM (384) or hashing embedding"),
    ],
};

/// Nodes of the encoded graphs.
pub const TEXTGRAPH_NODES: TableSpec = TableSpec {
    name: "textgraph_nodes",
    version: 1,
    family: "graph QA",
    doc: "Every node of every question's graph, as a reference to its text.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph (= question)"),
        req("node_id", U32, "node id within the graph (0..n)"),
        req("text_id", U32, "its text in `texts`"),
    ],
};

/// Edges of the encoded graphs.
pub const TEXTGRAPH_EDGES: TableSpec = TableSpec {
    name: "textgraph_edges",
    version: 1,
    family: "graph QA",
    doc: "Every edge of every question's graph (in table order), as a reference to its relation text.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph"),
        req("edge_index", U32, "edge index within the graph (0..m, table order)"),
        req("src", U32, "source node"),
        req("dst", U32, "destination node"),
        req("text_id", U32, "the relation's text in `texts`"),
    ],
};

/// Questions of the encoded graphs.
pub const TEXTGRAPH_QUESTIONS: TableSpec = TableSpec {
    name: "textgraph_questions",
    version: 2,
    family: "graph QA",
    doc: "One row per question: its text, task, split, answer and G-Retriever's textualisation of its graph.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph"),
        req("text_id", U32, "the question's text in `texts`"),
        req("task", Utf8, "explagraphs | scenegraphs | webqsp"),
        req("split", Utf8, "train | val | test"),
        req("answer", Utf8, "answer or label (`|`-joined answers for WebQSP)"),
        req("desc", Utf8, "G-Retriever's `desc`: node CSV, blank line, edge CSV"),
        opt("hops", U8, "relation hops of the question, where the dataset knows them"),
    ],
};

/// Retrieved subgraph nodes (the `subgraphs` stage).
pub const SUBGRAPH_NODES: TableSpec = TableSpec {
    name: "subgraph_nodes",
    version: 1,
    family: "graph QA",
    doc: "The nodes each retrieval method keeps per question.",
    run_dependent: false,
    columns: &[req("graph_id", U32, "graph"), req("method", Utf8, "pcst | attention | whole"), req("node_id", U32, "kept node")],
};

/// Retrieved subgraph edges.
pub const SUBGRAPH_EDGES: TableSpec = TableSpec {
    name: "subgraph_edges",
    version: 1,
    family: "graph QA",
    doc: "The edges each retrieval method keeps per question (indices into the graph's edges).",
    run_dependent: false,
    columns: &[req("graph_id", U32, "graph"), req("method", Utf8, "pcst | attention | whole"), req("edge_index", U32, "kept edge")],
};

/// Per question and method: subgraph size and answers kept.
pub const SUBGRAPH_SUMMARY: TableSpec = TableSpec {
    name: "subgraph_summary",
    version: 1,
    family: "graph QA",
    doc: "Size of each retrieved subgraph and, where answers are nodes, how many it holds.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph"),
        req("method", Utf8, "pcst | attention | whole"),
        req("task", Utf8, "task"),
        req("split", Utf8, "split"),
        req("nodes", U32, "nodes kept"),
        req("edges", U32, "edges kept"),
        req("answer_nodes", U32, "answers that are nodes of the graph"),
        req("answers_found", U32, "of those, kept"),
        req("empty", Bool, "the subgraph has no node"),
    ],
};

/// Retrieval time per question (run-dependent).
pub const RETRIEVAL_LATENCY: TableSpec = TableSpec {
    name: "retrieval_latency",
    version: 1,
    family: "graph QA",
    doc: "Milliseconds per question and method: similarity scoring plus the retrieval itself.",
    run_dependent: true,
    columns: &[req("graph_id", U32, "graph"), req("method", Utf8, "pcst | attention | whole"), req("ms", F64, "milliseconds")],
};

/// Answers of the graph-QA methods (the `gretriever` stage).
pub const PREDICTIONS: TableSpec = TableSpec {
    name: "predictions",
    version: 1,
    family: "graph QA",
    doc: "Per validation or test question, method and seed: the prediction and whether it is right.",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph"),
        req("method", Utf8, "method"),
        opt("seed", U64, "training seed (null for untrained rules)"),
        req("prediction", Utf8, "predicted label, or the top node's text"),
        req("correct", Bool, "the prediction is an answer"),
        req("loose_hit", Bool, "an answer (normalised) is a substring of the prediction (G-Retriever's WebQSP hit)"),
    ],
};

/// MixRAG's node-wise gate (the `mixrag` stage).
pub const GATE_WEIGHTS: TableSpec = TableSpec {
    name: "gate_weights",
    version: 1,
    family: "graph QA",
    doc: "Per validation or test question and node of its subgraph: the gate's weights of the entity, relation and subgraph experts (the full MixRAG, first seed).",
    run_dependent: false,
    columns: &[
        req("graph_id", U32, "graph"),
        req("node", U32, "node of the retrieved subgraph (position in it)"),
        req("entity", F32, "weight of the entity expert"),
        req("relation", F32, "weight of the relation expert"),
        req("subgraph", F32, "weight of the subgraph expert"),
    ],
};

/// MixRAG's ablations (the `mixrag` stage).
pub const MIXRAG_ABLATION: TableSpec = TableSpec {
    name: "mixrag_ablation",
    version: 2,
    family: "graph QA",
    doc: "MixRAG's ablations per task and split, mean ± std over seeds: expert combinations (the paper's Table 4) with trained heads and, with `lm_ablation_experts`, read by the language model, query-aware GNN depth (Fig. 4), the query-aware GNN against G-Retriever's graph transformer on the same subgraphs, and the mean gate weight per expert by question type (Fig. 5).",
    run_dependent: false,
    columns: &[
        req("dataset", Utf8, "dataset (`<dataset>/<task>` where a dataset holds several tasks)"),
        req_in(
            "ablation",
            &["experts", "experts-lm", "depth", "encoder", "gate"],
            "experts | experts-lm (the same combinations under the first of `lm_rows`, method `<row>-<experts>` in `scores`) | depth | encoder | gate",
        ),
        req(
            "setting",
            Utf8,
            "experts, experts-lm: entity+subgraph …; depth: 1…4; encoder: query-aware-gnn | graph-transformer; gate: the expert",
        ),
        req("group", Utf8, "`*`, or the question type (`hops=1`) for the gate"),
        req("split", Utf8, "val | test"),
        req("metric", Utf8, "accuracy | hit1 | gate_weight"),
        req("mean", F64, "mean over seeds (the gate: over questions)"),
        req("std", F64, "sample standard deviation over seeds (0 for one)"),
        req("seeds", U32, "seeds"),
        req("n", U64, "questions"),
    ],
};

/// Training curves of every trained model, in one shape.
pub const CURVES: TableSpec = TableSpec {
    name: "curves",
    version: 1,
    family: "results",
    doc: "One row per (model, variant, epoch, metric) of every model a stage or tool trains.",
    run_dependent: false,
    columns: &[
        req("model", Utf8, "planner | reranker | tagger | encoder | gcn | sage | mlp | gcn-mlp | …"),
        req("variant", Utf8, "which training of the model (e.g. `node_classification/text`); empty when one"),
        req("seed", U64, "training seed"),
        req("epoch", U32, "1-based epoch"),
        req("metric", Utf8, "train_loss | val_loss | val_<metric> | test_<metric>"),
        req("value", F64, "the metric's value"),
        req("kept", Bool, "this epoch's weights were kept (best on validation)"),
    ],
};

/// Every evaluation's results, in one long format.
pub const SCORES: TableSpec = TableSpec {
    name: "scores",
    version: 1,
    family: "results",
    doc: "One row per (dataset, stage, method, split, group, metric, seed): what reports and the nightly comparison read.",
    run_dependent: false,
    columns: &[
        req("dataset", Utf8, "dataset name"),
        req("stage", Utf8, "the stage whose results are scored"),
        req("method", Utf8, "method (bm25, mor, topo-proximity, gretriever-gcn, …)"),
        req("split", Utf8, "train | val | test | all"),
        req("group", Utf8, "`*` or a breakdown `key=value` (hops=2, pattern=…, model=gcn)"),
        req("metric", Utf8, "hit1 | hit5 | recall20 | mrr | accuracy | hits_at_100 | bleu4 | …"),
        req("value", F64, "the value"),
        req("n", U64, "items the value is computed over (queries, targets, nodes, edges)"),
        opt("seed", U64, "training seed, where the method trains"),
    ],
};

/// Wall-clock timings of a stage; kept apart so that result tables stay byte-identical.
pub const TIMINGS: TableSpec = TableSpec {
    name: "timings",
    version: 1,
    family: "results",
    doc: "Seconds spent per phase of a stage run (differs between runs by nature).",
    run_dependent: true,
    columns: &[
        req("stage", Utf8, "stage name"),
        req("phase", Utf8, "phase within the stage"),
        req("seconds", F64, "wall-clock seconds"),
        opt("items", U64, "items processed in the phase"),
    ],
};

/// The nightly job's leaderboard: every `scores` row of every dataset of one night.
pub const LEADERBOARD: TableSpec = TableSpec {
    name: "leaderboard",
    version: 1,
    family: "nightly",
    doc: "Every row of every dataset's `scores` tables of one nightly run, with the stage folder it came from.",
    run_dependent: false,
    columns: &[
        req("source", Utf8, "the stage folder whose `scores` table holds the row (metrics, toporag, gretriever, …)"),
        req("dataset", Utf8, "dataset name"),
        req("stage", Utf8, "the stage whose results are scored"),
        req("method", Utf8, "method"),
        req("split", Utf8, "train | val | test | all"),
        req("group", Utf8, "`*` or a breakdown `key=value`"),
        req("metric", Utf8, "metric name"),
        req("value", F64, "the value"),
        req("n", U64, "items the value is computed over"),
        opt("seed", U64, "training seed, where the method trains"),
    ],
};

/// Per dataset of a nightly run: what happened to it.
pub const NIGHTLY_DATASETS: TableSpec = TableSpec {
    name: "nightly_datasets",
    version: 1,
    family: "nightly",
    doc: "One row per dataset a nightly run considered: ran, failed (with the error) or unavailable (with the reason).",
    run_dependent: true,
    columns: &[
        req("dataset", Utf8, "dataset name"),
        req_in("status", &["ok", "failed", "unavailable"], "ok | failed | unavailable"),
        req("detail", Utf8, "the error or the reason; empty when ok"),
        req("stages_ran", U32, "stages that ran"),
        req("stages_skipped", U32, "stages skipped as up to date"),
        req("seconds", F64, "wall-clock seconds of the dataset"),
    ],
};

/// Stage timings of a nightly run, apart from the results.
pub const NIGHTLY_TIMINGS: TableSpec = TableSpec {
    name: "nightly_timings",
    version: 1,
    family: "nightly",
    doc: "Seconds per (dataset, stage, phase) of the stage runs behind a nightly run (their last run, cached or not).",
    run_dependent: true,
    columns: &[
        req("dataset", Utf8, "dataset name"),
        req("stage", Utf8, "stage"),
        req("phase", Utf8, "phase within the stage; `total` for the whole stage"),
        req("seconds", F64, "wall-clock seconds"),
        req("ran", Bool, "the stage ran in this nightly (false: skipped as up to date, timing of its last run)"),
    ],
};

/// Per-item latencies behind a nightly run's histograms.
pub const NIGHTLY_LATENCY: TableSpec = TableSpec {
    name: "nightly_latency",
    version: 1,
    family: "nightly",
    doc: "Milliseconds per query or question of the methods that record them (MoR's phases, GraphQA retrieval).",
    run_dependent: true,
    columns: &[
        req("dataset", Utf8, "dataset name"),
        req("stage", Utf8, "stage"),
        req("what", Utf8, "mor: plan | reason | organize; subgraphs: pcst | attention | whole"),
        req("ms", F64, "milliseconds"),
    ],
};

/// Training curves of every model of a nightly run.
pub const NIGHTLY_CURVES: TableSpec = TableSpec {
    name: "nightly_curves",
    version: 1,
    family: "nightly",
    doc: "Every `curves` row of every dataset of one nightly run, with the stage folder it came from.",
    run_dependent: false,
    columns: &[
        req("dataset", Utf8, "dataset name"),
        req("source", Utf8, "the stage folder"),
        req("model", Utf8, "model"),
        req("variant", Utf8, "which training of the model"),
        req("seed", U64, "training seed"),
        req("epoch", U32, "1-based epoch"),
        req("metric", Utf8, "train_loss | val_loss | val_<metric>"),
        req("value", F64, "value"),
        req("kept", Bool, "this epoch was kept"),
    ],
};

/// TopoRAG's correlation analyses of a nightly run.
pub const NIGHTLY_CORRELATION: TableSpec = TableSpec {
    name: "nightly_correlation",
    version: 1,
    family: "nightly",
    doc: "Every `correlation` row (TopoRAG) of every dataset of one nightly run.",
    run_dependent: false,
    columns: &[
        req("dataset", Utf8, "dataset name"),
        req("measure", Utf8, "proximity_cosine | role_l2_distance"),
        req("k", U32, "hops of the diffusion (0 for role)"),
        req("pearson", F64, "Pearson r"),
        req("pairs", U64, "pairs of the analysis"),
    ],
};

/// One night compared with the previous one.
pub const REGRESSIONS: TableSpec = TableSpec {
    name: "regressions",
    version: 1,
    family: "nightly",
    doc: "Every leaderboard metric compared with the previous nightly run: regression, improvement, unchanged, changed (no better direction), new or vanished.",
    run_dependent: false,
    columns: &[
        req("source", Utf8, "stage folder"),
        req("dataset", Utf8, "dataset"),
        req("stage", Utf8, "scored stage"),
        req("method", Utf8, "method"),
        req("split", Utf8, "split"),
        req("group", Utf8, "group"),
        req("metric", Utf8, "metric"),
        opt("seed", U64, "seed of a per-seed row"),
        opt("previous", F64, "value in the previous run (null: new)"),
        opt("current", F64, "value in this run (null: vanished)"),
        opt("delta", F64, "current − previous"),
        req("tolerance", F64, "the noise band the change was judged against"),
        req("tolerance_from", Utf8, "configured | seed spread | default"),
        req_in(
            "status",
            &["regression", "improvement", "unchanged", "changed", "new", "vanished"],
            "regression | improvement | unchanged | changed | new | vanished",
        ),
    ],
};

// ---- File tools: the Parquet files the stand-alone subcommands write (not stage outputs) ----

/// `tgrag pcst`'s `vertices.parquet`.
pub const PCST_VERTICES: TableSpec = TableSpec {
    name: "pcst_vertices",
    version: 1,
    family: "file tools",
    doc: "`tgrag pcst` (vertices.parquet): one row per node of an instance's solution forest.",
    run_dependent: false,
    columns: &[
        req("instance_id", I64, "the instance (its `instance_id` in the input)"),
        req("pos", U32, "position in the solution's node list (pcst_fast's order)"),
        req("node", I64, "the kept node (0..n−1 within the instance)"),
    ],
};

/// `tgrag pcst`'s `edges.parquet`.
pub const PCST_EDGES: TableSpec = TableSpec {
    name: "pcst_edges",
    version: 1,
    family: "file tools",
    doc: "`tgrag pcst` (edges.parquet): one row per edge of an instance's solution forest.",
    run_dependent: false,
    columns: &[
        req("instance_id", I64, "the instance (its `instance_id` in the input)"),
        req("pos", U32, "position in the solution's edge list (pcst_fast's order)"),
        req("edge_index", I64, "the kept edge (its `edge_index` in the input)"),
    ],
};

/// `tgrag train-planner`'s `validation.parquet`.
pub const PLANNER_VALIDATION: TableSpec = TableSpec {
    name: "planner_validation",
    version: 1,
    family: "file tools",
    doc: "`tgrag train-planner` (validation.parquet): one row per scored line of `plans_val.jsonl`.",
    run_dependent: false,
    columns: &[
        req("line", U32, "line of plans_val.jsonl"),
        opt("q_id", I64, "the line's query id (missing when the line gives none)"),
        opt("gold_metapath", Utf8, "the line's metapath (missing when its gold plan could not be read)"),
        req("metapath", Utf8, "the predicted metapath"),
        opt("exact", Bool, "the predicted metapath is the gold one (missing without a gold plan)"),
        opt("gold_restrictions", Utf8, "the line's restrictions (missing when its gold plan could not be read)"),
        req("restrictions", Utf8, "the predicted restrictions"),
        req("token_f1", F64, "restriction token F1 against the gold restrictions"),
    ],
};

/// `tgrag train-planner`'s `dropped.parquet`.
pub const PLANNER_DROPPED: TableSpec = TableSpec {
    name: "planner_dropped",
    version: 1,
    family: "file tools",
    doc: "`tgrag train-planner` (dropped.parquet): one row per training line left out, with why.",
    run_dependent: false,
    columns: &[req("file", Utf8, "the plan file"), req("line", U32, "line of that file"), req("reason", Utf8, "why the line was left out")],
};

/// `tgrag-bench bench-gpu`'s table (`make bench-gpu`).
pub const BENCH_GPU: TableSpec = TableSpec {
    name: "bench_gpu",
    version: 1,
    family: "file tools",
    doc: "`tgrag-bench bench-gpu` (bench_gpu.parquet): what a GPU gives against the CPU — MiniLM embeddings, the training of every model family in the pipeline, and the STaRK-Prime-sized run end to end. One row per figure.",
    run_dependent: true,
    columns: &[
        req("section", Utf8, "minilm, training, end-to-end"),
        req("system", Utf8, "the engine or stage measured (for training: the stage whose models train)"),
        req("device", Utf8, "cpu, gpu, or gpu/cpu for a ratio"),
        req("metric", Utf8, "what is measured"),
        req("value", F64, "the figure"),
        req("unit", Utf8, "its unit"),
        req("note", Utf8, "the adapter, the sizes, how it was taken"),
    ],
};

/// `tgrag train-planner`'s `report.parquet`.
pub const PLANNER_REPORT: TableSpec = TableSpec {
    name: "planner_report",
    version: 1,
    family: "file tools",
    doc: "`tgrag train-planner` (report.parquet): one row, the training's counts and validation figures.",
    run_dependent: false,
    columns: &[
        req("plans", Utf8, "the plan folder trained on"),
        req("train_plans", U32, "training plans"),
        req("dev_plans", U32, "development plans (early stopping)"),
        req("train_dropped", U32, "training lines left out (dropped.parquet)"),
        req("val_lines", U32, "lines of plans_val.jsonl"),
        req("val_rejected", U32, "validation lines rejected"),
        req("val_malformed", U32, "validation lines that could not be read"),
        req("metapath_exact", F64, "metapath exact match on validation"),
        req("path_set_exact", F64, "path-set exact match on validation"),
        req("restriction_token_f1", F64, "restriction token F1 on validation"),
        req("planner_epoch", U32, "the planner's kept epoch"),
        req("tagger_epoch", U32, "the tagger's kept epoch"),
        req("tune_layers", U32, "MiniLM top layers tuned"),
        req("encoder_epoch", U32, "the tuned encoder's kept epoch"),
    ],
};

/// `tgrag evaluate`'s output for a run without a `method` column.
pub const EVALUATE_PER_QUERY: TableSpec = TableSpec {
    name: "evaluate_per_query",
    version: 1,
    family: "file tools",
    doc: "`tgrag evaluate` (--out), run without `method`: one row per query with answers or run rows.",
    run_dependent: false,
    columns: &[
        req("query_id", U32, "query id"),
        req("hit1", F64, "hit@1 (STaRK's or MoR's evaluator, --mode; 0 without answers)"),
        req("hit5", F64, "hit@5"),
        req("recall20", F64, "recall@20"),
        req("mrr", F64, "reciprocal rank of the first answer"),
    ],
};

/// `tgrag evaluate`'s output for a run with a `method` column.
pub const EVALUATE_PER_METHOD_QUERY: TableSpec = TableSpec {
    name: "evaluate_per_method_query",
    version: 1,
    family: "file tools",
    doc: "`tgrag evaluate` (--out), run with `method`: one row per (method, query with answers or run rows).",
    run_dependent: false,
    columns: &[
        req("method", Utf8, "the run's method"),
        req("query_id", U32, "query id"),
        req("hit1", F64, "hit@1 (STaRK's or MoR's evaluator, --mode; 0 without answers)"),
        req("hit5", F64, "hit@5"),
        req("recall20", F64, "recall@20"),
        req("mrr", F64, "reciprocal rank of the first answer"),
    ],
};

/// `tgrag bm25`'s output.
pub const BM25_RANKING: TableSpec = TableSpec {
    name: "bm25_ranking",
    version: 1,
    family: "file tools",
    doc: "`tgrag bm25` (--out): one row per (query, ranked document), the top k per query.",
    run_dependent: false,
    columns: &[
        req("query_id", Id, "the query's id, as in --queries"),
        req("doc_id", Id, "the document's id, as in --corpus"),
        req("rank", U32, "1-based rank"),
        req("score", F32, "BM25 score"),
    ],
};

/// `tgrag embed`'s output.
pub const EMBED_VECTORS: TableSpec = TableSpec {
    name: "embed_vectors",
    version: 1,
    family: "file tools",
    doc: "`tgrag embed` (--out): one row per input text, its MiniLM sentence embedding.",
    run_dependent: false,
    columns: &[req("id", Id, "the text's id, as in --input"), req("embedding", Vector, "the MiniLM sentence embedding (384 values)")],
};

/// `tgrag plan`'s output.
pub const QUERY_PLANS: TableSpec = TableSpec {
    name: "query_plans",
    version: 1,
    family: "file tools",
    doc: "`tgrag plan` (--out): one row per query, the trained planner's plan.",
    run_dependent: false,
    columns: &[
        req("query_id", Id, "the query's id, as in --queries"),
        req("metapath", Utf8, "the planned metapath"),
        req("restrictions", Utf8, "the planned restrictions"),
    ],
};

/// `tgrag diffusion`'s output (f32, the default).
pub const DIFFUSION_EMBEDDINGS: TableSpec = TableSpec {
    name: "diffusion_embeddings",
    version: 1,
    family: "file tools",
    doc: "`tgrag diffusion` (--out): one row per node, in node order, its proximity embedding P = Σ α_k Â^k R.",
    run_dependent: false,
    columns: &[
        req("node", U32, "node id (0..N−1)"),
        req("p", Run { item: Float::F32, digits: 2 }, "P's columns, one per column `r00`, `r01`, … of the projection R"),
    ],
};

/// `tgrag diffusion --f64`'s output.
pub const DIFFUSION_EMBEDDINGS_F64: TableSpec = TableSpec {
    name: "diffusion_embeddings_f64",
    version: 1,
    family: "file tools",
    doc: "`tgrag diffusion --f64` (--out): `diffusion_embeddings` computed and written in f64.",
    run_dependent: false,
    columns: &[
        req("node", U32, "node id (0..N−1)"),
        req("p", Run { item: Float::F64, digits: 2 }, "P's columns, one per column `r00`, `r01`, … of the projection R"),
    ],
};

/// `tgrag graphwave`'s output.
pub const GRAPHWAVE_EMBEDDINGS: TableSpec = TableSpec {
    name: "graphwave_embeddings",
    version: 1,
    family: "file tools",
    doc: "`tgrag graphwave` (--out): one row per node, in node order, its GraphWave role embedding.",
    run_dependent: false,
    columns: &[
        req("node", U32, "node id (0..N−1)"),
        req("f", Run { item: Float::F64, digits: 3 }, "per heat scale: the T real parts, then the T imaginary parts"),
    ],
};

/// All canonical tables, in documentation order.
pub const ALL: &[&TableSpec] = &[
    &NODES,
    &EDGES,
    &QUERIES,
    &ANSWERS,
    &CANDIDATE_TYPES,
    &GRAPH_NODES,
    &GRAPH_EDGES,
    &QA,
    &TAG_NODES,
    &TAG_EDGES,
    &EMAILS,
    &RUN,
    &BM25_INDEX,
    &BM25_TERMS,
    &BM25_POSTINGS,
    &BM25_DOCS,
    &GRAPH_STATS,
    &EMBEDDINGS,
    &EMBEDDING_PART,
    &QUERY_EMBEDDINGS,
    &TOPIC_ENTITIES,
    &RELATION_PATHS,
    &PLANNING_GRAPHS,
    &PLANS,
    &LATENCY,
    &PATHS,
    &SPLIT,
    &EMAIL_SPLIT,
    &RETRIEVED,
    &EMAIL_RETRIEVED,
    &CONTEXT_QUALITY,
    &CONTEXT_SUMMARY,
    &CORRELATION,
    &NODE_CLASSIFICATION,
    &LINK_PREDICTION,
    &TEXTS,
    &TEXTGRAPH_NODES,
    &TEXTGRAPH_EDGES,
    &TEXTGRAPH_QUESTIONS,
    &SUBGRAPH_NODES,
    &SUBGRAPH_EDGES,
    &SUBGRAPH_SUMMARY,
    &RETRIEVAL_LATENCY,
    &PREDICTIONS,
    &GATE_WEIGHTS,
    &MIXRAG_ABLATION,
    &METRICS_PER_QUERY,
    &METRICS_AGGREGATE,
    &CURVES,
    &SCORES,
    &TIMINGS,
    &LEADERBOARD,
    &NIGHTLY_DATASETS,
    &NIGHTLY_TIMINGS,
    &NIGHTLY_LATENCY,
    &NIGHTLY_CURVES,
    &NIGHTLY_CORRELATION,
    &REGRESSIONS,
    &PCST_VERTICES,
    &PCST_EDGES,
    &PLANNER_VALIDATION,
    &PLANNER_DROPPED,
    &PLANNER_REPORT,
    &BENCH_GPU,
    &EVALUATE_PER_QUERY,
    &EVALUATE_PER_METHOD_QUERY,
    &BM25_RANKING,
    &EMBED_VECTORS,
    &QUERY_PLANS,
    &DIFFUSION_EMBEDDINGS,
    &DIFFUSION_EMBEDDINGS_F64,
    &GRAPHWAVE_EMBEDDINGS,
];

/// Looks a table up by name.
pub fn by_name(name: &str) -> crate::Result<&'static TableSpec> {
    ALL.iter().copied().find(|t| t.name == name).ok_or_else(|| crate::SchemaError::UnknownTable(name.to_string()))
}
