//! Question answering over small textual graphs without an LLM: a graph encoder
//! ([`crate::gnn::encoders`]) and a trained answer head in place of G-Retriever's frozen or LoRA-tuned
//! Llama-2-7B.
//!
//! * **Classification** (ExplaGraphs' support / counter, SceneGraphs' answers seen in training):
//!   an MLP over `[graph vector; question embedding]` → one logit per class, softmax cross-entropy.
//!   Without an encoder (the `no-graph` baseline) the MLP sees the question alone.
//! * **Node scoring** (WebQSP): an MLP over `[node state; question embedding]` → one score per node
//!   of the (retrieved) graph; the loss is the negative log of the softmax mass on the answer nodes
//!   (all answers count); the prediction is the top node. Graphs without an answer node are
//!   skipped in training and count as misses in evaluation.
//!
//! Training as G-Retriever trains: AdamW (decoupled weight decay, 0.05), gradient clipping by norm
//! (0.1; burn clips each parameter tensor, torch the global norm), mini-batches of `batch` graphs
//! in a seeded order, the best validation epoch kept and early stopping after `patience` epochs
//! without improvement, both by the one rule of `crate::train::fit`.

pub(crate) mod host;
pub mod lm;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::batch::{GraphBatch, SmallGraph};
use crate::gnn::encoders::{EncoderShape, GraphEncoder, segment_softmax};
use crate::ops::argmax;
use crate::train::{Dense, Evaluation, Learner, Score, Stepped, Stream, TrainConfig, fit, floats, ints};

/// One question: its graph (owned), the question embedding and what is to be predicted.
#[derive(Debug, Clone)]
pub struct QaExample {
    /// Node features, row-major `n × dim` (`n ≥ 1`).
    pub x: Vec<f32>,
    pub n: usize,
    pub edges: Vec<(u32, u32)>,
    /// Edge features, row-major `edges × edge_dim`.
    pub edge_x: Vec<f32>,
    pub question: Vec<f32>,
    pub target: Target,
}

/// What a question asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A class index (`u32::MAX`: a class never seen in training, always a miss).
    Class(u32),
    /// The answer nodes of the graph (possibly none).
    Nodes(Vec<u32>),
}

/// The answer head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadKind {
    Classify { classes: usize },
    Nodes,
}

/// Hyper-parameters: the shared training settings, the head's width and the seed.
#[derive(Debug, Clone)]
pub struct QaConfig {
    pub train: TrainConfig,
    pub head_hidden: usize,
    pub seed: u64,
}

impl Default for QaConfig {
    fn default() -> Self {
        QaConfig { train: TrainConfig::default(), head_hidden: 256, seed: 0 }
    }
}

/// One epoch of the curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QaEpoch {
    pub epoch: u32,
    pub train_loss: f64,
    pub val_loss: f64,
    pub val_metric: f64,
}

/// A graph encoder (or none) and an answer head.
#[derive(Module, Debug)]
pub struct GraphQa {
    encoder: Option<GraphEncoder>,
    h1: Dense,
    h2: Dense,
    nodes_head: usize,
}

/// Sizes of a model.
#[derive(Debug, Clone, Copy)]
pub struct QaShape {
    /// `None`: the question-only baseline.
    pub encoder: Option<EncoderShape>,
    pub question_dim: usize,
    pub head: HeadKind,
    pub head_hidden: usize,
}

impl GraphQa {
    pub fn new(shape: QaShape, seed: u64, dev: &Device) -> Result<Self> {
        let encoder = shape.encoder.map(|e| GraphEncoder::new(e, seed, dev)).transpose()?;
        let g = shape.encoder.map_or(0, |e| e.hidden);
        if shape.head == HeadKind::Nodes && encoder.is_none() {
            return Err(ModelError::Internal("node scoring needs a graph encoder".into()));
        }
        let mut rng = Stream(seed ^ 0x6871_6865);
        let out = match shape.head {
            HeadKind::Classify { classes } => classes.max(1),
            HeadKind::Nodes => 1,
        };
        Ok(GraphQa {
            encoder,
            h1: Dense::new(g + shape.question_dim, shape.head_hidden, &mut rng, dev),
            h2: Dense::new(shape.head_hidden, out, &mut rng, dev),
            nodes_head: usize::from(shape.head == HeadKind::Nodes),
        })
    }

    /// The graph encoder (`None`: the question-only baseline): what a language-model row can
    /// start its graph token from ([`lm::train`]).
    pub fn encoder(&self) -> Option<&GraphEncoder> {
        self.encoder.as_ref()
    }

    /// Logits: `[G, classes]` (classification) or `[N, 1]` (node scores).
    fn forward(&self, g: &GraphBatch, q: Tensor<2>) -> Tensor<2> {
        match &self.encoder {
            None => self.h2.forward(relu(self.h1.forward(q))),
            Some(enc) => {
                let h = enc.nodes(g);
                if self.nodes_head == 1 {
                    let qn = q.select(0, g.node_graph.clone());
                    self.h2.forward(relu(self.h1.forward(Tensor::cat(vec![h, qn], 1))))
                } else {
                    let pooled = enc.pool(h, g);
                    self.h2.forward(relu(self.h1.forward(Tensor::cat(vec![pooled, q], 1))))
                }
            }
        }
    }
}

pub(crate) fn batch_of(examples: &[&QaExample], dim: usize, edge_dim: usize, dev: &Device) -> Result<(GraphBatch, Tensor<2>)> {
    let graphs: Vec<SmallGraph<'_>> = examples.iter().map(|e| SmallGraph { x: &e.x, n: e.n, edges: &e.edges, edge_x: &e.edge_x }).collect();
    let g = GraphBatch::new(&graphs, dim, edge_dim, dev)?;
    let qd = examples.first().map_or(0, |e| e.question.len());
    let q: Vec<f32> = examples.iter().flat_map(|e| e.question.iter().copied()).collect();
    Ok((g, Tensor::from_data(TensorData::new(q, [examples.len(), qd]), dev)))
}

/// The loss of a batch (a scalar tensor) and how many examples it counts; `None` when no example of
/// the batch has a target to learn from.
fn loss_of(model: &GraphQa, examples: &[&QaExample], g: &GraphBatch, q: Tensor<2>) -> Option<Tensor<1>> {
    let logits = model.forward(g, q);
    loss_from(logits, model.nodes_head == 1, examples, g)
}

/// The loss of a batch's logits (see [`loss_of`]): class logits `[G, classes]` or node scores `[N, 1]`.
pub(crate) fn loss_from(logits: Tensor<2>, nodes_head: bool, examples: &[&QaExample], g: &GraphBatch) -> Option<Tensor<1>> {
    let dev = logits.device();
    if !nodes_head {
        let classes = logits.dims()[1];
        let rows: Vec<u32> = (0..examples.len() as u32)
            .filter(|&i| matches!(examples[i as usize].target, Target::Class(c) if (c as usize) < classes))
            .collect();
        if rows.is_empty() {
            return None;
        }
        let mut onehot = vec![0f32; rows.len() * classes];
        for (r, &i) in rows.iter().enumerate() {
            if let Target::Class(c) = examples[i as usize].target {
                onehot[r * classes + c as usize] = 1.0;
            }
        }
        let lp = log_softmax(logits.select(0, ints(&rows, &dev)), 1);
        let onehot = Tensor::<2>::from_data(TensorData::new(onehot, [rows.len(), classes]), &dev);
        return Some((lp * onehot).sum().mul_scalar(-1.0 / rows.len() as f64));
    }
    // Node scoring: −log of the softmax mass on the answers, per graph with an answer node.
    let p = segment_softmax(logits, g.node_graph.clone(), g.n_graphs);
    let mut mask = vec![0f32; g.n_nodes];
    let mut with_answer = vec![false; g.n_graphs];
    for (gi, e) in examples.iter().enumerate() {
        if let Target::Nodes(a) = &e.target {
            for &v in a {
                if (v as usize) < e.n {
                    mask[g.offsets[gi] + v as usize] = 1.0;
                    with_answer[gi] = true;
                }
            }
        }
    }
    let used: Vec<u32> = (0..g.n_graphs as u32).filter(|&i| with_answer[i as usize]).collect();
    if used.is_empty() {
        return None;
    }
    let mask = Tensor::<2>::from_data(TensorData::new(mask, [g.n_nodes, 1]), &dev);
    let mass = crate::gnn::encoders::scatter_sum(p * mask, g.node_graph.clone(), g.n_graphs).select(0, ints(&used, &dev));
    Some(mass.clamp_min(1e-12).log().sum().mul_scalar(-1.0 / used.len() as f64))
}

/// Predictions of `model` (of shape `shape`, on the inner device `dev`): class indices, or the
/// top node of each graph. On the CPU the host engine predicts (`host`), elsewhere burn.
pub fn predict(
    model: &GraphQa,
    shape: &QaShape,
    examples: &[QaExample],
    dim: usize,
    edge_dim: usize,
    batch: usize,
    dev: &Device,
) -> Result<Vec<u32>> {
    if crate::device::host_engine(dev) {
        return host::predict(model, shape, examples, dim, edge_dim, batch);
    }
    predict_burn(model, examples, dim, edge_dim, batch, dev)
}

/// [`predict`] on burn.
fn predict_burn(model: &GraphQa, examples: &[QaExample], dim: usize, edge_dim: usize, batch: usize, dev: &Device) -> Result<Vec<u32>> {
    let mut out = Vec::with_capacity(examples.len());
    for chunk in examples.chunks(batch.max(1)) {
        let refs: Vec<&QaExample> = chunk.iter().collect();
        let (g, q) = batch_of(&refs, dim, edge_dim, dev)?;
        let logits = floats(model.forward(&g, q))?;
        out.extend(picks(model.nodes_head != 0, &logits, &g.offsets, &g.counts));
    }
    Ok(out)
}

/// Each graph's prediction from a batch's logits (`graphs × classes`, or one per node with
/// `nodes`): the class, or the graph's top node (ties: the first); graphs given by their node
/// offsets and counts.
pub(crate) fn picks(nodes: bool, logits: &[f32], offsets: &[usize], counts: &[usize]) -> Vec<u32> {
    if nodes {
        offsets.iter().zip(counts).map(|(&o, &c)| argmax(&logits[o..o + c])).collect()
    } else {
        let classes = logits.len() / offsets.len().max(1);
        logits.chunks(classes.max(1)).map(argmax).collect()
    }
}

/// Whether a prediction is right.
pub fn correct(e: &QaExample, pred: u32) -> bool {
    match &e.target {
        Target::Class(c) => *c == pred,
        Target::Nodes(a) => a.contains(&pred),
    }
}

/// Validation loss and metric (accuracy, or hit@1 of the top node).
fn evaluate(model: &GraphQa, examples: &[QaExample], dim: usize, edge_dim: usize, batch: usize, dev: &Device) -> Result<(f64, f64)> {
    if examples.is_empty() {
        return Ok((0.0, 0.0));
    }
    let mut loss = (0.0, 0usize);
    for chunk in examples.chunks(batch.max(1)) {
        let refs: Vec<&QaExample> = chunk.iter().collect();
        let (g, q) = batch_of(&refs, dim, edge_dim, dev)?;
        if let Some(l) = loss_of(model, &refs, &g, q) {
            loss.0 += f64::from(l.into_scalar::<f32>()) * chunk.len() as f64;
            loss.1 += chunk.len();
        }
    }
    let pred = predict_burn(model, examples, dim, edge_dim, batch, dev)?;
    let hits = examples.iter().zip(&pred).filter(|(e, p)| correct(e, **p)).count();
    Ok((loss.0 / loss.1.max(1) as f64, hits as f64 / examples.len() as f64))
}

/// Trains a model on `train`, keeping the epoch with the best metric on `val`; returns it (on the
/// inner device of `dev`), its curve and the kept epoch. The CPU trains on the host engine
/// (`host`: a hand-written backward pass), a GPU on burn ([`train_on`] chooses explicitly).
pub fn train(
    shape: QaShape,
    train: &[QaExample],
    val: &[QaExample],
    dim: usize,
    edge_dim: usize,
    cfg: &QaConfig,
    dev: &Device,
) -> Result<(GraphQa, Vec<QaEpoch>, u32)> {
    train_on(lm::host_engine(dev), shape, train, val, dim, edge_dim, cfg, dev)
}

/// [`train`] on the host engine (`host`) or on burn's autodiff.
#[allow(clippy::too_many_arguments)]
pub fn train_on(
    host: bool,
    shape: QaShape,
    train: &[QaExample],
    val: &[QaExample],
    dim: usize,
    edge_dim: usize,
    cfg: &QaConfig,
    dev: &Device,
) -> Result<(GraphQa, Vec<QaEpoch>, u32)> {
    if host {
        return host::train(shape, train, val, dim, edge_dim, cfg, dev);
    }
    train_burn(shape, train, val, dim, edge_dim, cfg, dev)
}

/// Seconds of each of `steps` optimiser steps (after one warm-up step) of a model of `shape` on
/// consecutive batches of `cfg.train.batch` of `examples` (`make bench`): the host engine (`host`)
/// or burn's autodiff on `dev`.
#[allow(clippy::too_many_arguments)]
pub fn step_times(
    host: bool,
    shape: QaShape,
    examples: &[QaExample],
    dim: usize,
    edge_dim: usize,
    cfg: &QaConfig,
    steps: usize,
    dev: &Device,
) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(steps);
    run_steps(host, shape, examples, (dim, edge_dim), cfg, steps + 1, dev, &mut |i, _, secs| {
        if i > 0 {
            times.push(secs);
        }
    })?;
    Ok(times)
}

/// `steps` optimiser steps on the batches [`step_times`] times, on the CPU: each step's loss
/// (`NaN` for a batch without a target) and the model after them (what the engine prototype
/// compares with).
pub fn train_steps(
    host: bool,
    shape: QaShape,
    examples: &[QaExample],
    dim: usize,
    edge_dim: usize,
    cfg: &QaConfig,
    steps: usize,
) -> Result<(Vec<f64>, GraphQa)> {
    let mut losses = Vec::with_capacity(steps);
    let model = run_steps(host, shape, examples, (dim, edge_dim), cfg, steps, &Device::flex(), &mut |_, loss, _| {
        losses.push(loss.unwrap_or(f64::NAN))
    })?;
    Ok((losses, model))
}

/// What a step reports: its index, its loss (`None`: no target in the batch), its seconds.
pub type EachStep<'a> = &'a mut (dyn FnMut(usize, Option<f64>, f64) + Send);

/// `steps` optimiser steps on consecutive batches of `examples`, each reported to `each` (the
/// seconds of batch building, forward, loss, backward and the optimiser); the model after them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_steps(
    host: bool,
    shape: QaShape,
    examples: &[QaExample],
    (dim, edge_dim): (usize, usize),
    cfg: &QaConfig,
    steps: usize,
    dev: &Device,
    each: EachStep<'_>,
) -> Result<GraphQa> {
    if examples.is_empty() {
        return Err(ModelError::Internal("no example to train on".into()));
    }
    if host {
        return host::run_steps(shape, examples, (dim, edge_dim), cfg, steps, each);
    }
    let ad = dev.clone().autodiff();
    let mut model = GraphQa::new(shape, cfg.seed, &ad)?;
    let mut optim = cfg.train.adamw();
    let batch = cfg.train.batch.max(1);
    for i in 0..steps {
        let refs: Vec<&QaExample> = (0..batch).map(|j| &examples[(i * batch + j) % examples.len()]).collect();
        let t0 = std::time::Instant::now();
        let (g, q) = batch_of(&refs, dim, edge_dim, &ad)?;
        let mut value = None;
        if let Some(loss) = loss_of(&model, &refs, &g, q) {
            value = Some(f64::from(loss.clone().into_scalar::<f32>()));
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(cfg.train.lr, model, grads);
        }
        each(i, value, t0.elapsed().as_secs_f64());
    }
    Ok(model.valid())
}

fn train_burn(
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
    let ad = dev.clone().autodiff();
    let inner = ad.clone().inner();
    let model = GraphQa::new(shape, cfg.seed, &ad)?;
    let mut rng = Stream(cfg.seed ^ 0x7161_7472);
    let mut learner = QaLearner { train, val, dim, edge_dim, lr: t.lr, optim: t.adamw(), ad, inner };
    let f = fit(&t.plan(MODEL, cfg.seed, train.len()), &mut learner, model, &mut rng)?;
    Ok((f.kept, f.curve, f.best_epoch))
}

/// The answer model's training steps and evaluation for [`crate::train::fit`].
struct QaLearner<'a> {
    train: &'a [QaExample],
    val: &'a [QaExample],
    dim: usize,
    edge_dim: usize,
    lr: f64,
    optim: ModuleOptimizer,
    ad: Device,
    inner: Device,
}

impl Learner for QaLearner<'_> {
    type Model = GraphQa;
    type Kept = GraphQa;
    type Row = QaEpoch;

    fn step(&mut self, model: GraphQa, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<GraphQa>> {
        let refs: Vec<&QaExample> = batch.unwrap_or_default().iter().map(|&i| &self.train[i]).collect();
        let (g, q) = batch_of(&refs, self.dim, self.edge_dim, &self.ad)?;
        // A batch without a usable target (no answer node in any graph) teaches nothing.
        let Some(loss) = loss_of(&model, &refs, &g, q) else { return Ok((model, None)) };
        let step = (f64::from(loss.clone().into_scalar::<f32>()), refs.len() as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(self.lr, model, grads), Some(step)))
    }

    fn evaluate(&mut self, model: &GraphQa, epoch: usize, train_loss: f64) -> Result<Evaluation<GraphQa, QaEpoch>> {
        let valid = model.valid();
        let (val_loss, val_metric) = evaluate(&valid, self.val, self.dim, self.edge_dim, 64, &self.inner)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_metric, loss: Some(val_loss) },
            keep: valid,
            row: QaEpoch { epoch: epoch as u32, train_loss, val_loss, val_metric },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gnn::encoders::{EncoderKind, Pooling};

    /// Graphs whose class is told by one edge's feature (a "negation" relation) while the question
    /// embeddings are uninformative: only a model that reads edges can learn it.
    pub(crate) fn planted(n: usize, seed: u64) -> Vec<QaExample> {
        let mut rng = Stream(seed);
        (0..n)
            .map(|i| {
                let class = (i % 2) as u32;
                let nodes = 3 + rng.below(3);
                let x: Vec<f32> = (0..nodes * 4).map(|_| rng.unit() as f32).collect();
                let edges: Vec<(u32, u32)> = (1..nodes as u32).map(|v| (v - 1, v)).collect();
                let mut edge_x = vec![0f32; edges.len() * 2];
                for k in 0..edges.len() {
                    edge_x[k * 2] = 1.0;
                }
                if class == 1 {
                    let k = rng.below(edges.len());
                    edge_x[k * 2] = 0.0;
                    edge_x[k * 2 + 1] = 1.0;
                }
                QaExample { x, n: nodes, edges, edge_x, question: vec![0.5, 0.5], target: Target::Class(class) }
            })
            .collect()
    }

    #[test]
    fn a_graph_transformer_learns_a_rule_carried_by_edges_and_the_question_alone_cannot() {
        let dev = Device::flex();
        let (tr, va) = (planted(160, 1), planted(60, 2));
        let enc = EncoderShape { kind: EncoderKind::Gt, in_dim: 4, edge_dim: 2, hidden: 16, layers: 2, heads: 2, pooling: Pooling::Mean };
        let shape = QaShape { encoder: Some(enc), question_dim: 2, head: HeadKind::Classify { classes: 2 }, head_hidden: 16 };
        let cfg = QaConfig {
            train: TrainConfig { lr: 5e-3, epochs: 25, patience: 25, batch: 16, ..TrainConfig::default() },
            head_hidden: 16,
            ..QaConfig::default()
        };
        let (m, curve, best) = train(shape, &tr, &va, 4, 2, &cfg, &dev).expect("train");
        let kept = curve.iter().find(|c| c.epoch == best).expect("kept epoch").val_metric;
        assert!(kept >= 0.9, "validation accuracy {kept}: {curve:?}");
        assert!(curve.iter().all(|c| c.val_metric <= kept));
        let pred = predict(&m, &shape, &va, 4, 2, 7, &dev.clone().autodiff().inner()).expect("predict");
        let acc = va.iter().zip(&pred).filter(|(e, p)| correct(e, **p)).count() as f64 / va.len() as f64;
        assert!((acc - kept).abs() < 1e-9, "predict agrees with the kept epoch's metric: {acc} vs {kept}");
        // Same seed, same curve.
        let (_, again, _) = train(shape, &tr, &va, 4, 2, &cfg, &dev).expect("train");
        assert_eq!(curve, again);
        // The question alone carries nothing.
        let q_only = QaShape { encoder: None, ..shape };
        let (_, c2, b2) = train(q_only, &tr, &va, 4, 2, &cfg, &dev).expect("train");
        let kept2 = c2.iter().find(|c| c.epoch == b2).expect("kept").val_metric;
        assert!(kept2 <= 0.6, "question-only accuracy {kept2}");
    }

    #[test]
    fn node_scoring_finds_the_marked_answer_node() {
        let dev = Device::flex();
        let mut rng = Stream(9);
        let make = |rng: &mut Stream| {
            let n = 4 + rng.below(4);
            let ans = rng.below(n) as u32;
            let x: Vec<f32> =
                (0..n).flat_map(|v| if v as u32 == ans { [1.0, rng.unit() as f32] } else { [0.0, rng.unit() as f32] }).collect();
            let edges: Vec<(u32, u32)> = (1..n as u32).map(|v| (0, v)).collect();
            let edge_x = vec![1.0; edges.len()];
            QaExample { x, n, edges, edge_x, question: vec![1.0], target: Target::Nodes(vec![ans]) }
        };
        let tr: Vec<QaExample> = (0..80).map(|_| make(&mut rng)).collect();
        let va: Vec<QaExample> = (0..30).map(|_| make(&mut rng)).collect();
        for kind in [EncoderKind::Gcn, EncoderKind::Gat, EncoderKind::Gt2] {
            let enc = EncoderShape { kind, in_dim: 2, edge_dim: 1, hidden: 8, layers: 1, heads: 2, pooling: Pooling::Mean };
            let shape = QaShape { encoder: Some(enc), question_dim: 1, head: HeadKind::Nodes, head_hidden: 8 };
            let cfg = QaConfig {
                train: TrainConfig { lr: 1e-2, epochs: 20, patience: 20, batch: 8, ..TrainConfig::default() },
                head_hidden: 8,
                ..QaConfig::default()
            };
            let (_, curve, best) = train(shape, &tr, &va, 2, 1, &cfg, &dev).expect("train");
            let kept = curve.iter().find(|c| c.epoch == best).expect("kept").val_metric;
            assert!(kept >= 0.9, "{kind:?}: hit@1 {kept}");
        }
        assert!(GraphQa::new(QaShape { encoder: None, question_dim: 1, head: HeadKind::Nodes, head_hidden: 4 }, 0, &dev).is_err());
    }
}
