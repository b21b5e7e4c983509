//! MixRAG ([`super::MixRag`]) on host buffers with a hand-written backward pass,
//! trained by the same [`crate::train::fit`] loop, Gumbel noise stream, temperature schedule and
//! AdamW rule as the burn trainer, from the burn model's seeded weights and written back into it.
//!
//! Every linear layer that reads a concatenation (`[h_i ‖ h_j ‖ h_e ‖ q]`) is split by the blocks
//! of its weight: the node blocks are multiplied once per node, the relation block once per
//! distinct relation row and the question block once per graph, and the per-edge work is a gather
//! and a sum. Burn multiplies every message's concatenated row; the arithmetic is the same up to
//! float summation order (the gradients are tested against burn's autodiff, tensor by tensor).

use burn::tensor::Device;

use super::{MixConfig, MixRag, MixShape, gumbel_values};
use crate::error::{ModelError, Result};
use crate::gnn::batch::SmallGraph;
use crate::gnn::host::{EdgeRows, HostBatch, Lin, P, read_tensors, relu, relu_back, write_tensors};
use crate::graphqa::host::{edge_rows, qa_loss};
use crate::graphqa::{HeadKind, QaEpoch, QaExample, correct};
use crate::linalg::{Op, gemm_f32_halves as gemm};
use crate::ops::argmax;
use crate::train::optim::AdamW;
use crate::train::{Evaluation, Learner, Score, Stepped, Stream, fit};

/// `dst (rows×cols) (+)= a (rows×k) · b (k×cols)`.
fn mm(dst: &mut [f32], a: &[f32], rows: usize, k: usize, b: &[f32], cols: usize, acc: bool) -> Result<()> {
    gemm(dst, Op::n(a, rows, k), Op::n(b, k, cols), acc)
}

/// `g (k×cols) += aᵀ (k×rows) · d (rows×cols)`.
fn mm_tn(g: &mut [f32], a: &[f32], rows: usize, k: usize, d: &[f32], cols: usize) -> Result<()> {
    gemm(g, Op::t(a, rows, k), Op::n(d, rows, cols), true)
}

/// `dx (rows×k) += d (rows×cols) · wᵀ` (`w`: `k×cols`).
fn mm_nt(dx: &mut [f32], d: &[f32], rows: usize, cols: usize, w: &[f32], k: usize) -> Result<()> {
    gemm(dx, Op::n(d, rows, cols), Op::t(w, k, cols), true)
}

/// Block `i` (rows `i·d..(i+1)·d`) of a linear layer's weight, and of its gradient.
fn block(l: &Lin, i: usize, d: usize) -> &[f32] {
    &l.w.v[i * d * l.dout..(i + 1) * d * l.dout]
}

fn block_grad(l: &mut Lin, i: usize, d: usize) -> &mut [f32] {
    let o = l.dout;
    &mut l.w.g[i * d * o..(i + 1) * d * o]
}

fn add_bias(x: &mut [f32], b: &[f32]) {
    for r in x.chunks_exact_mut(b.len().max(1)) {
        r.iter_mut().zip(b).for_each(|(o, v)| *o += v);
    }
}

fn bias_grad(g: &mut [f32], d: &[f32]) {
    for r in d.chunks_exact(g.len().max(1)) {
        g.iter_mut().zip(r).for_each(|(o, v)| *o += v);
    }
}

/// The graph-side structure of a batch: the symmetric GCN operator (both directions and
/// self-loops; its own transpose) and, per node, the messages it receives in both directions.
struct Graph {
    /// GCN entries into each node: `(source, weight)`.
    gcn_ptr: Vec<usize>,
    gcn: Vec<(u32, f32)>,
    /// Messages into each node: `(sender, edge)`.
    msg_ptr: Vec<usize>,
    msg: Vec<(u32, u32)>,
    /// Graph of every edge.
    edge_graph: Vec<u32>,
}

impl Graph {
    fn new(b: &HostBatch) -> Graph {
        let n = b.n;
        let mut cnt = vec![0usize; n];
        for e in 0..b.m {
            cnt[b.dst[e] as usize] += 1;
            cnt[b.src[e] as usize] += 1;
        }
        let gdeg: Vec<f32> = cnt.iter().map(|&c| (c + 1) as f32).collect();
        let mut msg_ptr = vec![0usize; n + 1];
        for v in 0..n {
            msg_ptr[v + 1] = msg_ptr[v] + cnt[v];
        }
        let mut fill = msg_ptr.clone();
        let mut msg = vec![(0u32, 0u32); msg_ptr[n]];
        for e in 0..b.m {
            let (s, d) = (b.src[e] as usize, b.dst[e] as usize);
            msg[fill[d]] = (s as u32, e as u32);
            fill[d] += 1;
        }
        for e in 0..b.m {
            let (s, d) = (b.src[e] as usize, b.dst[e] as usize);
            msg[fill[s]] = (d as u32, e as u32);
            fill[s] += 1;
        }
        let mut gcn_ptr = vec![0usize; n + 1];
        let mut gcn = Vec::with_capacity(msg.len() + n);
        for v in 0..n {
            for &(u, _) in &msg[msg_ptr[v]..msg_ptr[v + 1]] {
                gcn.push((u, 1.0 / (gdeg[u as usize] * gdeg[v]).sqrt()));
            }
            gcn.push((v as u32, 1.0 / (gdeg[v] * gdeg[v]).sqrt()));
            gcn_ptr[v + 1] = gcn.len();
        }
        let edge_graph = b.src.iter().map(|&s| b.node_graph[s as usize]).collect();
        Graph { gcn_ptr, gcn, msg_ptr, msg, edge_graph }
    }

    /// `Â x` (`x`: `n × f`); also its backward pass (`Â` is symmetric).
    fn gcn(&self, x: &[f32], f: usize) -> Vec<f32> {
        let n = self.gcn_ptr.len() - 1;
        let mut out = vec![0f32; n * f];
        for v in 0..n {
            let o = &mut out[v * f..(v + 1) * f];
            for &(u, w) in &self.gcn[self.gcn_ptr[v]..self.gcn_ptr[v + 1]] {
                o.iter_mut().zip(&x[u as usize * f..(u as usize + 1) * f]).for_each(|(o, x)| *o += w * x);
            }
        }
        out
    }

    fn messages(&self, v: usize) -> &[(u32, u32)] {
        &self.msg[self.msg_ptr[v]..self.msg_ptr[v + 1]]
    }
}

/// The differentiable top-k of [`super::soft_top_k`] on the host: rows grouped, `k` rounds of a
/// clamped softmax per group. Returns the mask and what the backward pass reads.
struct TopK {
    /// Logits and attention of every round.
    l: Vec<Vec<f32>>,
    a: Vec<Vec<f32>>,
    sum: Vec<f32>,
    small: Vec<bool>,
}

fn groups_of(group: &[u32], groups: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); groups];
    for (r, &g) in group.iter().enumerate() {
        out[g as usize].push(r);
    }
    out
}

fn soft_top_k(logits: Vec<f32>, group: &[u32], groups: usize, k: usize) -> (Vec<f32>, TopK) {
    let members = groups_of(group, groups);
    let small: Vec<bool> = group.iter().map(|&g| members[g as usize].len() <= k).collect();
    let rows = logits.len();
    let (mut ls, mut as_) = (Vec::with_capacity(k.max(1)), Vec::with_capacity(k.max(1)));
    let mut sum = vec![0f32; rows];
    let mut l = logits;
    for _ in 0..k.max(1) {
        let mut a = vec![0f32; rows];
        for m in &members {
            let s: f32 = m.iter().map(|&r| l[r].clamp(-30.0, 30.0).exp()).sum();
            for &r in m {
                a[r] = l[r].clamp(-30.0, 30.0).exp() / s;
            }
        }
        sum.iter_mut().zip(&a).for_each(|(s, a)| *s += a);
        let next: Vec<f32> = l.iter().zip(&a).map(|(l, a)| l + (1.0 - a).max(1e-6).ln()).collect();
        ls.push(l);
        as_.push(a);
        l = next;
    }
    let mask = sum.iter().zip(&small).map(|(&s, &sm)| if sm { 1.0 } else { s.min(1.0) }).collect();
    (mask, TopK { l: ls, a: as_, sum, small })
}

/// Backward of [`soft_top_k`]: the logits' gradient from the mask's.
fn soft_top_k_back(t: &TopK, dmask: &[f32], group: &[u32], groups: usize) -> Vec<f32> {
    let members = groups_of(group, groups);
    let rows = dmask.len();
    // clamp_max(1) passes where the sum is at most 1; rows of small groups are constant.
    let dsum: Vec<f32> = (0..rows).map(|r| if t.small[r] || t.sum[r] > 1.0 { 0.0 } else { dmask[r] }).collect();
    let mut dl = vec![0f32; rows];
    for j in (0..t.l.len()).rev() {
        let (l, a) = (&t.l[j], &t.a[j]);
        // l_{j+1} = l_j + ln(max(1 − a_j, 1e-6)): dl (of l_{j+1}) flows to l_j and to a_j.
        let da: Vec<f32> = (0..rows).map(|r| dsum[r] + if 1.0 - a[r] >= 1e-6 { -dl[r] / (1.0 - a[r]) } else { 0.0 }).collect();
        for m in &members {
            let dot: f32 = m.iter().map(|&r| a[r] * da[r]).sum();
            for &r in m {
                let pass = if (-30.0..=30.0).contains(&l[r]) { 1.0 } else { 0.0 };
                dl[r] += a[r] * (da[r] - dot) * pass;
            }
        }
    }
    dl
}

/// One query-aware GNN layer's tensors: `alpha`, `beta`, `gamma` (`2d → 1`), `msg` (`4d → d`).
#[derive(Debug, Clone)]
struct QLayer {
    alpha: Lin,
    beta: Lin,
    gamma: Lin,
    msg: Lin,
}

/// MixRAG on the host.
#[derive(Debug, Clone)]
pub(crate) struct HostMix {
    shape: MixShape,
    px: Lin,
    pe: Lin,
    pq: Lin,
    ent_a: Lin,
    ent_b: Lin,
    gcn1: Lin,
    gcn2: Lin,
    rel_t: Lin,
    rel_a: Lin,
    rel_b: Lin,
    rel_out: Lin,
    qgnn: Vec<QLayer>,
    gate_ctx: Lin,
    gate1: Lin,
    gate2: Lin,
    h1: Lin,
    h2: Lin,
}

/// A subgraph-expert layer's intermediate values.
struct QCache {
    z: Vec<f32>,
    /// Per message (receiver-ordered): ζ.
    zeta: Vec<f32>,
    /// `z·M1`, `z·M2` (`n × d`), the relation rows' `he·M3` and the graphs' `hq·M4 + b`.
    p1: Vec<f32>,
    p2: Vec<f32>,
    r3: Vec<f32>,
    q4: Vec<f32>,
    /// The layer's output before the ReLU.
    upd: Vec<f32>,
}

/// The forward pass's intermediate values.
struct Cache {
    tau: f32,
    b: HostBatch,
    g: Graph,
    q: Vec<f32>,
    h: Vec<f32>,
    hq: Vec<f32>,
    he: Vec<f32>,
    // Entity expert.
    ent_in: Vec<f32>,
    ent_hid: Vec<f32>,
    ent_top: TopK,
    ent_mask: Vec<f32>,
    ent_xm: Vec<f32>,
    ent_x1: Vec<f32>,
    ent_x2: Vec<f32>,
    // Relation expert.
    rel_z: Vec<f32>,
    rel_in: Vec<f32>,
    rel_hid: Vec<f32>,
    rel_top: Option<TopK>,
    rel_w: Vec<f32>,
    rel_mean: Vec<f32>,
    rel_den: Vec<f32>,
    rel_outv: Vec<f32>,
    // Subgraph expert.
    layers: Vec<QCache>,
    sub_out: Vec<f32>,
    // Gate.
    ctx: Vec<f32>,
    gate_in: Vec<f32>,
    gate_hid: Vec<f32>,
    gates: Vec<f32>,
    // Head.
    head_in: Vec<f32>,
    head_hid: Vec<f32>,
    logits: Vec<f32>,
}

fn gather(x: &[f32], idx: impl Iterator<Item = usize>, f: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for i in idx {
        out.extend_from_slice(&x[i * f..(i + 1) * f]);
    }
    out
}

/// `[a ‖ b]` row by row.
fn concat(a: &[f32], fa: usize, b: &[f32], fb: usize) -> Vec<f32> {
    let rows = a.len() / fa.max(1);
    let mut out = Vec::with_capacity(rows * (fa + fb));
    for r in 0..rows {
        out.extend_from_slice(&a[r * fa..(r + 1) * fa]);
        out.extend_from_slice(&b[r * fb..(r + 1) * fb]);
    }
    out
}

impl HostMix {
    /// The burn model's tensors on the host.
    pub(crate) fn from_burn(model: &MixRag, shape: MixShape) -> Result<HostMix> {
        let tensors = read_tensors(model, "mixrag host engine")?;
        let count = tensors.len();
        let mut it = tensors.into_iter().map(|(_, v)| v);
        let mut lin = |din: usize, dout: usize| -> Result<Lin> {
            let (w, b) = (it.next(), it.next());
            match (w, b) {
                (Some(w), Some(b)) => Lin::new(w, b, din, dout),
                _ => Err(ModelError::Internal("mixrag host engine: the burn model has fewer tensors than its shape".into())),
            }
        };
        let d = shape.hidden;
        let out = match shape.head {
            HeadKind::Classify { classes } => classes.max(1),
            HeadKind::Nodes => 1,
        };
        let (px, pe, pq) = (lin(shape.dim, d)?, lin(shape.edge_dim, d)?, lin(shape.question_dim, d)?);
        let (ent_a, ent_b, gcn1, gcn2) = (lin(2 * d, d)?, lin(d, 1)?, lin(d, d)?, lin(d, d)?);
        let (rel_t, rel_a, rel_b, rel_out) = (lin(3 * d, d)?, lin(2 * d, d)?, lin(d, 1)?, lin(d, d)?);
        let qgnn = (0..shape.layers)
            .map(|_| Ok(QLayer { alpha: lin(2 * d, 1)?, beta: lin(2 * d, 1)?, gamma: lin(2 * d, 1)?, msg: lin(4 * d, d)? }))
            .collect::<Result<Vec<_>>>()?;
        let (gate_ctx, gate1, gate2) = (lin(d, d)?, lin(d, d)?, lin(d, 3)?);
        let (h1, h2) = (lin(2 * d, shape.head_hidden)?, lin(shape.head_hidden, out)?);
        if it.len() != 0 {
            return Err(ModelError::Internal(format!("mixrag host engine: {} of the burn model's {count} tensors left unread", it.len())));
        }
        Ok(HostMix { shape, px, pe, pq, ent_a, ent_b, gcn1, gcn2, rel_t, rel_a, rel_b, rel_out, qgnn, gate_ctx, gate1, gate2, h1, h2 })
    }

    /// Every linear layer in burn's module order.
    fn lins(&mut self) -> Vec<&mut Lin> {
        let mut out: Vec<&mut Lin> = vec![
            &mut self.px,
            &mut self.pe,
            &mut self.pq,
            &mut self.ent_a,
            &mut self.ent_b,
            &mut self.gcn1,
            &mut self.gcn2,
            &mut self.rel_t,
            &mut self.rel_a,
            &mut self.rel_b,
            &mut self.rel_out,
        ];
        for l in &mut self.qgnn {
            out.extend([&mut l.alpha, &mut l.beta, &mut l.gamma, &mut l.msg]);
        }
        out.extend([&mut self.gate_ctx, &mut self.gate1, &mut self.gate2, &mut self.h1, &mut self.h2]);
        out
    }

    /// Whether each parameter ([`HostMix::params`]' order) takes part in a step's loss, as burn's
    /// autodiff sees it: without edges the relation projection, the relation expert and the
    /// query-aware GNN are left out (burn's experts return before using them).
    fn used(&self, edges: bool) -> Vec<bool> {
        let mut out = vec![true, true, edges, edges, true, true];
        out.extend([true; 8]);
        out.extend([edges; 8]);
        out.extend(std::iter::repeat_n(edges, 8 * self.qgnn.len()));
        out.extend([true; 10]);
        out
    }

    fn params(&mut self) -> Vec<&mut P> {
        self.lins().into_iter().flat_map(|l| [&mut l.w, &mut l.b]).collect()
    }

    /// `model` with this model's tensors.
    pub(crate) fn write_into(&mut self, model: MixRag) -> Result<MixRag> {
        let values: Vec<&[f32]> = self.params().into_iter().map(|p| p.v.as_slice()).collect();
        write_tensors(model, values, "mixrag host engine")
    }

    fn zero_grad(&mut self) {
        self.params().into_iter().for_each(P::zero_grad);
    }

    /// Logits of a batch (`noise`: the Gumbel noise of nodes and edges, training only).
    fn forward(&self, b: HostBatch, q: Vec<f32>, tau: f32, noise: Option<(&[f32], &[f32])>) -> Result<Cache> {
        let d = self.shape.hidden;
        let (n, m, graphs) = (b.n, b.m, b.graphs);
        let g = Graph::new(&b);
        let h = self.px.forward(&b.x, n)?;
        let hq = self.pq.forward(&q, graphs)?;
        let hqn = gather(&hq, b.node_graph.iter().map(|&x| x as usize), d);
        // The relation rows' projection, shared by the relation and subgraph experts.
        let he = if m == 0 { Vec::new() } else { self.pe.forward(&b.edge_rows, b.n_rows)? };

        // Entity expert.
        let ent_in = concat(&h, d, &hqn, d);
        let mut ent_hid = self.ent_a.forward(&ent_in, n)?;
        relu(&mut ent_hid);
        let mut phi = self.ent_b.forward(&ent_hid, n)?;
        if let Some((nn, _)) = noise {
            phi.iter_mut().zip(nn).for_each(|(p, z)| *p += z);
        }
        let (ent_mask, ent_top) = soft_top_k(phi.iter().map(|p| p / tau).collect(), &b.node_graph, graphs, self.shape.top_k);
        let ent_xm: Vec<f32> = h.chunks_exact(d).zip(&ent_mask).flat_map(|(r, &w)| r.iter().map(move |v| v * w)).collect();
        let mut ent_x1 = g.gcn(&self.gcn1.linear(&ent_xm, n)?, d);
        add_bias(&mut ent_x1, &self.gcn1.b.v);
        relu(&mut ent_x1);
        let mut ent_x2 = g.gcn(&self.gcn2.linear(&ent_x1, n)?, d);
        add_bias(&mut ent_x2, &self.gcn2.b.v);
        let ent_out: Vec<f32> = ent_x2.chunks_exact(d).zip(&ent_mask).flat_map(|(r, &w)| r.iter().map(move |v| v * w)).collect();

        // Relation expert.
        let (mut rel_z, mut rel_in, mut rel_hid, mut rel_top, mut rel_w) = (vec![], vec![], vec![], None, vec![]);
        let (mut rel_mean, mut rel_den, mut rel_outv) = (vec![0f32; n * d], vec![0f32; n], vec![0f32; n * d]);
        if m > 0 {
            let (hs, hr, ht) =
                (self.proj(&h, n, &self.rel_t, 0)?, self.proj(&he, b.n_rows, &self.rel_t, 1)?, self.proj(&h, n, &self.rel_t, 2)?);
            rel_z = vec![0f32; m * d];
            for e in 0..m {
                let (s, t, r) = (b.src[e] as usize, b.dst[e] as usize, b.edge_row[e] as usize);
                let o = &mut rel_z[e * d..(e + 1) * d];
                for j in 0..d {
                    o[j] = hs[s * d + j] + hr[r * d + j] + ht[t * d + j] + self.rel_t.b.v[j];
                }
            }
            let hqe = gather(&hq, g.edge_graph.iter().map(|&x| x as usize), d);
            rel_in = concat(&rel_z, d, &hqe, d);
            rel_hid = self.rel_a.forward(&rel_in, m)?;
            relu(&mut rel_hid);
            let mut phi = self.rel_b.forward(&rel_hid, m)?;
            if let Some((_, ne)) = noise {
                phi.iter_mut().zip(ne).for_each(|(p, z)| *p += z);
            }
            let (w, top) = soft_top_k(phi.iter().map(|p| p / tau).collect(), &g.edge_graph, graphs, self.shape.top_k);
            let mut num = vec![0f32; n * d];
            let mut den = vec![0f32; n];
            for e in 0..m {
                for v in [b.src[e] as usize, b.dst[e] as usize] {
                    num[v * d..(v + 1) * d].iter_mut().zip(&rel_z[e * d..(e + 1) * d]).for_each(|(o, z)| *o += w[e] * z);
                    den[v] += w[e];
                }
            }
            rel_den = den.iter().map(|&x| x.max(1e-6)).collect();
            rel_mean = num.chunks_exact(d).zip(&rel_den).flat_map(|(r, &s)| r.iter().map(move |v| v / s)).collect();
            rel_outv = self.rel_out.forward(&rel_mean, n)?;
            relu(&mut rel_outv);
            rel_top = Some(top);
            rel_w = w;
            // The unclamped denominator is kept for the clamp's gradient.
            rel_den.iter_mut().zip(&den).for_each(|(c, &raw)| {
                if raw < 1e-6 {
                    *c = -1.0;
                }
            });
        }

        // Subgraph expert.
        let mut layers = Vec::with_capacity(self.qgnn.len());
        let mut z = h.clone();
        if m > 0 {
            let count = self.qgnn.len();
            for (li, l) in self.qgnn.iter().enumerate() {
                let qc = self.qlayer(l, &z, &he, &hq, &b, &g)?;
                let mut next = qc.upd.clone();
                if li + 1 < count {
                    relu(&mut next);
                }
                layers.push(qc);
                z = next;
            }
        }
        let sub_out = z;

        // Gate.
        let mut ctx = g.gcn(&self.gate_ctx.linear(&h, n)?, d);
        add_bias(&mut ctx, &self.gate_ctx.b.v);
        relu(&mut ctx);
        let gate_in: Vec<f32> = h.iter().zip(&ctx).map(|(a, b)| a + b).collect();
        let mut gate_hid = self.gate1.forward(&gate_in, n)?;
        relu(&mut gate_hid);
        let mut glog = self.gate2.forward(&gate_hid, n)?;
        for r in glog.chunks_exact_mut(3) {
            for (k, on) in self.shape.experts.iter().enumerate() {
                if !on {
                    r[k] += -1e4;
                }
            }
        }
        let mut gates = vec![0f32; n * 3];
        for (r, o) in glog.chunks_exact(3).zip(gates.chunks_exact_mut(3)) {
            let mx = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = r.iter().map(|v| (v - mx).exp()).sum();
            for k in 0..3 {
                o[k] = (r[k] - mx).exp() / s;
            }
        }
        let outs = [&ent_out, &rel_outv, &sub_out];
        let mut fused = vec![0f32; n * d];
        for (k, o) in outs.iter().enumerate() {
            for v in 0..n {
                let w = gates[v * 3 + k];
                fused[v * d..(v + 1) * d].iter_mut().zip(&o[v * d..(v + 1) * d]).for_each(|(f, x)| *f += x * w);
            }
        }

        // Head.
        let (head_in, rows) = if self.shape.head == HeadKind::Nodes {
            (concat(&fused, d, &hqn, d), n)
        } else {
            let mut pooled = vec![0f32; graphs * d];
            for v in 0..n {
                let gi = b.node_graph[v] as usize;
                pooled[gi * d..(gi + 1) * d].iter_mut().zip(&fused[v * d..(v + 1) * d]).for_each(|(p, x)| *p += x);
            }
            for (gi, r) in pooled.chunks_exact_mut(d).enumerate() {
                let inv = 1.0 / b.counts[gi] as f32;
                r.iter_mut().for_each(|x| *x *= inv);
            }
            (concat(&pooled, d, &hq, d), graphs)
        };
        let mut head_hid = self.h1.forward(&head_in, rows)?;
        relu(&mut head_hid);
        let logits = self.h2.forward(&head_hid, rows)?;
        Ok(Cache {
            tau,
            b,
            g,
            q,
            h,
            hq,
            he,
            ent_in,
            ent_hid,
            ent_top,
            ent_mask,
            ent_xm,
            ent_x1,
            ent_x2,
            rel_z,
            rel_in,
            rel_hid,
            rel_top,
            rel_w,
            rel_mean,
            rel_den,
            rel_outv,
            layers,
            sub_out,
            ctx,
            gate_in,
            gate_hid,
            gates,
            head_in,
            head_hid,
            logits,
        })
    }

    /// `x · W[block]` for block `i` of a `k·d`-row weight (`x`: `rows × d`).
    fn proj(&self, x: &[f32], rows: usize, l: &Lin, i: usize) -> Result<Vec<f32>> {
        let d = self.shape.hidden;
        let mut out = vec![0f32; rows * l.dout];
        mm(&mut out, x, rows, d, block(l, i, d), l.dout, false)?;
        Ok(out)
    }

    /// One query-aware GNN layer (eqs. 2–7), every concatenation split by weight blocks.
    fn qlayer(&self, l: &QLayer, z: &[f32], he: &[f32], hq: &[f32], b: &HostBatch, g: &Graph) -> Result<QCache> {
        let d = self.shape.hidden;
        let (n, graphs) = (b.n, b.graphs);
        let a_n = self.proj(z, n, &l.alpha, 0)?;
        let b_n = self.proj(z, n, &l.beta, 0)?;
        let c_r = self.proj(he, b.n_rows, &l.gamma, 0)?;
        let qa = self.proj(hq, graphs, &l.alpha, 1)?;
        let qb = self.proj(hq, graphs, &l.beta, 1)?;
        let qc = self.proj(hq, graphs, &l.gamma, 1)?;
        let p1 = self.proj(z, n, &l.msg, 0)?;
        let p2 = self.proj(z, n, &l.msg, 1)?;
        let r3 = self.proj(he, b.n_rows, &l.msg, 2)?;
        let mut q4 = self.proj(hq, graphs, &l.msg, 3)?;
        add_bias(&mut q4, &l.msg.b.v);
        let (ba, bb, bc) = (l.alpha.b.v[0], l.beta.b.v[0], l.gamma.b.v[0]);
        let mut zeta = vec![0f32; g.msg.len()];
        let mut upd = vec![0f32; n * d];
        for v in 0..n {
            let msgs = g.messages(v);
            if msgs.is_empty() {
                continue;
            }
            let gi = b.node_graph[v] as usize;
            let inv = 1.0 / msgs.len() as f32;
            let o = &mut upd[v * d..(v + 1) * d];
            let mut zsum = 0f32;
            for (k, &(u, e)) in msgs.iter().enumerate() {
                let (u, r) = (u as usize, b.edge_row[e as usize] as usize);
                let pre = (a_n[u] + qa[gi] + ba) + (c_r[r] + qc[gi] + bc) - (b_n[v] + qb[gi] + bb);
                let zt = pre.tanh();
                zeta[g.msg_ptr[v] + k] = zt;
                zsum += zt;
                let w = zt * inv;
                o.iter_mut().zip(&p1[u * d..(u + 1) * d]).zip(&r3[r * d..(r + 1) * d]).for_each(|((o, a), c)| *o += w * (a + c));
            }
            let w = zsum * inv;
            o.iter_mut().zip(&p2[v * d..(v + 1) * d]).zip(&q4[gi * d..(gi + 1) * d]).for_each(|((o, a), c)| *o += w * (a + c));
        }
        Ok(QCache { z: z.to_vec(), zeta, p1, p2, r3, q4, upd })
    }

    /// Gradients of every parameter from the logits' gradient.
    fn backward(&mut self, c: &Cache, dlogits: &[f32]) -> Result<()> {
        let d = self.shape.hidden;
        let b = &c.b;
        let (n, m, graphs) = (b.n, b.m, b.graphs);
        let rows = dlogits.len() / self.h2.dout;
        let mut dh = vec![0f32; n * d];
        let mut dhq = vec![0f32; graphs * d];
        let mut dhe = vec![0f32; b.n_rows * d];

        // Head.
        let mut dhid = vec![0f32; c.head_hid.len()];
        self.h2.backward(&c.head_hid, dlogits, rows, true, Some(&mut dhid), false)?;
        relu_back(&c.head_hid, &mut dhid);
        let mut dhead_in = vec![0f32; c.head_in.len()];
        self.h1.backward(&c.head_in, &dhid, rows, true, Some(&mut dhead_in), false)?;
        let mut dfused = vec![0f32; n * d];
        let mut dhqn = vec![0f32; n * d];
        if self.shape.head == HeadKind::Nodes {
            for v in 0..n {
                dfused[v * d..(v + 1) * d].copy_from_slice(&dhead_in[v * 2 * d..v * 2 * d + d]);
                dhqn[v * d..(v + 1) * d].copy_from_slice(&dhead_in[v * 2 * d + d..(v + 1) * 2 * d]);
            }
        } else {
            for v in 0..n {
                let gi = b.node_graph[v] as usize;
                let inv = 1.0 / b.counts[gi] as f32;
                dfused[v * d..(v + 1) * d].iter_mut().zip(&dhead_in[gi * 2 * d..gi * 2 * d + d]).for_each(|(o, x)| *o = x * inv);
            }
            for gi in 0..graphs {
                dhq[gi * d..(gi + 1) * d].iter_mut().zip(&dhead_in[gi * 2 * d + d..(gi + 1) * 2 * d]).for_each(|(o, x)| *o += x);
            }
        }

        // Gate: fused = Σ_k out_k · gate_k.
        let ent_out: Vec<f32> = c.ent_x2.chunks_exact(d).zip(&c.ent_mask).flat_map(|(r, &w)| r.iter().map(move |v| v * w)).collect();
        let outs = [&ent_out, &c.rel_outv, &c.sub_out];
        let mut dgates = vec![0f32; n * 3];
        let mut douts = [vec![0f32; n * d], vec![0f32; n * d], vec![0f32; n * d]];
        for k in 0..3 {
            for v in 0..n {
                let df = &dfused[v * d..(v + 1) * d];
                dgates[v * 3 + k] = df.iter().zip(&outs[k][v * d..(v + 1) * d]).map(|(a, b)| a * b).sum();
                let w = c.gates[v * 3 + k];
                douts[k][v * d..(v + 1) * d].iter_mut().zip(df).for_each(|(o, x)| *o = x * w);
            }
        }
        let mut dglog = vec![0f32; n * 3];
        for v in 0..n {
            let (gr, dg) = (&c.gates[v * 3..v * 3 + 3], &dgates[v * 3..v * 3 + 3]);
            let dot: f32 = gr.iter().zip(dg).map(|(a, b)| a * b).sum();
            for k in 0..3 {
                dglog[v * 3 + k] = gr[k] * (dg[k] - dot);
            }
        }
        let mut dgh = vec![0f32; n * d];
        self.gate2.backward(&c.gate_hid, &dglog, n, true, Some(&mut dgh), false)?;
        relu_back(&c.gate_hid, &mut dgh);
        let mut dgin = vec![0f32; n * d];
        self.gate1.backward(&c.gate_in, &dgh, n, true, Some(&mut dgin), false)?;
        dh.iter_mut().zip(&dgin).for_each(|(o, x)| *o += x);
        let mut dctx = dgin;
        relu_back(&c.ctx, &mut dctx);
        bias_grad(&mut self.gate_ctx.b.g, &dctx);
        let dctx_lin = c.g.gcn(&dctx, d);
        self.gate_ctx.backward(&c.h, &dctx_lin, n, false, Some(&mut dh), true)?;

        // Subgraph expert.
        let [dent, drel, dsub] = douts;
        if m > 0 {
            let mut dz = dsub;
            let count = self.qgnn.len();
            for li in (0..count).rev() {
                let lc = &c.layers[li];
                if li + 1 < count {
                    let mut out = lc.upd.clone();
                    relu(&mut out);
                    relu_back(&out, &mut dz);
                }
                dz = self.qlayer_back(li, lc, &dz, &c.he, &c.hq, b, &c.g, &mut dhe, &mut dhq)?;
            }
            dh.iter_mut().zip(&dz).for_each(|(o, x)| *o += x);
        } else {
            dh.iter_mut().zip(&dsub).for_each(|(o, x)| *o += x);
        }

        // Relation expert.
        if m > 0 {
            let mut dmean = drel;
            relu_back(&c.rel_outv, &mut dmean);
            let mut dnum_in = vec![0f32; n * d];
            self.rel_out.backward(&c.rel_mean, &dmean, n, true, Some(&mut dnum_in), false)?;
            // mean = num / den (den clamped at 1e-6; a negative den marks a clamped one).
            let mut dnum = vec![0f32; n * d];
            let mut dden = vec![0f32; n];
            for v in 0..n {
                let den = c.rel_den[v];
                let den_used = if den < 0.0 { 1e-6 } else { den };
                let g = &dnum_in[v * d..(v + 1) * d];
                dnum[v * d..(v + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o = x / den_used);
                if den >= 0.0 {
                    let mean = &c.rel_mean[v * d..(v + 1) * d];
                    dden[v] = -g.iter().zip(mean).map(|(a, b)| a * b).sum::<f32>() / den_used;
                }
            }
            let mut dz = vec![0f32; m * d];
            let mut dw = vec![0f32; m];
            for e in 0..m {
                for v in [b.src[e] as usize, b.dst[e] as usize] {
                    let g = &dnum[v * d..(v + 1) * d];
                    dw[e] += g.iter().zip(&c.rel_z[e * d..(e + 1) * d]).map(|(a, b)| a * b).sum::<f32>() + dden[v];
                    dz[e * d..(e + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o += c.rel_w[e] * x);
                }
            }
            let top = c.rel_top.as_ref().ok_or_else(|| ModelError::Internal("mixrag host engine: no relation top-k".into()))?;
            let dl = soft_top_k_back(top, &dw, &c.g.edge_graph, graphs);
            let tau_inv = 1.0 / self.tau_of(c);
            let dphi: Vec<f32> = dl.iter().map(|x| x * tau_inv).collect();
            let mut drh = vec![0f32; m * d];
            self.rel_b.backward(&c.rel_hid, &dphi, m, true, Some(&mut drh), false)?;
            relu_back(&c.rel_hid, &mut drh);
            let mut drin = vec![0f32; m * 2 * d];
            self.rel_a.backward(&c.rel_in, &drh, m, true, Some(&mut drin), false)?;
            for e in 0..m {
                dz[e * d..(e + 1) * d].iter_mut().zip(&drin[e * 2 * d..e * 2 * d + d]).for_each(|(o, x)| *o += x);
                let gi = c.g.edge_graph[e] as usize;
                dhq[gi * d..(gi + 1) * d].iter_mut().zip(&drin[e * 2 * d + d..(e + 1) * 2 * d]).for_each(|(o, x)| *o += x);
            }
            // z = h[src]·W0 + he[row]·W1 + h[dst]·W2 + b, summed per node and per row first.
            bias_grad(&mut self.rel_t.b.g, &dz);
            let (mut ds, mut dt, mut dr) = (vec![0f32; n * d], vec![0f32; n * d], vec![0f32; b.n_rows * d]);
            for e in 0..m {
                let g = &dz[e * d..(e + 1) * d];
                let (s, t, r) = (b.src[e] as usize, b.dst[e] as usize, b.edge_row[e] as usize);
                ds[s * d..(s + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o += x);
                dt[t * d..(t + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o += x);
                dr[r * d..(r + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o += x);
            }
            let dout = self.rel_t.dout;
            mm_tn(block_grad(&mut self.rel_t, 0, d), &c.h, n, d, &ds, dout)?;
            mm_tn(block_grad(&mut self.rel_t, 1, d), &c.he, b.n_rows, d, &dr, dout)?;
            mm_tn(block_grad(&mut self.rel_t, 2, d), &c.h, n, d, &dt, dout)?;
            mm_nt(&mut dh, &ds, n, dout, block(&self.rel_t, 0, d), d)?;
            mm_nt(&mut dhe, &dr, b.n_rows, dout, block(&self.rel_t, 1, d), d)?;
            mm_nt(&mut dh, &dt, n, dout, block(&self.rel_t, 2, d), d)?;
        }

        // Entity expert: out = x2 · mask, x2 = Â(x1 W2) + b2, x1 = relu(Â(xm W1) + b1), xm = h · mask.
        let mut dmask = vec![0f32; n];
        let mut dx2 = vec![0f32; n * d];
        for v in 0..n {
            let g = &dent[v * d..(v + 1) * d];
            dmask[v] += g.iter().zip(&c.ent_x2[v * d..(v + 1) * d]).map(|(a, b)| a * b).sum::<f32>();
            dx2[v * d..(v + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o = x * c.ent_mask[v]);
        }
        bias_grad(&mut self.gcn2.b.g, &dx2);
        let dlin2 = c.g.gcn(&dx2, d);
        let mut dx1 = vec![0f32; n * d];
        self.gcn2.backward(&c.ent_x1, &dlin2, n, false, Some(&mut dx1), false)?;
        relu_back(&c.ent_x1, &mut dx1);
        bias_grad(&mut self.gcn1.b.g, &dx1);
        let dlin1 = c.g.gcn(&dx1, d);
        let mut dxm = vec![0f32; n * d];
        self.gcn1.backward(&c.ent_xm, &dlin1, n, false, Some(&mut dxm), false)?;
        for v in 0..n {
            let g = &dxm[v * d..(v + 1) * d];
            dmask[v] += g.iter().zip(&c.h[v * d..(v + 1) * d]).map(|(a, b)| a * b).sum::<f32>();
            dh[v * d..(v + 1) * d].iter_mut().zip(g).for_each(|(o, x)| *o += x * c.ent_mask[v]);
        }
        let dl = soft_top_k_back(&c.ent_top, &dmask, &b.node_graph, graphs);
        let tau_inv = 1.0 / self.tau_of(c);
        let dphi: Vec<f32> = dl.iter().map(|x| x * tau_inv).collect();
        let mut deh = vec![0f32; n * d];
        self.ent_b.backward(&c.ent_hid, &dphi, n, true, Some(&mut deh), false)?;
        relu_back(&c.ent_hid, &mut deh);
        let mut dein = vec![0f32; n * 2 * d];
        self.ent_a.backward(&c.ent_in, &deh, n, true, Some(&mut dein), false)?;
        for v in 0..n {
            dh[v * d..(v + 1) * d].iter_mut().zip(&dein[v * 2 * d..v * 2 * d + d]).for_each(|(o, x)| *o += x);
            dhqn[v * d..(v + 1) * d].iter_mut().zip(&dein[v * 2 * d + d..(v + 1) * 2 * d]).for_each(|(o, x)| *o += x);
        }

        // Projections.
        for v in 0..n {
            let gi = b.node_graph[v] as usize;
            dhq[gi * d..(gi + 1) * d].iter_mut().zip(&dhqn[v * d..(v + 1) * d]).for_each(|(o, x)| *o += x);
        }
        self.px.backward(&b.x, &dh, n, true, None, false)?;
        self.pq.backward(&c.q, &dhq, graphs, true, None, false)?;
        if m > 0 {
            self.pe.backward(&b.edge_rows, &dhe, b.n_rows, true, None, false)?;
        }
        Ok(())
    }

    /// The temperature the cache was computed at.
    fn tau_of(&self, c: &Cache) -> f32 {
        c.tau
    }

    /// Backward of [`HostMix::qlayer`] from the gradient of its pre-activation output; returns the
    /// gradient of its input `z` and accumulates the relation rows' and questions' gradients.
    #[allow(clippy::too_many_arguments)]
    fn qlayer_back(
        &mut self,
        li: usize,
        lc: &QCache,
        dupd: &[f32],
        he: &[f32],
        hq: &[f32],
        b: &HostBatch,
        g: &Graph,
        dhe: &mut [f32],
        dhq: &mut [f32],
    ) -> Result<Vec<f32>> {
        let d = self.shape.hidden;
        let (n, graphs, rows) = (b.n, b.graphs, b.n_rows);
        let l = &mut self.qgnn[li];
        let (mut da, mut db, mut dc) = (vec![0f32; n], vec![0f32; n], vec![0f32; rows]);
        let (mut dqa, mut dqb, mut dqc) = (vec![0f32; graphs], vec![0f32; graphs], vec![0f32; graphs]);
        let (mut dp1, mut dp2, mut dr3, mut dq4) = (vec![0f32; n * d], vec![0f32; n * d], vec![0f32; rows * d], vec![0f32; graphs * d]);
        for v in 0..n {
            let msgs = g.messages(v);
            if msgs.is_empty() {
                continue;
            }
            let gi = b.node_graph[v] as usize;
            let inv = 1.0 / msgs.len() as f32;
            let gv = &dupd[v * d..(v + 1) * d];
            let own: f32 = gv.iter().zip(&lc.p2[v * d..(v + 1) * d]).zip(&lc.q4[gi * d..(gi + 1) * d]).map(|((g, a), c)| g * (a + c)).sum();
            let mut zsum = 0f32;
            for (k, &(u, e)) in msgs.iter().enumerate() {
                let (u, r) = (u as usize, b.edge_row[e as usize] as usize);
                let zt = lc.zeta[g.msg_ptr[v] + k];
                zsum += zt;
                let dot: f32 =
                    gv.iter().zip(&lc.p1[u * d..(u + 1) * d]).zip(&lc.r3[r * d..(r + 1) * d]).map(|((g, a), c)| g * (a + c)).sum();
                let dzeta = inv * (dot + own);
                let w = inv * zt;
                dp1[u * d..(u + 1) * d].iter_mut().zip(gv).for_each(|(o, x)| *o += w * x);
                dr3[r * d..(r + 1) * d].iter_mut().zip(gv).for_each(|(o, x)| *o += w * x);
                let dpre = dzeta * (1.0 - zt * zt);
                da[u] += dpre;
                dqa[gi] += dpre;
                dc[r] += dpre;
                dqc[gi] += dpre;
                db[v] -= dpre;
                dqb[gi] -= dpre;
            }
            let w = inv * zsum;
            dp2[v * d..(v + 1) * d].iter_mut().zip(gv).for_each(|(o, x)| *o += w * x);
            dq4[gi * d..(gi + 1) * d].iter_mut().zip(gv).for_each(|(o, x)| *o += w * x);
        }
        let z = &lc.z;
        let mut dz = vec![0f32; n * d];
        // The three scalar gates: node, question and relation blocks, biases.
        for (lin, dn, dq, on_rows) in [(&mut l.alpha, &da, &dqa, false), (&mut l.beta, &db, &dqb, false), (&mut l.gamma, &dc, &dqc, true)] {
            lin.b.g[0] += dq.iter().sum::<f32>();
            if on_rows {
                mm_tn(block_grad(lin, 0, d), he, rows, d, dn, 1)?;
                mm_nt(dhe, dn, rows, 1, block(lin, 0, d), d)?;
            } else {
                mm_tn(block_grad(lin, 0, d), z, n, d, dn, 1)?;
                mm_nt(&mut dz, dn, n, 1, block(lin, 0, d), d)?;
            }
            mm_tn(block_grad(lin, 1, d), hq, graphs, d, dq, 1)?;
            mm_nt(dhq, dq, graphs, 1, block(lin, 1, d), d)?;
        }
        // The message: sender, receiver, relation and question blocks, bias.
        let msg = &mut l.msg;
        bias_grad(&mut msg.b.g, &dq4);
        mm_tn(block_grad(msg, 0, d), z, n, d, &dp1, d)?;
        mm_tn(block_grad(msg, 1, d), z, n, d, &dp2, d)?;
        mm_tn(block_grad(msg, 2, d), he, rows, d, &dr3, d)?;
        mm_tn(block_grad(msg, 3, d), hq, graphs, d, &dq4, d)?;
        mm_nt(&mut dz, &dp1, n, d, block(msg, 0, d), d)?;
        mm_nt(&mut dz, &dp2, n, d, block(msg, 1, d), d)?;
        mm_nt(dhe, &dr3, rows, d, block(msg, 2, d), d)?;
        mm_nt(dhq, &dq4, graphs, d, block(msg, 3, d), d)?;
        Ok(dz)
    }

    /// One AdamW step on a batch (noise drawn from `rng` as the burn trainer draws it); its loss,
    /// or `None` for a batch without a target.
    fn step(
        &mut self,
        examples: &[&QaExample],
        rows: &[&EdgeRows],
        tau: f32,
        rng: &mut Stream,
        optim: &mut AdamW,
        lr: f32,
    ) -> Result<Option<f64>> {
        let (b, q) = batch(examples, rows, &self.shape)?;
        let node_noise = gumbel_values(b.n, rng);
        let edge_noise = gumbel_values(b.m, rng);
        let c = self.forward(b, q, tau, Some((&node_noise, &edge_noise)))?;
        let Some((loss, dl)) = qa_loss(self.shape.head, &c.logits, examples, &c.b) else { return Ok(None) };
        self.zero_grad();
        self.backward(&c, &dl)?;
        let used = self.used(c.b.m > 0);
        optim.step_some(lr, self.params().into_iter().zip(used).map(|(p, u)| (&mut p.v, u.then_some(&p.g))))?;
        Ok(Some(loss))
    }

    /// Validation loss and metric at temperature `tau`, without noise (as the burn trainer's).
    fn evaluate(&self, examples: &[QaExample], rows: &[EdgeRows], tau: f32) -> Result<(f64, f64)> {
        if examples.is_empty() {
            return Ok((0.0, 0.0));
        }
        let (mut loss, mut counted, mut hits) = (0.0, 0usize, 0usize);
        for (chunk, r) in examples.chunks(64).zip(rows.chunks(64)) {
            let refs: Vec<&QaExample> = chunk.iter().collect();
            let r: Vec<&EdgeRows> = r.iter().collect();
            let (b, q) = batch(&refs, &r, &self.shape)?;
            let c = self.forward(b, q, tau, None)?;
            if let Some((l, _)) = qa_loss(self.shape.head, &c.logits, &refs, &c.b) {
                loss += l * chunk.len() as f64;
                counted += chunk.len();
            }
            for (gi, e) in chunk.iter().enumerate() {
                let p = match self.shape.head {
                    HeadKind::Nodes => argmax(&c.logits[c.b.offsets[gi]..c.b.offsets[gi] + c.b.counts[gi]]),
                    HeadKind::Classify { classes } => {
                        let k = classes.max(1);
                        argmax(&c.logits[gi * k..(gi + 1) * k])
                    }
                };
                hits += usize::from(correct(e, p));
            }
        }
        Ok((loss / counted.max(1) as f64, hits as f64 / examples.len() as f64))
    }
}

/// A batch on the host and its questions.
fn batch(examples: &[&QaExample], rows: &[&EdgeRows], shape: &MixShape) -> Result<(HostBatch, Vec<f32>)> {
    let graphs: Vec<SmallGraph<'_>> = examples.iter().map(|e| SmallGraph { x: &e.x, n: e.n, edges: &e.edges, edge_x: &e.edge_x }).collect();
    let b = HostBatch::with_rows(&graphs, rows, shape.dim, shape.edge_dim)?;
    let q = examples.iter().flat_map(|e| e.question.iter().copied()).collect();
    Ok((b, q))
}

/// [`super::predict`] on the host engine: the kept model read once, evaluation mode (no noise),
/// batches of `batch` questions.
pub(crate) fn predict(
    model: &MixRag,
    shape: MixShape,
    examples: &[QaExample],
    tau: f64,
    batch_size: usize,
) -> Result<super::MixPredictions> {
    let host = HostMix::from_burn(model, shape)?;
    let rows = edge_rows(examples, shape.edge_dim);
    let mut out = super::MixPredictions::default();
    for (chunk, r) in examples.chunks(batch_size.max(1)).zip(rows.chunks(batch_size.max(1))) {
        let refs: Vec<&QaExample> = chunk.iter().collect();
        let r: Vec<&EdgeRows> = r.iter().collect();
        let (b, q) = batch(&refs, &r, &shape)?;
        let c = host.forward(b, q, tau as f32, None)?;
        out.push_batch(matches!(shape.head, HeadKind::Nodes), &c.logits, &c.gates, &c.b.offsets, &c.b.counts);
    }
    Ok(out)
}

/// [`super::train`] on the host engine.
pub(crate) fn train(
    shape: MixShape,
    train: &[QaExample],
    val: &[QaExample],
    cfg: &MixConfig,
    dev: &Device,
) -> Result<(MixRag, Vec<QaEpoch>, u32)> {
    const MODEL: &str = "MixRAG";
    let t = &cfg.qa.train;
    crate::train::check_lr(MODEL, t.lr)?;
    if train.is_empty() {
        return Err(ModelError::Internal("no training question".into()));
    }
    let burn = MixRag::new(shape, cfg.qa.seed, &dev.clone().inner())?;
    let model = HostMix::from_burn(&burn, shape)?;
    let mut optim = AdamW::new(t.weight_decay);
    optim.clip = Some(t.clip);
    let mut rng = Stream(cfg.qa.seed ^ 0x6d69_7874);
    let (train_rows, val_rows) = (edge_rows(train, shape.edge_dim), edge_rows(val, shape.edge_dim));
    let mut learner = MixLearner { train, val, train_rows, val_rows, cfg, tau: cfg.tau(1), optim };
    let plan = t.plan(MODEL, cfg.qa.seed, train.len());
    let mut f = rayon::scope(|_| fit(&plan, &mut learner, model, &mut rng))?;
    Ok((f.kept.write_into(burn)?, f.curve, f.best_epoch))
}

/// [`super::step_times`] on the host engine.
pub(crate) fn step_times(shape: MixShape, examples: &[QaExample], cfg: &MixConfig, steps: usize) -> Result<Vec<f64>> {
    let t = &cfg.qa.train;
    let burn = MixRag::new(shape, cfg.qa.seed, &Device::flex())?;
    let mut model = HostMix::from_burn(&burn, shape)?;
    let mut optim = AdamW::new(t.weight_decay);
    optim.clip = Some(t.clip);
    let mut rng = Stream(cfg.qa.seed);
    let rows = edge_rows(examples, shape.edge_dim);
    let batch = t.batch.max(1);
    rayon::scope(|_| {
        let mut times = Vec::with_capacity(steps);
        for i in 0..=steps {
            let ids: Vec<usize> = (0..batch).map(|j| (i * batch + j) % examples.len().max(1)).collect();
            let refs: Vec<&QaExample> = ids.iter().map(|&j| &examples[j]).collect();
            let r: Vec<&EdgeRows> = ids.iter().map(|&j| &rows[j]).collect();
            let t0 = std::time::Instant::now();
            model.step(&refs, &r, cfg.tau(1) as f32, &mut rng, &mut optim, t.lr as f32)?;
            if i > 0 {
                times.push(t0.elapsed().as_secs_f64());
            }
        }
        Ok(times)
    })
}

struct MixLearner<'a> {
    train: &'a [QaExample],
    val: &'a [QaExample],
    train_rows: Vec<EdgeRows>,
    val_rows: Vec<EdgeRows>,
    cfg: &'a MixConfig,
    tau: f64,
    optim: AdamW,
}

impl Learner for MixLearner<'_> {
    type Model = HostMix;
    type Kept = HostMix;
    type Row = QaEpoch;

    fn begin_epoch(&mut self, epoch: usize) {
        self.tau = self.cfg.tau(epoch);
    }

    fn step(&mut self, mut model: HostMix, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<HostMix>> {
        let ids = batch.unwrap_or_default();
        let refs: Vec<&QaExample> = ids.iter().map(|&i| &self.train[i]).collect();
        let rows: Vec<&EdgeRows> = ids.iter().map(|&i| &self.train_rows[i]).collect();
        let loss = model.step(&refs, &rows, self.tau as f32, rng, &mut self.optim, self.cfg.qa.train.lr as f32)?;
        Ok((model, loss.map(|l| (l, refs.len() as f64))))
    }

    fn evaluate(&mut self, model: &HostMix, epoch: usize, train_loss: f64) -> Result<Evaluation<HostMix, QaEpoch>> {
        let (val_loss, val_metric) = model.evaluate(self.val, &self.val_rows, self.tau as f32)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_metric, loss: Some(val_loss) },
            keep: model.clone(),
            row: QaEpoch { epoch: epoch as u32, train_loss, val_loss, val_metric },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gnn::mixrag::tests::planted_shape;
    use crate::graphqa::Target;
    use crate::train::TrainConfig;
    use burn::tensor::{Tensor, TensorData};

    /// Every parameter's gradient of one batch's loss (Gumbel noise, a temperature, a top-k that
    /// selects), burn's autodiff against the host engine, for both heads and several expert sets.
    #[test]
    fn host_gradients_are_burns() {
        let dev = Device::flex().autodiff();
        let cls = crate::graphqa::tests::planted(6, 1);
        // Node targets on the same graphs (every graph's node 1), one graph without an answer.
        let nodes: Vec<QaExample> = cls
            .iter()
            .enumerate()
            .map(|(i, e)| QaExample { target: Target::Nodes(if i == 2 { vec![] } else { vec![1] }), ..e.clone() })
            .collect();
        let bare: Vec<QaExample> = cls.iter().map(|e| QaExample { edges: vec![], edge_x: vec![], ..e.clone() }).collect();
        for (head, experts, no_edges) in [
            (HeadKind::Classify { classes: 2 }, [true; 3], false),
            (HeadKind::Nodes, [true; 3], false),
            (HeadKind::Classify { classes: 2 }, [true, false, true], false),
            (HeadKind::Classify { classes: 2 }, [true; 3], true),
        ] {
            let shape = MixShape { head, experts, ..planted_shape(6, 2) };
            let ex = if no_edges {
                &bare
            } else if head == HeadKind::Nodes {
                &nodes
            } else {
                &cls
            };
            let refs: Vec<&QaExample> = ex.iter().collect();
            let model = MixRag::new(shape, 4, &dev).expect("model");
            let mut host = HostMix::from_burn(&model, shape).expect("host");
            let (g, q) = crate::graphqa::batch_of(&refs, 4, 2, &dev).expect("batch");
            let tau = 0.7f32;
            let mut rng = Stream(9);
            let nn = gumbel_values(g.n_nodes, &mut rng);
            let ne = gumbel_values(g.n_edges, &mut rng);
            let noise = (
                Tensor::<2>::from_data(TensorData::new(nn.clone(), [g.n_nodes, 1]), &dev),
                Tensor::<2>::from_data(TensorData::new(ne.clone(), [g.n_edges, 1]), &dev),
            );
            let f = model.forward(&g, q, f64::from(tau), Some(noise));
            let loss = crate::graphqa::loss_from(f.logits, head == HeadKind::Nodes, &refs, &g).expect("loss");
            let lb = f64::from(loss.clone().into_scalar::<f32>());
            let want = crate::gnn::host::burn_gradients(&model, &loss.backward());
            let rows = edge_rows(ex, 2);
            let rows: Vec<&EdgeRows> = rows.iter().collect();
            let (b, q) = batch(&refs, &rows, &shape).expect("batch");
            let c = host.forward(b, q, tau, Some((&nn, &ne))).expect("forward");
            let (lh, dl) = qa_loss(head, &c.logits, &refs, &c.b).expect("loss");
            let what = format!("{head:?} {experts:?} without edges: {no_edges}");
            assert!((lh - lb).abs() <= 1e-5 * lb.abs().max(1.0), "{what}: loss {lh} vs {lb}");
            host.zero_grad();
            host.backward(&c, &dl).expect("backward");
            let got: Vec<Vec<f32>> = host.params().into_iter().map(|p| p.g.clone()).collect();
            assert_eq!(got.len(), want.len(), "{what}");
            // The parameters the optimiser steps are those burn's backward pass reaches.
            let reached: Vec<bool> = want.iter().map(Option::is_some).collect();
            assert_eq!(host.used(c.b.m > 0), reached, "{what}: parameters taking part in the step");
            let scale = want.iter().flatten().flatten().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                match w {
                    Some(w) => {
                        let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                        assert!(worst <= 1e-4 * scale, "{what}: tensor {i}: max |diff| {worst:e} (largest gradient {scale:e})");
                    }
                    None => assert!(g.iter().all(|v| v.abs() <= 1e-6 * scale), "{what}: tensor {i} has a gradient burn lacks"),
                }
            }
        }
    }

    /// The host engine trains as burn's trainer does: the same seed, noise and temperatures give
    /// the same curve up to float summation order.
    #[test]
    fn the_host_engine_trains_as_the_burn_trainer_does() {
        let dev = Device::flex();
        let (tr, va) = (crate::graphqa::tests::planted(40, 1), crate::graphqa::tests::planted(16, 2));
        let shape = planted_shape(8, 3);
        let mut cfg = MixConfig::default();
        cfg.qa = crate::graphqa::QaConfig {
            train: TrainConfig { lr: 2e-3, epochs: 3, patience: 3, batch: 8, ..cfg.qa.train },
            head_hidden: 8,
            ..cfg.qa
        };
        let (hm, hc, _) = super::super::train_on(true, shape, &tr, &va, &cfg, &dev).expect("host");
        let (_, bc, _) = super::super::train_on(false, shape, &tr, &va, &cfg, &dev).expect("burn");
        assert_eq!(hc.len(), bc.len());
        for (h, b) in hc.iter().zip(&bc) {
            for (x, y, name) in [(h.train_loss, b.train_loss, "train loss"), (h.val_loss, b.val_loss, "val loss")] {
                assert!((x - y).abs() <= 1e-3 * y.abs().max(1.0), "epoch {}: {name} {x} (host) vs {y} (burn)", h.epoch);
            }
        }
        // The model written back predicts as the host engine evaluated it.
        let inner = dev.clone().inner();
        let p = super::super::predict_burn(&hm, &va, 4, 2, cfg.tau(3), 64, &inner).expect("predict");
        let acc = va.iter().zip(&p.pred).filter(|(e, x)| correct(e, **x)).count() as f64 / va.len() as f64;
        let best = hc.iter().map(|c| c.val_metric).fold(f64::MIN, f64::max);
        assert!((acc - best).abs() < 1e-9, "{acc} vs {best}");
    }
}
