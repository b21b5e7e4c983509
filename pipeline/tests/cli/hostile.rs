//! The hostile-input suite: every case of the hardening issue as a test that fails if the old
//! behaviour (an abort, a wrong result with exit 0, a misleading message) comes back, and a property
//! test that feeds seeded byte-level corruptions of valid inputs to every file tool.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array};

use super::{folder, ok, stderr, stdout, table, tgrag};

fn write(path: &Path, cols: Vec<(&str, ArrayRef)>) -> PathBuf {
    let b = RecordBatch::try_from_iter(cols).expect("batch");
    tgrag_schemas::io::write_parquet_atomic(path, &b).expect("write");
    path.to_path_buf()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

fn strs(v: &[&str]) -> ArrayRef {
    Arc::new(StringArray::from(v.to_vec()))
}

fn u32s(v: &[u32]) -> ArrayRef {
    Arc::new(UInt32Array::from(v.to_vec()))
}

/// The core of every refusal in the hostile suite: a non-zero exit that is neither a panic (101),
/// an abort (134) nor a signal, with every `must` in the message. Returns the message.
pub(super) fn failed_cleanly(o: &Output, must: &[&str]) -> String {
    use std::os::unix::process::ExitStatusExt;
    let err = stderr(o);
    assert!(o.status.signal().is_none(), "killed by a signal: {err}");
    assert!(!o.status.success(), "should fail; stdout {} stderr {err}", stdout(o));
    assert!(!matches!(o.status.code(), Some(101) | Some(134)), "a panic or abort, not an error: {err}");
    // Whose fault (README, exit codes): arguments 2, locked 3, a failed night 5, input data 65,
    // environment 74, configuration 78 — never unclassified (1) nor a bug (70).
    assert!(
        matches!(o.status.code(), Some(2 | 3 | 5 | 65 | 74 | 78)),
        "exit {:?}: a refusal must say whose fault it is, not 1 (unclassified) or 70 (internal): {err}",
        o.status.code()
    );
    for m in must {
        assert!(err.contains(m), "missing `{m}` in: {err}");
    }
    // Shown with --nocapture: the closing notes of the hardening work list these messages.
    eprintln!("refused as expected (exit {:?}): {}", o.status.code(), err.trim());
    err
}

/// A refusal ([`failed_cleanly`]) that leaves no output or temporary file at `out`.
fn refused(o: &Output, must: &[&str], out: Option<&Path>) {
    failed_cleanly(o, must);
    if let Some(out) = out {
        assert!(!out.exists(), "{} written by a refused command", out.display());
        if let Some(dir) = out.parent() {
            let tmp: Vec<_> = std::fs::read_dir(dir)
                .map(|r| r.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect())
                .unwrap_or_default();
            assert!(tmp.is_empty(), "temporary files left: {tmp:?}");
        }
    }
}

fn corpus(dir: &Path) -> (PathBuf, PathBuf) {
    let c = write(
        &dir.join("corpus.parquet"),
        vec![("doc_id", u32s(&[0, 1, 2])), ("text", strs(&["red tent for rain", "blue mug", "red shoe"]))],
    );
    let q = write(&dir.join("queries.parquet"), vec![("query_id", u32s(&[7, 8])), ("text", strs(&["red tent", "mug"]))]);
    (c, q)
}

#[test]
fn sizes_from_a_user_are_bounded_before_any_allocation() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let (c, q) = corpus(o);
    let out = o.join("r.parquet");
    for k in ["1000000000000000", "-1", "0"] {
        let r = tgrag(o, &["bm25", "--corpus", s(&c), "--queries", s(&q), "--k", k, "--out", s(&out)]);
        refused(&r, &["--k", "must be within [1, 10000000]"], Some(&out));
    }
    // A k beyond the corpus ranks every document, and says so.
    let r = tgrag(o, &["bm25", "--corpus", s(&c), "--queries", s(&q), "--k", "5000", "--out", s(&out)]);
    assert!(r.status.success() && stderr(&r).contains("more than the 3 documents"), "{}", stderr(&r));
    let run = table(&out);
    assert!(run.num_rows() <= 6, "at most every document per query: {}", run.num_rows());
    // The same bound on a stage option, before any stage runs.
    let r = tgrag(o, &["run", "--size", "tiny", "--set", "bm25.top_k=1000000000000"]);
    refused(&r, &["top_k must be at most 10000000, got 1000000000000"], None);
    assert!(!o.join("synthetic/ingest").exists(), "the config check comes before any work");
    // GraphWave: a huge node id, node count or point count is refused with the memory it needs.
    let e = write(&o.join("e.parquet"), vec![("src", u32s(&[0, 1])), ("dst", u32s(&[1, 2_000_000_000]))]);
    let w = o.join("w.parquet");
    let r = tgrag(o, &["graphwave", "--edges", s(&e), "--out", s(&w)]);
    refused(&r, &["largest node id 2000000000", "of memory"], Some(&w));
    let e2 = write(&o.join("e2.parquet"), vec![("src", u32s(&[0, 1])), ("dst", u32s(&[1, 2]))]);
    let r = tgrag(o, &["graphwave", "--edges", s(&e2), "--num-nodes", "1000000000", "--out", s(&w)]);
    refused(&r, &["--num-nodes 1000000000", "of memory"], Some(&w));
    let r = tgrag(o, &["graphwave", "--edges", s(&e2), "--points", "1000000000", "--out", s(&w)]);
    refused(&r, &["--points", "must be within [1, 100000]"], Some(&w));
    let r = tgrag(o, &["graphwave", "--edges", s(&e2), "--points", "-3", "--out", s(&w)]);
    refused(&r, &["must be within"], Some(&w));
    // A negative scale is a range error of its own, not clap's "unexpected argument".
    let r = tgrag(o, &["graphwave", "--edges", s(&e2), "--scales", "-1", "--out", s(&w)]);
    refused(&r, &["scales must be positive"], Some(&w));
    // pcst: ids far beyond the rows given are refused before a vector is sized by them.
    let n = write(
        &o.join("n.parquet"),
        vec![
            ("instance_id", Arc::new(Int64Array::from(vec![0, 0])) as ArrayRef),
            ("node", Arc::new(Int64Array::from(vec![0, 4_000_000_000])) as ArrayRef),
            ("prize", Arc::new(Float64Array::from(vec![1.0, 1.0])) as ArrayRef),
        ],
    );
    let pe = write(
        &o.join("pe.parquet"),
        vec![
            ("instance_id", Arc::new(Int64Array::from(vec![0])) as ArrayRef),
            ("edge_index", Arc::new(Int64Array::from(vec![0])) as ArrayRef),
            ("src", Arc::new(Int64Array::from(vec![0])) as ArrayRef),
            ("dst", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("cost", Arc::new(Float64Array::from(vec![1.0])) as ArrayRef),
        ],
    );
    let po = o.join("pcst_out");
    let r = tgrag(o, &["pcst", "--nodes", s(&n), "--edges", s(&pe), "--out", s(&po)]);
    refused(&r, &["n.parquet", "row 1", "`node`", "4000000000 is not a node id"], Some(&po));
    // evaluate: 2³² − 1 candidates are ranked without materialising them.
    let ans = write(&o.join("a.parquet"), vec![("query_id", u32s(&[7])), ("node_id", u32s(&[1]))]);
    let rr = write(
        &o.join("run.parquet"),
        vec![("query_id", u32s(&[7])), ("node_id", u32s(&[1])), ("score", Arc::new(Float64Array::from(vec![1.0])) as ArrayRef)],
    );
    let m = o.join("m.parquet");
    let r = ok(tgrag(o, &["evaluate", "--run", s(&rr), "--answers", s(&ans), "--num-candidates", "4294967295", "--out", s(&m)]));
    assert!(r.contains("hit@1 1.0000"), "{r}");
}

#[test]
fn file_tools_refuse_what_ingest_refuses() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let (c, q) = corpus(o);
    let out = o.join("r.parquet");
    // Duplicate ids: two ranked lists merged under one query id, or one doc ranked twice.
    let dq = write(&o.join("dq.parquet"), vec![("query_id", u32s(&[7, 7])), ("text", strs(&["red", "mug"]))]);
    let r = tgrag(o, &["bm25", "--corpus", s(&c), "--queries", s(&dq), "--out", s(&out)]);
    refused(&r, &["dq.parquet", "row 1", "`query_id`", "duplicate query_id 7 (first at row 0)"], Some(&out));
    let dc = write(&o.join("dc.parquet"), vec![("doc_id", strs(&["a", "b", "a"])), ("text", strs(&["x", "y", "z"]))]);
    let r = tgrag(o, &["bm25", "--corpus", s(&dc), "--queries", s(&q), "--out", s(&out)]);
    refused(&r, &["dc.parquet", "row 2", "duplicate doc_id a"], Some(&out));
    let empty = write(&o.join("empty.parquet"), vec![("doc_id", u32s(&[])), ("text", strs(&[]))]);
    let r = tgrag(o, &["bm25", "--corpus", s(&empty), "--queries", s(&q), "--out", s(&out)]);
    refused(&r, &["empty.parquet", "no rows"], Some(&out));
    // NaN and inf in a diffusion projection.
    let e = write(&o.join("e.parquet"), vec![("src", u32s(&[0])), ("dst", u32s(&[1]))]);
    let p = write(
        &o.join("proj.parquet"),
        vec![("node", u32s(&[0, 1])), ("r00", Arc::new(Float64Array::from(vec![0.5, f64::NAN])) as ArrayRef)],
    );
    let po = o.join("p.parquet");
    let r = tgrag(o, &["diffusion", "--edges", s(&e), "--projection", s(&p), "--out", s(&po)]);
    refused(&r, &["proj.parquet", "row 1", "`r00`", "NaN is not a finite number"], Some(&po));
    // evaluate: a null method, and an empty run (a warning, every query scoring 0).
    let ans = write(&o.join("a.parquet"), vec![("query_id", u32s(&[7])), ("node_id", u32s(&[1]))]);
    let nm = write(
        &o.join("nm.parquet"),
        vec![
            ("query_id", u32s(&[7, 7])),
            ("node_id", u32s(&[1, 2])),
            ("score", Arc::new(Float64Array::from(vec![1.0, 0.5])) as ArrayRef),
            ("method", Arc::new(StringArray::from(vec![Some("bm25"), None])) as ArrayRef),
        ],
    );
    let m = o.join("m.parquet");
    let r = tgrag(o, &["evaluate", "--run", s(&nm), "--answers", s(&ans), "--num-candidates", "10", "--out", s(&m)]);
    refused(&r, &["nm.parquet", "row 1", "`method`", "missing value"], Some(&m));
    let zero = write(
        &o.join("zero.parquet"),
        vec![("query_id", u32s(&[])), ("node_id", u32s(&[])), ("score", Arc::new(Float64Array::from(Vec::<f64>::new())) as ArrayRef)],
    );
    let r = tgrag(o, &["evaluate", "--run", s(&zero), "--answers", s(&ans), "--num-candidates", "10", "--out", s(&m)]);
    assert!(r.status.success() && stderr(&r).contains("the run has no rows"), "{}", stderr(&r));
    assert!(stdout(&r).contains("hit@1 0.0000"), "{}", stdout(&r));
    // A dataset whose split says `training`, and one without nodes.
    let nodes = "node_id,node_type,name,doc\n0,product,Tent,A tent\n1,brand,Zentra,A brand\n";
    let edges = "src,dst,relation\n0,1,has_brand\n";
    let bad_split = folder(&[
        ("nodes.csv", nodes),
        ("edges.csv", edges),
        ("queries.csv", "query_id,text,split\n0,tent,train\n1,zentra,training\n"),
        ("answers.csv", "query_id,node_id\n0,0\n1,1\n"),
    ]);
    let r = tgrag(o, &["run", "--dataset", "mine", "--data-dir", s(bad_split.path())]);
    refused(&r, &["queries.csv", "row 1", "`split`", "`training` is not one of: train, val, test"], None);
    let no_nodes = folder(&[("nodes.csv", "node_id,node_type,name,doc\n"), ("edges.csv", "src,dst,relation\n")]);
    let r = tgrag(o, &["run", "--dataset", "none", "--data-dir", s(no_nodes.path())]);
    refused(&r, &["nodes.csv", "no rows"], None);
    assert!(!o.join("none/ingest").exists());
    // CSV quoting and bytes: the line is named.
    let quote = folder(&[("nodes.csv", "node_id,node_type,name,doc\n0,product,Tent,\"never closed\n1,brand,Z,z\n"), ("edges.csv", edges)]);
    let r = tgrag(o, &["run", "--dataset", "q", "--data-dir", s(quote.path())]);
    refused(&r, &["nodes.csv", "line 2", "never closed"], None);
}

#[test]
fn a_full_disk_is_named_and_leaves_no_temporary_file() {
    // A real full disk: a 64 KiB tmpfs with one 4 KiB page left (for the lock file), in a mount
    // namespace of the command's own
    // (`unshare -rm`: no privileges needed, nothing mounted outside it).
    let probe = std::process::Command::new("unshare").args(["-rm", "true"]).output();
    if !probe.is_ok_and(|p| p.status.success()) {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true: `unshare -rm` (util-linux) is needed for the full-disk test");
        eprintln!("skipped: `unshare -rm` is not available here");
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let (c, q) = corpus(o);
    let disk = o.join("disk");
    std::fs::create_dir_all(&disk).expect("mount point");
    let script = r#"mount -t tmpfs -o size=64k tmpfs "$1" && head -c 61440 /dev/zero > "$1/fill" && shift &&
        "$@"; rc=$?; echo "left: $(ls -A "$DISK" | tr '\n' ' ')" >&2; exit $rc"#;
    let out = disk.join("r.parquet");
    let r = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh", s(&disk), env!("CARGO_BIN_EXE_tgrag"), "--outputs", s(o), "--quiet", "bm25"])
        .args(["--corpus", s(&c), "--queries", s(&q), "--out", s(&out)])
        .env("DISK", &disk)
        .output()
        .expect("unshare");
    refused(&r, &["writing failed: no space left on device"], Some(&out));
    let err = stderr(&r);
    assert!(!err.contains("not a readable Parquet"), "{err}");
    let left = err.lines().find_map(|l| l.strip_prefix("left: ")).unwrap_or_else(|| panic!("no listing: {err}"));
    assert!(left.split_whitespace().all(|f| f == "fill" || f == ".tgrag.lock"), "only the filler and the lock are left: {left}");
}

#[test]
fn train_planner_names_every_plan_it_leaves_out_and_counts_only_what_it_uses() {
    let Some(src) = super::shared_or_skip("datasets/mor-plans/mag", "plans_val.jsonl") else { return };
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let plans = super::plan_slice(&src, o, [40, 80, 20]);
    // Line 3 of plans_train.jsonl gets a plan that is not a plan.
    let text = std::fs::read_to_string(plans.join("plans_train.jsonl")).expect("read");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[2]).expect("json");
    v["plan"]["Metapath"] = serde_json::json!(42);
    lines[2] = v.to_string();
    std::fs::write(plans.join("plans_train.jsonl"), lines.join("\n") + "\n").expect("write");
    let m = o.join("m");
    let r =
        tgrag(o, &["train-planner", "--plans", s(&plans), "--out", s(&m), "--encoder", "hash", "--epochs", "1", "--tagger-epochs", "1"]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("plans_train.jsonl: line 3: plan left out of training: Metapath is neither a string nor a list of lists: 42"),
        "{}",
        stderr(&r)
    );
    let dropped = table(&m.join("dropped.parquet"));
    let rep = table(&m.join("report.parquet"));
    use arrow::array::AsArray;
    let col = |c: &str| rep.column_by_name(c).expect(c).as_primitive::<arrow::datatypes::UInt32Type>().value(0);
    assert_eq!(col("train_dropped") as usize, dropped.num_rows());
    // Every line is either used (train or checkpoint) or listed as dropped.
    assert_eq!(col("train_plans") + col("dev_plans") + col("train_dropped"), 40 + 80, "lines used + dropped = lines read");
}

/// A seeded generator for the corruptions (the suite's own, so that it needs no crate).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One corruption of `bytes`: flipped bytes, a truncation, inserted garbage or a zeroed range.
fn corrupt(bytes: &[u8], rng: &mut Lcg) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match rng.below(4) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => b.truncate(rng.below(b.len())),
        2 => {
            let at = rng.below(b.len());
            let junk: Vec<u8> = (0..1 + rng.below(32)).map(|_| rng.next() as u8).collect();
            b.splice(at..at, junk);
        }
        _ => {
            let at = rng.below(b.len());
            let end = (at + 1 + rng.below(64)).min(b.len());
            b[at..end].fill(0);
        }
    }
    b
}

#[test]
fn random_corruptions_of_valid_inputs_give_a_clear_error_or_a_valid_output_never_an_abort() {
    use std::os::unix::process::ExitStatusExt;
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let (c, q) = corpus(o);
    let e = write(&o.join("e.parquet"), vec![("src", u32s(&[0, 1, 2])), ("dst", u32s(&[1, 2, 0]))]);
    let p = write(
        &o.join("proj.parquet"),
        vec![("node", u32s(&[0, 1, 2])), ("r00", Arc::new(Float64Array::from(vec![0.5, -1.0, 2.0])) as ArrayRef)],
    );
    let ans = write(&o.join("ans.parquet"), vec![("query_id", u32s(&[7, 8])), ("node_id", u32s(&[1, 2]))]);
    let run = write(
        &o.join("run.parquet"),
        vec![
            ("query_id", u32s(&[7, 7, 8])),
            ("node_id", u32s(&[1, 2, 2])),
            ("score", Arc::new(Float64Array::from(vec![2.0, 1.0, 3.0])) as ArrayRef),
        ],
    );
    let i64s = |v: &[i64]| Arc::new(Int64Array::from(v.to_vec())) as ArrayRef;
    let pn = write(
        &o.join("pn.parquet"),
        vec![
            ("instance_id", i64s(&[0, 0, 0])),
            ("node", i64s(&[0, 1, 2])),
            ("prize", Arc::new(Float64Array::from(vec![1.0, 0.0, 2.0])) as ArrayRef),
        ],
    );
    let pe = write(
        &o.join("pe.parquet"),
        vec![
            ("instance_id", i64s(&[0, 0])),
            ("edge_index", i64s(&[0, 1])),
            ("src", i64s(&[0, 1])),
            ("dst", i64s(&[1, 2])),
            ("cost", Arc::new(Float64Array::from(vec![0.5, 0.5])) as ArrayRef),
        ],
    );
    // (tool arguments with `{in}` for the corrupted file and `{out}` for the output, the input)
    let cases: Vec<(Vec<String>, PathBuf)> = vec![
        (
            vec!["bm25".into(), "--corpus".into(), "{in}".into(), "--queries".into(), s(&q).into(), "--out".into(), "{out}".into()],
            c.clone(),
        ),
        (
            vec!["bm25".into(), "--corpus".into(), s(&c).into(), "--queries".into(), "{in}".into(), "--out".into(), "{out}".into()],
            q.clone(),
        ),
        (
            vec!["diffusion".into(), "--edges".into(), s(&e).into(), "--projection".into(), "{in}".into(), "--out".into(), "{out}".into()],
            p.clone(),
        ),
        (
            vec!["diffusion".into(), "--edges".into(), "{in}".into(), "--projection".into(), s(&p).into(), "--out".into(), "{out}".into()],
            e.clone(),
        ),
        (
            vec!["graphwave".into(), "--edges".into(), "{in}".into(), "--points".into(), "3".into(), "--out".into(), "{out}".into()],
            e.clone(),
        ),
        (
            vec![
                "evaluate".into(),
                "--run".into(),
                "{in}".into(),
                "--answers".into(),
                s(&ans).into(),
                "--num-candidates".into(),
                "10".into(),
                "--out".into(),
                "{out}".into(),
            ],
            run.clone(),
        ),
        (
            vec![
                "evaluate".into(),
                "--run".into(),
                s(&run).into(),
                "--answers".into(),
                "{in}".into(),
                "--num-candidates".into(),
                "10".into(),
                "--out".into(),
                "{out}".into(),
            ],
            ans.clone(),
        ),
        (vec!["pcst".into(), "--nodes".into(), "{in}".into(), "--edges".into(), s(&pe).into(), "--out".into(), "{out}".into()], pn.clone()),
        (vec!["pcst".into(), "--nodes".into(), s(&pn).into(), "--edges".into(), "{in}".into(), "--out".into(), "{out}".into()], pe.clone()),
    ];
    let mut rng = Lcg(20_261_125);
    let (mut failed, mut passed) = (0, 0);
    for (case, (args, input)) in cases.iter().enumerate() {
        let bytes = std::fs::read(input).expect("input");
        for k in 0..12 {
            let bad = o.join(format!("bad_{case}_{k}.parquet"));
            std::fs::write(&bad, corrupt(&bytes, &mut rng)).expect("write");
            let out = o.join(format!("out_{case}_{k}{}", if args[0] == "pcst" { "" } else { ".parquet" }));
            let a: Vec<String> = args.iter().map(|x| x.replace("{in}", s(&bad)).replace("{out}", s(&out))).collect();
            let r = tgrag(o, &a.iter().map(String::as_str).collect::<Vec<_>>());
            let err = stderr(&r);
            assert!(r.status.signal().is_none(), "{a:?}: killed by a signal: {err}");
            assert_ne!(r.status.code(), Some(101), "{a:?}: panicked: {err}");
            if r.status.success() {
                // A corruption that leaves a valid file: the output is a readable table.
                let f = if args[0] == "pcst" { out.join("vertices.parquet") } else { out.clone() };
                assert!(tgrag_schemas::io::read_parquet(&f).is_ok(), "{a:?}: unreadable output");
                passed += 1;
            } else {
                // A clear error names the file it could not use, and nothing is written.
                assert!(err.contains(&format!("bad_{case}_{k}")) || err.contains("invalid value"), "{a:?}: unclear error: {err}");
                let f = if args[0] == "pcst" { out.join("vertices.parquet") } else { out.clone() };
                assert!(!f.exists(), "{a:?}: output written by a failed run");
                failed += 1;
            }
        }
    }
    eprintln!("corruptions: {failed} refused, {passed} gave a valid output");
    assert!(failed > 0, "some corruptions must be refused ({passed} passed)");
}

/// Files outside the outputs folder that no run may touch: (path, bytes).
fn canaries(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    std::fs::create_dir_all(dir).expect("canary dir");
    (0..3)
        .map(|i| {
            let p = dir.join(format!("canary{i}"));
            let bytes = format!("canary {i} must survive").into_bytes();
            std::fs::write(&p, &bytes).expect("canary");
            (p, bytes)
        })
        .collect()
}

fn canaries_intact(c: &[(PathBuf, Vec<u8>)], after: &str) {
    for (p, bytes) in c {
        let now = std::fs::read(p).unwrap_or_else(|e| panic!("{after}: canary {} is gone: {e}", p.display()));
        assert_eq!(&now, bytes, "{after}: canary {} was written through", p.display());
    }
}

#[test]
fn tampered_manifests_and_planted_links_never_reach_outside_the_outputs_folder() {
    use std::os::unix::fs::symlink;
    let d = tempfile::tempdir().expect("tmp");
    let (o, outside) = (d.path().join("outputs"), d.path().join("outside"));
    let c = canaries(&outside);
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--size", "tiny", "--stages", "ingest"];
        args.extend_from_slice(extra);
        tgrag(&o, &args)
    };
    ok(run(&[]));
    let ingest = o.join("synthetic/ingest");
    let clean = std::fs::read(ingest.join("nodes.parquet")).expect("nodes");
    // 1. A manifest naming files outside its folder (absolute, `..`, a separator) is invalid: the
    //    stage reruns and no name in it is acted on (the old runner deleted them as stale outputs).
    let manifest = ingest.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).expect("manifest")).expect("json");
    let listed = m["outputs"]["nodes.parquet"].clone();
    for name in [c[0].0.display().to_string(), "../../../outside/canary1".into(), "sub/../../canary2".into()] {
        m["outputs"][name] = listed.clone();
    }
    std::fs::write(&manifest, serde_json::to_vec(&m).expect("json")).expect("tamper");
    let out = ok(run(&[]));
    assert!(out.contains("ingest") && !out.contains("up to date"), "an invalid manifest reruns the stage: {out}");
    canaries_intact(&c, "tampered manifest");
    // A listed output replaced by a link is not hashed through either: the stage reruns.
    std::fs::remove_file(ingest.join("edges.parquet")).expect("rm");
    symlink(&c[1].0, ingest.join("edges.parquet")).expect("link");
    ok(run(&[]));
    assert!(std::fs::symlink_metadata(ingest.join("edges.parquet")).expect("edges").is_file(), "the link was replaced by the output");
    canaries_intact(&c, "linked output");
    // 2. Temporary names planted as links (the old fixed name) are never written through, and the
    //    outputs are real files with the clean bytes.
    for t in ["nodes", "edges", "queries"] {
        symlink(&c[2].0, ingest.join(format!(".{t}.parquet.tmp"))).expect("link");
    }
    ok(run(&["--force"]));
    canaries_intact(&c, "planted temporaries");
    assert_eq!(std::fs::read(ingest.join("nodes.parquet")).expect("nodes"), clean);
    // 3. A lock file that is a link (to a canary, to /dev/zero) is refused, never truncated or read.
    let lock = o.join("synthetic/.tgrag.lock");
    for target in [c[0].0.as_path(), Path::new("/dev/zero")] {
        let _ = std::fs::remove_file(&lock);
        symlink(target, &lock).expect("link");
        refused(&run(&["--force"]), &[".tgrag.lock", "the lock file is a symbolic link"], None);
        canaries_intact(&c, "linked lock");
    }
    std::fs::remove_file(&lock).expect("rm");
    // 4. A stage folder that is a link out of the outputs folder is refused; nothing lands there.
    std::fs::remove_dir_all(&ingest).expect("rm");
    symlink(&outside, &ingest).expect("link");
    refused(&run(&[]), &["ingest", "is a symbolic link", "does not write through it"], None);
    let there: Vec<_> = std::fs::read_dir(&outside).expect("outside").flatten().map(|e| e.file_name()).collect();
    assert_eq!(there.len(), c.len(), "files written outside: {there:?}");
    canaries_intact(&c, "linked stage folder");
}

#[test]
fn a_data_folder_never_leads_the_run_outside_it() {
    use std::os::unix::fs::symlink;
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("outputs");
    let c = canaries(&d.path().join("outside"));
    let nodes = "node_id,node_type,name,doc\n0,product,Tent,A tent\n1,brand,Zentra,A brand\n";
    let data = folder(&[("nodes.csv", nodes)]);
    // A table that is a link out of the folder is refused with its path, before anything runs.
    std::fs::write(d.path().join("outside/edges.csv"), "src,dst,relation\n0,1,has_brand\n").expect("edges");
    symlink(d.path().join("outside/edges.csv"), data.path().join("edges.csv")).expect("link");
    let r = tgrag(&o, &["run", "--dataset", "mine", "--data-dir", s(data.path()), "--stages", "ingest"]);
    refused(&r, &["edges.csv", "leads out of the data folder"], None);
    assert!(!o.join("mine/ingest").exists());
    canaries_intact(&c, "linked table");
    // With the table inside, an outputs folder placed inside the data folder does not make ingest
    // rerun on the next run (its files are not the dataset's).
    std::fs::remove_file(data.path().join("edges.csv")).expect("rm");
    std::fs::write(data.path().join("edges.csv"), "src,dst,relation\n0,1,has_brand\n").expect("edges");
    let inner = data.path().join("outputs");
    ok(tgrag(&inner, &["run", "--dataset", "mine", "--data-dir", s(data.path()), "--stages", "ingest"]));
    let again = ok(tgrag(&inner, &["run", "--dataset", "mine", "--data-dir", s(data.path()), "--stages", "ingest"]));
    assert!(again.contains("up to date"), "{again}");
    // The case that reran before: a raw dataset's content key hashes every file under its folder,
    // so an outputs folder inside it changed the key on every run.
    let raw = super::hostile_data::explagraphs(6, &[]);
    let inner = raw.path().join("outputs");
    let args = ["run", "--dataset", "explagraphs", "--data-dir", s(raw.path()), "--stages", "ingest"];
    ok(tgrag(&inner, &args));
    let again = ok(tgrag(&inner, &args));
    assert!(again.contains("up to date"), "a raw dataset's ingest reran because of the outputs inside it: {again}");
}

#[test]
fn pcst_names_file_and_row_for_every_bad_value_and_commits_its_two_files_together() {
    use arrow::array::UInt64Array;
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let f64s = |v: &[f64]| Arc::new(Float64Array::from(v.to_vec())) as ArrayRef;
    let i64s = |v: &[i64]| Arc::new(Int64Array::from(v.to_vec())) as ArrayRef;
    let nodes = |path: &str, node: ArrayRef, prize: &[f64]| {
        write(&o.join(path), vec![("instance_id", i64s(&vec![3; prize.len()])), ("node", node), ("prize", f64s(prize))])
    };
    let edges = |path: &str, src: &[i64], dst: &[i64], cost: &[f64]| {
        let idx: Vec<i64> = (0..src.len() as i64).collect();
        write(
            &o.join(path),
            vec![
                ("instance_id", i64s(&vec![3; src.len()])),
                ("edge_index", i64s(&idx)),
                ("src", i64s(src)),
                ("dst", i64s(dst)),
                ("cost", f64s(cost)),
            ],
        )
    };
    let good_n = nodes("n.parquet", i64s(&[0, 1, 2]), &[1.0, 0.0, 2.0]);
    let good_e = edges("e.parquet", &[0, 1], &[1, 2], &[0.5, 0.5]);
    let out = o.join("out");
    let pcst = |n: &Path, e: &Path| tgrag(o, &["pcst", "--nodes", s(n), "--edges", s(e), "--out", s(&out)]);
    // A uint64 id above 2^63 is out of range, not "missing".
    let big = nodes("big.parquet", Arc::new(UInt64Array::from(vec![0, 1, u64::MAX])), &[1.0, 1.0, 1.0]);
    refused(&pcst(&big, &good_e), &["big.parquet", "row 2", "`node`", "18446744073709551615 is out of range"], Some(&out));
    let neg = nodes("neg.parquet", i64s(&[0, 1, 2]), &[1.0, 0.0, -0.5]);
    refused(&pcst(&neg, &good_e), &["neg.parquet: row 2, column `prize`: -0.5 is negative"], Some(&out));
    let neg_cost = edges("negc.parquet", &[0, 1], &[1, 2], &[0.5, -1.0]);
    refused(&pcst(&good_n, &neg_cost), &["negc.parquet: row 1, column `cost`: -1 is negative"], Some(&out));
    let far = edges("far.parquet", &[0, 1], &[1, 7], &[0.5, 0.5]);
    refused(&pcst(&good_n, &far), &["far.parquet: row 1, column `dst`: node 7 is not a node of instance 3 (it has 3 nodes"], Some(&out));
    // Two outputs commit together: on a disk with room for one new file only, the old pair stays.
    ok(pcst(&good_n, &good_e));
    let probe = std::process::Command::new("unshare").args(["-rm", "true"]).output();
    if !probe.is_ok_and(|p| p.status.success()) {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true: `unshare -rm` (util-linux) is needed");
        eprintln!("skipped the full-disk half: `unshare -rm` is not available here");
        return;
    }
    let disk = o.join("disk");
    std::fs::create_dir_all(&disk).expect("mount point");
    // 16 pages: the old pair (2), the lock (1), room for one temporary (1), the filler (12).
    let script = r#"mount -t tmpfs -o size=64k tmpfs "$1" && cp "$2"/vertices.parquet "$2"/edges.parquet "$1"/ &&
        head -c 49152 /dev/zero > "$1/fill" && before=$(cat "$1"/*.parquet | sha256sum) && shift 2 && "$@"; rc=$?;
        echo "same: $([ "$before" = "$(cat "$DISK"/*.parquet | sha256sum)" ] && echo yes || echo no)" >&2;
        echo "left: $(ls -A "$DISK" | tr '\n' ' ')" >&2; exit $rc"#;
    let r = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh", s(&disk), s(&out), env!("CARGO_BIN_EXE_tgrag"), "--outputs", s(o), "--quiet", "pcst"])
        .args(["--nodes", s(&good_n), "--edges", s(&good_e), "--out", s(&disk)])
        .env("DISK", &disk)
        .output()
        .expect("unshare");
    refused(&r, &["no space left on device"], None);
    let err = stderr(&r);
    assert!(err.contains("same: yes"), "the old vertices/edges pair must be untouched: {err}");
    let left = err.lines().find_map(|l| l.strip_prefix("left: ")).unwrap_or_else(|| panic!("no listing: {err}"));
    assert!(left.split_whitespace().all(|f| !f.ends_with(".tmp")), "temporaries left: {left}");
}

#[test]
fn a_nights_folder_that_is_a_link_is_refused_before_any_work() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, outside) = (d.path().join("outputs"), d.path().join("outside"));
    let c = canaries(&outside);
    std::fs::create_dir_all(&o).expect("outputs");
    std::os::unix::fs::symlink(&outside, o.join("nightly")).expect("link");
    let r = tgrag(&o, &["nightly", "--sizes", "tiny", "--no-stark", "--datasets", "synthetic"]);
    refused(&r, &["nightly", "is a symbolic link", "does not write through it"], None);
    canaries_intact(&c, "linked nights folder");
    let there: Vec<_> = std::fs::read_dir(&outside).expect("outside").flatten().map(|e| e.file_name()).collect();
    assert_eq!(there.len(), c.len(), "files written outside: {there:?}");
    assert!(!o.join("synthetic").exists(), "nothing ran");
}

/// One case per fault, each with the exit code the README documents: the data (65), the
/// configuration (78), the environment (74); a run that succeeds exits 0.
#[test]
fn exit_codes_say_whose_fault_it_is() {
    use std::os::unix::fs::symlink;
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let (c, q) = corpus(o);
    let out = o.join("r.parquet");
    let code = |r: &Output| r.status.code();
    // The input data: a corpus that is not Parquet, a null in a required column.
    std::fs::write(o.join("bad.parquet"), b"PAR1 this is not parquet PAR1").expect("write");
    let r = tgrag(o, &["bm25", "--corpus", s(&o.join("bad.parquet")), "--queries", s(&q), "--out", s(&out)]);
    failed_cleanly(&r, &["bad.parquet"]);
    assert_eq!(code(&r), Some(65), "{}", stderr(&r));
    let nulls =
        write(&o.join("nulls.parquet"), vec![("doc_id", u32s(&[0, 1])), ("text", Arc::new(StringArray::from(vec![Some("a"), None])))]);
    let r = tgrag(o, &["bm25", "--corpus", s(&nulls), "--queries", s(&q), "--out", s(&out)]);
    failed_cleanly(&r, &["nulls.parquet"]);
    assert_eq!(code(&r), Some(65), "{}", stderr(&r));
    // The configuration: an option a stage does not have, a table that does not exist, a stage that
    // does not exist (a range clap checks is an argument error, 2).
    let r = tgrag(o, &["run", "--size", "tiny", "--set", "bm25.no_such_option=1"]);
    failed_cleanly(&r, &["no_such_option"]);
    assert_eq!(code(&r), Some(78), "{}", stderr(&r));
    let r = tgrag(o, &["schema", "no_such_table"]);
    failed_cleanly(&r, &["no_such_table"]);
    assert_eq!(code(&r), Some(78), "{}", stderr(&r));
    let r = tgrag(o, &["run", "--size", "tiny", "--stages", "no_such_stage"]);
    failed_cleanly(&r, &["no_such_stage"]);
    assert_eq!(code(&r), Some(78), "{}", stderr(&r));
    let r = tgrag(o, &["bm25", "--corpus", s(&c), "--queries", s(&q), "--b", "2", "--out", s(&out)]);
    failed_cleanly(&r, &["--b"]);
    assert_eq!(code(&r), Some(2), "{}", stderr(&r));
    // The environment: the dataset's outputs folder is a link to someone else's folder.
    let outputs = o.join("outputs");
    std::fs::create_dir_all(&outputs).expect("mkdir");
    std::fs::create_dir_all(o.join("elsewhere")).expect("mkdir");
    symlink(o.join("elsewhere"), outputs.join("synthetic")).expect("link");
    let r = tgrag(&outputs, &["run", "--size", "tiny", "--stages", "ingest"]);
    failed_cleanly(&r, &["synthetic"]);
    assert_eq!(code(&r), Some(74), "{}", stderr(&r));
    // And success is 0.
    let r = tgrag(o, &["bm25", "--corpus", s(&c), "--queries", s(&q), "--out", s(&out)]);
    assert_eq!(code(&r), Some(0), "{}", stderr(&r));
}
