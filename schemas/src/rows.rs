//! One small row builder: a table is built from a slice of row structs, never from parallel `Vec`s
//! or positional tuples.
//!
//! A row struct says how it fills a row of its table by implementing [`Row`]: one [`Rows::put`] per
//! column, in the table's column order ([`TableSpec::columns`]). [`batch`] (or [`Rows`] directly,
//! row by row) turns the rows into a [`RecordBatch`] with the table's schema ([`TableSpec::schema`]:
//! names, nullability, metadata), then checks it as every written table is checked
//! ([`crate::validate::check_written`]).
//!
//! ```
//! use tgrag_schemas::rows::{self, Row, Rows};
//! use tgrag_schemas::tables;
//!
//! struct Curve<'a> { model: &'a str, variant: &'a str, seed: u64, epoch: u32, metric: &'a str, value: f64, kept: bool }
//! impl Row for Curve<'_> {
//!     fn put(&self, out: &mut Rows) {
//!         out.put(self.model).put(self.variant).put(self.seed).put(self.epoch).put(self.metric).put(self.value).put(self.kept);
//!     }
//! }
//! let rows = [Curve { model: "gcn", variant: "", seed: 0, epoch: 1, metric: "train_loss", value: 0.5, kept: true }];
//! let b = rows::batch(&tables::CURVES, &rows)?;
//! assert_eq!(b.num_rows(), 1);
//! # Ok::<(), tgrag_schemas::SchemaError>(())
//! ```
//!
//! Values are [`Value`]s, converted from the plain Rust types (`&str`, `String`, integers, floats,
//! `bool`, `&[u32]`, `&[f32]`, `&[String]`, and `Option` of any of them for a missing value). A value
//! of another type than its column's, a missing value in a required column, or a row with too few or
//! too many values is an error naming the table, the row and the column (a bug in the caller, never
//! a silent cast); [`Rows::finish`] reports the first one.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, FixedSizeListArray, Float32Array, Float32Builder, Float64Builder, Int32Builder, Int64Builder, ListBuilder,
    StringBuilder, UInt8Builder, UInt32Builder, UInt64Builder,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

use crate::{ColType, Result, SchemaError, TableSpec, validate};

/// One value of a row, as [`Rows::put`] takes it (usually converted with `From` from a plain type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// A missing value (`None`); only nullable columns accept it.
    Null,
    /// `bool`.
    Bool(bool),
    /// `u8`.
    U8(u8),
    /// `u32`.
    U32(u32),
    /// `u64`.
    U64(u64),
    /// `i32`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
    /// Text.
    Str(&'a str),
    /// A list of `u32` (`list<u32>` columns).
    U32s(&'a [u32]),
    /// A list of `f32` (`list<f32>` columns and embeddings).
    F32s(&'a [f32]),
    /// A list of texts (`list<utf8>` columns).
    Strs(&'a [String]),
}

impl Value<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "a missing value",
            Value::Bool(_) => "a bool",
            Value::U8(_) => "a u8",
            Value::U32(_) => "a u32",
            Value::U64(_) => "a u64",
            Value::I32(_) => "an i32",
            Value::I64(_) => "an i64",
            Value::F32(_) => "an f32",
            Value::F64(_) => "an f64",
            Value::Str(_) => "a text",
            Value::U32s(_) => "a list of u32",
            Value::F32s(_) => "a list of f32",
            Value::Strs(_) => "a list of texts",
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value<'_> {
            fn from(x: $t) -> Self {
                Value::$v(x)
            }
        }
    )*};
}
value_from!(bool => Bool, u8 => U8, u32 => U32, u64 => U64, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

impl<'a> From<&'a str> for Value<'a> {
    fn from(x: &'a str) -> Self {
        Value::Str(x)
    }
}
impl<'a> From<&'a String> for Value<'a> {
    fn from(x: &'a String) -> Self {
        Value::Str(x)
    }
}
impl<'a> From<&'a [u32]> for Value<'a> {
    fn from(x: &'a [u32]) -> Self {
        Value::U32s(x)
    }
}
impl<'a> From<&'a Vec<u32>> for Value<'a> {
    fn from(x: &'a Vec<u32>) -> Self {
        Value::U32s(x)
    }
}
impl<'a> From<&'a [f32]> for Value<'a> {
    fn from(x: &'a [f32]) -> Self {
        Value::F32s(x)
    }
}
impl<'a> From<&'a Vec<f32>> for Value<'a> {
    fn from(x: &'a Vec<f32>) -> Self {
        Value::F32s(x)
    }
}
impl<'a> From<&'a [String]> for Value<'a> {
    fn from(x: &'a [String]) -> Self {
        Value::Strs(x)
    }
}
impl<'a> From<&'a Vec<String>> for Value<'a> {
    fn from(x: &'a Vec<String>) -> Self {
        Value::Strs(x)
    }
}
impl<'a, T: Into<Value<'a>>> From<Option<T>> for Value<'a> {
    fn from(x: Option<T>) -> Self {
        x.map_or(Value::Null, Into::into)
    }
}

/// A row struct of a table: puts its values, one [`Rows::put`] per column in the table's order.
pub trait Row {
    /// Puts this row's values into `out`.
    fn put(&self, out: &mut Rows);
}

impl<R: Row + ?Sized> Row for &R {
    fn put(&self, out: &mut Rows) {
        (**self).put(out)
    }
}

/// Builds the table `spec` from row structs (see the [module](self) documentation): the batch has
/// the spec's schema and passes [`validate::check_written`].
pub fn batch<'a, R: Row + 'a>(spec: &TableSpec, rows: impl IntoIterator<Item = &'a R>) -> Result<RecordBatch> {
    let mut out = Rows::new(spec);
    for r in rows {
        out.push(r);
    }
    out.finish()
}

/// One column being filled.
enum Col {
    Bool(BooleanBuilder),
    U8(UInt8Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Utf8(StringBuilder),
    ListU32(ListBuilder<UInt32Builder>),
    ListF32(ListBuilder<Float32Builder>),
    ListUtf8(ListBuilder<StringBuilder>),
    /// A fixed-size list of f32: flat values, validity per row, the width (declared, or the first
    /// row's).
    Vector {
        values: Vec<f32>,
        valid: Vec<bool>,
        width: Option<usize>,
    },
}

impl Col {
    fn new(ty: ColType) -> Col {
        match ty {
            ColType::Bool => Col::Bool(BooleanBuilder::new()),
            ColType::U8 => Col::U8(UInt8Builder::new()),
            ColType::U32 => Col::U32(UInt32Builder::new()),
            ColType::U64 => Col::U64(UInt64Builder::new()),
            ColType::I32 => Col::I32(Int32Builder::new()),
            ColType::I64 => Col::I64(Int64Builder::new()),
            ColType::F32 => Col::F32(Float32Builder::new()),
            ColType::F64 => Col::F64(Float64Builder::new()),
            ColType::Utf8 => Col::Utf8(StringBuilder::new()),
            ColType::ListU32 => Col::ListU32(ListBuilder::new(UInt32Builder::new())),
            ColType::ListF32 => Col::ListF32(ListBuilder::new(Float32Builder::new())),
            ColType::ListUtf8 => Col::ListUtf8(ListBuilder::new(StringBuilder::new())),
            ColType::Embedding(n) => Col::Vector { values: Vec::new(), valid: Vec::new(), width: usize::try_from(n).ok() },
            ColType::Vector => Col::Vector { values: Vec::new(), valid: Vec::new(), width: None },
            // Row structs give ids as text; tools that pass the input's ids through build the column
            // from that array instead ([`TableSpec::batch`]).
            ColType::Id => Col::Utf8(StringBuilder::new()),
            // A row struct gives one value of a run (a run of one column); wider runs are built
            // column by column ([`TableSpec::batch`]).
            ColType::Run { item: crate::table::Float::F32, .. } => Col::F32(Float32Builder::new()),
            ColType::Run { item: crate::table::Float::F64, .. } => Col::F64(Float64Builder::new()),
        }
    }

    /// Appends `v`; the error says why it does not fit.
    fn append(&mut self, v: Value<'_>) -> std::result::Result<(), String> {
        match (self, v) {
            (Col::Bool(b), Value::Bool(x)) => b.append_value(x),
            (Col::Bool(b), Value::Null) => b.append_null(),
            (Col::U8(b), Value::U8(x)) => b.append_value(x),
            (Col::U8(b), Value::Null) => b.append_null(),
            (Col::U32(b), Value::U32(x)) => b.append_value(x),
            (Col::U32(b), Value::Null) => b.append_null(),
            (Col::U64(b), Value::U64(x)) => b.append_value(x),
            (Col::U64(b), Value::Null) => b.append_null(),
            (Col::I32(b), Value::I32(x)) => b.append_value(x),
            (Col::I32(b), Value::Null) => b.append_null(),
            (Col::I64(b), Value::I64(x)) => b.append_value(x),
            (Col::I64(b), Value::Null) => b.append_null(),
            (Col::F32(b), Value::F32(x)) => b.append_value(x),
            (Col::F32(b), Value::Null) => b.append_null(),
            (Col::F64(b), Value::F64(x)) => b.append_value(x),
            (Col::F64(b), Value::Null) => b.append_null(),
            (Col::Utf8(b), Value::Str(x)) => b.append_value(x),
            (Col::Utf8(b), Value::Null) => b.append_null(),
            (Col::ListU32(b), Value::U32s(x)) => {
                b.values().append_slice(x);
                b.append(true);
            }
            (Col::ListU32(b), Value::Null) => b.append(false),
            (Col::ListF32(b), Value::F32s(x)) => {
                b.values().append_slice(x);
                b.append(true);
            }
            (Col::ListF32(b), Value::Null) => b.append(false),
            (Col::ListUtf8(b), Value::Strs(x)) => {
                for s in x {
                    b.values().append_value(s);
                }
                b.append(true);
            }
            (Col::ListUtf8(b), Value::Null) => b.append(false),
            (Col::Vector { values, valid, width }, Value::F32s(x)) => {
                match *width {
                    Some(w) if w != x.len() => return Err(format!("a vector of width {}, expected {w}", x.len())),
                    _ => *width = Some(x.len()),
                }
                values.extend_from_slice(x);
                valid.push(true);
            }
            (Col::Vector { values, valid, width }, Value::Null) => match *width {
                Some(w) => {
                    values.extend(std::iter::repeat_n(0.0, w));
                    valid.push(false);
                }
                None => return Err("a missing vector before any row gave the width".into()),
            },
            (_, v) => return Err(format!("{} in a column of another type", v.kind())),
        }
        Ok(())
    }

    fn finish(self) -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
        Ok(match self {
            Col::Bool(mut b) => Arc::new(b.finish()),
            Col::U8(mut b) => Arc::new(b.finish()),
            Col::U32(mut b) => Arc::new(b.finish()),
            Col::U64(mut b) => Arc::new(b.finish()),
            Col::I32(mut b) => Arc::new(b.finish()),
            Col::I64(mut b) => Arc::new(b.finish()),
            Col::F32(mut b) => Arc::new(b.finish()),
            Col::F64(mut b) => Arc::new(b.finish()),
            Col::Utf8(mut b) => Arc::new(b.finish()),
            Col::ListU32(mut b) => Arc::new(b.finish()),
            Col::ListF32(mut b) => Arc::new(b.finish()),
            Col::ListUtf8(mut b) => Arc::new(b.finish()),
            Col::Vector { values, valid, width } => {
                let item = Arc::new(Field::new("item", DataType::Float32, true));
                let width = i32::try_from(width.unwrap_or(0))
                    .map_err(|_| arrow::error::ArrowError::InvalidArgumentError("vector width over i32".into()))?;
                let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
                Arc::new(FixedSizeListArray::try_new(item, width, Arc::new(Float32Array::from(values)), nulls)?)
            }
        })
    }
}

/// A table being filled row by row: [`Rows::put`] each value of a row in column order, then
/// [`Rows::end_row`] (or [`Rows::push`] a [`Row`]); [`Rows::finish`] gives the batch or the first
/// error.
pub struct Rows {
    spec: TableSpec,
    cols: Vec<Col>,
    /// Rows finished so far.
    rows: usize,
    /// The next column of the current row.
    at: usize,
    err: Option<SchemaError>,
}

impl Rows {
    /// An empty table of `spec`.
    pub fn new(spec: &TableSpec) -> Rows {
        Rows { spec: *spec, cols: spec.columns.iter().map(|c| Col::new(c.ty)).collect(), rows: 0, at: 0, err: None }
    }

    fn fail(&mut self, column: Option<&str>, message: String) {
        if self.err.is_none() {
            self.err = Some(SchemaError::violation(Path::new("<rows>"), self.spec.name, Some(self.rows), column, message));
        }
    }

    /// Puts the next value of the current row (the next column in the table's order).
    pub fn put<'v>(&mut self, v: impl Into<Value<'v>>) -> &mut Rows {
        let v = v.into();
        if self.err.is_some() {
            return self;
        }
        let Some(c) = self.spec.columns.get(self.at) else {
            let n = self.spec.columns.len();
            self.fail(None, format!("more than {n} values in one row (the table has {n} columns)"));
            return self;
        };
        let res = if v == Value::Null && !c.nullable {
            Err("missing value in a required column".to_string())
        } else {
            self.cols[self.at].append(v).map_err(|e| format!("{e} (the column is {})", c.ty.describe()))
        };
        if let Err(e) = res {
            self.fail(Some(c.name), e);
        }
        self.at += 1;
        self
    }

    /// Ends the current row: every column must have had its value.
    pub fn end_row(&mut self) -> &mut Rows {
        if self.at != self.spec.columns.len() && self.err.is_none() {
            let (got, n) = (self.at, self.spec.columns.len());
            let missing = self.spec.columns.get(got).map(|c| c.name);
            self.fail(missing, format!("{got} values in a row of {n} columns"));
        }
        self.rows += 1;
        self.at = 0;
        self
    }

    /// Puts a whole row and ends it.
    pub fn push<R: Row + ?Sized>(&mut self, row: &R) -> &mut Rows {
        row.put(self);
        self.end_row()
    }

    /// The number of rows ended so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether no row was ended yet.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The batch (the table's schema, checked by [`validate::check_written`]), or the first error.
    pub fn finish(mut self) -> Result<RecordBatch> {
        if self.at != 0 {
            self.end_row();
        }
        if let Some(e) = self.err {
            return Err(e);
        }
        let spec = self.spec;
        let cols = self
            .cols
            .into_iter()
            .map(Col::finish)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| SchemaError::arrow(format!("building table `{}`", spec.name), e))?;
        // The spec's schema, with the data's width for a vector column.
        let batch = spec.batch(cols)?;
        validate::check_written(&spec, &batch)?;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray, BooleanArray, Float64Array, StringArray, UInt32Array, UInt64Array};
    use arrow::datatypes::{Float32Type, UInt32Type};

    use super::*;
    use crate::table::{opt, req, req_in};

    static T: TableSpec = TableSpec {
        name: "t",
        version: 1,
        family: "test",
        doc: "test",
        columns: &[
            req("name", ColType::Utf8, ""),
            req("n", ColType::U32, ""),
            opt("seed", ColType::U64, ""),
            req("x", ColType::F64, ""),
            req("ok", ColType::Bool, ""),
            req_in("split", &["train", "test"], ""),
        ],
        run_dependent: false,
    };

    struct R {
        name: String,
        n: u32,
        seed: Option<u64>,
        x: f64,
        ok: bool,
        split: &'static str,
    }
    impl Row for R {
        fn put(&self, out: &mut Rows) {
            out.put(&self.name).put(self.n).put(self.seed).put(self.x).put(self.ok).put(self.split);
        }
    }

    fn rows() -> Vec<R> {
        vec![
            R { name: "a".into(), n: 1, seed: Some(7), x: 0.5, ok: true, split: "train" },
            R { name: "bb".into(), n: 2, seed: None, x: -1.0, ok: false, split: "test" },
        ]
    }

    #[test]
    fn rows_give_the_same_batch_as_columns_built_by_hand() {
        let got = batch(&T, &rows()).expect("batch");
        let want = T
            .batch(vec![
                Arc::new(StringArray::from(vec!["a", "bb"])),
                Arc::new(UInt32Array::from(vec![1, 2])),
                Arc::new(UInt64Array::from(vec![Some(7), None])),
                Arc::new(Float64Array::from(vec![0.5, -1.0])),
                Arc::new(BooleanArray::from(vec![true, false])),
                Arc::new(StringArray::from(vec!["train", "test"])),
            ])
            .expect("by hand");
        assert_eq!(got, want);
        assert_eq!(got.schema(), T.schema());
        // Required columns without nulls carry no validity buffer (same bytes as `from(Vec<_>)`).
        assert!(got.column(0).nulls().is_none());
        assert_eq!(got.column(2).null_count(), 1);
    }

    #[test]
    fn no_rows_give_the_empty_table() {
        let got = batch::<R>(&T, &[]).expect("empty");
        assert_eq!(got, T.empty());
    }

    fn err(r: std::result::Result<RecordBatch, SchemaError>) -> crate::Violation {
        match r.expect_err("must fail") {
            SchemaError::Violation(v) => *v,
            other => panic!("not a violation: {other}"),
        }
    }

    #[test]
    fn a_wrong_type_names_the_row_and_column() {
        let mut out = Rows::new(&T);
        out.push(&rows()[0]);
        out.put("c").put(3u64).put(None::<u64>).put(1.0).put(true).put("test").end_row();
        let v = err(out.finish());
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("n")));
        assert!(v.message.contains("a u64") && v.message.contains("UInt32"), "{}", v.message);
    }

    #[test]
    fn a_missing_required_value_or_a_short_or_long_row_is_refused() {
        let mut out = Rows::new(&T);
        out.put(None::<&str>).put(1u32).put(None::<u64>).put(1.0).put(true).put("test").end_row();
        let v = err(out.finish());
        assert_eq!((v.row, v.column.as_deref()), (Some(0), Some("name")));
        assert!(v.message.contains("missing value"));

        let mut out = Rows::new(&T);
        out.push(&rows()[0]).put("c").put(3u32).end_row();
        let v = err(out.finish());
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("seed")));
        assert!(v.message.contains("2 values in a row of 6 columns"), "{}", v.message);

        let mut out = Rows::new(&T);
        rows()[0].put(&mut out);
        out.put(1u32).end_row();
        let v = err(out.finish());
        assert_eq!((v.row, v.column), (Some(0), None));
        assert!(v.message.contains("more than 6 values"), "{}", v.message);
    }

    #[test]
    fn a_value_outside_its_set_is_refused_by_the_write_check() {
        let mut r = rows();
        r[1].split = "training";
        let v = err(batch(&T, &r));
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("split")));
    }

    static L: TableSpec = TableSpec {
        name: "l",
        version: 1,
        family: "test",
        doc: "test",
        columns: &[req("path", ColType::ListU32, ""), opt("types", ColType::ListUtf8, ""), req("emb", ColType::Vector, "")],
        run_dependent: false,
    };

    #[test]
    fn lists_and_vectors() {
        let types = vec!["a".to_string(), "b".to_string()];
        let mut out = Rows::new(&L);
        out.put(&vec![1u32, 2, 3]).put(Some(&types)).put(&vec![0.5f32, 1.5]).end_row();
        out.put(&[] as &[u32]).put(None::<&Vec<String>>).put(&[2.0f32, 3.0][..]).end_row();
        let b = out.finish().expect("lists");
        let path = b.column(0).as_list::<i32>();
        assert_eq!(path.value(0).as_primitive::<UInt32Type>().values(), &[1, 2, 3]);
        assert_eq!(path.value(1).len(), 0);
        assert!(b.column(1).is_valid(0) && b.column(1).is_null(1));
        let emb = b.column(2).as_fixed_size_list();
        assert_eq!(emb.value_length(), 2);
        assert_eq!(emb.values().as_primitive::<Float32Type>().values(), &[0.5, 1.5, 2.0, 3.0]);

        let mut out = Rows::new(&L);
        out.put(&vec![1u32]).put(None::<&Vec<String>>).put(&vec![0.5f32, 1.5]).end_row();
        out.put(&vec![1u32]).put(None::<&Vec<String>>).put(&vec![0.5f32]).end_row();
        let v = err(out.finish());
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("emb")));
        assert!(v.message.contains("width 1, expected 2"), "{}", v.message);
    }
}
