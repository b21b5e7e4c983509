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

// A library reports through its return values and `Progress`, never by printing to stdout.
#![warn(clippy::print_stdout)]

pub mod error;
pub mod evaluation;
pub mod graphqa;
pub mod ingest;
pub mod kb;
pub mod retrieval;
pub mod shared;
pub mod toporag;

#[cfg(test)]
mod layout_tests;

pub use error::{Result, StageError};
pub use shared::context::{Progress, StageContext, Timing, Written};

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
    /// The sentence model this configuration needs, if any (checked for every applicable stage
    /// before the first stage runs).
    fn model_need(&self, config: &serde_json::Value) -> Option<ModelNeed>;
}

/// A stage configuration that needs the MiniLM weights: where it looks for them, and the option
/// that does without them (named together for every stage when the model is missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelNeed {
    pub model_dir: Option<String>,
    /// `--set <stage>.<option>=<value>` that switches the model off.
    pub instead: String,
}

/// Every stage, in a valid execution order.
pub fn all() -> Vec<&'static dyn Stage> {
    vec![
        &ingest::Ingest,
        &kb::graph::GraphStage,
        &retrieval::bm25::Bm25Stage,
        &retrieval::dense::DenseStage,
        &kb::planning::PlanningStage,
        &kb::mor::MorStage,
        &kb::pasemiqa::PasemiqaStage,
        &toporag::toporag::ToporagStage,
        &graphqa::textgraphs::TextgraphsStage,
        &graphqa::subgraphs::SubgraphsStage,
        &graphqa::gretriever::GretrieverStage,
        &graphqa::mixrag::MixragStage,
        &evaluation::metrics::Metrics,
        &evaluation::report::ReportStage,
    ]
}

/// The stages `stage` reads from: its declared `deps`, then every earlier stage of `all` that
/// writes a table it `collects`, in pipeline order.
pub fn deps_of(stage: &dyn Stage, all: &[&'static dyn Stage]) -> Vec<&'static str> {
    let info = stage.info();
    let mut deps: Vec<&'static str> = info.deps.to_vec();
    for s in all.iter().take_while(|s| s.info().name != info.name) {
        let i = s.info();
        if !deps.contains(&i.name) && i.outputs.iter().any(|t| info.collects.contains(t)) {
            deps.push(i.name);
        }
    }
    deps
}

/// The stages whose `table` `stage` collects (see [`StageInfo::collects`]), in pipeline order.
pub fn collected_from(stage: &dyn Stage, table: &str, all: &[&'static dyn Stage]) -> Vec<&'static str> {
    all.iter()
        .take_while(|s| s.info().name != stage.info().name)
        .filter(|s| s.info().outputs.contains(&table))
        .map(|s| s.info().name)
        .collect()
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
    /// The sentence model `config` needs (default: none).
    fn model(_config: &Self::Config) -> Option<ModelNeed> {
        None
    }
}

/// Option names that hold a width (embedding, hashing or hidden units): at most `MAX_DIM`.
const WIDTH_OPTIONS: &[&str] = &["dim", "dims", "hash_dim", "hidden", "planner_hidden", "head_hidden", "text_hidden"];

/// The net under every stage's own checks: no integer option (seeds excepted) above `MAX_TOP_K`,
/// no width above `MAX_DIM`, so that a typo such as `--set bm25.top_k=1000000000000` is refused
/// with the limit before any stage runs, never an allocation that aborts the process.
pub fn check_sizes(v: &serde_json::Value, path: &str) -> std::result::Result<(), String> {
    use tgrag_schemas::limits::{MAX_DIM, MAX_TOP_K};
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "seed" || is_seed_list(k) {
                    continue;
                }
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                if WIDTH_OPTIONS.contains(&k.as_str())
                    && let Some(n) = x.as_u64()
                    && n > MAX_DIM as u64
                {
                    return Err(format!("{p} must be at most {MAX_DIM}, got {n}"));
                }
                check_sizes(x, &p)?;
            }
        }
        serde_json::Value::Array(a) => {
            if a.len() > MAX_TOP_K {
                return Err(format!("{path}: at most {MAX_TOP_K} values"));
            }
            for x in a {
                check_sizes(x, path)?;
            }
        }
        serde_json::Value::Number(n) => {
            if let Some(u) = n.as_u64()
                && u > MAX_TOP_K as u64
            {
                return Err(format!("{path} must be at most {MAX_TOP_K}, got {u}"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether option `key` is a learning rate (`lr`, `text_lr`, …).
fn is_learning_rate(key: &str) -> bool {
    key == "lr" || key.ends_with("_lr") || key == "learning_rate"
}

/// Whether option `key` is a list of training seeds (`seeds`, `gnn_seeds`, …; a count such as
/// `traversal.seeds` is a number, not a list, and is left to [`check_sizes`]).
fn is_seed_list(key: &str) -> bool {
    key == "seeds" || key.ends_with("_seeds")
}

/// The net under every stage's own checks, for the options every trainer shares, before any stage
/// runs: a learning rate is a finite number > 0 (`--set gretriever.lr=nan` arrives as the string
/// `"nan"`), and a list of seeds holds each seed once (a repeated seed would repeat the `scores`
/// keys of its runs and report a spread of 0).
pub fn check_training_options(v: &serde_json::Value, path: &str) -> std::result::Result<(), String> {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                if is_learning_rate(k) && !x.as_f64().is_some_and(|lr| lr.is_finite() && lr > 0.0) {
                    return Err(format!("{p} must be a finite number > 0, got {x}"));
                }
                if is_seed_list(k)
                    && let Some(seeds) = x.as_array()
                {
                    let mut seen = std::collections::HashSet::new();
                    if let Some(dup) = seeds.iter().find(|s| !seen.insert(s.to_string())) {
                        return Err(format!("{p} lists seed {dup} more than once; every seed must be distinct"));
                    }
                }
                check_training_options(x, &p)?;
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                check_training_options(x, path)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn parse<T: StageSpec>(v: &serde_json::Value) -> Result<T::Config> {
    let config_error = |message: String| StageError::Config { stage: T::INFO.name.into(), message };
    check_sizes(v, "").map_err(config_error)?;
    check_training_options(v, "").map_err(config_error)?;
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
    fn model_need(&self, config: &serde_json::Value) -> Option<ModelNeed> {
        parse::<T>(config).ok().and_then(|c| T::model(&c))
    }
}

/// Checks, before any stage runs, that the sentence model is there for every stage in `stages`
/// whose configuration needs it; when it is not, one error names every option that does without.
pub fn check_models(stages: &[(&dyn Stage, &serde_json::Value)]) -> Result<()> {
    let mut missing: std::collections::BTreeMap<Option<String>, (StageError, Vec<String>)> = std::collections::BTreeMap::new();
    for (s, cfg) in stages {
        let Some(need) = s.model_need(cfg) else { continue };
        if let Some(entry) = missing.get_mut(&need.model_dir) {
            entry.1.push(need.instead);
            continue;
        }
        if let Err(e) = shared::encoders::checked_minilm_dir(need.model_dir.as_deref(), "") {
            missing.insert(need.model_dir.clone(), (e, vec![need.instead]));
        }
    }
    match missing.into_iter().next() {
        None => Ok(()),
        Some((dir, (e, options))) => {
            let sets: Vec<String> = options.iter().map(|o| format!("--set {o}")).collect();
            let at = dir.unwrap_or_else(|| tgrag_models::minilm::default_dir(std::path::Path::new(".")).display().to_string());
            let why = match e {
                StageError::ModelFile(m) if m.contains("sha256") => m,
                _ => format!("no MiniLM model in {at}"),
            };
            Err(StageError::ModelFile(format!(
                "{why}; needed by {} stage(s). Run `make models` or `tgrag fetch minilm`, or do without it: {}",
                options.len(),
                sets.join(" ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_beyond_the_limits_are_refused_before_a_stage_runs_and_defaults_pass() {
        for s in all() {
            assert!(s.check_config(&s.default_config()).is_ok(), "{}: default config", s.info().name);
        }
        let bm25 = all().into_iter().find(|s| s.info().name == "bm25").expect("bm25");
        let mut c = bm25.default_config();
        c["top_k"] = serde_json::json!(1_000_000_000_000u64);
        let e = bm25.check_config(&c).expect_err("huge top_k").to_string();
        assert!(e.contains("top_k must be at most 10000000, got 1000000000000"), "{e}");
        let dense = all().into_iter().find(|s| s.info().name == "dense").expect("dense");
        let mut c = dense.default_config();
        c["dim"] = serde_json::json!(10_000_000);
        assert!(dense.check_config(&c).expect_err("wide").to_string().contains("dim must be at most 65536"));
        // Seeds may be any u64.
        let mor = all().into_iter().find(|s| s.info().name == "mor").expect("mor");
        let mut c = mor.default_config();
        c["seed"] = serde_json::json!(u64::MAX);
        assert!(mor.check_config(&c).is_ok());
        // Nested options are checked too.
        assert!(
            check_sizes(&serde_json::json!({"traversal": {"candidates": 1u64 << 40}}), "")
                .expect_err("nested")
                .contains("traversal.candidates")
        );
    }

    fn refusal(stage: &str, key: &str, value: serde_json::Value) -> String {
        let s = all().into_iter().find(|s| s.info().name == stage).expect("stage");
        let mut c = s.default_config();
        assert!(c.get(key).is_some(), "{stage} has an option {key}");
        c[key] = value;
        match s.check_config(&c) {
            Err(e @ StageError::Config { .. }) => e.to_string(),
            other => panic!("{stage}.{key}: expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn every_learning_rate_is_a_finite_number_above_zero() {
        // Every learning-rate option of every stage, found by name in the defaults.
        let mut found = Vec::new();
        for s in all() {
            let d = s.default_config();
            for k in d.as_object().into_iter().flat_map(|o| o.keys()).filter(|k| is_learning_rate(k)) {
                found.push(format!("{}.{k}", s.info().name));
                for (bad, shown) in [
                    (serde_json::json!(0), "got 0"),
                    (serde_json::json!(-1), "got -1"),
                    (serde_json::json!(-0.001), "got -0.001"),
                    (serde_json::json!("nan"), "got \"nan\""),
                    (serde_json::json!("inf"), "got \"inf\""),
                    (serde_json::json!(null), "got null"),
                ] {
                    let e = refusal(s.info().name, k, bad);
                    assert!(
                        e.contains(&format!("stage `{}`: invalid configuration: {k} must be a finite number > 0, {shown}", s.info().name)),
                        "{e}"
                    );
                }
                // Large but finite passes the check: training reports its divergence.
                let mut c = d.clone();
                c[k.as_str()] = serde_json::json!(1e300);
                assert!(s.check_config(&c).is_ok(), "{}.{k}=1e300", s.info().name);
            }
        }
        assert_eq!(found, ["gretriever.lr", "gretriever.text_lr", "mixrag.lr"]);
        assert!(check_training_options(&serde_json::json!({"tune": {"lr": 0.0}}), "").expect_err("nested").starts_with("tune.lr must be"));
    }

    #[test]
    fn every_seed_list_holds_each_seed_once() {
        let mut found = Vec::new();
        for s in all() {
            let d = s.default_config();
            for k in d.as_object().into_iter().flat_map(|o| o.keys()).filter(|k| is_seed_list(k) && d[k.as_str()].is_array()) {
                found.push(format!("{}.{k}", s.info().name));
                let e = refusal(s.info().name, k, serde_json::json!([0, 3, 0]));
                assert!(
                    e.contains(&format!(
                        "stage `{}`: invalid configuration: {k} lists seed 0 more than once; every seed must be distinct",
                        s.info().name
                    )),
                    "{e}"
                );
                let mut c = d.clone();
                c[k.as_str()] = serde_json::json!([0, 3, 1]);
                assert!(s.check_config(&c).is_ok(), "{}.{k}: distinct seeds", s.info().name);
            }
        }
        assert_eq!(found, ["toporag.gnn_seeds", "gretriever.seeds", "mixrag.seeds"]);
        // A count named `seeds` is not a list.
        assert!(check_training_options(&serde_json::json!({"traversal": {"seeds": 3}}), "").is_ok());
    }
}
