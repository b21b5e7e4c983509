//! Helpers shared by the raw-file loaders: strict UTF-8 reads, RFC 4180 CSV, TSV lines, and building
//! canonical batches with the file they came from.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray, UInt32Array};
use tgrag_schemas::TableSpec;

use crate::error::{DatasetError, Result};
use crate::{DatasetTables, LoadedTable};

/// The UTF-8 byte order mark that Excel and pandas' `utf-8-sig` put at the start of a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The longest record a delimited reader accepts by default (a line, or the lines of a quoted field):
/// 64 MiB. `TGRAG_MAX_LINE_BYTES` sets another bound.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 64 << 20;

/// The record-length bound of the delimited readers: `TGRAG_MAX_LINE_BYTES` (a positive integer) or
/// [`DEFAULT_MAX_RECORD_BYTES`].
pub fn max_record_bytes() -> Result<usize> {
    match std::env::var("TGRAG_MAX_LINE_BYTES") {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT_MAX_RECORD_BYTES),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| DatasetError::Config(format!("TGRAG_MAX_LINE_BYTES={}: expected a positive number of bytes", quote(&v)))),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(DatasetError::Config(format!("TGRAG_MAX_LINE_BYTES={}: expected a positive number of bytes", quote(&v.to_string_lossy()))))
        }
    }
}

/// The cap and the quoting of input in error messages: one helper for every crate (`schemas`).
pub use tgrag_schemas::{QUOTE_CHARS, quote};

/// Checks that `path` is a regular file (or a link to one) without opening it, so that a FIFO is never
/// opened (that would block) and a folder, a device or a dangling link is named for what it is.
pub fn check_regular(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::fs::symlink_metadata(path).is_ok() => {
            let to = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
            return Err(DatasetError::NotRegular {
                path: path.to_path_buf(),
                what: format!("a dangling symbolic link (to {})", quote(&to)),
            });
        }
        Err(e) => return Err(DatasetError::io(path, e)),
    };
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "something else"
    };
    Err(DatasetError::NotRegular { path: path.to_path_buf(), what: what.to_string() })
}

/// Opens a regular file for reading ([`check_regular`] first).
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    check_regular(path)?;
    std::fs::File::open(path).map_err(|e| DatasetError::io(path, e))
}

/// The line (1-based) of byte `at` of `bytes`.
fn line_of(bytes: &[u8], at: usize) -> usize {
    1 + bytes[..at.min(bytes.len())].iter().filter(|&&b| b == b'\n').count()
}

/// Text as a file holds it: a leading byte order mark removed; a NUL byte (binary data) and invalid
/// UTF-8 are errors naming the line and byte offset (counted in the file, the mark included).
pub fn text_of(bytes: Vec<u8>, path: &Path) -> Result<String> {
    let skip = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(DatasetError::malformed(path, format!("line {}, byte {at}", line_of(&bytes, at)), NUL_REASON));
    }
    let mut bytes = bytes;
    bytes.drain(..skip);
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = line_of(e.as_bytes(), at);
        DatasetError::malformed(path, format!("line {line}, byte {}", at + skip), "not valid UTF-8")
    })
}

const NUL_REASON: &str = "a NUL byte: this is binary data, not text";

/// The whole file as UTF-8 ([`text_of`]: the byte order mark removed, NUL bytes and invalid UTF-8
/// refused with their line and byte offset); what is not a regular file is refused for what it is.
pub fn read_utf8(path: &Path) -> Result<String> {
    let mut file = open_regular(path)?;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DatasetError::io(path, e)),
        };
        // Binary data is refused at its first NUL byte, before the rest is read (a disk image named
        // `*.json` is not read whole).
        if let Some(i) = buf[..n].iter().position(|&b| b == 0) {
            let at = bytes.len() + i;
            bytes.extend_from_slice(&buf[..i]);
            return Err(DatasetError::malformed(path, format!("line {}, byte {at}", line_of(&bytes, at)), NUL_REASON));
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    text_of(bytes, path)
}

/// RFC 4180 CSV as pandas reads `to_csv` output: `"` quoting with `""` escapes, fields may hold
/// newlines and carriage returns inside quotes; records end at `\n` (or `\r\n`).
pub fn parse_csv(text: &str, path: &Path) -> Result<Vec<Vec<String>>> {
    parse_delimited(text, path, b',')
}

/// [`parse_csv`] with another separator (pandas `read_csv(sep='\t')` still honours `"` quoting).
pub fn parse_delimited(text: &str, path: &Path, sep: u8) -> Result<Vec<Vec<String>>> {
    parse_records(text.as_bytes(), path, sep)
}

/// The records of a delimited file ([`parse_records`]), read as a stream: the file is never held
/// whole, only the record being read, up to [`max_record_bytes`].
pub fn read_records(path: &Path, sep: u8) -> Result<Vec<Vec<String>>> {
    parse_records(std::io::BufReader::with_capacity(1 << 16, open_regular(path)?), path, sep)
}

/// [`read_records`] handing each record to `each` as soon as it is read: nothing but the records of
/// one 64 KiB block is held.
pub fn read_records_each(path: &Path, sep: u8, each: impl FnMut(Vec<String>) -> Result<()>) -> Result<()> {
    parse_records_each(std::io::BufReader::with_capacity(1 << 16, open_regular(path)?), path, sep, each)
}

/// Delimited records from a byte stream (see [`parse_csv`]): a leading byte order mark is skipped, a
/// NUL byte is refused as binary data and invalid UTF-8 as such, both with their line and byte
/// offset; a record longer than [`max_record_bytes`] is refused with the line it starts on, so that
/// memory stays bounded by the bound whatever the input.
pub fn parse_records(input: impl Read, path: &Path, sep: u8) -> Result<Vec<Vec<String>>> {
    let mut records = Vec::new();
    parse_records_each(input, path, sep, |r| {
        records.push(r);
        Ok(())
    })?;
    Ok(records)
}

/// [`parse_records`] handing each record to `each` in order, after each block of input.
pub fn parse_records_each(input: impl Read, path: &Path, sep: u8, mut each: impl FnMut(Vec<String>) -> Result<()>) -> Result<()> {
    let mut p = RecordParser::new(path, sep, max_record_bytes()?);
    let mut input = std::io::BufReader::new(input);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DatasetError::io(path, e)),
        };
        for &b in &buf[..n] {
            p.feed(b)?;
        }
        for r in p.records.drain(..) {
            each(r)?;
        }
    }
    p.finish()?.into_iter().try_for_each(each)
}

/// What the byte before this one left pending.
#[derive(Clone, Copy, PartialEq)]
enum Pending {
    None,
    /// A `"` inside quotes: an escaped quote if another `"` follows, else the closing quote.
    Quote,
    /// A `\r` outside quotes: dropped before `\n`, kept as text otherwise.
    Cr,
}

/// The byte-level state machine of [`parse_records`] (the separators, quotes and line ends are ASCII,
/// so they never occur inside a multi-byte UTF-8 character).
struct RecordParser<'a> {
    path: &'a Path,
    sep: u8,
    max: usize,
    records: Vec<Vec<String>>,
    rec: Vec<String>,
    field: Vec<u8>,
    /// Offset in the file of the next byte, and of the first byte of the current field.
    offset: usize,
    field_start: usize,
    /// The current line (1-based), the line the current record starts on, the line a quote opened.
    line: usize,
    rec_line: usize,
    opened: usize,
    rec_bytes: usize,
    in_quotes: bool,
    at_field_start: bool,
    pending: Pending,
}

impl<'a> RecordParser<'a> {
    fn new(path: &'a Path, sep: u8, max: usize) -> Self {
        RecordParser {
            path,
            sep,
            max,
            records: Vec::new(),
            rec: Vec::new(),
            field: Vec::new(),
            offset: 0,
            field_start: 0,
            line: 1,
            rec_line: 1,
            opened: 1,
            rec_bytes: 0,
            in_quotes: false,
            at_field_start: true,
            pending: Pending::None,
        }
    }

    fn feed(&mut self, b: u8) -> Result<()> {
        let at = self.offset;
        self.offset += 1;
        if at < BOM.len() && b == BOM[at] && self.rec.is_empty() && self.field.len() == at {
            // A byte order mark is no text: kept aside until it is complete, then dropped.
            self.field.push(b);
            if at + 1 == BOM.len() {
                self.field.clear();
                self.field_start = self.offset;
            }
            return Ok(());
        }
        if b == 0 {
            return Err(DatasetError::malformed(self.path, format!("line {}, byte {at}", self.line), NUL_REASON));
        }
        self.rec_bytes += 1;
        if self.rec_bytes > self.max {
            return Err(DatasetError::malformed(
                self.path,
                format!("line {}", self.rec_line),
                format!(
                    "a record longer than {} bytes (not a delimited text file? set TGRAG_MAX_LINE_BYTES to allow longer records)",
                    self.max
                ),
            ));
        }
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Quote if b == b'"' => {
                self.field.push(b'"');
                return Ok(());
            }
            Pending::Quote => self.in_quotes = false,
            Pending::Cr if b == b'\n' => {}
            Pending::Cr => {
                self.field.push(b'\r');
                self.at_field_start = false;
            }
            Pending::None => {}
        }
        if self.in_quotes {
            match b {
                b'"' => self.pending = Pending::Quote,
                b => {
                    if b == b'\n' {
                        self.line += 1;
                    }
                    self.field.push(b);
                }
            }
            return Ok(());
        }
        match b {
            b'"' if self.at_field_start => {
                self.in_quotes = true;
                self.opened = self.line;
                // The field's text starts after the quote (byte offsets in errors count from there).
                self.field_start = self.offset;
                self.at_field_start = false;
            }
            b if b == self.sep => {
                self.end_field()?;
                self.at_field_start = true;
            }
            b'\r' => self.pending = Pending::Cr,
            b'\n' => {
                self.end_field()?;
                self.records.push(std::mem::take(&mut self.rec));
                self.at_field_start = true;
                self.line += 1;
                self.rec_line = self.line;
                self.rec_bytes = 0;
            }
            b => {
                self.field.push(b);
                self.at_field_start = false;
            }
        }
        Ok(())
    }

    fn end_field(&mut self) -> Result<()> {
        let bytes = std::mem::take(&mut self.field);
        let start = std::mem::replace(&mut self.field_start, self.offset);
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = self.line + 1 - line_of(&e.as_bytes()[at..], usize::MAX);
            DatasetError::malformed(self.path, format!("line {line}, byte {}", start + at), "not valid UTF-8")
        })?;
        self.rec.push(text);
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<Vec<String>>> {
        match self.pending {
            Pending::Quote => self.in_quotes = false,
            Pending::Cr => self.field.push(b'\r'),
            Pending::None => {}
        }
        if self.in_quotes {
            return Err(DatasetError::malformed(
                self.path,
                format!("line {}", self.opened),
                "a quoted field opened here is never closed (truncated file?)",
            ));
        }
        if !self.field.is_empty() || !self.rec.is_empty() {
            self.end_field()?;
            let rec = std::mem::take(&mut self.rec);
            self.records.push(rec);
        }
        Ok(self.records)
    }
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
        Self::read_sep(path, b',')
    }

    /// A delimited file with a header and `"` quoting (pandas `read_csv(sep=…)`), read as a stream
    /// ([`read_records`]).
    pub fn read_sep(path: &Path, sep: u8) -> Result<Self> {
        let mut records = read_records(path, sep)?;
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
        self.header.iter().position(|h| h == name).ok_or_else(|| missing_column(&self.path, name, &self.header))
    }

    /// A field parsed as an integer type, with the row and column in the error.
    pub fn int<T: std::str::FromStr>(&self, row: usize, col: usize) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let v = &self.rows[row][col];
        v.trim().parse::<T>().map_err(|e| {
            DatasetError::malformed(
                &self.path,
                format!("row {row}, column {}", quote(&self.header[col])),
                format!("`{}` is not an integer: {e}", quote(v)),
            )
        })
    }
}

/// A header without a column: the error names the file and quotes the header ([`quote`]).
pub fn missing_column(path: &Path, name: &str, header: &[String]) -> DatasetError {
    DatasetError::malformed(path, "header", format!("missing column `{name}` (the header is `{}`)", quote(&header.join(","))))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestResult, malformed_at, write};

    fn parse(bytes: &[u8], max: usize) -> Result<Vec<Vec<String>>> {
        let mut p = RecordParser::new(Path::new("t.csv"), b',', max);
        for &b in bytes {
            p.feed(b)?;
        }
        p.finish()
    }

    #[test]
    fn records_as_pandas_reads_them_with_and_without_a_byte_order_mark() -> TestResult {
        let text = b"a,b\r\n\"x, \"\"y\"\"\",\"two\nlines\"\n1,\r\n";
        let want = vec![vec!["a", "b"], vec!["x, \"y\"", "two\nlines"], vec!["1", ""]];
        assert_eq!(parse(text, 1 << 20)?, want);
        let mut bom = BOM.to_vec();
        bom.extend_from_slice(text);
        assert_eq!(parse(&bom, 1 << 20)?, want, "the mark is no part of the first column's name");
        // A lone carriage return is text; a closing quote may be followed by text.
        assert_eq!(parse(b"a\rb,\"c\"d", 100)?, vec![vec!["a\rb", "cd"]]);
        assert_eq!(parse(BOM, 100)?, Vec::<Vec<String>>::new());
        Ok(())
    }

    #[test]
    fn nul_bytes_bad_utf8_and_overlong_records_are_located() -> TestResult {
        let (_, at, reason) = malformed_at(parse(b"a,b\n1,\0\0\n", 100).err().ok_or("NUL accepted")?)?;
        assert_eq!((at.as_str(), reason.as_str()), ("line 2, byte 6", NUL_REASON));
        let (_, at, reason) = malformed_at(parse(b"a,b\n1,\"x\n\xff\"\n", 100).err().ok_or("bad UTF-8 accepted")?)?;
        assert_eq!((at.as_str(), reason.as_str()), ("line 3, byte 9", "not valid UTF-8"));
        let (_, at, reason) = malformed_at(parse(b"a,b\nxxxxxxxxxxxx\n", 10).err().ok_or("long record accepted")?)?;
        assert_eq!(at, "line 2");
        assert!(reason.starts_with("a record longer than 10 bytes"), "{reason}");
        Ok(())
    }

    #[test]
    fn an_endless_record_stops_at_the_bound_with_bounded_memory() -> TestResult {
        // A stream that never ends and never breaks a line: reading stops at the bound, so the memory
        // held is the bound, whatever the input's size.
        let mut p = RecordParser::new(Path::new("endless.csv"), b',', 1 << 20);
        let mut fed = 0usize;
        let err = loop {
            if let Err(e) = p.feed(b'x') {
                break e;
            }
            fed += 1;
            assert!(fed <= 1 << 20, "read past the bound");
        };
        assert_eq!(fed, 1 << 20);
        assert!(p.field.capacity() <= 2 << 20, "field buffer {}", p.field.capacity());
        let (_, at, _) = malformed_at(err)?;
        assert_eq!(at, "line 1");
        Ok(())
    }

    #[test]
    fn text_files_lose_their_mark_and_refuse_nul_bytes() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let p = write(tmp.path(), "a.json", b"\xEF\xBB\xBF{\"a\": 1}\n")?;
        assert_eq!(read_utf8(&p)?, "{\"a\": 1}\n");
        let p = write(tmp.path(), "b.json", b"{\n\"a\": \0}")?;
        let (_, at, _) = malformed_at(read_utf8(&p).err().ok_or("NUL accepted")?)?;
        assert_eq!(at, "line 2, byte 7");
        let p = write(tmp.path(), "c.csv", b"\xEF\xBB\xBFid,name\n1,x\n")?;
        let csv = Csv::read(&p)?;
        assert_eq!((csv.col("id")?, csv.rows.len()), (0, 1));
        Ok(())
    }

    #[test]
    fn quotes_are_capped_and_escaped() {
        assert_eq!(quote("a\0b\u{feff}\x1b"), "a\\0b\\u{feff}\\u{1b}");
        let long = "é".repeat(QUOTE_CHARS + 50);
        let q = quote(&long);
        assert!(q.starts_with(&"é".repeat(QUOTE_CHARS)) && q.ends_with("… (50 more characters)"), "{q}");
        assert_eq!(quote("plain"), "plain");
    }

    #[test]
    fn what_is_not_a_regular_file_is_named_for_what_it_is() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("nodes.csv");
        std::fs::create_dir(&dir)?;
        let link = tmp.path().join("edges.csv");
        std::os::unix::fs::symlink(tmp.path().join("gone"), &link)?;
        let fifo = tmp.path().join("queries.csv");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
        let mut cases =
            vec![(dir, "a directory".to_string()), (link, format!("a dangling symbolic link (to {})", tmp.path().join("gone").display()))];
        if made {
            cases.push((fifo, "a FIFO".to_string()));
        }
        for (p, want) in cases {
            // Never opened: a FIFO without a writer would block here.
            match read_records(&p, b',') {
                Err(DatasetError::NotRegular { path, what }) => assert_eq!((path, what), (p, want)),
                other => return Err(format!("{}: {other:?}", p.display()).into()),
            }
        }
        Ok(())
    }
}
