//! `tgrag evaluate`: STaRK's evaluator (or MoR's) over any run file. Inputs are checked (file, row,
//! column) before anything is computed; the output is written atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Float32Type, UInt32Type};
use tgrag_schemas::rows::Rows;
use tgrag_schemas::tables;
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
        bail_input!("{}: column `{name}` is {}, expected numbers", path.display(), c.data_type());
    }
    let cast = arrow::compute::cast(c, to)?;
    if cast.null_count() > 0
        && let Some(row) = (0..cast.len()).find(|&i| cast.is_null(i))
    {
        bail_input!("{}: row {row}, column `{name}`: missing value, or not a {to} (negative or too large)", path.display());
    }
    Ok(cast)
}

pub fn run(a: EvaluateArgs) -> Result<()> {
    let mode = match a.mode {
        ModeArg::Stark => EvalMode::Stark,
        ModeArg::Mor => EvalMode::Mor,
    };
    if a.num_candidates == 0 {
        bail_config!("--num-candidates 0: give the number of candidates N (ids 0..N−1)");
    }
    let run = tgrag_schemas::io::read_parquet(&a.run)?;
    let answers = tgrag_schemas::io::read_parquet(&a.answers)?;
    check_inputs(&a, &run, &answers, mode)?;
    let (has_methods, by_method) = run_rows(&run, &a.run)?;
    let gold = gold_answers(&answers, &a.answers)?;
    let rows = evaluate_all(&by_method, &gold, a.num_candidates, mode);
    // The declared table: with a `method` column when the run has one.
    let spec = if has_methods { &tables::EVALUATE_PER_METHOD_QUERY } else { &tables::EVALUATE_PER_QUERY };
    let mut out = Rows::new(spec);
    for r in &rows {
        if has_methods {
            out.put(r.method.unwrap_or(""));
        }
        out.put(r.query_id).put(r.hit1).put(r.hit5).put(r.recall20).put(r.mrr).end_row();
    }
    tgrag_schemas::io::write_table(spec, &a.out, &out.finish()?)?;
    print_means(&by_method, &rows);
    eprintln!("evaluate ({}) → {}", if mode == EvalMode::Stark { "stark" } else { "mor" }, a.out.display());
    Ok(())
}

/// Shared checks: answers must exist; a `method` column, when given, names every row's method.
/// An empty run is allowed, with a warning saying what it scores.
fn check_inputs(a: &EvaluateArgs, run: &RecordBatch, answers: &RecordBatch, mode: EvalMode) -> Result<()> {
    use tgrag_schemas::validate::{InputRules, check_input};
    check_input(
        &a.answers,
        "evaluate answers",
        answers,
        &InputRules { required: &["query_id", "node_id"], non_empty: true, ..Default::default() },
    )?;
    let method_req: &[&str] = if run.column_by_name("method").is_some() { &["method"] } else { &[] };
    check_input(&a.run, "evaluate run", run, &InputRules { required: method_req, finite: &["score"], ..Default::default() })?;
    if run.num_rows() == 0 {
        let what = match mode {
            EvalMode::Stark => "every candidate ties at score 0 and ties keep node-id order, as in STaRK's evaluator",
            EvalMode::Mor => "every query scores 0",
        };
        eprintln!("warning: {}: the run has no rows; {what}", a.run.display());
    }
    Ok(())
}

/// Run rows by method (`None`: the run has no `method` column), then by query: (node, score).
type ByMethod<'a> = BTreeMap<Option<&'a str>, BTreeMap<u32, Vec<(u32, f32)>>>;

/// The run's rows grouped by method and query (one empty group when the run has no rows), and
/// whether it has a `method` column.
fn run_rows<'a>(run: &'a RecordBatch, path: &Path) -> Result<(bool, ByMethod<'a>)> {
    let rq = column(run, path, "query_id", &DataType::UInt32)?;
    let rn = column(run, path, "node_id", &DataType::UInt32)?;
    let rs = column(run, path, "score", &DataType::Float32)?;
    let (rq, rn, rs) = (rq.as_primitive::<UInt32Type>(), rn.as_primitive::<UInt32Type>(), rs.as_primitive::<Float32Type>());
    if let Some(row) = (0..rs.len()).find(|&i| !rs.value(i).is_finite()) {
        bail_input!("{}: row {row}, column `score`: {} is not a finite score", path.display(), rs.value(row));
    }
    let methods: Option<&StringArray> = match run.column_by_name("method") {
        Some(c) => Some(
            c.as_string_opt::<i32>().with_context(|| format!("{}: column `method` is {}, expected utf8", path.display(), c.data_type()))?,
        ),
        None => None,
    };
    let mut by_method: ByMethod = BTreeMap::new();
    for i in 0..rq.len() {
        let m = methods.map(|m| m.value(i));
        by_method.entry(m).or_default().entry(rq.value(i)).or_default().push((rn.value(i), rs.value(i)));
    }
    if by_method.is_empty() {
        by_method.insert(None, BTreeMap::new());
    }
    Ok((methods.is_some(), by_method))
}

/// The answers by query.
fn gold_answers(answers: &RecordBatch, path: &Path) -> Result<BTreeMap<u32, Vec<u32>>> {
    let aq = column(answers, path, "query_id", &DataType::UInt32)?;
    let an = column(answers, path, "node_id", &DataType::UInt32)?;
    let (aq, an) = (aq.as_primitive::<UInt32Type>(), an.as_primitive::<UInt32Type>());
    let mut gold: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for i in 0..aq.len() {
        gold.entry(aq.value(i)).or_default().push(an.value(i));
    }
    Ok(gold)
}

/// Every method's metrics for every query with answers or with a run row; a query without answers
/// scores 0 everywhere.
fn evaluate_all<'a>(by_method: &ByMethod<'a>, gold: &BTreeMap<u32, Vec<u32>>, num_candidates: u32, mode: EvalMode) -> Vec<Evaluated<'a>> {
    let cands = Candidates::range(num_candidates);
    let mut rows: Vec<Evaluated> = Vec::new();
    for (method, runs) in by_method {
        let mut qids: Vec<u32> = gold.keys().chain(runs.keys()).copied().collect();
        qids.sort_unstable();
        qids.dedup();
        for q in qids {
            let ans = gold.get(&q).map_or(&[][..], Vec::as_slice);
            let r = runs.get(&q).map_or(&[][..], Vec::as_slice);
            let m = if ans.is_empty() { Default::default() } else { query_metrics(r, ans, &cands, mode) };
            rows.push(Evaluated { method: *method, query_id: q, hit1: m.hit1, hit5: m.hit5, recall20: m.recall20, mrr: m.mrr });
        }
    }
    rows
}

/// One line per method: its number of queries and mean metrics.
fn print_means(by_method: &ByMethod, rows: &[Evaluated]) {
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    for method in by_method.keys() {
        let of: Vec<&Evaluated> = rows.iter().filter(|r| r.method == *method).collect();
        let pick = |f: fn(&Evaluated) -> f64| mean(&of.iter().map(|r| f(r)).collect::<Vec<_>>());
        println!(
            "{}{} queries: hit@1 {:.4}  hit@5 {:.4}  recall@20 {:.4}  mrr {:.4}",
            method.map(|m| format!("{m}: ")).unwrap_or_default(),
            of.len(),
            pick(|r| r.hit1),
            pick(|r| r.hit5),
            pick(|r| r.recall20),
            pick(|r| r.mrr)
        );
    }
}

/// One query's metrics under one method of the run (`None`: the run has no `method` column).
struct Evaluated<'a> {
    method: Option<&'a str>,
    query_id: u32,
    hit1: f64,
    hit5: f64,
    recall20: f64,
    mrr: f64,
}
