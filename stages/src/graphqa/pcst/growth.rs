//! The growth phase (the first half of pcst_fast's `pcst_fast.cc`): clusters and edge
//! parts, the Goemans–Williamson moat-growing loop, and its two kinds of events —
//! cluster deactivations and edge events, the latter either merging two clusters
//! or rescheduling an edge part. Produces the phase 1 forest (edges in merge order).

use super::pairing_heap::PairingHeaps;
use super::priority_queue::IndexedQueue;
use super::{NONE, Solver};

/// Relative tolerance under which an edge counts as tight (`eps` in the C++).
const EPS: f64 = 1e-10;

/// One half of an edge, owned by the cluster of one endpoint.
#[derive(Clone, Copy)]
pub(super) struct EdgePart {
    next_event_val: f64,
}

/// An edge that attached an inactive cluster to an active one (GW pruning's input).
#[derive(Clone, Copy)]
pub(super) struct InactiveMergeEvent {
    pub(super) inactive_cluster_index: u32,
    pub(super) active_cluster_node: u32,
    pub(super) inactive_cluster_node: u32,
}

/// A node of the merge tree: a leaf per vertex, then one per merge.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Cluster {
    // The fields an edge event reads at the end of its moat sum come first, on one cache line
    // more often than not (the walk itself reads `Up`, below).
    moat: f64,
    active_start_time: f64,
    active_end_time: f64,
    /// Root of this cluster's edge-part pairing heap (`NONE` if empty).
    edge_parts: u32,
    pub(super) active: bool,
    pub(super) contains_root: bool,
    pub(super) necessary: bool,
    prize_sum: f64,
    subcluster_moat_sum: f64,
    /// Edge along which the two children were merged (`None` for a leaf).
    pub(super) merged_along: Option<u32>,
    pub(super) child_cluster_1: u32,
    pub(super) child_cluster_2: u32,
}

/// A cluster's links up the merge tree, apart from the rest of its state: the moat sums of every
/// edge event walk them (`get_sum_on_edge_part`), and 16 bytes per cluster keep the walk's cache
/// lines dense (the C++ keeps them in its cluster struct; same values, same order).
#[derive(Clone, Copy)]
pub(super) struct Up {
    /// The cluster this one was merged into (`NONE` while it is top-level).
    pub(super) merged_into: u32,
    /// Path compression: an ancestor, and the sum of the moats up to it (`NONE`: none yet).
    skip_up: u32,
    skip_up_sum: f64,
}

impl Up {
    const TOP: Up = Up { merged_into: NONE, skip_up: NONE, skip_up_sum: 0.0 };
}

/// What an edge event knows about its edge once both sides' moats are summed.
#[derive(Clone, Copy)]
struct EdgeView {
    /// The edge part whose event fired, and its twin on the other endpoint.
    part: u32,
    other_part: u32,
    edge: u32,
    cost: f64,
    /// Top-level clusters on the part's side and on the other side.
    current_ci: u32,
    other_ci: u32,
    /// Moats covering each part, and the other side's finished (non-growing) moats.
    sum_current_edge_part: f64,
    sum_other_edge_part: f64,
    other_finished_moat_sum: f64,
    /// Cost still uncovered by moats.
    remainder: f64,
}

impl<'a> Solver<'a> {
    /// The C++ constructor: initial clusters, edge parts and event queues.
    pub(super) fn new(
        edges: &'a [(u32, u32)],
        prizes: &'a [f64],
        costs: &'a [f64],
        root: Option<u32>,
        target_num_active_clusters: usize,
    ) -> Self {
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
            edge_parts: vec![EdgePart { next_event_val: 0.0 }; 2 * m],
            edge_inactive_merge_event: vec![None; m],
            clusters: Vec::with_capacity(max_clusters),
            ups: Vec::with_capacity(max_clusters),
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
        s.add_leaf_clusters();
        s.add_edge_parts();
        s.queue_first_edge_events();
        s
    }

    /// One cluster per vertex, active (and queued for deactivation) unless it is the root.
    fn add_leaf_clusters(&mut self) {
        for (ii, &prize) in self.prizes.iter().enumerate() {
            let is_root = self.root == Some(ii as u32);
            self.ups.push(Up::TOP);
            self.clusters.push(Cluster {
                edge_parts: NONE,
                active: !is_root,
                active_start_time: 0.0,
                active_end_time: if is_root { 0.0 } else { -1.0 },
                prize_sum: prize,
                subcluster_moat_sum: 0.0,
                moat: 0.0,
                contains_root: is_root,
                merged_along: None,
                child_cluster_1: NONE,
                child_cluster_2: NONE,
                necessary: false,
            });
            if !is_root {
                self.clusters_deactivation.insert(prize, ii as u32);
            }
        }
    }

    /// Both parts of every edge into their endpoint's heap, keyed by when each
    /// side would next need attention if both (or only one) side grows.
    fn add_edge_parts(&mut self) {
        for (ii, (&(uu, vv), &cost)) in self.edges.iter().zip(self.costs).enumerate() {
            let (uu, vv) = (uu as usize, vv as usize);
            let uu_active = self.clusters[uu].active;
            let vv_active = self.clusters[vv].active;
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
            self.edge_parts[uu_part].next_event_val = uu_val;
            self.edge_parts[vv_part].next_event_val = vv_val;
            // current_time = 0, so the next event time of each part is its value.
            self.clusters[uu].edge_parts = self.heaps.insert(self.clusters[uu].edge_parts, uu_part as u32, uu_val);
            self.clusters[vv].edge_parts = self.heaps.insert(self.clusters[vv].edge_parts, vv_part as u32, vv_val);
        }
    }

    /// Every active leaf cluster's earliest edge part into the edge event queue.
    fn queue_first_edge_events(&mut self) {
        for ii in 0..self.prizes.len() {
            if self.clusters[ii].active
                && let Some((val, _)) = self.heaps.get_min(self.clusters[ii].edge_parts)
            {
                self.clusters_next_edge_event.insert(val, ii as u32);
            }
        }
    }

    /// The main loop: processes events in time order until only
    /// `target_num_active_clusters` clusters are active. Returns the phase 1
    /// forest (the merge edges, in merge order).
    pub(super) fn grow(&mut self) -> Vec<u32> {
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
                    self.deactivate_next_cluster(ci);
                    num_active_clusters -= 1;
                }
            }
        }
        phase1_result
    }

    /// Cluster `ci`, the head of the deactivation queue, has paid for its prizes
    /// at `self.current_time` and stops growing.
    fn deactivate_next_cluster(&mut self, ci: u32) {
        self.clusters_deactivation.delete_min();
        let c = &mut self.clusters[ci as usize];
        c.active = false;
        c.active_end_time = self.current_time;
        c.moat = c.active_end_time - c.active_start_time;
        if c.edge_parts != NONE {
            self.clusters_next_edge_event.delete_element(ci);
        }
    }

    /// Next edge event: `(time, cluster, edge part)`; the time is the heap key.
    fn get_next_edge_event(&self) -> Option<(f64, u32, u32)> {
        let (_, cluster) = self.clusters_next_edge_event.get_min()?;
        let (time, part) = self.heaps.get_min(self.clusters[cluster as usize].edge_parts)?;
        Some((time, cluster, part))
    }

    fn remove_next_edge_event(&mut self, cluster: u32) {
        let ci = cluster as usize;
        let root = self.clusters[ci].edge_parts;
        if root == NONE {
            self.clusters_next_edge_event.delete_element(cluster);
            return;
        }
        let (new_root, _) = self.heaps.delete_min(root);
        self.clusters[ci].edge_parts = new_root;
        // The cluster's entry moves to its heap's new minimum (or leaves the queue).
        match self.heaps.get_min(new_root) {
            Some((val, _)) => self.clusters_next_edge_event.set(val, cluster),
            None => self.clusters_next_edge_event.delete_element(cluster),
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

        while self.ups[cur as usize].merged_into != NONE {
            self.path_compression_visited.push((cur, total_sum));
            let up = self.ups[cur as usize];
            if up.skip_up != NONE {
                total_sum += up.skip_up_sum;
                cur = up.skip_up;
            } else {
                total_sum += self.clusters[cur as usize].moat;
                cur = up.merged_into;
            }
        }

        for &(visited, visited_sum) in &self.path_compression_visited {
            let up = &mut self.ups[visited as usize];
            up.skip_up = cur;
            up.skip_up_sum = total_sum - visited_sum;
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

    /// Processes the edge event of edge part `part` (already removed from its
    /// heap), at `self.current_time`: a merge if the edge is tight, otherwise a
    /// growth event that reschedules the edge's parts.
    fn edge_event(&mut self, part: u32, phase1_result: &mut Vec<u32>, num_active_clusters: &mut usize) {
        if self.heaps.is_deleted(part) {
            return;
        }

        let other_part = part ^ 1;
        let edge = part / 2;
        let current_edge_cost = self.costs[edge as usize];

        let (sum_current_edge_part, _current_finished_moat_sum, current_ci) = self.get_sum_on_edge_part(part);
        let (sum_other_edge_part, other_finished_moat_sum, other_ci) = self.get_sum_on_edge_part(other_part);

        let remainder = current_edge_cost - sum_current_edge_part - sum_other_edge_part;

        if current_ci == other_ci {
            // Both endpoints are already in the same cluster.
            self.heaps.mark_deleted(other_part);
            return;
        }

        let ev = EdgeView {
            part,
            other_part,
            edge,
            cost: current_edge_cost,
            current_ci,
            other_ci,
            sum_current_edge_part,
            sum_other_edge_part,
            other_finished_moat_sum,
            remainder,
        };
        if remainder < EPS * current_edge_cost || remainder == 0.0 {
            phase1_result.push(edge);
            self.heaps.mark_deleted(other_part);
            self.merge(&ev, num_active_clusters);
        } else if self.clusters[other_ci as usize].active {
            self.grow_towards_active(&ev);
        } else {
            self.grow_towards_inactive(&ev);
        }
    }

    /// Merge event: the edge is tight, so both sides' clusters merge into a new
    /// one (active unless it holds the root).
    fn merge(&mut self, ev: &EdgeView, num_active_clusters: &mut usize) {
        let new_ci = self.push_merged_cluster(ev);
        self.close_current_side(ev, new_ci, num_active_clusters);
        self.close_other_side(ev, new_ci, num_active_clusters);
        self.open_merged_cluster(ev, new_ci, num_active_clusters);
    }

    /// Appends the merged cluster (heap and moat sums still to fill in); returns its index.
    fn push_merged_cluster(&mut self, ev: &EdgeView) -> u32 {
        let current_time = self.current_time;
        let new_ci = self.clusters.len() as u32;
        let cur = self.clusters[ev.current_ci as usize];
        let oth = self.clusters[ev.other_ci as usize];
        let contains_root = cur.contains_root || oth.contains_root;
        let end_time = current_time + ev.remainder;
        self.ups.push(Up::TOP);
        self.clusters.push(Cluster {
            edge_parts: NONE,
            active: !contains_root,
            // The C++ leaves both times uninitialised for an inactive (root)
            // cluster; they are then only ever used to reschedule edge parts
            // in the root cluster's heap, which is never polled.
            active_start_time: end_time,
            active_end_time: end_time,
            prize_sum: cur.prize_sum + oth.prize_sum,
            subcluster_moat_sum: cur.subcluster_moat_sum + oth.subcluster_moat_sum,
            moat: 0.0,
            contains_root,
            merged_along: Some(ev.edge),
            child_cluster_1: ev.current_ci,
            child_cluster_2: ev.other_ci,
            necessary: false,
        });
        new_ci
    }

    /// The event's own (active) cluster stops growing and is merged into `new_ci`.
    fn close_current_side(&mut self, ev: &EdgeView, new_ci: u32, num_active_clusters: &mut usize) {
        let current_time = self.current_time;
        let current_ci = ev.current_ci;
        let cur_u = current_ci as usize;
        {
            let c = &mut self.clusters[cur_u];
            c.active = false;
            c.active_end_time = current_time + ev.remainder;
            c.moat = c.active_end_time - c.active_start_time;
        }
        self.ups[cur_u].merged_into = new_ci;
        self.clusters_deactivation.delete_element(current_ci);
        *num_active_clusters -= 1;
        if self.clusters[cur_u].edge_parts != NONE {
            self.clusters_next_edge_event.delete_element(current_ci);
        }
    }

    /// The other side's cluster is merged into `new_ci`: stopped if it was active;
    /// if it was inactive (and not the root's), its heap keys are shifted by the
    /// time it sat idle and the merge is recorded for GW pruning.
    fn close_other_side(&mut self, ev: &EdgeView, new_ci: u32, num_active_clusters: &mut usize) {
        let current_time = self.current_time;
        let remainder = ev.remainder;
        let other_ci = ev.other_ci;
        let other_u = other_ci as usize;
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
            let (first, second) = self.edges[ev.edge as usize];
            let (active_node, inactive_node) = if ev.part % 2 == 1 { (second, first) } else { (first, second) };
            self.inactive_merge_events.push(InactiveMergeEvent {
                inactive_cluster_index: other_ci,
                active_cluster_node: active_node,
                inactive_cluster_node: inactive_node,
            });
            self.edge_inactive_merge_event[ev.edge as usize] = Some((self.inactive_merge_events.len() - 1) as u32);
        }
        self.ups[other_u].merged_into = new_ci;
    }

    /// The merged cluster takes both heaps and both moats; if active, it starts
    /// growing now and is queued for deactivation and for its next edge event.
    fn open_merged_cluster(&mut self, ev: &EdgeView, new_ci: u32, num_active_clusters: &mut usize) {
        let current_time = self.current_time;
        let remainder = ev.remainder;
        let (cur_u, other_u) = (ev.current_ci as usize, ev.other_ci as usize);
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
    }

    /// Puts edge part `part` back into cluster `ci`'s heap with its next event at `time`, and
    /// moves the cluster's entry in the queue of next edge events to its new minimum.
    fn requeue_edge_part(&mut self, ci: u32, part: u32, time: f64) {
        let cu = ci as usize;
        let root = self.heaps.insert(self.clusters[cu].edge_parts, part, time);
        self.clusters[cu].edge_parts = root;
        if let Some((val, _)) = self.heaps.get_min(root) {
            self.clusters_next_edge_event.set(val, ci);
        }
    }

    /// Growth event, both sides active: they meet in the middle, so both parts
    /// are rescheduled to when half the remainder has been covered.
    fn grow_towards_active(&mut self, ev: &EdgeView) {
        let current_time = self.current_time;
        let (part, other_part) = (ev.part, ev.other_part);
        let (pi, oi) = (part as usize, other_part as usize);
        let (current_ci, other_ci) = (ev.current_ci, ev.other_ci);
        let other_u = other_ci as usize;
        let remainder = ev.remainder;

        let next_event_time = current_time + remainder / 2.0;
        self.edge_parts[pi].next_event_val = ev.sum_current_edge_part + remainder / 2.0;
        self.requeue_edge_part(current_ci, part, next_event_time);

        let oc = self.clusters[other_u];
        let from_value = oc.active_start_time + self.edge_parts[oi].next_event_val - ev.other_finished_moat_sum;
        let other_root = self.heaps.decrease_key(oc.edge_parts, other_part, from_value, next_event_time);
        self.clusters[other_u].edge_parts = other_root;
        match self.heaps.get_min(other_root) {
            Some((val, _)) => self.clusters_next_edge_event.set(val, other_ci),
            None => self.clusters_next_edge_event.delete_element(other_ci),
        }
        self.edge_parts[oi].next_event_val = ev.sum_other_edge_part + remainder / 2.0;
    }

    /// Growth event, other side inactive: this side alone covers the remainder;
    /// the other part waits at the time its cluster stopped.
    fn grow_towards_inactive(&mut self, ev: &EdgeView) {
        let current_time = self.current_time;
        let (part, other_part) = (ev.part, ev.other_part);
        let (pi, oi) = (part as usize, other_part as usize);
        let current_ci = ev.current_ci;
        let other_u = ev.other_ci as usize;
        let other_finished_moat_sum = ev.other_finished_moat_sum;

        let next_event_time = current_time + ev.remainder;
        self.edge_parts[pi].next_event_val = ev.cost - other_finished_moat_sum;
        self.requeue_edge_part(current_ci, part, next_event_time);

        let oc = self.clusters[other_u];
        let from_value = oc.active_end_time + self.edge_parts[oi].next_event_val - other_finished_moat_sum;
        let other_root = self.heaps.decrease_key(oc.edge_parts, other_part, from_value, oc.active_end_time);
        self.clusters[other_u].edge_parts = other_root;
        self.edge_parts[oi].next_event_val = other_finished_moat_sum;
    }
}
