//! Helpers shared by the raw-file loaders: strict UTF-8 reads, RFC 4180 CSV, TSV lines, and building
//! canonical batches with the file they came from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray, UInt32Array};
use tgrag_schemas::TableSpec;

use crate::error::{DatasetError, Result};
use crate::{DatasetTables, LoadedTable};

/// The whole file as UTF-8; invalid bytes are an error naming the byte offset and line.
pub fn read_utf8(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| DatasetError::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        DatasetError::malformed(path, format!("line {line}, byte {at}"), "not valid UTF-8")
    })
}

/// RFC 4180 CSV as pandas reads `to_csv` output: `"` quoting with `""` escapes, fields may hold
/// newlines and carriage returns inside quotes; records end at `\n` (or `\r\n`).
pub fn parse_csv(text: &str, path: &Path) -> Result<Vec<Vec<String>>> {
    parse_delimited(text, path, ',')
}

/// [`parse_csv`] with another separator (pandas `read_csv(sep='\t')` still honours `"` quoting).
pub fn parse_delimited(text: &str, path: &Path, sep: char) -> Result<Vec<Vec<String>>> {
    let mut records = Vec::new();
    let mut rec: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut in_quotes = false;
    let mut at_field_start = true;
    let mut line = 1usize;
    let mut opened = 1usize;
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                c => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c)
                }
            }
            continue;
        }
        match c {
            '"' if at_field_start => {
                in_quotes = true;
                opened = line;
                at_field_start = false;
            }
            c if c == sep => {
                rec.push(std::mem::take(&mut field));
                at_field_start = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                rec.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut rec));
                at_field_start = true;
                line += 1;
            }
            c => {
                field.push(c);
                at_field_start = false;
            }
        }
    }
    if in_quotes {
        return Err(DatasetError::malformed(
            path,
            format!("line {opened}"),
            "a quoted field opened here is never closed (truncated file?)",
        ));
    }
    if !field.is_empty() || !rec.is_empty() {
        rec.push(field);
        records.push(rec);
    }
    Ok(records)
}

/// A CSV file with a header: the records and a column lookup that names the file when a column is
/// missing. Rows in error messages are data rows counted from 0, header excluded (`row N`), as
/// everywhere in tgrag; `line N` is a physical line of the file, counted from 1.
pub struct Csv {
    pub path: PathBuf,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Csv {
    pub fn read(path: &Path) -> Result<Self> {
        Self::read_sep(path, ',')
    }

    /// A delimited file with a header and `"` quoting (pandas `read_csv(sep=…)`).
    pub fn read_sep(path: &Path, sep: char) -> Result<Self> {
        let text = read_utf8(path)?;
        let mut records = parse_delimited(&text, path, sep)?;
        if records.is_empty() {
            return Err(DatasetError::malformed(path, "header", "empty file"));
        }
        let header = records.remove(0);
        for (i, r) in records.iter().enumerate() {
            if r.len() != header.len() && !(r.len() == 1 && r[0].is_empty()) {
                return Err(DatasetError::malformed(
                    path,
                    format!("row {i}"),
                    format!("{} fields, the header has {}", r.len(), header.len()),
                ));
            }
        }
        records.retain(|r| !(r.len() == 1 && r[0].is_empty() && header.len() > 1));
        Ok(Csv { path: path.to_path_buf(), header, rows: records })
    }

    /// Index of a column, or an error naming the file.
    pub fn col(&self, name: &str) -> Result<usize> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| DatasetError::malformed(&self.path, "header", format!("missing column `{name}`")))
    }

    /// A field parsed as an integer type, with the row and column in the error.
    pub fn int<T: std::str::FromStr>(&self, row: usize, col: usize) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let v = &self.rows[row][col];
        v.trim().parse::<T>().map_err(|e| {
            DatasetError::malformed(&self.path, format!("row {row}, column {}", self.header[col]), format!("`{v}` is not an integer: {e}"))
        })
    }
}

/// Collects canonical batches, each with the file it came from.
pub struct Tables {
    out: DatasetTables,
}

impl Tables {
    pub fn new() -> Self {
        Tables { out: DatasetTables::default() }
    }
    pub fn push(&mut self, spec: &'static TableSpec, source: &Path, cols: Vec<ArrayRef>) -> Result<()> {
        let batch = spec.batch(cols)?;
        self.out.tables.push(LoadedTable { spec, source: source.to_path_buf(), batch });
        Ok(())
    }
    pub fn finish(self) -> DatasetTables {
        self.out
    }
}

impl Default for Tables {
    fn default() -> Self {
        Self::new()
    }
}

pub fn u32s(v: impl IntoIterator<Item = u32>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter_values(v))
}

pub fn strs<S: AsRef<str>>(v: impl IntoIterator<Item = S>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

pub fn opt_strs<S: AsRef<str>>(v: impl IntoIterator<Item = Option<S>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(v))
}
