//! Prize-collecting Steiner tree / forest (PCST / PCSF) solver: a faithful,
//! dependency-free port of `pcst_fast` (Hegde, Indyk & Schmidt, "A nearly-linear
//! time framework for graph-structured sparsity", ICML 2015; C++ reference
//! implementation `fraenkel-lab/pcst_fast`, PyPI `pcst-fast` 1.0.10).
//!
//! The port reproduces the C++ output bit for bit, including the *order* of the
//! returned vertices and edges: every floating-point expression is evaluated in
//! the same order and precision (`f64`), and every tie is broken exactly as the
//! C++ data structures break it.
//!
//! # Problem
//!
//! Given an undirected graph with non-negative node prizes `p(v)` and edge costs
//! `c(e)`, find a forest `F` minimising
//! `sum of c(e) over edges of F + sum of p(v) over vertices not in F`.
//! Unrooted, the forest has (at most) `num_clusters` trees; rooted, it is a single
//! tree that contains the root.
//!
//! # Algorithm: Goemans–Williamson moat growing
//!
//! Every vertex starts as its own *cluster*. All clusters except the one holding
//! the root are *active* and grow a dual "moat" at unit speed. Two kinds of events
//! happen over (continuous) time:
//!
//! * **Cluster deactivation**: an active cluster whose moats have paid for all of
//!   its prizes (`time = start + prize_sum - subcluster_moat_sum`) becomes
//!   inactive and stops growing.
//! * **Edge event**: the moats on both sides of an edge fill it completely; the
//!   two clusters merge (the edge joins the "phase 1" forest). The merged cluster
//!   is active unless it contains the root.
//!
//! Growth stops once only `num_clusters` active clusters remain (0 when rooted).
//!
//! Edges are split into two *edge parts*, one per endpoint. Each cluster keeps
//! its edge parts in a *pairing heap* keyed by the time at which that part would
//! next need attention; heaps support lazy "add a constant to every key"
//! (`child_offset`), which is how the keys of an inactive cluster's edges are
//! shifted when it is absorbed into an active one. An edge part event does not
//! necessarily merge: the part is rescheduled to the time when the edge would be
//! tight, given what both sides have grown so far (the "remainder"). An edge is
//! tight when `remainder < 1e-10 * cost` or `remainder == 0`. The next edge event
//! and next deactivation are found through two indexed priority queues ordered by
//! `(time, cluster index)`; on equal times a deactivation wins over an edge event.
//! Sums of moats along the merge tree are computed with path compression
//! (`skip_up`).
//!
//! # Pruning
//!
//! The phase 1 forest is then pruned. The four methods differ as follows:
//!
//! * [`Pruning::None`]: all phase 1 edges (including those in clusters that
//!   later became inactive); vertices are the phase 1 edge endpoints in edge order
//!   followed by the remaining "good" vertices (the members of the final active
//!   clusters, or of the root cluster), in index order.
//! * [`Pruning::Simple`]: only the good vertices (index order) and the phase 1
//!   edges whose endpoints are both good (phase 1 order): the "phase 2" forest.
//! * [`Pruning::Gw`]: classical GW pruning of the phase 2 forest. Edges are
//!   visited in reverse merge order. An edge that merged two active clusters is
//!   kept and marks the clusters on both sides "necessary"; an edge that attached
//!   an inactive cluster is kept only if that inactive cluster was marked
//!   necessary, otherwise the whole subtree on the inactive side is deleted.
//!   (Edges that joined the root cluster count as merges of active clusters.)
//!   Edges are returned in the order they were kept (reverse merge order);
//!   vertices in index order.
//! * [`Pruning::Strong`]: for each tree of the phase 2 forest, a dynamic program
//!   finds the connected subtree of maximum net worth (prizes minus costs): the
//!   tree is first rooted at its best vertex (rerooting DP; for the root's tree,
//!   at the root), then every subtree whose contribution is `<= 0` is cut off.
//!   Edges are returned in phase 2 order, vertices in index order.
//!
//! See [`pcst`] for the entry point.
//!
//! # Layout
//!
//! As upstream splits it: `pairing_heap` and `priority_queue` (the two data
//! structures), `growth` (clusters, edge parts and the moat-growing loop) and
//! `pruning` (the good node set and the four pruning methods). This module holds
//! the public API, the input checks and the solver state the two phases share.

use std::fmt;
use std::str::FromStr;

use growth::{Cluster, EdgePart, InactiveMergeEvent};
use pairing_heap::PairingHeaps;
use priority_queue::IndexedQueue;

mod growth;
mod pairing_heap;
mod priority_queue;
mod pruning;
#[cfg(test)]
mod tests;

/// Pruning method applied to the forest found by the GW growth phase.
///
/// See the [module documentation](self) for what each method does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pruning {
    /// No pruning: all edges of the growth phase.
    None,
    /// Keep only the clusters that were active at the end (or the root cluster).
    Simple,
    /// Goemans–Williamson pruning (what pcst_fast users usually call `'gw'`).
    Gw,
    /// Strong pruning: optimal subtree of every tree of the simple-pruned forest.
    Strong,
}

impl FromStr for Pruning {
    type Err = PcstError;

    /// Parses the pruning names accepted by pcst_fast: `"none"`, `"simple"`, `"gw"`,
    /// `"strong"`. Like the C++ `parse_pruning_method` (which builds a lowercase
    /// copy but then compares the original string), matching is case-sensitive.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Pruning::None),
            "simple" => Ok(Pruning::Simple),
            "gw" => Ok(Pruning::Gw),
            "strong" => Ok(Pruning::Strong),
            _ => Err(PcstError(format!("unknown pruning method {s:?} (expected \"none\", \"simple\", \"gw\" or \"strong\")"))),
        }
    }
}

/// Invalid input to [`pcst`]; the message says which argument (and index) is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcstError(pub String);

impl fmt::Display for PcstError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pcst: {}", self.0)
    }
}

impl std::error::Error for PcstError {}

/// Solves a prize-collecting Steiner tree/forest instance exactly like
/// `pcst_fast.pcst_fast(edges, prizes, costs, root, num_clusters, pruning, 0)`.
///
/// * `edges`: undirected edges as `(src, dst)` node indices (parallel edges and
///   self-loops are allowed, as in pcst_fast);
/// * `prizes`: one non-negative finite prize per node (its length is the node count);
/// * `costs`: one non-negative finite cost per edge;
/// * `root`: `None` for the unrooted problem (prize-collecting Steiner forest);
///   `Some(r)` for a tree that must contain node `r`;
/// * `num_clusters`: number of trees wanted when unrooted (>= 1); must be 1 when
///   rooted;
/// * `pruning`: see [`Pruning`].
///
/// Returns `(vertices, edges)`: the selected node indices and the indices (into
/// `edges`) of the selected edges, in pcst_fast's output order.
///
/// # Errors
/// A [`PcstError`] for negative or non-finite prizes/costs, an edge endpoint or
/// root out of range, `costs.len() != edges.len()`, `num_clusters != 1` with a
/// root, `num_clusters == 0` without one, or an instance too large for 32-bit
/// indices.
pub fn pcst(
    edges: &[(u32, u32)],
    prizes: &[f64],
    costs: &[f64],
    root: Option<usize>,
    num_clusters: usize,
    pruning: Pruning,
) -> Result<(Vec<u32>, Vec<u32>), PcstError> {
    check_sizes(edges, prizes, costs)?;
    check_values(edges, prizes, costs)?;
    let target_num_active_clusters = target_num_active_clusters(root, num_clusters, prizes.len())?;
    // `root < n <= MAX_ITEMS`, so the cast is lossless.
    let root = root.map(|r| r as u32);
    let mut solver = Solver::new(edges, prizes, costs, root, target_num_active_clusters);
    let phase1_result = solver.grow();
    Ok(solver.prune(phase1_result, pruning))
}

/// Sizes: one cost per edge, and few enough nodes and edges for the 32-bit indices.
fn check_sizes(edges: &[(u32, u32)], prizes: &[f64], costs: &[f64]) -> Result<(), PcstError> {
    let n = prizes.len();
    if costs.len() != edges.len() {
        return Err(PcstError(format!(
            "costs has {} entries but there are {} edges (one cost per edge expected)",
            costs.len(),
            edges.len()
        )));
    }
    // Clusters (up to 2n - 1) and edge parts (2m) are addressed with u32 and
    // `u32::MAX` is the "none" sentinel; the C++ uses `int` for both.
    const MAX_ITEMS: usize = (i32::MAX / 2) as usize;
    if n > MAX_ITEMS {
        return Err(PcstError(format!("too many nodes ({n}, at most {MAX_ITEMS})")));
    }
    if edges.len() > MAX_ITEMS {
        return Err(PcstError(format!("too many edges ({}, at most {MAX_ITEMS})", edges.len())));
    }
    Ok(())
}

/// Values: finite non-negative prizes and costs, edge endpoints in range.
fn check_values(edges: &[(u32, u32)], prizes: &[f64], costs: &[f64]) -> Result<(), PcstError> {
    let n = prizes.len();
    for (i, &p) in prizes.iter().enumerate() {
        if !p.is_finite() {
            return Err(PcstError(format!("prize of node {i} is not finite ({p})")));
        }
        if p < 0.0 {
            return Err(PcstError(format!("prize of node {i} is negative ({p})")));
        }
    }
    for (i, &c) in costs.iter().enumerate() {
        if !c.is_finite() {
            return Err(PcstError(format!("cost of edge {i} is not finite ({c})")));
        }
        if c < 0.0 {
            return Err(PcstError(format!("cost of edge {i} is negative ({c})")));
        }
    }
    for (i, &(u, v)) in edges.iter().enumerate() {
        if u as usize >= n || v as usize >= n {
            return Err(PcstError(format!("edge {i} = ({u}, {v}) has an endpoint out of range (there are {n} nodes)")));
        }
    }
    Ok(())
}

/// The number of active clusters at which growth stops, after checking `root`
/// against the `n` nodes and `num_clusters` against the root.
fn target_num_active_clusters(root: Option<usize>, num_clusters: usize, n: usize) -> Result<usize, PcstError> {
    match root {
        Some(r) => {
            if r >= n {
                return Err(PcstError(format!("root {r} is out of range (there are {n} nodes)")));
            }
            if num_clusters != 1 {
                return Err(PcstError(format!("in the rooted case only one output cluster is supported (num_clusters = {num_clusters})")));
            }
            // As in the python binding: rooted growth runs until no cluster is active.
            Ok(0)
        }
        None => {
            if num_clusters == 0 {
                return Err(PcstError("num_clusters must be at least 1 in the unrooted case".to_string()));
            }
            Ok(num_clusters)
        }
    }
}

/// "No index" sentinel for the pairing heap links and the priority queue positions.
const NONE: u32 = u32::MAX;

/// One solve (the C++ `PCSTFast` object): the input, the growth phase's clusters,
/// heaps and queues, and the pruning phase's scratch state. Fields are private to
/// this module and its two phases, `growth` and `pruning`.
struct Solver<'a> {
    edges: &'a [(u32, u32)],
    prizes: &'a [f64],
    costs: &'a [f64],
    root: Option<u32>,
    target_num_active_clusters: usize,

    heaps: PairingHeaps,
    edge_parts: Vec<EdgePart>,
    /// Per edge: the inactive merge event it caused, if any.
    edge_inactive_merge_event: Vec<Option<u32>>,
    clusters: Vec<Cluster>,
    /// Every cluster's links up the merge tree (`Up`), index for index with `clusters`.
    ups: Vec<growth::Up>,
    inactive_merge_events: Vec<InactiveMergeEvent>,
    clusters_deactivation: IndexedQueue,
    clusters_next_edge_event: IndexedQueue,
    current_time: f64,
    node_good: Vec<bool>,
    node_deleted: Vec<bool>,
    phase2_result: Vec<u32>,

    path_compression_visited: Vec<(u32, f64)>,
    cluster_queue: Vec<u32>,
    phase3_neighbors: Vec<Vec<(u32, f64)>>,

    // Strong pruning.
    final_component_label: Vec<Option<u32>>,
    final_components: Vec<Vec<u32>>,
    root_component_index: Option<usize>,
    strong_pruning_parent: Vec<(Option<u32>, f64)>,
    strong_pruning_payoff: Vec<f64>,
    stack: Vec<(bool, u32)>,
    stack2: Vec<u32>,
}
