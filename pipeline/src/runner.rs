//! The stage runner: resolves the DAG, decides for each stage whether it must run (and says why),
//! runs it, commits its outputs atomically and writes its manifest last.
//!
//! Cache key (fingerprint) of a stage = sha256 of its name, code version (its `version` and the
//! digest of the code the stages run, `crate::code_digest`), canonical config and the content
//! digests of its inputs (upstream stages' output hashes; the dataset's content key for `ingest`).
//! mtimes are never used. A stage is skipped only when its manifest has the same fingerprint
//! and every output it lists is present with the same sha256.
//!
//! Crash safety: a stage deletes its manifest before running, writes outputs under temporary names in
//! its own folder, renames them into place only after success, then writes the manifest atomically.
//! A run killed at any moment leaves a stage without a valid manifest, so the next run redoes it; as
//! outputs are deterministic, the result is byte-identical to an uninterrupted run.
//!
//! Shards ([`run_shard`]): a stage with a sharded phase (`StageInfo::shards`) can have that phase
//! cut into `N` contiguous ranges, each run by its own process into a partition under
//! `<stage>/shards/` (`tgrag_stages::shared::shards`), keyed on the stage's fingerprint. The
//! stage's normal run reads the partitions of its key, embeds the rest and, once its outputs are
//! committed, removes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use arrow::array::{ArrayRef, Float64Array, StringArray, UInt64Array};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tgrag_datasets::DatasetSpec;
use tgrag_schemas::{io, tables};
use tgrag_stages::shared::shards::{self, PartRecord, Shard};
use tgrag_stages::{Progress, Stage, StageContext, StageError, Written};

/// Name of the manifest file in every stage folder.
pub const MANIFEST: &str = "manifest.json";
/// Name of the config file in every stage folder.
pub const CONFIG: &str = "config.json";
/// Name of the timings table in every stage folder (not part of the byte-identical outputs).
pub const TIMINGS: &str = "timings.parquet";

/// One output file of a stage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutputInfo {
    pub sha256: String,
    pub bytes: u64,
    pub rows: Option<usize>,
}

/// A phase timing in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseTiming {
    pub phase: String,
    pub seconds: f64,
    pub items: Option<u64>,
}

/// What a finished stage run leaves next to its outputs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub stage: String,
    pub code_version: String,
    pub fingerprint: String,
    pub config: serde_json::Value,
    /// Content digests of the inputs (upstream stage → digest of its outputs; `dataset` → content key).
    pub inputs: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, OutputInfo>,
    pub timings: Vec<PhaseTiming>,
    pub total_seconds: f64,
    pub finished_at_unix: u64,
}

impl Manifest {
    /// Digest of the outputs, as seen by downstream stages.
    pub fn outputs_digest(&self) -> String {
        let mut h = Sha256::new();
        // Tables of wall-clock figures (declared run-dependent) differ on every run by nature: they
        // stay out of the digest, so a downstream stage's cache key (written into its files'
        // metadata) is the same for the same inputs and seed.
        let run_dependent = |file: &str| {
            file.strip_suffix(".parquet").and_then(|t| tgrag_schemas::tables::by_name(t).ok()).is_some_and(|spec| spec.run_dependent)
        };
        for (file, info) in self.outputs.iter().filter(|(f, _)| !run_dependent(f)) {
            h.update(file.as_bytes());
            h.update(b"\0");
            h.update(info.sha256.as_bytes());
            h.update(b"\n");
        }
        io::hex(&h.finalize())
    }
}

/// The digest of the code the stages run, computed when this binary was built (`build.rs`).
pub const CODE_DIGEST: &str = env!("TGRAG_CODE_DIGEST");

/// The commit this binary was built from (`git rev-parse HEAD`, `-dirty` when the code differed
/// from it; `unknown` outside a git checkout), computed by `build.rs`. Written into every Parquet
/// file (`tgrag.commit`); never part of a cache key.
pub const BUILD_COMMIT: &str = env!("TGRAG_COMMIT");

/// The code version of a stage (part of its cache key): its `version` and the code digest.
pub fn code_version(stage: &dyn Stage) -> String {
    format!("{}@v{} code {}", stage.info().name, stage.info().version, CODE_DIGEST)
}

/// The cache key of a stage (see the module docs).
pub fn fingerprint(stage: &str, code: &str, config: &serde_json::Value, inputs: &BTreeMap<String, String>) -> String {
    let canonical = serde_json::json!({ "stage": stage, "code": code, "config": config, "inputs": inputs });
    // serde_json maps are sorted (BTreeMap), so this text is canonical.
    io::hex(&Sha256::digest(canonical.to_string().as_bytes()))
}

/// The most bytes a manifest may have (a real one is a few KB): a larger file is not read.
const MANIFEST_MAX_BYTES: u64 = 16 << 20;

/// Reads a stage's manifest, if there is a valid one. A manifest is data the runner acts on (it
/// hashes the outputs it lists and deletes the ones a new run no longer writes), so it is valid only
/// when every output it lists is a plain file name inside the stage folder ([`output_name_ok`]) and
/// each listed file present there is a regular file, not a symbolic link. Anything else makes the
/// manifest invalid: the stage reruns, and no name in it is ever acted on.
pub fn read_manifest(dir: &Path) -> Option<Manifest> {
    let path = dir.join(MANIFEST);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > MANIFEST_MAX_BYTES {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let m: Manifest = serde_json::from_str(&text).ok()?;
    let listed_ok =
        m.outputs.keys().all(|f| output_name_ok(f) && std::fs::symlink_metadata(dir.join(f)).map_or(true, |md| md.file_type().is_file()));
    listed_ok.then_some(m)
}

/// Whether `name` may name an output inside a stage folder: one plain, visible path component (no
/// separator, no `..`, not absolute, no NUL or control character, not the manifest itself).
pub fn output_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name != MANIFEST
        && !name.chars().any(|c| c == '/' || c == '\\' || c.is_control())
        && Path::new(name).components().count() == 1
        && matches!(Path::new(name).components().next(), Some(std::path::Component::Normal(_)))
}

/// Options of one `tgrag run`.
pub struct RunOptions {
    pub outputs: PathBuf,
    pub dataset: DatasetSpec,
    /// Stages asked for (their upstream stages are included); None = all.
    pub stages: Option<Vec<String>>,
    pub force: bool,
    pub progress: Progress,
    /// Validated config of every stage.
    pub configs: BTreeMap<String, serde_json::Value>,
}

/// What the runner decided for a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run(String),
    Skip(String),
    NotApplicable(String),
}

/// Why a stage must run, or why it may be skipped.
pub fn decide(dir: &Path, fp: &str, code: &str, config: &serde_json::Value, inputs: &BTreeMap<String, String>, force: bool) -> Decision {
    let Some(m) = read_manifest(dir) else {
        // A folder that holds nothing but shard partitions has never had a run of the stage.
        let only_shards = std::fs::read_dir(dir).is_ok_and(|mut e| e.all(|x| x.is_ok_and(|x| x.file_name() == shards::SHARDS_DIR)));
        return Decision::Run(if dir.exists() && !only_shards {
            "no complete previous run (interrupted or failed)".into()
        } else {
            "no previous run".into()
        });
    };
    if force {
        return Decision::Run("--force".into());
    }
    if m.fingerprint != fp {
        let mut why = Vec::new();
        if m.code_version != code {
            why.push("code changed".to_string());
        }
        if &m.config != config {
            why.push("config changed".to_string());
        }
        for (k, v) in inputs {
            if m.inputs.get(k) != Some(v) {
                why.push(format!("input `{k}` changed"));
            }
        }
        if why.is_empty() {
            why.push("cache key changed".into());
        }
        return Decision::Run(why.join(", "));
    }
    for (file, info) in &m.outputs {
        let p = dir.join(file);
        match io::sha256_file(&p) {
            Ok(h) if h == info.sha256 => {}
            Ok(_) => return Decision::Run(format!("output {file} was modified")),
            Err(_) => return Decision::Run(format!("output {file} is missing")),
        }
    }
    Decision::Skip(format!("up to date ({})", fp.get(..12).unwrap_or(fp)))
}

/// Removes leftover temporary files of an interrupted run (files and links only: removing a link
/// removes the link, never what it points to; a folder with such a name is left alone).
fn clean_tmp(dir: &Path) -> Result<()> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(true);
            if io::is_tmp_name(&name) && !is_dir {
                std::fs::remove_file(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
            }
        }
    }
    Ok(())
}

fn timings_batch(stage: &str, t: &[PhaseTiming]) -> Result<arrow::record_batch::RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![stage; t.len()])),
        Arc::new(StringArray::from_iter_values(t.iter().map(|x| x.phase.as_str()))),
        Arc::new(Float64Array::from_iter_values(t.iter().map(|x| x.seconds))),
        Arc::new(UInt64Array::from_iter(t.iter().map(|x| x.items))),
    ];
    Ok(tables::TIMINGS.batch(cols)?)
}

/// Stages to consider: the asked ones and everything upstream of them (declared and collected
/// dependencies), in pipeline order.
pub fn select(all: &[&'static dyn Stage], wanted: Option<&[String]>) -> Result<Vec<&'static dyn Stage>> {
    let Some(wanted) = wanted else { return Ok(all.to_vec()) };
    let names: Vec<&str> = all.iter().map(|s| s.info().name).collect();
    let mut keep: Vec<&str> = Vec::new();
    let mut stack: Vec<&str> = Vec::new();
    for w in wanted {
        let Some(&n) = names.iter().find(|n| **n == w.as_str()) else {
            bail_config!("unknown stage `{w}`; stages: {}", names.join(", "));
        };
        stack.push(n);
    }
    while let Some(n) = stack.pop() {
        if keep.contains(&n) {
            continue;
        }
        keep.push(n);
        if let Some(s) = all.iter().find(|s| s.info().name == n) {
            stack.extend(tgrag_stages::deps_of(*s, all));
        }
    }
    Ok(all.iter().copied().filter(|s| keep.contains(&s.info().name)).collect())
}

/// Inputs (content digests) of a stage given the current state of the outputs folder.
/// `outputs` is left out of the dataset's content key when it lies inside the raw data folder.
pub fn stage_inputs(
    root: &Path,
    stage: &dyn Stage,
    all: &[&'static dyn Stage],
    dataset: &DatasetSpec,
    outputs: &Path,
) -> Result<BTreeMap<String, String>> {
    let mut inputs = BTreeMap::new();
    let deps = tgrag_stages::deps_of(stage, all);
    if deps.is_empty() {
        inputs.insert("dataset".to_string(), dataset.content_key_excluding(Some(outputs))?);
    }
    for dep in deps {
        let d = read_manifest(&root.join(dep)).map_or_else(|| "missing".to_string(), |m| m.outputs_digest());
        inputs.insert(dep.to_string(), d);
    }
    Ok(inputs)
}

/// Whether an applicable stage's required upstream tables exist.
pub fn applicability(root: &Path, stage: &dyn Stage) -> Option<String> {
    stage
        .info()
        .needs
        .iter()
        .find(|(s, t)| !root.join(s).join(format!("{t}.parquet")).is_file())
        .map(|(s, t)| format!("not applicable: stage `{s}` wrote no `{t}` for this dataset"))
        .or_else(|| {
            stage
                .info()
                .excludes
                .iter()
                .find(|(s, t)| root.join(s).join(format!("{t}.parquet")).is_file())
                .map(|(s, t)| format!("not applicable: stage `{s}` wrote `{t}` (a table this stage does not handle)"))
        })
}

/// The stages of `stages` that will apply to a dataset providing `provides` (the ingest tables),
/// predicted before anything runs: a stage applies when each table it needs is an ingest table
/// the dataset provides or an output of an earlier stage that applies, and no table it excludes
/// is provided. `None` (unknown tables) keeps every stage.
pub fn predicted_applicable(stages: &[&'static dyn Stage], provides: Option<&[&str]>) -> Vec<&'static dyn Stage> {
    let Some(provides) = provides else { return stages.to_vec() };
    let mut applies: Vec<&'static dyn Stage> = Vec::new();
    let available = |applies: &[&'static dyn Stage], s: &str, t: &str| {
        if s == "ingest" { provides.contains(&t) } else { applies.iter().any(|a| a.info().name == s && a.info().outputs.contains(&t)) }
    };
    for &st in stages {
        let info = st.info();
        let needs_met = info.needs.iter().all(|(s, t)| available(&applies, s, t));
        let excluded = info.excludes.iter().any(|(s, t)| available(&applies, s, t));
        if needs_met && !excluded {
            applies.push(st);
        }
    }
    applies
}

/// Outcome of one stage in a run.
#[derive(Debug)]
pub struct StageOutcome {
    pub stage: &'static str,
    pub decision: Decision,
    pub seconds: f64,
    pub outputs: BTreeMap<String, OutputInfo>,
}

/// Runs the selected stages in order, printing one line per stage.
pub fn run(opts: &RunOptions, all: &[&'static dyn Stage], mut report: impl FnMut(&StageOutcome)) -> Result<Vec<StageOutcome>> {
    let root = opts.outputs.join(&opts.dataset.name);
    // The dataset folder and every stage folder must be real folders: a link planted in the outputs
    // folder would send writes (and the removal of stale outputs) elsewhere.
    io::ensure_owned_dir(&root)?;
    let stages = select(all, opts.stages.as_deref())?;
    let explicitly: Option<Vec<&str>> = opts.stages.as_ref().map(|v| v.iter().map(String::as_str).collect());
    let mut outcomes = Vec::new();
    for stage in stages {
        let o = run_stage(opts, all, &root, explicitly.as_deref(), stage)?;
        report(&o);
        outcomes.push(o);
    }
    Ok(outcomes)
}

/// What a stage run is keyed on, and what its manifest records of it.
struct StageKey {
    code: String,
    fingerprint: String,
    config: serde_json::Value,
    inputs: BTreeMap<String, String>,
}

/// One stage: not applicable, skipped (up to date) or run; `explicitly` names the stages asked
/// for (`--force` applies to those only).
fn run_stage(
    opts: &RunOptions,
    all: &[&'static dyn Stage],
    root: &Path,
    explicitly: Option<&[&str]>,
    stage: &'static dyn Stage,
) -> Result<StageOutcome> {
    let info = stage.info();
    let dir = root.join(info.name);
    if let Some(why) = applicability(root, stage) {
        return Ok(StageOutcome { stage: info.name, decision: Decision::NotApplicable(why), seconds: 0.0, outputs: BTreeMap::new() });
    }
    let key = stage_key(opts, all, root, stage)?;
    let fp = key.fingerprint.clone();
    let force = opts.force && explicitly.is_none_or(|e| e.contains(&info.name));
    let decision = decide(&dir, &fp, &key.code, &key.config, &key.inputs, force);
    if let Decision::Skip(_) = decision {
        let outputs = read_manifest(&dir).map(|m| m.outputs).unwrap_or_default();
        return Ok(StageOutcome { stage: info.name, decision, seconds: 0.0, outputs });
    }
    execute(opts, all, root, stage, key, decision)
}

/// The cache key of `stage` over the outputs folder as it is now.
fn stage_key(opts: &RunOptions, all: &[&'static dyn Stage], root: &Path, stage: &'static dyn Stage) -> Result<StageKey> {
    let config = opts.configs.get(stage.info().name).cloned().unwrap_or_else(|| stage.default_config());
    let code = code_version(stage);
    let mut inputs = stage_inputs(root, stage, all, &opts.dataset, &opts.outputs)?;
    if let Some(spec) = stage.backbone(&config) {
        // A language model named by folder or hub id: its weights are an input (a refetched or
        // replaced checkpoint reruns the stage). The pinned MiniLM needs no entry.
        let dir = tgrag_stages::shared::encoders::backbone_dir(&spec)?;
        inputs.insert("lm".to_string(), format!("{spec} {}", io::sha256_file(&dir.join("model.safetensors"))?));
    }
    let fingerprint = fingerprint(stage.info().name, &code, &config, &inputs);
    Ok(StageKey { code, fingerprint, config, inputs })
}

/// Runs a stage that must run: its manifest and leftover temporary files removed first, its
/// outputs committed, stale outputs removed, then its timings, config and manifest written.
fn execute(
    opts: &RunOptions,
    all: &[&'static dyn Stage],
    root: &Path,
    stage: &'static dyn Stage,
    key: StageKey,
    decision: Decision,
) -> Result<StageOutcome> {
    let info = stage.info();
    let dir = root.join(info.name);
    let previous = read_manifest(&dir);
    io::ensure_owned_dir(&dir)?;
    let manifest_path = dir.join(MANIFEST);
    if manifest_path.exists() {
        std::fs::remove_file(&manifest_path).with_context(|| format!("removing {}", manifest_path.display()))?;
    }
    clean_tmp(&dir)?;
    let t0 = Instant::now();
    let mut ctx = StageContext::new(info, tgrag_stages::deps_of(stage, all), &opts.dataset, &key.config, root, opts.progress)
        .with_cache_key(&key.fingerprint);
    let result = stage.run(&mut ctx);
    let done = ctx.finish();
    if let Err(e) = result {
        return Err(failed(&dir, info.name, &done.written, previous.is_none(), e));
    }
    let outputs = commit_outputs(&dir, &done.written, previous)?;
    let seconds = t0.elapsed().as_secs_f64();
    let timings: Vec<PhaseTiming> =
        done.timings.into_iter().map(|t| PhaseTiming { phase: t.phase, seconds: t.seconds, items: t.items }).collect();
    write_records(opts, &dir, info.name, key, &outputs, timings, seconds)?;
    if info.shards.is_some() {
        // The table holds the partitions now.
        remove_partitions(&dir.join(shards::SHARDS_DIR));
    }
    let decision = match decision {
        Decision::Run(why) if !done.notes.is_empty() => Decision::Run(format!("{why}; {}", done.notes.join("; "))),
        d => d,
    };
    Ok(StageOutcome { stage: info.name, decision, seconds, outputs })
}

/// Removes the partition folders under `root` that no shard run holds (a shard still running keeps
/// its folder), then `root` when it is empty.
pub fn remove_partitions(root: &Path) {
    for shard in shards::present(root) {
        let dir = shards::part_dir(root, shard);
        if let Ok(lock) = crate::lock::FolderLock::acquire(&dir, false) {
            let _ = std::fs::remove_dir_all(&dir);
            drop(lock);
        }
    }
    let _ = std::fs::remove_dir(root);
}

/// Outcome of a shard run.
#[derive(Debug)]
pub struct ShardOutcome {
    pub stage: &'static str,
    pub shard: Shard,
    /// Ran (why), skipped (its partition is up to date) or not applicable.
    pub decision: Decision,
    /// The partition (when there is one).
    pub record: Option<PartRecord>,
    /// Its folder.
    pub dir: PathBuf,
    pub seconds: f64,
}

/// The one stage `opts.stages` names, which must have a shard phase that `fits` (`flag` is the
/// option that asked, for the error).
fn sharded_stage(
    opts: &RunOptions,
    all: &[&'static dyn Stage],
    flag: &str,
    fits: impl Fn(tgrag_stages::ShardPhase) -> bool,
) -> Result<&'static dyn Stage> {
    let sharded: Vec<&str> = all.iter().filter(|s| s.info().shards.is_some_and(&fits)).map(|s| s.info().name).collect();
    let stage = match opts.stages.as_deref() {
        Some([one]) => *all
            .iter()
            .find(|s| s.info().name == one.as_str())
            .ok_or_else(|| crate::config!("unknown stage `{one}`; {flag} applies to: {}", sharded.join(", ")))?,
        _ => bail_config!("{flag} applies to one stage: name it with --stages (one of: {})", sharded.join(", ")),
    };
    match stage.info().shards {
        Some(phase) if fits(phase) => Ok(stage),
        Some(phase) => bail_config!(
            "stage `{}` shards its {} as ranges of rows (shard I of N: rows [len·I/N, len·(I+1)/N)); {flag} applies to: {}",
            stage.info().name,
            phase.name(),
            sharded.join(", ")
        ),
        None => bail_config!("stage `{}` has no sharded phase; {flag} applies to: {}", stage.info().name, sharded.join(", ")),
    }
}

/// A shard (or a listing, `what` says which) reads the outputs of `stage`'s upstream stages as
/// they are: each must be up to date.
fn require_upstream(opts: &RunOptions, all: &[&'static dyn Stage], root: &Path, stage: &'static dyn Stage, what: &str) -> Result<()> {
    let name = stage.info().name;
    for up in select(all, Some(&[name.to_string()]))?.into_iter().filter(|s| s.info().name != name) {
        if applicability(root, up).is_some() {
            continue;
        }
        let key = stage_key(opts, all, root, up)?;
        if let Decision::Run(why) = decide(&root.join(up.info().name), &key.fingerprint, &key.code, &key.config, &key.inputs, false) {
            bail_config!(
                "stage `{}` is not up to date for {what} of `{name}` ({why}): run `tgrag run --dataset {} --stages {}` first",
                up.info().name,
                opts.dataset.name,
                up.info().name
            );
        }
    }
    Ok(())
}

/// What [`list_units`] found.
#[derive(Debug)]
pub struct UnitListing {
    pub stage: &'static str,
    /// Why the stage does not apply to the dataset (then no units).
    pub not_applicable: Option<String>,
    /// Whether the stage's tables are up to date under these options (a merged stage keeps no
    /// partitions, so its units read as pending).
    pub up_to_date: bool,
    pub units: Vec<shards::ListedUnit>,
}

/// The units of the one stage `opts.stages` names (a stage whose shards are units: the
/// language-model rows), as its run under these options meets them: each with its stable id (shard
/// `id mod N` of `--shard I/N` runs it), its name and the shard that finished it, if one did. The
/// stages upstream must be up to date; nothing is computed or written.
pub fn list_units(opts: &RunOptions, all: &[&'static dyn Stage]) -> Result<UnitListing> {
    let root = opts.outputs.join(&opts.dataset.name);
    let stage = sharded_stage(opts, all, "--units", |p| matches!(p, tgrag_stages::ShardPhase::Units(_)))?;
    let info = stage.info();
    require_upstream(opts, all, &root, stage, "the units")?;
    if let Some(why) = applicability(&root, stage) {
        return Ok(UnitListing { stage: info.name, not_applicable: Some(why), up_to_date: false, units: Vec::new() });
    }
    let key = stage_key(opts, all, &root, stage)?;
    let up_to_date =
        matches!(decide(&root.join(info.name), &key.fingerprint, &key.code, &key.config, &key.inputs, false), Decision::Skip(_));
    let mut ctx = StageContext::new(info, tgrag_stages::deps_of(stage, all), &opts.dataset, &key.config, &root, opts.progress)
        .with_cache_key(&key.fingerprint)
        .with_listing();
    let result = stage.run(&mut ctx);
    let done = ctx.finish();
    for w in &done.written {
        let _ = std::fs::remove_file(&w.tmp);
    }
    result.map_err(|e| anyhow::Error::new(e).context(format!("stage `{}`, listing its units, failed", info.name)))?;
    Ok(UnitListing { stage: info.name, not_applicable: None, up_to_date, units: done.listed })
}

/// Runs `shard` of the one stage `opts.stages` names: that stage's sharded phase over the shard's
/// range, into its partition (`<stage>/shards/<IIIII>-of-<NNNNN>/`), under that folder's lock
/// alone, so that every shard of a dataset can run at once. The stages upstream must be up to
/// date (a shard reads their outputs and never writes them); a partition that is up to date (same
/// cache key, complete) is skipped unless `opts.force`.
pub fn run_shard(opts: &RunOptions, all: &[&'static dyn Stage], shard: Shard, wait: bool) -> Result<ShardOutcome> {
    let root = opts.outputs.join(&opts.dataset.name);
    let stage = sharded_stage(opts, all, "--shard", |_| true)?;
    let info = stage.info();
    let stage_dir = root.join(info.name);
    let parts = stage_dir.join(shards::SHARDS_DIR);
    let dir = shards::part_dir(&parts, shard);
    let outcome = |decision, record, seconds| ShardOutcome { stage: info.name, shard, decision, record, dir: dir.clone(), seconds };
    require_upstream(opts, all, &root, stage, "the shards")?;
    if let Some(why) = applicability(&root, stage) {
        return Ok(outcome(Decision::NotApplicable(why), None, 0.0));
    }
    // Real folders all the way down: a link planted among them would send the partition elsewhere.
    for d in [&root, &stage_dir, &parts, &dir] {
        io::ensure_owned_dir(d)?;
    }
    let _lock = crate::lock::FolderLock::acquire(&dir, wait)?;
    let key = stage_key(opts, all, &root, stage)?;
    if let (false, Some(rec)) = (opts.force, shards::valid(&parts, shard, &key.fingerprint)) {
        let why = format!("up to date ({})", key.fingerprint.get(..12).unwrap_or(&key.fingerprint));
        return Ok(outcome(Decision::Skip(why), Some(rec), 0.0));
    }
    let why = if dir.join(shards::RECORD_FILE).exists() {
        if opts.force { "--force" } else { "its partition is of other inputs, code or config" }
    } else {
        "no complete partition"
    };
    // At work: the partition has no record until the shard is done.
    shards::remove_record(&dir)?;
    let t0 = Instant::now();
    let mut ctx = StageContext::new(info, tgrag_stages::deps_of(stage, all), &opts.dataset, &key.config, &root, opts.progress)
        .with_cache_key(&key.fingerprint)
        .with_shard(shard);
    let result = stage.run(&mut ctx);
    let done = ctx.finish();
    for w in &done.written {
        let _ = std::fs::remove_file(&w.tmp);
    }
    result.map_err(|e| anyhow::Error::new(e).context(format!("stage `{}`, shard {shard}, failed", info.name)))?;
    // A shard's tables (a stage may write what it has) are the merge's to write: dropped above.
    let Some(record) = done.part else {
        return Err(crate::internal!("stage `{}` wrote no partition for shard {shard}", info.name));
    };
    // An upstream stage rewritten while the shard ran: the partition may mix both; drop it.
    if stage_key(opts, all, &root, stage)?.fingerprint != key.fingerprint {
        let _ = std::fs::remove_file(dir.join(shards::RECORD_FILE));
        anyhow::bail!("the inputs of `{}` changed while shard {shard} ran: run the shard again", info.name);
    }
    Ok(outcome(Decision::Run(why.into()), Some(record), t0.elapsed().as_secs_f64()))
}

/// After a failed stage: its temporary files removed (and its folder, when it never succeeded);
/// the error, prefixed with the stage unless it already names it.
fn failed(dir: &Path, stage: &str, written: &[Written], first_run: bool, e: StageError) -> anyhow::Error {
    for w in written {
        let _ = std::fs::remove_file(&w.tmp);
    }
    let _ = clean_tmp(dir);
    // Leave no empty folder behind for a stage that never succeeded.
    if first_run {
        let _ = std::fs::remove_dir(dir);
    }
    // An error that already names the stage is not prefixed a second time.
    let named = e.to_string().starts_with(&format!("stage `{stage}`"));
    let e = anyhow::Error::new(e);
    if named { e } else { e.context(format!("stage `{stage}` failed")) }
}

/// Renames the written outputs into place (hashing each first) and removes the outputs of the
/// previous run that this one no longer writes.
fn commit_outputs(dir: &Path, written: &[Written], previous: Option<Manifest>) -> Result<BTreeMap<String, OutputInfo>> {
    let mut outputs = BTreeMap::new();
    for w in written {
        let final_path = dir.join(&w.file);
        let sha256 = io::sha256_file(&w.tmp)?;
        let bytes = std::fs::metadata(&w.tmp).map(|m| m.len()).unwrap_or(0);
        io::commit(&w.tmp, &final_path)?;
        outputs.insert(w.file.clone(), OutputInfo { sha256, bytes, rows: w.rows });
    }
    if let Some(prev) = previous {
        for file in prev.outputs.keys().filter(|f| !outputs.contains_key(*f)) {
            let _ = std::fs::remove_file(dir.join(file));
        }
    }
    Ok(outputs)
}

/// Writes the timings table, the config and, last, the manifest of a stage that succeeded.
fn write_records(
    opts: &RunOptions,
    dir: &Path,
    stage: &str,
    key: StageKey,
    outputs: &BTreeMap<String, OutputInfo>,
    timings: Vec<PhaseTiming>,
    seconds: f64,
) -> Result<()> {
    let prov = io::Provenance { dataset: Some(&opts.dataset.name), cache_key: Some(&key.fingerprint) };
    io::write_table_with(&tables::TIMINGS, &dir.join(TIMINGS), &timings_batch(stage, &timings)?, &prov)?;
    io::write_bytes_atomic(&dir.join(CONFIG), serde_json::to_string_pretty(&key.config)?.as_bytes())?;
    let manifest = Manifest {
        stage: stage.to_string(),
        code_version: key.code,
        fingerprint: key.fingerprint,
        config: key.config,
        inputs: key.inputs,
        outputs: outputs.clone(),
        timings,
        total_seconds: seconds,
        finished_at_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    };
    let text = serde_json::to_string_pretty(&manifest)?;
    io::write_bytes_atomic(&dir.join(MANIFEST), text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(dir: &Path, code: &str, config: &serde_json::Value, inputs: &BTreeMap<String, String>, outputs: &[(&str, &[u8])]) {
        let mut out = BTreeMap::new();
        for (name, bytes) in outputs {
            std::fs::write(dir.join(name), bytes).expect("output");
            out.insert(
                name.to_string(),
                OutputInfo { sha256: io::sha256_file(&dir.join(name)).expect("sha"), bytes: bytes.len() as u64, rows: None },
            );
        }
        let fp = fingerprint("mor", code, config, inputs);
        let m = Manifest {
            stage: "mor".into(),
            code_version: code.into(),
            fingerprint: fp,
            config: config.clone(),
            inputs: inputs.clone(),
            outputs: out,
            timings: Vec::new(),
            total_seconds: 0.0,
            finished_at_unix: 0,
        };
        std::fs::write(dir.join(MANIFEST), serde_json::to_string(&m).expect("json")).expect("manifest");
    }

    #[test]
    fn applicability_is_predicted_from_the_tables_a_dataset_provides() {
        let all = tgrag_stages::all();
        let names = |p: Option<&[&str]>| -> Vec<&str> { predicted_applicable(&all, p).iter().map(|s| s.info().name).collect() };
        let qa = names(Some(&["graph_nodes", "graph_edges", "qa"]));
        for s in ["ingest", "textgraphs", "subgraphs", "gretriever", "report"] {
            assert!(qa.contains(&s), "{s} applies to graph QA: {qa:?}");
        }
        for s in ["bm25", "dense", "mor", "toporag"] {
            assert!(!qa.contains(&s), "{s} does not apply to graph QA: {qa:?}");
        }
        let kb = names(Some(&["nodes", "edges", "queries", "answers"]));
        assert!(kb.contains(&"mor") && kb.contains(&"dense") && !kb.contains(&"textgraphs") && !kb.contains(&"toporag"), "{kb:?}");
        let tag = names(Some(&["tag_nodes", "tag_edges"]));
        assert!(tag.contains(&"toporag") && !tag.contains(&"bm25"), "{tag:?}");
        assert_eq!(names(None).len(), all.len());
    }

    #[test]
    fn decisions_say_why_code_config_inputs_or_outputs_changed() {
        let d = tempfile::tempdir().expect("tmp");
        let dir = d.path();
        let cfg = serde_json::json!({"seed": 0});
        let inputs = BTreeMap::from([("planning".to_string(), "abc".to_string())]);
        let (old, new) = ("mor@v3 code 0000", "mor@v3 code 1111");
        manifest(dir, old, &cfg, &inputs, &[("run.parquet", b"rows")]);
        let fp = |code: &str, cfg: &serde_json::Value, inputs: &BTreeMap<String, String>| fingerprint("mor", code, cfg, inputs);
        assert!(matches!(decide(dir, &fp(old, &cfg, &inputs), old, &cfg, &inputs, false), Decision::Skip(_)));
        assert_eq!(decide(dir, &fp(new, &cfg, &inputs), new, &cfg, &inputs, false), Decision::Run("code changed".into()));
        let cfg2 = serde_json::json!({"seed": 1});
        assert_eq!(decide(dir, &fp(new, &cfg2, &inputs), new, &cfg2, &inputs, false), Decision::Run("code changed, config changed".into()));
        let inputs2 = BTreeMap::from([("planning".to_string(), "def".to_string())]);
        assert_eq!(decide(dir, &fp(old, &cfg, &inputs2), old, &cfg, &inputs2, false), Decision::Run("input `planning` changed".into()));
        assert_eq!(decide(dir, &fp(old, &cfg, &inputs), old, &cfg, &inputs, true), Decision::Run("--force".into()));
        std::fs::write(dir.join("run.parquet"), b"other").expect("tamper");
        assert_eq!(
            decide(dir, &fp(old, &cfg, &inputs), old, &cfg, &inputs, false),
            Decision::Run("output run.parquet was modified".into())
        );
        // This binary's code version carries the build's code digest.
        assert!(code_version(tgrag_stages::all()[0]).ends_with(CODE_DIGEST) && CODE_DIGEST.len() == 32);
    }

    #[test]
    fn a_manifest_naming_anything_but_plain_files_of_its_folder_is_invalid() {
        for ok in ["run.parquet", "report.md", "plot-1.png"] {
            assert!(output_name_ok(ok), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "/etc/passwd", "a/b", "a\\b", ".hidden", MANIFEST, "x\u{0}y", "new\nline"] {
            assert!(!output_name_ok(bad), "{bad:?}");
        }
        let d = tempfile::tempdir().expect("tmp");
        let dir = d.path().join("stage");
        std::fs::create_dir_all(&dir).expect("dir");
        let cfg = serde_json::json!({});
        manifest(&dir, "c", &cfg, &BTreeMap::new(), &[("run.parquet", b"rows")]);
        assert!(read_manifest(&dir).is_some());
        // A listed output that is a link (to a file outside) makes the manifest invalid.
        std::fs::write(d.path().join("outside"), b"rows").expect("outside");
        std::fs::remove_file(dir.join("run.parquet")).expect("rm");
        std::os::unix::fs::symlink(d.path().join("outside"), dir.join("run.parquet")).expect("link");
        assert!(read_manifest(&dir).is_none());
        // So does a listed name with a `..`.
        std::fs::remove_file(dir.join("run.parquet")).expect("rm");
        let text = std::fs::read_to_string(dir.join(MANIFEST)).expect("m").replace("\"run.parquet\"", "\"../outside\"");
        std::fs::write(dir.join(MANIFEST), text).expect("tamper");
        assert!(read_manifest(&dir).is_none());
        assert!(matches!(decide(&dir, "fp", "c", &cfg, &BTreeMap::new(), false), Decision::Run(_)));
    }

    #[test]
    fn metrics_depends_on_every_stage_that_writes_a_run() {
        let all = tgrag_stages::all();
        let metrics = all.iter().find(|s| s.info().name == "metrics").expect("metrics");
        let writers: Vec<&str> = all.iter().filter(|s| s.info().outputs.contains(&"run")).map(|s| s.info().name).collect();
        assert_eq!(writers, vec!["bm25", "dense", "mor", "pasemiqa"]);
        let deps = tgrag_stages::deps_of(*metrics, &all);
        assert_eq!(deps, vec!["ingest", "bm25", "dense", "mor", "pasemiqa"]);
        // Selecting `metrics` runs every run writer and what they need.
        let sel: Vec<&str> = select(&all, Some(&["metrics".to_string()])).expect("select").iter().map(|s| s.info().name).collect();
        assert_eq!(sel, vec!["ingest", "bm25", "dense", "planning", "mor", "pasemiqa", "metrics"]);
        // The report reads every `scores` table, whoever writes it.
        let report = all.iter().find(|s| s.info().name == "report").expect("report");
        assert_eq!(tgrag_stages::deps_of(*report, &all), vec!["toporag", "subgraphs", "gretriever", "mixrag", "metrics"]);
    }
}
