//! A table is declared once as a [`TableSpec`]; its Arrow schema, its documentation (`tgrag schema`)
//! and its validator all derive from that declaration.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// Metadata key holding the table name in every Parquet file tgrag writes.
pub const META_TABLE: &str = "tgrag.table";
/// Metadata key holding the schema version in every Parquet file tgrag writes.
pub const META_VERSION: &str = "tgrag.schema_version";

/// Column types used by canonical tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    /// `uint8`.
    U8,
    /// `uint32` (ids).
    U32,
    /// `uint64`.
    U64,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `float32` (embeddings).
    F32,
    /// `float64` (scores, metrics).
    F64,
    /// `bool`.
    Bool,
    /// UTF-8 text.
    Utf8,
    /// `list<u32>` (e.g. a trajectory's node path).
    ListU32,
    /// `list<f32>` (e.g. per-node scores along a path).
    ListF32,
    /// `list<utf8>` (e.g. a trajectory's node types).
    ListUtf8,
    /// `fixed_size_list<f32, n>` (embeddings).
    Embedding(i32),
    /// `fixed_size_list<f32, d>` for any width d, one width per table (embeddings whose width is
    /// the encoder's: 384 for MiniLM, the hashing width otherwise).
    Vector,
    /// An id column of the file tools, whose ids are the input's: any integer type or text, written
    /// as the input had it (a table built from the spec alone uses `utf8`).
    Id,
    /// A run of float columns, one per dimension, named by the column's name and the dimension
    /// zero-padded to `digits` (`p00`, `p01`, …; `p100` past 99): the matrices of `tgrag diffusion`
    /// and `tgrag graphwave`, whose readers address dimensions by column name. The run's width is
    /// the data's (at least one column); it is the table's last column.
    Run {
        /// The type of every column of the run.
        item: Float,
        /// The minimum number of digits of a column's dimension.
        digits: u8,
    },
}

/// The type of the columns of a [`ColType::Run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

impl From<Float> for ColType {
    fn from(f: Float) -> ColType {
        match f {
            Float::F32 => ColType::F32,
            Float::F64 => ColType::F64,
        }
    }
}

impl ColType {
    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        let item = |t: DataType| Arc::new(Field::new("item", t, true));
        match self {
            ColType::U8 => DataType::UInt8,
            ColType::U32 => DataType::UInt32,
            ColType::U64 => DataType::UInt64,
            ColType::I32 => DataType::Int32,
            ColType::I64 => DataType::Int64,
            ColType::F32 => DataType::Float32,
            ColType::F64 => DataType::Float64,
            ColType::Bool => DataType::Boolean,
            ColType::Utf8 => DataType::Utf8,
            ColType::ListU32 => DataType::List(item(DataType::UInt32)),
            ColType::ListF32 => DataType::List(item(DataType::Float32)),
            ColType::ListUtf8 => DataType::List(item(DataType::Utf8)),
            ColType::Embedding(n) => DataType::FixedSizeList(item(DataType::Float32), n),
            // The width is the data's: a schema built from the spec alone uses 0.
            ColType::Vector => DataType::FixedSizeList(item(DataType::Float32), 0),
            ColType::Id => DataType::Utf8,
            ColType::Run { item, .. } => ColType::from(item).data_type(),
        }
    }

    /// Whether an Arrow type is this column type (any width for [`ColType::Vector`]; field names
    /// and nullability of list items are not compared).
    pub fn matches(self, t: &DataType) -> bool {
        match (self, t) {
            (ColType::Vector, DataType::FixedSizeList(f, _)) => f.data_type() == &DataType::Float32,
            (ColType::Id, t) => t.is_integer() || matches!(t, DataType::Utf8 | DataType::LargeUtf8),
            (ColType::Embedding(n), DataType::FixedSizeList(f, m)) => *m == n && f.data_type() == &DataType::Float32,
            (ColType::ListU32 | ColType::ListF32 | ColType::ListUtf8, DataType::List(f)) => match self.data_type() {
                DataType::List(want) => want.data_type() == f.data_type(),
                _ => false,
            },
            _ => &self.data_type() == t,
        }
    }

    /// The type as `tgrag schema` prints it.
    pub fn describe(self) -> String {
        match self {
            ColType::Vector => "FixedSizeList(Float32, d)".to_string(),
            ColType::Id => "integer or Utf8 (as input)".to_string(),
            ColType::Run { .. } => format!("{} × d", self.data_type()),
            other => format!("{}", other.data_type()),
        }
    }
}

/// One column of a canonical table.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSpec {
    /// The column's name in every file.
    pub name: &'static str,
    /// Its canonical type (inputs are cast to it on read).
    pub ty: ColType,
    /// Whether a value may be missing.
    pub nullable: bool,
    /// What a value means (shown by `tgrag schema <table>`).
    pub doc: &'static str,
    /// The only values a text column may hold (a split, a task), when the set is fixed: checked on
    /// read and on write, so that `training` is refused rather than silently left out.
    pub values: Option<&'static [&'static str]>,
}

/// Shorthand constructor for a required column.
pub const fn req(name: &'static str, ty: ColType, doc: &'static str) -> ColumnSpec {
    ColumnSpec { name, ty, nullable: false, doc, values: None }
}

/// Shorthand constructor for a nullable column.
pub const fn opt(name: &'static str, ty: ColType, doc: &'static str) -> ColumnSpec {
    ColumnSpec { name, ty, nullable: true, doc, values: None }
}

/// A required text column with a fixed set of values.
pub const fn req_in(name: &'static str, values: &'static [&'static str], doc: &'static str) -> ColumnSpec {
    ColumnSpec { name, ty: ColType::Utf8, nullable: false, doc, values: Some(values) }
}

/// A nullable text column with a fixed set of values.
pub const fn opt_in(name: &'static str, values: &'static [&'static str], doc: &'static str) -> ColumnSpec {
    ColumnSpec { name, ty: ColType::Utf8, nullable: true, doc, values: Some(values) }
}

impl ColumnSpec {
    /// The name of the file column that holds dimension `i` of a [`ColType::Run`] (`p07`); the
    /// column's own name for any other type.
    pub fn run_name(&self, i: usize) -> String {
        match self.ty {
            ColType::Run { digits, .. } => format!("{}{i:0w$}", self.name, w = usize::from(digits)),
            _ => self.name.to_string(),
        }
    }

    /// The column's name as `tgrag schema <table>` shows it: a run's first columns (`p00, p01, …`).
    pub fn label(&self) -> String {
        match self.ty {
            ColType::Run { .. } => format!("{}, {}, …", self.run_name(0), self.run_name(1)),
            _ => self.name.to_string(),
        }
    }

    /// The first row whose value is outside the column's set, with that value.
    pub fn first_outside(&self, col: &dyn arrow::array::Array) -> Option<(usize, String)> {
        use arrow::array::{Array, AsArray};
        let values = self.values?;
        let s = col.as_string_opt::<i32>()?;
        (0..s.len()).find(|&i| s.is_valid(i) && !values.contains(&s.value(i))).map(|i| (i, s.value(i).to_string()))
    }
}

/// A canonical table: name, version, purpose and columns.
#[derive(Debug, Clone, Copy)]
pub struct TableSpec {
    /// The table's name (the file is `<name>.parquet`).
    pub name: &'static str,
    /// Bumped whenever a column is added, removed or changes meaning.
    pub version: u32,
    /// Which family of data the table belongs to (knowledge base, graph QA, ...).
    pub family: &'static str,
    /// What a row is (shown by `tgrag schema`).
    pub doc: &'static str,
    /// The columns, in file order.
    pub columns: &'static [ColumnSpec],
    /// The table holds wall-clock figures (timings, latencies): it differs between runs by nature
    /// and is left out of determinism checks and result comparisons.
    pub run_dependent: bool,
}

impl TableSpec {
    /// Arrow schema, with the table name and version in its metadata. A [`ColType::Run`] has no
    /// columns here (its width is the data's: [`TableSpec::file_columns`]).
    pub fn schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .filter(|c| !matches!(c.ty, ColType::Run { .. }))
            .map(|c| Field::new(c.name, c.ty.data_type(), c.nullable))
            .collect();
        let meta = HashMap::from([(META_TABLE.to_string(), self.name.to_string()), (META_VERSION.to_string(), self.version.to_string())]);
        Arc::new(Schema::new_with_metadata(fields, meta))
    }

    /// The column spec of `name`, if the table has it.
    pub fn column(&self, name: &str) -> Option<&ColumnSpec> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The file columns of a batch of this table with `n` columns, each with its declaration: the
    /// declared columns in order, a [`ColType::Run`] expanded to the columns left (none when the
    /// others take all `n`).
    pub fn file_columns(&self, n: usize) -> Vec<(String, &ColumnSpec)> {
        let fixed = self.columns.iter().filter(|c| !matches!(c.ty, ColType::Run { .. })).count();
        let mut out = Vec::with_capacity(n.max(fixed));
        for c in self.columns {
            match c.ty {
                ColType::Run { .. } => out.extend((0..n.saturating_sub(fixed)).map(|i| (c.run_name(i), c))),
                _ => out.push((c.name.to_string(), c)),
            }
        }
        out
    }

    /// Human-readable description, as printed by `tgrag schema <table>`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "table {} (schema version {}, {}{})\n  {}\n\n",
            self.name,
            self.version,
            self.family,
            if self.run_dependent { ", run-dependent" } else { "" },
            self.doc
        );
        let w = self.columns.iter().map(|c| c.label().chars().count()).max().unwrap_or(0);
        for c in self.columns {
            let ty = c.ty.describe();
            let null = if c.nullable { "nullable" } else { "required" };
            let doc = match c.values {
                Some(v) if !c.doc.contains(v.join(" | ").as_str()) => format!("{} (one of: {})", c.doc, v.join(", ")),
                _ => c.doc.to_string(),
            };
            s.push_str(&format!("  {:<w$}  {:<28} {:<8}  {}\n", c.label(), ty, null, doc, w = w));
        }
        s
    }
}

impl TableSpec {
    /// Builds a batch of this table from columns given in spec order (a [`ColType::Run`]: one
    /// column per dimension). A [`ColType::Vector`] or [`ColType::Id`] column keeps its data's type
    /// (width, id type); the names, nullability and metadata are the spec's.
    pub fn batch(&self, columns: Vec<arrow::array::ArrayRef>) -> crate::Result<arrow::record_batch::RecordBatch> {
        let schema = self.schema();
        let schema = if self.columns.iter().any(|c| matches!(c.ty, ColType::Vector | ColType::Id | ColType::Run { .. })) {
            let fields: Vec<Field> = self
                .file_columns(columns.len())
                .into_iter()
                .zip(&columns)
                .map(|((name, c), col)| match c.ty {
                    ColType::Vector | ColType::Id => Field::new(name, col.data_type().clone(), c.nullable),
                    _ => Field::new(name, c.ty.data_type(), c.nullable),
                })
                .collect();
            Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
        } else {
            schema
        };
        arrow::record_batch::RecordBatch::try_new(schema, columns)
            .map_err(|e| crate::SchemaError::arrow(format!("building table `{}`", self.name), e))
    }

    /// An empty batch of this table.
    pub fn empty(&self) -> arrow::record_batch::RecordBatch {
        arrow::record_batch::RecordBatch::new_empty(self.schema())
    }
}
