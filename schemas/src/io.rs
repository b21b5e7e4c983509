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

/// Writes `batch` as Parquet into `file`, flushed and synced (`path` names it in errors).
fn write_parquet_into(file: &File, path: &Path, batch: &RecordBatch) -> Result<()> {
    let pq = |e: parquet::errors::ParquetError| SchemaError::parquet_write(path, &e);
    // The writer borrows the file, so that `close` flushes (an io error such as a full disk surfaces
    // there as itself) and the file is still ours to sync.
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(writer_properties())).map_err(pq)?;
    w.write(batch).map_err(pq)?;
    w.close().map_err(pq)?;
    file.sync_all().map_err(|e| SchemaError::write(path, &e))
}

/// A fresh temporary file beside `path`: `.<name>.<pid>-<n>-<nanos>.tmp` in the same folder, created with
/// `O_CREAT | O_EXCL` semantics. An existing path is never opened, so a file or symbolic link planted
/// under a temporary name is never written through (the kernel refuses `O_EXCL` on a link, even a
/// dangling one); another name is drawn instead.
pub fn create_tmp_for(path: &Path) -> Result<(PathBuf, File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut last = None;
    for _ in 0..64 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // The clock's nanoseconds make the name unpredictable: names planted in advance miss it.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let tmp = path.with_file_name(format!(".{name}.{}-{n}-{nanos:08x}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(tmp),
            Err(e) => return Err(SchemaError::write(&tmp, &e)),
        }
    }
    let tmp = last.unwrap_or_else(|| path.to_path_buf());
    Err(SchemaError::NotOwned { path: tmp, reason: "64 temporary names in a row already exist".into() })
}

/// Writes `batch` as Parquet into a fresh temporary file beside `path` ([`create_tmp_for`]) and
/// returns its name; [`commit`] moves it into place. On any failure the temporary file is removed
/// and the error names the cause (no space left, ...).
pub fn write_parquet_tmp(path: &Path, batch: &RecordBatch) -> Result<PathBuf> {
    fill_tmp(path, |file, tmp| write_parquet_into(file, tmp, batch))
}

/// Writes `bytes` into a fresh temporary file beside `path`, synced; returns its name.
pub fn write_bytes_tmp(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    fill_tmp(path, |mut file, tmp| file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|e| SchemaError::write(tmp, &e)))
}

/// A fresh temporary file beside `path` ([`create_tmp_for`]) filled by `fill`; removed again when
/// `fill` fails.
fn fill_tmp(path: &Path, fill: impl FnOnce(&File, &Path) -> Result<()>) -> Result<PathBuf> {
    let (tmp, file) = create_tmp_for(path)?;
    let res = fill(&file, &tmp);
    drop(file);
    res.map(|()| tmp.clone()).inspect_err(|_| discard(std::slice::from_ref(&tmp)))
}

/// Whether a file name is one of ours in progress: `.<name>.tmp` (older builds) or
/// `.<name>.<pid>-<n>-<nanos>.tmp` ([`create_tmp_for`]).
pub fn is_tmp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Renames a finished temporary file into place (atomic within one folder). A symbolic link at
/// `path` is replaced, never followed.
pub fn commit(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| SchemaError::write(path, &e))
}

/// Commits several temporary files together: every one was written completely before the first
/// rename, so a failure while writing leaves every old file as it was (and removes the new
/// temporaries). Used by the tools with several outputs.
pub fn commit_all(files: &[(PathBuf, PathBuf)]) -> Result<()> {
    for (i, (tmp, path)) in files.iter().enumerate() {
        if let Err(e) = commit(tmp, path) {
            for (t, _) in &files[i + 1..] {
                let _ = std::fs::remove_file(t);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Removes temporary files (on a failure before [`commit_all`]).
pub fn discard(tmps: &[PathBuf]) {
    for t in tmps {
        let _ = std::fs::remove_file(t);
    }
}

/// Writes Parquet atomically: a reader sees either the old file or the whole new one.
pub fn write_parquet_atomic(path: &Path, batch: &RecordBatch) -> Result<()> {
    let tmp = write_parquet_tmp(path, batch)?;
    commit(&tmp, path).inspect_err(|_| discard(std::slice::from_ref(&tmp)))
}

/// Writes bytes atomically (fresh temporary file in the same folder, fsync, rename).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = write_bytes_tmp(path, bytes)?;
    commit(&tmp, path).inspect_err(|_| discard(std::slice::from_ref(&tmp)))
}

/// Makes sure `dir` is a real folder that tgrag may write into, creating it (and its missing
/// parents) when absent. A symbolic link (to a folder or anything else) or a non-folder at `dir` is
/// refused: a link planted where an output folder belongs would send the writes elsewhere.
pub fn ensure_owned_dir(dir: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            let to = std::fs::read_link(dir).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
            Err(SchemaError::NotOwned { path: dir.to_path_buf(), reason: format!("is a symbolic link (to {to}), not a folder") })
        }
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(SchemaError::NotOwned { path: dir.to_path_buf(), reason: "is not a folder".into() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| SchemaError::write(dir, &e))?;
            // A link made between the check and the creation is caught here.
            match std::fs::symlink_metadata(dir) {
                Ok(m) if m.is_dir() => Ok(()),
                _ => Err(SchemaError::NotOwned { path: dir.to_path_buf(), reason: "changed while being created".into() }),
            }
        }
        Err(e) => Err(SchemaError::io(dir, e)),
    }
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
    fn a_full_disk_is_named_as_such() {
        // /dev/full answers every write with ENOSPC: it stands for a full disk.
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            eprintln!("skipped: no /dev/full on this system");
            return;
        };
        let err = write_parquet_into(&full, Path::new("run.parquet"), &sample()).expect_err("full").to_string();
        assert!(err.contains("writing failed: no space left on device") && !err.contains("not a readable Parquet"), "{err}");
        let d = tempfile::tempdir().expect("tmp");
        let e2 = write_bytes_atomic(&d.path().join("sub/missing/x.json"), b"{}").expect_err("no folder").to_string();
        assert!(e2.contains("writing failed"), "{e2}");
    }

    #[test]
    fn planted_temporary_names_and_links_are_never_written_through() {
        let d = tempfile::tempdir().expect("tmp");
        let (dir, outside) = (d.path().join("out"), d.path().join("outside"));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::create_dir_all(&outside).expect("dir");
        let canary = outside.join("canary");
        std::fs::write(&canary, b"keep me").expect("canary");
        let p = dir.join("run.parquet");
        // The old fixed temporary name planted as a link to the canary; the output itself is a
        // link too.
        std::os::unix::fs::symlink(&canary, dir.join(".run.parquet.tmp")).expect("link");
        std::os::unix::fs::symlink(&canary, &p).expect("link");
        write_parquet_atomic(&p, &sample()).expect("write");
        assert_eq!(std::fs::read(&canary).expect("canary"), b"keep me", "a planted link was written through");
        let m = std::fs::symlink_metadata(&p).expect("output");
        assert!(m.is_file(), "the output is a real file, not the planted link");
        assert_eq!(read_table(&p, &crate::tables::EDGES).expect("read"), sample());
        write_bytes_atomic(&dir.join("x.json"), b"{}").expect("bytes");
        assert_eq!(std::fs::read(&canary).expect("canary"), b"keep me");
        // A folder that is a link is refused; a real one is created.
        let linked = dir.join("stage");
        std::os::unix::fs::symlink(&outside, &linked).expect("link");
        let e = ensure_owned_dir(&linked).expect_err("linked folder").to_string();
        assert!(e.contains("is a symbolic link") && e.contains("does not write through it"), "{e}");
        ensure_owned_dir(&dir.join("fresh/deeper")).expect("created");
        assert!(dir.join("fresh/deeper").is_dir());
        std::fs::write(dir.join("file"), b"x").expect("file");
        assert!(ensure_owned_dir(&dir.join("file")).expect_err("a file").to_string().contains("is not a folder"));
    }

    #[test]
    fn commit_all_renames_every_file_or_none_is_written() {
        let d = tempfile::tempdir().expect("tmp");
        let (a, b) = (d.path().join("a.parquet"), d.path().join("b.parquet"));
        std::fs::write(&a, b"old a").expect("old");
        std::fs::write(&b, b"old b").expect("old");
        let ta = write_parquet_tmp(&a, &sample()).expect("tmp a");
        // The second output cannot be written (its folder is gone): the first stays a temporary,
        // which the caller discards, and both old files are untouched.
        let missing = d.path().join("gone/b.parquet");
        assert!(write_parquet_tmp(&missing, &sample()).is_err());
        discard(&[ta]);
        assert_eq!(std::fs::read(&a).expect("a"), b"old a");
        let left: Vec<String> =
            std::fs::read_dir(d.path()).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert!(left.iter().all(|n| !is_tmp_name(n)), "{left:?}");
        let (ta, tb) = (write_parquet_tmp(&a, &sample()).expect("a"), write_parquet_tmp(&b, &sample()).expect("b"));
        commit_all(&[(ta, a.clone()), (tb, b.clone())]).expect("commit");
        assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
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
