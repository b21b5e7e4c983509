//! Graph encoders for question answering over small textual graphs, after G-Retriever's
//! `src/model/gnn.py` (PyG layers re-implemented in burn) and Efficient G-Retriever:
//!
//! * `gcn`: `GCNConv` layers (symmetric normalisation with self-loops, in-degree as PyG counts it);
//! * `gat`: `GATConv` layers, 4 heads averaged (`concat=False`), self-loops, LeakyReLU(0.2) scores;
//! * `gt` (G-Retriever's default): `TransformerConv` layers with edge features (queries of the
//!   target, keys and values of the source plus a projection of the edge's features, softmax over
//!   each node's incoming edges, heads concatenated, root weight added);
//!
//! each followed, between layers, by batch norm and ReLU (dropout 0, as G-Retriever trains);
//!
//! * `gt2` (Efficient G-Retriever): edge features through an MLP, the standardised distance
//!   ‖x_src − x_dst‖ appended, `TransformerConv` layers with residual connections and layer norm.
//!
//! Readout: mean pooling (G-Retriever) or multi-head attention pooling (Efficient G-Retriever: per
//! head a scoring vector, a softmax over each graph's nodes, heads concatenated, then a two-layer
//! projector with layer norm).
//!
//! Scores of attention softmaxes are clamped to ±30 before the exponential (no per-node maximum is
//! subtracted): the softmax is unchanged where no score leaves that range, and every sum stays finite
//! in f32.

use burn::module::{Module, Param};
use burn::nn::{BatchNorm, BatchNormConfig, LayerNorm, LayerNormConfig};
use burn::tensor::activation::{leaky_relu, relu};
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::batch::GraphBatch;
use crate::train::{Dense, Stream};

/// Which encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EncoderKind {
    Gcn,
    Gat,
    Gt,
    Gt2,
}

impl EncoderKind {
    pub const ALL: [EncoderKind; 4] = [EncoderKind::Gcn, EncoderKind::Gat, EncoderKind::Gt, EncoderKind::Gt2];

    pub fn as_str(self) -> &'static str {
        match self {
            EncoderKind::Gcn => "gcn",
            EncoderKind::Gat => "gat",
            EncoderKind::Gt => "gt",
            EncoderKind::Gt2 => "gt2",
        }
    }
}

/// Readout of node states into one vector per graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    Mean,
    Attention,
}

/// Sizes of an encoder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderShape {
    pub kind: EncoderKind,
    pub in_dim: usize,
    pub edge_dim: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub pooling: Pooling,
}

/// `values` rows summed into `n` rows by `index`.
pub fn scatter_sum(values: Tensor<2>, index: Tensor<1, Int>, n: usize) -> Tensor<2> {
    let [_, f] = values.dims();
    Tensor::zeros([n, f], &values.device()).select_assign(0, index, values, IndexingUpdateOp::Add)
}

/// Softmax of `logits` (`[E, H]`) over the rows that share a `group` (`[E]`, values `< n`).
pub fn segment_softmax(logits: Tensor<2>, group: Tensor<1, Int>, n: usize) -> Tensor<2> {
    let e = logits.clamp(-30.0, 30.0).exp();
    let denom = scatter_sum(e.clone(), group.clone(), n);
    e / denom.select(0, group)
}

fn param2(rows: usize, cols: usize, rng: &mut Stream, dev: &Device) -> Param<Tensor<2>> {
    let a = (6.0 / (rows + cols) as f64).sqrt();
    let w: Vec<f32> = (0..rows * cols).map(|_| ((rng.unit() * 2.0 - 1.0) * a) as f32).collect();
    Param::from_data(TensorData::new(w, [rows, cols]), dev)
}

fn zeros1(n: usize, dev: &Device) -> Param<Tensor<1>> {
    Param::from_data(TensorData::new(vec![0f32; n], [n]), dev)
}

/// Host tensors of an index list.
fn ints(v: &[u32], dev: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(v.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(), [v.len()]), dev)
}

/// PyG `GCNConv`: `Â X W + b`, Â = D^-½ (A + I) D^-½ with D the in-degree plus one.
#[derive(Module, Debug)]
pub struct GcnLayer {
    lin: Dense,
}

impl GcnLayer {
    fn forward(&self, x: Tensor<2>, g: &GraphBatch) -> Tensor<2> {
        let dev = x.device();
        let (s, d) = g.with_self_loops();
        let mut deg = vec![0f32; g.n_nodes];
        for &t in &d {
            deg[t as usize] += 1.0;
        }
        let w: Vec<f32> = s.iter().zip(&d).map(|(&a, &b)| 1.0 / (deg[a as usize] * deg[b as usize]).sqrt()).collect();
        let w = Tensor::<2>::from_data(TensorData::new(w, [s.len(), 1]), &dev);
        let h = self.lin.linear(x);
        let msg = h.select(0, ints(&s, &dev)) * w;
        self.lin.bias(scatter_sum(msg, ints(&d, &dev), g.n_nodes))
    }
}

/// PyG `GATConv(heads, concat=False)`: per head `x W`, scores LeakyReLU(a_src·h_j + a_dst·h_i) over
/// each node's incoming edges and its self-loop, softmax, weighted sum; heads averaged; plus bias.
#[derive(Module, Debug)]
pub struct GatLayer {
    lin: Dense,
    att_src: Param<Tensor<2>>,
    att_dst: Param<Tensor<2>>,
    bias: Param<Tensor<1>>,
    heads: usize,
}

impl GatLayer {
    fn new(d_in: usize, d_out: usize, heads: usize, rng: &mut Stream, dev: &Device) -> Self {
        GatLayer {
            lin: Dense::new(d_in, heads * d_out, rng, dev),
            att_src: param2(heads, d_out, rng, dev),
            att_dst: param2(heads, d_out, rng, dev),
            bias: zeros1(d_out, dev),
            heads,
        }
    }

    fn forward(&self, x: Tensor<2>, g: &GraphBatch) -> Tensor<2> {
        let dev = x.device();
        let n = g.n_nodes;
        let h = self.heads;
        let c = self.bias.val().dims()[0];
        let (s, d) = g.with_self_loops();
        let (si, di) = (ints(&s, &dev), ints(&d, &dev));
        let hx = self.lin.linear(x).reshape([n, h, c]);
        // Per node and head: a_src·h and a_dst·h.
        let a_s = (hx.clone() * self.att_src.val().unsqueeze_dim::<3>(0)).sum_dim(2).reshape([n, h]);
        let a_d = (hx.clone() * self.att_dst.val().unsqueeze_dim::<3>(0)).sum_dim(2).reshape([n, h]);
        let score = leaky_relu(a_s.select(0, si.clone()) + a_d.select(0, di.clone()), 0.2);
        let alpha = segment_softmax(score, di.clone(), n);
        let msg = hx.reshape([n, h * c]).select(0, si) * alpha.unsqueeze_dim::<3>(2).repeat_dim(2, c).reshape([s.len(), h * c]);
        let out = scatter_sum(msg, di, n).reshape([n, h, c]).mean_dim(1).reshape([n, c]);
        out + self.bias.val().unsqueeze()
    }
}

/// PyG `TransformerConv(heads, concat=True, edge_dim, root_weight=True)`.
#[derive(Module, Debug)]
pub struct TransformerLayer {
    q: Dense,
    k: Dense,
    v: Dense,
    /// `lin_edge` (no bias in PyG): added to keys and values.
    e: Dense,
    skip: Dense,
    heads: usize,
}

impl TransformerLayer {
    fn new(d_in: usize, d_out: usize, heads: usize, edge_dim: usize, rng: &mut Stream, dev: &Device) -> Self {
        let c = d_out / heads;
        TransformerLayer {
            q: Dense::new(d_in, heads * c, rng, dev),
            k: Dense::new(d_in, heads * c, rng, dev),
            v: Dense::new(d_in, heads * c, rng, dev),
            e: Dense::new(edge_dim, heads * c, rng, dev),
            skip: Dense::new(d_in, heads * c, rng, dev),
            heads,
        }
    }

    fn forward(&self, x: Tensor<2>, edge_x: Tensor<2>, g: &GraphBatch) -> Tensor<2> {
        let n = g.n_nodes;
        let hc = self.q.d_out();
        let skip = self.skip.forward(x.clone());
        if g.n_edges == 0 {
            return skip;
        }
        let (h, c) = (self.heads, hc / self.heads);
        let m = g.n_edges;
        let ee = self.e.linear(edge_x);
        let q = self.q.forward(x.clone()).select(0, g.dst.clone()).reshape([m, h, c]);
        let k = (self.k.forward(x.clone()).select(0, g.src.clone()) + ee.clone()).reshape([m, h, c]);
        let v = self.v.forward(x).select(0, g.src.clone()) + ee;
        let score = (q * k).sum_dim(2).reshape([m, h]).div_scalar((c as f64).sqrt());
        let alpha = segment_softmax(score, g.dst.clone(), n);
        let msg = v * alpha.unsqueeze_dim::<3>(2).repeat_dim(2, c).reshape([m, hc]);
        scatter_sum(msg, g.dst.clone(), n) + skip
    }
}

/// A graph encoder with its readout: node states `[N, hidden]` and graph vectors `[G, out]`.
#[derive(Module, Debug)]
pub struct GraphEncoder {
    gcn: Vec<GcnLayer>,
    gat: Vec<GatLayer>,
    gt: Vec<TransformerLayer>,
    /// Batch norms between layers (gcn, gat, gt) or layer norms after each layer (gt2).
    bns: Vec<BatchNorm>,
    lns: Vec<LayerNorm>,
    /// gt2: the edge MLP (edge features → hidden) and the input projection (for residuals).
    edge1: Option<Dense>,
    edge2: Option<Dense>,
    input: Option<Dense>,
    /// Attention pooling: one scoring vector per head, then the projector.
    pool_att: Option<Dense>,
    proj1: Option<Dense>,
    proj_ln: Option<LayerNorm>,
    proj2: Option<Dense>,
    kind_id: usize,
    pooling_id: usize,
}

impl GraphEncoder {
    /// A seeded encoder of `shape`.
    pub fn new(shape: EncoderShape, seed: u64, dev: &Device) -> Result<Self> {
        let EncoderShape { kind, in_dim, edge_dim, hidden, layers, heads, pooling } = shape;
        if layers == 0 || heads == 0 || hidden % heads != 0 {
            return Err(ModelError::Internal(format!(
                "encoder: {layers} layers, {heads} heads, hidden {hidden} (must be a multiple of the heads)"
            )));
        }
        let mut rng = Stream(seed ^ 0x6771_656e);
        let dims = |i: usize| if i == 0 { in_dim } else { hidden };
        let (mut gcn, mut gat, mut gt, mut bns, mut lns) = (vec![], vec![], vec![], vec![], vec![]);
        let (mut edge1, mut edge2, mut input) = (None, None, None);
        match kind {
            EncoderKind::Gcn => gcn = (0..layers).map(|i| GcnLayer { lin: Dense::new(dims(i), hidden, &mut rng, dev) }).collect(),
            EncoderKind::Gat => gat = (0..layers).map(|i| GatLayer::new(dims(i), hidden, heads, &mut rng, dev)).collect(),
            EncoderKind::Gt => gt = (0..layers).map(|i| TransformerLayer::new(dims(i), hidden, heads, edge_dim, &mut rng, dev)).collect(),
            EncoderKind::Gt2 => {
                // The edge MLP sees the edge features and the standardised endpoint distance.
                edge1 = Some(Dense::new(edge_dim + 1, hidden, &mut rng, dev));
                edge2 = Some(Dense::new(hidden, hidden, &mut rng, dev));
                input = Some(Dense::new(in_dim, hidden, &mut rng, dev));
                gt = (0..layers).map(|_| TransformerLayer::new(hidden, hidden, heads, hidden, &mut rng, dev)).collect();
                lns = (0..layers).map(|_| LayerNormConfig::new(hidden).init(dev)).collect();
            }
        }
        if kind != EncoderKind::Gt2 {
            bns = (1..layers).map(|_| BatchNormConfig::new(hidden).init(dev)).collect();
        }
        let (pool_att, proj1, proj_ln, proj2) = match pooling {
            Pooling::Mean => (None, None, None, None),
            Pooling::Attention => (
                Some(Dense::new(hidden, heads, &mut rng, dev)),
                Some(Dense::new(heads * hidden, 2 * hidden, &mut rng, dev)),
                Some(LayerNormConfig::new(2 * hidden).init(dev)),
                Some(Dense::new(2 * hidden, hidden, &mut rng, dev)),
            ),
        };
        Ok(GraphEncoder {
            gcn,
            gat,
            gt,
            bns,
            lns,
            edge1,
            edge2,
            input,
            pool_att,
            proj1,
            proj_ln,
            proj2,
            kind_id: EncoderKind::ALL.iter().position(|k| *k == kind).unwrap_or(0),
            pooling_id: usize::from(pooling == Pooling::Attention),
        })
    }

    pub fn kind(&self) -> EncoderKind {
        EncoderKind::ALL[self.kind_id.min(3)]
    }

    /// Node states `[N, hidden]` of a batch.
    pub fn nodes(&self, g: &GraphBatch) -> Tensor<2> {
        let x = g.x.clone();
        match self.kind() {
            EncoderKind::Gcn => self.stack(x, |i, x| self.gcn[i].forward(x, g), self.gcn.len()),
            EncoderKind::Gat => self.stack(x, |i, x| self.gat[i].forward(x, g), self.gat.len()),
            EncoderKind::Gt => self.stack(x, |i, x| self.gt[i].forward(x, g.edge_x.clone(), g), self.gt.len()),
            EncoderKind::Gt2 => {
                let (Some(e1), Some(e2), Some(inp)) = (&self.edge1, &self.edge2, &self.input) else { return x };
                let edge = self.edge_features(g);
                let ex = e2.forward(relu(e1.forward(edge)));
                let mut h = inp.forward(x);
                for (layer, ln) in self.gt.iter().zip(&self.lns) {
                    h = relu(ln.forward(h.clone() + layer.forward(h, ex.clone(), g)));
                }
                h
            }
        }
    }

    /// Layers with batch norm and ReLU between them (none after the last).
    fn stack(&self, mut x: Tensor<2>, layer: impl Fn(usize, Tensor<2>) -> Tensor<2>, n: usize) -> Tensor<2> {
        for i in 0..n {
            x = layer(i, x);
            if i + 1 < n {
                x = relu(self.bns[i].forward(x));
            }
        }
        x
    }

    /// gt2's edge input: the edge features and ‖x_src − x_dst‖ standardised over the batch's edges.
    fn edge_features(&self, g: &GraphBatch) -> Tensor<2> {
        if g.n_edges == 0 {
            return Tensor::cat(vec![g.edge_x.clone(), Tensor::zeros([1, 1], &g.edge_x.device())], 1);
        }
        let diff = g.x.clone().select(0, g.src.clone()) - g.x.clone().select(0, g.dst.clone());
        let dist = diff.powf_scalar(2.0).sum_dim(1).sqrt();
        let mean = dist.clone().mean();
        let centred = dist - mean.unsqueeze();
        let std = centred.clone().powf_scalar(2.0).mean().sqrt().add_scalar(1e-6);
        Tensor::cat(vec![g.edge_x.clone(), centred / std.unsqueeze()], 1)
    }

    /// Graph vectors `[G, hidden]` from node states.
    pub fn pool(&self, h: Tensor<2>, g: &GraphBatch) -> Tensor<2> {
        match (self.pooling_id, &self.pool_att, &self.proj1, &self.proj_ln, &self.proj2) {
            (1, Some(att), Some(p1), Some(ln), Some(p2)) => {
                let heads = att.d_out();
                let [n, d] = h.dims();
                let alpha = segment_softmax(att.forward(h.clone()), g.node_graph.clone(), g.n_graphs);
                // [N, heads, d] weighted, summed per graph, heads concatenated.
                let weighted = h.unsqueeze_dim::<3>(1).repeat_dim(1, heads) * alpha.unsqueeze_dim::<3>(2).repeat_dim(2, d);
                let pooled = scatter_sum(weighted.reshape([n, heads * d]), g.node_graph.clone(), g.n_graphs);
                p2.forward(relu(ln.forward(p1.forward(pooled))))
            }
            _ => {
                let inv: Vec<f32> = g.counts.iter().map(|&c| 1.0 / c as f32).collect();
                let inv = Tensor::<2>::from_data(TensorData::new(inv, [g.n_graphs, 1]), &h.device());
                scatter_sum(h, g.node_graph.clone(), g.n_graphs) * inv
            }
        }
    }
}

#[cfg(test)]
#[path = "pyg_parity_tests.rs"]
mod pyg_parity_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gnn::batch::SmallGraph;
    use crate::train::floats;

    fn shape(kind: EncoderKind, pooling: Pooling) -> EncoderShape {
        EncoderShape { kind, in_dim: 3, edge_dim: 2, hidden: 8, layers: 2, heads: 2, pooling }
    }

    fn two_graphs() -> (Vec<f32>, Vec<f32>) {
        (vec![1.0, 0.0, 0.5, 0.0, 1.0, -0.5, 0.3, 0.3, 0.3, -1.0, 0.2, 0.0, 0.0, 0.0, 1.0], vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5])
    }

    #[test]
    fn segment_softmax_sums_to_one_per_group_and_matches_by_hand() {
        let dev = Device::flex();
        let logits = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 1.0, 2.0, 5.0], [4, 1]), &dev);
        let s = floats(segment_softmax(logits, ints(&[0, 0, 1, 0], &dev), 2)).expect("softmax");
        let z = 1.0 + 1f32.exp() + 5f32.exp();
        for (got, want) in s.iter().zip([1.0 / z, 1f32.exp() / z, 1.0, 5f32.exp() / z]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    #[test]
    fn gcn_layer_matches_the_normalised_adjacency_by_hand() {
        let dev = Device::flex();
        // 0 → 1 → 2: in-degrees with self-loops 1, 2, 2.
        let g = GraphBatch::new(&[SmallGraph { x: &[1.0, 2.0, 4.0], n: 3, edges: &[(0, 1), (1, 2)], edge_x: &[0.0, 0.0] }], 1, 1, &dev)
            .expect("batch");
        let layer = GcnLayer { lin: Dense::from_host(vec![1.0], vec![0.0], 1, 1, &dev) };
        let out = floats(layer.forward(g.x.clone(), &g)).expect("out");
        let r = |a: f32, b: f32| 1.0 / (a * b).sqrt();
        let want = [1.0, 2.0 * r(2.0, 2.0) + 1.0 * r(1.0, 2.0), 4.0 * r(2.0, 2.0) + 2.0 * r(2.0, 2.0)];
        for (g, w) in out.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{out:?} vs {want:?}");
        }
    }

    #[test]
    fn every_encoder_gives_one_vector_per_graph_independent_of_the_batch() {
        let dev = Device::flex();
        let (x, e) = two_graphs();
        let a = SmallGraph { x: &x[..6], n: 2, edges: &[(0, 1)], edge_x: &e[..2] };
        let b = SmallGraph { x: &x[6..], n: 3, edges: &[(0, 1), (2, 1)], edge_x: &e[2..] };
        for kind in EncoderKind::ALL {
            for pooling in [Pooling::Mean, Pooling::Attention] {
                let enc = GraphEncoder::new(shape(kind, pooling), 3, &dev).expect("encoder");
                let both = GraphBatch::new(&[a, b], 3, 2, &dev).expect("batch");
                let pooled = floats(enc.pool(enc.nodes(&both), &both)).expect("pooled");
                assert_eq!(pooled.len(), 2 * 8, "{kind:?}");
                assert!(pooled.iter().all(|v| v.is_finite()));
                // Graph b alone gives its row of the batch (no leakage across the block diagonal);
                // gt2 standardises distances over the batch's edges and batch norm uses its
                // running statistics at inference, so compare on the inner device for those.
                if kind != EncoderKind::Gt2 {
                    let alone = GraphBatch::new(&[b], 3, 2, &dev).expect("batch");
                    let one = floats(enc.pool(enc.nodes(&alone), &alone)).expect("one");
                    for (p, q) in pooled[8..].iter().zip(&one) {
                        assert!((p - q).abs() < 1e-5, "{kind:?} {pooling:?}: {p} vs {q}");
                    }
                }
            }
        }
        assert!(GraphEncoder::new(EncoderShape { hidden: 7, ..shape(EncoderKind::Gt, Pooling::Mean) }, 0, &dev).is_err());
    }
}
