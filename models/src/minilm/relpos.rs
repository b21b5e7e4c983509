//! MPNet's relative position bias: one table `[buckets, heads]` shared by every layer, read at the
//! bucket of each (query, key) distance and added to that head's attention scores after the
//! `1/√dh` scaling, before the key mask (Hugging Face's `MPNetEncoder.compute_position_bias`).
//!
//! The buckets are T5's: 32 in all, half for keys before the query and half for keys after it; in
//! each half distances below 8 have a bucket each and the rest share 8 buckets spaced
//! logarithmically up to 128 (farther keys fall in the last). transformers always asks for 32
//! buckets, whatever `relative_attention_num_buckets` says (it sizes the table only), and so does
//! this module. The logarithm is taken in f32 as transformers' tensors do, so the buckets are its
//! buckets exactly (a test compares them over distances −300…300).

/// Buckets transformers' `compute_position_bias` asks for.
pub const NUM_BUCKETS: usize = 32;
/// The distance from which every key shares the farthest bucket of its side.
const MAX_DISTANCE: f32 = 128.0;

/// The bucket of a key at `relative = key position − query position`.
pub fn bucket(relative: i64) -> usize {
    let half = (NUM_BUCKETS / 2) as i64;
    let n = -relative;
    let side = if n < 0 { half } else { 0 };
    let n = n.abs();
    let exact = half / 2;
    if n < exact {
        return (side + n) as usize;
    }
    // f32 as torch computes `log(n / max_exact) / log(max_distance / max_exact) * (half − max_exact)`
    // (the Python float `math.log(16)` enters as an f32 scalar), truncated toward zero.
    let ratio = (n as f32 / exact as f32).ln() / (f64::from(MAX_DISTANCE / exact as f32).ln() as f32);
    let large = exact + (ratio * (half - exact) as f32) as i64;
    (side + large.min(half - 1)) as usize
}

/// The bucket of every distance within a `len`-token sequence: entry `len − 1 + key − query`.
pub fn distance_buckets(len: usize) -> Vec<usize> {
    (0..2 * len.max(1) - 1).map(|k| bucket(k as i64 - (len.max(1) as i64 - 1))).collect()
}

/// Scores of one head of one sequence (`len × len`, row = query) scaled by `scale`, plus the
/// relative bias of head `head` from `table` (`[buckets, heads]`): the softmax's input. The
/// buckets of the `2·len − 1` distances are found once per call (the CPU engines' one place).
pub fn add_scaled(scores: &mut [f32], len: usize, scale: f32, table: &[f32], heads: usize, head: usize) {
    let mut bias = Vec::new();
    head_bias(&distance_buckets(len), table, heads, head, &mut bias);
    for (i, row) in scores.chunks_exact_mut(len.max(1)).enumerate() {
        scale_and_add(row, &bias, i, scale);
    }
}

/// `out` ← head `head`'s bias (from `table`, `[buckets, heads]`) at each distance whose bucket
/// `buckets` gives ([`distance_buckets`]).
pub fn head_bias(buckets: &[usize], table: &[f32], heads: usize, head: usize, out: &mut Vec<f32>) {
    out.clear();
    out.extend(buckets.iter().map(|&b| table[b * heads + head]));
}

/// The scores of query `query` (`row`: one per key) scaled by `scale`, plus the bias of each
/// distance (`bias`: [`head_bias`] of the sequence's `2·len − 1` distances).
#[inline(always)]
pub fn scale_and_add(row: &mut [f32], bias: &[f32], query: usize, scale: f32) {
    let len = row.len();
    let b = &bias[len - 1 - query..][..len];
    row.iter_mut().zip(b).for_each(|(z, b)| *z = *z * scale + b);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed buckets: exact below 8 on each side, then ⌊8 + ln(n/8)/ln 16 · 8⌋ capped at 15.
    #[test]
    fn buckets_by_hand() {
        // key before the query (relative < 0): n = −relative > 0, first half.
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(-7), 7);
        assert_eq!(bucket(-8), 8);
        assert_eq!(bucket(-15), 8 + (((15f64 / 8.0).ln() / 16f64.ln()) * 8.0) as usize);
        assert_eq!(bucket(-16), 10);
        assert_eq!(bucket(-127), 15);
        assert_eq!(bucket(-1000), 15);
        // key after the query: second half.
        assert_eq!(bucket(1), 17);
        assert_eq!(bucket(7), 23);
        assert_eq!(bucket(8), 24);
        assert_eq!(bucket(1000), 31);
    }
}
