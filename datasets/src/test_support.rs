//! Helpers shared by the loaders' tests: locating `../shared/datasets`, unpacking a located error, and
//! writing small input files.

use std::path::{Path, PathBuf};

use crate::DatasetError;

/// Test failures carry the error that caused them (`?` instead of unwrap/expect).
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// `../shared/datasets/<folder>`, or `None` after printing why the test is skipped.
pub fn shared(folder: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets").join(folder);
    if p.is_dir() {
        Some(p)
    } else {
        skip(&format!("{} not found", p.display()));
        None
    }
}

/// Prints why a test skips for lack of shared data or a model, except under `CI=true`, where the data
/// must be there and its absence fails the test.
pub(crate) fn skip(why: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}, and CI=true requires it");
    eprintln!("SKIP: {why}");
}

/// The `(path, at, reason)` of a `Malformed` error; any other error fails the test.
pub fn malformed_at(e: DatasetError) -> TestResult<(PathBuf, String, String)> {
    match e {
        DatasetError::Malformed { path, at, reason } => Ok((path, at, reason)),
        other => Err(format!("expected a Malformed error, got {other}").into()),
    }
}

/// Writes `body` to `dir/name` (creating parent folders) and returns the path.
pub fn write(dir: &Path, name: &str, body: &[u8]) -> TestResult<PathBuf> {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&p, body)?;
    Ok(p)
}
