//! The graph QA model ([`super::GraphQa`]) trained on host buffers: the encoder
//! layers of [`crate::gnn::host`], the answer head, the two losses and AdamW with per-tensor norm
//! clipping ([`crate::train::optim::AdamW`], burn's rule), driven by the same [`crate::train::fit`]
//! loop, batch order and stopping rule as the burn trainer.
//!
//! The model starts from the burn model's seeded weights and ends as a burn model again: its
//! tensors are read and written in burn's module order (parameters and batch norms' running
//! statistics), so the stage predicts, and a GPU trains, exactly as before. A seed gives the burn
//! trainer's curve up to float summation order (tested below).
//!
//! A tensor that takes no part in a step's loss (the graph transformer's query, key and value
//! weights on a batch without a single edge; attention pooling under the node head) is left alone
//! by the optimiser, as burn's leaves a parameter its backward pass did not reach
//! ([`AdamW::step_some`]).

use burn::tensor::Device;

use super::{GraphQa, HeadKind, QaConfig, QaEpoch, QaExample, QaShape, Target, correct};
use crate::error::{ModelError, Result};
use crate::gnn::batch::SmallGraph;
use crate::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
use crate::gnn::host::{
    BatchNorm, EdgeIn, EdgeRows, Gat, Gcn, HostBatch, LayerNorm, Lin, NormCache, P, Transformer, graph_softmax, graph_softmax_back,
    mean_pool, mean_pool_back, read_tensors, relu, relu_back, write_tensors,
};
use crate::gnn::reuse;
use crate::train::optim::AdamW;
use crate::train::{Evaluation, Learner, Score, Stepped, Stream, fit};

/// Reads tensors in order, checking each one's size.
struct Cursor {
    tensors: std::vec::IntoIter<(Vec<usize>, Vec<f32>)>,
}

impl Cursor {
    fn take(&mut self, len: usize) -> Result<Vec<f32>> {
        match self.tensors.next() {
            Some((_, v)) if v.len() == len => Ok(v),
            Some((s, _)) => Err(ModelError::Internal(format!("host engine: burn tensor of shape {s:?} where {len} values were expected"))),
            None => Err(ModelError::Internal("host engine: the burn model has fewer tensors than its shape".into())),
        }
    }

    fn lin(&mut self, din: usize, dout: usize) -> Result<Lin> {
        let w = self.take(din * dout)?;
        Lin::new(w, self.take(dout)?, din, dout)
    }

    fn p(&mut self, len: usize) -> Result<P> {
        Ok(P::new(self.take(len)?))
    }

    fn layer_norm(&mut self, f: usize) -> Result<LayerNorm> {
        Ok(LayerNorm { gamma: self.p(f)?, beta: self.p(f)? })
    }
}

/// The encoder on the host.
#[derive(Debug, Clone)]
struct Encoder {
    shape: EncoderShape,
    gcn: Vec<Gcn>,
    gat: Vec<Gat>,
    gt: Vec<Transformer>,
    bns: Vec<BatchNorm>,
    lns: Vec<LayerNorm>,
    edge1: Option<Lin>,
    edge2: Option<Lin>,
    input: Option<Lin>,
    pool_att: Option<Lin>,
    proj1: Option<Lin>,
    proj_ln: Option<LayerNorm>,
    proj2: Option<Lin>,
}

/// The whole model on the host.
#[derive(Debug, Clone)]
pub(crate) struct HostQa {
    encoder: Option<Encoder>,
    h1: Lin,
    h2: Lin,
    head: HeadKind,
    question_dim: usize,
}

/// A parameter (trained) or a running statistic (not), in burn's module order.
enum Slot<'a> {
    Param(&'a mut P),
    State(&'a mut Vec<f32>),
}

impl Encoder {
    fn read(s: EncoderShape, c: &mut Cursor) -> Result<Encoder> {
        let EncoderShape { kind, in_dim, edge_dim, hidden, layers, heads, pooling } = s;
        let dims = |i: usize| if i == 0 { in_dim } else { hidden };
        let mut e = Encoder {
            shape: s,
            gcn: vec![],
            gat: vec![],
            gt: vec![],
            bns: vec![],
            lns: vec![],
            edge1: None,
            edge2: None,
            input: None,
            pool_att: None,
            proj1: None,
            proj_ln: None,
            proj2: None,
        };
        let transformer = |c: &mut Cursor, din: usize, de: usize| -> Result<Transformer> {
            let hc = hidden / heads * heads;
            Ok(Transformer { q: c.lin(din, hc)?, k: c.lin(din, hc)?, v: c.lin(din, hc)?, e: c.lin(de, hc)?, skip: c.lin(din, hc)?, heads })
        };
        match kind {
            EncoderKind::Gcn => e.gcn = (0..layers).map(|i| Ok(Gcn { lin: c.lin(dims(i), hidden)? })).collect::<Result<_>>()?,
            EncoderKind::Gat => {
                e.gat = (0..layers)
                    .map(|i| {
                        Ok(Gat {
                            lin: c.lin(dims(i), heads * hidden)?,
                            att_src: c.p(heads * hidden)?,
                            att_dst: c.p(heads * hidden)?,
                            bias: c.p(hidden)?,
                            heads,
                        })
                    })
                    .collect::<Result<_>>()?
            }
            EncoderKind::Gt => e.gt = (0..layers).map(|i| transformer(c, dims(i), edge_dim)).collect::<Result<_>>()?,
            EncoderKind::Gt2 => e.gt = (0..layers).map(|_| transformer(c, hidden, hidden)).collect::<Result<_>>()?,
        }
        if kind != EncoderKind::Gt2 {
            e.bns = (1..layers)
                .map(|_| {
                    let (gamma, beta) = (c.p(hidden)?, c.p(hidden)?);
                    Ok(BatchNorm { gamma, beta, running_mean: c.take(hidden)?, running_var: c.take(hidden)? })
                })
                .collect::<Result<_>>()?;
        } else {
            e.lns = (0..layers).map(|_| c.layer_norm(hidden)).collect::<Result<_>>()?;
            e.edge1 = Some(c.lin(edge_dim + 1, hidden)?);
            e.edge2 = Some(c.lin(hidden, hidden)?);
            e.input = Some(c.lin(in_dim, hidden)?);
        }
        if pooling == Pooling::Attention {
            e.pool_att = Some(c.lin(hidden, heads)?);
            e.proj1 = Some(c.lin(heads * hidden, 2 * hidden)?);
            e.proj_ln = Some(c.layer_norm(2 * hidden)?);
            e.proj2 = Some(c.lin(2 * hidden, hidden)?);
        }
        Ok(e)
    }

    /// Every tensor in burn's module order (`GraphEncoder`'s fields).
    fn slots(&mut self) -> Vec<Slot<'_>> {
        let mut out = Vec::new();
        for l in &mut self.gcn {
            out.push(Slot::Param(&mut l.lin.w));
            out.push(Slot::Param(&mut l.lin.b));
        }
        for l in &mut self.gat {
            out.push(Slot::Param(&mut l.lin.w));
            out.push(Slot::Param(&mut l.lin.b));
            out.push(Slot::Param(&mut l.att_src));
            out.push(Slot::Param(&mut l.att_dst));
            out.push(Slot::Param(&mut l.bias));
        }
        for l in &mut self.gt {
            for d in [&mut l.q, &mut l.k, &mut l.v, &mut l.e, &mut l.skip] {
                out.push(Slot::Param(&mut d.w));
                out.push(Slot::Param(&mut d.b));
            }
        }
        for bn in &mut self.bns {
            out.push(Slot::Param(&mut bn.gamma));
            out.push(Slot::Param(&mut bn.beta));
            out.push(Slot::State(&mut bn.running_mean));
            out.push(Slot::State(&mut bn.running_var));
        }
        for ln in &mut self.lns {
            out.push(Slot::Param(&mut ln.gamma));
            out.push(Slot::Param(&mut ln.beta));
        }
        for d in [&mut self.edge1, &mut self.edge2, &mut self.input, &mut self.pool_att, &mut self.proj1].into_iter().flatten() {
            out.push(Slot::Param(&mut d.w));
            out.push(Slot::Param(&mut d.b));
        }
        if let Some(ln) = &mut self.proj_ln {
            out.push(Slot::Param(&mut ln.gamma));
            out.push(Slot::Param(&mut ln.beta));
        }
        if let Some(d) = &mut self.proj2 {
            out.push(Slot::Param(&mut d.w));
            out.push(Slot::Param(&mut d.b));
        }
        out
    }
}

impl Encoder {
    /// Whether each parameter (in [`Encoder::slots`]' order, running statistics left out) takes
    /// part in a step's loss, as burn's autodiff sees it: a batch without edges leaves the
    /// transformer layers' query, key, value and edge weights (and gt2's edge MLP) out, the edge
    /// and GAT projections' biases are never read, and attention pooling only counts where a
    /// classification head reads it.
    fn used(&self, edges: bool, pooled: bool) -> Vec<bool> {
        let mut out = Vec::new();
        for _ in &self.gcn {
            out.extend([true, true]);
        }
        for _ in &self.gat {
            out.extend([true, false, true, true, true]);
        }
        for _ in &self.gt {
            out.extend([edges, edges, edges, edges, edges, edges, edges, false, true, true]);
        }
        for _ in &self.bns {
            out.extend([true, true]);
        }
        for _ in &self.lns {
            out.extend([true, true]);
        }
        if self.edge1.is_some() {
            out.extend([edges, edges]);
        }
        if self.edge2.is_some() {
            out.extend([edges, edges]);
        }
        if self.input.is_some() {
            out.extend([true, true]);
        }
        for present in [self.pool_att.is_some(), self.proj1.is_some(), self.proj_ln.is_some(), self.proj2.is_some()] {
            if present {
                out.extend([pooled, pooled]);
            }
        }
        out
    }
}

/// What the encoder's backward pass reads.
enum LayerCache {
    Gcn(crate::gnn::host::GcnCache),
    Gat(crate::gnn::host::GatCache),
    Gt(crate::gnn::host::TransformerCache),
}

struct EncCache {
    layers: Vec<LayerCache>,
    /// Batch or layer norms, and the ReLU outputs after them (the next layer's input).
    norms: Vec<NormCache>,
    outs: Vec<Vec<f32>>,
    /// gt2: the edge MLP's input and hidden activation, the edge states.
    edge_in: Vec<f32>,
    edge_hidden: Vec<f32>,
    edge_states: Vec<f32>,
}

impl Drop for EncCache {
    fn drop(&mut self) {
        self.outs.drain(..).for_each(reuse::give);
        reuse::give_all([&mut self.edge_in, &mut self.edge_hidden, &mut self.edge_states]);
    }
}

/// gt2's distance feature: ‖x_src − x_dst‖ standardised over the batch's edges.
fn distances(b: &HostBatch) -> Vec<f32> {
    let d = b.dim;
    let dist: Vec<f32> = (0..b.m)
        .map(|e| {
            let (s, t) = (b.src[e] as usize, b.dst[e] as usize);
            b.x[s * d..(s + 1) * d].iter().zip(&b.x[t * d..(t + 1) * d]).map(|(a, c)| (a - c) * (a - c)).sum::<f32>().sqrt()
        })
        .collect();
    let mean = dist.iter().sum::<f32>() / b.m.max(1) as f32;
    let var = dist.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / b.m.max(1) as f32;
    let std = var.sqrt() + 1e-6;
    dist.iter().map(|v| (v - mean) / std).collect()
}

impl Encoder {
    fn edge_rows<'a>(b: &'a HostBatch) -> EdgeIn<'a> {
        EdgeIn::Rows { rows: &b.edge_rows, n_rows: b.n_rows, row: &b.edge_row }
    }

    /// Node states `[n, hidden]` (batch norms in training or evaluation mode). What the backward
    /// pass reads is kept in training only (the one pass a backward pass follows); in evaluation
    /// each layer's values are let go as soon as the next layer has its input, so a batch holds
    /// one layer's worth at a time.
    fn nodes(&mut self, b: &HostBatch, train: bool) -> Result<(Vec<f32>, EncCache)> {
        let n = b.n;
        let mut c = EncCache { layers: vec![], norms: vec![], outs: vec![], edge_in: vec![], edge_hidden: vec![], edge_states: vec![] };
        if self.shape.kind == EncoderKind::Gt2 {
            let (Some(e1), Some(e2), Some(inp)) = (&self.edge1, &self.edge2, &self.input) else {
                return Err(ModelError::Internal("gt2 without its edge MLP".into()));
            };
            let hidden = self.shape.hidden;
            let de = b.edge_dim;
            // The edge MLP's first layer over [edge features; distance]: the features' part once
            // per distinct row, the distance's row of the weight added per edge.
            let dist = distances(b);
            let w_feat = &e1.w.v[..de * hidden];
            let w_dist = &e1.w.v[de * hidden..];
            let mut per_row = reuse::zeros(b.n_rows * hidden);
            gemm_rows(&mut per_row, &b.edge_rows, b.n_rows, de, w_feat, hidden)?;
            let mut a1 = reuse::zeros(b.m * hidden);
            for e in 0..b.m {
                let r = b.edge_row[e] as usize;
                let o = &mut a1[e * hidden..(e + 1) * hidden];
                for j in 0..hidden {
                    o[j] = (per_row[r * hidden + j] + dist[e] * w_dist[j] + e1.b.v[j]).max(0.0);
                }
            }
            reuse::give(per_row);
            let mut ex = e2.forward(&a1, b.m)?;
            let mut h = inp.forward(&b.x, n)?;
            if train {
                c.outs.push(reuse::copy(&h));
            }
            for (layer, ln) in self.gt.iter().zip(&self.lns) {
                let (mut u, lc) = layer.forward(&h, EdgeIn::PerEdge(&ex), b)?;
                // u = h + t, in the buffer of t (the same sums: addition commutes)
                u.iter_mut().zip(&h).for_each(|(t, a)| *t += a);
                let (mut y, nc) = ln.forward(&u);
                reuse::give(u);
                relu(&mut y);
                if train {
                    c.layers.push(LayerCache::Gt(lc));
                    c.norms.push(nc);
                    c.outs.push(reuse::copy(&y));
                }
                reuse::give(std::mem::replace(&mut h, y));
            }
            if train {
                c.edge_in = dist;
                c.edge_hidden = a1;
                c.edge_states = ex;
            } else {
                reuse::give_all([&mut a1, &mut ex]);
            }
            return Ok((h, c));
        }
        let layers = self.gcn.len() + self.gat.len() + self.gt.len();
        let mut x = reuse::copy(&b.x);
        for i in 0..layers {
            let (mut y, lc) = match self.shape.kind {
                EncoderKind::Gcn => {
                    let (y, lc) = self.gcn[i].forward(&x, b)?;
                    (y, LayerCache::Gcn(lc))
                }
                EncoderKind::Gat => {
                    let (y, lc) = self.gat[i].forward(&x, b)?;
                    (y, LayerCache::Gat(lc))
                }
                _ => {
                    let (y, lc) = self.gt[i].forward(&x, Self::edge_rows(b), b)?;
                    (y, LayerCache::Gt(lc))
                }
            };
            if train {
                c.layers.push(lc);
            }
            if i + 1 < layers {
                let (mut z, nc) = self.bns[i].forward(&y, n, train);
                relu(&mut z);
                if train {
                    c.norms.push(nc);
                    c.outs.push(reuse::copy(&z));
                }
                reuse::give(std::mem::replace(&mut y, z));
            }
            reuse::give(std::mem::replace(&mut x, y));
        }
        Ok((x, c))
    }

    /// Backward of [`Encoder::nodes`] from `dh` (`[n, hidden]`).
    fn nodes_back(&mut self, b: &HostBatch, c: &EncCache, mut dh: Vec<f32>) -> Result<()> {
        let n = b.n;
        if c.layers.len() != self.gcn.len() + self.gat.len() + self.gt.len() {
            return Err(ModelError::Internal("host engine: a backward pass after an evaluation pass, which keeps no caches".into()));
        }
        if self.shape.kind == EncoderKind::Gt2 {
            let hidden = self.shape.hidden;
            let mut dex = reuse::zeros(b.m * hidden);
            for l in (0..self.gt.len()).rev() {
                relu_back(&c.outs[l + 1], &mut dh);
                let mut du = self.lns[l].backward(&c.norms[l], &dh);
                let LayerCache::Gt(lc) = &c.layers[l] else { return Err(ModelError::Internal("gt2 cache".into())) };
                let mut dx = reuse::zeros(n * hidden);
                self.gt[l].backward(lc, &du, EdgeIn::PerEdge(&c.edge_states), b, Some(&mut dx), Some(&mut dex))?;
                // dh = du + dx, in the buffer of du
                du.iter_mut().zip(&dx).for_each(|(a, b)| *a += b);
                reuse::give(dx);
                reuse::give(std::mem::replace(&mut dh, du));
            }
            let (Some(e1), Some(e2), Some(inp)) = (&mut self.edge1, &mut self.edge2, &mut self.input) else {
                return Err(ModelError::Internal("gt2 without its edge MLP".into()));
            };
            inp.backward(&b.x, &dh, n, true, None, false)?;
            reuse::give(dh);
            if b.m > 0 {
                let mut da1 = reuse::zeros(b.m * hidden);
                e2.backward(&c.edge_hidden, &dex, b.m, true, Some(&mut da1), false)?;
                relu_back(&c.edge_hidden, &mut da1);
                // The first layer: the features' rows summed per distinct row, the distance's row
                // and the bias per edge.
                let de = b.edge_dim;
                let mut per_row = reuse::zeros(b.n_rows * hidden);
                for e in 0..b.m {
                    let r = b.edge_row[e] as usize;
                    let g = &da1[e * hidden..(e + 1) * hidden];
                    per_row[r * hidden..(r + 1) * hidden].iter_mut().zip(g).for_each(|(o, v)| *o += v);
                    let dist = c.edge_in[e];
                    e1.w.g[de * hidden..].iter_mut().zip(g).for_each(|(w, v)| *w += dist * v);
                    e1.b.g.iter_mut().zip(g).for_each(|(b, v)| *b += v);
                }
                crate::linalg::gemm_f32_halves(
                    &mut e1.w.g[..de * hidden],
                    crate::linalg::Op::t(&b.edge_rows, b.n_rows, de),
                    crate::linalg::Op::n(&per_row, b.n_rows, hidden),
                    true,
                )?;
                reuse::give_all([&mut da1, &mut per_row]);
            }
            reuse::give(dex);
            return Ok(());
        }
        let layers = c.layers.len();
        for i in (0..layers).rev() {
            if i + 1 < layers {
                relu_back(&c.outs[i], &mut dh);
                let dz = self.bns[i].backward(&c.norms[i], &dh, n);
                reuse::give(std::mem::replace(&mut dh, dz));
            }
            let din = if i == 0 { b.dim } else { self.shape.hidden };
            let mut dx = if i == 0 { Vec::new() } else { reuse::zeros(n * din) };
            let dxr = if i == 0 { None } else { Some(dx.as_mut_slice()) };
            match &c.layers[i] {
                LayerCache::Gcn(lc) => self.gcn[i].backward(lc, &dh, b, dxr)?,
                LayerCache::Gat(lc) => self.gat[i].backward(lc, &dh, b, dxr)?,
                LayerCache::Gt(lc) => self.gt[i].backward(lc, &dh, Self::edge_rows(b), b, dxr, None)?,
            }
            reuse::give(std::mem::replace(&mut dh, dx));
        }
        Ok(())
    }
}

/// `dst = a · b` over `rows` rows.
fn gemm_rows(dst: &mut [f32], a: &[f32], rows: usize, k: usize, b: &[f32], cols: usize) -> Result<()> {
    crate::linalg::gemm_f32_halves(dst, crate::linalg::Op::n(a, rows, k), crate::linalg::Op::n(b, k, cols), false)
}

/// What the pooling's backward pass reads.
struct PoolCache {
    pooled: Vec<f32>,
    scores: Vec<f32>,
    alpha: Vec<f32>,
    p1: Option<NormCache>,
    y: Vec<f32>,
}

impl Encoder {
    /// Graph vectors `[graphs, hidden]`.
    fn pool(&self, h: &[f32], b: &HostBatch) -> Result<(Vec<f32>, PoolCache)> {
        let d = self.shape.hidden;
        let (Some(att), Some(p1), Some(ln), Some(p2)) = (&self.pool_att, &self.proj1, &self.proj_ln, &self.proj2) else {
            let pooled = mean_pool(h, d, b);
            return Ok((pooled, PoolCache { pooled: vec![], scores: vec![], alpha: vec![], p1: None, y: vec![] }));
        };
        let heads = att.dout;
        let scores = att.forward(h, b.n)?;
        let alpha = graph_softmax(&scores, heads, b);
        let mut pooled = vec![0f32; b.graphs * heads * d];
        for i in 0..b.n {
            let g = b.node_graph[i] as usize;
            for k in 0..heads {
                let a = alpha[i * heads + k];
                pooled[(g * heads + k) * d..(g * heads + k + 1) * d].iter_mut().zip(&h[i * d..(i + 1) * d]).for_each(|(o, v)| *o += a * v);
            }
        }
        let z = p1.forward(&pooled, b.graphs)?;
        let (mut y, nc) = ln.forward(&z);
        relu(&mut y);
        let out = p2.forward(&y, b.graphs)?;
        Ok((out, PoolCache { pooled, scores, alpha, p1: Some(nc), y }))
    }

    /// Backward of [`Encoder::pool`]: `dh` (`[n, hidden]`) from the graph vectors' gradient.
    fn pool_back(&mut self, h: &[f32], b: &HostBatch, c: &PoolCache, dout: &[f32]) -> Result<Vec<f32>> {
        let d = self.shape.hidden;
        let (Some(att), Some(p1), Some(ln), Some(p2), Some(nc)) =
            (&mut self.pool_att, &mut self.proj1, &mut self.proj_ln, &mut self.proj2, &c.p1)
        else {
            return Ok(mean_pool_back(dout, d, b));
        };
        let heads = att.dout;
        let mut dy = vec![0f32; c.y.len()];
        p2.backward(&c.y, dout, b.graphs, true, Some(&mut dy), false)?;
        relu_back(&c.y, &mut dy);
        let dz = ln.backward(nc, &dy);
        let mut dpooled = vec![0f32; c.pooled.len()];
        p1.backward(&c.pooled, &dz, b.graphs, true, Some(&mut dpooled), false)?;
        let mut dh = vec![0f32; b.n * d];
        let mut dalpha = vec![0f32; b.n * heads];
        for i in 0..b.n {
            let g = b.node_graph[i] as usize;
            for k in 0..heads {
                let dp = &dpooled[(g * heads + k) * d..(g * heads + k + 1) * d];
                dalpha[i * heads + k] = dp.iter().zip(&h[i * d..(i + 1) * d]).map(|(a, b)| a * b).sum();
                let a = c.alpha[i * heads + k];
                dh[i * d..(i + 1) * d].iter_mut().zip(dp).for_each(|(o, v)| *o += a * v);
            }
        }
        let ds = graph_softmax_back(&c.scores, &c.alpha, &dalpha, heads, b);
        att.backward(h, &ds, b.n, true, Some(&mut dh), true)?;
        Ok(dh)
    }
}

/// A batch of examples on the host, with its questions (`graphs × question_dim`).
pub(crate) fn host_batch(examples: &[&QaExample], rows: &[&EdgeRows], dim: usize, edge_dim: usize) -> Result<(HostBatch, Vec<f32>)> {
    let graphs: Vec<SmallGraph<'_>> = examples.iter().map(|e| SmallGraph { x: &e.x, n: e.n, edges: &e.edges, edge_x: &e.edge_x }).collect();
    let b = HostBatch::with_rows(&graphs, rows, dim, edge_dim)?;
    let q = examples.iter().flat_map(|e| e.question.iter().copied()).collect();
    Ok((b, q))
}

/// The loss of a batch (burn's [`super::loss_from`]) and the gradient of the logits; `None`
/// when no example has a target to learn from.
pub(crate) fn qa_loss(head: HeadKind, logits: &[f32], examples: &[&QaExample], b: &HostBatch) -> Option<(f64, Vec<f32>)> {
    let mut dl = vec![0f32; logits.len()];
    match head {
        HeadKind::Classify { classes } => {
            let classes = classes.max(1);
            let rows: Vec<(usize, usize)> = examples
                .iter()
                .enumerate()
                .filter_map(|(i, e)| match e.target {
                    Target::Class(c) if (c as usize) < classes => Some((i, c as usize)),
                    _ => None,
                })
                .collect();
            if rows.is_empty() {
                return None;
            }
            let inv = 1.0 / rows.len() as f32;
            let mut loss = 0f32;
            for &(i, c) in &rows {
                let l = &logits[i * classes..(i + 1) * classes];
                let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = l.iter().map(|v| (v - max).exp()).sum();
                let lse = max + sum.ln();
                loss -= l[c] - lse;
                for (j, d) in dl[i * classes..(i + 1) * classes].iter_mut().enumerate() {
                    *d = ((l[j] - lse).exp() - if j == c { 1.0 } else { 0.0 }) * inv;
                }
            }
            Some((f64::from(loss * inv), dl))
        }
        HeadKind::Nodes => {
            let p = graph_softmax(logits, 1, b);
            let mut mask = vec![false; b.n];
            let mut with_answer = vec![false; b.graphs];
            for (gi, e) in examples.iter().enumerate() {
                if let Target::Nodes(a) = &e.target {
                    for &v in a {
                        if (v as usize) < e.n {
                            mask[b.offsets[gi] + v as usize] = true;
                            with_answer[gi] = true;
                        }
                    }
                }
            }
            let used = with_answer.iter().filter(|&&u| u).count();
            if used == 0 {
                return None;
            }
            let mut mass = vec![0f32; b.graphs];
            for i in 0..b.n {
                if mask[i] {
                    mass[b.node_graph[i] as usize] += p[i];
                }
            }
            let inv = 1.0 / used as f32;
            let mut loss = 0f32;
            let mut dmass = vec![0f32; b.graphs];
            for g in (0..b.graphs).filter(|&g| with_answer[g]) {
                let m = mass[g].max(1e-12);
                loss -= m.ln();
                dmass[g] = if mass[g] >= 1e-12 { -inv / m } else { 0.0 };
            }
            let dp: Vec<f32> = (0..b.n).map(|i| if mask[i] { dmass[b.node_graph[i] as usize] } else { 0.0 }).collect();
            let ds = graph_softmax_back(logits, &p, &dp, 1, b);
            Some((f64::from(loss * inv), ds))
        }
    }
}

/// The forward pass's intermediate values.
struct Forward {
    h: Vec<f32>,
    enc: Option<EncCache>,
    pool: Option<PoolCache>,
    /// The head's input and hidden activation, its output.
    z: Vec<f32>,
    a: Vec<f32>,
    logits: Vec<f32>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        reuse::give_all([&mut self.h, &mut self.z, &mut self.a, &mut self.logits]);
    }
}

impl HostQa {
    /// The burn model's tensors on the host.
    pub(crate) fn from_burn(model: &GraphQa, shape: &QaShape) -> Result<HostQa> {
        let tensors = read_tensors(model, "host engine")?;
        let count = tensors.len();
        let mut c = Cursor { tensors: tensors.into_iter() };
        let encoder = shape.encoder.map(|s| Encoder::read(s, &mut c)).transpose()?;
        let g = shape.encoder.map_or(0, |e| e.hidden);
        let out = match shape.head {
            HeadKind::Classify { classes } => classes.max(1),
            HeadKind::Nodes => 1,
        };
        let h1 = c.lin(g + shape.question_dim, shape.head_hidden)?;
        let h2 = c.lin(shape.head_hidden, out)?;
        if c.tensors.len() != 0 {
            return Err(ModelError::Internal(format!("host engine: {} of the burn model's {count} tensors left unread", c.tensors.len())));
        }
        Ok(HostQa { encoder, h1, h2, head: shape.head, question_dim: shape.question_dim })
    }

    fn slots(&mut self) -> Vec<Slot<'_>> {
        let mut out = self.encoder.as_mut().map(Encoder::slots).unwrap_or_default();
        for d in [&mut self.h1, &mut self.h2] {
            out.push(Slot::Param(&mut d.w));
            out.push(Slot::Param(&mut d.b));
        }
        out
    }

    /// `model` with this model's tensors.
    pub(crate) fn write_into(&mut self, model: GraphQa) -> Result<GraphQa> {
        let values: Vec<&[f32]> = self
            .slots()
            .into_iter()
            .map(|s| match s {
                Slot::Param(p) => p.v.as_slice(),
                Slot::State(v) => v.as_slice(),
            })
            .collect();
        write_tensors(model, values, "host engine")
    }

    /// [`Encoder::used`] for the whole model (the head always takes part).
    fn used(&self, edges: bool) -> Vec<bool> {
        let pooled = matches!(self.head, HeadKind::Classify { .. });
        let mut out = self.encoder.as_ref().map(|e| e.used(edges, pooled)).unwrap_or_default();
        out.extend([true; 4]);
        out
    }

    fn zero_grad(&mut self) {
        for s in self.slots() {
            if let Slot::Param(p) = s {
                p.zero_grad();
            }
        }
    }

    fn forward(&mut self, b: &HostBatch, q: &[f32], train: bool) -> Result<Forward> {
        let qd = self.question_dim;
        let (h, enc) = match &mut self.encoder {
            Some(e) => {
                let (h, c) = e.nodes(b, train)?;
                (h, Some(c))
            }
            None => (Vec::new(), None),
        };
        let (z, rows, pool) = match (&self.encoder, self.head) {
            (None, _) => (q.to_vec(), b.graphs, None),
            (Some(e), HeadKind::Nodes) => {
                let d = e.shape.hidden;
                let mut z = reuse::with_capacity(b.n * (d + qd));
                for i in 0..b.n {
                    let g = b.node_graph[i] as usize;
                    z.extend_from_slice(&h[i * d..(i + 1) * d]);
                    z.extend_from_slice(&q[g * qd..(g + 1) * qd]);
                }
                (z, b.n, None)
            }
            (Some(e), HeadKind::Classify { .. }) => {
                let d = e.shape.hidden;
                let (pooled, pc) = e.pool(&h, b)?;
                let mut z = Vec::with_capacity(b.graphs * (d + qd));
                for g in 0..b.graphs {
                    z.extend_from_slice(&pooled[g * d..(g + 1) * d]);
                    z.extend_from_slice(&q[g * qd..(g + 1) * qd]);
                }
                (z, b.graphs, Some(pc))
            }
        };
        let mut a = self.h1.forward(&z, rows)?;
        relu(&mut a);
        let logits = self.h2.forward(&a, rows)?;
        Ok(Forward { h, enc, pool, z, a, logits })
    }

    fn loss(&self, logits: &[f32], examples: &[&QaExample], b: &HostBatch) -> Option<(f64, Vec<f32>)> {
        qa_loss(self.head, logits, examples, b)
    }

    /// Gradients of the loss from the logits' gradient.
    fn backward(&mut self, b: &HostBatch, f: &Forward, dlogits: &[f32]) -> Result<()> {
        let rows = f.logits.len() / self.h2.dout;
        let mut da = reuse::zeros(f.a.len());
        self.h2.backward(&f.a, dlogits, rows, true, Some(&mut da), false)?;
        relu_back(&f.a, &mut da);
        let want_dz = self.encoder.is_some();
        let mut dz = if want_dz { reuse::zeros(f.z.len()) } else { Vec::new() };
        self.h1.backward(&f.z, &da, rows, true, if want_dz { Some(&mut dz) } else { None }, false)?;
        reuse::give(da);
        let qd = self.question_dim;
        let Some(e) = &mut self.encoder else { return Ok(()) };
        let d = e.shape.hidden;
        let w = d + qd;
        let dh = match self.head {
            HeadKind::Nodes => {
                let mut dh = reuse::zeros(b.n * d);
                for i in 0..b.n {
                    dh[i * d..(i + 1) * d].copy_from_slice(&dz[i * w..i * w + d]);
                }
                dh
            }
            HeadKind::Classify { .. } => {
                let mut dp = vec![0f32; b.graphs * d];
                for g in 0..b.graphs {
                    dp[g * d..(g + 1) * d].copy_from_slice(&dz[g * w..g * w + d]);
                }
                let pc = f.pool.as_ref().ok_or_else(|| ModelError::Internal("host engine: no pooling cache".into()))?;
                e.pool_back(&f.h, b, pc, &dp)?
            }
        };
        reuse::give(dz);
        let ec = f.enc.as_ref().ok_or_else(|| ModelError::Internal("host engine: no encoder cache".into()))?;
        e.nodes_back(b, ec, dh)
    }

    /// One AdamW step on a batch; its loss, or `None` for a batch without a target.
    fn step(
        &mut self,
        examples: &[&QaExample],
        rows: &[&EdgeRows],
        dim: usize,
        edge_dim: usize,
        optim: &mut AdamW,
        lr: f32,
    ) -> Result<Option<f64>> {
        let (b, q) = host_batch(examples, rows, dim, edge_dim)?;
        let f = self.forward(&b, &q, true)?;
        let Some((loss, dl)) = self.loss(&f.logits, examples, &b) else { return Ok(None) };
        self.zero_grad();
        self.backward(&b, &f, &dl)?;
        let used = self.used(b.m > 0);
        let params = self.slots().into_iter().filter_map(|s| match s {
            Slot::Param(p) => Some(p),
            Slot::State(_) => None,
        });
        optim.step_some(lr, params.zip(used).map(|(p, u)| (&mut p.v, u.then_some(&p.g))))?;
        Ok(Some(loss))
    }

    /// Logits in evaluation mode: `[graphs, classes]` or `[n]`.
    fn predict_batch(&mut self, examples: &[&QaExample], rows: &[&EdgeRows], dim: usize, edge_dim: usize) -> Result<(HostBatch, Vec<f32>)> {
        let (b, q) = host_batch(examples, rows, dim, edge_dim)?;
        let mut f = self.forward(&b, &q, false)?;
        Ok((b, std::mem::take(&mut f.logits)))
    }

    /// Each graph's prediction from a batch's logits: the class, or the top node (ties: the first).
    fn picks(&self, logits: &[f32], b: &HostBatch) -> Vec<u32> {
        super::picks(self.head == HeadKind::Nodes, logits, &b.offsets, &b.counts)
    }

    /// Validation loss and metric, as [`super::evaluate`] computes them.
    fn evaluate(&mut self, examples: &[QaExample], rows: &[EdgeRows], dim: usize, edge_dim: usize, batch: usize) -> Result<(f64, f64)> {
        if examples.is_empty() {
            return Ok((0.0, 0.0));
        }
        let (mut loss, mut counted, mut hits) = (0.0, 0usize, 0usize);
        for (chunk, rows) in examples.chunks(batch.max(1)).zip(rows.chunks(batch.max(1))) {
            let refs: Vec<&QaExample> = chunk.iter().collect();
            let rows: Vec<&EdgeRows> = rows.iter().collect();
            let (b, logits) = self.predict_batch(&refs, &rows, dim, edge_dim)?;
            if let Some((l, _)) = self.loss(&logits, &refs, &b) {
                loss += l * chunk.len() as f64;
                counted += chunk.len();
            }
            let pred = self.picks(&logits, &b);
            hits += chunk.iter().zip(&pred).filter(|(e, p)| correct(e, **p)).count();
        }
        Ok((loss / counted.max(1) as f64, hits as f64 / examples.len() as f64))
    }
}

/// Each example's distinct edge-feature rows.
pub(crate) fn edge_rows(examples: &[QaExample], edge_dim: usize) -> Vec<EdgeRows> {
    examples.iter().map(|e| EdgeRows::distinct(&e.edge_x, e.edges.len(), edge_dim)).collect()
}

/// [`super::train`] on the host engine.
pub(crate) fn train(
    shape: QaShape,
    train: &[QaExample],
    val: &[QaExample],
    dim: usize,
    edge_dim: usize,
    cfg: &QaConfig,
    dev: &Device,
) -> Result<(GraphQa, Vec<QaEpoch>, u32)> {
    const MODEL: &str = "graph QA model";
    let t = &cfg.train;
    crate::train::check_lr(MODEL, t.lr)?;
    if train.is_empty() {
        return Err(ModelError::Internal("no training question".into()));
    }
    let inner = dev.clone().inner();
    let burn = GraphQa::new(shape, cfg.seed, &inner)?;
    let model = HostQa::from_burn(&burn, &shape)?;
    let mut optim = AdamW::new(t.weight_decay);
    optim.clip = Some(t.clip);
    let mut rng = Stream(cfg.seed ^ 0x7161_7472);
    let (train_rows, val_rows) = (edge_rows(train, edge_dim), edge_rows(val, edge_dim));
    let mut learner = HostLearner { train, val, train_rows, val_rows, dim, edge_dim, lr: t.lr as f32, optim };
    // On a rayon worker, so that the products' halves ([`crate::linalg::gemm_f32_halves`]) are
    // cheap joins rather than cross-thread wake-ups.
    let plan = t.plan(MODEL, cfg.seed, train.len());
    let mut f = rayon::scope(|_| {
        let _kept = reuse::Scope::open();
        fit(&plan, &mut learner, model, &mut rng)
    })?;
    Ok((f.kept.write_into(burn)?, f.curve, f.best_epoch))
}

/// [`super::predict`] on the host engine: the burn model's tensors read once, batches of `batch`
/// questions in evaluation mode.
pub(crate) fn predict(
    model: &GraphQa,
    shape: &QaShape,
    examples: &[QaExample],
    dim: usize,
    edge_dim: usize,
    batch: usize,
) -> Result<Vec<u32>> {
    let mut host = HostQa::from_burn(model, shape)?;
    let rows = edge_rows(examples, edge_dim);
    let mut out = Vec::with_capacity(examples.len());
    // On a rayon worker, as in training: the products' halves are cheap joins there.
    rayon::scope(|_| {
        for (chunk, rows) in examples.chunks(batch.max(1)).zip(rows.chunks(batch.max(1))) {
            let refs: Vec<&QaExample> = chunk.iter().collect();
            let rows: Vec<&EdgeRows> = rows.iter().collect();
            let (b, logits) = host.predict_batch(&refs, &rows, dim, edge_dim)?;
            out.extend(host.picks(&logits, &b));
        }
        Ok::<_, ModelError>(())
    })?;
    Ok(out)
}

/// [`super::run_steps`] on the host engine: consecutive batches of `cfg.train.batch` examples,
/// each step (batch building, forward, loss, backward, AdamW) reported to `each`.
pub(crate) fn run_steps(
    shape: QaShape,
    examples: &[QaExample],
    (dim, edge_dim): (usize, usize),
    cfg: &QaConfig,
    steps: usize,
    each: super::EachStep<'_>,
) -> Result<GraphQa> {
    let t = &cfg.train;
    let burn = GraphQa::new(shape, cfg.seed, &Device::flex())?;
    let mut model = HostQa::from_burn(&burn, &shape)?;
    let mut optim = AdamW::new(t.weight_decay);
    optim.clip = Some(t.clip);
    let batch = t.batch.max(1);
    let rows = edge_rows(examples, edge_dim);
    rayon::scope(|_| {
        let _kept = reuse::Scope::open();
        for i in 0..steps {
            let ids: Vec<usize> = (0..batch).map(|j| (i * batch + j) % examples.len().max(1)).collect();
            let refs: Vec<&QaExample> = ids.iter().map(|&j| &examples[j]).collect();
            let r: Vec<&EdgeRows> = ids.iter().map(|&j| &rows[j]).collect();
            let t0 = std::time::Instant::now();
            let loss = model.step(&refs, &r, dim, edge_dim, &mut optim, t.lr as f32)?;
            each(i, loss, t0.elapsed().as_secs_f64());
        }
        Ok::<_, ModelError>(())
    })?;
    model.write_into(burn)
}

struct HostLearner<'a> {
    train: &'a [QaExample],
    val: &'a [QaExample],
    /// Each example's distinct edge-feature rows, found once.
    train_rows: Vec<EdgeRows>,
    val_rows: Vec<EdgeRows>,
    dim: usize,
    edge_dim: usize,
    lr: f32,
    optim: AdamW,
}

impl Learner for HostLearner<'_> {
    type Model = HostQa;
    type Kept = HostQa;
    type Row = QaEpoch;

    fn step(&mut self, mut model: HostQa, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<HostQa>> {
        let ids = batch.unwrap_or_default();
        let refs: Vec<&QaExample> = ids.iter().map(|&i| &self.train[i]).collect();
        let rows: Vec<&EdgeRows> = ids.iter().map(|&i| &self.train_rows[i]).collect();
        let loss = model.step(&refs, &rows, self.dim, self.edge_dim, &mut self.optim, self.lr)?;
        Ok((model, loss.map(|l| (l, refs.len() as f64))))
    }

    fn evaluate(&mut self, model: &HostQa, epoch: usize, train_loss: f64) -> Result<Evaluation<HostQa, QaEpoch>> {
        let mut keep = model.clone();
        let (val_loss, val_metric) = keep.evaluate(self.val, &self.val_rows, self.dim, self.edge_dim, 64)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_metric, loss: Some(val_loss) },
            keep,
            row: QaEpoch { epoch: epoch as u32, train_loss, val_loss, val_metric },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphqa::tests::planted;
    use crate::train::TrainConfig;

    /// Graphs whose answer node is marked by its first feature, with repeated edge features.
    fn marked(n: usize, seed: u64) -> Vec<QaExample> {
        let mut rng = Stream(seed);
        (0..n)
            .map(|i| {
                let nodes = 3 + rng.below(5);
                let ans = rng.below(nodes) as u32;
                let x: Vec<f32> =
                    (0..nodes).flat_map(|v| [f32::from(v as u32 == ans), rng.unit() as f32, 0.5, rng.unit() as f32]).collect();
                let edges: Vec<(u32, u32)> = (1..nodes as u32).flat_map(|v| [(0, v), (v, v - 1)]).collect();
                let edge_x: Vec<f32> = edges.iter().flat_map(|&(s, _)| if s == 0 { [1.0, 0.0] } else { [0.0, 1.0] }).collect();
                // One graph in seven without an answer (skipped in training, a miss in evaluation).
                let target = if i % 7 == 3 { Target::Nodes(vec![]) } else { Target::Nodes(vec![ans]) };
                QaExample { x, n: nodes, edges, edge_x, question: vec![0.3, -0.2], target }
            })
            .collect()
    }

    /// The host engine trains as burn's autodiff trainer does: every encoder, both poolings and both
    /// heads, the same seed, the same curve up to float summation order, and the kept models agree.
    #[test]
    fn the_host_engine_trains_as_the_burn_trainer_does() {
        let dev = Device::flex();
        let (ctr, cva) = (planted(48, 1), planted(20, 2));
        let (ntr, nva) = (marked(48, 3), marked(20, 4));
        let cfg = QaConfig {
            train: TrainConfig { lr: 1e-3, epochs: 2, patience: 2, batch: 8, ..TrainConfig::default() },
            head_hidden: 12,
            seed: 5,
        };
        let mut cases = Vec::new();
        for kind in EncoderKind::ALL {
            for pooling in [Pooling::Mean, Pooling::Attention] {
                cases.push((Some((kind, pooling)), HeadKind::Classify { classes: 2 }));
            }
            cases.push((Some((kind, Pooling::Mean)), HeadKind::Nodes));
        }
        cases.push((None, HeadKind::Classify { classes: 2 }));
        for (enc, head) in cases {
            let encoder = enc.map(|(kind, pooling)| EncoderShape { kind, in_dim: 4, edge_dim: 2, hidden: 8, layers: 3, heads: 2, pooling });
            let shape = QaShape { encoder, question_dim: 2, head, head_hidden: 12 };
            let (tr, va) = if head == HeadKind::Nodes { (&ntr, &nva) } else { (&ctr, &cva) };
            let (hm, hc, hb) = super::super::train_on(true, shape, tr, va, 4, 2, &cfg, &dev).expect("host");
            let (bm, bc, bb) = super::super::train_on(false, shape, tr, va, 4, 2, &cfg, &dev).expect("burn");
            let what = format!("{enc:?} {head:?}");
            assert_eq!(hc.len(), bc.len(), "{what}");
            for (h, b) in hc.iter().zip(&bc) {
                // Biases ahead of a batch norm have a zero gradient up to rounding, which Adam
                // scales up to steps of the learning rate: their drift moves the running means the
                // validation pass reads, so the validation loss is held to a looser bound.
                for (x, y, name, tol) in [(h.train_loss, b.train_loss, "train loss", 1e-3), (h.val_loss, b.val_loss, "val loss", 2e-2)] {
                    assert!((x - y).abs() <= tol * y.abs().max(1.0), "{what} epoch {}: {name} {x} (host) vs {y} (burn)", h.epoch);
                }
            }
            // The kept models written back to burn give the host engine's predictions.
            if hb == bb {
                let inner = dev.clone().inner();
                let hp = super::super::predict(&hm, &shape, va, 4, 2, 64, &inner).expect("predict");
                let bp = super::super::predict(&bm, &shape, va, 4, 2, 64, &inner).expect("predict");
                // The CPU's predictions are the host engine's; burn's, from the same weights, agree.
                assert_eq!(hp, super::super::predict_burn(&hm, va, 4, 2, 64, &inner).expect("burn predict"), "{what}");
                assert_eq!(bp, super::super::predict_burn(&bm, va, 4, 2, 64, &inner).expect("burn predict"), "{what}");
                let same = hp.iter().zip(&bp).filter(|(a, b)| a == b).count();
                // Without batch norm the two trainings agree to rounding; with it, to the drift
                // of the biases ahead of it (see above).
                let batch_norm = enc.is_some_and(|(k, _)| k != EncoderKind::Gt2);
                let need = if batch_norm { va.len() * 3 / 4 } else { va.len() };
                assert!(same >= need, "{what}: {same} of {} predictions agree", va.len());
            }
        }
    }

    /// Every parameter's gradient of one batch's loss, burn's autodiff against the host engine's
    /// backward pass (running statistics have none), for every encoder, pooling and head.
    #[test]
    fn host_gradients_are_burns() {
        let dev = Device::flex().autodiff();
        let (cls, nodes) = (planted(10, 1), marked(10, 3));
        // The same questions with every edge removed (a batch without edges: burn's graph
        // transformer returns its root weight alone, and tensors it leaves out get no gradient).
        let bare: Vec<QaExample> = cls.iter().map(|e| QaExample { edges: vec![], edge_x: vec![], ..e.clone() }).collect();
        for kind in EncoderKind::ALL {
            for (pooling, head, no_edges) in [
                (Pooling::Mean, HeadKind::Classify { classes: 2 }, false),
                (Pooling::Attention, HeadKind::Classify { classes: 2 }, false),
                (Pooling::Mean, HeadKind::Nodes, false),
                (Pooling::Attention, HeadKind::Classify { classes: 2 }, true),
            ] {
                let enc = EncoderShape { kind, in_dim: 4, edge_dim: 2, hidden: 8, layers: 3, heads: 2, pooling };
                let shape = QaShape { encoder: Some(enc), question_dim: 2, head, head_hidden: 6 };
                let what = format!("{kind:?} {pooling:?} {head:?} without edges: {no_edges}");
                let ex = if no_edges {
                    &bare
                } else if head == HeadKind::Nodes {
                    &nodes
                } else {
                    &cls
                };
                let refs: Vec<&QaExample> = ex.iter().collect();
                let model = GraphQa::new(shape, 3, &dev).expect("model");
                let mut host = HostQa::from_burn(&model, &shape).expect("host");
                let (g, q) = super::super::batch_of(&refs, 4, 2, &dev).expect("batch");
                let loss = super::super::loss_of(&model, &refs, &g, q).expect("loss");
                let lb = f64::from(loss.clone().into_scalar::<f32>());
                let want = crate::gnn::host::burn_gradients(&model, &loss.backward());
                let rows = edge_rows(ex, 2);
                let rows: Vec<&EdgeRows> = rows.iter().collect();
                let (b, q) = host_batch(&refs, &rows, 4, 2).expect("batch");
                let f = host.forward(&b, &q, true).expect("forward");
                let (lh, dl) = host.loss(&f.logits, &refs, &b).expect("loss");
                assert!((lh - lb).abs() <= 1e-5 * lb.abs().max(1.0), "{what}: loss {lh} vs {lb}");
                host.zero_grad();
                host.backward(&b, &f, &dl).expect("backward");
                let got: Vec<Option<Vec<f32>>> = host
                    .slots()
                    .into_iter()
                    .map(|s| match s {
                        Slot::Param(p) => Some(p.g.clone()),
                        Slot::State(_) => None,
                    })
                    .collect();
                // The parameters the optimiser steps are those burn's backward pass reaches.
                let reached: Vec<bool> = got.iter().zip(&want).filter(|(g, _)| g.is_some()).map(|(_, w)| w.is_some()).collect();
                assert_eq!(host.used(b.m > 0), reached, "{what}: parameters taking part in the step");
                assert_eq!(got.len(), want.len(), "{what}");
                // An evaluation pass keeps no caches, and a backward pass after it is refused.
                let fe = host.forward(&b, &q, false).expect("evaluation forward");
                assert_eq!(fe.logits.len(), f.logits.len(), "{what}");
                assert!(fe.enc.as_ref().is_some_and(|c| c.layers.is_empty() && c.outs.is_empty()), "{what}: caches kept in evaluation");
                assert!(host.backward(&b, &fe, &dl).is_err(), "{what}: a backward pass after an evaluation pass");
                let scale = want.iter().flatten().flatten().fold(0f32, |m, v| m.max(v.abs()));
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    match (g, w) {
                        (Some(g), Some(w)) => {
                            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                            assert!(worst <= 1e-4 * scale, "{what}: tensor {i}: max |diff| {worst:e} (largest gradient {scale:e})");
                        }
                        // Burn records no gradient for a tensor outside the graph (an unused bias):
                        // the host engine's is zero.
                        (Some(g), None) => assert!(g.iter().all(|v| *v == 0.0), "{what}: tensor {i} has a gradient burn lacks"),
                        (None, w) => assert!(w.is_none(), "{what}: tensor {i} is a running statistic on the host"),
                    }
                }
            }
        }
    }

    fn values(host: &mut HostQa) -> Vec<Vec<f32>> {
        host.slots()
            .into_iter()
            .map(|s| match s {
                Slot::Param(p) => p.v.clone(),
                Slot::State(v) => v.clone(),
            })
            .collect()
    }

    fn burn_values(model: &GraphQa) -> Vec<Vec<f32>> {
        read_tensors(model, "test").expect("read").into_iter().map(|(_, v)| v).collect()
    }

    /// The host model reads a burn model's tensors in its module order and writes them back in the
    /// same order (batch norms' running statistics included).
    #[test]
    fn burn_tensors_round_trip_through_the_host_model() {
        let dev = Device::flex();
        for kind in EncoderKind::ALL {
            let enc = EncoderShape { kind, in_dim: 3, edge_dim: 2, hidden: 4, layers: 2, heads: 2, pooling: Pooling::Attention };
            let shape = QaShape { encoder: Some(enc), question_dim: 2, head: HeadKind::Classify { classes: 3 }, head_hidden: 5 };
            let a = GraphQa::new(shape, 1, &dev).expect("model");
            let mut host = HostQa::from_burn(&a, &shape).expect("read");
            assert_eq!(values(&mut host), burn_values(&a), "{kind:?}: read order");
            // Every tensor shifted by its position, then written into a model of another seed.
            for (i, s) in host.slots().into_iter().enumerate() {
                match s {
                    Slot::Param(p) => p.v.iter_mut().for_each(|v| *v += i as f32),
                    Slot::State(v) => v.iter_mut().for_each(|v| *v += i as f32),
                }
            }
            let b = host.write_into(GraphQa::new(shape, 2, &dev).expect("model")).expect("write");
            assert_eq!(burn_values(&b), values(&mut host), "{kind:?}: write order");
        }
    }
}
