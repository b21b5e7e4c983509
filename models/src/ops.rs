//! Elementwise math every engine shares, written once: e^x, erf and GELU as branch-free f32
//! arithmetic that vectorises inside a dispatched pass (no libm call), GELU on pulp's vector
//! types, a 16-lane sum and argmax. The engines' passes call these inside their pulp dispatch
//! ([`crate::simd::arch`]), so each compiles for the level the CPU (or `TGRAG_SIMD`) allows.

/// e^x for f32, branch-free (vectorisable): x = n·ln2 + r, |r| ≤ ln2/2, e^r by its Taylor
/// polynomial to degree 6, 2^n through the exponent bits. Inputs below −87 give 0 (as softmax needs).
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let under = x < -87.0;
    let x = x.clamp(-87.0, 88.0);
    // Round to nearest by the 1.5·2^23 trick: plain arithmetic, so it vectorises (no roundf call).
    const MAGIC: f32 = 12_582_912.0;
    // The integer n is also read from the low mantissa bits of the same sum (no float→int cast,
    // whose saturating semantics would stop vectorisation).
    let y = x * LOG2E + MAGIC;
    let n = y - MAGIC;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(y.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(127) << 23);
    if under { 0.0 } else { p * scale }
}

/// The numerator's and the denominator's coefficients of [`erf_approx`], highest power of x²
/// first (Eigen's / XLA's): erf(x) ≈ x·P(x²)/Q(x²) on [−4, 4].
const ERF_P: [f32; 7] =
    [-2.726_142_3e-10, 2.770_681_4e-8, -2.101_024e-6, -5.692_506_4e-5, -7.349_906_3e-4, -2.954_600_2e-3, -1.609_603_3e-2];
const ERF_Q: [f32; 5] = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329_5e-3, -1.426_474e-2];

/// erf for f32 (Eigen's / XLA's rational approximation; exact ±1 saturation beyond |x| = 4).
#[inline(always)]
pub fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ERF_P[1..].iter().fold(ERF_P[0], |p, &k| x2 * p + k);
    let q = ERF_Q[1..].iter().fold(ERF_Q[0], |q, &k| x2 * q + k);
    (x * p / q).clamp(-1.0, 1.0)
}

/// Sum with 16 independent lanes (vectorisable; the order of additions differs from a sequential
/// sum only by rounding).
#[inline(always)]
pub fn sum16(v: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut it = v.chunks_exact(16);
    for c in &mut it {
        for i in 0..16 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + it.remainder().iter().sum::<f32>()
}

/// Exact-erf GELU of one value, 0.5·x·(1 + erf(x/√2)) (vectorisable: [`erf_approx`]).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_approx(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// [`gelu`] of each lane, the same operations in the same order (bit-identical to it).
#[inline(always)]
pub fn gelu_vec<S: pulp::Simd>(simd: S, x: S::f32s) -> S::f32s {
    let z = simd.mul_f32s(x, simd.splat_f32s(std::f32::consts::FRAC_1_SQRT_2));
    let z = simd.min_f32s(simd.max_f32s(z, simd.splat_f32s(-4.0)), simd.splat_f32s(4.0));
    let x2 = simd.mul_f32s(z, z);
    let mut p = simd.splat_f32s(ERF_P[0]);
    for k in &ERF_P[1..] {
        p = simd.add_f32s(simd.mul_f32s(x2, p), simd.splat_f32s(*k));
    }
    let mut q = simd.splat_f32s(ERF_Q[0]);
    for k in &ERF_Q[1..] {
        q = simd.add_f32s(simd.mul_f32s(x2, q), simd.splat_f32s(*k));
    }
    let erf = simd.div_f32s(simd.mul_f32s(z, p), q);
    let erf = simd.min_f32s(simd.max_f32s(erf, simd.splat_f32s(-1.0)), simd.splat_f32s(1.0));
    simd.mul_f32s(simd.mul_f32s(simd.splat_f32s(0.5), x), simd.add_f32s(simd.splat_f32s(1.0), erf))
}

/// Index of the largest value (ties: the first).
pub fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0 as u32
}
