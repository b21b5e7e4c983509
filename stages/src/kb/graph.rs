//! `graph`: the stage that reports the knowledge base's shape per node type (degrees, isolated
//! nodes, connected components) so that an ingest can be sanity-checked. It reads the KB through
//! the one graph type the KB methods share ([`TypedGraph`]: MoR's traversal, PASemiQA's paths,
//! planning, reranking), as the undirected simple graph of STaRK's conversion.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;

use crate::kb::kb::TypedGraph;
use crate::{Result, StageContext, StageInfo, StageSpec};

/// The KB of `nodes` and `edges` as a [`TypedGraph`] over node ids `0..=max id` (ids absent from
/// `nodes` get an empty type and count nowhere).
pub fn kb_graph(nodes: &RecordBatch, edges: &RecordBatch) -> Result<TypedGraph> {
    let ids = columns::u32s(nodes, "node_id")?;
    let types = columns::strs(nodes, "node_type")?;
    let n = ids.values().iter().copied().max().map_or(0, |m| m as usize + 1);
    let mut node_types = vec![""; n];
    for i in 0..ids.len() {
        node_types[ids.value(i) as usize] = types.value(i);
    }
    let (src, dst, rel) = (columns::u32s(edges, "src")?, columns::u32s(edges, "dst")?, columns::strs(edges, "relation")?);
    let e: Vec<(u32, u32, &str)> = (0..src.len()).map(|i| (src.value(i), dst.value(i), rel.value(i))).collect();
    TypedGraph::new(&node_types, &e)
}

/// The `graph` stage has no options.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphConfig {}

pub struct GraphStage;

static INFO: StageInfo = StageInfo {
    name: "graph",
    module: module_path!(),
    version: 1,
    about: "undirected typed CSR of the KB; degree/isolation/components per node type",
    deps: &["ingest"],
    needs: &[("ingest", "nodes"), ("ingest", "edges")],
    excludes: &[],
    collects: &[],
    outputs: &["graph_stats"],
    files: &[],
    shards: None,
};

impl StageSpec for GraphStage {
    type Config = GraphConfig;
    const INFO: &'static StageInfo = &INFO;
    fn execute(&self, ctx: &mut StageContext<'_>, _config: GraphConfig) -> Result<()> {
        let nodes = ctx.input("ingest", "nodes")?;
        let edges = ctx.input("ingest", "edges")?;
        let ids = columns::u32s(&nodes, "node_id")?;
        let types = columns::strs(&nodes, "node_type")?;
        let g = ctx.timed("build graph", |_| kb_graph(&nodes, &edges))?;
        let comps = ctx.timed("components", |_| Ok(g.components()))?;
        // (nodes, degree sum, max degree, isolated) per type.
        let mut per: BTreeMap<&str, (u64, u64, u64, u64)> = BTreeMap::new();
        for i in 0..ids.len() {
            let deg = g.degree(ids.value(i)) as u64;
            let e = per.entry(types.value(i)).or_default();
            e.0 += 1;
            e.1 += deg;
            e.2 = e.2.max(deg);
            e.3 += u64::from(deg == 0);
        }
        let total = per.values().fold((0, 0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2.max(b.2), a.3 + b.3));
        #[allow(clippy::type_complexity)]
        let rows: Vec<(&str, (u64, u64, u64, u64))> = per.into_iter().chain(std::iter::once(("*", total))).collect();
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("node_type", Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0)))),
            ("nodes", Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1.0)))),
            ("mean_degree", Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.1.1 as f64 / r.1.0.max(1) as f64)))),
            ("max_degree", Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1.2)))),
            ("isolated", Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1.3)))),
            ("components", Arc::new(UInt64Array::from_iter(rows.iter().map(|r| (r.0 == "*").then_some(comps as u64))))),
        ];
        let batch = RecordBatch::try_from_iter(cols)?;
        ctx.write("graph_stats", &batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::UInt32Array;

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).expect("batch")
    }

    #[test]
    fn undirected_degrees_and_components() {
        // 0 -a- 1 -b- 2, 3 -a- 4, 5 isolated; (1,0,a) repeats (0,1,a) reversed, (2,1,c) adds a second
        // relation between 1 and 2, (4,4,a) is a self-loop; id 6 is absent from the nodes table.
        let nodes = batch(vec![
            ("node_id", Arc::new(UInt32Array::from(vec![0, 1, 2, 3, 4, 5, 7])) as ArrayRef),
            ("node_type", Arc::new(StringArray::from(vec!["p", "p", "q", "q", "q", "p", "p"])) as ArrayRef),
        ]);
        let edges = batch(vec![
            ("src", Arc::new(UInt32Array::from(vec![0, 1, 3, 1, 2, 4])) as ArrayRef),
            ("dst", Arc::new(UInt32Array::from(vec![1, 2, 4, 0, 1, 4])) as ArrayRef),
            ("relation", Arc::new(StringArray::from(vec!["a", "b", "a", "a", "c", "a"])) as ArrayRef),
        ]);
        let g = kb_graph(&nodes, &edges).expect("graph");
        // Hand-counted distinct neighbours (a self-loop counts the node itself once).
        let degrees: Vec<usize> = (0..8).map(|v| g.degree(v)).collect();
        assert_eq!(degrees, vec![1, 2, 1, 1, 2, 0, 0, 0]);
        // {0,1,2}, {3,4}, {5}, {6}, {7}.
        assert_eq!(g.components(), 5);
    }

    #[test]
    fn degrees_and_components_match_brute_force_on_random_graphs() {
        let mut state = 7u64;
        let mut next = |m: u32| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % u64::from(m)) as u32
        };
        for trial in 0..20 {
            let n = 1 + next(30);
            let m = next(3 * n);
            let e: Vec<(u32, u32, &str)> = (0..m).map(|_| (next(n), next(n), ["r", "s"][next(2) as usize])).collect();
            let g = TypedGraph::new(&vec!["t"; n as usize], &e).expect("graph");
            // Brute force: adjacency sets and a flood fill.
            let mut adj = vec![std::collections::BTreeSet::new(); n as usize];
            for &(s, d, _) in &e {
                adj[s as usize].insert(d);
                adj[d as usize].insert(s);
            }
            let mut seen = vec![false; n as usize];
            let mut comps = 0;
            for v in 0..n as usize {
                if !seen[v] {
                    comps += 1;
                    let mut stack = vec![v];
                    seen[v] = true;
                    while let Some(x) = stack.pop() {
                        for &w in &adj[x] {
                            if !seen[w as usize] {
                                seen[w as usize] = true;
                                stack.push(w as usize);
                            }
                        }
                    }
                }
            }
            for v in 0..n {
                assert_eq!(g.degree(v), adj[v as usize].len(), "trial {trial}, node {v}");
            }
            assert_eq!(g.components(), comps, "trial {trial}");
        }
    }
}
