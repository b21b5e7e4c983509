//! Host ↔ tensor helpers shared by the training loops.

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::train::Stream;

/// Ids as an `Int` tensor.
pub(crate) fn ints(v: &[u32], dev: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), [v.len()]), dev)
}

/// A float tensor's values, row-major.
pub(crate) fn floats(t: Tensor<2>) -> Result<Vec<f32>> {
    let data = t.into_data();
    data.try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("reading a tensor: {e:?}")))
}

/// The keep decisions of a dropout mask over `len` entries, fed to `keep(i, kept)` in order: each
/// draw of the stream gives four 16-bit uniforms, and entry `i` is kept when its uniform is below
/// `(1 − p)·2¹⁶` (probability `1 − p` to 2⁻¹⁶). One draw per four entries keeps the mask cheap next
/// to the products it feeds (a 3,000 × 384 input mask every epoch).
pub(crate) fn dropout_decisions(len: usize, p: f64, rng: &mut Stream, mut keep: impl FnMut(usize, bool)) {
    let threshold = ((1.0 - p) * 65536.0).round() as u32;
    let mut i = 0;
    while i < len {
        let mut r = rng.next();
        for _ in 0..4.min(len - i) {
            keep(i, ((r & 0xffff) as u32) < threshold);
            r >>= 16;
            i += 1;
        }
    }
}

/// A dropout mask: each entry kept with probability `1 − p` (see [`dropout_decisions`]) and scaled
/// by `1/(1 − p)`.
pub(crate) fn mask(rows: usize, cols: usize, p: f64, rng: &mut Stream, dev: &Device) -> Tensor<2> {
    let scale = (1.0 / (1.0 - p)) as f32;
    let mut m = vec![0f32; rows * cols];
    dropout_decisions(rows * cols, p, rng, |i, kept| {
        if kept {
            m[i] = scale;
        }
    });
    Tensor::from_data(TensorData::new(m, [rows, cols]), dev)
}
