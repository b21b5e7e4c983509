//! The language model's host training engine: the same model as
//! [`super::LanguageModel`] — a BERT-family encoder reading soft tokens with text, trained frozen,
//! with LoRA or fully — with its forward and backward passes written out over host buffers, the
//! way [`crate::gnn::fast`] trains TopoRAG's GNNs, instead of going through burn's autodiff.
//!
//! What it does differently, none of it changing the maths:
//! * sequences are packed, not padded: the linear layers run once over the concatenated tokens of
//!   the batch, attention runs per (sequence, head) on that sequence's tokens only, in parallel;
//! * query, key and value are one product (their weights side by side), in both directions;
//! * the backward pass keeps what it needs from the forward pass (the normalised layer-norm inputs
//!   and their inverse deviations, the attention probabilities, GELU's input) instead of a graph;
//! * a weight that does not train gets no gradient product (`dW = xᵀ·dy` is skipped; only
//!   `dx = dy·Wᵀ` runs), and LoRA's `x·A·B` is two thin products, never a `d × d` update;
//! * AdamW runs over flat buffers.
//!
//! Parity with Hugging Face transformers and peft is the same test as the burn model's
//! (`tests/fixtures/lm_parity`), and the two engines are compared on a full checkpoint.

use rayon::prelude::*;

use super::{Prompts, Tuning};
use crate::error::{ModelError, Result};
use crate::linalg::{Op, gemm_f32_par};
use crate::minilm::attention::softmax;
use crate::minilm::fused::Products;
use crate::minilm::{Bert, LayerWeights, amx, relpos};
use crate::ops::{erf_approx, exp_approx, sum16};
use crate::train::optim::AdamW;
use crate::train::{Stream, floats};

/// The trained tensors of one encoder layer, flat and row-major (`[in, out]` for a product); the
/// same struct holds their gradients, empty where a tensor does not train.
#[derive(Debug, Clone, Default)]
pub struct HostLayer {
    /// Query, key and value side by side, `[d, 3d]`, and their biases `[3d]`.
    pub(crate) wqkv: Vec<f32>,
    pub(crate) bqkv: Vec<f32>,
    pub(crate) wo: Vec<f32>,
    pub(crate) bo: Vec<f32>,
    pub(crate) ln1_g: Vec<f32>,
    pub(crate) ln1_b: Vec<f32>,
    pub(crate) wi: Vec<f32>,
    pub(crate) bi: Vec<f32>,
    pub(crate) wout: Vec<f32>,
    pub(crate) bout: Vec<f32>,
    pub(crate) ln2_g: Vec<f32>,
    pub(crate) ln2_b: Vec<f32>,
    /// LoRA's `A` (`[d, r]`) and `B` (`[r, d]`) for query, key, value and attention output; empty
    /// without LoRA.
    pub(crate) lora_a: [Vec<f32>; 4],
    pub(crate) lora_b: [Vec<f32>; 4],
}

impl HostLayer {
    /// An encoder layer's tensors on host buffers (query, key and value side by side; no LoRA).
    pub(crate) fn from_weights(w: LayerWeights, d: usize) -> Result<HostLayer> {
        let LayerWeights { q, k, v, attn_out, attn_ln, inter, out, out_ln } = w;
        let (wq, wk, wv) = (floats(q.0)?, floats(k.0)?, floats(v.0)?);
        if [&wq, &wk, &wv].iter().any(|w| w.len() != d * d) {
            return Err(ModelError::Internal(format!("an encoder layer's query, key or value is not {d} × {d}")));
        }
        let mut wqkv = Vec::with_capacity(3 * d * d);
        for r in 0..d {
            for w in [&wq, &wk, &wv] {
                wqkv.extend_from_slice(&w[r * d..(r + 1) * d]);
            }
        }
        let mut bqkv = floats(q.1)?;
        bqkv.extend(floats(k.1)?);
        bqkv.extend(floats(v.1)?);
        Ok(HostLayer {
            wqkv,
            bqkv,
            wo: floats(attn_out.0)?,
            bo: floats(attn_out.1)?,
            ln1_g: floats(attn_ln.0)?,
            ln1_b: floats(attn_ln.1)?,
            wi: floats(inter.0)?,
            bi: floats(inter.1)?,
            wout: floats(out.0)?,
            bout: floats(out.1)?,
            ln2_g: floats(out_ln.0)?,
            ln2_b: floats(out_ln.1)?,
            lora_a: Default::default(),
            lora_b: Default::default(),
        })
    }

    /// The layer's `(weight, bias)` pairs in the order of [`LayerWeights`] (query, key, value,
    /// attention output, its layer norm, intermediate, output, its layer norm), weights `[in, out]`.
    pub(crate) fn parts(&self, d: usize) -> [(Vec<f32>, Vec<f32>); 8] {
        let qkv = |j: usize| -> (Vec<f32>, Vec<f32>) {
            let w = self.wqkv.chunks_exact(3 * d).flat_map(|row| row[j * d..(j + 1) * d].iter().copied()).collect();
            (w, self.bqkv[j * d..(j + 1) * d].to_vec())
        };
        [
            qkv(0),
            qkv(1),
            qkv(2),
            (self.wo.clone(), self.bo.clone()),
            (self.ln1_g.clone(), self.ln1_b.clone()),
            (self.wi.clone(), self.bi.clone()),
            (self.wout.clone(), self.bout.clone()),
            (self.ln2_g.clone(), self.ln2_b.clone()),
        ]
    }

    fn tensors(&self) -> Vec<&Vec<f32>> {
        let mut v = vec![
            &self.wqkv,
            &self.bqkv,
            &self.wo,
            &self.bo,
            &self.ln1_g,
            &self.ln1_b,
            &self.wi,
            &self.bi,
            &self.wout,
            &self.bout,
            &self.ln2_g,
            &self.ln2_b,
        ];
        v.extend(self.lora_a.iter());
        v.extend(self.lora_b.iter());
        v
    }
    fn tensors_mut(&mut self) -> Vec<&mut Vec<f32>> {
        let mut v = vec![
            &mut self.wqkv,
            &mut self.bqkv,
            &mut self.wo,
            &mut self.bo,
            &mut self.ln1_g,
            &mut self.ln1_b,
            &mut self.wi,
            &mut self.bi,
            &mut self.wout,
            &mut self.bout,
            &mut self.ln2_g,
            &mut self.ln2_b,
        ];
        v.extend(self.lora_a.iter_mut());
        v.extend(self.lora_b.iter_mut());
        v
    }
}

/// The embedding tables: words `[vocab, d]`, positions `[positions, d]`, token type 0 `[d]`, the
/// embedding layer norm, and MPNet's relative attention bias `[buckets, heads]` (shared by the
/// layers; empty for BERT and RoBERTa).
#[derive(Debug, Clone, Default)]
pub struct HostEmbeddings {
    pub(crate) word: Vec<f32>,
    pub(crate) position: Vec<f32>,
    pub(crate) token_type: Vec<f32>,
    pub(crate) ln_g: Vec<f32>,
    pub(crate) ln_b: Vec<f32>,
    pub(crate) relative: Vec<f32>,
}

/// Every tensor of the model (or, as [`HostGrads::params`], their gradients).
#[derive(Debug, Clone, Default)]
pub struct HostParams {
    pub(crate) emb: HostEmbeddings,
    pub(crate) layers: Vec<HostLayer>,
}

impl HostParams {
    fn tensors(&self) -> Vec<&Vec<f32>> {
        let e = &self.emb;
        let mut v = vec![&e.word, &e.position, &e.token_type, &e.ln_g, &e.ln_b, &e.relative];
        for l in &self.layers {
            v.extend(l.tensors());
        }
        v
    }
    fn tensors_mut(&mut self) -> Vec<&mut Vec<f32>> {
        let e = &mut self.emb;
        let mut v = vec![&mut e.word, &mut e.position, &mut e.token_type, &mut e.ln_g, &mut e.ln_b, &mut e.relative];
        for l in &mut self.layers {
            v.extend(l.tensors_mut());
        }
        v
    }
}

/// The gradients of one backward pass: the model's (empty where a tensor does not train) and the
/// soft tokens' (`[slots, d]`).
#[derive(Debug, Clone)]
pub struct HostGrads {
    pub params: HostParams,
    pub soft: Vec<f32>,
}

/// Sizes read from the checkpoint.
#[derive(Debug, Clone, Copy)]
struct Dims {
    vocab: usize,
    d: usize,
    heads: usize,
    ff: usize,
    positions: usize,
    offset: usize,
    eps: f32,
}

/// The trainable encoder on host buffers.
pub struct HostLm {
    p: HostParams,
    dims: Dims,
    tuning: Tuning,
    /// LoRA's `α / r` (0 without LoRA).
    scale: f32,
    rank: usize,
    /// How the linear layers multiply, resolved ([`Products::Auto`] never stays).
    products: Products,
    /// Per layer, query-key-value, attention output, intermediate and output weights packed for a
    /// bf16 kernel (both `W` and `Wᵀ`), or empty under f32 products. Rebuilt after each step
    /// that changes them (full fine-tuning).
    packs: Vec<[WeightPack; 4]>,
    /// Under LoRA, per layer, the query-key-value and attention-output weights with their low-rank
    /// terms merged in (`W + s·A·B`): the forward pass and the backward pass's `dy·Wᵀ` read these,
    /// so LoRA costs no extra product there. Rebuilt after every step.
    merged: Vec<[Vec<f32>; 2]>,
    /// Layers alone, without embeddings ([`HostLm::from_layers`]): MPNet's relative bias stays
    /// frozen.
    layers_only: bool,
}

/// A weight packed for the forward product (`x·W`) and the backward one (`dy·Wᵀ`).
struct WeightPack {
    fwd: Pack,
    bwd: Pack,
}

/// A right-hand side packed for a bf16 kernel.
enum Pack {
    Amx(amx::PackedB),
}

impl Pack {
    fn new(products: Products, w: &[f32], k: usize, n: usize) -> Result<Option<Pack>> {
        Ok(match products {
            Products::Amx => Some(Pack::Amx(amx::PackedB::new(w, k, n)?)),
            Products::F32 | Products::Auto | Products::Bf16 | Products::AmxBf16 => None,
        })
    }

    /// `dst (m×n) (+)= lhs (m×k) · self`.
    fn mm(&self, m: usize, dst: &mut [f32], lhs: &[f32], acc: bool) -> Result<()> {
        match self {
            Pack::Amx(b) => amx::matmul(m, dst, b.n(), lhs, b.k(), b, acc),
        }
    }
}

/// `x (t×k)` transposed, `k×t`.
fn transpose(x: &[f32], t: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    const B: usize = 64;
    out.par_chunks_mut(B * t).enumerate().for_each(|(cb, block)| {
        let c0 = cb * B;
        let cols = block.len() / t.max(1);
        for r0 in (0..t).step_by(B) {
            for c in 0..cols {
                for r in r0..(r0 + B).min(t) {
                    block[c * t + r] = x[r * k + c0 + c];
                }
            }
        }
    });
    out
}

/// What the backward pass needs of one layer's forward pass.
pub(crate) struct LayerTape {
    /// The layer's input, `[t, d]`.
    h: Vec<f32>,
    /// Query, key and value, `[t, 3d]`.
    qkv: Vec<f32>,
    /// Attention probabilities per (sequence, head), `len × len` each.
    probs: Vec<Vec<f32>>,
    ctx: Vec<f32>,
    x1: Vec<f32>,
    r1: Vec<f32>,
    h1: Vec<f32>,
    /// GELU's input and output, `[t, ff]`.
    f: Vec<f32>,
    g: Vec<f32>,
    x2: Vec<f32>,
    r2: Vec<f32>,
    /// LoRA's `h·A` for query, key, value and `ctx·A` for the output, `[t, r]` each.
    lora_x: [Vec<f32>; 4],
}

/// The forward pass's record, consumed by [`HostLm::backward`].
pub struct Tape {
    /// `(first packed token, length)` per prompt.
    seqs: Vec<(usize, usize)>,
    ids: Vec<u32>,
    /// The soft-token row each packed token reads, if any.
    slot_of: Vec<Option<usize>>,
    positions: Vec<usize>,
    x0: Vec<f32>,
    r0: Vec<f32>,
    layers: Vec<LayerTape>,
    slots: usize,
}

impl Tape {
    /// `(first packed token, length)` of each prompt: the states of prompt `r`, token `c` are row
    /// `seqs[r].0 + c` of the packed `[t, d]` states.
    pub fn seqs(&self) -> &[(usize, usize)] {
        &self.seqs
    }
}

fn nn(data: &[f32], rows: usize, cols: usize) -> Op<'_> {
    Op::n(data, rows, cols)
}
fn tt(data: &[f32], rows: usize, cols: usize) -> Op<'_> {
    Op::t(data, rows, cols)
}

/// `dst (t×n) = bias (broadcast over rows)`.
fn broadcast(bias: &[f32], t: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(t * bias.len());
    for _ in 0..t {
        v.extend_from_slice(bias);
    }
    v
}

/// Column sums of a `[t, n]` matrix: partial sums over fixed blocks of rows in parallel, then
/// added in block order, so that the result does not depend on how rayon splits the work.
fn col_sums(x: &[f32], n: usize) -> Vec<f32> {
    let partial: Vec<Vec<f32>> = x
        .par_chunks(n * 256)
        .map(|rows| {
            let mut acc = vec![0f32; n];
            for row in rows.chunks_exact(n) {
                for (a, v) in acc.iter_mut().zip(row) {
                    *a += v;
                }
            }
            acc
        })
        .collect();
    let mut out = vec![0f32; n];
    for p in &partial {
        for (a, v) in out.iter_mut().zip(p) {
            *a += v;
        }
    }
    out
}

/// An elementwise pass, run through pulp's runtime dispatch so that its loops compile for the best
/// instruction set of this CPU (AVX-512, AVX2 or baseline), as the MiniLM engine's passes do.
enum Pass<'a> {
    LnForward { x: &'a [f32], y: &'a mut [f32], xhat: &'a mut [f32], rstd: &'a mut [f32], g: &'a [f32], b: &'a [f32], eps: f32 },
    LnBackward { dy: &'a [f32], xhat: &'a [f32], rstd: &'a [f32], g: &'a [f32], dx: &'a mut [f32] },
    Gelu { f: &'a [f32], out: &'a mut [f32] },
    GeluBackward { dg: &'a mut [f32], f: &'a [f32] },
    Softmax { s: &'a mut [f32], len: usize, scale: f32 },
}

impl pulp::WithSimd for Pass<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        match self {
            Pass::LnForward { x, y, xhat, rstd, g, b, eps } => ln_forward_rows(x, y, xhat, rstd, g, b, eps),
            Pass::LnBackward { dy, xhat, rstd, g, dx } => ln_backward_rows(dy, xhat, rstd, g, dx),
            Pass::Gelu { f, out } => {
                for (o, &x) in out.iter_mut().zip(f) {
                    *o = crate::ops::gelu(x);
                }
            }
            Pass::GeluBackward { dg, f } => {
                for (g, &x) in dg.iter_mut().zip(f) {
                    *g *= 0.5 * (1.0 + erf_approx(x * SQRT_HALF)) + x * INV_SQRT_2PI * exp_approx(-0.5 * x * x);
                }
            }
            Pass::Softmax { s, len, scale } => {
                for row in s.chunks_exact_mut(len) {
                    softmax(simd, row, scale);
                }
            }
        }
    }
}

fn simd(pass: Pass<'_>) {
    crate::simd::arch().dispatch(pass)
}

/// Rows per parallel task of the row-wise passes.
const ROWS: usize = 32;
/// Elements per parallel task of the elementwise passes.
const CHUNK: usize = 1 << 14;

/// `Σ a·b` with 16 independent lanes.
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (mut ia, mut ib) = (a.chunks_exact(16), b.chunks_exact(16));
    for (x, y) in (&mut ia).zip(&mut ib) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + ia.remainder().iter().zip(ib.remainder()).map(|(x, y)| x * y).sum::<f32>()
}

#[inline(always)]
fn ln_forward_rows(x: &[f32], y: &mut [f32], xhat: &mut [f32], rstd: &mut [f32], g: &[f32], b: &[f32], eps: f32) {
    let d = g.len();
    for (((xr, yr), xh), rs) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(xhat.chunks_exact_mut(d)).zip(rstd.iter_mut()) {
        let mean = sum16(xr) / d as f32;
        for (h, &v) in xh.iter_mut().zip(xr) {
            *h = v - mean;
        }
        let var = dot16(xh, xh) / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        *rs = inv;
        for ((h, o), (gg, bb)) in xh.iter_mut().zip(yr.iter_mut()).zip(g.iter().zip(b)) {
            *h *= inv;
            *o = *h * gg + bb;
        }
    }
}

#[inline(always)]
fn ln_backward_rows(dy: &[f32], xhat: &[f32], rstd: &[f32], g: &[f32], dx: &mut [f32]) {
    let d = g.len();
    for (((dyr, xh), &rs), dxr) in dy.chunks_exact(d).zip(xhat.chunks_exact(d)).zip(rstd).zip(dx.chunks_exact_mut(d)) {
        for ((o, a), gg) in dxr.iter_mut().zip(dyr).zip(g) {
            *o = a * gg;
        }
        let m1 = sum16(dxr) / d as f32;
        let m2 = dot16(dxr, xh) / d as f32;
        for (o, h) in dxr.iter_mut().zip(xh) {
            *o = rs * (*o - m1 - h * m2);
        }
    }
}

/// Layer norm over rows of width `d`: `y = g·x̂ + b`, returning `(y, x̂, 1/σ per row)`.
fn ln_forward(x: &[f32], d: usize, g: &[f32], b: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let t = x.len() / d;
    let mut xhat = vec![0f32; x.len()];
    let mut y = vec![0f32; x.len()];
    let mut rstd = vec![0f32; t];
    xhat.par_chunks_mut(d * ROWS)
        .zip(y.par_chunks_mut(d * ROWS))
        .zip(rstd.par_chunks_mut(ROWS))
        .zip(x.par_chunks(d * ROWS))
        .for_each(|(((xhat, y), rstd), x)| simd(Pass::LnForward { x, y, xhat, rstd, g, b, eps }));
    (y, xhat, rstd)
}

/// Layer norm's backward: `dx` from `dy`, and (when `params`) the gain's and bias's gradients.
/// A layer norm's gain and bias gradients.
type NormGrads = Option<(Vec<f32>, Vec<f32>)>;

fn ln_backward(dy: &[f32], xhat: &[f32], rstd: &[f32], g: &[f32], params: bool) -> (Vec<f32>, NormGrads) {
    let d = g.len();
    let mut dx = vec![0f32; dy.len()];
    dx.par_chunks_mut(d * ROWS)
        .zip(dy.par_chunks(d * ROWS))
        .zip(xhat.par_chunks(d * ROWS))
        .zip(rstd.par_chunks(ROWS))
        .for_each(|(((dx, dy), xhat), rstd)| simd(Pass::LnBackward { dy, xhat, rstd, g, dx }));
    let pg = params.then(|| {
        let prod: Vec<f32> = dy.par_iter().zip(xhat.par_iter()).map(|(a, b)| a * b).collect();
        (col_sums(&prod, d), col_sums(dy, d))
    });
    (dx, pg)
}

const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π).
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// GELU ([`crate::ops::gelu`]) of every value, in parallel passes.
fn gelu_all(f: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; f.len()];
    out.par_chunks_mut(CHUNK).zip(f.par_chunks(CHUNK)).for_each(|(out, f)| simd(Pass::Gelu { f, out }));
    out
}

/// `dg · gelu'(f)` in place, gelu'(x) = Φ(x) + x·φ(x).
fn gelu_backward(dg: &mut [f32], f: &[f32]) {
    dg.par_chunks_mut(CHUNK).zip(f.par_chunks(CHUNK)).for_each(|(dg, f)| simd(Pass::GeluBackward { dg, f }));
}

/// Columns `[c0, c0 + w)` of a `[t, n]` matrix, as a contiguous `[t, w]`.
fn columns(x: &[f32], n: usize, c0: usize, w: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len() / n * w);
    for row in x.chunks_exact(n) {
        out.extend_from_slice(&row[c0..c0 + w]);
    }
    out
}

fn add_into(dst: &mut [f32], src: &[f32]) {
    dst.par_iter_mut().zip(src.par_iter()).for_each(|(a, b)| *a += b);
}

/// `x` (packed rows of width `w`) cut into one mutable slice per sequence.
fn split_rows<'a>(mut x: &'a mut [f32], seqs: &[(usize, usize)], w: usize) -> Vec<&'a mut [f32]> {
    let mut out = Vec::with_capacity(seqs.len());
    for &(_, len) in seqs {
        let (head, rest) = std::mem::take(&mut x).split_at_mut(len * w);
        out.push(head);
        x = rest;
    }
    out
}

/// Single-threaded `dst = a · b` for the small per-(sequence, head) products.
fn small(dst: &mut [f32], a: Op<'_>, b: Op<'_>) -> Result<()> {
    crate::linalg::gemm_f32(dst, a, b, false)
}

impl HostLm {
    /// The checkpoint's encoder on host buffers, trained as `tuning` says; `seed` draws the LoRA
    /// factors exactly as [`super::LanguageModel::from_bert`] does (same stream, same order), so
    /// both engines start from the same model.
    pub fn from_bert(bert: &Bert, tuning: Tuning, seed: u64) -> Result<Self> {
        Self::build(bert, tuning, seed, bert.config().num_hidden_layers, Products::Auto)
    }

    /// [`Self::from_bert`] with the first `depth` encoder layers only, multiplying with `products`.
    fn build(bert: &Bert, tuning: Tuning, seed: u64, depth: usize, products: Products) -> Result<Self> {
        let cfg = bert.config();
        if depth > cfg.num_hidden_layers {
            return Err(ModelError::Internal(format!("{depth} layers of an encoder of {}", cfg.num_hidden_layers)));
        }
        let d = cfg.hidden_size;
        let (word, position, token_type, (g, b)) = bert.embedding_weights();
        let emb = HostEmbeddings {
            word: floats(word)?,
            position: floats(position)?,
            token_type: floats(token_type)?,
            ln_g: floats(g)?,
            ln_b: floats(b)?,
            relative: bert.relative_bias().map(floats).transpose()?.unwrap_or_default(),
        };
        let positions = emb.position.len() / d.max(1);
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..depth {
            let w = bert.layer_weights(i).ok_or_else(|| ModelError::Internal(format!("no encoder layer {i}")))?;
            layers.push(HostLayer::from_weights(w, d)?);
        }
        let dims = Dims {
            vocab: cfg.vocab_size,
            d,
            heads: cfg.num_attention_heads,
            ff: cfg.intermediate_size,
            positions,
            offset: cfg.position_offset(),
            eps: cfg.layer_norm_eps as f32,
        };
        let (mut scale, mut rank) = (0.0, 0);
        if let Tuning::Lora { rank: r, alpha } = tuning {
            if r == 0 || !(alpha.is_finite() && alpha > 0.0) {
                return Err(ModelError::Internal(format!("LoRA rank {r} and alpha {alpha}: both must be positive")));
            }
            (scale, rank) = ((alpha / r as f64) as f32, r);
            let mut rng = Stream(seed ^ 0x6c6f_7261);
            let bound = 1.0 / (d as f64).sqrt();
            for l in &mut layers {
                for j in 0..4 {
                    l.lora_a[j] = (0..d * r).map(|_| ((rng.unit() * 2.0 - 1.0) * bound) as f32).collect();
                    l.lora_b[j] = vec![0f32; r * d];
                }
            }
        }
        let mut lm = HostLm {
            p: HostParams { emb, layers },
            dims,
            tuning,
            scale,
            rank,
            products: Products::F32,
            packs: Vec::new(),
            merged: Vec::new(),
            layers_only: false,
        };
        lm.set_products(products)?;
        Ok(lm)
    }

    /// The checkpoint's embeddings and its first `layers` encoder layers, frozen, on f32 products:
    /// the token states below MiniLM's tuned top layers ([`Bert::hidden_states`] on the CPU).
    pub(crate) fn lower_layers(bert: &Bert, layers: usize) -> Result<Self> {
        Self::build(bert, Tuning::Frozen, 0, layers, Products::F32)
    }

    /// Encoder layers alone (MiniLM's tuned top layers): `layers` bottom to top, every weight
    /// trained, MPNet's relative bias table `relative` (`[buckets, heads]`, empty for BERT and
    /// RoBERTa) frozen; `(d, heads, ff, eps)` their sizes. They run over given token states
    /// ([`Self::layers_forward`]), not over token ids.
    pub(crate) fn from_layers(
        layers: Vec<HostLayer>,
        relative: Vec<f32>,
        (d, heads, ff, eps): (usize, usize, usize, f32),
        products: Products,
    ) -> Result<Self> {
        let fits = |l: &HostLayer| {
            l.wqkv.len() == 3 * d * d
                && l.bqkv.len() == 3 * d
                && l.wo.len() == d * d
                && l.wi.len() == d * ff
                && l.wout.len() == ff * d
                && l.bi.len() == ff
                && [&l.bo, &l.ln1_g, &l.ln1_b, &l.bout, &l.ln2_g, &l.ln2_b].iter().all(|v| v.len() == d)
        };
        let relative_fits = relative.is_empty() || relative.len() == relpos::NUM_BUCKETS * heads;
        if heads == 0 || d % heads != 0 || !layers.iter().all(fits) || !relative_fits {
            return Err(ModelError::Internal(format!("encoder layers do not fit a width of {d}, {heads} heads and {ff} inner units")));
        }
        let dims = Dims { vocab: 0, d, heads, ff, positions: 0, offset: 0, eps };
        let emb = HostEmbeddings { relative, ..Default::default() };
        let mut lm = HostLm {
            p: HostParams { emb, layers },
            dims,
            tuning: Tuning::Full,
            scale: 0.0,
            rank: 0,
            products: Products::F32,
            packs: Vec::new(),
            merged: Vec::new(),
            layers_only: true,
        };
        lm.set_products(products)?;
        Ok(lm)
    }

    /// The encoder layers' tensors, bottom to top.
    pub(crate) fn layers(&self) -> &[HostLayer] {
        &self.p.layers
    }

    /// Chooses how the linear layers multiply: f32 `gemm` or split bf16 on AMX tiles (`Auto`, the
    /// default: AMX where this CPU and OS offer it).
    pub fn set_products(&mut self, products: Products) -> Result<()> {
        // Single bf16 products (AVX512-BF16 without AMX) keep about three digits: fine for
        // embeddings, too coarse for gradients (LoRA's differ from transformers' by several
        // percent on the parity case), so training stays in f32 there.
        self.products = match products {
            Products::Bf16 | Products::AmxBf16 => {
                return Err(ModelError::Config {
                    model: "language model (host engine)".into(),
                    reason: "single bf16 products (`bf16`, `amx-bf16`): training runs on f32 or amx products".into(),
                });
            }
            Products::Auto if amx::available() => Products::Amx,
            Products::Auto => Products::F32,
            p => p.resolve()?,
        };
        self.packs.clear();
        self.repack()
    }

    /// The products in use (`f32`, `bf16` or `amx`).
    pub fn products(&self) -> &'static str {
        match self.products {
            Products::Amx => "amx",
            _ => "f32",
        }
    }

    /// The weight `which` (0 query-key-value, 1 attention output, 2 intermediate, 3 output) of
    /// layer `li` as the products read it (LoRA merged in).
    fn weight(&self, li: usize, which: usize) -> &[f32] {
        if let Some(m) = self.merged.get(li).filter(|_| which < 2) {
            return &m[which];
        }
        let l = &self.p.layers[li];
        match which {
            0 => &l.wqkv,
            1 => &l.wo,
            2 => &l.wi,
            _ => &l.wout,
        }
    }

    /// Recomputes what the products read after the weights changed: LoRA's merged weights, then
    /// the bf16 packs.
    fn repack(&mut self) -> Result<()> {
        let Dims { d, ff, .. } = self.dims;
        let (r, s) = (self.rank, self.scale);
        if r > 0 {
            self.merged = self
                .p
                .layers
                .iter()
                .map(|l| -> Result<[Vec<f32>; 2]> {
                    let mut qkv = l.wqkv.clone();
                    let mut ab = vec![0f32; d * d];
                    for j in 0..3 {
                        gemm_f32_par(&mut ab, nn(&l.lora_a[j], d, r), nn(&l.lora_b[j], r, d), false)?;
                        for (row, add) in qkv.chunks_exact_mut(3 * d).zip(ab.chunks_exact(d)) {
                            for (w, v) in row[j * d..(j + 1) * d].iter_mut().zip(add) {
                                *w += s * v;
                            }
                        }
                    }
                    let mut o = l.wo.clone();
                    gemm_f32_par(&mut ab, nn(&l.lora_a[3], d, r), nn(&l.lora_b[3], r, d), false)?;
                    o.iter_mut().zip(&ab).for_each(|(w, v)| *w += s * v);
                    Ok([qkv, o])
                })
                .collect::<Result<_>>()?;
        }
        let products = self.products;
        if !matches!(products, Products::Amx) {
            self.packs.clear();
            return Ok(());
        }
        let pair = |w: &[f32], k: usize, n: usize| -> Result<WeightPack> {
            let fwd = Pack::new(products, w, k, n)?;
            let bwd = Pack::new(products, &transpose(w, k, n), n, k)?;
            match (fwd, bwd) {
                (Some(fwd), Some(bwd)) => Ok(WeightPack { fwd, bwd }),
                _ => Err(ModelError::Internal("packing weights for f32 products".into())),
            }
        };
        let shapes = [(d, 3 * d), (d, d), (d, ff), (ff, d)];
        // Under LoRA only the attention weights change between steps: the FFN packs are kept.
        let attention_only = r > 0 && self.packs.len() == self.p.layers.len();
        for li in 0..self.p.layers.len() {
            let which = if attention_only { 0..2 } else { 0..4 };
            let mut fresh = Vec::with_capacity(4);
            for w in which.clone() {
                let (k, n) = shapes[w];
                fresh.push((w, pair(self.weight(li, w), k, n)?));
            }
            if attention_only {
                for (w, p) in fresh {
                    self.packs[li][w] = p;
                }
            } else {
                let four: [WeightPack; 4] = fresh
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect::<Vec<_>>()
                    .try_into()
                    .map_err(|_| ModelError::Internal("four packs".into()))?;
                if self.packs.len() > li {
                    self.packs[li] = four;
                } else {
                    self.packs.push(four);
                }
            }
        }
        Ok(())
    }

    /// `dst (t×n) (+)= x (t×k) · W` for weight `which` (see [`Self::weight`]) of layer `li`.
    #[allow(clippy::too_many_arguments)]
    fn mm_w(&self, li: usize, which: usize, dst: &mut [f32], x: &[f32], (t, k, n): (usize, usize, usize), acc: bool) -> Result<()> {
        match self.packs.get(li) {
            Some(p) => p[which].fwd.mm(t, dst, x, acc),
            None => gemm_f32_par(dst, nn(x, t, k), nn(self.weight(li, which), k, n), acc),
        }
    }

    /// `dst (t×k) (+)= dy (t×n) · Wᵀ` for weight `which` of layer `li` (`W` is `[k, n]`).
    #[allow(clippy::too_many_arguments)]
    fn mm_wt(&self, li: usize, which: usize, dst: &mut [f32], dy: &[f32], (t, k, n): (usize, usize, usize), acc: bool) -> Result<()> {
        match self.packs.get(li) {
            Some(p) => p[which].bwd.mm(t, dst, dy, acc),
            None => gemm_f32_par(dst, nn(dy, t, n), tt(self.weight(li, which), k, n), acc),
        }
    }

    /// A weight's gradient `xᵀ·dy` (`[k, n]`) from `x` (`t×k`) and `dy` (`t×n`).
    fn grad_w(&self, x: &[f32], dy: &[f32], (t, k, n): (usize, usize, usize)) -> Result<Vec<f32>> {
        let mut g = vec![0f32; k * n];
        gemm_f32_par(&mut g, tt(x, t, k), nn(dy, t, n), false)?;
        Ok(g)
    }

    /// A copy (the kept epoch of a training run); the packed weights are rebuilt.
    pub fn try_clone(&self) -> Result<Self> {
        let mut lm = HostLm {
            p: self.p.clone(),
            dims: self.dims,
            tuning: self.tuning,
            scale: self.scale,
            rank: self.rank,
            products: self.products,
            packs: Vec::new(),
            merged: Vec::new(),
            layers_only: self.layers_only,
        };
        lm.repack()?;
        Ok(lm)
    }

    /// The word embeddings of `ids`, `[n, d]` (a learned prompt starts from words).
    pub fn word_embeddings(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let d = self.dims.d;
        let mut out = Vec::with_capacity(ids.len() * d);
        for &id in ids {
            let row = self.p.emb.word.get(id as usize * d..(id as usize + 1) * d);
            out.extend_from_slice(row.ok_or_else(|| ModelError::Internal(format!("token id {id} is outside the vocabulary")))?);
        }
        Ok(out)
    }

    /// Hidden width.
    pub fn dim(&self) -> usize {
        self.dims.d
    }

    /// The longest sequence the model reads.
    pub fn max_len(&self) -> usize {
        self.dims.positions.saturating_sub(self.dims.offset)
    }

    /// The tuning it trains under.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Sets LoRA factors (tests: a case whose factors are all non-zero). `j`: 0 query, 1 key,
    /// 2 value, 3 attention output; `a` is `[d, r]`, `b` `[r, d]`.
    pub fn set_lora(&mut self, layer: usize, j: usize, a: Vec<f32>, b: Vec<f32>) -> Result<()> {
        let (d, r) = (self.dims.d, self.rank);
        let l = self.p.layers.get_mut(layer).ok_or_else(|| ModelError::Internal(format!("no layer {layer}")))?;
        if r == 0 || j >= 4 || a.len() != d * r || b.len() != r * d {
            return Err(ModelError::Internal(format!("LoRA factor {j} of layer {layer}: {} and {} values for rank {r}", a.len(), b.len())));
        }
        l.lora_a[j] = a;
        l.lora_b[j] = b;
        self.repack()
    }

    /// Whether the base weights train (full fine-tuning).
    fn full(&self) -> bool {
        matches!(self.tuning, Tuning::Full)
    }

    /// The number of trained scalars of the model (LoRA: the factors alone; frozen: none).
    pub fn trained_parameters(&self) -> usize {
        match self.tuning {
            Tuning::Frozen => 0,
            // MPNet's zero token-type row does not train.
            Tuning::Full => {
                self.p.tensors().iter().map(|t| t.len()).sum::<usize>()
                    - if self.p.emb.relative.is_empty() { 0 } else { self.p.emb.token_type.len() }
            }
            Tuning::Lora { .. } => self.p.layers.iter().map(|l| l.lora_a.iter().chain(&l.lora_b).map(Vec::len).sum::<usize>()).sum(),
        }
    }

    /// Token states of `prompts`, packed (`[t, d]`, prompt after prompt, see [`Tape::seqs`]), with
    /// `soft` (`[slots, d]`) in the slots, and the record the backward pass reads.
    pub fn forward(&self, prompts: &Prompts, soft: &[f32]) -> Result<(Vec<f32>, Tape)> {
        self.run(prompts, soft, true)
    }

    /// The packed token states alone (evaluation: nothing kept for a backward pass), with each
    /// prompt's `(first packed token, length)`.
    #[allow(clippy::type_complexity)]
    pub fn states(&self, prompts: &Prompts, soft: &[f32]) -> Result<(Vec<f32>, Vec<(usize, usize)>)> {
        let (h, tape) = self.run(prompts, soft, false)?;
        Ok((h, tape.seqs))
    }

    fn run(&self, prompts: &Prompts, soft: &[f32], keep: bool) -> Result<(Vec<f32>, Tape)> {
        let Dims { vocab, d, offset, eps, .. } = self.dims;
        let mut seqs = Vec::with_capacity(prompts.ids.len());
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        for s in &prompts.ids {
            if s.len() > self.max_len() {
                return Err(ModelError::Config {
                    model: "the language model".into(),
                    reason: format!("a prompt of {} tokens exceeds the {} positions", s.len(), self.max_len()),
                });
            }
            seqs.push((ids.len(), s.len()));
            for (c, &id) in s.iter().enumerate() {
                if id as usize >= vocab {
                    return Err(ModelError::Config {
                        model: "the language model".into(),
                        reason: format!("token id {id} is outside the vocabulary of {vocab}"),
                    });
                }
                ids.push(id);
                positions.push(c + offset);
            }
        }
        let t = ids.len();
        let k = prompts.slots.len();
        if soft.len() != k * d {
            return Err(ModelError::Internal(format!("{} soft-token values for {k} slots of width {d}", soft.len())));
        }
        let mut slot_of = vec![None; t];
        for (j, &(r, p)) in prompts.slots.iter().enumerate() {
            let at = match seqs.get(r) {
                Some(&(start, len)) if p < len => start + p,
                _ => return Err(ModelError::Internal(format!("soft-token slot ({r}, {p}) is outside the prompts"))),
            };
            if slot_of[at].replace(j).is_some() {
                return Err(ModelError::Internal(format!("soft-token slot ({r}, {p}) given twice")));
            }
        }
        let e = &self.p.emb;
        let mut x = vec![0f32; t * d];
        x.par_chunks_mut(d).enumerate().for_each(|(i, row)| {
            let src = match slot_of[i] {
                Some(j) => &soft[j * d..(j + 1) * d],
                None => &e.word[ids[i] as usize * d..(ids[i] as usize + 1) * d],
            };
            let pos = &e.position[positions[i] * d..(positions[i] + 1) * d];
            for c in 0..d {
                row[c] = src[c] + pos[c] + e.token_type[c];
            }
        });
        let (h, x0, r0) = ln_forward(&x, d, &e.ln_g, &e.ln_b, eps);
        let (h, layers) = self.layers_forward(h, &seqs, keep)?;
        Ok((h, Tape { seqs, ids, slot_of, positions, x0, r0, layers, slots: k }))
    }

    /// The encoder layers over packed token states `h` (`[t, d]`; `seqs`: each sequence's first
    /// row and length, in order): the output states and, when `keep`, what
    /// [`Self::layers_backward`] reads.
    pub(crate) fn layers_forward(&self, mut h: Vec<f32>, seqs: &[(usize, usize)], keep: bool) -> Result<(Vec<f32>, Vec<LayerTape>)> {
        let d = self.dims.d;
        let mut t = 0;
        for &(s0, len) in seqs {
            if s0 != t {
                return Err(ModelError::Internal(format!("a sequence starts at row {s0}, not {t}: sequences are packed in order")));
            }
            t += len;
        }
        if h.len() != t * d {
            return Err(ModelError::Internal(format!("{} state values for {t} tokens of width {d}", h.len())));
        }
        let mut layers = Vec::with_capacity(if keep { self.p.layers.len() } else { 0 });
        for (li, l) in self.p.layers.iter().enumerate() {
            let (out, tape) = self.layer_forward(li, l, h, seqs)?;
            if keep {
                layers.push(tape);
            }
            h = out;
        }
        Ok((h, layers))
    }

    /// The layers' backward pass from the gradient `d_out` of their output states: the gradient
    /// of their input states, each layer's gradients (bottom to top) and that of MPNet's relative
    /// bias table (summed over the layers; empty when it does not train).
    pub(crate) fn layers_backward(
        &self,
        tapes: Vec<LayerTape>,
        d_out: &[f32],
        seqs: &[(usize, usize)],
    ) -> Result<(Vec<f32>, Vec<HostLayer>, Vec<f32>)> {
        if tapes.len() != self.p.layers.len() {
            return Err(ModelError::Internal(format!("{} layer records for {} layers", tapes.len(), self.p.layers.len())));
        }
        let mut grads = Vec::with_capacity(tapes.len());
        let mut dh = d_out.to_vec();
        // MPNet's relative bias table is shared: its gradient is the sum over the layers.
        let mut relative = Vec::new();
        for ((li, l), lt) in self.p.layers.iter().enumerate().zip(tapes).rev() {
            let (dx, g, drel) = self.layer_backward(li, l, lt, &dh, seqs)?;
            grads.push(g);
            if relative.is_empty() {
                relative = drel;
            } else {
                add_into(&mut relative, &drel);
            }
            dh = dx;
        }
        grads.reverse();
        Ok((dh, grads, relative))
    }

    fn layer_forward(&self, li: usize, l: &HostLayer, h: Vec<f32>, seqs: &[(usize, usize)]) -> Result<(Vec<f32>, LayerTape)> {
        let Dims { d, heads, ff, eps, .. } = self.dims;
        let t = h.len() / d;
        let r = self.rank;
        let mut qkv = broadcast(&l.bqkv, t);
        self.mm_w(li, 0, &mut qkv, &h, (t, d, 3 * d), true)?;
        let mut lora_x: [Vec<f32>; 4] = Default::default();
        if r > 0 {
            for (xa, a) in lora_x.iter_mut().zip(&l.lora_a).take(3) {
                // `h·A` for B's gradient (the term itself is in the merged weight).
                *xa = vec![0f32; t * r];
                gemm_f32_par(xa, nn(&h, t, d), nn(a, d, r), false)?;
            }
        }
        let (probs, ctx) = self.attention(&qkv, seqs, heads)?;
        let mut a = broadcast(&l.bo, t);
        self.mm_w(li, 1, &mut a, &ctx, (t, d, d), true)?;
        if r > 0 {
            let mut xa = vec![0f32; t * r];
            gemm_f32_par(&mut xa, nn(&ctx, t, d), nn(&l.lora_a[3], d, r), false)?;
            lora_x[3] = xa;
        }
        add_into(&mut a, &h);
        let (h1, x1, r1) = ln_forward(&a, d, &l.ln1_g, &l.ln1_b, eps);
        let mut f = broadcast(&l.bi, t);
        self.mm_w(li, 2, &mut f, &h1, (t, d, ff), true)?;
        let g = gelu_all(&f);
        let mut o = broadcast(&l.bout, t);
        self.mm_w(li, 3, &mut o, &g, (t, ff, d), true)?;
        add_into(&mut o, &h1);
        let (out, x2, r2) = ln_forward(&o, d, &l.ln2_g, &l.ln2_b, eps);
        Ok((out, LayerTape { h, qkv, probs, ctx, x1, r1, h1, f, g, x2, r2, lora_x }))
    }

    /// Attention per (sequence, head) over the packed `qkv`: the probabilities (per sequence, head
    /// after head, `len × len` each) and the context. Parallel over sequences, each writing its own
    /// rows of the context.
    fn attention(&self, qkv: &[f32], seqs: &[(usize, usize)], heads: usize) -> Result<(Vec<Vec<f32>>, Vec<f32>)> {
        let d = self.dims.d;
        let dh = d / heads;
        let scale = 1.0 / (dh as f32).sqrt();
        let t = qkv.len() / (3 * d);
        let rel = &self.p.emb.relative;
        let mut ctx = vec![0f32; t * d];
        let probs: Vec<Vec<f32>> = split_rows(&mut ctx, seqs, d)
            .into_par_iter()
            .zip(seqs.par_iter())
            .map(|(out, &(s0, len))| -> Result<Vec<f32>> {
                let rows = &qkv[s0 * 3 * d..(s0 + len) * 3 * d];
                let mut probs = vec![0f32; heads * len * len];
                let mut c = vec![0f32; len * dh];
                for (hd, p) in probs.chunks_exact_mut((len * len).max(1)).enumerate().take(heads) {
                    let (q, k, v) = (
                        columns(rows, 3 * d, hd * dh, dh),
                        columns(rows, 3 * d, d + hd * dh, dh),
                        columns(rows, 3 * d, 2 * d + hd * dh, dh),
                    );
                    small(p, nn(&q, len, dh), tt(&k, len, dh))?;
                    if rel.is_empty() {
                        simd(Pass::Softmax { s: p, len: len.max(1), scale });
                    } else {
                        // MPNet: softmax(S/√dh + the bias of each (query, key) distance).
                        relpos::add_scaled(p, len, scale, rel, heads, hd);
                        simd(Pass::Softmax { s: p, len: len.max(1), scale: 1.0 });
                    }
                    small(&mut c, nn(p, len, len), nn(&v, len, dh))?;
                    for (row, cr) in out.chunks_exact_mut(d).zip(c.chunks_exact(dh)) {
                        row[hd * dh..(hd + 1) * dh].copy_from_slice(cr);
                    }
                }
                Ok(probs)
            })
            .collect::<Result<_>>()?;
        Ok((probs, ctx))
    }

    /// The gradients of a loss whose gradient for the packed states is `d_states` (`[t, d]`).
    pub fn backward(&self, tape: Tape, d_states: &[f32]) -> Result<HostGrads> {
        let Dims { d, .. } = self.dims;
        let t = tape.ids.len();
        if d_states.len() != t * d {
            return Err(ModelError::Internal(format!("{} state gradients for {t} tokens of width {d}", d_states.len())));
        }
        let full = self.full();
        let Tape { seqs, ids, slot_of, positions, x0, r0, layers, slots } = tape;
        let (dh, layer_grads, relative) = self.layers_backward(layers, d_states, &seqs)?;
        let mut grads = HostParams { emb: HostEmbeddings::default(), layers: layer_grads };
        let e = &self.p.emb;
        let (dx, pg) = ln_backward(&dh, &x0, &r0, &e.ln_g, full);
        let mut soft = vec![0f32; slots * d];
        for (i, s) in slot_of.iter().enumerate() {
            if let Some(j) = *s {
                soft[j * d..(j + 1) * d].copy_from_slice(&dx[i * d..(i + 1) * d]);
            }
        }
        if let Some((gg, gb)) = pg {
            let mut word = vec![0f32; e.word.len()];
            let mut pos = vec![0f32; e.position.len()];
            for i in 0..t {
                let row = &dx[i * d..(i + 1) * d];
                if slot_of[i].is_none() {
                    let w = ids[i] as usize * d;
                    for c in 0..d {
                        word[w + c] += row[c];
                    }
                }
                let p = positions[i] * d;
                for c in 0..d {
                    pos[p + c] += row[c];
                }
            }
            // MPNet has no token types: its zero token-type row stays out of training.
            let token_type = if e.relative.is_empty() { col_sums(&dx, d) } else { Vec::new() };
            grads.emb = HostEmbeddings { word, position: pos, token_type, ln_g: gg, ln_b: gb, relative };
        }
        Ok(HostGrads { params: grads, soft })
    }

    fn layer_backward(
        &self,
        li: usize,
        l: &HostLayer,
        lt: LayerTape,
        dout: &[f32],
        seqs: &[(usize, usize)],
    ) -> Result<(Vec<f32>, HostLayer, Vec<f32>)> {
        let Dims { d, heads, ff, .. } = self.dims;
        let t = dout.len() / d;
        let (r, s) = (self.rank, self.scale);
        let full = self.full();
        let mut g = HostLayer::default();
        // Output layer norm, then the FFN (its residual carries `do` to `h1`).
        let (d_o, pg) = ln_backward(dout, &lt.x2, &lt.r2, &l.ln2_g, full);
        if let Some((a, b)) = pg {
            (g.ln2_g, g.ln2_b) = (a, b);
        }
        if full {
            g.wout = self.grad_w(&lt.g, &d_o, (t, ff, d))?;
            g.bout = col_sums(&d_o, d);
        }
        let mut dg = vec![0f32; t * ff];
        self.mm_wt(li, 3, &mut dg, &d_o, (t, ff, d), false)?;
        drop(lt.g);
        gelu_backward(&mut dg, &lt.f);
        let df = dg;
        if full {
            g.wi = self.grad_w(&lt.h1, &df, (t, d, ff))?;
            g.bi = col_sums(&df, ff);
        }
        let mut dh1 = d_o;
        self.mm_wt(li, 2, &mut dh1, &df, (t, d, ff), true)?;
        drop(df);
        // Attention output layer norm, the output projection (and its LoRA term).
        let (da, pg) = ln_backward(&dh1, &lt.x1, &lt.r1, &l.ln1_g, full);
        if let Some((a, b)) = pg {
            (g.ln1_g, g.ln1_b) = (a, b);
        }
        if full {
            g.wo = self.grad_w(&lt.ctx, &da, (t, d, d))?;
            g.bo = col_sums(&da, d);
        }
        let mut dctx = vec![0f32; t * d];
        self.mm_wt(li, 1, &mut dctx, &da, (t, d, d), false)?;
        if r > 0 {
            (g.lora_a[3], g.lora_b[3]) = self.lora_backward(&lt.ctx, &lt.lora_x[3], &da, &l.lora_b[3], t, s)?;
        }
        // Attention itself, then query, key and value.
        let (dqkv, drel) = self.attention_backward(&lt.qkv, &lt.probs, &dctx, seqs, heads)?;
        drop(dctx);
        if full {
            g.wqkv = self.grad_w(&lt.h, &dqkv, (t, d, 3 * d))?;
            g.bqkv = col_sums(&dqkv, 3 * d);
        }
        let mut dh = da;
        self.mm_wt(li, 0, &mut dh, &dqkv, (t, d, 3 * d), true)?;
        if r > 0 {
            for j in 0..3 {
                let dy = columns(&dqkv, 3 * d, j * d, d);
                (g.lora_a[j], g.lora_b[j]) = self.lora_backward(&lt.h, &lt.lora_x[j], &dy, &l.lora_b[j], t, s)?;
            }
        }
        Ok((dh, g, drel))
    }

    /// LoRA's `y += s·(x·A)·B` backward: `(dA, dB)` from `dy`, with `xa = x·A` kept from the
    /// forward pass (`dx` through the term comes with the merged weight's `dy·Wᵀ`).
    #[allow(clippy::too_many_arguments)]
    fn lora_backward(&self, x: &[f32], xa: &[f32], dy: &[f32], b: &[f32], t: usize, s: f32) -> Result<(Vec<f32>, Vec<f32>)> {
        let (d, r) = (self.dims.d, self.rank);
        let mut gb = vec![0f32; r * d];
        gemm_f32_par(&mut gb, tt(xa, t, r), nn(dy, t, d), false)?;
        gb.iter_mut().for_each(|v| *v *= s);
        let mut dxa = vec![0f32; t * r];
        gemm_f32_par(&mut dxa, nn(dy, t, d), tt(b, r, d), false)?;
        dxa.iter_mut().for_each(|v| *v *= s);
        let mut ga = vec![0f32; d * r];
        gemm_f32_par(&mut ga, tt(x, t, d), nn(&dxa, t, r), false)?;
        Ok((ga, gb))
    }

    /// Attention's backward per (sequence, head): `dqkv` (`[t, 3d]`) from `dctx`. Parallel over
    /// sequences, each writing its own rows.
    /// The gradient of query, key and value `[t, 3d]`, and (MPNet under full fine-tuning) that of
    /// the relative bias table `[buckets, heads]` from this layer (empty otherwise).
    fn attention_backward(
        &self,
        qkv: &[f32],
        probs: &[Vec<f32>],
        dctx: &[f32],
        seqs: &[(usize, usize)],
        heads: usize,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let d = self.dims.d;
        let dh = d / heads;
        let scale = 1.0 / (dh as f32).sqrt();
        let t = qkv.len() / (3 * d);
        let rel_grad = !self.p.emb.relative.is_empty() && self.full() && !self.layers_only;
        let mut dqkv = vec![0f32; t * 3 * d];
        let drel: Vec<Vec<f32>> = split_rows(&mut dqkv, seqs, 3 * d)
            .into_par_iter()
            .zip(seqs.par_iter())
            .zip(probs.par_iter())
            .map(|((out, &(s0, len)), probs)| -> Result<Vec<f32>> {
                let mut drel = if rel_grad { vec![0f32; relpos::NUM_BUCKETS * heads] } else { Vec::new() };
                let buckets = if rel_grad { relpos::distance_buckets(len) } else { Vec::new() };
                let rows = &qkv[s0 * 3 * d..(s0 + len) * 3 * d];
                let dctx = &dctx[s0 * d..(s0 + len) * d];
                let mut dp = vec![0f32; len * len];
                let mut parts = [vec![0f32; len * dh], vec![0f32; len * dh], vec![0f32; len * dh]];
                for (hd, p) in probs.chunks_exact((len * len).max(1)).enumerate().take(heads) {
                    let (q, k, v) = (
                        columns(rows, 3 * d, hd * dh, dh),
                        columns(rows, 3 * d, d + hd * dh, dh),
                        columns(rows, 3 * d, 2 * d + hd * dh, dh),
                    );
                    let dc = columns(dctx, d, hd * dh, dh);
                    let [dq, dk, dv] = &mut parts;
                    small(&mut dp, nn(&dc, len, dh), tt(&v, len, dh))?;
                    small(dv, tt(p, len, len), nn(&dc, len, dh))?;
                    // dS = P ∘ (dP − rowsum(dP ∘ P)) · scale; before the scale, the gradient of the
                    // bias added to each score (MPNet's relative bias, summed into its bucket).
                    for (i, (prow, drow)) in p.chunks_exact(len.max(1)).zip(dp.chunks_exact_mut(len.max(1))).enumerate() {
                        let dot = dot16(prow, drow);
                        for (j, (x, pv)) in drow.iter_mut().zip(prow).enumerate() {
                            let dz = pv * (*x - dot);
                            if rel_grad {
                                drel[buckets[len - 1 - i + j] * heads + hd] += dz;
                            }
                            *x = dz * scale;
                        }
                    }
                    small(dq, nn(&dp, len, len), nn(&k, len, dh))?;
                    small(dk, tt(&dp, len, len), nn(&q, len, dh))?;
                    for (j, part) in parts.iter().enumerate() {
                        for (row, pr) in out.chunks_exact_mut(3 * d).zip(part.chunks_exact(dh)) {
                            row[j * d + hd * dh..j * d + (hd + 1) * dh].copy_from_slice(pr);
                        }
                    }
                }
                Ok(drel)
            })
            .collect::<Result<_>>()?;
        // Summed over the sequences in their order (the same sum whatever the thread count).
        let mut total = if rel_grad { vec![0f32; relpos::NUM_BUCKETS * heads] } else { Vec::new() };
        for part in &drel {
            add_into(&mut total, part);
        }
        Ok((dqkv, total))
    }

    /// One optimiser step over the trained tensors with `grads` (from [`Self::backward`]); the
    /// packed weights follow.
    pub fn step(&mut self, optim: &mut AdamW, lr: f32, grads: &HostParams) -> Result<()> {
        self.step_with(optim, lr, grads, [])
    }

    /// [`Self::step`] with more `(tensor, gradient)` pairs after the model's (a head trained with
    /// it, same optimiser).
    pub fn step_with<'a, const N: usize>(
        &mut self,
        optim: &mut AdamW,
        lr: f32,
        grads: &HostParams,
        more: [(&'a mut Vec<f32>, &'a Vec<f32>); N],
    ) -> Result<()> {
        let pairs = self.p.tensors_mut().into_iter().zip(grads.tensors()).filter(|(_, g)| !g.is_empty());
        optim.step(lr, pairs.chain(more))?;
        if matches!(self.tuning, Tuning::Frozen) { Ok(()) } else { self.repack() }
    }
}

/// [`super::bench_steps`] on the host engine: the same batch (same seeded ids, soft tokens and
/// probe), the same loss, backward pass and AdamW step (weight decay 0.01, learning rate 1e-5).
/// Returns the seconds of each of `steps` steps after one warm-up step, the trained scalars and the
/// products used (`amx` or `f32`).
pub fn bench_steps(bert: &Bert, tuning: Tuning, (rows, len): (usize, usize), steps: usize) -> Result<(Vec<f64>, usize, &'static str)> {
    let mut lm = HostLm::from_bert(bert, tuning, 0)?;
    let (vocab, d) = (bert.config().vocab_size as u64, lm.dim());
    let mut rng = Stream(17);
    let ids: Vec<Vec<u32>> = (0..rows).map(|_| (0..len).map(|_| (1000 + rng.next() % (vocab - 1000)) as u32).collect()).collect();
    let prompts = Prompts { ids, slots: (0..rows).map(|r| (r, 1)).collect() };
    let mut soft: Vec<f32> = (0..rows * d).map(|_| (rng.unit() - 0.5) as f32).collect();
    let probe: Vec<f32> = (0..rows * d).map(|_| (rng.unit() - 0.5) as f32).collect();
    let trained = lm.trained_parameters() + rows * d;
    let mut optim = AdamW::new(0.01);
    let mut soft_optim = AdamW::new(0.01);
    let mut times = Vec::with_capacity(steps);
    for i in 0..=steps {
        let t = std::time::Instant::now();
        let (states, tape) = lm.forward(&prompts, &soft)?;
        let mut dstates = vec![0f32; states.len()];
        for (r, &(s0, n)) in tape.seqs().iter().enumerate() {
            for c in 0..n {
                for k in 0..d {
                    dstates[(s0 + c) * d + k] = probe[r * d + k] / n as f32;
                }
            }
        }
        let grads = lm.backward(tape, &dstates)?;
        lm.step(&mut optim, 1e-5, &grads.params)?;
        soft_optim.step(1e-5, std::iter::once((&mut soft, &grads.soft)))?;
        if i > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    Ok((times, trained, lm.products()))
}
