//! Matrix products on Intel AMX tiles in split bf16 ("bf16×3"), for the CPU engine.
//!
//! An f32 x is split into two bf16 numbers, hi = bf16(x) and lo = bf16(x − hi) (round to nearest
//! even), which together carry 16 bits of its 24-bit significand. The product of two matrices is
//! then Ah·Bh + Ah·Bl + Al·Bh (the Al·Bl term is below f32 rounding), all three on the AMX-BF16
//! tile unit with f32 accumulation, written as one bf16 product over a three times longer inner
//! dimension: [Ah | Ah | Al] · [Bh ; Bl ; Bh]. Against the plain f32 product the result differs in
//! about the 6th significant digit (MiniLM embeddings: cosine ≥ 0.999999 to sentence-transformers,
//! `tests.rs`); a single bf16 product would lose about three digits.
//!
//! The weight side is split and laid out once, at load ([`PackedB`]): 16×16 pair tiles in the
//! VNNI order the tile unit reads, each tile contiguous (1 KiB). The activation side is split per
//! call into a row-major bf16 buffer. The kernel keeps a 32×32 block of C in four tile registers,
//! streams two A tiles and two B tiles per 32-wide step of the inner dimension, and is parallel over
//! 32-row blocks (rayon); every output element is accumulated by one thread in a fixed order, so
//! results do not depend on the number of threads.
//!
//! A transformer's feed-forward pair can skip the f32 intermediate: [`matmul_gelu_packed`] writes
//! GELU(x·W₁ + b₁) split straight into the tiles of a [`PackedA`], which [`matmul_packed_with`]
//! reads as its lhs (the same bits as storing, then splitting).
//!
//! [`available`] checks the CPU (CPUID), the OS (XCR0 tile state) and asks Linux for the tile-data
//! permission (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); anywhere else the engine uses f32 `gemm`.

use rayon::prelude::*;

use crate::error::{ModelError, Result};

/// Rows and columns of one tile of C; the inner step of one bf16 tile is 32 (16 pairs).
const TILE: usize = 16;
const STEP: usize = 32;
/// u16 elements of one packed B tile (16 pair-rows × 32 bf16).
const TILE_U16: usize = TILE * STEP;

/// The 64-byte aligned window of `len` elements inside `v` (grown by 32 to leave room): a tile row
/// that straddles two cache lines costs two, so every tile starts on a line.
fn aligned(v: &mut Vec<u16>, len: usize) -> (usize, &mut [u16]) {
    if v.len() < len + 32 {
        v.resize(len + 32, 0);
    }
    let off = (64 - v.as_ptr() as usize % 64) % 64 / 2;
    (off, &mut v[off..off + len])
}

/// bf16 by round to nearest even (inputs are finite: activations and weights).
#[inline(always)]
fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

#[inline(always)]
fn widen(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// (hi, lo) with hi + lo ≈ x to 16 significant bits.
#[inline(always)]
fn split(x: f32) -> (u16, u16) {
    let h = bf16(x);
    (h, bf16(x - widen(h)))
}

/// Whether this process may use AMX-BF16 (checked once).
/// Never below `TGRAG_SIMD=v4` ([`crate::simd`]): a capped level runs f32 products.
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    crate::simd::level() >= crate::simd::Level::V4 && *OK.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[allow(unsafe_code)]
fn detect() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    if __cpuid(0).eax < 7 || __cpuid(1).ecx & (1 << 27) == 0 {
        return false; // no leaf 7, or no OSXSAVE (so no XGETBV)
    }
    let edx = __cpuid_count(7, 0).edx;
    if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
        return false; // no AMX-BF16 or no AMX-TILE
    }
    let xcr0: u32;
    // SAFETY: XGETBV with ECX = 0 is valid when CPUID reports OSXSAVE (checked above); it only
    // writes EAX and EDX.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") xcr0, out("edx") _, options(nomem, nostack, preserves_flags));
    }
    if xcr0 & (0b11 << 17) != 0b11 << 17 {
        return false; // the OS has not enabled XTILECFG and XTILEDATA
    }
    let ret: i64;
    // SAFETY: the Linux system call arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18)
    // takes two integers and touches no user memory; `syscall` clobbers RCX and R11.
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") 158i64 => ret, in("rdi") 0x1023i64, in("rsi") 18i64,
            lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// How many bf16 products stand for one f32 product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Terms {
    /// Split bf16, Ah·Bh + Ah·Bl + Al·Bh: about f32's accuracy (6 significant digits).
    Split,
    /// One bf16 product, Ah·Bh, with f32 accumulation: a third of the tile work, about three
    /// significant digits per product (the precision of AVX512-BF16's `vdpbf16ps`).
    #[default]
    Single,
}

impl Terms {
    /// Segments of the inner dimension.
    fn count(self) -> usize {
        match self {
            Terms::Split => 3,
            Terms::Single => 1,
        }
    }
}

/// A `k × n` right-hand side (row-major f32), split (or rounded) and packed into pair tiles.
pub struct PackedB {
    k: usize,
    n: usize,
    terms: Terms,
    /// Length of each segment of the inner dimension (k rounded up to 32).
    kp: usize,
    /// Tiles along the inner dimension (segments·kp / 32) and along n (n rounded up to 32, / 16).
    kt: usize,
    nt: usize,
    /// The tiles are `store[off..off + len]`, 64-byte aligned.
    store: Vec<u16>,
    off: usize,
    len: usize,
}

impl PackedB {
    /// Split bf16 ([`Terms::Split`]).
    pub fn new(w: &[f32], k: usize, n: usize) -> Result<Self> {
        Self::with_terms(w, k, n, Terms::Split)
    }

    /// `w` packed for products of `terms`.
    pub fn with_terms(w: &[f32], k: usize, n: usize, terms: Terms) -> Result<Self> {
        if w.len() != k * n || k == 0 || n == 0 {
            return Err(ModelError::Internal(format!("amx: {} values for a {k}×{n} matrix", w.len())));
        }
        let kp = k.div_ceil(STEP) * STEP;
        let kt = terms.count() * kp / STEP;
        let nt = n.div_ceil(2 * TILE) * 2;
        let mut store = Vec::new();
        let (off, data) = aligned(&mut store, nt * kt * TILE_U16);
        // One 32-column block of tiles per task (the blocks are contiguous and independent): the
        // language model's host engine packs its weights after every step.
        data.par_chunks_mut(2 * kt * TILE_U16).enumerate().for_each(|(jb, block)| {
            // Row pairs (2p, 2p + 1) of 16 columns: one contiguous run of 32 bf16 in a tile, the
            // same run in each segment: [Bh ; Bl ; Bh] (split) or [Bh] (single).
            for p in 0..kp / 2 {
                let (r0, r1) = (2 * p, 2 * p + 1);
                for half in 0..2 {
                    let c0 = jb * 2 * TILE + half * TILE;
                    let mut hi = [0u16; STEP];
                    let mut lo = [0u16; STEP];
                    for c in 0..TILE.min(n.saturating_sub(c0)) {
                        for (e, r) in [(0, r0), (1, r1)] {
                            if r < k {
                                (hi[2 * c + e], lo[2 * c + e]) = split(w[r * n + c0 + c]);
                            }
                        }
                    }
                    let segments: &[(usize, &[u16; STEP])] = match terms {
                        Terms::Split => &[(0, &hi), (1, &lo), (2, &hi)],
                        Terms::Single => &[(0, &hi)],
                    };
                    for &(seg, run) in segments {
                        let row = seg * kp + r0;
                        let at = ((row / STEP) * 2 + half) * TILE_U16 + ((row % STEP) / 2) * STEP;
                        block[at..at + STEP].copy_from_slice(run);
                    }
                }
            }
        });
        let len = nt * kt * TILE_U16;
        Ok(PackedB { k, n, terms, kp, kt, nt, store, off, len })
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn terms(&self) -> Terms {
        self.terms
    }

    fn data(&self) -> &[u16] {
        &self.store[self.off..self.off + self.len]
    }
}

/// Bytes of split lhs one task keeps (in a buffer of its thread, meant to stay in L2): the task
/// runs every 32-column block of `b` over all its 32-row blocks, so each B block is read from L3
/// once per task and from L2 for the task's other row blocks.
const TASK_BYTES: usize = 1 << 20;

thread_local! {
    static SPLIT: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Splits `rows` rows of `src` (row stride `lda`, `k` used) into `out`, the tiles the kernel
/// reads: for each 32-row block and each 32-wide step s of the inner dimension [hi | hi | lo]
/// (three segments of `kp`; [hi] alone for single products), the two 16×32 tiles (rows 0–15,
/// rows 16–31) one after the other, 2 KiB per step, steps in order. Zero beyond `k` and in the
/// rows from `rows` to the end.
struct SplitRows<'a> {
    src: &'a [f32],
    lda: usize,
    k: usize,
    kp: usize,
    terms: Terms,
    rows: usize,
    out: &'a mut [u16],
}

impl pulp::WithSimd for SplitRows<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let SplitRows { src, lda, k, kp, terms, rows, out } = self;
        let seg = kp / STEP;
        for (mb, block) in out.chunks_exact_mut(block_len(terms, kp)).enumerate() {
            for r in 0..2 * TILE {
                let row = mb * 2 * TILE + r;
                for q in 0..seg {
                    let c0 = q * STEP;
                    let mut pad = [0f32; STEP];
                    let x = if row < rows && c0 < k {
                        let x = &src[row * lda + c0..][..(k - c0).min(STEP)];
                        // A whole step is read in place: fixed length, whole vectors.
                        match <&[f32; STEP]>::try_from(x) {
                            Ok(x) => x,
                            Err(_) => {
                                pad[..x.len()].copy_from_slice(x);
                                &pad
                            }
                        }
                    } else {
                        &pad
                    };
                    put_row(block, r, q, seg, terms, x);
                }
            }
        }
    }
}

/// u16 elements of one 32-row block of a packed lhs over an inner dimension `kp` (a multiple of 32).
fn block_len(terms: Terms, kp: usize) -> usize {
    2 * TILE * terms.count() * kp
}

/// Row `r` (0–31) of a 32-row block of a packed lhs (`block`, [`SplitRows`]' layout) at inner step
/// `q` of the `seg` steps of a segment: `x` rounded to bf16 ([hi]) or split ([hi | hi | lo]).
#[inline(always)]
fn put_row(block: &mut [u16], r: usize, q: usize, seg: usize, terms: Terms, x: &[f32; STEP]) {
    let at = |s: usize| (s * 2 + r / TILE) * TILE_U16 + (r % TILE) * STEP;
    let mut h = [0u16; STEP];
    match terms {
        Terms::Single => (0..STEP).for_each(|i| h[i] = bf16(x[i])),
        Terms::Split => {
            let mut l = [0u16; STEP];
            (0..STEP).for_each(|i| (h[i], l[i]) = split(x[i]));
            block[at(seg + q)..][..STEP].copy_from_slice(&h);
            block[at(2 * seg + q)..][..STEP].copy_from_slice(&l);
        }
    }
    block[at(q)..][..STEP].copy_from_slice(&h);
}

/// What a product does with `dst`, applied to each 32×32 block while it is in registers and cache
/// (no separate pass over `dst`).
#[derive(Clone, Copy, Debug)]
pub enum Epilogue<'a> {
    /// `dst = P`.
    Store,
    /// `dst = dst + P`.
    Accumulate,
    /// `dst = P + bias` (bias: one value per column).
    Bias(&'a [f32]),
    /// `dst = GELU(P + bias)` (exact-erf GELU, as the engine's elementwise pass).
    BiasGelu(&'a [f32]),
    /// `dst = (dst + bias) + P`: a residual, its bias, then the product, in that order.
    AccumulateBias(&'a [f32]),
}

impl<'a> Epilogue<'a> {
    /// The bias the epilogue adds, if any.
    pub(super) fn bias(self) -> Option<&'a [f32]> {
        match self {
            Epilogue::Bias(b) | Epilogue::BiasGelu(b) | Epilogue::AccumulateBias(b) => Some(b),
            Epilogue::Store | Epilogue::Accumulate => None,
        }
    }

    /// Whether the epilogue reads what `dst` holds (a residual).
    pub(super) fn reads_dst(self) -> bool {
        matches!(self, Epilogue::Accumulate | Epilogue::AccumulateBias(_))
    }

    /// The same epilogue with bias `b` (unchanged when it adds none).
    pub(super) fn with_bias(self, b: &[f32]) -> Epilogue<'_> {
        match self {
            Epilogue::Bias(_) => Epilogue::Bias(b),
            Epilogue::BiasGelu(_) => Epilogue::BiasGelu(b),
            Epilogue::AccumulateBias(_) => Epilogue::AccumulateBias(b),
            Epilogue::Store => Epilogue::Store,
            Epilogue::Accumulate => Epilogue::Accumulate,
        }
    }
}

/// Writes the 32×32 block `c` (four tiles) into `rows` × `cols` of `out` (row stride `ldd`) by
/// `epilogue` (`bias`: the block's columns of it): compiled for the widest SIMD the CPU has.
struct StoreBlock<'a> {
    c: &'a [f32; 4 * TILE * TILE],
    out: &'a mut [f32],
    ldd: usize,
    rows: usize,
    cols: usize,
    epilogue: Epilogue<'a>,
}

/// One tile row `c` into `d` (`d.len() ≤ 16`) by `e`, whose bias is `b` (`b.len() ≥ d.len()`).
#[inline(always)]
fn store_row(d: &mut [f32], c: &[f32], e: Epilogue<'_>, b: &[f32]) {
    let gelu = crate::ops::gelu;
    match e {
        Epilogue::Store => d.copy_from_slice(&c[..d.len()]),
        Epilogue::Accumulate => d.iter_mut().zip(c).for_each(|(v, p)| *v += p),
        Epilogue::Bias(_) => d.iter_mut().zip(c).zip(b).for_each(|((v, p), b)| *v = b + p),
        Epilogue::BiasGelu(_) => d.iter_mut().zip(c).zip(b).for_each(|((v, p), b)| *v = gelu(b + p)),
        Epilogue::AccumulateBias(_) => d.iter_mut().zip(c).zip(b).for_each(|((v, p), b)| *v = (*v + b) + p),
    }
}

impl pulp::WithSimd for StoreBlock<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let StoreBlock { c, out, ldd, rows, cols, epilogue } = self;
        let bias = epilogue.bias().unwrap_or(&[0f32; 2 * TILE]);
        for rr in 0..rows {
            store_block_row(simd, &mut out[rr * ldd..rr * ldd + cols], tile_row(c, rr), epilogue, bias);
        }
    }
}

/// Row `r` (0–31) of a 32×32 block held as four 16×16 tiles: its columns 0–15 and 16–31 (tiles
/// 0/1 hold rows 0–15, tiles 2/3 rows 16–31).
#[inline(always)]
fn tile_row(c: &[f32; 4 * TILE * TILE], r: usize) -> [&[f32]; 2] {
    let t0 = if r < TILE { 0 } else { 2 };
    [t0, t0 + 1].map(|t| &c[t * TILE * TILE + (r % TILE) * TILE..][..TILE])
}

/// `d` (one row of a block, at most 32 columns) ← `epilogue` of the block's row `c` (`bias`: the
/// block's 32 columns of it): whole 16-wide halves in vectors, a shorter rest element by element.
#[inline(always)]
fn store_block_row<S: pulp::Simd>(simd: S, d: &mut [f32], c: [&[f32]; 2], epilogue: Epilogue<'_>, bias: &[f32]) {
    let cols = d.len();
    let (d0, d1) = d.split_at_mut(cols.min(TILE));
    for (d, c, b) in [(d0, c[0], &bias[..TILE]), (d1, c[1], &bias[TILE..2 * TILE])] {
        if d.len() == TILE {
            let (dv, _) = S::as_mut_simd_f32s(d);
            let (cv, _) = S::as_simd_f32s(c);
            let (bv, _) = S::as_simd_f32s(b);
            // Only the accumulating epilogues read `dst`: a load of a line not in cache
            // stalls the store (the store alone waits in the store buffer).
            match epilogue {
                Epilogue::Accumulate | Epilogue::AccumulateBias(_) => {
                    for ((d, &c), &b) in dv.iter_mut().zip(cv).zip(bv) {
                        *d = store_vec(simd, *d, c, b, epilogue);
                    }
                }
                Epilogue::Store | Epilogue::Bias(_) | Epilogue::BiasGelu(_) => {
                    let zero = simd.splat_f32s(0.0);
                    for ((d, &c), &b) in dv.iter_mut().zip(cv).zip(bv) {
                        *d = store_vec(simd, zero, c, b, epilogue);
                    }
                }
            }
        } else {
            store_row(d, c, epilogue, b);
        }
    }
}

/// [`store_row`] of one vector.
#[inline(always)]
fn store_vec<S: pulp::Simd>(simd: S, d: S::f32s, c: S::f32s, b: S::f32s, e: Epilogue<'_>) -> S::f32s {
    match e {
        Epilogue::Store => c,
        Epilogue::Accumulate => simd.add_f32s(d, c),
        Epilogue::Bias(_) => simd.add_f32s(b, c),
        Epilogue::BiasGelu(_) => crate::ops::gelu_vec(simd, simd.add_f32s(b, c)),
        Epilogue::AccumulateBias(_) => simd.add_f32s(simd.add_f32s(d, b), c),
    }
}

/// `dst (m×n, row stride ldd) (+)= lhs (m×k, row stride lda) · b`; `accumulate` keeps what `dst`
/// holds (bias, residual) and adds the product.
pub fn matmul(m: usize, dst: &mut [f32], ldd: usize, lhs: &[f32], lda: usize, b: &PackedB, accumulate: bool) -> Result<()> {
    matmul_with(m, dst, ldd, lhs, lda, b, if accumulate { Epilogue::Accumulate } else { Epilogue::Store })
}

/// `dst (m×n, row stride ldd) ← epilogue(lhs (m×k, row stride lda) · b)` ([`Epilogue`]).
pub fn matmul_with(m: usize, dst: &mut [f32], ldd: usize, lhs: &[f32], lda: usize, b: &PackedB, epilogue: Epilogue<'_>) -> Result<()> {
    if m == 0 {
        return Ok(());
    }
    ready()?;
    super::check_operands("amx", (m, b.k, b.n), (lhs.len(), lda), (dst.len(), ldd))?;
    run(m, Lhs::Rows(lhs, lda), b, Out::F32 { dst, ldd, epilogue })
}

/// `dst ← epilogue(a · b)` for an lhs already in the kernel's layout ([`matmul_gelu_packed`]).
pub fn matmul_packed_with(dst: &mut [f32], ldd: usize, a: &PackedA, b: &PackedB, epilogue: Epilogue<'_>) -> Result<()> {
    let m = a.m;
    if m == 0 {
        return Ok(());
    }
    ready()?;
    if a.k != b.k || a.kp != b.kp || a.terms != b.terms {
        return Err(ModelError::Internal(format!(
            "amx: a packed lhs of width {} ({:?}) for a {}×{} rhs ({:?})",
            a.k, a.terms, b.k, b.n, b.terms
        )));
    }
    // (The lhs is `a`, sized when it was packed: only the result is checked.)
    super::check_operands("amx", (m, b.k, b.n), (m * b.k, b.k), (dst.len(), ldd))?;
    run(m, Lhs::Packed(a.data()), b, Out::F32 { dst, ldd, epilogue })
}

/// `out ← GELU(lhs · b + bias)`, split (or rounded) to bf16 straight into the layout a product of
/// `terms` reads as its lhs: the transformer's feed-forward block hands its intermediate to the
/// second product without an f32 copy in memory or a separate splitting pass. The values are those
/// [`matmul_with`] with [`Epilogue::BiasGelu`] would store, split as [`matmul_with`] splits them,
/// so the second product's result is the same to the bit.
pub fn matmul_gelu_packed(m: usize, lhs: &[f32], lda: usize, b: &PackedB, bias: &[f32], terms: Terms, out: &mut PackedA) -> Result<()> {
    out.reset(m, b.n, terms);
    if m == 0 {
        return Ok(());
    }
    ready()?;
    // (The result is `out`, sized here: only the lhs is checked.)
    super::check_operands("amx", (m, b.k, b.n), (lhs.len(), lda), (m * b.n, b.n))?;
    run(m, Lhs::Rows(lhs, lda), b, Out::Packed { out, bias })
}

fn ready() -> Result<()> {
    if available() { Ok(()) } else { Err(ModelError::Internal("amx matmul called on a CPU or OS without AMX-BF16 tiles".into())) }
}

/// An `m × k` lhs split (or rounded) into the tiles the kernel reads, as `SplitRows` lays them
/// out for every 32-row block: written by [`matmul_gelu_packed`], read by [`matmul_packed_with`].
#[derive(Default)]
pub struct PackedA {
    m: usize,
    k: usize,
    kp: usize,
    terms: Terms,
    store: Vec<u16>,
    off: usize,
    len: usize,
}

impl PackedA {
    /// An `m × k` matrix for products of `terms`, reusing the buffer.
    fn reset(&mut self, m: usize, k: usize, terms: Terms) {
        let kp = k.div_ceil(STEP) * STEP;
        let len = m.div_ceil(2 * TILE) * block_len(terms, kp);
        let (off, _) = aligned(&mut self.store, len);
        (self.m, self.k, self.kp, self.terms, self.off, self.len) = (m, k, kp, terms, off, len);
    }

    fn data(&self) -> &[u16] {
        &self.store[self.off..self.off + self.len]
    }
}

/// Where a product's lhs comes from.
enum Lhs<'a> {
    /// Row-major f32 (row stride), split per task.
    Rows(&'a [f32], usize),
    /// Already split, for every 32-row block.
    Packed(&'a [u16]),
}

/// Where a product's result goes.
enum Out<'a, 'e> {
    F32 { dst: &'a mut [f32], ldd: usize, epilogue: Epilogue<'e> },
    Packed { out: &'a mut PackedA, bias: &'e [f32] },
}

/// The product over tasks of whole 32-row blocks (parallel): each task splits its rows of the lhs
/// (unless packed), then runs every 32-column block of `b` over its row blocks and hands each 32×32
/// block of the result to the output.
fn run(m: usize, lhs: Lhs<'_>, b: &PackedB, out: Out<'_, '_>) -> Result<()> {
    let (k, n) = (b.k, b.n);
    // The bias, padded with zeros to whole 32-column blocks (the store reads 32 per block).
    let bias = match &out {
        Out::F32 { epilogue, .. } => epilogue.bias(),
        Out::Packed { bias, .. } => Some(*bias),
    };
    let padded: Option<Vec<f32>> = match bias {
        Some(v) if v.len() != n => {
            return Err(ModelError::Internal(format!("amx: a bias of {} values for {n} columns", v.len())));
        }
        Some(v) => {
            let mut p = v.to_vec();
            p.resize(b.nt * TILE, 0.0);
            Some(p)
        }
        None => None,
    };
    let kk = b.terms.count() * b.kp;
    // As few tasks as the L2 budget allows, a multiple of the thread count (balanced).
    let mblocks = m.div_ceil(2 * TILE);
    let most = (TASK_BYTES / (2 * TILE * kk * 2)).max(1);
    let threads = rayon::current_num_threads().max(1);
    let tasks = (mblocks.div_ceil(most).div_ceil(threads) * threads).min(mblocks);
    let task_rows = mblocks.div_ceil(tasks) * 2 * TILE;
    // One task: its first row, its chunk of the result, its rows of a packed lhs.
    let task = |ti: usize, mut sink: Sink<'_, '_>| -> Result<()> {
        let r0 = ti * task_rows;
        let rows = (m - r0).min(task_rows);
        let blocks = rows.div_ceil(2 * TILE);
        let products = |a: &[u16], sink: &mut Sink<'_, '_>| -> Result<()> {
            let _tiles = Tiles::configure();
            let mut c = [0f32; 4 * TILE * TILE];
            for nb in 0..b.nt / 2 {
                let bp = &b.data()[2 * nb * b.kt * TILE_U16..2 * (nb + 1) * b.kt * TILE_U16];
                let cols = (n - nb * 2 * TILE).min(2 * TILE);
                let bias = padded.as_ref().map(|p| &p[nb * 2 * TILE..]);
                for mb in 0..blocks {
                    block(&a[mb * 2 * TILE * kk..(mb + 1) * 2 * TILE * kk], bp, b.kt, &mut c)?;
                    let block_rows = rows.min(mb * 2 * TILE + 2 * TILE) - mb * 2 * TILE;
                    sink.put(&c, mb, nb, block_rows, cols, bias);
                }
            }
            Ok(())
        };
        match lhs {
            Lhs::Packed(a) => products(&a[r0 * kk..(r0 + blocks * 2 * TILE) * kk], &mut sink),
            Lhs::Rows(src, lda) => SPLIT.with(|cell| -> Result<()> {
                let mut buf = cell.borrow_mut();
                let (_, a) = aligned(&mut buf, blocks * 2 * TILE * kk);
                crate::simd::arch().dispatch(SplitRows { src: &src[r0 * lda..], lda, k, kp: b.kp, terms: b.terms, rows, out: a });
                products(a, &mut sink)
            }),
        }
    };
    match out {
        Out::F32 { dst, ldd, epilogue } => dst[..(m - 1) * ldd + n]
            .par_chunks_mut(task_rows * ldd)
            .enumerate()
            .try_for_each(|(ti, out)| task(ti, Sink::F32 { out, ldd, epilogue })),
        Out::Packed { out, .. } => {
            let (terms, kp, len) = (out.terms, out.kp, out.len);
            out.store[out.off..out.off + len]
                .par_chunks_mut(task_rows / (2 * TILE) * block_len(terms, kp))
                .enumerate()
                .try_for_each(|(ti, out)| task(ti, Sink::Packed { out, terms, kp }))
        }
    }
}

/// A task's share of a product's output.
enum Sink<'a, 'e> {
    F32 {
        out: &'a mut [f32],
        ldd: usize,
        epilogue: Epilogue<'e>,
    },
    /// GELU, then split into the lhs layout of a product of `terms` over an inner dimension `kp`.
    Packed {
        out: &'a mut [u16],
        terms: Terms,
        kp: usize,
    },
}

impl Sink<'_, '_> {
    /// Block (`mb`, `nb`) of the task (`rows` × `cols` of it real; `bias`: its 32 columns).
    fn put(&mut self, c: &[f32; 4 * TILE * TILE], mb: usize, nb: usize, rows: usize, cols: usize, bias: Option<&[f32]>) {
        match self {
            Sink::F32 { out, ldd, epilogue } => {
                let out = &mut out[mb * 2 * TILE * *ldd + nb * 2 * TILE..];
                let epilogue = bias.map_or(*epilogue, |p| epilogue.with_bias(p));
                crate::simd::arch().dispatch(StoreBlock { c, out, ldd: *ldd, rows, cols, epilogue });
            }
            Sink::Packed { out, terms, kp } => {
                let len = block_len(*terms, *kp);
                let out = &mut out[mb * len..(mb + 1) * len];
                let bias = bias.unwrap_or(&[0f32; 2 * TILE]);
                crate::simd::arch().dispatch(PackGelu { c, out, step: nb, kp: *kp, terms: *terms, rows, cols, bias });
            }
        }
    }
}

/// One 32×32 block of a product, GELU(c + bias), into step `step` of a 32-row block of a packed
/// lhs (`out`: that block, [`SplitRows`]' layout); zero in the rows from `rows` and the columns
/// from `cols`, as [`SplitRows`] pads.
struct PackGelu<'a> {
    c: &'a [f32; 4 * TILE * TILE],
    out: &'a mut [u16],
    step: usize,
    kp: usize,
    terms: Terms,
    rows: usize,
    cols: usize,
    bias: &'a [f32],
}

impl pulp::WithSimd for PackGelu<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let PackGelu { c, out, step, kp, terms, rows, cols, bias } = self;
        for r in 0..2 * TILE {
            // The values `matmul_with` stores with `Epilogue::BiasGelu`, by the same code.
            let mut v = [0f32; STEP];
            if r < rows {
                store_block_row(simd, &mut v[..cols], tile_row(c, r), Epilogue::BiasGelu(bias), bias);
            }
            put_row(out, r, step, kp / STEP, terms, &v);
        }
    }
}

/// The tile configuration of this thread for the kernel's lifetime: eight 16-row × 64-byte tiles
/// (0–3: C, 4–5: A, 6–7: B); released on drop.
struct Tiles;

#[repr(C, align(64))]
struct TileConfig([u8; 64]);

static CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1; // palette 1
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // bytes per row
        c[48 + t] = 16; // rows
        t += 1;
    }
    TileConfig(c)
};

impl Tiles {
    #[allow(unsafe_code)]
    fn configure() -> Tiles {
        // SAFETY: only reached when `available()` (tile state enabled and permitted); LDTILECFG reads
        // the 64 bytes of a valid palette-1 configuration.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("ldtilecfg [{cfg}]", cfg = in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
        }
        Tiles
    }
}

impl Drop for Tiles {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: returns the tile state to its initial configuration; no memory access.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("tilerelease", options(nostack, nomem));
        }
    }
}

/// C (4 tiles: rows 0–15 × cols 0–15, 0–15 × 16–31, 16–31 × 0–15, 16–31 × 16–31) = A · B over
/// `kt` steps; `a` and `b` hold, per step, two tiles (A: the two 16-row halves; B: the two 16-column
/// halves) of 1 KiB each, contiguous, so that both streams are read in order.
#[allow(unsafe_code)]
fn block(a: &[u16], b: &[u16], kt: usize, c: &mut [f32; 4 * TILE * TILE]) -> Result<()> {
    // Every tile load below stays inside these slices (bounds checked, not assumed).
    if kt == 0 || a.len() < 2 * kt * TILE_U16 || b.len() < 2 * kt * TILE_U16 {
        return Err(ModelError::Internal(format!("amx block: {} / {} elements for {kt} steps", a.len(), b.len())));
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the tile configuration is loaded (`Tiles::configure`, after `available()`). Step s
    // reads the 1 KiB tiles at byte offsets 2048·s and 2048·s + 1024 of `a` and of `b` (16 rows of
    // 64 bytes, stride 64), s < kt: inside the slices by the check above. The stores write
    // 4 × 1 KiB into `c` (16 rows of 64 bytes each).
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{a} + {s64}*1]",
            "tileloadd tmm6, [{b} + {s64}*1]",
            "add {a}, 1024",
            "add {b}, 1024",
            "tileloadd tmm5, [{a} + {s64}*1]",
            "tileloadd tmm7, [{b} + {s64}*1]",
            "add {a}, 1024",
            "add {b}, 1024",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c} + {s64}*1], tmm0",
            "add {c}, 1024",
            "tilestored [{c} + {s64}*1], tmm1",
            "add {c}, 1024",
            "tilestored [{c} + {s64}*1], tmm2",
            "add {c}, 1024",
            "tilestored [{c} + {s64}*1], tmm3",
            a = inout(reg) a.as_ptr() => _,
            b = inout(reg) b.as_ptr() => _,
            n = inout(reg) kt => _,
            c = inout(reg) c.as_mut_ptr() => _,
            s64 = in(reg) 64usize,
            options(nostack),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng_fill(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            })
            .collect()
    }

    #[test]
    fn split_is_sixteen_bits_of_the_significand() {
        for x in rng_fill(10_000, 3, 100.0) {
            let (h, l) = split(x);
            let back = widen(h) + widen(l);
            assert!((back - x).abs() <= x.abs() * 2f32.powi(-16), "{x} → {back}");
        }
        assert_eq!(bf16(1.0), 0x3f80);
        // Ties go to even: 1 + 2^-8 lies halfway between two bf16 numbers.
        assert_eq!(bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
    }

    /// Against the f64 product, on shapes with ragged edges (m, n, k not multiples of 32) and with
    /// and without accumulation.
    #[test]
    fn matches_the_f64_product() {
        if !available() {
            eprintln!("skipped: this CPU or OS offers no AMX-BF16 tiles");
            return;
        }
        // (300, 1536, 40): several 32-row blocks per task and several tasks.
        for &(m, k, n) in &[(1, 1, 1), (37, 45, 50), (64, 384, 96), (70, 100, 33), (300, 1536, 40)] {
            let a = rng_fill(m * k, 1 + m as u64, 1.0);
            let w = rng_fill(k * n, 2 + n as u64, 0.5);
            let packed = PackedB::new(&w, k, n).unwrap();
            let ldd = n + 3;
            let init = rng_fill(m * ldd, 5, 1.0);
            for accumulate in [false, true] {
                let mut dst = init.clone();
                matmul(m, &mut dst, ldd, &a, k, &packed, accumulate).unwrap();
                for i in 0..m {
                    for j in 0..ldd {
                        if j >= n {
                            assert_eq!(dst[i * ldd + j], init[i * ldd + j], "padding column touched");
                            continue;
                        }
                        let exact: f64 = (0..k).map(|c| f64::from(a[i * k + c]) * f64::from(w[c * n + j])).sum::<f64>()
                            + if accumulate { f64::from(init[i * ldd + j]) } else { 0.0 };
                        let scale: f64 = (0..k).map(|c| (f64::from(a[i * k + c]) * f64::from(w[c * n + j])).abs()).sum::<f64>() + 1.0;
                        let err = (f64::from(dst[i * ldd + j]) - exact).abs() / scale;
                        // A single bf16 product is off by about 1e-3 of the scale; split bf16 by < 1e-5.
                        assert!(err < 5e-6, "{m}×{k}×{n} ({i},{j}): {} vs {exact}", dst[i * ldd + j]);
                    }
                }
            }
        }
    }

    /// Single products are the exact product of the bf16-rounded operands, up to f32 accumulation
    /// (independent of the split path: the expectation rounds the inputs itself).
    #[test]
    fn single_terms_are_the_product_of_the_rounded_operands() {
        if !available() {
            eprintln!("skipped: this CPU or OS offers no AMX-BF16 tiles");
            return;
        }
        // Rounding itself is checked against hand-computed cases (`split_is_sixteen_bits…`).
        let round = |x: f32| f64::from(widen(bf16(x)));
        for &(m, k, n) in &[(1, 1, 1), (37, 45, 50), (70, 100, 33), (300, 1536, 40)] {
            let a = rng_fill(m * k, 7 + m as u64, 1.0);
            let w = rng_fill(k * n, 8 + n as u64, 0.5);
            let packed = PackedB::with_terms(&w, k, n, Terms::Single).unwrap();
            assert_eq!(packed.terms(), Terms::Single);
            let ldd = n + 1;
            let init = rng_fill(m * ldd, 9, 1.0);
            for accumulate in [false, true] {
                let mut dst = init.clone();
                matmul(m, &mut dst, ldd, &a, k, &packed, accumulate).unwrap();
                let mut worst_unrounded = 0f64;
                for i in 0..m {
                    for j in 0..n {
                        let base = if accumulate { f64::from(init[i * ldd + j]) } else { 0.0 };
                        let rounded: f64 = (0..k).map(|c| round(a[i * k + c]) * round(w[c * n + j])).sum::<f64>() + base;
                        let exact: f64 = (0..k).map(|c| f64::from(a[i * k + c]) * f64::from(w[c * n + j])).sum::<f64>() + base;
                        let scale: f64 = (0..k).map(|c| (f64::from(a[i * k + c]) * f64::from(w[c * n + j])).abs()).sum::<f64>() + 1.0;
                        let got = f64::from(dst[i * ldd + j]);
                        assert!((got - rounded).abs() / scale < 5e-6, "{m}×{k}×{n} ({i},{j}): {got} vs {rounded}");
                        worst_unrounded = worst_unrounded.max((got - exact).abs() / scale);
                    }
                    assert_eq!(dst[i * ldd + n], init[i * ldd + n], "padding column touched");
                }
                // And it is a bf16 product, not a split one: off the exact product by ~1e-3.
                if k >= 45 {
                    assert!(worst_unrounded > 2e-5, "{m}×{k}×{n}: {worst_unrounded}");
                }
            }
        }
    }

    /// Each epilogue is the same arithmetic as its separate passes (bias rows, the accumulating
    /// product, GELU after), bit for bit, on ragged shapes; a bias of the wrong length is refused.
    #[test]
    fn epilogues_equal_their_separate_passes() {
        if !available() {
            eprintln!("skipped: this CPU or OS offers no AMX-BF16 tiles");
            return;
        }
        // The separate pass's GELU (the f32 engine's bias-and-GELU pass applies this function).
        let gelu = crate::ops::gelu;
        for &(m, k, n) in &[(1, 3, 5), (37, 45, 50), (70, 100, 33)] {
            let a = rng_fill(m * k, 11 + m as u64, 1.0);
            let w = rng_fill(k * n, 12 + n as u64, 0.5);
            let bias = rng_fill(n, 13, 2.0);
            let init = rng_fill(m * n, 14, 1.0);
            for terms in [Terms::Split, Terms::Single] {
                let packed = PackedB::with_terms(&w, k, n, terms).unwrap();
                let mut product = vec![0f32; m * n];
                matmul(m, &mut product, n, &a, k, &packed, false).unwrap();
                type Want<'w> = Box<dyn Fn(usize) -> f32 + 'w>;
                let cases: [(Epilogue<'_>, Want<'_>); 5] = [
                    (Epilogue::Store, Box::new(|i| product[i])),
                    (Epilogue::Accumulate, Box::new(|i| init[i] + product[i])),
                    (Epilogue::Bias(&bias), Box::new(|i| bias[i % n] + product[i])),
                    (Epilogue::BiasGelu(&bias), Box::new(|i| gelu(bias[i % n] + product[i]))),
                    (Epilogue::AccumulateBias(&bias), Box::new(|i| (init[i] + bias[i % n]) + product[i])),
                ];
                for (e, want) in cases {
                    let mut dst = init.clone();
                    matmul_with(m, &mut dst, n, &a, k, &packed, e).unwrap();
                    for (i, got) in dst.iter().enumerate() {
                        assert_eq!(got.to_bits(), want(i).to_bits(), "{e:?} {m}×{k}×{n} at {i}: {got} vs {}", want(i));
                    }
                }
                let mut dst = init.clone();
                assert!(matmul_with(m, &mut dst, n, &a, k, &packed, Epilogue::Bias(&bias[..n - 1])).is_err());
            }
        }
    }

    /// The feed-forward pair through a packed intermediate gives the bits of the two products with
    /// the GELU stored in f32 in between: the packed tiles are exactly the split of those values.
    /// Sizes around the 32-row and 32-column blocks (padding rows and columns), both term counts,
    /// and a mismatch refused.
    #[test]
    fn packed_intermediate_equals_the_stored_one() {
        if !available() {
            eprintln!("skipped: this CPU or OS offers no AMX-BF16 tiles");
            return;
        }
        for &(m, k, n, k2) in &[(1, 3, 5, 4), (33, 45, 40, 30), (70, 64, 96, 33), (100, 100, 64, 70)] {
            let a = rng_fill(m * k, 21 + m as u64, 1.0);
            let w1 = rng_fill(k * n, 22 + n as u64, 0.5);
            let w2 = rng_fill(n * k2, 23 + k2 as u64, 0.5);
            let (b1, b2) = (rng_fill(n, 24, 2.0), rng_fill(k2, 25, 1.0));
            let init = rng_fill(m * k2, 26, 1.0);
            for terms in [Terms::Split, Terms::Single] {
                let (p1, p2) = (PackedB::with_terms(&w1, k, n, terms).unwrap(), PackedB::with_terms(&w2, n, k2, terms).unwrap());
                let mut inter = vec![0f32; m * n];
                matmul_with(m, &mut inter, n, &a, k, &p1, Epilogue::BiasGelu(&b1)).unwrap();
                let mut want = init.clone();
                matmul_with(m, &mut want, k2, &inter, n, &p2, Epilogue::AccumulateBias(&b2)).unwrap();
                let mut packed = PackedA::default();
                matmul_gelu_packed(m, &a, k, &p1, &b1, terms, &mut packed).unwrap();
                let mut got = init.clone();
                matmul_packed_with(&mut got, k2, &packed, &p2, Epilogue::AccumulateBias(&b2)).unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{terms:?} {m}×{k}×{n}×{k2} at {i}: {g} vs {w}");
                }
                // The lhs was packed for the other term count, or for another width: refused.
                let other = if terms == Terms::Split { Terms::Single } else { Terms::Split };
                let p2_other = PackedB::with_terms(&w2, n, k2, other).unwrap();
                assert!(matmul_packed_with(&mut got, k2, &packed, &p2_other, Epilogue::Store).is_err());
                let p3 = PackedB::with_terms(&w1, k, n, terms).unwrap();
                assert!(k == n || matmul_packed_with(&mut got, k2, &packed, &p3, Epilogue::Store).is_err());
            }
        }
    }

    #[test]
    fn refuses_short_operands() {
        let packed = PackedB::new(&[1.0; 6], 2, 3).unwrap();
        let mut dst = vec![0f32; 5];
        assert!(matmul(2, &mut dst, 3, &[1.0; 4], 2, &packed, false).is_err());
        assert!(PackedB::new(&[1.0; 5], 2, 3).is_err());
    }
}
