//! GraphQA answered through a language model: G-Retriever's soft graph token read by a
//! transformer ([`crate::lm::LanguageModel`]) together with the textualised graph and the question.
//!
//! The prompt, in G-Retriever's order (its `graph_llm.py`): the beginning token (`[CLS]`), the soft
//! tokens, the textualised graph (`desc`) truncated to a token budget, then the question, never
//! truncated, each part closed by `[SEP]` ([`layout`]). The soft tokens come from
//! ([`Soft`]):
//! * [`Soft::Graph`] — G-Retriever: the graph encoder's pooled output (mean or, for Efficient
//!   G-Retriever's `gt2`, attention pooling) through the projector `Linear → Sigmoid → Linear` into
//!   the language model's width: one token.
//! * [`Soft::Prompt`] — prompt tuning: `tokens` learned vectors (started from word embeddings of
//!   the vocabulary, drawn with the seed), the same for every question.
//! * [`Soft::None`] — the text alone (the "LoRA" and "frozen" rows without a graph token).
//!
//! Answers are classes (ExplaGraphs' support / counter, SceneGraphs' answers seen in training): a
//! linear head over the mean of the language model's token states. The language model trains as
//! its [`Tuning`] says; the graph encoder, the projector, the prompt and the head always train.
//! Training is `crate::train::fit`'s, with the GraphQA settings (AdamW, clipping, patience).
//!
//! Two engines train it ([`train`] takes either, [`host_engine`] is the device's choice): on the
//! CPU the language model and the head run on the host engine ([`crate::lm::host`], a
//! hand-written backward pass) while the soft tokens' side (encoder, MixRAG, projector, prompt)
//! stays on burn: the host backward pass gives the soft tokens' gradient `g`, and burn
//! back-propagates the surrogate `Σ soft ∘ g` through that side, which has the same gradients. On
//! a GPU everything is burn ([`LmQa`]).

use burn::module::{Module, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, sigmoid};
use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::encoders::{EncoderShape, GraphEncoder};
use crate::gnn::host::{read_tensors, write_tensors};
use crate::gnn::mixrag::{MixRag, MixShape, gumbel};
use crate::graphqa::{QaEpoch, QaExample, Target, argmax, batch_of};
use crate::lm::host::HostLm;
use crate::lm::{LanguageModel, Prompts, Tuning};
use crate::minilm::Bert;
use crate::train::optim::AdamW;
use crate::train::{Dense, Evaluation, Learner, Score, Stepped, Stream, TrainConfig, fit, floats};

/// Where the prompt's soft tokens come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Soft {
    /// No soft token: the language model reads the text alone.
    None,
    /// One token: the projected pooled output of the graph encoder.
    Graph,
    /// One token: MixRAG's projected soft prompt (its gated experts).
    Mix,
    /// `tokens` learned vectors shared by every question (prompt tuning).
    Prompt { tokens: usize },
}

impl Soft {
    /// Soft tokens per prompt.
    pub fn count(self) -> usize {
        match self {
            Soft::None => 0,
            Soft::Graph | Soft::Mix => 1,
            Soft::Prompt { tokens } => tokens,
        }
    }
}

/// One question as the language model reads it: its graph (for the encoder) and target, the word
/// pieces of its textualised graph and of the question (no special tokens).
#[derive(Debug, Clone)]
pub struct LmExample {
    pub qa: QaExample,
    pub desc: Vec<u32>,
    pub question: Vec<u32>,
}

/// The special tokens and sizes of the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The beginning token (`[CLS]`), also the soft tokens' placeholder id (never read).
    pub bos: u32,
    /// The separator closing the graph text and the question (`[SEP]`).
    pub sep: u32,
    /// Most word pieces of the textualised graph.
    pub desc_budget: usize,
    /// The language model's position table: the longest prompt.
    pub max_len: usize,
    /// Whether the textualised graph is read at all (GraphToken: the graph token alone).
    pub with_desc: bool,
}

/// The prompt of one question: `[bos] soft… desc[..budget] [sep] question [sep]`, with the
/// positions of the soft tokens. The graph text gives way to the question when the position table
/// is short; a question that does not fit with the soft tokens is an error (it is never truncated).
pub fn layout(l: &Layout, soft: usize, desc: &[u32], question: &[u32]) -> Result<(Vec<u32>, Vec<usize>)> {
    let fixed = 1 + soft + 1 + question.len() + 1;
    if fixed > l.max_len {
        return Err(ModelError::Internal(format!(
            "a question of {} word pieces with {soft} soft tokens does not fit the {} positions",
            question.len(),
            l.max_len
        )));
    }
    let room = if l.with_desc { l.desc_budget.min(l.max_len - fixed).min(desc.len()) } else { 0 };
    let mut ids = Vec::with_capacity(fixed + room);
    ids.push(l.bos);
    ids.extend(std::iter::repeat_n(l.bos, soft));
    ids.extend_from_slice(&desc[..room]);
    ids.push(l.sep);
    ids.extend_from_slice(question);
    ids.push(l.sep);
    Ok((ids, (1..=soft).collect()))
}

/// MixRAG as the source of the soft token: its shape (its own answer head stays unused) and the
/// Gumbel temperature, annealed per epoch from `tau_start` to `tau_end` as MixRAG's training does.
#[derive(Debug, Clone, Copy)]
pub struct MixSource {
    pub shape: MixShape,
    pub tau_start: f64,
    pub tau_end: f64,
}

/// Sizes of a model.
#[derive(Debug, Clone, Copy)]
pub struct LmQaShape {
    /// The graph encoder (with [`Soft::Graph`]).
    pub encoder: Option<EncoderShape>,
    /// MixRAG and its temperature schedule (with [`Soft::Mix`]).
    pub mix: Option<MixSource>,
    pub soft: Soft,
    pub tuning: Tuning,
    /// Width of the projector's hidden layer (G-Retriever: 2048).
    pub projector_hidden: usize,
    /// The projector's last layer starts at zero (else drawn like every layer): the soft token
    /// then starts as the zero vector, a neutral slot in front of the text, and grows as its
    /// gradient says (LoRA's `B = 0` start, on the token). The other weights are drawn as before.
    pub projector_zero: bool,
    /// The answer head also reads the soft tokens' final states (their mean, per prompt) beside
    /// the mean of all token states: the graph token's state after the language model reaches
    /// the head directly instead of as one token of ~160 in the mean. Without soft tokens (the
    /// text alone) the head reads the mean only.
    pub head_token: bool,
    pub classes: usize,
    pub layout: Layout,
}

impl LmQaShape {
    /// Width of the answer head's input for a language model of width `d`: the mean of the token
    /// states, then with [`LmQaShape::head_token`] the soft tokens' mean state.
    pub fn head_in(&self, d: usize) -> usize {
        if self.head_token && self.soft.count() > 0 { 2 * d } else { d }
    }
}

/// The projector's last layer, into the language model's width `d`: drawn from `rng`, or zero
/// ([`LmQaShape::projector_zero`]; `rng` moves the same, so every other weight is unchanged).
fn last_projector(shape: &LmQaShape, d: usize, rng: &mut Stream, dev: &Device) -> Dense {
    let drawn = Dense::new(shape.projector_hidden.max(1), d, rng, dev);
    if shape.projector_zero { Dense::zeros(shape.projector_hidden.max(1), d, dev) } else { drawn }
}

/// Where the soft tokens come from: the graph encoder and projector, MixRAG and projector, or a
/// learned prompt (all absent for the text alone).
#[derive(Module, Debug)]
pub struct SoftSide {
    encoder: Option<GraphEncoder>,
    mix: Option<MixRag>,
    proj1: Option<Dense>,
    proj2: Option<Dense>,
    prompt: Option<Param<Tensor<2>>>,
}

impl SoftSide {
    /// New weights for `shape` (width `d`), drawn from `rng` (and `seed` for the encoders);
    /// `words` gives the word embeddings a learned prompt starts from.
    /// `start`: trained encoder weights the graph token starts from (else drawn with `seed`).
    fn new(
        shape: &LmQaShape,
        (seed, vocab, d): (u64, usize, usize),
        rng: &mut Stream,
        words: &dyn Fn(&[u32]) -> Result<Vec<f32>>,
        start: Option<&GraphEncoder>,
        dev: &Device,
    ) -> Result<Self> {
        let (mut encoder, mut mix, mut proj1, mut proj2, mut prompt) = (None, None, None, None, None);
        if start.is_some() && shape.soft != Soft::Graph {
            return Err(ModelError::Internal("trained encoder weights given to a row without a graph token".into()));
        }
        match shape.soft {
            Soft::Graph => {
                let e = shape.encoder.ok_or_else(|| ModelError::Internal("a graph token needs a graph encoder".into()))?;
                let fresh = GraphEncoder::new(e, seed, dev)?;
                encoder = Some(match start {
                    Some(s) => {
                        let values = read_tensors(s, "the starting graph encoder")?;
                        write_tensors(fresh, values.iter().map(|(_, v)| v.as_slice()).collect(), "the starting graph encoder")?
                    }
                    None => fresh,
                });
                proj1 = Some(Dense::new(e.hidden, shape.projector_hidden.max(1), rng, dev));
                proj2 = Some(last_projector(shape, d, rng, dev));
            }
            Soft::Mix => {
                let m = shape.mix.ok_or_else(|| ModelError::Internal("a MixRAG token needs MixRAG's shape".into()))?;
                mix = Some(MixRag::new(m.shape, seed, dev)?);
                proj1 = Some(Dense::new(m.shape.hidden, shape.projector_hidden.max(1), rng, dev));
                proj2 = Some(last_projector(shape, d, rng, dev));
            }
            Soft::Prompt { tokens } => {
                if tokens == 0 {
                    return Err(ModelError::Internal("prompt tuning needs at least one soft token".into()));
                }
                let ids: Vec<u32> = (0..tokens).map(|_| (rng.next() % vocab as u64) as u32).collect();
                prompt = Some(Param::from_data(TensorData::new(words(&ids)?, [tokens, d]), dev));
            }
            Soft::None => {}
        }
        Ok(SoftSide { encoder, mix, proj1, proj2, prompt })
    }

    /// The soft tokens of a batch, `[slots, d]` in slot order (none for the text alone); `mix` =
    /// MixRAG's temperature and, in training, the stream its Gumbel noise is drawn from.
    fn soft(&self, examples: &[&LmExample], shape: &LmQaShape, mix: (f64, Option<&mut Stream>), dev: &Device) -> Result<Option<Tensor<2>>> {
        let qa: Vec<&QaExample> = examples.iter().map(|e| &e.qa).collect();
        let (node_dim, edge_dim) = enc_shape_dims(shape);
        Ok(match (&self.encoder, &self.mix, &self.proj1, &self.proj2, &self.prompt) {
            (Some(enc), _, Some(p1), Some(p2), _) => {
                let (g, _) = batch_of(&qa, node_dim, edge_dim, dev)?;
                let pooled = enc.pool(enc.nodes(&g), &g);
                Some(p2.forward(sigmoid(p1.forward(pooled))))
            }
            (_, Some(m), Some(p1), Some(p2), _) => {
                let (g, q) = batch_of(&qa, node_dim, edge_dim, dev)?;
                let noise = mix.1.map(|rng| (gumbel(g.n_nodes, rng, dev), gumbel(g.n_edges, rng, dev)));
                let (prompt, _) = m.soft_prompt(&g, q, mix.0, noise);
                Some(p2.forward(sigmoid(p1.forward(prompt))))
            }
            (_, _, _, _, Some(p)) => Some(Tensor::cat(vec![p.val(); examples.len()], 0)),
            _ => None,
        })
    }
}

/// The prompts of a batch (see [`layout`]) with their soft-token slots.
fn prompts_of(examples: &[&LmExample], shape: &LmQaShape) -> Result<Prompts> {
    let k = shape.soft.count();
    let mut prompts = Prompts::default();
    for (r, e) in examples.iter().enumerate() {
        let (ids, slots) = layout(&shape.layout, k, &e.desc, &e.question)?;
        prompts.ids.push(ids);
        prompts.slots.extend(slots.into_iter().map(|p| (r, p)));
    }
    Ok(prompts)
}

/// The soft-token side, the language model and the head, all on burn (the GPU engine).
#[derive(Module, Debug)]
pub struct LmQa {
    side: SoftSide,
    lm: LanguageModel,
    head: Dense,
}

impl LmQa {
    /// A model over `bert`'s weights (on `dev`); `seed` draws every new weight.
    pub fn new(bert: &Bert, shape: &LmQaShape, seed: u64, dev: &Device) -> Result<Self> {
        Self::starting(bert, shape, seed, None, dev)
    }

    /// [`LmQa::new`] with the graph encoder's weights from `start` when given.
    fn starting(bert: &Bert, shape: &LmQaShape, seed: u64, start: Option<&GraphEncoder>, dev: &Device) -> Result<Self> {
        let lm = LanguageModel::from_bert(bert, shape.tuning, seed, dev)?;
        let d = lm.dim();
        let mut rng = Stream(seed ^ 0x6c6d_7161);
        let words = |ids: &[u32]| floats(lm.word_embeddings(ids));
        let side = SoftSide::new(shape, (seed, bert.config().vocab_size, d), &mut rng, &words, start, dev)?;
        let head = Dense::new(shape.head_in(d), shape.classes.max(1), &mut rng, dev);
        Ok(LmQa { side, lm, head })
    }

    /// The language model (its trained scalars, for the report).
    pub fn lm(&self) -> &LanguageModel {
        &self.lm
    }

    /// Class logits `[B, classes]` of a batch.
    fn forward(&self, examples: &[&LmExample], shape: &LmQaShape, mix: (f64, Option<&mut Stream>), dev: &Device) -> Result<Tensor<2>> {
        let prompts = prompts_of(examples, shape)?;
        let soft = self.side.soft(examples, shape, mix, dev)?;
        let states = self.lm.forward(&prompts, soft)?;
        let k = shape.soft.count();
        let read = if shape.head_in(self.lm.dim()) > self.lm.dim() {
            let [_, d] = states.x.dims();
            let b = prompts.ids.len();
            let tokens: Tensor<3> = states.at(&prompts.slots).reshape([b, k, d]);
            Tensor::cat(vec![states.mean(), tokens.mean_dim(1).reshape([b, d])], 1)
        } else {
            states.mean()
        };
        Ok(self.head.forward(read))
    }
}

/// The host engine's model: the soft-token side on burn, the language model and the head on host
/// buffers (the CPU engine).
pub struct HostQa {
    side: SoftSide,
    lm: HostLm,
    /// The head, `[d, classes]` and `[classes]`.
    head_w: Vec<f32>,
    head_b: Vec<f32>,
    classes: usize,
}

/// A trained model, of either engine.
pub enum TrainedQa {
    Burn(Box<LmQa>),
    Host(Box<HostQa>),
}

impl TrainedQa {
    /// The language model's trained scalars (LoRA: the factors; frozen: none).
    pub fn lm_trained_parameters(&self) -> usize {
        match self {
            TrainedQa::Burn(m) => m.lm.trained_parameters(),
            TrainedQa::Host(m) => m.lm.trained_parameters(),
        }
    }
}

impl HostQa {
    /// The same model as [`LmQa::new`] draws (same seed, same weights), with the side on `dev`.
    pub fn new(bert: &Bert, shape: &LmQaShape, seed: u64, dev: &Device) -> Result<Self> {
        Self::starting(bert, shape, seed, None, dev)
    }

    /// [`HostQa::new`] with the graph encoder's weights from `start` when given.
    fn starting(bert: &Bert, shape: &LmQaShape, seed: u64, start: Option<&GraphEncoder>, dev: &Device) -> Result<Self> {
        let lm = HostLm::from_bert(bert, shape.tuning, seed)?;
        let d = lm.dim();
        let mut rng = Stream(seed ^ 0x6c6d_7161);
        let words = |ids: &[u32]| lm.word_embeddings(ids);
        let side = SoftSide::new(shape, (seed, bert.config().vocab_size, d), &mut rng, &words, start, dev)?;
        let classes = shape.classes.max(1);
        let (head_w, head_b) = Dense::new(shape.head_in(d), classes, &mut rng, &dev.clone().inner()).to_host()?;
        Ok(HostQa { side, lm, head_w, head_b, classes })
    }

    /// The head's input `[B, head_in]` (mean-pooled token states, then with
    /// [`LmQaShape::head_token`] the soft tokens' mean state) and class logits `[B, classes]` of a batch, with the
    /// soft tokens' tensor (`None` for the text alone) and, when `keep`, the language model's tape.
    #[allow(clippy::type_complexity)]
    fn forward(
        &self,
        examples: &[&LmExample],
        shape: &LmQaShape,
        mix: (f64, Option<&mut Stream>),
        keep: bool,
        dev: &Device,
    ) -> Result<(Vec<f32>, Vec<f32>, Option<Tensor<2>>, Option<crate::lm::host::Tape>, Vec<(usize, usize)>)> {
        let prompts = prompts_of(examples, shape)?;
        let soft = self.side.soft(examples, shape, mix, dev)?;
        let soft_host = match &soft {
            Some(t) => floats(t.clone())?,
            None => Vec::new(),
        };
        let (states, tape, seqs) = if keep {
            let (h, tape) = self.lm.forward(&prompts, &soft_host)?;
            let seqs = tape.seqs().to_vec();
            (h, Some(tape), seqs)
        } else {
            let (h, seqs) = self.lm.states(&prompts, &soft_host)?;
            (h, None, seqs)
        };
        let d = self.lm.dim();
        let (w, k) = (shape.head_in(d), shape.soft.count());
        let mut pooled = vec![0f32; seqs.len() * w];
        for (r, &(s0, n)) in seqs.iter().enumerate() {
            let (mean, token) = pooled[r * w..(r + 1) * w].split_at_mut(d);
            mean_rows(&states[s0 * d..(s0 + n) * d], mean);
            if w > d {
                // The soft tokens sit at positions 1..=k of each prompt (see `layout`).
                mean_rows(&states[(s0 + 1) * d..(s0 + 1 + k) * d], token);
            }
        }
        let c = self.classes;
        let mut logits = Vec::with_capacity(seqs.len() * c);
        for p in pooled.chunks_exact(w) {
            for j in 0..c {
                logits.push(self.head_b[j] + p.iter().enumerate().map(|(i, v)| v * self.head_w[i * c + j]).sum::<f32>());
            }
        }
        Ok((pooled, logits, soft, tape, seqs))
    }

    /// A copy for the kept epoch (the side on the inner device).
    fn kept(&self) -> Result<Self> {
        Ok(HostQa {
            side: self.side.clone().valid(),
            lm: self.lm.try_clone()?,
            head_w: self.head_w.clone(),
            head_b: self.head_b.clone(),
            classes: self.classes,
        })
    }
}

/// `out` (zeros, width `d`) becomes the mean of the `d`-wide rows of `rows` (zeros when there are none).
fn mean_rows(rows: &[f32], out: &mut [f32]) {
    let d = out.len();
    for row in rows.chunks_exact(d) {
        for (o, v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
    let n = (rows.len() / d).max(1) as f32;
    out.iter_mut().for_each(|v| *v /= n);
}

/// Mean cross-entropy over the examples with a class seen in training, and its gradient for the
/// logits (zero for the other rows); `None` when no example counts.
fn host_loss(logits: &[f32], classes: usize, examples: &[&LmExample]) -> Option<(f64, Vec<f32>)> {
    let used = examples.iter().filter(|e| matches!(e.qa.target, Target::Class(c) if (c as usize) < classes)).count();
    if used == 0 {
        return None;
    }
    let mut loss = 0f64;
    let mut grad = vec![0f32; logits.len()];
    for (r, e) in examples.iter().enumerate() {
        let Target::Class(c) = e.qa.target else { continue };
        let c = c as usize;
        if c >= classes {
            continue;
        }
        let row = &logits[r * classes..(r + 1) * classes];
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let sum: f64 = row.iter().map(|&v| f64::from(v - max).exp()).sum();
        let lse = f64::from(max) + sum.ln();
        loss -= f64::from(row[c]) - lse;
        for (j, g) in grad[r * classes..(r + 1) * classes].iter_mut().enumerate() {
            let p = (f64::from(row[j]) - lse).exp();
            *g = ((p - if j == c { 1.0 } else { 0.0 }) / used as f64) as f32;
        }
    }
    Some((loss / used as f64, grad))
}

/// (node, edge) feature widths of the graphs the encoder reads.
fn enc_shape_dims(shape: &LmQaShape) -> (usize, usize) {
    match (shape.encoder, shape.mix) {
        (Some(e), _) => (e.in_dim, e.edge_dim),
        (None, Some(m)) => (m.shape.dim, m.shape.edge_dim),
        _ => (0, 0),
    }
}

/// MixRAG's temperature at a 1-based epoch of a run of `epochs` (its own schedule: geometric); 1
/// without MixRAG. A trained model answers at its kept epoch's temperature.
pub fn temperature(shape: &LmQaShape, epochs: usize, epoch: usize) -> f64 {
    shape.mix.map_or(1.0, |m| crate::gnn::mixrag::annealed(m.tau_start, m.tau_end, epochs, epoch))
}

/// Mean cross-entropy of a batch's logits over the examples with a class seen in training.
fn loss_of(logits: Tensor<2>, examples: &[&LmExample]) -> Option<Tensor<1>> {
    let dev = logits.device();
    let classes = logits.dims()[1];
    let mut onehot = vec![0f32; examples.len() * classes];
    let mut used = 0usize;
    for (r, e) in examples.iter().enumerate() {
        if let Target::Class(c) = e.qa.target
            && (c as usize) < classes
        {
            onehot[r * classes + c as usize] = 1.0;
            used += 1;
        }
    }
    if used == 0 {
        return None;
    }
    let onehot = Tensor::<2>::from_data(TensorData::new(onehot, [examples.len(), classes]), &dev);
    Some((log_softmax(logits, 1) * onehot).sum().mul_scalar(-1.0 / used as f64))
}

/// The predicted class of each example (ties: the lowest), in batches of `batch`; `tau`: MixRAG's
/// temperature ([`temperature`] of the kept epoch; ignored without MixRAG).
pub fn predict(model: &TrainedQa, shape: &LmQaShape, examples: &[LmExample], tau: f64, batch: usize, dev: &Device) -> Result<Vec<u32>> {
    let mut out = Vec::with_capacity(examples.len());
    for chunk in examples.chunks(batch.max(1)) {
        let refs: Vec<&LmExample> = chunk.iter().collect();
        let logits = logits_of(model, &refs, shape, tau, dev)?;
        out.extend(logits.chunks(shape.classes.max(1)).map(argmax));
    }
    Ok(out)
}

/// A batch's class logits (no gradient), `[B, classes]` flat.
fn logits_of(model: &TrainedQa, refs: &[&LmExample], shape: &LmQaShape, tau: f64, dev: &Device) -> Result<Vec<f32>> {
    match model {
        TrainedQa::Burn(m) => floats(m.forward(refs, shape, (tau, None), dev)?),
        TrainedQa::Host(m) => Ok(m.forward(refs, shape, (tau, None), false, dev)?.1),
    }
}

/// Validation loss and accuracy.
fn evaluate(model: &TrainedQa, shape: &LmQaShape, examples: &[LmExample], tau: f64, dev: &Device) -> Result<(f64, f64)> {
    let (mut loss, mut counted, mut right) = (0.0, 0usize, 0usize);
    let classes = shape.classes.max(1);
    for chunk in examples.chunks(32) {
        let refs: Vec<&LmExample> = chunk.iter().collect();
        let logits = logits_of(model, &refs, shape, tau, dev)?;
        let pred: Vec<u32> = logits.chunks(classes).map(argmax).collect();
        right += refs.iter().zip(&pred).filter(|(e, p)| e.qa.target == Target::Class(**p)).count();
        if let Some((l, _)) = host_loss(&logits, classes, &refs) {
            loss += l * chunk.len() as f64;
            counted += chunk.len();
        }
    }
    Ok((loss / counted.max(1) as f64, right as f64 / examples.len().max(1) as f64))
}

pub use crate::device::host_engine;

/// The learning rates of a training run: `cfg.lr` drives the language model and the head, `side`
/// the soft-token side (graph encoder or MixRAG, projector, prompt); `None` gives it `cfg.lr` too.
#[derive(Debug, Clone, Copy)]
pub struct Rates<'a> {
    pub cfg: &'a TrainConfig,
    pub side: Option<f64>,
}

impl Rates<'_> {
    fn side(&self) -> f64 {
        self.side.unwrap_or(self.cfg.lr)
    }
}

/// Trains a model on `train`, keeping the epoch with the best validation accuracy; returns it (on
/// the inner device of `dev`), its curve and the kept epoch. `host` picks the engine: the host
/// engine (a hand-written backward pass) or burn's autodiff; [`host_engine`] is the device's own
/// choice (the CPU trains on the host engine, a GPU on burn). The graph token's encoder starts
/// from `start`'s weights when given (a graph encoder already trained, e.g. with an answer head:
/// [`crate::graphqa::GraphQa::encoder`]), else from weights drawn with `seed`; the projector, head
/// and language model always start from `seed`.
#[allow(clippy::too_many_arguments)]
pub fn train(
    host: bool,
    bert: &Bert,
    shape: &LmQaShape,
    train: &[LmExample],
    val: &[LmExample],
    rates: Rates<'_>,
    (seed, start): (u64, Option<&GraphEncoder>),
    dev: &Device,
) -> Result<(TrainedQa, Vec<QaEpoch>, u32)> {
    const MODEL: &str = "language-model QA";
    let cfg = rates.cfg;
    crate::train::check_lr(MODEL, cfg.lr)?;
    crate::train::check_lr(MODEL, rates.side())?;
    if train.is_empty() {
        return Err(ModelError::Internal("no training question".into()));
    }
    let ad = dev.clone().autodiff();
    let inner = ad.clone().inner();
    let mut rng = Stream(seed ^ 0x6c6d_7472);
    let plan = cfg.plan(MODEL, seed, train.len());
    if host {
        let model = HostQa::starting(bert, shape, seed, start, &ad)?;
        let mut optim = AdamW::new(cfg.weight_decay);
        optim.clip = Some(cfg.clip);
        let mut learner = HostLearner {
            shape,
            train,
            val,
            lr: cfg.lr,
            side_lr: rates.side(),
            epochs: cfg.epochs,
            tau: temperature(shape, cfg.epochs, 1),
            side_optim: cfg.adamw(),
            optim,
            ad,
            inner,
        };
        let f = fit(&plan, &mut learner, model, &mut rng)?;
        return Ok((TrainedQa::Host(Box::new(f.kept)), f.curve, f.best_epoch));
    }
    let model = LmQa::starting(bert, shape, seed, start, &ad)?;
    let mut learner = LmLearner {
        shape,
        train,
        val,
        lr: cfg.lr,
        side_lr: rates.side(),
        epochs: cfg.epochs,
        tau: temperature(shape, cfg.epochs, 1),
        optim: cfg.adamw(),
        ad,
        inner,
    };
    let f = fit(&plan, &mut learner, model, &mut rng)?;
    Ok((TrainedQa::Burn(Box::new(f.kept)), f.curve, f.best_epoch))
}

struct LmLearner<'a> {
    shape: &'a LmQaShape,
    train: &'a [LmExample],
    val: &'a [LmExample],
    lr: f64,
    /// The soft-token side's learning rate.
    side_lr: f64,
    epochs: usize,
    /// MixRAG's temperature of the current epoch.
    tau: f64,
    optim: ModuleOptimizer,
    ad: Device,
    inner: Device,
}

impl Learner for LmLearner<'_> {
    type Model = LmQa;
    type Kept = LmQa;
    type Row = QaEpoch;

    fn begin_epoch(&mut self, epoch: usize) {
        self.tau = temperature(self.shape, self.epochs, epoch);
    }

    fn step(&mut self, model: LmQa, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<LmQa>> {
        let refs: Vec<&LmExample> = batch.unwrap_or_default().iter().map(|&i| &self.train[i]).collect();
        let logits = model.forward(&refs, self.shape, (self.tau, Some(rng)), &self.ad)?;
        let Some(loss) = loss_of(logits, &refs) else { return Ok((model, None)) };
        let step = (f64::from(loss.clone().into_scalar::<f32>()), refs.len() as f64);
        // Two steps of one optimiser over disjoint parameters (its state is per parameter): the
        // soft-token side at its own rate, then the language model and the head.
        let mut grads = loss.backward();
        let side = GradientsParams::from_module(&mut grads, &model.side);
        let rest = GradientsParams::from_grads(grads, &model);
        let model = self.optim.step(self.side_lr, model, side);
        Ok((self.optim.step(self.lr, model, rest), Some(step)))
    }

    fn evaluate(&mut self, model: &LmQa, epoch: usize, train_loss: f64) -> Result<Evaluation<LmQa, QaEpoch>> {
        let kept = TrainedQa::Burn(Box::new(model.valid()));
        let (val_loss, val_metric) = evaluate(&kept, self.shape, self.val, self.tau, &self.inner)?;
        let TrainedQa::Burn(keep) = kept else { return Err(ModelError::Internal("engine changed".into())) };
        Ok(Evaluation {
            score: Score::Validated { metric: val_metric, loss: Some(val_loss) },
            keep: *keep,
            row: QaEpoch { epoch: epoch as u32, train_loss, val_loss, val_metric },
        })
    }
}

struct HostLearner<'a> {
    shape: &'a LmQaShape,
    train: &'a [LmExample],
    val: &'a [LmExample],
    lr: f64,
    side_lr: f64,
    epochs: usize,
    tau: f64,
    /// The soft-token side's optimiser (burn) and the language model's and head's (host): the
    /// same AdamW settings.
    side_optim: ModuleOptimizer,
    optim: AdamW,
    ad: Device,
    inner: Device,
}

impl Learner for HostLearner<'_> {
    type Model = HostQa;
    type Kept = HostQa;
    type Row = QaEpoch;

    fn begin_epoch(&mut self, epoch: usize) {
        self.tau = temperature(self.shape, self.epochs, epoch);
    }

    fn step(&mut self, mut model: HostQa, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<HostQa>> {
        let refs: Vec<&LmExample> = batch.unwrap_or_default().iter().map(|&i| &self.train[i]).collect();
        let (pooled, logits, soft, tape, seqs) = model.forward(&refs, self.shape, (self.tau, Some(rng)), true, &self.ad)?;
        let c = model.classes;
        let Some((loss, dlogits)) = host_loss(&logits, c, &refs) else { return Ok((model, None)) };
        let tape = tape.ok_or_else(|| ModelError::Internal("no tape".into()))?;
        let d = model.lm.dim();
        let (w, k) = (self.shape.head_in(d), self.shape.soft.count());
        // The head: dW = pooledᵀ·dlogits, db = Σ dlogits, dpooled = dlogits·Wᵀ.
        let mut gw = vec![0f32; w * c];
        let mut gb = vec![0f32; c];
        let mut dpooled = vec![0f32; pooled.len()];
        for (r, (p, dl)) in pooled.chunks_exact(w).zip(dlogits.chunks_exact(c)).enumerate() {
            for (j, &g) in dl.iter().enumerate() {
                gb[j] += g;
                for i in 0..w {
                    gw[i * c + j] += p[i] * g;
                    dpooled[r * w + i] += g * model.head_w[i * c + j];
                }
            }
        }
        let mut dstates = vec![0f32; seqs.last().map_or(0, |&(s, n)| s + n) * d];
        for (r, &(s0, n)) in seqs.iter().enumerate() {
            let (g, gt) = dpooled[r * w..(r + 1) * w].split_at(d);
            for row in dstates[s0 * d..(s0 + n) * d].chunks_exact_mut(d) {
                for (o, v) in row.iter_mut().zip(g) {
                    *o = v / n.max(1) as f32;
                }
            }
            if w > d {
                for row in dstates[(s0 + 1) * d..(s0 + 1 + k) * d].chunks_exact_mut(d) {
                    for (o, v) in row.iter_mut().zip(gt) {
                        *o += v / k as f32;
                    }
                }
            }
        }
        let grads = model.lm.backward(tape, &dstates)?;
        let lr = self.lr as f32;
        // One optimiser over the language model's trained tensors, then the head's.
        let (lm, head_w, head_b) = (&mut model.lm, &mut model.head_w, &mut model.head_b);
        lm.step_with(&mut self.optim, lr, &grads.params, [(head_w, &gw), (head_b, &gb)])?;
        if let Some(soft) = soft {
            let [k, sd] = soft.dims();
            let g: Tensor<2> = Tensor::from_data(TensorData::new(grads.soft, [k, sd]), &self.ad);
            let surrogate = (soft * g).sum();
            let side_grads = GradientsParams::from_grads(surrogate.backward(), &model.side);
            model.side = self.side_optim.step(self.side_lr, model.side, side_grads);
        }
        Ok((model, Some((loss, refs.len() as f64))))
    }

    fn evaluate(&mut self, model: &HostQa, epoch: usize, train_loss: f64) -> Result<Evaluation<HostQa, QaEpoch>> {
        let kept = TrainedQa::Host(Box::new(model.kept()?));
        let (val_loss, val_metric) = evaluate(&kept, self.shape, self.val, self.tau, &self.inner)?;
        let TrainedQa::Host(keep) = kept else { return Err(ModelError::Internal("engine changed".into())) };
        Ok(Evaluation {
            score: Score::Validated { metric: val_metric, loss: Some(val_loss) },
            keep: *keep,
            row: QaEpoch { epoch: epoch as u32, train_loss, val_loss, val_metric },
        })
    }
}

#[cfg(test)]
mod tests;
