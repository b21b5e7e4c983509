//! Fine-tuning the top encoder layers of MiniLM on a query-classification task: the planner's
//! query encoder (`train-planner --tune-layers K`).
//!
//! The frozen lower `L − K` layers run once per query ([`Bert::hidden_states`]); the top `K`
//! layers start from the checkpoint's weights and train with a linear head over the classes
//! (for the planner: the distinct metapaths of the training plans), softmax cross-entropy, Adam
//! with a learning rate decaying linearly to zero, seeded mini-batches. The kept epoch has the best
//! validation accuracy (ties: lower validation loss). [`TopLayers::embed`] then gives the tuned
//! sentence embedding: mean over the tokens, L2-normalised, exactly the sentence-transformers
//! pooling — with zero training steps it *is* the MiniLM sentence embedding (tested).
//!
//! Why: on MoR's plan files a fully fine-tuned MiniLM classifier predicts `plans_val.jsonl`'s
//! metapath markedly better than any classifier over the frozen embedding (README, planner table).

use std::path::Path;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};

use super::fused::Products;
use super::{Bert, EncodeOptions, LayerWeights, attention_bias, layer_forward, relpos};
use crate::error::{ModelError, Result};
use crate::ops::argmax;
use crate::train::{Dense, Evaluation, Learner, Plan, Score, Stepped, Stream, fit, floats};

mod host;

// Here rather than beside the rest of `Bert`: on the CPU the language model's host engine runs the
// frozen layers, and `crate::lm` builds on `crate::minilm` (so `minilm` itself never imports it).
impl Bert {
    /// Per sequence, its token states (`len × d`, row-major) after the first `layers` encoder
    /// layers: the frozen input of [`TopLayers`]. Batched by length like [`Bert::encode_ids`];
    /// on the CPU the language model's host engine runs them, burn elsewhere.
    pub fn hidden_states(
        &self,
        ids: &[Vec<u32>],
        layers: usize,
        opts: EncodeOptions,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>> {
        if !crate::device::host_engine(&self.device) {
            return self.hidden_states_burn(ids, layers, opts, on_batch);
        }
        // On the CPU the language model's host engine runs the lower layers (no padding).
        let lm = crate::lm::host::HostLm::lower_layers(self, layers)?;
        let d = self.dim();
        self.by_length(ids, opts, on_batch, |chunk| {
            let prompts = crate::lm::Prompts { ids: chunk.iter().map(|&i| ids[i].clone()).collect(), slots: Vec::new() };
            let (h, seqs) = lm.states(&prompts, &[])?;
            Ok(seqs.iter().map(|&(s0, len)| h[s0 * d..(s0 + len) * d].to_vec()).collect())
        })
    }
}

/// The model's name in messages and plans.
const MODEL: &str = "MiniLM top layers";
/// The seed of the training batches' stream (both engines).
const BATCH_STREAM: u64 = 0x6f72_6465;

/// The products of the host engine: f32, as burn's, so the tuned encoder's embeddings keep f32's
/// accuracy on every CPU (split bf16 on AMX would loosen them to about 2e-3).
const HOST_PRODUCTS: Products = Products::F32;

/// Hyper-parameters.
#[derive(Debug, Clone)]
pub struct TuneConfig {
    /// Trained top layers (1 ..= the encoder's depth).
    pub layers: usize,
    pub epochs: usize,
    pub batch: usize,
    /// Peak learning rate (linear decay to 0 over all steps).
    pub lr: f64,
    pub seed: u64,
}

impl Default for TuneConfig {
    fn default() -> Self {
        TuneConfig { layers: 2, epochs: 3, batch: 32, lr: 1e-4, seed: 0 }
    }
}

/// Shapes and constants of the tuned layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopShape {
    pub dim: usize,
    pub inter: usize,
    pub heads: usize,
    pub eps: f64,
    pub layers: usize,
    pub classes: usize,
}

/// One epoch of the fine-tuning curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TuneEpoch {
    pub epoch: u32,
    pub train_loss: f64,
    pub val_loss: f64,
    pub val_accuracy: f64,
}

/// A trainable encoder layer; a layer norm is a `Dense(1, d)`: weight = gain, bias = bias.
#[derive(Module, Debug)]
pub struct TunedLayer {
    q: Dense,
    k: Dense,
    v: Dense,
    attn_out: Dense,
    attn_ln: Dense,
    inter: Dense,
    out: Dense,
    out_ln: Dense,
}

const PARTS: [&str; 8] = ["q", "k", "v", "attn_out", "attn_ln", "inter", "out", "out_ln"];

impl TunedLayer {
    fn parts(&self) -> [&Dense; 8] {
        [&self.q, &self.k, &self.v, &self.attn_out, &self.attn_ln, &self.inter, &self.out, &self.out_ln]
    }

    fn weights(&self) -> LayerWeights {
        let p = |l: &Dense| l.parts();
        LayerWeights {
            q: p(&self.q),
            k: p(&self.k),
            v: p(&self.v),
            attn_out: p(&self.attn_out),
            attn_ln: p(&self.attn_ln),
            inter: p(&self.inter),
            out: p(&self.out),
            out_ln: p(&self.out_ln),
        }
    }

    /// `(d_in, d_out)` of each part, in [`PARTS`] order.
    fn dims(s: &TopShape) -> [(usize, usize); 8] {
        let d = s.dim;
        [(d, d), (d, d), (d, d), (d, d), (1, d), (d, s.inter), (s.inter, d), (1, d)]
    }

    fn from_weights(w: LayerWeights, dev: &Device) -> Result<Self> {
        let host = |(a, b): (Tensor<2>, Tensor<2>)| -> Result<Dense> {
            let [d_in, d_out] = a.dims();
            let err = |e| ModelError::Internal(format!("encoder weights: {e:?}"));
            Ok(Dense::from_host(
                a.into_data().try_to_vec::<f32>().map_err(err)?,
                b.into_data().try_to_vec::<f32>().map_err(err)?,
                d_in,
                d_out,
                dev,
            ))
        };
        Ok(TunedLayer {
            q: host(w.q)?,
            k: host(w.k)?,
            v: host(w.v)?,
            attn_out: host(w.attn_out)?,
            attn_ln: host(w.attn_ln)?,
            inter: host(w.inter)?,
            out: host(w.out)?,
            out_ln: host(w.out_ln)?,
        })
    }
}

/// The top `K` encoder layers and the classification head.
#[derive(Module, Debug)]
pub struct TopLayers {
    layers: Vec<TunedLayer>,
    head: Dense,
    /// MPNet's relative attention bias table `[buckets, heads]`, frozen (none for BERT and RoBERTa).
    #[module(skip)]
    relative: Option<Vec<f32>>,
}

/// Token states of a batch, padded: `[b·len, d]`, the attention bias (key mask, and MPNet's
/// relative bias from `relative`, `[buckets, heads]`) and the pooling mask `[b, len, 1]`.
fn pad(states: &[&[f32]], d: usize, relative: Option<&[f32]>, dev: &Device) -> (Tensor<2>, Tensor<4>, Tensor<3>, usize) {
    let b = states.len();
    let len = states.iter().map(|s| s.len() / d).max().unwrap_or(0).max(1);
    let mut x = vec![0f32; b * len * d];
    let mut mask = vec![0f32; b * len];
    for (r, s) in states.iter().enumerate() {
        x[r * len * d..r * len * d + s.len()].copy_from_slice(s);
        for m in &mut mask[r * len..r * len + s.len() / d] {
            *m = 1.0;
        }
    }
    let table = relative.map(|t| {
        let heads = t.len() / relpos::NUM_BUCKETS;
        Tensor::<2>::from_data(TensorData::new(t.to_vec(), [relpos::NUM_BUCKETS, heads]), dev)
    });
    let bias = attention_bias(&mask, b, len, table, dev);
    (Tensor::from_data(TensorData::new(x, [b * len, d]), dev), bias, Tensor::from_data(TensorData::new(mask, [b, len, 1]), dev), len)
}

impl TopLayers {
    /// The checkpoint's top `shape.layers` layers of `bert` and a Glorot-initialised head.
    pub fn from_bert(bert: &Bert, shape: TopShape, seed: u64, dev: &Device) -> Result<Self> {
        let depth = bert.layers.len();
        if shape.layers == 0 || shape.layers > depth {
            return Err(ModelError::Internal(format!("cannot tune {} of {depth} layers", shape.layers)));
        }
        let layers = (depth - shape.layers..depth)
            .map(|i| {
                bert.layer_weights(i)
                    .ok_or_else(|| ModelError::Internal(format!("no layer {i}")))
                    .and_then(|w| TunedLayer::from_weights(w, dev))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut rng = Stream(seed ^ 0x7475_6e65);
        let relative = bert.relative_bias().map(floats).transpose()?;
        Ok(TopLayers { layers, head: Dense::new(shape.dim, shape.classes.max(1), &mut rng, dev), relative })
    }

    /// Mean of the top layers' token states over each sequence, `[b, d]` (not normalised).
    fn pooled(&self, shape: &TopShape, states: &[&[f32]], dev: &Device) -> Tensor<2> {
        let (mut x, bias, mask, len) = pad(states, shape.dim, self.relative.as_deref(), dev);
        let b = states.len();
        for l in &self.layers {
            x = layer_forward(l.weights(), x, bias.clone(), b, len, shape.heads, shape.eps);
        }
        let summed: Tensor<2> = (x.reshape([b, len, shape.dim]) * mask.clone()).sum_dim(1).reshape([b, shape.dim]);
        summed / mask.sum_dim(1).reshape([b, 1]).clamp_min(1e-9)
    }

    /// Tuned sentence embeddings (`states.len() × d`, row-major, unit length), in batches of `batch`
    /// (on the CPU by the host engine, burn elsewhere).
    pub fn embed(&self, shape: &TopShape, states: &[Vec<f32>], batch: usize, dev: &Device) -> Result<Vec<f32>> {
        if crate::device::host_engine(dev) {
            return host::HostTop::from_burn(self, *shape, HOST_PRODUCTS)?.embed(states, batch);
        }
        self.embed_burn(shape, states, batch, dev)
    }

    /// [`TopLayers::embed`] on burn, whatever the device.
    pub(crate) fn embed_burn(&self, shape: &TopShape, states: &[Vec<f32>], batch: usize, dev: &Device) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(states.len() * shape.dim);
        for chunk in states.chunks(batch.max(1)) {
            let refs: Vec<&[f32]> = chunk.iter().map(Vec::as_slice).collect();
            let mean = self.pooled(shape, &refs, dev);
            let norm = mean.clone().powf_scalar(2.0).sum_dim(1).sqrt().clamp_min(1e-12);
            out.extend(floats(mean / norm)?);
        }
        Ok(out)
    }

    /// The most likely class of each state sequence (ties: the lowest class), in batches (on the
    /// CPU by the host engine, burn elsewhere).
    pub fn predict(&self, shape: &TopShape, states: &[Vec<f32>], batch: usize, dev: &Device) -> Result<Vec<u32>> {
        if crate::device::host_engine(dev) {
            return host::HostTop::from_burn(self, *shape, HOST_PRODUCTS)?.predict(states, batch);
        }
        let mut out = Vec::with_capacity(states.len());
        for chunk in states.chunks(batch.max(1)) {
            let refs: Vec<&[f32]> = chunk.iter().map(Vec::as_slice).collect();
            out.extend(floats(self.log_probs(shape, &refs, dev))?.chunks(shape.classes.max(1)).map(argmax));
        }
        Ok(out)
    }

    /// Class log-probabilities `[b, classes]`.
    fn log_probs(&self, shape: &TopShape, states: &[&[f32]], dev: &Device) -> Tensor<2> {
        log_softmax(self.head.forward(self.pooled(shape, states, dev)), 1)
    }

    fn named(&self) -> Vec<(String, &Dense)> {
        let mut v: Vec<(String, &Dense)> = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            for (n, p) in PARTS.iter().zip(l.parts()) {
                v.push((format!("layer.{i}.{n}"), p));
            }
        }
        v.push(("head".into(), &self.head));
        v
    }

    /// Writes the layers and the head as safetensors (`layer.<i>.<part>.{weight,bias}`, `head.*`).
    pub fn save(&self, path: &Path) -> Result<()> {
        let named = self.named();
        crate::train::save_layers(path, &named.iter().map(|(n, l)| (n.as_str(), *l)).collect::<Vec<_>>())
    }

    /// Reads weights written by [`TopLayers::save`], strictly; `bert` is the encoder they top (its
    /// relative attention bias, MPNet's, is frozen and not saved).
    pub fn load(path: &Path, bert: &Bert, shape: TopShape, dev: &Device) -> Result<Self> {
        let mut names = Vec::new();
        for i in 0..shape.layers {
            for (n, (a, b)) in PARTS.iter().zip(TunedLayer::dims(&shape)) {
                names.push((format!("layer.{i}.{n}"), a, b));
            }
        }
        names.push(("head".into(), shape.dim, shape.classes.max(1)));
        let spec: Vec<(&str, usize, usize)> = names.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
        let mut it = crate::train::load_layers(path, &spec, dev)?.into_iter();
        let mut layers = Vec::with_capacity(shape.layers);
        let mut next = || it.next().ok_or_else(|| ModelError::Internal("tuned layers".into()));
        for _ in 0..shape.layers {
            layers.push(TunedLayer {
                q: next()?,
                k: next()?,
                v: next()?,
                attn_out: next()?,
                attn_ln: next()?,
                inter: next()?,
                out: next()?,
                out_ln: next()?,
            });
        }
        let head = next()?;
        let relative = bert.relative_bias().map(floats).transpose()?;
        Ok(TopLayers { layers, head, relative })
    }
}

impl Bert {
    /// The shape of `layers` tuned top layers of this encoder with a `classes`-way head.
    pub fn top_shape(&self, layers: usize, classes: usize) -> TopShape {
        let c = &self.cfg;
        TopShape { dim: c.hidden_size, inter: c.intermediate_size, heads: c.num_attention_heads, eps: c.layer_norm_eps, layers, classes }
    }
}

/// Mean NLL and accuracy on labelled states, whose class log-probabilities `log_probs` gives
/// batch by batch (`batch` rows of `classes`).
fn score(
    states: &[Vec<f32>],
    labels: &[u32],
    classes: usize,
    batch: usize,
    log_probs: impl Fn(&[&[f32]]) -> Result<Vec<f32>>,
) -> Result<(f64, f64)> {
    let (mut nll, mut right) = (0.0, 0usize);
    for (chunk, lab) in states.chunks(batch.max(1)).zip(labels.chunks(batch.max(1))) {
        let refs: Vec<&[f32]> = chunk.iter().map(Vec::as_slice).collect();
        let lp = log_probs(&refs)?;
        for (r, &y) in lab.iter().enumerate() {
            let row = &lp[r * classes..(r + 1) * classes];
            nll -= f64::from(row[y as usize]);
            right += usize::from(argmax(row) == y);
        }
    }
    let n = labels.len().max(1) as f64;
    Ok((nll / n, right as f64 / n))
}

/// Fine-tunes the top `cfg.layers` layers of `bert` to classify token states (from
/// [`Bert::hidden_states`] with `depth − cfg.layers` layers) into `classes` classes. Returns the kept
/// model, its shape, the curve and the kept epoch (with no validation rows, the last epoch).
/// `on_batch` hears the number of rows after every step (progress). On the CPU the host engine
/// trains (same batches, same steps), burn's autodiff elsewhere.
pub fn train_top(
    bert: &Bert,
    classes: usize,
    train: (&[Vec<f32>], &[u32]),
    val: (&[Vec<f32>], &[u32]),
    cfg: &TuneConfig,
    dev: &Device,
    on_batch: &dyn Fn(usize),
) -> Result<(TopLayers, TopShape, Vec<TuneEpoch>, u32)> {
    let host = crate::device::host_engine(dev).then_some(HOST_PRODUCTS);
    train_top_with(host, bert, classes, train, val, cfg, dev, on_batch)
}

/// [`train_top`] on the host engine with the given products (`Some`) or on burn (`None`).
#[allow(clippy::too_many_arguments)]
fn train_top_with(
    host: Option<Products>,
    bert: &Bert,
    classes: usize,
    train: (&[Vec<f32>], &[u32]),
    val: (&[Vec<f32>], &[u32]),
    cfg: &TuneConfig,
    dev: &Device,
    on_batch: &dyn Fn(usize),
) -> Result<(TopLayers, TopShape, Vec<TuneEpoch>, u32)> {
    crate::train::check_lr(MODEL, cfg.lr)?;
    let shape = bert.top_shape(cfg.layers, classes);
    if train.0.is_empty() || train.0.len() != train.1.len() || val.0.len() != val.1.len() {
        return Err(ModelError::Internal("encoder tuning: states and labels differ in number (or none to train on)".into()));
    }
    if let Some(&y) = train.1.iter().chain(val.1).find(|&&y| y as usize >= classes) {
        return Err(ModelError::Internal(format!("encoder tuning: class {y} of {classes}")));
    }
    if let Some(s) = train.0.iter().chain(val.0).find(|s| s.is_empty() || !s.len().is_multiple_of(shape.dim)) {
        return Err(ModelError::Internal(format!("encoder tuning: a state of {} floats is not whole tokens of {}", s.len(), shape.dim)));
    }
    if let Some(products) = host {
        let (kept, curve, best) = host::train(bert, shape, train, val, cfg, products, dev, on_batch)?;
        return Ok((kept, shape, curve, best));
    }
    let ad = dev.clone().autodiff();
    let model = TopLayers::from_bert(bert, shape, cfg.seed, &ad)?;
    let mut rng = Stream(cfg.seed ^ BATCH_STREAM);
    let items = train.0.len();
    let batch = cfg.batch.max(1);
    let steps = (cfg.epochs * items.div_ceil(batch)).max(1);
    let mut learner = TuneLearner {
        shape,
        classes,
        train,
        val,
        cfg,
        dev,
        ad,
        optim: AdamConfig::new().with_epsilon(1e-8).init(),
        step: 0,
        steps,
        on_batch,
    };
    let plan = Plan::every_epoch(MODEL, cfg.seed, cfg.epochs, items, batch);
    let f = fit(&plan, &mut learner, model, &mut rng)?;
    Ok((f.kept, shape, f.curve, f.best_epoch))
}

/// The tuned layers' training steps (a learning rate decaying linearly to 0 over all steps) and
/// evaluation for [`crate::train::fit`].
struct TuneLearner<'a> {
    shape: TopShape,
    classes: usize,
    train: (&'a [Vec<f32>], &'a [u32]),
    val: (&'a [Vec<f32>], &'a [u32]),
    cfg: &'a TuneConfig,
    dev: &'a Device,
    ad: Device,
    optim: ModuleOptimizer,
    step: usize,
    steps: usize,
    on_batch: &'a dyn Fn(usize),
}

impl Learner for TuneLearner<'_> {
    type Model = TopLayers;
    type Kept = TopLayers;
    type Row = TuneEpoch;

    fn step(&mut self, model: TopLayers, batch: Option<&[usize]>, _rng: &mut Stream) -> Result<Stepped<TopLayers>> {
        let chunk = batch.unwrap_or_default();
        let classes = self.classes;
        let refs: Vec<&[f32]> = chunk.iter().map(|&i| self.train.0[i].as_slice()).collect();
        let lp = model.log_probs(&self.shape, &refs, &self.ad);
        let mut onehot = vec![0f32; chunk.len() * classes];
        for (r, &i) in chunk.iter().enumerate() {
            onehot[r * classes + self.train.1[i] as usize] = 1.0;
        }
        let onehot: Tensor<2> = Tensor::from_data(TensorData::new(onehot, [chunk.len(), classes]), &self.ad);
        let loss = (lp * onehot).sum().mul_scalar(-1.0 / chunk.len() as f64);
        let step = (f64::from(loss.clone().into_scalar::<f32>()), chunk.len() as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let lr = self.cfg.lr * (1.0 - self.step as f64 / self.steps as f64);
        let model = self.optim.step(lr, model, grads);
        self.step += 1;
        (self.on_batch)(chunk.len());
        Ok((model, Some(step)))
    }

    fn evaluate(&mut self, model: &TopLayers, epoch: usize, train_loss: f64) -> Result<Evaluation<TopLayers, TuneEpoch>> {
        let valid = model.valid();
        let row = |val_loss, val_accuracy| TuneEpoch { epoch: epoch as u32, train_loss, val_loss, val_accuracy };
        if self.val.0.is_empty() {
            // Without validation rows the last epoch is kept.
            return Ok(Evaluation { score: Score::Unvalidated { loss: Some(0.0) }, keep: valid, row: row(0.0, 0.0) });
        }
        let (val_loss, val_accuracy) =
            score(self.val.0, self.val.1, self.shape.classes, 64, |refs| floats(valid.log_probs(&self.shape, refs, self.dev)))?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_accuracy, loss: Some(val_loss) },
            keep: valid,
            row: row(val_loss, val_accuracy),
        })
    }
}
