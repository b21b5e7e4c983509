//! The model written once, on burn: burn's autodiff records the graph (linear layers, batch norm,
//! pooling and the loss are burn's own ops), and the TransformerConv propagation is one fused
//! custom op ([`HostConv`]) whose forward and backward are the host kernels of
//! [`crate::gnn::host::Transformer`], registered with burn's autodiff as a [`Backward`] (burn's
//! `custom-wgpu-kernel` pattern) and reached through burn's runtime dispatch as a backend
//! extension. Only burn's CPU backend (`Flex`) implements it here; a GPU backend would implement
//! the same trait with a kernel of its own. With [`Conv::BurnOps`] the engine runs every op as
//! burn's own (the TransformerConv as gathers, a segment softmax and a scatter-sum): the path the
//! same model definition takes on a GPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, ExtensionType, Flex, backend_extension};
use burn::tensor::activation::{leaky_relu, log_softmax, relu};
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::classifier::{ClassifierNames, ClassifierShape};
use super::{Engine, Named, ParamSpec};
use crate::error::{ModelError, Result};
use crate::gnn::encoders::{scatter_sum, segment_softmax};
use crate::gnn::host::{EdgeIn, HostBatch, Lin, Transformer, TransformerCache};
use crate::train::optim::AdamW;

/// The step's graph batch, shared with the custom op, and where a failed host kernel inside
/// burn's backward pass (which cannot return an error) reports itself.
#[derive(Debug, Clone)]
pub struct ConvGraph {
    pub batch: Arc<HostBatch>,
    pub heads: usize,
    /// The layers' output width (`h·c`), for the zeros a failed forward leaves in its place.
    pub channels: usize,
    pub faults: Arc<Mutex<Vec<String>>>,
}

impl ConvGraph {
    fn fault(&self, e: impl std::fmt::Display) {
        if let Ok(mut f) = self.faults.lock() {
            f.push(e.to_string());
        }
    }
}

/// The five projections of a TransformerConv in the order q, k, v, e, skip: weights
/// (`d × h·c`) and biases (`1 × h·c`).
#[derive(ExtensionType)]
pub struct ConvWeights<B: Backend> {
    pub qw: FloatTensor<B>,
    pub qb: FloatTensor<B>,
    pub kw: FloatTensor<B>,
    pub kb: FloatTensor<B>,
    pub vw: FloatTensor<B>,
    pub vb: FloatTensor<B>,
    pub ew: FloatTensor<B>,
    pub eb: FloatTensor<B>,
    pub sw: FloatTensor<B>,
    pub sb: FloatTensor<B>,
}

impl<B: Backend> ConvWeights<B> {
    fn into_array(self) -> [FloatTensor<B>; 10] {
        let ConvWeights { qw, qb, kw, kb, vw, vb, ew, eb, sw, sb } = self;
        [qw, qb, kw, kb, vw, vb, ew, eb, sw, sb]
    }
}

/// The fused TransformerConv as a backend operation over node states `x` (`n × d_in`).
#[backend_extension(Flex, Autodiff)]
pub trait HostConv: Backend {
    fn transformer_conv(x: FloatTensor<Self>, #[extension_type] w: ConvWeights<Self>, graph: ConvGraph) -> FloatTensor<Self>;
}

fn host(t: FlexTensor) -> Result<Vec<f32>> {
    t.into_data().try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("reading a CPU tensor: {e:?}")))
}

fn flex(v: Vec<f32>, rows: usize, cols: usize) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(v, [rows, cols]))
}

/// The layer on the host from its tensors (`[w, b]` five times).
fn layer(parts: [FlexTensor; 10], heads: usize) -> Result<Transformer> {
    let mut lins = Vec::with_capacity(5);
    let mut it = parts.into_iter();
    while let (Some(w), Some(b)) = (it.next(), it.next()) {
        let (w, b) = (host(w)?, host(b)?);
        let dout = b.len();
        let din = w.len() / dout.max(1);
        lins.push(Lin::new(w, b, din, dout)?);
    }
    let [q, k, v, e, skip]: [Lin; 5] = lins.try_into().map_err(|_| ModelError::Internal("TransformerConv: five projections".into()))?;
    Ok(Transformer { q, k, v, e, skip, heads })
}

fn edge(b: &HostBatch) -> EdgeIn<'_> {
    EdgeIn::Rows { rows: &b.edge_rows, n_rows: b.n_rows, row: &b.edge_row }
}

/// The forward on the host: the output, and the layer with its cache for the backward.
fn forward(x: FlexTensor, parts: [FlexTensor; 10], graph: &ConvGraph) -> (FlexTensor, Option<Saved>) {
    let b = &graph.batch;
    let run = || -> Result<(FlexTensor, Saved)> {
        let t = layer(parts, graph.heads)?;
        let (y, cache) = t.forward(&host(x)?, edge(b), b)?;
        let cols = t.q.dout;
        Ok((flex(y, b.n, cols), Saved { layer: t, cache }))
    };
    match run() {
        Ok((y, s)) => (y, Some(s)),
        Err(e) => {
            graph.fault(e);
            (flex(vec![0.0; b.n * graph.channels], b.n, graph.channels), None)
        }
    }
}

struct Saved {
    layer: Transformer,
    cache: TransformerCache,
}

/// What the backward reads, taken once.
#[derive(Clone)]
struct ConvState {
    saved: Arc<Mutex<Option<Saved>>>,
    graph: ConvGraph,
}

impl std::fmt::Debug for ConvState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConvState")
    }
}

impl HostConv for Flex {
    fn transformer_conv(x: FlexTensor, w: ConvWeights<Self>, graph: ConvGraph) -> FlexTensor {
        forward(x, w.into_array(), &graph).0
    }
}

#[derive(Debug)]
struct ConvBackward;

impl Backward<Flex, 11> for ConvBackward {
    type State = ConvState;

    fn backward(self, ops: Ops<ConvState, 11>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let ConvState { saved, graph } = ops.state;
        let dout = match host(grads.consume::<Flex>(&ops.node)) {
            Ok(d) => d,
            Err(e) => return graph.fault(e),
        };
        let Some(Saved { mut layer, cache }) = saved.lock().ok().and_then(|mut s| s.take()) else {
            graph.fault("TransformerConv backward: no forward state");
            return;
        };
        let b = &graph.batch;
        let want_dx = ops.parents[0].is_some();
        let mut dx = if want_dx { vec![0f32; b.n * layer.q.din] } else { Vec::new() };
        if let Err(e) = layer.backward(&cache, &dout, edge(b), b, want_dx.then_some(dx.as_mut_slice()), None) {
            graph.fault(e);
            return;
        }
        let Transformer { q, k, v, e, skip, .. } = layer;
        // The edge bias is never read: burn's TransformerConv leaves it without a gradient, and a
        // batch without an edge reaches the root (skip) weight alone.
        let edges = b.m > 0;
        let mut out: Vec<Option<FlexTensor>> = vec![want_dx.then(|| flex(dx, b.n, q.din))];
        for (l, used) in [(q, edges), (k, edges), (v, edges), (e, edges), (skip, true)] {
            out.push(used.then(|| flex(l.w.g, l.din, l.dout)));
            out.push(used.then(|| flex(l.b.g, 1, l.dout)));
        }
        // The edge projection's bias (q, k, v, e: parents 1-8, each weight then bias).
        out[8] = None;
        for (parent, g) in ops.parents.into_iter().zip(out) {
            if let (Some(node), Some(g)) = (parent, g) {
                grads.register::<Flex>(node.id, g);
            }
        }
    }
}

impl<C: CheckpointStrategy> HostConv for Autodiff<Flex, C> {
    fn transformer_conv(x: FloatTensor<Self>, w: ConvWeights<Self>, graph: ConvGraph) -> FloatTensor<Self> {
        let w = w.into_array();
        let x_node = x.node();
        let nodes = [
            x_node,
            w[0].node(),
            w[1].node(),
            w[2].node(),
            w[3].node(),
            w[4].node(),
            w[5].node(),
            w[6].node(),
            w[7].node(),
            w[8].node(),
            w[9].node(),
        ];
        let (x, parts) = (x.into_primitive(), w.map(|t| t.into_primitive()));
        match ConvBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, saved) = forward(x, parts, &graph);
                prep.finish(ConvState { saved: Arc::new(Mutex::new(saved)), graph }, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(x, parts, &graph).0),
        }
    }
}

/// The fused op on dispatch tensors.
fn conv(x: Tensor<2>, p: [&Tensor<2>; 10], graph: ConvGraph) -> Tensor<2> {
    let [qw, qb, kw, kb, vw, vb, ew, eb, sw, sb] = p.map(|t| t.clone().into_dispatch());
    let w = ConvWeights { qw, qb, kw, kb, vw, vb, ew, eb, sw, sb };
    Tensor::from_dispatch(<Dispatch as HostConv>::transformer_conv(x.into_dispatch(), w, graph))
}

/// How the engine runs `transformer_conv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conv {
    /// The fused custom op over the host kernels ([`HostConv`]).
    Fused,
    /// burn's own ops, on any backend.
    BurnOps,
}

/// PyG's `TransformerConv(heads, concat=True, edge_dim, root_weight=True)` in burn's own ops, as
/// [`crate::gnn::encoders`] builds it: the edge projection (its bias unread, as in PyG) added to
/// keys and values, a softmax over each destination's incoming edges, the root weight.
fn burn_conv(x: &Tensor<2>, p: [&Tensor<2>; 10], edges: &EdgeTensors, graph: &ConvGraph) -> Tensor<2> {
    let [qw, qb, kw, kb, vw, vb, ew, _eb, sw, sb] = p.map(|t| t.clone());
    let lin = |w: Tensor<2>, b: Tensor<2>| x.clone().matmul(w) + b;
    let skip = lin(sw, sb);
    let (n, m) = (graph.batch.n, graph.batch.m);
    if m == 0 {
        return skip;
    }
    let hc = graph.channels;
    let (h, c) = (graph.heads, hc / graph.heads.max(1));
    let ee = edges.x.clone().matmul(ew);
    let q = lin(qw, qb).select(0, edges.dst.clone()).reshape([m, h, c]);
    let k = (lin(kw, kb).select(0, edges.src.clone()) + ee.clone()).reshape([m, h, c]);
    let v = lin(vw, vb).select(0, edges.src.clone()) + ee;
    let score = (q * k).sum_dim(2).reshape([m, h]).div_scalar((c as f64).sqrt());
    let alpha = segment_softmax(score, edges.dst.clone(), n);
    let msg = v * alpha.unsqueeze_dim::<3>(2).repeat_dim(2, c).reshape([m, hc]);
    scatter_sum(msg, edges.dst.clone(), n) + skip
}

/// The named tensors on the host between steps (burn's tensors are made from them each step, and
/// their gradients read back for [`AdamW`]: a prototype's simplification, which a GPU engine
/// would replace with tensors and an optimiser that stay on the device).
pub struct BurnParams {
    /// Trained tensors in [`ClassifierShape::params`]' order, with their shapes as burn tensors.
    trained: Vec<(String, [usize; 2], Vec<f32>)>,
    /// The batch norms' running statistics.
    stats: HashMap<String, Vec<f32>>,
    dev: Device,
    conv: Conv,
}

impl BurnParams {
    /// From named tensors ([`super::by_name`]).
    pub fn new(specs: &[ParamSpec], tensors: HashMap<String, Vec<f32>>, conv: Conv) -> Result<BurnParams> {
        let (mut trained, mut stats) = (Vec::new(), HashMap::new());
        for (s, v) in super::by_name(specs, tensors)? {
            if !s.trained {
                stats.insert(s.name, v);
                continue;
            }
            let dims = match s.shape.as_slice() {
                [r, c] => [*r, *c],
                [c] => [1, *c],
                other => [other.iter().product(), 1],
            };
            trained.push((s.name, dims, v));
        }
        Ok(BurnParams { trained, stats, dev: Device::flex().autodiff(), conv })
    }

    /// Every tensor by name.
    pub fn named(&self) -> Named {
        let trained = self.trained.iter().map(|(n, _, v)| (n.clone(), v.clone()));
        trained.chain(self.stats.iter().map(|(n, v)| (n.clone(), v.clone()))).collect()
    }

    /// One training step: burn's autodiff for the gradients, [`AdamW`] on the host values.
    pub fn step(
        &mut self,
        optim: &mut AdamW,
        lr: f32,
        (gt, names): (&ClassifierShape, &ClassifierNames),
        b: HostBatch,
        questions: Vec<f32>,
        targets: &[u32],
    ) -> Result<f64> {
        let (value, got, stats) = self.backward(b, (gt.encoder.heads, gt.encoder.hidden), |e| {
            let (x, n) = (e.batch().x.clone(), e.batch().n);
            super::classifier::loss(e, gt, names, x, n, questions, targets)
        })?;
        // Running statistics as the host engine keeps them (batch statistics, momentum 0.1).
        for (layer, mean, var) in stats {
            for (key, batch) in [("running_mean", mean), ("running_var", var)] {
                if let Some(r) = self.stats.get_mut(&format!("{layer}.{key}")) {
                    r.iter_mut().zip(&batch).for_each(|(r, s)| *r = *r * 0.9 + s * 0.1);
                }
            }
        }
        optim.step_some(lr, self.trained.iter_mut().zip(&got).map(|((_, _, v), g)| (v, g.as_ref())))?;
        Ok(value)
    }

    /// burn's gradients of `loss` (built over batch `b` with TransformerConv layers of `heads`
    /// heads and `channels` channels) by name, for the trained tensors it reaches; and the loss.
    pub fn gradients(
        &self,
        b: HostBatch,
        (heads, channels): (usize, usize),
        loss: impl FnOnce(&mut BurnEngine<'_>) -> Result<Tensor<2>>,
    ) -> Result<(f64, Named)> {
        let (value, got, _) = self.backward(b, (heads, channels), loss)?;
        let named = self.trained.iter().zip(got).filter_map(|((n, _, _), g)| g.map(|g| (n.clone(), g))).collect();
        Ok((value, named))
    }

    /// The loss, each trained tensor's gradient (`None` where the loss does not reach it) and
    /// each batch norm's batch statistics.
    fn backward(
        &self,
        b: HostBatch,
        (heads, channels): (usize, usize),
        loss: impl FnOnce(&mut BurnEngine<'_>) -> Result<Tensor<2>>,
    ) -> Result<Stepped> {
        let tensors: HashMap<String, Tensor<2>> = self
            .trained
            .iter()
            .map(|(name, dims, v)| (name.clone(), Tensor::<2>::from_data(TensorData::new(v.clone(), *dims), &self.dev).require_grad()))
            .collect();
        let faults = Arc::new(Mutex::new(Vec::new()));
        let graph = ConvGraph { batch: Arc::new(b), heads, channels, faults: faults.clone() };
        let edges = EdgeTensors::new(&graph.batch, &self.dev);
        let mut e = BurnEngine { tensors: &tensors, graph, edges, conv: self.conv, dev: self.dev.clone(), stats: Vec::new() };
        let loss = loss(&mut e)?;
        let value = f64::from(loss.clone().into_scalar::<f32>());
        let grads = loss.backward();
        if let Some(f) = faults.lock().ok().and_then(|f| f.first().cloned()) {
            return Err(ModelError::Internal(format!("fused TransformerConv: {f}")));
        }
        let mut got: Vec<Option<Vec<f32>>> = Vec::with_capacity(self.trained.len());
        for (name, _, _) in &self.trained {
            got.push(match tensors.get(name).and_then(|t| t.grad(&grads)) {
                Some(g) => Some(read(g)?),
                None => None,
            });
        }
        Ok((value, got, e.stats))
    }
}

/// A backward pass: the loss, the gradients, the batch norms' statistics.
type Stepped = (f64, Vec<Option<Vec<f32>>>, Vec<(String, Vec<f32>, Vec<f32>)>);

/// The batch's edges as burn tensors.
struct EdgeTensors {
    src: Tensor<1, Int>,
    dst: Tensor<1, Int>,
    /// Each edge's feature row (`m × edge_dim`).
    x: Tensor<2>,
    /// The edges, then every node's self-loop (GCN and GAT): sources, destinations, and the
    /// count of each destination (in-degree plus one).
    loop_src: Tensor<1, Int>,
    loop_dst: Tensor<1, Int>,
    loop_src_h: Vec<u32>,
    loop_dst_h: Vec<u32>,
    degree: Vec<f32>,
}

impl EdgeTensors {
    fn new(b: &HostBatch, dev: &Device) -> EdgeTensors {
        let ints =
            |v: &[u32]| Tensor::<1, Int>::from_data(TensorData::new(v.iter().map(|&i| i as i64).collect::<Vec<_>>(), [v.len()]), dev);
        let loop_src_h: Vec<u32> = b.src.iter().copied().chain(0..b.n as u32).collect();
        let loop_dst_h: Vec<u32> = b.dst.iter().copied().chain(0..b.n as u32).collect();
        let mut degree = vec![0f32; b.n];
        loop_dst_h.iter().for_each(|&d| degree[d as usize] += 1.0);
        let (loop_src, loop_dst) = (ints(&loop_src_h), ints(&loop_dst_h));
        let (src, dst, x) = if b.m == 0 {
            // Never read: a batch without an edge reaches the root weight alone.
            (ints(&[0]), ints(&[0]), Tensor::zeros([1, b.edge_dim], dev))
        } else {
            let rows = Tensor::<2>::from_data(TensorData::new(b.edge_rows.clone(), [b.n_rows, b.edge_dim]), dev);
            (ints(&b.src), ints(&b.dst), rows.select(0, ints(&b.edge_row)))
        };
        EdgeTensors { src, dst, x, loop_src, loop_dst, loop_src_h, loop_dst_h, degree }
    }
}

/// One step's forward on burn tensors.
pub struct BurnEngine<'a> {
    tensors: &'a HashMap<String, Tensor<2>>,
    graph: ConvGraph,
    edges: EdgeTensors,
    conv: Conv,
    dev: Device,
    /// Each batch norm's batch mean and variance, for its running statistics.
    stats: Vec<(String, Vec<f32>, Vec<f32>)>,
}

impl BurnEngine<'_> {
    /// The step's graph batch.
    pub fn batch(&self) -> &HostBatch {
        &self.graph.batch
    }

    fn t(&self, name: String) -> Result<&Tensor<2>> {
        self.tensors.get(&name).ok_or_else(|| ModelError::Internal(format!("no tensor `{name}` in the model")))
    }
}

fn read(t: Tensor<2>) -> Result<Vec<f32>> {
    t.into_data().try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("reading a tensor: {e:?}")))
}

impl Engine for BurnEngine<'_> {
    type T = Tensor<2>;

    fn input(&mut self, v: Vec<f32>, rows: usize, cols: usize) -> Result<Tensor<2>> {
        Ok(Tensor::from_data(TensorData::new(v, [rows, cols]), &self.dev))
    }

    fn linear(&mut self, x: &Tensor<2>, layer: &str) -> Result<Tensor<2>> {
        let (w, b) = (self.t(format!("{layer}.weight"))?, self.t(format!("{layer}.bias"))?);
        Ok(x.clone().matmul(w.clone()) + b.clone())
    }

    fn transformer_conv(&mut self, x: &Tensor<2>, layer: &str) -> Result<Tensor<2>> {
        let mut p = Vec::with_capacity(10);
        for part in ["q", "k", "v", "e", "skip"] {
            p.push(self.t(format!("{layer}.{part}.weight"))?);
            p.push(self.t(format!("{layer}.{part}.bias"))?);
        }
        let p: [&Tensor<2>; 10] = p.try_into().map_err(|_| ModelError::Internal("TransformerConv: ten tensors".into()))?;
        Ok(match self.conv {
            Conv::Fused => conv(x.clone(), p, self.graph.clone()),
            Conv::BurnOps => burn_conv(x, p, &self.edges, &self.graph),
        })
    }

    /// burn's ops, as [`crate::gnn::encoders`]' `GcnLayer` builds it.
    fn gcn_conv(&mut self, x: &Tensor<2>, layer: &str) -> Result<Tensor<2>> {
        let (w, b) = (self.t(format!("{layer}.weight"))?.clone(), self.t(format!("{layer}.bias"))?.clone());
        let e = &self.edges;
        let norm: Vec<f32> =
            e.loop_src_h.iter().zip(&e.loop_dst_h).map(|(&s, &d)| 1.0 / (e.degree[s as usize] * e.degree[d as usize]).sqrt()).collect();
        let norm = Tensor::<2>::from_data(TensorData::new(norm, [e.loop_src_h.len(), 1]), &self.dev);
        let msg = x.clone().matmul(w).select(0, e.loop_src.clone()) * norm;
        Ok(scatter_sum(msg, e.loop_dst.clone(), self.graph.batch.n) + b)
    }

    /// burn's ops, as [`crate::gnn::encoders`]' `GatLayer` builds it (the projection's bias unread).
    fn gat_conv(&mut self, x: &Tensor<2>, layer: &str) -> Result<Tensor<2>> {
        let w = self.t(format!("{layer}.lin.weight"))?.clone();
        let (att_src, att_dst) = (self.t(format!("{layer}.att_src"))?.clone(), self.t(format!("{layer}.att_dst"))?.clone());
        let bias = self.t(format!("{layer}.bias"))?.clone();
        let [h, c] = att_src.dims();
        let (n, e) = (self.graph.batch.n, &self.edges);
        let hx = x.clone().matmul(w).reshape([n, h, c]);
        let a_s = (hx.clone() * att_src.unsqueeze_dim::<3>(0)).sum_dim(2).reshape([n, h]);
        let a_d = (hx.clone() * att_dst.unsqueeze_dim::<3>(0)).sum_dim(2).reshape([n, h]);
        let score = leaky_relu(a_s.select(0, e.loop_src.clone()) + a_d.select(0, e.loop_dst.clone()), 0.2);
        let alpha = segment_softmax(score, e.loop_dst.clone(), n);
        let count = e.loop_src_h.len();
        let msg =
            hx.reshape([n, h * c]).select(0, e.loop_src.clone()) * alpha.unsqueeze_dim::<3>(2).repeat_dim(2, c).reshape([count, h * c]);
        let out = scatter_sum(msg, e.loop_dst.clone(), n).reshape([n, h, c]).mean_dim(1).reshape([n, c]);
        Ok(out + bias)
    }

    fn batch_norm(&mut self, x: &Tensor<2>, layer: &str) -> Result<Tensor<2>> {
        let (g, b) = (self.t(format!("{layer}.gamma"))?.clone(), self.t(format!("{layer}.beta"))?.clone());
        let mean = x.clone().mean_dim(0);
        let xc = x.clone() - mean.clone();
        let var = xc.clone().powi_scalar(2).mean_dim(0);
        let y = xc / (var.clone() + 1e-5).sqrt() * g + b;
        self.stats.push((layer.to_string(), read(mean.detach())?, read(var.detach())?));
        Ok(y)
    }

    fn relu(&mut self, x: &Tensor<2>) -> Result<Tensor<2>> {
        Ok(relu(x.clone()))
    }

    fn mean_pool(&mut self, x: &Tensor<2>) -> Result<Tensor<2>> {
        let b = &self.graph.batch;
        let mut m = vec![0f32; b.graphs * b.n];
        for i in 0..b.n {
            let g = b.node_graph[i] as usize;
            m[g * b.n + i] = 1.0 / b.counts[g] as f32;
        }
        let pool = Tensor::<2>::from_data(TensorData::new(m, [b.graphs, b.n]), &self.dev);
        Ok(pool.matmul(x.clone()))
    }

    fn concat(&mut self, a: &Tensor<2>, b: &Tensor<2>) -> Result<Tensor<2>> {
        Ok(Tensor::cat(vec![a.clone(), b.clone()], 1))
    }

    fn cross_entropy(&mut self, logits: &Tensor<2>, targets: &[u32]) -> Result<Tensor<2>> {
        let [rows, classes] = logits.dims();
        if targets.len() != rows || targets.iter().any(|&t| t as usize >= classes) {
            return Err(ModelError::Internal(format!("cross-entropy: {} targets for {rows} rows of {classes} classes", targets.len())));
        }
        let mut onehot = vec![0f32; rows * classes];
        targets.iter().enumerate().for_each(|(i, &t)| onehot[i * classes + t as usize] = 1.0);
        let onehot = Tensor::<2>::from_data(TensorData::new(onehot, [rows, classes]), &self.dev);
        let picked = (log_softmax(logits.clone(), 1) * onehot).sum().reshape([1, 1]);
        Ok(picked * (-1.0 / rows.max(1) as f32))
    }
}
