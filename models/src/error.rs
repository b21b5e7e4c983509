//! Errors of model loading and inference.

use std::path::PathBuf;

/// What went wrong, and whose fault it is: a model folder the user gave (missing or malformed
/// files, weights that do not fit the architecture), a training setting out of range or a training
/// that diverged (the caller's configuration), or an internal failure.
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
    /// A training option out of range (a learning rate that is not a finite number > 0).
    #[error("{model}: {reason}")]
    Config { model: String, reason: String },
    /// Training diverged: a loss that is not a finite number (NaN or infinite; weights blown up,
    /// most often by a learning rate far too large). Training stops at that epoch; nothing it
    /// produced is used.
    #[error("{model}, seed {seed}: the {which} loss is {loss} at epoch {epoch}: training diverged (try a smaller learning rate)")]
    Diverged { model: String, seed: u64, epoch: usize, which: &'static str, loss: f64 },
    #[error("internal error: {0}")]
    Internal(String),
}

impl ModelError {
    /// The same error naming the model as the caller knows it (a trainer names its architecture,
    /// the stage the method: `gretriever-gt on explagraphs`); other errors are returned unchanged.
    pub fn for_model(self, name: &str) -> Self {
        match self {
            ModelError::Config { reason, .. } => ModelError::Config { model: name.to_string(), reason },
            ModelError::Diverged { seed, epoch, which, loss, .. } => {
                ModelError::Diverged { model: name.to_string(), seed, epoch, which, loss }
            }
            other => other,
        }
    }

    /// Whether the caller's configuration is at fault (an option out of range, a diverged training).
    pub fn is_config(&self) -> bool {
        matches!(self, ModelError::Config { .. } | ModelError::Diverged { .. })
    }
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
