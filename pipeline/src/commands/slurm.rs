//! `tgrag slurm submit|status|shards`: a night's cells as Slurm job arrays, and their state read
//! back; one stage's embeddings as an array of shards.
//!
//! `submit` writes one sbatch array script per resource class of the plan's cells (task `i` runs
//! `tgrag nightly --cell <i-th cell>`), submits them, then a collect job
//! (`tgrag nightly --collect`) that waits for every array (`--dependency=afterany:…`: it runs
//! even when a cell failed, and the night says which). Scripts, logs and the job ids go to
//! `<outputs>/cells/<plan>/slurm/`. `status` reads the cells' records (and `squeue`, when there
//! is one) back.
//!
//! `shards` cuts one stage's sharded phase (the embeddings of `dense` or `textgraphs`, the
//! language-model rows of `gretriever` or `mixrag`) into an
//! array of `--count` shards: a prepare job runs the stages upstream, the array (after it) runs
//! `tgrag run --stages S --shard $SLURM_ARRAY_TASK_ID/N`, and a merge job (after the array) runs
//! `tgrag run` with the options given, which reads the partitions. Scripts and logs go to
//! `<outputs>/<dataset>/slurm/<stage>-<N>/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};
use clap::Parser as _;
use serde::{Deserialize, Serialize};
use tgrag_schemas::io;

use crate::commands::nightly::{NightlyArgs, plan_of};
use crate::commands::run::RunArgs;
use crate::nightly::cells::{self, Plan, Resources, State};

/// `tgrag slurm` arguments.
#[derive(Debug, clap::Args)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub command: SlurmCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SlurmCommand {
    /// Write and submit the night's cells as sbatch job arrays and a dependent collect job:
    /// `tgrag slurm submit [--sbatch=--partition=P] -- <nightly options>`.
    Submit(SubmitArgs),
    /// Every cell's state (done, failed, pending; the queue's state where `squeue` answers) and
    /// whether the night was collected: `tgrag slurm status -- <nightly options>`.
    Status(StatusArgs),
    /// One stage's embeddings as a job array of shards between a prepare and a merge job:
    /// `tgrag slurm shards --stage dense --count 8 -- <run options>` (`--status`: their state).
    Shards(ShardsArgs),
}

/// `tgrag slurm shards` arguments.
#[derive(Debug, clap::Args)]
pub struct ShardsArgs {
    /// The stage whose sharded phase the array runs (`dense`, `textgraphs`, `gretriever`, `mixrag`).
    #[arg(long)]
    pub stage: String,
    /// How many shards (array tasks).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(tgrag_stages::shared::shards::MAX_SHARDS)))]
    pub count: u32,
    /// Cores of each shard task.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus: u32,
    /// Memory of each shard task, GB.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub mem_gb: u32,
    /// Time limit of each shard task, minutes.
    #[arg(long, default_value_t = 240, value_parser = clap::value_parser!(u32).range(1..=525_600))]
    pub minutes: u32,
    /// An sbatch option for every job (repeatable), as `submit` takes it.
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// Write the scripts and print the sbatch commands; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print every shard's state (done, pending; the queue's state) and whether the merge ran.
    #[arg(long)]
    pub status: bool,
    /// `tgrag run` options after `--` (`--dataset`, `--size`, `--set`, …; `--stages` names what
    /// the merge job runs, everything by default).
    #[arg(last = true, value_name = "RUN OPTIONS")]
    pub run: Vec<String>,
}

/// `tgrag slurm submit` arguments.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// An sbatch option for every job, after the script's own (which it overrides):
    /// `--sbatch=--partition=long`, `--sbatch=--account=lab` (repeatable).
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// Write the scripts and print the sbatch commands; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The night's options, after `--` (as `tgrag nightly` takes them).
    #[arg(last = true, value_name = "NIGHTLY OPTIONS")]
    pub nightly: Vec<String>,
}

/// `tgrag slurm status` arguments.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The night's options, after `--` (those given to `submit`).
    #[arg(last = true, value_name = "NIGHTLY OPTIONS")]
    pub nightly: Vec<String>,
}

/// The nightly options alone, parsed as `tgrag nightly` parses them.
#[derive(Debug, clap::Parser)]
#[command(name = "tgrag nightly")]
struct NightlyOnly {
    #[command(flatten)]
    a: NightlyArgs,
}

fn nightly_args(given: &[String]) -> Result<NightlyArgs> {
    let parsed = NightlyOnly::try_parse_from(std::iter::once("nightly".to_string()).chain(given.iter().cloned()))
        .map_err(|e| config!("the nightly options after `--`: {}", e.to_string().trim()))?;
    if parsed.a.plan || parsed.a.cell.is_some() || parsed.a.collect {
        bail_config!("the nightly options after `--` take no --plan, --cell or --collect: the jobs add those");
    }
    Ok(parsed.a)
}

/// What `submit` recorded (`<outputs>/cells/<plan>/slurm/jobs.json`).
#[derive(Debug, Serialize, Deserialize)]
struct Jobs {
    plan: String,
    arrays: Vec<ArrayJob>,
    collect: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ArrayJob {
    job: String,
    script: PathBuf,
    cells: Vec<String>,
}

/// `'…'` for the shell: every byte kept, single quotes closed and escaped.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// What every job runs: the binary, from the submitting folder, with the outputs folder, the
/// command (`nightly`, `run`) and its options.
struct Invocation {
    exe: PathBuf,
    cwd: PathBuf,
    outputs: PathBuf,
    verb: &'static str,
    args: Vec<String>,
}

impl Invocation {
    /// The command line, the options quoted, then `last` as it is (shell words the script means).
    fn command(&self, last: &str) -> String {
        let mut parts = vec![sh_quote(&self.exe.display().to_string())];
        parts.extend(["--outputs".into(), sh_quote(&self.outputs.display().to_string()), "--quiet".into(), "--wait".into()]);
        parts.push(self.verb.into());
        parts.extend(self.args.iter().map(|a| sh_quote(a)));
        if !last.is_empty() {
            parts.push(last.into());
        }
        parts.join(" ")
    }
}

/// The array script of `cells` (one task each) with resources `r`.
fn array_script(inv: &Invocation, plan: &str, k: usize, cells: &[&str], r: Resources, logs: &Path) -> String {
    let list: Vec<String> = cells.iter().map(|c| sh_quote(c)).collect();
    let n = u32::try_from(cells.len()).unwrap_or(u32::MAX);
    job_script(
        &format!("tgrag-cells-{}-{k}", &plan[..8.min(plan.len())]),
        Some(n),
        r,
        &logs.join("%x-%a.out"),
        (&format!("tgrag nightly, plan {plan}: one cell per array task."), &format!("cells=({})", list.join(" "))),
        &inv.cwd,
        &inv.command("--cell \"${cells[$SLURM_ARRAY_TASK_ID]}\""),
    )
}

/// The collect job's script.
fn collect_script(inv: &Invocation, plan: &str, logs: &Path) -> String {
    job_script(
        &format!("tgrag-collect-{}", &plan[..8.min(plan.len())]),
        None,
        Resources { cpus: 1, mem_gb: 4, minutes: 60 },
        &logs.join("%x.out"),
        (&format!("tgrag nightly, plan {plan}: the night from its cells."), ""),
        &inv.cwd,
        &inv.command("--collect"),
    )
}

/// The runnable cells grouped by resources, in plan order within each group.
fn classes(plan: &Plan) -> Vec<(Resources, Vec<&str>)> {
    let mut by: BTreeMap<Resources, Vec<&str>> = BTreeMap::new();
    for c in plan.runnable() {
        by.entry(c.resources).or_default().push(c.id.as_str());
    }
    by.into_iter().collect()
}

/// Runs `sbatch --parsable` and returns the job id (`123` of `123;cluster`).
fn sbatch(args: &[String], script: &Path) -> Result<String> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .arg(script)
        .output()
        .map_err(|e| config!("sbatch: {e} (is Slurm installed, and sbatch on PATH?)"))?;
    if !out.status.success() {
        bail_config!("sbatch {}: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        bail_config!("sbatch {}: no job id in its answer {:?}", script.display(), text.trim());
    }
    Ok(id)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(std::env::current_dir().context("the current folder")?.join(p))
}

pub fn run(outputs: &Path, a: SlurmArgs) -> Result<ExitCode> {
    match a.command {
        SlurmCommand::Submit(s) => submit(outputs, s),
        SlurmCommand::Status(s) => status(outputs, s),
        SlurmCommand::Shards(s) if s.status => shards_status(outputs, s),
        SlurmCommand::Shards(s) => shards(outputs, s),
    }
}

fn submit(outputs: &Path, s: SubmitArgs) -> Result<ExitCode> {
    let na = nightly_args(&s.nightly)?;
    let plan = plan_of(&na)?;
    let groups = classes(&plan);
    if groups.is_empty() {
        bail_config!("plan {}: no runnable cell (every dataset is unavailable: `tgrag nightly --plan` says why)", plan.id);
    }
    let outputs = absolute(outputs)?;
    let dir = plan.dir(&outputs).join("slurm");
    let logs = dir.join("logs");
    io::ensure_owned_dir(&logs)?;
    let inv = Invocation {
        exe: std::env::current_exe().context("the tgrag binary's path")?,
        cwd: std::env::current_dir().context("the current folder")?,
        outputs: outputs.clone(),
        verb: "nightly",
        args: s.nightly.clone(),
    };
    let mut arrays = Vec::new();
    for (k, (r, ids)) in groups.iter().enumerate() {
        let script = dir.join(format!("cells-{k}.sbatch"));
        io::write_bytes_atomic(&script, array_script(&inv, &plan.id, k, ids, *r, &logs).as_bytes())?;
        let job = if s.dry_run {
            println!("sbatch --parsable {} {}", s.sbatch.join(" "), script.display());
            format!("<array {k}>")
        } else {
            sbatch(&s.sbatch, &script)?
        };
        println!(
            "array {job}: {} cell(s) ({}), {} cpus, {}G, {} each",
            ids.len(),
            ids.join(", "),
            r.cpus,
            r.mem_gb,
            cells::hours(r.minutes)
        );
        arrays.push(ArrayJob { job, script, cells: ids.iter().map(|c| c.to_string()).collect() });
    }
    let script = dir.join("collect.sbatch");
    io::write_bytes_atomic(&script, collect_script(&inv, &plan.id, &logs).as_bytes())?;
    let dependency = format!("--dependency=afterany:{}", arrays.iter().map(|a| a.job.as_str()).collect::<Vec<_>>().join(":"));
    let mut opts = s.sbatch.clone();
    opts.push(dependency);
    let collect = if s.dry_run {
        println!("sbatch --parsable {} {}", opts.join(" "), script.display());
        "<collect>".to_string()
    } else {
        sbatch(&opts, &script)?
    };
    println!("collect {collect}: after every array; the night goes to {}", outputs.join("nightly").display());
    if !s.dry_run {
        let jobs = Jobs { plan: plan.id.clone(), arrays, collect };
        let text = serde_json::to_string_pretty(&jobs).context("the job ids as JSON")?;
        io::write_bytes_atomic(&dir.join("jobs.json"), text.as_bytes())?;
    }
    println!("plan {}: scripts and logs in {}", plan.id, dir.display());
    Ok(ExitCode::SUCCESS)
}

/// The queue's state of every task of `jobs` (`123_4` → `RUNNING`), where `squeue` answers.
fn queue(jobs: &Jobs) -> BTreeMap<String, String> {
    let mut ids: Vec<&str> = jobs.arrays.iter().map(|a| a.job.as_str()).collect();
    ids.push(&jobs.collect);
    squeue(&ids)
}

/// `squeue`'s state of every task of the jobs `ids` (`123_4` → `RUNNING`); empty where it does not answer.
fn squeue(ids: &[&str]) -> BTreeMap<String, String> {
    let out = Command::new("squeue").args(["-h", "-r", "-o", "%i|%T", "-j", &ids.join(",")]).output();
    let Ok(out) = out else { return BTreeMap::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|').map(|(a, b)| (a.trim().to_string(), b.trim().to_string())))
        .collect()
}

fn status(outputs: &Path, s: StatusArgs) -> Result<ExitCode> {
    let na = nightly_args(&s.nightly)?;
    let plan = plan_of(&na)?;
    let dir = plan.dir(outputs);
    let jobs_file = dir.join("slurm").join("jobs.json");
    let jobs: Option<Jobs> = match std::fs::read_to_string(&jobs_file) {
        Ok(t) => Some(serde_json::from_str(&t).map_err(|e| input!("{}: not a job list: {e}", jobs_file.display()))?),
        Err(_) => None,
    };
    let queued = jobs.as_ref().map(queue).unwrap_or_default();
    let task_of = |cell: &str| -> Option<String> {
        let j = jobs.as_ref()?;
        j.arrays.iter().find_map(|a| a.cells.iter().position(|c| c == cell).map(|i| format!("{}_{i}", a.job)))
    };
    println!("plan {}: {}", plan.id, dir.display());
    let (mut done, mut failed, mut pending) = (0, 0, 0);
    for c in plan.runnable() {
        let line = match cells::read_record(&dir, &plan.id, &c.id)? {
            State::Done(r) if r.status == "ok" => {
                done += 1;
                format!("done in {:.1}s on {} ({} stage(s) ran)", r.seconds, r.host, r.ran.len())
            }
            State::Done(r) => {
                failed += 1;
                format!("failed: {}", r.detail)
            }
            State::Pending => {
                pending += 1;
                let task = task_of(&c.id);
                match task.as_ref().and_then(|t| queued.get(t).map(|q| (t, q))) {
                    Some((t, q)) => format!("pending: job {t} {q}"),
                    None => match task {
                        Some(t) => format!("pending: job {t} not in the queue (killed, or it ended without a record)"),
                        None => "pending: not submitted".to_string(),
                    },
                }
            }
        };
        println!("  {:<20} {line}", c.id);
    }
    let collected = dir.join("collected.json");
    let night = std::fs::read_to_string(&collected)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["folder"].as_str().map(str::to_string));
    match (night, jobs.as_ref().and_then(|j| queued.get(&j.collect))) {
        (Some(f), _) => println!("collected: {f}"),
        (None, Some(q)) => println!("not collected yet: job {} {q}", jobs.as_ref().map(|j| j.collect.as_str()).unwrap_or("")),
        (None, None) => println!("not collected yet"),
    }
    println!("{done} done, {failed} failed, {pending} pending");
    Ok(ExitCode::SUCCESS)
}

/// The run options alone, parsed as `tgrag run` parses them.
#[derive(Debug, clap::Parser)]
#[command(name = "tgrag run")]
struct RunOnly {
    #[command(flatten)]
    a: RunArgs,
}

fn run_args(given: &[String]) -> Result<RunArgs> {
    let parsed = RunOnly::try_parse_from(std::iter::once("run".to_string()).chain(given.iter().cloned()))
        .map_err(|e| config!("the run options after `--`: {}", e.to_string().trim()))?;
    if parsed.a.shard.is_some() || parsed.a.force {
        bail_config!("the run options after `--` take no --shard or --force: the jobs add what they need");
    }
    Ok(parsed.a)
}

/// What `shards` recorded (`<outputs>/<dataset>/slurm/<stage>-<N>/jobs.json`).
#[derive(Debug, Serialize, Deserialize)]
struct ShardJobs {
    stage: String,
    count: u32,
    prepare: String,
    shards: String,
    merge: String,
}

/// The sharded stage of `s`, its upstream stages and the folder of its scripts.
fn shard_plan(outputs: &Path, s: &ShardsArgs, ra: &RunArgs) -> Result<(&'static dyn tgrag_stages::Stage, Vec<&'static str>, PathBuf)> {
    let all = tgrag_stages::all();
    let sharded: Vec<&str> = all.iter().filter(|x| x.info().shards.is_some()).map(|x| x.info().name).collect();
    let Some(stage) = all.iter().copied().find(|x| x.info().name == s.stage && x.info().shards.is_some()) else {
        bail_config!("--stage {}: no such stage with a sharded phase; one of: {}", s.stage, sharded.join(", "));
    };
    let upstream = tgrag_stages::deps_of(stage, &all);
    let dataset = ra.dataset.resolve()?;
    let dir = outputs.join(&dataset.name).join("slurm").join(format!("{}-{}", s.stage, s.count));
    Ok((stage, upstream, dir))
}

/// One job's script: `array` tasks (0..n) or one task, resources `r`, the log file `log`, a
/// comment and shell lines before the command, the command `cmd` run from `cwd`.
fn job_script(name: &str, array: Option<u32>, r: Resources, log: &Path, (comment, prelude): (&str, &str), cwd: &Path, cmd: &str) -> String {
    let mut t = format!("#!/bin/bash\n#SBATCH --job-name={name}\n");
    if let Some(n) = array {
        t.push_str(&format!("#SBATCH --array=0-{}\n", n.saturating_sub(1)));
    }
    t.push_str(&format!(
        "#SBATCH --cpus-per-task={}\n#SBATCH --mem={}G\n#SBATCH --time={}\n#SBATCH --output={}\n# {comment}\nset -euo pipefail\n",
        r.cpus,
        r.mem_gb,
        cells::hours(r.minutes),
        log.display()
    ));
    if !prelude.is_empty() {
        t.push_str(prelude);
        t.push('\n');
    }
    t.push_str(&format!("export RAYON_NUM_THREADS=\"${{SLURM_CPUS_PER_TASK:-{}}}\"\n", r.cpus));
    t.push_str(&format!("cd {}\nexec {cmd}\n", sh_quote(&cwd.display().to_string())));
    t
}

fn shards(outputs: &Path, s: ShardsArgs) -> Result<ExitCode> {
    let ra = run_args(&s.run)?;
    let outputs = absolute(outputs)?;
    let (stage, upstream, dir) = shard_plan(&outputs, &s, &ra)?;
    let name = stage.info().name;
    let logs = dir.join("logs");
    io::ensure_owned_dir(&logs)?;
    // The run options without --stages: the prepare and shard jobs name their own.
    let mut base = Vec::new();
    let mut it = s.run.iter();
    while let Some(a) = it.next() {
        if a == "--stages" {
            it.next();
        } else if !a.starts_with("--stages=") {
            base.push(a.clone());
        }
    }
    let inv = |args: Vec<String>| -> Result<Invocation> {
        Ok(Invocation {
            exe: std::env::current_exe().context("the tgrag binary's path")?,
            cwd: std::env::current_dir().context("the current folder")?,
            outputs: outputs.clone(),
            verb: "run",
            args,
        })
    };
    let cwd = std::env::current_dir().context("the current folder")?;
    let tag = format!("{name}-{}", s.count);
    let small = Resources { cpus: 2, mem_gb: 8, minutes: 60 };
    let each = Resources { cpus: s.cpus, mem_gb: s.mem_gb, minutes: s.minutes };
    let mut scripts = Vec::new();
    let prepare = if upstream.is_empty() {
        None
    } else {
        let mut args = base.clone();
        args.extend(["--stages".to_string(), upstream.join(",")]);
        let text = job_script(
            &format!("tgrag-prepare-{tag}"),
            None,
            small,
            &logs.join("%x.out"),
            (&format!("tgrag run: the stages upstream of `{name}` ({})", upstream.join(", ")), ""),
            &cwd,
            &inv(args)?.command(""),
        );
        Some((dir.join("prepare.sbatch"), text))
    };
    let mut args = base.clone();
    args.extend(["--stages".to_string(), name.to_string()]);
    let shard_text = job_script(
        &format!("tgrag-shards-{tag}"),
        Some(s.count),
        each,
        &logs.join("%x-%a.out"),
        (&format!("tgrag run: `{name}`, shard $SLURM_ARRAY_TASK_ID of {} per array task", s.count), ""),
        &cwd,
        &inv(args)?.command(&format!("--shard \"${{SLURM_ARRAY_TASK_ID}}/{}\"", s.count)),
    );
    let merge_text = job_script(
        &format!("tgrag-merge-{tag}"),
        None,
        each,
        &logs.join("%x.out"),
        (&format!("tgrag run: `{name}` from its {} partitions, and the stages asked for", s.count), ""),
        &cwd,
        &inv(s.run.clone())?.command(""),
    );
    if let Some(p) = &prepare {
        scripts.push(p.clone());
    }
    scripts.push((dir.join("shards.sbatch"), shard_text));
    scripts.push((dir.join("merge.sbatch"), merge_text));
    for (path, text) in &scripts {
        io::write_bytes_atomic(path, text.as_bytes())?;
    }
    let submit = |extra: Option<String>, script: &Path, what: &str| -> Result<String> {
        let mut opts = s.sbatch.clone();
        opts.extend(extra);
        if s.dry_run {
            println!("sbatch --parsable {} {}", opts.join(" "), script.display());
            Ok(format!("<{what}>"))
        } else {
            sbatch(&opts, script)
        }
    };
    let prepare_job = match &prepare {
        Some((path, _)) => {
            let id = submit(None, path, "prepare")?;
            println!("prepare {id}: {}", upstream.join(", "));
            id
        }
        None => String::new(),
    };
    let after = |id: &str| (!id.is_empty()).then(|| format!("--dependency=afterok:{id}"));
    let shards_job = submit(after(&prepare_job), &dir.join("shards.sbatch"), "shards")?;
    println!(
        "shards {shards_job}: `{name}` in {} shards, {} cpus, {}G, {} each",
        s.count,
        each.cpus,
        each.mem_gb,
        cells::hours(each.minutes)
    );
    let merge_job = submit(after(&shards_job), &dir.join("merge.sbatch"), "merge")?;
    println!("merge {merge_job}: after every shard");
    if !s.dry_run {
        let jobs = ShardJobs { stage: name.to_string(), count: s.count, prepare: prepare_job, shards: shards_job, merge: merge_job };
        let text = serde_json::to_string_pretty(&jobs).context("the job ids as JSON")?;
        io::write_bytes_atomic(&dir.join("jobs.json"), text.as_bytes())?;
    }
    println!("scripts and logs in {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

fn shards_status(outputs: &Path, s: ShardsArgs) -> Result<ExitCode> {
    use tgrag_stages::shared::shards::{self as sh, Shard};
    let ra = run_args(&s.run)?;
    let outputs = absolute(outputs)?;
    let (stage, _, dir) = shard_plan(&outputs, &s, &ra)?;
    let name = stage.info().name;
    let dataset = ra.dataset.resolve()?;
    let stage_dir = outputs.join(&dataset.name).join(name);
    let parts = stage_dir.join(sh::SHARDS_DIR);
    let jobs_file = dir.join("jobs.json");
    let jobs: Option<ShardJobs> = match std::fs::read_to_string(&jobs_file) {
        Ok(t) => Some(serde_json::from_str(&t).map_err(|e| input!("{}: not a job list: {e}", jobs_file.display()))?),
        Err(_) => None,
    };
    let queued = match &jobs {
        Some(j) => {
            squeue(&[j.prepare.as_str(), j.shards.as_str(), j.merge.as_str()].into_iter().filter(|i| !i.is_empty()).collect::<Vec<_>>())
        }
        None => BTreeMap::new(),
    };
    // Merged: the stage finished after the jobs were submitted and its partitions are gone.
    let submitted = std::fs::metadata(&jobs_file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let merged = crate::runner::read_manifest(&stage_dir).is_some_and(|m| m.finished_at_unix >= submitted) && !parts.exists();
    println!("`{name}` of `{}` in {} shards: {}", dataset.name, s.count, parts.display());
    let (mut done, mut pending) = (0, 0);
    for shard in Shard::all(s.count) {
        let rec = std::fs::read_to_string(sh::part_dir(&parts, shard).join(sh::RECORD_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<sh::PartRecord>(&t).ok());
        let line = match rec {
            Some(r) => {
                done += 1;
                let by = if r.encoder.is_empty() { String::new() } else { format!(" ({})", r.encoder) };
                format!("done: {} in {:.1}s{by}", r.holds(), r.seconds)
            }
            None if merged => {
                done += 1;
                "merged".to_string()
            }
            None => {
                pending += 1;
                match jobs.as_ref().map(|j| format!("{}_{}", j.shards, shard.index())) {
                    Some(t) => match queued.get(&t) {
                        Some(q) => format!("pending: job {t} {q}"),
                        None => format!("pending: job {t} not in the queue (killed, or it ended without a partition)"),
                    },
                    None => "pending: not submitted".to_string(),
                }
            }
        };
        println!("  {:<8} {line}", shard.to_string());
    }
    match (merged, jobs.as_ref().and_then(|j| queued.get(&j.merge).map(|q| (j, q)))) {
        (true, _) => println!("merged: {}", stage_dir.display()),
        (false, Some((j, q))) => println!("not merged yet: job {} {q}", j.merge),
        (false, None) => println!("not merged yet"),
    }
    println!("{done} done, {pending} pending");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_quote_every_argument_and_map_array_tasks_to_cells() {
        let inv = Invocation {
            exe: PathBuf::from("/opt/tg rag/tgrag"),
            cwd: PathBuf::from("/work/it's here"),
            outputs: PathBuf::from("/shared/out"),
            verb: "nightly",
            args: vec!["--set".into(), "bm25.k1=1.2".into(), "--datasets".into(), "a;rm -rf /".into()],
        };
        let r = Resources { cpus: 4, mem_gb: 16, minutes: 90 };
        let s = array_script(&inv, "0123456789abcdef", 1, &["synthetic-tiny", "enron"], r, Path::new("/shared/out/logs"));
        for want in [
            "#SBATCH --array=0-1\n",
            "#SBATCH --cpus-per-task=4\n",
            "#SBATCH --mem=16G\n",
            "#SBATCH --time=1:30:00\n",
            "#SBATCH --job-name=tgrag-cells-01234567-1\n",
            "cells=('synthetic-tiny' 'enron')\n",
            "cd '/work/it'\\''s here'\n",
            "exec '/opt/tg rag/tgrag' --outputs '/shared/out' --quiet --wait nightly '--set' 'bm25.k1=1.2' '--datasets' 'a;rm -rf /' --cell \"${cells[$SLURM_ARRAY_TASK_ID]}\"\n",
        ] {
            assert!(s.contains(want), "{want:?} not in\n{s}");
        }
        // The quoted words read back as the originals in a real shell.
        let words = Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\n' {}", inv.args.iter().map(|a| sh_quote(a)).collect::<Vec<_>>().join(" ")))
            .output()
            .expect("bash");
        assert_eq!(String::from_utf8_lossy(&words.stdout).lines().collect::<Vec<_>>(), inv.args);
        let c = collect_script(&inv, "0123456789abcdef", Path::new("/l"));
        assert!(c.contains("nightly '--set' 'bm25.k1=1.2' '--datasets' 'a;rm -rf /' --collect\n"), "{c}");
        assert!(!c.contains("--array"), "{c}");
    }

    #[test]
    fn the_nightly_options_are_parsed_as_nightly_parses_them_and_cell_flags_refused() {
        assert!(nightly_args(&["--sizes".into(), "tiny".into()]).is_ok());
        let e = nightly_args(&["--cell".into(), "x".into()]).expect_err("cell");
        assert!(e.to_string().contains("--plan, --cell or --collect"), "{e}");
        let e = nightly_args(&["--sizes".into(), "huge".into()]).expect_err("bad size");
        assert!(e.to_string().contains("the nightly options after `--`"), "{e}");
    }
}
