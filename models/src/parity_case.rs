//! Test support: a parity case written by `tests/fixtures/lm_parity/make.py` (its
//! `case.safetensors`: the inputs and the reference library's outputs), read by name.

use std::path::Path;

use safetensors::SafeTensors;

/// The bytes of one `case.safetensors`, and where they came from (for the failure messages).
pub(crate) struct Case {
    bytes: Vec<u8>,
    what: String,
}

impl Case {
    /// Reads `<dir>/case.safetensors`; a missing or unreadable file fails the test, naming it.
    pub(crate) fn read(dir: &Path) -> Case {
        let path = dir.join("case.safetensors");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (tests/fixtures/lm_parity/make.py writes it)", path.display()));
        SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Case { bytes, what: path.display().to_string() }
    }

    fn tensor(&self, name: &str) -> (Vec<u8>, Vec<usize>) {
        let st = SafeTensors::deserialize(&self.bytes).unwrap_or_else(|e| panic!("{}: {e}", self.what));
        let t = st.tensor(name).unwrap_or_else(|_| panic!("{} has no {name}", self.what));
        (t.data().to_vec(), t.shape().to_vec())
    }

    /// Whether the case holds tensor `name` (some architectures' cases have gradients others lack).
    pub(crate) fn has(&self, name: &str) -> bool {
        SafeTensors::deserialize(&self.bytes).is_ok_and(|st| st.tensor(name).is_ok())
    }

    /// Tensor `name` as little-endian f32 values.
    pub(crate) fn f32s(&self, name: &str) -> Vec<f32> {
        let (data, _) = self.tensor(name);
        data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }

    /// Tensor `name` as little-endian i64 values, with its shape.
    pub(crate) fn i64s(&self, name: &str) -> (Vec<i64>, Vec<usize>) {
        let (data, shape) = self.tensor(name);
        (data.chunks_exact(8).map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect(), shape)
    }
}
