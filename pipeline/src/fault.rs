//! The binary's side of [`Fault`]: errors the commands raise themselves carry their fault
//! ([`Faulted`], made by [`input!`](crate::input) and [`config!`](crate::config)), and [`exit_code`]
//! turns a failure into the process exit code from the first error of its chain that knows whose
//! fault it is (README, "Exit codes").

use std::fmt;
use std::process::ExitCode;

pub use tgrag_schemas::Fault;

/// A command's own error with whose fault it is.
#[derive(Debug)]
pub struct Faulted {
    /// Whose fault.
    pub fault: Fault,
    /// The message (names the file, row and field, or the option).
    pub message: String,
}

impl fmt::Display for Faulted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Faulted {}

/// An error of the input data a command read (`input!("{}: row {r}, column `x`: …", path)`).
#[macro_export]
macro_rules! input {
    ($($arg:tt)*) => {
        anyhow::Error::new($crate::fault::Faulted { fault: $crate::fault::Fault::Input, message: format!($($arg)*) })
    };
}

/// An error of the command's options or settings (`config!("--k must be at least 1")`).
#[macro_export]
macro_rules! config {
    ($($arg:tt)*) => {
        anyhow::Error::new($crate::fault::Faulted { fault: $crate::fault::Fault::Config, message: format!($($arg)*) })
    };
}

/// A bug in tgrag (`internal!("…")`).
#[macro_export]
macro_rules! internal {
    ($($arg:tt)*) => {
        anyhow::Error::new($crate::fault::Faulted { fault: $crate::fault::Fault::Internal, message: format!($($arg)*) })
    };
}

/// `return Err(input!(…))`.
#[macro_export]
macro_rules! bail_input {
    ($($arg:tt)*) => {
        return Err($crate::input!($($arg)*))
    };
}

/// `return Err(config!(…))`.
#[macro_export]
macro_rules! bail_config {
    ($($arg:tt)*) => {
        return Err($crate::config!($($arg)*))
    };
}

/// Whose fault `err` is: the first error of its chain (outermost first) that says so. `None` when
/// none does (an error the binary raised without saying whose fault it is: exit code 1).
pub fn fault_of(err: &anyhow::Error) -> Option<Fault> {
    for cause in err.chain() {
        if let Some(f) = cause.downcast_ref::<Faulted>() {
            return Some(f.fault);
        }
        if let Some(e) = cause.downcast_ref::<tgrag_stages::StageError>() {
            return Some(e.fault());
        }
        if let Some(e) = cause.downcast_ref::<tgrag_datasets::DatasetError>() {
            return Some(e.fault());
        }
        if let Some(e) = cause.downcast_ref::<tgrag_schemas::SchemaError>() {
            return Some(e.fault());
        }
        if let Some(e) = cause.downcast_ref::<tgrag_models::ModelError>() {
            return Some(tgrag_stages::error::model_fault(e));
        }
        if let Some(e) = cause.downcast_ref::<datafusion::error::DataFusionError>() {
            return Some(datafusion_fault(e));
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            return Some(Fault::of_io(e.kind()));
        }
    }
    None
}

/// Whose fault a DataFusion error of `tgrag sql` is (inside a stage it is wrapped in a
/// [`tgrag_stages::StageError`], which says so first): a statement that does not parse or plan, or
/// fails while it runs or hits `--memory-limit`, is the query's, an argument (configuration); a file it cannot read is the
/// input's or the file system's; anything else is DataFusion or tgrag failing (internal).
fn datafusion_fault(e: &datafusion::error::DataFusionError) -> Fault {
    use datafusion::error::DataFusionError as D;
    match e {
        // A query that fails while it runs (a bad cast, a bounded function's limit) is the query's too.
        D::SQL(..)
        | D::Plan(_)
        | D::SchemaError(..)
        | D::NotImplemented(_)
        | D::ResourcesExhausted(_)
        | D::Configuration(_)
        | D::Execution(_)
        | D::External(_) => Fault::Config,
        D::ParquetError(_) | D::ArrowError(..) => Fault::Input,
        D::IoError(_) | D::ObjectStore(_) => Fault::Environment,
        D::Context(_, inner) => datafusion_fault(inner),
        D::Shared(inner) => datafusion_fault(inner),
        D::Diagnostic(_, inner) => datafusion_fault(inner),
        _ => Fault::Internal,
    }
}

/// `err` and its causes in one line, outermost first, joined by `: `, each cause's text once: the
/// typed errors print their source's text themselves (`file: No such file or directory`), so a
/// cause whose text is already in the line is not repeated.
pub fn describe(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// The exit code of a failed command: 3 when the outputs folder is locked by another run, the
/// fault's code otherwise ([`Fault::exit_code`]), 1 when no error of the chain says whose fault it
/// is.
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<crate::lock::Locked>().is_some() {
        return ExitCode::from(crate::lock::EXIT_LOCKED as u8);
    }
    match fault_of(err) {
        Some(f) => ExitCode::from(f.exit_code()),
        None => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    /// Each cause's text once: an I/O error's text that its typed error already printed is not
    /// repeated, context outside it is kept in order.
    #[test]
    fn a_cause_already_printed_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(tgrag_datasets::DatasetError::io("a/b.part", io)).context("fetch cora");
        assert_eq!(describe(&e), "fetch cora: a/b.part: No such file or directory (os error 2)");
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(describe(&plain), "outer: inner");
    }

    #[test]
    fn the_first_typed_error_of_the_chain_decides() {
        let data = tgrag_schemas::SchemaError::UnknownTable("x".into());
        let e = anyhow::Error::new(data).context("reading");
        assert_eq!(fault_of(&e), Some(Fault::Config));
        let e = Err::<(), _>(crate::input!("f.parquet: row 3, column `a`: null")).context("stage `x`").unwrap_err();
        assert_eq!(fault_of(&e), Some(Fault::Input));
        let stage = tgrag_stages::StageError::Dataset(tgrag_datasets::DatasetError::malformed("f", "row 1", "bad"));
        assert_eq!(fault_of(&anyhow::Error::new(stage)), Some(Fault::Input));
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "full");
        assert_eq!(fault_of(&anyhow::Error::new(io).context("writing x")), Some(Fault::Environment));
        assert_eq!(fault_of(&anyhow::anyhow!("plain")), None);
        let model = tgrag_models::ModelError::Weights { path: "m".into(), reason: "width".into() };
        assert_eq!(fault_of(&anyhow::Error::new(model)), Some(Fault::Config));
    }
}
