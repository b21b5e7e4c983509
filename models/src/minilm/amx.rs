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
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(detect)
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terms {
    /// Split bf16, Ah·Bh + Ah·Bl + Al·Bh: about f32's accuracy (6 significant digits).
    Split,
    /// One bf16 product, Ah·Bh, with f32 accumulation: a third of the tile work, about three
    /// significant digits per product (the precision of AVX512-BF16's `vdpbf16ps`).
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
        let kt = terms.count() * kp / STEP;
        let seg = kp / STEP;
        let blocks = out.len() / (2 * TILE * terms.count() * kp);
        for r in 0..blocks * 2 * TILE {
            let (mb, half, rr) = (r / (2 * TILE), (r / TILE) % 2, r % TILE);
            let at = |s: usize| ((mb * kt + s) * 2 + half) * TILE_U16 + rr * STEP;
            for q in 0..seg {
                let mut h = [0u16; STEP];
                let mut l = [0u16; STEP];
                let c0 = q * STEP;
                if r < rows && c0 < k {
                    let n = (k - c0).min(STEP);
                    let x = &src[r * lda + c0..r * lda + c0 + n];
                    match (<&[f32; STEP]>::try_from(x), terms) {
                        // A whole step: fixed length, whole vectors (no remainder loop).
                        (Ok(x), Terms::Split) => (0..STEP).for_each(|i| (h[i], l[i]) = split(x[i])),
                        (Ok(x), Terms::Single) => (0..STEP).for_each(|i| h[i] = bf16(x[i])),
                        (Err(_), Terms::Split) => (0..n).for_each(|i| (h[i], l[i]) = split(x[i])),
                        (Err(_), Terms::Single) => (0..n).for_each(|i| h[i] = bf16(x[i])),
                    }
                }
                out[at(q)..at(q) + STEP].copy_from_slice(&h);
                if terms == Terms::Split {
                    out[at(seg + q)..at(seg + q) + STEP].copy_from_slice(&h);
                    out[at(2 * seg + q)..at(2 * seg + q) + STEP].copy_from_slice(&l);
                }
            }
        }
    }
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
    fn bias(self) -> Option<&'a [f32]> {
        match self {
            Epilogue::Bias(b) | Epilogue::BiasGelu(b) | Epilogue::AccumulateBias(b) => Some(b),
            Epilogue::Store | Epilogue::Accumulate => None,
        }
    }

    /// The same epilogue with bias `b` (unchanged when it adds none).
    fn with_bias(self, b: &[f32]) -> Epilogue<'_> {
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
    let gelu = super::fused::gelu;
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
        let (b0, b1) = bias[..2 * TILE].split_at(TILE);
        for rr in 0..rows {
            let d = &mut out[rr * ldd..rr * ldd + cols];
            // Tiles 0/1 hold rows 0–15 (columns 0–15 / 16–31), tiles 2/3 rows 16–31.
            let t0 = if rr < TILE { 0 } else { 2 };
            let (c0, c1) = c[t0 * TILE * TILE..(t0 + 2) * TILE * TILE].split_at(TILE * TILE);
            let (c0, c1) = (&c0[(rr % TILE) * TILE..][..TILE], &c1[(rr % TILE) * TILE..][..TILE]);
            let (d0, d1) = d.split_at_mut(cols.min(TILE));
            for (d, c, b) in [(d0, c0, b0), (d1, c1, b1)] {
                if d.len() == TILE {
                    // A whole tile row: whole vectors.
                    let (dv, _) = S::as_mut_simd_f32s(d);
                    let (cv, _) = S::as_simd_f32s(c);
                    let (bv, _) = S::as_simd_f32s(b);
                    for ((d, &c), &b) in dv.iter_mut().zip(cv).zip(bv) {
                        *d = store_vec(simd, *d, c, b, epilogue);
                    }
                } else {
                    store_row(d, c, epilogue, b);
                }
            }
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
        Epilogue::BiasGelu(_) => super::fused::gelu_vec(simd, simd.add_f32s(b, c)),
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
    let (k, n) = (b.k, b.n);
    if m == 0 {
        return Ok(());
    }
    if !available() {
        return Err(ModelError::Internal("amx matmul called on a CPU or OS without AMX-BF16 tiles".into()));
    }
    super::check_operands("amx", (m, k, n), (lhs.len(), lda), (dst.len(), ldd))?;
    // The bias, padded with zeros to whole 32-column blocks (the store reads 32 per block).
    let padded: Option<Vec<f32>> = match epilogue.bias() {
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
    dst[..(m - 1) * ldd + n].par_chunks_mut(task_rows * ldd).enumerate().try_for_each(|(ti, out)| -> Result<()> {
        let r0 = ti * task_rows;
        let rows = (m - r0).min(task_rows);
        let blocks = rows.div_ceil(2 * TILE);
        SPLIT.with(|cell| -> Result<()> {
            let mut buf = cell.borrow_mut();
            let (_, a) = aligned(&mut buf, blocks * 2 * TILE * kk);
            pulp::Arch::new().dispatch(SplitRows { src: &lhs[r0 * lda..], lda, k, kp: b.kp, terms: b.terms, rows, out: a });
            let a: &[u16] = a;
            let _tiles = Tiles::configure();
            let mut c = [0f32; 4 * TILE * TILE];
            for nb in 0..b.nt / 2 {
                let bp = &b.data()[2 * nb * b.kt * TILE_U16..2 * (nb + 1) * b.kt * TILE_U16];
                let cols = (n - nb * 2 * TILE).min(2 * TILE);
                for mb in 0..blocks {
                    block(&a[mb * 2 * TILE * kk..(mb + 1) * 2 * TILE * kk], bp, b.kt, &mut c)?;
                    let r0 = mb * 2 * TILE;
                    let block_rows = rows.min(r0 + 2 * TILE) - r0;
                    let out = &mut out[r0 * ldd + nb * 2 * TILE..];
                    let epilogue = padded.as_ref().map_or(epilogue, |p| epilogue.with_bias(&p[nb * 2 * TILE..]));
                    pulp::Arch::new().dispatch(StoreBlock { c: &c, out, ldd, rows: block_rows, cols, epilogue });
                }
            }
            Ok(())
        })
    })
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
        // The separate pass's GELU (`fused::gelu_in_place` applies this function).
        let gelu = super::super::fused::gelu;
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

    #[test]
    fn refuses_short_operands() {
        let packed = PackedB::new(&[1.0; 6], 2, 3).unwrap();
        let mut dst = vec![0f32; 5];
        assert!(matmul(2, &mut dst, 3, &[1.0; 4], 2, &packed, false).is_err());
        assert!(PackedB::new(&[1.0; 5], 2, 3).is_err());
    }
}
