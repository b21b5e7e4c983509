//! `subgraphs`: per question, the subgraph each retriever hands to the answering model.
//!
//! * `pcst`: G-Retriever's `retrieval_via_pcst` ([`crate::graphqa::retrieval`]) with G-Retriever's
//!   settings per task: SceneGraphs topk 3 / topk_e 3 / cost_e 0.5, WebQSP 3 / 5 / 0.5, and
//!   ExplaGraphs the whole graph (no retrieval, as G-Retriever does); all settable.
//! * `attention`: Efficient G-Retriever's `retrieval_via_attention` (topk 3, topk_e 5).
//! * `whole`: the whole graph (the no-retrieval baseline).
//!
//! Per question and method: the nodes and edges kept, and where answers are nodes (WebQSP) how many
//! of them the subgraph holds. Empty graphs (WebQSP's validation graph 2937 is one) are kept as
//! empty subgraphs and counted in `scores`. Retrieval times go to `retrieval_latency`
//! (run-dependent).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::graphqa::data::{Task, scored_dataset};
use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::{PcstParams, Subgraph, cosines, retrieval_via_attention, retrieval_via_pcst};
use crate::shared::scores::{ALL, ALL_SPLITS, Scores};
use crate::{Result, StageContext, StageInfo, StageSpec};

/// The retrieval methods, in output order.
pub const METHODS: [&str; 3] = ["pcst", "attention", "whole"];

/// Options of the `subgraphs` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubgraphsConfig {
    /// G-Retriever's PCST settings for ExplaGraphs; null (its default): the whole graph.
    #[serde(default)]
    pub explagraphs: Option<PcstParams>,
    pub scenegraphs: PcstParams,
    pub webqsp: PcstParams,
    /// Efficient G-Retriever's attention retrieval.
    pub attention_topk: usize,
    pub attention_topk_e: usize,
}

impl Default for SubgraphsConfig {
    fn default() -> Self {
        SubgraphsConfig {
            explagraphs: None,
            scenegraphs: PcstParams { topk: 3, topk_e: 3, cost_e: 0.5 },
            webqsp: PcstParams { topk: 3, topk_e: 5, cost_e: 0.5 },
            attention_topk: 3,
            attention_topk_e: 5,
        }
    }
}

impl SubgraphsConfig {
    /// The PCST settings of a task (`None`: the whole graph).
    pub fn pcst_for(&self, task: Task) -> Option<PcstParams> {
        match task {
            Task::ExplaGraphs => self.explagraphs,
            Task::SceneGraphs => Some(self.scenegraphs),
            Task::WebQsp => Some(self.webqsp),
        }
    }
}

pub struct SubgraphsStage;

static INFO: StageInfo = StageInfo {
    name: "subgraphs",
    module: module_path!(),
    version: 1,
    about: "graph QA retrieval: G-Retriever's PCST subgraphs (pcst_fast port), Efficient G-Retriever's attention subgraphs, the whole graph",
    deps: &["textgraphs"],
    needs: &[("textgraphs", "textgraph_questions")],
    excludes: &[],
    collects: &[],
    outputs: &["subgraph_nodes", "subgraph_edges", "subgraph_summary", "retrieval_latency", "scores"],
    files: &[],
};

/// One question's subgraphs by method, with the seconds each took.
pub struct Retrieved {
    pub subgraphs: [Subgraph; 3],
    pub seconds: [f64; 3],
}

/// Step 1: the three subgraphs of one question.
pub fn retrieve(enc: &EncodedGraphs, g: &EncodedGraph, cfg: &SubgraphsConfig) -> Result<Retrieved> {
    let n = g.nodes.len();
    let q = enc.vec(g.question);
    let t0 = Instant::now();
    let node_scores = cosines(q, &enc.rows(g.nodes.iter().copied()), enc.dim);
    let edge_scores = cosines(q, &enc.rows(g.edge_text.iter().copied()), enc.dim);
    let scoring = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let pcst = match cfg.pcst_for(g.task) {
        Some(p) => retrieval_via_pcst(n, &g.edges, &node_scores, &edge_scores, &p)?,
        None => Subgraph::whole(n, g.edges.len()),
    };
    let t_pcst = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let attention = retrieval_via_attention(n, &g.edges, &node_scores, &edge_scores, cfg.attention_topk, cfg.attention_topk_e);
    let t_att = t2.elapsed().as_secs_f64();
    Ok(Retrieved { subgraphs: [pcst, attention, Subgraph::whole(n, g.edges.len())], seconds: [scoring + t_pcst, scoring + t_att, 0.0] })
}

/// Step 2: the stage's tables and the summary rows of `scores`.
pub fn write(dataset: &str, enc: &EncodedGraphs, out: &[Retrieved]) -> Result<[RecordBatch; 5]> {
    let (mut ng, mut nm, mut nn) = (vec![], vec![], vec![]);
    let (mut eg, mut em, mut ee) = (vec![], vec![], vec![]);
    let (mut sg, mut sm, mut st, mut ss, mut sn, mut se, mut sa, mut sf) = (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut lg, mut lm, mut lms) = (vec![], vec![], vec![]);
    // Per (task, method): graphs, nodes, edges, answer nodes, answers found, graphs with answers, empty graphs.
    let mut agg: std::collections::BTreeMap<(&str, &str), [u64; 7]> = std::collections::BTreeMap::new();
    for (g, r) in enc.graphs.iter().zip(out) {
        let answers = if g.task == Task::WebQsp { enc.answer_nodes(g) } else { Vec::new() };
        for (k, (sub, secs)) in r.subgraphs.iter().zip(r.seconds).enumerate() {
            let m = METHODS[k];
            ng.extend(std::iter::repeat_n(g.graph_id, sub.nodes.len()));
            nm.extend(std::iter::repeat_n(m, sub.nodes.len()));
            nn.extend(&sub.nodes);
            eg.extend(std::iter::repeat_n(g.graph_id, sub.edges.len()));
            em.extend(std::iter::repeat_n(m, sub.edges.len()));
            ee.extend(&sub.edges);
            let found = answers.iter().filter(|a| sub.nodes.binary_search(a).is_ok()).count();
            sg.push(g.graph_id);
            sm.push(m);
            st.push(g.task.as_str());
            ss.push(g.split.as_str());
            sn.push(sub.nodes.len() as u32);
            se.push(sub.edges.len() as u32);
            sa.push(answers.len() as u32);
            sf.push(found as u32);
            lg.push(g.graph_id);
            lm.push(m);
            lms.push(secs * 1e3);
            let a = agg.entry((g.task.as_str(), m)).or_default();
            a[0] += 1;
            a[1] += sub.nodes.len() as u64;
            a[2] += sub.edges.len() as u64;
            a[3] += answers.len() as u64;
            a[4] += found as u64;
            a[5] += u64::from(!answers.is_empty());
            a[6] += u64::from(g.nodes.is_empty());
        }
    }
    let u32a = |v: Vec<u32>| Arc::new(UInt32Array::from(v)) as ArrayRef;
    let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let nodes = RecordBatch::try_from_iter(vec![("graph_id", u32a(ng)), ("method", strs(nm)), ("node_id", u32a(nn))])?;
    let edges = RecordBatch::try_from_iter(vec![("graph_id", u32a(eg)), ("method", strs(em)), ("edge_index", u32a(ee))])?;
    let empty: Vec<bool> = sn.iter().map(|&n| n == 0).collect();
    let summary = RecordBatch::try_from_iter(vec![
        ("graph_id", u32a(sg)),
        ("method", strs(sm)),
        ("task", strs(st)),
        ("split", strs(ss)),
        ("nodes", u32a(sn)),
        ("edges", u32a(se)),
        ("answer_nodes", u32a(sa)),
        ("answers_found", u32a(sf)),
        ("empty", Arc::new(BooleanArray::from(empty)) as ArrayRef),
    ])?;
    let latency = RecordBatch::try_from_iter(vec![
        ("graph_id", u32a(lg)),
        ("method", strs(lm)),
        ("ms", Arc::new(Float64Array::from(lms)) as ArrayRef),
    ])?;
    let mut rows: Vec<(String, &str, &str, f64, u64)> = Vec::new();
    for ((task, m), a) in &agg {
        let ds = scored_dataset(dataset, Task::parse(task).unwrap_or(Task::SceneGraphs));
        let n = a[0].max(1) as f64;
        rows.push((ds.clone(), m, "subgraph_nodes", a[1] as f64 / n, a[0]));
        rows.push((ds.clone(), m, "subgraph_edges", a[2] as f64 / n, a[0]));
        rows.push((ds.clone(), m, "empty_graphs", a[6] as f64, a[0]));
        if a[3] > 0 {
            rows.push((ds.clone(), m, "answer_recall", a[4] as f64 / a[3] as f64, a[3]));
        }
    }
    let mut by_ds: std::collections::BTreeMap<String, Scores> = std::collections::BTreeMap::new();
    for (ds, m, metric, v, n) in rows {
        by_ds.entry(ds.clone()).or_insert_with(|| Scores::new(&ds, INFO.name)).push(m, ALL_SPLITS, ALL, metric, v, n, None);
    }
    let parts: Vec<RecordBatch> = by_ds.into_values().map(Scores::batch).collect::<Result<_>>()?;
    let scores = arrow::compute::concat_batches(&tgrag_schemas::tables::SCORES.schema(), &parts)?;
    Ok([nodes, edges, summary, latency, scores])
}

impl StageSpec for SubgraphsStage {
    type Config = SubgraphsConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &SubgraphsConfig) -> std::result::Result<(), String> {
        for p in [c.explagraphs, Some(c.scenegraphs), Some(c.webqsp)].into_iter().flatten() {
            if !(p.cost_e.is_finite() && p.cost_e >= 0.0) {
                return Err(format!("cost_e must be finite and ≥ 0, not {}", p.cost_e));
            }
        }
        Ok(())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: SubgraphsConfig) -> Result<()> {
        let enc = ctx.timed("load", |c| EncodedGraphs::load(c))?;
        let progress = ctx.progress;
        let out: Vec<Retrieved> = ctx.timed("retrieve", |_| {
            let pb = progress.bar(enc.graphs.len() as u64, "subgraphs: retrieve");
            let out = enc
                .graphs
                .par_iter()
                .map(|g| {
                    pb.inc(1);
                    retrieve(&enc, g, &cfg)
                })
                .collect::<Result<Vec<_>>>();
            pb.finish_and_clear();
            out
        })?;
        ctx.set_items(out.len() as u64);
        let [nodes, edges, summary, latency, scores] = write(&ctx.dataset.name, &enc, &out)?;
        ctx.write("subgraph_nodes", &nodes)?;
        ctx.write("subgraph_edges", &edges)?;
        ctx.write("subgraph_summary", &summary)?;
        ctx.write("retrieval_latency", &latency)?;
        ctx.write("scores", &scores)
    }
}
