//! Self-attention of one sentence for the CPU engine, every head, a block of query rows at a time:
//! the scores of the block against every key, their softmax and the weighted sum of the values,
//! without leaving the block.
//!
//! Per (sentence, head) the work is small (MiniLM: 32-wide heads, sentences of a few dozen to 256
//! tokens): two `gemm` calls per head paid for their packing and dispatch on every call, and the
//! `len × len` score matrix went through memory between them. Here the head's keys are copied once,
//! transposed and padded to whole blocks of the vector width (16 lanes with AVX-512, 8 with AVX2,
//! 1 on baseline x86-64), so that the score of [`ROWS`] queries against one block of keys is
//! [`ROWS`] vector accumulators updated by one broadcast multiply-add per query and dimension; the
//! values likewise, padded to whole blocks of columns. The loops have fixed widths (the vector,
//! [`ROWS`] rows), so the compiler keeps the accumulators in vector registers; they are compiled for
//! the instruction set of [`crate::simd::level`] through pulp's runtime dispatch.
//!
//! The arithmetic is the attention of `super::Bert` in another order of additions, and each output
//! row is divided by its softmax sum once rather than every weight (checked against the f64
//! reference with the rest of the engine, and against the f64 definition, MPNet's relative bias
//! included, in this module's tests).

use super::relpos;
use crate::ops::exp_approx;

/// Query rows per block: the accumulators of one 16-key block (scores) or one 16-column block
/// (values) are `ROWS` vectors, enough independent multiply-adds to keep both FMA ports busy.
pub(crate) const ROWS: usize = 8;
/// The widest vector of any level (AVX-512: 16 f32 lanes).
const MAX_LANES: usize = 16;

/// Per-thread buffers, reused across heads and sentences.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Keys of one head in blocks of the vector width, each `dh × lanes` (`kp` keys: the length
    /// rounded up to the vector width, zero-padded).
    kt: Vec<f32>,
    /// Values of one head: `len` rows of `vp` (`dh` rounded up to the vector width, zero-padded).
    v: Vec<f32>,
    /// `dh` zeros: the query row of a block's rows past the sentence.
    zeros: Vec<f32>,
    /// Scores, then the softmax's numerators, of one block: `ROWS × kp`.
    s: Vec<f32>,
    /// MPNet's bucket of every distance of the sentence (`2·len − 1`), and one head's bias there.
    buckets: Vec<usize>,
    bias: Vec<f32>,
}

/// The shape of one attention: model width, heads, softmax scale, and MPNet's relative-position
/// table (`[buckets, heads]`) when the model has one.
#[derive(Clone, Copy)]
pub(crate) struct Shape<'a> {
    pub d: usize,
    pub heads: usize,
    pub scale: f32,
    pub relative: Option<&'a [f32]>,
}

/// `ctx` (`len × d`) ← softmax(Q·Kᵀ·scale (+ relative bias))·V of each head into that head's
/// columns, from the sentence's packed `[Q K V]` rows (`qkv`: `len × 3d`).
///
/// The three steps of a block of queries (scores, softmax, weighted values) are three kernels, each
/// dispatched on its own (so each is its own function compiled for the CPU's instruction set):
/// inlined into one function, the softmax's constants stayed live across the weighted-values loop
/// and pushed ten of its sixteen accumulators onto the stack (a load, multiply-add and store per
/// accumulator and key).
pub(crate) fn sentence(qkv: &[f32], len: usize, shape: Shape<'_>, ctx: &mut [f32], scratch: &mut Scratch) {
    sentence_at(crate::simd::arch(), qkv, len, shape, ctx, scratch);
}

/// [`sentence`] through the dispatcher `arch` (any level: the tests run each one).
fn sentence_at(arch: pulp::Arch, qkv: &[f32], len: usize, shape: Shape<'_>, ctx: &mut [f32], scratch: &mut Scratch) {
    let lanes = lanes(arch);
    if shape.relative.is_some() {
        // The bucket of every (query, key) distance: the same for every head.
        scratch.buckets = relpos::distance_buckets(len);
    }
    for head in 0..shape.heads {
        one_head(arch, lanes, qkv, len, shape, head, ctx, scratch);
    }
}

/// The vector width the dispatched kernels use (their key blocks are laid out for it).
fn lanes(arch: pulp::Arch) -> usize {
    struct Lanes;
    impl pulp::WithSimd for Lanes {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) -> usize {
            S::F32_LANES
        }
    }
    arch.dispatch(Lanes)
}

/// One head of [`sentence`]; `lanes`: the dispatched kernels' vector width.
#[allow(clippy::too_many_arguments)]
fn one_head(arch: pulp::Arch, lanes: usize, qkv: &[f32], len: usize, shape: Shape<'_>, head: usize, ctx: &mut [f32], sc: &mut Scratch) {
    let d = shape.d;
    let dh = d / shape.heads;
    let (kp, vp) = (len.div_ceil(lanes) * lanes, dh.div_ceil(lanes) * lanes);
    let w = 3 * d;
    let (q0, k0, v0) = (head * dh, d + head * dh, 2 * d + head * dh);
    // Keys in blocks of `lanes`: block b holds, for each dimension c, keys b·lanes … b·lanes + lanes − 1.
    sc.kt.clear();
    sc.kt.resize(dh * kp, 0.0);
    sc.v.clear();
    sc.v.resize(len * vp, 0.0);
    for (j, row) in qkv.chunks_exact(w).take(len).enumerate() {
        let block = &mut sc.kt[(j / lanes) * dh * lanes + j % lanes..];
        for (c, &x) in row[k0..k0 + dh].iter().enumerate() {
            block[c * lanes] = x;
        }
        sc.v[j * vp..j * vp + dh].copy_from_slice(&row[v0..v0 + dh]);
    }
    if let Some(table) = shape.relative {
        relpos::head_bias(&sc.buckets, table, shape.heads, head, &mut sc.bias);
    }
    sc.zeros.resize(dh, 0.0);
    sc.s.resize(ROWS * kp, 0.0);
    for r0 in (0..len).step_by(ROWS) {
        let rows = ROWS.min(len - r0);
        // The block's query rows, read in place (rows past the sentence are zeros).
        let q: [&[f32]; ROWS] = std::array::from_fn(|r| if r < rows { &qkv[(r0 + r) * w + q0..][..dh] } else { &sc.zeros[..dh] });
        arch.dispatch(Scores { q, kt: &sc.kt, dh, kp, s: &mut sc.s });
        // The softmax's numerators; each output row is divided by its sum at the end.
        let bias = shape.relative.map(|_| sc.bias.as_slice());
        let inv = arch.dispatch(Numerators { s: &mut sc.s, kp, len, rows, r0, scale: shape.scale, bias });
        let out = Out { rows, inv, dh, ctx: &mut ctx[r0 * d..], d, c0: q0 };
        arch.dispatch(Values { p: &sc.s, kp, len, v: &sc.v, vp, out });
    }
}

/// [`scores`], dispatched.
struct Scores<'a> {
    q: [&'a [f32]; ROWS],
    kt: &'a [f32],
    dh: usize,
    kp: usize,
    s: &'a mut [f32],
}

impl pulp::WithSimd for Scores<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        scores(simd, self.q, self.kt, self.dh, self.kp, self.s);
    }
}

/// The softmax numerators of the block's `rows` rows of scores (`s`: rows of `kp`, the first `len`
/// real) in place, MPNet's relative bias (`bias`, by distance) added first; one over each row's
/// sum.
struct Numerators<'a> {
    s: &'a mut [f32],
    kp: usize,
    len: usize,
    rows: usize,
    r0: usize,
    scale: f32,
    bias: Option<&'a [f32]>,
}

impl pulp::WithSimd for Numerators<'_> {
    type Output = [f32; ROWS];
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) -> [f32; ROWS] {
        let Numerators { s, kp, len, rows, r0, scale, bias } = self;
        let mut inv = [0f32; ROWS];
        for ((r, s), inv) in s.chunks_exact_mut(kp).take(rows).enumerate().zip(inv.iter_mut()) {
            s[len..].fill(f32::NEG_INFINITY);
            let sum = match bias {
                // MPNet: softmax(S·scale + bias of each (query, key) distance).
                Some(bias) => {
                    relpos::scale_and_add(&mut s[..len], bias, r0 + r, scale);
                    exp_shifted(simd, s, 1.0)
                }
                None => exp_shifted(simd, s, scale),
            };
            *inv = 1.0 / sum;
        }
        inv
    }
}

/// [`weighted_values`], dispatched.
struct Values<'a, 'b> {
    p: &'a [f32],
    kp: usize,
    len: usize,
    v: &'a [f32],
    vp: usize,
    out: Out<'b>,
}

impl pulp::WithSimd for Values<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        weighted_values(simd, self.p, self.kp, self.len, self.v, self.vp, self.out);
    }
}

/// `s` (`ROWS × kp`) ← the block's queries (`q`: `ROWS` rows of `dh`) against every key (`kt`: blocks of
/// `lanes` keys, each `dh × lanes`), two blocks at a time where vectors are 16 wide (16
/// accumulators: two loads of keys and eight broadcasts of queries feed 16 multiply-adds).
#[inline(always)]
fn scores<S: pulp::Simd>(simd: S, q: [&[f32]; ROWS], kt: &[f32], dh: usize, kp: usize, s: &mut [f32]) {
    let blocks = kp / S::F32_LANES;
    let mut b = 0;
    if S::F32_LANES >= 16 {
        while b + 2 <= blocks {
            score_blocks::<S, 2>(simd, q, kt, dh, kp, s, b);
            b += 2;
        }
    }
    while b < blocks {
        score_blocks::<S, 1>(simd, q, kt, dh, kp, s, b);
        b += 1;
    }
}

/// [`scores`] of key blocks `b0 .. b0 + N`.
#[inline(always)]
fn score_blocks<S: pulp::Simd, const N: usize>(simd: S, q: [&[f32]; ROWS], kt: &[f32], dh: usize, kp: usize, s: &mut [f32], b0: usize) {
    let lanes = S::F32_LANES;
    let keys = S::as_simd_f32s(&kt[b0 * dh * lanes..(b0 + N) * dh * lanes]).0;
    let q = q.map(|row| &row[..dh]);
    let mut acc = [[simd.splat_f32s(0.0); N]; ROWS];
    for c in 0..dh {
        let mut k = [simd.splat_f32s(0.0); N];
        for (i, k) in k.iter_mut().enumerate() {
            *k = keys[i * dh + c];
        }
        for r in 0..ROWS {
            let x = simd.splat_f32s(q[r][c]);
            for i in 0..N {
                acc[r][i] = simd.mul_add_e_f32s(x, k[i], acc[r][i]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let out = S::as_mut_simd_f32s(&mut s[r * kp + b0 * lanes..][..N * lanes]).0;
        out.copy_from_slice(a);
    }
}

/// Softmax of `scale`·s in place (one row of scores; padding set to −∞ weighs nothing). Whole
/// vectors go through [`exp`], a remainder shorter than a vector through [`exp_approx`].
#[inline(always)]
pub(crate) fn softmax<S: pulp::Simd>(simd: S, s: &mut [f32], scale: f32) {
    let inv = 1.0 / exp_shifted(simd, s, scale);
    let (v, tail) = S::as_mut_simd_f32s(s);
    let k = simd.splat_f32s(inv);
    for x in v.iter_mut() {
        *x = simd.mul_f32s(*x, k);
    }
    tail.iter_mut().for_each(|x| *x *= inv);
}

/// The softmax's numerators in place, e^(scale·(s − max s)), and their sum: the weighted values
/// divide by it once per output row instead of once per weight.
#[inline(always)]
fn exp_shifted<S: pulp::Simd>(simd: S, s: &mut [f32], scale: f32) -> f32 {
    let (v, tail) = S::as_mut_simd_f32s(s);
    let mut m = simd.splat_f32s(f32::NEG_INFINITY);
    for x in v.iter() {
        m = simd.max_f32s(m, *x);
    }
    let max = tail.iter().fold(simd.reduce_max_f32s(m), |a, &b| a.max(b));
    let (k, off) = (simd.splat_f32s(scale), simd.splat_f32s(-max * scale));
    let mut acc = simd.splat_f32s(0.0);
    for x in v.iter_mut() {
        *x = exp(simd, simd.mul_add_e_f32s(*x, k, off));
        acc = simd.add_f32s(acc, *x);
    }
    let mut sum = simd.reduce_sum_f32s(acc);
    for x in tail.iter_mut() {
        *x = exp_approx((*x - max) * scale);
        sum += *x;
    }
    sum
}

/// e^x of each lane: [`exp_approx`]'s range reduction and polynomial with fused multiply-adds.
/// Inputs below −87 give 0, as in [`exp_approx`] (a softmax's tiny weights must not become
/// subnormal numbers when scaled: on Intel cores each costs a microcode assist).
#[inline(always)]
pub(crate) fn exp<S: pulp::Simd>(simd: S, x: S::f32s) -> S::f32s {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0;
    let under = simd.less_than_f32s(x, simd.splat_f32s(-87.0));
    let x = simd.min_f32s(simd.max_f32s(x, simd.splat_f32s(-87.0)), simd.splat_f32s(88.0));
    // n = round(x·log2 e), read back from the low mantissa bits of y (1.5·2^23 + n).
    let y = simd.mul_add_e_f32s(x, simd.splat_f32s(LOG2E), simd.splat_f32s(MAGIC));
    let n = simd.sub_f32s(y, simd.splat_f32s(MAGIC));
    let r = simd.mul_add_e_f32s(n, simd.splat_f32s(-LN2_HI), x);
    let r = simd.mul_add_e_f32s(n, simd.splat_f32s(-LN2_LO), r);
    let mut p = simd.splat_f32s(1.0 / 720.0);
    for k in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = simd.mul_add_e_f32s(p, r, simd.splat_f32s(k));
    }
    let bits: S::u32s = pulp::bytemuck::cast(y);
    let e = simd.add_u32s(simd.sub_u32s(bits, simd.splat_u32s(MAGIC.to_bits())), simd.splat_u32s(127));
    let scale: S::f32s = pulp::bytemuck::cast(simd.wrapping_dyn_shl_u32s(e, simd.splat_u32s(23)));
    simd.select_f32s(under, simd.splat_f32s(0.0), simd.mul_f32s(p, scale))
}

/// `out` ← the block's softmax numerators (`p`: `ROWS × kp`, the first `len` of each row) times
/// the values (`v`: `len × vp`), each row divided by its sum; two 16-wide column blocks at a time
/// where they exist.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weighted_values<S: pulp::Simd>(simd: S, p: &[f32], kp: usize, len: usize, v: &[f32], vp: usize, out: Out<'_>) {
    let blocks = vp / S::F32_LANES;
    let mut b = 0;
    let mut out = out;
    if S::F32_LANES >= 16 {
        while b + 2 <= blocks {
            out = value_blocks::<S, 2>(simd, p, kp, len, v, vp, b, out);
            b += 2;
        }
    }
    while b < blocks {
        out = value_blocks::<S, 1>(simd, p, kp, len, v, vp, b, out);
        b += 1;
    }
}

/// Where [`weighted_values`] writes: rows `0..rows` of `ctx` (row stride `d`), columns
/// `c0..c0 + dh`, each row times its `inv` (one over its softmax sum).
struct Out<'a> {
    rows: usize,
    inv: [f32; ROWS],
    dh: usize,
    ctx: &'a mut [f32],
    d: usize,
    c0: usize,
}

/// [`weighted_values`] of the value column blocks `b0 .. b0 + N`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn value_blocks<'a, S: pulp::Simd, const N: usize>(
    simd: S,
    p: &[f32],
    kp: usize,
    len: usize,
    v: &[f32],
    vp: usize,
    b0: usize,
    out: Out<'a>,
) -> Out<'a> {
    let lanes = S::F32_LANES;
    let p = &p[..ROWS * kp];
    let mut acc = [[simd.splat_f32s(0.0); N]; ROWS];
    for j in 0..len {
        let x = S::as_simd_f32s(&v[j * vp + b0 * lanes..][..N * lanes]).0;
        for r in 0..ROWS {
            let pr = simd.splat_f32s(p[r * kp + j]);
            for i in 0..N {
                acc[r][i] = simd.mul_add_e_f32s(pr, x[i], acc[r][i]);
            }
        }
    }
    let mut tmp = [0f32; 2 * MAX_LANES];
    let (first, width) = (b0 * lanes, (N * lanes).min(out.dh.saturating_sub(b0 * lanes)));
    for (r, a) in acc.iter().enumerate().take(out.rows) {
        let k = simd.splat_f32s(out.inv[r]);
        for (t, a) in S::as_mut_simd_f32s(&mut tmp[..N * lanes]).0.iter_mut().zip(a) {
            *t = simd.mul_f32s(*a, k);
        }
        let at = r * out.d + out.c0 + first;
        out.ctx[at..at + width].copy_from_slice(&tmp[..width]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention of one sentence in f64, straight from the definition.
    fn reference(qkv: &[f32], len: usize, shape: Shape<'_>) -> Vec<f64> {
        let (d, h) = (shape.d, shape.heads);
        let dh = d / h;
        let at = |r: usize, c: usize| f64::from(qkv[r * 3 * d + c]);
        let buckets = relpos::distance_buckets(len);
        let mut out = vec![0f64; len * d];
        for hh in 0..h {
            for i in 0..len {
                let mut s: Vec<f64> = (0..len)
                    .map(|j| {
                        let dot: f64 = (0..dh).map(|c| at(i, hh * dh + c) * at(j, d + hh * dh + c)).sum();
                        let bias = shape.relative.map_or(0.0, |t| f64::from(t[buckets[len - 1 + j - i] * h + hh]));
                        dot * f64::from(shape.scale) + bias
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                s.iter_mut().for_each(|z| *z = (*z - max).exp());
                let sum: f64 = s.iter().sum();
                for c in 0..dh {
                    out[i * d + hh * dh + c] = (0..len).map(|j| s[j] / sum * at(j, 2 * d + hh * dh + c)).sum();
                }
            }
        }
        out
    }

    fn seeded(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    /// Every length around the block and lane boundaries, heads narrower and wider than a vector
    /// and not a multiple of one (head dimensions 4 to 64: BERT checkpoints with 8, 12 and 24 among
    /// them), with and without MPNet's relative bias, at every dispatch level this CPU has: equal to
    /// the f64 definition within f32 rounding, and the columns of each head written only by that
    /// head.
    #[test]
    fn attention_matches_the_definition_at_every_level() {
        for level in crate::simd::Level::ALL.into_iter().filter(|l| *l <= crate::simd::Level::detected()) {
            for (d, heads) in [(8, 2), (40, 2), (64, 2), (96, 3), (128, 2), (64, 8), (96, 8), (96, 4)] {
                let table = seeded(relpos::NUM_BUCKETS * heads, 7);
                for relative in [None, Some(table.as_slice())] {
                    let shape = Shape { d, heads, scale: 1.0 / ((d / heads) as f32).sqrt(), relative };
                    let mut scratch = Scratch::default();
                    for len in [1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 70, 130] {
                        let qkv = seeded(len * 3 * d, (len * d) as u64);
                        let mut ctx = vec![f32::NAN; len * d];
                        sentence_at(level.arch(), &qkv, len, shape, &mut ctx, &mut scratch);
                        let want = reference(&qkv, len, shape);
                        for (i, (g, w)) in ctx.iter().zip(&want).enumerate() {
                            assert!(
                                (f64::from(*g) - w).abs() < 2e-5 * (1.0 + w.abs()),
                                "{level}: d {d} heads {heads} len {len} relative {} at {i}: {g} against {w}",
                                relative.is_some()
                            );
                        }
                    }
                }
            }
        }
    }
}
