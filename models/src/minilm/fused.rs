//! The CPU engine of the BERT encoder: the same weights and the same arithmetic as [`super::Bert`],
//! laid out for a CPU instead of going through a generic tensor backend.
//!
//! What it does differently, all of it for throughput and none of it changing the maths:
//! * sequences are packed, not padded: every linear layer runs once over the concatenated tokens of
//!   the batch, attention runs per (sentence, head) on that sentence's tokens only;
//! * Q, K and V are one matrix product (their weights concatenated);
//! * bias, residual, GELU, softmax and LayerNorm are fused into the passes around the products;
//! * products use the `gemm` crate (AVX-512 kernels when the CPU has them, chosen at run time),
//!   or bf16 kernels ([`super::amx`], [`super::bf16`]); attention is a register-blocked kernel of
//!   its own (`super::attention`), parallel over sentences with rayon;
//! * GELU's erf and softmax's exp are branch-free polynomial forms that the compiler vectorises
//!   (erf: the rational approximation used by Eigen and XLA, |error| < 2e-7 on [−4, 4] and exact
//!   saturation outside; exp: Cody–Waite range reduction and a degree-6 polynomial, relative error
//!   < 3e-7), instead of scalar libm calls.
//!
//! Parity with the burn engine and with the f64 reference is a test (`tests.rs`).

use rayon::prelude::*;

use super::amx::Epilogue;
use super::weights::WeightFile;
use super::{BertConfig, Tables, read_tables};
use super::{amx, attention, bf16};
use crate::error::{ModelError, Result};
use crate::ops::{self, sum16};

/// `dst (m×n, row stride ldd) (+)= lhs (m×k, row stride lda) · rhs`, with `rhs` read as `k×n`
/// through strides (`rhs_rs` between rows, `rhs_cs` between columns). When `accumulate`, `dst` keeps
/// its content (bias, residual) and the product is added to it.
///
/// The one unsafe call of the crate. Safety: every index the product touches is checked against
/// the slice lengths first (the largest offset of each operand is computed from its shape and
/// strides, all strides are non-negative), so `gemm` never reads or writes out of bounds; `dst`
/// is a `&mut` and so cannot alias `lhs` or `rhs`.
#[allow(unsafe_code)]
#[allow(clippy::too_many_arguments)]
fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    ldd: usize,
    lhs: &[f32],
    lda: usize,
    rhs: &[f32],
    rhs_rs: usize,
    rhs_cs: usize,
    accumulate: bool,
    parallel: bool,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| (rows.max(1) - 1) * rs + (cols.max(1) - 1) * cs;
    let fits = last(m, ldd, n, 1) < dst.len()
        && (k == 0 || (last(m, lda, k, 1) < lhs.len() && last(k, rhs_rs, n, rhs_cs) < rhs.len()))
        && ldd >= n;
    if !fits {
        return Err(ModelError::Internal(format!("matmul {m}×{k}·{k}×{n}: operand slices too short for their strides")));
    }
    let par = if parallel { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    // gemm picks its kernel under TGRAG_SIMD\'s cap (set when the level is first read).
    crate::simd::level();
    // SAFETY: bounds checked above; isize conversions cannot overflow for slice-backed strides.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ldd as isize,
            accumulate,
            lhs.as_ptr(),
            1,
            lda as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// An elementwise pass, run through pulp's runtime dispatch so that its loops are compiled (and
/// vectorised) for the best instruction set of this CPU: AVX-512, AVX2 or baseline. (A struct, not a
/// closure: `with_simd` is inlined into the target-feature function, a closure body may not be.)
enum Pass<'a> {
    LayerNorm {
        rows: &'a mut [f32],
        d: usize,
        norm: &'a Norm,
        eps: f32,
    },
    /// Every row plus `b`, then GELU when `gelu`.
    BiasGelu {
        rows: &'a mut [f32],
        b: &'a [f32],
        gelu: bool,
    },
}

impl pulp::WithSimd for Pass<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        match self {
            Pass::LayerNorm { rows, d, norm, eps } => layer_norm_rows(rows, d, norm, eps),
            Pass::BiasGelu { rows, b, gelu } => {
                for row in rows.chunks_exact_mut(b.len().max(1)) {
                    for (v, &b) in row.iter_mut().zip(b) {
                        *v = if gelu { ops::gelu(b + *v) } else { b + *v };
                    }
                }
            }
        }
    }
}

fn simd(pass: Pass<'_>) {
    crate::simd::arch().dispatch(pass)
}

struct Norm {
    g: Vec<f32>,
    b: Vec<f32>,
}

/// LayerNorm over each row of width `d`, in place (two-pass mean and variance in f32, as torch).
fn layer_norm(x: &mut [f32], d: usize, norm: &Norm, eps: f32) {
    x.par_chunks_mut(d * 16).for_each(|rows| simd(Pass::LayerNorm { rows, d, norm, eps }));
}

#[inline(always)]
fn layer_norm_rows(rows: &mut [f32], d: usize, norm: &Norm, eps: f32) {
    for row in rows.chunks_exact_mut(d) {
        let mean = sum16(row) / d as f32;
        let mut sq = [0f32; 16];
        let mut it = row.chunks_exact(16);
        for c in &mut it {
            for i in 0..16 {
                sq[i] += (c[i] - mean) * (c[i] - mean);
            }
        }
        let var = (sq.iter().sum::<f32>() + it.remainder().iter().map(|v| (v - mean) * (v - mean)).sum::<f32>()) / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(&norm.g).zip(&norm.b) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

struct Layer {
    /// Q|K|V weights, `d × 3d` (input-major), and their biases.
    wqkv: Vec<f32>,
    bqkv: Vec<f32>,
    wo: Vec<f32>,
    bo: Vec<f32>,
    ln1: Norm,
    wi: Vec<f32>,
    bi: Vec<f32>,
    wo2: Vec<f32>,
    bo2: Vec<f32>,
    ln2: Norm,
}

/// How the engine computes its linear layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Products {
    /// f32 `gemm` (AVX-512 or AVX2 kernels).
    F32,
    /// Single bf16 with f32 accumulation on AVX512-BF16 ([`super::bf16`]); a configuration error
    /// where the CPU lacks it.
    Bf16,
    /// Split bf16 on AMX tiles ([`super::amx`]); a configuration error where the CPU or OS lacks them.
    Amx,
    /// Single bf16 with f32 accumulation on AMX tiles ([`amx::Terms::Single`]: a third of the tile
    /// work of [`Products::Amx`], the precision of [`Products::Bf16`]); a configuration error where
    /// the CPU or OS lacks them.
    AmxBf16,
    /// The fastest products within the single-bf16 bound (embeddings at cosine ≥ 0.9999 to f32):
    /// single bf16 on AMX tiles where this CPU and OS offer them, else AVX512-BF16 where it beats
    /// f32 (AMD cores: [`bf16::faster_than_f32`]), else f32. [`Products::Amx`] is the choice for
    /// f32's accuracy at AMX speed.
    Auto,
}

impl Products {
    /// What `self` runs on this machine: `Auto` resolved, an explicit choice checked.
    pub fn resolve(self) -> Result<Self> {
        let missing = |what: &str| {
            Err(ModelError::Config { model: "MiniLM (fused engine)".into(), reason: format!("products `{what}`: {}", Self::lacks(what)) })
        };
        match self {
            Products::Auto if amx::available() => Ok(Products::AmxBf16),
            Products::Auto if bf16::faster_than_f32() => Ok(Products::Bf16),
            Products::Auto => Ok(Products::F32),
            Products::Amx if !amx::available() => missing("amx"),
            Products::AmxBf16 if !amx::available() => missing("amx-bf16"),
            Products::Bf16 if !bf16::available() => missing("bf16"),
            p => Ok(p),
        }
    }

    fn lacks(what: &str) -> String {
        let level = crate::simd::level();
        if level < crate::simd::Level::V4 {
            format!("{}={level} caps the products at f32 (bf16 and AMX products need v4 or auto)", crate::simd::VAR)
        } else if what.starts_with("amx") {
            "this CPU or OS offers no AMX-BF16 tiles".into()
        } else {
            "this CPU has no AVX512-BF16 (vdpbf16ps)".into()
        }
    }
}

/// One layer's weights packed for a bf16 kernel (`P`: AMX's split pair tiles or AVX512-BF16's panels).
struct Packed<P> {
    wqkv: P,
    wo: P,
    wi: P,
    wo2: P,
}

/// The linear layers' weights as a kernel other than f32 gemm reads them.
enum PackedLayers {
    Amx(Vec<Packed<amx::PackedB>>),
    Bf16(Vec<Packed<bf16::PackedB>>),
}

impl<P> Packed<P> {
    fn of(&self, w: Weight) -> &P {
        match w {
            Weight::Qkv => &self.wqkv,
            Weight::Out => &self.wo,
            Weight::Inter => &self.wi,
            Weight::Out2 => &self.wo2,
        }
    }
}

/// Layer `li`'s packed weights.
fn packed<P>(layers: &[Packed<P>], li: usize) -> Result<&Packed<P>> {
    layers.get(li).ok_or_else(|| ModelError::Internal(format!("no packed weights for layer {li}")))
}

/// Every layer's four weights packed by `pack(weight, k, n)`.
fn pack_layers<P: Send>(
    layers: &[Layer],
    d: usize,
    di: usize,
    pack: impl Fn(&[f32], usize, usize) -> Result<P> + Sync,
) -> Result<Vec<Packed<P>>> {
    layers
        .par_iter()
        .map(|l| Ok(Packed { wqkv: pack(&l.wqkv, d, 3 * d)?, wo: pack(&l.wo, d, d)?, wi: pack(&l.wi, d, di)?, wo2: pack(&l.wo2, di, d)? }))
        .collect()
}

/// The CPU engine: weights as plain row-major f32 arrays.
pub struct FusedBert {
    cfg: BertConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type0: Vec<f32>,
    /// MPNet's relative attention bias `[buckets, heads]` ([`relpos`]).
    relative: Option<Vec<f32>>,
    emb_ln: Norm,
    layers: Vec<Layer>,
    /// Packed weights when the products run on AMX or AVX512-BF16 (f32 gemm otherwise).
    packed: Option<PackedLayers>,
}

/// Which weight of a layer a product uses.
#[derive(Clone, Copy)]
enum Weight {
    Qkv,
    Out,
    Inter,
    Out2,
}

/// An `nn.Linear` weight (`out × in`) transposed to `in × out`.
fn linear(wf: &mut WeightFile<'_>, name: &str, d_in: usize, d_out: usize) -> Result<Vec<f32>> {
    let v = wf.f32s(name, &[d_out, d_in])?;
    let mut t = vec![0f32; v.len()];
    for o in 0..d_out {
        for i in 0..d_in {
            t[i * d_out + o] = v[o * d_in + i];
        }
    }
    Ok(t)
}

fn norm(wf: &mut WeightFile<'_>, prefix: &str, d: usize) -> Result<Norm> {
    Ok(Norm { g: wf.f32s(&format!("{prefix}.weight"), &[d])?, b: wf.f32s(&format!("{prefix}.bias"), &[d])? })
}

impl FusedBert {
    /// Reads every tensor strictly (missing, misshapen or unused tensors are errors), as the burn engine.
    pub fn from_safetensors(cfg: BertConfig, w_path: &std::path::Path, bytes: &[u8]) -> Result<Self> {
        let mut wf = WeightFile::parse(w_path, bytes)?;
        let (d, di) = (cfg.hidden_size, cfg.intermediate_size);
        let Tables { word, position, token_type0, relative } = read_tables(&mut wf, &cfg, w_path)?;
        let emb_ln = norm(&mut wf, "embeddings.LayerNorm", d)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let [nq, nk, nv, no, nln1, ni, nout, nln2] = cfg.layer_names(i);
            let (q, k, vv) = (
                linear(&mut wf, &format!("{nq}.weight"), d, d)?,
                linear(&mut wf, &format!("{nk}.weight"), d, d)?,
                linear(&mut wf, &format!("{nv}.weight"), d, d)?,
            );
            let mut wqkv = vec![0f32; d * 3 * d];
            for r in 0..d {
                wqkv[r * 3 * d..r * 3 * d + d].copy_from_slice(&q[r * d..(r + 1) * d]);
                wqkv[r * 3 * d + d..r * 3 * d + 2 * d].copy_from_slice(&k[r * d..(r + 1) * d]);
                wqkv[r * 3 * d + 2 * d..(r + 1) * 3 * d].copy_from_slice(&vv[r * d..(r + 1) * d]);
            }
            let mut bqkv = wf.f32s(&format!("{nq}.bias"), &[d])?;
            bqkv.extend(wf.f32s(&format!("{nk}.bias"), &[d])?);
            bqkv.extend(wf.f32s(&format!("{nv}.bias"), &[d])?);
            layers.push(Layer {
                wqkv,
                bqkv,
                wo: linear(&mut wf, &format!("{no}.weight"), d, d)?,
                bo: wf.f32s(&format!("{no}.bias"), &[d])?,
                ln1: norm(&mut wf, &nln1, d)?,
                wi: linear(&mut wf, &format!("{ni}.weight"), d, di)?,
                bi: wf.f32s(&format!("{ni}.bias"), &[di])?,
                wo2: linear(&mut wf, &format!("{nout}.weight"), di, d)?,
                bo2: wf.f32s(&format!("{nout}.bias"), &[d])?,
                ln2: norm(&mut wf, &nln2, d)?,
            });
        }
        wf.finish()?;
        Ok(FusedBert { cfg, word, position, token_type0, relative, emb_ln, layers, packed: None })
    }

    /// Chooses how the linear layers are computed (packing the weights for the kernel used);
    /// `products` is resolved on this machine ([`Products::resolve`]).
    pub fn with_products(mut self, products: Products) -> Result<Self> {
        let (d, di) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        self.packed = match products.resolve()? {
            Products::Amx => Some(PackedLayers::Amx(pack_layers(&self.layers, d, di, amx::PackedB::new)?)),
            Products::AmxBf16 => {
                Some(PackedLayers::Amx(pack_layers(&self.layers, d, di, |w, k, n| amx::PackedB::with_terms(w, k, n, amx::Terms::Single))?))
            }
            Products::Bf16 => Some(PackedLayers::Bf16(pack_layers(&self.layers, d, di, bf16::PackedB::new)?)),
            Products::F32 | Products::Auto => None,
        };
        Ok(self)
    }

    /// `"amx-bf16x3"`, `"amx-bf16"`, `"avx512-bf16"` or `"f32"`: what the linear layers run on.
    pub fn products(&self) -> &'static str {
        match &self.packed {
            Some(PackedLayers::Amx(p)) if p.first().is_some_and(|l| l.wqkv.terms() == amx::Terms::Single) => "amx-bf16",
            Some(PackedLayers::Amx(_)) => "amx-bf16x3",
            Some(PackedLayers::Bf16(_)) => "avx512-bf16",
            None => "f32",
        }
    }

    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// `dst (t×n) ← e(x (t×k) · W)` for one of layer `li`'s weights: on AMX tiles or AVX512-BF16
    /// the epilogue is fused into the product's stores; f32 `gemm` runs it as passes over `dst`
    /// (the same arithmetic in the same order).
    fn product(&self, li: usize, w: Weight, t: usize, dst: &mut [f32], x: &[f32], e: Epilogue<'_>) -> Result<()> {
        let (d, di) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        let layer = &self.layers[li];
        let (k, n, wf) = match w {
            Weight::Qkv => (d, 3 * d, &layer.wqkv),
            Weight::Out => (d, d, &layer.wo),
            Weight::Inter => (d, di, &layer.wi),
            Weight::Out2 => (di, d, &layer.wo2),
        };
        if let Some(PackedLayers::Amx(p)) = &self.packed {
            return amx::matmul_with(t, dst, n, x, k, packed(p, li)?.of(w), e);
        }
        if let Some(PackedLayers::Bf16(p)) = &self.packed {
            return bf16::matmul_with(t, dst, n, x, k, packed(p, li)?.of(w), e);
        }
        let dst = &mut dst[..t * n];
        // The storing epilogues let `gemm` write the product without reading `dst` (which it would
        // wait for, block by block), then add the bias (and GELU) in one pass: bias + P either way.
        match e {
            Epilogue::Store => matmul(t, n, k, dst, n, x, k, wf, n, 1, false, true),
            Epilogue::Accumulate => matmul(t, n, k, dst, n, x, k, wf, n, 1, true, true),
            Epilogue::Bias(b) | Epilogue::BiasGelu(b) => {
                matmul(t, n, k, dst, n, x, k, wf, n, 1, false, true)?;
                let gelu = matches!(e, Epilogue::BiasGelu(_));
                dst.par_chunks_mut(n * (4096 / n).max(1)).for_each(|rows| simd(Pass::BiasGelu { rows, b, gelu }));
                Ok(())
            }
            Epilogue::AccumulateBias(b) => {
                dst.chunks_exact_mut(n).for_each(|row| row.iter_mut().zip(b).for_each(|(v, b)| *v += b));
                matmul(t, n, k, dst, n, x, k, wf, n, 1, true, true)
            }
        }
    }

    /// Mean-pooled, L2-normalised embeddings of a batch of id sequences (row-major), packed.
    pub fn forward_pooled(&self, batch: &[&[u32]]) -> Result<Vec<f32>> {
        let (d, di) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        let eps = self.cfg.layer_norm_eps as f32;
        let mut starts = Vec::with_capacity(batch.len() + 1);
        starts.push(0usize);
        for s in batch {
            starts.push(starts[starts.len() - 1] + s.len());
        }
        let t = starts[batch.len()];
        let mut x = self.embed(batch, &starts, t);
        layer_norm(&mut x, d, &self.emb_ln, eps);
        let mut qkv = vec![0f32; t * 3 * d];
        let mut ctx = vec![0f32; t * d];
        let mut inter = Vec::new();
        let mut packed_inter = amx::PackedA::default();
        for (li, layer) in self.layers.iter().enumerate() {
            self.product(li, Weight::Qkv, t, &mut qkv, &x, Epilogue::Bias(&layer.bqkv))?;
            self.attention(&qkv, &starts, &mut ctx)?;
            // x = LN(x + ctx·Wo + bo)
            self.product(li, Weight::Out, t, &mut x, &ctx, Epilogue::AccumulateBias(&layer.bo))?;
            layer_norm(&mut x, d, &layer.ln1, eps);
            // x = LN(x + GELU(x·Wi + bi)·Wo2 + bo2)
            if let Some(PackedLayers::Amx(p)) = self.packed.as_ref() {
                // On AMX the intermediate goes from the first product's stores straight into the
                // second product's bf16 tiles (the same values, no f32 copy in memory).
                let p = packed(p, li)?;
                let (wi, wo2) = (p.of(Weight::Inter), p.of(Weight::Out2));
                amx::matmul_gelu_packed(t, &x, d, wi, &layer.bi, wo2.terms(), &mut packed_inter)?;
                amx::matmul_packed_with(&mut x, d, &packed_inter, wo2, Epilogue::AccumulateBias(&layer.bo2))?;
            } else {
                inter.resize(t * di, 0.0);
                self.product(li, Weight::Inter, t, &mut inter, &x, Epilogue::BiasGelu(&layer.bi))?;
                self.product(li, Weight::Out2, t, &mut x, &inter, Epilogue::AccumulateBias(&layer.bo2))?;
            }
            layer_norm(&mut x, d, &layer.ln2, eps);
        }
        Ok(mean_pooled(&x, &starts, d))
    }

    /// The linear layers' products of one packed batch of `t` tokens and nothing else: every
    /// layer's `[Q K V]`, output, intermediate and second output product, stored (no bias,
    /// attention, norm or GELU), in the same kernels as [`FusedBert::forward_pooled`]. What the
    /// products cost alone, for `make bench`'s comparison of the engine with them. Returns the
    /// multiply-adds ×2 (floating-point operations) it ran.
    pub fn products_alone(&self, t: usize) -> Result<u64> {
        let (d, di) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        // One moderate value (no denormals, no overflow): a product's time does not depend on it,
        // and filling costs no more than the engine's own buffers.
        let x = vec![0.25f32; t * di.max(d)];
        let mut qkv = vec![0f32; t * 3 * d];
        let mut out = vec![0f32; t * d];
        let mut inter = vec![0f32; t * di];
        for li in 0..self.layers.len() {
            self.product(li, Weight::Qkv, t, &mut qkv, &x[..t * d], Epilogue::Store)?;
            self.product(li, Weight::Out, t, &mut out, &x[..t * d], Epilogue::Store)?;
            self.product(li, Weight::Inter, t, &mut inter, &x[..t * d], Epilogue::Store)?;
            self.product(li, Weight::Out2, t, &mut out, &x[..t * di], Epilogue::Store)?;
        }
        let per_token = 2 * (d * 3 * d + d * d + 2 * d * di) as u64;
        Ok(per_token * (t * self.layers.len()) as u64)
    }

    /// Embeddings of the packed tokens (`starts`: each sentence's first row, then the total `t`):
    /// word + position + token type 0, before the LayerNorm.
    fn embed(&self, batch: &[&[u32]], starts: &[usize], t: usize) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let off = self.cfg.position_offset();
        let mut x = vec![0f32; t * d];
        for (si, s) in batch.iter().enumerate() {
            for (c, &id) in s.iter().enumerate() {
                // Row `c` of the sentence, position id `c + off` (RoBERTa and MPNet start after the
                // padding index).
                let (r, p) = (starts[si] + c, c + off);
                let row = &mut x[r * d..(r + 1) * d];
                let (w, pe) = (&self.word[id as usize * d..(id as usize + 1) * d], &self.position[p * d..(p + 1) * d]);
                for j in 0..d {
                    row[j] = w[j] + pe[j] + self.token_type0[j];
                }
            }
        }
        x
    }

    /// Self-attention of every sentence, in parallel over sentences ([`attention::sentence`]):
    /// softmax(Q·Kᵀ/√dh)·V of each head into that head's columns of `ctx`, from the packed
    /// `[Q K V]` rows of `qkv`.
    fn attention(&self, qkv: &[f32], starts: &[usize], ctx: &mut [f32]) -> Result<()> {
        let d = self.cfg.hidden_size;
        let heads = self.cfg.num_attention_heads;
        let shape = attention::Shape { d, heads, scale: 1.0 / ((d / heads) as f32).sqrt(), relative: self.relative.as_deref() };
        let mut parts: Vec<(usize, &[f32], &mut [f32])> = Vec::with_capacity(starts.len());
        let mut rest = &mut ctx[..];
        for w in starts.windows(2) {
            let len = w[1] - w[0];
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(len * d);
            parts.push((len, &qkv[w[0] * 3 * d..w[1] * 3 * d], mine));
            rest = tail;
        }
        parts
            .into_par_iter()
            .for_each_init(attention::Scratch::default, |scratch, (len, q, c)| attention::sentence(q, len, shape, c, scratch));
        Ok(())
    }
}

/// The mean over each sentence's token states (`starts` as in `embed`), then L2 normalisation.
fn mean_pooled(x: &[f32], starts: &[usize], d: usize) -> Vec<f32> {
    let mut out = means(x, starts, d);
    l2_normalise_rows(&mut out, d);
    out
}

/// The mean of each sequence's rows of width `d` in `x`, sequence `i` being rows
/// `starts[i]..starts[i + 1]`.
pub(crate) fn means(x: &[f32], starts: &[usize], d: usize) -> Vec<f32> {
    let mut out = vec![0f32; starts.len().saturating_sub(1) * d];
    for (si, o) in out.chunks_exact_mut(d).enumerate() {
        let (a, b) = (starts[si], starts[si + 1]);
        for row in x[a * d..b * d].chunks_exact(d) {
            o.iter_mut().zip(row).for_each(|(s, v)| *s += v);
        }
        let n = ((b - a) as f32).max(1e-9);
        o.iter_mut().for_each(|s| *s /= n);
    }
    out
}

/// Each row of width `d` divided by its L2 norm (at least 1e-12): sentence-transformers' `Normalize`.
pub(crate) fn l2_normalise_rows(x: &mut [f32], d: usize) {
    for o in x.chunks_exact_mut(d) {
        let norm = o.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        o.iter_mut().for_each(|s| *s /= norm);
    }
}
