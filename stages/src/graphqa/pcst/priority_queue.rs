//! The indexed priority queues of the growth phase (port of pcst_fast's `priority_queue.h`): the
//! next deactivation and the next edge event of every cluster, ordered by `(time, cluster)`.

use super::NONE;

/// Min-queue of `(value, index)` pairs, at most one per index, ordered
/// lexicographically like the C++ `std::set<std::pair<double, int>>`. Since keys
/// are unique, the minimum (and hence the algorithm's behaviour) does not depend
/// on the internal layout, so a binary heap with a position map replaces the
/// red-black tree.
pub(super) struct IndexedQueue {
    heap: Vec<(f64, u32)>,
    /// Position of each index in `heap`, or `NONE`.
    pos: Vec<u32>,
}

#[inline]
fn key_less(a: (f64, u32), b: (f64, u32)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

impl IndexedQueue {
    pub(super) fn with_capacity(num_indices: usize) -> Self {
        IndexedQueue { heap: Vec::with_capacity(num_indices), pos: vec![NONE; num_indices] }
    }

    pub(super) fn get_min(&self) -> Option<(f64, u32)> {
        self.heap.first().copied()
    }

    pub(super) fn insert(&mut self, value: f64, index: u32) {
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

    pub(super) fn delete_min(&mut self) {
        if let Some(&(_, index)) = self.heap.first() {
            self.delete_element(index);
        }
    }

    pub(super) fn delete_element(&mut self, index: u32) {
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
