//! TopoRAG's small full-batch GNN trainings on the CPU without a tensor framework: the same models,
//! initialisation, dropout masks, losses, Adam (burn's arithmetic, coupled L2 decay) and early
//! stopping as [`crate::gnn::node`] and [`crate::gnn::link`], with a hand-written backward pass over
//! host buffers, single-threaded `gemm` products and CSR propagation. Burn's autodiff graph, its
//! per-op allocations and its host round-trips cost more than the arithmetic on graphs of a few
//! thousand nodes; this engine keeps only the arithmetic, so that many trainings (retrievers ×
//! models × seeds) run side by side, one per core. A seed gives the same curve as the burn
//! trainers up to float summation order (tested), and the burn trainers stay for `--device gpu`.

use crate::error::{ModelError, Result};
use crate::gnn::graph::{Entries, normalised_entries};
use crate::gnn::{GnnKind, LinkPredConfig, LinkPredData, NodeClassConfig, NodeClassData, hits_at_k};
use crate::linalg::{Op, gemm_f32};
use crate::train::optim::Adam;
use crate::train::{EpochRow, Evaluation, Learner, Plan, Stepped, Stream, Trained, fit, gnn_evaluation};

/// `out[dst] += w · x[src]` grouped by destination (the entry order of each destination kept, as
/// the burn trainers' scatter-add applies them).
#[derive(Debug, Clone)]
pub struct Csr {
    n: usize,
    ptr: Vec<usize>,
    src: Vec<u32>,
    w: Vec<f32>,
}

impl Csr {
    pub fn new(n: usize, entries: &Entries) -> Csr {
        let mut ptr = vec![0usize; n + 1];
        for &(_, d, _) in entries {
            ptr[d as usize + 1] += 1;
        }
        for i in 0..n {
            ptr[i + 1] += ptr[i];
        }
        let mut fill = ptr.clone();
        let (mut src, mut w) = (vec![0u32; entries.len()], vec![0f32; entries.len()]);
        for &(s, d, x) in entries {
            let at = &mut fill[d as usize];
            src[*at] = s;
            w[*at] = x;
            *at += 1;
        }
        Csr { n, ptr, src, w }
    }

    /// The transpose (`out[src] += w · x[dst]`).
    pub fn transpose(&self) -> Csr {
        let entries: Entries =
            (0..self.n).flat_map(|d| (self.ptr[d]..self.ptr[d + 1]).map(move |e| (d as u32, self.src[e], self.w[e]))).collect();
        Csr::new(self.n, &entries)
    }

    /// `out = A x` for row-major `x` of width `f`. Each row is written whole (`out` needs no
    /// clearing), 64 columns at a time held in registers over the row's entries: per element the
    /// additions `0 + w₁x₁ + w₂x₂ + …` in entry order, as a zeroed row summed entry by entry.
    pub fn apply(&self, x: &[f32], f: usize, out: &mut [f32]) {
        simd(Pass::Propagate { a: self, x, f, out });
    }

    /// [`Self::apply`]'s loops: whole 64-column blocks with the accumulators in registers (a
    /// fixed trip count), then the last partial block.
    #[inline(always)]
    fn apply_rows(&self, x: &[f32], f: usize, out: &mut [f32]) {
        const W: usize = 64;
        for d in 0..self.n {
            let o = &mut out[d * f..(d + 1) * f];
            let entries = self.ptr[d]..self.ptr[d + 1];
            let mut c0 = 0;
            while c0 + W <= f {
                let mut acc = [0f32; W];
                for e in entries.clone() {
                    let (s, w) = (self.src[e] as usize * f + c0, self.w[e]);
                    for (a, &b) in acc.iter_mut().zip(&x[s..s + W]) {
                        *a += w * b;
                    }
                }
                o[c0..c0 + W].copy_from_slice(&acc);
                c0 += W;
            }
            if c0 < f {
                let mut acc = [0f32; W];
                let acc = &mut acc[..f - c0];
                for e in entries {
                    let (s, w) = (self.src[e] as usize * f, self.w[e]);
                    for (a, &b) in acc.iter_mut().zip(&x[s + c0..s + f]) {
                        *a += w * b;
                    }
                }
                o[c0..].copy_from_slice(acc);
            }
        }
    }
}

/// The engine's elementwise and row loops, run through pulp's runtime dispatch so that they are
/// compiled (and auto-vectorised) for the best instruction set of this CPU: AVX-512, AVX2 or
/// baseline (the crate itself is built for baseline x86-64, where they ran 4 lanes wide). Each
/// element gets the same operations in the same order as a scalar loop (Rust never fuses a
/// multiply and an add), so the results are bit for bit those of the plain loops. (An enum, not a
/// closure: `with_simd` is inlined into the target-feature function, a closure body may not be.)
enum Pass<'a> {
    /// `out = A x` ([`Csr::apply`]).
    Propagate { a: &'a Csr, x: &'a [f32], f: usize, out: &'a mut [f32] },
    /// Every row of `out` plus `b`.
    AddBias { out: &'a mut [f32], b: &'a [f32] },
    /// `g += ` the column sums of `dz` (rows of `g.len()`), row after row.
    ColumnSums { g: &'a mut [f32], dz: &'a [f32] },
    /// `x = max(x, 0)`.
    Relu(&'a mut [f32]),
    /// `g · scale` where `a > 0`, else 0: the gradient through a ReLU whose output is `a` (scale
    /// 1, which leaves `g` bit for bit), or through a ReLU and a dropout whose kept, scaled output
    /// is `a` (scale 1/keep). `a` is a ReLU's output, never NaN.
    ReluGrad { g: &'a mut [f32], a: &'a [f32], scale: f32 },
    /// Dropout in place ([`dropout`]).
    Dropout { x: &'a mut [f32], p: f64, rng: &'a mut Stream },
    /// `z[i] = h[a_i] ⊙ h[b_i]` per pair ([`LinkNet::score`]).
    PairProducts { h: &'a [f32], pairs: &'a [(u32, u32)], hd: usize, z: &'a mut [f32] },
    /// `dh[a_i] += dz_i ⊙ h[b_i]`, then `dh[b_i] += dz_i ⊙ h[a_i]`, pair after pair
    /// ([`LinkNet::score_back`]).
    PairGradients { h: &'a [f32], pairs: &'a [(u32, u32)], hd: usize, dz: &'a [f32], dh: &'a mut [f32] },
}

impl pulp::WithSimd for Pass<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        match self {
            Pass::Propagate { a, x, f, out } => a.apply_rows(x, f, out),
            Pass::AddBias { out, b } => {
                for row in out.chunks_mut(b.len().max(1)) {
                    for (a, &b) in row.iter_mut().zip(b) {
                        *a += b;
                    }
                }
            }
            Pass::ColumnSums { g, dz } => {
                for row in dz.chunks(g.len().max(1)) {
                    for (g, &d) in g.iter_mut().zip(row) {
                        *g += d;
                    }
                }
            }
            Pass::Relu(x) => {
                for v in x {
                    *v = v.max(0.0);
                }
            }
            Pass::ReluGrad { g, a, scale } => {
                for (v, &a) in g.iter_mut().zip(a) {
                    *v = if a > 0.0 { *v * scale } else { 0.0 };
                }
            }
            Pass::Dropout { x, p, rng } => dropout_blocks(x, p, rng),
            Pass::PairProducts { h, pairs, hd, z } => {
                for (&(a, b), o) in pairs.iter().zip(z.chunks_exact_mut(hd.max(1))) {
                    let (ra, rb) = (&h[a as usize * hd..(a as usize + 1) * hd], &h[b as usize * hd..(b as usize + 1) * hd]);
                    for ((o, &x), &y) in o.iter_mut().zip(ra).zip(rb) {
                        *o = x * y;
                    }
                }
            }
            Pass::PairGradients { h, pairs, hd, dz, dh } => {
                for (&(a, b), gz) in pairs.iter().zip(dz.chunks_exact(hd.max(1))) {
                    let (a, b) = (a as usize, b as usize);
                    for (o, (&g, &y)) in dh[a * hd..(a + 1) * hd].iter_mut().zip(gz.iter().zip(&h[b * hd..(b + 1) * hd])) {
                        *o += g * y;
                    }
                    for (o, (&g, &y)) in dh[b * hd..(b + 1) * hd].iter_mut().zip(gz.iter().zip(&h[a * hd..(a + 1) * hd])) {
                        *o += g * y;
                    }
                }
            }
        }
    }
}

fn simd(pass: Pass<'_>) {
    crate::simd::arch().dispatch(pass)
}

/// A dense layer on the host with its Adam state.
#[derive(Debug, Clone)]
struct Layer {
    d_in: usize,
    d_out: usize,
    w: Vec<f32>,
    b: Vec<f32>,
    gw: Vec<f32>,
    gb: Vec<f32>,
    mw: Vec<f32>,
    vw: Vec<f32>,
    mb: Vec<f32>,
    vb: Vec<f32>,
}

impl Layer {
    /// Glorot-uniform weights from `rng`, zero bias: the draws of [`crate::train::Dense::new`].
    fn new(d_in: usize, d_out: usize, rng: &mut Stream) -> Layer {
        let a = (6.0 / (d_in + d_out) as f64).sqrt();
        let w: Vec<f32> = (0..d_in * d_out).map(|_| ((rng.unit() * 2.0 - 1.0) * a) as f32).collect();
        let z = |k: usize| vec![0f32; k];
        Layer { d_in, d_out, gw: z(w.len()), mw: z(w.len()), vw: z(w.len()), w, b: z(d_out), gb: z(d_out), mb: z(d_out), vb: z(d_out) }
    }

    /// `out = x W` (n rows).
    fn linear(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        gemm_f32(out, Op::n(x, n, self.d_in), Op::n(&self.w, self.d_in, self.d_out), false)
    }

    fn add_bias(&self, out: &mut [f32]) {
        add_bias_rows(out, &self.b);
    }

    /// `dW += xᵀ g` (n rows).
    fn grad_w(&mut self, x: &[f32], g: &[f32], n: usize) -> Result<()> {
        gemm_f32(&mut self.gw, Op::t(x, n, self.d_in), Op::n(g, n, self.d_out), true)
    }

    /// `db += colsum(dz)`.
    fn grad_b(&mut self, dz: &[f32]) {
        column_sums(&mut self.gb, dz);
    }

    /// A dense layer `z = x W + b`: both gradients.
    fn grad(&mut self, x: &[f32], dz: &[f32], n: usize) -> Result<()> {
        self.grad_w(x, dz, n)?;
        self.grad_b(dz);
        Ok(())
    }

    /// `dx = dz Wᵀ` (or `dx += …`).
    fn back(&self, dz: &[f32], n: usize, dx: &mut [f32], accumulate: bool) -> Result<()> {
        gemm_f32(dx, Op::n(dz, n, self.d_out), Op::t(&self.w, self.d_in, self.d_out), accumulate)
    }

    fn zero_grad(&mut self) {
        self.gw.fill(0.0);
        self.gb.fill(0.0);
    }
}

/// One Adam step ([`Adam`]) over the layers' weights and biases.
fn adam_step(adam: &mut Adam, layers: &mut [&mut Layer]) {
    let c = adam.next_step();
    for l in layers.iter_mut() {
        let Layer { w, b, gw, gb, mw, vw, mb, vb, .. } = &mut **l;
        c.apply(w, gw, mw, vw);
        c.apply(b, gb, mb, vb);
    }
}

/// `x` with dropout applied in place (the decisions of [`crate::train::mask`], kept entries scaled
/// by 1/(1 − p)): the stream's 16-bit uniforms a block at a time, then one branch-free pass.
fn dropout(x: &mut [f32], p: f64, rng: &mut Stream) {
    simd(Pass::Dropout { x, p, rng });
}

#[inline(always)]
fn dropout_blocks(x: &mut [f32], p: f64, rng: &mut Stream) {
    let scale = (1.0 / (1.0 - p)) as f32;
    let threshold = ((1.0 - p) * 65536.0).round() as u32;
    // A multiple of 4, so that every block but the last uses whole draws, as one pass would.
    const BLOCK: usize = 4096;
    let mut u = [0u16; BLOCK];
    for block in x.chunks_mut(BLOCK) {
        let u = &mut u[..block.len().div_ceil(4) * 4];
        rng.fill_u16(u);
        for (v, &k) in block.iter_mut().zip(u.iter()) {
            *v *= if u32::from(k) < threshold { scale } else { 0.0 };
        }
    }
}

/// `x = max(x, 0)` (also the GraphQA and MixRAG host engines' ReLU).
pub(crate) fn relu_in_place(x: &mut [f32]) {
    simd(Pass::Relu(x));
}

/// The gradient `g` through a ReLU whose output is `a` (never NaN): kept where `a > 0`, else 0.
pub(crate) fn relu_grad(g: &mut [f32], a: &[f32]) {
    simd(Pass::ReluGrad { g, a, scale: 1.0 });
}

/// Every row of `out` plus `b`.
pub(crate) fn add_bias_rows(out: &mut [f32], b: &[f32]) {
    simd(Pass::AddBias { out, b });
}

/// `g +=` the column sums of `dz` (rows of `g.len()`), row after row.
pub(crate) fn column_sums(g: &mut [f32], dz: &[f32]) {
    simd(Pass::ColumnSums { g, dz });
}

/// The graph operators of a training: GCN's Â (symmetric) and SAGE's mean with its transpose.
pub struct FastGraph {
    gcn: Csr,
    mean: Csr,
    mean_t: Csr,
}

impl FastGraph {
    pub fn new(n: usize, edges: &[(u32, u32)]) -> FastGraph {
        let (g, m) = normalised_entries(n, edges);
        let mean = Csr::new(n, &m);
        FastGraph { gcn: Csr::new(n, &g), mean_t: mean.transpose(), mean }
    }
}

/// One layer's forward cache.
#[derive(Default)]
struct Cache {
    /// The layer's input (after dropout).
    x: Vec<f32>,
    /// SAGE: the neighbour mean of the input.
    agg: Vec<f32>,
}

struct Classifier {
    kind: GnnKind,
    l1: Layer,
    l2: Layer,
    r1: Option<Layer>,
    r2: Option<Layer>,
}

impl Classifier {
    /// One layer: GCN `Â(xW) + b`, SAGE `mean(x)W + b + x R`, MLP `xW + b`; returns the output and
    /// what the backward pass needs.
    /// `agg` and `out` are buffers to write into (an earlier epoch's, or empty): both are
    /// overwritten whole.
    #[allow(clippy::too_many_arguments)]
    fn layer(
        kind: GnnKind,
        l: &Layer,
        r: Option<&Layer>,
        g: &FastGraph,
        x: Vec<f32>,
        n: usize,
        mut agg: Vec<f32>,
        mut out: Vec<f32>,
    ) -> Result<(Vec<f32>, Cache)> {
        out.resize(n * l.d_out, 0.0);
        match (kind, r) {
            (GnnKind::Gcn, _) => {
                let mut xw = vec![0f32; n * l.d_out];
                l.linear(&x, n, &mut xw)?;
                g.gcn.apply(&xw, l.d_out, &mut out);
            }
            (GnnKind::Sage, Some(r)) => {
                agg.resize(n * l.d_in, 0.0);
                g.mean.apply(&x, l.d_in, &mut agg);
                l.linear(&agg, n, &mut out)?;
                gemm_f32(&mut out, Op::n(&x, n, r.d_in), Op::n(&r.w, r.d_in, r.d_out), true)?;
            }
            _ => l.linear(&x, n, &mut out)?,
        }
        l.add_bias(&mut out);
        Ok((out, Cache { x, agg }))
    }

    /// Gradients of one layer from `dz`; returns `dx` when `want_dx`.
    // The layer, its optional SAGE root part, its cache and the graph are separate borrows of the
    // trainer's state; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn layer_back(
        kind: GnnKind,
        l: &mut Layer,
        r: Option<&mut Layer>,
        g: &FastGraph,
        c: &Cache,
        dz: &[f32],
        n: usize,
        want_dx: bool,
    ) -> Result<Option<Vec<f32>>> {
        match (kind, r) {
            (GnnKind::Gcn, _) => {
                // z = Â(xW) + b: d(xW) = Âᵀ dz = Â dz (Â symmetric).
                let mut dxw = vec![0f32; n * l.d_out];
                g.gcn.apply(dz, l.d_out, &mut dxw);
                l.grad_w(&c.x, &dxw, n)?;
                l.grad_b(dz);
                if !want_dx {
                    return Ok(None);
                }
                let mut dx = vec![0f32; n * l.d_in];
                l.back(&dxw, n, &mut dx, false)?;
                Ok(Some(dx))
            }
            (GnnKind::Sage, Some(r)) => {
                l.grad(&c.agg, dz, n)?;
                // The root weight has no bias in the model.
                r.grad_w(&c.x, dz, n)?;
                if !want_dx {
                    return Ok(None);
                }
                let mut dagg = vec![0f32; n * l.d_in];
                l.back(dz, n, &mut dagg, false)?;
                let mut dx = vec![0f32; n * l.d_in];
                g.mean_t.apply(&dagg, l.d_in, &mut dx);
                r.back(dz, n, &mut dx, true)?;
                Ok(Some(dx))
            }
            _ => {
                l.grad(&c.x, dz, n)?;
                if !want_dx {
                    return Ok(None);
                }
                let mut dx = vec![0f32; n * l.d_in];
                l.back(dz, n, &mut dx, false)?;
                Ok(Some(dx))
            }
        }
    }

    /// Logits without dropout or caches (the evaluation of every epoch): no copy of the input;
    /// `x_agg` is SAGE's neighbour mean of the input, the same every epoch.
    fn eval(&self, g: &FastGraph, x: &[f32], x_agg: Option<&[f32]>, n: usize) -> Result<Vec<f32>> {
        let one = |l: &Layer, r: Option<&Layer>, x: &[f32], pre: Option<&[f32]>| -> Result<Vec<f32>> {
            let mut out = vec![0f32; n * l.d_out];
            match (self.kind, r) {
                (GnnKind::Gcn, _) => {
                    let mut xw = vec![0f32; n * l.d_out];
                    l.linear(x, n, &mut xw)?;
                    g.gcn.apply(&xw, l.d_out, &mut out);
                }
                (GnnKind::Sage, Some(r)) => {
                    match pre {
                        Some(agg) => l.linear(agg, n, &mut out)?,
                        None => {
                            let mut agg = vec![0f32; n * l.d_in];
                            g.mean.apply(x, l.d_in, &mut agg);
                            l.linear(&agg, n, &mut out)?;
                        }
                    }
                    gemm_f32(&mut out, Op::n(x, n, r.d_in), Op::n(&r.w, r.d_in, r.d_out), true)?;
                }
                _ => l.linear(x, n, &mut out)?,
            }
            l.add_bias(&mut out);
            Ok(out)
        };
        let mut h = one(&self.l1, self.r1.as_ref(), x, x_agg)?;
        relu_in_place(&mut h);
        one(&self.l2, self.r2.as_ref(), &h, None)
    }

    /// Logits (n × classes) with the caches of both layers; with `dropout = (p, rng)`, dropout on
    /// the input and on the hidden layer (input mask drawn first, as the burn trainer draws them).
    /// `spare`: the caches of the epoch before, whose buffers this pass overwrites.
    fn forward(
        &self,
        g: &FastGraph,
        x: &[f32],
        n: usize,
        mut dropout: Option<(f64, &mut Stream)>,
        spare: (Cache, Cache),
    ) -> Result<(Vec<f32>, Cache, Cache)> {
        let (s1, s2) = spare;
        let mut x0 = s1.x;
        x0.clear();
        x0.extend_from_slice(x);
        if let Some((p, rng)) = dropout.as_mut() {
            self::dropout(&mut x0, *p, rng);
        }
        // Layer 1's output is layer 2's cached input: the buffer of that input before.
        let (mut h, c1) = Self::layer(self.kind, &self.l1, self.r1.as_ref(), g, x0, n, s1.agg, s2.x)?;
        relu_in_place(&mut h);
        if let Some((p, rng)) = dropout.as_mut() {
            self::dropout(&mut h, *p, rng);
        }
        let (z, c2) = Self::layer(self.kind, &self.l2, self.r2.as_ref(), g, h, n, s2.agg, Vec::new())?;
        Ok((z, c1, c2))
    }
}

/// The same training as [`crate::gnn::train_node_classifier`], on host buffers.
pub fn train_node_classifier(kind: GnnKind, n: usize, g: &FastGraph, data: &NodeClassData<'_>, cfg: &NodeClassConfig) -> Result<Trained> {
    if data.features.len() != n * data.dim || data.labels.len() != n {
        return Err(ModelError::Internal(format!(
            "{} features / {} labels for {n} nodes of width {}",
            data.features.len(),
            data.labels.len(),
            data.dim
        )));
    }
    crate::gnn::node::check_nodes(n, data)?;
    if g.gcn.n != n {
        return Err(ModelError::Internal(format!("a graph of {} nodes for {n} nodes of features", g.gcn.n)));
    }
    let model_name = format!("{} node classifier", kind.as_str());
    crate::train::check_lr(&model_name, cfg.lr)?;
    let (d, h, c) = (data.dim, cfg.hidden, data.classes);
    let mut rng = Stream(cfg.seed ^ 0x6e63);
    let l1 = Layer::new(d, h, &mut rng);
    let l2 = Layer::new(h, c, &mut rng);
    let (r1, r2) = match kind {
        GnnKind::Sage => (Some(Layer::new(d, h, &mut rng)), Some(Layer::new(h, c, &mut rng))),
        _ => (None, None),
    };
    let m = Classifier { kind, l1, l2, r1, r2 };
    let adam = Adam::new(cfg.lr as f32, 1e-8, cfg.weight_decay);
    let x_agg = (kind == GnnKind::Sage).then(|| {
        let mut a = vec![0f32; n * d];
        g.mean.apply(data.features, d, &mut a);
        a
    });
    let mut learner = NodeLearner { n, g, data, cfg, adam, x_agg, spare: None };
    let plan = Plan::full_batch(&model_name, cfg.seed, cfg.max_epochs, cfg.patience);
    Trained::from_fitted(fit(&plan, &mut learner, m, &mut rng)?)
}

/// The host node classifier's full-batch steps and evaluation for [`crate::train::fit`].
struct NodeLearner<'a> {
    n: usize,
    g: &'a FastGraph,
    data: &'a NodeClassData<'a>,
    cfg: &'a NodeClassConfig,
    adam: Adam,
    /// SAGE's mean of the input features over neighbours (the evaluation's first aggregation).
    x_agg: Option<Vec<f32>>,
    /// The layer caches of the step before, whose buffers the next forward pass overwrites.
    spare: Option<(Cache, Cache)>,
}

impl Learner for NodeLearner<'_> {
    type Model = Classifier;
    type Kept = ();
    type Row = EpochRow;

    fn step(&mut self, mut m: Classifier, _: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<Classifier>> {
        let (g, data, cfg, n) = (self.g, self.data, self.cfg, self.n);
        let (kind, c) = (m.kind, data.classes);
        let inv_train = 1.0 / data.train.len() as f32;
        let drop = cfg.dropout > 0.0;
        let (z, c1, c2) = m.forward(g, data.features, n, drop.then_some((cfg.dropout, rng)), self.spare.take().unwrap_or_default())?;
        // Softmax cross-entropy over the training nodes.
        let mut dz = vec![0f32; n * c];
        let mut loss = 0f64;
        for &v in data.train {
            let row = &z[v as usize * c..(v as usize + 1) * c];
            let mx = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let se: f32 = row.iter().map(|&x| (x - mx).exp()).sum();
            let lse = mx + se.ln();
            let y = data.labels[v as usize] as usize;
            loss += f64::from(lse - row[y]);
            let drow = &mut dz[v as usize * c..(v as usize + 1) * c];
            for (k, dv) in drow.iter_mut().enumerate() {
                *dv = ((row[k] - lse).exp() - if k == y { 1.0 } else { 0.0 }) * inv_train;
            }
        }
        let train_loss = f64::from((loss * f64::from(inv_train)) as f32);
        for l in [Some(&mut m.l1), Some(&mut m.l2), m.r1.as_mut(), m.r2.as_mut()].into_iter().flatten() {
            l.zero_grad();
        }
        let mut dh = Classifier::layer_back(kind, &mut m.l2, m.r2.as_mut(), g, &c2, &dz, n, true)?.unwrap_or_default();
        // Through the hidden dropout and the ReLU: the cached layer-2 input is the kept, scaled
        // activation, positive exactly where both let the gradient through.
        let scale = if drop { (1.0 / (1.0 - cfg.dropout)) as f32 } else { 1.0 };
        simd(Pass::ReluGrad { g: &mut dh, a: &c2.x, scale });
        Classifier::layer_back(kind, &mut m.l1, m.r1.as_mut(), g, &c1, &dh, n, false)?;
        self.spare = Some((c1, c2));
        {
            let Classifier { l1, l2, r1, r2, .. } = &mut m;
            let mut ls: Vec<&mut Layer> = vec![l1, l2];
            ls.extend(r1.as_mut());
            ls.extend(r2.as_mut());
            adam_step(&mut self.adam, &mut ls);
        }
        Ok((m, Some((train_loss, 1.0))))
    }

    fn evaluate(&mut self, m: &Classifier, epoch: usize, train_loss: f64) -> Result<Evaluation<(), EpochRow>> {
        let (data, c) = (self.data, self.data.classes);
        let eval = m.eval(self.g, data.features, self.x_agg.as_deref(), self.n)?;
        let (val_loss, val_acc) = crate::gnn::node::loss_and_accuracy(&eval, c, data.labels, data.val);
        let (_, test_acc) = crate::gnn::node::loss_and_accuracy(&eval, c, data.labels, data.test);
        Ok(gnn_evaluation(EpochRow { epoch: epoch as u32, train_loss, val_loss, val_metric: val_acc, test_metric: test_acc }))
    }
}

/// GCN encoder + MLP predictor on host buffers ([`crate::gnn::link`]'s model).
struct LinkNet {
    e1: Layer,
    e2: Layer,
    p1: Layer,
    p2: Layer,
}

/// The encoder's activations.
#[derive(Default)]
struct Encoded {
    x_h1: Vec<f32>,
    h: Vec<f32>,
}

impl LinkNet {
    /// The encoding, into the buffers of `e` (an earlier encoding, or empty) and `tmp`: every one is
    /// overwritten whole, so they are reused from epoch to epoch without clearing.
    fn encode(&self, g: &FastGraph, x: &[f32], n: usize, e: Encoded, tmp: &mut Vec<f32>) -> Result<Encoded> {
        let (d, hd) = (self.e1.d_in, self.e1.d_out);
        let Encoded { x_h1: mut h1, mut h } = e;
        tmp.resize(n * hd, 0.0);
        gemm_f32(tmp, Op::n(x, n, d), Op::n(&self.e1.w, d, hd), false)?;
        h1.resize(n * hd, 0.0);
        g.gcn.apply(tmp, hd, &mut h1);
        self.e1.add_bias(&mut h1);
        relu_in_place(&mut h1);
        self.e2.linear(&h1, n, tmp)?;
        h.resize(n * hd, 0.0);
        g.gcn.apply(tmp, hd, &mut h);
        self.e2.add_bias(&mut h);
        Ok(Encoded { x_h1: h1, h })
    }

    /// Scores of `pairs` into `sc`, with the activations the backward pass needs (z, relu(p1 z)).
    /// Every buffer of `sc` is overwritten whole, so one set serves every epoch without clearing.
    fn score(&self, h: &[f32], pairs: &[(u32, u32)], sc: &mut Scored) -> Result<()> {
        let hd = self.p1.d_in;
        let m = pairs.len();
        let Scored { z, q, s, .. } = sc;
        z.resize(m * hd, 0.0);
        simd(Pass::PairProducts { h, pairs, hd, z });
        q.resize(m * self.p1.d_out, 0.0);
        self.p1.linear(z, m, q)?;
        self.p1.add_bias(q);
        relu_in_place(q);
        s.resize(m, 0.0);
        self.p2.linear(q, m, s)?;
        self.p2.add_bias(s);
        Ok(())
    }

    /// Gradient of the scores `ds` back through the predictor into `dh` (`sc` from [`Self::score`]
    /// of the same pairs; its two gradient buffers are overwritten).
    fn score_back(&mut self, h: &[f32], pairs: &[(u32, u32)], sc: &mut Scored, ds: &[f32], dh: &mut [f32]) -> Result<()> {
        let (hd, m) = (self.p1.d_in, pairs.len());
        let Scored { z, q, dq, dz, .. } = sc;
        let (z, q) = (&z[..], &q[..]);
        self.p2.grad(q, ds, m)?;
        dq.resize(m * self.p1.d_out, 0.0);
        self.p2.back(ds, m, dq, false)?;
        simd(Pass::ReluGrad { g: dq, a: q, scale: 1.0 });
        self.p1.grad(z, dq, m)?;
        dz.resize(m * hd, 0.0);
        self.p1.back(dq, m, dz, false)?;
        // dh[a] += dz ⊙ h[b], then dh[b] += dz ⊙ h[a]: per element the same additions in the same
        // order as one pass over k (a pair may join a node to itself), in vectorisable row loops.
        simd(Pass::PairGradients { h, pairs, hd, dz, dh });
        Ok(())
    }
}

/// The predictor's buffers for one set of pairs: input z = h_a ⊙ h_b, hidden q, scores s, and the
/// gradients of q and z.
#[derive(Default)]
struct Scored {
    z: Vec<f32>,
    q: Vec<f32>,
    s: Vec<f32>,
    dq: Vec<f32>,
    dz: Vec<f32>,
}

/// `−log σ(z)` (stable), as the burn trainer's validation loss computes it.
fn softplus_neg(z: f64) -> f64 {
    if z > 0.0 { (-z).exp().ln_1p() } else { -z + z.exp().ln_1p() }
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// log σ(z), stable: finite for every finite `z` (`sigmoid(z).ln()` is −inf below z ≈ −88, which
/// would read as a diverged training).
fn log_sigmoid(z: f32) -> f32 {
    -((-z).max(0.0) + (-z.abs()).exp().ln_1p())
}

/// The same training as [`crate::gnn::train_link_predictor`], on host buffers.
/// `g` is the graph of the message edges (`FastGraph::new(n, data.message)`), built once for every
/// training on the same split.
pub fn train_link_predictor(n: usize, g: &FastGraph, data: &LinkPredData<'_>, cfg: &LinkPredConfig) -> Result<Trained> {
    if data.features.len() != n * data.dim {
        return Err(ModelError::Internal(format!("{} features for {n} nodes of width {}", data.features.len(), data.dim)));
    }
    let all = [data.message, data.val_pos, data.val_neg, data.test_pos, data.test_neg];
    if let Some(&(a, b)) = all.iter().flat_map(|s| s.iter()).find(|&&(a, b)| a as usize >= n || b as usize >= n) {
        return Err(ModelError::Internal(format!("pair ({a}, {b}) is out of range for {n} nodes")));
    }
    if data.message.is_empty() || n < 2 {
        return Err(ModelError::Internal("no training edges".into()));
    }
    if g.gcn.n != n {
        return Err(ModelError::Internal(format!("a graph of {} nodes for {n} nodes of features", g.gcn.n)));
    }
    crate::train::check_lr("link predictor", cfg.lr)?;
    let mut rng = Stream(cfg.seed ^ 0x6c70);
    let hd = cfg.hidden;
    let net = LinkNet {
        e1: Layer::new(data.dim, hd, &mut rng),
        e2: Layer::new(hd, hd, &mut rng),
        p1: Layer::new(hd, hd, &mut rng),
        p2: Layer::new(hd, 1, &mut rng),
    };
    let adam = Adam::new(cfg.lr as f32, 1e-8, 0.0);
    let zeros = || vec![0f32; n * hd];
    let mut learner = LinkLearner {
        n,
        g,
        data,
        cfg,
        adam,
        next: None,
        current: None,
        spare: None,
        pos: Scored::default(),
        negs: Scored::default(),
        held: Scored::default(),
        tmp: Vec::new(),
        dh: zeros(),
        dhw: zeros(),
        dh1: zeros(),
        dxw: zeros(),
    };
    let plan = Plan::full_batch("link predictor", cfg.seed, cfg.max_epochs, cfg.patience);
    Trained::from_fitted(fit(&plan, &mut learner, net, &mut rng)?)
}

/// The host link predictor's full-batch steps and evaluation for [`crate::train::fit`].
///
/// The encoder has no dropout: the evaluation's encoding after a step is the next step's training
/// encoding (same weights, same input), so each epoch encodes once.
struct LinkLearner<'a> {
    n: usize,
    g: &'a FastGraph,
    data: &'a LinkPredData<'a>,
    cfg: &'a LinkPredConfig,
    adam: Adam,
    /// The evaluation's encoding, the next step's training encoding.
    next: Option<Encoded>,
    /// The encoding the last step trained on; after the evaluation it becomes `spare`.
    current: Option<Encoded>,
    /// The encoding of the epoch before, whose buffers the evaluation's encoding takes over.
    spare: Option<Encoded>,
    pos: Scored,
    negs: Scored,
    held: Scored,
    /// Buffers every epoch overwrites whole (`dh` is cleared: the predictor adds into it).
    tmp: Vec<f32>,
    dh: Vec<f32>,
    dhw: Vec<f32>,
    dh1: Vec<f32>,
    dxw: Vec<f32>,
}

impl Learner for LinkLearner<'_> {
    type Model = LinkNet;
    type Kept = ();
    type Row = EpochRow;

    fn step(&mut self, mut net: LinkNet, _: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<LinkNet>> {
        let (g, data, n) = (self.g, self.data, self.n);
        let m = data.message.len();
        let hd = self.cfg.hidden;
        let neg: Vec<(u32, u32)> = (0..m).map(|_| (rng.below(n) as u32, rng.below(n) as u32)).collect();
        let enc = match self.next.take() {
            Some(e) => e,
            None => net.encode(g, data.features, n, Encoded::default(), &mut self.tmp)?,
        };
        net.score(&enc.h, data.message, &mut self.pos)?;
        net.score(&enc.h, &neg, &mut self.negs)?;
        let (sp, sn) = (&self.pos.s, &self.negs.s);
        // loss = −mean log σ(pos) − mean log σ(−neg)
        let lp: f32 = sp.iter().map(|&s| log_sigmoid(s)).sum::<f32>() / m as f32;
        let ln: f32 = sn.iter().map(|&s| log_sigmoid(-s)).sum::<f32>() / m as f32;
        let train_loss = f64::from(-(lp + ln));
        for l in [&mut net.e1, &mut net.e2, &mut net.p1, &mut net.p2] {
            l.zero_grad();
        }
        let dsp: Vec<f32> = sp.iter().map(|&s| (sigmoid(s) - 1.0) / m as f32).collect();
        let dsn: Vec<f32> = sn.iter().map(|&s| sigmoid(s) / m as f32).collect();
        let (dh, dhw, dh1, dxw) = (&mut self.dh, &mut self.dhw, &mut self.dh1, &mut self.dxw);
        dh.fill(0.0);
        net.score_back(&enc.h, data.message, &mut self.pos, &dsp, dh)?;
        net.score_back(&enc.h, &neg, &mut self.negs, &dsn, dh)?;
        // Encoder: h = Â(h1 W2) + b2, h1 = relu(Â(x W1) + b1).
        g.gcn.apply(dh, hd, dhw);
        net.e2.grad_w(&enc.x_h1, dhw, n)?;
        net.e2.grad_b(dh);
        net.e2.back(dhw, n, dh1, false)?;
        simd(Pass::ReluGrad { g: dh1, a: &enc.x_h1, scale: 1.0 });
        g.gcn.apply(dh1, hd, dxw);
        net.e1.grad_w(data.features, dxw, n)?;
        net.e1.grad_b(dh1);
        {
            let LinkNet { e1, e2, p1, p2 } = &mut net;
            adam_step(&mut self.adam, &mut [e1, e2, p1, p2]);
        }
        self.current = Some(enc);
        Ok((net, Some((train_loss, 1.0))))
    }

    fn evaluate(&mut self, net: &LinkNet, epoch: usize, train_loss: f64) -> Result<Evaluation<(), EpochRow>> {
        let (data, n) = (self.data, self.n);
        let ev = net.encode(self.g, data.features, n, self.spare.take().unwrap_or_default(), &mut self.tmp)?;
        let mut scores = Vec::with_capacity(4);
        for set in [data.val_pos, data.val_neg, data.test_pos, data.test_neg] {
            scores.push(if set.is_empty() {
                Vec::new()
            } else {
                net.score(&ev.h, set, &mut self.held)?;
                self.held.s.clone()
            });
        }
        let bce = |s: &[f32], positive: bool| {
            s.iter().map(|&z| softplus_neg(f64::from(if positive { z } else { -z }))).sum::<f64>() / s.len().max(1) as f64
        };
        let val_loss = bce(&scores[0], true) + bce(&scores[1], false);
        let k = self.cfg.hits_k;
        let row = EpochRow {
            epoch: epoch as u32,
            train_loss,
            val_loss,
            val_metric: hits_at_k(&scores[0], &scores[1], k),
            test_metric: hits_at_k(&scores[2], &scores[3], k),
        };
        self.spare = self.current.take();
        self.next = Some(ev);
        Ok(gnn_evaluation(row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gnn::node::tests::planted;
    use crate::train::optim::AdamScalars;
    use burn::tensor::Device;

    /// The host engine follows the burn trainer step for step: the same curve up to float
    /// summation order (the first epochs agree to 1e-4; the kept epoch's metrics are equal or
    /// within one node on these sizes).
    #[test]
    fn the_host_engine_trains_as_the_burn_trainer_does() {
        let n = 120;
        let (x, labels, edges) = planted(n, 0.6);
        let idx: Vec<u32> = (0..n as u32).collect();
        let data =
            NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..60], val: &idx[60..90], test: &idx[90..] };
        let cfg = NodeClassConfig { max_epochs: 40, patience: 40, ..NodeClassConfig::default() };
        let g = FastGraph::new(n, &edges);
        for kind in GnnKind::ALL {
            let fast = train_node_classifier(kind, n, &g, &data, &cfg).unwrap();
            let slow = crate::gnn::train_node_classifier(kind, n, &edges, &data, &cfg, &Device::flex()).unwrap();
            assert_eq!(fast.curve.len(), slow.curve.len(), "{kind:?}");
            for (a, b) in fast.curve.iter().zip(&slow.curve).take(10) {
                assert!((a.train_loss - b.train_loss).abs() < 1e-4, "{kind:?} epoch {}: {} vs {}", a.epoch, a.train_loss, b.train_loss);
                assert!((a.val_loss - b.val_loss).abs() < 1e-4, "{kind:?} epoch {}: {} vs {}", a.epoch, a.val_loss, b.val_loss);
            }
            assert!(
                (fast.test_metric - slow.test_metric).abs() <= 1.0 / 30.0 + 1e-9,
                "{kind:?}: {} vs {}",
                fast.test_metric,
                slow.test_metric
            );
            // Deterministic.
            assert_eq!(fast.curve, train_node_classifier(kind, n, &g, &data, &cfg).unwrap().curve);
        }
        let (train, test) = edges.split_at(edges.len() * 4 / 5);
        let mut rng = Stream(3);
        let neg: Vec<(u32, u32)> = (0..200).map(|_| (2 * rng.below(n / 2) as u32, 2 * rng.below(n / 2) as u32 + 1)).collect();
        let ld = LinkPredData {
            features: &x,
            dim: 4,
            message: train,
            val_pos: &test[..test.len() / 2],
            val_neg: &neg[..100],
            test_pos: &test[test.len() / 2..],
            test_neg: &neg[100..],
        };
        let lcfg = LinkPredConfig { max_epochs: 30, patience: 30, hits_k: 10, hidden: 32, ..LinkPredConfig::default() };
        let fast = train_link_predictor(n, &FastGraph::new(n, train), &ld, &lcfg).unwrap();
        let slow = crate::gnn::train_link_predictor(n, &ld, &lcfg, &Device::flex()).unwrap();
        for (a, b) in fast.curve.iter().zip(&slow.curve).take(10) {
            assert!((a.train_loss - b.train_loss).abs() < 1e-4, "link epoch {}: {} vs {}", a.epoch, a.train_loss, b.train_loss);
        }
        assert!(fast.test_metric > 0.8, "hits@10 {}", fast.test_metric);
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Every dispatched pass gives, bit for bit, what its plain scalar loop gives (no fused
    /// multiply-add, the same order per element), on lengths that are not multiples of the vector
    /// width, with a pair joining a node to itself.
    #[test]
    fn the_vectorised_passes_are_the_plain_loops_bit_for_bit() {
        let mut rng = Stream(5);
        let mut draw = |k: usize| -> Vec<f32> { (0..k).map(|_| (rng.unit() * 4.0 - 2.0) as f32).collect() };
        let (rows, w) = (7usize, 37usize);
        let (x, b) = (draw(rows * w), draw(w));

        let mut got = x.clone();
        simd(Pass::AddBias { out: &mut got, b: &b });
        let want: Vec<f32> = x.iter().enumerate().map(|(i, &v)| v + b[i % w]).collect();
        assert_eq!(bits(&got), bits(&want));

        let mut got = b.clone();
        simd(Pass::ColumnSums { g: &mut got, dz: &x });
        let mut want = b.clone();
        for r in 0..rows {
            for c in 0..w {
                want[c] += x[r * w + c];
            }
        }
        assert_eq!(bits(&got), bits(&want));

        let mut got = x.clone();
        simd(Pass::Relu(&mut got));
        assert_eq!(bits(&got), bits(&x.iter().map(|&v| if v > 0.0 { v } else { 0.0 }).collect::<Vec<_>>()));

        let a = draw(rows * w);
        let mut got = x.clone();
        simd(Pass::ReluGrad { g: &mut got, a: &a, scale: 1.0 });
        assert_eq!(bits(&got), bits(&x.iter().zip(&a).map(|(&g, &a)| if a <= 0.0 { 0.0 } else { g }).collect::<Vec<_>>()));
        let mut got = x.clone();
        simd(Pass::ReluGrad { g: &mut got, a: &a, scale: 1.7 });
        assert_eq!(bits(&got), bits(&x.iter().zip(&a).map(|(&g, &a)| if a > 0.0 { g * 1.7 } else { 0.0 }).collect::<Vec<_>>()));

        let (n, hd) = (5usize, 19usize);
        let h = draw(n * hd);
        let pairs = [(0u32, 3u32), (2, 2), (4, 1), (3, 0)];
        let mut z = vec![f32::NAN; pairs.len() * hd];
        simd(Pass::PairProducts { h: &h, pairs: &pairs, hd, z: &mut z });
        let mut want = Vec::new();
        for &(a, b) in &pairs {
            want.extend((0..hd).map(|k| h[a as usize * hd + k] * h[b as usize * hd + k]));
        }
        assert_eq!(bits(&z), bits(&want));
        let (dz, dh0) = (draw(pairs.len() * hd), draw(n * hd));
        let mut got = dh0.clone();
        simd(Pass::PairGradients { h: &h, pairs: &pairs, hd, dz: &dz, dh: &mut got });
        let mut want = dh0.clone();
        for (i, &(a, b)) in pairs.iter().enumerate() {
            let (a, b) = (a as usize, b as usize);
            for k in 0..hd {
                want[a * hd + k] += dz[i * hd + k] * h[b * hd + k];
            }
            for k in 0..hd {
                want[b * hd + k] += dz[i * hd + k] * h[a * hd + k];
            }
        }
        assert_eq!(bits(&got), bits(&want));

        // Dropout: the decisions of the stream's 16-bit draws, kept entries scaled.
        let len = 4096 + 37;
        let (mut r1, mut r2) = (Stream(9), Stream(9));
        let mut got = x.iter().cycle().take(len).copied().collect::<Vec<_>>();
        let orig = got.clone();
        dropout(&mut got, 0.3, &mut r1);
        let mut u = vec![0u16; 4096];
        r2.fill_u16(&mut u);
        let mut tail = vec![0u16; 40];
        r2.fill_u16(&mut tail);
        u.extend_from_slice(&tail);
        let (scale, threshold) = ((1.0 / 0.7f64) as f32, (0.7f64 * 65536.0).round() as u32);
        let want: Vec<f32> = orig.iter().zip(&u).map(|(&v, &k)| v * if u32::from(k) < threshold { scale } else { 0.0 }).collect();
        assert_eq!(bits(&got), bits(&want));
        assert_eq!(r1.next(), r2.next(), "the stream moved on as far");

        // Adam, a first step and a later one, with and without decay.
        for (first, decay) in [(true, 0.0f32), (false, 5e-4)] {
            let c = AdamScalars { b1: 0.9, b2: 0.999, factor: 1.3, eps: 1e-8, lr: 0.01, decay, first };
            let (p0, g, m0, v0) = (draw(w), draw(w), draw(w), draw(w).iter().map(|v| v.abs()).collect::<Vec<_>>());
            let (mut p, mut m, mut v) = (p0.clone(), m0.clone(), v0.clone());
            c.apply(&mut p, &g, &mut m, &mut v);
            for i in 0..w {
                let gi = if decay != 0.0 { p0[i] * decay + g[i] } else { g[i] };
                let (mi, vi) = if first {
                    (gi * (1.0 - 0.9), gi * gi * (1.0 - 0.999))
                } else {
                    (m0[i] * 0.9 + gi * (1.0 - 0.9), v0[i] * 0.999 + gi * gi * (1.0 - 0.999))
                };
                let pi = p0[i] - (mi * 1.3 / (vi.sqrt() + 1e-8)) * 0.01;
                assert_eq!((p[i].to_bits(), m[i].to_bits(), v[i].to_bits()), (pi.to_bits(), mi.to_bits(), vi.to_bits()), "element {i}");
            }
        }
    }

    #[test]
    fn csr_propagation_and_its_transpose_match_the_entries() {
        let entries: Entries = vec![(0, 1, 0.5), (2, 1, 2.0), (1, 0, 1.0), (1, 2, -1.0)];
        let a = Csr::new(3, &entries);
        let x = [1.0f32, 10.0, 100.0];
        let mut out = [0f32; 3];
        a.apply(&x, 1, &mut out);
        assert_eq!(out, [10.0, 0.5 + 200.0, -10.0]);
        a.transpose().apply(&x, 1, &mut out);
        // out[src] += w · x[dst]
        assert_eq!(out, [5.0, 1.0 - 100.0, 20.0]);
    }

    /// Wide rows go 64 columns at a time (a last partial block at 130 columns): the result is the
    /// entry-by-entry sum into a zeroed row, bit for bit, over a stale output buffer, and a node
    /// without entries gets a zero row.
    #[test]
    fn csr_propagation_of_wide_rows_is_the_plain_sum_bit_for_bit() {
        let (n, f) = (5usize, 130usize);
        let mut rng = Stream(11);
        let mut entries: Entries = Vec::new();
        for _ in 0..12 {
            let (s, d) = (rng.below(n) as u32, rng.below(4) as u32);
            entries.push((s, d, (rng.unit() * 2.0 - 1.0) as f32));
        }
        let x: Vec<f32> = (0..n * f).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
        let mut want = vec![0f32; n * f];
        let a = Csr::new(n, &entries);
        for d in 0..n {
            for e in a.ptr[d]..a.ptr[d + 1] {
                let (s, w) = (a.src[e] as usize, a.w[e]);
                for k in 0..f {
                    want[d * f + k] += w * x[s * f + k];
                }
            }
        }
        let mut out = vec![f32::NAN; n * f];
        a.apply(&x, f, &mut out);
        assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        assert!(out[4 * f..].iter().all(|&v| v == 0.0), "node 4 has no entries");
    }
}
