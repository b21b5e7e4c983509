//! Restriction extraction for the planner: a span tagger over the query's words (BIO labels per node
//! type) that replaces the restriction text an LLM planner writes. Each word is labelled from
//!
//! * the hashed word ids of a window of `2·window + 1` words around it (one learned table per
//!   offset; bucket 0 is padding),
//! * the shapes of the same words (case, digits, quotes; shape 0 is padding),
//! * the query vector (MiniLM sentence embedding and/or hashed n-grams),
//! * the node types of the query's plan (multi-hot: gold plan in training, the decoded plan at
//!   inference),
//!
//! summed into `hidden`, then ReLU → linear → ReLU → linear → `1 + 2·types` labels (0 = outside,
//! `1 + 2t` = begins a span of type t, `2 + 2t` = inside one). At inference only labels of types in
//! the plan are allowed. Cross-entropy, Adam, seeded batches; the checkpoint is the epoch with the
//! best validation span-token F1. Deterministic for a seed.

use std::path::Path;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::train::{Dense, Evaluation, Learner, Plan, Score, Stepped, Stream, fit, floats, ints};

mod host;

/// The seed of the training batches' stream (both engines).
const BATCH_STREAM: u64 = 0x7461_6762;

/// Number of word shapes (0 = padding).
pub const SHAPES: usize = 11;

/// Sizes of a tagger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggerShape {
    /// Hash buckets of word ids (bucket 0 = padding).
    pub buckets: usize,
    /// Words on each side of the labelled one.
    pub window: usize,
    /// Width of the query vector.
    pub qdim: usize,
    /// Node types that restrictions attach to.
    pub types: usize,
    pub hidden: usize,
}

impl TaggerShape {
    pub fn labels(&self) -> usize {
        1 + 2 * self.types
    }
    fn span(&self) -> usize {
        2 * self.window + 1
    }
}

/// One query to tag: word bucket ids and shapes (same length), the plan's types, gold labels (empty
/// at inference).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sentence {
    pub query: u32,
    pub words: Vec<u32>,
    pub shapes: Vec<u32>,
    pub plan_types: Vec<u32>,
    pub labels: Vec<u32>,
}

/// Query vectors (`n × qdim`) and their sentences.
#[derive(Debug, Clone, Default)]
pub struct TagData {
    pub qdim: usize,
    pub queries: Vec<f32>,
    pub sentences: Vec<Sentence>,
}

/// Hyper-parameters.
#[derive(Debug, Clone)]
pub struct TaggerConfig {
    pub epochs: usize,
    pub batch: usize,
    pub lr: f64,
    pub seed: u64,
}

impl Default for TaggerConfig {
    fn default() -> Self {
        TaggerConfig { epochs: 12, batch: 512, lr: 2e-3, seed: 0 }
    }
}

/// One epoch of the tagger's curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaggerEpoch {
    pub epoch: u32,
    pub train_loss: f64,
    /// Micro F1 of non-outside labels over validation words.
    pub val_f1: f64,
}

#[derive(Module, Debug)]
pub struct Tagger {
    words: Dense,
    shapes: Dense,
    q: Dense,
    plan: Dense,
    h: Dense,
    out: Dense,
}

/// Per-word input rows of a set of sentences.
#[derive(Default)]
struct Rows {
    query: Vec<u32>,
    /// `span` ids per row, offset-major within the row.
    words: Vec<u32>,
    shapes: Vec<u32>,
    plan: Vec<f32>,
    labels: Vec<u32>,
}

fn rows_of(shape: &TaggerShape, sentences: &[&Sentence]) -> Rows {
    let mut r = Rows::default();
    let w = shape.window as isize;
    for s in sentences {
        let mut hot = vec![0f32; shape.types];
        for &t in &s.plan_types {
            if let Some(x) = hot.get_mut(t as usize) {
                *x = 1.0;
            }
        }
        for i in 0..s.words.len() {
            r.query.push(s.query);
            for (k, off) in (-w..=w).enumerate() {
                let j = i as isize + off;
                let (word, sh) = if j >= 0 && (j as usize) < s.words.len() { (s.words[j as usize], s.shapes[j as usize]) } else { (0, 0) };
                r.words.push((k * shape.buckets) as u32 + word.min(shape.buckets as u32 - 1));
                r.shapes.push((k * SHAPES) as u32 + sh.min(SHAPES as u32 - 1));
            }
            r.plan.extend_from_slice(&hot);
            r.labels.push(s.labels.get(i).copied().unwrap_or(0));
        }
    }
    r
}

impl Tagger {
    pub fn new(shape: TaggerShape, seed: u64, dev: &Device) -> Self {
        let mut rng = Stream(seed ^ 0x7461_6767);
        let h = shape.hidden;
        Tagger {
            words: Dense::new(shape.span() * shape.buckets, h, &mut rng, dev),
            shapes: Dense::new(shape.span() * SHAPES, h, &mut rng, dev),
            q: Dense::new(shape.qdim.max(1), h, &mut rng, dev),
            plan: Dense::new(shape.types.max(1), h, &mut rng, dev),
            h: Dense::new(h, h, &mut rng, dev),
            out: Dense::new(h, shape.labels(), &mut rng, dev),
        }
    }

    /// Log-probabilities `[rows, labels]`.
    fn log_probs(&self, shape: &TaggerShape, q_all: &Tensor<2>, r: &Rows, range: &[usize], dev: &Device) -> Tensor<2> {
        let n = range.len();
        let span = shape.span();
        let gather = |v: &[u32], k: usize| range.iter().map(|&i| v[i * span + k]).collect::<Vec<u32>>();
        let mut x = self.q.forward(q_all.clone().select(0, ints(&range.iter().map(|&i| r.query[i]).collect::<Vec<_>>(), dev)));
        for k in 0..span {
            x = x + self.words.rows(ints(&gather(&r.words, k), dev)) + self.shapes.rows(ints(&gather(&r.shapes, k), dev));
        }
        let types = shape.types.max(1);
        let plan: Vec<f32> = range
            .iter()
            .flat_map(|&i| {
                r.plan[i * shape.types..(i + 1) * shape.types].iter().copied().chain(std::iter::repeat_n(0.0, types - shape.types))
            })
            .collect();
        x = x + self.plan.forward(Tensor::from_data(TensorData::new(plan, [n, types]), dev));
        let x = relu(self.h.forward(relu(x)));
        log_softmax(self.out.forward(x), 1)
    }

    const NAMES: [&'static str; 6] = ["words", "shapes", "q", "plan", "h", "out"];

    /// Writes the weights as safetensors.
    pub fn save(&self, path: &Path) -> Result<()> {
        let layers = [&self.words, &self.shapes, &self.q, &self.plan, &self.h, &self.out];
        crate::train::save_layers(path, &Self::NAMES.iter().copied().zip(layers).collect::<Vec<_>>())
    }

    /// Reads weights written by [`Tagger::save`], strictly.
    pub fn load(path: &Path, shape: TaggerShape, dev: &Device) -> Result<Self> {
        let h = shape.hidden;
        let dims = [
            (shape.span() * shape.buckets, h),
            (shape.span() * SHAPES, h),
            (shape.qdim.max(1), h),
            (shape.types.max(1), h),
            (h, h),
            (h, shape.labels()),
        ];
        let spec: Vec<(&str, usize, usize)> = Self::NAMES.iter().zip(dims).map(|(n, (i, o))| (*n, i, o)).collect();
        let mut it = crate::train::load_layers(path, &spec, dev)?.into_iter();
        let mut next = || it.next().ok_or_else(|| ModelError::Internal("tagger layers".into()));
        Ok(Tagger { words: next()?, shapes: next()?, q: next()?, plan: next()?, h: next()?, out: next()? })
    }

    /// Labels per word of every sentence: the most likely *valid* BIO sequence (Viterbi; an
    /// inside label only continues a span of its type), over the labels of the sentence's plan
    /// types only. Ties go to the lowest label. On the CPU the host engine computes the
    /// log-probabilities, burn elsewhere.
    pub fn predict(&self, shape: &TaggerShape, data: &TagData, dev: &Device) -> Result<Vec<Vec<u32>>> {
        if crate::device::host_engine(dev) {
            return host::HostTagger::from_burn(self, *shape)?.predict(data);
        }
        self.predict_burn(shape, data, dev)
    }

    /// [`Tagger::predict`] on burn, whatever the device.
    pub(crate) fn predict_burn(&self, shape: &TaggerShape, data: &TagData, dev: &Device) -> Result<Vec<Vec<u32>>> {
        let q_all: Tensor<2> =
            Tensor::from_data(TensorData::new(data.queries.clone(), [data.queries.len() / data.qdim.max(1), data.qdim.max(1)]), dev);
        predict_with(shape, data, |r, chunk| floats(self.log_probs(shape, &q_all, r, chunk, dev)))
    }
}

/// [`Tagger::predict`] with the log-probabilities of rows given by `log_probs` (one engine's), in
/// passes of 4,096 rows, then each sentence's Viterbi labels over the labels of its plan's types.
fn predict_with(
    shape: &TaggerShape,
    data: &TagData,
    mut log_probs: impl FnMut(&Rows, &[usize]) -> Result<Vec<f32>>,
) -> Result<Vec<Vec<u32>>> {
    let refs: Vec<&Sentence> = data.sentences.iter().collect();
    let r = rows_of(shape, &refs);
    let labels = shape.labels();
    let idx: Vec<usize> = (0..r.query.len()).collect();
    let mut lp_all: Vec<f32> = Vec::with_capacity(idx.len() * labels);
    for chunk in idx.chunks(4096) {
        lp_all.extend(log_probs(&r, chunk)?);
    }
    let mut out: Vec<Vec<u32>> = Vec::with_capacity(data.sentences.len());
    let mut at = 0;
    for s in &data.sentences {
        let n = s.words.len();
        let allowed: Vec<bool> =
            (0..labels).map(|l| l == 0 || r.plan.get(at * shape.types + (l - 1) / 2).is_some_and(|&x| x > 0.0)).collect();
        out.push(viterbi(&lp_all[at * labels..(at + n) * labels], labels, &allowed));
        at += n;
    }
    Ok(out)
}

/// Best valid BIO sequence for per-word log-probabilities (`n × labels`): label `2 + 2t` (inside)
/// may only follow `1 + 2t` or `2 + 2t`; labels with `allowed[l] == false` are never used.
pub fn viterbi(lp: &[f32], labels: usize, allowed: &[bool]) -> Vec<u32> {
    let n = lp.len() / labels.max(1);
    if n == 0 {
        return Vec::new();
    }
    let ok_after = |prev: Option<usize>, l: usize| -> bool {
        if !allowed[l] {
            return false;
        }
        if l == 0 || l % 2 == 1 {
            return true;
        }
        prev.is_some_and(|p| p != 0 && (p - 1) / 2 == (l - 1) / 2)
    };
    let mut score: Vec<f64> = (0..labels).map(|l| if ok_after(None, l) { f64::from(lp[l]) } else { f64::NEG_INFINITY }).collect();
    let mut back: Vec<Vec<u32>> = Vec::with_capacity(n);
    for i in 1..n {
        let mut next = vec![f64::NEG_INFINITY; labels];
        let mut from = vec![0u32; labels];
        for l in 0..labels {
            for (p, &sp) in score.iter().enumerate() {
                if sp == f64::NEG_INFINITY || !ok_after(Some(p), l) {
                    continue;
                }
                let v = sp + f64::from(lp[i * labels + l]);
                if v > next[l] {
                    next[l] = v;
                    from[l] = p as u32;
                }
            }
        }
        back.push(from);
        score = next;
    }
    let mut best = (0..labels).fold(0, |b, l| if score[l] > score[b] { l } else { b }) as u32;
    let mut path = vec![best];
    for from in back.iter().rev() {
        best = from[best as usize];
        path.push(best);
    }
    path.reverse();
    path
}

/// Micro F1 of the non-outside labels of `pred` against `gold`.
pub fn label_f1(pred: &[Vec<u32>], gold: &[Vec<u32>]) -> f64 {
    let (mut tp, mut np, mut ng) = (0usize, 0usize, 0usize);
    for (p, g) in pred.iter().zip(gold) {
        for (a, b) in p.iter().zip(g) {
            np += usize::from(*a != 0);
            ng += usize::from(*b != 0);
            tp += usize::from(*a != 0 && a == b);
        }
    }
    if np + ng == 0 { 1.0 } else { 2.0 * tp as f64 / (np + ng) as f64 }
}

/// Trains a tagger; returns the best-validation model, the curve and the kept epoch. On the CPU
/// the host engine trains it, burn's autodiff elsewhere (same batches, same steps).
pub fn train_tagger(
    shape: TaggerShape,
    train: &TagData,
    val: &TagData,
    cfg: &TaggerConfig,
    dev: &Device,
) -> Result<(Tagger, Vec<TaggerEpoch>, u32)> {
    let r = checked_rows(shape, train, val, cfg)?;
    if crate::device::host_engine(dev) {
        host::train(shape, r, train, val, cfg, dev)
    } else {
        train_rows_burn(shape, r, train, val, cfg, dev)
    }
}

/// The training rows, after refusing what cannot train (bad rate, ragged sentences, labels
/// outside the shape, no words).
fn checked_rows(shape: TaggerShape, train: &TagData, val: &TagData, cfg: &TaggerConfig) -> Result<Rows> {
    crate::train::check_lr("tagger", cfg.lr)?;
    if let Some(s) =
        train.sentences.iter().chain(&val.sentences).find(|s| s.words.len() != s.shapes.len() || s.labels.len() != s.words.len())
    {
        return Err(ModelError::Internal(format!(
            "tagger sentence of query {} has {} words, {} shapes, {} labels",
            s.query,
            s.words.len(),
            s.shapes.len(),
            s.labels.len()
        )));
    }
    if let Some(l) = train.sentences.iter().flat_map(|s| s.labels.iter()).find(|&&l| l as usize >= shape.labels()) {
        return Err(ModelError::Internal(format!("label {l} outside the {} labels", shape.labels())));
    }
    if shape.hidden == 0 || shape.buckets == 0 {
        return Err(ModelError::Internal("tagger: zero hidden width or hash buckets".into()));
    }
    let refs: Vec<&Sentence> = train.sentences.iter().collect();
    let r = rows_of(&shape, &refs);
    if r.query.is_empty() {
        return Err(ModelError::Internal("no words to train the tagger on".into()));
    }
    Ok(r)
}

/// [`train_tagger`] on burn's autodiff, whatever the device.
#[cfg(test)]
pub(crate) fn train_burn(
    shape: TaggerShape,
    train: &TagData,
    val: &TagData,
    cfg: &TaggerConfig,
    dev: &Device,
) -> Result<(Tagger, Vec<TaggerEpoch>, u32)> {
    let r = checked_rows(shape, train, val, cfg)?;
    train_rows_burn(shape, r, train, val, cfg, dev)
}

fn train_rows_burn(
    shape: TaggerShape,
    r: Rows,
    train: &TagData,
    val: &TagData,
    cfg: &TaggerConfig,
    dev: &Device,
) -> Result<(Tagger, Vec<TaggerEpoch>, u32)> {
    let ad = dev.clone().autodiff();
    let mut rng = Stream(cfg.seed ^ BATCH_STREAM);
    let model = Tagger::new(shape, cfg.seed, &ad);
    let q_all: Tensor<2> =
        Tensor::from_data(TensorData::new(train.queries.clone(), [train.queries.len() / train.qdim.max(1), train.qdim.max(1)]), &ad);
    let items = r.query.len();
    let gold: Vec<Vec<u32>> = val.sentences.iter().map(|s| s.labels.clone()).collect();
    let mut learner = TaggerLearner { shape, val, cfg, dev, ad, optim: AdamConfig::new().with_epsilon(1e-8).init(), q_all, rows: r, gold };
    let plan = Plan::every_epoch("tagger", cfg.seed, cfg.epochs, items, cfg.batch);
    let f = fit(&plan, &mut learner, model, &mut rng)?;
    Ok((f.kept, f.curve, f.best_epoch))
}

/// The tagger's training steps and evaluation for [`crate::train::fit`].
struct TaggerLearner<'a> {
    shape: TaggerShape,
    val: &'a TagData,
    cfg: &'a TaggerConfig,
    dev: &'a Device,
    ad: Device,
    optim: ModuleOptimizer,
    q_all: Tensor<2>,
    rows: Rows,
    gold: Vec<Vec<u32>>,
}

impl Learner for TaggerLearner<'_> {
    type Model = Tagger;
    type Kept = Tagger;
    type Row = TaggerEpoch;

    fn step(&mut self, model: Tagger, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<Tagger>> {
        let chunk = batch.unwrap_or_default();
        let labels = self.shape.labels();
        let lp = model.log_probs(&self.shape, &self.q_all, &self.rows, chunk, &self.ad);
        let mut onehot = vec![0f32; chunk.len() * labels];
        for (row, &i) in chunk.iter().enumerate() {
            onehot[row * labels + self.rows.labels[i] as usize] = 1.0;
        }
        let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [chunk.len(), labels]), &self.ad);
        let loss = (lp * onehot).sum().mul_scalar(-1.0 / chunk.len() as f64);
        let step = (f64::from(loss.clone().into_scalar::<f32>()), chunk.len() as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(self.cfg.lr, model, grads), Some(step)))
    }

    fn evaluate(&mut self, model: &Tagger, epoch: usize, train_loss: f64) -> Result<Evaluation<Tagger, TaggerEpoch>> {
        let valid = model.valid();
        let val_f1 = label_f1(&valid.predict_burn(&self.shape, self.val, self.dev)?, &self.gold);
        // No validation loss: an equal F1 keeps the earlier epoch.
        Ok(Evaluation {
            score: Score::Validated { metric: val_f1, loss: None },
            keep: valid,
            row: TaggerEpoch { epoch: epoch as u32, train_loss, val_f1 },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Sentences of random filler words where a span starts after the trigger word 7 ("from") and
    /// runs over the capitalised words that follow; its type is type 1 when the plan holds type 1,
    /// else type 0.
    pub(crate) fn planted(n: usize, seed: u64) -> TagData {
        let mut rng = Stream(seed);
        let mut d = TagData { qdim: 2, ..Default::default() };
        for q in 0..n {
            let mut s = Sentence { query: q as u32, ..Default::default() };
            let t = (q % 2) as u32;
            s.plan_types = vec![t];
            let len = 6 + rng.below(6);
            let at = 1 + rng.below(len - 4);
            for i in 0..len {
                let (w, sh, l) = if i == at {
                    (7, 1, 0)
                } else if i == at + 1 {
                    (20 + rng.below(30) as u32, 2, 1 + 2 * t)
                } else if i == at + 2 {
                    (20 + rng.below(30) as u32, 2, 2 + 2 * t)
                } else {
                    (8 + rng.below(10) as u32, 1, 0)
                };
                s.words.push(w);
                s.shapes.push(sh);
                s.labels.push(l);
            }
            d.queries.extend([1.0, t as f32]);
            d.sentences.push(s);
        }
        d
    }

    #[test]
    fn learns_planted_spans_and_types_deterministically_and_round_trips() -> Result<()> {
        let dev = crate::DeviceChoice::Cpu.device();
        let (train, val) = (planted(200, 1), planted(60, 2));
        let shape = TaggerShape { buckets: 64, window: 2, qdim: 2, types: 2, hidden: 32 };
        let cfg = TaggerConfig { epochs: 15, batch: 64, lr: 5e-3, seed: 4 };
        let (m, curve, _) = train_tagger(shape, &train, &val, &cfg, &dev)?;
        let gold: Vec<Vec<u32>> = val.sentences.iter().map(|s| s.labels.clone()).collect();
        let pred = m.predict(&shape, &val, &dev)?;
        assert!(label_f1(&pred, &gold) > 0.97, "{curve:?}");
        // Only plan types are ever predicted.
        for (p, s) in pred.iter().zip(&val.sentences) {
            assert!(p.iter().all(|&l| l == 0 || (l - 1) / 2 == s.plan_types[0]), "{p:?} {:?}", s.plan_types);
        }
        let (_, curve2, _) = train_tagger(shape, &train, &val, &cfg, &dev)?;
        assert_eq!(curve, curve2);
        let dir = tempfile::tempdir().map_err(|e| ModelError::Internal(e.to_string()))?;
        let p = dir.path().join("tagger.safetensors");
        m.save(&p)?;
        assert_eq!(Tagger::load(&p, shape, &dev)?.predict(&shape, &val, &dev)?, pred);
        assert!(Tagger::load(&p, TaggerShape { types: 3, ..shape }, &dev).is_err());
        Ok(())
    }

    #[test]
    fn viterbi_keeps_spans_valid_against_brute_force() {
        // 3 labels (O, B-0, I-0) plus type 1 (B-1, I-1): every sequence of length ≤ 4, enumerated.
        let labels = 5;
        let mut rng = Stream(9);
        for n in 1..=4usize {
            for _ in 0..20 {
                let lp: Vec<f32> = (0..n * labels).map(|_| (rng.unit() as f32).ln()).collect();
                let allowed = [true, true, true, rng.unit() < 0.5, true];
                let allowed = [allowed[0], allowed[1], allowed[2], allowed[3], allowed[3]];
                let valid = |seq: &[usize]| {
                    seq.iter().enumerate().all(|(i, &l)| {
                        allowed[l] && (l == 0 || l % 2 == 1 || (i > 0 && seq[i - 1] != 0 && (seq[i - 1] - 1) / 2 == (l - 1) / 2))
                    })
                };
                let mut best: Option<(f64, Vec<usize>)> = None;
                for code in 0..labels.pow(n as u32) {
                    let seq: Vec<usize> = (0..n).map(|i| code / labels.pow(i as u32) % labels).collect();
                    if !valid(&seq) {
                        continue;
                    }
                    let sc: f64 = seq.iter().enumerate().map(|(i, &l)| f64::from(lp[i * labels + l])).sum();
                    if best.as_ref().is_none_or(|(b, _)| sc > *b) {
                        best = Some((sc, seq));
                    }
                }
                let (want, _) = best.expect("O…O is always valid");
                let got = viterbi(&lp, labels, &allowed);
                let got_u: Vec<usize> = got.iter().map(|&x| x as usize).collect();
                assert!(valid(&got_u), "{got:?}");
                let sc: f64 = got_u.iter().enumerate().map(|(i, &l)| f64::from(lp[i * labels + l])).sum();
                assert!((sc - want).abs() < 1e-9, "{sc} vs {want}");
            }
        }
    }

    #[test]
    fn label_f1_by_hand() {
        // pred: 1 right of 2 predicted; gold 3 non-outside → 2·1/(2+3).
        assert!((label_f1(&[vec![0, 1, 2, 0]], &[vec![1, 1, 0, 2]]) - 0.4).abs() < 1e-12);
        assert_eq!(label_f1(&[vec![0, 0]], &[vec![0, 0]]), 1.0);
    }
}
