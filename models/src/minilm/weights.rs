//! Strict safetensors reading: every tensor the architecture asks for must be present with the
//! expected dtype and shape, and every tensor in the file must be taken (an unused tensor means the
//! file is not the model we think it is).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};
use safetensors::{Dtype, SafeTensors};

use crate::error::{ModelError, Result};

/// A parsed safetensors file and the names taken from it so far.
pub struct WeightFile<'a> {
    path: PathBuf,
    st: SafeTensors<'a>,
    taken: BTreeSet<String>,
}

impl<'a> WeightFile<'a> {
    pub fn parse(path: &Path, bytes: &'a [u8]) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| ModelError::BadFile { path: path.to_path_buf(), reason: format!("not a safetensors file: {e}") })?;
        Ok(WeightFile { path: path.to_path_buf(), st, taken: BTreeSet::new() })
    }

    fn err(&self, reason: String) -> ModelError {
        ModelError::Weights { path: self.path.clone(), reason }
    }

    /// How many tensors the file holds.
    pub fn len(&self) -> usize {
        self.st.len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.st.is_empty()
    }

    /// The shape of `name`, or of the tensor whose name ends in `.name` (a checkpoint saved with
    /// its model's prefix, `bert.` or `mpnet.`), when the file holds one.
    pub fn shape_of_any(&self, name: &str) -> Option<Vec<usize>> {
        if let Ok(view) = self.st.tensor(name) {
            return Some(view.shape().to_vec());
        }
        let suffix = format!(".{name}");
        let found = self.st.names().into_iter().find(|n| n.ends_with(&suffix))?;
        self.st.tensor(found).ok().map(|v| v.shape().to_vec())
    }

    /// The largest dimension of any tensor of the file.
    pub fn max_dimension(&self) -> usize {
        self.st.tensors().iter().flat_map(|(_, v)| v.shape().to_vec()).max().unwrap_or(0)
    }

    /// Whether the file holds a tensor `name` (for the optional parts of a checkpoint).
    pub fn has(&self, name: &str) -> bool {
        self.st.tensor(name).is_ok()
    }

    /// The f32 values of `name`, which must have exactly `shape`.
    pub fn f32s(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let view = self.st.tensor(name).map_err(|_| self.err(format!("missing tensor `{name}`")))?;
        if view.dtype() != Dtype::F32 {
            return Err(self.err(format!("tensor `{name}` is {:?}, expected F32", view.dtype())));
        }
        if view.shape() != shape {
            return Err(self.err(format!("tensor `{name}` has shape {:?}, expected {shape:?}", view.shape())));
        }
        self.taken.insert(name.to_string());
        let values: Vec<f32> = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            return Err(self.err(format!("tensor `{name}` holds {} at index {at}: every weight must be a finite number", values[at])));
        }
        Ok(values)
    }

    /// The i64 values of `name`, which must have exactly `shape`.
    pub fn i64s(&mut self, name: &str, shape: &[usize]) -> Result<Vec<i64>> {
        let view = self.st.tensor(name).map_err(|_| self.err(format!("missing tensor `{name}`")))?;
        if view.dtype() != Dtype::I64 || view.shape() != shape {
            return Err(self.err(format!("tensor `{name}` is {:?} {:?}, expected I64 {shape:?}", view.dtype(), view.shape())));
        }
        self.taken.insert(name.to_string());
        Ok(view.data().chunks_exact(8).map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect())
    }

    /// A vector tensor on `device`.
    pub fn vector(&mut self, name: &str, n: usize, device: &Device) -> Result<Tensor<1>> {
        let v = self.f32s(name, &[n])?;
        Ok(Tensor::from_data(TensorData::new(v, [n]), device))
    }

    /// A matrix stored as-is (`rows × cols`).
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize, device: &Device) -> Result<Tensor<2>> {
        let v = self.f32s(name, &[rows, cols])?;
        Ok(Tensor::from_data(TensorData::new(v, [rows, cols]), device))
    }

    /// A PyTorch `nn.Linear` weight (`out × in`) transposed to `in × out`, so that `x · W` applies it.
    pub fn linear_weight(&mut self, name: &str, d_in: usize, d_out: usize, device: &Device) -> Result<Tensor<2>> {
        let v = self.f32s(name, &[d_out, d_in])?;
        let mut t = vec![0f32; v.len()];
        for o in 0..d_out {
            for i in 0..d_in {
                t[i * d_out + o] = v[o * d_in + i];
            }
        }
        Ok(Tensor::from_data(TensorData::new(t, [d_in, d_out]), device))
    }

    /// Fail if the file holds tensors nobody took.
    pub fn finish(self) -> Result<()> {
        let unused: Vec<&str> = self.st.names().into_iter().filter(|n| !self.taken.contains(*n)).collect();
        if unused.is_empty() {
            Ok(())
        } else {
            let mut unused = unused;
            unused.sort_unstable();
            Err(ModelError::Weights {
                path: self.path,
                reason: format!("{} tensor(s) not used by the architecture: {}", unused.len(), unused.join(", ")),
            })
        }
    }
}
