//! Arguments (clap derive) and the dispatch to one command (`commands/<name>.rs`). Options with a
//! fixed set of values are typed (`clap::ValueEnum`), so clap itself lists and checks them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::commands;
use crate::lock::{FolderLock, folder_of};

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
    /// When another tgrag process writes into the same folder, wait for it instead of exiting
    /// (exit code 3).
    #[arg(long, global = true)]
    pub wait: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the stage DAG on a dataset; up-to-date stages are skipped, with the reason.
    Run(commands::run::RunArgs),
    /// List the stages, their dependencies and their status for a dataset.
    Stages(commands::DatasetArgs),
    /// Every stage option (or one stage's) with its type, default and doc; `--markdown` prints
    /// docs/options.md.
    Options(commands::options::OptionsArgs),
    /// Describe a table (or list them all).
    Schema(commands::schema::SchemaArgs),
    /// Run SQL (DataFusion) over every Parquet file under the outputs folder; tables are named
    /// `<dataset>_<stage>_<table>`.
    Sql(commands::sql::SqlArgs),
    /// BM25 over any corpus: `--corpus C.parquet --queries Q.parquet --out R.parquet`.
    Bm25(commands::bm25::Bm25Args),
    /// MiniLM sentence embeddings of any texts: `--input S.parquet --out E.parquet`.
    Embed(commands::embed::EmbedArgs),
    /// TopoRAG proximity embeddings P = Σ α_k Â^k R: `--edges E.parquet --projection R.parquet --out P.parquet`.
    Diffusion(commands::diffusion::DiffusionArgs),
    /// GraphWave role embeddings: `--edges E.parquet --scales 0.5,1,3 --points 25 --out W.parquet`.
    Graphwave(commands::graphwave::GraphwaveArgs),
    /// STaRK's evaluator over any run: `--run R.parquet --answers A.parquet --num-candidates N
    /// [--mode stark|mor] --out M.parquet` (per query: hit@1, hit@5, recall@20, MRR).
    Evaluate(commands::evaluate::EvaluateArgs),
    /// Prize-collecting Steiner trees (pcst_fast port) for any instances: `--nodes N.parquet
    /// --edges E.parquet --out DIR [--root -1] [--clusters 1] [--pruning gw]`.
    Pcst(commands::pcst::PcstArgs),
    /// Train the planner (metapath decoder + restriction tagger) on MoR's plan files:
    /// `--plans DIR --out MODEL_DIR`; reports metapath exact match and restriction token F1 on
    /// `plans_val.jsonl`.
    TrainPlanner(commands::train_planner::TrainPlannerArgs),
    /// Plans for any queries: `--model MODEL_DIR --queries Q.parquet --out P.parquet`.
    Plan(commands::plan::PlanArgs),
    /// Download: the sentence model (`minilm`), a STaRK dataset, a real dataset (`webqsp`,
    /// `explagraphs`, `enron`, ...) into the data root, or a hub model id `<owner>/<name>`.
    Fetch(commands::fetch::FetchArgs),
    /// The nightly job: every available dataset through every applicable stage, a dated result
    /// folder under `<outputs>/nightly/` (leaderboard, report, regressions, provenance) and the
    /// comparison with the previous night (exit 4 on a regression, 5 when a dataset failed).
    Nightly(commands::nightly::NightlyArgs),
    /// The nightly's cells as Slurm job arrays and a dependent collect job (`submit`), and their
    /// state read back (`status`): `tgrag slurm submit -- <nightly options>`.
    Slurm(commands::slurm::SlurmArgs),
    /// Render a nightly folder's report again from its Parquet alone: `--from DIR`.
    Report(commands::report::ReportArgs),
    /// Compare two nightly folders or outputs folders: `tgrag compare A B` (exit 4 on a regression).
    Compare(commands::compare::CompareArgs),
}

/// Runs one command. Commands that write hold the lock of the folder they write into
/// ([`crate::lock`]): `run` its `<outputs>/<dataset>` folder, the file tools their `--out` folder.
pub fn dispatch(args: Args) -> Result<ExitCode> {
    let (outputs, quiet, wait) = (args.outputs, args.quiet, args.wait);
    // A file tool writing under `<outputs>/<dataset>/` takes that dataset's lock, the one `run` holds.
    let lock = |out: &Path| FolderLock::acquire(&crate::lock::owner_folder(&outputs, &folder_of(out)), wait);
    match args.command {
        Command::Run(a) => commands::run::run(&outputs, quiet, wait, a),
        Command::Stages(a) => commands::stages::run(&outputs, a),
        Command::Options(a) => commands::options::run(a),
        Command::Schema(a) => commands::schema::run(a),
        Command::Sql(a) => commands::sql::run(&outputs, a),
        Command::Bm25(a) => lock(&a.out).and_then(|_l| commands::bm25::run(a, quiet)),
        // A shard writes its partition alone, under that folder's lock, so that every shard runs at once.
        Command::Embed(a) => match a.shard {
            Some(s) => FolderLock::acquire(&tgrag_stages::shared::shards::part_dir(&commands::embed::shards_root(&a.out), s), wait)
                .and_then(|_l| commands::embed::run(a, quiet)),
            None => lock(&a.out).and_then(|_l| commands::embed::run(a, quiet)),
        },
        Command::Diffusion(a) => lock(&a.out).and_then(|_l| commands::diffusion::run(a)),
        Command::Graphwave(a) => lock(&a.out).and_then(|_l| commands::graphwave::run(a)),
        Command::Evaluate(a) => lock(&a.out).and_then(|_l| commands::evaluate::run(a)),
        Command::Pcst(a) => FolderLock::acquire(&crate::lock::owner_folder(&outputs, &a.out), wait).and_then(|_l| commands::pcst::run(a)),
        Command::TrainPlanner(a) => lock(&a.out).and_then(|_l| commands::train_planner::run(a, quiet)),
        Command::Plan(a) => lock(&a.out).and_then(|_l| commands::plan::run(a, quiet)),
        Command::Fetch(a) => commands::fetch::run(a, quiet),
        Command::Nightly(a) => return commands::nightly::run(&outputs, quiet, wait, a),
        Command::Slurm(a) => return commands::slurm::run(&outputs, a),
        Command::Report(a) => commands::report::run(a, wait),
        Command::Compare(a) => return commands::compare::run(a),
    }
    .map(|()| ExitCode::SUCCESS)
}
