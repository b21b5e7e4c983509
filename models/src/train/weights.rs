//! Strict weight files: dense layers as safetensors, written atomically and read back with exact
//! names and shapes.

use burn::tensor::Device;

use crate::error::{ModelError, Result};
use crate::train::Dense;

/// Writes layers as safetensors (`<name>.weight` `[in, out]`, `<name>.bias` `[out]`), atomically.
pub(crate) fn save_layers(path: &std::path::Path, layers: &[(&str, &Dense)]) -> Result<()> {
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, l) in layers {
        let (w, b) = l.to_host()?;
        let (d_in, d_out) = (w.len() / b.len().max(1), b.len());
        bufs.push((format!("{name}.weight"), vec![d_in, d_out], w.iter().flat_map(|v| v.to_le_bytes()).collect()));
        bufs.push((format!("{name}.bias"), vec![d_out], b.iter().flat_map(|v| v.to_le_bytes()).collect()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bufs
        .iter()
        .map(|(n, s, d)| safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).map(|v| (n.clone(), v)))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| ModelError::Internal(format!("safetensors view: {e}")))?;
    let bytes = safetensors::tensor::serialize(views, None).map_err(|e| ModelError::Internal(format!("safetensors: {e}")))?;
    let tmp = path.with_extension("safetensors.tmp");
    let res = std::fs::write(&tmp, bytes)
        .map_err(|source| ModelError::Io { path: tmp.clone(), source })
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source }));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Reads layers written by [`save_layers`] strictly: every `(name, in, out)` with exact shapes, and
/// nothing else in the file.
pub(crate) fn load_layers(path: &std::path::Path, spec: &[(&str, usize, usize)], dev: &Device) -> Result<Vec<Dense>> {
    let bytes = std::fs::read(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let mut wf = crate::minilm::weights::WeightFile::parse(path, &bytes)?;
    let mut layers = Vec::new();
    for &(name, i, o) in spec {
        let w = wf.f32s(&format!("{name}.weight"), &[i, o])?;
        let b = wf.f32s(&format!("{name}.bias"), &[o])?;
        layers.push(Dense::from_host(w, b, i, o, dev));
    }
    wf.finish()?;
    Ok(layers)
}
