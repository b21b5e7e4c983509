//! What a stage is, as data: its static description ([`StageInfo`]) and the sentence model a
//! configuration needs ([`ModelNeed`]). Plain data in the shared layer, so that the context a stage
//! runs in and the stage traits (`crate::stage`) both read it without importing each other.

/// Static description of a stage.
#[derive(Debug)]
pub struct StageInfo {
    /// The stage's one name: module, CLI word and outputs folder.
    pub name: &'static str,
    /// The stage module's path (`module_path!()`): the layout test checks that no other module
    /// imports it.
    pub module: &'static str,
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
    /// Tables this stage reads from **every** upstream stage that writes them (the `metrics` stage
    /// evaluates every `run`): those stages become dependencies without a hand-kept list.
    pub collects: &'static [&'static str],
    /// The tables the stage may write, each declared in `tgrag_schemas::tables` (checked when
    /// written); the manifest lists the files a run actually wrote.
    pub outputs: &'static [&'static str],
    /// Other files the stage may write (reports, plots).
    pub files: &'static [&'static str],
    /// The phase a shard run does (`tgrag run --stages S --shard I/N`, `crate::shared::shards`),
    /// when the stage has one.
    pub shards: Option<ShardPhase>,
}

/// What a stage's shard runs split ([`StageInfo::shards`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardPhase {
    /// Its texts to embed, as contiguous ranges of rows (the phase named).
    Rows(&'static str),
    /// Its independent units, dealt round-robin (the units named; `tgrag run --units` lists them).
    Units(&'static str),
}

impl ShardPhase {
    /// The phase's name.
    pub fn name(self) -> &'static str {
        match self {
            ShardPhase::Rows(s) | ShardPhase::Units(s) => s,
        }
    }
}

/// A stage configuration that needs the MiniLM weights: where it looks for them, and the option
/// that does without them (named together for every stage when the model is missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelNeed {
    pub model_dir: Option<String>,
    /// `--set <stage>.<option>=<value>` that switches the model off.
    pub instead: String,
}
