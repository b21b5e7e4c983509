//! `tgrag run`: the stage DAG on one dataset; up-to-date stages are skipped with the reason.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use tgrag_stages::Progress;

use crate::commands::{DatasetArgs, stage_configs};

mod summary;
use crate::runner::{self, Decision, RunOptions};

/// `tgrag run` arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub dataset: DatasetArgs,
    /// Comma-separated stages to run (their upstream stages are included and skipped when fresh).
    #[arg(long, value_delimiter = ',')]
    pub stages: Option<Vec<String>>,
    /// Rerun the selected stages even when up to date.
    #[arg(long)]
    pub force: bool,
    /// Run shard I of N (`0 ≤ I < N`) of the one stage `--stages` names: its sharded phase (the
    /// embeddings of `dense` or `textgraphs` over the I-th of N contiguous ranges; the
    /// language-model rows of `gretriever` or `mixrag`, unit k when k mod N = I), into a
    /// partition under `<stage>/shards/`. The stages upstream must be up to date. The stage's
    /// normal run then reads the partitions (docs/scale.md).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<tgrag_stages::shared::shards::Shard>,
    /// List the units of the one stage `--stages` names (the language-model rows of `gretriever`
    /// or `mixrag`, one per row and seed) under these options, without running any: each unit's
    /// id k (shard k mod N of `--shard I/N` runs it), its name and whether a shard has finished
    /// it. The stages upstream must be up to date.
    #[arg(long, conflicts_with_all = ["shard", "force"])]
    pub units: bool,
}

/// The verb and reason printed for a decision.
pub fn describe(d: &Decision) -> (&'static str, &str) {
    match d {
        Decision::Run(why) => ("ran", why),
        Decision::Skip(why) => ("skipped", why),
        Decision::NotApplicable(why) => ("n/a", why),
    }
}

/// One shard of a stage: the line of its outcome.
fn run_shard(
    opts: &RunOptions,
    all: &[&'static dyn tgrag_stages::Stage],
    shard: tgrag_stages::shared::shards::Shard,
    wait: bool,
) -> Result<()> {
    let t0 = Instant::now();
    let o = runner::run_shard(opts, all, shard, wait)?;
    let (verb, why) = describe(&o.decision);
    let rows = o.record.as_ref().map_or_else(String::new, |r| format!("{}, ", r.holds()));
    let took = if verb == "ran" { format!(" in {:.2}s", t0.elapsed().as_secs_f64()) } else { String::new() };
    println!("tgrag run: dataset `{}`, stage `{}`, shard {}: {verb}{took} ({rows}{why})", opts.dataset.name, o.stage, o.shard);
    if o.record.is_some() {
        println!("partition: {}", o.dir.display());
    }
    Ok(())
}

/// The units of one stage, a line each.
fn list_units(opts: &RunOptions, all: &[&'static dyn tgrag_stages::Stage]) -> Result<()> {
    let l = runner::list_units(opts, all)?;
    let (stage, units) = (l.stage, &l.units);
    let head = format!("tgrag run: dataset `{}`, stage `{stage}`", opts.dataset.name);
    if let Some(why) = l.not_applicable {
        println!("{head}: n/a ({why})");
        return Ok(());
    }
    let done = units.iter().filter(|u| u.done_in.is_some()).count();
    let merged = if l.up_to_date { "; the stage is up to date, its tables hold every unit" } else { "" };
    println!("{head}: {} units, {done} finished by shards{merged} (unit k runs in shard I of --shard I/N when k mod N = I)", units.len());
    let width = units.iter().map(|u| u.name.len()).max().unwrap_or(0);
    for u in units {
        let state = u.done_in.map_or_else(|| "pending".to_string(), |s| format!("done in shard {s}"));
        println!("  {:>5}  {:<width$}  {state}", u.id, u.name);
    }
    Ok(())
}

pub fn run(outputs: &Path, quiet: bool, wait: bool, a: RunArgs) -> Result<()> {
    let all = tgrag_stages::all();
    let dataset = a.dataset.resolve()?;
    let configs = stage_configs(&all, &a.dataset.set, a.dataset.device.map(Into::into))?;
    let selected = runner::select(&all, a.stages.as_deref())?;
    // The sentence model, for every stage that will apply and needs it, before any work.
    let applies = runner::predicted_applicable(&selected, dataset.provides().as_deref());
    let with_cfg: Vec<(&dyn tgrag_stages::Stage, &serde_json::Value)> =
        applies.iter().filter_map(|s| configs.get(s.info().name).map(|c| (*s, c))).collect();
    tgrag_stages::check_models(&with_cfg)?;
    if a.shard.is_some() || a.units {
        let opts =
            RunOptions { outputs: outputs.to_path_buf(), dataset, stages: a.stages, force: a.force, progress: Progress { quiet }, configs };
        return match a.shard {
            Some(shard) => run_shard(&opts, &all, shard, wait),
            None => list_units(&opts, &all),
        };
    }
    // One writer per dataset folder for the run's whole life.
    let _lock = crate::lock::FolderLock::acquire(&outputs.join(&dataset.name), wait)?;
    let opts =
        RunOptions { outputs: outputs.to_path_buf(), dataset, stages: a.stages, force: a.force, progress: Progress { quiet }, configs };
    let t0 = Instant::now();
    println!("tgrag run: dataset `{}` → {}", opts.dataset.name, opts.outputs.join(&opts.dataset.name).display());
    // Which device the model stages use, when one asks for a GPU (auto says what it found).
    let devices: std::collections::BTreeSet<String> = opts
        .configs
        .values()
        .filter_map(|c| c.get("device").and_then(|d| d.as_str()).and_then(tgrag_models::DeviceChoice::parse))
        .filter(|d| *d != tgrag_models::DeviceChoice::Cpu)
        .map(|d| format!("{} → {}", d.as_str(), d.describe()))
        .collect();
    for d in devices {
        println!("  device {d}");
    }
    let outcomes = runner::run(&opts, &all, |o| {
        let (verb, why) = describe(&o.decision);
        let rows: usize = o.outputs.values().filter_map(|x| x.rows).sum();
        if verb == "ran" {
            println!("  {:<10} {:<7} {:>7.2}s  {} files, {} rows  ({why})", o.stage, verb, o.seconds, o.outputs.len(), rows);
        } else {
            println!("  {:<10} {:<7} {:>8}  ({why})", o.stage, verb, "");
        }
    })?;
    let ran = outcomes.iter().filter(|o| matches!(o.decision, Decision::Run(_))).count();
    let root = opts.outputs.join(&opts.dataset.name);
    println!("done in {:.2}s: {ran} stage(s) ran, {} skipped", t0.elapsed().as_secs_f64(), outcomes.len() - ran);
    // The last screen (printed in quiet mode too: it is the result): one table per method family,
    // then where the whole report is.
    print!("{}", summary::tables(&root)?);
    let report = root.join("report").join("report.md");
    if report.is_file() {
        println!("\nreport: {}", report.display());
        match summary::write_html(&root, &opts.dataset.name) {
            Ok(Some(html)) => println!("        {}", html.display()),
            Ok(None) => {}
            // The run's outputs are complete without the page: say why it is missing, keep them.
            Err(e) => eprintln!("warning: report.html not written: {e:#}"),
        }
    }
    println!("outputs: {} (query them with `tgrag sql`; docs/outputs.md)", root.display());
    Ok(())
}
