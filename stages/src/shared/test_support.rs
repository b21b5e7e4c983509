//! Helpers shared by the stages' tests: locating the committed reference fixtures
//! `<repo>/tests/fixtures/<name>` and reading fixture columns as plain vectors.

use std::path::PathBuf;

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use arrow::record_batch::RecordBatch;

pub(crate) type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `<repo>/tests/fixtures/<name>`, the committed reference outputs (`tests/fixtures/README.md`).
/// The fixtures are part of the repository, so a missing one fails the test.
pub(crate) fn fixture(name: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(name);
    assert!(d.is_dir(), "{} not found: the fixtures are committed under tests/fixtures", d.display());
    d
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
