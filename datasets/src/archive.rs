//! Zip archives (STaRK's `processed.zip`, torch's `.pt` files) read in memory, with every entry
//! name checked, and torch tensors rebuilt from their storage without executing pickles.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use crate::error::{DatasetError, Result};
use crate::pickle::{self, TensorRef, Value};

/// The files of a zip archive (directories dropped), by entry name.
pub struct ZipFiles {
    pub path: PathBuf,
    pub files: BTreeMap<String, Vec<u8>>,
}

impl ZipFiles {
    /// Read every file entry of the archive `bytes` (`path` names it in errors). An entry whose name
    /// is absolute or climbs out with `..` is an error: extracting it would write outside the folder.
    pub fn read(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let bad = |at: &str, reason: String| DatasetError::malformed(path, at, reason);
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| bad("archive", format!("not a readable zip file: {e}")))?;
        let mut files = BTreeMap::new();
        for i in 0..zip.len() {
            let mut entry = zip.by_index(i).map_err(|e| bad(&format!("entry #{i}"), e.to_string()))?;
            let name = entry.name().map(|n| n.into_owned()).map_err(|e| bad(&format!("entry #{i}"), format!("unreadable name: {e}")))?;
            if entry.enclosed_name().is_none() || name.starts_with('/') || name.split(['/', '\\']).any(|c| c == "..") {
                return Err(bad(&format!("entry `{name}`"), "escapes its folder (absolute path or `..`)".into()));
            }
            if entry.is_dir() {
                continue;
            }
            let mut buf = Vec::with_capacity(entry.size() as usize);
            entry.read_to_end(&mut buf).map_err(|e| bad(&format!("entry `{name}`"), format!("cannot decompress: {e}")))?;
            files.insert(name, buf);
        }
        Ok(ZipFiles { path: path.to_path_buf(), files })
    }

    /// The bytes of `name`, or an error naming the archive and the missing entry.
    pub fn get(&self, name: &str) -> Result<&[u8]> {
        self.files
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| DatasetError::malformed(&self.path, format!("entry `{name}`"), "missing from the archive"))
    }
}

/// An int64 tensor read from a `torch.save` file: its shape and row-major values.
#[derive(Debug, Clone, PartialEq)]
pub struct LongTensor {
    pub shape: Vec<usize>,
    pub values: Vec<i64>,
}

/// Read a `torch.save` zip (`name` is the `.pt` file, for errors) holding one int64 tensor.
/// The view is applied as `_rebuild_tensor_v2` does: storage offset, size and stride, so a
/// tensor that is a view of a larger storage (STaRK MAG's edge files) reads right.
pub fn read_pt_long(name: &Path, bytes: Vec<u8>) -> Result<LongTensor> {
    let z = ZipFiles::read(name, bytes)?;
    let bad = |at: &str, reason: String| DatasetError::malformed(name, at, reason);
    let pkl_name = z
        .files
        .keys()
        .find(|k| k.ends_with("/data.pkl") && k.matches('/').count() == 1)
        .cloned()
        .ok_or_else(|| bad("archive", "no <stem>/data.pkl record: not a torch.save file".into()))?;
    let prefix = &pkl_name[..pkl_name.len() - "data.pkl".len()];
    if let Some(order) = z.files.get(&format!("{prefix}byteorder"))
        && order.as_slice() != b"little"
    {
        return Err(bad(&format!("{prefix}byteorder"), format!("byte order `{}` is not supported", String::from_utf8_lossy(order))));
    }
    let v = pickle::load(z.get(&pkl_name)?).map_err(|e| bad(&pkl_name, e.to_string()))?;
    let Value::Tensor(t) = v else { return Err(bad(&pkl_name, "the pickle does not hold a tensor".into())) };
    if t.dtype != "int64" {
        return Err(bad(&pkl_name, format!("tensor dtype {} where int64 was expected", t.dtype)));
    }
    let storage_name = format!("{prefix}data/{}", t.key);
    let raw = z.get(&storage_name)?;
    if raw.len() as u64 != t.numel * 8 {
        return Err(bad(&storage_name, format!("storage has {} bytes, the pickle says {} int64 values", raw.len(), t.numel)));
    }
    let storage: Vec<i64> = raw.chunks_exact(8).map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect();
    gather(&t, &storage).map_err(|reason| bad(&pkl_name, reason))
}

fn gather(t: &TensorRef, storage: &[i64]) -> std::result::Result<LongTensor, String> {
    let shape: Vec<usize> = t.size.iter().map(|&s| s as usize).collect();
    let n: usize = shape.iter().product();
    // The largest index the view touches must lie inside the storage.
    if n > 0 {
        let last = t.offset + t.size.iter().zip(&t.stride).map(|(s, st)| (s - 1) * st).sum::<u64>();
        if last >= storage.len() as u64 {
            return Err(format!(
                "view (offset {}, size {:?}, stride {:?}) reaches past the storage of {} values",
                t.offset,
                t.size,
                t.stride,
                storage.len()
            ));
        }
    }
    let mut values = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        let pos = t.offset as usize + idx.iter().zip(&t.stride).map(|(&i, &s)| i * s as usize).sum::<usize>();
        values.push(storage[pos]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(LongTensor { shape, values })
}
