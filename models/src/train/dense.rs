//! The fully connected layer every model is built from.

use burn::module::{Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::train::Stream;

/// A fully connected layer `x W + b`.
#[derive(Module, Debug)]
pub struct Dense {
    w: Param<Tensor<2>>,
    b: Param<Tensor<1>>,
}

impl Dense {
    /// Glorot-uniform weights, zero bias.
    pub(crate) fn new(d_in: usize, d_out: usize, rng: &mut Stream, dev: &Device) -> Self {
        let a = (6.0 / (d_in + d_out) as f64).sqrt();
        let w: Vec<f32> = (0..d_in * d_out).map(|_| ((rng.unit() * 2.0 - 1.0) * a) as f32).collect();
        Dense {
            w: Param::from_data(TensorData::new(w, [d_in, d_out]), dev),
            b: Param::from_data(TensorData::new(vec![0f32; d_out], [d_out]), dev),
        }
    }

    /// Zero weights and bias.
    pub(crate) fn zeros(d_in: usize, d_out: usize, dev: &Device) -> Self {
        Dense {
            w: Param::from_data(TensorData::new(vec![0f32; d_in * d_out], [d_in, d_out]), dev),
            b: Param::from_data(TensorData::new(vec![0f32; d_out], [d_out]), dev),
        }
    }

    pub(crate) fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        x.matmul(self.w.val()) + self.b.val().unsqueeze()
    }

    /// `(weight [d_in, d_out], bias [1, d_out])` as tensors.
    pub(crate) fn parts(&self) -> (Tensor<2>, Tensor<2>) {
        (self.w.val(), self.b.val().unsqueeze())
    }

    /// The parameters themselves (their gradients can be read after a backward pass).
    #[cfg(test)]
    pub(crate) fn params(&self) -> (Tensor<2>, Tensor<1>) {
        (self.w.val(), self.b.val())
    }

    /// Output width.
    pub(crate) fn d_out(&self) -> usize {
        self.b.val().dims()[0]
    }

    pub(crate) fn linear(&self, x: Tensor<2>) -> Tensor<2> {
        x.matmul(self.w.val())
    }

    /// Rows of the weight matrix (an embedding lookup: the layer's input is a one-hot id).
    pub(crate) fn rows(&self, idx: Tensor<1, Int>) -> Tensor<2> {
        self.w.val().select(0, idx)
    }

    /// `(weight [d_in, d_out], bias [d_out])` as host vectors.
    pub(crate) fn to_host(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        let w = self.w.val().into_data().try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("{e:?}")))?;
        let b = self.b.val().into_data().try_to_vec::<f32>().map_err(|e| ModelError::Internal(format!("{e:?}")))?;
        Ok((w, b))
    }

    /// A layer from host vectors (shapes checked by the caller).
    pub(crate) fn from_host(w: Vec<f32>, b: Vec<f32>, d_in: usize, d_out: usize, dev: &Device) -> Self {
        Dense { w: Param::from_data(TensorData::new(w, [d_in, d_out]), dev), b: Param::from_data(TensorData::new(b, [d_out]), dev) }
    }

    pub(crate) fn bias(&self, x: Tensor<2>) -> Tensor<2> {
        x + self.b.val().unsqueeze()
    }
}
