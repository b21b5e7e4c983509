//! Typed access to the columns of a batch, with errors instead of panics.

use arrow::array::{
    Array, AsArray, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray, UInt8Array, UInt32Array, UInt64Array,
};
use arrow::datatypes::{Float32Type, Float64Type, Int64Type, UInt8Type, UInt32Type, UInt64Type};

use crate::{Result, SchemaError};

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a dyn Array> {
    batch.column_by_name(name).map(|c| c.as_ref()).ok_or_else(|| {
        SchemaError::arrow(format!("column `{name}`"), arrow::error::ArrowError::SchemaError(format!("no column `{name}` in batch")))
    })
}

fn wrong_type(name: &str, want: &str, got: &arrow::datatypes::DataType) -> SchemaError {
    SchemaError::arrow(format!("column `{name}`"), arrow::error::ArrowError::SchemaError(format!("expected {want}, found {got}")))
}

macro_rules! getter {
    ($fn:ident, $arr:ty, $prim:ty, $want:literal) => {
        #[doc = concat!("The column `name` as ", $want, ".")]
        pub fn $fn<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a $arr> {
            let c = column(batch, name)?;
            c.as_primitive_opt::<$prim>().ok_or_else(|| wrong_type(name, $want, c.data_type()))
        }
    };
}

getter!(u8s, UInt8Array, UInt8Type, "u8");
getter!(u32s, UInt32Array, UInt32Type, "u32");
getter!(u64s, UInt64Array, UInt64Type, "u64");
getter!(i64s, Int64Array, Int64Type, "i64");
getter!(f32s, Float32Array, Float32Type, "f32");
getter!(f64s, Float64Array, Float64Type, "f64");

/// The column `name` as booleans.
pub fn bools<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a arrow::array::BooleanArray> {
    let c = column(batch, name)?;
    c.as_boolean_opt().ok_or_else(|| wrong_type(name, "bool", c.data_type()))
}

/// The column `name` as utf8.
pub fn strs<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    let c = column(batch, name)?;
    c.as_string_opt::<i32>().ok_or_else(|| wrong_type(name, "utf8", c.data_type()))
}

/// The column `name` as `list<utf8>`, one `Vec<String>` per row (a null row is empty).
pub fn string_lists(batch: &RecordBatch, name: &str) -> Result<Vec<Vec<String>>> {
    let c = column(batch, name)?;
    let l = c.as_list_opt::<i32>().ok_or_else(|| wrong_type(name, "list<utf8>", c.data_type()))?;
    let mut out = Vec::with_capacity(l.len());
    for i in 0..l.len() {
        if l.is_null(i) {
            out.push(Vec::new());
            continue;
        }
        let v = l.value(i);
        let s = v.as_string_opt::<i32>().ok_or_else(|| wrong_type(name, "list<utf8>", c.data_type()))?;
        out.push((0..s.len()).map(|j| s.value(j).to_string()).collect());
    }
    Ok(out)
}

/// A nullable utf8 cell as `Option<&str>`.
pub fn opt_str(a: &StringArray, i: usize) -> Option<&str> {
    if a.is_null(i) { None } else { Some(a.value(i)) }
}
