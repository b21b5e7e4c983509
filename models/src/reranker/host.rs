//! The reranker on host buffers: the same model as [`super::Reranker`] (read from and written back
//! to a burn model in module order), with its forward and backward passes written out, so that the
//! CPU trains it without building an autodiff graph for every batch of a few hundred candidates
//! (burn stays for `--device gpu`). Tested against burn's autodiff, gradient by gradient, and by
//! training curves.

use burn::tensor::Device;

use super::{Features, Group, RerankerConfig, RerankerEpoch, Trajectory, sample_rows, top_is_positive};
use crate::error::{ModelError, Result};
use crate::gnn::host::{Lin, read_tensors, relu, relu_back, write_tensors};
use crate::linalg::{Op, gemm_f32_halves as gemm_f32};
use crate::train::optim::AdamW;
use crate::train::{Evaluation, Learner, Score, Stepped, Stream};

/// Width of the structural fingerprint's token (type and position embeddings).
const TOKEN: usize = 64;
/// Width of the textual fingerprint, the structural fingerprint and each traversal identifier.
const WIDE: usize = 256;
/// Path positions a trajectory keeps.
const POS: usize = 3;
/// Width of the concatenation the head reads: TF, SF and three TI vectors.
const CAT: usize = 5 * WIDE;
/// The part of it multiplied row by row: TF and SF. A TI vector is one of three learned rows per
/// position, so its share of the head's product is one of nine precomputed rows
/// ([`HostReranker::ti_terms`]): the head's products read 512 columns instead of 1,280.
const DENSE: usize = 2 * WIDE;

/// The reranker's layers in the burn module's order ([`super::Reranker`]'s fields).
#[derive(Debug, Clone)]
pub(crate) struct HostReranker {
    tf: Lin,
    sf_emb: Lin,
    sf_pos: Lin,
    att_q: Lin,
    att_k: Lin,
    att_v: Lin,
    ff1: Lin,
    ff2: Lin,
    sf: Lin,
    ti_emb: Lin,
    h: Lin,
    out: Lin,
    /// The paper's head (ReLU between `h` and `out`) or the released one (none).
    paper: bool,
}

/// What a forward pass keeps for its backward pass (`n` candidates; token rows are
/// candidate-major, `3n` of them).
#[derive(Debug, Default)]
pub(crate) struct Forward {
    n: usize,
    tf_in: Vec<f32>,
    tf: Vec<f32>,
    types: Vec<u32>,
    ti: Vec<u32>,
    x0: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Attention weights, `n × 3 × 3`.
    att: Vec<f32>,
    x1: Vec<f32>,
    f1: Vec<f32>,
    x2: Vec<f32>,
    sfo: Vec<f32>,
    /// `[TF; SF]` per candidate (the TI vectors enter through [`HostReranker::ti_terms`]).
    cat: Vec<f32>,
    hid: Vec<f32>,
    /// One score per candidate.
    pub(crate) scores: Vec<f32>,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `dst += s · src`.
fn axpy(dst: &mut [f32], s: f32, src: &[f32]) {
    dst.iter_mut().zip(src).for_each(|(d, x)| *d += s * x);
}

impl HostReranker {
    /// The host copy of a burn reranker (its 24 tensors, weight then bias of each layer).
    pub(crate) fn from_burn(model: &super::Reranker) -> Result<Self> {
        let mut t = read_tensors(model, "reranker")?.into_iter();
        let mut lin = |name: &str| -> Result<Lin> {
            match (t.next(), t.next()) {
                (Some((ws, w)), Some((_, b))) if ws.len() == 2 => Lin::new(w, b, ws[0], ws[1]),
                _ => Err(ModelError::Internal(format!("reranker: layer {name} missing from the burn model"))),
            }
        };
        let (tf, sf_emb, sf_pos) = (lin("tf")?, lin("sf_emb")?, lin("sf_pos")?);
        let (att_q, att_k, att_v) = (lin("att_q")?, lin("att_k")?, lin("att_v")?);
        let (ff1, ff2, sf, ti_emb) = (lin("ff1")?, lin("ff2")?, lin("sf")?, lin("ti_emb")?);
        let (h, out) = (lin("h")?, lin("out")?);
        let paper = h.dout != 1;
        let widths = [
            (tf.din, 4),
            (tf.dout, WIDE),
            (sf_emb.dout, TOKEN),
            (sf_pos.din, POS),
            (att_q.dout, TOKEN),
            (ff2.dout, TOKEN),
            (sf.din, POS * TOKEN),
            (ti_emb.dout, WIDE),
            (h.din, CAT),
            (out.dout, 1),
        ];
        if widths.iter().any(|(a, b)| a != b) {
            return Err(ModelError::Internal(format!("reranker: unexpected layer widths {widths:?}")));
        }
        Ok(HostReranker { tf, sf_emb, sf_pos, att_q, att_k, att_v, ff1, ff2, sf, ti_emb, h, out, paper })
    }

    fn layers(&self) -> [&Lin; 12] {
        let s = self;
        [&s.tf, &s.sf_emb, &s.sf_pos, &s.att_q, &s.att_k, &s.att_v, &s.ff1, &s.ff2, &s.sf, &s.ti_emb, &s.h, &s.out]
    }

    fn layers_mut(&mut self) -> [&mut Lin; 12] {
        let s = self;
        [
            &mut s.tf,
            &mut s.sf_emb,
            &mut s.sf_pos,
            &mut s.att_q,
            &mut s.att_k,
            &mut s.att_v,
            &mut s.ff1,
            &mut s.ff2,
            &mut s.sf,
            &mut s.ti_emb,
            &mut s.h,
            &mut s.out,
        ]
    }

    /// `model` (a burn reranker of the same shape) with this one's values, in module order.
    pub(crate) fn write_into(&self, model: super::Reranker) -> Result<super::Reranker> {
        let values: Vec<&[f32]> = self.layers().into_iter().flat_map(|l| [l.w.v.as_slice(), l.b.v.as_slice()]).collect();
        write_tensors(model, values, "reranker")
    }

    /// Every gradient set to zero.
    pub(crate) fn zero_grad(&mut self) {
        for l in self.layers_mut() {
            l.w.zero_grad();
            l.b.zero_grad();
        }
    }

    /// An embedding row of `l` (its input is a one-hot id; the bias is not added, as burn's
    /// `Dense::rows`), refused when the id is out of range.
    fn row(l: &Lin, id: u32) -> Result<&[f32]> {
        let id = id as usize;
        if id >= l.din {
            return Err(ModelError::Internal(format!("reranker: id {id} outside an embedding of {} rows", l.din)));
        }
        Ok(&l.w.v[id * l.dout..(id + 1) * l.dout])
    }

    /// Scores of `rows` with what the backward pass needs; `feats` zeroes the features left out.
    pub(crate) fn forward(&self, rows: &[Trajectory], feats: Features) -> Result<Forward> {
        let n = rows.len();
        let tf_in: Vec<f32> = rows.iter().flat_map(|r| if feats.tf { r.tf } else { [0.0; 4] }).collect();
        let mut tf = self.tf.forward(&tf_in, n)?;
        relu(&mut tf);
        // The structural fingerprint: tokens (candidate, position).
        let types: Vec<u32> = rows.iter().flat_map(|r| if feats.sf { r.sf } else { [0; POS] }).collect();
        let mut x0 = vec![0f32; n * POS * TOKEN];
        for (j, (x, &t)) in x0.chunks_exact_mut(TOKEN).zip(&types).enumerate() {
            let (e, p) = (Self::row(&self.sf_emb, t)?, Self::row(&self.sf_pos, (j % POS) as u32)?);
            x.iter_mut().zip(e.iter().zip(p)).for_each(|(o, (a, b))| *o = a + b);
        }
        let tokens = n * POS;
        let (q, k, v) = (self.att_q.forward(&x0, tokens)?, self.att_k.forward(&x0, tokens)?, self.att_v.forward(&x0, tokens)?);
        let mut att = vec![0f32; n * POS * POS];
        let mut x1 = x0.clone();
        for i in 0..n {
            for a in 0..POS {
                let row = i * POS + a;
                let qa = &q[row * TOKEN..(row + 1) * TOKEN];
                let w = &mut att[row * POS..(row + 1) * POS];
                for (b, s) in w.iter_mut().enumerate() {
                    let kb = (i * POS + b) * TOKEN;
                    *s = dot(qa, &k[kb..kb + TOKEN]) / 8.0;
                }
                let m = w.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
                w.iter_mut().for_each(|s| *s = (*s - m).exp());
                let sum: f32 = w.iter().sum();
                w.iter_mut().for_each(|s| *s /= sum);
                for (b, &wb) in w.iter().enumerate() {
                    let vb = (i * POS + b) * TOKEN;
                    axpy(&mut x1[row * TOKEN..(row + 1) * TOKEN], wb, &v[vb..vb + TOKEN]);
                }
            }
        }
        let mut f1 = self.ff1.forward(&x1, tokens)?;
        relu(&mut f1);
        let mut x2 = self.ff2.forward(&f1, tokens)?;
        x2.iter_mut().zip(&x1).for_each(|(o, r)| *o += r);
        let mut sfo = self.sf.forward(&x2, n)?;
        relu(&mut sfo);
        // The head: [TF; SF; TI of each position] W + b, the TI blocks' products looked up.
        let ti: Vec<u32> = rows.iter().flat_map(|r| if feats.ti { r.ti } else { [0; POS] }).collect();
        if let Some(&t) = ti.iter().find(|&&t| t as usize >= self.ti_emb.din) {
            return Err(ModelError::Internal(format!("reranker: traversal id {t} outside {} ids", self.ti_emb.din)));
        }
        let mut cat = vec![0f32; n * DENSE];
        for (i, c) in cat.chunks_exact_mut(DENSE).enumerate() {
            c[..WIDE].copy_from_slice(&tf[i * WIDE..(i + 1) * WIDE]);
            c[WIDE..].copy_from_slice(&sfo[i * WIDE..(i + 1) * WIDE]);
        }
        let hd = self.h.dout;
        let mut hid = vec![0f32; n * hd];
        gemm_f32(&mut hid, Op::n(&cat, n, DENSE), Op::n(&self.h.w.v[..DENSE * hd], DENSE, hd), false)?;
        let terms = self.ti_terms()?;
        let ids = self.ti_emb.din;
        for (i, r) in hid.chunks_exact_mut(hd).enumerate() {
            r.iter_mut().zip(&self.h.b.v).for_each(|(o, b)| *o += b);
            for p in 0..POS {
                let at = (p * ids + ti[i * POS + p] as usize) * hd;
                r.iter_mut().zip(&terms[at..at + hd]).for_each(|(o, t)| *o += t);
            }
        }
        if self.paper {
            relu(&mut hid);
        }
        let scores = self.out.forward(&hid, n)?;
        Ok(Forward { n, tf_in, tf, types, ti, x0, q, k, v, att, x1, f1, x2, sfo, cat, hid, scores })
    }

    /// `E Wₚ` for each position `p` (`E`: the traversal-id embeddings, `Wₚ`: the rows of the
    /// head's weight that read position `p`'s TI vector): `POS × ids` rows of the head's width.
    fn ti_terms(&self) -> Result<Vec<f32>> {
        let (ids, hd) = (self.ti_emb.din, self.h.dout);
        let mut terms = vec![0f32; POS * ids * hd];
        for (p, t) in terms.chunks_exact_mut(ids * hd).enumerate() {
            let w = &self.h.w.v[(DENSE + p * WIDE) * hd..(DENSE + (p + 1) * WIDE) * hd];
            gemm_f32(t, Op::n(&self.ti_emb.w.v, ids, WIDE), Op::n(w, WIDE, hd), false)?;
        }
        Ok(terms)
    }

    /// Adds the gradients of a loss whose gradient with respect to the scores is `ds`.
    pub(crate) fn backward(&mut self, f: &Forward, ds: &[f32]) -> Result<()> {
        let n = f.n;
        if ds.len() != n {
            return Err(ModelError::Internal(format!("reranker: {} score gradients for {n} candidates", ds.len())));
        }
        let tokens = n * POS;
        let mut dhid = vec![0f32; n * self.h.dout];
        self.out.backward(&f.hid, ds, n, true, Some(&mut dhid), false)?;
        if self.paper {
            relu_back(&f.hid, &mut dhid);
        }
        // The head: the [TF; SF] block by products; each TI block through the sums of the rows of
        // `dhid` per id (`S`): its weight gradient is `Eᵀ S`, the embeddings' `S Wₚᵀ`.
        let (hd, ids) = (self.h.dout, self.ti_emb.din);
        let (w, b) = (&mut self.h.w, &mut self.h.b);
        gemm_f32(&mut w.g[..DENSE * hd], Op::t(&f.cat, n, DENSE), Op::n(&dhid, n, hd), true)?;
        let mut dcat = vec![0f32; n * DENSE];
        gemm_f32(&mut dcat, Op::n(&dhid, n, hd), Op::t(&w.v[..DENSE * hd], DENSE, hd), false)?;
        let mut sums = vec![0f32; POS * ids * hd];
        for (i, r) in dhid.chunks_exact(hd).enumerate() {
            b.g.iter_mut().zip(r).for_each(|(g, d)| *g += d);
            for p in 0..POS {
                let at = (p * ids + f.ti[i * POS + p] as usize) * hd;
                axpy(&mut sums[at..at + hd], 1.0, r);
            }
        }
        for (p, sp) in sums.chunks_exact(ids * hd).enumerate() {
            let block = (DENSE + p * WIDE) * hd..(DENSE + (p + 1) * WIDE) * hd;
            gemm_f32(&mut w.g[block.clone()], Op::t(&self.ti_emb.w.v, ids, WIDE), Op::n(sp, ids, hd), true)?;
            gemm_f32(&mut self.ti_emb.w.g, Op::n(sp, ids, hd), Op::t(&w.v[block], WIDE, hd), true)?;
        }
        let (mut dtf, mut dsf) = (vec![0f32; n * WIDE], vec![0f32; n * WIDE]);
        for (i, c) in dcat.chunks_exact(DENSE).enumerate() {
            dtf[i * WIDE..(i + 1) * WIDE].copy_from_slice(&c[..WIDE]);
            dsf[i * WIDE..(i + 1) * WIDE].copy_from_slice(&c[WIDE..]);
        }
        relu_back(&f.tf, &mut dtf);
        self.tf.backward(&f.tf_in, &dtf, n, true, None, false)?;
        relu_back(&f.sfo, &mut dsf);
        let mut dx2 = vec![0f32; tokens * TOKEN];
        self.sf.backward(&f.x2, &dsf, n, true, Some(&mut dx2), false)?;
        // x2 = x1 + ff2(relu(ff1(x1))).
        let mut df1 = vec![0f32; tokens * self.ff1.dout];
        self.ff2.backward(&f.f1, &dx2, tokens, true, Some(&mut df1), false)?;
        relu_back(&f.f1, &mut df1);
        let mut dx1 = dx2;
        self.ff1.backward(&f.x1, &df1, tokens, true, Some(&mut dx1), true)?;
        // x1 = x0 + softmax(q kᵀ / 8) v, per candidate.
        let (mut dq, mut dk, mut dv) = (vec![0f32; tokens * TOKEN], vec![0f32; tokens * TOKEN], vec![0f32; tokens * TOKEN]);
        for i in 0..n {
            for a in 0..POS {
                let row = i * POS + a;
                let d_o = &dx1[row * TOKEN..(row + 1) * TOKEN];
                let w = &f.att[row * POS..(row + 1) * POS];
                let mut da = [0f32; POS];
                for (b, d) in da.iter_mut().enumerate() {
                    let vb = (i * POS + b) * TOKEN;
                    *d = dot(d_o, &f.v[vb..vb + TOKEN]);
                    axpy(&mut dv[vb..vb + TOKEN], w[b], d_o);
                }
                let mean: f32 = w.iter().zip(&da).map(|(x, y)| x * y).sum();
                for b in 0..POS {
                    let ds_ab = w[b] * (da[b] - mean) / 8.0;
                    let kb = (i * POS + b) * TOKEN;
                    axpy(&mut dq[row * TOKEN..(row + 1) * TOKEN], ds_ab, &f.k[kb..kb + TOKEN]);
                    axpy(&mut dk[kb..kb + TOKEN], ds_ab, &f.q[row * TOKEN..(row + 1) * TOKEN]);
                }
            }
        }
        let mut dx0 = dx1;
        self.att_q.backward(&f.x0, &dq, tokens, true, Some(&mut dx0), true)?;
        self.att_k.backward(&f.x0, &dk, tokens, true, Some(&mut dx0), true)?;
        self.att_v.backward(&f.x0, &dv, tokens, true, Some(&mut dx0), true)?;
        for (j, d) in dx0.chunks_exact(TOKEN).enumerate() {
            let (t, p) = (f.types[j] as usize, j % POS);
            axpy(&mut self.sf_emb.w.g[t * TOKEN..(t + 1) * TOKEN], 1.0, d);
            axpy(&mut self.sf_pos.w.g[p * TOKEN..(p + 1) * TOKEN], 1.0, d);
        }
        Ok(())
    }

    /// One Adam step over every tensor the loss reaches: the three embeddings' biases take no part
    /// (burn's `Dense::rows` reads the weights alone, and its optimiser leaves them).
    fn step(&mut self, optim: &mut AdamW, lr: f32) -> Result<()> {
        let pairs = self.layers_mut().into_iter().enumerate().flat_map(|(i, l)| {
            let embedding = matches!(i, 1 | 2 | 9);
            [(&mut l.w.v, Some(&l.w.g)), (&mut l.b.v, (!embedding).then_some(&l.b.g))]
        });
        optim.step_some(lr, pairs)
    }

    /// Scores of every candidate of `g`.
    pub(crate) fn score(&self, g: &[Trajectory], feats: Features) -> Result<Vec<f32>> {
        if g.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.forward(g, feats)?.scores)
    }
}

/// The loss of `groups` groups of `size` scores each, whose first is the positive: the mean over
/// groups of `−log softmax(scores)[0]`, and its gradient with respect to every score.
pub(crate) fn group_loss(scores: &[f32], groups: usize, size: usize) -> Result<(f64, Vec<f32>)> {
    if scores.len() != groups * size || groups == 0 {
        return Err(ModelError::Internal(format!("reranker: {} scores for {groups} groups of {size}", scores.len())));
    }
    let mut ds = vec![0f32; scores.len()];
    let mut loss = 0f64;
    let inv = 1.0 / groups as f64;
    for (s, d) in scores.chunks_exact(size).zip(ds.chunks_exact_mut(size)) {
        let m = s.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
        let sum: f64 = s.iter().map(|&x| (f64::from(x) - m).exp()).sum();
        let lse = m + sum.ln();
        loss -= (f64::from(s[0]) - lse) * inv;
        for (j, (d, &x)) in d.iter_mut().zip(s).enumerate() {
            let p = (f64::from(x) - lse).exp();
            *d = ((p - if j == 0 { 1.0 } else { 0.0 }) * inv) as f32;
        }
    }
    Ok((loss, ds))
}

/// Candidates scored by one forward pass of [`hit1`]: groups are scored together up to about this
/// many rows (a candidate's score does not depend on the others in its pass, up to the rounding of
/// products whose blocking follows the row count).
const EVAL_ROWS: usize = 2048;

/// Share of groups whose top-scored candidate (ties: first) is positive.
pub(crate) fn hit1(model: &HostReranker, groups: &[Group], feats: Features) -> Result<f64> {
    if groups.is_empty() {
        return Ok(0.0);
    }
    let mut hits = 0usize;
    let mut start = 0;
    while start < groups.len() {
        let mut end = start;
        let mut rows: Vec<Trajectory> = Vec::new();
        while end < groups.len() && (end == start || rows.len() + groups[end].candidates.len() <= EVAL_ROWS) {
            rows.extend_from_slice(&groups[end].candidates);
            end += 1;
        }
        let scores = model.score(&rows, feats)?;
        let mut at = 0;
        for g in &groups[start..end] {
            let k = g.candidates.len();
            hits += usize::from(top_is_positive(&scores[at..at + k], &g.positive));
            at += k;
        }
        start = end;
    }
    Ok(hits as f64 / groups.len() as f64)
}

/// The host reranker's steps and evaluation for [`crate::train::fit`]: the same batches (drawn by
/// [`sample_rows`] from the same stream), loss, Adam and checkpoint rule as the burn learner.
struct HostLearner<'a> {
    usable: Vec<&'a Group>,
    val: &'a [Group],
    feats: Features,
    cfg: &'a RerankerConfig,
    optim: AdamW,
}

impl Learner for HostLearner<'_> {
    type Model = HostReranker;
    type Kept = HostReranker;
    type Row = RerankerEpoch;

    fn step(&mut self, mut model: HostReranker, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<HostReranker>> {
        let chunk = batch.unwrap_or_default();
        let rows = sample_rows(&self.usable, chunk, self.cfg.negatives, rng);
        let f = model.forward(&rows, self.feats)?;
        let (loss, ds) = group_loss(&f.scores, chunk.len(), 1 + self.cfg.negatives)?;
        model.zero_grad();
        model.backward(&f, &ds)?;
        model.step(&mut self.optim, self.cfg.lr as f32)?;
        Ok((model, Some((loss, chunk.len() as f64))))
    }

    fn evaluate(&mut self, model: &HostReranker, epoch: usize, train_loss: f64) -> Result<Evaluation<HostReranker, RerankerEpoch>> {
        let val_hit1 = hit1(model, self.val, self.feats)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_hit1, loss: None },
            keep: model.clone(),
            row: RerankerEpoch { epoch: epoch as u32, train_loss, val_hit1 },
        })
    }
}

/// [`super::train_reranker`] on the host: starts from the burn model of the same seed, returns the
/// kept epoch's model written into a burn model on `dev`.
pub(crate) fn train(
    n_types: usize,
    usable: Vec<&Group>,
    val: &[Group],
    feats: Features,
    cfg: &RerankerConfig,
    dev: &Device,
) -> Result<(super::Reranker, Vec<RerankerEpoch>, u32)> {
    let start = super::Reranker::new(n_types, cfg.head, cfg.seed, dev);
    let model = HostReranker::from_burn(&start)?;
    let items = usable.len();
    let mut learner = HostLearner { usable, val, feats, cfg, optim: AdamW::new(0.0) };
    let f = super::fit_reranker(&mut learner, model, items, cfg)?;
    Ok((f.kept.write_into(start)?, f.curve, f.best_epoch))
}

#[cfg(test)]
mod tests {
    use burn::tensor::activation::log_softmax;

    use super::super::tests::groups;
    use super::super::{Head, Reranker, train_burn};
    use super::*;
    use crate::gnn::host::{assert_gradients_are_burns, burn_gradients};

    /// The loss of one batch and every parameter's gradient, burn's autodiff against the host
    /// engine's backward pass, for both heads and with each feature group left out.
    #[test]
    fn host_gradients_are_burns() {
        let dev = Device::flex().autodiff();
        let gs = groups(6, 3);
        let (size, negatives) = (6, 5);
        for (head, feats) in [
            (Head::Paper, Features::default()),
            (Head::Released, Features::default()),
            (Head::Paper, Features { tf: true, sf: false, ti: true }),
            (Head::Paper, Features { tf: false, sf: true, ti: false }),
        ] {
            let what = format!("{head:?} {feats:?}");
            let usable: Vec<&Group> = gs.iter().collect();
            let chunk: Vec<usize> = (0..usable.len()).collect();
            let rows = sample_rows(&usable, &chunk, negatives, &mut Stream(11));
            let model = Reranker::new(5, head, 7, &dev);
            let s = model.forward(&rows, feats, &dev).reshape([chunk.len(), size]);
            let loss = log_softmax(s, 1).narrow(1, 0, 1).sum().mul_scalar(-1.0 / chunk.len() as f64);
            let lb = f64::from(loss.clone().into_scalar::<f32>());
            let want = burn_gradients(&model, &loss.backward());

            let mut host = HostReranker::from_burn(&model).expect("host");
            let f = host.forward(&rows, feats).expect("forward");
            let (lh, ds) = group_loss(&f.scores, chunk.len(), size).expect("loss");
            assert!((lh - lb).abs() <= 1e-5 * lb.abs().max(1.0), "{what}: loss {lh} vs {lb}");
            host.zero_grad();
            host.backward(&f, &ds).expect("backward");
            let got: Vec<&Vec<f32>> = host.layers().into_iter().flat_map(|l| [&l.w.g, &l.b.g]).collect();
            // The embeddings' biases (tensors 3, 5, 19): outside burn's graph, zero on the host.
            assert_gradients_are_burns(&what, &got, &want, 1e-4, &[3, 5, 19]);
        }
    }

    /// A candidate's score is the same, to the products' rounding, whether it is scored alone or
    /// among thousands, and [`hit1`]'s passes over many groups give the group-by-group figure.
    #[test]
    fn scores_do_not_depend_on_the_pass() {
        let dev = Device::flex();
        let val = groups(300, 4);
        // Untrained, reading the noisy text scores alone: its top candidates are right for some
        // groups and wrong for others.
        let text = Features { tf: true, sf: false, ti: false };
        let host = HostReranker::from_burn(&Reranker::new(4, Head::Paper, 2, &dev)).expect("host");
        let all: Vec<Trajectory> = val.iter().flat_map(|g| g.candidates.clone()).collect();
        assert!(all.len() > 2 * EVAL_ROWS);
        let together = host.score(&all, text).expect("all");
        let mut at = 0;
        let mut hits = 0usize;
        for g in &val {
            let alone = host.score(&g.candidates, text).expect("alone");
            for (a, t) in alone.iter().zip(&together[at..at + alone.len()]) {
                assert!((a - t).abs() <= 1e-5 * a.abs().max(1.0), "{a} alone, {t} among others");
            }
            at += alone.len();
            hits += usize::from(top_is_positive(&alone, &g.positive));
        }
        let by_group = hits as f64 / val.len() as f64;
        assert!(by_group > 0.0 && by_group < 1.0, "{by_group}: no discrimination to check");
        assert_eq!(hit1(&host, &val, text).expect("hit1"), by_group);
    }

    /// Trained on the host and on burn from the same seed, the curves agree (the same batches, so
    /// the losses to rounding) and the kept models score alike.
    #[test]
    fn host_and_burn_training_agree() {
        let dev = Device::flex();
        let (train_g, val) = (groups(40, 1), groups(20, 2));
        let usable: Vec<&Group> = train_g.iter().collect();
        for head in [Head::Paper, Head::Released] {
            let cfg = RerankerConfig { head, epochs: 4, negatives: 7, batch: 8, lr: 3e-3, seed: 5 };
            let (hm, hc, he) = train(4, usable.clone(), &val, Features::default(), &cfg, &dev).expect("host");
            let (bm, bc, be) = train_burn(4, usable.clone(), &val, Features::default(), &cfg, &dev).expect("burn");
            assert_eq!(hc.len(), bc.len(), "{head:?}");
            for (h, b) in hc.iter().zip(&bc) {
                assert!((h.train_loss - b.train_loss).abs() <= 1e-3 * b.train_loss.abs().max(1.0), "{head:?}: {h:?} vs {b:?}");
                assert!((h.val_hit1 - b.val_hit1).abs() <= 0.05 + 1e-12, "{head:?}: {h:?} vs {b:?}");
            }
            assert_eq!(he, be, "{head:?}: kept epoch");
            // The kept host model, written back to burn, scores as the host model did.
            let host = HostReranker::from_burn(&hm).expect("read back");
            for g in &val[..5] {
                let (a, b) = (
                    hm.score(&g.candidates, Features::default(), &dev).expect("a"),
                    host.score(&g.candidates, Features::default()).expect("b"),
                );
                assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-5 * x.abs().max(1.0)), "{head:?}: {a:?} vs {b:?}");
                // The CPU's scorer is the host engine.
                assert_eq!(hm.scorer(&dev).expect("scorer").score(&g.candidates, Features::default()).expect("scorer"), b);
                // The burn-trained model, same seed and batches, scores the same candidates within
                // the drift of four epochs of rounding (up to 6.7e-3 of a score here).
                let c = bm.score(&g.candidates, Features::default(), &dev).expect("c");
                let worst = a.iter().zip(&c).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0f32, f32::max);
                assert!(worst <= 2e-2, "{head:?}: host-trained {a:?} vs burn-trained {c:?}");
            }
        }
    }
}
