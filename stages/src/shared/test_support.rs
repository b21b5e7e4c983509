//! Helpers shared by the stages' tests: locating `../shared/fixtures/<name>` (skipping with a message
//! when the shared fixtures are absent, failing under `CI=true`) and reading fixture columns as plain vectors.

use std::path::PathBuf;

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use arrow::record_batch::RecordBatch;

pub(crate) type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `../shared/fixtures/<name>`, or `None` after printing why the test is skipped.
pub(crate) fn fixture(name: &str) -> Option<PathBuf> {
    let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures").join(name);
    if d.is_dir() {
        Some(d)
    } else {
        skip(&format!("{} not found (the shared fixtures are absent)", d.display()));
        None
    }
}

/// Prints why a test skips for lack of shared data or a model, except under `CI=true`, where the data
/// must be there and its absence fails the test.
pub(crate) fn skip(why: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}, and CI=true requires it");
    eprintln!("SKIP: {why}");
}

/// A fixture column cast to f64.
pub(crate) fn f64s(b: &RecordBatch, name: &str) -> TestResult<Vec<f64>> {
    let c = arrow::compute::cast(b.column_by_name(name).ok_or(format!("no column {name}"))?, &DataType::Float64)?;
    Ok(c.as_primitive::<Float64Type>().values().to_vec())
}

/// A fixture column cast to i64.
pub(crate) fn i64s(b: &RecordBatch, name: &str) -> TestResult<Vec<i64>> {
    let c = arrow::compute::cast(b.column_by_name(name).ok_or(format!("no column {name}"))?, &DataType::Int64)?;
    Ok(c.as_primitive::<Int64Type>().values().to_vec())
}
