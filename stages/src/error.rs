//! Errors of stages, by whose fault: bad input data, bad configuration, a missing upstream artifact,
//! a failing dependency, or a bug in tgrag (`Internal`).

use std::path::PathBuf;

use tgrag_datasets::DatasetError;
use tgrag_schemas::SchemaError;

/// Why a stage failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// Input data breaks a table contract or a file is unreadable.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The dataset could not be loaded.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The stage's configuration is invalid.
    #[error("stage `{stage}`: invalid configuration: {message}")]
    Config { stage: String, message: String },
    /// An upstream artifact is missing (run the upstream stage first).
    #[error("{path}: missing input (produced by stage `{stage}`)")]
    MissingInput { stage: String, path: PathBuf },
    /// Input data is inconsistent (the message names the table, row and field).
    #[error("{0}")]
    Input(String),
    /// A model the stage needs is absent or is not the pinned file (fix: `make models`).
    #[error("{0}")]
    ModelFile(String),
    /// Loading or running a model failed.
    #[error(transparent)]
    Model(#[from] tgrag_models::ModelError),
    /// SQL aggregation failed.
    #[error("datafusion: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A bug in tgrag.
    #[error("internal error (likely a bug in tgrag): {0}")]
    Internal(String),
}

impl StageError {
    /// A model error of `stage` while it trains the model it calls `model` (`gretriever-gt on
    /// explagraphs`): a training option out of range or a diverged training (a loss that is not
    /// finite) is the configuration's fault, reported as [`StageError::Config`] naming that model,
    /// its seed and epoch; any other model error is passed on.
    pub fn training(stage: &str, model: &str, e: tgrag_models::ModelError) -> StageError {
        if e.is_config() {
            StageError::Config { stage: stage.to_string(), message: e.for_model(model).to_string() }
        } else {
            StageError::Model(e)
        }
    }
}

/// Arrow refusing a batch a stage built from its own columns is a bug in that stage (inputs are
/// validated by the schemas layer before any stage sees them).
impl From<arrow::error::ArrowError> for StageError {
    fn from(e: arrow::error::ArrowError) -> Self {
        StageError::Internal(format!("arrow: {e}"))
    }
}

/// Result of the stage layer.
pub type Result<T, E = StageError> = std::result::Result<T, E>;
