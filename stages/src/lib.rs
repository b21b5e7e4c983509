//! The stages of tgrag: one module per stage, each a pure core (functions over Arrow data and a
//! config) behind a thin [`Stage`] implementation that reads inputs and writes outputs through a
//! [`StageContext`]. The module name, the CLI word and the `outputs/<dataset>/<stage>/` folder are the
//! same word.
//!
//! | stage     | reads                         | writes                                      |
//! |-----------|-------------------------------|---------------------------------------------|
//! | `ingest`  | the dataset (generator/files) | canonical tables (`nodes`, `edges`, ...)     |
//! | `graph`   | `ingest`                      | `graph_stats` (degrees, components)          |
//! | `bm25`    | `ingest`                      | `run` (BM25 top-k per query), `index_stats` |
//! | `dense`   | `ingest`                      | `embeddings`, `run` (cosine top-k, burn)     |
//! | `metrics` | `ingest`, every run stage     | `per_query`, `aggregate`, `report.md`        |

pub mod bm25;
pub mod context;
pub mod dense;
pub mod error;
pub mod eval;
pub mod graph;
pub mod ingest;
pub mod metrics;
pub mod text;

pub use context::{Progress, StageContext, Timing, Written};
pub use error::{Result, StageError};

/// Static description of a stage.
#[derive(Debug)]
pub struct StageInfo {
    /// The stage's one name: module, CLI word and outputs folder.
    pub name: &'static str,
    /// Bumped whenever the stage's outputs change for the same inputs and config (part of the cache key).
    pub version: u32,
    pub about: &'static str,
    /// Upstream stages whose outputs this stage reads.
    pub deps: &'static [&'static str],
    /// Upstream tables that must exist for the stage to apply (`(stage, table)`); when one is
    /// missing the stage is skipped as not applicable to the dataset.
    pub needs: &'static [(&'static str, &'static str)],
    /// What the stage writes (documentation; the manifest lists the actual files).
    pub outputs: &'static [&'static str],
}

/// A pipeline stage.
pub trait Stage: Send + Sync {
    /// Name, version, dependencies.
    fn info(&self) -> &'static StageInfo;
    /// The default configuration (a serde struct serialised to JSON; unknown keys are rejected).
    fn default_config(&self) -> serde_json::Value;
    /// Checks a configuration before any stage runs.
    fn check_config(&self, config: &serde_json::Value) -> Result<()>;
    /// Runs the stage.
    fn run(&self, ctx: &mut StageContext<'_>) -> Result<()>;
}

/// Every stage, in a valid execution order.
pub fn all() -> Vec<&'static dyn Stage> {
    vec![&ingest::Ingest, &graph::GraphStage, &bm25::Bm25Stage, &dense::DenseStage, &metrics::Metrics]
}

/// Deserialises a stage config strictly, naming the stage on error.
pub fn parse_config<T: serde::de::DeserializeOwned>(stage: &str, v: &serde_json::Value) -> Result<T> {
    serde_json::from_value(v.clone()).map_err(|e| StageError::Config { stage: stage.into(), message: e.to_string() })
}

/// Serialises a default config.
pub fn to_json<T: serde::Serialize>(t: &T) -> serde_json::Value {
    serde_json::to_value(t).unwrap_or(serde_json::Value::Null)
}
