//! `tgrag diffusion`: TopoRAG proximity embeddings P = Σ α_k Â^k R of any graph (eq. 3). Inputs are
//! checked (file, row, column) before work starts; the output is the declared table
//! `diffusion_embeddings` (`diffusion_embeddings_f64` under `--f64`), checked and written to a
//! temporary file and renamed. The edge and matrix helpers here serve `tgrag graphwave` too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, AsArray, Float32Array, Float64Array, UInt32Array};
use arrow::datatypes::{DataType, Float64Type, UInt32Type};
use arrow::record_batch::RecordBatch;
use tgrag_schemas::{TableSpec, tables};
use tgrag_stages::toporag::diffusion::{Adjacency, diffuse_f32, diffuse_f64};

/// `tgrag diffusion` arguments.
#[derive(Debug, clap::Args)]
pub struct DiffusionArgs {
    /// Edges Parquet: `src`, `dst` (integers; undirected edges given once).
    #[arg(long)]
    pub edges: PathBuf,
    /// Projection Parquet: `node` (0..N−1) and `r00`, `r01`, … (float).
    #[arg(long)]
    pub projection: PathBuf,
    /// α_1,…,α_K (K = number of diffusion steps).
    #[arg(long, default_value = "1,1,1", allow_hyphen_values = true)]
    pub alpha: String,
    /// Treat edges as arcs src → dst (default: undirected).
    #[arg(long)]
    pub directed: bool,
    /// Compute and write in f64 (default f32).
    #[arg(long)]
    pub f64: bool,
    /// Output Parquet: `node`, `p00`, … (rows in node order).
    #[arg(long)]
    pub out: PathBuf,
}

pub(crate) fn numbers(s: &str, flag: &str) -> Result<Vec<f64>> {
    s.split(',').map(|x| x.trim().parse::<f64>().with_context(|| format!("{flag} {s}: `{x}` is not a number"))).collect()
}

/// A column cast to u32, with the file, row and column of the first value that does not fit.
pub(crate) fn u32_column(b: &RecordBatch, path: &Path, name: &str) -> Result<Vec<u32>> {
    let c = b.column_by_name(name).with_context(|| format!("{}: missing column `{name}`", path.display()))?;
    if !c.data_type().is_integer() {
        bail_input!("{}: column `{name}` is {}, expected integers", path.display(), c.data_type());
    }
    let cast = arrow::compute::cast(c, &DataType::UInt32)?;
    if cast.null_count() > 0
        && let Some(row) = (0..cast.len()).find(|&i| cast.is_null(i))
    {
        bail_input!("{}: row {row}, column `{name}`: missing or not a non-negative 32-bit id", path.display());
    }
    Ok(cast.as_primitive::<UInt32Type>().values().to_vec())
}

pub(crate) fn read_edges(path: &Path) -> Result<(Vec<u32>, Vec<u32>)> {
    let b = tgrag_schemas::io::read_parquet(path)?;
    Ok((u32_column(&b, path, "src")?, u32_column(&b, path, "dst")?))
}

/// Writes an n × d row-major matrix as the declared table `spec`: `node` (0..n−1), then one column
/// per dimension (the table's run: `p00`, `f000`, …).
pub(crate) fn write_matrix(spec: &TableSpec, out: &Path, n: usize, d: usize, values: ArrayValues<'_>) -> Result<()> {
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from_iter_values(0..n as u32))];
    for c in 0..d {
        cols.push(match &values {
            ArrayValues::F32(v) => Arc::new(Float32Array::from_iter_values((0..n).map(|i| v[i * d + c]))),
            ArrayValues::F64(v) => Arc::new(Float64Array::from_iter_values((0..n).map(|i| v[i * d + c]))),
        });
    }
    tgrag_schemas::io::write_table(spec, out, &spec.batch(cols)?)?;
    Ok(())
}

pub(crate) enum ArrayValues<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

pub fn run(a: DiffusionArgs) -> Result<()> {
    let alphas = numbers(&a.alpha, "--alpha")?;
    if alphas.is_empty() || alphas.iter().any(|x| !x.is_finite()) {
        bail_config!("--alpha {}: give K finite weights, e.g. 1,1,1", a.alpha);
    }
    let t_read = Instant::now();
    let Projection { n, d, r } = read_projection(&a.projection)?;
    let (src, dst) = read_edges(&a.edges)?;
    let t_read = t_read.elapsed().as_secs_f64();
    let t_csr = Instant::now();
    let adj = Adjacency::from_edges(n, &src, &dst, a.directed).with_context(|| format!("{}", a.edges.display()))?;
    let t_csr = t_csr.elapsed().as_secs_f64();
    // The f32 projection is converted before the clock starts, as the bench's scipy side does.
    let r32: Vec<f32> = if a.f64 { Vec::new() } else { r.iter().map(|&v| v as f32).collect() };
    let (p32, p64);
    let t0 = Instant::now();
    let values = if a.f64 {
        p64 = diffuse_f64(&adj, &r, d, &alphas);
        ArrayValues::F64(&p64)
    } else {
        p32 = diffuse_f32(&adj, &r32, d, &alphas);
        ArrayValues::F32(&p32)
    };
    let t_diffuse = t0.elapsed().as_secs_f64();
    let spec = if a.f64 { &tables::DIFFUSION_EMBEDDINGS_F64 } else { &tables::DIFFUSION_EMBEDDINGS };
    write_matrix(spec, &a.out, n, d, values)?;
    eprintln!(
        "diffusion: N = {n}, nnz(A) = {}, d = {d}, K = {} ({}) in {t_diffuse:.3}s (read {t_read:.2}s, csr {t_csr:.2}s) → {}",
        adj.indices.len(),
        alphas.len(),
        if a.f64 { "f64" } else { "f32" },
        a.out.display()
    );
    Ok(())
}

/// The projection R: n nodes × d columns, row-major in node order.
struct Projection {
    n: usize,
    d: usize,
    r: Vec<f64>,
}

/// Reads and checks the projection Parquet: one row per node 0..N−1, columns `r00`, `r01`, ….
fn read_projection(path: &Path) -> Result<Projection> {
    let proj = tgrag_schemas::io::read_parquet(path)?;
    tgrag_schemas::validate::check_not_empty(path, "diffusion projection", &proj)?;
    let nodes = u32_column(&proj, path, "node")?;
    let n = nodes.len();
    let slot = node_rows(&nodes, path)?;
    let rcols = projection_columns(&proj, path)?;
    let d = rcols.len();
    let mut r = vec![0.0f64; n * d];
    for (c, name) in rcols.iter().enumerate() {
        let col = float_column(&proj, path, name)?;
        let v = col.as_primitive::<Float64Type>().values();
        for (node, &row) in slot.iter().enumerate() {
            r[node * d + c] = v[row];
        }
    }
    Ok(Projection { n, d, r })
}

/// The row of each node 0..N−1 (N = rows), refusing a node out of range or given twice.
fn node_rows(nodes: &[u32], path: &Path) -> Result<Vec<usize>> {
    let n = nodes.len();
    let mut slot = vec![usize::MAX; n];
    for (row, &node) in nodes.iter().enumerate() {
        let s = slot
            .get_mut(node as usize)
            .with_context(|| format!("{}: row {row}, column `node`: {node} is not in 0..{n} (one row per node)", path.display()))?;
        if *s != usize::MAX {
            bail_input!("{}: row {row}, column `node`: node {node} appears twice (first at row {})", path.display(), *s);
        }
        *s = row;
    }
    Ok(slot)
}

/// The names of the projection columns (`r` then digits), in schema order; at least one.
fn projection_columns(proj: &RecordBatch, path: &Path) -> Result<Vec<String>> {
    let rcols: Vec<String> = proj
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|c| c.starts_with('r') && c.len() > 1 && c[1..].chars().all(|x| x.is_ascii_digit()))
        .collect();
    if rcols.is_empty() {
        bail_input!("{}: no projection columns `r00`, `r01`, …", path.display());
    }
    Ok(rcols)
}

/// A projection column cast to f64, refusing a non-numeric type, a missing or a non-finite value.
fn float_column(proj: &RecordBatch, path: &Path, name: &str) -> Result<ArrayRef> {
    let col = proj.column_by_name(name).with_context(|| format!("{}: column `{name}`", path.display()))?;
    if !col.data_type().is_floating() && !col.data_type().is_integer() {
        bail_input!("{}: column `{name}` is {}, expected floats", path.display(), col.data_type());
    }
    let col = arrow::compute::cast(col, &DataType::Float64)?;
    if col.null_count() > 0
        && let Some(row) = (0..col.len()).find(|&i| col.is_null(i))
    {
        bail_input!("{}: row {row}, column `{name}`: missing value", path.display());
    }
    tgrag_schemas::validate::check_finite(
        path,
        "diffusion projection",
        &arrow::record_batch::RecordBatch::try_from_iter([(name, col.clone())])?,
        name,
    )?;
    Ok(col)
}
