//! Errors of model loading and inference.

use std::path::PathBuf;

/// What went wrong, and whose fault it is: a model folder the user gave (missing or malformed
/// files, weights that do not fit the architecture) or an internal failure.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {reason}")]
    BadFile { path: PathBuf, reason: String },
    /// Strict weight loading: a tensor the architecture needs is missing, has the wrong shape or
    /// type, or the file holds a tensor the architecture does not use.
    #[error("{path}: weights do not fit the model: {reason}")]
    Weights { path: PathBuf, reason: String },
    #[error("tokenizer {path}: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
