//! `tgrag nightly`: every available dataset through every applicable stage (up-to-date stages
//! skipped by the cache), one dated result folder that appears whole or not at all, and the
//! comparison with the previous night. Exit codes: 0, 3 (another nightly holds the lock),
//! 4 (a metric regressed), 5 (a dataset failed, nothing regressed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array};
use tgrag_schemas::{io, tables};
use tgrag_stages::Progress;

use crate::commands::{SizeArg, stage_configs};
use crate::lock::{FolderLock, utc};
use crate::nightly::{self, Discovery, cells, collect::Collected, diff, plots, provenance, render};
use crate::runner::{self, Decision, RunOptions};

/// `tgrag nightly` arguments.
#[derive(Debug, clap::Args)]
pub struct NightlyArgs {
    /// Folders holding real datasets in their own layouts (`explagraphs/`, `citeseer-text/`, …);
    /// repeatable. Default: `$TGRAG_DATA_ROOT`, then `../shared/datasets`.
    #[arg(long)]
    pub data_root: Vec<PathBuf>,
    /// Sizes of the synthetic dataset (`small` is `outputs/synthetic`, others `synthetic-<size>`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "small")]
    pub sizes: Vec<SizeArg>,
    /// Seed of the synthetic dataset.
    #[arg(long, default_value_t = 42, allow_negative_numbers = true, value_parser = crate::commands::num::seed)]
    pub seed: u64,
    /// Only these datasets (comma-separated names; default: every one found).
    #[arg(long, value_delimiter = ',')]
    pub datasets: Option<Vec<String>>,
    /// Do not try the STaRK KBs on the Hugging Face hub (or HF_ENDPOINT's mirror).
    #[arg(long)]
    pub no_stark: bool,
    /// Override a stage option for every dataset: `--set bm25.k1=1.2`.
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<String>,
    /// Noise band of a metric: `--tolerance hit1=0.02` (repeatable).
    #[arg(long = "tolerance", value_name = "METRIC=VALUE")]
    pub tolerance: Vec<String>,
    /// Noise band of metrics without a configured band or a seed spread (≥ 0).
    #[arg(long, default_value_t = 0.01, allow_negative_numbers = true, value_parser = diff::tolerance_value)]
    pub default_tolerance: f64,
    /// Nights to keep in `<outputs>/nightly` (0: keep all).
    #[arg(long, default_value_t = 30, allow_negative_numbers = true, value_parser = crate::commands::num::count0)]
    pub keep: usize,
    /// Rerun every stage, even when up to date.
    #[arg(long)]
    pub force: bool,
    /// Where the model stages train and run (as `tgrag run --device`).
    #[arg(long, value_enum)]
    pub device: Option<crate::commands::DeviceArg>,
    /// Training seeds of TopoRAG's GNNs (mean ± std over them, as the paper's Table 3).
    #[arg(long, default_value_t = 5, allow_negative_numbers = true, value_parser = crate::commands::num::count)]
    pub toporag_seeds: usize,
    /// Training seeds of the GraphQA methods (`gretriever`, `mixrag`: mean ± std over them, as the
    /// papers report; a plain `tgrag run` trains one).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true, value_parser = crate::commands::num::count)]
    pub graphqa_seeds: usize,
    /// List the night's cells (one per dataset: id, kind, the resources a cluster job asks for)
    /// and exit; `--cell` runs one, `--collect` gathers them into the night.
    #[arg(long, conflicts_with_all = ["cell", "collect"])]
    pub plan: bool,
    /// Run one cell of the night (`--plan` lists them): its dataset into `<outputs>/<dataset>/`,
    /// as a whole night would, then its record into `<outputs>/cells/<plan>/`. Exit 5 when the
    /// dataset failed.
    #[arg(long, value_name = "ID", conflicts_with = "collect")]
    pub cell: Option<String>,
    /// Build the night from its cells (every one run with the same options, on any machine that
    /// shares the outputs folder): the same tables a one-machine night writes. A cell without a
    /// record counts as a failed dataset.
    #[arg(long)]
    pub collect: bool,
}

/// The data roots: the given ones, else `$TGRAG_DATA_ROOT`, else `../shared/datasets` when it
/// exists. A root the user named (by flag or variable) that is not a folder is an error: a night
/// without its data must not pass for one.
fn roots(given: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if !given.is_empty() {
        for r in given {
            if !r.is_dir() {
                bail_config!("--data-root {}: not a folder (a missing mount or a typo?)", r.display());
            }
        }
        return Ok(given.to_vec());
    }
    if let Some(r) = std::env::var_os("TGRAG_DATA_ROOT").map(PathBuf::from) {
        if !r.is_dir() {
            bail_config!("TGRAG_DATA_ROOT={}: not a folder (a missing mount or a typo?)", r.display());
        }
        return Ok(vec![r]);
    }
    Ok([PathBuf::from("../shared/datasets")].into_iter().filter(|p| p.is_dir()).collect())
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// One dataset's row of `nightly_datasets`.
struct Outcome {
    dataset: String,
    status: &'static str,
    detail: String,
    ran: u32,
    skipped: u32,
    seconds: f64,
}

impl Outcome {
    /// The line a night prints for a dataset it ran.
    fn line(&self) -> String {
        let detail = if self.detail.is_empty() { String::new() } else { format!(": {}", self.detail) };
        format!(
            "  {:<16} {} in {:.1}s: {} stage(s) ran, {} skipped{detail}",
            self.dataset, self.status, self.seconds, self.ran, self.skipped
        )
    }
}

fn datasets_batch(rows: &[Outcome]) -> Result<RecordBatch> {
    let s = |f: &dyn Fn(&Outcome) -> String| -> ArrayRef { std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(f))) };
    Ok(tables::NIGHTLY_DATASETS.batch(vec![
        s(&|r| r.dataset.clone()),
        s(&|r| r.status.to_string()),
        s(&|r| r.detail.clone()),
        std::sync::Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.ran))),
        std::sync::Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.skipped))),
        std::sync::Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.seconds))),
    ])?)
}

/// Runs one dataset through the DAG; returns its outcome and the stages that ran.
fn run_dataset(
    outputs: &Path,
    spec: tgrag_datasets::DatasetSpec,
    configs: &BTreeMap<String, serde_json::Value>,
    force: bool,
    progress: Progress,
) -> (Outcome, Vec<&'static str>) {
    let all = tgrag_stages::all();
    let t0 = Instant::now();
    let name = spec.name.clone();
    let res = (|| -> Result<Vec<runner::StageOutcome>> {
        let applies = runner::predicted_applicable(&all, spec.provides().as_deref());
        let with_cfg: Vec<(&dyn tgrag_stages::Stage, &serde_json::Value)> =
            applies.iter().filter_map(|s| configs.get(s.info().name).map(|c| (*s, c))).collect();
        tgrag_stages::check_models(&with_cfg)?;
        // A `make run` into the same folder finishes first: the night waits for it.
        let _lock = FolderLock::acquire(&outputs.join(&name), true)?;
        let opts = RunOptions { outputs: outputs.to_path_buf(), dataset: spec, stages: None, force, progress, configs: configs.clone() };
        runner::run(&opts, &all, |o| {
            let (verb, why) = crate::commands::run::describe(&o.decision);
            println!("    {:<10} {:<7} {:>8.2}s  ({why})", o.stage, verb, o.seconds);
        })
    })();
    let seconds = t0.elapsed().as_secs_f64();
    match res {
        Ok(outcomes) => {
            let ran: Vec<&'static str> = outcomes.iter().filter(|o| matches!(o.decision, Decision::Run(_))).map(|o| o.stage).collect();
            let skipped = outcomes.iter().filter(|o| matches!(o.decision, Decision::Skip(_))).count() as u32;
            (Outcome { dataset: name, status: "ok", detail: String::new(), ran: ran.len() as u32, skipped, seconds }, ran)
        }
        Err(e) => (Outcome { dataset: name, status: "failed", detail: format!("{e:#}"), ran: 0, skipped: 0, seconds }, Vec::new()),
    }
}

/// What a finished night wrote, read back (for the comparison and `tgrag report --from`).
pub struct Folder {
    pub leaderboard: RecordBatch,
    pub datasets: RecordBatch,
    pub timings: RecordBatch,
    pub latency: RecordBatch,
    pub curves: RecordBatch,
    pub correlation: RecordBatch,
    pub regressions: RecordBatch,
    pub provenance: serde_json::Value,
}

impl Folder {
    /// Reads a night's folder: every table (the leaderboard checked: unique keys, finite values)
    /// and its provenance (checked: stamp, times, code digest, previous night).
    pub fn read(dir: &Path) -> Result<Folder> {
        let t = |f: &str, spec| {
            io::read_table(&dir.join(f), spec).with_context(|| format!("{} is not a complete nightly folder", dir.display()))
        };
        let leaderboard = t("leaderboard.parquet", &tables::LEADERBOARD)?;
        diff::check(&leaderboard, &dir.join("leaderboard.parquet"))?;
        let (provenance, _) = provenance::read(dir)?;
        Ok(Folder {
            leaderboard,
            datasets: t("nightly_datasets.parquet", &tables::NIGHTLY_DATASETS)?,
            timings: t("nightly_timings.parquet", &tables::NIGHTLY_TIMINGS)?,
            latency: t("nightly_latency.parquet", &tables::NIGHTLY_LATENCY)?,
            curves: t("nightly_curves.parquet", &tables::NIGHTLY_CURVES)?,
            correlation: t("nightly_correlation.parquet", &tables::NIGHTLY_CORRELATION)?,
            regressions: t("regressions.parquet", &tables::REGRESSIONS)?,
            provenance,
        })
    }

    /// Whether a later night may compare with this one: at least one dataset ran (a night whose
    /// every dataset was unavailable or failed has no results to compare with).
    pub fn is_baseline(&self) -> Result<bool> {
        let st = tgrag_schemas::columns::strs(&self.datasets, "status")?;
        Ok((0..self.datasets.num_rows()).any(|i| st.value(i) == "ok"))
    }
}

/// The night a new one compares with: the newest of those that ran up to `at` which reads back
/// whole and ran a dataset. The others are skipped with a warning (they do not block the nights
/// after them).
fn baseline(s: &nightly::Survey, at: (&str, &str)) -> Option<(String, Folder)> {
    for n in s.up_to(at).into_iter().rev() {
        match Folder::read(&n.dir).and_then(|f| Ok((f.is_baseline()?, f))) {
            Ok((true, f)) => return Some((n.name.clone(), f)),
            Ok((false, _)) => eprintln!("warning: {}: no dataset ran that night; not a baseline, an earlier night is", n.dir.display()),
            Err(e) => eprintln!("warning: {}: skipped as the baseline, an earlier night is: {e:#}", n.dir.display()),
        }
    }
    None
}

/// Renders `report.md`, `report.html` and `plots/` of a night into `dir`, from its tables.
pub fn render_into(
    dir: &Path,
    stamp: &str,
    f: &Folder,
    compared: &[diff::Compared],
    previous: Option<(&str, Option<&RecordBatch>)>,
) -> Result<()> {
    let figures = plots::all(&f.leaderboard, &f.latency, &f.curves, &f.correlation)?;
    let plots_dir = dir.join("plots");
    // A `plots` link planted in a night folder (re-rendered by `report --from`) is refused.
    io::ensure_owned_dir(&plots_dir)?;
    for fig in &figures {
        io::write_bytes_atomic(&plots_dir.join(&fig.file), &fig.png)?;
    }
    let night = render::Night {
        stamp,
        leaderboard: &f.leaderboard,
        datasets: &f.datasets,
        timings: &f.timings,
        compared,
        previous: previous.map(|p| p.0),
        previous_timings: previous.and_then(|p| p.1),
        provenance: &f.provenance,
        figures: &figures,
    };
    let md = render::markdown(&night)?;
    io::write_bytes_atomic(&dir.join("report.md"), md.as_bytes())?;
    io::write_bytes_atomic(&dir.join("report.html"), render::html(&md, &format!("tgrag nightly {stamp}"), &figures).as_bytes())?;
    Ok(())
}

/// Where the night looks for data and what it runs, from its options.
fn discovery(a: &NightlyArgs) -> Result<Discovery> {
    Ok(Discovery {
        roots: roots(&a.data_root)?,
        sizes: a.sizes.iter().map(|&s| s.into()).collect(),
        seed: a.seed,
        stark: !a.no_stark,
        only: a.datasets.clone(),
    })
}

/// The cells of the night these options run (as `--plan` lists them).
pub fn plan_of(a: &NightlyArgs) -> Result<cells::Plan> {
    let configs = stage_configs(&tgrag_stages::all(), &night_sets(a), a.device.map(Into::into))?;
    let plan = cells::Plan::new(nightly::discover(&discovery(a)?), &configs, a.seed);
    if plan.cells.is_empty() {
        bail_config!("no dataset to run (--datasets {:?} matched none)", a.datasets.clone().unwrap_or_default());
    }
    Ok(plan)
}

pub fn run(outputs: &Path, quiet: bool, wait: bool, a: NightlyArgs) -> Result<ExitCode> {
    // Everything a night needs is checked before it starts.
    let all = tgrag_stages::all();
    let configs = stage_configs(&all, &night_sets(&a), a.device.map(Into::into))?;
    let tol = diff::Tolerances::parse(&a.tolerance, a.default_tolerance)?;
    if a.plan || a.cell.is_some() {
        let plan = plan_of(&a)?;
        return match &a.cell {
            Some(id) => run_cell(outputs, &plan, id, &configs, a.force, Progress { quiet }),
            None => {
                for line in cells::describe(&plan) {
                    println!("{line}");
                }
                Ok(ExitCode::SUCCESS)
            }
        };
    }
    let night_dir = outputs.join("nightly");
    // The nights' folder and a night in progress must be real folders, never links out.
    io::ensure_owned_dir(&night_dir)?;
    let _lock = FolderLock::acquire(&night_dir, wait)?;
    let disc = discovery(&a)?;
    nightly::clean_partials(&night_dir)?;
    let started = now_ms();
    let stamp = nightly::stamp(started);
    let started_at = utc((started / 1000) as u64);
    let (previous, prev_folder) = previous_night(&night_dir, (&started_at, &stamp), &tol)?;
    let partial = night_dir.join(format!(".{stamp}.partial"));
    io::ensure_owned_dir(&partial)?;
    let planned = nightly::discover(&disc);
    if planned.is_empty() {
        let _ = std::fs::remove_dir_all(&partial);
        bail_config!("no dataset to run (--datasets {:?} matched none)", a.datasets.unwrap_or_default());
    }
    println!("tgrag nightly {stamp}: {} dataset(s) → {}", planned.len(), night_dir.join(&stamp).display());
    let (plan_id, (outcomes, collected, specs)) = if a.collect {
        let plan = cells::Plan::new(planned, &configs, a.seed);
        let got = collect_cells(outputs, &plan).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&partial);
        })?;
        (Some(plan.id), got)
    } else {
        (None, run_datasets(outputs, planned, &configs, a.force, Progress { quiet }))
    };
    // The tables, then the comparison with the previous night, then the report.
    let leaderboard = collected.leaderboard()?;
    let cur = diff::rows(&leaderboard)?;
    let prev = prev_folder.as_ref().map(|f| diff::rows(&f.leaderboard)).transpose()?.unwrap_or_default();
    let compared = diff::compare(&prev, &cur, &tol);
    let prov = serde_json::json!({
        "stamp": stamp,
        "code": provenance::code(),
        "configs": provenance::configs(&configs),
        "datasets": specs,
        "host": provenance::host(),
        "started_at": started_at,
        "finished_at": utc((now_ms() / 1000) as u64),
        "previous": previous,
        "arguments": std::env::args().collect::<Vec<_>>(),
        "tolerances": { "per_metric": tol.per_metric, "default": tol.default },
        "cells": plan_id,
    });
    let folder = Folder {
        leaderboard,
        datasets: datasets_batch(&outcomes)?,
        timings: collected.timings()?,
        latency: collected.latency()?,
        curves: collected.curves()?,
        correlation: collected.correlation()?,
        regressions: diff::batch(&compared)?,
        provenance: prov,
    };
    write_folder(&partial, &folder)?;
    let prev_name = previous;
    render_into(&partial, &stamp, &folder, &compared, prev_name.as_deref().map(|n| (n, prev_folder.as_ref().map(|f| &f.timings))))?;
    let final_dir = night_dir.join(&stamp);
    nightly::publish(&partial, &final_dir)?;
    if let Some(id) = &plan_id {
        let collected = serde_json::json!({ "plan": id, "night": stamp, "folder": final_dir.display().to_string() });
        let cells_dir = outputs.join("cells").join(id);
        io::ensure_owned_dir(&cells_dir)?;
        io::write_bytes_atomic(&cells_dir.join("collected.json"), collected.to_string().as_bytes())?;
        println!("collected the cells of plan {id}");
    }
    let ran = outcomes.iter().filter(|o| o.status == "ok").count();
    if ran == 0 {
        // Nothing to compare with later: it prunes nothing, and the next night skips it as a baseline.
        println!("not pruned: no dataset ran, so this night is no baseline");
    } else {
        for gone in nightly::prune(&night_dir, a.keep, &final_dir)?.removed {
            println!("pruned {}", gone.display());
        }
    }
    Ok(summarize(&night_dir, &final_dir, &compared, prev_name.as_deref(), &outcomes, ran))
}

/// The `--set` options of every dataset: TopoRAG's GNNs and the GraphQA methods over several
/// seeds unless the user set them, then the user's.
fn night_sets(a: &NightlyArgs) -> Vec<String> {
    let mut sets = Vec::new();
    for (key, n) in [("toporag.gnn_seeds", a.toporag_seeds), ("gretriever.seeds", a.graphqa_seeds), ("mixrag.seeds", a.graphqa_seeds)] {
        if !a.set.iter().any(|s| s.starts_with(&format!("{key}="))) {
            sets.push(format!("{key}={:?}", (0..n as u64).collect::<Vec<_>>()));
        }
    }
    sets.extend(a.set.iter().cloned());
    sets
}

/// The previous night, chosen before anything runs (the folder does not change under the lock):
/// its name and tables, when there is one. Nights that claim a later start are said.
fn previous_night(night_dir: &Path, at: (&str, &str), tol: &diff::Tolerances) -> Result<(Option<String>, Option<Folder>)> {
    let survey = nightly::survey(night_dir);
    survey.warn();
    for n in survey.after(at) {
        eprintln!("warning: {}: claims to have run after this night (at {}); neither a baseline nor pruned", n.dir.display(), n.started_at);
    }
    let (previous, prev_folder) = baseline(&survey, at).unzip();
    if let Some(f) = &prev_folder {
        // A band for a metric the previous night does not have could never apply: a typo.
        tol.check_known(&diff::metrics(&f.leaderboard)?, "the previous night's leaderboard")?;
    }
    Ok((previous, prev_folder))
}

/// Runs the planned datasets in order: their outcomes, their collected tables, and the specs of
/// those that were available (for the provenance).
fn run_datasets(
    outputs: &Path,
    planned: Vec<nightly::Planned>,
    configs: &BTreeMap<String, serde_json::Value>,
    force: bool,
    progress: Progress,
) -> (Vec<Outcome>, Collected, serde_json::Map<String, serde_json::Value>) {
    let mut outcomes = Vec::new();
    let mut collected = Collected::default();
    let mut specs = serde_json::Map::new();
    for p in planned {
        match p.spec {
            Err(reason) => {
                println!("  {:<16} unavailable ({reason})", p.name);
                outcomes.push(Outcome { dataset: p.name, status: "unavailable", detail: reason, ran: 0, skipped: 0, seconds: 0.0 });
            }
            Ok(spec) => {
                println!("  {}", p.name);
                specs.insert(p.name.clone(), provenance::dataset(&spec));
                let (o, ran) = run_dataset(outputs, spec, configs, force, progress);
                println!("{}", o.line());
                let mut o = o;
                if o.status == "ok"
                    && let Err(e) = collected.add_dataset(&o.dataset, &outputs.join(&o.dataset), &ran)
                {
                    println!("  {:<16} failed: collecting its results: {e:#}", o.dataset);
                    (o.status, o.detail) = ("failed", format!("collecting its results: {e:#}"));
                }
                outcomes.push(o);
            }
        }
    }
    (outcomes, collected, specs)
}

/// Runs one cell: its dataset as [`run_datasets`] runs it, then its record. Exit 0, or 5 when the
/// dataset failed (recorded as failed, so that the collected night says why).
fn run_cell(
    outputs: &Path,
    plan: &cells::Plan,
    id: &str,
    configs: &BTreeMap<String, serde_json::Value>,
    force: bool,
    progress: Progress,
) -> Result<ExitCode> {
    let (cell, spec) = plan.cell(id)?;
    let dir = plan.dir(outputs);
    io::ensure_owned_dir(&dir)?;
    println!("tgrag nightly: cell {id} of plan {} ({})", plan.id, cell.kind);
    let started_at = utc((now_ms() / 1000) as u64);
    let (o, ran) = run_dataset(outputs, spec.clone(), configs, force, progress);
    let record = cells::Record {
        plan: plan.id.clone(),
        cell: id.to_string(),
        status: o.status.to_string(),
        detail: o.detail.clone(),
        ran: ran.iter().map(|s| s.to_string()).collect(),
        skipped: o.skipped,
        seconds: o.seconds,
        host: crate::lock::hostname(),
        started_at,
        finished_at: utc((now_ms() / 1000) as u64),
    };
    cells::write_record(&dir, &record)?;
    println!("{}", o.line());
    Ok(if o.status == "ok" { ExitCode::SUCCESS } else { ExitCode::from(nightly::EXIT_DATASET_FAILED) })
}

/// The outcomes, tables and specs of a night from its cells' records and folders, in plan order
/// (the order [`run_datasets`] runs them): an unavailable dataset as a night says it, a cell
/// without a record as failed.
fn collect_cells(outputs: &Path, plan: &cells::Plan) -> Result<(Vec<Outcome>, Collected, serde_json::Map<String, serde_json::Value>)> {
    let dir = plan.dir(outputs);
    let mut outcomes = Vec::new();
    let mut collected = Collected::default();
    let mut specs = serde_json::Map::new();
    for c in &plan.cells {
        let spec = match &c.planned.spec {
            Err(reason) => {
                println!("  {:<16} unavailable ({reason})", c.id);
                outcomes.push(Outcome {
                    dataset: c.id.clone(),
                    status: "unavailable",
                    detail: reason.clone(),
                    ran: 0,
                    skipped: 0,
                    seconds: 0.0,
                });
                continue;
            }
            Ok(spec) => spec,
        };
        specs.insert(c.id.clone(), provenance::dataset(spec));
        let o = match cells::read_record(&dir, &plan.id, &c.id)? {
            cells::State::Pending => {
                let detail = format!("cell {} has no record in {} (not run, still running, or killed)", c.id, dir.display());
                Outcome { dataset: c.id.clone(), status: "failed", detail, ran: 0, skipped: 0, seconds: 0.0 }
            }
            cells::State::Done(r) => {
                let status = if r.status == "ok" { "ok" } else { "failed" };
                let mut o = Outcome {
                    dataset: c.id.clone(),
                    status,
                    detail: r.detail.clone(),
                    ran: r.ran.len() as u32,
                    skipped: r.skipped,
                    seconds: r.seconds,
                };
                let names: Vec<&str> = r.ran.iter().map(String::as_str).collect();
                if status == "ok"
                    && let Err(e) = collected.add_dataset(&o.dataset, &outputs.join(&o.dataset), &names)
                {
                    (o.status, o.detail) = ("failed", format!("collecting its results: {e:#}"));
                }
                o
            }
        };
        println!("  {:<16} {}{}", o.dataset, o.status, if o.detail.is_empty() { String::new() } else { format!(": {}", o.detail) });
        outcomes.push(o);
    }
    Ok((outcomes, collected, specs))
}

/// Writes the night's tables (each checked as its declared table) and `provenance.json`.
fn write_folder(partial: &Path, folder: &Folder) -> Result<()> {
    for (file, b) in [
        ("leaderboard.parquet", &folder.leaderboard),
        ("nightly_datasets.parquet", &folder.datasets),
        ("nightly_timings.parquet", &folder.timings),
        ("nightly_latency.parquet", &folder.latency),
        ("nightly_curves.parquet", &folder.curves),
        ("nightly_correlation.parquet", &folder.correlation),
        ("regressions.parquet", &folder.regressions),
    ] {
        // Each file is its declared table (the file's name), checked before it is written.
        let spec = tables::by_name(file.trim_end_matches(".parquet"))?;
        io::write_table(spec, &partial.join(file), b)?;
    }
    let prov_text = serde_json::to_string_pretty(&folder.provenance).context("provenance as JSON")?;
    io::write_bytes_atomic(&partial.join("provenance.json"), prov_text.as_bytes())?;
    Ok(())
}

/// What the night says, in a few lines, and its exit code: regressions first, then a night where
/// no dataset ran, then failed datasets.
fn summarize(
    night_dir: &Path,
    final_dir: &Path,
    compared: &[diff::Compared],
    prev_name: Option<&str>,
    outcomes: &[Outcome],
    ran: usize,
) -> ExitCode {
    let count = |s: diff::Status| compared.iter().filter(|r| r.status == s).count();
    let failed = outcomes.iter().filter(|o| o.status == "failed").count();
    println!("report: {}", final_dir.join("report.html").display());
    match prev_name {
        None => println!("first night in {}: nothing to compare", night_dir.display()),
        Some(p) => println!(
            "compared with {p}: {} regression(s), {} improvement(s), {} new, {} vanished",
            count(diff::Status::Regression),
            count(diff::Status::Improvement),
            count(diff::Status::New),
            count(diff::Status::Vanished)
        ),
    }
    for r in compared.iter().filter(|r| r.status == diff::Status::Regression) {
        println!("  REGRESSION {}", diff::line(r));
    }
    for r in compared.iter().filter(|r| r.status == diff::Status::Improvement) {
        println!("  improvement {}", diff::line(r));
    }
    if count(diff::Status::Regression) > 0 && prev_name.is_some() {
        return ExitCode::from(nightly::EXIT_REGRESSION);
    }
    if ran == 0 {
        eprintln!(
            "error: no dataset ran: every one of the {} dataset(s) of this night was unavailable or failed (see the report); \
             it is not a baseline for the next night",
            outcomes.len()
        );
        return ExitCode::from(nightly::EXIT_DATASET_FAILED);
    }
    if failed > 0 {
        println!("{failed} dataset(s) failed: see the report");
        return ExitCode::from(nightly::EXIT_DATASET_FAILED);
    }
    ExitCode::SUCCESS
}
