//! Matrix products in single bf16 with f32 accumulation on AVX512-BF16 (`vdpbf16ps`), for the CPU
//! engine on CPUs that have AVX512-BF16 but no AMX tiles (AMD Zen 4/5, Intel Cooper Lake).
//!
//! Both operands are rounded to bf16 (round to nearest even: 8 significant bits) and every product
//! pair is accumulated in f32 by `vdpbf16ps`, which multiplies the two bf16 halves of each 32-bit
//! lane of its operands and adds both products to the f32 lane of the accumulator: twice the
//! multiply-adds of an f32 FMA per instruction. Against the f32 engine a sentence embedding moves
//! by a cosine of about 1e-5 (`tests.rs` asserts ≥ 0.9999 on the sentence-transformers fixture);
//! the split-bf16 AMX products ([`super::amx`]) keep three more digits where the tiles exist.
//!
//! The weight side is rounded and laid out once, at load ([`PackedB`]): panels of 32 columns, and
//! in each panel, for every pair of rows (2p, 2p + 1) of the inner dimension, 32 lanes holding
//! `(b[2p][j], b[2p+1][j])` — two zmm registers. The activation side is rounded per call into pairs
//! `(a[r][2p], a[r][2p+1])`, one u32 each, in a buffer of the thread. The kernel keeps a 12 × 32
//! block of C in 24 registers, broadcasts one pair of A per row and streams the panel; it is
//! parallel over row blocks (rayon), and every output element is accumulated by one thread in a
//! fixed order, so results do not depend on the number of threads.

use rayon::prelude::*;

use super::amx::Epilogue;
use crate::error::{ModelError, Result};
use crate::ops::{gelu, gelu_vec};

/// Rows of C one kernel call computes, and columns of a panel.
const MR: usize = 12;
const NR: usize = 32;

/// bf16 bits of `x` by round to nearest even (inputs are finite: activations and weights).
#[inline(always)]
fn bf16(x: f32) -> u32 {
    let b = x.to_bits();
    (b + 0x7fff + ((b >> 16) & 1)) >> 16
}

/// The pair (lo, hi) of bf16 numbers in one lane, `lo` in the low half (the first of the two
/// products `vdpbf16ps` adds).
#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    bf16(lo) | (bf16(hi) << 16)
}

/// Whether this CPU runs AVX512-BF16 (checked once; the OS state of the zmm registers is part of
/// the standard library's detection).
/// Never below `TGRAG_SIMD=v4` ([`crate::simd`]): a capped level runs f32 products.
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    crate::simd::level() >= crate::simd::Level::V4 && *OK.get_or_init(detect)
}

/// Whether single bf16 products are expected to beat f32 gemm here, so that `auto` picks them:
/// AVX512-BF16 on an AMD core. Zen 4 and 5 run `vdpbf16ps` at the rate of an f32 FMA with twice
/// its multiply-adds; Intel cores issue it on one port, where f32 FMAs use two, so it gives no
/// more than f32 there (measured on a Sapphire Rapids-class Xeon: 78 against 117 sentences/s for
/// the engine) and Intel's `auto` is AMX or f32.
pub fn faster_than_f32() -> bool {
    available() && amd()
}

#[cfg(target_arch = "x86_64")]
fn detect() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> bool {
    false
}

/// CPUID's vendor string is `AuthenticAMD`.
#[cfg(target_arch = "x86_64")]
fn amd() -> bool {
    let v = std::arch::x86_64::__cpuid(0);
    let mut name = [0u8; 12];
    for (i, r) in [v.ebx, v.edx, v.ecx].iter().enumerate() {
        name[4 * i..4 * i + 4].copy_from_slice(&r.to_le_bytes());
    }
    &name == b"AuthenticAMD"
}

#[cfg(not(target_arch = "x86_64"))]
fn amd() -> bool {
    false
}

/// A `k × n` right-hand side (row-major f32), rounded to bf16 and laid out in panels of pairs.
pub struct PackedB {
    k: usize,
    n: usize,
    /// Pairs along the inner dimension (k rounded up to 2, halved).
    pk: usize,
    /// Panels of `NR` columns (n rounded up).
    panels: usize,
    /// Panel `q` is `data[q * pk * NR..(q + 1) * pk * NR]`, pair-row by pair-row.
    data: Vec<u32>,
}

impl PackedB {
    pub fn new(w: &[f32], k: usize, n: usize) -> Result<Self> {
        if w.len() != k * n || k == 0 || n == 0 {
            return Err(ModelError::Internal(format!("bf16: {} values for a {k}×{n} matrix", w.len())));
        }
        let (pk, panels) = (k.div_ceil(2), n.div_ceil(NR));
        let mut data = vec![0u32; panels * pk * NR];
        let at = |r: usize, j: usize| if r < k { w[r * n + j] } else { 0.0 };
        for (q, panel) in data.chunks_exact_mut(pk * NR).enumerate() {
            for (p, lanes) in panel.chunks_exact_mut(NR).enumerate() {
                for (c, lane) in lanes.iter_mut().enumerate() {
                    let j = q * NR + c;
                    if j < n {
                        *lane = pair(at(2 * p, j), at(2 * p + 1, j));
                    }
                }
            }
        }
        Ok(PackedB { k, n, pk, panels, data })
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }
}

thread_local! {
    static PAIRS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `dst (m×n, row stride ldd) (+)= lhs (m×k, row stride lda) · b`; `accumulate` keeps what `dst`
/// holds (bias, residual) and adds the product.
pub fn matmul(m: usize, dst: &mut [f32], ldd: usize, lhs: &[f32], lda: usize, b: &PackedB, accumulate: bool) -> Result<()> {
    matmul_with(m, dst, ldd, lhs, lda, b, if accumulate { Epilogue::Accumulate } else { Epilogue::Store })
}

/// `dst (m×n, row stride ldd) ← epilogue(lhs (m×k, row stride lda) · b)` ([`Epilogue`], as the
/// AMX products apply it): the bias and the residual are added as each block leaves the
/// registers, and GELU is applied to the block while it is in cache, with the arithmetic of the
/// separate passes in the same order (bit for bit: a bias pass, an accumulating product, a GELU
/// pass). Only the epilogues that read `dst` load it, and those fetch the block's rows ahead.
pub fn matmul_with(m: usize, dst: &mut [f32], ldd: usize, lhs: &[f32], lda: usize, b: &PackedB, epilogue: Epilogue<'_>) -> Result<()> {
    let (k, n, pk) = (b.k, b.n, b.pk);
    if m == 0 {
        return Ok(());
    }
    if !available() {
        return Err(ModelError::Internal("bf16 matmul called on a CPU without AVX512-BF16".into()));
    }
    super::check_operands("bf16", (m, k, n), (lhs.len(), lda), (dst.len(), ldd))?;
    if let Some(v) = epilogue.bias().filter(|v| v.len() != n) {
        return Err(ModelError::Internal(format!("bf16 product: a bias of {} for {n} columns", v.len())));
    }
    let gelu = matches!(epilogue, Epilogue::BiasGelu(_));
    // Row blocks of MR, about four tasks per thread (balanced; the panels stay in L2).
    let threads = rayon::current_num_threads().max(1);
    let task_rows = m.div_ceil(4 * threads).div_ceil(MR).max(1) * MR;
    dst[..(m - 1) * ldd + n].par_chunks_mut(task_rows * ldd).enumerate().for_each(|(ti, out)| {
        let r0 = ti * task_rows;
        let rows = (m - r0).min(task_rows);
        let blocks = rows.div_ceil(MR);
        PAIRS.with(|cell| {
            let mut a = cell.borrow_mut();
            a.clear();
            a.resize(blocks * MR * pk, 0);
            for (r, row) in a.chunks_exact_mut(pk).take(rows).enumerate() {
                pack_row(&lhs[(r0 + r) * lda..(r0 + r) * lda + k], row);
            }
            for q in 0..b.panels {
                let panel = &b.data[q * pk * NR..(q + 1) * pk * NR];
                let cols = (n - q * NR).min(NR);
                // The panel's columns of the bias.
                let epilogue = epilogue.bias().map_or(epilogue, |v| epilogue.with_bias(&v[q * NR..q * NR + cols]));
                for mb in 0..blocks {
                    let live = rows.saturating_sub(mb * MR).min(MR);
                    let at = (mb * MR) * ldd + q * NR;
                    let c = Out { dst: &mut out[at..at + (live - 1) * ldd + cols], ldd, rows: live, cols, epilogue };
                    block(&a[mb * MR * pk..(mb + 1) * MR * pk], panel, pk, c);
                    if gelu {
                        crate::simd::arch().dispatch(GeluBlock { out: &mut out[at..at + (live - 1) * ldd + cols], ldd, rows: live, cols });
                    }
                }
            }
        });
    });
    Ok(())
}

/// GELU over `rows` × `cols` of `out` (row stride `ldd`), one block just stored: whole vectors by
/// [`gelu_vec`], the rest by [`gelu`] (the same bits, as the engine's GELU pass).
struct GeluBlock<'a> {
    out: &'a mut [f32],
    ldd: usize,
    rows: usize,
    cols: usize,
}

impl pulp::WithSimd for GeluBlock<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let GeluBlock { out, ldd, rows, cols } = self;
        for r in 0..rows {
            let (head, tail) = S::as_mut_simd_f32s(&mut out[r * ldd..r * ldd + cols]);
            for v in head {
                *v = gelu_vec(simd, *v);
            }
            for x in tail {
                *x = gelu(*x);
            }
        }
    }
}

/// One activation row `x` (k values) as bf16 pairs (`row`: ⌈k/2⌉ lanes, `pair`'s
/// layout: as 16-bit halves, the bf16 of x[0], x[1], …, then 0 for an odd k).
fn pack_row(x: &[f32], row: &mut [u32]) {
    assert!(row.len() == x.len().div_ceil(2), "bf16 pack: operand lengths");
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `available()` (checked by `matmul`, the only caller) says the CPU runs AVX512F;
        // the lengths asserted above are what `pack` reads and writes.
        #[allow(unsafe_code)]
        unsafe {
            pack(x, row)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, row);
        unreachable!("bf16 products exist on x86_64 only");
    }
}

/// [`pack_row`] sixteen values at a time: `bf16`'s integer rounding on 32-bit lanes, narrowed to
/// 16 bits (`vpmovdw`), so every half is `bf16(x)` bit for bit; the tail as the scalar loop.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f")]
unsafe fn pack(x: &[f32], row: &mut [u32]) {
    use std::arch::x86_64::*;
    let k = x.len();
    let halves = row.as_mut_ptr().cast::<u16>();
    let (one, round) = (_mm512_set1_epi32(1), _mm512_set1_epi32(0x7fff));
    let mut i = 0;
    while i + 16 <= k {
        // SAFETY: i + 16 ≤ k: x[i..i + 16] is read and halves[i..i + 16] written, inside the
        // 2·⌈k/2⌉ halves of `row`.
        unsafe {
            let b = _mm512_loadu_si512(x.as_ptr().add(i).cast());
            let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(b), one);
            let h = _mm512_srli_epi32::<16>(_mm512_add_epi32(_mm512_add_epi32(b, round), odd));
            _mm256_storeu_si256(halves.add(i).cast(), _mm512_cvtepi32_epi16(h));
        }
        i += 16;
    }
    for p in i / 2..row.len() {
        row[p] = pair(x[2 * p], if 2 * p + 1 < k { x[2 * p + 1] } else { 0.0 });
    }
}

/// Where one block's results go: `rows × cols` values of `dst` (row stride `ldd`), by `epilogue`
/// (its bias: the block's `cols` columns; GELU is the caller's, after the block is stored).
struct Out<'a> {
    dst: &'a mut [f32],
    ldd: usize,
    rows: usize,
    cols: usize,
    epilogue: Epilogue<'a>,
}

/// `dst (+)= a · panel` for one block: `a` is MR rows of `pk` pairs, `panel` `pk` pair-rows of NR
/// lanes; only `c.rows` rows and `c.cols` columns are written.
fn block(a: &[u32], panel: &[u32], pk: usize, c: Out<'_>) {
    assert!(a.len() == MR * pk && panel.len() == pk * NR, "bf16 block: operand lengths");
    assert!(
        (1..=MR).contains(&c.rows)
            && (1..=NR).contains(&c.cols)
            && c.cols <= c.ldd
            && c.dst.len() >= (c.rows - 1) * c.ldd + c.cols
            && c.epilogue.bias().is_none_or(|b| b.len() == c.cols),
        "bf16 block: output lengths"
    );
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `available()` (checked by `matmul`, the only caller) says the CPU runs
        // AVX512F and AVX512-BF16; the lengths asserted above are what the kernel reads and
        // writes.
        #[allow(unsafe_code)]
        unsafe {
            kernel(a, panel, pk, c)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, panel, pk, c);
        unreachable!("bf16 products exist on x86_64 only");
    }
}

/// The register kernel: 24 accumulators (MR rows × two halves of the panel), one broadcast pair
/// of A per row and pair-row, two loads of B per pair-row; then each live row's two halves are
/// stored under the column mask, by `c.epilogue` (GELU left to the caller). An epilogue that reads the destination first asks
/// for its rows' lines, so that they arrive during the multiply-adds (a block's rows are a stride
/// apart and were last touched a whole product earlier: waiting for them at the store was about a
/// fifth of the kernel's time).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn kernel(a: &[u32], panel: &[u32], pk: usize, c: Out<'_>) {
    use std::arch::x86_64::*;
    let out = c.dst.as_mut_ptr();
    if c.epilogue.reads_dst() {
        for i in 0..c.rows {
            // SAFETY: a prefetch reads nothing the program sees and cannot fault; the address is
            // row i's first value, inside `dst` (row i < rows).
            unsafe {
                let at = out.add(i * c.ldd).cast::<i8>().cast_const();
                _mm_prefetch::<_MM_HINT_T0>(at);
                if c.cols > 16 {
                    _mm_prefetch::<_MM_HINT_T0>(at.add(64));
                }
            }
        }
    }
    let mut acc = [_mm512_setzero_ps(); 2 * MR];
    let (ap, bp) = (a.as_ptr(), panel.as_ptr());
    for p in 0..pk {
        // SAFETY (all reads): p < pk, so B reads `panel[p * NR..p * NR + 32]` and A reads
        // `a[i * pk + p]` for i < MR, inside the lengths the caller asserted.
        let (b0, b1) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(p * NR).cast())),
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(p * NR + 16).cast())),
            )
        };
        for i in 0..MR {
            let x = unsafe { *ap.add(i * pk + p) };
            // SAFETY: __m512i and __m512bh are the same 64 bytes (32 bf16 = 16 pairs).
            let ai = unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(x as i32)) };
            acc[2 * i] = _mm512_dpbf16_ps(acc[2 * i], ai, b0);
            acc[2 * i + 1] = _mm512_dpbf16_ps(acc[2 * i + 1], ai, b1);
        }
    }
    let lanes = |n: usize| -> __mmask16 { if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 } };
    let masks = [lanes(c.cols), lanes(c.cols.saturating_sub(16))];
    // The bias's two halves (zero where it has none). SAFETY: the bias holds `cols` values
    // (asserted by the caller); a half is read only where its mask has lanes, and only those.
    let mut bias = [_mm512_setzero_ps(); 2];
    if let Some(b) = c.epilogue.bias() {
        for (h, &mask) in masks.iter().enumerate() {
            if mask != 0 {
                bias[h] = unsafe { _mm512_maskz_loadu_ps(mask, b.as_ptr().add(16 * h)) };
            }
        }
    }
    for i in 0..c.rows {
        for (h, &mask) in masks.iter().enumerate() {
            if mask == 0 {
                continue;
            }
            // SAFETY: row i < rows and the masked lanes h·16 + l < cols: inside the
            // (rows − 1)·ldd + cols values the caller asserted.
            unsafe {
                let at = out.add(i * c.ldd + 16 * h);
                let p = acc[2 * i + h];
                let v = match c.epilogue {
                    Epilogue::Store => p,
                    Epilogue::Accumulate => _mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), p),
                    Epilogue::Bias(_) | Epilogue::BiasGelu(_) => _mm512_add_ps(bias[h], p),
                    Epilogue::AccumulateBias(_) => _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), bias[h]), p),
                };
                _mm512_mask_storeu_ps(at, mask, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widen(h: u32) -> f64 {
        f64::from(f32::from_bits(h << 16))
    }

    /// The product of the bf16-rounded operands in f64: what the kernel computes up to f32
    /// accumulation.
    fn reference(m: usize, k: usize, n: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| widen(bf16(a[i * k + p])) * widen(bf16(b[p * n + j]))).sum();
            }
        }
        out
    }

    /// Seeded values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f32> {
        (0..len as u64)
            .map(|i| (tgrag_schemas::seed::mix(seed.wrapping_mul(tgrag_schemas::seed::GAMMA) ^ i) >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 numbers (1 and 1 + 2^-7): even is 1.
        assert_eq!(bf16(1.0 + 2f32.powi(-8)), bf16(1.0));
        assert_eq!(bf16(1.0 + 3.0 * 2f32.powi(-8)), bf16(1.0 + 2f32.powi(-6)));
        assert_eq!(widen(bf16(-2.5)), -2.5);
        assert_eq!(pair(1.0, -2.0), 0x3f80 | (0xc000 << 16));
    }

    #[test]
    fn products_match_the_rounded_operands_in_f64_for_any_shape() {
        if !available() {
            eprintln!("products_match_the_rounded_operands_in_f64_for_any_shape: no AVX512-BF16 on this CPU, not checked");
            return;
        }
        // Odd inner sizes, column counts off the panel width, row counts off the block height,
        // strides wider than the operands, and both write modes.
        for (m, k, n) in [(1, 1, 1), (13, 7, 33), (25, 384, 64), (40, 31, 100), (3, 1536, 40)] {
            let (lda, ldd) = (k + 3, n + 5);
            let a = values(m * k, 1 + m as u64);
            let b = values(k * n, 2 + n as u64);
            let mut lhs = vec![9.0f32; (m - 1) * lda + k];
            for i in 0..m {
                lhs[i * lda..i * lda + k].copy_from_slice(&a[i * k..(i + 1) * k]);
            }
            let packed = PackedB::new(&b, k, n).expect("pack");
            let want = reference(m, k, n, &a, &b);
            for accumulate in [false, true] {
                let mut dst = vec![0.5f32; (m - 1) * ldd + n + 2];
                matmul(m, &mut dst, ldd, &lhs, lda, &packed, accumulate).expect("matmul");
                for i in 0..m {
                    for j in 0..n {
                        let w = want[i * n + j] + if accumulate { 0.5 } else { 0.0 };
                        let got = f64::from(dst[i * ldd + j]);
                        // f32 accumulation of k products of magnitude ≤ 1.
                        assert!((got - w).abs() <= 1e-6 * (k as f64 + 1.0), "({m},{k},{n}) [{i},{j}] {got} vs {w}");
                    }
                    // Between rows, the padding of the stride is untouched.
                    for j in n..ldd.min(dst.len() - i * ldd) {
                        assert_eq!(dst[i * ldd + j], 0.5, "({m},{k},{n}) padding [{i},{j}]");
                    }
                }
            }
        }
    }

    /// The scalar path the vectorised one replaced: pairs rounded one by one, each block's
    /// results through a buffer, written back element by element.
    fn plain(m: usize, dst: &mut [f32], ldd: usize, lhs: &[f32], lda: usize, b: &PackedB, accumulate: bool) {
        let (k, n, pk) = (b.k, b.n, b.pk);
        let mut a = vec![0u32; m.div_ceil(MR) * MR * pk];
        for (r, row) in a.chunks_exact_mut(pk).take(m).enumerate() {
            let x = &lhs[r * lda..r * lda + k];
            for (p, v) in row.iter_mut().enumerate() {
                *v = pair(x[2 * p], if 2 * p + 1 < k { x[2 * p + 1] } else { 0.0 });
            }
        }
        let mut c = vec![0f32; MR * NR];
        for q in 0..b.panels {
            let panel = &b.data[q * pk * NR..(q + 1) * pk * NR];
            let cols = (n - q * NR).min(NR);
            for mb in 0..m.div_ceil(MR) {
                block(
                    &a[mb * MR * pk..(mb + 1) * MR * pk],
                    panel,
                    pk,
                    Out { dst: &mut c, ldd: NR, rows: MR, cols: NR, epilogue: Epilogue::Store },
                );
                for i in 0..(m - mb * MR).min(MR) {
                    let d = &mut dst[(mb * MR + i) * ldd + q * NR..(mb * MR + i) * ldd + q * NR + cols];
                    for (v, p) in d.iter_mut().zip(&c[i * NR..i * NR + cols]) {
                        if accumulate {
                            *v += p;
                        } else {
                            *v = *p;
                        }
                    }
                }
            }
        }
    }

    /// The vectorised packing (sixteen lanes, then the scalar tail) and the masked write-back in
    /// the kernel give the scalar path's results bit for bit: inner sizes under, at and off the
    /// sixteen lanes, odd ones, values at rounding halfway points and of every magnitude.
    #[test]
    fn the_vectorised_packing_and_write_back_are_the_scalar_path_bit_for_bit() {
        if !available() {
            eprintln!("the_vectorised_packing_and_write_back_are_the_scalar_path_bit_for_bit: no AVX512-BF16 on this CPU, not checked");
            return;
        }
        let halfway = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), -(1.0 + 2f32.powi(-8)), 3.0e38, -3.0e38, 1.0e-30, 0.0, -0.0];
        for k in [1, 2, 15, 16, 17, 31, 32, 33, 48, 383, 384] {
            let x: Vec<f32> = values(k, 7 + k as u64)
                .iter()
                .enumerate()
                .map(|(i, v)| if i % 5 == 0 { halfway[i % halfway.len()] } else { v * 1e3 })
                .collect();
            let mut got = vec![0u32; k.div_ceil(2)];
            pack_row(&x, &mut got);
            let want: Vec<u32> = (0..k.div_ceil(2)).map(|p| pair(x[2 * p], if 2 * p + 1 < k { x[2 * p + 1] } else { 0.0 })).collect();
            assert_eq!(got, want, "k = {k}");
        }
        // Last panels of 1, 4, 6, 16, 17, 18, 31 and 32 columns: both halves of the mask.
        for (m, k, n) in [
            (1, 1, 1),
            (13, 17, 33),
            (25, 384, 64),
            (40, 31, 100),
            (7, 16, 32),
            (12, 48, 31),
            (30, 385, 70),
            (5, 20, 16),
            (6, 33, 49),
            (9, 18, 50),
        ] {
            let (lda, ldd) = (k + 3, n + 5);
            let lhs = values((m - 1) * lda + k, 3 + k as u64);
            let packed = PackedB::new(&values(k * n, 4 + n as u64), k, n).expect("pack");
            for accumulate in [false, true] {
                let start = values((m - 1) * ldd + n + 2, 5 + m as u64);
                let (mut got, mut want) = (start.clone(), start);
                matmul(m, &mut got, ldd, &lhs, lda, &packed, accumulate).expect("matmul");
                plain(m, &mut want, ldd, &lhs, lda, &packed, accumulate);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "({m},{k},{n}) accumulate {accumulate}");
            }
        }
    }

    /// Each epilogue gives, bit for bit, what its separate passes give: the bias written into
    /// every row (or added to the residual) element by element, the plain accumulating product,
    /// then GELU element by element. Last panels of 1 to 32 columns, rows off the block height.
    #[test]
    fn epilogues_equal_their_separate_passes_bit_for_bit() {
        if !available() {
            eprintln!("epilogues_equal_their_separate_passes_bit_for_bit: no AVX512-BF16 on this CPU, not checked");
            return;
        }
        let gelu = crate::ops::gelu;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (m, k, n) in [(1, 1, 1), (13, 17, 33), (25, 384, 64), (40, 31, 100), (12, 48, 31), (30, 385, 70), (5, 20, 16), (9, 18, 50)] {
            let (lda, ldd) = (k + 3, n + 5);
            let lhs = values((m - 1) * lda + k, 3 + k as u64);
            let packed = PackedB::new(&values(k * n, 4 + n as u64), k, n).expect("pack");
            // Magnitudes where GELU is neither 0 nor the identity.
            let bias: Vec<f32> = values(n, 6 + n as u64).iter().map(|v| 3.0 * v).collect();
            let start = values((m - 1) * ldd + n + 2, 5 + m as u64);
            let rows = |v: &mut [f32], f: &dyn Fn(&mut f32, f32)| {
                for i in 0..m {
                    v[i * ldd..i * ldd + n].iter_mut().zip(&bias).for_each(|(x, &b)| f(x, b));
                }
            };
            type Separate<'a> = &'a dyn Fn(&mut Vec<f32>);
            let cases: [(Epilogue<'_>, Separate<'_>); 5] = [
                (Epilogue::Store, &|w| plain(m, w, ldd, &lhs, lda, &packed, false)),
                (Epilogue::Accumulate, &|w| plain(m, w, ldd, &lhs, lda, &packed, true)),
                (Epilogue::Bias(&bias), &|w| {
                    rows(w, &|x, b| *x = b);
                    plain(m, w, ldd, &lhs, lda, &packed, true);
                }),
                (Epilogue::BiasGelu(&bias), &|w| {
                    rows(w, &|x, b| *x = b);
                    plain(m, w, ldd, &lhs, lda, &packed, true);
                    rows(w, &|x, _| *x = gelu(*x));
                }),
                (Epilogue::AccumulateBias(&bias), &|w| {
                    rows(w, &|x, b| *x += b);
                    plain(m, w, ldd, &lhs, lda, &packed, true);
                }),
            ];
            for (e, separate) in cases {
                let (mut got, mut want) = (start.clone(), start.clone());
                matmul_with(m, &mut got, ldd, &lhs, lda, &packed, e).expect("matmul");
                separate(&mut want);
                assert_eq!(bits(&got), bits(&want), "({m},{k},{n}) {e:?}");
            }
            assert!(matmul_with(m, &mut start.clone(), ldd, &lhs, lda, &packed, Epilogue::Bias(&bias[..n - 1])).is_err());
        }
    }

    #[test]
    fn shapes_that_do_not_fit_are_internal_errors() {
        assert!(PackedB::new(&[1.0; 5], 2, 3).is_err());
        if !available() {
            return;
        }
        let b = PackedB::new(&[1.0; 6], 2, 3).expect("pack");
        let mut dst = vec![0f32; 3];
        assert!(matmul(2, &mut dst, 3, &[1.0; 4], 2, &b, false).is_err());
    }
}
