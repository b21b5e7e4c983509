//! The plan generator that replaces MoR's fine-tuned Llama planner and PASemiQA's path generator:
//! an autoregressive decoder over a small token vocabulary (node types, relation/direction hops,
//! the path separator, end of plan), conditioned on the query's MiniLM vector (the mean of its
//! MiniLM token embeddings, i.e. the sentence embedding).
//!
//! Step t predicts token t from the query vector, the two previous tokens, the bag of all earlier
//! tokens (so that a multi-path plan knows which paths it already wrote) and the position:
//! `logits = W_o · relu(W_h · relu(W_q q + E₁[y_{t-1}] + E₂[y_{t-2}] + W_b bag(y_{<t}) + P[t]) + b_h) + b_o`.
//! Training minimises the weighted cross-entropy of the target sequences (weight 1 for MoR plans,
//! PASemiQA's Q(z|q) = 1/|Z*| for relation paths), Adam, seeded mini-batches; the checkpoint is the
//! epoch with the best validation exact match of greedy plans (ties: lower validation loss).
//! Decoding is greedy (ties: lowest token id) or, with [`Planner::best_of`], the most likely whole
//! sequence among a candidate set and the greedy plan; either way a model and a query give one plan.
//! Weights, dropout-free forward and the batch order come from the seed alone: two runs give the
//! same curves and the same plans.

use std::path::Path;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::train::{Dense, Evaluation, Learner, Plan, Score, Stepped, Stream, fit, floats, ints};

mod host;

/// Token 0 starts (and pads) a sequence; token 1 ends it. Real tokens start at 2.
pub const BOS: u32 = 0;
pub const EOS: u32 = 1;

/// Hyper-parameters.
#[derive(Debug, Clone)]
pub struct PlannerConfig {
    pub hidden: usize,
    pub epochs: usize,
    pub batch: usize,
    pub lr: f64,
    /// Longest sequence decoded (tokens, EOS included).
    pub max_len: usize,
    pub seed: u64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig { hidden: 256, epochs: 40, batch: 256, lr: 2e-3, max_len: 16, seed: 0 }
    }
}

/// Training or validation data: query vectors (`n × dim`, row-major) and weighted target
/// sequences `(query row, tokens without BOS/EOS, weight)`.
#[derive(Debug, Clone, Default)]
pub struct SeqData {
    pub dim: usize,
    pub queries: Vec<f32>,
    pub targets: Vec<(u32, Vec<u32>, f32)>,
}

impl SeqData {
    pub fn n_queries(&self) -> usize {
        self.queries.len().checked_div(self.dim).unwrap_or(0)
    }
}

/// One epoch of the training curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerEpoch {
    pub epoch: u32,
    pub train_loss: f64,
    pub val_loss: f64,
    /// Share of validation queries whose greedy plan equals their (first, heaviest) target.
    pub val_exact: f64,
}

/// The decoder.
#[derive(Module, Debug)]
pub struct Planner {
    q: Dense,
    e1: Dense,
    e2: Dense,
    bag: Dense,
    pos: Dense,
    h: Dense,
    out: Dense,
}

/// Shapes of a planner: query width, vocabulary (specials included), hidden width, positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerShape {
    pub dim: usize,
    pub vocab: usize,
    pub hidden: usize,
    pub max_len: usize,
}

impl Planner {
    pub fn new(shape: PlannerShape, seed: u64, dev: &Device) -> Self {
        let mut rng = Stream(seed ^ 0x706c_616e);
        let PlannerShape { dim, vocab, hidden, max_len } = shape;
        Planner {
            q: Dense::new(dim, hidden, &mut rng, dev),
            e1: Dense::new(vocab, hidden, &mut rng, dev),
            e2: Dense::new(vocab, hidden, &mut rng, dev),
            bag: Dense::new(vocab, hidden, &mut rng, dev),
            pos: Dense::new(max_len, hidden, &mut rng, dev),
            h: Dense::new(hidden, hidden, &mut rng, dev),
            out: Dense::new(hidden, vocab, &mut rng, dev),
        }
    }

    /// Log-probabilities `[rows, vocab]` of the next token for rows `(query vector, y_{t-1}, y_{t-2}, t)`.
    fn log_probs(&self, q: Tensor<2>, prev: Tensor<1, Int>, prev2: Tensor<1, Int>, bag: Tensor<2>, pos: Tensor<1, Int>) -> Tensor<2> {
        let x = self.q.forward(q) + self.e1.rows(prev) + self.e2.rows(prev2) + self.bag.forward(bag) + self.pos.rows(pos);
        let x = relu(self.h.forward(relu(x)));
        log_softmax(self.out.forward(x), 1)
    }

    const NAMES: [&'static str; 7] = ["q", "e1", "e2", "bag", "pos", "h", "out"];

    fn layers(&self) -> [&Dense; 7] {
        [&self.q, &self.e1, &self.e2, &self.bag, &self.pos, &self.h, &self.out]
    }

    fn vocab(&self) -> usize {
        self.out.d_out()
    }

    /// Writes the weights as safetensors (`<layer>.weight` `[in, out]`, `<layer>.bias`).
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::train::save_layers(path, &Self::NAMES.iter().copied().zip(self.layers()).collect::<Vec<_>>())
    }

    /// Reads weights written by [`Planner::save`], strictly (every tensor, exact shapes, nothing else).
    pub fn load(path: &Path, shape: PlannerShape, dev: &Device) -> Result<Self> {
        let PlannerShape { dim, vocab, hidden, max_len } = shape;
        let dims = [(dim, hidden), (vocab, hidden), (vocab, hidden), (vocab, hidden), (max_len, hidden), (hidden, hidden), (hidden, vocab)];
        let spec: Vec<(&str, usize, usize)> = Self::NAMES.iter().zip(dims).map(|(n, (i, o))| (*n, i, o)).collect();
        let mut it = crate::train::load_layers(path, &spec, dev)?.into_iter();
        let mut next = || it.next().ok_or_else(|| ModelError::Internal("planner layers".into()));
        Ok(Planner { q: next()?, e1: next()?, e2: next()?, bag: next()?, pos: next()?, h: next()?, out: next()? })
    }

    /// Greedy plans (tokens without BOS/EOS) for `n` query vectors of width `dim`. On the CPU
    /// the host engine decodes (`host`), elsewhere burn.
    pub fn greedy(&self, queries: &[f32], dim: usize, max_len: usize, dev: &Device) -> Result<Vec<Vec<u32>>> {
        if crate::device::host_engine(dev) {
            return host::HostPlanner::from_burn(self)?.greedy(queries, dim, max_len);
        }
        self.greedy_burn(queries, dim, max_len, dev)
    }

    /// [`Planner::greedy`] on burn.
    fn greedy_burn(&self, queries: &[f32], dim: usize, max_len: usize, dev: &Device) -> Result<Vec<Vec<u32>>> {
        let n = queries.len() / dim.max(1);
        let q: Tensor<2> = Tensor::from_data(TensorData::new(queries.to_vec(), [n, dim]), dev);
        let mut seqs: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut done = vec![false; n];
        for t in 0..max_len {
            let prev: Vec<u32> = seqs.iter().map(|s| s.last().copied().unwrap_or(BOS)).collect();
            let prev2: Vec<u32> = seqs.iter().map(|s| if s.len() >= 2 { s[s.len() - 2] } else { BOS }).collect();
            let bag = bags(&seqs.iter().map(Vec::as_slice).collect::<Vec<_>>(), self.vocab(), dev);
            let lp = floats(self.log_probs(q.clone(), ints(&prev, dev), ints(&prev2, dev), bag, ints(&vec![t as u32; n], dev)))?;
            let v = lp.len() / n.max(1);
            for i in 0..n {
                if done[i] {
                    continue;
                }
                let row = &lp[i * v..(i + 1) * v];
                // Never BOS; ties go to the lowest id.
                let best = (1..v).fold(1, |b, k| if row[k] > row[b] { k } else { b }) as u32;
                if best == EOS || t + 1 == max_len {
                    done[i] = true;
                } else {
                    seqs[i].push(best);
                }
            }
            if done.iter().all(|&d| d) {
                break;
            }
        }
        Ok(seqs)
    }

    /// The query-independent part of a step's input, `E₁[y_{t-1}] + E₂[y_{t-2}] + W_b bag + P[t]`.
    fn step_part(&self, prev: Tensor<1, Int>, prev2: Tensor<1, Int>, bag: Tensor<2>, pos: Tensor<1, Int>) -> Tensor<2> {
        self.e1.rows(prev) + self.e2.rows(prev2) + self.bag.forward(bag) + self.pos.rows(pos)
    }

    /// Next-token log-probabilities from a step's full input (query part + step part).
    fn head(&self, x: Tensor<2>) -> Tensor<2> {
        log_softmax(self.out.forward(relu(self.h.forward(relu(x)))), 1)
    }

    /// log P(seq | q) of every candidate sequence for every query: `[n_queries][n_candidates]`.
    ///
    /// Candidates share prefixes, and a step's input depends on the query and the prefix only, so
    /// the next-token distribution is computed once per (query, distinct prefix); queries go in
    /// chunks of about 64k such rows (on burn; the host engine on the CPU, in passes of 8k).
    pub fn sequence_log_probs(&self, queries: &[f32], dim: usize, candidates: &[Vec<u32>], dev: &Device) -> Result<Vec<Vec<f64>>> {
        if crate::device::host_engine(dev) {
            return host::HostPlanner::from_burn(self)?.sequence_log_probs(queries, dim, candidates);
        }
        self.sequence_log_probs_burn(queries, dim, candidates, dev)
    }

    /// [`Planner::sequence_log_probs`] on burn.
    fn sequence_log_probs_burn(&self, queries: &[f32], dim: usize, candidates: &[Vec<u32>], dev: &Device) -> Result<Vec<Vec<f64>>> {
        let n = queries.len() / dim.max(1);
        let mut out = vec![vec![0.0; candidates.len()]; n];
        if n == 0 || candidates.is_empty() {
            return Ok(out);
        }
        let cands = Candidates::new(candidates);
        let prefixes = cands.prefixes();
        let at = |p: &[u32], back: usize| if p.len() >= back { p[p.len() - back] } else { BOS };
        let prev: Vec<u32> = prefixes.iter().map(|p| at(p, 1)).collect();
        let prev2: Vec<u32> = prefixes.iter().map(|p| at(p, 2)).collect();
        let pos: Vec<u32> = prefixes.iter().map(|p| p.len() as u32).collect();
        let base = self.step_part(ints(&prev, dev), ints(&prev2, dev), bags(&prefixes, self.vocab(), dev), ints(&pos, dev));
        let q: Tensor<2> = Tensor::from_data(TensorData::new(queries.to_vec(), [n, dim]), dev);
        let qp = self.q.forward(q);
        let r = prefixes.len();
        let v = self.vocab();
        let chunk = (65_536 / r).clamp(1, n);
        for start in (0..n).step_by(chunk) {
            let b = chunk.min(n - start);
            let owner: Vec<u32> = (start..start + b).flat_map(|i| std::iter::repeat_n(i as u32, r)).collect();
            let lp = floats(self.head(qp.clone().select(0, ints(&owner, dev)) + base.clone().repeat_dim(0, b)))?;
            cands.accumulate(&mut out[start..], &lp, r, v);
        }
        Ok(out)
    }

    /// log P(seqs\[i\] | query i) for one sequence per query.
    pub fn own_log_probs(&self, queries: &[f32], dim: usize, seqs: &[Vec<u32>], dev: &Device) -> Result<Vec<f64>> {
        if crate::device::host_engine(dev) {
            return host::HostPlanner::from_burn(self)?.own_log_probs(queries, dim, seqs);
        }
        self.own_log_probs_burn(queries, dim, seqs, dev)
    }

    /// [`Planner::own_log_probs`] on burn.
    fn own_log_probs_burn(&self, queries: &[f32], dim: usize, seqs: &[Vec<u32>], dev: &Device) -> Result<Vec<f64>> {
        let n = queries.len() / dim.max(1);
        if seqs.len() != n {
            return Err(ModelError::Internal(format!("{} sequences for {n} queries", seqs.len())));
        }
        let mut out = vec![0.0; n];
        if n == 0 {
            return Ok(out);
        }
        let targets: Vec<(u32, Vec<u32>, f32)> = seqs.iter().enumerate().map(|(i, s)| (i as u32, s.clone(), 1.0)).collect();
        let (owner, prev, prev2, pos, target, _) = rows_of(&targets);
        let prefixes = prefixes_of(&targets);
        let bag = bags(&prefixes.iter().map(|(o, t)| &targets[*o].1[..*t]).collect::<Vec<_>>(), self.vocab(), dev);
        let q: Tensor<2> = Tensor::from_data(TensorData::new(queries.to_vec(), [n, dim]), dev);
        let x = self.q.forward(q).select(0, ints(&owner, dev)) + self.step_part(ints(&prev, dev), ints(&prev2, dev), bag, ints(&pos, dev));
        let idx: Tensor<2, Int> = ints(&target, dev).reshape([target.len(), 1]);
        let lp = floats(self.head(x).gather(1, idx))?;
        for (&o, &l) in owner.iter().zip(&lp) {
            out[o as usize] += f64::from(l);
        }
        Ok(out)
    }

    /// Per query, the most likely plan among `candidates` and the query's greedy plan (ties: the
    /// earliest candidate; the greedy plan only when strictly more likely than every candidate).
    /// With no candidates this is [`Planner::greedy`].
    pub fn best_of(&self, queries: &[f32], dim: usize, max_len: usize, candidates: &[Vec<u32>], dev: &Device) -> Result<Vec<Vec<u32>>> {
        if crate::device::host_engine(dev) {
            return host::HostPlanner::from_burn(self)?.best_of(queries, dim, max_len, candidates);
        }
        let greedy = self.greedy_burn(queries, dim, max_len, dev)?;
        if candidates.is_empty() {
            return Ok(greedy);
        }
        let own = self.own_log_probs_burn(queries, dim, &greedy, dev)?;
        let all = self.sequence_log_probs_burn(queries, dim, candidates, dev)?;
        Ok(pick_best(greedy, own, all, candidates))
    }
}

/// Candidate plans taken apart for scoring: their distinct prefixes (BOS-led, in first-seen order)
/// and, per candidate, its (prefix, next token) steps, EOS included.
struct Candidates {
    full: Vec<Vec<u32>>,
    /// Each distinct prefix as (candidate, length) of `full`.
    prefixes: Vec<(usize, usize)>,
    /// (candidate, prefix id, next token).
    steps: Vec<(usize, usize, u32)>,
}

impl Candidates {
    fn new(candidates: &[Vec<u32>]) -> Self {
        let full: Vec<Vec<u32>> = candidates.iter().map(|s| s.iter().copied().chain(std::iter::once(EOS)).collect()).collect();
        let mut prefix_id: std::collections::HashMap<&[u32], usize> = std::collections::HashMap::new();
        let mut prefixes = Vec::new();
        let mut steps = Vec::new();
        for (c, f) in full.iter().enumerate() {
            for t in 0..f.len() {
                let id = *prefix_id.entry(&f[..t]).or_insert_with(|| {
                    prefixes.push((c, t));
                    prefixes.len() - 1
                });
                steps.push((c, id, f[t]));
            }
        }
        drop(prefix_id);
        Candidates { full, prefixes, steps }
    }

    fn prefixes(&self) -> Vec<&[u32]> {
        self.prefixes.iter().map(|&(c, t)| &self.full[c][..t]).collect()
    }

    /// The largest next token of any step (to check against a vocabulary).
    fn max_token(&self) -> Option<u32> {
        self.steps.iter().map(|s| s.2).max()
    }

    /// Adds, for each query of a pass (`lp`: per query, `r` prefix rows of `v` log-probabilities),
    /// every candidate's step log-probabilities to the query's row of `out`.
    fn accumulate(&self, out: &mut [Vec<f64>], lp: &[f32], r: usize, v: usize) {
        for (rows, row) in lp.chunks(r * v).zip(out) {
            for &(c, p, y) in &self.steps {
                row[c] += f64::from(rows[p * v + y as usize]);
            }
        }
    }
}

/// [`Planner::best_of`]'s choice per query from the greedy plans, their log-probabilities and
/// every candidate's.
fn pick_best(greedy: Vec<Vec<u32>>, own: Vec<f64>, all: Vec<Vec<f64>>, candidates: &[Vec<u32>]) -> Vec<Vec<u32>> {
    greedy
        .into_iter()
        .zip(own)
        .zip(all)
        .map(|((g, gl), row)| {
            let (best, bl) = row.iter().enumerate().fold((0, f64::NEG_INFINITY), |(b, bl), (c, &l)| if l > bl { (c, l) } else { (b, bl) });
            if gl > bl { g } else { candidates[best].clone() }
        })
        .collect()
}

/// Per teacher-forcing row (same order as [`rows_of`]): the target index and the prefix length.
fn prefixes_of(targets: &[(u32, Vec<u32>, f32)]) -> Vec<(usize, usize)> {
    targets.iter().enumerate().flat_map(|(i, (_, seq, _))| (0..=seq.len()).map(move |t| (i, t))).collect()
}

/// Multi-hot `[rows, vocab]` of the tokens of each prefix.
fn bags(prefixes: &[&[u32]], vocab: usize, dev: &Device) -> Tensor<2> {
    let mut m = vec![0f32; prefixes.len() * vocab];
    for (r, p) in prefixes.iter().enumerate() {
        for &t in *p {
            if (t as usize) < vocab {
                m[r * vocab + t as usize] = 1.0;
            }
        }
    }
    Tensor::from_data(TensorData::new(m, [prefixes.len(), vocab]), dev)
}

/// Teacher-forcing rows of weighted sequences: (owner, y_{t-1}, y_{t-2}, t, y_t, weight).
#[allow(clippy::type_complexity)]
fn rows_of(targets: &[(u32, Vec<u32>, f32)]) -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<f32>) {
    let mut r: (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<f32>) = Default::default();
    for (owner, seq, w) in targets {
        let full: Vec<u32> = seq.iter().copied().chain(std::iter::once(EOS)).collect();
        for (t, &y) in full.iter().enumerate() {
            r.0.push(*owner);
            r.1.push(if t >= 1 { full[t - 1] } else { BOS });
            r.2.push(if t >= 2 { full[t - 2] } else { BOS });
            r.3.push(t as u32);
            r.4.push(y);
            r.5.push(*w);
        }
    }
    r
}

/// Mean weighted negative log-likelihood per token over `data`, without gradients.
fn eval_loss(model: &Planner, data: &SeqData, dev: &Device) -> Result<f64> {
    if data.targets.is_empty() {
        return Ok(0.0);
    }
    let (owner, prev, prev2, pos, target, w) = rows_of(&data.targets);
    let q: Tensor<2> = Tensor::from_data(TensorData::new(data.queries.clone(), [data.n_queries(), data.dim]), dev);
    let pre = prefixes_of(&data.targets);
    let bag = bags(&pre.iter().map(|(o, t)| &data.targets[*o].1[..*t]).collect::<Vec<_>>(), model.vocab(), dev);
    let lp = floats(model.log_probs(q.select(0, ints(&owner, dev)), ints(&prev, dev), ints(&prev2, dev), bag, ints(&pos, dev)))?;
    let v = lp.len() / target.len();
    let total: f64 = target.iter().enumerate().map(|(r, &t)| -f64::from(lp[r * v + t as usize]) * f64::from(w[r])).sum();
    let wsum: f64 = w.iter().map(|&x| f64::from(x)).sum();
    Ok(total / wsum.max(f64::MIN_POSITIVE))
}

/// Share of queries whose greedy plan equals their heaviest target (first on ties).
pub fn exact_match(model: &Planner, data: &SeqData, max_len: usize, dev: &Device) -> Result<f64> {
    let pred = model.greedy(&data.queries, data.dim, max_len, dev)?;
    Ok(share_matching(data, &pred))
}

/// Share of `data`'s queries whose plan in `pred` equals their heaviest target (first on ties).
fn share_matching(data: &SeqData, pred: &[Vec<u32>]) -> f64 {
    let n = data.n_queries();
    if n == 0 {
        return 0.0;
    }
    let mut gold: Vec<Option<(&Vec<u32>, f32)>> = vec![None; n];
    for (q, s, w) in &data.targets {
        let g = &mut gold[*q as usize];
        if g.is_none_or(|(_, gw)| *w > gw) {
            *g = Some((s, *w));
        }
    }
    let hit = pred.iter().zip(&gold).filter(|(p, g)| g.is_some_and(|(s, _)| s == *p)).count();
    hit as f64 / n as f64
}

/// The planner's training steps and evaluation for [`crate::train::fit`].
struct PlannerLearner<'a> {
    shape: PlannerShape,
    train: &'a SeqData,
    val: &'a SeqData,
    cfg: &'a PlannerConfig,
    dev: &'a Device,
    ad: Device,
    optim: ModuleOptimizer,
    rows: TargetRows,
    prefixes: Vec<(usize, usize)>,
    queries: Tensor<2>,
}

/// One row per (target sequence, position): the query, the two previous tokens, the position,
/// the token to predict and the sequence's weight (see `rows_of`).
type TargetRows = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<f32>);

impl Learner for PlannerLearner<'_> {
    type Model = Planner;
    type Kept = Planner;
    type Row = PlannerEpoch;

    fn step(&mut self, model: Planner, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<Planner>> {
        let (ad, vocab) = (&self.ad, self.shape.vocab);
        let chunk = batch.unwrap_or_default();
        let (owner, prev, prev2, pos, target, w) = &self.rows;
        let pick = |v: &[u32]| chunk.iter().map(|&i| v[i]).collect::<Vec<u32>>();
        let pre = &self.prefixes;
        let bag = bags(&chunk.iter().map(|&i| &self.train.targets[pre[i].0].1[..pre[i].1]).collect::<Vec<_>>(), vocab, ad);
        let lp = model.log_probs(
            self.queries.clone().select(0, ints(&pick(owner), ad)),
            ints(&pick(prev), ad),
            ints(&pick(prev2), ad),
            bag,
            ints(&pick(pos), ad),
        );
        let mut onehot = vec![0f32; chunk.len() * vocab];
        let mut bw = 0.0f32;
        for (r, &i) in chunk.iter().enumerate() {
            onehot[r * vocab + target[i] as usize] = w[i];
            bw += w[i];
        }
        let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [chunk.len(), vocab]), ad);
        let loss = (lp * onehot).sum().mul_scalar(-1.0 / f64::from(bw.max(f32::MIN_POSITIVE)));
        // Weighted by the batch's summed sequence weights: the epoch's loss is the mean weighted
        // NLL per token of its mini-batches (as trained, before each step).
        let step = (f64::from(loss.clone().into_scalar::<f32>()), f64::from(bw));
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(self.cfg.lr, model, grads), Some(step)))
    }

    fn evaluate(&mut self, model: &Planner, epoch: usize, train_loss: f64) -> Result<Evaluation<Planner, PlannerEpoch>> {
        let valid = model.valid();
        let val_loss = eval_loss(&valid, self.val, self.dev)?;
        let val_exact = exact_match(&valid, self.val, self.cfg.max_len, self.dev)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_exact, loss: Some(val_loss) },
            keep: valid,
            row: PlannerEpoch { epoch: epoch as u32, train_loss, val_loss, val_exact },
        })
    }
}

/// Trains a planner; returns the checkpointed (best-validation) model and the curve. On the CPU
/// it trains on the host engine (`host`), elsewhere on burn.
pub fn train_planner(
    shape: PlannerShape,
    train: &SeqData,
    val: &SeqData,
    cfg: &PlannerConfig,
    dev: &Device,
) -> Result<(Planner, Vec<PlannerEpoch>, u32)> {
    crate::train::check_lr("planner", cfg.lr)?;
    let misfit = |d: &SeqData| !d.queries.is_empty() && d.dim != shape.dim;
    if shape.vocab <= EOS as usize || shape.hidden == 0 || shape.dim == 0 || misfit(train) || misfit(val) {
        return Err(ModelError::Internal(format!("planner shape {shape:?} does not fit queries of width {} / {}", train.dim, val.dim)));
    }
    if train.targets.is_empty() {
        return Err(ModelError::Internal("no training sequences for the planner".into()));
    }
    if let Some(bad) = train.targets.iter().chain(&val.targets).flat_map(|t| t.1.iter()).find(|&&t| t as usize >= shape.vocab) {
        return Err(ModelError::Internal(format!("token {bad} outside the vocabulary of {}", shape.vocab)));
    }
    if train.targets.iter().chain(&val.targets).any(|t| t.1.len() + 1 > shape.max_len) {
        return Err(ModelError::Internal(format!("a target is longer than max_len {}", shape.max_len)));
    }
    if crate::device::host_engine(dev) { host::train(shape, train, val, cfg, dev) } else { train_burn(shape, train, val, cfg, dev) }
}

/// The seed of the batch order, mixed with the run's seed (the same stream on both engines).
const BATCH_STREAM: u64 = 0x6261_7463;

/// [`train_planner`] on burn's autodiff.
fn train_burn(
    shape: PlannerShape,
    train: &SeqData,
    val: &SeqData,
    cfg: &PlannerConfig,
    dev: &Device,
) -> Result<(Planner, Vec<PlannerEpoch>, u32)> {
    let ad = dev.clone().autodiff();
    let mut rng = Stream(cfg.seed ^ BATCH_STREAM);
    let model = Planner::new(shape, cfg.seed, &ad);
    let rows = rows_of(&train.targets);
    let items = rows.0.len();
    let queries = Tensor::from_data(TensorData::new(train.queries.clone(), [train.n_queries(), train.dim]), &ad);
    let mut learner = PlannerLearner {
        shape,
        train,
        val,
        cfg,
        dev,
        optim: AdamConfig::new().with_epsilon(1e-8).init(),
        prefixes: prefixes_of(&train.targets),
        rows,
        queries,
        ad,
    };
    let plan = Plan::every_epoch("planner", cfg.seed, cfg.epochs, items, cfg.batch);
    let f = fit(&plan, &mut learner, model, &mut rng)?;
    Ok((f.kept, f.curve, f.best_epoch))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    impl Planner {
        /// The same planner with weights damped toward zero, so that candidates have distinct,
        /// non-degenerate probabilities.
        fn valid_half_trained(&self) -> Planner {
            let scale = |d: &Dense| -> Dense {
                let (w, b) = d.to_host().unwrap_or_default();
                let (i, o) = (w.len() / b.len().max(1), b.len());
                Dense::from_host(
                    w.iter().map(|x| x * 0.3).collect(),
                    b.iter().map(|x| x * 0.3).collect(),
                    i,
                    o,
                    &crate::DeviceChoice::Cpu.device(),
                )
            };
            Planner {
                q: scale(&self.q),
                e1: scale(&self.e1),
                e2: scale(&self.e2),
                bag: scale(&self.bag),
                pos: scale(&self.pos),
                h: scale(&self.h),
                out: scale(&self.out),
            }
        }
    }

    /// log P(seq | q), one `log_probs` call per step (the training-time composition).
    fn brute_log_prob(m: &Planner, q: &[f32], seq: &[u32], dev: &Device) -> Result<f64> {
        let full: Vec<u32> = seq.iter().copied().chain(std::iter::once(EOS)).collect();
        let mut total = 0.0;
        for t in 0..full.len() {
            let prev = if t >= 1 { full[t - 1] } else { BOS };
            let prev2 = if t >= 2 { full[t - 2] } else { BOS };
            let qt: Tensor<2> = Tensor::from_data(TensorData::new(q.to_vec(), [1, q.len()]), dev);
            let lp = floats(m.log_probs(
                qt,
                ints(&[prev], dev),
                ints(&[prev2], dev),
                bags(&[&full[..t]], m.vocab(), dev),
                ints(&[t as u32], dev),
            ))?;
            total += f64::from(lp[full[t] as usize]);
        }
        Ok(total)
    }

    /// Queries are one-hot-ish vectors; the plan to emit is a function of which block is hot.
    pub(crate) fn planted(n: usize, seed: u64) -> SeqData {
        let plans: [&[u32]; 4] = [&[2, 5, 3], &[2, 6, 4, 5, 3], &[3], &[4, 6, 2]];
        let dim = 8;
        let mut rng = Stream(seed);
        let mut d = SeqData { dim, ..Default::default() };
        for i in 0..n {
            let k = i % 4;
            let v: Vec<f32> = (0..dim).map(|j| if j / 2 == k { 1.0 } else { 0.0 } + (rng.unit() as f32 - 0.5) * 0.2).collect();
            d.queries.extend(v);
            d.targets.push((i as u32, plans[k].to_vec(), 1.0));
        }
        d
    }

    #[test]
    fn learns_a_planted_query_to_plan_map_deterministically_and_round_trips() -> Result<()> {
        let dev = crate::DeviceChoice::Cpu.device();
        let (train, val) = (planted(80, 1), planted(40, 2));
        let shape = PlannerShape { dim: 8, vocab: 7, hidden: 32, max_len: 8 };
        let cfg = PlannerConfig { hidden: 32, epochs: 30, batch: 64, lr: 5e-3, max_len: 8, seed: 3 };
        let (m, curve, _) = train_planner(shape, &train, &val, &cfg, &dev)?;
        assert_eq!(exact_match(&m, &val, 8, &dev)?, 1.0);
        assert!(curve.last().map(|c| c.train_loss).unwrap_or(9.0) < curve[0].train_loss / 4.0, "{curve:?}");
        // Same seed, same curve; and the greedy plan is the most likely of the candidate set.
        let (m2, curve2, _) = train_planner(shape, &train, &val, &cfg, &dev)?;
        assert_eq!(curve, curve2);
        let cands: Vec<Vec<u32>> = vec![vec![2, 5, 3], vec![2, 6, 4, 5, 3], vec![3], vec![4, 6, 2]];
        let lp = m2.sequence_log_probs(&val.queries, 8, &cands, &dev)?;
        for (i, row) in lp.iter().enumerate() {
            let best = (0..4).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
            assert_eq!(best, i % 4, "{row:?}");
        }
        // Candidate scoring against a step-by-step brute force; best_of is the argmax of
        // candidates ∪ greedy.
        let half = m2.valid_half_trained();
        let extra: Vec<Vec<u32>> = vec![vec![], vec![5], vec![2, 5, 3], vec![6, 6, 6, 2], vec![2, 5], vec![2, 5, 4]];
        let fast = half.sequence_log_probs(&val.queries, 8, &extra, &dev)?;
        let greedy = half.greedy(&val.queries, 8, 8, &dev)?;
        let own = half.own_log_probs(&val.queries, 8, &greedy, &dev)?;
        let best = half.best_of(&val.queries, 8, 8, &extra, &dev)?;
        for i in 0..val.n_queries() {
            let q = &val.queries[i * 8..(i + 1) * 8];
            for (c, seq) in extra.iter().enumerate() {
                let slow = brute_log_prob(&half, q, seq, &dev)?;
                assert!((slow - fast[i][c]).abs() < 1e-4, "query {i} candidate {c}: {slow} vs {}", fast[i][c]);
            }
            assert!((brute_log_prob(&half, q, &greedy[i], &dev)? - own[i]).abs() < 1e-4);
            let scores: Vec<f64> = extra.iter().map(|s| brute_log_prob(&half, q, s, &dev)).collect::<Result<_>>()?;
            let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let expect =
                if own[i] > top + 1e-9 { greedy[i].clone() } else { extra[scores.iter().position(|&x| x == top).unwrap_or(0)].clone() };
            assert_eq!(best[i], expect, "query {i}: {scores:?} greedy {:?} {}", greedy[i], own[i]);
        }
        // Save, load strictly, same plans; a wrong shape is refused.
        let dir = tempfile::tempdir().map_err(|e| ModelError::Internal(e.to_string()))?;
        let p = dir.path().join("planner.safetensors");
        m.save(&p)?;
        let back = Planner::load(&p, shape, &dev)?;
        assert_eq!(back.greedy(&val.queries, 8, 8, &dev)?, m.greedy(&val.queries, 8, 8, &dev)?);
        assert!(Planner::load(&p, PlannerShape { vocab: 8, ..shape }, &dev).is_err());
        Ok(())
    }
}
