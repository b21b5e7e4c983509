//! The stage machinery: the [`Stage`] trait the runner drives, the [`StageSpec`] a stage module
//! implements (typed config, checks, work) with the blanket impl that owns the JSON side, the
//! option checks every stage shares (sizes, widths, learning rates, seed lists), the model check
//! before a run, and the dependency queries over a list of stages. The list itself is
//! `crate::registry::all`.

use crate::shared::context::StageContext;
use crate::shared::stage_info::{ModelNeed, StageInfo};
use crate::{Result, StageError, shared};

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
    /// The language model this configuration names by its `lm` option, if any: checked before
    /// the first stage runs, and its weights' digest is part of the stage's cache key.
    fn backbone(&self, config: &serde_json::Value) -> Option<String>;
    /// Every option with its type, default and doc comment, from the config struct.
    fn options(&self) -> Vec<crate::options::OptionDoc>;
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
    type Config: serde::Serialize + serde::de::DeserializeOwned + Default + schemars::JsonSchema;
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
    /// The language model `config` names with its `lm` option (default: none).
    fn backbone(_config: &Self::Config) -> Option<String> {
        None
    }
}

/// A width option (embedding, hashing or hidden units): an integer of at most `MAX_DIM`. Every
/// width field of every stage config has this type, so a width is refused above the limit by its
/// declaration, whatever the option is called: `--set dense.dim=10000000` fails while the config
/// is read, before any stage runs. It is a plain integer in JSON (`config.json` and cache keys are
/// those of a `usize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Width(usize);

impl Width {
    /// A width known when the code is written (defaults, tests); a value above `MAX_DIM` fails to
    /// compile where it is used in a constant, as `const { Width::new(256) }` does.
    pub const fn new(n: usize) -> Width {
        assert!(n <= tgrag_schemas::limits::MAX_DIM, "a width is at most MAX_DIM");
        Width(n)
    }

    /// The number of units.
    pub const fn get(self) -> usize {
        self.0
    }
}

impl From<Width> for usize {
    fn from(w: Width) -> usize {
        w.0
    }
}

impl std::fmt::Display for Width {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl schemars::JsonSchema for Width {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Width".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "integer", "format": "width", "minimum": 0, "maximum": tgrag_schemas::limits::MAX_DIM })
    }
}

impl serde::Serialize for Width {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Width {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Width, D::Error> {
        use tgrag_schemas::limits::MAX_DIM;
        let n = usize::deserialize(d)?;
        if n > MAX_DIM {
            return Err(serde::de::Error::custom(width_refusal(n)));
        }
        Ok(Width(n))
    }
}

/// Why a width is refused, without the option (serde's errors name no field: [`width_option`]
/// finds it).
fn width_refusal(n: usize) -> String {
    format!("must be at most {}, got {n}", tgrag_schemas::limits::MAX_DIM)
}

/// The option (`hidden`, `traversal.dim`) whose [`Width`] refusal `error` is, in config `v` of type
/// `C`. serde's error names no field, so the option is found among the members that hold the
/// refused value: the one that still fails alone when every other such member is set to 0.
fn width_option<C: serde::de::DeserializeOwned>(v: &serde_json::Value, error: &str) -> Option<String> {
    let prefix = width_refusal(0);
    let n: u64 = error.strip_prefix(prefix.strip_suffix('0')?)?.parse().ok()?;
    let mut members = Vec::new();
    members_holding(v, n, &mut Vec::new(), &mut members);
    let fails_alone = |keep: &Vec<String>| {
        let mut w = v.clone();
        for path in members.iter().filter(|p| *p != keep) {
            if let Some(x) = path.iter().try_fold(&mut w, |x, k| x.get_mut(k.as_str())) {
                *x = serde_json::json!(0);
            }
        }
        serde_json::from_value::<C>(w).err().is_some_and(|e| e.to_string() == error)
    };
    members.iter().find(|p| fails_alone(p)).map(|p| p.join("."))
}

/// The paths of the object members under `v` that hold the number `n` (arrays are not paths to
/// a width).
fn members_holding(v: &serde_json::Value, n: u64, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if let serde_json::Value::Object(m) = v {
        for (k, x) in m {
            path.push(k.clone());
            if x.as_u64() == Some(n) {
                out.push(path.clone());
            }
            members_holding(x, n, path, out);
            path.pop();
        }
    }
}

/// The net under every stage's own checks: no integer option (seeds excepted) above `MAX_TOP_K`,
/// so that a typo such as `--set bm25.top_k=1000000000000` is refused with the limit before any
/// stage runs, never an allocation that aborts the process. Widths have their own, lower limit
/// by their type ([`Width`]).
pub fn check_sizes(v: &serde_json::Value, path: &str) -> std::result::Result<(), String> {
    use tgrag_schemas::limits::MAX_TOP_K;
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "seed" || is_seed_list(k) {
                    continue;
                }
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
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
pub(crate) fn is_learning_rate(key: &str) -> bool {
    key == "lr" || key.ends_with("_lr") || key == "learning_rate"
}

/// Whether option `key` is a list of training seeds (`seeds`, `gnn_seeds`, …; a count such as
/// `traversal.seeds` is a number, not a list, and is left to [`check_sizes`]).
pub(crate) fn is_seed_list(key: &str) -> bool {
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
    let c: T::Config = serde_json::from_value(v.clone()).map_err(|e| {
        let e = e.to_string();
        // A width refused by its type: the message names the option, as the other limits do.
        match width_option::<T::Config>(v, &e) {
            Some(option) => config_error(format!("{option} {e}")),
            None => config_error(e),
        }
    })?;
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
    fn backbone(&self, config: &serde_json::Value) -> Option<String> {
        parse::<T>(config).ok().and_then(|c| T::backbone(&c))
    }
    fn options(&self) -> Vec<crate::options::OptionDoc> {
        crate::options::describe::<T::Config>()
    }
}

/// Checks, before any stage runs, that the sentence model is there for every stage in `stages`
/// whose configuration needs it; when it is not, one error names every option that does without.
pub fn check_models(stages: &[(&dyn Stage, &serde_json::Value)]) -> Result<()> {
    for (s, cfg) in stages {
        if let Some(spec) = s.backbone(cfg) {
            shared::encoders::backbone_dir(&spec)?;
        }
    }
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
    use super::{Width, width_option};

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        dim: Width,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Config {
        batch: usize,
        hidden: Width,
        inner: Inner,
    }

    fn refusal(v: serde_json::Value) -> String {
        let e = serde_json::from_value::<Config>(v.clone()).expect_err("refused").to_string();
        format!("{} {e}", width_option::<Config>(&v, &e).unwrap_or_default())
    }

    #[test]
    fn a_width_is_a_plain_integer_in_json() {
        assert_eq!(serde_json::to_string(&Width::new(256)).expect("json"), "256");
        let w: Width = serde_json::from_str("65536").expect("the limit");
        assert_eq!(w.get(), 65_536);
        assert!(serde_json::from_str::<Width>("-1").is_err());
    }

    #[test]
    fn a_width_above_the_limit_is_refused_naming_its_option_by_declaration() {
        use serde_json::json;
        // Another option with the same value is not a width and is not named.
        let e = refusal(json!({"batch": 100_000, "hidden": 100_000, "inner": {"dim": 8}}));
        assert_eq!(e, "hidden must be at most 65536, got 100000");
        let e = refusal(json!({"batch": 100_000, "hidden": 8, "inner": {"dim": 100_000}}));
        assert_eq!(e, "inner.dim must be at most 65536, got 100000");
        // Two widths with the same value: the first serde reads is named.
        let e = refusal(json!({"batch": 1, "hidden": 70_000, "inner": {"dim": 70_000}}));
        assert_eq!(e, "hidden must be at most 65536, got 70000");
    }
}
