//! The host engine as a tape: each op runs its forward on host buffers and records what its
//! backward reads; [`Tape::backward`] walks the records in reverse, each op turning its output's
//! gradient into its inputs' and its layer's. The kernels are the host engines' own
//! ([`crate::gnn::host`]): only the composition changes, written once in the model instead of a
//! whole-model backward pass.

use std::collections::HashMap;

use super::{Engine, LayerSpec, Named, ParamSpec};
use crate::error::{ModelError, Result};
use crate::gnn::host::{
    BatchNorm, EdgeIn, Gat, GatCache, Gcn, GcnCache, HostBatch, Lin, NormCache, P, Transformer, TransformerCache, mean_pool,
    mean_pool_back, relu, relu_back,
};
use crate::gnn::reuse;
use crate::train::optim::AdamW;

enum Layer {
    Linear(Lin),
    Conv(Box<Transformer>),
    Gcn(Gcn),
    Gat(Gat),
    Norm(BatchNorm),
}

/// The layers' tensors on the host, found by name.
pub struct HostParams {
    layers: Vec<(String, Layer)>,
    index: HashMap<String, usize>,
    /// Whether each layer's tensors took part in this step's loss (see [`HostParams::tensors`]).
    touched: Vec<Touch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    No,
    Yes,
    /// A TransformerConv over a batch without an edge: only its root (skip) weight.
    SkipOnly,
}

const CONV_PARTS: [&str; 5] = ["q", "k", "v", "e", "skip"];

impl HostParams {
    /// The layers from named tensors ([`super::by_name`]).
    pub fn new(layers: &[LayerSpec], specs: &[ParamSpec], tensors: HashMap<String, Vec<f32>>) -> Result<HostParams> {
        let tensors = super::by_name(specs, tensors)?.into_iter().map(|(s, v)| (s.name, (s.shape, v))).collect();
        let mut t = Taker { tensors };
        let mut out = Vec::with_capacity(layers.len());
        for spec in layers {
            let (name, layer) = match spec {
                LayerSpec::Linear(name) => (name.clone(), Layer::Linear(t.lin(name)?)),
                LayerSpec::Conv { name, heads } => {
                    let mut parts = Vec::with_capacity(CONV_PARTS.len());
                    for p in CONV_PARTS {
                        parts.push(t.lin(&format!("{name}.{p}"))?);
                    }
                    let [q, k, v, e, skip]: [Lin; 5] =
                        parts.try_into().map_err(|_| ModelError::Internal("TransformerConv: five projections".into()))?;
                    (name.clone(), Layer::Conv(Box::new(Transformer { q, k, v, e, skip, heads: *heads })))
                }
                LayerSpec::Gcn(name) => (name.clone(), Layer::Gcn(Gcn { lin: t.lin(name)? })),
                LayerSpec::Gat { name, heads } => {
                    let lin = t.lin(&format!("{name}.lin"))?;
                    let att_src = P::new(t.take(&format!("{name}.att_src"))?.1);
                    let att_dst = P::new(t.take(&format!("{name}.att_dst"))?.1);
                    let bias = P::new(t.take(&format!("{name}.bias"))?.1);
                    (name.clone(), Layer::Gat(Gat { lin, att_src, att_dst, bias, heads: *heads }))
                }
                LayerSpec::Norm(name) => {
                    let gamma = P::new(t.take(&format!("{name}.gamma"))?.1);
                    let beta = P::new(t.take(&format!("{name}.beta"))?.1);
                    let running_mean = t.take(&format!("{name}.running_mean"))?.1;
                    let running_var = t.take(&format!("{name}.running_var"))?.1;
                    (name.clone(), Layer::Norm(BatchNorm { gamma, beta, running_mean, running_var }))
                }
            };
            out.push((name, layer));
        }
        if let Some(left) = t.tensors.keys().next() {
            return Err(ModelError::Internal(format!("model tensors: `{left}` belongs to no declared layer")));
        }
        let index = out.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();
        let touched = vec![Touch::No; out.len()];
        Ok(HostParams { layers: out, index, touched })
    }

    fn find(&self, name: &str) -> Result<usize> {
        self.index.get(name).copied().ok_or_else(|| ModelError::Internal(format!("no layer `{name}` in the model")))
    }

    /// Every tensor by name (running statistics included), in layer order.
    pub fn named(&self) -> Named {
        let mut out = Vec::new();
        for (name, layer) in &self.layers {
            match layer {
                Layer::Linear(l) => {
                    out.push((format!("{name}.weight"), l.w.v.clone()));
                    out.push((format!("{name}.bias"), l.b.v.clone()));
                }
                Layer::Conv(t) => {
                    for (p, l) in CONV_PARTS.iter().zip([&t.q, &t.k, &t.v, &t.e, &t.skip]) {
                        out.push((format!("{name}.{p}.weight"), l.w.v.clone()));
                        out.push((format!("{name}.{p}.bias"), l.b.v.clone()));
                    }
                }
                Layer::Gcn(g) => {
                    out.push((format!("{name}.weight"), g.lin.w.v.clone()));
                    out.push((format!("{name}.bias"), g.lin.b.v.clone()));
                }
                Layer::Gat(g) => {
                    out.push((format!("{name}.lin.weight"), g.lin.w.v.clone()));
                    out.push((format!("{name}.lin.bias"), g.lin.b.v.clone()));
                    for (p, v) in [("att_src", &g.att_src), ("att_dst", &g.att_dst), ("bias", &g.bias)] {
                        out.push((format!("{name}.{p}"), v.v.clone()));
                    }
                }
                Layer::Norm(n) => {
                    out.push((format!("{name}.gamma"), n.gamma.v.clone()));
                    out.push((format!("{name}.beta"), n.beta.v.clone()));
                    out.push((format!("{name}.running_mean"), n.running_mean.clone()));
                    out.push((format!("{name}.running_var"), n.running_var.clone()));
                }
            }
        }
        out
    }

    /// The trained tensors in layer order, each with its gradient where this step's loss
    /// reached it (`None`: left alone by the optimiser, as burn's leaves a parameter its
    /// backward pass did not reach; a TransformerConv's edge bias is never read).
    fn tensors(&mut self) -> impl Iterator<Item = (&mut Vec<f32>, Option<&Vec<f32>>)> {
        self.layers.iter_mut().zip(&self.touched).flat_map(|((_, layer), &touch)| {
            let ps: Vec<(&mut P, bool)> = match layer {
                Layer::Linear(l) => vec![(&mut l.w, touch == Touch::Yes), (&mut l.b, touch == Touch::Yes)],
                Layer::Conv(t) => {
                    let all = touch == Touch::Yes;
                    let root = touch != Touch::No;
                    vec![
                        (&mut t.q.w, all),
                        (&mut t.q.b, all),
                        (&mut t.k.w, all),
                        (&mut t.k.b, all),
                        (&mut t.v.w, all),
                        (&mut t.v.b, all),
                        (&mut t.e.w, all),
                        (&mut t.e.b, false),
                        (&mut t.skip.w, root),
                        (&mut t.skip.b, root),
                    ]
                }
                Layer::Gcn(g) => vec![(&mut g.lin.w, touch == Touch::Yes), (&mut g.lin.b, touch == Touch::Yes)],
                // The projection's bias is never read (as in burn's layer).
                Layer::Gat(g) => {
                    let on = touch == Touch::Yes;
                    vec![(&mut g.lin.w, on), (&mut g.lin.b, false), (&mut g.att_src, on), (&mut g.att_dst, on), (&mut g.bias, on)]
                }
                Layer::Norm(n) => vec![(&mut n.gamma, touch == Touch::Yes), (&mut n.beta, touch == Touch::Yes)],
            };
            ps.into_iter().map(|(p, used)| {
                let P { v, g } = p;
                (v, used.then_some(&*g))
            })
        })
    }

    fn zero_grad(&mut self) {
        for (_, layer) in &mut self.layers {
            let ps: Vec<&mut P> = match layer {
                Layer::Linear(l) => vec![&mut l.w, &mut l.b],
                Layer::Conv(t) => {
                    [&mut t.q, &mut t.k, &mut t.v, &mut t.e, &mut t.skip].into_iter().flat_map(|l| [&mut l.w, &mut l.b]).collect()
                }
                Layer::Gcn(g) => vec![&mut g.lin.w, &mut g.lin.b],
                Layer::Gat(g) => vec![&mut g.lin.w, &mut g.lin.b, &mut g.att_src, &mut g.att_dst, &mut g.bias],
                Layer::Norm(n) => vec![&mut n.gamma, &mut n.beta],
            };
            ps.into_iter().for_each(P::zero_grad);
        }
        self.touched.iter_mut().for_each(|t| *t = Touch::No);
    }

    /// The gradients of the last [`Tape::backward`] by name, for the trained tensors its loss
    /// reached, in layer order.
    pub fn gradients(&mut self) -> Named {
        let mut names = Vec::new();
        for (name, layer) in &self.layers {
            match layer {
                Layer::Linear(_) => names.extend(["weight", "bias"].map(|p| format!("{name}.{p}"))),
                Layer::Conv(_) => names.extend(CONV_PARTS.iter().flat_map(|p| ["weight", "bias"].map(|w| format!("{name}.{p}.{w}")))),
                Layer::Gcn(_) => names.extend(["weight", "bias"].map(|p| format!("{name}.{p}"))),
                Layer::Gat(_) => names.extend(["lin.weight", "lin.bias", "att_src", "att_dst", "bias"].map(|p| format!("{name}.{p}"))),
                Layer::Norm(_) => names.extend(["gamma", "beta"].map(|p| format!("{name}.{p}"))),
            }
        }
        names.into_iter().zip(self.tensors()).filter_map(|(n, (_, g))| g.map(|g| (n, g.clone()))).collect()
    }

    /// One optimiser step over the tensors this step's loss reached.
    pub fn adamw(&mut self, optim: &mut AdamW, lr: f32) -> Result<()> {
        optim.step_some(lr, self.tensors())
    }
}

/// Takes the checked tensors to their layers.
struct Taker {
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

impl Taker {
    fn take(&mut self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        self.tensors.remove(name).ok_or_else(|| ModelError::Internal(format!("model tensors: layer tensor `{name}` not declared")))
    }

    fn lin(&mut self, name: &str) -> Result<Lin> {
        let (shape, w) = self.take(&format!("{name}.weight"))?;
        let (_, b) = self.take(&format!("{name}.bias"))?;
        let [din, dout] = shape[..] else { return Err(ModelError::Internal(format!("`{name}.weight` is not a matrix"))) };
        Lin::new(w, b, din, dout)
    }
}

/// A value on the tape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var(usize);

struct Slot {
    v: Vec<f32>,
    rows: usize,
    cols: usize,
    /// Whether a gradient flows into it (constants: no).
    grad: bool,
}

enum Op {
    Linear { x: Var, out: Var, layer: usize },
    Conv { x: Var, out: Var, layer: usize, cache: TransformerCache },
    Gcn { x: Var, out: Var, layer: usize, cache: GcnCache },
    Gat { x: Var, out: Var, layer: usize, cache: GatCache },
    Norm { x: Var, out: Var, layer: usize, cache: NormCache },
    Relu { x: Var, out: Var },
    Pool { x: Var, out: Var },
    Concat { a: Var, b: Var, out: Var },
    CrossEntropy { logits: Var, out: Var, d: Vec<f32>, loss: f64 },
}

/// One training step's forward pass, recorded; [`Tape::backward`] consumes it.
pub struct Tape<'a> {
    params: &'a mut HostParams,
    batch: &'a HostBatch,
    slots: Vec<Slot>,
    ops: Vec<Op>,
}

impl Drop for Tape<'_> {
    fn drop(&mut self) {
        self.slots.drain(..).for_each(|s| reuse::give(s.v));
    }
}

impl<'a> Tape<'a> {
    /// A tape over `batch` (the graph structure every op of the step reads); the layers' gradients
    /// start at zero.
    pub fn new(params: &'a mut HostParams, batch: &'a HostBatch) -> Tape<'a> {
        params.zero_grad();
        Tape { params, batch, slots: Vec::new(), ops: Vec::new() }
    }

    fn push(&mut self, v: Vec<f32>, rows: usize, cols: usize, grad: bool) -> Var {
        self.slots.push(Slot { v, rows, cols, grad });
        Var(self.slots.len() - 1)
    }

    fn slot(&self, x: &Var) -> Result<&Slot> {
        self.slots.get(x.0).ok_or_else(|| ModelError::Internal("tape: a value of another tape".into()))
    }

    /// Runs the recorded ops backward from `loss` (the value of a [`Engine::cross_entropy`]);
    /// returns the loss. The layers hold their gradients afterwards.
    pub fn backward(mut self, loss: Var) -> Result<f64> {
        let mut grads: Vec<Option<Vec<f32>>> = (0..self.slots.len()).map(|_| None).collect();
        let mut value = None;
        let ops = std::mem::take(&mut self.ops);
        for op in ops.into_iter().rev() {
            let out = match &op {
                Op::Linear { out, .. }
                | Op::Conv { out, .. }
                | Op::Gcn { out, .. }
                | Op::Gat { out, .. }
                | Op::Norm { out, .. }
                | Op::Relu { out, .. }
                | Op::Pool { out, .. }
                | Op::Concat { out, .. }
                | Op::CrossEntropy { out, .. } => *out,
            };
            if let Op::CrossEntropy { logits, d, loss: l, .. } = op {
                if out == loss {
                    value = Some(l);
                    self.accumulate(&mut grads, logits, d);
                }
                continue;
            }
            let Some(mut dout) = grads.get_mut(out.0).and_then(Option::take) else { continue };
            match op {
                Op::Linear { x, layer, .. } => {
                    let Layer::Linear(l) = &mut self.params.layers[layer].1 else { return Err(kind(layer)) };
                    let xs = &self.slots[x.0];
                    self.params.touched[layer] = Touch::Yes;
                    if xs.grad {
                        match &mut grads[x.0] {
                            Some(g) => l.backward(&xs.v, &dout, xs.rows, true, Some(g.as_mut_slice()), true)?,
                            slot @ None => {
                                let mut g = reuse::zeros(xs.v.len());
                                l.backward(&xs.v, &dout, xs.rows, true, Some(&mut g), false)?;
                                *slot = Some(g);
                            }
                        }
                    } else {
                        l.backward(&xs.v, &dout, xs.rows, true, None, false)?;
                    }
                }
                Op::Conv { x, layer, cache, .. } => {
                    let Layer::Conv(t) = &mut self.params.layers[layer].1 else { return Err(kind(layer)) };
                    let b = self.batch;
                    let edge = EdgeIn::Rows { rows: &b.edge_rows, n_rows: b.n_rows, row: &b.edge_row };
                    self.params.touched[layer] = if b.m > 0 { Touch::Yes } else { Touch::SkipOnly };
                    let xs = &self.slots[x.0];
                    if xs.grad {
                        let mut dx = reuse::zeros(xs.v.len());
                        t.backward(&cache, &dout, edge, b, Some(&mut dx), None)?;
                        self.accumulate(&mut grads, x, dx);
                    } else {
                        t.backward(&cache, &dout, edge, b, None, None)?;
                    }
                }
                Op::Gcn { x, layer, cache, .. } => {
                    let Layer::Gcn(g) = &mut self.params.layers[layer].1 else { return Err(kind(layer)) };
                    self.params.touched[layer] = Touch::Yes;
                    let mut dx = self.slots[x.0].grad.then(|| reuse::zeros(self.slots[x.0].v.len()));
                    g.backward(&cache, &dout, self.batch, dx.as_deref_mut())?;
                    if let Some(dx) = dx {
                        self.accumulate(&mut grads, x, dx);
                    }
                }
                Op::Gat { x, layer, cache, .. } => {
                    let Layer::Gat(g) = &mut self.params.layers[layer].1 else { return Err(kind(layer)) };
                    self.params.touched[layer] = Touch::Yes;
                    let mut dx = self.slots[x.0].grad.then(|| reuse::zeros(self.slots[x.0].v.len()));
                    g.backward(&cache, &dout, self.batch, dx.as_deref_mut())?;
                    if let Some(dx) = dx {
                        self.accumulate(&mut grads, x, dx);
                    }
                }
                Op::Norm { x, layer, cache, .. } => {
                    let Layer::Norm(n) = &mut self.params.layers[layer].1 else { return Err(kind(layer)) };
                    self.params.touched[layer] = Touch::Yes;
                    let dx = n.backward(&cache, &dout, self.slots[x.0].rows);
                    self.accumulate(&mut grads, x, dx);
                }
                Op::Relu { x, out } => {
                    relu_back(&self.slots[out.0].v, &mut dout);
                    self.accumulate(&mut grads, x, dout);
                    continue;
                }
                Op::Pool { x, .. } => {
                    let dx = mean_pool_back(&dout, self.slots[x.0].cols, self.batch);
                    self.accumulate(&mut grads, x, dx);
                }
                Op::Concat { a, b, .. } => {
                    let (ca, cb) = (self.slots[a.0].cols, self.slots[b.0].cols);
                    for (part, off, c) in [(a, 0, ca), (b, ca, cb)] {
                        if self.slots[part.0].grad {
                            let mut g = reuse::with_capacity(self.slots[part.0].v.len());
                            for r in dout.chunks_exact(ca + cb) {
                                g.extend_from_slice(&r[off..off + c]);
                            }
                            self.accumulate(&mut grads, part, g);
                        }
                    }
                }
                Op::CrossEntropy { .. } => {}
            }
            reuse::give(dout);
        }
        grads.into_iter().flatten().for_each(reuse::give);
        value.ok_or_else(|| ModelError::Internal("tape: the loss is not a cross-entropy of this tape".into()))
    }

    /// Adds `g` into the gradient of `x` (a constant takes none).
    fn accumulate(&self, grads: &mut [Option<Vec<f32>>], x: Var, g: Vec<f32>) {
        if !self.slots[x.0].grad {
            reuse::give(g);
            return;
        }
        match &mut grads[x.0] {
            Some(have) => {
                have.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
                reuse::give(g);
            }
            slot @ None => *slot = Some(g),
        }
    }
}

/// A graph op's input: one row per node of the batch, `cols` columns.
fn check_nodes(layer: &str, xs: &Slot, b: &HostBatch, cols: usize) -> Result<()> {
    if xs.cols != cols || xs.rows != b.n {
        return Err(ModelError::Internal(format!("`{layer}`: a {} × {} input for {} nodes of {cols}", xs.rows, xs.cols, b.n)));
    }
    Ok(())
}

fn kind(layer: usize) -> ModelError {
    ModelError::Internal(format!("tape: layer {layer} is not of the op's kind"))
}

impl Engine for Tape<'_> {
    type T = Var;

    fn input(&mut self, v: Vec<f32>, rows: usize, cols: usize) -> Result<Var> {
        if v.len() != rows * cols {
            return Err(ModelError::Internal(format!("tape: an input of {} values for {rows} × {cols}", v.len())));
        }
        Ok(self.push(v, rows, cols, false))
    }

    fn linear(&mut self, x: &Var, layer: &str) -> Result<Var> {
        let i = self.params.find(layer)?;
        let Layer::Linear(l) = &self.params.layers[i].1 else { return Err(kind(i)) };
        let xs = self.slot(x)?;
        if xs.cols != l.din {
            return Err(ModelError::Internal(format!("`{layer}`: {} input columns for {}", xs.cols, l.din)));
        }
        let (rows, dout) = (xs.rows, l.dout);
        let y = l.forward(&xs.v, rows)?;
        let out = self.push(y, rows, dout, true);
        self.ops.push(Op::Linear { x: *x, out, layer: i });
        Ok(out)
    }

    fn transformer_conv(&mut self, x: &Var, layer: &str) -> Result<Var> {
        let i = self.params.find(layer)?;
        let Layer::Conv(t) = &self.params.layers[i].1 else { return Err(kind(i)) };
        let b = self.batch;
        let xs = self.slot(x)?;
        check_nodes(layer, xs, b, t.q.din)?;
        let edge = EdgeIn::Rows { rows: &b.edge_rows, n_rows: b.n_rows, row: &b.edge_row };
        let (y, cache) = t.forward(&xs.v, edge, b)?;
        let cols = t.q.dout;
        let out = self.push(y, b.n, cols, true);
        self.ops.push(Op::Conv { x: *x, out, layer: i, cache });
        Ok(out)
    }

    fn gcn_conv(&mut self, x: &Var, layer: &str) -> Result<Var> {
        let i = self.params.find(layer)?;
        let Layer::Gcn(g) = &self.params.layers[i].1 else { return Err(kind(i)) };
        let b = self.batch;
        let xs = self.slot(x)?;
        check_nodes(layer, xs, b, g.lin.din)?;
        let (y, cache) = g.forward(&xs.v, b)?;
        let out = self.push(y, b.n, g.lin.dout, true);
        self.ops.push(Op::Gcn { x: *x, out, layer: i, cache });
        Ok(out)
    }

    fn gat_conv(&mut self, x: &Var, layer: &str) -> Result<Var> {
        let i = self.params.find(layer)?;
        let Layer::Gat(g) = &self.params.layers[i].1 else { return Err(kind(i)) };
        let b = self.batch;
        let xs = self.slot(x)?;
        check_nodes(layer, xs, b, g.lin.din)?;
        let (y, cache) = g.forward(&xs.v, b)?;
        let out = self.push(y, b.n, g.bias.v.len(), true);
        self.ops.push(Op::Gat { x: *x, out, layer: i, cache });
        Ok(out)
    }

    fn batch_norm(&mut self, x: &Var, layer: &str) -> Result<Var> {
        let i = self.params.find(layer)?;
        let (rows, cols) = {
            let xs = self.slot(x)?;
            (xs.rows, xs.cols)
        };
        let Layer::Norm(n) = &mut self.params.layers[i].1 else { return Err(kind(i)) };
        if cols != n.gamma.v.len() {
            return Err(ModelError::Internal(format!("`{layer}`: {cols} columns for {}", n.gamma.v.len())));
        }
        let (y, cache) = n.forward(&self.slots[x.0].v, rows, true);
        let out = self.push(y, rows, cols, true);
        self.ops.push(Op::Norm { x: *x, out, layer: i, cache });
        Ok(out)
    }

    fn relu(&mut self, x: &Var) -> Result<Var> {
        let xs = self.slot(x)?;
        let (rows, cols, grad) = (xs.rows, xs.cols, xs.grad);
        let mut y = reuse::copy(&xs.v);
        relu(&mut y);
        let out = self.push(y, rows, cols, grad);
        self.ops.push(Op::Relu { x: *x, out });
        Ok(out)
    }

    fn mean_pool(&mut self, x: &Var) -> Result<Var> {
        let b = self.batch;
        let xs = self.slot(x)?;
        if xs.rows != b.n {
            return Err(ModelError::Internal(format!("mean pool: {} rows for {} nodes", xs.rows, b.n)));
        }
        let (cols, grad) = (xs.cols, xs.grad);
        let y = mean_pool(&xs.v, cols, b);
        let out = self.push(y, b.graphs, cols, grad);
        self.ops.push(Op::Pool { x: *x, out });
        Ok(out)
    }

    fn concat(&mut self, a: &Var, b: &Var) -> Result<Var> {
        let (sa, sb) = (self.slot(a)?, self.slot(b)?);
        if sa.rows != sb.rows {
            return Err(ModelError::Internal(format!("concat: {} rows beside {}", sa.rows, sb.rows)));
        }
        let (rows, cols, grad) = (sa.rows, sa.cols + sb.cols, sa.grad || sb.grad);
        let mut y = reuse::with_capacity(rows * cols);
        for (ra, rb) in sa.v.chunks_exact(sa.cols.max(1)).zip(sb.v.chunks_exact(sb.cols.max(1))) {
            y.extend_from_slice(ra);
            y.extend_from_slice(rb);
        }
        let out = self.push(y, rows, cols, grad);
        self.ops.push(Op::Concat { a: *a, b: *b, out });
        Ok(out)
    }

    fn cross_entropy(&mut self, logits: &Var, targets: &[u32]) -> Result<Var> {
        let s = self.slot(logits)?;
        let classes = s.cols;
        if targets.len() != s.rows || targets.iter().any(|&t| t as usize >= classes) {
            return Err(ModelError::Internal(format!("cross-entropy: {} targets for {} rows of {classes} classes", targets.len(), s.rows)));
        }
        let inv = 1.0 / targets.len().max(1) as f32;
        let (mut loss, mut d) = (0f32, reuse::zeros(s.v.len()));
        for (i, &c) in targets.iter().enumerate() {
            let l = &s.v[i * classes..(i + 1) * classes];
            let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lse = max + l.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
            loss -= l[c as usize] - lse;
            for (j, g) in d[i * classes..(i + 1) * classes].iter_mut().enumerate() {
                *g = ((l[j] - lse).exp() - if j == c as usize { 1.0 } else { 0.0 }) * inv;
            }
        }
        let value = loss * inv;
        let out = self.push(vec![value], 1, 1, true);
        self.ops.push(Op::CrossEntropy { logits: *logits, out, d, loss: f64::from(value) });
        Ok(out)
    }
}
