//! Errors of loading datasets, by cause.

use std::path::PathBuf;

use tgrag_schemas::SchemaError;

/// Why a dataset could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The data breaks a table's contract, or a file is unreadable (names file, row, column).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A CSV/TSV file could not be parsed.
    #[error("{path}: cannot parse as {format}: {message}")]
    Parse { path: PathBuf, format: &'static str, message: String },
    /// A table needs a companion table that is missing.
    #[error("{source_path}: needs table `{missing}` too, which the dataset lacks")]
    Incomplete { source_path: PathBuf, missing: String },
    /// The dataset provided no table at all.
    #[error("the dataset provides no canonical table")]
    Empty,
    /// No dataset has this name.
    #[error("unknown dataset `{name}`; known: {known}")]
    Unknown { name: String, known: String },
    /// The dataset is known but cannot be loaded by this build.
    #[error("dataset `{name}` is not available: {reason}")]
    NotAvailable { name: String, reason: String },
    /// A folder dataset has no table files.
    #[error("{0}: no table files found (expected e.g. nodes.parquet or nodes.csv)")]
    NoTables(PathBuf),
    /// A dataset option is invalid.
    #[error("invalid dataset option: {0}")]
    Config(String),
    /// A raw file of a real dataset is malformed (bad pickle, tensor, zip entry, CSV row, ...);
    /// `at` names the entry, row or field.
    #[error("{path}: {at}: {reason}")]
    Malformed { path: PathBuf, at: String, reason: String },
    /// Downloading from the Hugging Face hub failed.
    #[error("download of {repo}/{file} failed: {reason}")]
    Download { repo: String, file: String, reason: String },
    /// A path that must be a regular file is something else (`what`: a directory, a FIFO, a dangling
    /// symbolic link, ...); never opened, so that a FIFO cannot block the reader.
    #[error("{path}: is {what}, not a regular file")]
    NotRegular { path: PathBuf, what: String },
    /// Reading a file or folder failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DatasetError {
    /// Whose fault this is ([`tgrag_schemas::Fault`]): malformed, incomplete or empty data, or a
    /// data path that is not a regular file, is the input's; an unknown or unavailable dataset or a
    /// bad dataset option the configuration's; a failed download or file-system error the
    /// environment's.
    pub fn fault(&self) -> tgrag_schemas::Fault {
        use tgrag_schemas::Fault;
        match self {
            DatasetError::Schema(e) => e.fault(),
            DatasetError::Parse { .. }
            | DatasetError::Incomplete { .. }
            | DatasetError::Empty
            | DatasetError::NoTables(_)
            | DatasetError::Malformed { .. }
            | DatasetError::NotRegular { .. } => Fault::Input,
            DatasetError::Unknown { .. } | DatasetError::NotAvailable { .. } | DatasetError::Config(_) => Fault::Config,
            DatasetError::Io { source, .. } => Fault::of_io(source.kind()),
            DatasetError::Download { .. } => Fault::Environment,
        }
    }

    pub fn malformed(path: impl Into<PathBuf>, at: impl Into<String>, reason: impl Into<String>) -> Self {
        DatasetError::Malformed { path: path.into(), at: at.into(), reason: reason.into() }
    }
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DatasetError::Io { path: path.into(), source }
    }
}

/// Result of the dataset layer.
pub type Result<T, E = DatasetError> = std::result::Result<T, E>;
