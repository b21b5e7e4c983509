//! Node classification with a 2-layer GCN, GraphSAGE or MLP (see [`crate::gnn`]).

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::{GnnKind, GraphOps};
use crate::train::{Dense, EpochRow, Evaluation, Learner, Plan, Stepped, Stream, Trained, fit, floats, gnn_evaluation, ints, mask};

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

/// Mean cross-entropy and accuracy of `logits` (row-major, `classes` wide) over `nodes`.
pub(crate) fn loss_and_accuracy(logits: &[f32], classes: usize, labels: &[u32], nodes: &[u32]) -> (f64, f64) {
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

pub(crate) fn check_nodes(n: usize, data: &NodeClassData<'_>) -> Result<()> {
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
pub fn train_node_classifier(
    kind: GnnKind,
    n: usize,
    edges: &[(u32, u32)],
    data: &NodeClassData<'_>,
    cfg: &NodeClassConfig,
    dev: &Device,
) -> Result<Trained> {
    if data.features.len() != n * data.dim || data.labels.len() != n {
        return Err(ModelError::Internal(format!(
            "{} features / {} labels for {n} nodes of width {}",
            data.features.len(),
            data.labels.len(),
            data.dim
        )));
    }
    check_nodes(n, data)?;
    let model_name = format!("{} node classifier", kind.as_str());
    crate::train::check_lr(&model_name, cfg.lr)?;
    let dev = dev.clone().autodiff();
    let mut rng = Stream(cfg.seed ^ 0x6e63);
    let g = GraphOps::new(n, edges, &dev);
    let x: Tensor<2> = Tensor::from_data(TensorData::new(data.features.to_vec(), [n, data.dim]), &dev);
    let model = NodeClassifier::new(kind, data.dim, cfg.hidden, data.classes, &mut rng, &dev);
    let optim = AdamConfig::new().with_epsilon(1e-8).with_weight_decay(Some(WeightDecayConfig::new(cfg.weight_decay))).init();
    let mut onehot = vec![0f32; data.train.len() * data.classes];
    for (r, &v) in data.train.iter().enumerate() {
        onehot[r * data.classes + data.labels[v as usize] as usize] = 1.0;
    }
    let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [data.train.len(), data.classes]), &dev);
    let mut learner = NodeLearner { kind, n, data, cfg, train_idx: ints(data.train, &dev), onehot, gv: g.valid(), g, x, dev, optim };
    let plan = Plan::full_batch(&model_name, cfg.seed, cfg.max_epochs, cfg.patience);
    Trained::from_fitted(fit(&plan, &mut learner, model, &mut rng)?)
}

/// The node classifier's full-batch steps (dropout masks from the run's stream) and evaluation.
struct NodeLearner<'a> {
    kind: GnnKind,
    n: usize,
    data: &'a NodeClassData<'a>,
    cfg: &'a NodeClassConfig,
    g: GraphOps,
    gv: GraphOps,
    x: Tensor<2>,
    train_idx: Tensor<1, Int>,
    onehot: Tensor<2>,
    dev: Device,
    optim: ModuleOptimizer,
}

impl Learner for NodeLearner<'_> {
    type Model = NodeClassifier;
    type Kept = ();
    type Row = EpochRow;

    fn step(&mut self, model: NodeClassifier, _: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<NodeClassifier>> {
        let (cfg, n, dev) = (self.cfg, self.n, &self.dev);
        let masks =
            (cfg.dropout > 0.0).then(|| (mask(n, self.data.dim, cfg.dropout, rng, dev), mask(n, cfg.hidden, cfg.dropout, rng, dev)));
        let logits = model.forward(self.kind, &self.g, self.x.clone(), masks);
        let lp = log_softmax(logits.select(0, self.train_idx.clone()), 1);
        let loss = (lp * self.onehot.clone()).sum().mul_scalar(-1.0 / self.data.train.len() as f64);
        let train_loss = f64::from(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(cfg.lr, model, grads), Some((train_loss, 1.0))))
    }

    fn evaluate(&mut self, model: &NodeClassifier, epoch: usize, train_loss: f64) -> Result<Evaluation<(), EpochRow>> {
        let d = self.data;
        let eval = floats(model.valid().forward(self.kind, &self.gv, self.x.clone().inner(), None))?;
        let (val_loss, val_acc) = loss_and_accuracy(&eval, d.classes, d.labels, d.val);
        let (_, test_acc) = loss_and_accuracy(&eval, d.classes, d.labels, d.test);
        Ok(gnn_evaluation(EpochRow { epoch: epoch as u32, train_loss, val_loss, val_metric: val_acc, test_metric: test_acc }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two communities whose features carry the class: every architecture learns it, training is
    /// deterministic for a seed, and the curve is monotone in epochs with early stopping honoured.
    pub(crate) fn planted(n: usize, noise: f64) -> (Vec<f32>, Vec<u32>, Vec<(u32, u32)>) {
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
        let data =
            NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..60], val: &idx[60..90], test: &idx[90..] };
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
        let data =
            NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..80], val: &idx[80..100], test: &idx[100..] };
        let cfg = NodeClassConfig { max_epochs: 200, patience: 50, ..NodeClassConfig::default() };
        let gcn = train_node_classifier(GnnKind::Gcn, n, &edges, &data, &cfg, &Device::flex()).unwrap();
        let mlp = train_node_classifier(GnnKind::Mlp, n, &edges, &data, &cfg, &Device::flex()).unwrap();
        assert!(gcn.test_metric > 0.85 && mlp.test_metric < 0.65, "gcn {} mlp {}", gcn.test_metric, mlp.test_metric);
    }
}
