//! Arguments (clap derive) and the commands. Raw arguments are turned into validated options
//! (dataset resolved, stage names checked, every stage config parsed and checked) before any stage
//! runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tgrag_datasets::registry::{self, DatasetOptions};
use tgrag_datasets::synthetic::Size;
use tgrag_schemas::tables;
use tgrag_stages::{Progress, Stage};

use crate::runner::{self, Decision, RunOptions};
use crate::sql;

/// tgrag: offline batch retrieval over text-rich graphs; every result is Parquet.
#[derive(Debug, Parser)]
#[command(name = "tgrag", version, about, propagate_version = true)]
pub struct Args {
    /// Folder holding `<dataset>/<stage>/` artifacts.
    #[arg(long, global = true, default_value = "outputs")]
    pub outputs: PathBuf,
    /// No progress bars (CI); one line per stage is still printed.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the stage DAG on a dataset; up-to-date stages are skipped, with the reason.
    Run(RunArgs),
    /// List the stages, their dependencies and their status for a dataset.
    Stages(DatasetArgs),
    /// Describe a canonical table (or list them all).
    Schema {
        /// Table name (`nodes`, `run`, ...); omit to list every table.
        table: Option<String>,
    },
    /// Run SQL (DataFusion) over every Parquet file under the outputs folder; tables are named
    /// `<dataset>_<stage>_<table>`.
    Sql {
        /// The query, e.g. "SELECT count(*) AS n FROM synthetic_ingest_nodes".
        query: String,
        /// List the registered tables instead of running a query.
        #[arg(long)]
        list: bool,
    },
    /// BM25 over any corpus: `--corpus C.parquet --queries Q.parquet --out R.parquet`.
    Bm25(crate::tools::Bm25Args),
    /// MiniLM sentence embeddings of any texts: `--input S.parquet --out E.parquet`.
    Embed(crate::tools::EmbedArgs),
    /// TopoRAG proximity embeddings P = Σ α_k Â^k R: `--edges E.parquet --projection R.parquet --out P.parquet`.
    Diffusion(crate::topo_tools::DiffusionArgs),
    /// GraphWave role embeddings: `--edges E.parquet --scales 0.5,1,3 --points 25 --out W.parquet`.
    Graphwave(crate::topo_tools::GraphwaveArgs),
    /// STaRK's evaluator over any run: `--run R.parquet --answers A.parquet --num-candidates N
    /// [--mode stark|mor] --out M.parquet` (per query: hit@1, hit@5, recall@20, MRR).
    Evaluate(crate::eval_tool::EvaluateArgs),
    /// Train the planner (metapath decoder + restriction tagger) on MoR's plan files:
    /// `--plans DIR --out MODEL_DIR`; reports metapath exact match and restriction token F1 on
    /// `plans_val.jsonl`.
    TrainPlanner(crate::plan_tool::TrainPlannerArgs),
    /// Plans for any queries: `--model MODEL_DIR --queries Q.parquet --out P.parquet`.
    Plan(crate::plan_tool::PlanArgs),
    /// Download with hf-hub: `minilm` (the sentence model) or `stark-amazon|stark-mag|stark-prime`.
    Fetch {
        /// What to fetch.
        what: String,
        /// Destination folder (minilm only; default weights/all-MiniLM-L6-v2).
        #[arg(long)]
        dest: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
pub struct DatasetArgs {
    /// Dataset name (also its outputs folder): `synthetic`, or any name with --data-dir.
    #[arg(long, default_value = "synthetic")]
    pub dataset: String,
    /// Read the dataset from a folder of canonical tables (`nodes.csv`, `edges.parquet`, ...).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Size of the synthetic dataset: tiny, small, medium, prime.
    #[arg(long, default_value = "small")]
    pub size: String,
    /// Seed of the synthetic dataset.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Override a stage option: `--set bm25.k1=1.2` (the value is JSON, or a plain string).
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<String>,
}

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
}

/// Every stage config: defaults, then `--set` overrides, each checked by its stage.
fn stage_configs(all: &[&'static dyn Stage], sets: &[String]) -> Result<BTreeMap<String, serde_json::Value>> {
    let mut configs: BTreeMap<String, serde_json::Value> =
        all.iter().map(|s| (s.info().name.to_string(), s.default_config())).collect();
    for set in sets {
        let (lhs, value) = set.split_once('=').with_context(|| format!("--set {set}: expected STAGE.KEY=VALUE"))?;
        let (stage, key) = lhs.split_once('.').with_context(|| format!("--set {set}: expected STAGE.KEY=VALUE"))?;
        let cfg = configs.get_mut(stage).with_context(|| format!("--set {set}: no stage `{stage}`"))?;
        let obj = cfg.as_object_mut().with_context(|| format!("--set {set}: stage `{stage}` has no options"))?;
        if !obj.contains_key(key) {
            let keys: Vec<&String> = obj.keys().collect();
            bail!("--set {set}: stage `{stage}` has no option `{key}` (options: {keys:?})");
        }
        let v = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        obj.insert(key.to_string(), v);
    }
    for s in all {
        if let Some(cfg) = configs.get(s.info().name) {
            s.check_config(cfg)?;
        }
    }
    Ok(configs)
}

fn resolve_dataset(a: &DatasetArgs) -> Result<tgrag_datasets::DatasetSpec> {
    let size: Size = a.size.parse()?;
    Ok(registry::resolve(&a.dataset, a.data_dir.clone(), DatasetOptions { size, seed: a.seed })?)
}

fn describe(d: &Decision) -> (&'static str, &str) {
    match d {
        Decision::Run(why) => ("ran", why),
        Decision::Skip(why) => ("skipped", why),
        Decision::NotApplicable(why) => ("n/a", why),
    }
}

fn cmd_run(outputs: PathBuf, quiet: bool, a: RunArgs) -> Result<ExitCode> {
    let all = tgrag_stages::all();
    let dataset = resolve_dataset(&a.dataset)?;
    let configs = stage_configs(&all, &a.dataset.set)?;
    runner::select(&all, a.stages.as_deref())?;
    let opts = RunOptions { outputs, dataset, stages: a.stages, force: a.force, progress: Progress { quiet }, configs };
    let t0 = Instant::now();
    println!("tgrag run: dataset `{}` → {}", opts.dataset.name, opts.outputs.join(&opts.dataset.name).display());
    let outcomes = runner::run(&opts, &all, |o| {
        let (verb, why) = describe(&o.decision);
        let rows: usize = o.outputs.values().filter_map(|x| x.rows).sum();
        if verb == "ran" {
            println!("  {:<8} {:<7} {:>7.2}s  {} files, {} rows  ({why})", o.stage, verb, o.seconds, o.outputs.len(), rows);
        } else {
            println!("  {:<8} {:<7} {:>8}  ({why})", o.stage, verb, "");
        }
    })?;
    let ran = outcomes.iter().filter(|o| matches!(o.decision, Decision::Run(_))).count();
    let root = opts.outputs.join(&opts.dataset.name);
    println!("done in {:.2}s: {ran} stage(s) ran, {} skipped", t0.elapsed().as_secs_f64(), outcomes.len() - ran);
    let report = root.join("metrics").join("report.md");
    if report.is_file() {
        println!("report: {}", report.display());
    }
    println!("outputs: {} (query them with `tgrag sql`)", root.display());
    Ok(ExitCode::SUCCESS)
}

fn cmd_stages(outputs: PathBuf, a: DatasetArgs) -> Result<ExitCode> {
    let all = tgrag_stages::all();
    let dataset = resolve_dataset(&a)?;
    let configs = stage_configs(&all, &a.set)?;
    let root = outputs.join(&dataset.name);
    println!("stages for dataset `{}` ({}):", dataset.name, root.display());
    for s in &all {
        let info = s.info();
        let dir = root.join(info.name);
        let status = if !root.join(info.name).exists() && runner::read_manifest(&dir).is_none() {
            "not run".to_string()
        } else if let Some(why) = runner::applicability(&root, *s) {
            why
        } else {
            let inputs = runner::stage_inputs(&root, *s, &dataset)?;
            let cfg = configs.get(info.name).cloned().unwrap_or_else(|| s.default_config());
            let code = runner::code_version(*s);
            let fp = runner::fingerprint(info.name, &code, &cfg, &inputs);
            match runner::decide(&dir, &fp, &code, &cfg, &inputs, false) {
                Decision::Skip(_) => "up to date".into(),
                Decision::Run(why) => format!("stale: {why}"),
                Decision::NotApplicable(why) => why,
            }
        };
        let deps = if info.deps.is_empty() { "-".to_string() } else { info.deps.join(",") };
        println!("  {:<8} v{:<2} deps {:<12} {:<28}  {}", info.name, info.version, deps, status, info.about);
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_schema(table: Option<String>) -> Result<ExitCode> {
    match table {
        Some(t) => print!("{}", tables::by_name(&t)?.describe()),
        None => {
            println!("canonical tables (tgrag schema <table> for columns):");
            for t in tables::ALL {
                println!("  {:<16} v{}  {:<22} {}", t.name, t.version, t.family, t.doc);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs one command.
pub fn dispatch(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Run(a) => cmd_run(args.outputs, args.quiet, a),
        Command::Stages(a) => cmd_stages(args.outputs, a),
        Command::Schema { table } => cmd_schema(table),
        Command::Sql { query, list } => sql::run(&args.outputs, &query, list),
        Command::Bm25(a) => crate::tools::cmd_bm25(a, args.quiet).map(|_| ExitCode::SUCCESS),
        Command::Embed(a) => crate::tools::cmd_embed(a, args.quiet).map(|_| ExitCode::SUCCESS),
        Command::Diffusion(a) => crate::topo_tools::cmd_diffusion(a).map(|_| ExitCode::SUCCESS),
        Command::Graphwave(a) => crate::topo_tools::cmd_graphwave(a).map(|_| ExitCode::SUCCESS),
        Command::Evaluate(a) => crate::eval_tool::cmd_evaluate(a).map(|_| ExitCode::SUCCESS),
        Command::TrainPlanner(a) => crate::plan_tool::cmd_train_planner(a, args.quiet).map(|_| ExitCode::SUCCESS),
        Command::Plan(a) => crate::plan_tool::cmd_plan(a, args.quiet).map(|_| ExitCode::SUCCESS),
        Command::Fetch { what, dest } => crate::tools::cmd_fetch(&what, dest).map(|_| ExitCode::SUCCESS),
    }
}
