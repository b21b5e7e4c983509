//! The planner on host buffers: the same decoder as [`super::Planner`] (read from and written back
//! to a burn model in module order) with its forward and backward passes written out, so that the
//! CPU trains and decodes it without an autodiff graph per mini-batch and burn's elementwise
//! kernels (burn stays for `--device gpu`). Tested against burn's autodiff gradient by gradient,
//! by training curves and by the plans and sequence log-probabilities both engines give.

use burn::tensor::Device;

use super::{BOS, EOS, Planner, PlannerConfig, PlannerEpoch, PlannerShape, SeqData, prefixes_of, rows_of};
use crate::error::{ModelError, Result};
use crate::gnn::fast::column_sums;
use crate::gnn::host::{Lin, add, log_softmax_rows, nll, read_tensors, relu, relu_back, write_tensors};
use crate::train::optim::AdamW;
use crate::train::{Evaluation, Learner, Plan, Score, Stepped, Stream, fit};

/// Rows scored by one pass of [`HostPlanner::sequence_log_probs`] (about 8k rows of `hidden` and
/// `vocab` floats: the pass's buffers stay in the cache hierarchy).
const PASS_ROWS: usize = 8_192;

/// The planner's layers in the burn module's order ([`Planner`]'s fields).
#[derive(Debug, Clone)]
pub(crate) struct HostPlanner {
    q: Lin,
    e1: Lin,
    e2: Lin,
    bag: Lin,
    pos: Lin,
    h: Lin,
    out: Lin,
}

/// Step rows: per row, the query it belongs to, the two previous tokens, the position and the
/// distinct tokens of its prefix (the multi-hot bag; tokens outside the vocabulary dropped, as
/// [`super::bags`] does).
#[derive(Debug, Default)]
struct Rows {
    owner: Vec<u32>,
    prev: Vec<u32>,
    prev2: Vec<u32>,
    pos: Vec<u32>,
    bag: Vec<Vec<u32>>,
}

impl Rows {
    fn push(&mut self, owner: u32, prefix: &[u32], vocab: usize) {
        let at = |back: usize| if prefix.len() >= back { prefix[prefix.len() - back] } else { BOS };
        let mut bag: Vec<u32> = prefix.iter().copied().filter(|&t| (t as usize) < vocab).collect();
        bag.sort_unstable();
        bag.dedup();
        self.owner.push(owner);
        self.prev.push(at(1));
        self.prev2.push(at(2));
        self.pos.push(prefix.len() as u32);
        self.bag.push(bag);
    }

    fn len(&self) -> usize {
        self.owner.len()
    }
}

/// What a training forward pass keeps for its backward pass (`r` rows).
#[derive(Debug)]
struct Forward {
    r: usize,
    /// The rows' query vectors, `r × dim`.
    qin: Vec<f32>,
    /// `relu(x₀)` and `relu(h)`, `r × hidden`.
    a1: Vec<f32>,
    a2: Vec<f32>,
    /// Log-probabilities, `r × vocab`.
    lp: Vec<f32>,
}

impl HostPlanner {
    /// The host copy of a burn planner (its 14 tensors, weight then bias of each layer).
    pub(crate) fn from_burn(model: &Planner) -> Result<Self> {
        let mut t = read_tensors(model, "planner")?.into_iter();
        let mut lin = |name: &str| -> Result<Lin> {
            match (t.next(), t.next()) {
                (Some((ws, w)), Some((_, b))) if ws.len() == 2 => Lin::new(w, b, ws[0], ws[1]),
                _ => Err(ModelError::Internal(format!("planner: layer {name} missing from the burn model"))),
            }
        };
        let (q, e1, e2, bag, pos, h, out) = (lin("q")?, lin("e1")?, lin("e2")?, lin("bag")?, lin("pos")?, lin("h")?, lin("out")?);
        let hidden = q.dout;
        let vocab = out.dout;
        let fits = [e1.dout, e2.dout, bag.dout, pos.dout, h.din, h.dout, out.din].iter().all(|&d| d == hidden)
            && [e1.din, e2.din, bag.din].iter().all(|&d| d == vocab);
        if !fits || vocab <= EOS as usize || hidden == 0 || q.din == 0 {
            return Err(ModelError::Internal(format!("planner: layer widths do not fit together (vocabulary of {vocab})")));
        }
        Ok(HostPlanner { q, e1, e2, bag, pos, h, out })
    }

    fn layers(&self) -> [&Lin; 7] {
        [&self.q, &self.e1, &self.e2, &self.bag, &self.pos, &self.h, &self.out]
    }

    fn layers_mut(&mut self) -> [&mut Lin; 7] {
        let s = self;
        [&mut s.q, &mut s.e1, &mut s.e2, &mut s.bag, &mut s.pos, &mut s.h, &mut s.out]
    }

    /// `model` (a burn planner of the same shape) with this one's values, in module order.
    fn write_into(&self, model: Planner) -> Result<Planner> {
        let values: Vec<&[f32]> = self.layers().into_iter().flat_map(|l| [l.w.v.as_slice(), l.b.v.as_slice()]).collect();
        write_tensors(model, values, "planner")
    }

    fn vocab(&self) -> usize {
        self.out.dout
    }

    fn hidden(&self) -> usize {
        self.q.dout
    }

    /// An embedding row (burn's `Dense::rows`: the weight row, no bias), refused out of range.
    fn row(l: &Lin, id: u32) -> Result<&[f32]> {
        let id = id as usize;
        if id >= l.din {
            return Err(ModelError::Internal(format!("planner: id {id} outside an embedding of {} rows", l.din)));
        }
        Ok(&l.w.v[id * l.dout..(id + 1) * l.dout])
    }

    /// Adds each row's query-independent input `E₁[y_{t-1}] + E₂[y_{t-2}] + (W_b bag + b_b) + P[t]`
    /// to `x` (`rows × hidden`).
    fn add_step_part(&self, rows: &Rows, x: &mut [f32]) -> Result<()> {
        let hd = self.hidden();
        let mut bag = vec![0f32; hd];
        for (r, xr) in x.chunks_exact_mut(hd).enumerate() {
            add(xr, Self::row(&self.e1, rows.prev[r])?);
            add(xr, Self::row(&self.e2, rows.prev2[r])?);
            bag.iter_mut().for_each(|b| *b = 0.0);
            for &t in &rows.bag[r] {
                add(&mut bag, Self::row(&self.bag, t)?);
            }
            add(&mut bag, &self.bag.b.v);
            add(xr, &bag);
            add(xr, Self::row(&self.pos, rows.pos[r])?);
        }
        Ok(())
    }

    /// `relu(x₀)`, `relu(relu(x₀) W_h + b_h)` and the log-probabilities `log softmax(· W_o + b_o)`.
    fn head(&self, mut x0: Vec<f32>, r: usize) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        relu(&mut x0);
        let mut a2 = self.h.forward(&x0, r)?;
        relu(&mut a2);
        let mut lp = self.out.forward(&a2, r)?;
        log_softmax_rows(&mut lp, self.vocab());
        Ok((x0, a2, lp))
    }

    /// Teacher-forcing forward pass over `rows` whose owners index `queries` (`dim` wide).
    fn forward(&self, queries: &[f32], dim: usize, rows: &Rows) -> Result<Forward> {
        let r = rows.len();
        let mut qin = vec![0f32; r * dim];
        for (dst, &o) in qin.chunks_exact_mut(dim).zip(&rows.owner) {
            let o = o as usize;
            let src = queries.get(o * dim..(o + 1) * dim).ok_or_else(|| ModelError::Internal(format!("planner: no query {o}")))?;
            dst.copy_from_slice(src);
        }
        let mut x0 = self.q.forward(&qin, r)?;
        self.add_step_part(rows, &mut x0)?;
        let (a1, a2, lp) = self.head(x0, r)?;
        Ok(Forward { r, qin, a1, a2, lp })
    }

    /// Log-probabilities of `rows` whose query parts `qp` (`owners × hidden`, `x W_q + b_q`) are
    /// already computed: inference, nothing kept.
    fn log_probs(&self, qp: &[f32], rows: &Rows) -> Result<Vec<f32>> {
        let hd = self.hidden();
        let r = rows.len();
        let mut x0 = vec![0f32; r * hd];
        for (dst, &o) in x0.chunks_exact_mut(hd).zip(&rows.owner) {
            let o = o as usize;
            dst.copy_from_slice(qp.get(o * hd..(o + 1) * hd).ok_or_else(|| ModelError::Internal(format!("planner: no query {o}")))?);
        }
        self.add_step_part(rows, &mut x0)?;
        Ok(self.head(x0, r)?.2)
    }

    /// Accumulates every gradient of the loss whose gradient with respect to the log-softmax's
    /// input is `dlogits` (`r × vocab`).
    fn backward(&mut self, f: &Forward, rows: &Rows, dlogits: &[f32]) -> Result<()> {
        let (r, hd) = (f.r, self.hidden());
        let mut da2 = vec![0f32; r * hd];
        self.out.backward(&f.a2, dlogits, r, true, Some(&mut da2), false)?;
        relu_back(&f.a2, &mut da2);
        let mut dx0 = vec![0f32; r * hd];
        self.h.backward(&f.a1, &da2, r, true, Some(&mut dx0), false)?;
        relu_back(&f.a1, &mut dx0);
        self.q.backward(&f.qin, &dx0, r, true, None, false)?;
        column_sums(&mut self.bag.b.g, &dx0);
        for (k, d) in dx0.chunks_exact(hd).enumerate() {
            for (l, id) in [(&mut self.e1, rows.prev[k]), (&mut self.e2, rows.prev2[k]), (&mut self.pos, rows.pos[k])] {
                let id = id as usize;
                let g =
                    l.w.g.get_mut(id * hd..(id + 1) * hd).ok_or_else(|| ModelError::Internal(format!("planner: id {id} out of range")))?;
                add(g, d);
            }
            for &t in &rows.bag[k] {
                let t = t as usize;
                add(&mut self.bag.w.g[t * hd..(t + 1) * hd], d);
            }
        }
        Ok(())
    }

    /// Every gradient set to zero.
    fn zero_grad(&mut self) {
        for l in self.layers_mut() {
            l.w.zero_grad();
            l.b.zero_grad();
        }
    }

    /// One Adam step. The embeddings' biases (`e1`, `e2`, `pos`) are outside burn's graph (its
    /// `Dense::rows` reads the weight alone): no gradient, left alone as burn's optimiser leaves them.
    fn step(&mut self, optim: &mut AdamW, lr: f32) -> Result<()> {
        let pairs = self.layers_mut().into_iter().enumerate().flat_map(|(i, l)| {
            let embedding = matches!(i, 1 | 2 | 4);
            [(&mut l.w.v, Some(&l.w.g)), (&mut l.b.v, (!embedding).then_some(&l.b.g))]
        });
        optim.step_some(lr, pairs)
    }

    /// `queries W_q + b_q`, one row per query.
    fn query_parts(&self, queries: &[f32], dim: usize) -> Result<Vec<f32>> {
        if dim != self.q.din {
            return Err(ModelError::Internal(format!("planner: queries of width {dim} for a planner of width {}", self.q.din)));
        }
        self.q.forward(queries, queries.len() / dim.max(1))
    }

    /// [`Planner::greedy`] on the host: the same rule (never BOS, ties to the lowest id, EOS or
    /// `max_len` ends a plan); rows already ended are not scored again.
    pub(crate) fn greedy(&self, queries: &[f32], dim: usize, max_len: usize) -> Result<Vec<Vec<u32>>> {
        let n = queries.len() / dim.max(1);
        let qp = self.query_parts(queries, dim)?;
        let v = self.vocab();
        let mut seqs: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut live: Vec<usize> = (0..n).collect();
        for t in 0..max_len {
            if live.is_empty() {
                break;
            }
            let mut rows = Rows::default();
            for &i in &live {
                rows.push(i as u32, &seqs[i], v);
            }
            let lp = self.log_probs(&qp, &rows)?;
            let mut still = Vec::with_capacity(live.len());
            for (k, &i) in live.iter().enumerate() {
                let row = &lp[k * v..(k + 1) * v];
                let best = (1..v).fold(1, |b, j| if row[j] > row[b] { j } else { b }) as u32;
                if best != EOS && t + 1 < max_len {
                    seqs[i].push(best);
                    still.push(i);
                }
            }
            live = still;
        }
        Ok(seqs)
    }

    /// [`Planner::sequence_log_probs`] on the host: one pass per distinct (query, prefix), in
    /// passes of about [`PASS_ROWS`] rows.
    pub(crate) fn sequence_log_probs(&self, queries: &[f32], dim: usize, candidates: &[Vec<u32>]) -> Result<Vec<Vec<f64>>> {
        let n = queries.len() / dim.max(1);
        let mut out = vec![vec![0.0; candidates.len()]; n];
        if n == 0 || candidates.is_empty() {
            return Ok(out);
        }
        let v = self.vocab();
        let cands = super::Candidates::new(candidates);
        if let Some(y) = cands.max_token().filter(|&y| y as usize >= v) {
            return Err(ModelError::Internal(format!("planner: candidate token {y} outside the vocabulary of {v}")));
        }
        let prefixes = cands.prefixes();
        // The query-independent part once per prefix.
        let hd = self.hidden();
        let r = prefixes.len();
        let mut base_rows = Rows::default();
        for p in &prefixes {
            base_rows.push(0, p, v);
        }
        let mut base = vec![0f32; r * hd];
        self.add_step_part(&base_rows, &mut base)?;
        let qp = self.query_parts(queries, dim)?;
        let chunk = (PASS_ROWS / r).clamp(1, n);
        for start in (0..n).step_by(chunk) {
            let b = chunk.min(n - start);
            let mut x0 = vec![0f32; b * r * hd];
            for (k, block) in x0.chunks_exact_mut(r * hd).enumerate() {
                let q = &qp[(start + k) * hd..(start + k + 1) * hd];
                for (dst, src) in block.chunks_exact_mut(hd).zip(base.chunks_exact(hd)) {
                    dst.iter_mut().zip(q.iter().zip(src)).for_each(|(d, (a, s))| *d = a + s);
                }
            }
            let lp = self.head(x0, b * r)?.2;
            cands.accumulate(&mut out[start..], &lp, r, v);
        }
        Ok(out)
    }

    /// [`Planner::own_log_probs`] on the host.
    pub(crate) fn own_log_probs(&self, queries: &[f32], dim: usize, seqs: &[Vec<u32>]) -> Result<Vec<f64>> {
        let n = queries.len() / dim.max(1);
        if seqs.len() != n {
            return Err(ModelError::Internal(format!("{} sequences for {n} queries", seqs.len())));
        }
        let mut out = vec![0.0; n];
        if n == 0 {
            return Ok(out);
        }
        let v = self.vocab();
        let qp = self.query_parts(queries, dim)?;
        let mut rows = Rows::default();
        let mut target = Vec::new();
        for (i, s) in seqs.iter().enumerate() {
            for t in 0..=s.len() {
                rows.push(i as u32, &s[..t], v);
                target.push(s.get(t).copied().unwrap_or(EOS));
            }
        }
        let lp = self.log_probs(&qp, &rows)?;
        for ((&o, &y), row) in rows.owner.iter().zip(&target).zip(lp.chunks_exact(v)) {
            let y = y as usize;
            if y >= v {
                return Err(ModelError::Internal(format!("planner: token {y} outside the vocabulary of {v}")));
            }
            out[o as usize] += f64::from(row[y]);
        }
        Ok(out)
    }

    /// [`Planner::best_of`] on the host.
    pub(crate) fn best_of(&self, queries: &[f32], dim: usize, max_len: usize, candidates: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
        let greedy = self.greedy(queries, dim, max_len)?;
        if candidates.is_empty() {
            return Ok(greedy);
        }
        let own = self.own_log_probs(queries, dim, &greedy)?;
        let all = self.sequence_log_probs(queries, dim, candidates)?;
        Ok(super::pick_best(greedy, own, all, candidates))
    }

    /// Mean weighted negative log-likelihood per token over `data` (the burn learner's `eval_loss`).
    fn eval_loss(&self, data: &SeqData) -> Result<f64> {
        if data.targets.is_empty() {
            return Ok(0.0);
        }
        let (rows, target, w) = teacher_rows(&data.targets, self.vocab());
        let qp = self.query_parts(&data.queries, data.dim)?;
        let lp = self.log_probs(&qp, &rows)?;
        let v = self.vocab();
        let total: f64 = target.iter().enumerate().map(|(r, &t)| -f64::from(lp[r * v + t as usize]) * f64::from(w[r])).sum();
        let wsum: f64 = w.iter().map(|&x| f64::from(x)).sum();
        Ok(total / wsum.max(f64::MIN_POSITIVE))
    }

    /// Share of queries whose greedy plan equals their heaviest target ([`super::exact_match`]).
    fn exact_match(&self, data: &SeqData, max_len: usize) -> Result<f64> {
        let pred = self.greedy(&data.queries, data.dim, max_len)?;
        Ok(super::share_matching(data, &pred))
    }
}

/// Teacher-forcing rows of weighted sequences ([`rows_of`]'s order), their targets and weights.
fn teacher_rows(targets: &[(u32, Vec<u32>, f32)], vocab: usize) -> (Rows, Vec<u32>, Vec<f32>) {
    let (owner, _, _, _, target, w) = rows_of(targets);
    let mut rows = Rows::default();
    for (o, (i, t)) in owner.iter().zip(prefixes_of(targets)) {
        rows.push(*o, &targets[i].1[..t], vocab);
    }
    (rows, target, w)
}

/// The host planner's steps and evaluation for [`crate::train::fit`]: the same batches, loss,
/// Adam and checkpoint rule as the burn learner.
struct HostLearner<'a> {
    train: &'a SeqData,
    val: &'a SeqData,
    cfg: &'a PlannerConfig,
    optim: AdamW,
    rows: Rows,
    target: Vec<u32>,
    w: Vec<f32>,
}

impl Learner for HostLearner<'_> {
    type Model = HostPlanner;
    type Kept = HostPlanner;
    type Row = PlannerEpoch;

    fn step(&mut self, mut model: HostPlanner, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<HostPlanner>> {
        let chunk = batch.unwrap_or_default();
        let mut rows = Rows::default();
        for &i in chunk {
            rows.owner.push(self.rows.owner[i]);
            rows.prev.push(self.rows.prev[i]);
            rows.prev2.push(self.rows.prev2[i]);
            rows.pos.push(self.rows.pos[i]);
            rows.bag.push(self.rows.bag[i].clone());
        }
        let target: Vec<u32> = chunk.iter().map(|&i| self.target[i]).collect();
        let w: Vec<f32> = chunk.iter().map(|&i| self.w[i]).collect();
        let f = model.forward(&self.train.queries, self.train.dim, &rows)?;
        // Weighted NLL per token, divided by the batch's summed weights.
        let (loss, bw, dlogits) = nll(&f.lp, &target, Some(&w), model.vocab());
        model.zero_grad();
        model.backward(&f, &rows, &dlogits)?;
        model.step(&mut self.optim, self.cfg.lr as f32)?;
        Ok((model, Some((loss, bw))))
    }

    fn evaluate(&mut self, model: &HostPlanner, epoch: usize, train_loss: f64) -> Result<Evaluation<HostPlanner, PlannerEpoch>> {
        let val_loss = model.eval_loss(self.val)?;
        let val_exact = model.exact_match(self.val, self.cfg.max_len)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_exact, loss: Some(val_loss) },
            keep: model.clone(),
            row: PlannerEpoch { epoch: epoch as u32, train_loss, val_loss, val_exact },
        })
    }
}

/// [`super::train_planner`] on the host: starts from the burn planner of the same seed, trains
/// with the same batch order, returns the kept epoch written into a burn planner on `dev`.
pub(crate) fn train(
    shape: PlannerShape,
    train: &SeqData,
    val: &SeqData,
    cfg: &PlannerConfig,
    dev: &Device,
) -> Result<(Planner, Vec<PlannerEpoch>, u32)> {
    let start = Planner::new(shape, cfg.seed, dev);
    let model = HostPlanner::from_burn(&start)?;
    let (rows, target, w) = teacher_rows(&train.targets, shape.vocab);
    let items = rows.len();
    let mut learner = HostLearner { train, val, cfg, optim: AdamW::new(0.0), rows, target, w };
    let plan = Plan::every_epoch("planner", cfg.seed, cfg.epochs, items, cfg.batch);
    let f = fit(&plan, &mut learner, model, &mut Stream(cfg.seed ^ super::BATCH_STREAM))?;
    Ok((f.kept.write_into(start)?, f.curve, f.best_epoch))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use super::super::tests::planted;
    use super::super::{bags, train_burn};
    use super::*;
    use crate::gnn::host::{assert_gradients_are_burns, burn_gradients};
    use crate::train::ints;

    /// One batch's loss and every parameter's gradient, burn's autodiff against the host engine,
    /// with repeated tokens in prefixes (the bag is a set) and weighted targets.
    #[test]
    fn host_gradients_are_burns() {
        let dev = Device::flex().autodiff();
        let shape = PlannerShape { dim: 8, vocab: 7, hidden: 16, max_len: 8 };
        let mut data = planted(12, 4);
        data.targets[3].1 = vec![6, 6, 6, 2];
        data.targets[5].2 = 0.25;
        data.targets.push((2, vec![4, 4, 5], 0.5));
        let model = Planner::new(shape, 9, &dev);
        let (owner, prev, prev2, pos, target, w) = rows_of(&data.targets);
        let pre = prefixes_of(&data.targets);
        let bag = bags(&pre.iter().map(|(o, t)| &data.targets[*o].1[..*t]).collect::<Vec<_>>(), shape.vocab, &dev);
        let q: Tensor<2> = Tensor::from_data(TensorData::new(data.queries.clone(), [data.n_queries(), data.dim]), &dev);
        let lp = model.log_probs(q.select(0, ints(&owner, &dev)), ints(&prev, &dev), ints(&prev2, &dev), bag, ints(&pos, &dev));
        let mut onehot = vec![0f32; target.len() * shape.vocab];
        for (r, &y) in target.iter().enumerate() {
            onehot[r * shape.vocab + y as usize] = w[r];
        }
        let bw: f32 = w.iter().sum();
        let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [target.len(), shape.vocab]), &dev);
        let loss = (lp * onehot).sum().mul_scalar(-1.0 / f64::from(bw));
        let lb = f64::from(loss.clone().into_scalar::<f32>());
        let want = burn_gradients(&model, &loss.backward());

        let mut host = HostPlanner::from_burn(&model).expect("host");
        let (rows, t2, w2) = teacher_rows(&data.targets, shape.vocab);
        assert_eq!((&t2, &w2), (&target, &w));
        let f = host.forward(&data.queries, data.dim, &rows).expect("forward");
        let (lh, _, d) = nll(&f.lp, &t2, Some(&w2), shape.vocab);
        assert!((lh - lb).abs() <= 1e-5 * lb.abs().max(1.0), "loss {lh} vs {lb}");
        host.zero_grad();
        host.backward(&f, &rows, &d).expect("backward");
        let got: Vec<&Vec<f32>> = host.layers().into_iter().flat_map(|l| [&l.w.g, &l.b.g]).collect();
        // The embeddings' biases (e1, e2, pos: tensors 3, 5, 9): outside burn's graph, zero on the host.
        assert_gradients_are_burns("planner", &got, &want, 1e-5, &[3, 5, 9]);
    }

    /// Decoding and scoring on the host give burn's plans and log-probabilities, on a planner
    /// whose weights make the candidates' probabilities distinct.
    #[test]
    fn host_decoding_is_burns() {
        let dev = Device::flex();
        let shape = PlannerShape { dim: 8, vocab: 7, hidden: 16, max_len: 6 };
        let val = planted(40, 2);
        // A few epochs on burn: plans of several lengths, not yet certain.
        let cfg = PlannerConfig { hidden: 16, epochs: 4, batch: 32, lr: 5e-3, max_len: 6, seed: 21 };
        let (model, _, _) = train_burn(shape, &planted(80, 1), &val, &cfg, &dev).expect("burn training");
        let host = HostPlanner::from_burn(&model).expect("host");
        let greedy = model.greedy_burn(&val.queries, 8, 6, &dev).expect("burn greedy");
        assert_eq!(host.greedy(&val.queries, 8, 6).expect("host greedy"), greedy);
        assert!(greedy.iter().any(|g| !g.is_empty()) && greedy.iter().any(|g| g != &greedy[0]), "{greedy:?}: nothing to tell apart");
        let cands: Vec<Vec<u32>> = vec![vec![], vec![5], vec![2, 5, 3], vec![6, 6, 6, 2], vec![2, 5], vec![2, 5, 4]];
        let (a, b) = (
            model.sequence_log_probs_burn(&val.queries, 8, &cands, &dev).expect("burn"),
            host.sequence_log_probs(&val.queries, 8, &cands).expect("host"),
        );
        for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{x} vs {y}");
        }
        let (a, b) = (
            model.own_log_probs_burn(&val.queries, 8, &greedy, &dev).expect("burn"),
            host.own_log_probs(&val.queries, 8, &greedy).expect("host"),
        );
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{x} vs {y}");
        }
        assert_eq!(host.eval_loss(&val).expect("host loss"), host.eval_loss(&val).expect("again"));
        let lb = super::super::eval_loss(&model, &val, &dev).expect("burn loss");
        let lh = host.eval_loss(&val).expect("host loss");
        assert!((lb - lh).abs() <= 1e-5 * lb.abs().max(1.0), "{lb} vs {lh}");
        // Many queries in several passes give what each query gives alone.
        let many: Vec<f32> = (0..4).flat_map(|_| val.queries.clone()).collect();
        let long: Vec<Vec<u32>> = (0..300).map(|k| vec![2 + (k % 5) as u32, 2 + (k / 5 % 5) as u32, 2 + (k / 25 % 5) as u32]).collect();
        let together = host.sequence_log_probs(&many, 8, &long).expect("together");
        assert!(many.len() / 8 * 301 > PASS_ROWS, "one pass only");
        let alone = host.sequence_log_probs(&val.queries[..8], 8, &long).expect("alone");
        for k in [0, 40, 80, 120] {
            for (x, y) in together[k].iter().zip(&alone[0]) {
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "query {k}: {x} vs {y}");
            }
        }
    }

    /// Trained on the host and on burn from the same seed, the curves agree to rounding, the
    /// kept epoch is the same and the kept planners decode the same plans.
    #[test]
    fn host_and_burn_training_agree() {
        let dev = Device::flex();
        let (train_d, val) = (planted(80, 1), planted(40, 2));
        let shape = PlannerShape { dim: 8, vocab: 7, hidden: 32, max_len: 8 };
        let cfg = PlannerConfig { hidden: 32, epochs: 12, batch: 64, lr: 5e-3, max_len: 8, seed: 3 };
        let (hm, hc, he) = train(shape, &train_d, &val, &cfg, &dev).expect("host");
        let (bm, bc, be) = train_burn(shape, &train_d, &val, &cfg, &dev).expect("burn");
        assert_eq!(hc.len(), bc.len());
        for (h, b) in hc.iter().zip(&bc) {
            assert!((h.train_loss - b.train_loss).abs() <= 1e-3 * b.train_loss.abs().max(1.0), "{h:?} vs {b:?}");
            assert!((h.val_loss - b.val_loss).abs() <= 1e-3 * b.val_loss.abs().max(1.0), "{h:?} vs {b:?}");
            assert_eq!(h.val_exact, b.val_exact, "{h:?} vs {b:?}");
        }
        assert!(hc.last().map(|c| c.train_loss).unwrap_or(9.0) < hc[0].train_loss / 2.0, "{hc:?}");
        assert_eq!(he, be, "kept epoch");
        assert_eq!(hm.greedy_burn(&val.queries, 8, 8, &dev).expect("a"), bm.greedy_burn(&val.queries, 8, 8, &dev).expect("b"));
    }
}
