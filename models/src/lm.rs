//! The language model that reads soft tokens with text: a BERT-family encoder loaded
//! from a sentence-transformers checkpoint ([`crate::minilm::Bert`]), made trainable, whose input
//! is a sequence of word pieces in which some positions hold *soft tokens* — vectors computed by
//! another model (G-Retriever's projected graph embedding, MixRAG's gated experts, a learned
//! prompt) in place of a word embedding.
//!
//! A soft token enters exactly where Hugging Face's `inputs_embeds` enters BERT: it replaces the
//! word embedding of its position; the position embedding, the token-type embedding and the
//! embedding layer norm apply to it as to every token. With no soft token the model *is* the
//! checkpoint's encoder (tested against the f64 reference of `minilm::tests`).
//!
//! How it trains ([`Tuning`], the settings of G-Retriever's and MixRAG's tables):
//! * [`Tuning::Frozen`]: no weight of the language model changes; gradients still flow through it
//!   to the soft tokens (G-Retriever "frozen LLM w/ PT", prompt tuning, GraphToken).
//! * [`Tuning::Lora`]: the weights stay frozen and each attention projection (query, key, value,
//!   output) gains a trained low-rank term `x·A·B·(α/r)` (peft's LoRA: `A` Kaiming-uniform as
//!   `nn.Linear` initialises it, `B` zero, so the model starts as the checkpoint).
//! * [`Tuning::Full`]: every weight trains (embedding tables included).
//!
//! The encoder layer is the one definition of `crate::minilm::layer_with`; this module adds the
//! soft-token embedding step and the LoRA terms.

use burn::module::{Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::minilm::{Bert, LayerWeights, Part, attention_bias, layer_norm, layer_with};
use crate::train::{Dense, Stream, floats};

/// How the language model's own weights train.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tuning {
    /// No weight changes; gradients reach the soft tokens through it.
    Frozen,
    /// Frozen weights plus trained low-rank terms on the attention projections.
    Lora { rank: usize, alpha: f64 },
    /// Every weight trains.
    Full,
}

impl Tuning {
    /// The settings word: `frozen`, `lora` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tuning::Frozen => "frozen",
            Tuning::Lora { .. } => "lora",
            Tuning::Full => "full",
        }
    }
}

/// A trained low-rank term `x·A·B·scale` beside a frozen projection.
#[derive(Module, Debug)]
pub struct Adapter {
    /// `[d_in, rank]`.
    a: Param<Tensor<2>>,
    /// `[rank, d_out]`.
    b: Param<Tensor<2>>,
    scale: f64,
}

/// A linear projection with an optional LoRA term.
#[derive(Module, Debug)]
pub struct Proj {
    base: Dense,
    lora: Option<Adapter>,
}

impl Proj {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        match &self.lora {
            None => self.base.forward(x),
            Some(l) => self.base.forward(x.clone()) + x.matmul(l.a.val()).matmul(l.b.val()).mul_scalar(l.scale),
        }
    }
}

/// One encoder layer's weights as trainable parameters (a layer norm is a `Dense(1, d)`: weight =
/// gain, bias = bias).
#[derive(Module, Debug)]
pub struct LmLayer {
    q: Proj,
    k: Proj,
    v: Proj,
    attn_out: Proj,
    attn_ln: Dense,
    inter: Dense,
    out: Dense,
    out_ln: Dense,
}

impl LmLayer {
    fn forward(&self, x: Tensor<2>, bias: Tensor<4>, shape: (usize, usize, usize), eps: f64) -> Tensor<2> {
        let lin = |p: Part, x: Tensor<2>| match p {
            Part::Q => self.q.forward(x),
            Part::K => self.k.forward(x),
            Part::V => self.v.forward(x),
            Part::AttnOut => self.attn_out.forward(x),
            Part::Inter => self.inter.forward(x),
            Part::Out => self.out.forward(x),
        };
        layer_with(x, bias, shape, &lin, (self.attn_ln.parts(), self.out_ln.parts()), eps)
    }
}

/// Token sequences for one forward pass: word-piece ids per row, and where the soft tokens go —
/// `slots[j] = (row, position)` receives row `j` of the soft-token matrix (the id at that position
/// is a placeholder, never read).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompts {
    pub ids: Vec<Vec<u32>>,
    pub slots: Vec<(usize, usize)>,
}

/// The token states of a batch: `[b·len, d]` (rows padded to the longest), with the padding mask.
pub struct States {
    pub x: Tensor<2>,
    /// 1 for a real token, 0 for padding, `b·len`.
    pub mask: Vec<f32>,
    pub rows: usize,
    pub len: usize,
}

impl States {
    /// The mean of each row's real token states, `[b, d]` (sentence-transformers' pooling, not
    /// normalised).
    pub fn mean(&self) -> Tensor<2> {
        let d = self.x.dims()[1];
        let dev = self.x.device();
        let mask: Tensor<3> = Tensor::from_data(TensorData::new(self.mask.clone(), [self.rows, self.len, 1]), &dev);
        let summed: Tensor<2> = (self.x.clone().reshape([self.rows, self.len, d]) * mask.clone()).sum_dim(1).reshape([self.rows, d]);
        summed / mask.sum_dim(1).reshape([self.rows, 1]).clamp_min(1e-9)
    }

    /// The states of the listed `(row, position)` tokens, `[k, d]`, in order.
    pub fn at(&self, tokens: &[(usize, usize)]) -> Tensor<2> {
        let idx: Vec<i64> = tokens.iter().map(|&(r, p)| (r * self.len + p) as i64).collect();
        let dev = self.x.device();
        let n = idx.len();
        self.x.clone().select(0, Tensor::<1, Int>::from_data(TensorData::new(idx, [n]), &dev))
    }
}

/// The trainable encoder.
#[derive(Module, Debug)]
pub struct LanguageModel {
    word: Param<Tensor<2>>,
    position: Param<Tensor<2>>,
    token_type: Param<Tensor<2>>,
    emb_ln: Dense,
    layers: Vec<LmLayer>,
    heads: usize,
    eps: f64,
    /// The position id of the first token (RoBERTa, MPNet: `pad_token_id + 1`).
    offset: usize,
    /// MPNet's relative attention bias `[buckets, heads]`, shared by the layers (trained under
    /// full fine-tuning, as transformers does); none for BERT and RoBERTa.
    relative: Option<Param<Tensor<2>>>,
}

fn host(t: Tensor<2>) -> Result<(Vec<f32>, [usize; 2])> {
    let dims = t.dims();
    Ok((floats(t)?, dims))
}

impl LanguageModel {
    /// The checkpoint's encoder as parameters on `dev`, trained as `tuning` says (`seed` draws the
    /// LoRA factors).
    pub fn from_bert(bert: &Bert, tuning: Tuning, seed: u64, dev: &Device) -> Result<Self> {
        let cfg = bert.config();
        let (word, position, token_type, (g, b)) = bert.embedding_weights();
        let param = |t: Tensor<2>| -> Result<Param<Tensor<2>>> {
            let (v, dims) = host(t)?;
            Ok(Param::from_data(TensorData::new(v, dims), dev))
        };
        let dense = |(w, b): (Tensor<2>, Tensor<2>)| -> Result<Dense> {
            let (w, [d_in, d_out]) = host(w)?;
            let (b, _) = host(b)?;
            Ok(Dense::from_host(w, b, d_in, d_out, dev))
        };
        let proj = |wb| -> Result<Proj> { Ok(Proj { base: dense(wb)?, lora: None }) };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let LayerWeights { q, k, v, attn_out, attn_ln, inter, out, out_ln } =
                bert.layer_weights(i).ok_or_else(|| ModelError::Internal(format!("no encoder layer {i}")))?;
            layers.push(LmLayer {
                q: proj(q)?,
                k: proj(k)?,
                v: proj(v)?,
                attn_out: proj(attn_out)?,
                attn_ln: dense(attn_ln)?,
                inter: dense(inter)?,
                out: dense(out)?,
                out_ln: dense(out_ln)?,
            });
        }
        let model = LanguageModel {
            word: param(word)?,
            position: param(position)?,
            // MPNet has no token types: its zero row does not train.
            token_type: param(token_type)?.set_require_grad(!cfg.is_mpnet()),
            emb_ln: dense((g, b))?,
            layers,
            heads: cfg.num_attention_heads,
            eps: cfg.layer_norm_eps,
            offset: cfg.position_offset(),
            relative: bert.relative_bias().map(&param).transpose()?,
        };
        match tuning {
            Tuning::Full => Ok(model),
            Tuning::Frozen => Ok(model.no_grad()),
            Tuning::Lora { rank, alpha } => {
                if rank == 0 || !(alpha.is_finite() && alpha > 0.0) {
                    return Err(ModelError::Internal(format!("LoRA rank {rank} and alpha {alpha}: both must be positive")));
                }
                let mut model = model.no_grad();
                let mut rng = Stream(seed ^ 0x6c6f_7261);
                let d = cfg.hidden_size;
                let scale = alpha / rank as f64;
                // peft: lora_A is an nn.Linear(d_in, r) (Kaiming-uniform, a = √5: U(±1/√d_in)), lora_B zero.
                let adapter = |rng: &mut Stream| {
                    let bound = 1.0 / (d as f64).sqrt();
                    let a: Vec<f32> = (0..d * rank).map(|_| ((rng.unit() * 2.0 - 1.0) * bound) as f32).collect();
                    Some(Adapter {
                        a: Param::from_data(TensorData::new(a, [d, rank]), dev),
                        b: Param::from_data(TensorData::new(vec![0f32; rank * d], [rank, d]), dev),
                        scale,
                    })
                };
                for l in &mut model.layers {
                    l.q.lora = adapter(&mut rng);
                    l.k.lora = adapter(&mut rng);
                    l.v.lora = adapter(&mut rng);
                    l.attn_out.lora = adapter(&mut rng);
                }
                Ok(model)
            }
        }
    }

    /// Hidden width.
    pub fn dim(&self) -> usize {
        self.word.val().dims()[1]
    }

    /// Position table length: the longest sequence the model reads.
    pub fn max_len(&self) -> usize {
        self.position.val().dims()[0].saturating_sub(self.offset)
    }

    /// Token states of `prompts` after every layer, with `soft` (`[slots, d]`, or none when there
    /// are no slots) in the slots.
    pub fn forward(&self, prompts: &Prompts, soft: Option<Tensor<2>>) -> Result<States> {
        let b = prompts.ids.len();
        let len = prompts.ids.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let [vocab, d] = self.word.val().dims();
        if len > self.max_len() {
            return Err(ModelError::Config {
                model: "the language model".into(),
                reason: format!("a prompt of {len} tokens exceeds the {} positions", self.max_len()),
            });
        }
        if let Some(&t) = prompts.ids.iter().flatten().find(|&&t| t as usize >= vocab) {
            return Err(ModelError::Config {
                model: "the language model".into(),
                reason: format!("token id {t} is outside the vocabulary of {vocab}"),
            });
        }
        let dev = self.word.val().device();
        let mut flat = vec![0i64; b * len];
        let mut mask = vec![0f32; b * len];
        for (r, s) in prompts.ids.iter().enumerate() {
            for (c, &t) in s.iter().enumerate() {
                flat[r * len + c] = i64::from(t);
                mask[r * len + c] = 1.0;
            }
        }
        let ids: Tensor<1, Int> = Tensor::from_data(TensorData::new(flat, [b * len]), &dev);
        let mut x = self.word.val().select(0, ids);
        match (soft, prompts.slots.is_empty()) {
            (None, true) => {}
            (Some(soft), false) => {
                let [k, sd] = soft.dims();
                if k != prompts.slots.len() || sd != d {
                    return Err(ModelError::Internal(format!("{k}×{sd} soft tokens for {} slots of width {d}", prompts.slots.len())));
                }
                // A one-hot placement `[b·len, k]` puts soft row j at its slot; `keep` zeroes the
                // placeholder's word embedding there.
                let mut place = vec![0f32; b * len * k];
                let mut keep = vec![1f32; b * len];
                for (j, &(r, p)) in prompts.slots.iter().enumerate() {
                    if r >= b || p >= prompts.ids[r].len() {
                        return Err(ModelError::Internal(format!("soft-token slot ({r}, {p}) is outside the prompts")));
                    }
                    if keep[r * len + p] == 0.0 {
                        return Err(ModelError::Internal(format!("soft-token slot ({r}, {p}) given twice")));
                    }
                    place[(r * len + p) * k + j] = 1.0;
                    keep[r * len + p] = 0.0;
                }
                let place: Tensor<2> = Tensor::from_data(TensorData::new(place, [b * len, k]), &dev);
                let keep: Tensor<2> = Tensor::from_data(TensorData::new(keep, [b * len, 1]), &dev);
                x = x * keep + place.matmul(soft);
            }
            (None, false) => return Err(ModelError::Internal("soft-token slots without soft tokens".into())),
            (Some(_), true) => return Err(ModelError::Internal("soft tokens without slots".into())),
        }
        let pos: Vec<i64> = (0..b * len).map(|i| (i % len + self.offset) as i64).collect();
        let pos: Tensor<1, Int> = Tensor::from_data(TensorData::new(pos, [b * len]), &dev);
        let x = x + self.position.val().select(0, pos) + self.token_type.val().slice([0..1, 0..d]);
        let mut x = layer_norm(x, self.emb_ln.parts(), self.eps);
        let bias = attention_bias(&mask, b, len, self.relative.as_ref().map(Param::val), &dev);
        for l in &self.layers {
            x = l.forward(x, bias.clone(), (b, len, self.heads), self.eps);
        }
        Ok(States { x, mask, rows: b, len })
    }

    /// The word embeddings of `ids`, `[n, d]` (a prompt's learned soft tokens start from words).
    pub fn word_embeddings(&self, ids: &[u32]) -> Tensor<2> {
        let dev = self.word.val().device();
        let idx: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
        self.word.val().select(0, Tensor::<1, Int>::from_data(TensorData::new(idx, [ids.len()]), &dev))
    }

    /// The number of trained scalars under this tuning (LoRA: the factors alone).
    pub fn trained_parameters(&self) -> usize {
        let mut n = 0;
        let mut count = |t: &Param<Tensor<2>>| {
            if t.val().is_require_grad() {
                n += t.val().dims().iter().product::<usize>();
            }
        };
        for l in &self.layers {
            for p in [&l.q, &l.k, &l.v, &l.attn_out] {
                if let Some(a) = &p.lora {
                    count(&a.a);
                    count(&a.b);
                }
            }
        }
        if self.word.val().is_require_grad() {
            n += self.num_params() - self.layers.iter().map(LmLayer::lora_params).sum::<usize>();
            if !self.token_type.val().is_require_grad() {
                n -= self.token_type.val().dims().iter().product::<usize>();
            }
        }
        n
    }
}

impl LmLayer {
    fn lora_params(&self) -> usize {
        let size = |t: &Param<Tensor<2>>| t.val().dims().iter().product::<usize>();
        [&self.q, &self.k, &self.v, &self.attn_out].iter().filter_map(|p| p.lora.as_ref()).map(|a| size(&a.a) + size(&a.b)).sum()
    }
}

/// `make bench`'s training step, the one PyTorch is timed on in the same run:
/// `rows` prompts of `len` word pieces (seeded ids, a soft token at position 1 of each), the loss
/// `sum(mean_pool(states) · probe)`, the backward pass and one AdamW step of the trained weights
/// (`tuning`) and the soft tokens. Returns the seconds of each of `steps` steps after one warm-up
/// step, and the number of trained scalars.
pub fn bench_steps(bert: &Bert, tuning: Tuning, (rows, len): (usize, usize), steps: usize, dev: &Device) -> Result<(Vec<f64>, usize)> {
    use burn::optim::{AdamWConfig, GradientsParams};
    #[derive(Module, Debug)]
    struct Step {
        lm: LanguageModel,
        soft: Param<Tensor<2>>,
    }
    let ad = dev.clone().autodiff();
    let lm = LanguageModel::from_bert(bert, tuning, 0, &ad)?;
    let (vocab, d) = (bert.config().vocab_size as u64, lm.dim());
    let mut rng = Stream(17);
    let ids: Vec<Vec<u32>> = (0..rows).map(|_| (0..len).map(|_| (1000 + rng.next() % (vocab - 1000)) as u32).collect()).collect();
    let prompts = Prompts { ids, slots: (0..rows).map(|r| (r, 1)).collect() };
    let soft: Vec<f32> = (0..rows * d).map(|_| (rng.unit() - 0.5) as f32).collect();
    let probe: Vec<f32> = (0..rows * d).map(|_| (rng.unit() - 0.5) as f32).collect();
    let probe: Tensor<2> = Tensor::from_data(TensorData::new(probe, [rows, d]), &ad);
    let mut model = Step { lm, soft: Param::from_data(TensorData::new(soft, [rows, d]), &ad) };
    let trained = model.lm.trained_parameters() + rows * d;
    let mut optim = AdamWConfig::new().with_weight_decay(0.01).init();
    let mut times = Vec::with_capacity(steps);
    for i in 0..=steps {
        let t = std::time::Instant::now();
        let states = model.lm.forward(&prompts, Some(model.soft.val()))?;
        let loss = (states.mean() * probe.clone()).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-5, model, grads);
        // Wait for the device (wgpu queues work) before reading the clock.
        let _ = floats(model.soft.val().slice([0..1, 0..1]))?;
        if i > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    Ok((times, trained))
}

pub mod host;

#[cfg(test)]
mod tests;
