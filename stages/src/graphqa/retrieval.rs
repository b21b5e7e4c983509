//! Subgraph retrieval for a question over its textual graph.
//!
//! * [`retrieval_via_pcst`]: G-Retriever's `retrieval_via_pcst` (current upstream), step by step:
//!   1. a graph without nodes or edges is returned whole;
//!   2. node prizes: the `topk` nodes most similar to the question (cosine; ties: lower id) get
//!      k, k − 1, …, 1, the others 0;
//!   3. edge prizes: the `topk_e` largest *distinct* edge similarities are kept (everything below the
//!      last one is 0); the n_j edges tied at the j-th value share `min((topk_e − j)/n_j, last)`, then
//!      `last = value·(1 − c)`, c = 0.01, `last` starting at `topk_e`;
//!   4. `cost_e = min(cost_e, max edge prize · (1 − c/2))`, so that at least one edge can pay;
//!   5. an edge whose prize is at most `cost_e` stays an edge of cost `cost_e − prize`; any other
//!      edge j becomes a virtual node `n + j'` of prize `prize − cost_e` joined to its ends by two
//!      zero-cost edges; the PCST edge list is the normal edges (original order), then the virtual
//!      ones;
//!   6. PCST (unrooted, one cluster, `gw` pruning, [`crate::graphqa::pcst`]); virtual nodes map back
//!      to their edges; the selected nodes are the selected real nodes and every end of a selected
//!      edge.
//!
//!   Similarities and prizes are computed in f32 as torch computes them, then handed to PCST as f64.
//! * [`retrieval_via_attention`]: Efficient G-Retriever's: the `topk` nodes most similar to the
//!   question, the ends of every edge whose similarity is at least the `topk_e`-th largest distinct
//!   edge similarity, and the subgraph they induce.

use crate::graphqa::pcst::{Pruning, pcst};
use crate::{Result, StageError};

/// G-Retriever's retrieval settings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PcstParams {
    /// Nodes given a prize: the most similar to the question (prizes k, k − 1, …, 1).
    pub topk: usize,
    /// Edges given a prize: the most similar distinct edge similarities.
    pub topk_e: usize,
    /// Cost of an edge (capped so that at least one edge can pay for itself).
    pub cost_e: f64,
}

/// Which retriever made a subgraph: the `method` of the subgraphs stage's tables, and the subgraph a
/// G-Retriever method reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubgraphMethod {
    /// G-Retriever's `retrieval_via_pcst`.
    Pcst,
    /// Efficient G-Retriever's `retrieval_via_attention`.
    Attention,
    /// The whole graph (no retrieval).
    Whole,
}

impl SubgraphMethod {
    /// Every method, in the subgraphs stage's output order.
    pub const ALL: [SubgraphMethod; 3] = [SubgraphMethod::Pcst, SubgraphMethod::Attention, SubgraphMethod::Whole];

    /// Its name in tables and configurations.
    pub fn as_str(self) -> &'static str {
        match self {
            SubgraphMethod::Pcst => "pcst",
            SubgraphMethod::Attention => "attention",
            SubgraphMethod::Whole => "whole",
        }
    }

    /// The method named `s`, if any.
    pub fn parse(s: &str) -> Option<SubgraphMethod> {
        SubgraphMethod::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl std::fmt::Display for SubgraphMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A retrieved subgraph: nodes (sorted) and edge indices (sorted) of the original graph.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Subgraph {
    pub nodes: Vec<u32>,
    pub edges: Vec<u32>,
}

impl Subgraph {
    /// The whole graph.
    pub fn whole(n: usize, m: usize) -> Subgraph {
        Subgraph { nodes: (0..n as u32).collect(), edges: (0..m as u32).collect() }
    }
}

/// The indices of the `k` largest scores, best first (ties: lower index).
fn top_indices(scores: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// The distinct values of `scores`, largest first.
fn distinct_desc(scores: &[f32]) -> Vec<f32> {
    let mut v = scores.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    v.dedup();
    v
}

/// G-Retriever's node prizes (step 2).
pub fn node_prizes(node_scores: &[f32], topk: usize) -> Vec<f32> {
    let mut p = vec![0f32; node_scores.len()];
    let k = topk.min(node_scores.len());
    for (rank, i) in top_indices(node_scores, k).into_iter().enumerate() {
        p[i] = (k - rank) as f32;
    }
    p
}

/// G-Retriever's edge prizes (step 3).
pub fn edge_prizes(edge_scores: &[f32], topk_e: usize) -> Vec<f32> {
    const C: f32 = 0.01;
    let values = distinct_desc(edge_scores);
    let k = topk_e.min(values.len());
    if k == 0 {
        return vec![0.0; edge_scores.len()];
    }
    let mut p = edge_scores.to_vec();
    let floor = values[k - 1];
    p.iter_mut().filter(|x| **x < floor).for_each(|x| *x = 0.0);
    let mut last = k as f32;
    for (j, &v) in values.iter().take(k).enumerate() {
        let tied: Vec<usize> = (0..p.len()).filter(|&i| p[i] == v).collect();
        let value = ((k - j) as f32 / tied.len() as f32).min(last);
        for i in tied {
            p[i] = value;
        }
        last = value * (1.0 - C);
    }
    p
}

/// G-Retriever's `retrieval_via_pcst` over a graph of `n` nodes and `edges`, with the question's
/// cosine similarity to every node and edge.
pub fn retrieval_via_pcst(n: usize, edges: &[(u32, u32)], node_scores: &[f32], edge_scores: &[f32], p: &PcstParams) -> Result<Subgraph> {
    const C: f32 = 0.01;
    if node_scores.len() != n || edge_scores.len() != edges.len() {
        return Err(StageError::Internal(format!(
            "{} node / {} edge scores for {n} nodes, {} edges",
            node_scores.len(),
            edge_scores.len(),
            edges.len()
        )));
    }
    if n == 0 || edges.is_empty() {
        return Ok(Subgraph::whole(n, edges.len()));
    }
    let n_prizes = if p.topk > 0 { node_prizes(node_scores, p.topk) } else { vec![0.0; n] };
    let e_prizes = if p.topk_e > 0 { edge_prizes(edge_scores, p.topk_e) } else { vec![0.0; edges.len()] };
    let max_e = e_prizes.iter().copied().fold(0f32, f32::max);
    let cost_e = (p.cost_e as f32).min(max_e * (1.0 - C / 2.0));
    let mut pe: Vec<(u32, u32)> = Vec::with_capacity(edges.len());
    let mut costs: Vec<f64> = Vec::with_capacity(edges.len());
    let mut normal_of: Vec<u32> = Vec::new();
    let (mut virtual_prizes, mut virtual_edges, mut virtual_of) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (&(s, d), &prize)) in edges.iter().zip(&e_prizes).enumerate() {
        if prize <= cost_e {
            normal_of.push(i as u32);
            pe.push((s, d));
            costs.push(f64::from(cost_e - prize));
        } else {
            let v = (n + virtual_prizes.len()) as u32;
            virtual_of.push(i as u32);
            virtual_edges.push((s, v));
            virtual_edges.push((v, d));
            virtual_prizes.push(f64::from(prize - cost_e));
        }
    }
    let n_normal = pe.len();
    pe.extend(&virtual_edges);
    costs.extend(std::iter::repeat_n(0.0, virtual_edges.len()));
    let prizes: Vec<f64> = n_prizes.iter().map(|&x| f64::from(x)).chain(virtual_prizes).collect();
    let (vertices, sel) = pcst(&pe, &prizes, &costs, None, 1, Pruning::Gw).map_err(|e| StageError::Internal(format!("pcst: {e}")))?;
    let mut out_edges: Vec<u32> = sel.iter().filter(|&&e| (e as usize) < n_normal).map(|&e| normal_of[e as usize]).collect();
    out_edges.extend(vertices.iter().filter(|&&v| v as usize >= n).map(|&v| virtual_of[v as usize - n]));
    let mut nodes: Vec<u32> = vertices.iter().copied().filter(|&v| (v as usize) < n).collect();
    for &e in &out_edges {
        let (s, d) = edges[e as usize];
        nodes.push(s);
        nodes.push(d);
    }
    nodes.sort_unstable();
    nodes.dedup();
    out_edges.sort_unstable();
    out_edges.dedup();
    Ok(Subgraph { nodes, edges: out_edges })
}

/// Efficient G-Retriever's `retrieval_via_attention`.
pub fn retrieval_via_attention(
    n: usize,
    edges: &[(u32, u32)],
    node_scores: &[f32],
    edge_scores: &[f32],
    topk: usize,
    topk_e: usize,
) -> Subgraph {
    let mut keep = vec![false; n];
    for i in top_indices(node_scores, topk.min(n)) {
        keep[i] = true;
    }
    let values = distinct_desc(edge_scores);
    if let Some(&floor) = values.get(topk_e.min(values.len()).saturating_sub(1))
        && topk_e > 0
    {
        for (&(s, d), &score) in edges.iter().zip(edge_scores) {
            if score >= floor {
                keep[s as usize] = true;
                keep[d as usize] = true;
            }
        }
    }
    let nodes: Vec<u32> = (0..n as u32).filter(|&v| keep[v as usize]).collect();
    let sel: Vec<u32> =
        (0..edges.len() as u32).filter(|&e| keep[edges[e as usize].0 as usize] && keep[edges[e as usize].1 as usize]).collect();
    Subgraph { nodes, edges: sel }
}

/// Cosine similarities of `query` with each row of `rows` (`dim` wide); 0 for a zero vector.
pub fn cosines(query: &[f32], rows: &[f32], dim: usize) -> Vec<f32> {
    let qn = query.iter().map(|x| x * x).sum::<f32>().sqrt();
    rows.chunks_exact(dim.max(1))
        .map(|r| {
            let rn = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            let dot: f32 = r.iter().zip(query).map(|(a, b)| a * b).sum();
            if qn == 0.0 || rn == 0.0 { 0.0 } else { dot / (qn * rn).max(1e-8) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prizes_by_hand() {
        assert_eq!(node_prizes(&[0.1, 0.9, 0.5, 0.9], 3), vec![0.0, 3.0, 1.0, 2.0]);
        // Distinct values 0.9, 0.8, 0.5 (top 3); two edges tied at 0.8 share (3 − 1)/2 = 1, capped
        // by last = 3·0.99 → 1; the 0.5 edge gets min(1/1, 1·0.99) = 0.99; 0.2 is below the floor.
        let p = edge_prizes(&[0.8, 0.9, 0.2, 0.8, 0.5], 3);
        for (g, w) in p.iter().zip([1.0, 3.0, 0.0, 1.0, 0.99]) {
            assert!((g - w).abs() < 1e-6, "{p:?}");
        }
        // Fewer distinct values than topk_e: k = 1, the two tied edges share (1 − 0)/2.
        assert_eq!(edge_prizes(&[0.3, 0.3], 5), vec![0.5, 0.5]);
        assert_eq!(edge_prizes(&[], 3), Vec::<f32>::new());
    }

    #[test]
    fn attention_retrieval_is_the_induced_subgraph_of_top_nodes_and_top_edges() {
        // 0–1 (0.9), 1–2 (0.1), 2–3 (0.8), 3–4 (0.8), 0–4 (0.2); node 4 is the most similar node.
        let edges = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)];
        let s = retrieval_via_attention(5, &edges, &[0.0, 0.1, 0.0, 0.0, 0.9], &[0.9, 0.1, 0.8, 0.8, 0.2], 1, 2);
        // Top edges: values ≥ 0.8 → 0–1, 2–3, 3–4; top node 4: nodes {0,1,2,3,4}; all edges induced.
        assert_eq!(s.nodes, vec![0, 1, 2, 3, 4]);
        assert_eq!(s.edges, vec![0, 1, 2, 3, 4]);
        let s = retrieval_via_attention(5, &edges, &[0.0, 0.1, 0.0, 0.0, 0.9], &[0.9, 0.1, 0.8, 0.8, 0.2], 1, 1);
        assert_eq!((s.nodes, s.edges), (vec![0, 1, 4], vec![0, 4]));
    }

    #[test]
    fn empty_graphs_come_back_whole() {
        assert_eq!(
            retrieval_via_pcst(0, &[], &[], &[], &PcstParams { topk: 3, topk_e: 3, cost_e: 0.5 }).expect("empty"),
            Subgraph::default()
        );
        assert_eq!(
            retrieval_via_pcst(2, &[], &[0.1, 0.2], &[], &PcstParams { topk: 3, topk_e: 3, cost_e: 0.5 }).expect("no edges"),
            Subgraph::whole(2, 0)
        );
    }

    /// G-Retriever's construction against the fixture's `gr_full` instances: the same prizes and
    /// costs reach PCST, and the selection mapped back to the original graph is the fixture's.
    #[test]
    fn subgraph_methods_round_trip_by_their_table_names() {
        for (m, w) in SubgraphMethod::ALL.into_iter().zip(["pcst", "attention", "whole"]) {
            assert_eq!((m.to_string(), SubgraphMethod::parse(w)), (w.to_string(), Some(m)));
            assert_eq!(serde_json::to_string(&m).expect("json"), format!("\"{w}\""));
            assert_eq!(serde_json::from_str::<SubgraphMethod>(&format!("\"{w}\"")).expect("json"), m);
        }
        assert_eq!(SubgraphMethod::parse("PCST"), None);
        assert!(serde_json::from_str::<SubgraphMethod>("\"random\"").is_err());
    }

    #[test]
    fn matches_the_fixture_gr_full_instances() -> crate::shared::test_support::TestResult {
        use std::collections::BTreeMap;
        let dir = crate::shared::test_support::fixture("pcst");
        let read = |f: &str| tgrag_schemas::io::read_parquet(&dir.join(f));
        let (nodes, edges, sel) = (read("gr_orig_nodes.parquet")?, read("gr_orig_edges.parquet")?, read("gr_selected.parquet")?);
        use crate::shared::test_support::{f64s, i64s};
        let (ni, nn, ns) = (i64s(&nodes, "instance_id")?, i64s(&nodes, "node")?, f64s(&nodes, "node_score")?);
        let (ei, eo, es, ed, esc) = (
            i64s(&edges, "instance_id")?,
            i64s(&edges, "orig_edge_index")?,
            i64s(&edges, "src")?,
            i64s(&edges, "dst")?,
            f64s(&edges, "edge_score")?,
        );
        let (tk, tke) = (i64s(&edges, "topk")?, i64s(&edges, "topk_e")?);
        let what = tgrag_schemas::columns::strs(&sel, "what")?;
        let (si, sid) = (i64s(&sel, "instance_id")?, i64s(&sel, "id")?);
        type Inst = (Vec<(i64, f32)>, Vec<(i64, (u32, u32), f32)>, usize, usize);
        let mut inst: BTreeMap<i64, Inst> = BTreeMap::new();
        for i in 0..ni.len() {
            inst.entry(ni[i]).or_default().0.push((nn[i], ns[i] as f32));
        }
        for i in 0..ei.len() {
            let e = inst.entry(ei[i]).or_default();
            e.1.push((eo[i], (es[i] as u32, ed[i] as u32), esc[i] as f32));
            e.2 = tk[i] as usize;
            e.3 = tke[i] as usize;
        }
        let mut want: BTreeMap<i64, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
        for i in 0..si.len() {
            let w = want.entry(si[i]).or_default();
            if what.value(i) == "node" { w.0.push(sid[i] as u32) } else { w.1.push(sid[i] as u32) }
        }
        let (mut same, mut total) = (0, 0);
        for (id, (mut ns, mut es, topk, topk_e)) in inst {
            ns.sort_by_key(|x| x.0);
            es.sort_by_key(|x| x.0);
            let node_scores: Vec<f32> = ns.iter().map(|x| x.1).collect();
            let edge_list: Vec<(u32, u32)> = es.iter().map(|x| x.1).collect();
            let edge_scores: Vec<f32> = es.iter().map(|x| x.2).collect();
            let got =
                retrieval_via_pcst(node_scores.len(), &edge_list, &node_scores, &edge_scores, &PcstParams { topk, topk_e, cost_e: 0.5 })?;
            let (mut wn, mut we) = want.remove(&id).unwrap_or_default();
            wn.sort_unstable();
            we.sort_unstable();
            total += 1;
            same += usize::from(got.nodes == wn && got.edges == we);
        }
        assert!(total >= 50, "{total} gr_full instances");
        assert!(same * 100 >= total * 99, "{same} of {total} instances select the fixture's subgraph");
        Ok(())
    }
}
