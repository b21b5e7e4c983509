//! The span tagger on host buffers: the same model as [`super::Tagger`] (read from and written back
//! to a burn model in module order) with its forward and backward passes written out, so that the
//! CPU trains it and tags without burn's autodiff graph and elementwise kernels (burn stays for
//! `--device gpu`). Tested against burn's autodiff gradient by gradient, by training curves and
//! by the labels both engines predict.

use burn::tensor::Device;

use super::{Rows, SHAPES, TagData, Tagger, TaggerConfig, TaggerEpoch, TaggerShape, label_f1};
use crate::error::{ModelError, Result};
use crate::gnn::host::{Lin, add, log_softmax_rows, nll, read_tensors, relu, relu_back, write_tensors};
use crate::train::optim::AdamW;
use crate::train::{Evaluation, Learner, Plan, Score, Stepped, Stream, fit};

/// The tagger's layers in the burn module's order ([`Tagger`]'s fields).
#[derive(Debug, Clone)]
pub(crate) struct HostTagger {
    shape: TaggerShape,
    words: Lin,
    shapes: Lin,
    q: Lin,
    plan: Lin,
    h: Lin,
    out: Lin,
}

/// What a training forward pass keeps for its backward pass (`r` rows).
#[derive(Debug)]
struct Forward {
    r: usize,
    /// The rows' query vectors (`r × qdim`) and plan multi-hots (`r × types`, at least one column).
    qin: Vec<f32>,
    hot: Vec<f32>,
    /// `relu(x₀)` and `relu(h)`, `r × hidden`.
    a1: Vec<f32>,
    a2: Vec<f32>,
    /// Log-probabilities, `r × labels`.
    lp: Vec<f32>,
}

impl HostTagger {
    /// The host copy of a burn tagger of `shape` (its 12 tensors, weight then bias of each layer).
    pub(crate) fn from_burn(model: &Tagger, shape: TaggerShape) -> Result<Self> {
        let mut t = read_tensors(model, "tagger")?.into_iter();
        let mut lin = |name: &str, din: usize, dout: usize| -> Result<Lin> {
            match (t.next(), t.next()) {
                (Some((ws, w)), Some((_, b))) if ws == [din, dout] => Lin::new(w, b, din, dout),
                (Some((ws, _)), _) => Err(ModelError::Internal(format!("tagger: layer {name} is {ws:?}, its shape says [{din}, {dout}]"))),
                _ => Err(ModelError::Internal(format!("tagger: layer {name} missing from the burn model"))),
            }
        };
        let hd = shape.hidden;
        if hd == 0 || shape.buckets == 0 {
            return Err(ModelError::Internal("tagger: zero hidden width or hash buckets".into()));
        }
        Ok(HostTagger {
            shape,
            words: lin("words", shape.span() * shape.buckets, hd)?,
            shapes: lin("shapes", shape.span() * SHAPES, hd)?,
            q: lin("q", shape.qdim.max(1), hd)?,
            plan: lin("plan", shape.types.max(1), hd)?,
            h: lin("h", hd, hd)?,
            out: lin("out", hd, shape.labels())?,
        })
    }

    fn layers(&self) -> [&Lin; 6] {
        [&self.words, &self.shapes, &self.q, &self.plan, &self.h, &self.out]
    }

    fn layers_mut(&mut self) -> [&mut Lin; 6] {
        let s = self;
        [&mut s.words, &mut s.shapes, &mut s.q, &mut s.plan, &mut s.h, &mut s.out]
    }

    /// `model` (a burn tagger of the same shape) with this one's values, in module order.
    fn write_into(&self, model: Tagger) -> Result<Tagger> {
        let values: Vec<&[f32]> = self.layers().into_iter().flat_map(|l| [l.w.v.as_slice(), l.b.v.as_slice()]).collect();
        write_tensors(model, values, "tagger")
    }

    /// The forward pass over the rows `range` of `r`, whose query ids index `queries`
    /// (`qdim` wide).
    fn forward(&self, queries: &[f32], qdim: usize, r: &Rows, range: &[usize]) -> Result<Forward> {
        let s = &self.shape;
        let (n, span, hd, types) = (range.len(), s.span(), s.hidden, s.types.max(1));
        let width = s.qdim.max(1);
        if qdim.max(1) != width {
            return Err(ModelError::Internal(format!("tagger: query vectors of width {qdim} for a tagger of width {}", s.qdim)));
        }
        let mut qin = vec![0f32; n * width];
        let mut hot = vec![0f32; n * types];
        for ((dst, h), &i) in qin.chunks_exact_mut(width).zip(hot.chunks_exact_mut(types)).zip(range) {
            let o = r.query[i] as usize;
            let src = queries.get(o * width..(o + 1) * width).ok_or_else(|| ModelError::Internal(format!("tagger: no query {o}")))?;
            dst.copy_from_slice(src);
            h[..s.types].copy_from_slice(&r.plan[i * s.types..(i + 1) * s.types]);
        }
        let mut x0 = self.q.forward(&qin, n)?;
        add(&mut x0, &self.plan.forward(&hot, n)?);
        for (xr, &i) in x0.chunks_exact_mut(hd).zip(range) {
            for k in 0..span {
                for (l, id) in [(&self.words, r.words[i * span + k]), (&self.shapes, r.shapes[i * span + k])] {
                    let id = id as usize;
                    add(
                        xr,
                        l.w.v.get(id * hd..(id + 1) * hd).ok_or_else(|| ModelError::Internal(format!("tagger: id {id} out of range")))?,
                    );
                }
            }
        }
        relu(&mut x0);
        let mut a2 = self.h.forward(&x0, n)?;
        relu(&mut a2);
        let mut lp = self.out.forward(&a2, n)?;
        log_softmax_rows(&mut lp, s.labels());
        Ok(Forward { r: n, qin, hot, a1: x0, a2, lp })
    }

    /// Accumulates every gradient of the loss whose gradient with respect to the log-softmax's
    /// input is `dlogits` (`r × labels`).
    fn backward(&mut self, f: &Forward, r: &Rows, range: &[usize], dlogits: &[f32]) -> Result<()> {
        let (n, hd, span) = (f.r, self.shape.hidden, self.shape.span());
        let mut da2 = vec![0f32; n * hd];
        self.out.backward(&f.a2, dlogits, n, true, Some(&mut da2), false)?;
        relu_back(&f.a2, &mut da2);
        let mut dx0 = vec![0f32; n * hd];
        self.h.backward(&f.a1, &da2, n, true, Some(&mut dx0), false)?;
        relu_back(&f.a1, &mut dx0);
        self.q.backward(&f.qin, &dx0, n, true, None, false)?;
        self.plan.backward(&f.hot, &dx0, n, true, None, false)?;
        for (d, &i) in dx0.chunks_exact(hd).zip(range) {
            for k in 0..span {
                for (l, id) in [(&mut self.words, r.words[i * span + k]), (&mut self.shapes, r.shapes[i * span + k])] {
                    let id = id as usize;
                    add(&mut l.w.g[id * hd..(id + 1) * hd], d);
                }
            }
        }
        Ok(())
    }

    fn zero_grad(&mut self) {
        for l in self.layers_mut() {
            l.w.zero_grad();
            l.b.zero_grad();
        }
    }

    /// One Adam step. The embeddings' biases (`words`, `shapes`) are outside burn's graph (its
    /// `Dense::rows` reads the weight alone): no gradient, left alone as burn's optimiser leaves them.
    fn step(&mut self, optim: &mut AdamW, lr: f32) -> Result<()> {
        let pairs = self.layers_mut().into_iter().enumerate().flat_map(|(i, l)| {
            let embedding = i < 2;
            [(&mut l.w.v, Some(&l.w.g)), (&mut l.b.v, (!embedding).then_some(&l.b.g))]
        });
        optim.step_some(lr, pairs)
    }

    /// [`Tagger::predict`] on the host: the same passes and Viterbi decoding, the host's
    /// log-probabilities.
    pub(crate) fn predict(&self, data: &TagData) -> Result<Vec<Vec<u32>>> {
        super::predict_with(&self.shape, data, |r, chunk| Ok(self.forward(&data.queries, data.qdim, r, chunk)?.lp))
    }
}

/// The host tagger's steps and evaluation for [`crate::train::fit`]: the same batches, loss, Adam
/// and checkpoint rule as the burn learner.
struct HostLearner<'a> {
    train: &'a TagData,
    val: &'a TagData,
    lr: f32,
    optim: AdamW,
    rows: Rows,
    gold: Vec<Vec<u32>>,
}

impl Learner for HostLearner<'_> {
    type Model = HostTagger;
    type Kept = HostTagger;
    type Row = TaggerEpoch;

    fn step(&mut self, mut model: HostTagger, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<HostTagger>> {
        let chunk = batch.unwrap_or_default();
        let f = model.forward(&self.train.queries, self.train.qdim, &self.rows, chunk)?;
        let target: Vec<u32> = chunk.iter().map(|&i| self.rows.labels[i]).collect();
        let (loss, rows, d) = nll(&f.lp, &target, None, model.shape.labels());
        model.zero_grad();
        model.backward(&f, &self.rows, chunk, &d)?;
        model.step(&mut self.optim, self.lr)?;
        Ok((model, Some((loss, rows))))
    }

    fn evaluate(&mut self, model: &HostTagger, epoch: usize, train_loss: f64) -> Result<Evaluation<HostTagger, TaggerEpoch>> {
        let val_f1 = label_f1(&model.predict(self.val)?, &self.gold);
        Ok(Evaluation {
            score: Score::Validated { metric: val_f1, loss: None },
            keep: model.clone(),
            row: TaggerEpoch { epoch: epoch as u32, train_loss, val_f1 },
        })
    }
}

/// [`super::train_tagger`] on the host (after its checks): starts from the burn tagger of the same
/// seed, trains with the same batch order, returns the kept epoch written into a burn tagger on `dev`.
pub(crate) fn train(
    shape: TaggerShape,
    rows: Rows,
    train: &TagData,
    val: &TagData,
    cfg: &TaggerConfig,
    dev: &Device,
) -> Result<(Tagger, Vec<TaggerEpoch>, u32)> {
    let start = Tagger::new(shape, cfg.seed, dev);
    let model = HostTagger::from_burn(&start, shape)?;
    let items = rows.query.len();
    let gold: Vec<Vec<u32>> = val.sentences.iter().map(|s| s.labels.clone()).collect();
    let mut learner = HostLearner { train, val, lr: cfg.lr as f32, optim: AdamW::new(0.0), rows, gold };
    let plan = Plan::every_epoch("tagger", cfg.seed, cfg.epochs, items, cfg.batch);
    let f = fit(&plan, &mut learner, model, &mut Stream(cfg.seed ^ super::BATCH_STREAM))?;
    Ok((f.kept.write_into(start)?, f.curve, f.best_epoch))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use super::super::tests::planted;
    use super::super::{rows_of, train_burn};
    use super::*;
    use crate::gnn::host::{assert_gradients_are_burns, burn_gradients};

    const SHAPE: TaggerShape = TaggerShape { buckets: 64, window: 2, qdim: 2, types: 2, hidden: 16 };

    /// One batch's loss and every parameter's gradient, burn's autodiff against the host engine,
    /// over a batch with repeated rows, padding at the sentence ends and two plan types.
    #[test]
    fn host_gradients_are_burns() {
        let dev = Device::flex().autodiff();
        let mut data = planted(12, 4);
        data.sentences[3].plan_types = vec![0, 1];
        let model = Tagger::new(SHAPE, 9, &dev);
        let refs: Vec<&super::super::Sentence> = data.sentences.iter().collect();
        let r = rows_of(&SHAPE, &refs);
        let range: Vec<usize> = (0..r.query.len()).step_by(2).chain([0, 1, 1]).collect();
        let q_all: Tensor<2> = Tensor::from_data(TensorData::new(data.queries.clone(), [12, 2]), &dev);
        let lp = model.log_probs(&SHAPE, &q_all, &r, &range, &dev);
        let labels = SHAPE.labels();
        let mut onehot = vec![0f32; range.len() * labels];
        for (row, &i) in range.iter().enumerate() {
            onehot[row * labels + r.labels[i] as usize] = 1.0;
        }
        let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [range.len(), labels]), &dev);
        let loss = (lp * onehot).sum().mul_scalar(-1.0 / range.len() as f64);
        let lb = f64::from(loss.clone().into_scalar::<f32>());
        let want = burn_gradients(&model, &loss.backward());

        let mut host = HostTagger::from_burn(&model, SHAPE).expect("host");
        let f = host.forward(&data.queries, 2, &r, &range).expect("forward");
        let target: Vec<u32> = range.iter().map(|&i| r.labels[i]).collect();
        let (lh, _, d) = nll(&f.lp, &target, None, labels);
        assert!((lh - lb).abs() <= 1e-5 * lb.abs().max(1.0), "loss {lh} vs {lb}");
        host.zero_grad();
        host.backward(&f, &r, &range, &d).expect("backward");
        let got: Vec<&Vec<f32>> = host.layers().into_iter().flat_map(|l| [&l.w.g, &l.b.g]).collect();
        // The embeddings' biases (words, shapes: tensors 1 and 3): outside burn's graph.
        assert_gradients_are_burns("tagger", &got, &want, 1e-5, &[1, 3]);
    }

    /// Trained on the host and on burn from the same seed, the curves agree to rounding, the kept
    /// epoch is the same, and both engines tag the validation sentences alike with the kept model.
    #[test]
    fn host_and_burn_training_agree() {
        let dev = Device::flex();
        let (train_d, mut val) = (planted(120, 1), planted(40, 2));
        // A query without words: no rows, an empty labelling from both engines.
        val.sentences.push(super::super::Sentence { query: 39, plan_types: vec![1], ..Default::default() });
        let cfg = TaggerConfig { epochs: 6, batch: 64, lr: 5e-3, seed: 4 };
        let (hm, hc, he) = super::super::train_tagger(SHAPE, &train_d, &val, &cfg, &dev).expect("host");
        let (bm, bc, be) = train_burn(SHAPE, &train_d, &val, &cfg, &dev).expect("burn");
        assert_eq!(hc.len(), bc.len());
        for (h, b) in hc.iter().zip(&bc) {
            assert!((h.train_loss - b.train_loss).abs() <= 1e-3 * b.train_loss.abs().max(1.0), "{h:?} vs {b:?}");
            assert_eq!(h.val_f1, b.val_f1, "{h:?} vs {b:?}");
        }
        assert!(hc.last().map(|c| c.train_loss).unwrap_or(9.0) < hc[0].train_loss / 2.0, "{hc:?}");
        assert_eq!(he, be, "kept epoch");
        let (a, b) = (hm.predict_burn(&SHAPE, &val, &dev).expect("a"), bm.predict_burn(&SHAPE, &val, &dev).expect("b"));
        assert_eq!(a, b);
        let host = HostTagger::from_burn(&bm, SHAPE).expect("host");
        assert_eq!(host.predict(&val).expect("host predict"), b);
        assert_eq!(b.last(), Some(&Vec::new()), "the empty query");
        assert!(b.iter().flatten().any(|&l| l != 0), "nothing tagged");
    }
}
