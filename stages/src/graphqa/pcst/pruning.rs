//! The pruning phase (the second half of pcst_fast's `pcst_fast.cc`): which vertices
//! are "good" after growth (the final active clusters, or the root's), then none,
//! simple, GW or strong pruning of the phase 1 forest, and the output node sets in
//! pcst_fast's order.

use super::{NONE, Pruning, Solver};

impl Solver<'_> {
    /// Marks the good vertices, then prunes the phase 1 forest `phase1_result` with
    /// `pruning`; returns `(vertices, edges)` in pcst_fast's output order.
    pub(super) fn prune(&mut self, phase1_result: Vec<u32>, pruning: Pruning) -> (Vec<u32>, Vec<u32>) {
        self.mark_good_nodes();

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

    /// Marks the root cluster or the remaining active clusters as good.
    fn mark_good_nodes(&mut self) {
        self.node_good = vec![false; self.prizes.len()];
        if self.root.is_some() {
            let root_cluster = (0..self.clusters.len()).find(|&i| self.clusters[i].contains_root && self.ups[i].merged_into == NONE);
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
            match self.ups[cur].merged_into {
                NONE => return,
                next => cur = next as usize,
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
