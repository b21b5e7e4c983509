//! The functions whose result size is chosen by their arguments (`repeat('x', 2000000000)`,
//! `lpad`, `range(1, 1e13)`, `array_repeat`, `replace`, …) build that result outside DataFusion's
//! memory pool, so a large argument aborted the process on allocation. Each is registered again
//! wrapped: before the built-in runs, the size of what it would build is computed from its
//! arguments and refused past a bound.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// How a function's result grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(text, n)`: `len(text) × n` bytes.
    Repeat,
    /// `lpad`/`rpad(text, n [, fill])`: `n` characters, up to 4 bytes each.
    Pad,
    /// `array_repeat(x, n)`: `n` elements.
    ArrayRepeat,
    /// `range`/`generate_series([start,] stop [, step])` on integers: `(stop − start) / step` elements.
    Series,
    /// `replace(text, from, to)`: every `from` (or every position, for an empty `from`) becomes `to`.
    Replace,
    /// `regexp_replace(text, pattern, replacement [, flags])`: at most one match per position.
    RegexpReplace,
}

/// The wrapped functions, by name (aliases are the built-ins' own).
const GROWING: [(&str, Growth); 8] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
    ("range", Growth::Series),
    ("generate_series", Growth::Series),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
];

/// Registers the bounded versions in `ctx`: one call may build at most `cap` bytes.
pub fn install(ctx: &SessionContext, cap: u64) {
    for (name, growth) in GROWING {
        // A function this build of DataFusion does not have needs no bound.
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(Bounded { inner, growth, cap }));
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    growth: Growth,
    cap: u64,
}

/// Argument `i` as one value per row (a constant once when every argument is constant).
fn column(args: &[ColumnarValue], i: usize, rows: usize) -> Option<ArrayRef> {
    args.get(i)?.to_array(rows).ok()
}

/// Argument `i` as integers (values that do not fit are null: the function refuses them itself).
fn ints(args: &[ColumnarValue], i: usize, rows: usize) -> Option<Int64Array> {
    let a = column(args, i, rows)?;
    if !a.data_type().is_integer() && !a.data_type().is_floating() {
        return None;
    }
    let cast = arrow::compute::cast(&a, &DataType::Int64).ok()?;
    cast.as_any().downcast_ref::<Int64Array>().cloned()
}

/// Byte lengths of argument `i` when it is text (`None` otherwise).
fn lengths(args: &[ColumnarValue], i: usize, rows: usize) -> Option<Int64Array> {
    let a = column(args, i, rows)?;
    let l = arrow::compute::kernels::length::length(&a).ok()?;
    let cast = arrow::compute::cast(&l, &DataType::Int64).ok()?;
    cast.as_any().downcast_ref::<Int64Array>().cloned()
}

fn at(a: Option<&Int64Array>, row: usize) -> Option<i64> {
    let a = a?;
    if a.is_empty() {
        return None;
    }
    // A constant argument is one value for every row.
    let r = if a.len() == 1 { 0 } else { row };
    (r < a.len() && a.is_valid(r)).then(|| a.value(r))
}

fn pos(v: Option<i64>) -> u128 {
    v.and_then(|v| u128::try_from(v).ok()).unwrap_or(0)
}

impl Bounded {
    /// The bytes the call would build (an upper bound).
    fn size(&self, args: &[ColumnarValue], number_rows: usize) -> u128 {
        let constant = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if constant { 1 } else { number_rows };
        let mut total: u128 = 0;
        match self.growth {
            Growth::Repeat => {
                let (text, n) = (lengths(args, 0, rows), ints(args, 1, rows));
                for r in 0..rows {
                    total = total.saturating_add(pos(at(text.as_ref(), r)).saturating_mul(pos(at(n.as_ref(), r))));
                }
            }
            Growth::Pad => {
                let n = ints(args, 1, rows);
                for r in 0..rows {
                    total = total.saturating_add(pos(at(n.as_ref(), r)).saturating_mul(4));
                }
            }
            Growth::ArrayRepeat => {
                let (item, n) = (lengths(args, 0, rows), ints(args, 1, rows));
                for r in 0..rows {
                    let each = pos(at(item.as_ref(), r)).max(8);
                    total = total.saturating_add(pos(at(n.as_ref(), r)).saturating_mul(each));
                }
            }
            Growth::Series => {
                let cols: Vec<Option<Int64Array>> = (0..args.len()).map(|i| ints(args, i, rows)).collect();
                // Dates and timestamps (with interval steps) are not bounded here.
                if cols.iter().any(Option::is_none) {
                    return 0;
                }
                for r in 0..rows {
                    let v = |i: usize| at(cols.get(i).and_then(Option::as_ref), r).map(i128::from);
                    let (start, stop, step) = match args.len() {
                        1 => (Some(0), v(0), Some(1)),
                        2 => (v(0), v(1), Some(1)),
                        _ => (v(0), v(1), v(2)),
                    };
                    if let (Some(start), Some(stop), Some(step)) = (start, stop, step)
                        && step != 0
                    {
                        let n = ((stop - start) / step).max(0).unsigned_abs() + 1;
                        total = total.saturating_add(n.saturating_mul(8));
                    }
                }
            }
            Growth::Replace | Growth::RegexpReplace => {
                let (text, to) = (lengths(args, 0, rows), lengths(args, 2, rows));
                let from = if self.growth == Growth::Replace { lengths(args, 1, rows) } else { None };
                for r in 0..rows {
                    let t = pos(at(text.as_ref(), r));
                    let matches = (t + 1) / pos(at(from.as_ref(), r)).max(1);
                    total = total.saturating_add(t).saturating_add(matches.saturating_mul(pos(at(to.as_ref(), r))));
                }
            }
        }
        total
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let size = self.size(&args.args, args.number_rows);
        if size > u128::from(self.cap) {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "`{}` would build {size} bytes in one call, more than the {} bytes one function call may build \
                 (a quarter of --memory-limit)",
                self.name(),
                self.cap
            )));
        }
        self.inner.invoke_with_args(args)
    }
}
