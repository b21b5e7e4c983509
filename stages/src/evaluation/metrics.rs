//! `metrics`: every `run` table of the upstream stages (every stage that declares a `run` output,
//! found through [`crate::StageInfo::collects`]) evaluated with STaRK's evaluator semantics
//! ([`crate::evaluation::ranking`]), per query, then aggregated with DataFusion SQL by method and by
//! split, logical pattern and hop count, written as `scores` rows (the stage that wrote the run, the
//! method, `hit1`, `hit5`, `recall20`, `mrr`; `mor_hit1`, … under `mode = "mor"`, so the scores say
//! which evaluator made them), which the `report` stage renders.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, RecordBatch};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns::{self, opt_str};
use tgrag_schemas::rows::{Row, Rows};
use tgrag_schemas::{tables, validate};

use crate::evaluation::ranking::{Candidates, EvalMode, query_metrics};
use crate::shared::scores::{ALL, ALL_SPLITS, Scores};
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `metrics` stage.
#[derive(Debug, Clone, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    pub mode: EvalMode,
}

/// Per-query metric rows of one run table (which may hold several methods).
pub fn per_query(
    run: &RecordBatch,
    queries: &RecordBatch,
    answers: &RecordBatch,
    cands: &Candidates,
    mode: EvalMode,
) -> Result<RecordBatch> {
    let (rq, rn, rs, rm) =
        (columns::u32s(run, "query_id")?, columns::u32s(run, "node_id")?, columns::f32s(run, "score")?, columns::strs(run, "method")?);
    #[allow(clippy::type_complexity)]
    let mut by_method: BTreeMap<&str, HashMap<u32, Vec<(u32, f32)>>> = BTreeMap::new();
    for i in 0..run.num_rows() {
        by_method.entry(rm.value(i)).or_default().entry(rq.value(i)).or_default().push((rn.value(i), rs.value(i)));
    }
    let mut gold: HashMap<u32, Vec<u32>> = HashMap::new();
    let (aq, an) = (columns::u32s(answers, "query_id")?, columns::u32s(answers, "node_id")?);
    for i in 0..answers.num_rows() {
        gold.entry(aq.value(i)).or_default().push(an.value(i));
    }
    let (qid, split) = (columns::u32s(queries, "query_id")?, columns::strs(queries, "split")?);
    let pattern = columns::strs(queries, "pattern")?;
    let hops = columns::u8s(queries, "hops")?;
    let mut order: Vec<usize> = (0..queries.num_rows()).collect();
    order.sort_unstable_by_key(|&i| qid.value(i));

    let mut out = Rows::new(&tables::METRICS_PER_QUERY);
    for (method, runs) in &by_method {
        for &i in &order {
            let q = qid.value(i);
            let ans = gold.get(&q).map_or(&[][..], Vec::as_slice);
            let m = query_metrics(runs.get(&q).map_or(&[][..], Vec::as_slice), ans, cands, mode);
            out.push(&PerQueryRow {
                method,
                query_id: q,
                split: split.value(i),
                pattern: opt_str(pattern, i),
                hops: (!hops.is_null(i)).then(|| hops.value(i)),
                num_answers: ans.len() as u32,
                hit1: m.hit1,
                hit5: m.hit5,
                recall20: m.recall20,
                mrr: m.mrr,
            });
        }
    }
    Ok(out.finish()?)
}

/// One row of `per_query`: one (method, query).
struct PerQueryRow<'a> {
    method: &'a str,
    query_id: u32,
    split: &'a str,
    pattern: Option<&'a str>,
    hops: Option<u8>,
    num_answers: u32,
    hit1: f64,
    hit5: f64,
    recall20: f64,
    mrr: f64,
}

impl Row for PerQueryRow<'_> {
    fn put(&self, out: &mut Rows) {
        out.put(self.method).put(self.query_id).put(self.split).put(self.pattern).put(self.hops).put(self.num_answers);
        out.put(self.hit1).put(self.hit5).put(self.recall20).put(self.mrr);
    }
}

/// SQL of the aggregate table: means by method, overall and by split, pattern and hops.
pub const AGGREGATE_SQL: &str = "
SELECT method, group_by, group_value, n_queries, hit1, hit5, recall20, mrr FROM (
  SELECT method, 'all' AS group_by, '*' AS group_value, COUNT(*) AS n_queries,
         AVG(hit1) AS hit1, AVG(hit5) AS hit5, AVG(recall20) AS recall20, AVG(mrr) AS mrr
    FROM per_query GROUP BY method
  UNION ALL
  SELECT method, 'split', split, COUNT(*), AVG(hit1), AVG(hit5), AVG(recall20), AVG(mrr)
    FROM per_query GROUP BY method, split
  UNION ALL
  SELECT method, 'pattern', pattern, COUNT(*), AVG(hit1), AVG(hit5), AVG(recall20), AVG(mrr)
    FROM per_query WHERE pattern IS NOT NULL GROUP BY method, pattern
  UNION ALL
  SELECT method, 'hops', CAST(hops AS VARCHAR), COUNT(*), AVG(hit1), AVG(hit5), AVG(recall20), AVG(mrr)
    FROM per_query WHERE hops IS NOT NULL GROUP BY method, hops
) ORDER BY method, group_by, group_value";

/// Aggregates per-query rows with DataFusion (one partition, so sums are bit-for-bit repeatable).
pub fn aggregate(per_query: &RecordBatch) -> Result<RecordBatch> {
    let rt = tokio::runtime::Builder::new_current_thread().build().map_err(|e| StageError::Internal(format!("tokio runtime: {e}")))?;
    let batches = rt.block_on(async {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
        let table = MemTable::try_new(per_query.schema(), vec![vec![per_query.clone()]])?;
        ctx.register_table("per_query", Arc::new(table))?;
        ctx.sql(AGGREGATE_SQL).await?.collect().await
    })?;
    let schema = batches.first().map(|b| b.schema()).unwrap_or_else(|| tables::METRICS_AGGREGATE.schema());
    let all = arrow::compute::concat_batches(&schema, &batches).map_err(|e| StageError::Internal(format!("concat aggregate: {e}")))?;
    Ok(validate::conform(&tables::METRICS_AGGREGATE, std::path::Path::new("<aggregate SQL>"), &all)?)
}

/// The metrics of the aggregate table, in `scores` order.
pub const METRICS: [&str; 4] = ["hit1", "hit5", "recall20", "mrr"];

/// The aggregate table as `scores` rows (in its order): `group_by` `all` → split `all`, group `*`;
/// `split` → that split, group `*`; `pattern`/`hops` → split `all`, group `pattern=…`/`hops=…`.
/// `stage_of` names the stage whose run holds each method; the metric names are `mode`'s
/// ([`EvalMode::metrics`]), so the evaluator travels with the scores.
pub fn aggregate_scores(agg: &RecordBatch, stage_of: &BTreeMap<String, &str>, mode: EvalMode, scores: &mut Scores) -> Result<()> {
    let (m, gb, gv) = (columns::strs(agg, "method")?, columns::strs(agg, "group_by")?, columns::strs(agg, "group_value")?);
    let n = columns::u64s(agg, "n_queries")?;
    let values = METRICS.map(|c| columns::f64s(agg, c));
    let [h1, h5, r20, mrr] = values;
    let vals = [h1?, h5?, r20?, mrr?];
    for i in 0..agg.num_rows() {
        let (split, group) = match gb.value(i) {
            "all" => (ALL_SPLITS.to_string(), ALL.to_string()),
            "split" => (gv.value(i).to_string(), ALL.to_string()),
            other => (ALL_SPLITS.to_string(), format!("{other}={}", gv.value(i))),
        };
        let method = m.value(i);
        let stage = stage_of.get(method).copied().ok_or_else(|| StageError::Internal(format!("method {method} has no stage")))?;
        scores.set_stage(stage);
        for (metric, v) in mode.metrics().iter().zip(&vals) {
            scores.push(method, &split, &group, metric, v.value(i), n.value(i), None);
        }
    }
    Ok(())
}

pub struct Metrics;

static INFO: StageInfo = StageInfo {
    name: "metrics",
    module: module_path!(),
    version: 1,
    about: "STaRK-semantics hit@1/hit@5/recall@20/MRR per query, aggregates (SQL), scores",
    deps: &["ingest"],
    needs: &[("ingest", "queries"), ("ingest", "answers")],
    excludes: &[],
    collects: &["run"],
    outputs: &["per_query", "aggregate", "scores"],
    files: &[],
    shards: None,
};

impl StageSpec for Metrics {
    type Config = MetricsConfig;
    const INFO: &'static StageInfo = &INFO;
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: MetricsConfig) -> Result<()> {
        let nodes = ctx.input("ingest", "nodes")?;
        let queries = ctx.input("ingest", "queries")?;
        let answers = ctx.input("ingest", "answers")?;
        let ids = columns::u32s(&nodes, "node_id")?;
        let cands = if ctx.has_input("ingest", "candidate_types") {
            let ct = ctx.input("ingest", "candidate_types")?;
            let types = columns::strs(&ct, "node_type")?;
            let wanted: Vec<&str> = (0..types.len()).map(|i| types.value(i)).collect();
            let nt = columns::strs(&nodes, "node_type")?;
            Candidates::new((0..ids.len()).filter(|&i| wanted.is_empty() || wanted.contains(&nt.value(i))).map(|i| ids.value(i)).collect())
        } else {
            Candidates::new(ids.values().to_vec())
        };
        let mut parts = Vec::new();
        let mut stage_of: BTreeMap<String, &str> = BTreeMap::new();
        for stage in ctx.deps().to_vec() {
            if ctx.has_input(stage, "run") {
                let run = ctx.input(stage, "run")?;
                let part = ctx.timed(&format!("evaluate {stage}"), |_| per_query(&run, &queries, &answers, &cands, cfg.mode))?;
                let methods = columns::strs(&part, "method")?;
                for i in 0..methods.len() {
                    if let Some(other) = stage_of.insert(methods.value(i).to_string(), stage)
                        && other != stage
                    {
                        return Err(StageError::Input(format!(
                            "method `{}` appears in the runs of stages `{other}` and `{stage}`",
                            methods.value(i)
                        )));
                    }
                }
                parts.push(part);
            }
        }
        let schema = tables::METRICS_PER_QUERY.schema();
        let pq = arrow::compute::concat_batches(&schema, &parts)?;
        let agg = ctx.timed("aggregate (datafusion)", |_| aggregate(&pq))?;
        let mut scores = Scores::new(&ctx.dataset.name, INFO.name);
        aggregate_scores(&agg, &stage_of, cfg.mode, &mut scores)?;
        ctx.write("per_query", &pq)?;
        ctx.write("aggregate", &agg)?;
        ctx.write("scores", &scores.batch()?)
    }
}
