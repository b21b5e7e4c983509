//! `tgrag graphwave`: GraphWave role embeddings of any graph (TopoRAG eqs. 4–6), written as the
//! declared table `graphwave_embeddings`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use tgrag_stages::toporag::diffusion::Adjacency;
use tgrag_stages::toporag::graphwave::{self, Mode};

use crate::commands::diffusion::{ArrayValues, numbers, read_edges, write_matrix};

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Eigendecomposition of the Laplacian.
    Exact,
    /// Chebyshev polynomials of the heat kernel.
    Chebyshev,
    /// Exact up to 2,000 nodes, Chebyshev above.
    Auto,
}

/// `tgrag graphwave` arguments.
#[derive(Debug, clap::Args)]
pub struct GraphwaveArgs {
    /// Edges Parquet: `src`, `dst` (undirected, each edge once).
    #[arg(long)]
    pub edges: PathBuf,
    /// Heat scales s.
    #[arg(long, default_value = "0.5,1,3", allow_hyphen_values = true)]
    pub scales: String,
    /// Sample points T of t in [0, 100].
    #[arg(long, default_value_t = 25, allow_negative_numbers = true, value_parser = crate::commands::num::points)]
    pub points: usize,
    /// Number of nodes (default: largest id in the edges + 1).
    #[arg(long, allow_negative_numbers = true, value_parser = crate::commands::num::nodes)]
    pub num_nodes: Option<usize>,
    /// How the heat kernel is computed.
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
    /// Output Parquet: `node`, `f000`, … (per scale: T real parts, then T imaginary parts).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: GraphwaveArgs) -> Result<()> {
    let scales = numbers(&a.scales, "--scales")?;
    graphwave::check(&scales, a.points).map_err(|e| crate::config!("--scales/--points: {e}"))?;
    let (src, dst) = read_edges(&a.edges)?;
    let max_id = src.iter().chain(&dst).max().map_or(0, |&m| m as usize + 1);
    let n = match a.num_nodes {
        Some(n) if n < max_id => bail_config!("--num-nodes {n}: the edges name node {}", max_id - 1),
        Some(n) => n,
        None => max_id,
    };
    if n == 0 {
        bail_input!("{}: no edges and no --num-nodes: there is no graph to embed", a.edges.display());
    }
    // Sizes are checked against the memory before anything is allocated: a node id of 2·10⁹ or
    // --num-nodes 10⁹ is refused here with the bytes it would take.
    let width = scales.len() * 2 * a.points;
    let how =
        if a.num_nodes.is_some() { format!("--num-nodes {n}") } else { format!("largest node id {} in {}", n - 1, a.edges.display()) };
    // Too large because of --num-nodes is the option's fault; because of an id in the file, the data's.
    tgrag_schemas::limits::check_alloc(&format!("graphwave output ({how} × {width} columns)"), n as u128 * width as u128, 8)
        .map_err(|e| if a.num_nodes.is_some() { crate::config!("{e}") } else { crate::input!("{e}") })?;
    let mode = match a.mode {
        ModeArg::Exact => Mode::Exact,
        ModeArg::Chebyshev => graphwave::DEFAULT_CHEBYSHEV,
        ModeArg::Auto if n <= 2000 => Mode::Exact,
        ModeArg::Auto => graphwave::DEFAULT_CHEBYSHEV,
    };
    if mode == Mode::Exact {
        tgrag_schemas::limits::check_alloc(
            &format!("--mode exact on {n} nodes (dense n × n eigendecomposition; use --mode chebyshev)"),
            4 * (n as u128).pow(2),
            8,
        )
        .map_err(|e| crate::config!("{e}"))?;
    }
    let adj = Adjacency::from_edges(n, &src, &dst, false).with_context(|| format!("{}", a.edges.display()))?;
    let t0 = Instant::now();
    let emb = graphwave::embed(&adj, &scales, a.points, graphwave::T_MAX, mode)?;
    write_matrix(&tgrag_schemas::tables::GRAPHWAVE_EMBEDDINGS, &a.out, n, width, ArrayValues::F64(&emb))?;
    eprintln!(
        "graphwave: N = {n}, {} scales × {} points ({:?}) in {:.3}s → {}",
        scales.len(),
        a.points,
        mode,
        t0.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}
