//! A night split into cells: `--plan` lists them, `--cell` runs one (a killed cell leaves no record
//! and its rerun skips what it finished), `--collect` gathers them into the bytes of a one-machine
//! night; and the same matrix through a real one-node Slurm (`tgrag slurm submit`, `status`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::nightly::FAST;
use super::{stderr, stdout};

/// A data root with one real dataset (PrimeKG's DrugMechDB paths, copied from ../shared) beside
/// the tiny synthetic one; `enron` is asked for and unavailable. None (skipped) without ../shared.
fn matrix_root(d: &Path) -> Option<PathBuf> {
    let src = super::shared_or_skip("datasets/primekg-drugmechdb-paths", "benchmark_pathways_nodes.csv")?;
    let root = d.join("data");
    let dst = root.join("primekg-drugmechdb-paths");
    std::fs::create_dir_all(&dst).expect("mkdir");
    for e in std::fs::read_dir(&src).expect("read shared") {
        let e = e.expect("entry");
        if e.path().is_file() {
            std::fs::copy(e.path(), dst.join(e.file_name())).expect("copy");
        }
    }
    Some(root)
}

const MATRIX: [&str; 2] = ["--datasets", "synthetic-tiny,primekg-paths,enron"];

fn night(outputs: &Path, root: &Path, extra: &[&str]) -> Command {
    let mut c = super::nightly::nightly_cmd(outputs, root, &MATRIX);
    c.args(extra);
    c
}

/// The night's options, as every command of the matrix takes them.
fn nightly_options(root: &Path) -> Vec<String> {
    let mut v = vec!["--data-root".to_string(), root.display().to_string()];
    v.extend(FAST.iter().map(|s| s.to_string()));
    v.extend(MATRIX.iter().map(|s| s.to_string()));
    v.push("--keep=0".into());
    v
}

fn out(c: &mut Command) -> Output {
    c.output().expect("spawn tgrag")
}

/// The one night under `<outputs>/nightly`, or the newest.
fn newest_night(outputs: &Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(outputs.join("nightly"))
        .expect("nightly folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    v.sort();
    v.pop().expect("a night")
}

/// Every table of the night that does not depend on the run, byte for byte; and the datasets'
/// statuses (their seconds depend on the run).
fn assert_same_night(one: &Path, collected: &Path) {
    let mut compared = 0;
    for spec in tgrag_schemas::tables::ALL.iter().filter(|t| t.family == "nightly" && !t.run_dependent) {
        let file = format!("{}.parquet", spec.name);
        let (a, b) = (std::fs::read(one.join(&file)).expect("one"), std::fs::read(collected.join(&file)).expect("collected"));
        assert!(a == b, "{file} differs between the one-machine night and the collected cells");
        compared += 1;
    }
    assert!(compared >= 4, "{compared}");
    let statuses = |dir: &Path| {
        use arrow::array::AsArray;
        let t = super::table(&dir.join("nightly_datasets.parquet"));
        let c = |n: &str| t.column_by_name(n).expect(n).as_string::<i32>().iter().map(|s| s.unwrap_or("").to_string()).collect::<Vec<_>>();
        (c("dataset"), c("status"))
    };
    assert_eq!(statuses(one), statuses(collected));
    let lb = super::table(&one.join("leaderboard.parquet"));
    assert!(lb.num_rows() > 10, "the matrix scores something: {} rows", lb.num_rows());
}

#[test]
fn cells_run_apart_and_collected_give_the_bytes_of_a_one_machine_night() {
    let d = tempfile::tempdir().expect("tmp");
    let Some(root) = matrix_root(d.path()) else { return };
    let (one, split) = (d.path().join("one"), d.path().join("split"));

    let o = out(&mut night(&one, &root, &[]));
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));

    let plan = out(&mut night(&split, &root, &["--plan"]));
    assert_eq!(plan.status.code(), Some(0), "{}", stderr(&plan));
    let text = stdout(&plan);
    assert!(text.starts_with("plan ") && text.contains("3 cell(s), 2 runnable"), "{text}");
    let ids: Vec<String> =
        text.lines().skip(2).filter(|l| l.contains("runnable")).filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect();
    assert_eq!(ids, ["synthetic-tiny", "primekg-paths"], "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("enron") && l.contains("unavailable")), "{text}");
    let plan_id = text.split_whitespace().nth(1).expect("id").trim_end_matches(':').to_string();
    let records = split.join("cells").join(&plan_id);

    // Not a cell of the plan; an unavailable one: config errors before any work.
    let bad = out(&mut night(&split, &root, &["--cell", "synthetic-medium"]));
    assert_eq!(bad.status.code(), Some(78), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("not a cell of this night's plan") && stderr(&bad).contains("synthetic-tiny, primekg-paths"),
        "{}",
        stderr(&bad)
    );
    let bad = out(&mut night(&split, &root, &["--cell", "enron"]));
    assert_eq!(bad.status.code(), Some(78), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("unavailable"), "{}", stderr(&bad));

    // A collect before any cell ran: every dataset failed (no record), no night to compare with later.
    let early = out(&mut night(&split, &root, &["--collect"]));
    assert_eq!(early.status.code(), Some(5), "{}\n{}", stdout(&early), stderr(&early));
    assert!(stdout(&early).contains("has no record"), "{}", stdout(&early));

    // The synthetic cell killed once its first stages finished: no record; the rerun skips those.
    let mut child = night(&split, &root, &["--cell", "synthetic-tiny"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let first = split.join("synthetic-tiny").join("ingest").join("manifest.json");
    let t0 = Instant::now();
    while !first.is_file() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(first.is_file(), "the cell wrote its first stage");
    assert!(!records.join("synthetic-tiny.json").exists(), "a killed cell leaves no record");
    let rerun = out(&mut night(&split, &root, &["--cell", "synthetic-tiny"]));
    assert_eq!(rerun.status.code(), Some(0), "{}\n{}", stdout(&rerun), stderr(&rerun));
    let verb = |stage: &str| {
        stdout(&rerun).lines().find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&stage)).then(|| w.get(1).map_or(String::new(), |v| v.to_string()))
        })
    };
    assert_eq!(verb("ingest").as_deref(), Some("skipped"), "{}", stdout(&rerun));
    assert!(records.join("synthetic-tiny.json").is_file());

    let o = out(&mut night(&split, &root, &["--cell", "primekg-paths"]));
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let c = out(&mut night(&split, &root, &["--collect"]));
    assert_eq!(c.status.code(), Some(0), "{}\n{}", stdout(&c), stderr(&c));
    assert!(stdout(&c).contains(&format!("collected the cells of plan {plan_id}")), "{}", stdout(&c));
    assert_same_night(&newest_night(&one), &newest_night(&split));
}

/// `tests/slurm/cluster.sh`, from the repository.
fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/slurm/cluster.sh")
}

/// Stops the one-node cluster when the test ends, however it ends.
struct Cluster(PathBuf);

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(cluster_script()).arg("stop").arg(&self.0).status();
    }
}

fn tgrag_slurm(outputs: &Path, conf: &Path, args: &[&str], root: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tgrag"))
        .env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights"))
        .env("SLURM_CONF", conf)
        .env_remove("TGRAG_DATA_ROOT")
        .arg("--outputs")
        .arg(outputs)
        .arg("slurm")
        .args(args)
        .arg("--")
        .args(nightly_options(root))
        .output()
        .expect("spawn tgrag slurm")
}

#[test]
fn the_matrix_through_a_real_one_node_slurm_collects_to_the_one_machine_night() {
    let d = tempfile::tempdir().expect("tmp");
    let Some(root) = matrix_root(d.path()) else { return };
    let state = d.path().join("slurm");
    let start = Command::new("bash").arg(cluster_script()).arg("start").arg(&state).output().expect("cluster.sh");
    if start.status.code() == Some(77) {
        super::skip(&format!("no one-node Slurm here: {}", stderr(&start).trim()));
        return;
    }
    let _cluster = Cluster(state.clone());
    assert!(start.status.success(), "cluster.sh start:\n{}\n{}", stdout(&start), stderr(&start));
    let conf = state.join("slurm.conf");
    let (one, split) = (d.path().join("one"), d.path().join("split"));

    let t0 = Instant::now();
    let o = out(&mut night(&one, &root, &[]));
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let one_machine = t0.elapsed();

    let t0 = Instant::now();
    let sub = tgrag_slurm(&split, &conf, &["submit", "--sbatch=--mem=2G"], &root);
    assert!(sub.status.success(), "{}\n{}", stdout(&sub), stderr(&sub));
    let text = stdout(&sub);
    eprintln!("tgrag slurm submit:\n{text}");
    let collect_id =
        text.lines().find_map(|l| l.strip_prefix("collect ")).and_then(|l| l.split(':').next()).expect("collect job id").to_string();
    assert!(collect_id.bytes().all(|b| b.is_ascii_digit()), "{text}");
    // The collect job ends when every array has: wait for it to leave the queue.
    let queued = |id: &str| {
        let q = Command::new("squeue").env("SLURM_CONF", &conf).args(["-h", "-j", id, "-o", "%T"]).output().expect("squeue");
        !String::from_utf8_lossy(&q.stdout).trim().is_empty()
    };
    while queued(&collect_id) {
        assert!(t0.elapsed() < Duration::from_secs(600), "the Slurm jobs did not finish in 10 min");
        std::thread::sleep(Duration::from_millis(250));
    }
    let through_slurm = t0.elapsed();
    let status = tgrag_slurm(&split, &conf, &["status"], &root);
    assert!(status.status.success(), "{}", stderr(&status));
    let st = stdout(&status);
    eprintln!("tgrag slurm status:\n{st}");
    eprintln!("one machine {:.1} s, through Slurm {:.1} s", one_machine.as_secs_f64(), through_slurm.as_secs_f64());
    assert!(st.contains("2 done, 0 failed, 0 pending") && st.contains("collected: "), "{st}");
    let logs = std::fs::read_dir(split.join("cells")).expect("cells").flatten().next().expect("plan").path().join("slurm/logs");
    for e in std::fs::read_dir(&logs).expect("logs").flatten() {
        eprintln!("== {}\n{}", e.path().display(), std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    assert_same_night(&newest_night(&one), &newest_night(&split));

    // One stage's embeddings through the same cluster: a prepare job, an array of 3 shards after it,
    // and a merge job after them, against the same stage run on one machine.
    let (one_run, sharded) = (d.path().join("one-run"), d.path().join("sharded"));
    let opts = ["--dataset", "synthetic", "--size", "tiny", "--set", "dense.encoder=\"hash\"", "--stages", "dense"];
    let o = Command::new(env!("CARGO_BIN_EXE_tgrag"))
        .arg("--outputs")
        .arg(&one_run)
        .arg("--quiet")
        .arg("run")
        .args(opts)
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", stderr(&o));
    let shards = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tgrag"))
            .env("SLURM_CONF", &conf)
            .arg("--outputs")
            .arg(&sharded)
            .args(["slurm", "shards", "--stage", "dense", "--count", "3", "--mem-gb", "1", "--minutes", "10"])
            .args(extra)
            .arg("--")
            .args(opts)
            .output()
            .expect("spawn tgrag slurm shards")
    };
    let t0 = Instant::now();
    let sub = shards(&[]);
    assert!(sub.status.success(), "{}\n{}", stdout(&sub), stderr(&sub));
    let text = stdout(&sub);
    eprintln!("tgrag slurm shards:\n{text}");
    let merge_id = text.lines().find_map(|l| l.strip_prefix("merge ")).and_then(|l| l.split(':').next()).expect("merge job id").to_string();
    while queued(&merge_id) {
        assert!(t0.elapsed() < Duration::from_secs(600), "the shard jobs did not finish in 10 min");
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("3 shards and their merge through Slurm: {:.1} s", t0.elapsed().as_secs_f64());
    let st = shards(&["--status"]);
    let st_text = stdout(&st);
    eprintln!("tgrag slurm shards --status:\n{st_text}");
    let logs = sharded.join("synthetic/slurm/dense-3/logs");
    for e in std::fs::read_dir(&logs).expect("logs").flatten() {
        eprintln!("== {}\n{}", e.path().display(), std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    assert!(st.status.success() && st_text.contains("3 done, 0 pending") && st_text.contains("merged: "), "{st_text}");
    let merge_log = std::fs::read_to_string(logs.join("tgrag-merge-dense-3.out")).unwrap_or_default();
    assert!(merge_log.contains("3 of 3 shard partitions read"), "{merge_log}");
    for t in ["embeddings", "query_embeddings", "run"] {
        let (a, b) = (one_run.join(format!("synthetic/dense/{t}.parquet")), sharded.join(format!("synthetic/dense/{t}.parquet")));
        assert!(std::fs::read(&a).expect("one") == std::fs::read(&b).expect("sharded"), "{t}: the merged table differs from one run's");
    }
}
