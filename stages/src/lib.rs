//! The stages of tgrag: pure cores (functions over Arrow data and a config) behind thin [`Stage`]
//! implementations that read inputs and write outputs through a [`StageContext`]. The module name,
//! the CLI word and the `outputs/<dataset>/<stage>/` folder are the same word.
//!
//! Layout (see ARCHITECTURE.md): the [`shared`] layer, then one folder per method family, each with
//! library modules and stage modules. **A stage module never imports another stage module**; what
//! two stages share lives in [`shared`] or in a family's library modules (enforced by a test that
//! reads the sources, `layout_tests`).
//!
//! | family | stage | reads | writes |
//! |---|---|---|---|
//! | — | `ingest` | the dataset (generator/files) | canonical tables (`nodes`, `edges`, …) |
//! | [`kb`] | `graph` | `ingest` | `graph_stats` |
//! | [`retrieval`] | `bm25` | `ingest` | `run`, `bm25_index`, `bm25_terms`, `bm25_postings`, `bm25_docs` |
//! | [`retrieval`] | `dense` | `ingest` | `embeddings`, `query_embeddings`, `run` |
//! | [`kb`] | `planning` | `ingest`, `dense` | `topic_entities`, `relation_paths`, `planning_graphs` |
//! | [`kb`] | `mor` | `ingest`, `bm25`, `dense`, `planning` | `plans`, `run`, `curves`, `latency` |
//! | [`kb`] | `pasemiqa` | `ingest`, `dense`, `planning` | `run`, `paths`, `curves` |
//! | [`toporag`] | `toporag` | `ingest` (`tag_nodes`, `tag_edges`, `emails`) | `split`, `retrieved`, `context_quality`, `context_summary`, `correlation`, `node_classification`, `link_prediction`, `curves`, `scores` |
//! | [`graphqa`] | `textgraphs` | `ingest` (`graph_nodes`, `graph_edges`, `qa`) | `texts`, `textgraph_nodes`, `textgraph_edges`, `textgraph_questions` |
//! | [`graphqa`] | `subgraphs` | `textgraphs` | `subgraph_nodes`, `subgraph_edges`, `subgraph_summary`, `retrieval_latency`, `scores` |
//! | [`graphqa`] | `gretriever` | `textgraphs`, `subgraphs` | `predictions`, `curves`, `scores` |
//! | [`graphqa`] | `mixrag` | `textgraphs`, `subgraphs`, `gretriever` | `predictions`, `curves`, `scores`, `gate_weights`, `mixrag_ablation`, 12 PNG plots |
//! | [`evaluation`] | `metrics` | `ingest`, every stage that writes `run` | `per_query`, `aggregate`, `scores` |
//! | [`evaluation`] | `report` | every stage that writes `scores` | `report.md` |
//!
//! Every table a stage writes is declared in `tgrag_schemas::tables` and checked when written.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Every stage, in an order that runs each after the stages it reads.
//! let stages = tgrag_stages::all();
//! let bm25 = stages.iter().find(|s| s.info().name == "bm25").ok_or("no bm25 stage")?;
//! // Its options come from its config struct: name, type, default and doc comment.
//! let k1 = bm25.options().into_iter().find(|o| o.name == "k1").ok_or("no k1 option")?;
//! assert_eq!(k1.default, 1.5);
//! // A configuration is checked before any stage runs: an unknown option is refused.
//! let mut cfg = bm25.default_config();
//! assert!(bm25.check_config(&cfg).is_ok());
//! cfg["k_one"] = serde_json::json!(1.2);
//! assert!(bm25.check_config(&cfg).is_err());
//! # Ok(())
//! # }
//! ```

// A library reports through its return values and `Progress`, never by printing to stdout.
#![warn(clippy::print_stdout)]

pub mod error;
pub mod evaluation;
pub mod graphqa;
pub mod ingest;
pub mod kb;
pub mod options;
pub mod registry;
pub mod retrieval;
pub mod shared;
pub mod stage;
pub mod toporag;

#[cfg(test)]
mod layout_tests;

pub use error::{Result, StageError};
pub use registry::all;
pub use shared::context::{Progress, StageContext, Timing, Written};
pub use shared::stage_info::{ModelNeed, ShardPhase, StageInfo};
pub use stage::{Stage, StageSpec, check_models, check_sizes, check_training_options, collected_from, deps_of};
