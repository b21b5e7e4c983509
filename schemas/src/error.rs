//! Errors of the schema layer, split by cause: unreadable input, a data violation (the input's fault),
//! or an internal error (a bug in tgrag).

use std::fmt;
use std::path::PathBuf;

/// Where and why a table's data breaks its contract. Rows are 0-based data rows (header excluded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The file the data came from.
    pub file: PathBuf,
    /// The canonical table the file was read as.
    pub table: String,
    /// 0-based data row of the first offending value, when one row is to blame.
    pub row: Option<usize>,
    /// The offending column, when one column is to blame.
    pub column: Option<String>,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: table `{}`", self.file.display(), self.table)?;
        if let Some(row) = self.row {
            write!(f, ", row {row}")?;
        }
        if let Some(col) = &self.column {
            write!(f, ", column `{col}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Errors of reading, validating and writing canonical tables.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The data breaks the table's contract (the input's fault).
    #[error("invalid data: {0}")]
    Violation(Box<Violation>),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written: the cause is named (no space left, permission denied, ...), and
    /// the partly written file has been removed.
    #[error("{path}: writing failed: {cause}")]
    Write {
        /// The file that could not be written.
        path: PathBuf,
        /// The cause in words.
        cause: String,
    },
    /// A Parquet file is truncated, corrupt or not Parquet at all.
    #[error("{path}: not a readable Parquet file (truncated or corrupt?): {source}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// What the Parquet reader said.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Arrow refused an operation (usually a bug: the table was built with the wrong layout).
    #[error("{context}: {source}")]
    Arrow {
        /// What was being done.
        context: String,
        /// What arrow said.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// No canonical table has this name.
    #[error("unknown table `{0}`; `tgrag schema` lists the tables")]
    UnknownTable(String),
    /// A path tgrag writes into is not what it owns (a symbolic link, a device, ...): someone else's
    /// file or folder stands where an output belongs. Nothing was written through it.
    #[error("{path}: {reason}; tgrag does not write through it (remove it, or choose another outputs folder)")]
    NotOwned {
        /// The path that stands where an output belongs.
        path: PathBuf,
        /// What it is instead of tgrag's own file or folder.
        reason: String,
    },
}

impl SchemaError {
    /// Whose fault this is: a contract violation or an unreadable Parquet file is the input's;
    /// an unknown table name the caller's configuration; a file that is not there the input's
    /// ([`crate::Fault::of_io`]); a write or read the operating system refused, or a path tgrag
    /// does not own, the environment's; arrow refusing a batch tgrag built
    /// is a bug.
    pub fn fault(&self) -> crate::Fault {
        use crate::Fault;
        match self {
            SchemaError::Violation(_) | SchemaError::Parquet { .. } => Fault::Input,
            SchemaError::UnknownTable(_) => Fault::Config,
            SchemaError::Io { source, .. } => Fault::of_io(source.kind()),
            SchemaError::Write { .. } | SchemaError::NotOwned { .. } => Fault::Environment,
            SchemaError::Arrow { .. } => Fault::Internal,
        }
    }
}

/// The most characters an error message quotes from an input.
pub const QUOTE_CHARS: usize = 200;

/// Input text as an error message quotes it: at most [`QUOTE_CHARS`] characters, control and
/// invisible characters escaped (`\0`, `\u{feff}`), and how much was left out. Every error that
/// quotes a value, a header or a line of an input goes through here (`datasets::raw::quote` is
/// this function).
pub fn quote(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    for c in chars.by_ref().take(QUOTE_CHARS) {
        out.extend(c.escape_debug());
    }
    let rest = chars.count();
    if rest > 0 {
        out.push_str(&format!("… ({rest} more characters)"));
    }
    out
}

impl SchemaError {
    /// A violation with every location field given.
    pub fn violation(file: impl Into<PathBuf>, table: &str, row: Option<usize>, column: Option<&str>, message: impl Into<String>) -> Self {
        SchemaError::Violation(Box::new(Violation {
            file: file.into(),
            table: table.to_string(),
            row,
            column: column.map(str::to_string),
            message: message.into(),
        }))
    }

    /// Wraps an arrow error with what was being done.
    pub fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        SchemaError::Arrow { context: context.into(), source }
    }

    /// Wraps an io error with the path involved.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SchemaError::Io { path: path.into(), source }
    }

    /// A write that failed, with its cause in words.
    pub fn write(path: impl Into<PathBuf>, cause: &std::io::Error) -> Self {
        SchemaError::Write { path: path.into(), cause: io_cause(cause) }
    }

    /// A Parquet write that failed: the io cause when there is one (disk full, permission), else
    /// the writer's own message.
    pub fn parquet_write(path: impl Into<PathBuf>, e: &parquet::errors::ParquetError) -> Self {
        let cause = match e {
            parquet::errors::ParquetError::External(inner) => match inner.downcast_ref::<std::io::Error>() {
                Some(io) => io_cause(io),
                None => inner.to_string(),
            },
            other => other.to_string(),
        };
        SchemaError::Write { path: path.into(), cause }
    }
}

/// An io error in words that say what to do about it.
pub fn io_cause(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        StorageFull => "no space left on device (free some space and run again)".to_string(),
        PermissionDenied => "permission denied".to_string(),
        ReadOnlyFilesystem => "read-only file system".to_string(),
        QuotaExceeded => "disk quota exceeded".to_string(),
        _ => e.to_string(),
    }
}

/// Result of the schema layer.
pub type Result<T, E = SchemaError> = std::result::Result<T, E>;
