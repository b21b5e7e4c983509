//! `tgrag pcst`: prize-collecting Steiner trees for any instances (the pcst_fast port of
//! `tgrag_stages::graphqa::pcst`), solved in parallel, written in the order pcst_fast returns them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use rayon::prelude::*;
use tgrag_schemas::io;
use tgrag_schemas::rows::{Row, Rows};
use tgrag_schemas::tables;
use tgrag_schemas::validate::{InputRules, check_input};
use tgrag_stages::graphqa::pcst::{Pruning, pcst};

/// `--pruning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PruningArg {
    /// Every phase-1 edge and its nodes.
    None,
    /// Edges whose two ends were kept.
    Simple,
    /// Goemans–Williamson's reverse-delete pruning (G-Retriever's setting).
    Gw,
    /// Per component, the best root and every subtree that pays for itself.
    Strong,
}

/// `tgrag pcst` arguments.
#[derive(Debug, clap::Args)]
pub struct PcstArgs {
    /// Nodes Parquet: `instance_id` (int), `node` (int, 0..n−1 per instance, every node once), `prize` (float ≥ 0).
    #[arg(long)]
    pub nodes: PathBuf,
    /// Edges Parquet: `instance_id`, `edge_index` (0..m−1 per instance), `src`, `dst`, `cost` (float ≥ 0).
    #[arg(long)]
    pub edges: PathBuf,
    /// Output folder: `vertices.parquet` (`instance_id`, `pos`, `node`) and `edges.parquet`
    /// (`instance_id`, `pos`, `edge_index`).
    #[arg(long)]
    pub out: PathBuf,
    /// Root node, or −1 for the unrooted problem.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub root: i64,
    /// Trees in the forest (unrooted only; 1 with a root).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = crate::commands::num::count)]
    pub clusters: usize,
    #[arg(long, value_enum, default_value_t = PruningArg::Gw)]
    pub pruning: PruningArg,
}

/// A column as i64 or f64, with the file, row and column of the first null.
fn ints(b: &RecordBatch, path: &Path, name: &str) -> Result<Vec<i64>> {
    let c = b.column_by_name(name).with_context(|| format!("{}: missing column `{name}`", path.display()))?;
    if !c.data_type().is_integer() {
        bail_input!("{}: column `{name}` is {}, expected integers", path.display(), c.data_type());
    }
    if let Some(row) = (0..c.len()).find(|&i| c.is_null(i)) {
        bail_input!("{}: row {row}, column `{name}`: missing value", path.display());
    }
    // A value the cast turns into a null did not fit (a uint64 above 2⁶³ − 1): named as such.
    let cast = arrow::compute::cast(c, &DataType::Int64)?;
    if let Some(row) = (0..cast.len()).find(|&i| cast.is_null(i)) {
        let v = arrow::util::display::array_value_to_string(c, row).unwrap_or_default();
        bail_input!("{}: row {row}, column `{name}`: {v} is out of range (at most 2^63 - 1)", path.display());
    }
    Ok(cast.as_primitive::<Int64Type>().values().to_vec())
}

/// The first negative value of a column that must be ≥ 0, as an error naming file, row and column.
fn non_negative(v: &[f64], path: &Path, name: &str) -> Result<()> {
    match v.iter().position(|&x| x < 0.0) {
        Some(row) => bail_input!("{}: row {row}, column `{name}`: {} is negative ({name}s are ≥ 0)", path.display(), v[row]),
        None => Ok(()),
    }
}

fn floats(b: &RecordBatch, path: &Path, name: &str) -> Result<Vec<f64>> {
    let c = b.column_by_name(name).with_context(|| format!("{}: missing column `{name}`", path.display()))?;
    if !(c.data_type().is_floating() || c.data_type().is_integer()) {
        bail_input!("{}: column `{name}` is {}, expected numbers", path.display(), c.data_type());
    }
    let c = arrow::compute::cast(c, &DataType::Float64)?;
    if let Some(row) = (0..c.len()).find(|&i| c.is_null(i)) {
        bail_input!("{}: row {row}, column `{name}`: missing value", path.display());
    }
    Ok(c.as_primitive::<Float64Type>().values().to_vec())
}

/// One instance: prizes by node, edges and costs by edge index.
#[derive(Default)]
struct Instance {
    prizes: Vec<Option<f64>>,
    /// (src, dst, cost, row of the edges file).
    edges: Vec<Option<(u32, u32, f64, usize)>>,
}

fn slot<T: Clone>(v: &mut Vec<Option<T>>, i: usize) -> &mut Option<T> {
    if v.len() <= i {
        v.resize(i + 1, None);
    }
    &mut v[i]
}

/// An instance as [`pcst`] takes it: edges, prizes by node, costs by edge.
type Arrays = (Vec<(u32, u32)>, Vec<f64>, Vec<f64>);

/// One solved instance: its id, the kept nodes and the kept edge indices, in pcst_fast's order.
type Solved = (i64, Vec<u32>, Vec<u32>);

/// `tgrag pcst`: checks the flags, reads and groups the instances, solves them in parallel, writes
/// both files.
pub fn run(a: PcstArgs) -> Result<()> {
    let (pruning, root) = settings(&a)?;
    let (nb, eb) = read_tables(&a)?;
    let inst = instances(&a, &nb, &eb)?;
    let t0 = Instant::now();
    let solved: Vec<Solved> = inst
        .par_iter()
        .map(|(&id, x)| {
            let (edges, prizes, costs) = arrays(&a, id, x)?;
            let (v, e) = pcst(&edges, &prizes, &costs, root, a.clusters, pruning)
                .map_err(|e| crate::input!("{}: instance {id}: {e}", a.nodes.display()))?;
            Ok((id, v, e))
        })
        .collect::<Result<_>>()?;
    let secs = t0.elapsed().as_secs_f64();
    write(&a.out, &solved)?;
    eprintln!("pcst: {} instances solved in {secs:.4}s ({:?} pruning) → {}", solved.len(), a.pruning, a.out.display());
    Ok(())
}

/// The pruning method and the root from the flags, refusing a root or cluster count that
/// cannot work before any file is read.
fn settings(a: &PcstArgs) -> Result<(Pruning, Option<usize>)> {
    let pruning = match a.pruning {
        PruningArg::None => Pruning::None,
        PruningArg::Simple => Pruning::Simple,
        PruningArg::Gw => Pruning::Gw,
        PruningArg::Strong => Pruning::Strong,
    };
    let root = match a.root {
        -1 => None,
        r if r >= 0 => Some(r as usize),
        r => bail_config!("--root {r}: give a node id, or -1 for the unrooted problem"),
    };
    if root.is_some() && a.clusters != 1 {
        bail_config!("--clusters {} with --root {}: a rooted tree is one cluster (use --clusters 1)", a.clusters, a.root);
    }
    if a.clusters == 0 {
        bail_config!("--clusters 0: ask for at least one tree");
    }
    Ok((pruning, root))
}

/// The nodes and edges files, read and checked against their input rules.
fn read_tables(a: &PcstArgs) -> Result<(RecordBatch, RecordBatch)> {
    let nb = tgrag_schemas::io::read_parquet(&a.nodes)?;
    let eb = tgrag_schemas::io::read_parquet(&a.edges)?;
    check_input(
        &a.nodes,
        "pcst nodes",
        &nb,
        &InputRules {
            required: &["instance_id", "node", "prize"],
            unique: &[&["instance_id", "node"]],
            finite: &["prize"],
            non_empty: true,
        },
    )?;
    check_input(
        &a.edges,
        "pcst edges",
        &eb,
        &InputRules {
            required: &["instance_id", "edge_index", "src", "dst", "cost"],
            unique: &[&["instance_id", "edge_index"]],
            finite: &["cost"],
            non_empty: false,
        },
    )?;
    Ok((nb, eb))
}

/// The rows grouped by instance, each node and edge in its slot; a slot filled twice, a
/// negative prize or cost, or an id that cannot be one is an error naming file, row and column.
fn instances(a: &PcstArgs, nb: &RecordBatch, eb: &RecordBatch) -> Result<BTreeMap<i64, Instance>> {
    let (ni, nn, np) = (ints(nb, &a.nodes, "instance_id")?, ints(nb, &a.nodes, "node")?, floats(nb, &a.nodes, "prize")?);
    let (ei, ex, es, ed, ec) = (
        ints(eb, &a.edges, "instance_id")?,
        ints(eb, &a.edges, "edge_index")?,
        ints(eb, &a.edges, "src")?,
        ints(eb, &a.edges, "dst")?,
        floats(eb, &a.edges, "cost")?,
    );
    non_negative(&np, &a.nodes, "prize")?;
    non_negative(&ec, &a.edges, "cost")?;
    let mut inst: BTreeMap<i64, Instance> = BTreeMap::new();
    for r in 0..ni.len() {
        // Nodes are 0..n−1 per instance, so no id reaches the file's row count: a larger one is a
        // mistake, refused before any per-instance vector is sized by it.
        let v = usize::try_from(nn[r]).ok().filter(|&v| v < nn.len()).ok_or_else(|| {
            crate::input!("{}: row {r}, column `node`: {} is not a node id (0..n−1 per instance)", a.nodes.display(), nn[r])
        })?;
        if slot(&mut inst.entry(ni[r]).or_default().prizes, v).replace(np[r]).is_some() {
            bail_input!("{}: row {r}, column `node`: node {v} of instance {} appears twice", a.nodes.display(), ni[r]);
        }
    }
    for r in 0..ei.len() {
        let e = usize::try_from(ex[r]).ok().filter(|&e| e < ex.len()).with_context(|| {
            format!("{}: row {r}, column `edge_index`: {} is not an edge index (0..m−1 per instance)", a.edges.display(), ex[r])
        })?;
        let end = |x: i64, col: &str| {
            u32::try_from(x).with_context(|| format!("{}: row {r}, column `{col}`: {x} is not a node id", a.edges.display()))
        };
        let (s, d) = (end(es[r], "src")?, end(ed[r], "dst")?);
        if slot(&mut inst.entry(ei[r]).or_default().edges, e).replace((s, d, ec[r], r)).is_some() {
            bail_input!("{}: row {r}, column `edge_index`: edge {e} of instance {} appears twice", a.edges.display(), ei[r]);
        }
    }
    Ok(inst)
}

/// Instance `id` as arrays: every node 0..n−1 and every edge 0..m−1 present, endpoints among
/// the instance's nodes.
fn arrays(a: &PcstArgs, id: i64, x: &Instance) -> Result<Arrays> {
    let prizes: Vec<f64> = x
        .prizes
        .iter()
        .enumerate()
        .map(|(v, p)| p.with_context(|| format!("{}: instance {id} has no row for node {v} (nodes are 0..n−1)", a.nodes.display())))
        .collect::<Result<_>>()?;
    let mut edges = Vec::with_capacity(x.edges.len());
    let mut costs = Vec::with_capacity(x.edges.len());
    for (j, e) in x.edges.iter().enumerate() {
        let (s, d, c, row) =
            e.with_context(|| format!("{}: instance {id} has no row for edge {j} (edge indices are 0..m−1)", a.edges.display()))?;
        for (col, v) in [("src", s), ("dst", d)] {
            if v as usize >= prizes.len() {
                bail_input!(
                    "{}: row {row}, column `{col}`: node {v} is not a node of instance {id} (it has {} nodes: 0..{})",
                    a.edges.display(),
                    prizes.len(),
                    prizes.len().saturating_sub(1)
                );
            }
        }
        edges.push((s, d));
        costs.push(c);
    }
    Ok((edges, prizes, costs))
}

/// One row struct for both files: (instance, position, kept node or edge).
struct Kept {
    instance_id: i64,
    pos: u32,
    id: i64,
}

impl Row for Kept {
    fn put(&self, out: &mut Rows) {
        out.put(self.instance_id).put(self.pos).put(self.id);
    }
}

/// `vertices.parquet` and `edges.parquet` under `out`, in the order the instances were solved.
fn write(out: &Path, solved: &[Solved]) -> Result<()> {
    let (mut vertices, mut edges) = (Rows::new(&tables::PCST_VERTICES), Rows::new(&tables::PCST_EDGES));
    for (id, v, e) in solved {
        for (k, &n) in v.iter().enumerate() {
            vertices.push(&Kept { instance_id: *id, pos: k as u32, id: i64::from(n) });
        }
        for (k, &j) in e.iter().enumerate() {
            edges.push(&Kept { instance_id: *id, pos: k as u32, id: i64::from(j) });
        }
    }
    let (vertices, edges) = (vertices.finish()?, edges.finish()?);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // Both files are written before either replaces an old one: a failure leaves the old pair.
    let (vp, ep) = (out.join("vertices.parquet"), out.join("edges.parquet"));
    let vt = io::write_table_tmp(&tables::PCST_VERTICES, &vp, &vertices)?;
    let et = io::write_table_tmp(&tables::PCST_EDGES, &ep, &edges).inspect_err(|_| io::discard(std::slice::from_ref(&vt)))?;
    io::commit_all(&[(vt, vp), (et, ep)])?;
    Ok(())
}
