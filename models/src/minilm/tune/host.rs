//! The tuned top layers on host buffers: the same model as [`super::TopLayers`] (read from and
//! written back to the burn module in its order), its encoder layers run by the language model's
//! host engine ([`crate::lm::host::HostLm::from_layers`]: sequences packed, attention per sequence,
//! the backward pass written out) and the head by a host linear layer, so that the CPU fine-tunes
//! and embeds without burn's autodiff graph (burn stays for `--device gpu`). Tested against
//! burn's autodiff gradient by gradient, by training curves and by the embeddings both give.

use burn::tensor::Device;

use super::{TopLayers, TopShape, TuneConfig, TuneEpoch};
use crate::error::{ModelError, Result};
use crate::gnn::host::{Lin, log_softmax_rows, nll, write_tensors};
use crate::lm::host::{HostLayer, HostLm, HostParams, LayerTape};
use crate::minilm::Bert;
use crate::minilm::fused::{Products, l2_normalise_rows, means};
use crate::ops::argmax;
use crate::train::optim::AdamW;
use crate::train::{Evaluation, Learner, Plan, Score, Stepped, Stream, fit};

/// The top layers and the head on host buffers.
pub(crate) struct HostTop {
    lm: HostLm,
    head: Lin,
    shape: TopShape,
}

/// States packed row after row (`[t, d]`) and each sequence's first row and length.
type Packed = (Vec<f32>, Vec<(usize, usize)>);

/// Each sequence's mean output state, the layers' record (for a backward pass) and the packing.
type Pooled = (Vec<f32>, Vec<LayerTape>, Vec<(usize, usize)>);

/// A batch of state sequences packed row after row.
fn pack(states: &[&[f32]], d: usize) -> Result<Packed> {
    let mut x = Vec::with_capacity(states.iter().map(|s| s.len()).sum());
    let mut seqs = Vec::with_capacity(states.len());
    for s in states {
        if s.is_empty() || !s.len().is_multiple_of(d) {
            return Err(ModelError::Internal(format!("encoder tuning: a state of {} floats is not whole tokens of {d}", s.len())));
        }
        seqs.push((x.len() / d, s.len() / d));
        x.extend_from_slice(s);
    }
    Ok((x, seqs))
}

impl HostTop {
    /// The host copy of burn's top layers of `shape`, multiplying with `products`.
    pub(crate) fn from_burn(model: &TopLayers, shape: TopShape, products: Products) -> Result<Self> {
        if model.layers.len() != shape.layers {
            return Err(ModelError::Internal(format!("{} tuned layers for a shape of {}", model.layers.len(), shape.layers)));
        }
        let layers = model.layers.iter().map(|l| HostLayer::from_weights(l.weights(), shape.dim)).collect::<Result<Vec<_>>>()?;
        let relative = model.relative.clone().unwrap_or_default();
        let lm = HostLm::from_layers(layers, relative, (shape.dim, shape.heads, shape.inter, shape.eps as f32), products)?;
        let (w, b) = model.head.to_host()?;
        let head = Lin::new(w, b, shape.dim, shape.classes.max(1))?;
        Ok(HostTop { lm, head, shape })
    }

    /// `model` (burn's top layers of the same shape) with this one's values, in module order.
    fn write_into(&self, model: TopLayers) -> Result<TopLayers> {
        let parts: Vec<[(Vec<f32>, Vec<f32>); 8]> = self.lm.layers().iter().map(|l| l.parts(self.shape.dim)).collect();
        let mut values: Vec<&[f32]> = parts.iter().flatten().flat_map(|(w, b)| [w.as_slice(), b.as_slice()]).collect();
        values.extend([self.head.w.v.as_slice(), self.head.b.v.as_slice()]);
        write_tensors(model, values, "MiniLM top layers")
    }

    fn try_clone(&self) -> Result<Self> {
        Ok(HostTop { lm: self.lm.try_clone()?, head: self.head.clone(), shape: self.shape })
    }

    /// Each sequence's mean output state (`[b, d]`), and (when `keep`) the layers' record and the
    /// packing, for a backward pass.
    fn pooled(&self, states: &[&[f32]], keep: bool) -> Result<Pooled> {
        let d = self.shape.dim;
        let (x, seqs) = pack(states, d)?;
        let (h, tapes) = self.lm.layers_forward(x, &seqs, keep)?;
        let starts: Vec<usize> = seqs.iter().map(|s| s.0).chain([h.len() / d]).collect();
        Ok((means(&h, &starts, d), tapes, seqs))
    }

    /// Class log-probabilities `[b, classes]` of a batch.
    fn log_probs(&self, states: &[&[f32]]) -> Result<Vec<f32>> {
        let (mean, _, _) = self.pooled(states, false)?;
        let mut lp = self.head.forward(&mean, states.len())?;
        log_softmax_rows(&mut lp, self.shape.classes.max(1));
        Ok(lp)
    }

    /// [`TopLayers::embed`] on the host.
    pub(crate) fn embed(&self, states: &[Vec<f32>], batch: usize) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(states.len() * self.shape.dim);
        for chunk in states.chunks(batch.max(1)) {
            let refs: Vec<&[f32]> = chunk.iter().map(Vec::as_slice).collect();
            let (mut mean, _, _) = self.pooled(&refs, false)?;
            l2_normalise_rows(&mut mean, self.shape.dim);
            out.extend(mean);
        }
        Ok(out)
    }

    /// [`TopLayers::predict`] on the host.
    pub(crate) fn predict(&self, states: &[Vec<f32>], batch: usize) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(states.len());
        for chunk in states.chunks(batch.max(1)) {
            let refs: Vec<&[f32]> = chunk.iter().map(Vec::as_slice).collect();
            out.extend(self.log_probs(&refs)?.chunks(self.shape.classes.max(1)).map(argmax));
        }
        Ok(out)
    }

    /// One batch's mean NLL, its gradients (the layers', the head's accumulated in `self.head`),
    /// before any step.
    fn gradients(&mut self, states: &[&[f32]], labels: &[u32]) -> Result<(f64, Vec<HostLayer>)> {
        let (d, classes, b) = (self.shape.dim, self.shape.classes.max(1), states.len());
        let (mean, tapes, seqs) = self.pooled(states, true)?;
        let mut lp = self.head.forward(&mean, b)?;
        log_softmax_rows(&mut lp, classes);
        let (loss, _, dlogits) = nll(&lp, labels, None, classes);
        self.head.w.zero_grad();
        self.head.b.zero_grad();
        let mut dmean = vec![0f32; b * d];
        self.head.backward(&mean, &dlogits, b, true, Some(&mut dmean), false)?;
        let t: usize = seqs.iter().map(|s| s.1).sum();
        let mut dh = vec![0f32; t * d];
        for (dm, &(s0, len)) in dmean.chunks_exact(d).zip(&seqs) {
            let inv = 1.0 / len as f32;
            for row in dh[s0 * d..(s0 + len) * d].chunks_exact_mut(d) {
                row.iter_mut().zip(dm).for_each(|(r, g)| *r = g * inv);
            }
        }
        let (_, grads, _) = self.lm.layers_backward(tapes, &dh, &seqs)?;
        Ok((loss, grads))
    }

    /// One Adam step of the layers and the head with the gradients of [`Self::gradients`].
    fn step(&mut self, optim: &mut AdamW, lr: f32, layers: Vec<HostLayer>) -> Result<()> {
        let grads = HostParams { layers, ..Default::default() };
        let HostTop { lm, head, .. } = self;
        lm.step_with(optim, lr, &grads, [(&mut head.w.v, &head.w.g), (&mut head.b.v, &head.b.g)])
    }
}

/// The host engine's steps (the learning rate decaying linearly to 0 over all steps) and
/// evaluation for [`crate::train::fit`]: the same batches, loss, Adam and checkpoint rule as the
/// burn learner.
struct HostLearner<'a> {
    train: (&'a [Vec<f32>], &'a [u32]),
    val: (&'a [Vec<f32>], &'a [u32]),
    lr: f64,
    optim: AdamW,
    step: usize,
    steps: usize,
    on_batch: &'a dyn Fn(usize),
}

impl Learner for HostLearner<'_> {
    type Model = HostTop;
    type Kept = HostTop;
    type Row = TuneEpoch;

    fn step(&mut self, mut model: HostTop, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<HostTop>> {
        let chunk = batch.unwrap_or_default();
        let refs: Vec<&[f32]> = chunk.iter().map(|&i| self.train.0[i].as_slice()).collect();
        let labels: Vec<u32> = chunk.iter().map(|&i| self.train.1[i]).collect();
        let (loss, grads) = model.gradients(&refs, &labels)?;
        let lr = self.lr * (1.0 - self.step as f64 / self.steps as f64);
        model.step(&mut self.optim, lr as f32, grads)?;
        self.step += 1;
        (self.on_batch)(chunk.len());
        Ok((model, Some((loss, chunk.len() as f64))))
    }

    fn evaluate(&mut self, model: &HostTop, epoch: usize, train_loss: f64) -> Result<Evaluation<HostTop, TuneEpoch>> {
        let row = |val_loss, val_accuracy| TuneEpoch { epoch: epoch as u32, train_loss, val_loss, val_accuracy };
        if self.val.0.is_empty() {
            return Ok(Evaluation { score: Score::Unvalidated { loss: Some(0.0) }, keep: model.try_clone()?, row: row(0.0, 0.0) });
        }
        let (val_loss, val_accuracy) = super::score(self.val.0, self.val.1, model.shape.classes, 64, |refs| model.log_probs(refs))?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_accuracy, loss: Some(val_loss) },
            keep: model.try_clone()?,
            row: row(val_loss, val_accuracy),
        })
    }
}

/// [`super::train_top`] on the host (after its checks), multiplying with `products`: starts from
/// burn's top layers of the same seed, trains with the same batch order, returns the kept epoch
/// written into burn's top layers on `dev`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn train(
    bert: &Bert,
    shape: TopShape,
    train: (&[Vec<f32>], &[u32]),
    val: (&[Vec<f32>], &[u32]),
    cfg: &TuneConfig,
    products: Products,
    dev: &Device,
    on_batch: &dyn Fn(usize),
) -> Result<(TopLayers, Vec<TuneEpoch>, u32)> {
    let start = TopLayers::from_bert(bert, shape, cfg.seed, dev)?;
    let model = HostTop::from_burn(&start, shape, products)?;
    let items = train.0.len();
    let batch = cfg.batch.max(1);
    let steps = (cfg.epochs * items.div_ceil(batch)).max(1);
    let mut learner = HostLearner { train, val, lr: cfg.lr, optim: AdamW::new(0.0), step: 0, steps, on_batch };
    let plan = Plan::every_epoch(super::MODEL, cfg.seed, cfg.epochs, items, batch);
    let f = fit(&plan, &mut learner, model, &mut Stream(cfg.seed ^ super::BATCH_STREAM))?;
    Ok((f.kept.write_into(start)?, f.curve, f.best_epoch))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use burn::tensor::{Tensor, TensorData};

    use super::super::train_top_with;
    use super::*;
    use crate::gnn::host::{assert_gradients_are_burns, burn_gradients};
    use crate::minilm::tests::{tiny_bert, tiny_seqs};
    use crate::minilm::{EncodeOptions, read_model};

    /// The tiny random BERT and the tiny MPNet of `tests/fixtures/lm_parity` (relative attention
    /// bias), each with token states below its top `k` layers.
    pub(super) fn encoders() -> Vec<(&'static str, Bert, Vec<Vec<u32>>)> {
        let (_, _, tiny) = tiny_bert(5);
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/lm_parity/mpnet");
        let (cfg, path, weights) = read_model(&dir).expect("MPNet config and checkpoint");
        let mpnet = Bert::from_safetensors(cfg, &path, &weights, &Device::flex()).expect("MPNet");
        assert!(mpnet.relative_bias().is_some(), "the MPNet case has a relative bias");
        let seqs = tiny_seqs().into_iter().map(|s| s.into_iter().map(|t| t % 20 + 1).collect()).collect();
        vec![("tiny BERT", tiny, tiny_seqs()), ("MPNet", mpnet, seqs)]
    }

    /// One batch's loss and every parameter's gradient (query, key, value, output, layer norms,
    /// feed-forward and head, in two tuned layers), burn's autodiff against the host engine, over
    /// sequences of different lengths (burn pads them; the host packs them).
    #[test]
    fn host_gradients_are_burns() {
        let dev = Device::flex().autodiff();
        for (name, bert, seqs) in encoders() {
            let k = 2;
            let depth = bert.config().num_hidden_layers;
            let states = bert.hidden_states(&seqs, depth - k, EncodeOptions { batch_size: 4 }, &|_| {}).expect("states");
            let shape = bert.top_shape(k, 3);
            let model = TopLayers::from_bert(&bert, shape, 7, &dev).expect("top");
            let refs: Vec<&[f32]> = states.iter().map(Vec::as_slice).collect();
            let labels: Vec<u32> = (0..refs.len() as u32).map(|i| i % 3).collect();
            let lp = model.log_probs(&shape, &refs, &dev);
            let mut onehot = vec![0f32; refs.len() * 3];
            for (r, &y) in labels.iter().enumerate() {
                onehot[r * 3 + y as usize] = 1.0;
            }
            let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [refs.len(), 3]), &dev);
            let loss = (lp * onehot).sum().mul_scalar(-1.0 / refs.len() as f64);
            let lb = f64::from(loss.clone().into_scalar::<f32>());
            let want = burn_gradients(&model, &loss.backward());

            let mut host = HostTop::from_burn(&model, shape, Products::F32).expect("host");
            let (lh, grads) = host.gradients(&refs, &labels).expect("host gradients");
            assert!((lh - lb).abs() <= 1e-5 * lb.abs().max(1.0), "{name}: loss {lh} vs {lb}");
            let parts: Vec<[(Vec<f32>, Vec<f32>); 8]> = grads.iter().map(|g| g.parts(shape.dim)).collect();
            let mut got: Vec<&Vec<f32>> = parts.iter().flatten().flat_map(|(w, b)| [w, b]).collect();
            got.extend([&host.head.w.g, &host.head.b.g]);
            assert_gradients_are_burns(name, &got, &want, 1e-4, &[]);
        }
    }

    /// Fine-tuned on the host and on burn from the same seed (a planted rule: class 1 when token 5
    /// occurs), the curves agree to rounding, the kept epoch is the same, the kept layers embed
    /// alike, and the host and burn embeddings of one model agree.
    #[test]
    fn host_and_burn_tuning_agree() {
        let dev = Device::flex();
        for (name, bert, _) in encoders() {
            let mut state = 9u64;
            let mut rnd = |n: u64| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 33) % n
            };
            let seqs: Vec<Vec<u32>> = (0..120)
                .map(|_| {
                    let len = 3 + rnd(6) as usize;
                    let mut s: Vec<u32> = (0..len).map(|_| 6 + rnd(14) as u32).collect();
                    if rnd(2) == 1 {
                        s[rnd(len as u64) as usize] = 5;
                    }
                    s
                })
                .collect();
            let labels: Vec<u32> = seqs.iter().map(|s| u32::from(s.contains(&5))).collect();
            let depth = bert.config().num_hidden_layers;
            let states = bert.hidden_states(&seqs, depth - 1, EncodeOptions::default(), &|_| {}).expect("states");
            let cfg = TuneConfig { layers: 1, epochs: 6, batch: 16, lr: 1e-2, seed: 4 };
            let (tr, va) = ((&states[..80], &labels[..80]), (&states[80..], &labels[80..]));
            let (hm, hs, hc, he) = train_top_with(Some(Products::F32), &bert, 2, tr, va, &cfg, &dev, &|_| {}).expect("host");
            let (bm, _, bc, be) = train_top_with(None, &bert, 2, tr, va, &cfg, &dev, &|_| {}).expect("burn");
            assert_eq!(hc.len(), bc.len());
            for (h, b) in hc.iter().zip(&bc) {
                assert!((h.train_loss - b.train_loss).abs() <= 1e-3 * b.train_loss.abs().max(1.0), "{name}: {h:?} vs {b:?}");
                assert!((h.val_loss - b.val_loss).abs() <= 1e-3 * b.val_loss.abs().max(1.0), "{name}: {h:?} vs {b:?}");
                assert_eq!(h.val_accuracy, b.val_accuracy, "{name}: {h:?} vs {b:?}");
            }
            assert!(hc.last().map_or(9.0, |c| c.train_loss) < hc[0].train_loss * 0.8, "{name}: {hc:?}");
            assert_eq!(he, be, "{name}: kept epoch");
            let a = hm.embed_burn(&hs, &states, 32, &dev).expect("host-trained, on burn");
            let b = bm.embed_burn(&hs, &states, 32, &dev).expect("burn-trained, on burn");
            let c = HostTop::from_burn(&bm, hs, Products::F32).expect("host").embed(&states, 7).expect("burn-trained, on the host");
            for ((x, y), z) in a.iter().zip(&b).zip(&c) {
                assert!((x - y).abs() <= 1e-3, "{name}: trained apart: {x} vs {y}");
                assert!((z - y).abs() <= 1e-5, "{name}: one model, two engines: {z} vs {y}");
            }
            let refs: Vec<&[f32]> = states.iter().map(Vec::as_slice).collect();
            let burn_classes: Vec<u32> =
                crate::train::floats(bm.log_probs(&hs, &refs, &dev)).expect("burn").chunks(2).map(argmax).collect();
            let host = HostTop::from_burn(&bm, hs, Products::F32).expect("host");
            assert_eq!(host.predict(&states, 9).expect("host predict"), burn_classes, "{name}");
            assert!(burn_classes.contains(&0) && burn_classes.contains(&1), "{name}: one class only");
        }
    }
}

#[cfg(test)]
mod lower_tests {
    use crate::minilm::EncodeOptions;

    /// The frozen lower layers' token states on the host engine (sequences packed) are burn's
    /// (padded), for every depth, on the tiny BERT and the MPNet fixture.
    #[test]
    fn host_hidden_states_are_burns() {
        for (name, bert, seqs) in super::tests::encoders() {
            for layers in 0..=bert.config().num_hidden_layers {
                let opts = EncodeOptions { batch_size: 3 };
                let host = bert.hidden_states(&seqs, layers, opts, &|_| {}).expect("host");
                let burn = bert.hidden_states_burn(&seqs, layers, opts, &|_| {}).expect("burn");
                assert_eq!(host.iter().map(Vec::len).collect::<Vec<_>>(), burn.iter().map(Vec::len).collect::<Vec<_>>());
                for (x, y) in host.iter().flatten().zip(burn.iter().flatten()) {
                    assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{name}, {layers} layers: {x} vs {y}");
                }
            }
        }
    }
}
