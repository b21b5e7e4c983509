//! `graph`: the knowledge base as an undirected typed CSR (petgraph), shared by the graph methods
//! (MoR traversal, PASemiQA paths, subgraph retrieval), and the stage that reports its shape per node
//! type (degrees, isolated nodes, connected components) so that an ingest can be sanity-checked.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use petgraph::csr::Csr;
use petgraph::unionfind::UnionFind;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;

use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// The knowledge base as an undirected graph: every stored edge (s, d, r) is traversable both ways,
/// as in STaRK's undirected conversion. Parallel edges between the same pair are folded into one
/// whose weight is the bit set of their relation ids (at most 64 relation types).
pub struct KbGraph {
    pub csr: Csr<(), u64, petgraph::Directed, u32>,
    pub relations: Vec<String>,
    pub num_nodes: usize,
}

impl KbGraph {
    /// Builds the graph from the `edges` table; `num_nodes` is max node id + 1.
    pub fn build(num_nodes: usize, edges: &RecordBatch) -> Result<Self> {
        let (src, dst, rel) = (columns::u32s(edges, "src")?, columns::u32s(edges, "dst")?, columns::strs(edges, "relation")?);
        let mut rel_ids: BTreeMap<&str, u16> = BTreeMap::new();
        for i in 0..rel.len() {
            let next = rel_ids.len() as u16;
            rel_ids.entry(rel.value(i)).or_insert(next);
        }
        if rel_ids.len() > 64 {
            return Err(StageError::Config {
                stage: "graph".into(),
                message: format!("{} relation types; at most 64 are supported", rel_ids.len()),
            });
        }
        let mut pairs: Vec<(u32, u32, u64)> = Vec::with_capacity(2 * src.len());
        for i in 0..src.len() {
            let bit = 1u64 << rel_ids.get(rel.value(i)).copied().unwrap_or(0);
            pairs.push((src.value(i), dst.value(i), bit));
            pairs.push((dst.value(i), src.value(i), bit));
        }
        pairs.par_sort_unstable();
        let mut folded: Vec<(u32, u32, u64)> = Vec::with_capacity(pairs.len());
        for (s, d, bit) in pairs {
            match folded.last_mut() {
                Some(last) if (last.0, last.1) == (s, d) => last.2 |= bit,
                _ => folded.push((s, d, bit)),
            }
        }
        let pairs = folded;
        let mut csr = Csr::from_sorted_edges(&pairs).map_err(|_| StageError::Internal("edges not sorted".into()))?;
        while csr.node_count() < num_nodes {
            csr.add_node(());
        }
        let mut relations = vec![String::new(); rel_ids.len()];
        for (name, id) in rel_ids {
            relations[id as usize] = name.to_string();
        }
        Ok(KbGraph { csr, relations, num_nodes })
    }

    /// Neighbours of `v` (sorted by id) and the relation bit set of each edge.
    pub fn neighbors(&self, v: u32) -> (&[u32], &[u64]) {
        (self.csr.neighbors_slice(v), self.csr.edges_slice(v))
    }

    /// Number of connected components (isolated nodes count as components).
    pub fn components(&self) -> usize {
        let mut uf = UnionFind::<u32>::new(self.num_nodes);
        for v in 0..self.num_nodes as u32 {
            for &w in self.neighbors(v).0 {
                uf.union(v, w);
            }
        }
        let mut labels = uf.into_labeling();
        labels.sort_unstable();
        labels.dedup();
        labels.len()
    }
}

/// The `graph` stage has no options.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
};

impl StageSpec for GraphStage {
    type Config = GraphConfig;
    const INFO: &'static StageInfo = &INFO;
    fn execute(&self, ctx: &mut StageContext<'_>, _config: GraphConfig) -> Result<()> {
        let nodes = ctx.input("ingest", "nodes")?;
        let edges = ctx.input("ingest", "edges")?;
        let ids = columns::u32s(&nodes, "node_id")?;
        let types = columns::strs(&nodes, "node_type")?;
        let n = ids.values().iter().copied().max().map_or(0, |m| m as usize + 1);
        let g = ctx.timed("build csr", |_| KbGraph::build(n, &edges))?;
        let comps = ctx.timed("components", |_| Ok(g.components()))?;
        // (nodes, degree sum, max degree, isolated) per type.
        let mut per: BTreeMap<&str, (u64, u64, u64, u64)> = BTreeMap::new();
        for i in 0..ids.len() {
            let deg = g.neighbors(ids.value(i)).0.len() as u64;
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

    #[test]
    fn undirected_neighbours_relations_and_components() {
        // 0 -a- 1 -b- 2, 3 -a- 4, 5 isolated, duplicate (1,0,a) collapses with (0,1,a).
        let e = RecordBatch::try_from_iter(vec![
            ("src", Arc::new(UInt32Array::from(vec![0, 1, 3, 1])) as ArrayRef),
            ("dst", Arc::new(UInt32Array::from(vec![1, 2, 4, 0])) as ArrayRef),
            ("relation", Arc::new(StringArray::from(vec!["a", "b", "a", "a"])) as ArrayRef),
        ])
        .expect("batch");
        let g = KbGraph::build(6, &e).expect("graph");
        let (nb, rel) = g.neighbors(1);
        assert_eq!(nb, &[0, 2]);
        assert_eq!(rel.iter().map(|&r| g.relations[r.trailing_zeros() as usize].as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
        // A second relation between 0 and 1 is folded into the same edge.
        let e2 = RecordBatch::try_from_iter(vec![
            ("src", Arc::new(UInt32Array::from(vec![0, 0])) as ArrayRef),
            ("dst", Arc::new(UInt32Array::from(vec![1, 1])) as ArrayRef),
            ("relation", Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef),
        ])
        .expect("batch");
        let g2 = KbGraph::build(2, &e2).expect("graph");
        assert_eq!(g2.neighbors(1), (&[0u32][..], &[0b11u64][..]));
        assert_eq!(g.neighbors(5).0.len(), 0);
        assert_eq!(g.components(), 3);
    }
}
