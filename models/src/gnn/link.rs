//! Link prediction with a 2-layer GCN encoder and an MLP predictor (see [`crate::gnn`]).

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_sigmoid, relu};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::GraphOps;
use crate::train::{Dense, EpochRow, Evaluation, Learner, Plan, Stepped, Stream, Trained, fit, floats, gnn_evaluation, ints};

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
    crate::train::check_lr("link predictor", cfg.lr)?;
    let dev = dev.clone().autodiff();
    let mut rng = Stream(cfg.seed ^ 0x6c70);
    let g = GraphOps::new(n, data.message, &dev);
    let x: Tensor<2> = Tensor::from_data(TensorData::new(data.features.to_vec(), [n, data.dim]), &dev);
    let h = cfg.hidden;
    let model = LinkModel {
        e1: Dense::new(data.dim, h, &mut rng, &dev),
        e2: Dense::new(h, h, &mut rng, &dev),
        p1: Dense::new(h, h, &mut rng, &dev),
        p2: Dense::new(h, 1, &mut rng, &dev),
    };
    let (pa, pb) = pairs_t(data.message, &dev);
    let inner = dev.clone().inner();
    let eval_sets: Vec<(Tensor<1, Int>, Tensor<1, Int>)> =
        [data.val_pos, data.val_neg, data.test_pos, data.test_neg].iter().map(|p| pairs_t(p, &inner)).collect();
    let optim = AdamConfig::new().with_epsilon(1e-8).init();
    let mut learner = LinkLearner { n, data, cfg, gv: g.valid(), g, x, pa, pb, eval_sets, dev, optim };
    let plan = Plan::full_batch("link predictor", cfg.seed, cfg.max_epochs, cfg.patience);
    Trained::from_fitted(fit(&plan, &mut learner, model, &mut rng)?)
}

/// The link predictor's full-batch steps (one uniform negative pair per training edge, from the
/// run's stream) and evaluation.
struct LinkLearner<'a> {
    n: usize,
    data: &'a LinkPredData<'a>,
    cfg: &'a LinkPredConfig,
    g: GraphOps,
    gv: GraphOps,
    x: Tensor<2>,
    pa: Tensor<1, Int>,
    pb: Tensor<1, Int>,
    eval_sets: Vec<(Tensor<1, Int>, Tensor<1, Int>)>,
    dev: Device,
    optim: ModuleOptimizer,
}

impl Learner for LinkLearner<'_> {
    type Model = LinkModel;
    type Kept = ();
    type Row = EpochRow;

    fn step(&mut self, model: LinkModel, _: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<LinkModel>> {
        let n = self.n;
        let neg: Vec<(u32, u32)> = (0..self.data.message.len()).map(|_| (rng.below(n) as u32, rng.below(n) as u32)).collect();
        let (na, nb) = pairs_t(&neg, &self.dev);
        let hid = model.encode(&self.g, self.x.clone());
        let pos_s = model.score(hid.clone(), self.pa.clone(), self.pb.clone());
        let neg_s = model.score(hid, na, nb);
        // −log σ(pos) − log(1 − σ(neg)) = −log σ(pos) − log σ(−neg)
        let loss = (log_sigmoid(pos_s).mean() + log_sigmoid(neg_s.neg()).mean()).neg();
        let train_loss = f64::from(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(self.cfg.lr, model, grads), Some((train_loss, 1.0))))
    }

    fn evaluate(&mut self, model: &LinkModel, epoch: usize, train_loss: f64) -> Result<Evaluation<(), EpochRow>> {
        let mv = model.valid();
        let hv = mv.encode(&self.gv, self.x.clone().inner());
        let mut scores = Vec::with_capacity(4);
        for (a, b) in &self.eval_sets {
            let s = if a.dims()[0] == 0 { Vec::new() } else { floats(mv.score(hv.clone(), a.clone(), b.clone()))? };
            scores.push(s);
        }
        let bce = |s: &[f32], positive: bool| {
            s.iter()
                .map(|&z| {
                    let z = f64::from(if positive { z } else { -z });
                    // −log σ(z), stable
                    if z > 0.0 { (-z).exp().ln_1p() } else { -z + z.exp().ln_1p() }
                })
                .sum::<f64>()
                / s.len().max(1) as f64
        };
        let val_loss = bce(&scores[0], true) + bce(&scores[1], false);
        let val_metric = hits_at_k(&scores[0], &scores[1], self.cfg.hits_k);
        let test_metric = hits_at_k(&scores[2], &scores[3], self.cfg.hits_k);
        Ok(gnn_evaluation(EpochRow { epoch: epoch as u32, train_loss, val_loss, val_metric, test_metric }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gnn::node::tests::planted;

    #[test]
    fn hits_at_k_by_hand() {
        let neg = [0.9, 0.1, 0.5, 0.3];
        // 2nd highest negative = 0.5: positives strictly above it: 0.6 and 0.95.
        assert_eq!(hits_at_k(&[0.6, 0.5, 0.2, 0.95], &neg, 2), 0.5);
        assert_eq!(hits_at_k(&[0.0], &neg, 5), 1.0);
        assert_eq!(hits_at_k(&[], &neg, 1), 0.0);
    }

    #[test]
    fn link_predictor_learns_a_planted_graph() {
        let n = 120;
        let (x, _, edges) = planted(n, 0.3);
        let (train, test) = edges.split_at(edges.len() * 4 / 5);
        let mut rng = Stream(3);
        // Negatives across the two communities never occur as edges.
        let neg: Vec<(u32, u32)> = (0..200).map(|_| (2 * rng.below(n / 2) as u32, 2 * rng.below(n / 2) as u32 + 1)).collect();
        let data = LinkPredData {
            features: &x,
            dim: 4,
            message: train,
            val_pos: &test[..test.len() / 2],
            val_neg: &neg[..100],
            test_pos: &test[test.len() / 2..],
            test_neg: &neg[100..],
        };
        let cfg = LinkPredConfig { max_epochs: 60, patience: 30, hits_k: 10, hidden: 32, ..LinkPredConfig::default() };
        let a = train_link_predictor(n, &data, &cfg, &Device::flex()).unwrap();
        assert!(a.test_metric > 0.8, "hits@10 {}", a.test_metric);
        let b = train_link_predictor(n, &data, &cfg, &Device::flex()).unwrap();
        assert_eq!(a.curve, b.curve);
    }
}
