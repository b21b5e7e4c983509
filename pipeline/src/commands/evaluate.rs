//! `tgrag evaluate`: STaRK's evaluator (or MoR's) over any run file. Inputs are checked (file, row,
//! column) before anything is computed; the output is written atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use arrow::array::{Array, ArrayRef, AsArray, Float64Array, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Float32Type, Schema, UInt32Type};
use tgrag_stages::evaluation::ranking::{Candidates, EvalMode, query_metrics};

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// STaRK: unretrieved candidates score min(retrieved) − 1.
    Stark,
    /// MoR's evaluator: unretrieved candidates score 0.
    Mor,
}

/// `tgrag evaluate` arguments.
#[derive(Debug, clap::Args)]
pub struct EvaluateArgs {
    /// Run Parquet: `query_id`, `node_id`, `score` (any float or integer type; compared as f32,
    /// as STaRK does); an optional `method` column evaluates each method apart.
    #[arg(long)]
    pub run: PathBuf,
    /// Answers Parquet: `query_id`, `node_id`.
    #[arg(long)]
    pub answers: PathBuf,
    /// Candidates are the ids 0..N−1; run rows outside them are ignored, as STaRK does.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::commands::num::candidates)]
    pub num_candidates: u32,
    /// How unretrieved candidates score.
    #[arg(long, value_enum, default_value_t = ModeArg::Stark)]
    pub mode: ModeArg,
    /// Output Parquet, one row per (method,) query: `query_id`, `hit1`, `hit5`, `recall20`, `mrr`.
    #[arg(long)]
    pub out: PathBuf,
}

/// A column cast to `to`, refusing nulls with the file, row and column.
fn column(b: &RecordBatch, path: &Path, name: &str, to: &DataType) -> Result<ArrayRef> {
    let c = b.column_by_name(name).with_context(|| format!("{}: missing column `{name}`", path.display()))?;
    if !(c.data_type().is_integer() || c.data_type().is_floating()) {
        bail!("{}: column `{name}` is {}, expected numbers", path.display(), c.data_type());
    }
    let cast = arrow::compute::cast(c, to)?;
    if cast.null_count() > 0
        && let Some(row) = (0..cast.len()).find(|&i| cast.is_null(i))
    {
        bail!("{}: row {row}, column `{name}`: missing value, or not a {to} (negative or too large)", path.display());
    }
    Ok(cast)
}

pub fn run(a: EvaluateArgs) -> Result<()> {
    let mode = match a.mode {
        ModeArg::Stark => EvalMode::Stark,
        ModeArg::Mor => EvalMode::Mor,
    };
    if a.num_candidates == 0 {
        bail!("--num-candidates 0: give the number of candidates N (ids 0..N−1)");
    }
    let run = tgrag_schemas::io::read_parquet(&a.run)?;
    let answers = tgrag_schemas::io::read_parquet(&a.answers)?;
    // Shared checks: answers must exist; a `method` column, when given, names every row's method.
    use tgrag_schemas::validate::{InputRules, check_input};
    check_input(
        &a.answers,
        "evaluate answers",
        &answers,
        &InputRules { required: &["query_id", "node_id"], non_empty: true, ..Default::default() },
    )?;
    let method_req: &[&str] = if run.column_by_name("method").is_some() { &["method"] } else { &[] };
    check_input(&a.run, "evaluate run", &run, &InputRules { required: method_req, finite: &["score"], ..Default::default() })?;
    if run.num_rows() == 0 {
        let what = match mode {
            EvalMode::Stark => "every candidate ties at score 0 and ties keep node-id order, as in STaRK's evaluator",
            EvalMode::Mor => "every query scores 0",
        };
        eprintln!("warning: {}: the run has no rows; {what}", a.run.display());
    }
    let rq = column(&run, &a.run, "query_id", &DataType::UInt32)?;
    let rn = column(&run, &a.run, "node_id", &DataType::UInt32)?;
    let rs = column(&run, &a.run, "score", &DataType::Float32)?;
    let (rq, rn, rs) = (rq.as_primitive::<UInt32Type>(), rn.as_primitive::<UInt32Type>(), rs.as_primitive::<Float32Type>());
    if let Some(row) = (0..rs.len()).find(|&i| !rs.value(i).is_finite()) {
        bail!("{}: row {row}, column `score`: {} is not a finite score", a.run.display(), rs.value(row));
    }
    let methods: Option<&StringArray> = match run.column_by_name("method") {
        Some(c) => Some(
            c.as_string_opt::<i32>()
                .with_context(|| format!("{}: column `method` is {}, expected utf8", a.run.display(), c.data_type()))?,
        ),
        None => None,
    };
    let aq = column(&answers, &a.answers, "query_id", &DataType::UInt32)?;
    let an = column(&answers, &a.answers, "node_id", &DataType::UInt32)?;
    let (aq, an) = (aq.as_primitive::<UInt32Type>(), an.as_primitive::<UInt32Type>());

    let mut gold: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for i in 0..aq.len() {
        gold.entry(aq.value(i)).or_default().push(an.value(i));
    }
    #[allow(clippy::type_complexity)]
    let mut by_method: BTreeMap<Option<&str>, BTreeMap<u32, Vec<(u32, f32)>>> = BTreeMap::new();
    for i in 0..rq.len() {
        let m = methods.map(|m| m.value(i));
        by_method.entry(m).or_default().entry(rq.value(i)).or_default().push((rn.value(i), rs.value(i)));
    }
    if by_method.is_empty() {
        by_method.insert(None, BTreeMap::new());
    }
    let cands = Candidates::range(a.num_candidates);
    let (mut m_, mut q_, mut h1, mut h5, mut r20, mut mrr) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (method, runs) in &by_method {
        // Every query with answers or with a run row; a query without answers scores 0 everywhere.
        let mut qids: Vec<u32> = gold.keys().chain(runs.keys()).copied().collect();
        qids.sort_unstable();
        qids.dedup();
        for q in qids {
            let ans = gold.get(&q).map_or(&[][..], Vec::as_slice);
            let r = runs.get(&q).map_or(&[][..], Vec::as_slice);
            let m = if ans.is_empty() { Default::default() } else { query_metrics(r, ans, &cands, mode) };
            m_.push(*method);
            q_.push(q);
            h1.push(m.hit1);
            h5.push(m.hit5);
            r20.push(m.recall20);
            mrr.push(m.mrr);
        }
    }
    let mut fields = vec![];
    let mut cols: Vec<ArrayRef> = vec![];
    if methods.is_some() {
        fields.push(Field::new("method", DataType::Utf8, false));
        cols.push(Arc::new(StringArray::from_iter_values(m_.iter().map(|m| m.unwrap_or("")))));
    }
    fields.push(Field::new("query_id", DataType::UInt32, false));
    cols.push(Arc::new(UInt32Array::from(q_.clone())));
    for (name, v) in [("hit1", &h1), ("hit5", &h5), ("recall20", &r20), ("mrr", &mrr)] {
        fields.push(Field::new(name, DataType::Float64, false));
        cols.push(Arc::new(Float64Array::from(v.clone())));
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?;
    tgrag_schemas::io::write_parquet_atomic(&a.out, &batch)?;
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    for method in by_method.keys() {
        let idx: Vec<usize> = (0..m_.len()).filter(|&i| m_[i] == *method).collect();
        let pick = |v: &[f64]| mean(&idx.iter().map(|&i| v[i]).collect::<Vec<_>>());
        println!(
            "{}{} queries: hit@1 {:.4}  hit@5 {:.4}  recall@20 {:.4}  mrr {:.4}",
            method.map(|m| format!("{m}: ")).unwrap_or_default(),
            idx.len(),
            pick(&h1),
            pick(&h5),
            pick(&r20),
            pick(&mrr)
        );
    }
    eprintln!("evaluate ({}) → {}", if mode == EvalMode::Stark { "stark" } else { "mor" }, a.out.display());
    Ok(())
}
