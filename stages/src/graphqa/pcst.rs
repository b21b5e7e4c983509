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

use std::fmt;
use std::str::FromStr;

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
    let target_num_active_clusters = match root {
        Some(r) => {
            if r >= n {
                return Err(PcstError(format!("root {r} is out of range (there are {n} nodes)")));
            }
            if num_clusters != 1 {
                return Err(PcstError(format!("in the rooted case only one output cluster is supported (num_clusters = {num_clusters})")));
            }
            // As in the python binding: rooted growth runs until no cluster is active.
            0
        }
        None => {
            if num_clusters == 0 {
                return Err(PcstError("num_clusters must be at least 1 in the unrooted case".to_string()));
            }
            num_clusters
        }
    };
    // `root < n <= MAX_ITEMS`, so the cast is lossless.
    let root = root.map(|r| r as u32);
    let mut solver = Solver::new(edges, prizes, costs, root, target_num_active_clusters);
    Ok(solver.run(pruning))
}

/// "No index" sentinel for the pairing heap links and the priority queue positions.
const NONE: u32 = u32::MAX;

/// Relative tolerance under which an edge counts as tight (`eps` in the C++).
const EPS: f64 = 1e-10;

// ---------------------------------------------------------------------------
// Pairing heap (port of pairing_heap.h)
// ---------------------------------------------------------------------------

/// One pairing heap node. Node `i` always holds edge part `i` (the C++ payload),
/// so the arena index doubles as the C++ `ItemHandle`: an edge part is in at most
/// one heap at a time and is only re-inserted after it has been popped.
#[derive(Clone, Copy)]
struct HeapNode {
    sibling: u32,
    child: u32,
    /// Parent if this is the first child, otherwise the left sibling.
    left_up: u32,
    /// Key, relative to the pending `child_offset`s of the ancestors.
    value: f64,
    /// Lazy offset still to be added to every descendant.
    child_offset: f64,
}

/// Arena of pairing heap nodes shared by all clusters' heaps. A heap is
/// identified by its root node (`NONE` when empty); all operations mirror the
/// C++ `PairingHeap` exactly (same linking order, same tie-breaking: on equal
/// keys `link` makes its *second* argument the root).
struct PairingHeaps {
    nodes: Vec<HeapNode>,
    buffer: Vec<u32>,
}

impl PairingHeaps {
    fn new(num_nodes: usize) -> Self {
        let empty = HeapNode { sibling: NONE, child: NONE, left_up: NONE, value: 0.0, child_offset: 0.0 };
        PairingHeaps { nodes: vec![empty; num_nodes], buffer: Vec::new() }
    }

    /// Minimum `(value, payload)` of the heap rooted at `root`.
    fn get_min(&self, root: u32) -> Option<(f64, u32)> {
        (root != NONE).then(|| (self.nodes[root as usize].value, root))
    }

    /// Inserts node `node` with key `value`; returns the new root.
    fn insert(&mut self, root: u32, node: u32, value: f64) -> u32 {
        self.nodes[node as usize] = HeapNode { sibling: NONE, child: NONE, left_up: NONE, value, child_offset: 0.0 };
        self.link(root, node)
    }

    /// Adds `value` to every key of the heap (lazily, through the root).
    fn add_to_heap(&mut self, root: u32, value: f64) {
        if root != NONE {
            let r = &mut self.nodes[root as usize];
            r.value += value;
            r.child_offset += value;
        }
    }

    /// The C++ `decrease_key(node, from_value, to_value)`: `from_value` is the
    /// node's current true key (its descendants keep their relative keys); the key
    /// becomes `to_value` and the node is cut and re-linked at the root. Returns
    /// the new root.
    fn decrease_key(&mut self, root: u32, node: u32, from_value: f64, to_value: f64) -> u32 {
        let ni = node as usize;
        let additional_offset = from_value - self.nodes[ni].value;
        self.nodes[ni].child_offset += additional_offset;
        self.nodes[ni].value = to_value;
        let left_up = self.nodes[ni].left_up;
        if left_up == NONE {
            return root;
        }
        let sibling = self.nodes[ni].sibling;
        let lu = &mut self.nodes[left_up as usize];
        if lu.child == node {
            lu.child = sibling;
        } else {
            lu.sibling = sibling;
        }
        if sibling != NONE {
            self.nodes[sibling as usize].left_up = left_up;
        }
        self.nodes[ni].left_up = NONE;
        self.nodes[ni].sibling = NONE;
        self.link(root, node)
    }

    /// Removes the minimum; returns `(new_root, removed node)`. Two-pass pairing:
    /// pairs left to right, then links the pairs right to left.
    fn delete_min(&mut self, root: u32) -> (u32, u32) {
        debug_assert!(root != NONE);
        let result = root;
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        let offset = self.nodes[result as usize].child_offset;
        let mut cur_child = self.nodes[result as usize].child;
        while cur_child != NONE {
            buffer.push(cur_child);
            let c = &mut self.nodes[cur_child as usize];
            let next_child = c.sibling;
            c.left_up = NONE;
            c.sibling = NONE;
            c.value += offset;
            c.child_offset += offset;
            cur_child = next_child;
        }

        let mut merged_children = 0;
        while merged_children + 2 <= buffer.len() {
            buffer[merged_children / 2] = self.link(buffer[merged_children], buffer[merged_children + 1]);
            merged_children += 2;
        }
        if merged_children != buffer.len() {
            buffer[merged_children / 2] = buffer[merged_children];
            buffer.truncate(merged_children / 2 + 1);
        } else {
            buffer.truncate(merged_children / 2);
        }

        let new_root = match buffer.split_last() {
            Some((&last, rest)) => {
                let mut r = last;
                for &b in rest.iter().rev() {
                    r = self.link(r, b);
                }
                r
            }
            None => NONE,
        };
        self.buffer = buffer;
        (new_root, result)
    }

    /// Links two heaps (either may be empty); returns the new root. On equal
    /// keys `node2` becomes the root, as in the C++.
    fn link(&mut self, node1: u32, node2: u32) -> u32 {
        if node1 == NONE {
            return node2;
        }
        if node2 == NONE {
            return node1;
        }
        let (smaller, larger) =
            if self.nodes[node1 as usize].value < self.nodes[node2 as usize].value { (node1, node2) } else { (node2, node1) };
        let smaller_child = self.nodes[smaller as usize].child;
        let smaller_offset = self.nodes[smaller as usize].child_offset;
        if smaller_child != NONE {
            self.nodes[smaller_child as usize].left_up = larger;
        }
        let l = &mut self.nodes[larger as usize];
        l.sibling = smaller_child;
        l.left_up = smaller;
        l.value -= smaller_offset;
        l.child_offset -= smaller_offset;
        self.nodes[smaller as usize].child = larger;
        smaller
    }
}

// ---------------------------------------------------------------------------
// Indexed priority queue (port of priority_queue.h)
// ---------------------------------------------------------------------------

/// Min-queue of `(value, index)` pairs, at most one per index, ordered
/// lexicographically like the C++ `std::set<std::pair<double, int>>`. Since keys
/// are unique, the minimum (and hence the algorithm's behaviour) does not depend
/// on the internal layout, so a binary heap with a position map replaces the
/// red-black tree.
struct IndexedQueue {
    heap: Vec<(f64, u32)>,
    /// Position of each index in `heap`, or `NONE`.
    pos: Vec<u32>,
}

#[inline]
fn key_less(a: (f64, u32), b: (f64, u32)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

impl IndexedQueue {
    fn with_capacity(num_indices: usize) -> Self {
        IndexedQueue { heap: Vec::with_capacity(num_indices), pos: vec![NONE; num_indices] }
    }

    fn get_min(&self) -> Option<(f64, u32)> {
        self.heap.first().copied()
    }

    fn insert(&mut self, value: f64, index: u32) {
        let i = index as usize;
        if i >= self.pos.len() {
            self.pos.resize(i + 1, NONE);
        }
        debug_assert!(self.pos[i] == NONE, "index {index} inserted twice");
        if self.pos[i] != NONE {
            self.delete_element(index);
        }
        self.heap.push((value, index));
        let p = self.heap.len() - 1;
        self.pos[i] = p as u32;
        self.sift_up(p);
    }

    fn delete_min(&mut self) {
        if let Some(&(_, index)) = self.heap.first() {
            self.delete_element(index);
        }
    }

    fn delete_element(&mut self, index: u32) {
        let Some(&p) = self.pos.get(index as usize) else {
            return;
        };
        if p == NONE {
            return;
        }
        let p = p as usize;
        self.pos[index as usize] = NONE;
        let last = self.heap.len() - 1;
        if p != last {
            self.heap.swap(p, last);
            self.heap.pop();
            self.pos[self.heap[p].1 as usize] = p as u32;
            self.sift_down(p);
            self.sift_up(p);
        } else {
            self.heap.pop();
        }
    }

    fn sift_up(&mut self, mut p: usize) {
        while p > 0 {
            let parent = (p - 1) / 2;
            if key_less(self.heap[p], self.heap[parent]) {
                self.swap(p, parent);
                p = parent;
            } else {
                break;
            }
        }
    }

    fn sift_down(&mut self, mut p: usize) {
        let len = self.heap.len();
        loop {
            let l = 2 * p + 1;
            if l >= len {
                break;
            }
            let r = l + 1;
            let c = if r < len && key_less(self.heap[r], self.heap[l]) { r } else { l };
            if key_less(self.heap[c], self.heap[p]) {
                self.swap(p, c);
                p = c;
            } else {
                break;
            }
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }
}

// ---------------------------------------------------------------------------
// The solver (port of pcst_fast.h / pcst_fast.cc)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct EdgePart {
    next_event_val: f64,
    deleted: bool,
}

#[derive(Clone, Copy)]
struct InactiveMergeEvent {
    inactive_cluster_index: u32,
    active_cluster_node: u32,
    inactive_cluster_node: u32,
}

#[derive(Clone, Copy)]
struct Cluster {
    /// Root of this cluster's edge-part pairing heap (`NONE` if empty).
    edge_parts: u32,
    active: bool,
    active_start_time: f64,
    active_end_time: f64,
    merged_into: Option<u32>,
    prize_sum: f64,
    subcluster_moat_sum: f64,
    moat: f64,
    contains_root: bool,
    skip_up: Option<u32>,
    skip_up_sum: f64,
    /// Edge along which the two children were merged (`None` for a leaf).
    merged_along: Option<u32>,
    child_cluster_1: u32,
    child_cluster_2: u32,
    necessary: bool,
}

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

impl<'a> Solver<'a> {
    /// The C++ constructor: initial clusters, edge parts and event queues.
    fn new(edges: &'a [(u32, u32)], prizes: &'a [f64], costs: &'a [f64], root: Option<u32>, target_num_active_clusters: usize) -> Self {
        let n = prizes.len();
        let m = edges.len();
        let max_clusters = (2 * n).max(1);
        let mut s = Solver {
            edges,
            prizes,
            costs,
            root,
            target_num_active_clusters,
            heaps: PairingHeaps::new(2 * m),
            edge_parts: vec![EdgePart { next_event_val: 0.0, deleted: false }; 2 * m],
            edge_inactive_merge_event: vec![None; m],
            clusters: Vec::with_capacity(max_clusters),
            inactive_merge_events: Vec::new(),
            clusters_deactivation: IndexedQueue::with_capacity(max_clusters),
            clusters_next_edge_event: IndexedQueue::with_capacity(max_clusters),
            current_time: 0.0,
            node_good: Vec::new(),
            node_deleted: vec![false; n],
            phase2_result: Vec::new(),
            path_compression_visited: Vec::new(),
            cluster_queue: Vec::new(),
            phase3_neighbors: Vec::new(),
            final_component_label: Vec::new(),
            final_components: Vec::new(),
            root_component_index: None,
            strong_pruning_parent: Vec::new(),
            strong_pruning_payoff: Vec::new(),
            stack: Vec::new(),
            stack2: Vec::new(),
        };

        for (ii, &prize) in prizes.iter().enumerate() {
            let is_root = root == Some(ii as u32);
            s.clusters.push(Cluster {
                edge_parts: NONE,
                active: !is_root,
                active_start_time: 0.0,
                active_end_time: if is_root { 0.0 } else { -1.0 },
                merged_into: None,
                prize_sum: prize,
                subcluster_moat_sum: 0.0,
                moat: 0.0,
                contains_root: is_root,
                skip_up: None,
                skip_up_sum: 0.0,
                merged_along: None,
                child_cluster_1: NONE,
                child_cluster_2: NONE,
                necessary: false,
            });
            if !is_root {
                s.clusters_deactivation.insert(prize, ii as u32);
            }
        }

        for (ii, (&(uu, vv), &cost)) in edges.iter().zip(costs).enumerate() {
            let (uu, vv) = (uu as usize, vv as usize);
            let uu_active = s.clusters[uu].active;
            let vv_active = s.clusters[vv].active;
            let (uu_val, vv_val) = if uu_active && vv_active {
                let event_time = cost / 2.0;
                (event_time, event_time)
            } else if uu_active {
                (cost, 0.0)
            } else if vv_active {
                (0.0, cost)
            } else {
                (0.0, 0.0)
            };
            let (uu_part, vv_part) = (2 * ii, 2 * ii + 1);
            s.edge_parts[uu_part].next_event_val = uu_val;
            s.edge_parts[vv_part].next_event_val = vv_val;
            // current_time = 0, so the next event time of each part is its value.
            s.clusters[uu].edge_parts = s.heaps.insert(s.clusters[uu].edge_parts, uu_part as u32, uu_val);
            s.clusters[vv].edge_parts = s.heaps.insert(s.clusters[vv].edge_parts, vv_part as u32, vv_val);
        }

        for ii in 0..n {
            if s.clusters[ii].active
                && let Some((val, _)) = s.heaps.get_min(s.clusters[ii].edge_parts)
            {
                s.clusters_next_edge_event.insert(val, ii as u32);
            }
        }
        s
    }

    /// Next edge event: `(time, cluster, edge part)`; the time is the heap key.
    fn get_next_edge_event(&self) -> Option<(f64, u32, u32)> {
        let (_, cluster) = self.clusters_next_edge_event.get_min()?;
        let (time, part) = self.heaps.get_min(self.clusters[cluster as usize].edge_parts)?;
        Some((time, cluster, part))
    }

    fn remove_next_edge_event(&mut self, cluster: u32) {
        let ci = cluster as usize;
        self.clusters_next_edge_event.delete_element(cluster);
        let root = self.clusters[ci].edge_parts;
        if root == NONE {
            return;
        }
        let (new_root, _) = self.heaps.delete_min(root);
        self.clusters[ci].edge_parts = new_root;
        if let Some((val, _)) = self.heaps.get_min(new_root) {
            self.clusters_next_edge_event.insert(val, cluster);
        }
    }

    /// Sum of the moats covering edge part `edge_part_index` from its endpoint up
    /// to the current top-level cluster. Returns `(total_sum, finished_moat_sum,
    /// top-level cluster)`; compresses the visited path (`skip_up`).
    fn get_sum_on_edge_part(&mut self, edge_part_index: u32) -> (f64, f64, u32) {
        let (first, second) = self.edges[(edge_part_index / 2) as usize];
        let endpoint = if edge_part_index % 2 == 1 { second } else { first };

        let mut total_sum = 0.0;
        let mut cur = endpoint;
        self.path_compression_visited.clear();

        while self.clusters[cur as usize].merged_into.is_some() {
            self.path_compression_visited.push((cur, total_sum));
            let c = &self.clusters[cur as usize];
            if let Some(skip_up) = c.skip_up {
                total_sum += c.skip_up_sum;
                cur = skip_up;
            } else if let Some(merged_into) = c.merged_into {
                total_sum += c.moat;
                cur = merged_into;
            }
        }

        for &(visited, visited_sum) in &self.path_compression_visited {
            let c = &mut self.clusters[visited as usize];
            c.skip_up = Some(cur);
            c.skip_up_sum = total_sum - visited_sum;
        }

        let finished_moat_sum;
        let c = &self.clusters[cur as usize];
        if c.active {
            finished_moat_sum = total_sum;
            total_sum += self.current_time - c.active_start_time;
        } else {
            total_sum += c.moat;
            finished_moat_sum = total_sum;
        }
        (total_sum, finished_moat_sum, cur)
    }

    /// Marks every node of cluster `start` as good (BFS over the merge tree).
    fn mark_nodes_as_good(&mut self, start: u32) {
        self.cluster_queue.clear();
        self.cluster_queue.push(start);
        let mut queue_index = 0;
        while queue_index < self.cluster_queue.len() {
            let cur = self.cluster_queue[queue_index] as usize;
            queue_index += 1;
            let c = &self.clusters[cur];
            if c.merged_along.is_some() {
                let (c1, c2) = (c.child_cluster_1, c.child_cluster_2);
                self.cluster_queue.push(c1);
                self.cluster_queue.push(c2);
            } else {
                self.node_good[cur] = true;
            }
        }
    }

    fn mark_clusters_as_necessary(&mut self, start: u32) {
        let mut cur = start as usize;
        while !self.clusters[cur].necessary {
            self.clusters[cur].necessary = true;
            match self.clusters[cur].merged_into {
                Some(next) => cur = next as usize,
                None => return,
            }
        }
    }

    /// Deletes `start` and everything reachable from it in the phase 2 forest
    /// without going through `parent`.
    fn mark_nodes_as_deleted(&mut self, start: u32, parent: u32) {
        self.node_deleted[start as usize] = true;
        self.cluster_queue.clear();
        self.cluster_queue.push(start);
        let mut queue_index = 0;
        while queue_index < self.cluster_queue.len() {
            let cur = self.cluster_queue[queue_index] as usize;
            queue_index += 1;
            for &(next, _) in &self.phase3_neighbors[cur] {
                if next == parent || self.node_deleted[next as usize] {
                    continue;
                }
                self.node_deleted[next as usize] = true;
                self.cluster_queue.push(next);
            }
        }
    }

    /// Growth phase followed by the requested pruning.
    fn run(&mut self, pruning: Pruning) -> (Vec<u32>, Vec<u32>) {
        let mut phase1_result: Vec<u32> = Vec::new();
        let mut num_active_clusters = self.prizes.len() - usize::from(self.root.is_some());

        while num_active_clusters > self.target_num_active_clusters {
            let next_edge = self.get_next_edge_event();
            let next_cluster = self.clusters_deactivation.get_min();
            let next_cluster_time = next_cluster.map_or(f64::INFINITY, |e| e.0);

            match next_edge {
                Some((time, cluster, part)) if time < next_cluster_time => {
                    self.current_time = time;
                    self.remove_next_edge_event(cluster);
                    self.edge_event(part, &mut phase1_result, &mut num_active_clusters);
                }
                _ => {
                    // Cluster deactivation (wins ties against edge events).
                    let Some((_, ci)) = next_cluster else {
                        // Unreachable: an active cluster is always queued for
                        // deactivation. (The C++ would index cluster -1 here.)
                        break;
                    };
                    self.current_time = next_cluster_time;
                    self.clusters_deactivation.delete_min();
                    let c = &mut self.clusters[ci as usize];
                    c.active = false;
                    c.active_end_time = self.current_time;
                    c.moat = c.active_end_time - c.active_start_time;
                    if c.edge_parts != NONE {
                        self.clusters_next_edge_event.delete_element(ci);
                    }
                    num_active_clusters -= 1;
                }
            }
        }

        // Mark the root cluster or the remaining active clusters as good.
        self.node_good = vec![false; self.prizes.len()];
        if self.root.is_some() {
            let root_cluster = self.clusters.iter().position(|c| c.contains_root && c.merged_into.is_none());
            if let Some(ii) = root_cluster {
                self.mark_nodes_as_good(ii as u32);
            }
        } else {
            for ii in 0..self.clusters.len() {
                if self.clusters[ii].active {
                    self.mark_nodes_as_good(ii as u32);
                }
            }
        }

        if pruning == Pruning::None {
            let nodes = self.build_phase1_node_set(&phase1_result);
            return (nodes, phase1_result);
        }

        let edges = self.edges;
        self.phase2_result = phase1_result
            .iter()
            .copied()
            .filter(|&e| {
                let (u, v) = edges[e as usize];
                self.node_good[u as usize] && self.node_good[v as usize]
            })
            .collect();

        if pruning == Pruning::Simple {
            let nodes = self.build_phase2_node_set();
            return (nodes, std::mem::take(&mut self.phase2_result));
        }

        self.phase3_neighbors = vec![Vec::new(); self.prizes.len()];
        for &e in &self.phase2_result {
            let (uu, vv) = edges[e as usize];
            let cost = self.costs[e as usize];
            self.phase3_neighbors[uu as usize].push((vv, cost));
            self.phase3_neighbors[vv as usize].push((uu, cost));
        }

        let phase3_result = if pruning == Pruning::Gw { self.gw_pruning() } else { self.strong_pruning() };
        (self.build_phase3_node_set(), phase3_result)
    }

    /// Processes the edge event of edge part `part` (already removed from its
    /// heap), at `self.current_time`.
    fn edge_event(&mut self, part: u32, phase1_result: &mut Vec<u32>, num_active_clusters: &mut usize) {
        let pi = part as usize;
        if self.edge_parts[pi].deleted {
            return;
        }

        let other_part = part ^ 1;
        let oi = other_part as usize;
        let edge = part / 2;
        let current_edge_cost = self.costs[edge as usize];

        let (sum_current_edge_part, _current_finished_moat_sum, current_ci) = self.get_sum_on_edge_part(part);
        let (sum_other_edge_part, other_finished_moat_sum, other_ci) = self.get_sum_on_edge_part(other_part);
        let (cur_u, other_u) = (current_ci as usize, other_ci as usize);

        let remainder = current_edge_cost - sum_current_edge_part - sum_other_edge_part;

        if current_ci == other_ci {
            // Both endpoints are already in the same cluster.
            self.edge_parts[oi].deleted = true;
            return;
        }

        let current_time = self.current_time;
        if remainder < EPS * current_edge_cost || remainder == 0.0 {
            // ---- Merge event ----
            phase1_result.push(edge);
            self.edge_parts[oi].deleted = true;

            let new_ci = self.clusters.len() as u32;
            let cur = self.clusters[cur_u];
            let oth = self.clusters[other_u];
            let contains_root = cur.contains_root || oth.contains_root;
            let end_time = current_time + remainder;
            self.clusters.push(Cluster {
                edge_parts: NONE,
                active: !contains_root,
                // The C++ leaves both times uninitialised for an inactive (root)
                // cluster; they are then only ever used to reschedule edge parts
                // in the root cluster's heap, which is never polled.
                active_start_time: end_time,
                active_end_time: end_time,
                merged_into: None,
                prize_sum: cur.prize_sum + oth.prize_sum,
                subcluster_moat_sum: cur.subcluster_moat_sum + oth.subcluster_moat_sum,
                moat: 0.0,
                contains_root,
                skip_up: None,
                skip_up_sum: 0.0,
                merged_along: Some(edge),
                child_cluster_1: current_ci,
                child_cluster_2: other_ci,
                necessary: false,
            });

            {
                let c = &mut self.clusters[cur_u];
                c.active = false;
                c.active_end_time = current_time + remainder;
                c.merged_into = Some(new_ci);
                c.moat = c.active_end_time - c.active_start_time;
            }
            self.clusters_deactivation.delete_element(current_ci);
            *num_active_clusters -= 1;
            if self.clusters[cur_u].edge_parts != NONE {
                self.clusters_next_edge_event.delete_element(current_ci);
            }

            if self.clusters[other_u].active {
                let c = &mut self.clusters[other_u];
                c.active = false;
                c.active_end_time = current_time + remainder;
                c.moat = c.active_end_time - c.active_start_time;
                let has_edges = c.edge_parts != NONE;
                self.clusters_deactivation.delete_element(other_ci);
                if has_edges {
                    self.clusters_next_edge_event.delete_element(other_ci);
                }
                *num_active_clusters -= 1;
            } else if !self.clusters[other_u].contains_root {
                let c = self.clusters[other_u];
                let edge_event_update_time = current_time + remainder - c.active_end_time;
                self.heaps.add_to_heap(c.edge_parts, edge_event_update_time);
                let (first, second) = self.edges[edge as usize];
                let (active_node, inactive_node) = if part % 2 == 1 { (second, first) } else { (first, second) };
                self.inactive_merge_events.push(InactiveMergeEvent {
                    inactive_cluster_index: other_ci,
                    active_cluster_node: active_node,
                    inactive_cluster_node: inactive_node,
                });
                self.edge_inactive_merge_event[edge as usize] = Some((self.inactive_merge_events.len() - 1) as u32);
            }
            self.clusters[other_u].merged_into = Some(new_ci);

            let melded = self.heaps.link(self.clusters[cur_u].edge_parts, self.clusters[other_u].edge_parts);
            self.clusters[cur_u].edge_parts = NONE;
            self.clusters[other_u].edge_parts = NONE;

            let cur_moat = self.clusters[cur_u].moat;
            let other_moat = self.clusters[other_u].moat;
            let nc = &mut self.clusters[new_ci as usize];
            nc.edge_parts = melded;
            nc.subcluster_moat_sum += cur_moat;
            nc.subcluster_moat_sum += other_moat;

            if nc.active {
                nc.active_start_time = current_time + remainder;
                let becoming_inactive_time = current_time + remainder + nc.prize_sum - nc.subcluster_moat_sum;
                self.clusters_deactivation.insert(becoming_inactive_time, new_ci);
                if let Some((val, _)) = self.heaps.get_min(melded) {
                    self.clusters_next_edge_event.insert(val, new_ci);
                }
                *num_active_clusters += 1;
            }
        } else if self.clusters[other_u].active {
            // ---- Growth event, both sides active: meet in the middle ----
            let next_event_time = current_time + remainder / 2.0;
            self.edge_parts[pi].next_event_val = sum_current_edge_part + remainder / 2.0;
            if self.clusters[cur_u].edge_parts != NONE {
                self.clusters_next_edge_event.delete_element(current_ci);
            }
            let root = self.heaps.insert(self.clusters[cur_u].edge_parts, part, next_event_time);
            self.clusters[cur_u].edge_parts = root;
            if let Some((val, _)) = self.heaps.get_min(root) {
                self.clusters_next_edge_event.insert(val, current_ci);
            }

            self.clusters_next_edge_event.delete_element(other_ci);
            let oc = self.clusters[other_u];
            let from_value = oc.active_start_time + self.edge_parts[oi].next_event_val - other_finished_moat_sum;
            let other_root = self.heaps.decrease_key(oc.edge_parts, other_part, from_value, next_event_time);
            self.clusters[other_u].edge_parts = other_root;
            if let Some((val, _)) = self.heaps.get_min(other_root) {
                self.clusters_next_edge_event.insert(val, other_ci);
            }
            self.edge_parts[oi].next_event_val = sum_other_edge_part + remainder / 2.0;
        } else {
            // ---- Growth event, other side inactive: this side covers the rest ----
            let next_event_time = current_time + remainder;
            self.edge_parts[pi].next_event_val = current_edge_cost - other_finished_moat_sum;
            if self.clusters[cur_u].edge_parts != NONE {
                self.clusters_next_edge_event.delete_element(current_ci);
            }
            let root = self.heaps.insert(self.clusters[cur_u].edge_parts, part, next_event_time);
            self.clusters[cur_u].edge_parts = root;
            if let Some((val, _)) = self.heaps.get_min(root) {
                self.clusters_next_edge_event.insert(val, current_ci);
            }

            let oc = self.clusters[other_u];
            let from_value = oc.active_end_time + self.edge_parts[oi].next_event_val - other_finished_moat_sum;
            let other_root = self.heaps.decrease_key(oc.edge_parts, other_part, from_value, oc.active_end_time);
            self.clusters[other_u].edge_parts = other_root;
            self.edge_parts[oi].next_event_val = other_finished_moat_sum;
        }
    }

    /// GW pruning; returns the kept edges (reverse merge order).
    fn gw_pruning(&mut self) -> Vec<u32> {
        let mut phase3_result = Vec::new();
        for ii in (0..self.phase2_result.len()).rev() {
            let e = self.phase2_result[ii];
            let (uu, vv) = self.edges[e as usize];
            if self.node_deleted[uu as usize] && self.node_deleted[vv as usize] {
                continue;
            }
            match self.edge_inactive_merge_event[e as usize] {
                None => {
                    // Both endpoint clusters were active when merged.
                    self.mark_clusters_as_necessary(uu);
                    self.mark_clusters_as_necessary(vv);
                    phase3_result.push(e);
                }
                Some(ev) => {
                    let ev = self.inactive_merge_events[ev as usize];
                    if self.clusters[ev.inactive_cluster_index as usize].necessary {
                        phase3_result.push(e);
                        self.mark_clusters_as_necessary(ev.inactive_cluster_node);
                        self.mark_clusters_as_necessary(ev.active_cluster_node);
                    } else {
                        self.mark_nodes_as_deleted(ev.inactive_cluster_node, ev.active_cluster_node);
                    }
                }
            }
        }
        phase3_result
    }

    /// Strong pruning; returns the kept edges (phase 2 order).
    fn strong_pruning(&mut self) -> Vec<u32> {
        let n = self.prizes.len();
        self.final_component_label = vec![None; n];
        self.root_component_index = None;
        self.strong_pruning_parent = vec![(None, -1.0); n];
        self.strong_pruning_payoff = vec![-1.0; n];

        for ii in 0..self.phase2_result.len() {
            let (cur, _) = self.edges[self.phase2_result[ii] as usize];
            if self.final_component_label[cur as usize].is_none() {
                self.final_components.push(Vec::new());
                self.label_final_component(cur, self.final_components.len() - 1);
            }
        }

        for ii in 0..self.final_components.len() {
            let start = match (self.root_component_index, self.root) {
                (Some(rci), Some(root)) if rci == ii => root,
                _ => self.find_best_component_root(ii),
            };
            self.strong_pruning_from(start, true);
        }

        let edges = self.edges;
        self.phase2_result
            .iter()
            .copied()
            .filter(|&e| {
                let (u, v) = edges[e as usize];
                !self.node_deleted[u as usize] && !self.node_deleted[v as usize]
            })
            .collect()
    }

    fn label_final_component(&mut self, start: u32, new_component_index: usize) {
        self.cluster_queue.clear();
        self.cluster_queue.push(start);
        let label = Some(new_component_index as u32);
        self.final_component_label[start as usize] = label;
        let mut queue_next = 0;
        while queue_next < self.cluster_queue.len() {
            let cur = self.cluster_queue[queue_next];
            queue_next += 1;
            self.final_components[new_component_index].push(cur);
            if Some(cur) == self.root {
                self.root_component_index = Some(new_component_index);
            }
            for &(next, _) in &self.phase3_neighbors[cur as usize] {
                if self.final_component_label[next as usize].is_none() {
                    self.cluster_queue.push(next);
                    self.final_component_label[next as usize] = label;
                }
            }
        }
    }

    /// Post-order DP from `start`: payoff(v) = prize(v) + sum over children c of
    /// max(0, payoff(c) - cost(v, c)); optionally deletes the subtrees with a
    /// non-positive contribution.
    fn strong_pruning_from(&mut self, start: u32, mark_as_deleted: bool) {
        self.stack.clear();
        self.stack.push((true, start));
        self.strong_pruning_parent[start as usize] = (None, 0.0);

        while let Some((begin, cur)) = self.stack.pop() {
            let cu = cur as usize;
            if begin {
                self.stack.push((false, cur));
                let parent = self.strong_pruning_parent[cu].0;
                for &(next, next_cost) in &self.phase3_neighbors[cu] {
                    if Some(next) == parent {
                        continue;
                    }
                    self.strong_pruning_parent[next as usize] = (Some(cur), next_cost);
                    self.stack.push((true, next));
                }
            } else {
                self.strong_pruning_payoff[cu] = self.prizes[cu];
                let parent = self.strong_pruning_parent[cu].0;
                for ii in 0..self.phase3_neighbors[cu].len() {
                    let (next, next_cost) = self.phase3_neighbors[cu][ii];
                    if Some(next) == parent {
                        continue;
                    }
                    let next_payoff = self.strong_pruning_payoff[next as usize] - next_cost;
                    if next_payoff <= 0.0 {
                        if mark_as_deleted {
                            self.mark_nodes_as_deleted(next, cur);
                        }
                    } else {
                        self.strong_pruning_payoff[cu] += next_payoff;
                    }
                }
            }
        }
    }

    /// Rerooting DP: the vertex of the component whose best subtree is worth most
    /// (first one found on ties, in the C++ traversal order).
    fn find_best_component_root(&mut self, component_index: usize) -> u32 {
        let mut best_root = self.final_components[component_index][0];
        self.strong_pruning_from(best_root, false);
        let mut best_value = self.strong_pruning_payoff[best_root as usize];

        self.stack2.clear();
        self.stack2.extend(self.phase3_neighbors[best_root as usize].iter().map(|&(v, _)| v));

        while let Some(cur) = self.stack2.pop() {
            let cu = cur as usize;
            let (cur_parent, parent_edge_cost) = self.strong_pruning_parent[cu];
            // Every node pushed here has a parent (it was reached from one).
            let Some(cur_parent) = cur_parent else {
                continue;
            };
            let mut parent_val_without_cur_node = self.strong_pruning_payoff[cur_parent as usize];
            let cur_node_net_payoff = self.strong_pruning_payoff[cu] - parent_edge_cost;
            if cur_node_net_payoff > 0.0 {
                parent_val_without_cur_node -= cur_node_net_payoff;
            }
            if parent_val_without_cur_node > parent_edge_cost {
                self.strong_pruning_payoff[cu] += parent_val_without_cur_node - parent_edge_cost;
            }
            if self.strong_pruning_payoff[cu] > best_value {
                best_root = cur;
                best_value = self.strong_pruning_payoff[cu];
            }
            for &(next, _) in &self.phase3_neighbors[cu] {
                if next != cur_parent {
                    self.stack2.push(next);
                }
            }
        }
        best_root
    }

    /// Good, non-deleted nodes in index order.
    fn build_phase3_node_set(&self) -> Vec<u32> {
        (0..self.prizes.len()).filter(|&i| !self.node_deleted[i] && self.node_good[i]).map(|i| i as u32).collect()
    }

    /// Good nodes in index order.
    fn build_phase2_node_set(&self) -> Vec<u32> {
        (0..self.prizes.len()).filter(|&i| self.node_good[i]).map(|i| i as u32).collect()
    }

    /// Endpoints of `edge_set` in edge order, then the remaining good nodes.
    fn build_phase1_node_set(&self, edge_set: &[u32]) -> Vec<u32> {
        let mut included = vec![false; self.prizes.len()];
        let mut node_set = Vec::new();
        for &e in edge_set {
            let (uu, vv) = self.edges[e as usize];
            for w in [uu, vv] {
                if !included[w as usize] {
                    included[w as usize] = true;
                    node_set.push(w);
                }
            }
        }
        for (ii, &good) in self.node_good.iter().enumerate() {
            if good && !included[ii] {
                node_set.push(ii as u32);
            }
        }
        node_set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(v: &[u32]) -> Vec<u32> {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    }

    /// Runs one upstream test case. `expected_*` are the upstream expectations
    /// (compared sorted, as upstream does); `order` is the exact output of the C++
    /// pcst_fast for the same call.
    #[allow(clippy::too_many_arguments)]
    fn run_algo(
        edges: &[(u32, u32)],
        prizes: &[f64],
        costs: &[f64],
        root: Option<usize>,
        num_clusters: usize,
        pruning: Pruning,
        expected_nodes: &[u32],
        expected_edges: &[u32],
        order: (&[u32], &[u32]),
    ) {
        let (nodes, edge_result) = pcst(edges, prizes, costs, root, num_clusters, pruning).expect("valid input");
        assert_eq!(sorted(&nodes), sorted(expected_nodes), "node set");
        assert_eq!(sorted(&edge_result), sorted(expected_edges), "edge set");
        assert_eq!((nodes.as_slice(), edge_result.as_slice()), order, "output order");
    }

    // ---- The 18 cases of upstream src/pcst_fast_test.cc. Upstream passes
    // target_num_active_clusters = 0 when rooted; through the python-binding style
    // API used here that is `root = Some(r), num_clusters = 1`.

    const SIMPLE_EDGES: [(u32, u32); 2] = [(0, 1), (1, 2)];

    #[test]
    fn simple_test_rooted_no_pruning() {
        run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], Some(0), 1, Pruning::None, &[0, 1, 2], &[0, 1], (&[1, 2, 0], &[1, 0]));
    }

    #[test]
    fn simple_test_unrooted_no_pruning() {
        run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], None, 1, Pruning::None, &[1, 2], &[1], (&[1, 2], &[1]));
    }

    #[test]
    fn simple_test_unrooted_gw_pruning() {
        run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], None, 1, Pruning::Gw, &[1, 2], &[1], (&[1, 2], &[1]));
    }

    #[test]
    fn simple_test_unrooted_strong_pruning() {
        run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], None, 1, Pruning::Strong, &[1, 2], &[1], (&[1, 2], &[1]));
    }

    const PATH4: [(u32, u32); 3] = [(0, 1), (1, 2), (2, 3)];

    #[test]
    fn simple2_test_rooted_no_pruning() {
        run_algo(
            &PATH4,
            &[10.0, 0.0, 1.0, 10.0],
            &[10.0, 4.0, 3.0],
            Some(0),
            1,
            Pruning::None,
            &[0, 1, 2, 3],
            &[1, 2],
            (&[2, 3, 1, 0], &[2, 1]),
        );
    }

    #[test]
    fn simple2_test_rooted_gw_pruning() {
        run_algo(&PATH4, &[10.0, 0.0, 1.0, 10.0], &[10.0, 4.0, 3.0], Some(0), 1, Pruning::Gw, &[0], &[], (&[0], &[]));
    }

    #[test]
    fn simple3_test_rooted_no_pruning() {
        run_algo(
            &PATH4,
            &[10.0, 10.0, 1.0, 10.0],
            &[10.0, 6.0, 5.0],
            Some(0),
            1,
            Pruning::None,
            &[0, 1, 2, 3],
            &[0, 1, 2],
            (&[2, 3, 1, 0], &[2, 1, 0]),
        );
    }

    #[test]
    fn simple3_test_rooted_gw_pruning() {
        run_algo(
            &PATH4,
            &[10.0, 10.0, 1.0, 10.0],
            &[10.0, 6.0, 5.0],
            Some(0),
            1,
            Pruning::Gw,
            &[0, 1, 2, 3],
            &[0, 1, 2],
            (&[0, 1, 2, 3], &[0, 1, 2]),
        );
    }

    #[test]
    fn simple4_test_rooted_no_pruning() {
        run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], Some(0), 1, Pruning::None, &[0, 1, 2], &[1], (&[1, 2, 0], &[1]));
    }

    #[test]
    fn simple4_test_rooted_gw_pruning() {
        run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], Some(0), 1, Pruning::Gw, &[0], &[], (&[0], &[]));
    }

    #[test]
    fn simple4_test_unrooted_gw_pruning() {
        run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], None, 2, Pruning::Gw, &[0, 1, 2], &[1], (&[0, 1, 2], &[1]));
    }

    #[test]
    fn simple4b_test_unrooted_gw_pruning() {
        run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], None, 1, Pruning::Gw, &[0], &[], (&[0], &[]));
    }

    #[test]
    fn simple5_test_unrooted_gw_pruning() {
        run_algo(&PATH4, &[10.0, 0.0, 6.0, 6.0], &[100.0, 2.0, 5.0], None, 2, Pruning::Gw, &[0, 2, 3], &[2], (&[0, 2, 3], &[2]));
    }

    #[test]
    #[allow(clippy::excessive_precision)] // upstream's literals, kept verbatim
    fn medium1_test_rooted_gw_pruning() {
        let edges = [
            (0, 1),
            (1, 2),
            (2, 3),
            (0, 9),
            (0, 2),
            (0, 3),
            (0, 5),
            (1, 9),
            (1, 3),
            (1, 5),
            (1, 7),
            (2, 8),
            (2, 3),
            (3, 4),
            (3, 5),
            (3, 6),
            (3, 7),
            (3, 8),
            (3, 9),
            (4, 5),
            (4, 6),
            (4, 7),
            (5, 8),
            (6, 8),
        ];
        let prizes = [
            0.032052554364677466,
            0.32473378289799926,
            0.069699345546302638,
            0.0,
            0.74867253235151754,
            0.19804330340026255,
            0.85430521133171622,
            0.83819939651391351,
            0.71744625276884877,
            0.016798567754083948,
        ];
        let a = 0.8;
        let b = 0.8800000000000001;
        let costs = [a, a, b, a, a, b, a, a, b, a, a, a, b, b, b, b, b, b, b, a, a, a, a, a];
        run_algo(
            &edges,
            &prizes,
            &costs,
            Some(3),
            1,
            Pruning::Gw,
            &[3, 4, 6, 7, 8],
            &[16, 20, 21, 23],
            (&[3, 4, 6, 7, 8], &[16, 20, 23, 21]),
        );
    }

    #[test]
    fn simple6_test_unrooted_gw_pruning() {
        let edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)];
        let prizes = [100.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 100.0];
        run_algo(
            &edges,
            &prizes,
            &[0.9; 7],
            None,
            1,
            Pruning::Gw,
            &[0, 1, 2, 3, 4, 5, 6, 7],
            &[0, 1, 2, 3, 4, 5, 6],
            (&[0, 1, 2, 3, 4, 5, 6, 7], &[4, 5, 1, 3, 6, 2, 0]),
        );
    }

    const SIMPLE7_EDGES: [(u32, u32); 4] = [(0, 1), (0, 2), (2, 3), (3, 4)];
    const SIMPLE7_PRIZES: [f64; 5] = [0.0, 2.2, 0.0, 0.0, 2.1];

    #[test]
    fn simple7_test_unrooted_strong_pruning() {
        run_algo(&SIMPLE7_EDGES, &SIMPLE7_PRIZES, &[1.0; 4], None, 1, Pruning::Strong, &[1], &[], (&[1], &[]));
    }

    #[test]
    fn simple7_test_unrooted_gw_pruning() {
        run_algo(
            &SIMPLE7_EDGES,
            &SIMPLE7_PRIZES,
            &[1.0; 4],
            None,
            1,
            Pruning::Gw,
            &[0, 1, 2, 3, 4],
            &[0, 1, 2, 3],
            (&[0, 1, 2, 3, 4], &[2, 1, 3, 0]),
        );
    }

    #[test]
    fn simple8_test_unrooted_strong_pruning() {
        run_algo(&SIMPLE_EDGES, &[2.0, 2.0, 2.0], &[0.0, 5.0], None, 1, Pruning::Strong, &[0, 1], &[0], (&[0, 1], &[0]));
    }

    // ---- The 3 cases of upstream src/test_pcst_fast.py.

    #[test]
    fn py_test_simple1() {
        // Upstream checks the exact order here.
        let (nodes, edges) = pcst(&PATH4, &[1.0; 4], &[0.8, 1.8, 2.8], None, 1, Pruning::Strong).expect("valid");
        assert_eq!(nodes, [0, 1]);
        assert_eq!(edges, [0]);
    }

    #[test]
    fn py_test_simple2() {
        run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], Some(0), 1, Pruning::None, &[0, 1, 2], &[0, 1], (&[1, 2, 0], &[1, 0]));
    }

    #[test]
    fn py_test_num_clusters() {
        //  0---1---2---3
        //      |   |   |
        //      4   5   6
        let edges = [(0, 1), (1, 2), (1, 4), (2, 3), (2, 5), (3, 6)];
        let prizes = [100.0, 0.0, 0.0, 0.0, 100.0, 100.0, 100.0];
        let costs = [10.0, 100.0, 10.0, 10.0, 10.0, 10.0];
        run_algo(
            &edges,
            &prizes,
            &costs,
            None,
            2,
            Pruning::Strong,
            &[0, 1, 2, 3, 4, 5, 6],
            &[0, 2, 3, 4, 5],
            (&[0, 1, 2, 3, 4, 5, 6], &[0, 2, 4, 5, 3]),
        );
    }

    // ---- Edge cases.

    #[test]
    fn empty_and_trivial_graphs() {
        assert_eq!(pcst(&[], &[], &[], None, 1, Pruning::Gw), Ok((vec![], vec![])));
        assert_eq!(pcst(&[], &[3.0], &[], None, 1, Pruning::Strong), Ok((vec![0], vec![])));
        assert_eq!(pcst(&[], &[3.0], &[], Some(0), 1, Pruning::Gw), Ok((vec![0], vec![])));
        // More clusters requested than nodes: nothing is grown, every node is kept.
        assert_eq!(pcst(&[(0, 1)], &[1.0, 1.0], &[0.5], None, 5, Pruning::Gw), Ok((vec![0, 1], vec![])));
        // All prizes zero: every cluster deactivates at time 0 in index order, the
        // last one stays active (pcst_fast returns that single vertex).
        assert_eq!(pcst(&SIMPLE_EDGES, &[0.0; 3], &[1.0, 1.0], None, 1, Pruning::Gw), Ok((vec![2], vec![])));
        // Self-loops and parallel edges are accepted, as in pcst_fast.
        let (v, e) = pcst(&[(0, 0), (0, 1), (0, 1)], &[2.0, 2.0], &[0.1, 1.0, 0.5], None, 1, Pruning::Gw).expect("valid");
        assert_eq!((v, e), (vec![0, 1], vec![2]));
    }

    #[test]
    fn pruning_names() {
        assert_eq!("none".parse(), Ok(Pruning::None));
        assert_eq!("simple".parse(), Ok(Pruning::Simple));
        assert_eq!("gw".parse(), Ok(Pruning::Gw));
        assert_eq!("strong".parse(), Ok(Pruning::Strong));
        assert!("GW".parse::<Pruning>().is_err());
        assert!("".parse::<Pruning>().is_err());
    }

    // ---- Errors.

    fn err(r: Result<(Vec<u32>, Vec<u32>), PcstError>) -> String {
        match r {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let e = &SIMPLE_EDGES;
        let ok_p = [1.0, 1.0, 1.0];
        let ok_c = [1.0, 1.0];
        let m = err(pcst(e, &[1.0, -0.5, 1.0], &ok_c, None, 1, Pruning::Gw));
        assert!(m.contains("node 1") && m.contains("negative") && m.contains("-0.5"), "{m}");
        let m = err(pcst(e, &[1.0, 1.0, f64::NAN], &ok_c, None, 1, Pruning::Gw));
        assert!(m.contains("node 2") && m.contains("not finite") && m.contains("NaN"), "{m}");
        let m = err(pcst(e, &ok_p, &[1.0, f64::INFINITY], None, 1, Pruning::Gw));
        assert!(m.contains("edge 1") && m.contains("not finite") && m.contains("inf"), "{m}");
        let m = err(pcst(e, &ok_p, &[-2.0, 1.0], None, 1, Pruning::Gw));
        assert!(m.contains("edge 0") && m.contains("negative") && m.contains("-2"), "{m}");
        let m = err(pcst(&[(0, 1), (1, 3)], &ok_p, &ok_c, None, 1, Pruning::Gw));
        assert!(m.contains("edge 1") && m.contains("out of range"), "{m}");
        let m = err(pcst(e, &ok_p, &ok_c, Some(3), 1, Pruning::Gw));
        assert!(m.contains("root 3") && m.contains("out of range"), "{m}");
        let m = err(pcst(e, &ok_p, &ok_c, Some(0), 2, Pruning::Gw));
        assert!(m.contains("rooted") && m.contains("num_clusters = 2"), "{m}");
        let m = err(pcst(e, &ok_p, &ok_c, Some(0), 0, Pruning::Gw));
        assert!(m.contains("rooted"), "{m}");
        let m = err(pcst(e, &ok_p, &ok_c, None, 0, Pruning::Gw));
        assert!(m.contains("num_clusters"), "{m}");
        let m = err(pcst(e, &ok_p, &[1.0], None, 1, Pruning::Gw));
        assert!(m.contains("costs has 1") && m.contains("2 edges"), "{m}");
        let m = err(pcst(e, &ok_p, &[1.0, 1.0, 1.0], None, 1, Pruning::Gw));
        assert!(m.contains("costs has 3"), "{m}");
        // Negative zero is not negative (as in the C++ `< 0.0` checks).
        assert!(pcst(e, &[-0.0, 1.0, 1.0], &[-0.0, 1.0], None, 1, Pruning::Gw).is_ok());
    }

    // ---- Property tests on random small graphs.

    /// xorshift64* generator (deterministic, no dependencies).
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next_u64() % n
        }
        fn unit(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    struct Instance {
        edges: Vec<(u32, u32)>,
        prizes: Vec<f64>,
        costs: Vec<f64>,
    }

    /// Random multigraph with a mix of tie-heavy and continuous prizes/costs.
    fn random_instance(rng: &mut Rng) -> Instance {
        let n = 1 + rng.below(30) as usize;
        let m = rng.below(3 * n as u64 + 1) as usize;
        let ties = rng.below(2) == 0;
        let prizes = (0..n)
            .map(|_| {
                if rng.below(3) == 0 {
                    0.0
                } else if ties {
                    rng.below(4) as f64
                } else {
                    rng.unit() * 4.0
                }
            })
            .collect();
        let edges: Vec<(u32, u32)> = (0..m).map(|_| (rng.below(n as u64) as u32, rng.below(n as u64) as u32)).collect();
        let costs = (0..m).map(|_| if ties { 0.5 * rng.below(4) as f64 } else { rng.unit() * 2.0 }).collect();
        Instance { edges, prizes, costs }
    }

    /// Prizes of the vertices not selected plus costs of the selected edges.
    fn objective(inst: &Instance, vertices: &[u32], edges: &[u32]) -> f64 {
        let mut selected = vec![false; inst.prizes.len()];
        for &v in vertices {
            selected[v as usize] = true;
        }
        let missed: f64 = (0..inst.prizes.len()).filter(|&v| !selected[v]).map(|v| inst.prizes[v]).sum();
        missed + edges.iter().map(|&e| inst.costs[e as usize]).sum::<f64>()
    }

    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }

    /// The output is a forest of the input graph: distinct in-range vertices and
    /// edges, every edge's endpoints are returned vertices, no cycle.
    fn assert_forest(inst: &Instance, vertices: &[u32], edges: &[u32], what: &str) {
        let n = inst.prizes.len();
        let mut in_set = vec![false; n];
        for &v in vertices {
            assert!((v as usize) < n, "{what}: vertex {v} out of range");
            assert!(!in_set[v as usize], "{what}: vertex {v} twice");
            in_set[v as usize] = true;
        }
        let mut seen_edge = vec![false; inst.edges.len()];
        let mut parent: Vec<usize> = (0..n).collect();
        for &e in edges {
            assert!((e as usize) < inst.edges.len(), "{what}: edge {e} out of range");
            assert!(!seen_edge[e as usize], "{what}: edge {e} twice");
            seen_edge[e as usize] = true;
            let (u, v) = inst.edges[e as usize];
            assert!(in_set[u as usize] && in_set[v as usize], "{what}: edge {e} endpoint missing");
            let (ru, rv) = (find(&mut parent, u as usize), find(&mut parent, v as usize));
            assert_ne!(ru, rv, "{what}: edge {e} closes a cycle");
            parent[ru] = rv;
        }
    }

    #[test]
    fn random_outputs_are_forests() {
        let mut rng = Rng(0x1234_5678_9ABC_DEF1);
        for case in 0..3000 {
            let inst = random_instance(&mut rng);
            let n = inst.prizes.len();
            let root = (rng.below(3) == 0).then(|| rng.below(n as u64) as usize);
            let k = if root.is_some() { 1 } else { 1 + rng.below(3) as usize };
            for pruning in [Pruning::None, Pruning::Simple, Pruning::Gw, Pruning::Strong] {
                let (v, e) = pcst(&inst.edges, &inst.prizes, &inst.costs, root, k, pruning).expect("valid instance");
                let what = format!("case {case} {pruning:?} root {root:?} k {k}");
                assert_forest(&inst, &v, &e, &what);
                // Deterministic: a second run gives the very same output.
                let again = pcst(&inst.edges, &inst.prizes, &inst.costs, root, k, pruning);
                assert_eq!(again, Ok((v, e)), "{what}: not deterministic");
            }
        }
    }

    /// Strong pruning keeps, in every tree of the simple-pruned forest, a
    /// maximum-net-worth connected subtree (containing the root in the root's
    /// tree); GW pruning and simple pruning keep *some* non-empty connected subtree
    /// of each tree (GW pruning only ever cuts off the far side of an edge, and it
    /// keeps every edge that joined the root cluster). Hence, up to floating-point
    /// rounding (the DP adds in a different order than the objective), the strong
    /// objective is never above the GW or the simple one.
    #[test]
    fn strong_pruning_is_never_worse_than_gw_or_simple() {
        let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
        for case in 0..3000 {
            let inst = random_instance(&mut rng);
            let n = inst.prizes.len();
            let root = (rng.below(3) == 0).then(|| rng.below(n as u64) as usize);
            let k = if root.is_some() { 1 } else { 1 + rng.below(3) as usize };
            let solve = |p| {
                let (v, e) = pcst(&inst.edges, &inst.prizes, &inst.costs, root, k, p).expect("valid instance");
                objective(&inst, &v, &e)
            };
            let strong = solve(Pruning::Strong);
            let tol = 1e-9 * strong.abs().max(1.0);
            for other in [Pruning::Gw, Pruning::Simple] {
                let o = solve(other);
                assert!(strong <= o + tol, "case {case} root {root:?} k {k}: strong {strong} > {other:?} {o}");
            }
        }
    }

    /// Parity with pcst_fast 1.0.10 on the fixture (239 instances of ≤ 500 nodes, unrooted, one cluster,
    /// `gw`): the same vertices and edges in the same order, and never a worse objective.
    #[test]
    fn matches_pcst_fast_on_the_fixture() -> crate::shared::test_support::TestResult {
        use crate::shared::test_support::{f64s, fixture, i64s};
        use std::collections::BTreeMap;
        let dir = fixture("pcst");
        let read = |f: &str| tgrag_schemas::io::read_parquet(&dir.join(f));
        let (nodes, edges, rv, re, res) = (
            read("nodes.parquet")?,
            read("edges.parquet")?,
            read("result_vertices.parquet")?,
            read("result_edges.parquet")?,
            read("results.parquet")?,
        );
        let (ni, nn, np) = (i64s(&nodes, "instance_id")?, i64s(&nodes, "node")?, f64s(&nodes, "prize")?);
        let (ei, ex, es, ed, ec) =
            (i64s(&edges, "instance_id")?, i64s(&edges, "edge_index")?, i64s(&edges, "src")?, i64s(&edges, "dst")?, f64s(&edges, "cost")?);
        type Inst = (Vec<(i64, f64)>, Vec<(i64, (u32, u32), f64)>, Vec<(i64, u32)>, Vec<(i64, u32)>);
        let mut inst: BTreeMap<i64, Inst> = BTreeMap::new();
        for i in 0..ni.len() {
            inst.entry(ni[i]).or_default().0.push((nn[i], np[i]));
        }
        for i in 0..ei.len() {
            inst.entry(ei[i]).or_default().1.push((ex[i], (es[i] as u32, ed[i] as u32), ec[i]));
        }
        let (vi, vp, vn) = (i64s(&rv, "instance_id")?, i64s(&rv, "pos")?, i64s(&rv, "node")?);
        for i in 0..vi.len() {
            inst.entry(vi[i]).or_default().2.push((vp[i], vn[i] as u32));
        }
        let (xi, xp, xe) = (i64s(&re, "instance_id")?, i64s(&re, "pos")?, i64s(&re, "edge_index")?);
        for i in 0..xi.len() {
            inst.entry(xi[i]).or_default().3.push((xp[i], xe[i] as u32));
        }
        let objective: BTreeMap<i64, f64> = i64s(&res, "instance_id")?.into_iter().zip(f64s(&res, "objective")?).collect();
        let (mut same_order, mut total) = (0, 0);
        for (id, (mut ns, mut es, mut v, mut e)) in inst {
            ns.sort_by_key(|x| x.0);
            es.sort_by_key(|x| x.0);
            v.sort_by_key(|x| x.0);
            e.sort_by_key(|x| x.0);
            let prizes: Vec<f64> = ns.iter().map(|x| x.1).collect();
            let edge_list: Vec<(u32, u32)> = es.iter().map(|x| x.1).collect();
            let costs: Vec<f64> = es.iter().map(|x| x.2).collect();
            let (gv, ge) = pcst(&edge_list, &prizes, &costs, None, 1, Pruning::Gw)?;
            let obj = prizes.iter().sum::<f64>() - gv.iter().map(|&x| prizes[x as usize]).sum::<f64>()
                + ge.iter().map(|&x| costs[x as usize]).sum::<f64>();
            let want = objective.get(&id).copied().unwrap_or(f64::INFINITY);
            assert!(obj <= want + 1e-9 * want.abs().max(1.0), "instance {id}: objective {obj} worse than pcst_fast's {want}");
            total += 1;
            same_order += usize::from(gv == v.iter().map(|x| x.1).collect::<Vec<_>>() && ge == e.iter().map(|x| x.1).collect::<Vec<_>>());
        }
        assert_eq!(total, 239);
        assert_eq!(same_order, total, "vertices and edges in pcst_fast's order on every instance");
        Ok(())
    }
}
