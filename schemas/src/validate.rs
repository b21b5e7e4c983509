//! Validation of canonical tables. Every error is a [`crate::Violation`] naming the file, the 0-based
//! data row and the column of the *first* offending value, so a user can open the file and fix it.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::{CastOptions, can_cast_types, cast_with_options};
use arrow::datatypes::{DataType, Field, Schema};

use arrow::util::display::array_value_to_string;

use crate::columns::u32s;
use crate::{ColType, Result, SchemaError, TableSpec, tables};

fn first_non_null(a: &dyn Array) -> Option<usize> {
    (0..a.len()).find(|&i| a.is_valid(i))
}

/// A value of an input as an error quotes it (capped and escaped: [`crate::quote`]).
fn value_str(a: &dyn Array, row: usize) -> String {
    crate::quote(&array_value_to_string(a, row).unwrap_or_else(|_| "?".into()))
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

fn is_int(t: &DataType) -> bool {
    t.is_integer()
}

/// Casts one column to its canonical type, naming the first row whose value does not fit.
fn cast_column(spec: &TableSpec, file: &Path, name: &str, col: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if col.data_type() == to {
        return Ok(col.clone());
    }
    let from = col.data_type().clone();
    let type_violation = |row: Option<usize>, msg: String| SchemaError::violation(file, spec.name, row, Some(name), msg);
    let scalar_ok = is_int(to) || is_float(to) || matches!(to, DataType::Utf8 | DataType::Boolean);
    let from_ok = is_int(&from)
        || is_float(&from)
        || matches!(from, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Boolean | DataType::Null);
    // Only scalar conversions that cannot silently change meaning: no float→int truncation,
    // no number→text unless the target is text.
    let allowed = if matches!(to, DataType::Utf8) {
        matches!(from, DataType::LargeUtf8 | DataType::Utf8View | DataType::Null)
    } else {
        scalar_ok && from_ok && !(is_float(&from) && is_int(to)) && can_cast_types(&from, to)
    } || (matches!(to, DataType::List(_) | DataType::FixedSizeList(_, _)) && can_cast_types(&from, to));
    if !allowed {
        return Err(type_violation(first_non_null(col.as_ref()), format!("has type {from}, expected {to}")));
    }
    let opts = CastOptions { safe: true, ..Default::default() };
    let out = cast_with_options(col, to, &opts).map_err(|e| type_violation(None, format!("cannot convert {from} to {to}: {e}")))?;
    if let Some(row) = (0..col.len()).find(|&i| col.is_valid(i) && out.is_null(i)) {
        return Err(type_violation(Some(row), format!("value `{}` is not a valid {to}", value_str(col.as_ref(), row))));
    }
    Ok(out)
}

/// Turns any batch that carries the table's columns into the canonical table: selects the columns in
/// spec order, casts lossless conversions (text digits → integers, u32 → u64, ...), fills absent
/// nullable columns with nulls, and rejects missing columns, unconvertible values and nulls in required
/// columns. Extra columns are ignored.
pub fn conform(spec: &TableSpec, file: &Path, raw: &RecordBatch) -> Result<RecordBatch> {
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(spec.columns.len());
    for c in spec.columns {
        if matches!(c.ty, ColType::Run { .. }) {
            cols.extend(conform_run(spec, file, raw, c)?);
            continue;
        }
        let to = c.ty.data_type();
        let col = match raw.column_by_name(c.name) {
            Some(col) if c.ty.matches(col.data_type()) => col.clone(),
            Some(col) if c.ty == ColType::Vector => {
                return Err(SchemaError::violation(
                    file,
                    spec.name,
                    first_non_null(col.as_ref()),
                    Some(c.name),
                    format!("has type {}, expected a fixed-size list of f32", col.data_type()),
                ));
            }
            Some(col) => cast_column(spec, file, c.name, col, &to)?,
            None if c.nullable => new_null_array(&to, raw.num_rows()),
            None => {
                let have: Vec<String> = raw.schema().fields().iter().map(|f| f.name().clone()).collect();
                return Err(SchemaError::violation(
                    file,
                    spec.name,
                    None,
                    Some(c.name),
                    format!("missing required column (the file has: {})", crate::quote(&have.join(", "))),
                ));
            }
        };
        if !c.nullable
            && let Some(row) = (0..col.len()).find(|&i| col.is_null(i))
        {
            return Err(SchemaError::violation(file, spec.name, Some(row), Some(c.name), "missing value"));
        }
        if let Some((row, v)) = c.first_outside(col.as_ref()) {
            let allowed = c.values.unwrap_or_default().join(", ");
            return Err(SchemaError::violation(file, spec.name, Some(row), Some(c.name), format!("`{v}` is not one of: {allowed}")));
        }
        cols.push(col);
    }
    // The spec's names, nullability and metadata; the data's own type where it matched (list item
    // fields, embedding widths).
    let schema = spec.schema();
    let fields: Vec<Field> = spec
        .file_columns(cols.len())
        .into_iter()
        .zip(&cols)
        .map(|((name, f), c)| Field::new(name, c.data_type().clone(), f.nullable))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())), cols)
        .map_err(|e| SchemaError::arrow(format!("{}: conforming to table `{}`", file.display(), spec.name), e))
}

/// The columns of a [`ColType::Run`] in `raw` (`p00`, `p01`, … while they exist), each cast to the
/// run's type, with no missing value; a run of no column is a missing required column.
fn conform_run(spec: &TableSpec, file: &Path, raw: &RecordBatch, c: &crate::ColumnSpec) -> Result<Vec<ArrayRef>> {
    let to = c.ty.data_type();
    let mut out = Vec::new();
    while let Some(col) = raw.column_by_name(&c.run_name(out.len())) {
        let name = c.run_name(out.len());
        let col = cast_column(spec, file, &name, col, &to)?;
        if let Some(row) = (0..col.len()).find(|&i| col.is_null(i)) {
            return Err(SchemaError::violation(file, spec.name, Some(row), Some(&name), "missing value"));
        }
        out.push(col);
    }
    if out.is_empty() {
        let msg = format!("missing required columns {} (one per dimension)", c.label());
        return Err(SchemaError::violation(file, spec.name, None, Some(c.name), msg));
    }
    Ok(out)
}

/// The key of `scores` (its declaration's "one row per …"): every evaluation's results are unique on
/// it by construction (seed lists are checked for repeats before any stage runs), so a repeated key
/// when the table is written is a bug in the stage that wrote it.
pub const SCORES_KEY: &[&str] = &["dataset", "stage", "method", "split", "group", "metric", "seed"];

/// The key a written table must be unique on, where it declares one.
fn written_key(spec: &TableSpec) -> Option<&'static [&'static str]> {
    (spec.name == tables::SCORES.name).then_some(SCORES_KEY)
}

/// Checks a batch a stage is about to write against its table: the spec's columns in order, each of
/// its type (any width for embeddings), no nulls in required columns, unique keys ([`SCORES_KEY`]).
/// Field nullability flags and metadata are not compared (they are not part of the contract).
pub fn check_written(spec: &TableSpec, batch: &RecordBatch) -> Result<()> {
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let expected = spec.file_columns(batch.num_columns());
    let want: Vec<&str> = expected.iter().map(|(name, _)| name.as_str()).collect();
    let here = Path::new("<written>");
    if names != want {
        let want: Vec<String> = spec.columns.iter().map(|c| c.label()).collect();
        return Err(SchemaError::violation(here, spec.name, None, None, format!("columns {names:?}, expected {want:?}")));
    }
    if let Some(run) = spec.columns.iter().find(|c| matches!(c.ty, ColType::Run { .. }))
        && !expected.iter().any(|(_, c)| c.name == run.name)
    {
        return Err(SchemaError::violation(here, spec.name, None, Some(run.name), "no column of the run (one per dimension)"));
    }
    for ((name, c), col) in expected.iter().zip(batch.columns()) {
        if !c.ty.matches(col.data_type()) {
            return Err(SchemaError::violation(
                here,
                spec.name,
                None,
                Some(name),
                format!("has type {}, expected {}", col.data_type(), c.ty.describe()),
            ));
        }
        if !c.nullable
            && let Some(row) = (0..col.len()).find(|&i| col.is_null(i))
        {
            return Err(SchemaError::violation(here, spec.name, Some(row), Some(name), "missing value in a required column"));
        }
        if let Some((row, v)) = c.first_outside(col.as_ref()) {
            let allowed = c.values.unwrap_or_default().join(", ");
            return Err(SchemaError::violation(here, spec.name, Some(row), Some(name), format!("`{v}` is not one of: {allowed}")));
        }
    }
    if let Some(key) = written_key(spec) {
        check_unique_key(here, spec.name, batch, key)?;
    }
    Ok(())
}

/// Rejects nulls in required columns, naming the first null row.
pub fn check_required(spec: &TableSpec, file: &Path, batch: &RecordBatch) -> Result<()> {
    for c in spec.columns.iter().filter(|c| !c.nullable) {
        if let Some(col) = batch.column_by_name(c.name)
            && let Some(row) = (0..col.len()).find(|&i| col.is_null(i))
        {
            return Err(SchemaError::violation(file, spec.name, Some(row), Some(c.name), "missing value"));
        }
    }
    Ok(())
}

/// Rejects a value outside its column's fixed set (a split, a task), naming the first such row.
pub fn check_values(spec: &TableSpec, file: &Path, batch: &RecordBatch) -> Result<()> {
    for c in spec.columns.iter().filter(|c| c.values.is_some()) {
        if let Some(col) = batch.column_by_name(c.name)
            && let Some((row, v)) = c.first_outside(col.as_ref())
        {
            let allowed = c.values.unwrap_or_default().join(", ");
            return Err(SchemaError::violation(file, spec.name, Some(row), Some(c.name), format!("`{v}` is not one of: {allowed}")));
        }
    }
    Ok(())
}

/// Membership set over u32 ids (a bitmap sized by the largest id).
#[derive(Debug, Clone, Default)]
pub struct IdSet {
    bits: Vec<u64>,
}

impl IdSet {
    /// The set of values of an array (nulls ignored).
    pub fn from_array(a: &UInt32Array) -> Self {
        let mut s = IdSet::default();
        for v in a.iter().flatten() {
            s.insert(v);
        }
        s
    }
    /// Adds `v`; returns false when it was already present.
    pub fn insert(&mut self, v: u32) -> bool {
        let (w, b) = ((v / 64) as usize, v % 64);
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        let had = self.bits[w] >> b & 1 == 1;
        self.bits[w] |= 1 << b;
        !had
    }
    /// Whether `v` is present.
    pub fn contains(&self, v: u32) -> bool {
        self.bits.get((v / 64) as usize).is_some_and(|w| w >> (v % 64) & 1 == 1)
    }
}

/// Rejects the first repeated value of an id column.
pub fn check_unique(spec: &TableSpec, file: &Path, batch: &RecordBatch, column: &str) -> Result<()> {
    let a = u32s(batch, column)?;
    let mut seen = IdSet::default();
    for (row, v) in a.iter().enumerate() {
        if let Some(v) = v
            && !seen.insert(v)
        {
            let first = a.iter().position(|x| x == Some(v)).unwrap_or(row);
            return Err(SchemaError::violation(
                file,
                spec.name,
                Some(row),
                Some(column),
                format!("duplicate {column} {v} (first at row {first})"),
            ));
        }
    }
    Ok(())
}

/// Rejects the first repeated key of one or more columns of any type (ids given as integers or
/// strings, composite keys), naming the repeated row, the first row and the value.
pub fn check_unique_key(file: &Path, table: &str, batch: &RecordBatch, key: &[&str]) -> Result<()> {
    use arrow::row::{RowConverter, SortField};
    let cols: Vec<ArrayRef> = key
        .iter()
        .map(|c| batch.column_by_name(c).cloned().ok_or_else(|| SchemaError::violation(file, table, None, Some(c), "missing column")))
        .collect::<Result<_>>()?;
    let fields: Vec<SortField> = cols.iter().map(|c| SortField::new(c.data_type().clone())).collect();
    let conv = RowConverter::new(fields).map_err(|e| SchemaError::arrow(format!("{}: keys of `{table}`", file.display()), e))?;
    let rows = conv.convert_columns(&cols).map_err(|e| SchemaError::arrow(format!("{}: keys of `{table}`", file.display()), e))?;
    let mut seen: std::collections::HashMap<arrow::row::Row<'_>, usize> = std::collections::HashMap::with_capacity(rows.num_rows());
    for (i, r) in rows.iter().enumerate() {
        if let Some(&first) = seen.get(&r) {
            let shown: Vec<String> = cols.iter().map(|c| value_str(c.as_ref(), i)).collect();
            let (col, what) = if key.len() == 1 {
                (Some(key[0]), format!("duplicate {} {}", key[0], shown[0]))
            } else {
                (None, format!("duplicate ({}) = ({})", key.join(", "), shown.join(", ")))
            };
            return Err(SchemaError::violation(file, table, Some(i), col, format!("{what} (first at row {first})")));
        }
        seen.insert(r, i);
    }
    Ok(())
}

/// Rejects the first NaN or infinite value of a float column, or inside a list of floats
/// (projections, embeddings).
pub fn check_finite(file: &Path, table: &str, batch: &RecordBatch, column: &str) -> Result<()> {
    let Some(col) = batch.column_by_name(column) else { return Ok(()) };
    let as_f64 = |a: &dyn Array| -> Option<Vec<Option<f64>>> {
        let c = arrow::compute::cast(&arrow::array::make_array(a.to_data()), &DataType::Float64).ok()?;
        let c = c.as_primitive::<arrow::datatypes::Float64Type>();
        Some((0..c.len()).map(|i| c.is_valid(i).then(|| c.value(i))).collect())
    };
    let bad = |v: f64| !v.is_finite();
    match col.data_type() {
        t if is_float(t) => {
            if let Some(vals) = as_f64(col.as_ref())
                && let Some(row) = vals.iter().position(|v| v.is_some_and(bad))
            {
                let v = vals[row].unwrap_or(f64::NAN);
                return Err(SchemaError::violation(file, table, Some(row), Some(column), format!("{v} is not a finite number")));
            }
        }
        DataType::FixedSizeList(_, w) => {
            let l = col.as_fixed_size_list();
            let w = (*w).max(1) as usize;
            if let Some(vals) = as_f64(l.values().as_ref())
                && let Some(k) = vals.iter().position(|v| v.is_some_and(bad))
            {
                return Err(SchemaError::violation(
                    file,
                    table,
                    Some(k / w),
                    Some(column),
                    format!("element {} is {}, not a finite number", k % w, vals[k].unwrap_or(f64::NAN)),
                ));
            }
        }
        DataType::List(_) => {
            let l = col.as_list::<i32>();
            for row in 0..l.len() {
                if l.is_valid(row)
                    && let Some(vals) = as_f64(l.value(row).as_ref())
                    && let Some(k) = vals.iter().position(|v| v.is_some_and(bad))
                {
                    return Err(SchemaError::violation(
                        file,
                        table,
                        Some(row),
                        Some(column),
                        format!("element {k} is {}, not a finite number", vals[k].unwrap_or(f64::NAN)),
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Rejects a table without rows (where an empty input can only be a mistake).
pub fn check_not_empty(file: &Path, table: &str, batch: &RecordBatch) -> Result<()> {
    if batch.num_rows() == 0 {
        return Err(SchemaError::violation(file, table, None, None, "the file has no rows"));
    }
    Ok(())
}

/// What a file tool asks of one input table, checked by [`check_input`] with the same code ingest
/// uses: required columns without nulls, unique keys, finite numbers, and rows at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct InputRules<'a> {
    /// Columns that must be present and hold no null.
    pub required: &'a [&'a str],
    /// Keys (one or more columns) that must be unique.
    pub unique: &'a [&'a [&'a str]],
    /// Float (or list-of-float) columns whose values must be finite.
    pub finite: &'a [&'a str],
    /// Whether a table without rows is an error.
    pub non_empty: bool,
}

/// Checks a file tool's input table (`table` names it in messages: `bm25 corpus`, `pcst nodes`).
pub fn check_input(file: &Path, table: &str, batch: &RecordBatch, rules: &InputRules<'_>) -> Result<()> {
    if rules.non_empty {
        check_not_empty(file, table, batch)?;
    }
    for &c in rules.required {
        let Some(col) = batch.column_by_name(c) else {
            let have: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
            return Err(SchemaError::violation(
                file,
                table,
                None,
                Some(c),
                format!("missing required column (the file has: {})", crate::quote(&have.join(", "))),
            ));
        };
        if let Some(row) = (0..col.len()).find(|&i| col.is_null(i)) {
            return Err(SchemaError::violation(file, table, Some(row), Some(c), "missing value"));
        }
    }
    for key in rules.unique {
        check_unique_key(file, table, batch, key)?;
    }
    for &c in rules.finite {
        check_finite(file, table, batch, c)?;
    }
    Ok(())
}

/// Rejects the first value of `column` that is not in `known` (a reference to a missing row).
pub fn check_refs(spec: &TableSpec, file: &Path, batch: &RecordBatch, column: &str, known: &IdSet, what: &str) -> Result<()> {
    let a = u32s(batch, column)?;
    if let Some(row) = (0..a.len()).find(|&i| a.is_valid(i) && !known.contains(a.value(i))) {
        return Err(SchemaError::violation(
            file,
            spec.name,
            Some(row),
            Some(column),
            format!("refers to {what} {} which does not exist", a.value(row)),
        ));
    }
    Ok(())
}

/// A table together with the file it was read from (for error messages).
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    /// The file the batch was read from.
    pub file: &'a Path,
    /// Its rows.
    pub batch: &'a RecordBatch,
}

/// The largest node id a knowledge base of `n` nodes may use: 64 × n + 2^20, and never
/// `u32::MAX` (the stages' "no node" mark).
pub fn max_node_id(n: usize) -> u64 {
    (64 * n as u64 + (1 << 20)).min(u64::from(u32::MAX) - 1)
}

/// The cross-table rules of a knowledge base: unique node and query ids, edges between existing
/// nodes, answers to existing queries and nodes, node ids within [`max_node_id`].
pub fn check_kb(nodes: Located<'_>, edges: Located<'_>, queries: Option<Located<'_>>, answers: Option<Located<'_>>) -> Result<()> {
    check_unique(&tables::NODES, nodes.file, nodes.batch, "node_id")?;
    // The stages index nodes by id (tables of `max id + 1` entries), and `u32::MAX` is their "no
    // node" mark: ids may be sparse, but not beyond [`max_node_id`] of the node count.
    let ids = u32s(nodes.batch, "node_id")?;
    let bound = max_node_id(ids.len());
    if let Some(row) = ids.iter().position(|v| v.is_some_and(|v| u64::from(v) > bound)) {
        return Err(SchemaError::violation(
            nodes.file,
            tables::NODES.name,
            Some(row),
            Some("node_id"),
            format!(
                "node_id {} is above {bound}, the largest id {} nodes may use (64 × the node count + 2^20): the stages keep a table entry per id up to the largest; renumber the nodes",
                ids.value(row),
                ids.len()
            ),
        ));
    }
    let node_ids = IdSet::from_array(ids);
    for col in ["src", "dst"] {
        check_refs(&tables::EDGES, edges.file, edges.batch, col, &node_ids, "node_id")?;
    }
    if let Some(q) = queries {
        check_unique(&tables::QUERIES, q.file, q.batch, "query_id")?;
    }
    if let Some(a) = answers {
        check_refs(&tables::ANSWERS, a.file, a.batch, "node_id", &node_ids, "node_id")?;
        if let Some(q) = queries {
            let qids = IdSet::from_array(u32s(q.batch, "query_id")?);
            check_refs(&tables::ANSWERS, a.file, a.batch, "query_id", &qids, "query_id")?;
        }
    }
    Ok(())
}

/// Graph-QA rules: unique (graph_id, node_id), edges between nodes of the same graph, one question per
/// graph, and every question's graph present.
pub fn check_graph_qa(nodes: Located<'_>, edges: Located<'_>, qa: Located<'_>) -> Result<()> {
    let key = |g: u32, n: u32| (u64::from(g) << 32) | u64::from(n);
    let gids = u32s(nodes.batch, "graph_id")?;
    let nids = u32s(nodes.batch, "node_id")?;
    let mut known = std::collections::HashSet::with_capacity(nids.len());
    for row in 0..nids.len() {
        if !known.insert(key(gids.value(row), nids.value(row))) {
            return Err(SchemaError::violation(
                nodes.file,
                tables::GRAPH_NODES.name,
                Some(row),
                Some("node_id"),
                format!("duplicate node_id {} in graph {}", nids.value(row), gids.value(row)),
            ));
        }
    }
    let eg = u32s(edges.batch, "graph_id")?;
    for col in ["src", "dst"] {
        let ids = u32s(edges.batch, col)?;
        if let Some(row) = (0..ids.len()).find(|&r| !known.contains(&key(eg.value(r), ids.value(r)))) {
            return Err(SchemaError::violation(
                edges.file,
                tables::GRAPH_EDGES.name,
                Some(row),
                Some(col),
                format!("refers to node {} missing from graph {}", ids.value(row), eg.value(row)),
            ));
        }
    }
    check_unique(&tables::QA, qa.file, qa.batch, "graph_id")?;
    let graphs = IdSet::from_array(gids);
    check_refs(&tables::QA, qa.file, qa.batch, "graph_id", &graphs, "graph")
}

/// Text-attributed graph rules: unique node ids, edges between existing nodes.
pub fn check_tag(nodes: Located<'_>, edges: Located<'_>) -> Result<()> {
    check_unique(&tables::TAG_NODES, nodes.file, nodes.batch, "node_id")?;
    let ids = IdSet::from_array(u32s(nodes.batch, "node_id")?);
    for col in ["src", "dst"] {
        check_refs(&tables::TAG_EDGES, edges.file, edges.batch, col, &ids, "node_id")?;
    }
    Ok(())
}

/// E-mails of a people graph: unique ids, sender and every recipient an existing tag node.
pub fn check_emails(nodes: Located<'_>, emails: Located<'_>) -> Result<()> {
    check_unique(&tables::EMAILS, emails.file, emails.batch, "email_id")?;
    let ids = IdSet::from_array(u32s(nodes.batch, "node_id")?);
    check_refs(&tables::EMAILS, emails.file, emails.batch, "sender", &ids, "node_id")?;
    let col = emails
        .batch
        .column_by_name("recipients")
        .ok_or_else(|| SchemaError::violation(emails.file, "emails", None, Some("recipients"), "missing column"))?;
    let lists = col
        .as_list_opt::<i32>()
        .ok_or_else(|| SchemaError::violation(emails.file, "emails", None, Some("recipients"), "not a list column"))?;
    for row in 0..lists.len() {
        let v = lists.value(row);
        let Some(v) = v.as_primitive_opt::<arrow::datatypes::UInt32Type>() else {
            return Err(SchemaError::violation(emails.file, "emails", Some(row), Some("recipients"), "not a list of u32"));
        };
        if let Some(bad) = v.iter().flatten().find(|&x| !ids.contains(x)) {
            return Err(SchemaError::violation(
                emails.file,
                "emails",
                Some(row),
                Some("recipients"),
                format!("refers to node_id {bad} which does not exist"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, StringArray};
    use std::path::PathBuf;

    /// A run table (`diffusion_embeddings`): `node`, then `p00`, `p01`, … of the declared type.
    #[test]
    fn a_run_of_columns_is_checked_written_and_read_by_its_declaration() {
        use arrow::array::{Float32Array, UInt32Array};
        let spec = &tables::DIFFUSION_EMBEDDINGS;
        let f32s = |v: Vec<f32>| Arc::new(Float32Array::from(v)) as ArrayRef;
        let node = Arc::new(UInt32Array::from(vec![0, 1])) as ArrayRef;
        let b = spec.batch(vec![node.clone(), f32s(vec![0.5, 1.0]), f32s(vec![2.0, 3.0])]).expect("batch");
        let schema = b.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["node", "p00", "p01"]);
        check_written(spec, &b).expect("declared");
        // Read back through the declaration: every column of the run, cast to f32.
        let back = conform(spec, Path::new("p.parquet"), &b).expect("conform");
        assert_eq!(back.num_columns(), 3);
        // No column of the run, a column of another type, a gap in the names: refused.
        let bare = spec.batch(vec![node.clone()]).expect("batch");
        let e = check_written(spec, &bare).expect_err("no run").to_string();
        assert!(e.contains("no column of the run"), "{e}");
        let f64s = Arc::new(Float64Array::from(vec![0.5, 1.0])) as ArrayRef;
        let wrong = RecordBatch::try_from_iter([("node", node.clone()), ("p00", f64s)]).expect("f64");
        let e = check_written(spec, &wrong).expect_err("f64").to_string();
        assert!(e.contains("p00") && e.contains("Float32 × d"), "{e}");
        let gap = RecordBatch::try_from_iter([("node", node.clone()), ("p00", f32s(vec![0.0, 0.0])), ("p02", f32s(vec![0.0, 0.0]))]);
        let e = check_written(spec, &gap.expect("gap")).expect_err("gap").to_string();
        assert!(e.contains("p00, p01, …"), "{e}");
        let e = conform(spec, Path::new("p.parquet"), &batch(vec![("node", node)])).expect_err("read").to_string();
        assert!(e.contains("missing required columns p00, p01, …"), "{e}");
        // The dimension is zero-padded to the declared digits, and grows past them.
        let run = &tables::GRAPHWAVE_EMBEDDINGS.columns[1];
        assert_eq!((run.run_name(7), run.run_name(1234)), ("f007".to_string(), "f1234".to_string()));
    }

    /// A run is the last column of its table: the columns after it could not be told apart from it.
    #[test]
    fn a_run_is_its_tables_last_column() {
        for t in tables::ALL {
            if let Some(i) = t.columns.iter().position(|c| matches!(c.ty, ColType::Run { .. })) {
                assert_eq!(i + 1, t.columns.len(), "{}", t.name);
            }
        }
    }

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).expect("batch")
    }

    #[test]
    fn errors_quote_input_values_and_headers_capped_and_escaped() {
        // A 20 MB cell of NUL-like junk where an id belongs, and a header of long names.
        let junk = format!("\u{1b}[2J{}", "x".repeat(20 << 20));
        let b = batch(vec![("node_id", s(&[&junk])), ("node_type", s(&["t"])), ("name", s(&["n"])), ("doc", s(&["d"]))]);
        let e = conform(&crate::tables::NODES, Path::new("nodes.csv"), &b).expect_err("not an id").to_string();
        assert!(
            e.len() < 1000 && e.contains("\\u{1b}[2J") && e.contains("more characters"),
            "{} bytes: {}",
            e.len(),
            &e[..e.len().min(300)]
        );
        let long = "y".repeat(1 << 20);
        let b = batch(vec![(long.as_str(), s(&["1"]))]);
        let e = conform(&crate::tables::NODES, Path::new("nodes.csv"), &b).expect_err("missing column").to_string();
        assert!(e.len() < 1000 && e.contains("missing required column"), "{} bytes", e.len());
    }
    fn s(v: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from(v.to_vec()))
    }
    fn u(v: &[u32]) -> ArrayRef {
        Arc::new(UInt32Array::from(v.to_vec()))
    }
    fn violation(e: SchemaError) -> crate::Violation {
        match e {
            SchemaError::Violation(v) => *v,
            other => panic!("expected a violation, got {other}"),
        }
    }
    #[test]
    fn written_batches_are_checked_against_their_declaration() {
        let spec = &tables::EDGES;
        let ok = batch(vec![("src", u(&[0, 1])), ("dst", u(&[1, 0])), ("relation", s(&["r", "s"]))]);
        assert!(check_written(spec, &ok).is_ok());
        // Wrong order, a missing column, a wrong type, a null in a required column.
        let swapped = batch(vec![("dst", u(&[1])), ("src", u(&[0])), ("relation", s(&["r"]))]);
        assert!(check_written(spec, &swapped).expect_err("order").to_string().contains("expected [\"src\", \"dst\", \"relation\"]"));
        let missing = batch(vec![("src", u(&[0])), ("dst", u(&[1]))]);
        assert!(check_written(spec, &missing).is_err());
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.0]));
        let typed = batch(vec![("src", floats), ("dst", u(&[1])), ("relation", s(&["r"]))]);
        let v = violation(check_written(spec, &typed).expect_err("type"));
        assert_eq!(v.column.as_deref(), Some("src"));
        let null_rel: ArrayRef = Arc::new(StringArray::from(vec![Some("r"), None]));
        let nulls = batch(vec![("src", u(&[0, 1])), ("dst", u(&[1, 0])), ("relation", null_rel)]);
        assert_eq!(violation(check_written(spec, &nulls).expect_err("null")).row, Some(1));
    }

    #[test]
    fn written_scores_are_unique_on_their_key_the_seed_included() {
        let spec = &tables::SCORES;
        let scores = |seeds: &[Option<u64>]| {
            let n = seeds.len();
            let text = |v: &str| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
            let seed: ArrayRef = Arc::new(arrow::array::UInt64Array::from(seeds.to_vec()));
            batch(vec![
                ("dataset", text("d")),
                ("stage", text("toporag")),
                ("method", text("topo")),
                ("split", text("test")),
                ("group", text("model=gcn")),
                ("metric", text("accuracy")),
                ("value", Arc::new(Float64Array::from(vec![0.5; n]))),
                ("n", Arc::new(arrow::array::UInt64Array::from(vec![10u64; n]))),
                ("seed", seed),
            ])
        };
        // One row per seed and the mean (seed null): unique.
        assert!(check_written(spec, &scores(&[Some(0), Some(1), None])).is_ok());
        // The same seed twice (`gnn_seeds=[0,0]` before seed lists were checked), or two means.
        for (seeds, row) in [(vec![Some(0), Some(1), Some(0)], 2), (vec![None, Some(0), None], 2)] {
            let e = check_written(spec, &scores(&seeds)).expect_err("duplicate key");
            let v = violation(e);
            assert_eq!(v.row, Some(row));
            assert!(v.message.contains("duplicate (dataset, stage, method, split, group, metric, seed)"), "{}", v.message);
            assert!(v.message.contains("(first at row 0)"), "{}", v.message);
        }
    }

    #[test]
    fn vectors_of_any_width_conform_and_keep_their_width() {
        use arrow::array::{FixedSizeListArray, Float32Array};
        let spec = &tables::EMBEDDINGS;
        for width in [3, 5] {
            let item = Arc::new(Field::new("item", DataType::Float32, false));
            let values = Arc::new(Float32Array::from((0..2 * width).map(|i| i as f32).collect::<Vec<_>>()));
            let emb: ArrayRef = Arc::new(FixedSizeListArray::try_new(item, width, values, None).expect("list"));
            let b = batch(vec![("node_id", u(&[0, 1])), ("embedding", emb)]);
            assert!(check_written(spec, &b).is_ok());
            let c = conform(spec, Path::new("embeddings.parquet"), &b).expect("conform");
            assert!(matches!(c.column(1).data_type(), DataType::FixedSizeList(_, w) if *w == width));
            assert_eq!(c.schema().metadata().get(crate::table::META_TABLE).map(String::as_str), Some("embeddings"));
        }
        let not_a_vector = batch(vec![("node_id", u(&[0])), ("embedding", s(&["x"]))]);
        assert!(check_written(spec, &not_a_vector).is_err());
        assert_eq!(violation(conform(spec, Path::new("e.parquet"), &not_a_vector).expect_err("text")).column.as_deref(), Some("embedding"));
    }

    #[test]
    fn text_digits_cast_and_bad_value_is_located() {
        let f = PathBuf::from("nodes.csv");
        let ok = batch(vec![("node_id", s(&["0", "1"])), ("node_type", s(&["a", "b"])), ("name", s(&["x", "y"])), ("doc", s(&["d", "e"]))]);
        let c = conform(&tables::NODES, &f, &ok).expect("conform");
        assert_eq!(c.column(0).data_type(), &DataType::UInt32);
        let bad =
            batch(vec![("node_id", s(&["0", "-3"])), ("node_type", s(&["a", "b"])), ("name", s(&["x", "y"])), ("doc", s(&["d", "e"]))]);
        let v = violation(conform(&tables::NODES, &f, &bad).expect_err("negative id"));
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("node_id")));
        assert!(v.to_string().starts_with("nodes.csv: table `nodes`, row 1, column `node_id`"), "{v}");
    }

    #[test]
    fn input_rules_find_duplicates_of_any_type_non_finite_values_nulls_and_empty_tables() {
        let f = PathBuf::from("corpus.parquet");
        // String ids: the second "b" is a duplicate of row 1.
        let b = batch(vec![("doc_id", s(&["a", "b", "c", "b"])), ("text", s(&["w", "x", "y", "z"]))]);
        let v = violation(check_unique_key(&f, "bm25 corpus", &b, &["doc_id"]).expect_err("dup"));
        assert_eq!((v.row, v.column.as_deref()), (Some(3), Some("doc_id")));
        assert!(v.message.contains("duplicate doc_id b (first at row 1)"), "{}", v.message);
        // A composite key: (0, 1) twice; (0, 2) is not a duplicate.
        let k = batch(vec![("q", u(&[0, 0, 0])), ("n", u(&[1, 2, 1]))]);
        assert_eq!(violation(check_unique_key(&f, "run", &k, &["q", "n"]).expect_err("dup pair")).row, Some(2));
        assert!(check_unique_key(&f, "run", &k, &["q", "n"][..1]).is_err());
        let distinct = batch(vec![("q", u(&[0, 1, 2]))]);
        assert!(check_unique_key(&f, "run", &distinct, &["q"]).is_ok());
        // NaN in a plain column and inf inside a fixed-size list.
        let nan = batch(vec![("score", Arc::new(Float64Array::from(vec![1.0, f64::NAN])) as ArrayRef)]);
        assert_eq!(violation(check_finite(&f, "run", &nan, "score").expect_err("nan")).row, Some(1));
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let vals = Arc::new(arrow::array::Float32Array::from(vec![0.0, 1.0, 2.0, f32::INFINITY]));
        let fl: ArrayRef = Arc::new(arrow::array::FixedSizeListArray::try_new(item, 2, vals, None).expect("list"));
        let v = violation(check_finite(&f, "projection", &batch(vec![("r", fl)]), "r").expect_err("inf"));
        assert_eq!(v.row, Some(1));
        assert!(v.message.contains("element 1 is inf"), "{}", v.message);
        // Nulls in a required column, a missing column, an empty table.
        let nulls = batch(vec![("method", Arc::new(StringArray::from(vec![Some("a"), None])) as ArrayRef)]);
        let rules = InputRules { required: &["method"], non_empty: true, ..Default::default() };
        assert_eq!(violation(check_input(&f, "run", &nulls, &rules).expect_err("null")).row, Some(1));
        let none = batch(vec![("x", u(&[1]))]);
        assert_eq!(violation(check_input(&f, "run", &none, &rules).expect_err("missing")).column.as_deref(), Some("method"));
        let empty = batch(vec![("method", s(&[]))]);
        assert!(violation(check_input(&f, "run", &empty, &rules).expect_err("empty")).message.contains("no rows"));
    }

    #[test]
    fn a_value_outside_a_columns_set_is_located() {
        let f = PathBuf::from("queries.csv");
        let q = batch(vec![("query_id", u(&[0, 1])), ("text", s(&["a", "b"])), ("split", s(&["train", "training"]))]);
        let v = violation(conform(&tables::QUERIES, &f, &q).expect_err("training"));
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("split")));
        assert!(v.message.contains("`training` is not one of: train, val, test"), "{}", v.message);
        assert!(tables::QUERIES.describe().contains("train | val | test"));
    }

    #[test]
    fn float_ids_and_missing_columns_are_rejected() {
        let f = PathBuf::from("edges.parquet");
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.5]));
        let b = batch(vec![("src", floats), ("dst", u(&[0, 1])), ("relation", s(&["r", "r"]))]);
        let v = violation(conform(&tables::EDGES, &f, &b).expect_err("float ids"));
        assert_eq!((v.row, v.column.as_deref()), (Some(0), Some("src")));
        assert!(v.message.contains("Float64"), "{}", v.message);
        let b = batch(vec![("src", u(&[0])), ("relation", s(&["r"]))]);
        let v = violation(conform(&tables::EDGES, &f, &b).expect_err("missing dst"));
        assert_eq!(v.column.as_deref(), Some("dst"));
        assert!(v.message.contains("src, relation"), "{}", v.message);
    }

    #[test]
    fn nulls_in_required_columns_are_located() {
        let f = PathBuf::from("q.parquet");
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("c")]));
        let b = batch(vec![("query_id", u(&[0, 1, 2])), ("text", text), ("split", s(&["train", "val", "test"]))]);
        let v = violation(conform(&tables::QUERIES, &f, &b).expect_err("null text"));
        assert_eq!((v.row, v.column.as_deref()), (Some(1), Some("text")));
    }

    #[test]
    fn duplicate_ids_and_dangling_edges_are_located() {
        let nf = PathBuf::from("nodes.parquet");
        let ef = PathBuf::from("edges.parquet");
        let nodes = conform(
            &tables::NODES,
            &nf,
            &batch(vec![("node_id", u(&[0, 1, 2, 1])), ("node_type", s(&["a"; 4])), ("name", s(&["n"; 4])), ("doc", s(&["d"; 4]))]),
        )
        .expect("nodes");
        let edges = conform(&tables::EDGES, &ef, &batch(vec![("src", u(&[0, 2])), ("dst", u(&[1, 9])), ("relation", s(&["r", "r"]))]))
            .expect("edges");
        let v =
            violation(check_kb(Located { file: &nf, batch: &nodes }, Located { file: &ef, batch: &edges }, None, None).expect_err("dup"));
        assert_eq!((v.file.as_path(), v.row, v.column.as_deref()), (nf.as_path(), Some(3), Some("node_id")));
        assert!(v.message.contains("first at row 1"), "{}", v.message);
        let nodes = nodes.slice(0, 3);
        let v = violation(
            check_kb(Located { file: &nf, batch: &nodes }, Located { file: &ef, batch: &edges }, None, None).expect_err("dangling"),
        );
        assert_eq!((v.file.as_path(), v.row, v.column.as_deref()), (ef.as_path(), Some(1), Some("dst")));
    }

    #[test]
    fn idset_membership() {
        let mut s = IdSet::default();
        assert!(s.insert(130) && !s.insert(130) && s.insert(0));
        assert!(s.contains(130) && s.contains(0) && !s.contains(1) && !s.contains(1_000_000));
    }
}
