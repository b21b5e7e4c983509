//! A folder of canonical tables: `<table>.parquet`, `<table>.csv` or `<table>.tsv` for any of
//! [`crate::INPUT_TABLES`]. CSV/TSV files are parsed by polars with every column read as text, then
//! converted to the canonical types by [`tgrag_schemas::validate::conform`], so that a bad value is
//! reported with its file, data row (0-based, header excluded) and column.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use polars::prelude::{CsvReadOptions, DataFrame, SerReader};
use tgrag_schemas::{SchemaError, io, validate};

use crate::{DatasetError, DatasetTables, INPUT_TABLES, LoadedTable, Result};

/// Reads a CSV (`sep = b','`) or TSV (`sep = b'\t'`) file with a header into an all-utf8 batch.
pub fn read_delimited(path: &Path, sep: u8) -> Result<RecordBatch> {
    let format = if sep == b'\t' { "TSV" } else { "CSV" };
    let parse = |e: polars::prelude::PolarsError| DatasetError::Parse { path: path.to_path_buf(), format, message: e.to_string() };
    let df: DataFrame = CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(Some(0))
        .map_parse_options(|o| o.with_separator(sep))
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .map_err(parse)?
        .finish()
        .map_err(parse)?;
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for name in df.get_column_names_owned() {
        let col = df.column(name.as_str()).map_err(parse)?;
        let text = col.str().map_err(parse)?;
        cols.push(Arc::new(text.iter().collect::<StringArray>()));
        fields.push(Field::new(name.as_str(), DataType::Utf8, true));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| SchemaError::arrow(path.display().to_string(), e).into())
}

/// Loads every canonical table present in `dir` (not validated across tables: see
/// [`DatasetTables::validate`]).
pub fn load(dir: &Path) -> Result<DatasetTables> {
    let mut out = DatasetTables::default();
    for spec in INPUT_TABLES {
        let candidates = [("parquet", 0u8), ("csv", b','), ("tsv", b'\t')];
        let found: Vec<_> =
            candidates.iter().map(|&(ext, sep)| (dir.join(format!("{}.{ext}", spec.name)), sep)).filter(|(p, _)| p.is_file()).collect();
        let Some((path, sep)) = found.first().cloned() else { continue };
        if found.len() > 1 {
            return Err(DatasetError::Config(format!(
                "{}: table `{}` is given more than once ({} files); keep one",
                dir.display(),
                spec.name,
                found.len()
            )));
        }
        let raw = if sep == 0 { io::read_parquet(&path)? } else { read_delimited(&path, sep)? };
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

    #[test]
    fn bad_integer_names_file_row_and_column() {
        let d = tempfile::tempdir().expect("tmp");
        write(d.path(), "nodes.csv", "node_id,node_type,name,doc\n0,paper,A,x\nseven,paper,B,y\n");
        write(d.path(), "edges.csv", "src,dst,relation\n");
        let err = load(d.path()).expect_err("must fail").to_string();
        assert!(err.contains("nodes.csv") && err.contains("row 1") && err.contains("`node_id`"), "{err}");
        assert!(err.contains("seven"), "{err}");
    }
}
