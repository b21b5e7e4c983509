//! MoR's structure-aware reranker (paper §3.3 and appendix): a candidate's trajectory becomes
//! * a textual fingerprint (TF): the BM25 scores of the last three nodes of its path (left-padded
//!   with 0) and its dense score → linear → 256;
//! * a structural fingerprint (SF): the node types of the last three path nodes (left-padded with a
//!   padding type) → type + position embeddings (64) → a one-layer, one-head transformer encoder
//!   (self-attention and a 128-wide feed-forward block, both residual) → concatenated → linear → 256.
//!   MoR encodes the type names with a 768-wide pretrained transformer; ours learns its type
//!   embeddings from scratch (the types are a closed set);
//! * a traversal identifier (TI): per path position, a learned 256-vector for padding / textual
//!   matching / structural traversal, concatenated (3 × 256);
//!
//! concatenated to 1280 → linear 256 → ReLU → linear → score (the paper's head), or MoR's released
//! head (linear 1280 → 1 → linear 1 → 1, [`Head::Released`]). Trained with softmax cross-entropy
//! over one positive and `negatives` sampled negatives per query (seeded), Adam; the checkpoint is
//! the epoch with the best validation hit@1. The CPU trains it on host buffers (`host`: forward
//! and backward written out, tested against burn's autodiff); a GPU on burn.

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, relu, softmax};
use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::train::{Dense, Evaluation, Fitted, Learner, Plan, Score, Stepped, Stream, fit, floats, ints};

pub(crate) mod host;

/// Trajectory features of one candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trajectory {
    /// BM25 of the last three path nodes (left-padded with 0), then the dense score.
    pub tf: [f32; 4],
    /// Types of the last three path nodes, 1-based (0 = padding).
    pub sf: [u32; 3],
    /// 0 = padding, 1 = textual matching, 2 = structural traversal.
    pub ti: [u32; 3],
}

/// Which features the reranker sees (feature ablations zero the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    pub tf: bool,
    pub sf: bool,
    pub ti: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features { tf: true, sf: true, ti: true }
    }
}

#[derive(Module, Debug)]
pub struct Reranker {
    tf: Dense,
    sf_emb: Dense,
    sf_pos: Dense,
    att_q: Dense,
    att_k: Dense,
    att_v: Dense,
    ff1: Dense,
    ff2: Dense,
    sf: Dense,
    ti_emb: Dense,
    h: Dense,
    out: Dense,
}

/// The scoring head on the 1280-wide concatenation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Head {
    /// The paper's: linear 256 → ReLU → linear 1.
    #[default]
    Paper,
    /// MoR's released code: linear 1 → linear 1.
    Released,
}

/// Hyper-parameters.
#[derive(Debug, Clone)]
pub struct RerankerConfig {
    pub head: Head,
    pub epochs: usize,
    pub negatives: usize,
    pub batch: usize,
    pub lr: f64,
    pub seed: u64,
}

impl Default for RerankerConfig {
    fn default() -> Self {
        RerankerConfig { head: Head::Paper, epochs: 20, negatives: 15, batch: 32, lr: 1e-3, seed: 0 }
    }
}

/// One query's candidates and which of them are answers.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub candidates: Vec<Trajectory>,
    pub positive: Vec<bool>,
}

/// One epoch of the reranker's curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RerankerEpoch {
    pub epoch: u32,
    pub train_loss: f64,
    pub val_hit1: f64,
}

impl Reranker {
    pub fn new(n_types: usize, head: Head, seed: u64, dev: &Device) -> Self {
        let mut rng = Stream(seed ^ 0x7265_726b);
        let hidden = if head == Head::Paper { 256 } else { 1 };
        Reranker {
            tf: Dense::new(4, 256, &mut rng, dev),
            sf_emb: Dense::new(n_types + 1, 64, &mut rng, dev),
            sf_pos: Dense::new(3, 64, &mut rng, dev),
            att_q: Dense::new(64, 64, &mut rng, dev),
            att_k: Dense::new(64, 64, &mut rng, dev),
            att_v: Dense::new(64, 64, &mut rng, dev),
            ff1: Dense::new(64, 128, &mut rng, dev),
            ff2: Dense::new(128, 64, &mut rng, dev),
            sf: Dense::new(3 * 64, 256, &mut rng, dev),
            ti_emb: Dense::new(3, 256, &mut rng, dev),
            h: Dense::new(1280, hidden, &mut rng, dev),
            out: Dense::new(hidden, 1, &mut rng, dev),
        }
    }

    /// The structural fingerprint: types → embeddings + positions → self-attention + feed-forward
    /// (residual) → `[n, 3·64]` → linear 256.
    fn structural(&self, types: [Vec<u32>; 3], dev: &Device) -> Tensor<2> {
        let n = types[0].len();
        // Rows ordered (candidate, position).
        let flat: Vec<u32> = (0..n).flat_map(|i| (0..3).map(move |k| (i, k))).map(|(i, k)| types[k][i]).collect();
        let pos: Vec<u32> = (0..n).flat_map(|_| 0..3u32).collect();
        let x = self.sf_emb.rows(ints(&flat, dev)) + self.sf_pos.rows(ints(&pos, dev));
        let q = self.att_q.forward(x.clone()).reshape([n, 3, 64]);
        let k = self.att_k.forward(x.clone()).reshape([n, 3, 64]);
        let v = self.att_v.forward(x.clone()).reshape([n, 3, 64]);
        let att = softmax(q.matmul(k.swap_dims(1, 2)).div_scalar(8.0), 2);
        let x = x + att.matmul(v).reshape([n * 3, 64]);
        let x = x.clone() + self.ff2.forward(relu(self.ff1.forward(x)));
        relu(self.sf.forward(x.reshape([n, 3 * 64])))
    }

    /// Scores `[rows, 1]`.
    fn forward(&self, rows: &[Trajectory], feats: Features, dev: &Device) -> Tensor<2> {
        let n = rows.len();
        let tf: Vec<f32> = rows.iter().flat_map(|r| if feats.tf { r.tf } else { [0.0; 4] }).collect();
        let tf = relu(self.tf.forward(Tensor::from_data(TensorData::new(tf, [n, 4]), dev)));
        let sf = self.structural(std::array::from_fn(|k| rows.iter().map(|r| if feats.sf { r.sf[k] } else { 0 }).collect()), dev);
        let ti_parts: Vec<Tensor<2>> = (0..3)
            .map(|k| self.ti_emb.rows(ints(&rows.iter().map(|r| if feats.ti { r.ti[k] } else { 0 }).collect::<Vec<_>>(), dev)))
            .collect();
        let x = Tensor::cat([vec![tf, sf], ti_parts].concat(), 1);
        let h = self.h.forward(x);
        // The released head is linear → linear; the paper's has a ReLU between.
        self.out.forward(if self.h.d_out() == 1 { h } else { relu(h) })
    }

    /// Scores of every candidate of `g`, on burn.
    pub fn score(&self, g: &[Trajectory], feats: Features, dev: &Device) -> Result<Vec<f32>> {
        if g.is_empty() {
            return Ok(Vec::new());
        }
        floats(self.forward(g, feats, dev))
    }

    /// A scorer of candidates on `dev`: the host engine on the CPU (the weights copied once),
    /// burn elsewhere.
    pub fn scorer(&self, dev: &Device) -> Result<Scorer<'_>> {
        Ok(Scorer(if crate::device::host_engine(dev) {
            Engine::Host(Box::new(host::HostReranker::from_burn(self)?))
        } else {
            Engine::Burn(self, dev.clone())
        }))
    }
}

/// A trained reranker ready to score candidates ([`Reranker::scorer`]).
#[derive(Debug)]
pub struct Scorer<'a>(Engine<'a>);

#[derive(Debug)]
enum Engine<'a> {
    Host(Box<host::HostReranker>),
    Burn(&'a Reranker, Device),
}

impl Scorer<'_> {
    /// Scores of every candidate of `g`.
    pub fn score(&self, g: &[Trajectory], feats: Features) -> Result<Vec<f32>> {
        match &self.0 {
            Engine::Host(h) => h.score(g, feats),
            Engine::Burn(m, dev) => m.score(g, feats, dev),
        }
    }
}

/// Share of groups whose top-scored candidate (ties: first) is positive.
pub fn hit1(model: &Reranker, groups: &[Group], feats: Features, dev: &Device) -> Result<f64> {
    if groups.is_empty() {
        return Ok(0.0);
    }
    let mut hits = 0usize;
    for g in groups {
        hits += usize::from(top_is_positive(&model.score(&g.candidates, feats, dev)?, &g.positive));
    }
    Ok(hits as f64 / groups.len() as f64)
}

/// Whether the top-scored candidate (ties: the first) is positive.
fn top_is_positive(scores: &[f32], positive: &[bool]) -> bool {
    (0..scores.len()).reduce(|b, k| if scores[k] > scores[b] { k } else { b }).is_some_and(|best| positive[best])
}

/// Trains the reranker; returns the best-validation model, the curve and the kept epoch. On the
/// CPU it trains on the host engine (`host`), elsewhere on burn.
pub fn train_reranker(
    n_types: usize,
    train: &[Group],
    val: &[Group],
    feats: Features,
    cfg: &RerankerConfig,
    dev: &Device,
) -> Result<(Reranker, Vec<RerankerEpoch>, u32)> {
    crate::train::check_lr("reranker", cfg.lr)?;
    let usable: Vec<&Group> =
        train.iter().filter(|g| g.positive.iter().any(|&p| p) && g.positive.iter().filter(|&&p| !p).count() >= cfg.negatives).collect();
    if usable.is_empty() {
        return Err(ModelError::Internal("no training query has both an answer and enough negatives among its candidates".into()));
    }
    if crate::device::host_engine(dev) {
        host::train(n_types, usable, val, feats, cfg, dev)
    } else {
        train_burn(n_types, usable, val, feats, cfg, dev)
    }
}

/// The epochs of either learner over `items` usable groups: seeded batches and negatives (the
/// same stream on both engines), `cfg.epochs`, the kept epoch by validation hit@1.
fn fit_reranker<L: Learner<Row = RerankerEpoch>>(
    learner: &mut L,
    model: L::Model,
    items: usize,
    cfg: &RerankerConfig,
) -> Result<Fitted<L::Kept, RerankerEpoch>> {
    let plan = Plan::every_epoch("reranker", cfg.seed, cfg.epochs, items, cfg.batch);
    fit(&plan, learner, model, &mut Stream(cfg.seed ^ BATCH_STREAM))
}

/// The seed of the batch and negative draws, mixed with the run's seed.
const BATCH_STREAM: u64 = 0x6e65_6773;

/// [`train_reranker`] on burn's autodiff, over the groups it can learn from.
fn train_burn(
    n_types: usize,
    usable: Vec<&Group>,
    val: &[Group],
    feats: Features,
    cfg: &RerankerConfig,
    dev: &Device,
) -> Result<(Reranker, Vec<RerankerEpoch>, u32)> {
    let ad = dev.clone().autodiff();
    let model = Reranker::new(n_types, cfg.head, cfg.seed, &ad);
    let items = usable.len();
    let mut learner = RerankerLearner { usable, val, feats, cfg, dev, ad, optim: AdamConfig::new().with_epsilon(1e-8).init() };
    let f = fit_reranker(&mut learner, model, items, cfg)?;
    Ok((f.kept, f.curve, f.best_epoch))
}

/// The rows of one batch: per group of `chunk`, one positive and `negatives` negatives drawn from
/// the run's stream (the positive first).
fn sample_rows(usable: &[&Group], chunk: &[usize], negatives: usize, rng: &mut Stream) -> Vec<Trajectory> {
    let mut rows = Vec::with_capacity(chunk.len() * (1 + negatives));
    for &gi in chunk {
        let g = usable[gi];
        let pos: Vec<usize> = (0..g.positive.len()).filter(|&k| g.positive[k]).collect();
        let mut neg: Vec<usize> = (0..g.positive.len()).filter(|&k| !g.positive[k]).collect();
        rows.push(g.candidates[pos[rng.below(pos.len())]]);
        for k in 0..negatives {
            let j = k + rng.below(neg.len() - k);
            neg.swap(k, j);
            rows.push(g.candidates[neg[k]]);
        }
    }
    rows
}

/// The reranker's training steps and evaluation for [`crate::train::fit`].
struct RerankerLearner<'a> {
    usable: Vec<&'a Group>,
    val: &'a [Group],
    feats: Features,
    cfg: &'a RerankerConfig,
    dev: &'a Device,
    ad: Device,
    optim: ModuleOptimizer,
}

impl Learner for RerankerLearner<'_> {
    type Model = Reranker;
    type Kept = Reranker;
    type Row = RerankerEpoch;

    /// One positive and `negatives` negatives drawn per group of the batch, from the run's stream.
    fn step(&mut self, model: Reranker, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<Reranker>> {
        let chunk = batch.unwrap_or_default();
        let g_size = 1 + self.cfg.negatives;
        let rows = sample_rows(&self.usable, chunk, self.cfg.negatives, rng);
        let s = model.forward(&rows, self.feats, &self.ad).reshape([chunk.len(), g_size]);
        let lp = log_softmax(s, 1);
        let loss = lp.narrow(1, 0, 1).sum().mul_scalar(-1.0 / chunk.len() as f64);
        let step = (f64::from(loss.clone().into_scalar::<f32>()), chunk.len() as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(self.cfg.lr, model, grads), Some(step)))
    }

    fn evaluate(&mut self, model: &Reranker, epoch: usize, train_loss: f64) -> Result<Evaluation<Reranker, RerankerEpoch>> {
        let valid = model.valid();
        let val_hit1 = hit1(&valid, self.val, self.feats, self.dev)?;
        // No validation loss: an equal hit@1 keeps the earlier epoch.
        Ok(Evaluation {
            score: Score::Validated { metric: val_hit1, loss: None },
            keep: valid,
            row: RerankerEpoch { epoch: epoch as u32, train_loss, val_hit1 },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Answers are the candidates reached structurally through type 2; the text scores are noise.
    /// The reranker must learn the structure; without SF/TI it is no better than chance.
    pub(crate) fn groups(n: usize, seed: u64) -> Vec<Group> {
        let mut rng = Stream(seed);
        (0..n)
            .map(|_| {
                let mut g = Group::default();
                for k in 0..20 {
                    let answer = k % 7 == 3;
                    let mid = if answer { 2 } else { 1 + 2 * rng.below(2) as u32 % 3 };
                    let mid = if !answer && mid == 2 { 3 } else { mid };
                    g.candidates.push(Trajectory {
                        tf: [0.0, rng.unit() as f32, rng.unit() as f32, rng.unit() as f32],
                        sf: [0, mid, 4],
                        ti: [0, 1, if answer { 2 } else { 1 + rng.below(2) as u32 }],
                    });
                    g.positive.push(answer);
                }
                g
            })
            .collect()
    }

    #[test]
    fn learns_structure_over_noisy_text_deterministically() -> Result<()> {
        let dev = crate::DeviceChoice::Cpu.device();
        let (train, val) = (groups(60, 1), groups(30, 2));
        let cfg = RerankerConfig { head: Head::Paper, epochs: 8, negatives: 7, batch: 16, lr: 3e-3, seed: 5 };
        let (m, curve, _) = train_reranker(4, &train, &val, Features::default(), &cfg, &dev)?;
        assert!(hit1(&m, &val, Features::default(), &dev)? >= 0.95, "{curve:?}");
        // Without the structural features it can only use the (misleading) text: far worse.
        let (m2, _, _) = train_reranker(4, &train, &val, Features { tf: true, sf: false, ti: false }, &cfg, &dev)?;
        assert!(hit1(&m2, &val, Features { tf: true, sf: false, ti: false }, &dev)? < 0.8);
        let (_, curve2, _) = train_reranker(4, &train, &val, Features::default(), &cfg, &dev)?;
        assert_eq!(curve, curve2);
        // MoR's released head (linear → linear) learns the same structure.
        let released = RerankerConfig { head: Head::Released, epochs: 12, ..cfg };
        let (m3, curve3, _) = train_reranker(4, &train, &val, Features::default(), &released, &dev)?;
        assert!(hit1(&m3, &val, Features::default(), &dev)? >= 0.9, "{curve3:?}");
        Ok(())
    }
}
