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

/// A dropout mask: each entry kept with probability `1 − p` and scaled by `1/(1 − p)`.
pub(crate) fn mask(rows: usize, cols: usize, p: f64, rng: &mut Stream, dev: &Device) -> Tensor<2> {
    let keep = 1.0 - p;
    let scale = (1.0 / keep) as f32;
    let m: Vec<f32> = (0..rows * cols).map(|_| if rng.unit() < keep { scale } else { 0.0 }).collect();
    Tensor::from_data(TensorData::new(m, [rows, cols]), dev)
}
