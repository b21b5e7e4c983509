//! `tgrag nightly`, `tgrag report --from` and `tgrag compare`: unchanged code skips every stage and
//! reports nothing; a worse configuration is a regression (exit 4), its reversal an improvement;
//! the report re-renders byte for byte from its Parquet; two nights never overlap; SIGKILL at random
//! points never leaves a partial night; the HTML report renders in headless Chromium.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{stderr, stdout, table};

/// Small and fast: the tiny synthetic set with the hashing encoders and short trainings, and
/// MixRAG without its expert and depth ablations (eight more trainings: 6.6 of a night's 15.3 s of
/// stages on an AVX2-only CPU; the ablations run in `make nightly` and in the tiny runs of the
/// other tests). The hostile nightly cases use it too, with a `--keep` of their own.
pub(super) const FAST: [&str; 29] = [
    "--sizes",
    "tiny",
    "--no-stark",
    "--set",
    "dense.encoder=\"hash\"",
    "--set",
    "toporag.encoder=\"hash\"",
    "--set",
    "textgraphs.encoder=\"hash\"",
    "--set",
    "toporag.scales=[0.1]",
    "--set",
    "toporag.points=2",
    "--set",
    "toporag.nc_max_epochs=20",
    "--set",
    "toporag.lp_max_epochs=5",
    "--set",
    "gretriever.seeds=[0,1]",
    "--set",
    "gretriever.epochs=2",
    "--set",
    "gretriever.encoders=[\"gcn\"]",
    "--set",
    "gretriever.whole_graph=false",
    "--set",
    "mixrag.ablation_experts=false",
    "--set",
    "mixrag.ablation_depths=[]",
];

pub(super) fn nightly_cmd(outputs: &Path, data_root: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tgrag"));
    c.env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights"))
        .env_remove("TGRAG_DATA_ROOT")
        .arg("--outputs")
        .arg(outputs)
        .arg("--quiet")
        .arg("nightly")
        .arg("--data-root")
        .arg(data_root)
        .args(FAST)
        .arg("--keep=0")
        .args(extra);
    c
}

fn nightly(outputs: &Path, data_root: &Path, extra: &[&str]) -> Output {
    nightly_cmd(outputs, data_root, extra).output().expect("spawn tgrag nightly")
}

fn nights(outputs: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(outputs.join("nightly"))
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A visible night has every file, and its leaderboard reads.
fn complete(dir: &Path) {
    for f in [
        "leaderboard.parquet",
        "nightly_datasets.parquet",
        "nightly_timings.parquet",
        "regressions.parquet",
        "provenance.json",
        "report.md",
        "report.html",
    ] {
        assert!(dir.join(f).is_file(), "{} lacks {f}", dir.display());
    }
    assert!(tgrag_schemas::io::read_parquet(&dir.join("leaderboard.parquet")).is_ok());
}

fn statuses(dir: &Path) -> Vec<(String, String, String, String)> {
    use arrow::array::AsArray;
    let r = table(&dir.join("regressions.parquet"));
    let c = |n: &str| r.column_by_name(n).expect(n).as_string::<i32>().clone();
    let (st, me, mt, sp) = (c("status"), c("method"), c("metric"), c("split"));
    (0..r.num_rows())
        .map(|i| (st.value(i).to_string(), me.value(i).to_string(), mt.value(i).to_string(), sp.value(i).to_string()))
        .collect()
}

#[test]
fn nights_skip_unchanged_work_flag_regressions_and_improvements_and_rerender_from_parquet() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, empty) = (d.path().join("out"), d.path().join("no-data"));
    std::fs::create_dir_all(&empty).expect("mkdir");
    // Night 1: everything runs.
    let first = nightly(&o, &empty, &[]);
    assert_eq!(first.status.code(), Some(0), "{}\n{}", stdout(&first), stderr(&first));
    assert!(stdout(&first).contains("first night"), "{}", stdout(&first));
    // Night 2, unchanged code and settings: every stage skipped, nothing regressed, exit 0.
    let second = nightly(&o, &empty, &[]);
    assert_eq!(second.status.code(), Some(0), "{}\n{}", stdout(&second), stderr(&second));
    let n = nights(&o);
    assert_eq!(n.len(), 2);
    for dir in &n {
        complete(dir);
    }
    let ds = table(&n[1].join("nightly_datasets.parquet"));
    use arrow::array::AsArray;
    let ran = ds.column_by_name("stages_ran").expect("ran").as_primitive::<arrow::datatypes::UInt32Type>();
    let skipped = ds.column_by_name("stages_skipped").expect("skipped").as_primitive::<arrow::datatypes::UInt32Type>();
    assert_eq!(ran.value(0), 0, "the second night runs nothing");
    assert!(skipped.value(0) >= 10, "{}", skipped.value(0));
    let s2 = statuses(&n[1]);
    assert!(!s2.is_empty() && s2.iter().all(|s| s.0 == "unchanged"), "{s2:?}");
    let lb1 = std::fs::read(n[0].join("leaderboard.parquet")).expect("lb");
    assert_eq!(lb1, std::fs::read(n[1].join("leaderboard.parquet")).expect("lb"), "same code, same leaderboard bytes");
    // Night 3: a worse configuration of one method (BM25 keeps one hit per query) is a regression.
    let third = nightly(&o, &empty, &["--set", "bm25.top_k=1"]);
    assert_eq!(third.status.code(), Some(4), "{}\n{}", stdout(&third), stderr(&third));
    assert!(stdout(&third).contains("REGRESSION synthetic-tiny metrics/bm25 recall20"), "{}", stdout(&third));
    let n = nights(&o);
    let s3 = statuses(&n[2]);
    assert!(s3.iter().any(|s| s.0 == "regression" && s.1 == "bm25" && s.2 == "recall20"), "{s3:?}");
    let report = std::fs::read_to_string(n[2].join("report.md")).expect("report");
    let at = |s: &str| report.find(s).unwrap_or(usize::MAX);
    assert!(at("### Regressions") < at("## Datasets"), "the diff comes first:\n{report}");
    // `tgrag compare` judges the same pair the same way.
    let cmp = Command::new(env!("CARGO_BIN_EXE_tgrag")).args(["compare"]).arg(&n[1]).arg(&n[2]).output().expect("compare");
    assert_eq!(cmp.status.code(), Some(4), "{}", stderr(&cmp));
    assert!(stdout(&cmp).contains("regression  synthetic-tiny metrics/bm25 recall20"), "{}", stdout(&cmp));
    let same = Command::new(env!("CARGO_BIN_EXE_tgrag")).args(["compare"]).arg(&n[0]).arg(&n[1]).output().expect("compare");
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    // Night 4: back to the defaults, an improvement, which does not fail the night.
    let fourth = nightly(&o, &empty, &[]);
    assert_eq!(fourth.status.code(), Some(0), "{}\n{}", stdout(&fourth), stderr(&fourth));
    assert!(stdout(&fourth).contains("improvement synthetic-tiny metrics/bm25 recall20"), "{}", stdout(&fourth));
    // The report renders again, byte for byte, from the folder's Parquet alone.
    let n = nights(&o);
    let last = &n[3];
    let (md, html) = (std::fs::read(last.join("report.md")).expect("md"), std::fs::read(last.join("report.html")).expect("html"));
    let plots: Vec<PathBuf> = std::fs::read_dir(last.join("plots")).expect("plots").flatten().map(|e| e.path()).collect();
    assert!(plots.len() >= 4, "figures: {plots:?}");
    std::fs::remove_file(last.join("report.md")).expect("rm");
    std::fs::remove_file(last.join("report.html")).expect("rm");
    std::fs::remove_dir_all(last.join("plots")).expect("rm");
    let r = Command::new(env!("CARGO_BIN_EXE_tgrag")).args(["report", "--from"]).arg(last).output().expect("report");
    assert!(r.status.success(), "{}", stderr(&r));
    assert_eq!(std::fs::read(last.join("report.md")).expect("md"), md);
    assert_eq!(std::fs::read(last.join("report.html")).expect("html"), html);
    chromium_check(&last.join("report.html"), &["synthetic-tiny"], plots.len());
    // Two nights never overlap: the second says who holds the lock and exits with code 3.
    let mut held = nightly_cmd(&o, &empty, &["--force"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let mut line = String::new();
    BufReader::new(held.stdout.take().expect("stdout")).read_line(&mut line).expect("line");
    assert!(line.starts_with("tgrag nightly "), "{line}");
    let refused = nightly(&o, &empty, &[]);
    let _ = held.kill();
    let _ = held.wait();
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("in use by another tgrag process (pid") && stderr(&refused).contains("nightly"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn a_night_killed_at_random_points_leaves_no_partial_folder_and_the_next_one_completes() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, empty) = (d.path().join("out"), d.path().join("no-data"));
    std::fs::create_dir_all(&empty).expect("mkdir");
    // The length of a whole forced night, to spread the kills over it.
    let t0 = Instant::now();
    let full = nightly(&o, &empty, &["--force"]);
    assert_eq!(full.status.code(), Some(0), "{}", stderr(&full));
    let length = t0.elapsed().as_secs_f64();
    let mut state: u64 = 0x5eed_2026;
    let mut rnd = || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut mid_run = 0;
    for kill in 0..6 {
        let before = nights(&o).len();
        let mut child = nightly_cmd(&o, &empty, &["--force"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
        let at = Duration::from_secs_f64(length * (0.05 + 0.9 * rnd()));
        std::thread::sleep(at);
        let running = child.try_wait().expect("wait").is_none();
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let now = nights(&o);
        // Either the night finished before the kill (one more complete folder) or nothing new is visible.
        assert!(now.len() == before || now.len() == before + 1, "kill {kill}: {now:?}");
        mid_run += usize::from(running && now.len() == before);
        for dir in &now {
            complete(dir);
        }
    }
    // The kills must have hit running nights (not only finished ones) for the test to mean anything.
    assert!(mid_run >= 3, "only {mid_run} of 6 kills landed while a night was running");
    let last = nightly(&o, &empty, &[]);
    assert_eq!(last.status.code(), Some(0), "{}\n{}", stdout(&last), stderr(&last));
    let hidden: Vec<_> = std::fs::read_dir(o.join("nightly"))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .map(|e| e.path())
        .collect();
    assert!(hidden.is_empty(), "partial folders left after a completed night: {hidden:?}");
    for dir in nights(&o) {
        complete(&dir);
    }
}

/// Opens `page` in headless Chromium: no console message (the report logs nothing, except a failed
/// figure), every dataset's heading and every figure in the DOM, a screenshot written. A planted
/// error page shows the check can fail. Skipped (failed under `CI=true`) without Chromium.
fn chromium_check(page: &Path, datasets: &[&str], figures: usize) {
    let Some(chromium) =
        ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].iter().map(Path::new).find(|p| p.is_file())
    else {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true: chromium is missing (the Makefile installs Debian's chromium)"
        );
        eprintln!("skipped the browser check: no chromium (the Makefile's `make test` installs it)");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let run = |page: &Path, extra: &[&str]| -> Output {
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=3000",
            ])
            .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("spawn chromium")
    };
    let console = |o: &Output| -> Vec<String> { stderr(o).lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect() };
    let shot = dir.path().join("report.png");
    let s = run(page, &["--window-size=1280,3000", &format!("--screenshot={}", shot.display())]);
    assert!(console(&s).is_empty(), "console messages: {:?}", console(&s));
    assert!(std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0) > 20_000, "screenshot missing or blank");
    let dom = stdout(&run(page, &["--dump-dom"]));
    for ds in datasets {
        assert!(dom.contains(&format!("Dataset <code>{ds}</code>")), "no section for {ds}");
    }
    assert_eq!(dom.matches("<img ").count(), figures, "every figure is in the page");
    // The check can fail: a page with a script error is caught.
    let bad = dir.path().join("bad.html");
    std::fs::write(&bad, "<!DOCTYPE html><html><body><script>notDefined();</script></body></html>").expect("write");
    assert!(!console(&run(&bad, &["--dump-dom"])).is_empty(), "a script error must show in the console log");
}
