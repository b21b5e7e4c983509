//! The contract covers the file tools: every Parquet file a tool writes is a declared table that
//! `tgrag schema` lists, with the declaration's columns (names, order, types, required values).

use std::path::Path;

use super::{fixture, ok, table, tgrag};

/// `file` is the declared table `name`, read back from disk (its rows: at least `min_rows`).
fn assert_declared(file: &Path, name: &str, min_rows: usize) {
    let spec = tgrag_schemas::tables::by_name(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let b = table(file);
    tgrag_schemas::validate::check_written(spec, &b).unwrap_or_else(|e| panic!("{} is not table `{name}`: {e}", file.display()));
    assert!(b.num_rows() >= min_rows, "{}: {} rows", file.display(), b.num_rows());
}

/// `tgrag schema` lists `name` and `tgrag schema <name>` shows its columns.
fn assert_listed(o: &Path, name: &str) {
    let listing = ok(tgrag(o, &["schema"]));
    assert!(listing.lines().any(|l| l.split_whitespace().next() == Some(name)), "`tgrag schema` does not list {name}:\n{listing}");
    let one = ok(tgrag(o, &["schema", name]));
    let spec = tgrag_schemas::tables::by_name(name).expect("declared");
    for c in spec.columns {
        assert!(one.contains(c.name), "`tgrag schema {name}` lacks column {}:\n{one}", c.name);
    }
}

#[test]
fn pcst_writes_declared_tables() {
    let fx = fixture("pcst");
    let d = tempfile::tempdir().expect("tmp");
    let out = d.path().join("out");
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let (n, e, o) = (s(&fx.join("nodes.parquet")), s(&fx.join("edges.parquet")), s(&out));
    ok(tgrag(d.path(), &["pcst", "--nodes", &n, "--edges", &e, "--out", &o]));
    assert_declared(&out.join("vertices.parquet"), "pcst_vertices", 1);
    assert_declared(&out.join("edges.parquet"), "pcst_edges", 1);
    for t in ["pcst_vertices", "pcst_edges"] {
        assert_listed(d.path(), t);
    }
}

#[test]
fn train_planner_writes_declared_tables() {
    let Some(src) = super::shared_or_skip("datasets/mor-plans/mag", "plans_val.jsonl") else { return };
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let plans = super::plan_slice(&src, o, [40, 80, 20]);
    let m = o.join("m");
    let (p, ms) = (plans.to_str().expect("utf8"), m.to_str().expect("utf8"));
    ok(tgrag(o, &["train-planner", "--plans", p, "--out", ms, "--encoder", "hash", "--epochs", "1", "--tagger-epochs", "1"]));
    for (file, t, min_rows) in [
        ("curves.parquet", "curves", 1),
        ("validation.parquet", "planner_validation", 20),
        ("dropped.parquet", "planner_dropped", 0),
        ("report.parquet", "planner_report", 1),
    ] {
        assert_declared(&m.join(file), t, min_rows);
        assert_listed(o, t);
    }
    // `tgrag plan` with that model: text query ids stay text.
    let (q, p_out) = (o.join("q.parquet"), o.join("p.parquet"));
    write(&q, &[("query_id", strs(&["q1", "q2"])), ("text", strs(&["papers by an author on a field", "authors of a paper"]))]);
    ok(tgrag(o, &["plan", "--model", ms, "--queries", q.to_str().expect("utf8"), "--out", p_out.to_str().expect("utf8")]));
    assert_declared(&p_out, "query_plans", 2);
    assert_listed(o, "query_plans");
}

fn strs(v: &[&str]) -> arrow::array::ArrayRef {
    std::sync::Arc::new(arrow::array::StringArray::from(v.to_vec()))
}

fn write(path: &Path, cols: &[(&str, arrow::array::ArrayRef)]) {
    let b = arrow::array::RecordBatch::try_from_iter(cols.iter().cloned()).expect("batch");
    tgrag_schemas::io::write_parquet_atomic(path, &b).expect("write");
}

#[test]
fn bm25_and_embed_write_declared_tables_with_the_inputs_id_types() {
    use std::sync::Arc;
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let (c, q, r) = (o.join("c.parquet"), o.join("q.parquet"), o.join("r.parquet"));
    write(&c, &[("doc_id", strs(&["d1", "d2", "d3"])), ("text", strs(&["graph retrieval", "planning queries", "graph planning"]))]);
    let qids = Arc::new(arrow::array::Int64Array::from(vec![7i64, 9])) as arrow::array::ArrayRef;
    write(&q, &[("query_id", qids), ("text", strs(&["graph", "planning"]))]);
    ok(tgrag(o, &["bm25", "--corpus", &s(&c), "--queries", &s(&q), "--out", &s(&r), "--k", "2"]));
    assert_declared(&r, "bm25_ranking", 2);
    assert_listed(o, "bm25_ranking");
    let b = table(&r);
    // The ids keep the inputs' types.
    assert_eq!(b.column(0).data_type(), &arrow::datatypes::DataType::Int64);
    assert_eq!(b.column(1).data_type(), &arrow::datatypes::DataType::Utf8);
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/all-MiniLM-L6-v2");
    if !model.join("model.safetensors").exists() {
        super::skip(&format!("embed part: no model in {} (run `make models`)", model.display()));
        return;
    }
    let (t, e) = (o.join("t.parquet"), o.join("e.parquet"));
    write(&t, &[("id", strs(&["a", "b", "c"])), ("text", strs(&["graph retrieval", "planning queries", "graph planning"]))]);
    ok(tgrag(o, &["embed", "--input", &s(&t), "--out", &s(&e), "--model", &s(&model)]));
    assert_declared(&e, "embed_vectors", 3);
    assert_listed(o, "embed_vectors");
}

#[test]
fn evaluate_writes_the_declared_table_with_or_without_methods() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array};
    let d = tempfile::tempdir().expect("tmp");
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let (run, ans, m) = (d.path().join("R.parquet"), d.path().join("A.parquet"), d.path().join("M.parquet"));
    let u32s = |v: Vec<u32>| Arc::new(UInt32Array::from(v)) as ArrayRef;
    let gold = RecordBatch::try_from_iter([("query_id", u32s(vec![1, 2])), ("node_id", u32s(vec![9, 3]))]).expect("gold");
    tgrag_schemas::io::write_parquet_atomic(&ans, &gold).expect("answers");
    let mut cols = vec![
        ("query_id", u32s(vec![1, 1, 2])),
        ("node_id", u32s(vec![5, 9, 3])),
        ("score", Arc::new(Float64Array::from(vec![0.5, 0.4, 1.0])) as ArrayRef),
    ];
    for (table, method) in [("evaluate_per_query", false), ("evaluate_per_method_query", true)] {
        if method {
            cols.push(("method", Arc::new(StringArray::from(vec!["a", "a", "b"])) as ArrayRef));
        }
        tgrag_schemas::io::write_parquet_atomic(&run, &RecordBatch::try_from_iter(cols.clone()).expect("run")).expect("run");
        ok(tgrag(d.path(), &["evaluate", "--run", &s(&run), "--answers", &s(&ans), "--num-candidates", "10", "--out", &s(&m)]));
        assert_declared(&m, table, 2);
        assert_listed(d.path(), table);
    }
}

#[test]
fn diffusion_and_graphwave_write_declared_tables_one_column_per_dimension() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array, UInt32Array};
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let (e, r) = (o.join("e.parquet"), o.join("r.parquet"));
    let u32s = |v: Vec<u32>| Arc::new(UInt32Array::from(v)) as ArrayRef;
    let f64s = |v: Vec<f64>| Arc::new(Float64Array::from(v)) as ArrayRef;
    write(&e, &[("src", u32s(vec![0, 1, 2])), ("dst", u32s(vec![1, 2, 3]))]);
    write(&r, &[("node", u32s(vec![0, 1, 2, 3])), ("r00", f64s(vec![1.0, 0.0, 0.5, 2.0])), ("r01", f64s(vec![0.0, 1.0, 1.5, 1.0]))]);
    for (flag, name) in [(None, "diffusion_embeddings"), (Some("--f64"), "diffusion_embeddings_f64")] {
        let p = o.join(format!("{name}.parquet"));
        let mut args = vec!["diffusion".to_string(), "--edges".into(), s(&e), "--projection".into(), s(&r), "--out".into(), s(&p)];
        args.extend(flag.map(String::from));
        ok(tgrag(o, &args.iter().map(String::as_str).collect::<Vec<_>>()));
        assert_declared(&p, name, 4);
        assert_eq!(table(&p).num_columns(), 3, "node, p00, p01");
        assert_listed(o, name);
    }
    let w = o.join("w.parquet");
    ok(tgrag(o, &["graphwave", "--edges", &s(&e), "--scales", "1", "--points", "2", "--out", &s(&w)]));
    assert_declared(&w, "graphwave_embeddings", 4);
    let names: Vec<String> = table(&w).schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, ["node", "f000", "f001", "f002", "f003"]);
    assert_listed(o, "graphwave_embeddings");
    // `tgrag schema --json` names the run's columns.
    let json: serde_json::Value = serde_json::from_str(&ok(tgrag(o, &["schema", "graphwave_embeddings", "--json"]))).expect("json");
    assert_eq!(json["columns"][1]["type"], "run<float64>");
    assert_eq!(json["columns"][1]["run"]["first"], "f000");
}
