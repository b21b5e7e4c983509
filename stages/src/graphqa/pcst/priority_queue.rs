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

    /// Sets the key of `index` to `value`: an insert when it is absent, else the entry moves in
    /// place (one sift instead of a delete and an insert).
    pub(super) fn set(&mut self, value: f64, index: u32) {
        match self.pos.get(index as usize) {
            Some(&p) if p != NONE => {
                let p = p as usize;
                let old = self.heap[p];
                self.heap[p] = (value, index);
                if key_less((value, index), old) { self.sift_up(p) } else { self.sift_down(p) }
            }
            _ => self.insert(value, index),
        }
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
        let Some(last) = self.heap.pop() else { return };
        if p < self.heap.len() {
            // The last entry fills the hole, then moves up or down from there.
            self.heap[p] = last;
            self.pos[last.1 as usize] = p as u32;
            if p > 0 && key_less(last, self.heap[(p - 1) / 2]) { self.sift_up(p) } else { self.sift_down(p) }
        }
    }

    /// Moves the entry at `p` up to its place: parents shift down into the hole, the entry is
    /// written once.
    fn sift_up(&mut self, mut p: usize) {
        let item = self.heap[p];
        while p > 0 {
            let parent = (p - 1) / 2;
            let up = self.heap[parent];
            if !key_less(item, up) {
                break;
            }
            self.heap[p] = up;
            self.pos[up.1 as usize] = p as u32;
            p = parent;
        }
        self.heap[p] = item;
        self.pos[item.1 as usize] = p as u32;
    }

    /// Moves the entry at `p` down to its place: the smaller child shifts up into the hole.
    fn sift_down(&mut self, mut p: usize) {
        let len = self.heap.len();
        let item = self.heap[p];
        loop {
            let l = 2 * p + 1;
            if l >= len {
                break;
            }
            let r = l + 1;
            let c = if r < len && key_less(self.heap[r], self.heap[l]) { r } else { l };
            let down = self.heap[c];
            if !key_less(down, item) {
                break;
            }
            self.heap[p] = down;
            self.pos[down.1 as usize] = p as u32;
            p = c;
        }
        self.heap[p] = item;
        self.pos[item.1 as usize] = p as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `BTreeSet<(value, index)>` (the C++ `std::set`), over random inserts, key changes and
    /// deletions, with many equal values: the same minimum after every operation.
    #[test]
    fn the_minimum_is_a_sorted_sets() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % m
        };
        let n = 300u32;
        let mut q = IndexedQueue::with_capacity(n as usize);
        let mut set = std::collections::BTreeSet::<(u64, u32)>::new();
        let mut key = vec![None::<u64>; n as usize];
        for step in 0..20_000 {
            let i = next(u64::from(n)) as u32;
            match next(4) {
                0 | 1 => {
                    let v = next(50);
                    if let Some(old) = key[i as usize] {
                        set.remove(&(old, i));
                    }
                    set.insert((v, i));
                    key[i as usize] = Some(v);
                    q.set(v as f64, i);
                }
                2 => {
                    if let Some(old) = key[i as usize].take() {
                        set.remove(&(old, i));
                    }
                    q.delete_element(i);
                }
                _ => {
                    if let Some(&(v, j)) = set.iter().next() {
                        set.remove(&(v, j));
                        key[j as usize] = None;
                    }
                    q.delete_min();
                }
            }
            let want = set.iter().next().map(|&(v, j)| (v as f64, j));
            assert_eq!(q.get_min(), want, "step {step}");
        }
    }
}
