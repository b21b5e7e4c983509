//! A small, fast, seeded generator (xoshiro256** seeded by SplitMix64, [`tgrag_schemas::seed`]).
//! Written out here so that the same seed gives the same data on every platform and every version of
//! every dependency.

/// SplitMix64 step ([`tgrag_schemas::seed`]): also used to derive independent sub-seeds from
/// (seed, stream, index).
pub use tgrag_schemas::seed::splitmix64;

/// Mixes a seed with a stream name and an index into a new seed (for per-item generators that give the
/// same values whatever the thread count).
pub fn derive(seed: u64, stream: &str, index: u64) -> u64 {
    let mut h = splitmix64(seed);
    for b in stream.bytes() {
        h = splitmix64(h ^ u64::from(b));
    }
    splitmix64(h ^ index.wrapping_mul(0xA24B_AED4_963E_E407))
}

/// xoshiro256** generator.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded from one 64-bit seed.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut s = [0u64; 4];
        for v in &mut s {
            x = splitmix64(x);
            *v = x;
        }
        if s == [0; 4] {
            s[0] = 1;
        }
        Rng { s }
    }

    /// A generator for item `index` of `stream` under `seed`.
    pub fn for_item(seed: u64, stream: &str, index: u64) -> Self {
        Rng::new(derive(seed, stream, index))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform integer in `0..n` (n > 0; returns 0 for n == 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// Uniform float in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A uniformly chosen element (None for an empty slice).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() { None } else { items.get(self.below(items.len())) }
    }

    /// A uniformly chosen element of a non-empty slice of strings (empty string otherwise).
    pub fn word<'a>(&mut self, items: &[&'a str]) -> &'a str {
        self.pick(items).copied().unwrap_or("")
    }

    /// Standard normal deviate (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }

    /// `k` distinct indices of `0..n` (all of them, shuffled, when k ≥ n).
    pub fn sample_distinct(&mut self, n: usize, k: usize) -> Vec<usize> {
        if k >= n {
            let mut all: Vec<usize> = (0..n).collect();
            self.shuffle(&mut all);
            return all;
        }
        let mut out = Vec::with_capacity(k);
        while out.len() < k {
            let v = self.below(n);
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }
}

/// Seeded 60/20/20 train/val/test assignment of `n` items: a shuffle drawn from `stream`, the first
/// 60% of the shuffled order train, the next 20% val, the rest test.
pub fn split_60_20_20(n: usize, seed: u64, stream: &str) -> Vec<&'static str> {
    let mut order: Vec<usize> = (0..n).collect();
    Rng::for_item(seed, stream, 0).shuffle(&mut order);
    let mut out = vec!["train"; n];
    for (rank, &i) in order.iter().enumerate() {
        out[i] = if rank * 10 < n * 6 {
            "train"
        } else if rank * 10 < n * 8 {
            "val"
        } else {
            "test"
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut r = Rng::new(7);
        let mut counts = [0usize; 10];
        for _ in 0..100_000 {
            counts[r.below(10)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "bucket count {c} far from 10000");
        }
    }

    #[test]
    fn same_seed_same_stream_and_different_items_differ() {
        let a: Vec<u64> = (0..5).map(|_| Rng::for_item(1, "x", 3).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::for_item(1, "x", 3).next_u64(), Rng::for_item(1, "x", 4).next_u64());
        assert_ne!(Rng::for_item(1, "x", 3).next_u64(), Rng::for_item(1, "y", 3).next_u64());
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut r = Rng::new(3);
        let xs: Vec<f64> = (0..50_000).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "var {var}");
    }

    #[test]
    fn sample_distinct_gives_distinct_values() {
        let mut r = Rng::new(9);
        let s = r.sample_distinct(20, 10);
        let mut d = s.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 10);
        assert!(s.iter().all(|&v| v < 20));
    }
}
