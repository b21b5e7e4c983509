//! Test support: a parity case written by `tests/fixtures/lm_parity/make.py` (its
//! `case.safetensors`: the inputs and the reference library's outputs), read by name.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::SafeTensors;

/// The tensors of one `case.safetensors` by name (shape and little-endian bytes), read and
/// parsed once, and where they came from (for the failure messages).
pub(crate) struct Case {
    tensors: BTreeMap<String, (Vec<usize>, Vec<u8>)>,
    what: String,
}

impl Case {
    /// Reads `<dir>/case.safetensors`; a missing or unreadable file fails the test, naming it.
    pub(crate) fn read(dir: &Path) -> Case {
        let path = dir.join("case.safetensors");
        let what = path.display().to_string();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{what}: {e} (tests/fixtures/lm_parity/make.py writes it)"));
        let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        let tensors = st.tensors().into_iter().map(|(name, t)| (name, (t.shape().to_vec(), t.data().to_vec()))).collect();
        Case { tensors, what }
    }

    fn tensor(&self, name: &str) -> &(Vec<usize>, Vec<u8>) {
        self.tensors.get(name).unwrap_or_else(|| panic!("{} has no {name}", self.what))
    }

    /// Whether the case holds tensor `name` (some architectures' cases have gradients others lack).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Tensor `name` as little-endian f32 values.
    pub(crate) fn f32s(&self, name: &str) -> Vec<f32> {
        self.tensor(name).1.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }

    /// Tensor `name` as little-endian i64 values, with its shape.
    pub(crate) fn i64s(&self, name: &str) -> (Vec<i64>, Vec<usize>) {
        let (shape, data) = self.tensor(name);
        (data.chunks_exact(8).map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect(), shape.clone())
    }
}
