//! Hostile input: sql. Damaged Parquet under outputs,
//! statements deep enough to overflow a stack, functions asked for gigabytes, queries that never
//! end, two datasets whose table names collide, a failed stage's files, a leading comment. Every
//! case: a clear error or a bounded answer, never a panic (101), an abort (134) or a signal, within
//! a wall-time bound, and nothing written outside the outputs folder (the temporary folder the
//! process sees and a canary beside the outputs stay as they were).

use std::os::unix::process::ExitStatusExt;

use super::*;

/// Generous for a loaded 2-core machine; the queries below are bounded by `--timeout 2`.
const WALL: Duration = Duration::from_secs(60);

/// An outputs folder, a canary file beside it and an empty folder the process uses as `TMPDIR`.
struct Place {
    _dir: tempfile::TempDir,
    outputs: PathBuf,
    canary: PathBuf,
    tmp: PathBuf,
}

impl Place {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let (outputs, tmp) = (dir.path().join("outputs"), dir.path().join("tmp"));
        std::fs::create_dir_all(&outputs).expect("mkdir");
        std::fs::create_dir_all(&tmp).expect("mkdir");
        let canary = dir.path().join("canary.txt");
        std::fs::write(&canary, b"canary").expect("canary");
        Place { _dir: dir, outputs, canary, tmp }
    }

    /// `tgrag sql …`, timed; checks it ended on its own (no signal, no panic) within `WALL`, and
    /// that nothing outside the outputs folder changed.
    fn sql(&self, args: &[&str]) -> Output {
        let t0 = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_tgrag"))
            .env("TMPDIR", &self.tmp)
            .env("XDG_RUNTIME_DIR", &self.tmp)
            .arg("--outputs")
            .arg(&self.outputs)
            .arg("--quiet")
            .arg("sql")
            .args(args)
            .output()
            .expect("spawn tgrag");
        let took = t0.elapsed();
        let err = stderr(&out);
        assert!(out.status.signal().is_none(), "{args:?}: killed by signal {:?}: {err}", out.status.signal());
        assert!(!matches!(out.status.code(), Some(101 | 134)), "{args:?}: exit {:?} (panic/abort): {err}", out.status.code());
        assert!(took < WALL, "{args:?} took {took:?}");
        assert_eq!(std::fs::read(&self.canary).expect("canary"), b"canary", "{args:?} touched the canary");
        let tmp: Vec<_> = std::fs::read_dir(&self.tmp).expect("tmp").flatten().map(|e| e.path()).collect();
        assert!(tmp.is_empty(), "{args:?} wrote outside the outputs folder: {tmp:?}");
        eprintln!("{args:?} -> exit {:?} in {took:.1?}\n  stderr: {}", out.status.code(), err.trim());
        out
    }

    /// A refusal: the query's fault (78, configuration) or the data's (65, input), and every `must`
    /// in the message.
    fn refused(&self, args: &[&str], must: &[&str]) -> String {
        let out = self.sql(args);
        let err = stderr(&out);
        assert!(
            matches!(out.status.code(), Some(65 | 78)),
            "{args:?} should fail as the query's or data's fault, exit {:?}: stdout {} stderr {err}",
            out.status.code(),
            stdout(&out)
        );
        for m in must {
            assert!(err.contains(m), "{args:?}: missing `{m}` in: {err}");
        }
        err
    }

    /// Success; the printed table.
    fn answered(&self, args: &[&str]) -> (String, String) {
        let out = self.sql(args);
        assert!(out.status.success(), "{args:?} failed: {}", stderr(&out));
        (stdout(&out), stderr(&out))
    }
}

/// A one-column table `x` (UInt32) at `path`.
fn xs(path: &Path, values: &[u32]) -> PathBuf {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let batch = RecordBatch::try_from_iter([("x", Arc::new(UInt32Array::from(values.to_vec())) as ArrayRef)]).expect("batch");
    tgrag_schemas::io::write_parquet_atomic(path, &batch).expect("write");
    path.to_path_buf()
}

/// A manifest for the stage folder `dir` listing `files` with their current size and sha256, the
/// shape the runner writes.
fn manifest(dir: &Path, files: &[&str]) {
    let stage = dir.file_name().and_then(|n| n.to_str()).expect("stage");
    let mut outputs = serde_json::Map::new();
    for f in files {
        let p = dir.join(f);
        let info = serde_json::json!({
            "sha256": tgrag_schemas::io::sha256_file(&p).expect("sha"),
            "bytes": std::fs::metadata(&p).expect("meta").len(),
            "rows": null,
        });
        outputs.insert(f.to_string(), info);
    }
    let m = serde_json::json!({
        "stage": stage, "code_version": "test", "fingerprint": "test", "config": {}, "inputs": {},
        "outputs": outputs, "timings": [], "total_seconds": 0.0, "finished_at_unix": 0,
    });
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec_pretty(&m).expect("json")).expect("manifest");
}

/// The Parquet footer length (the 4 bytes before the closing `PAR1`) set to `len`.
fn with_footer_length(path: &Path, len: u32) {
    let mut b = std::fs::read(path).expect("read");
    let n = b.len();
    b[n - 8..n - 4].copy_from_slice(&len.to_le_bytes());
    std::fs::write(path, b).expect("write");
}

#[test]
fn sql_skips_damaged_parquet_with_a_warning_and_never_panics() {
    let p = Place::new();
    let tool = p.outputs.join("ds").join("tool");
    xs(&tool.join("good.parquet"), &[7]);
    // A footer longer than the file: DataFusion's reader subtracted past zero and panicked on
    // every query, whichever table it named.
    with_footer_length(&xs(&tool.join("long_footer.parquet"), &[1, 2, 3]), 0x7fff_ffff);
    // A footer of the right length but garbage inside.
    let garbage = xs(&tool.join("garbage_footer.parquet"), &[1, 2, 3]);
    let mut b = std::fs::read(&garbage).expect("read");
    let n = b.len();
    let meta_len = u32::from_le_bytes(b[n - 8..n - 4].try_into().expect("4 bytes")) as usize;
    b[n - 8 - meta_len..n - 8].fill(0xff);
    std::fs::write(&garbage, &b).expect("write");
    // The same damage in a stage folder whose manifest lists the damaged bytes.
    let stage = p.outputs.join("ds").join("graph");
    with_footer_length(&xs(&stage.join("graph_stats.parquet"), &[4]), 0xffff_fff0);
    manifest(&stage, &["graph_stats.parquet"]);

    let (out, err) = p.answered(&["SELECT x FROM ds_tool_good"]);
    assert!(out.contains("| 7 |"), "{out}");
    for f in ["long_footer.parquet", "garbage_footer.parquet", "graph_stats.parquet"] {
        assert!(err.contains(f) && err.contains("a corrupt Parquet file"), "{f} not named in the warnings: {err}");
    }
    p.refused(&["SELECT * FROM ds_tool_long_footer"], &["long_footer.parquet (a corrupt Parquet file", "ds_tool_long_footer"]);
    let (list, _) = p.answered(&["--list", ""]);
    assert!(list.contains("ds_tool_good") && !list.contains("long_footer") && !list.contains("ds_graph_graph_stats"), "{list}");

    // A file whose footer is sound but whose data pages are not: an error naming the file, not a
    // panic.
    let pages = xs(&tool.join("bad_pages.parquet"), &(0..5000).collect::<Vec<u32>>());
    let mut b = std::fs::read(&pages).expect("read");
    let end = b.len() - 8 - u32::from_le_bytes(b[b.len() - 8..b.len() - 4].try_into().expect("4 bytes")) as usize;
    // The first half of the data (the page indexes after it stay sound).
    for (i, byte) in b[4..end / 2].iter_mut().enumerate() {
        *byte = (i as u8).wrapping_mul(151).wrapping_add(17);
    }
    std::fs::write(&pages, &b).expect("write");
    p.refused(&["SELECT sum(x) FROM ds_tool_bad_pages"], &["bad_pages.parquet"]);
}

#[test]
fn sql_bounds_the_nesting_of_a_statement_instead_of_overflowing_the_stack() {
    let p = Place::new();
    // The cases run: 600 `+` terms, 800 `OR` terms.
    let plus = format!("SELECT {} AS n", vec!["1"; 600].join(" + "));
    let (out, _) = p.answered(&[&plus]);
    assert!(out.contains("| 600 "), "{out}");
    let ors = format!(
        "SELECT count(*) AS n FROM (VALUES (1), (2), (5000)) t(v) WHERE {}",
        (0..800).map(|i| format!("v = {i}")).collect::<Vec<_>>().join(" OR ")
    );
    let (out, _) = p.answered(&[&ors]);
    assert!(out.contains("| 2 "), "v = 1 and v = 2 match: {out}");
    // Far deeper (as deep as one command-line argument allows): a clear refusal.
    for q in [format!("SELECT {} AS n", vec!["1"; 30_000].join("+")), format!("SELECT 1 WHERE {}", vec!["true"; 12_000].join(" AND "))] {
        p.refused(&[&q], &["nests expressions or subqueries more than 2000 deep"]);
    }
    // Deeply nested parentheses and subqueries hit the parser's recursion limit.
    let parens = format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000));
    p.refused(&[&parens], &["recursion limit"]);
    let sub = format!("SELECT {}1{}", "(SELECT ".repeat(400), ")".repeat(400));
    p.refused(&[&sub], &["recursion limit"]);
}

#[test]
fn sql_bounds_memory_functions_that_build_huge_values_and_time() {
    let p = Place::new();
    // Functions whose result size their arguments choose are refused before they allocate.
    for (q, f) in [
        ("SELECT repeat('x', 2000000000)", "`repeat` would build 2000000000 bytes"),
        ("SELECT length(repeat('abc', 1000000000))", "`repeat` would build 3000000000 bytes"),
        ("SELECT lpad('x', 2000000000)", "`lpad` would build"),
        ("SELECT rpad('x', 2000000000, 'yz')", "`rpad` would build"),
        ("SELECT length(replace(repeat('a', 100000), 'a', repeat('b', 100000)))", "`replace` would build"),
    ] {
        p.refused(&[q], &[f, "--memory-limit"]);
    }
    // The bound follows --memory-limit; under it, the same functions work.
    let (out, _) = p.answered(&["SELECT length(repeat('ab', 1000000)) AS n"]);
    assert!(out.contains("| 2000000 "), "{out}");
    p.refused(&["--memory-limit", "16MiB", "SELECT length(repeat('ab', 3000000)) AS n"], &["`repeat` would build 6000000 bytes"]);
    // Operators that hold rows stop at the memory pool's limit (and spill nothing to disk: the
    // process's temporary folder stays empty).
    p.refused(
        &[
            "--memory-limit",
            "16MiB",
            "--timeout",
            "30",
            "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY v DESC) AS r FROM generate_series(1, 3000000) t(v))",
        ],
        &["needs more memory than --memory-limit allows (16777216 bytes)", "Memory Exhausted while Sorting"],
    );
    // This DataFusion takes no float bounds: the issue's `generate_series(1, 1e9)` is a planning error.
    p.refused(&["SELECT * FROM generate_series(1, 1e9)"], &["must be an INTEGER"]);
    // A query that never ends stops at --timeout.
    let t0 = Instant::now();
    p.refused(
        &["--timeout", "2", "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t"],
        &["ran longer than --timeout 2 s"],
    );
    p.refused(&["--timeout", "2", "SELECT count(*) FROM range(10000000000000)"], &["ran longer than --timeout 2 s"]);
    p.refused(&["--timeout", "2", "SELECT count(*) FROM generate_series(1, 1000000000)"], &["ran longer than --timeout 2 s"]);
    assert!(t0.elapsed() < WALL, "three 2-second timeouts took {:?}", t0.elapsed());
    // Rows beyond --max-rows are counted, not printed.
    let (out, err) = p.answered(&["--max-rows", "10", "SELECT v FROM generate_series(1, 2500) t(v) ORDER BY v"]);
    let rows = out.lines().filter(|l| l.starts_with("| ") && !l.contains(" v ")).count();
    assert_eq!(rows, 10, "{out}");
    assert!(out.contains("| 10 ") && !out.contains("| 11 "), "{out}");
    assert!(err.contains("2500 rows: the first 10 are shown, 2490 left out by --max-rows 10"), "{err}");
    // An endless table prints its first rows; the count of the rest stops at the time limit.
    let (out, err) = p.answered(&["--timeout", "2", "--max-rows", "5", "SELECT * FROM range(10000000000000)"]);
    assert_eq!(out.lines().filter(|l| l.starts_with("| ") && !l.contains("value")).count(), 5, "{out}");
    assert!(err.contains("more than 5 rows") && err.contains("passed --timeout 2 s"), "{err}");
    // The flags themselves are checked.
    for (args, m) in [
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "-1"], "--timeout"),
        (["--max-rows", "0"], "--max-rows"),
        (["--memory-limit", "1KiB"], "must be within [16MiB, 1TiB]"),
        (["--memory-limit", "2 parsecs"], "unknown unit"),
    ] {
        let out = p.sql(&[args[0], args[1], "SELECT 1"]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(m), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn sql_names_are_injective_when_two_datasets_would_share_one() {
    let p = Place::new();
    for (ds, v) in [("kb-x", 1u32), ("kb_x", 2), ("other", 3)] {
        let dir = p.outputs.join(ds).join("ingest");
        xs(&dir.join("nodes.parquet"), &[v]);
        manifest(&dir, &["nodes.parquet"]);
    }
    // The ordinary name stays as the README documents it.
    let (out, _) = p.answered(&["SELECT x FROM other_ingest_nodes"]);
    assert!(out.contains("| 3 "), "{out}");
    // The shared name reads neither (it used to read one of them silently) and says why.
    let err = p.refused(&["SELECT x FROM kb_x_ingest_nodes"], &["`kb_x_ingest_nodes` would name 2 files", "\"kb-x/ingest/nodes\""]);
    assert!(err.contains(&p.outputs.join("kb-x/ingest/nodes.parquet").display().to_string()), "{err}");
    assert!(err.contains(&p.outputs.join("kb_x/ingest/nodes.parquet").display().to_string()), "{err}");
    // Each is reachable by its path, quoted.
    let (out, _) = p.answered(&["SELECT x FROM \"kb-x/ingest/nodes\""]);
    assert!(out.contains("| 1 "), "{out}");
    let (out, _) = p.answered(&["SELECT x FROM \"kb_x/ingest/nodes\""]);
    assert!(out.contains("| 2 "), "{out}");
    let (list, _) = p.answered(&["--list", ""]);
    assert!(
        list.contains("\"kb-x/ingest/nodes\"") && list.contains("\"kb_x/ingest/nodes\"") && list.contains("other_ingest_nodes"),
        "{list}"
    );
    assert!(!list.lines().any(|l| l.starts_with("kb_x_ingest_nodes")), "{list}");
}

#[test]
fn sql_sees_only_what_a_valid_manifest_lists() {
    let p = Place::new();
    // A stage that committed a table and then failed: no manifest.
    let failed = p.outputs.join("ds").join("bm25");
    xs(&failed.join("run.parquet"), &[1]);
    // A finished stage: what its manifest lists (and its timings) is visible; a file it does not
    // list, or one changed since, is not.
    let done = p.outputs.join("ds").join("dense");
    xs(&done.join("run.parquet"), &[2]);
    xs(&done.join("embeddings.parquet"), &[3]);
    xs(&done.join("timings.parquet"), &[4]);
    manifest(&done, &["run.parquet", "embeddings.parquet"]);
    xs(&done.join("planted.parquet"), &[5]);
    xs(&done.join("embeddings.parquet"), &[6, 6]);
    // A manifest that is not one (truncated) hides its folder.
    let torn = p.outputs.join("ds").join("mor");
    xs(&torn.join("plans.parquet"), &[7]);
    manifest(&torn, &["plans.parquet"]);
    let text = std::fs::read(torn.join("manifest.json")).expect("read");
    std::fs::write(torn.join("manifest.json"), &text[..text.len() / 2]).expect("write");
    // File-tool outputs outside stage folders keep today's behaviour: visible.
    xs(&p.outputs.join("ds").join("mytool").join("run.parquet"), &[8]);

    let (out, err) =
        p.answered(&["SELECT x FROM ds_dense_run UNION ALL SELECT x FROM ds_dense_timings UNION ALL SELECT x FROM ds_mytool_run"]);
    for v in ["| 2 ", "| 4 ", "| 8 "] {
        assert!(out.contains(v), "{v}: {out}");
    }
    assert!(err.contains(&format!("skipping {} (a stage folder without a valid manifest.json", failed.display())), "{err}");
    assert!(err.contains(&format!("skipping {} (a stage folder without a valid manifest.json", torn.display())), "{err}");
    assert!(err.contains("planted.parquet (not an output listed in manifest.json)"), "{err}");
    assert!(err.contains("embeddings.parquet (modified since its stage wrote it"), "{err}");
    for t in ["ds_bm25_run", "ds_dense_planted", "ds_dense_embeddings", "ds_mor_plans"] {
        p.refused(&[&format!("SELECT * FROM {t}")], &[&format!("{t}' not found")]);
    }
}

#[test]
fn sql_hides_a_real_stage_once_its_manifest_is_gone() {
    let p = Place::new();
    ok(tgrag(&p.outputs, &["run", "--size", "tiny", "--stages", "ingest"]));
    let nodes = tgrag_schemas::io::read_parquet(&p.outputs.join("synthetic/ingest/nodes.parquet")).expect("nodes");
    let (out, _) = p.answered(&["SELECT count(*) AS n FROM synthetic_ingest_nodes"]);
    assert!(out.contains(&format!("| {} ", nodes.num_rows())), "{out}");
    // What a failed rerun leaves: the outputs, no manifest (the runner deletes it first).
    std::fs::remove_file(p.outputs.join("synthetic/ingest/manifest.json")).expect("rm");
    p.refused(&["SELECT count(*) AS n FROM synthetic_ingest_nodes"], &["synthetic/ingest (a stage folder without a valid manifest.json"]);
}

#[test]
fn sql_statements_may_start_with_a_comment() {
    let p = Place::new();
    for q in ["/* c */ SELECT 1 AS one", "-- c\nSELECT 1 AS one", "/* a */ -- b\n(SELECT 1 AS one)"] {
        let (out, _) = p.answered(&[q]);
        assert!(out.contains("| 1   |"), "{q}: {out}");
    }
    // A comment does not hide what follows it.
    p.refused(&["/* SELECT */ DROP TABLE t"], &["read-only", "`DROP` statements are refused"]);
    p.refused(&["-- SELECT\nCOPY (SELECT 1) TO 'x.csv'"], &["read-only", "`COPY`"]);
    p.refused(&["/* nothing */"], &["read-only", "`empty`"]);
}
