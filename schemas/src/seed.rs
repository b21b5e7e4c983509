//! SplitMix64, the one seeded mixer of the workspace: datasets' generator seeds from it and the
//! models' training stream is it, so the constants are written out once, here, in the base crate
//! both depend on.
//!
//! Steele, Lea and Flood, "Fast splittable pseudorandom number generators" (OOPSLA 2014); the
//! finaliser is Stafford's "Mix13" variant of murmur3's fmix64.

/// The golden-ratio increment: SplitMix64's state moves on by `GAMMA` per draw.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: the output for a state `z` (a bijection on `u64`). The k-th draw after
/// state `s` is `mix(s + k·GAMMA)`, so draws can be computed independently of each other.
#[inline]
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One SplitMix64 step from state `x`: `mix(x + GAMMA)`, the draw that follows state `x`.
#[inline]
pub const fn splitmix64(x: u64) -> u64 {
    mix(x.wrapping_add(GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
    #[test]
    fn matches_the_reference_sequence() {
        let mut s = 0u64;
        let mut draws = [0u64; 3];
        for d in &mut draws {
            *d = splitmix64(s);
            s = s.wrapping_add(GAMMA);
        }
        assert_eq!(draws, [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F]);
    }
}
