//! SplitMix64: the seeded stream behind every weight initialisation, dropout mask, negative sample
//! and batch order, never the backend's global generator, so a seed gives the same run everywhere.

use tgrag_schemas::seed::{GAMMA, mix};

/// SplitMix64 ([`tgrag_schemas::seed`]) as a stateful stream.
#[derive(Debug, Clone)]
pub(crate) struct Stream(pub(crate) u64);

impl Stream {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// The 16-bit uniforms of the next `out.len() / 4` draws, four per draw from the low bits up
    /// (the values `dropout_decisions` in `train::tensors` takes), for `out.len()` a multiple of 4.
    /// SplitMix64's k-th draw depends on the state and k alone, so the draws are computed apart
    /// (a loop the compiler vectorises) and the state moves on as if they were drawn one by one.
    pub(crate) fn fill_u16(&mut self, out: &mut [u16]) {
        let s0 = self.0;
        let mut draws = 0u64;
        for (j, q) in out.chunks_exact_mut(4).enumerate() {
            let z = mix(s0.wrapping_add(GAMMA.wrapping_mul(j as u64 + 1)));
            q[0] = z as u16;
            q[1] = (z >> 16) as u16;
            q[2] = (z >> 32) as u16;
            q[3] = (z >> 48) as u16;
            draws = j as u64 + 1;
        }
        self.0 = s0.wrapping_add(GAMMA.wrapping_mul(draws));
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }

    /// `0..n` in a seeded uniform order (Fisher–Yates from the end): the mini-batch order of every
    /// model trained here.
    pub(crate) fn shuffled(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, self.below(i + 1));
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::Stream;

    /// The block fill gives the draws one by one would, 16 bits at a time from the low end, and
    /// leaves the stream where they would.
    #[test]
    fn fill_u16_is_the_sequential_draws() {
        for len in [0usize, 4, 8, 4096, 4100] {
            let (mut a, mut b) = (Stream(0x5eed ^ len as u64), Stream(0x5eed ^ len as u64));
            let mut out = vec![0u16; len];
            a.fill_u16(&mut out);
            let seq: Vec<u16> = (0..len / 4)
                .flat_map(|_| {
                    let r = b.next();
                    [r as u16, (r >> 16) as u16, (r >> 32) as u16, (r >> 48) as u16]
                })
                .collect();
            assert_eq!(out, seq, "len {len}");
            assert_eq!(a.next(), b.next(), "len {len}: the stream moved on as far");
        }
    }
}
