//! Errors of stages, by whose fault: bad input data, bad configuration, a missing upstream artifact,
//! a failing dependency, or a bug in tgrag (`Internal`).

use std::path::PathBuf;

use tgrag_datasets::DatasetError;
use tgrag_schemas::{Fault, SchemaError};

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

impl StageError {
    /// Whose fault this is ([`Fault`]; the binary's exit code): the layers below say it for their
    /// own errors; a stage's configuration, a missing upstream artifact or model file are the
    /// configuration's; inconsistent data the input's; a file-system error the environment's;
    /// DataFusion failing on tables tgrag validated is a bug, unless it ran out of resources.
    pub fn fault(&self) -> Fault {
        match self {
            StageError::Schema(e) => e.fault(),
            StageError::Dataset(e) => e.fault(),
            StageError::Config { .. } | StageError::MissingInput { .. } | StageError::ModelFile(_) => Fault::Config,
            StageError::Input(_) => Fault::Input,
            StageError::Model(e) => model_fault(e),
            StageError::DataFusion(datafusion::error::DataFusionError::ResourcesExhausted(_)) => Fault::Environment,
            StageError::DataFusion(_) | StageError::Internal(_) => Fault::Internal,
            StageError::Io { source, .. } => Fault::of_io(source.kind()),
        }
    }
}

/// Whose fault a model error is: a model folder that is missing, malformed or does not fit the
/// architecture (or lacks a file), a training option out of range or a diverged training are the
/// configuration's (the user chose the folder and the settings); other file-system errors the
/// environment's. (Here and
/// not in `models`, which does not depend on `schemas`.)
pub fn model_fault(e: &tgrag_models::ModelError) -> Fault {
    use tgrag_models::ModelError;
    match e {
        // A file missing from the model folder the user named is that choice's fault.
        ModelError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Fault::Config,
        ModelError::Io { .. } => Fault::Environment,
        ModelError::BadFile { .. }
        | ModelError::Weights { .. }
        | ModelError::Tokenizer { .. }
        | ModelError::Config { .. }
        | ModelError::Diverged { .. } => Fault::Config,
        ModelError::Internal(_) => Fault::Internal,
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
