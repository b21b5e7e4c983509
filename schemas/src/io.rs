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
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use sha2::{Digest, Sha256};

use crate::table::{META_TABLE, META_VERSION};
use crate::{Result, SchemaError, TableSpec, validate};

/// Rows per Parquet row group: fixed so that the same data always gives the same bytes.
pub const ROW_GROUP_ROWS: usize = 256 * 1024;

fn writer_properties(meta: &[(String, String)]) -> WriterProperties {
    let kv = meta.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())).collect();
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_created_by(concat!("tgrag ", env!("CARGO_PKG_VERSION")).to_string())
        .set_key_value_metadata(Some(kv))
        .build()
}

/// Key-value metadata key: the table's doc (what a row is).
pub const META_DOC: &str = "tgrag.doc";
/// Key-value metadata key: the column docs, a JSON object `{column: doc}` in file order.
pub const META_COLUMNS: &str = "tgrag.columns";
/// Key-value metadata key: the dataset the file belongs to (files written by `tgrag run`).
pub const META_DATASET: &str = "tgrag.dataset";
/// Key-value metadata key: the cache key of the stage run that wrote the file (`tgrag run`).
pub const META_CACHE_KEY: &str = "tgrag.cache_key";
/// Key-value metadata key: the commit of the build that wrote the file (`-dirty` when its code
/// differed from that commit, `unknown` outside a git checkout).
pub const META_COMMIT: &str = "tgrag.commit";
/// Every key tgrag writes into a Parquet file's key-value metadata, in file order. `tgrag.dataset`
/// and `tgrag.cache_key` are there only when known (stage outputs; not the file tools' outputs).
pub const META_KEYS: [&str; 7] = [META_TABLE, META_VERSION, META_DOC, META_COLUMNS, META_DATASET, META_CACHE_KEY, META_COMMIT];

static COMMIT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the commit written into every Parquet file of this process (the binary does, once, at start;
/// later calls are ignored).
pub fn set_build_commit(commit: &str) {
    let _ = COMMIT.set(commit.to_string());
}

/// The commit written into Parquet files: the one [`set_build_commit`] gave, else `unknown`.
pub fn build_commit() -> &'static str {
    COMMIT.get().map_or("unknown", String::as_str)
}

/// Where a file comes from, beyond its table: the dataset and the cache key of the stage run that
/// wrote it (both unknown for the file tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct Provenance<'a> {
    /// The dataset's name.
    pub dataset: Option<&'a str>,
    /// The writing stage run's cache key.
    pub cache_key: Option<&'a str>,
}

/// The key-value metadata of a table: its name, schema version, doc and column docs (a JSON object
/// `{column: doc}`; the column order is the file's).
pub fn table_metadata(spec: &TableSpec) -> Vec<(String, String)> {
    let mut cols = String::from("{");
    for (i, c) in spec.columns.iter().enumerate() {
        if i > 0 {
            cols.push_str(", ");
        }
        cols.push_str(&format!("{}: {}", json_string(c.name), json_string(c.doc)));
    }
    cols.push('}');
    vec![
        (META_TABLE.to_string(), spec.name.to_string()),
        (META_VERSION.to_string(), spec.version.to_string()),
        (META_DOC.to_string(), spec.doc.to_string()),
        (META_COLUMNS.to_string(), cols),
    ]
}

/// The key-value metadata of a file of table `spec` (none: a batch that is no declared table gets
/// the provenance keys only), in [`META_KEYS`] order: fixed per build, so that the same data still
/// gives the same bytes.
pub fn file_metadata(spec: Option<&TableSpec>, prov: &Provenance<'_>) -> Vec<(String, String)> {
    let mut out = spec.map(table_metadata).unwrap_or_default();
    if let Some(d) = prov.dataset {
        out.push((META_DATASET.to_string(), d.to_string()));
    }
    if let Some(k) = prov.cache_key {
        out.push((META_CACHE_KEY.to_string(), k.to_string()));
    }
    out.push((META_COMMIT.to_string(), build_commit().to_string()));
    out
}

/// A JSON string literal (the column docs' object is built by hand to keep the file's column order).
fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The declared table a batch is (its schema's `tgrag.table`), if any.
fn spec_of(batch: &RecordBatch) -> Option<&'static TableSpec> {
    batch.schema().metadata().get(META_TABLE).and_then(|t| crate::tables::by_name(t).ok())
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

/// Writes `batch` as Parquet into `file`, flushed and synced (`path` names it in errors), with the
/// key-value metadata of table `spec` and `prov` ([`file_metadata`]). The batch's own schema
/// metadata is replaced by the table's name and version (a batch read from another table carries
/// that table's keys).
fn write_parquet_into(file: &File, path: &Path, batch: &RecordBatch, spec: Option<&TableSpec>, prov: &Provenance<'_>) -> Result<()> {
    let pq = |e: parquet::errors::ParquetError| SchemaError::parquet_write(path, &e);
    let meta = file_metadata(spec, prov);
    let schema_meta: std::collections::HashMap<String, String> =
        meta.iter().filter(|(k, _)| k == META_TABLE || k == META_VERSION).cloned().collect();
    let schema = std::sync::Arc::new(batch.schema().as_ref().clone().with_metadata(schema_meta));
    let batch =
        RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| SchemaError::arrow(path.display().to_string(), e))?;
    // The writer borrows the file, so that `close` flushes (an io error such as a full disk surfaces
    // there as itself) and the file is still ours to sync.
    let mut w = ArrowWriter::try_new(file, schema, Some(writer_properties(&meta))).map_err(pq)?;
    w.write(&batch).map_err(pq)?;
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

/// Writes `batch` as Parquet into a fresh temporary file beside `path` ([`create_tmp_for`]) as
/// table `spec` (none: the batch's own `tgrag.table`), with the dataset and cache key of `prov` in
/// the key-value metadata ([`file_metadata`]), and returns its name; [`commit`] moves it into place.
/// On any failure the temporary file is removed and the error names the cause (no space left, ...).
/// Unchecked: outputs go through [`write_table_tmp_with`].
fn write_parquet_tmp_with(path: &Path, batch: &RecordBatch, spec: Option<&TableSpec>, prov: &Provenance<'_>) -> Result<PathBuf> {
    let spec = spec.or_else(|| spec_of(batch));
    fill_tmp(path, |file, tmp| write_parquet_into(file, tmp, batch, spec, prov))
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

/// Writes Parquet atomically (a reader sees either the old file or the whole new one) without any
/// check: for files that are no tgrag table, such as the inputs, hostile ones included, that tests
/// hand to the commands. Every file tgrag itself writes goes through [`write_table`] or
/// [`write_table_with`] (checked against its declaration).
pub fn write_parquet_atomic(path: &Path, batch: &RecordBatch) -> Result<()> {
    write_parquet_atomic_with(path, batch, None, &Provenance::default())
}

/// [`write_parquet_atomic`] with the table and provenance of [`write_parquet_tmp_with`].
fn write_parquet_atomic_with(path: &Path, batch: &RecordBatch, spec: Option<&TableSpec>, prov: &Provenance<'_>) -> Result<()> {
    let tmp = write_parquet_tmp_with(path, batch, spec, prov)?;
    commit(&tmp, path).inspect_err(|_| discard(std::slice::from_ref(&tmp)))
}

/// Writes the declared table `spec` atomically: the batch is checked against the declaration first
/// ([`validate::check_written`]: columns, order, types, required values), so a file that is no
/// declared table is never written. The writer of the file tools' outputs.
pub fn write_table(spec: &TableSpec, path: &Path, batch: &RecordBatch) -> Result<()> {
    write_table_with(spec, path, batch, &Provenance::default())
}

/// [`write_table`] with the dataset and cache key of `prov` in the file's key-value metadata.
pub fn write_table_with(spec: &TableSpec, path: &Path, batch: &RecordBatch, prov: &Provenance<'_>) -> Result<()> {
    validate::check_written(spec, batch)?;
    write_parquet_atomic_with(path, batch, Some(spec), prov)
}

/// [`write_table`] into a fresh temporary file beside `path`, for writers that commit several files
/// together ([`commit_all`]) or later (a stage's outputs, committed by the runner).
pub fn write_table_tmp(spec: &TableSpec, path: &Path, batch: &RecordBatch) -> Result<PathBuf> {
    write_table_tmp_with(spec, path, batch, &Provenance::default())
}

/// [`write_table_tmp`] with the dataset and cache key of `prov` in the file's key-value metadata.
pub fn write_table_tmp_with(spec: &TableSpec, path: &Path, batch: &RecordBatch, prov: &Provenance<'_>) -> Result<PathBuf> {
    validate::check_written(spec, batch)?;
    write_parquet_tmp_with(path, batch, Some(spec), prov)
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

    fn kv(path: &Path) -> Vec<(String, String)> {
        let file = File::open(path).expect("open");
        let b = ParquetRecordBatchReaderBuilder::try_new(file).expect("parquet");
        let kv = b.metadata().file_metadata().key_value_metadata().cloned().unwrap_or_default();
        kv.into_iter().filter(|k| k.key != "ARROW:schema").map(|k| (k.key, k.value.unwrap_or_default())).collect()
    }

    #[test]
    fn every_file_carries_its_table_docs_and_provenance_in_key_value_metadata() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("edges.parquet");
        let prov = Provenance { dataset: Some("synthetic"), cache_key: Some("abc123") };
        write_parquet_atomic_with(&p, &sample(), None, &prov).expect("write");
        let want: Vec<(String, String)> = [
            ("tgrag.table", "edges"),
            ("tgrag.schema_version", "1"),
            ("tgrag.doc", "One row per typed relation between two existing nodes."),
            ("tgrag.columns", r#"{"src": "source node_id", "dst": "destination node_id", "relation": "relation type"}"#),
            ("tgrag.dataset", "synthetic"),
            ("tgrag.cache_key", "abc123"),
            ("tgrag.commit", build_commit()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(kv(&p), want);
        assert_eq!(want.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), META_KEYS);
        // A file tool's write: the table's keys and the commit, no dataset or cache key.
        write_parquet_atomic(&p, &sample()).expect("write");
        let keys: Vec<String> = kv(&p).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["tgrag.table", "tgrag.schema_version", "tgrag.doc", "tgrag.columns", "tgrag.commit"]);
        // A batch carrying another table's schema metadata is written as the table it is given.
        let other = sample().with_schema(crate::tables::EDGES.schema()).expect("schema");
        let meta = std::collections::HashMap::from([(META_TABLE.to_string(), "nodes".to_string())]);
        let other =
            RecordBatch::try_new(std::sync::Arc::new(other.schema().as_ref().clone().with_metadata(meta)), other.columns().to_vec())
                .expect("batch");
        write_parquet_atomic_with(&p, &other, Some(&crate::tables::EDGES), &prov).expect("write");
        assert_eq!(kv(&p), want);
        assert_eq!(read_parquet(&p).expect("read").schema().metadata().get(META_TABLE).map(String::as_str), Some("edges"));
        // Quotes, backslashes and control characters in docs stay valid JSON.
        assert_eq!(json_string("a \"b\" \\ c\n\u{1}"), r#""a \"b\" \\ c\n\u0001""#);
    }

    #[test]
    fn a_full_disk_is_named_as_such() {
        // /dev/full answers every write with ENOSPC: it stands for a full disk.
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            eprintln!("skipped: no /dev/full on this system");
            return;
        };
        let err =
            write_parquet_into(&full, Path::new("run.parquet"), &sample(), None, &Provenance::default()).expect_err("full").to_string();
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
        let ta = write_table_tmp(&crate::tables::EDGES, &a, &sample()).expect("tmp a");
        // The second output cannot be written (its folder is gone): the first stays a temporary,
        // which the caller discards, and both old files are untouched.
        let missing = d.path().join("gone/b.parquet");
        assert!(write_table_tmp(&crate::tables::EDGES, &missing, &sample()).is_err());
        discard(&[ta]);
        assert_eq!(std::fs::read(&a).expect("a"), b"old a");
        let left: Vec<String> =
            std::fs::read_dir(d.path()).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert!(left.iter().all(|n| !is_tmp_name(n)), "{left:?}");
        let (ta, tb) = (
            write_table_tmp(&crate::tables::EDGES, &a, &sample()).expect("a"),
            write_table_tmp(&crate::tables::EDGES, &b, &sample()).expect("b"),
        );
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
