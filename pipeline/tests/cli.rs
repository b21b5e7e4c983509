//! End-to-end tests of the `tgrag` binary (one integration-test binary for the whole crate).

// A test crate: a failed expectation is the report (the workspace denies these in library code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array};

#[path = "cli/cells.rs"]
mod cells;
#[path = "cli/docs.rs"]
mod docs;
#[path = "cli/fetch.rs"]
mod fetch;
#[path = "cli/file_tools.rs"]
mod file_tools;
#[path = "cli/hostile.rs"]
pub(crate) mod hostile;
#[path = "cli/hostile_data.rs"]
mod hostile_data;
#[path = "cli/hostile_hub.rs"]
mod hostile_hub;
#[path = "cli/hostile_models.rs"]
mod hostile_models;
#[path = "cli/hostile_nightly.rs"]
mod hostile_nightly;
#[path = "cli/hostile_sql.rs"]
mod hostile_sql;
#[path = "cli/hostile_train.rs"]
mod hostile_train;
#[path = "cli/nightly.rs"]
mod nightly;
#[path = "cli/outputs.rs"]
mod outputs;
#[path = "cli/shards.rs"]
mod shards;

/// A test server on 127.0.0.1 (the local mirrors of the hub tests): every connection is handled
/// on its own thread by `handle(stream, endpoint, stop)`; it accepts until the returned flag is set
/// (a mirror sets it when dropped) or for 120 s at most. Returns the endpoint (`http://127.0.0.1:P`).
fn serve_local(
    handle: impl Fn(std::net::TcpStream, &str, &std::sync::atomic::AtomicBool) + Send + Sync + 'static,
) -> (String, Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, base, handle) = (stop.clone(), endpoint.clone(), Arc::new(handle));
    std::thread::spawn(move || {
        let start = Instant::now();
        while !stop2.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(120) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let (handle, base, stop) = (handle.clone(), base.clone(), stop2.clone());
                    std::thread::spawn(move || handle(stream, &base, &stop));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (endpoint, stop)
}

fn tgrag(outputs: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tgrag"))
        // The MiniLM model that `make models` (a prerequisite of `make test`) puts in weights/.
        .env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights"))
        .arg("--outputs")
        .arg(outputs)
        .arg("--quiet")
        .args(args)
        .output()
        .expect("spawn tgrag")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "tgrag failed:\nstdout:\n{}\nstderr:\n{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// Lines of `tgrag run` output for each stage: (stage, verb).
fn verbs(out: &str) -> Vec<(String, String)> {
    // The stage lines come before `done in …`; the per-family summary tables follow it.
    out.lines()
        .take_while(|l| !l.starts_with("done in"))
        .filter(|l| l.starts_with("  "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// Whether a file under an outputs folder differs between runs by nature: a table its schema
/// declares run-dependent (timings, latency), or a manifest (it records them).
fn run_dependent(name: &str) -> bool {
    name == "manifest.json"
        || name.strip_suffix(".parquet").and_then(|t| tgrag_schemas::tables::by_name(t).ok()).is_some_and(|spec| spec.run_dependent)
}

/// Every file under `dir` (relative path → bytes), except run-dependent ones.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if run_dependent(&name) {
                continue;
            }
            out.insert(p.strip_prefix(dir).expect("prefix").to_path_buf(), std::fs::read(&p).expect("read"));
        }
    }
    out
}

fn files_named(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if pred(&e.file_name().to_string_lossy()) {
                out.push(p);
            }
        }
    }
    out
}

/// `args` with the hashing encoder in place of MiniLM for every stage that embeds text (`dense`,
/// `toporag`, `textgraphs`), and TopoRAG's GNNs trained for a few epochs: for the tests of the runner
/// (cache, force, SQL over the outputs), where MiniLM would only add time (half of a tiny run) and
/// the GNNs' full trainings half of what is left. MiniLM and the full trainings run end to end, a
/// second run skipping every stage, in
/// `outputs::a_tiny_run_shows_every_family_and_its_tables_read_in_polars_and_duckdb`.
fn hashed<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend(["--set", "dense.encoder=\"hash\"", "--set", "toporag.encoder=\"hash\"", "--set", "textgraphs.encoder=\"hash\""]);
    v.extend(["--set", "toporag.nc_max_epochs=20", "--set", "toporag.lp_max_epochs=5"]);
    v
}

#[test]
fn second_run_skips_everything_force_reruns_and_config_change_reruns_downstream() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let first = ok(tgrag(o, &hashed(&["run", "--size", "tiny"])));
    let v = verbs(&first);
    assert_eq!(
        v.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
        vec![
            "ingest",
            "graph",
            "bm25",
            "dense",
            "planning",
            "mor",
            "pasemiqa",
            "toporag",
            "textgraphs",
            "subgraphs",
            "gretriever",
            "mixrag",
            "metrics",
            "report"
        ],
        "{first}"
    );
    assert!(v.iter().all(|x| x.1 == "ran"), "{first}");
    assert!(first.contains("report:"), "{first}");

    // Every stage skipped, each because it is up to date (not a wall-clock bound: that measures the
    // machine, not the cache).
    let second = ok(tgrag(o, &hashed(&["run", "--size", "tiny"])));
    let v2 = verbs(&second);
    assert_eq!(v2.len(), v.len(), "{second}");
    assert!(v2.iter().all(|x| x.1 == "skipped"), "{second}");
    let skipped_lines = second.lines().filter(|l| l.starts_with("  ") && l.contains("up to date")).count();
    assert_eq!(skipped_lines, v.len(), "every stage says it is up to date: {second}");
    assert!(second.contains("up to date"), "{second}");

    let forced = ok(tgrag(o, &hashed(&["run", "--size", "tiny", "--force"])));
    assert!(verbs(&forced).iter().all(|x| x.1 == "ran"), "{forced}");
    assert!(forced.contains("--force"), "{forced}");

    // A config change reruns the stage and, because its outputs change, its dependents: MoR ranks
    // with the bm25 stage's own index, so its parameters reach MoR's runs.
    let mor_run = std::fs::read(o.join("synthetic/mor/run.parquet")).expect("mor run");
    let changed = ok(tgrag(o, &hashed(&["run", "--size", "tiny", "--set", "bm25.k1=0.3", "--set", "bm25.b=0.2"])));
    let v: BTreeMap<String, String> = verbs(&changed).into_iter().collect();
    let verb = |s: &str| v.get(s).map(String::as_str).unwrap_or("");
    assert_eq!((verb("ingest"), verb("graph"), verb("dense"), verb("pasemiqa")), ("skipped", "skipped", "skipped", "skipped"), "{changed}");
    assert_eq!((verb("bm25"), verb("mor"), verb("metrics")), ("ran", "ran", "ran"), "{changed}");
    assert!(changed.contains("config changed") && changed.contains("input `bm25` changed"), "{changed}");
    assert_ne!(std::fs::read(o.join("synthetic/mor/run.parquet")).expect("mor run"), mor_run, "the bm25 parameters reach MoR");
    let index = tgrag_schemas::io::read_parquet(&o.join("synthetic/bm25/bm25_index.parquet")).expect("index");
    assert_eq!(index.num_rows(), 1, "one persisted index (scope `*`), the one MoR uses");
    assert_eq!(tgrag_schemas::columns::f32s(&index, "k1").expect("k1").value(0), 0.3);

    // A tampered output is detected.
    let report = o.join("synthetic/report/report.md");
    std::fs::write(&report, "edited").expect("edit");
    let again = ok(tgrag(o, &hashed(&["run", "--size", "tiny", "--set", "bm25.k1=0.3", "--set", "bm25.b=0.2"])));
    assert!(again.contains("report.md was modified"), "{again}");

    // Outputs written by another build of the code (here: a manifest whose code version differs, as
    // after editing models/src/planner.rs) are stale, and `tgrag stages` says why.
    let manifest_path = o.join("synthetic/mor/manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).expect("manifest")).expect("json");
    let code = m["code_version"].as_str().expect("code_version").to_string();
    assert!(code.starts_with("mor@v") && code.contains(" code "), "{code}");
    // As another build would have written it: another code version, hence another cache key.
    m["code_version"] = serde_json::Value::String(code.replace(" code ", " code 0"));
    m["fingerprint"] = serde_json::Value::String("0".repeat(64));
    std::fs::write(&manifest_path, serde_json::to_string(&m).expect("json")).expect("write manifest");
    let stages = ok(tgrag(o, &hashed(&["stages", "--size", "tiny", "--set", "bm25.k1=0.3", "--set", "bm25.b=0.2"])));
    let mor_line = stages.lines().find(|l| l.trim_start().starts_with("mor ")).expect("mor line");
    assert!(mor_line.contains("stale: code changed"), "{stages}");

    // A different size is a different dataset content: ingest reruns.
    let other = ok(tgrag(o, &hashed(&["run", "--size", "tiny", "--seed", "7", "--stages", "ingest"])));
    assert_eq!(verbs(&other), vec![("ingest".into(), "ran".into())], "{other}");
    assert!(other.contains("input `dataset` changed"), "{other}");
}

#[test]
fn sql_counts_nodes_and_schema_and_stages_describe() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    ok(tgrag(o, &hashed(&["run", "--size", "tiny"])));
    let nodes = tgrag_schemas::io::read_parquet(&o.join("synthetic/ingest/nodes.parquet")).expect("nodes");
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM synthetic_ingest_nodes"]));
    assert!(out.contains(&format!("| {} ", nodes.num_rows())), "{out}");
    // Joins across stages work on the registered names.
    let out = ok(tgrag(o, &["sql", "SELECT method, count(*) AS q FROM synthetic_metrics_per_query GROUP BY method"]));
    assert!(
        out.contains("bm25")
            && out.contains("| dense-hash ")
            && out.contains("| mor ")
            && out.contains("| mor-no-rerank ")
            && out.contains("| pasemiqa ")
            && out.contains("| 80 "),
        "{out}"
    );
    // The structure-aware reranker beats MoR without it on the validation queries (mean hit@1).
    let pq = tgrag_schemas::io::read_parquet(&o.join("synthetic/metrics/per_query.parquet")).expect("per_query");
    let (method, split) =
        (tgrag_schemas::columns::strs(&pq, "method").expect("method"), tgrag_schemas::columns::strs(&pq, "split").expect("split"));
    let hit1 = tgrag_schemas::columns::f64s(&pq, "hit1").expect("hit1");
    let mean = |m: &str| {
        let v: Vec<f64> = (0..pq.num_rows()).filter(|&i| method.value(i) == m && split.value(i) == "val").map(|i| hit1.value(i)).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    assert!(mean("mor") > mean("mor-no-rerank"), "mor {} vs mor-no-rerank {}", mean("mor"), mean("mor-no-rerank"));
    let list = ok(tgrag(o, &["sql", "--list", ""]));
    assert!(list.contains("synthetic_bm25_run") && list.contains("synthetic_ingest_tag_edges"), "{list}");

    let schema = ok(tgrag(o, &["schema", "nodes"]));
    assert!(schema.contains("node_id") && schema.contains("UInt32") && schema.contains("schema version 1"), "{schema}");
    // Every table any stage writes is declared, and `tgrag schema` lists them all; wall-clock
    // tables are marked run-dependent.
    let listing = ok(tgrag(o, &["schema"]));
    for t in tgrag_schemas::tables::ALL {
        assert!(listing.lines().any(|l| l.split_whitespace().next() == Some(t.name)), "{} missing from:\n{listing}", t.name);
    }
    for stage in tgrag_stages::all() {
        for t in stage.info().outputs {
            assert!(tgrag_schemas::tables::by_name(t).is_ok(), "stage {} writes the undeclared table {t}", stage.info().name);
        }
    }
    for t in ["timings", "latency"] {
        assert!(ok(tgrag(o, &["schema", t])).contains("run-dependent"), "{t}");
    }
    assert!(!ok(tgrag(o, &["schema", "scores"])).contains("run-dependent"));
    // Every Parquet file of the run is a declared table and reads back as it.
    for f in files_named(&o.join("synthetic"), |n| n.ends_with(".parquet")) {
        let stem = f.file_stem().expect("stem").to_string_lossy().into_owned();
        let spec = tgrag_schemas::tables::by_name(&stem).unwrap_or_else(|_| panic!("{} is not a declared table", f.display()));
        tgrag_schemas::io::read_table(&f, spec).unwrap_or_else(|e| panic!("{e}"));
    }
    // The scores table holds every evaluation: the ranking metrics of every run, TopoRAG's context
    // quality and its node-classification and link-prediction results.
    let out = ok(tgrag(
        o,
        &[
            "sql",
            "SELECT stage, count(DISTINCT method) AS m FROM (SELECT * FROM synthetic_metrics_scores UNION ALL SELECT * FROM synthetic_toporag_scores) GROUP BY stage ORDER BY stage",
        ],
    ));
    for (stage, methods) in [("bm25", 1), ("dense", 1), ("mor", 4), ("pasemiqa", 1), ("toporag", 6)] {
        assert!(out.lines().any(|l| l.contains(&format!("| {stage} ")) && l.contains(&format!("| {methods} "))), "{stage}: {out}");
    }
    let out = ok(tgrag(o, &["sql", "SELECT DISTINCT metric FROM synthetic_toporag_scores ORDER BY metric"]));
    for m in ["accuracy", "bleu4", "hits_at_100", "minilm_cosine", "rouge_l_f1"] {
        assert!(out.contains(&format!("| {m} ")), "{m}: {out}");
    }
    let bad = tgrag(o, &["schema", "nope"]);
    assert!(!bad.status.success() && stderr(&bad).contains("unknown table `nope`"));

    let stages = ok(tgrag(o, &hashed(&["stages", "--size", "tiny"])));
    assert_eq!(stages.matches("up to date").count(), tgrag_stages::all().len(), "{stages}");
    let stale = ok(tgrag(o, &hashed(&["stages", "--size", "tiny", "--set", "metrics.mode=mor"])));
    assert!(stale.contains("stale: config changed"), "{stale}");
}

#[test]
fn arguments_are_validated_before_any_work() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    for (args, msg) in [
        (vec!["run", "--size", "huge"], "invalid value 'huge' for '--size <SIZE>'"),
        (vec!["bm25", "--corpus", "c", "--queries", "q", "--out", "o", "--variant", "bm26"], "invalid value 'bm26'"),
        (
            vec!["evaluate", "--run", "r", "--answers", "a", "--num-candidates", "3", "--out", "o", "--mode", "x"],
            "[possible values: stark, mor]",
        ),
        (vec!["run", "--stages", "ingest,nope"], "unknown stage `nope`"),
        (vec!["run", "--set", "bm25.k9=1"], "no option `k9`"),
        (vec!["run", "--set", "bm25.b=2"], "b must be within [0, 1]"),
        (vec!["run", "--dataset", "citeseer"], "not available"),
        (vec!["run", "--dataset", "nope"], "unknown dataset `nope`"),
    ] {
        let out = tgrag(o, &args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(stderr(&out).contains(msg), "{args:?}: {}", stderr(&out));
    }
    assert!(!o.join("synthetic").exists(), "nothing may be written before validation passes");
}

// ---- bad input files -------------------------------------------------------------------------

const NODES: &str = "node_id,node_type,name,doc\n0,product,Trail Tent,A waterproof tent\n1,brand,Zentra,A brand\n2,product,Mug,A steel mug\n3,color,red,red\n";
const EDGES: &str = "src,dst,relation\n0,1,has_brand\n2,1,has_brand\n0,3,has_color\n";
const QUERIES: &str = "query_id,text,split\n0,waterproof tent by Zentra,test\n1,steel mug,train\n";
const ANSWERS: &str = "query_id,node_id\n0,0\n1,2\n";

fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    for (name, text) in files {
        std::fs::write(d.path().join(name), text).expect("write");
    }
    d
}

fn base_with(replace: &str, text: &str) -> tempfile::TempDir {
    let mut files = vec![("nodes.csv", NODES), ("edges.csv", EDGES), ("queries.csv", QUERIES), ("answers.csv", ANSWERS)];
    let stem = |n: &str| n.split('.').next().unwrap_or("").to_string();
    files.retain(|f| stem(f.0) != stem(replace));
    if !replace.ends_with(".parquet") {
        files.push((replace, text));
    }
    folder(&files)
}

/// Runs a folder dataset that must fail; checks the message and that nothing was left behind.
fn expect_rejected(data: &Path, must_contain: &[&str]) {
    let out_dir = tempfile::tempdir().expect("tmp");
    let o = out_dir.path();
    let out = tgrag(o, &["run", "--dataset", "mine", "--data-dir", data.to_str().expect("utf8")]);
    let err = stderr(&out);
    assert!(!out.status.success(), "should fail; stdout: {}", stdout(&out));
    for m in must_contain {
        assert!(err.contains(m), "missing `{m}` in error:\n{err}");
    }
    let left = files_named(o, |n| n.ends_with(".parquet") || n.ends_with(".tmp") || n == "manifest.json");
    assert!(left.is_empty(), "artifacts left behind: {left:?}");
    assert!(!o.join("mine/ingest").exists(), "stage folder left behind");
}

#[test]
fn a_valid_folder_dataset_runs_end_to_end() {
    let data = base_with("none", "");
    let d = tempfile::tempdir().expect("tmp");
    let out = ok(tgrag(d.path(), &["run", "--dataset", "mine", "--data-dir", data.path().to_str().expect("utf8")]));
    // Every stage runs except those of the other families: `toporag` needs a text-attributed
    // graph, the GraphQA stages per-question graphs.
    let other_family = ["toporag", "textgraphs", "subgraphs", "gretriever", "mixrag"];
    let v = verbs(&out);
    assert!(v.iter().all(|x| x.1 == "ran" || (other_family.contains(&x.0.as_str()) && x.1 == "n/a")), "{out}");
    assert!(v.iter().filter(|x| x.1 == "ran").count() >= 9, "{out}");
    let agg = ok(tgrag(d.path(), &["sql", "SELECT hit1 FROM mine_metrics_aggregate WHERE group_by = 'all'"]));
    assert!(agg.contains("| 1.0 ") || agg.contains("| 1 "), "both toy queries are answered at rank 1:\n{agg}");
}

#[test]
fn truncated_csv_is_rejected_with_file_row_and_column() {
    // The file ends mid-row: "3,color,red,red\n" becomes "3,color,re", so the row has no `doc`.
    let cut = &NODES[..NODES.len() - 6];
    assert!(cut.ends_with("3,color,re"));
    let data = base_with("nodes.csv", cut);
    expect_rejected(data.path(), &["nodes.csv", "row 3", "column `doc`", "missing value"]);
}

#[test]
fn wrong_column_type_is_rejected_with_file_row_and_column() {
    let data = base_with("edges.csv", "src,dst,relation\n0,1,has_brand\n2,one,has_brand\n");
    expect_rejected(data.path(), &["edges.csv", "row 1", "column `dst`", "`one` is not a valid UInt32"]);
}

#[test]
fn edge_to_missing_node_is_rejected_with_file_row_and_column() {
    let data = base_with("edges.csv", "src,dst,relation\n0,1,has_brand\n2,1,has_brand\n0,42,has_color\n");
    expect_rejected(data.path(), &["edges.csv", "row 2", "column `dst`", "node_id 42 which does not exist"]);
}

#[test]
fn duplicate_node_id_is_rejected_with_file_row_and_column() {
    let data = base_with("nodes.csv", &format!("{NODES}1,brand,Again,dup\n"));
    expect_rejected(data.path(), &["nodes.csv", "row 4", "column `node_id`", "duplicate node_id 1 (first at row 1)"]);
}

fn nodes_parquet(ids: ArrayRef) -> RecordBatch {
    let n = ids.len();
    RecordBatch::try_from_iter(vec![
        ("node_id", ids),
        ("node_type", Arc::new(StringArray::from(vec!["product"; n])) as ArrayRef),
        ("name", Arc::new(StringArray::from(vec!["x"; n])) as ArrayRef),
        ("doc", Arc::new(StringArray::from(vec!["d"; n])) as ArrayRef),
    ])
    .expect("batch")
}

#[test]
fn wrong_parquet_type_and_truncated_parquet_are_rejected() {
    // node_id stored as float: rejected at its first row, naming the column and both types.
    let data = base_with("nodes.parquet", "");
    let p = data.path().join("nodes.parquet");
    let floats: ArrayRef = Arc::new(Float64Array::from(vec![0.0, 1.0, 2.0, 3.0]));
    tgrag_schemas::io::write_parquet_atomic(&p, &nodes_parquet(floats)).expect("write");
    expect_rejected(data.path(), &["nodes.parquet", "row 0", "column `node_id`", "has type Float64, expected UInt32"]);

    // A truncated Parquet file has lost its footer: the file is named and said to be unreadable.
    let ids: ArrayRef = Arc::new(UInt32Array::from(vec![0, 1, 2, 3]));
    tgrag_schemas::io::write_parquet_atomic(&p, &nodes_parquet(ids)).expect("write");
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, &bytes[..bytes.len() - 20]).expect("truncate");
    expect_rejected(data.path(), &["nodes.parquet", "not a readable Parquet file (truncated or corrupt?)"]);
}

// ---- crash safety and determinism ------------------------------------------------------------

#[test]
fn sigkill_at_any_stage_then_rerun_gives_the_bytes_of_a_clean_run() {
    // `small` (the size `make run` uses): every stage still runs long enough to be caught mid-flight,
    // while `medium` made this the slowest test of the suite (about four medium runs, 6-10 min on 2
    // cores). The hashing encoder keeps it fast; MiniLM's determinism is checked below.
    // A small GraphWave (one scale, two points), few correlation pairs and short GNN trainings keep
    // `toporag` quick too; so do short planner and reranker trainings for `mor` (not a kill target:
    // its default 20 reranker epochs were a third of each run).
    const RUN: [&str; 41] = [
        "run",
        "--size",
        "small",
        "--set",
        "mor.planner_epochs=5",
        "--set",
        "mor.reranker_epochs=2",
        "--set",
        "dense.encoder=\"hash\"",
        "--set",
        "toporag.encoder=\"hash\"",
        "--set",
        "toporag.scales=[0.1]",
        "--set",
        "toporag.points=2",
        "--set",
        "toporag.max_pairs=20000",
        "--set",
        "toporag.nc_max_epochs=20",
        "--set",
        "toporag.lp_max_epochs=5",
        "--set",
        "textgraphs.encoder=\"hash\"",
        "--set",
        "gretriever.seeds=[0]",
        "--set",
        "gretriever.epochs=1",
        "--set",
        "gretriever.encoders=[\"gcn\"]",
        "--set",
        "gretriever.text_head=false",
        "--set",
        "gretriever.whole_graph=false",
        "--set",
        "mixrag.seeds=[0]",
        "--set",
        "mixrag.epochs=1",
        "--set",
        "mixrag.ablation_experts=false",
        "--set",
        "mixrag.ablation_depths=[]",
    ];
    let clean = tempfile::tempdir().expect("tmp");
    ok(tgrag(clean.path(), &RUN));
    let reference = snapshot(clean.path());
    assert!(reference.keys().any(|k| k.ends_with("report/report.md")));

    // Same inputs twice give the same bytes.
    let twice = tempfile::tempdir().expect("tmp");
    ok(tgrag(twice.path(), &RUN));
    let again = snapshot(twice.path());
    let differ: Vec<_> = reference.keys().chain(again.keys()).filter(|k| reference.get(*k) != again.get(*k)).collect();
    assert!(differ.is_empty(), "two clean runs differ in {differ:?}");

    let crashed = tempfile::tempdir().expect("tmp");
    let o = crashed.path();
    let mut kills = 0;
    let mut last_killed = false;
    for stage in ["ingest", "graph", "bm25", "dense", "toporag", "subgraphs", "gretriever", "metrics", "report"] {
        let dir = o.join("synthetic").join(stage);
        let mut child = Command::new(env!("CARGO_BIN_EXE_tgrag"))
            .env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights"))
            .arg("--outputs")
            .arg(o)
            .arg("--quiet")
            .args(RUN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        // Wait until the stage is mid-flight: its folder exists without a manifest (temporary files
        // being written, or outputs committed but the manifest not yet written).
        let t0 = Instant::now();
        last_killed = false;
        loop {
            if dir.is_dir() && !dir.join("manifest.json").exists() {
                child.kill().expect("SIGKILL");
                kills += 1;
                last_killed = true;
                break;
            }
            if child.try_wait().expect("wait").is_some() || t0.elapsed() > Duration::from_secs(60) {
                break;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        let _ = child.wait();
    }
    eprintln!("killed mid-stage {kills} times");
    assert!(kills >= 3, "the run was killed mid-stage only {kills} times");
    let resumed = ok(tgrag(o, &RUN));
    // When the last attempt missed its stage's window (a fast stage on a busy machine), that run
    // finished and there is nothing left to resume; the bytes must match all the same.
    if last_killed {
        assert!(resumed.contains("no complete previous run") || resumed.contains("no previous run"), "{resumed}");
    }
    let got = snapshot(o);
    assert!(files_named(o, |n| n.ends_with(".tmp")).is_empty(), "temporary files left");
    assert_eq!(got.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>());
    for (k, v) in &reference {
        assert!(got.get(k) == Some(v), "{} differs from the clean run", k.display());
    }
}

#[test]
fn minilm_dense_stage_is_deterministic_and_needs_the_model() {
    // Two runs of `dense` alone, with the `ingest` it reads (`--stages` runs what a stage needs):
    // the outputs compared are dense's. The whole pipeline's bytes are compared run to run in
    // `sigkill_at_any_stage_then_rerun_gives_the_bytes_of_a_clean_run`.
    let (a, b) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
    ok(tgrag(a.path(), &["run", "--size", "tiny", "--stages", "dense"]));
    ok(tgrag(b.path(), &["run", "--size", "tiny", "--stages", "dense"]));
    let (sa, sb) = (snapshot(a.path()), snapshot(b.path()));
    let dense: Vec<_> = sa.keys().filter(|k| k.to_string_lossy().contains("dense/")).collect();
    assert!(!dense.is_empty());
    for k in dense {
        assert!(sa.get(k) == sb.get(k), "{} differs between two MiniLM runs", k.display());
    }
    // The embeddings are MiniLM's: 384 wide and unit length.
    let emb = tgrag_schemas::io::read_parquet(&a.path().join("synthetic/dense/embeddings.parquet")).expect("embeddings");
    let col = emb.column_by_name("embedding").expect("embedding");
    let list = col.as_any().downcast_ref::<arrow::array::FixedSizeListArray>().expect("fixed size list");
    assert_eq!(list.value_length(), 384);
    let v = list.value(0);
    let v = v.as_any().downcast_ref::<arrow::array::Float32Array>().expect("f32");
    let norm: f32 = v.values().iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    // A missing model is a clear error naming the fix.
    let c = tempfile::tempdir().expect("tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_tgrag"))
        .env("TGRAG_MODELS", c.path())
        .arg("--outputs")
        .arg(c.path())
        .args(["--quiet", "run", "--size", "tiny"])
        .output()
        .expect("spawn");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("no MiniLM model") && err.contains("make models"), "{err}");
    // Checked before any stage runs, naming every option that does without the model.
    for o in ["--set dense.encoder=hash", "--set toporag.encoder=hash", "--set textgraphs.encoder=hash"] {
        assert!(err.contains(o), "missing `{o}` in: {err}");
    }
    assert!(!c.path().join("synthetic/ingest").exists(), "no stage may run before the model check");
    // With every such option set, the run needs no model.
    let hashed = Command::new(env!("CARGO_BIN_EXE_tgrag"))
        .env("TGRAG_MODELS", c.path())
        .arg("--outputs")
        .arg(c.path())
        .args(["--quiet", "run", "--size", "tiny", "--stages", "dense", "--set", "dense.encoder=hash"])
        .output()
        .expect("spawn");
    assert!(hashed.status.success(), "{}", stderr(&hashed));
}

// ---- STaRK and the file tools ---------------------------------------------------------------------

#[test]
fn stark_mirror_runs_end_to_end() {
    let mirror = fixture("stark-hf-mirror");
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let m = mirror.to_str().expect("utf8 path");
    let out = tgrag(o, &["run", "--dataset", "stark-mag", "--data-dir", m]);
    assert!(out.status.success(), "{}", stderr(&out));
    for f in ["ingest/nodes.parquet", "bm25/run.parquet", "report/report.md"] {
        assert!(o.join("stark-mag").join(f).is_file(), "missing {f}");
    }
    let nodes = o.join("stark-mag/ingest/nodes.parquet");
    let sql = tgrag(o, &["sql", "SELECT count(*) AS n FROM stark_mag_ingest_nodes"]);
    assert!(String::from_utf8_lossy(&sql.stdout).contains("317"), "{}", String::from_utf8_lossy(&sql.stdout));
    assert!(nodes.is_file());
}

#[test]
fn real_raw_datasets_run_from_their_own_files() {
    let Some(root) = shared_or_skip("datasets", "") else { return };
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    for (name, folder, query, want) in [
        ("enron", "enron-sample", "SELECT count(*) AS n FROM enron_ingest_emails", "1000"),
        ("citeseer", "citeseer-text", "SELECT count(*) AS n FROM citeseer_ingest_tag_nodes WHERE key IS NOT NULL", "3186"),
        ("explagraphs", "explagraphs", "SELECT count(DISTINCT graph_id) AS n FROM explagraphs_ingest_graph_nodes", "2766"),
    ] {
        let dir = root.join(folder);
        // The hashing encoder and short GNN trainings keep the TopoRAG stage fast here (MiniLM and
        // the paper's epochs: ~4 min on 2 cores for CiteSeer). ExplaGraphs' node, edge and question
        // texts are hashed too: MiniLM over its 10,071 texts took 55 s of this test on an AVX2-only
        // CPU, and MiniLM runs every stage of the tiny run in `outputs::a_tiny_run_…`.
        let fast = [
            "--set",
            "toporag.encoder=\"hash\"",
            "--set",
            "toporag.nc_max_epochs=15",
            "--set",
            "toporag.lp_max_epochs=5",
            "--set",
            "textgraphs.encoder=\"hash\"",
        ];
        let mut args = vec!["run", "--dataset", name, "--data-dir", dir.to_str().expect("utf8 path")];
        args.extend(fast);
        // ExplaGraphs: one seed of G-Retriever's graph transformer on G-Retriever's split (the
        // small configuration of the `gretriever` stage; the README has the full one).
        args.extend(["--set", "gretriever.seeds=[0]", "--set", "gretriever.encoders=[\"gt\"]", "--set", "gretriever.efficient=false"]);
        args.extend(["--set", "gretriever.text_head=false"]);
        // MixRAG: the full model, one seed, no ablations.
        args.extend(["--set", "mixrag.seeds=[0]", "--set", "mixrag.ablation_experts=false", "--set", "mixrag.ablation_depths=[]"]);
        ok(tgrag(o, &args));
        let out = ok(tgrag(o, &["sql", query]));
        assert!(out.contains(want), "{name}: {out}");
    }
    // ExplaGraphs: the graph transformer over the whole graph beats answering the majority class
    // ("support", 0.5884 of G-Retriever's test split) on test, on hashed text features too (0.641
    // on an AVX2-only EPYC; 0.652 with MiniLM's).
    let acc = |method: &str| -> f64 {
        let q = format!(
            "SELECT value FROM explagraphs_gretriever_scores WHERE method = '{method}' AND split = 'test' AND metric = 'accuracy' AND seed IS NULL"
        );
        let out = ok(tgrag(o, &["sql", &q]));
        let v = out.lines().filter_map(|l| l.trim().trim_matches('|').trim().parse::<f64>().ok()).next();
        v.unwrap_or_else(|| panic!("{method}: no accuracy in {out}"))
    };
    let (gt, majority) = (acc("gretriever-gt"), acc("majority"));
    assert!((majority - 0.5884).abs() < 5e-4, "majority {majority}");
    assert!(gt > majority + 0.03, "gretriever-gt {gt} vs majority {majority}");
    // MixRAG answered all 554 test questions, and its gate weights are distributions over the
    // three experts for every node it saw.
    let out = ok(tgrag(
        o,
        &[
            "sql",
            "SELECT n FROM explagraphs_mixrag_scores WHERE method = 'mixrag' AND split = 'test' AND metric = 'accuracy' AND seed IS NULL",
        ],
    ));
    assert!(out.contains("| 554 "), "{out}");
    let out = ok(tgrag(
        o,
        &["sql", "SELECT count(*) AS bad FROM explagraphs_mixrag_gate_weights WHERE abs(entity + relation + subgraph - 1.0) > 1e-4"],
    ));
    assert!(out.contains("| 0 "), "{out}");
    // CiteSeer: 3,186 papers, 2,823 with ≥ 100 words; 10% of them (283) partially observed, each with
    // top-3 texts from the four retrievers that retrieve, and the GNNs trained on 6 feature sets
    // (5 retrievers + oracle): 3 models for node classification, one link predictor.
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM citeseer_toporag_split WHERE split = 'partial'"]));
    assert!(out.contains("283"), "{out}");
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM citeseer_toporag_retrieved"]));
    assert!(out.contains(&(283 * 3 * 4).to_string()), "{out}");
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM citeseer_toporag_node_classification WHERE test_nodes = 283"]));
    assert!(out.contains("| 18 "), "{out}");
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM citeseer_toporag_link_prediction"]));
    assert!(out.contains("| 6 "), "{out}");
    // Enron, the e-mail variant: 1,000 e-mails, 978 after repeats and ≤ 3-word bodies are dropped,
    // the newest 98 are targets; retrieval pools the closest people's e-mails.
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM enron_toporag_email_split WHERE split = 'partial'"]));
    assert!(out.contains("| 98 "), "{out}");
    let out = ok(tgrag(o, &["sql", "SELECT count(*) AS n FROM enron_toporag_email_retrieved WHERE retriever = 'topo-proximity'"]));
    assert!(out.contains(&format!("| {} ", 98 * 3)), "{out}");
}

/// `../shared/<rel>` when `<rel>/<marker>` exists there; otherwise prints why the calling test
/// skips (the shared data is absent) and gives `None` — except under `CI=true`, where the shared data
/// must be present and its absence fails the test.
fn shared_or_skip(rel: &str, marker: &str) -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared").join(rel);
    if d.join(marker).exists() {
        return Some(d);
    }
    let test = std::thread::current().name().unwrap_or("test").to_string();
    skip(&format!("{test}: {} not found (the shared data is absent)", d.join(marker).display()));
    None
}

/// Prints why a test skips, except under `CI=true`, where the shared data and the model (`make
/// models`, a prerequisite of `make test`) must be there and their absence fails the test.
fn skip(why: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}, and CI=true requires it");
    eprintln!("SKIP {why}");
}

/// `<repo>/tests/fixtures/<name>`: the committed reference outputs (`tests/fixtures/README.md`);
/// they are part of the repository, so a missing one fails the test.
fn fixture(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(name);
    assert!(d.is_dir(), "{} not found: the fixtures are committed under tests/fixtures", d.display());
    d
}

/// Rows of a fixture table for one `graph_id`, without the `graph_id` column (and with `alpha_id`
/// equal to `alpha` when the table has one), as the file tools read them.
fn fixture_rows(path: &Path, graph: i32, alpha: Option<i32>) -> RecordBatch {
    use arrow::array::AsArray;
    let b = tgrag_schemas::io::read_parquet(path).expect("fixture");
    let g = b.column_by_name("graph_id").expect("graph_id").as_primitive::<arrow::datatypes::Int32Type>();
    let a = b.column_by_name("alpha_id").map(|c| c.as_primitive::<arrow::datatypes::Int32Type>().clone());
    let keep: arrow::array::BooleanArray =
        (0..b.num_rows()).map(|i| Some(g.value(i) == graph && alpha.is_none_or(|x| a.as_ref().is_some_and(|a| a.value(i) == x)))).collect();
    let f = arrow::compute::filter_record_batch(&b, &keep).expect("filter");
    let idx: Vec<usize> =
        (0..f.num_columns()).filter(|&i| !["graph_id", "alpha_id"].contains(&f.schema().field(i).name().as_str())).collect();
    f.project(&idx).expect("project")
}

fn f64_col(b: &RecordBatch, name: &str) -> Vec<f64> {
    use arrow::array::AsArray;
    let c = arrow::compute::cast(b.column_by_name(name).expect("column"), &arrow::datatypes::DataType::Float64).expect("cast");
    c.as_primitive::<arrow::datatypes::Float64Type>().values().to_vec()
}

#[test]
fn diffusion_and_graphwave_commands_reproduce_the_fixtures() {
    let (diff, gw) = (fixture("diffusion"), fixture("graphwave"));
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("outputs");
    // Graph 2 of the diffusion fixture: ER, 1,000 nodes, undirected; alpha_id 1 = (0.5, 0.3, 0.2).
    let (e, r, p) = (tmp.path().join("E.parquet"), tmp.path().join("R.parquet"), tmp.path().join("P.parquet"));
    tgrag_schemas::io::write_parquet_atomic(&e, &fixture_rows(&diff.join("edges.parquet"), 2, None)).expect("edges");
    tgrag_schemas::io::write_parquet_atomic(&r, &fixture_rows(&diff.join("R.parquet"), 2, None)).expect("R");
    for (flag, tol) in [(None, 1e-4), (Some("--f64"), 1e-9)] {
        let mut args = vec![
            "diffusion",
            "--edges",
            e.to_str().expect("utf8"),
            "--projection",
            r.to_str().expect("utf8"),
            "--alpha",
            "0.5,0.3,0.2",
            "--out",
            p.to_str().expect("utf8"),
        ];
        args.extend(flag);
        ok(tgrag(&out, &args));
        let got = tgrag_schemas::io::read_parquet(&p).expect("P");
        let want = fixture_rows(&diff.join("P.parquet"), 2, Some(1));
        assert_eq!(got.num_rows(), 1000);
        assert_eq!(f64_col(&got, "node"), f64_col(&want, "node"));
        for c in 0..32 {
            let name = format!("p{c:02}");
            for (g, w) in f64_col(&got, &name).iter().zip(f64_col(&want, &name)) {
                assert!((g - w).abs() <= tol * w.abs().max(1.0), "{name}: {g} vs {w}");
            }
        }
    }
    // GraphWave on graph 1 (house_cycle, 40 nodes), exact mode, fixture's column layout.
    let w = tmp.path().join("W.parquet");
    tgrag_schemas::io::write_parquet_atomic(&e, &fixture_rows(&gw.join("edges.parquet"), 1, None)).expect("edges");
    ok(tgrag(
        &out,
        &[
            "graphwave",
            "--edges",
            e.to_str().expect("utf8"),
            "--scales",
            "0.5,1,3",
            "--points",
            "25",
            "--mode",
            "exact",
            "--out",
            w.to_str().expect("utf8"),
        ],
    ));
    let got = tgrag_schemas::io::read_parquet(&w).expect("W");
    let want = fixture_rows(&gw.join("embeddings.parquet"), 1, None);
    let names: Vec<String> = got.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, want.schema().fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>());
    for name in names.iter().skip(1) {
        for (g, w) in f64_col(&got, name).iter().zip(f64_col(&want, name)) {
            assert!((g - w).abs() <= 1e-8, "{name}: {g} vs {w}");
        }
    }
    // A projection row naming a node outside 0..N is refused with file, row and column; no output.
    let bad = RecordBatch::try_from_iter([
        ("node", Arc::new(UInt32Array::from(vec![0, 5])) as ArrayRef),
        ("r00", Arc::new(Float64Array::from(vec![1.0, 2.0])) as ArrayRef),
    ])
    .expect("batch");
    tgrag_schemas::io::write_parquet_atomic(&r, &bad).expect("bad R");
    let p2 = tmp.path().join("P2.parquet");
    let o = tgrag(
        &out,
        &[
            "diffusion",
            "--edges",
            e.to_str().expect("utf8"),
            "--projection",
            r.to_str().expect("utf8"),
            "--out",
            p2.to_str().expect("utf8"),
        ],
    );
    assert!(!o.status.success());
    let msg = stderr(&o);
    assert!(msg.contains("R.parquet") && msg.contains("row 1") && msg.contains("`node`"), "{msg}");
    assert!(!p2.exists());
}

/// A fixture table with `qid` renamed to `query_id` (the layout `tgrag evaluate` reads).
fn with_query_id(path: &Path) -> RecordBatch {
    let b = tgrag_schemas::io::read_parquet(path).expect("fixture");
    let fields: Vec<arrow::datatypes::Field> =
        b.schema().fields().iter().map(|f| f.as_ref().clone().with_name(if f.name() == "qid" { "query_id" } else { f.name() })).collect();
    RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), b.columns().to_vec()).expect("rename")
}

#[test]
fn evaluate_reproduces_the_ranking_metrics_fixture_and_refuses_bad_rows() {
    let dir = fixture("ranking_metrics");
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("outputs");
    let (run, ans, m) = (tmp.path().join("R.parquet"), tmp.path().join("A.parquet"), tmp.path().join("M.parquet"));
    tgrag_schemas::io::write_parquet_atomic(&run, &with_query_id(&dir.join("run.parquet"))).expect("run");
    tgrag_schemas::io::write_parquet_atomic(&ans, &with_query_id(&dir.join("qrels.parquet"))).expect("answers");
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    ok(tgrag(&out, &["evaluate", "--run", &s(&run), "--answers", &s(&ans), "--num-candidates", "1000", "--out", &s(&m)]));
    let got = tgrag_schemas::io::read_parquet(&m).expect("metrics");
    let want = with_query_id(&dir.join("metrics.parquet"));
    // The fixture's rows in query order.
    let wq = f64_col(&want, "query_id");
    let mut order: Vec<usize> = (0..wq.len()).collect();
    order.sort_by(|&a, &b| wq[a].total_cmp(&wq[b]));
    assert_eq!(f64_col(&got, "query_id"), order.iter().map(|&i| wq[i]).collect::<Vec<_>>());
    for name in ["hit1", "hit5", "recall20", "mrr"] {
        let w = f64_col(&want, name);
        for (g, &i) in f64_col(&got, name).iter().zip(&order) {
            assert!((g - w[i]).abs() <= 1e-9, "{name}, query {}: {g} vs {}", wq[i], w[i]);
        }
    }
    // Hand-computed, N = 10: query 1 retrieves 5 (−0.5) and 7 (−1.0); its answer 9 is unretrieved.
    // STaRK: the unretrieved score −2 puts 5, 7 first, then 0,1,2,3,4,6,8,9: rank 10, MRR 0.1.
    // MoR: unretrieved = 0 beats −0.5, so 0,1,2,3,4,6,8,9 come first: rank 8, MRR 0.125.
    let small = RecordBatch::try_from_iter([
        ("query_id", Arc::new(UInt32Array::from(vec![1, 1])) as ArrayRef),
        ("node_id", Arc::new(UInt32Array::from(vec![5, 7])) as ArrayRef),
        ("score", Arc::new(Float64Array::from(vec![-0.5, -1.0])) as ArrayRef),
    ])
    .expect("batch");
    let gold = RecordBatch::try_from_iter([
        ("query_id", Arc::new(UInt32Array::from(vec![1])) as ArrayRef),
        ("node_id", Arc::new(UInt32Array::from(vec![9])) as ArrayRef),
    ])
    .expect("batch");
    tgrag_schemas::io::write_parquet_atomic(&run, &small).expect("run");
    tgrag_schemas::io::write_parquet_atomic(&ans, &gold).expect("answers");
    for (mode, want) in [("stark", 0.1), ("mor", 0.125)] {
        ok(tgrag(&out, &["evaluate", "--run", &s(&run), "--answers", &s(&ans), "--num-candidates", "10", "--mode", mode, "--out", &s(&m)]));
        let got = tgrag_schemas::io::read_parquet(&m).expect("metrics");
        assert_eq!(f64_col(&got, "mrr"), vec![want], "{mode}");
        assert_eq!(f64_col(&got, "hit5"), vec![0.0], "{mode}");
    }
    // A negative node id is refused with file, row and column, and nothing is written.
    let bad = RecordBatch::try_from_iter([
        ("query_id", Arc::new(arrow::array::Int32Array::from(vec![1, 1])) as ArrayRef),
        ("node_id", Arc::new(arrow::array::Int32Array::from(vec![3, -4])) as ArrayRef),
        ("score", Arc::new(Float64Array::from(vec![1.0, 0.5])) as ArrayRef),
    ])
    .expect("batch");
    tgrag_schemas::io::write_parquet_atomic(&run, &bad).expect("bad run");
    let m3 = tmp.path().join("M3.parquet");
    let o = tgrag(&out, &["evaluate", "--run", &s(&run), "--answers", &s(&ans), "--num-candidates", "1000", "--out", &s(&m3)]);
    assert!(!o.status.success());
    let msg = stderr(&o);
    assert!(msg.contains("R.parquet") && msg.contains("row 1") && msg.contains("`node_id`"), "{msg}");
    assert!(!m3.exists());
}

/// Copies the first `n` lines of `src` to `dst`.
fn head_lines(src: &Path, dst: &Path, n: usize) {
    let text = std::fs::read_to_string(src).expect("read plans");
    let lines: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(dst, lines.join("\n") + "\n").expect("write plans");
}

/// The first `[llama_ft, plans_train, plans_val]` lines of a MoR plan folder, in `o/plans`.
fn plan_slice(src: &Path, o: &Path, lines: [usize; 3]) -> PathBuf {
    let plans = o.join("plans");
    std::fs::create_dir_all(&plans).expect("mkdir");
    for (f, n) in ["llama_ft.jsonl", "plans_train.jsonl", "plans_val.jsonl"].into_iter().zip(lines) {
        head_lines(&src.join(f), &plans.join(f), n);
    }
    plans
}

/// `plans_val.jsonl` of a plan folder as a `plan` queries file (`query_id`, `text`) in `o`; also
/// returns the file's text.
fn val_queries(plans: &Path, o: &Path) -> (String, PathBuf) {
    let text = std::fs::read_to_string(plans.join("plans_val.jsonl")).expect("read");
    let (ids, qs): (Vec<u32>, Vec<String>) = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            (v["q_id"].as_u64().expect("q_id") as u32, v["query"].as_str().expect("query").to_string())
        })
        .unzip();
    let qfile = o.join("q.parquet");
    let qb = RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from(ids)) as ArrayRef),
        ("text", Arc::new(StringArray::from(qs)) as ArrayRef),
    ])
    .expect("batch");
    tgrag_schemas::io::write_parquet_atomic(&qfile, &qb).expect("write");
    (text, qfile)
}

fn table(path: &Path) -> RecordBatch {
    tgrag_schemas::io::read_parquet(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn train_planner_and_plan_on_mor_files_agree_are_deterministic_and_refuse_bad_input() {
    use arrow::array::{Array, AsArray, BooleanArray};
    let Some(src) = shared_or_skip("datasets/mor-plans/mag", "plans_val.jsonl") else { return };
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    // A slice of MoR's MAG files (the full files take minutes; the closing note has those figures).
    let plans = plan_slice(&src, o, [150, 450, 120]);
    let p = plans.to_str().expect("utf8");
    let train =
        |out: &str| tgrag(o, &["train-planner", "--plans", p, "--out", out, "--encoder", "hash", "--epochs", "4", "--tagger-epochs", "2"]);
    let m1 = o.join("m1");
    let out = ok(train(m1.to_str().expect("utf8")));
    assert!(out.contains("metapath exact") && out.contains("restriction token F1"), "{out}");
    for f in ["model.json", "planner.safetensors", "tagger.safetensors", "curves.parquet", "validation.parquet", "report.parquet"] {
        assert!(m1.join(f).is_file(), "missing {f}");
    }
    // The report is the mean of the per-line validation rows; 120 lines, none rejected here.
    let val = table(&m1.join("validation.parquet"));
    let rep = table(&m1.join("report.parquet"));
    assert_eq!(val.num_rows(), 120);
    let exact = val.column_by_name("exact").expect("exact").as_any().downcast_ref::<BooleanArray>().expect("bool").clone();
    let f1 = val.column_by_name("token_f1").expect("f1").as_primitive::<arrow::datatypes::Float64Type>().clone();
    let judged: Vec<usize> = (0..exact.len()).filter(|&i| exact.is_valid(i)).collect();
    let want_exact = judged.iter().filter(|&&i| exact.value(i)).count() as f64 / judged.len() as f64;
    let want_f1 = judged.iter().map(|&i| f1.value(i)).sum::<f64>() / judged.len() as f64;
    let got = |c: &str| rep.column_by_name(c).expect(c).as_primitive::<arrow::datatypes::Float64Type>().value(0);
    assert!((got("metapath_exact") - want_exact).abs() < 1e-12 && (got("restriction_token_f1") - want_f1).abs() < 1e-12);
    assert!(got("path_set_exact") >= got("metapath_exact"));
    // The exact flag is the string comparison of gold and predicted metapaths.
    let (gm, pm) =
        (val.column_by_name("gold_metapath").expect("g").as_string::<i32>(), val.column_by_name("metapath").expect("m").as_string::<i32>());
    for &i in &judged {
        assert_eq!(exact.value(i), gm.value(i) == pm.value(i), "row {i}");
    }
    // Decoding candidates: the distinct metapaths of the training plans, stored with the model;
    // `--decode greedy` stores none, and an unknown decoding is refused before any work.
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(m1.join("model.json")).expect("model.json")).expect("json");
    let cands = meta["candidates"].as_array().expect("candidates");
    let distinct: std::collections::BTreeSet<String> = cands.iter().map(|c| c.to_string()).collect();
    assert!(cands.len() >= 5 && distinct.len() == cands.len(), "{cands:?}");
    let mg = o.join("mg");
    ok(tgrag(
        o,
        &[
            "train-planner",
            "--plans",
            p,
            "--out",
            mg.to_str().expect("utf8"),
            "--encoder",
            "hash",
            "--epochs",
            "1",
            "--tagger-epochs",
            "1",
            "--decode",
            "greedy",
        ],
    ));
    let meta_g: serde_json::Value = serde_json::from_slice(&std::fs::read(mg.join("model.json")).expect("model.json")).expect("json");
    assert_eq!(meta_g["candidates"].as_array().map(Vec::len), Some(0));
    let r = tgrag(o, &["train-planner", "--plans", p, "--out", o.join("mb").to_str().expect("utf8"), "--decode", "beam"]);
    assert!(!r.status.success() && stderr(&r).contains("invalid value 'beam' for '--decode") && !o.join("mb").exists(), "{}", stderr(&r));
    // Curves (the shared shape): every planner epoch (train loss, validation loss and exact match)
    // and tagger epoch (train loss and label F1).
    assert_eq!(table(&m1.join("curves.parquet")).num_rows(), 4 * 3 + 2 * 2);
    // `tgrag plan` with the saved model reproduces the validation predictions (strict reload).
    let (text, qfile) = val_queries(&plans, o);
    let pfile = o.join("p.parquet");
    ok(tgrag(
        o,
        &[
            "plan",
            "--model",
            m1.to_str().expect("utf8"),
            "--queries",
            qfile.to_str().expect("utf8"),
            "--out",
            pfile.to_str().expect("utf8"),
        ],
    ));
    let planned = table(&pfile);
    for c in ["metapath", "restrictions"] {
        assert_eq!(planned.column_by_name(c).expect(c).as_string::<i32>(), val.column_by_name(c).expect(c).as_string::<i32>(), "{c}");
    }
    // Same inputs and seed: byte-identical model files and validation table.
    let m2 = o.join("m2");
    ok(train(m2.to_str().expect("utf8")));
    for f in ["planner.safetensors", "tagger.safetensors", "validation.parquet", "curves.parquet"] {
        assert_eq!(std::fs::read(m1.join(f)).expect("m1"), std::fs::read(m2.join(f)).expect("m2"), "{f} differs between two runs");
    }
    // Bad input: a malformed line names the file and line, and no model folder is left behind.
    let bad = o.join("bad");
    std::fs::create_dir_all(&bad).expect("mkdir");
    for f in ["llama_ft.jsonl", "plans_val.jsonl"] {
        std::fs::copy(plans.join(f), bad.join(f)).expect("copy");
    }
    std::fs::write(bad.join("plans_train.jsonl"), format!("{}\n{{\"q_id\": \"seven\"}}\n", text.lines().next().expect("line")))
        .expect("write");
    let m3 = o.join("m3");
    let r = tgrag(o, &["train-planner", "--plans", bad.to_str().expect("utf8"), "--out", m3.to_str().expect("utf8"), "--encoder", "hash"]);
    assert!(!r.status.success());
    assert!(stderr(&r).contains("plans_train.jsonl") && stderr(&r).contains("line 2") && stderr(&r).contains("q_id"), "{}", stderr(&r));
    assert!(!m3.exists());
    std::fs::remove_file(bad.join("plans_val.jsonl")).expect("rm");
    let r = tgrag(o, &["train-planner", "--plans", bad.to_str().expect("utf8"), "--out", m3.to_str().expect("utf8")]);
    assert!(!r.status.success() && stderr(&r).contains("plans_val.jsonl"), "{}", stderr(&r));
    let r = tgrag(o, &["train-planner", "--plans", plans.to_str().expect("utf8"), "--out", m3.to_str().expect("utf8"), "--hash-dim", "3"]);
    assert!(!r.status.success() && stderr(&r).contains("--hash-dim 3"), "{}", stderr(&r));
    assert!(!m3.exists());
    // `plan` without a model folder says so.
    let r = tgrag(
        o,
        &[
            "plan",
            "--model",
            o.join("nope").to_str().expect("utf8"),
            "--queries",
            qfile.to_str().expect("utf8"),
            "--out",
            pfile.to_str().expect("utf8"),
        ],
    );
    assert!(!r.status.success() && stderr(&r).contains("model.json"), "{}", stderr(&r));
}

/// `train-planner --tune-layers`: MiniLM's top layer fine-tuned as a metapath classifier, saved as
/// `encoder.safetensors` with its curve, reloaded strictly by `plan` (which reproduces the
/// validation predictions), byte-identical across runs; impossible settings refused before work.
#[test]
fn train_planner_with_a_tuned_minilm_layer_reloads_and_is_deterministic() {
    use arrow::array::AsArray;
    let Some(src) = shared_or_skip("datasets/mor-plans/amazon", "plans_val.jsonl") else { return };
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/all-MiniLM-L6-v2");
    if !model.join("model.safetensors").exists() {
        skip(&format!(
            "train_planner_with_a_tuned_minilm_layer_reloads_and_is_deterministic: no model in {} (run `make models`)",
            model.display()
        ));
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let plans = plan_slice(&src, o, [60, 140, 40]);
    let (p, m) = (plans.to_str().expect("utf8"), model.to_str().expect("utf8"));
    let train = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "train-planner",
            "--plans",
            p,
            "--out",
            out.to_str().expect("utf8"),
            "--model-dir",
            m,
            "--epochs",
            "2",
            "--tagger-epochs",
            "1",
            "--tune-epochs",
            "2",
        ];
        args.extend_from_slice(extra);
        tgrag(o, &args)
    };
    let m1 = o.join("m1");
    ok(train(&m1, &["--tune-layers", "1"]));
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(m1.join("model.json")).expect("model.json")).expect("json");
    assert_eq!(meta["tune_layers"].as_u64(), Some(1));
    let classes = meta["tune_classes"].as_u64().expect("classes");
    assert!(classes >= 3, "distinct training metapaths: {classes}");
    // The encoder's curve: one accuracy per tuning epoch, in [0, 1].
    let curves = table(&m1.join("curves.parquet"));
    let names = curves.column_by_name("model").expect("model").as_string::<i32>();
    let metric = curves.column_by_name("metric").expect("metric").as_string::<i32>();
    let acc = curves.column_by_name("value").expect("value").as_primitive::<arrow::datatypes::Float64Type>();
    let enc: Vec<f64> = (0..curves.num_rows())
        .filter(|&i| names.value(i) == "encoder" && metric.value(i) == "val_metapath_accuracy")
        .map(|i| acc.value(i))
        .collect();
    assert!(enc.len() == 2 && enc.iter().all(|a| (0.0..=1.0).contains(a)), "{enc:?}");
    // `plan` reloads the tuned layers and reproduces the validation predictions.
    let (_, qfile) = val_queries(&plans, o);
    let pfile = o.join("p.parquet");
    ok(tgrag(
        o,
        &[
            "plan",
            "--model",
            m1.to_str().expect("utf8"),
            "--queries",
            qfile.to_str().expect("utf8"),
            "--out",
            pfile.to_str().expect("utf8"),
        ],
    ));
    let (planned, val) = (table(&pfile), table(&m1.join("validation.parquet")));
    for c in ["metapath", "restrictions"] {
        assert_eq!(planned.column_by_name(c).expect(c).as_string::<i32>(), val.column_by_name(c).expect(c).as_string::<i32>(), "{c}");
    }
    // A damaged encoder file is refused by name.
    let broken = o.join("broken");
    std::fs::create_dir_all(&broken).expect("mkdir");
    for f in ["model.json", "planner.safetensors", "tagger.safetensors"] {
        std::fs::copy(m1.join(f), broken.join(f)).expect("copy");
    }
    std::fs::write(broken.join("encoder.safetensors"), b"garbage").expect("write");
    let r = tgrag(
        o,
        &[
            "plan",
            "--model",
            broken.to_str().expect("utf8"),
            "--queries",
            qfile.to_str().expect("utf8"),
            "--out",
            o.join("x.parquet").to_str().expect("utf8"),
        ],
    );
    assert!(!r.status.success() && stderr(&r).contains("encoder.safetensors") && !o.join("x.parquet").exists(), "{}", stderr(&r));
    // Same seed: byte-identical weights, curves and predictions.
    let m2 = o.join("m2");
    ok(train(&m2, &["--tune-layers", "1"]));
    for f in ["encoder.safetensors", "planner.safetensors", "tagger.safetensors", "curves.parquet", "validation.parquet"] {
        assert_eq!(std::fs::read(m1.join(f)).expect("m1"), std::fs::read(m2.join(f)).expect("m2"), "{f} differs between two runs");
    }
    // Refused before any work, nothing written.
    for (extra, says) in
        [(&["--tune-layers", "7"][..], "--tune-layers 7"), (&["--tune-layers", "1", "--encoder", "hash"][..], "--encoder minilm")]
    {
        let m3 = o.join("m3");
        let r = train(&m3, extra);
        assert!(!r.status.success() && stderr(&r).contains(says) && !m3.exists(), "{}", stderr(&r));
    }
}

/// The `embedding` column of a `tgrag embed` output: its width and every value, row after row.
fn embeddings(path: &Path) -> (usize, Vec<f32>) {
    let b = tgrag_schemas::io::read_parquet(path).expect("read");
    let e = b
        .column_by_name("embedding")
        .expect("embedding")
        .as_any()
        .downcast_ref::<arrow::array::FixedSizeListArray>()
        .expect("list")
        .clone();
    (e.value_length() as usize, e.values().as_any().downcast_ref::<arrow::array::Float32Array>().expect("f32").values().to_vec())
}

/// A `tgrag embed` input: `id` and `text` columns.
fn write_texts(path: &Path, ids: Vec<i64>, texts: Vec<String>) {
    let input = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(arrow::array::Int64Array::from(ids)) as ArrayRef),
        ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
    ])
    .expect("batch");
    tgrag_schemas::io::write_parquet_atomic(path, &input).expect("write");
}

/// `tgrag embed` with its default products (single bf16 on AMX tiles or AVX512-BF16 where the CPU
/// has them), with `--products f32` and, where the CPU has AMX, `--products amx` (split bf16):
/// unit-length 384-wide rows in input order, the default within cosine 0.9999 of f32 (the
/// single-bf16 bound) and split bf16 within 0.999999, and a bad `--products` refused before any
/// work.
#[test]
fn embed_default_and_f32_products_agree() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/all-MiniLM-L6-v2");
    if !model.join("model.safetensors").exists() {
        skip(&format!("embed_default_and_f32_products_agree: no model in {} (run `make models`)", model.display()));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let texts: Vec<String> = (0..70).map(|i| format!("sentence {i} about graph retrieval {}", "and planning ".repeat(i % 9))).collect();
    let inp = dir.path().join("s.parquet");
    write_texts(&inp, (0..70).map(|i| 1000 - i).collect(), texts);
    let m = model.to_str().expect("utf8");
    let run = |out: &str, extra: &[&str]| {
        let path = dir.path().join(out);
        let mut args = vec!["embed", "--input", inp.to_str().expect("utf8"), "--out", path.to_str().expect("utf8"), "--model", m];
        args.extend_from_slice(extra);
        ok(tgrag(dir.path(), &args));
        let b = tgrag_schemas::io::read_parquet(&path).expect("read");
        let ids: Vec<i64> =
            b.column_by_name("id").expect("id").as_any().downcast_ref::<arrow::array::Int64Array>().expect("i64").values().to_vec();
        assert_eq!(ids, (0..70).map(|i| 1000 - i).collect::<Vec<i64>>(), "ids in input order");
        let (width, rows) = embeddings(&path);
        assert_eq!(width, 384);
        rows
    };
    let auto = run("auto.parquet", &[]);
    let f32s = run("f32.parquet", &["--products", "f32"]);
    let split = tgrag_models::minilm::amx::available().then(|| run("amx.parquet", &["--products", "amx"]));
    for (which, rows, bound) in [("default", Some(&auto), 0.9999), ("amx", split.as_ref(), 0.999_999)] {
        let Some(rows) = rows else {
            eprintln!("embed_default_and_f32_products_agree: no AMX on this CPU, `--products amx` not checked");
            continue;
        };
        for (a, b) in rows.chunks_exact(384).zip(f32s.chunks_exact(384)) {
            let norm: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "unit length: {norm}");
            let cos: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            assert!(cos >= bound, "{which} vs f32 products: cosine {cos}");
        }
    }
    let bad = tgrag(
        dir.path(),
        &[
            "embed",
            "--input",
            inp.to_str().expect("utf8"),
            "--out",
            dir.path().join("x.parquet").to_str().expect("utf8"),
            "--model",
            m,
            "--products",
            "bf8",
        ],
    );
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("invalid value 'bf8' for '--products"), "{}", stderr(&bad));
    assert!(!dir.path().join("x.parquet").exists());
}

/// `tgrag embed --products f32` at every dispatch level this CPU has (`TGRAG_SIMD`: the AVX2 path
/// and the baseline one on any AVX-512 machine) gives the `auto` level's embeddings within f32
/// rounding (the kernels add in another order: cosine ≥ 0.999999, every value within 2e-5); a
/// level the CPU lacks or an unknown one is refused before any work, and bf16 products at a capped
/// level are refused naming the cap.
#[test]
fn embed_at_every_simd_level_matches_auto() {
    use tgrag_models::simd::Level;
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/all-MiniLM-L6-v2");
    if !model.join("model.safetensors").exists() {
        skip(&format!("embed_at_every_simd_level_matches_auto: no model in {} (run `make models`)", model.display()));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // Lengths from 3 to ~200 word pieces: every attention block and lane remainder.
    let texts: Vec<String> =
        (0..40).map(|i| format!("query {i} over a text-rich graph {}", "with typed edges ".repeat(i * 3 % 37))).collect();
    let inp = dir.path().join("s.parquet");
    write_texts(&inp, (0..40).collect(), texts);
    let run = |level: &str, out: &str, extra: &[&str]| {
        let path = dir.path().join(out);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tgrag"));
        cmd.env("TGRAG_SIMD", level).arg("--outputs").arg(dir.path()).arg("--quiet");
        cmd.args(["embed", "--input", inp.to_str().expect("utf8"), "--out", path.to_str().expect("utf8")]);
        cmd.arg("--model").arg(&model).args(extra);
        (cmd.output().expect("spawn tgrag"), path)
    };
    let rows = |o: Output, path: &Path| -> Vec<f32> {
        ok(o);
        embeddings(path).1
    };
    let (o, p) = run("auto", "auto.parquet", &["--products", "f32"]);
    let auto = rows(o, &p);
    for level in Level::ALL.into_iter().filter(|l| *l <= Level::detected()) {
        let (o, p) = run(level.name(), &format!("{level}.parquet"), &["--products", "f32"]);
        let got = rows(o, &p);
        assert_eq!(got.len(), auto.len());
        for (i, (a, b)) in got.chunks_exact(384).zip(auto.chunks_exact(384)).enumerate() {
            let cos: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(cos >= 0.999_999 && worst <= 2e-5, "{level}, text {i}: cosine {cos}, largest difference {worst}");
        }
    }
    // Refused before any work: an unknown level, a level above this CPU's, bf16 under a cap.
    let (o, p) = run("avx2", "bad.parquet", &[]);
    hostile::failed_cleanly(&o, &["TGRAG_SIMD=avx2", "not a level"]);
    assert!(!p.exists());
    if Level::detected() < Level::V4 {
        let (o, p) = run("v4", "bad.parquet", &[]);
        hostile::failed_cleanly(&o, &["TGRAG_SIMD=v4", "best level"]);
        assert!(!p.exists());
    }
    if Level::detected() >= Level::V3 {
        let (o, p) = run("v3", "bad.parquet", &["--products", "bf16"]);
        hostile::failed_cleanly(&o, &["TGRAG_SIMD=v3", "f32"]);
        assert!(!p.exists());
    }
}

/// `TGRAG_GPU_BACKEND` is checked before any work: an unknown value, and `cuda` in a build without
/// the `cuda` feature, end the command with a configuration error naming the value and write
/// nothing (the command would otherwise fail later, on its missing input).
#[test]
fn gpu_backends_the_build_cannot_honour_are_refused_before_any_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("e.parquet");
    let run = |value: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tgrag"));
        cmd.env("TGRAG_GPU_BACKEND", value).arg("--outputs").arg(dir.path()).arg("--quiet");
        cmd.args(["embed", "--input", "missing.parquet", "--out", out.to_str().expect("utf8")]);
        cmd.output().expect("spawn tgrag")
    };
    let o = run("rocm");
    hostile::failed_cleanly(&o, &["TGRAG_GPU_BACKEND=rocm", "auto, cuda or wgpu"]);
    assert_eq!(o.status.code(), Some(78), "a configuration error, before the missing input is read");
    if !cfg!(feature = "cuda") {
        let o = run("cuda");
        hostile::failed_cleanly(&o, &["TGRAG_GPU_BACKEND=cuda", "--features cuda"]);
        assert_eq!(o.status.code(), Some(78));
    }
    assert!(!out.exists());
}

/// `tgrag pcst` on the fixture's 239 instances gives pcst_fast's vertices and edges in
/// pcst_fast's order; bad instances and arguments are refused with the instance and value named.
#[test]
fn pcst_command_reproduces_pcst_fast_and_refuses_bad_instances() {
    use arrow::array::AsArray;
    let fx = fixture("pcst");
    let d = tempfile::tempdir().expect("tmp");
    let out = d.path().join("out");
    let (n, e) = (fx.join("nodes.parquet"), fx.join("edges.parquet"));
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> =
            ["pcst", "--nodes", n.to_str().expect("utf8"), "--edges", e.to_str().expect("utf8"), "--out", out.to_str().expect("utf8")]
                .iter()
                .map(|s| s.to_string())
                .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: &[String]| tgrag(d.path(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    ok(run(&args(&[])));
    let key = |b: &RecordBatch, col: &str| -> Vec<(i64, i64, i64)> {
        let cast = |c: &str| arrow::compute::cast(b.column_by_name(c).expect("col"), &arrow::datatypes::DataType::Int64).expect("cast");
        let (i, p, v) = (cast("instance_id"), cast("pos"), cast(col));
        let (i, p, v) = (
            i.as_primitive::<arrow::datatypes::Int64Type>(),
            p.as_primitive::<arrow::datatypes::Int64Type>(),
            v.as_primitive::<arrow::datatypes::Int64Type>(),
        );
        let mut rows: Vec<(i64, i64, i64)> = (0..b.num_rows()).map(|r| (i.value(r), p.value(r), v.value(r))).collect();
        rows.sort_unstable();
        rows
    };
    assert_eq!(key(&table(&out.join("vertices.parquet")), "node"), key(&table(&fx.join("result_vertices.parquet")), "node"));
    assert_eq!(key(&table(&out.join("edges.parquet")), "edge_index"), key(&table(&fx.join("result_edges.parquet")), "edge_index"));
    // Refusals, before or during the solve, naming what is wrong; nothing written.
    let bad = d.path().join("bad_nodes.parquet");
    let nb = RecordBatch::try_from_iter(vec![
        ("instance_id", Arc::new(arrow::array::Int64Array::from(vec![7, 7])) as ArrayRef),
        ("node", Arc::new(arrow::array::Int64Array::from(vec![0, 1])) as ArrayRef),
        ("prize", Arc::new(Float64Array::from(vec![1.0, -2.0])) as ArrayRef),
    ])
    .expect("nodes");
    tgrag_schemas::io::write_parquet_atomic(&bad, &nb).expect("write");
    let bad_e = d.path().join("bad_edges.parquet");
    let eb = RecordBatch::try_from_iter(vec![
        ("instance_id", Arc::new(arrow::array::Int64Array::from(vec![7])) as ArrayRef),
        ("edge_index", Arc::new(arrow::array::Int64Array::from(vec![0])) as ArrayRef),
        ("src", Arc::new(arrow::array::Int64Array::from(vec![0])) as ArrayRef),
        ("dst", Arc::new(arrow::array::Int64Array::from(vec![1])) as ArrayRef),
        ("cost", Arc::new(Float64Array::from(vec![1.0])) as ArrayRef),
    ])
    .expect("edges");
    tgrag_schemas::io::write_parquet_atomic(&bad_e, &eb).expect("write");
    let out2 = d.path().join("out2");
    let r = tgrag(
        d.path(),
        &["pcst", "--nodes", bad.to_str().expect("utf8"), "--edges", bad_e.to_str().expect("utf8"), "--out", out2.to_str().expect("utf8")],
    );
    let err = stderr(&r);
    assert!(!r.status.success() && err.contains("bad_nodes.parquet: row 1, column `prize`: -2 is negative"), "{err}");
    assert!(!out2.exists());
    for (extra, says) in [
        (vec!["--root", "3", "--clusters", "2"], "--clusters 2 with --root 3"),
        (vec!["--root", "-5"], "--root -5"),
        (vec!["--pruning", "GW"], "invalid value 'GW'"),
    ] {
        let r = run(&args(&extra));
        assert!(!r.status.success() && stderr(&r).contains(says), "{extra:?}: {}", stderr(&r));
    }
}

// ---- hostile input: one writer per folder, read-only SQL --------------------------------------

/// Waits (bounded) until `pred` holds.
fn eventually(what: &str, limit: Duration, pred: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !pred() {
        assert!(t0.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_run_into_the_same_dataset_folder_is_refused_or_waits_and_nothing_mixes() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let lock = o.join("synthetic").join(".tgrag.lock");
    let args = hashed(&["run", "--size", "tiny"]);
    let spawn = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tgrag"))
            .env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights"))
            .arg("--outputs")
            .arg(o)
            .arg("--quiet")
            .args(extra)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let first = spawn(&[]);
    eventually("the first run to hold the lock", Duration::from_secs(60), || {
        std::fs::read_to_string(&lock).is_ok_and(|s| s.starts_with(&format!("pid {}", first.id())))
    });
    // Refused: exit 3, naming the holder.
    let second = tgrag(o, &args);
    assert_eq!(second.status.code(), Some(3), "{}", stderr(&second));
    let msg = stderr(&second);
    assert!(msg.contains(&format!("pid {}", first.id())) && msg.contains("started") && msg.contains("--wait"), "{msg}");
    // Waits: starts after the first ends, then finds every stage up to date.
    let waiting = spawn(&["--wait"]).wait_with_output().expect("wait");
    let first = first.wait_with_output().expect("first");
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(waiting.status.success(), "{}", String::from_utf8_lossy(&waiting.stderr));
    let waited = String::from_utf8_lossy(&waiting.stderr).into_owned();
    assert!(waited.contains("waiting for"), "{waited}");
    assert!(verbs(&String::from_utf8_lossy(&waiting.stdout)).iter().all(|(_, v)| v != "ran"), "the waiting run found the work done");
    assert!(files_named(o, |n| n.ends_with(".tmp")).is_empty(), "stray temporary files");
    assert_eq!(std::fs::read_to_string(&lock).expect("lock"), "", "released");
}

#[test]
fn a_lock_left_by_a_killed_run_is_taken_over() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let lock = o.join("synthetic").join(".tgrag.lock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tgrag"))
        .arg("--outputs")
        .arg(o)
        .arg("--quiet")
        .args(hashed(&["run", "--size", "tiny"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    eventually("the run to hold the lock", Duration::from_secs(60), || std::fs::read_to_string(&lock).is_ok_and(|s| s.starts_with("pid ")));
    child.kill().expect("kill");
    child.wait().expect("reap");
    let r = tgrag(o, &["run", "--size", "tiny", "--stages", "ingest"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(stderr(&r).contains("took over the lock") && stderr(&r).contains(&format!("pid {pid}")), "{}", stderr(&r));
}

#[test]
fn sql_is_read_only_and_sees_only_real_parquet_files_under_outputs() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("outputs");
    let outside = d.path().join("outside");
    std::fs::create_dir_all(o.join("ds").join("stage")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let batch = RecordBatch::try_from_iter([("x", Arc::new(UInt32Array::from(vec![7u32])) as ArrayRef)]).expect("batch");
    tgrag_schemas::io::write_parquet_atomic(&o.join("ds").join("stage").join("t.parquet"), &batch).expect("write");
    tgrag_schemas::io::write_parquet_atomic(&outside.join("secret.parquet"), &batch).expect("write");
    // Symbolic links leading out: a file and a folder.
    std::os::unix::fs::symlink(outside.join("secret.parquet"), o.join("ds").join("stage").join("linked.parquet")).expect("symlink");
    std::os::unix::fs::symlink(&outside, o.join("ds").join("linkdir")).expect("symlink");
    // Not Parquet.
    std::fs::write(o.join("ds").join("stage").join("junk.parquet"), b"not parquet at all").expect("write");

    let list = ok(tgrag(&o, &["sql", "--list", ""]));
    assert!(
        list.contains("ds_stage_t")
            && !list.contains("linked")
            && !list.contains("linkdir")
            && !list.contains("secret")
            && !list.contains("junk"),
        "{list}"
    );
    let r = tgrag(&o, &["sql", "SELECT x FROM ds_stage_t"]);
    assert!(stdout(&r).contains("| 7 |") && stderr(&r).contains("junk.parquet (not a Parquet file)"), "{}{}", stdout(&r), stderr(&r));
    ok(tgrag(&o, &["sql", "SELECT 1"]));
    for q in ["SELECT * FROM ds_stage_linked", "SELECT * FROM ds_linkdir_secret"] {
        assert!(!tgrag(&o, &["sql", q]).status.success(), "{q} must not see files outside outputs");
    }
    let target = outside.join("written.csv");
    let t = target.to_str().expect("utf8");
    for q in [
        format!("COPY (SELECT 1 AS x) TO '{t}' STORED AS CSV"),
        format!("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{t}' STORED AS CSV"),
        format!("CREATE EXTERNAL TABLE s STORED AS PARQUET LOCATION '{}'", outside.join("secret.parquet").display()),
        "DROP TABLE ds_stage_t".to_string(),
        "SET datafusion.execution.batch_size = 1".to_string(),
        "INSERT INTO ds_stage_t VALUES (1)".to_string(),
    ] {
        let r = tgrag(&o, &["sql", &q]);
        assert!(!r.status.success(), "{q} was accepted: {}", stdout(&r));
        assert!(stderr(&r).contains("read-only") || stderr(&r).contains("not supported"), "{q}: {}", stderr(&r));
    }
    assert!(!target.exists(), "COPY wrote a file");
    assert!(ok(tgrag(&o, &["sql", "SELECT x FROM ds_stage_t"])).contains("| 7 |"), "the table is still there");
}
