//! The stages of tgrag: one module per stage, each a pure core (functions over Arrow data and a
//! config) behind a thin [`Stage`] implementation that reads inputs and writes outputs through a
//! [`StageContext`]. The module name, the CLI word and the `outputs/<dataset>/<stage>/` folder are the
//! same word.
//!
//! | stage     | reads                         | writes                                      |
//! |-----------|-------------------------------|---------------------------------------------|
//! | `ingest`  | the dataset (generator/files) | canonical tables (`nodes`, `edges`, ...)     |
//! | `graph`   | `ingest`                      | `graph_stats` (degrees, components)          |
//! | `bm25`    | `ingest`                      | `run` (BM25 top-k per query), `bm25_index`, `bm25_terms`, `bm25_postings`, `bm25_docs` |
//! | `dense`   | `ingest`                      | `embeddings`, `run` (cosine top-k, burn)     |
//! | `toporag` | `ingest` (tag_nodes, tag_edges) | `split`, `retrieved`, `context_quality`, `context_summary`, `correlation` |
//! | `metrics` | `ingest`, every run stage     | `per_query`, `aggregate`, `report.md`        |

pub mod bm25;
pub mod context;
pub mod dense;
pub mod diffusion;
pub mod error;
pub mod eval;
pub mod graph;
pub mod graphwave;
pub mod ingest;
pub mod metrics;
pub mod mor;
pub mod mor_planner;
pub mod pasemiqa;
pub mod planning;
pub mod plots;
pub mod text;
pub mod textmetrics;
pub mod toporag;
pub mod topotasks;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod topo_fixtures;

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
    /// Upstream tables whose presence makes the stage not applicable (`(stage, table)`), e.g. the
    /// node-level TopoRAG stage on an e-mail graph.
    pub excludes: &'static [(&'static str, &'static str)],
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
    vec![&ingest::Ingest, &graph::GraphStage, &bm25::Bm25Stage, &dense::DenseStage, &planning::PlanningStage, &mor::MorStage, &pasemiqa::PasemiqaStage, &toporag::ToporagStage, &metrics::Metrics]
}

/// What a stage module implements: its description, its typed config and its work. Every
/// `StageSpec` is a [`Stage`] through the blanket impl below, which owns the JSON side (defaults,
/// strict parsing, error wording), so that no stage repeats it.
pub trait StageSpec: Send + Sync {
    /// The stage's options (`deny_unknown_fields` so that a typo in `--set` is an error).
    type Config: serde::Serialize + serde::de::DeserializeOwned + Default;
    /// Name, version, dependencies.
    const INFO: &'static StageInfo;
    /// Checks values that parse but make no sense (`b` outside [0, 1], ...).
    fn validate(_config: &Self::Config) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Does the stage's work with its parsed config.
    fn execute(&self, ctx: &mut StageContext<'_>, config: Self::Config) -> Result<()>;
}

fn parse<T: StageSpec>(v: &serde_json::Value) -> Result<T::Config> {
    let config_error = |message: String| StageError::Config { stage: T::INFO.name.into(), message };
    let c: T::Config = serde_json::from_value(v.clone()).map_err(|e| config_error(e.to_string()))?;
    T::validate(&c).map_err(config_error)?;
    Ok(c)
}

impl<T: StageSpec> Stage for T {
    fn info(&self) -> &'static StageInfo {
        T::INFO
    }
    fn default_config(&self) -> serde_json::Value {
        serde_json::to_value(T::Config::default()).unwrap_or(serde_json::Value::Null)
    }
    fn check_config(&self, config: &serde_json::Value) -> Result<()> {
        parse::<T>(config).map(|_| ())
    }
    fn run(&self, ctx: &mut StageContext<'_>) -> Result<()> {
        let config = parse::<T>(ctx.config)?;
        self.execute(ctx, config)
    }
}
