//! Parquet I/O. Reads name the file in every error; writes are deterministic (fixed writer settings,
//! no timestamps) and atomic (temporary file in the same folder, fsync, rename).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use arrow::compute::concat_batches;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use sha2::{Digest, Sha256};

use crate::{Result, SchemaError, TableSpec, validate};

/// Rows per Parquet row group: fixed so that the same data always gives the same bytes.
pub const ROW_GROUP_ROWS: usize = 256 * 1024;

fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_created_by(concat!("tgrag ", env!("CARGO_PKG_VERSION")).to_string())
        .build()
}

/// Reads a whole Parquet file into one batch.
pub fn read_parquet(path: &Path) -> Result<RecordBatch> {
    let file = File::open(path).map_err(|e| SchemaError::io(path, e))?;
    let pq = |source| SchemaError::Parquet { path: path.to_path_buf(), source };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(pq)?;
    let schema = builder.schema().clone();
    let reader = builder.with_batch_size(64 * 1024).build().map_err(pq)?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| SchemaError::Parquet {
            path: path.to_path_buf(),
            source: parquet::errors::ParquetError::ArrowError(e.to_string()),
        })?);
    }
    concat_batches(&schema, &batches).map_err(|e| SchemaError::arrow(path.display().to_string(), e))
}

/// Reads a Parquet file as the canonical table `spec`: columns are selected and cast to the
/// canonical types, and the first violation names the file, row and column.
pub fn read_table(path: &Path, spec: &TableSpec) -> Result<RecordBatch> {
    let raw = read_parquet(path)?;
    validate::conform(spec, path, &raw)
}

/// Writes `batch` as Parquet at `path` (not atomic: callers write to a temporary name). On any
/// failure the partly written file is removed and the error names the cause (no space left, ...).
pub fn write_parquet_to(path: &Path, batch: &RecordBatch) -> Result<()> {
    let res = (|| {
        let file = File::create(path).map_err(|e| SchemaError::write(path, &e))?;
        let pq = |e: parquet::errors::ParquetError| SchemaError::parquet_write(path, &e);
        // The writer borrows the file, so that `close` flushes (an io error such as a full disk
        // surfaces there as itself) and the file is still ours to sync.
        let mut w = ArrowWriter::try_new(&file, batch.schema(), Some(writer_properties())).map_err(pq)?;
        w.write(batch).map_err(pq)?;
        w.close().map_err(pq)?;
        file.sync_all().map_err(|e| SchemaError::write(path, &e))
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(path);
    }
    res
}

/// The temporary name used while `path` is being written: same folder, hidden, `.tmp` suffix.
pub fn tmp_path_for(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Renames a finished temporary file into place (atomic within one folder).
pub fn commit(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| SchemaError::write(path, &e))
}

/// Writes Parquet atomically: a reader sees either the old file or the whole new one.
pub fn write_parquet_atomic(path: &Path, batch: &RecordBatch) -> Result<()> {
    let tmp = tmp_path_for(path);
    let res = write_parquet_to(&tmp, batch).and_then(|()| commit(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Writes bytes atomically (temporary file in the same folder, fsync, rename).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path_for(path);
    let res = (|| {
        let mut f = File::create(&tmp).map_err(|e| SchemaError::write(&tmp, &e))?;
        f.write_all(bytes).map_err(|e| SchemaError::write(&tmp, &e))?;
        f.sync_all().map_err(|e| SchemaError::write(&tmp, &e))?;
        commit(&tmp, path)
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Hex sha256 of a file's bytes.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| SchemaError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| SchemaError::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, UInt32Array};
    use std::sync::Arc;

    fn sample() -> RecordBatch {
        let spec = &crate::tables::EDGES;
        spec.batch(vec![
            Arc::new(UInt32Array::from(vec![0, 1, 2])),
            Arc::new(UInt32Array::from(vec![1, 2, 0])),
            Arc::new(StringArray::from(vec!["r", "s", "r"])),
        ])
        .expect("batch")
    }

    #[test]
    fn same_batch_same_bytes_and_roundtrip() {
        let d = tempfile::tempdir().expect("tmp");
        let (a, b) = (d.path().join("a.parquet"), d.path().join("b.parquet"));
        write_parquet_atomic(&a, &sample()).expect("write a");
        write_parquet_atomic(&b, &sample()).expect("write b");
        assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
        assert_eq!(read_table(&a, &crate::tables::EDGES).expect("read"), sample());
        // No temporary file is left behind.
        let names: Vec<String> =
            std::fs::read_dir(d.path()).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_full_disk_is_named_as_such_and_leaves_no_file() {
        // /dev/full answers every write with ENOSPC; a link to it stands for a full disk (removing
        // the failed file removes the link, never the device).
        if !Path::new("/dev/full").exists() {
            eprintln!("skipped: no /dev/full on this system");
            return;
        }
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("run.parquet");
        let tmp = tmp_path_for(&p);
        std::os::unix::fs::symlink("/dev/full", &tmp).expect("link");
        let err = write_parquet_to(&tmp, &sample()).expect_err("full").to_string();
        assert!(err.contains("writing failed: no space left on device") && !err.contains("not a readable Parquet"), "{err}");
        assert!(std::fs::symlink_metadata(&tmp).is_err(), "the failed temporary file is removed");
        let e2 = write_bytes_atomic(&d.path().join("sub/missing/x.json"), b"{}").expect_err("no folder").to_string();
        assert!(e2.contains("writing failed"), "{e2}");
    }

    #[test]
    fn truncated_parquet_names_the_file() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("edges.parquet");
        write_parquet_atomic(&p, &sample()).expect("write");
        let bytes = std::fs::read(&p).expect("read");
        std::fs::write(&p, &bytes[..bytes.len() / 2]).expect("truncate");
        let err = read_parquet(&p).expect_err("truncated").to_string();
        assert!(err.contains("edges.parquet") && err.contains("truncated or corrupt"), "{err}");
    }
}
