//! Propagation over an undirected edge list: `dst += w · x[src]` as a gather, a scale and a
//! scatter-add, with GCN's normalised adjacency and SAGE's neighbour mean.

use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};

/// A weighted edge list `dst += w · x[src]` as tensors.
#[derive(Debug, Clone)]
pub(crate) struct Propagation {
    n: usize,
    src: Tensor<1, Int>,
    dst: Tensor<1, Int>,
    w: Tensor<2>,
    empty: bool,
}

impl Propagation {
    fn new(n: usize, entries: &[(u32, u32, f32)], dev: &Device) -> Self {
        let src: Vec<i64> = entries.iter().map(|e| i64::from(e.0)).collect();
        let dst: Vec<i64> = entries.iter().map(|e| i64::from(e.1)).collect();
        let w: Vec<f32> = entries.iter().map(|e| e.2).collect();
        let m = entries.len();
        Propagation {
            n,
            src: Tensor::from_data(TensorData::new(src, [m]), dev),
            dst: Tensor::from_data(TensorData::new(dst, [m]), dev),
            w: Tensor::from_data(TensorData::new(w, [m, 1]), dev),
            empty: m == 0,
        }
    }

    pub(crate) fn apply(&self, h: Tensor<2>) -> Tensor<2> {
        let [_, f] = h.dims();
        let out = Tensor::zeros([self.n, f], &h.device());
        if self.empty {
            return out;
        }
        let msg = h.select(0, self.src.clone()) * self.w.clone();
        out.select_assign(0, self.dst.clone(), msg, IndexingUpdateOp::Add)
    }
}

/// The graph of a full-batch run: GCN's normalised adjacency with self-loops and SAGE's
/// neighbour mean, built once from an undirected edge list.
#[derive(Debug, Clone)]
pub struct GraphOps {
    pub(crate) gcn: Propagation,
    pub(crate) mean: Propagation,
}

/// `(src, dst, weight)` entries of a propagation.
pub type Entries = Vec<(u32, u32, f32)>;

/// `(src, dst, weight)` entries of Â = D^-½(A+I)D^-½ and of the neighbour mean (weight 1/deg(dst)),
/// from undirected edges over `n` nodes (duplicates and self-loops in the input are ignored).
pub fn normalised_entries(n: usize, edges: &[(u32, u32)]) -> (Entries, Entries) {
    let mut und: Vec<(u32, u32)> = edges.iter().filter(|(a, b)| a != b).flat_map(|&(a, b)| [(a, b), (b, a)]).collect();
    und.sort_unstable();
    und.dedup();
    let mut deg = vec![0u32; n];
    for &(_, b) in &und {
        deg[b as usize] += 1;
    }
    let gcn_deg = |i: u32| f64::from(deg[i as usize] + 1);
    let mut gcn: Entries = und.iter().map(|&(a, b)| (a, b, (1.0 / (gcn_deg(a) * gcn_deg(b)).sqrt()) as f32)).collect();
    gcn.extend((0..n as u32).map(|i| (i, i, (1.0 / gcn_deg(i)) as f32)));
    let mean = und.iter().map(|&(a, b)| (a, b, (1.0 / f64::from(deg[b as usize])) as f32)).collect();
    (gcn, mean)
}

impl GraphOps {
    pub fn new(n: usize, edges: &[(u32, u32)], dev: &Device) -> Self {
        let (gcn, mean) = normalised_entries(n, edges);
        GraphOps { gcn: Propagation::new(n, &gcn, dev), mean: Propagation::new(n, &mean, dev) }
    }
}

impl GraphOps {
    /// The same graph on the inner (non-autodiff) device.
    pub(crate) fn valid(&self) -> GraphOps {
        let p = |p: &Propagation| Propagation {
            n: p.n,
            src: p.src.clone().inner(),
            dst: p.dst.clone().inner(),
            w: p.w.clone().inner(),
            empty: p.empty,
        };
        GraphOps { gcn: p(&self.gcn), mean: p(&self.mean) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::floats;

    #[test]
    fn normalised_adjacency_by_hand() {
        // Path 0 - 1 - 2 (given twice and with a self-loop, which are ignored): degrees with the
        // self-loop 2, 3, 2.
        let (gcn, mean) = normalised_entries(3, &[(0, 1), (1, 2), (1, 0), (2, 2)]);
        let w = |a: u32, b: u32| gcn.iter().find(|e| e.0 == a && e.1 == b).map(|e| e.2);
        assert_eq!(gcn.len(), 4 + 3);
        assert!((w(0, 1).unwrap_or(0.0) - 1.0 / 6f32.sqrt()).abs() < 1e-7);
        assert!((w(1, 1).unwrap_or(0.0) - 1.0 / 3.0).abs() < 1e-7);
        assert!((w(2, 2).unwrap_or(0.0) - 0.5).abs() < 1e-7);
        // mean: node 1 averages 0 and 2, nodes 0 and 2 take node 1 whole.
        let m = |a: u32, b: u32| mean.iter().find(|e| e.0 == a && e.1 == b).map(|e| e.2);
        assert_eq!((m(0, 1), m(2, 1), m(1, 0), m(1, 2)), (Some(0.5), Some(0.5), Some(1.0), Some(1.0)));
    }

    #[test]
    fn propagation_matches_dense_product() {
        let dev = Device::flex();
        let edges = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)];
        let g = GraphOps::new(4, &edges, &dev);
        let x: Vec<f32> = (0..8).map(|i| i as f32 * 0.5 - 1.0).collect();
        let out = floats(g.gcn.apply(Tensor::from_data(TensorData::new(x.clone(), [4, 2]), &dev))).unwrap();
        let (gcn, _) = normalised_entries(4, &edges);
        let mut dense = [[0f32; 4]; 4];
        for (a, b, w) in gcn {
            dense[b as usize][a as usize] += w;
        }
        for i in 0..4 {
            for c in 0..2 {
                let want: f32 = (0..4).map(|j| dense[i][j] * x[j * 2 + c]).sum();
                assert!((out[i * 2 + c] - want).abs() < 1e-6, "{i} {c}");
            }
        }
    }
}
