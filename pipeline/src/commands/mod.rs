//! One file per subcommand (`tgrag <name>` ↔ `commands/<name>.rs`), plus what several share: the
//! dataset arguments of `run` and `stages`, typed values of fixed-choice options, and the checks of
//! the file tools' input columns.

pub mod bm25;
pub mod compare;
pub mod diffusion;
pub mod embed;
pub mod evaluate;
pub mod fetch;
pub mod graphwave;
pub mod nightly;
pub mod options;
pub mod pcst;
pub mod plan;
pub mod report;
pub mod run;
pub mod schema;
pub mod slurm;
pub mod sql;
pub mod stages;
pub mod train_planner;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use tgrag_datasets::registry::{self, DatasetOptions};
use tgrag_datasets::synthetic::Size;
use tgrag_models::DeviceChoice;
use tgrag_stages::Stage;

/// `--device`: where a model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// The CPU: every model on its host engine, MiniLM on the fused engine.
    Cpu,
    /// burn on the GPU: CUDA where the build has it and a device is found
    /// (`TGRAG_GPU_BACKEND`), else wgpu.
    Gpu,
    /// A hardware GPU adapter when one is found (never a software rasteriser), else the CPU;
    /// `TGRAG_GPU=0` forces the CPU.
    Auto,
}

impl From<DeviceArg> for DeviceChoice {
    fn from(d: DeviceArg) -> Self {
        match d {
            DeviceArg::Cpu => DeviceChoice::Cpu,
            DeviceArg::Gpu => DeviceChoice::Gpu,
            DeviceArg::Auto => DeviceChoice::Auto,
        }
    }
}

/// `--size` of the synthetic dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SizeArg {
    /// ~600 nodes, 80 queries.
    Tiny,
    /// ~6.5k nodes, 800 queries (the default of `make run`).
    Small,
    /// ~32k nodes, 3k queries.
    Medium,
    /// STaRK-Prime scale: ~130k nodes, 11k queries.
    Prime,
}

impl From<SizeArg> for Size {
    fn from(s: SizeArg) -> Self {
        match s {
            SizeArg::Tiny => Size::Tiny,
            SizeArg::Small => Size::Small,
            SizeArg::Medium => Size::Medium,
            SizeArg::Prime => Size::Prime,
        }
    }
}

/// The dataset of `run` and `stages`.
#[derive(Debug, clap::Args)]
pub struct DatasetArgs {
    /// Dataset name (also its outputs folder): `synthetic`, or any name with --data-dir.
    #[arg(long, default_value = "synthetic")]
    pub dataset: String,
    /// Read the dataset from a folder of canonical tables (`nodes.csv`, `edges.parquet`, ...).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Size of the synthetic dataset.
    #[arg(long, value_enum, default_value_t = SizeArg::Small)]
    pub size: SizeArg,
    /// Seed of the synthetic dataset.
    #[arg(long, default_value_t = 42, allow_negative_numbers = true, value_parser = crate::commands::num::seed)]
    pub seed: u64,
    /// Override a stage option: `--set bm25.k1=1.2` (the value is JSON, or a plain string).
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<String>,
    /// Where every stage that trains or runs a model does so (its `device` option; a `--set
    /// <stage>.device=…` still wins): `cpu`, `gpu` (burn on wgpu) or `auto` (a hardware GPU when
    /// wgpu finds one).
    #[arg(long, value_enum)]
    pub device: Option<DeviceArg>,
}

impl DatasetArgs {
    /// The dataset these arguments name.
    pub fn resolve(&self) -> Result<tgrag_datasets::DatasetSpec> {
        Ok(registry::resolve(&self.dataset, self.data_dir.clone(), DatasetOptions { size: self.size.into(), seed: self.seed })?)
    }
}

/// Every stage config: defaults, then the run-level `device` for every stage that has the option,
/// then `--set` overrides, each checked by its stage.
pub fn stage_configs(
    all: &[&'static dyn Stage],
    sets: &[String],
    device: Option<DeviceChoice>,
) -> Result<BTreeMap<String, serde_json::Value>> {
    let mut configs: BTreeMap<String, serde_json::Value> = all.iter().map(|s| (s.info().name.to_string(), s.default_config())).collect();
    if let Some(d) = device {
        for cfg in configs.values_mut() {
            if let Some(obj) = cfg.as_object_mut().filter(|o| o.contains_key("device")) {
                obj.insert("device".into(), serde_json::Value::String(d.as_str().into()));
            }
        }
    }
    for set in sets {
        let (lhs, value) = set.split_once('=').with_context(|| format!("--set {set}: expected STAGE.KEY=VALUE"))?;
        let (stage, key) = lhs.split_once('.').with_context(|| format!("--set {set}: expected STAGE.KEY=VALUE"))?;
        let spec = all.iter().find(|s| s.info().name == stage).with_context(|| format!("--set {set}: no stage `{stage}`"))?;
        let options = spec.options();
        if !tgrag_stages::options::known(&options, key) {
            let names: Vec<&str> = options.iter().map(|o| o.name.as_str()).collect();
            bail_config!(
                "--set {set}: stage `{stage}` has no option `{key}` (options: {}; `tgrag options {stage}` describes them)",
                names.join(", ")
            );
        }
        let cfg = configs.get_mut(stage).with_context(|| format!("--set {set}: no stage `{stage}`"))?;
        let v = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        // A dotted key sets a nested option (`mor.traversal.candidates`), making the groups a
        // default leaves out (`gretriever.experimental.lm_lr_graph`).
        let (groups, leaf) = key.rsplit_once('.').map_or((None, key), |(g, l)| (Some(g), l));
        let mut at = cfg;
        for part in groups.into_iter().flat_map(|g| g.split('.')) {
            let obj = at.as_object_mut().with_context(|| format!("--set {set}: `{part}` is not a group of options"))?;
            at = obj.entry(part.to_string()).or_insert_with(|| serde_json::json!({}));
        }
        at.as_object_mut().with_context(|| format!("--set {set}: `{key}` is not inside a group of options"))?.insert(leaf.to_string(), v);
    }
    for s in all {
        if let Some(cfg) = configs.get(s.info().name) {
            s.check_config(cfg)?;
        }
    }
    Ok(configs)
}

/// A column of a file tool's input, by name.
pub(crate) fn column<'a>(b: &'a RecordBatch, path: &Path, name: &str) -> Result<&'a ArrayRef> {
    b.column_by_name(name).with_context(|| format!("{}: no column `{name}` (has: {})", path.display(), names(b)))
}

fn names(b: &RecordBatch) -> String {
    b.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
}

/// A text column; null values are an error naming the row.
pub(crate) fn texts(b: &RecordBatch, path: &Path, name: &str) -> Result<Vec<String>> {
    let c = column(b, path, name)?;
    let s = arrow::compute::cast(c, &DataType::Utf8).with_context(|| format!("{}: column `{name}` is not text", path.display()))?;
    let s = s.as_string::<i32>();
    (0..s.len())
        .map(|i| if s.is_null(i) { bail_input!("{}: row {i}, column {name}: null", path.display()) } else { Ok(s.value(i).to_string()) })
        .collect()
}

/// The `id` and `text` columns of a file tool's input (`embed`, `plan`): the checks ingest runs
/// (both present, no nulls, unique ids), and a warning, not an error, when there are no rows (an
/// empty output is then the right answer).
pub fn ids_and_texts(b: &RecordBatch, path: &Path, table: &str, id: &str) -> Result<(ArrayRef, Vec<String>)> {
    use tgrag_schemas::validate::{InputRules, check_input};
    check_input(path, table, b, &InputRules { required: &[id, "text"], unique: &[&[id]], ..Default::default() })?;
    let ids = column(b, path, id)?.clone();
    check_ids(&ids, path, id)?;
    if b.num_rows() == 0 {
        eprintln!("warning: {}: no rows; the output has no rows", path.display());
    }
    Ok((ids, texts(b, path, "text")?))
}

/// An id column: integers or strings, no nulls.
pub(crate) fn check_ids(c: &ArrayRef, path: &Path, name: &str) -> Result<()> {
    if !(c.data_type().is_integer() || matches!(c.data_type(), DataType::Utf8 | DataType::LargeUtf8)) {
        bail_input!("{}: column `{name}` must be integers or strings, is {}", path.display(), c.data_type());
    }
    if let Some(i) = (0..c.len()).find(|&i| c.is_null(i)) {
        bail_input!("{}: row {i}, column {name}: null id", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_level_device_reaches_every_model_stage_and_a_set_still_wins() {
        let all = tgrag_stages::all();
        let c = stage_configs(&all, &["mor.device=cpu".to_string()], Some(DeviceChoice::Gpu)).expect("configs");
        let device = |s: &str| c[s].get("device").and_then(|d| d.as_str()).map(str::to_string);
        for s in ["dense", "pasemiqa", "toporag", "textgraphs", "gretriever"] {
            assert_eq!(device(s).as_deref(), Some("gpu"), "{s}");
        }
        assert_eq!(device("mor").as_deref(), Some("cpu"), "--set wins over --device");
        assert_eq!(device("bm25"), None, "stages without a model have no device");
        let plain = stage_configs(&all, &[], None).expect("configs");
        assert_eq!(plain["toporag"]["device"], "cpu");
    }

    #[test]
    fn a_dotted_set_reaches_a_nested_option_and_an_unknown_one_is_named() {
        let all = tgrag_stages::all();
        let sets = ["gretriever.experimental.lm_lr_graph=0.001".to_string(), "mor.traversal.candidates=7".to_string()];
        let c = stage_configs(&all, &sets, None).expect("configs");
        assert_eq!(c["gretriever"]["experimental"]["lm_lr_graph"], 0.001);
        assert_eq!(c["mor"]["traversal"]["candidates"], 7);
        assert!(stage_configs(&all, &[], None).expect("defaults")["gretriever"].get("experimental").is_none(), "off: not in the key");
        for bad in ["gretriever.experimental.lm_lr_grap=1", "mor.traversal.x=1", "bm25.nope=1"] {
            let e = stage_configs(&all, &[bad.to_string()], None).expect_err(bad).to_string();
            let key = bad.split_once('.').map(|(_, k)| k.split('=').next().unwrap_or_default()).unwrap_or_default();
            assert!(e.contains(&format!("has no option `{key}`")), "{e}");
        }
    }
}

/// Value parsers of numeric flags. Each flag takes negative numbers as values
/// (`allow_negative_numbers`), so `--k -1` gets a range error rather than clap's "unexpected
/// argument '-1'"; the ranges are those of `tgrag_schemas::limits`.
pub mod num {
    use tgrag_schemas::limits::{MAX_COUNT, MAX_DIM, MAX_NODES, MAX_POINTS, MAX_TOP_K};

    fn int_in(s: &str, min: i128, max: i128) -> Result<i128, String> {
        let v: i128 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number"))?;
        if v < min || v > max {
            return Err(format!("must be within [{min}, {max}], got {v}"));
        }
        Ok(v)
    }

    fn float_in(s: &str, min: f64, max: f64) -> Result<f64, String> {
        let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
        if !v.is_finite() || v < min || v > max {
            return Err(format!("must be a finite number within [{min}, {max}], got {s}"));
        }
        Ok(v)
    }

    /// Results per query: 1 ..= `MAX_TOP_K`.
    pub fn top_k(s: &str) -> Result<usize, String> {
        int_in(s, 1, MAX_TOP_K as i128).map(|v| v as usize)
    }
    /// A count of at least 1 (epochs, batch size, clusters).
    pub fn count(s: &str) -> Result<usize, String> {
        int_in(s, 1, MAX_COUNT as i128).map(|v| v as usize)
    }
    /// A count that may be 0 (tuned layers, extra epochs).
    pub fn count0(s: &str) -> Result<usize, String> {
        int_in(s, 0, MAX_COUNT as i128).map(|v| v as usize)
    }
    /// A width (hashing features, hidden units): 1 ..= `MAX_DIM`.
    pub fn dim(s: &str) -> Result<usize, String> {
        int_in(s, 1, MAX_DIM as i128).map(|v| v as usize)
    }
    /// Sample points: 1 ..= `MAX_POINTS`.
    pub fn points(s: &str) -> Result<usize, String> {
        int_in(s, 1, MAX_POINTS as i128).map(|v| v as usize)
    }
    /// A node count: 1 ..= 2³² − 1.
    pub fn nodes(s: &str) -> Result<usize, String> {
        int_in(s, 1, MAX_NODES as i128).map(|v| v as usize)
    }
    /// A candidate count (ids are u32).
    pub fn candidates(s: &str) -> Result<u32, String> {
        int_in(s, 1, i128::from(u32::MAX)).map(|v| v as u32)
    }
    /// A seed: 0 ..= 2⁶⁴ − 1.
    pub fn seed(s: &str) -> Result<u64, String> {
        int_in(s, 0, i128::from(u64::MAX)).map(|v| v as u64)
    }
    /// A finite non-negative weight (BM25's k1, a loss weight).
    pub fn non_negative(s: &str) -> Result<f32, String> {
        float_in(s, 0.0, 1e6).map(|v| v as f32)
    }
    /// A finite number in [0, 1] (BM25's b).
    pub fn unit(s: &str) -> Result<f32, String> {
        float_in(s, 0.0, 1.0).map(|v| v as f32)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn negative_huge_and_garbage_values_get_range_errors() {
            assert_eq!(top_k("20"), Ok(20));
            assert_eq!(top_k("-1"), Err("must be within [1, 10000000], got -1".to_string()));
            assert!(top_k("1000000000000000").expect_err("huge").contains("got 1000000000000000"));
            assert!(top_k("x").expect_err("text").contains("not a whole number"));
            assert_eq!(count0("0"), Ok(0));
            assert!(count("0").is_err());
            assert_eq!(seed("18446744073709551615"), Ok(u64::MAX));
            assert!(seed("-3").is_err());
            assert!(non_negative("inf").is_err() && non_negative("nan").is_err() && non_negative("-0.5").is_err());
            assert_eq!(unit("0.75"), Ok(0.75));
            assert!(unit("1.5").is_err());
            assert!(points("1000000000").is_err());
        }
    }
}
