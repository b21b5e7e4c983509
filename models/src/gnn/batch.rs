//! Mini-batches of many small graphs as one block-diagonal graph (PyG's `Batch`): node rows and
//! edge rows concatenated, edge endpoints shifted by each graph's node offset, and a node → graph
//! index for pooling.

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};

/// One small graph: `n` nodes with row-major features (`n × dim`), directed edges `(src, dst)`
/// (messages flow src → dst) with row-major edge features (`edges × edge_dim`).
#[derive(Debug, Clone, Copy)]
pub struct SmallGraph<'a> {
    pub x: &'a [f32],
    pub n: usize,
    pub edges: &'a [(u32, u32)],
    pub edge_x: &'a [f32],
}

/// A block-diagonal batch on a device, with the host copies the layers need.
#[derive(Debug, Clone)]
pub struct GraphBatch {
    /// Node features `[N, dim]`.
    pub x: Tensor<2>,
    /// Edge features `[E, edge_dim]` (`E ≥ 1`: an empty batch holds one zero row, never used).
    pub edge_x: Tensor<2>,
    pub src: Tensor<1, Int>,
    pub dst: Tensor<1, Int>,
    /// The graph of every node `[N]`.
    pub node_graph: Tensor<1, Int>,
    pub n_nodes: usize,
    pub n_edges: usize,
    pub n_graphs: usize,
    pub dim: usize,
    pub edge_dim: usize,
    /// Host copies: endpoints, node → graph, nodes per graph.
    pub src_h: Vec<u32>,
    pub dst_h: Vec<u32>,
    pub node_graph_h: Vec<u32>,
    pub counts: Vec<usize>,
    /// Offset of each graph's first node.
    pub offsets: Vec<usize>,
}

impl GraphBatch {
    /// The batch of `graphs` (every graph with at least one node) on `dev`.
    pub fn new(graphs: &[SmallGraph<'_>], dim: usize, edge_dim: usize, dev: &Device) -> Result<GraphBatch> {
        let n_nodes: usize = graphs.iter().map(|g| g.n).sum();
        let n_edges: usize = graphs.iter().map(|g| g.edges.len()).sum();
        let (mut x, mut ex) = (Vec::with_capacity(n_nodes * dim), Vec::with_capacity(n_edges.max(1) * edge_dim));
        let (mut src_h, mut dst_h, mut node_graph_h) =
            (Vec::with_capacity(n_edges), Vec::with_capacity(n_edges), Vec::with_capacity(n_nodes));
        let (mut counts, mut offsets) = (Vec::with_capacity(graphs.len()), Vec::with_capacity(graphs.len()));
        let mut off = 0usize;
        for (gi, g) in graphs.iter().enumerate() {
            if g.n == 0 {
                return Err(ModelError::Internal(format!("graph {gi} of the batch has no node")));
            }
            if g.x.len() != g.n * dim || g.edge_x.len() != g.edges.len() * edge_dim {
                return Err(ModelError::Internal(format!(
                    "graph {gi}: {} node / {} edge feature values for {} nodes, {} edges",
                    g.x.len(),
                    g.edge_x.len(),
                    g.n,
                    g.edges.len()
                )));
            }
            if let Some(&(s, d)) = g.edges.iter().find(|&&(s, d)| s as usize >= g.n || d as usize >= g.n) {
                return Err(ModelError::Internal(format!("graph {gi}: edge ({s}, {d}) outside its {} nodes", g.n)));
            }
            x.extend_from_slice(g.x);
            ex.extend_from_slice(g.edge_x);
            for &(s, d) in g.edges {
                src_h.push((off + s as usize) as u32);
                dst_h.push((off + d as usize) as u32);
            }
            node_graph_h.extend(std::iter::repeat_n(gi as u32, g.n));
            counts.push(g.n);
            offsets.push(off);
            off += g.n;
        }
        if n_edges == 0 {
            ex = vec![0.0; edge_dim];
        }
        let ints =
            |v: &[u32]| Tensor::<1, Int>::from_data(TensorData::new(v.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(), [v.len()]), dev);
        Ok(GraphBatch {
            x: Tensor::from_data(TensorData::new(x, [n_nodes, dim]), dev),
            edge_x: Tensor::from_data(TensorData::new(ex, [n_edges.max(1), edge_dim]), dev),
            src: ints(&src_h),
            dst: ints(&dst_h),
            node_graph: ints(&node_graph_h),
            n_nodes,
            n_edges,
            n_graphs: graphs.len(),
            dim,
            edge_dim,
            src_h,
            dst_h,
            node_graph_h,
            counts,
            offsets,
        })
    }

    /// Edges with a self-loop on every node appended (GCN, GAT): `(src, dst)` host lists.
    pub fn with_self_loops(&self) -> (Vec<u32>, Vec<u32>) {
        let (mut s, mut d) = (self.src_h.clone(), self.dst_h.clone());
        s.extend(0..self.n_nodes as u32);
        d.extend(0..self.n_nodes as u32);
        (s, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphs_are_stacked_block_diagonally() {
        let dev = Device::flex();
        let a = SmallGraph { x: &[1.0, 2.0], n: 2, edges: &[(0, 1)], edge_x: &[5.0] };
        let b = SmallGraph { x: &[3.0, 4.0, 6.0], n: 3, edges: &[(2, 0), (1, 2)], edge_x: &[7.0, 8.0] };
        let g = GraphBatch::new(&[a, b], 1, 1, &dev).expect("batch");
        assert_eq!((g.n_nodes, g.n_edges, g.n_graphs), (5, 3, 2));
        assert_eq!((g.src_h.clone(), g.dst_h.clone()), (vec![0, 4, 3], vec![1, 2, 4]));
        assert_eq!(g.node_graph_h, vec![0, 0, 1, 1, 1]);
        assert_eq!((g.counts.clone(), g.offsets.clone()), (vec![2, 3], vec![0, 2]));
        let (s, d) = g.with_self_loops();
        assert_eq!((s.len(), d[3..].to_vec()), (8, vec![0, 1, 2, 3, 4]));
        assert!(GraphBatch::new(&[SmallGraph { x: &[], n: 0, edges: &[], edge_x: &[] }], 1, 1, &dev).is_err());
        assert!(GraphBatch::new(&[SmallGraph { x: &[1.0], n: 1, edges: &[(0, 3)], edge_x: &[1.0] }], 1, 1, &dev).is_err());
    }
}
