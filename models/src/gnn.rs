//! Graph neural networks for TopoRAG's task-oriented evaluation (paper §6.1.3, Table 3), trained
//! full-batch in burn on any device (Flex on CPU, wgpu on a GPU):
//!
//! * node classification with a 2-layer **GCN** (Kipf & Welling: Â = D^-½(A+I)D^-½, linear then
//!   propagate, bias after), **GraphSAGE** (mean aggregator, PyG `SAGEConv`: W_l·mean(N(i)) + W_r·x_i)
//!   or **MLP**; ReLU, dropout on the input and the hidden layer, softmax cross-entropy on the
//!   training nodes, Adam with L2 weight decay (torch semantics), early stopping on validation
//!   accuracy (ties: lower validation loss) with the test accuracy of the best epoch reported;
//! * link prediction with a 2-layer GCN encoder and an MLP predictor on h_u ⊙ h_v (OGB's
//!   `LinkPredictor`), binary cross-entropy against one uniformly drawn negative pair per positive
//!   per epoch, and OGB's Hits@K against a fixed set of negative pairs.
//!
//! Determinism: weights (Glorot uniform, zero biases), dropout masks and negatives come from a
//! SplitMix64 stream of the seed, never from the backend's global generator, so a seed gives the same
//! curves on every run (full-batch; Flex's products and scatter-adds have a fixed order).

use burn::module::{Module, Param};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::{log_sigmoid, log_softmax, relu};
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};

/// Node-classification architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GnnKind {
    Gcn,
    Sage,
    Mlp,
}

impl GnnKind {
    pub const ALL: [GnnKind; 3] = [GnnKind::Gcn, GnnKind::Sage, GnnKind::Mlp];

    pub fn as_str(self) -> &'static str {
        match self {
            GnnKind::Gcn => "gcn",
            GnnKind::Sage => "sage",
            GnnKind::Mlp => "mlp",
        }
    }
}

/// SplitMix64: weights, dropout masks and negatives.
#[derive(Debug, Clone)]
pub(crate) struct Stream(pub(crate) u64);

impl Stream {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }

    /// `0..n` in a seeded uniform order (Fisher–Yates from the end): the mini-batch order of every
    /// model trained here.
    pub(crate) fn shuffled(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, self.below(i + 1));
        }
        order
    }
}

/// A fully connected layer `x W + b`.
#[derive(Module, Debug)]
pub struct Dense {
    w: Param<Tensor<2>>,
    b: Param<Tensor<1>>,
}

impl Dense {
    /// Glorot-uniform weights, zero bias.
    pub(crate) fn new(d_in: usize, d_out: usize, rng: &mut Stream, dev: &Device) -> Self {
        let a = (6.0 / (d_in + d_out) as f64).sqrt();
        let w: Vec<f32> = (0..d_in * d_out).map(|_| ((rng.unit() * 2.0 - 1.0) * a) as f32).collect();
        Dense { w: Param::from_data(TensorData::new(w, [d_in, d_out]), dev), b: Param::from_data(TensorData::new(vec![0f32; d_out], [d_out]), dev) }
    }

    pub(crate) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        x.matmul(self.w.val()) + self.b.val().unsqueeze()
    }

    /// `(weight [d_in, d_out], bias [1, d_out])` as tensors.
    pub(crate) fn parts(&self) -> (Tensor<2>, Tensor<2>) {
        (self.w.val(), self.b.val().unsqueeze())
    }

    /// Output width.
    pub(crate) fn d_out(&self) -> usize {
        self.b.val().dims()[0]
    }

    fn linear(&self, x: Tensor<2>) -> Tensor<2> {
        x.matmul(self.w.val())
    }

    /// Rows of the weight matrix (an embedding lookup: the layer's input is a one-hot id).
    pub(crate) fn rows(&self, idx: Tensor<1, Int>) -> Tensor<2> {
        self.w.val().select(0, idx)
    }

    /// `(weight [d_in, d_out], bias [d_out])` as host vectors.
    pub(crate) fn to_host(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        let w = self.w.val().into_data().try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("{e:?}")))?;
        let b = self.b.val().into_data().try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("{e:?}")))?;
        Ok((w, b))
    }

    /// A layer from host vectors (shapes checked by the caller).
    pub(crate) fn from_host(w: Vec<f32>, b: Vec<f32>, d_in: usize, d_out: usize, dev: &Device) -> Self {
        Dense { w: Param::from_data(TensorData::new(w, [d_in, d_out]), dev), b: Param::from_data(TensorData::new(b, [d_out]), dev) }
    }

    fn bias(&self, x: Tensor<2>) -> Tensor<2> {
        x + self.b.val().unsqueeze()
    }
}

/// A weighted edge list `dst += w · x[src]` as tensors.
#[derive(Debug, Clone)]
struct Propagation {
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

    fn apply(&self, h: Tensor<2>) -> Tensor<2> {
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
    gcn: Propagation,
    mean: Propagation,
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

/// A 2-layer node classifier; `r1`/`r2` are SAGE's root weights.
#[derive(Module, Debug)]
pub struct NodeClassifier {
    l1: Dense,
    l2: Dense,
    r1: Option<Dense>,
    r2: Option<Dense>,
}

impl NodeClassifier {
    fn new(kind: GnnKind, d_in: usize, hidden: usize, classes: usize, rng: &mut Stream, dev: &Device) -> Self {
        let l1 = Dense::new(d_in, hidden, rng, dev);
        let l2 = Dense::new(hidden, classes, rng, dev);
        let (r1, r2) = match kind {
            GnnKind::Sage => (Some(Dense::new(d_in, hidden, rng, dev)), Some(Dense::new(hidden, classes, rng, dev))),
            _ => (None, None),
        };
        NodeClassifier { l1, l2, r1, r2 }
    }

    fn layer(kind: GnnKind, l: &Dense, r: Option<&Dense>, g: &GraphOps, x: Tensor<2>) -> Tensor<2> {
        match (kind, r) {
            (GnnKind::Gcn, _) => l.bias(g.gcn.apply(l.linear(x))),
            (GnnKind::Sage, Some(r)) => l.forward(g.mean.apply(x.clone())) + r.linear(x),
            _ => l.forward(x),
        }
    }

    /// Logits; `masks` are the (input, hidden) dropout masks, already scaled by 1/keep.
    fn forward(&self, kind: GnnKind, g: &GraphOps, x: Tensor<2>, masks: Option<(Tensor<2>, Tensor<2>)>) -> Tensor<2> {
        let (m0, m1) = masks.map_or((None, None), |(a, b)| (Some(a), Some(b)));
        let x = match m0 {
            Some(m) => x * m,
            None => x,
        };
        let h = relu(Self::layer(kind, &self.l1, self.r1.as_ref(), g, x));
        let h = match m1 {
            Some(m) => h * m,
            None => h,
        };
        Self::layer(kind, &self.l2, self.r2.as_ref(), g, h)
    }
}

/// Node-classification hyper-parameters (the paper's, after Wang & Derr 2021).
#[derive(Debug, Clone)]
pub struct NodeClassConfig {
    pub hidden: usize,
    pub dropout: f64,
    pub lr: f64,
    pub weight_decay: f32,
    pub max_epochs: usize,
    pub patience: usize,
    pub seed: u64,
}

impl Default for NodeClassConfig {
    fn default() -> Self {
        NodeClassConfig { hidden: 64, dropout: 0.5, lr: 0.01, weight_decay: 5e-4, max_epochs: 1000, patience: 100, seed: 42 }
    }
}

/// One epoch of a training curve.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochRow {
    pub epoch: u32,
    pub train_loss: f64,
    pub val_loss: f64,
    /// Validation accuracy (node classification) or Hits@K (link prediction).
    pub val_metric: f64,
    /// The test metric at this epoch.
    pub test_metric: f64,
}

/// The result of a training run: the curve, and the epoch early stopping kept.
#[derive(Debug, Clone)]
pub struct Trained {
    pub curve: Vec<EpochRow>,
    pub best_epoch: u32,
    pub val_metric: f64,
    pub test_metric: f64,
}

/// Early stopping on the validation metric (ties: lower validation loss), keeping the curve.
#[derive(Debug, Default)]
struct EarlyStopping {
    curve: Vec<EpochRow>,
    best: Option<EpochRow>,
}

impl EarlyStopping {
    /// Records an epoch; whether `patience` epochs have passed since the best one.
    fn stop_after(&mut self, row: EpochRow, patience: usize) -> bool {
        let key = |r: &EpochRow| (r.val_metric, -r.val_loss);
        let stop = match &self.best {
            Some(b) if key(&row) <= key(b) => (row.epoch - b.epoch) as usize >= patience,
            _ => {
                self.best = Some(row.clone());
                false
            }
        };
        self.curve.push(row);
        stop
    }

    fn finish(self) -> Result<Trained> {
        let best = self.best.ok_or_else(|| ModelError::Internal("no epoch ran (max_epochs = 0)".into()))?;
        Ok(Trained { curve: self.curve, best_epoch: best.epoch, val_metric: best.val_metric, test_metric: best.test_metric })
    }
}

/// The inputs of a node-classification run: row-major features, a label per node
/// (`u32::MAX`: unlabelled), and node index sets.
pub struct NodeClassData<'a> {
    pub features: &'a [f32],
    pub dim: usize,
    pub labels: &'a [u32],
    pub classes: usize,
    pub train: &'a [u32],
    pub val: &'a [u32],
    pub test: &'a [u32],
}

pub(crate) fn ints(v: &[u32], dev: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), [v.len()]), dev)
}

pub(crate) fn floats(t: Tensor<2>) -> Result<Vec<f32>> {
    let data = t.into_data();
    data.try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("reading a tensor: {e:?}")))
}

fn mask(rows: usize, cols: usize, p: f64, rng: &mut Stream, dev: &Device) -> Tensor<2> {
    let keep = 1.0 - p;
    let scale = (1.0 / keep) as f32;
    let m: Vec<f32> = (0..rows * cols).map(|_| if rng.unit() < keep { scale } else { 0.0 }).collect();
    Tensor::from_data(TensorData::new(m, [rows, cols]), dev)
}

/// Mean cross-entropy and accuracy of `logits` (row-major, `classes` wide) over `nodes`.
fn loss_and_accuracy(logits: &[f32], classes: usize, labels: &[u32], nodes: &[u32]) -> (f64, f64) {
    if nodes.is_empty() {
        return (0.0, 0.0);
    }
    let (mut loss, mut correct) = (0.0, 0usize);
    for &v in nodes {
        let row = &logits[v as usize * classes..(v as usize + 1) * classes];
        let mx = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let lse = f64::from(mx) + row.iter().map(|&z| f64::from(z - mx).exp()).sum::<f64>().ln();
        let y = labels[v as usize] as usize;
        loss += lse - f64::from(row[y]);
        // argmax, ties to the lower class
        let pred = row.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &z)| if z > bv { (i, z) } else { (bi, bv) }).0;
        correct += usize::from(pred == y);
    }
    (loss / nodes.len() as f64, correct as f64 / nodes.len() as f64)
}

fn check_nodes(n: usize, data: &NodeClassData<'_>) -> Result<()> {
    for set in [data.train, data.val, data.test] {
        if let Some(&v) = set.iter().find(|&&v| v as usize >= n || data.labels[v as usize] as usize >= data.classes) {
            return Err(ModelError::Internal(format!("node {v} is out of range or has no label < {}", data.classes)));
        }
    }
    if data.train.is_empty() {
        return Err(ModelError::Internal("no training nodes".into()));
    }
    Ok(())
}

/// Trains a node classifier (see the module docs) on `dev` (an autodiff device is made from it).
pub fn train_node_classifier(kind: GnnKind, n: usize, edges: &[(u32, u32)], data: &NodeClassData<'_>, cfg: &NodeClassConfig, dev: &Device) -> Result<Trained> {
    if data.features.len() != n * data.dim || data.labels.len() != n {
        return Err(ModelError::Internal(format!("{} features / {} labels for {n} nodes of width {}", data.features.len(), data.labels.len(), data.dim)));
    }
    check_nodes(n, data)?;
    let dev = dev.clone().autodiff();
    let mut rng = Stream(cfg.seed ^ 0x6e63);
    let g = GraphOps::new(n, edges, &dev);
    let x: Tensor<2> = Tensor::from_data(TensorData::new(data.features.to_vec(), [n, data.dim]), &dev);
    let mut model = NodeClassifier::new(kind, data.dim, cfg.hidden, data.classes, &mut rng, &dev);
    let mut optim = AdamConfig::new().with_epsilon(1e-8).with_weight_decay(Some(WeightDecayConfig::new(cfg.weight_decay))).init();
    let train_idx = ints(data.train, &dev);
    let mut onehot = vec![0f32; data.train.len() * data.classes];
    for (r, &v) in data.train.iter().enumerate() {
        onehot[r * data.classes + data.labels[v as usize] as usize] = 1.0;
    }
    let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [data.train.len(), data.classes]), &dev);
    let inv_train = 1.0 / data.train.len() as f64;
    let mut stopper = EarlyStopping::default();
    for epoch in 1..=cfg.max_epochs {
        let masks = (cfg.dropout > 0.0).then(|| (mask(n, data.dim, cfg.dropout, &mut rng, &dev), mask(n, cfg.hidden, cfg.dropout, &mut rng, &dev)));
        let logits = model.forward(kind, &g, x.clone(), masks);
        let lp = log_softmax(logits.select(0, train_idx.clone()), 1);
        let loss = (lp * onehot.clone()).sum().mul_scalar(-inv_train);
        let train_loss = f64::from(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(cfg.lr, model, grads);
        let eval = floats(model.valid().forward(kind, &g.valid(), x.clone().inner(), None))?;
        let (val_loss, val_acc) = loss_and_accuracy(&eval, data.classes, data.labels, data.val);
        let (_, test_acc) = loss_and_accuracy(&eval, data.classes, data.labels, data.test);
        let row = EpochRow { epoch: epoch as u32, train_loss, val_loss, val_metric: val_acc, test_metric: test_acc };
        if stopper.stop_after(row, cfg.patience) {
            break;
        }
    }
    stopper.finish()
}

impl GraphOps {
    /// The same graph on the inner (non-autodiff) device.
    fn valid(&self) -> GraphOps {
        let p = |p: &Propagation| Propagation { n: p.n, src: p.src.clone().inner(), dst: p.dst.clone().inner(), w: p.w.clone().inner(), empty: p.empty };
        GraphOps { gcn: p(&self.gcn), mean: p(&self.mean) }
    }
}

/// GCN encoder + MLP predictor.
#[derive(Module, Debug)]
pub struct LinkModel {
    e1: Dense,
    e2: Dense,
    p1: Dense,
    p2: Dense,
}

impl LinkModel {
    fn encode(&self, g: &GraphOps, x: Tensor<2>) -> Tensor<2> {
        let h = relu(self.e1.bias(g.gcn.apply(self.e1.linear(x))));
        self.e2.bias(g.gcn.apply(self.e2.linear(h)))
    }

    /// Scores (logits) of the pairs `(a[i], b[i])`.
    fn score(&self, h: Tensor<2>, a: Tensor<1, Int>, b: Tensor<1, Int>) -> Tensor<2> {
        let z = h.clone().select(0, a) * h.select(0, b);
        self.p2.forward(relu(self.p1.forward(z)))
    }
}

/// Link-prediction hyper-parameters (the paper's, after Zhao et al. 2022).
#[derive(Debug, Clone)]
pub struct LinkPredConfig {
    pub hidden: usize,
    pub lr: f64,
    pub max_epochs: usize,
    pub patience: usize,
    pub hits_k: usize,
    pub seed: u64,
}

impl Default for LinkPredConfig {
    fn default() -> Self {
        LinkPredConfig { hidden: 256, lr: 0.001, max_epochs: 500, patience: 50, hits_k: 100, seed: 42 }
    }
}

/// The inputs of a link-prediction run. `message` edges carry the GCN's messages (and are the
/// training positives); evaluation pairs are scored against their own negatives.
pub struct LinkPredData<'a> {
    pub features: &'a [f32],
    pub dim: usize,
    pub message: &'a [(u32, u32)],
    pub val_pos: &'a [(u32, u32)],
    pub val_neg: &'a [(u32, u32)],
    pub test_pos: &'a [(u32, u32)],
    pub test_neg: &'a [(u32, u32)],
}

/// OGB's Hits@K: the share of positive scores strictly above the K-th highest negative score (1
/// when there are fewer than K negatives).
pub fn hits_at_k(pos: &[f32], neg: &[f32], k: usize) -> f64 {
    if pos.is_empty() {
        return 0.0;
    }
    if neg.len() < k || k == 0 {
        return 1.0;
    }
    let mut s = neg.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    let kth = s[k - 1];
    pos.iter().filter(|&&p| p > kth).count() as f64 / pos.len() as f64
}

fn pairs_t(p: &[(u32, u32)], dev: &Device) -> (Tensor<1, Int>, Tensor<1, Int>) {
    let (a, b): (Vec<u32>, Vec<u32>) = p.iter().copied().unzip();
    (ints(&a, dev), ints(&b, dev))
}

/// Trains the link predictor (see the module docs); the metric is Hits@`hits_k`.
pub fn train_link_predictor(n: usize, data: &LinkPredData<'_>, cfg: &LinkPredConfig, dev: &Device) -> Result<Trained> {
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
    let dev = dev.clone().autodiff();
    let mut rng = Stream(cfg.seed ^ 0x6c70);
    let g = GraphOps::new(n, data.message, &dev);
    let gv = g.valid();
    let x: Tensor<2> = Tensor::from_data(TensorData::new(data.features.to_vec(), [n, data.dim]), &dev);
    let h = cfg.hidden;
    let mut model = LinkModel { e1: Dense::new(data.dim, h, &mut rng, &dev), e2: Dense::new(h, h, &mut rng, &dev), p1: Dense::new(h, h, &mut rng, &dev), p2: Dense::new(h, 1, &mut rng, &dev) };
    let mut optim = AdamConfig::new().with_epsilon(1e-8).init();
    let (pa, pb) = pairs_t(data.message, &dev);
    let m = data.message.len();
    let inner = dev.clone().inner();
    let eval_sets: Vec<(Tensor<1, Int>, Tensor<1, Int>)> = [data.val_pos, data.val_neg, data.test_pos, data.test_neg].iter().map(|p| pairs_t(p, &inner)).collect();
    let mut stopper = EarlyStopping::default();
    for epoch in 1..=cfg.max_epochs {
        let neg: Vec<(u32, u32)> = (0..m).map(|_| (rng.below(n) as u32, rng.below(n) as u32)).collect();
        let (na, nb) = pairs_t(&neg, &dev);
        let hid = model.encode(&g, x.clone());
        let pos_s = model.score(hid.clone(), pa.clone(), pb.clone());
        let neg_s = model.score(hid, na, nb);
        // −log σ(pos) − log(1 − σ(neg)) = −log σ(pos) − log σ(−neg)
        let loss = (log_sigmoid(pos_s).mean() + log_sigmoid(neg_s.neg()).mean()).neg();
        let train_loss = f64::from(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(cfg.lr, model, grads);
        let mv = model.valid();
        let hv = mv.encode(&gv, x.clone().inner());
        let mut scores = Vec::with_capacity(4);
        for (a, b) in &eval_sets {
            let s = if a.dims()[0] == 0 { Vec::new() } else { floats(mv.score(hv.clone(), a.clone(), b.clone()))? };
            scores.push(s);
        }
        let bce = |s: &[f32], positive: bool| {
            s.iter().map(|&z| {
                let z = f64::from(if positive { z } else { -z });
                // −log σ(z), stable
                if z > 0.0 { (-z).exp().ln_1p() } else { -z + z.exp().ln_1p() }
            }).sum::<f64>() / s.len().max(1) as f64
        };
        let val_loss = bce(&scores[0], true) + bce(&scores[1], false);
        let val_hits = hits_at_k(&scores[0], &scores[1], cfg.hits_k);
        let test_hits = hits_at_k(&scores[2], &scores[3], cfg.hits_k);
        let row = EpochRow { epoch: epoch as u32, train_loss, val_loss, val_metric: val_hits, test_metric: test_hits };
        if stopper.stop_after(row, cfg.patience) {
            break;
        }
    }
    stopper.finish()
}

/// The checkpoint kept over a training run: the epoch with the highest validation metric; on equal
/// metrics the lower tie-break value (e.g. validation loss) wins, else the earlier epoch.
pub(crate) struct Checkpoint<M> {
    best: Option<(f64, f64, u32, M)>,
}

impl<M> Checkpoint<M> {
    pub(crate) fn new() -> Self {
        Checkpoint { best: None }
    }

    /// Keeps `model` when it beats the current checkpoint.
    pub(crate) fn offer(&mut self, metric: f64, tie_break: f64, epoch: u32, model: M) {
        if self.best.as_ref().is_none_or(|(m, t, _, _)| metric > *m || (metric == *m && tie_break < *t)) {
            self.best = Some((metric, tie_break, epoch, model));
        }
    }

    /// The kept model and its epoch.
    pub(crate) fn take(self) -> Result<(M, u32)> {
        self.best.map(|(_, _, e, m)| (m, e)).ok_or_else(|| ModelError::Internal("no epoch ran".into()))
    }
}

/// Writes layers as safetensors (`<name>.weight` `[in, out]`, `<name>.bias` `[out]`), atomically.
pub(crate) fn save_layers(path: &std::path::Path, layers: &[(&str, &Dense)]) -> Result<()> {
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, l) in layers {
        let (w, b) = l.to_host()?;
        let (d_in, d_out) = (w.len() / b.len().max(1), b.len());
        bufs.push((format!("{name}.weight"), vec![d_in, d_out], w.iter().flat_map(|v| v.to_le_bytes()).collect()));
        bufs.push((format!("{name}.bias"), vec![d_out], b.iter().flat_map(|v| v.to_le_bytes()).collect()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bufs
        .iter()
        .map(|(n, s, d)| safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).map(|v| (n.clone(), v)))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| ModelError::Internal(format!("safetensors view: {e}")))?;
    let bytes = safetensors::tensor::serialize(views, None).map_err(|e| ModelError::Internal(format!("safetensors: {e}")))?;
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, bytes).map_err(|source| ModelError::Io { path: tmp.clone(), source })?;
    std::fs::rename(&tmp, path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })
}

/// Reads layers written by [`save_layers`] strictly: every `(name, in, out)` with exact shapes, and
/// nothing else in the file.
pub(crate) fn load_layers(path: &std::path::Path, spec: &[(&str, usize, usize)], dev: &Device) -> Result<Vec<Dense>> {
    let bytes = std::fs::read(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let mut wf = crate::minilm::weights::WeightFile::parse(path, &bytes)?;
    let mut layers = Vec::new();
    for &(name, i, o) in spec {
        let w = wf.f32s(&format!("{name}.weight"), &[i, o])?;
        let b = wf.f32s(&format!("{name}.bias"), &[o])?;
        layers.push(Dense::from_host(w, b, i, o, dev));
    }
    wf.finish()?;
    Ok(layers)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn hits_at_k_by_hand() {
        let neg = [0.9, 0.1, 0.5, 0.3];
        // 2nd highest negative = 0.5: positives strictly above it: 0.6 and 0.95.
        assert_eq!(hits_at_k(&[0.6, 0.5, 0.2, 0.95], &neg, 2), 0.5);
        assert_eq!(hits_at_k(&[0.0], &neg, 5), 1.0);
        assert_eq!(hits_at_k(&[], &neg, 1), 0.0);
    }

    /// Two communities whose features carry the class: every architecture learns it, training is
    /// deterministic for a seed, and the curve is monotone in epochs with early stopping honoured.
    fn planted(n: usize, noise: f64) -> (Vec<f32>, Vec<u32>, Vec<(u32, u32)>) {
        let mut rng = Stream(7);
        let labels: Vec<u32> = (0..n as u32).map(|i| i % 2).collect();
        let mut x = Vec::with_capacity(n * 4);
        for &y in &labels {
            for d in 0..4 {
                let signal = if d == y as usize { 1.0 } else { 0.0 };
                x.push((signal + noise * (rng.unit() * 2.0 - 1.0)) as f32);
            }
        }
        let mut edges = Vec::new();
        for i in 0..n as u32 {
            for _ in 0..3 {
                let j = rng.below(n) as u32;
                if labels[j as usize] == labels[i as usize] && j != i {
                    edges.push((i, j));
                }
            }
        }
        (x, labels, edges)
    }

    #[test]
    fn every_classifier_learns_a_planted_split_deterministically() {
        let n = 120;
        let (x, labels, edges) = planted(n, 0.6);
        let idx: Vec<u32> = (0..n as u32).collect();
        let data = NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..60], val: &idx[60..90], test: &idx[90..] };
        let cfg = NodeClassConfig { max_epochs: 150, patience: 40, ..NodeClassConfig::default() };
        for kind in GnnKind::ALL {
            let a = train_node_classifier(kind, n, &edges, &data, &cfg, &Device::flex()).unwrap();
            assert!(a.test_metric >= 0.9, "{kind:?}: {}", a.test_metric);
            assert!(a.curve.last().unwrap().train_loss < a.curve[0].train_loss);
            let b = train_node_classifier(kind, n, &edges, &data, &cfg, &Device::flex()).unwrap();
            assert_eq!(a.curve, b.curve, "{kind:?} is not deterministic");
            let last = a.curve.len() as u32;
            assert!(last == 150 || last - a.best_epoch == 40, "{kind:?}: stopped at {last}, best {}", a.best_epoch);
        }
    }

    #[test]
    fn graph_models_beat_the_mlp_when_only_the_graph_knows() {
        // Features are pure noise for half the nodes: the MLP is at chance there, GCN reads the
        // class off the neighbours.
        let n = 200;
        let (mut x, labels, edges) = planted(n, 0.3);
        for i in (100..n).map(|i| i * 4) {
            x[i..i + 4].iter_mut().for_each(|v| *v = 0.0);
        }
        let idx: Vec<u32> = (0..n as u32).collect();
        let data = NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..80], val: &idx[80..100], test: &idx[100..] };
        let cfg = NodeClassConfig { max_epochs: 200, patience: 50, ..NodeClassConfig::default() };
        let gcn = train_node_classifier(GnnKind::Gcn, n, &edges, &data, &cfg, &Device::flex()).unwrap();
        let mlp = train_node_classifier(GnnKind::Mlp, n, &edges, &data, &cfg, &Device::flex()).unwrap();
        assert!(gcn.test_metric > 0.85 && mlp.test_metric < 0.65, "gcn {} mlp {}", gcn.test_metric, mlp.test_metric);
    }

    #[test]
    fn link_predictor_learns_a_planted_graph() {
        let n = 120;
        let (x, _, edges) = planted(n, 0.3);
        let (train, test) = edges.split_at(edges.len() * 4 / 5);
        let mut rng = Stream(3);
        // Negatives across the two communities never occur as edges.
        let neg: Vec<(u32, u32)> = (0..200).map(|_| (2 * rng.below(n / 2) as u32, 2 * rng.below(n / 2) as u32 + 1)).collect();
        let data = LinkPredData { features: &x, dim: 4, message: train, val_pos: &test[..test.len() / 2], val_neg: &neg[..100], test_pos: &test[test.len() / 2..], test_neg: &neg[100..] };
        let cfg = LinkPredConfig { max_epochs: 60, patience: 30, hits_k: 10, hidden: 32, ..LinkPredConfig::default() };
        let a = train_link_predictor(n, &data, &cfg, &Device::flex()).unwrap();
        assert!(a.test_metric > 0.8, "hits@10 {}", a.test_metric);
        let b = train_link_predictor(n, &data, &cfg, &Device::flex()).unwrap();
        assert_eq!(a.curve, b.curve);
    }
}
