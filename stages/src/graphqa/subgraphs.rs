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

use std::time::Instant;

use arrow::array::RecordBatch;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::rows::{self, Row, Rows};
use tgrag_schemas::tables;

use crate::graphqa::data::{Task, scored_dataset};
use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::{PcstParams, Subgraph, cosines, retrieval_via_attention, retrieval_via_pcst};
use crate::shared::scores::{ALL, ALL_SPLITS, Scores};
use crate::{Result, StageContext, StageInfo, StageSpec};

/// The retrieval methods, in output order.
pub const METHODS: [&str; 3] = ["pcst", "attention", "whole"];

/// Options of the `subgraphs` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubgraphsConfig {
    /// G-Retriever's PCST settings for ExplaGraphs; null (its default): the whole graph.
    #[serde(default)]
    pub explagraphs: Option<PcstParams>,
    /// G-Retriever's PCST settings for SceneGraphs.
    pub scenegraphs: PcstParams,
    /// G-Retriever's PCST settings for WebQSP.
    pub webqsp: PcstParams,
    /// Efficient G-Retriever's attention retrieval: nodes kept per graph.
    pub attention_topk: usize,
    /// Efficient G-Retriever's attention retrieval: edges kept per graph.
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
    shards: None,
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

/// One row of `subgraph_nodes` (`id` = the kept node) or `subgraph_edges` (`id` = the kept edge).
struct Kept<'a> {
    graph_id: u32,
    method: &'a str,
    id: u32,
}

impl Row for Kept<'_> {
    fn put(&self, out: &mut Rows) {
        out.put(self.graph_id).put(self.method).put(self.id);
    }
}

/// One row of `subgraph_summary`: one (graph, method) subgraph (`empty` is derived from `nodes`).
struct Summary<'a> {
    graph_id: u32,
    method: &'a str,
    task: &'a str,
    split: &'a str,
    nodes: u32,
    edges: u32,
    answer_nodes: u32,
    answers_found: u32,
}

impl Row for Summary<'_> {
    fn put(&self, out: &mut Rows) {
        out.put(self.graph_id).put(self.method).put(self.task).put(self.split).put(self.nodes).put(self.edges);
        out.put(self.answer_nodes).put(self.answers_found).put(self.nodes == 0);
    }
}

/// One row of `retrieval_latency`.
struct Latency<'a> {
    graph_id: u32,
    method: &'a str,
    ms: f64,
}

impl Row for Latency<'_> {
    fn put(&self, out: &mut Rows) {
        out.put(self.graph_id).put(self.method).put(self.ms);
    }
}

/// Step 2: the stage's tables and the summary rows of `scores`.
pub fn write(dataset: &str, enc: &EncodedGraphs, out: &[Retrieved]) -> Result<[RecordBatch; 5]> {
    let (mut nodes, mut edges) = (Rows::new(&tables::SUBGRAPH_NODES), Rows::new(&tables::SUBGRAPH_EDGES));
    let (mut summary, mut latency) = (Vec::new(), Vec::new());
    // Per (task, method): graphs, nodes, edges, answer nodes, answers found, graphs with answers, empty graphs.
    let mut agg: std::collections::BTreeMap<(&str, &str), [u64; 7]> = std::collections::BTreeMap::new();
    for (g, r) in enc.graphs.iter().zip(out) {
        let answers = if g.task == Task::WebQsp { enc.answer_nodes(g) } else { Vec::new() };
        for (k, (sub, secs)) in r.subgraphs.iter().zip(r.seconds).enumerate() {
            let m = METHODS[k];
            for &id in &sub.nodes {
                nodes.push(&Kept { graph_id: g.graph_id, method: m, id });
            }
            for &id in &sub.edges {
                edges.push(&Kept { graph_id: g.graph_id, method: m, id });
            }
            let found = answers.iter().filter(|a| sub.nodes.binary_search(a).is_ok()).count();
            summary.push(Summary {
                graph_id: g.graph_id,
                method: m,
                task: g.task.as_str(),
                split: g.split.as_str(),
                nodes: sub.nodes.len() as u32,
                edges: sub.edges.len() as u32,
                answer_nodes: answers.len() as u32,
                answers_found: found as u32,
            });
            latency.push(Latency { graph_id: g.graph_id, method: m, ms: secs * 1e3 });
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
    let (nodes, edges) = (nodes.finish()?, edges.finish()?);
    let summary = rows::batch(&tables::SUBGRAPH_SUMMARY, &summary)?;
    let latency = rows::batch(&tables::RETRIEVAL_LATENCY, &latency)?;
    // (scored dataset, method, metric, value, n): the subgraph sizes as `scores` rows.
    let mut sizes: Vec<(String, &str, &str, f64, u64)> = Vec::new();
    for ((task, m), a) in &agg {
        let ds = scored_dataset(dataset, Task::parse(task).unwrap_or(Task::SceneGraphs));
        let n = a[0].max(1) as f64;
        sizes.push((ds.clone(), m, "subgraph_nodes", a[1] as f64 / n, a[0]));
        sizes.push((ds.clone(), m, "subgraph_edges", a[2] as f64 / n, a[0]));
        sizes.push((ds.clone(), m, "empty_graphs", a[6] as f64, a[0]));
        if a[3] > 0 {
            sizes.push((ds.clone(), m, "answer_recall", a[4] as f64 / a[3] as f64, a[3]));
        }
    }
    let mut by_ds: std::collections::BTreeMap<String, Scores> = std::collections::BTreeMap::new();
    for (ds, m, metric, v, n) in sizes {
        by_ds.entry(ds.clone()).or_insert_with(|| Scores::new(&ds, INFO.name)).push(m, ALL_SPLITS, ALL, metric, v, n, None);
    }
    let parts: Vec<RecordBatch> = by_ds.into_values().map(Scores::batch).collect::<Result<_>>()?;
    let scores = arrow::compute::concat_batches(&tables::SCORES.schema(), &parts)?;
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
