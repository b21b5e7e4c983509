//! A folder of canonical tables: `<table>.parquet`, `<table>.csv` or `<table>.tsv` for any of
//! [`crate::INPUT_TABLES`]. CSV/TSV files are read by the same RFC 4180 reader as the raw loaders
//! ([`crate::raw`]: strict UTF-8, `"` quoting, fields across lines) with every column as text, then
//! converted to the canonical types by [`tgrag_schemas::validate::conform`], so that a bad value is
//! reported with its file, data row (0-based, header excluded) and column; bad bytes and an
//! unclosed quote are reported with their line (1-based) and byte. CSV/TSV files are read as streams
//! with a bounded record length ([`crate::raw::read_records`]); a table file that is not a regular
//! file (a folder, a FIFO, a dangling link) is named for what it is, never opened.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use tgrag_schemas::{SchemaError, io, validate};

use crate::raw::{check_regular, missing_column, read_records_each};
use crate::{DatasetError, DatasetTables, INPUT_TABLES, LoadedTable, Result};

/// Reads a CSV (`sep = b','`) or TSV (`sep = b'\t'`) file with a header into an all-utf8 batch.
/// Empty fields, and fields missing at the end of a short row, are nulls (a required column then
/// says "missing value" at that row); a row with more fields than the header is an error. Records
/// go into the columns as they are read (the file's records are never all held as strings).
pub fn read_delimited(path: &Path, sep: u8) -> Result<RecordBatch> {
    let mut header: Option<Vec<String>> = None;
    let mut cols: Vec<StringBuilder> = Vec::new();
    // Blank records seen since the last row with text: rows if more rows follow, else the file's
    // trailing blank lines (no rows).
    let (mut blanks, mut row) = (0usize, 0usize);
    read_records_each(path, sep, |r| {
        let Some(h) = &header else {
            cols = (0..r.len()).map(|_| StringBuilder::new()).collect();
            header = Some(r);
            return Ok(());
        };
        if r.len() == 1 && r[0].is_empty() {
            blanks += 1;
            return Ok(());
        }
        for _ in 0..std::mem::take(&mut blanks) {
            cols.iter_mut().for_each(|c| c.append_null());
            row += 1;
        }
        if r.len() > h.len() {
            return Err(DatasetError::malformed(path, format!("row {row}"), format!("{} fields, the header has {}", r.len(), h.len())));
        }
        for (c, col) in cols.iter_mut().enumerate() {
            match r.get(c) {
                Some(v) if !v.is_empty() => col.append_value(v),
                _ => col.append_null(),
            }
        }
        row += 1;
        Ok(())
    })?;
    let Some(header) = header else {
        return Err(DatasetError::malformed(path, "line 1", "empty file: expected a header line"));
    };
    let fields: Vec<Field> = header.iter().map(|h| Field::new(h.trim(), DataType::Utf8, true)).collect();
    let arrays: Vec<ArrayRef> = cols.iter_mut().map(|c| Arc::new(c.finish()) as ArrayRef).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| SchemaError::arrow(path.display().to_string(), e).into())
}

/// Loads every canonical table present in `dir` (not validated across tables: see
/// [`DatasetTables::validate`]).
pub fn load(dir: &Path) -> Result<DatasetTables> {
    let mut out = DatasetTables::default();
    for spec in INPUT_TABLES {
        let candidates = [("parquet", 0u8), ("csv", b','), ("tsv", b'\t')];
        // Anything by the name counts (a dangling link too): what is not a regular file is an error
        // naming it, not a missing table.
        let found: Vec<_> = candidates
            .iter()
            .map(|&(ext, sep)| (dir.join(format!("{}.{ext}", spec.name)), sep))
            .filter(|(p, _)| std::fs::symlink_metadata(p).is_ok())
            .collect();
        let Some((path, sep)) = found.first().cloned() else { continue };
        if found.len() > 1 {
            return Err(DatasetError::Config(format!(
                "{}: table `{}` is given more than once ({} files); keep one",
                dir.display(),
                spec.name,
                found.len()
            )));
        }
        check_regular(&path)?;
        let raw = if sep == 0 { io::read_parquet(&path)? } else { read_delimited(&path, sep)? };
        // Required columns are checked here so that the error quotes the header within bounds.
        let schema = raw.schema();
        let header: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        if let Some(c) = spec.columns.iter().find(|c| !c.nullable && !header.iter().any(|h| h == c.name)) {
            return Err(missing_column(&path, c.name, &header));
        }
        let batch = validate::conform(spec, &path, &raw)?;
        out.tables.push(LoadedTable { spec, source: path, batch });
    }
    if out.tables.is_empty() {
        return Err(DatasetError::NoTables(dir.to_path_buf()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;
    use tgrag_schemas::columns;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("write");
    }

    #[test]
    fn csv_tables_load_with_canonical_types() {
        let d = tempfile::tempdir().expect("tmp");
        write(d.path(), "nodes.csv", "node_id,node_type,name,doc\n0,paper,A,\"first, doc\"\n1,author,B,second\n");
        write(d.path(), "edges.tsv", "src\tdst\trelation\n1\t0\twrites\n");
        let t = load(d.path()).expect("load");
        t.validate().expect("valid");
        let n = &t.get("nodes").expect("nodes").batch;
        assert_eq!(columns::u32s(n, "node_id").expect("ids").values().to_vec(), vec![0, 1]);
        assert_eq!(columns::strs(n, "doc").expect("doc").value(0), "first, doc");
    }

    /// The streaming reader, records in many 64 KiB blocks: rows across block boundaries in order,
    /// a blank line between rows a row of nulls, blank lines at the end no rows, short rows padded
    /// with nulls, and a row longer than the header named by its data row.
    #[test]
    fn delimited_files_stream_into_columns_row_for_row() {
        let d = tempfile::tempdir().expect("tmp");
        let mut text = String::from("a,b,c\n");
        for i in 0..20_000 {
            text.push_str(&format!("{i},\"x, {i}\",\n"));
        }
        text.push_str("\n7\n\n\n");
        write(d.path(), "t.csv", &text);
        let b = read_delimited(&d.path().join("t.csv"), b',').expect("read");
        assert_eq!(b.num_rows(), 20_002);
        let (a, bb, c) = (columns::strs(&b, "a").expect("a"), columns::strs(&b, "b").expect("b"), columns::strs(&b, "c").expect("c"));
        for i in [0, 1, 4095, 4096, 19_999] {
            assert_eq!((a.value(i), bb.value(i)), (i.to_string().as_str(), format!("x, {i}").as_str()));
            assert!(c.is_null(i));
        }
        assert!(a.is_null(20_000) && bb.is_null(20_000), "a blank line between rows is a row of nulls");
        assert_eq!(a.value(20_001), "7");
        assert!(bb.is_null(20_001) && c.is_null(20_001), "a short row is padded with nulls");
        text.push_str("1,2,3,4\n");
        write(d.path(), "t.csv", &text);
        let err = read_delimited(&d.path().join("t.csv"), b',').expect_err("a long row").to_string();
        assert!(err.contains("row 20004") && err.contains("4 fields, the header has 3"), "{err}");
    }

    #[test]
    fn bad_integer_names_file_row_and_column() {
        let d = tempfile::tempdir().expect("tmp");
        write(d.path(), "nodes.csv", "node_id,node_type,name,doc\n0,paper,A,x\nseven,paper,B,y\n");
        write(d.path(), "edges.csv", "src,dst,relation\n");
        let err = load(d.path()).expect_err("must fail").to_string();
        assert!(err.contains("nodes.csv") && err.contains("row 1") && err.contains("`node_id`"), "{err}");
        assert!(err.contains("seven"), "{err}");
    }

    #[test]
    fn unclosed_quotes_bad_bytes_and_long_rows_are_located() {
        let d = tempfile::tempdir().expect("tmp");
        write(d.path(), "edges.csv", "src,dst,relation\n");
        write(d.path(), "nodes.csv", "node_id,node_type,name,doc\n0,paper,A,x\n1,paper,B,\"never closed\n2,paper,C,z\n");
        let err = load(d.path()).expect_err("quote").to_string();
        assert!(err.contains("nodes.csv") && err.contains("line 3") && err.contains("never closed"), "{err}");
        std::fs::write(d.path().join("nodes.csv"), b"node_id,node_type,name,doc\n0,paper,A,x\n1,paper,\xff\xfe,y\n").expect("write");
        let err = load(d.path()).expect_err("utf8").to_string();
        assert!(err.contains("nodes.csv") && err.contains("line 3") && err.contains("not valid UTF-8"), "{err}");
        write(d.path(), "nodes.csv", "node_id,node_type,name,doc\n0,paper,A,x,extra\n");
        let err = load(d.path()).expect_err("long row").to_string();
        assert!(err.contains("row 0") && err.contains("5 fields, the header has 4"), "{err}");
        // A short row: the missing field is a null, named by column.
        write(d.path(), "nodes.csv", "node_id,node_type,name,doc\n0,paper,A,x\n1,paper\n");
        let err = load(d.path()).and_then(|t| t.validate().map(|()| t)).expect_err("short row").to_string();
        assert!(err.contains("row 1") && err.contains("`name`") && err.contains("missing value"), "{err}");
    }
}
