//! The pairing heaps of the clusters' edge parts (port of pcst_fast's `pairing_heap.h`): one arena
//! shared by every cluster's heap, with a lazy "add to every key" so that an inactive cluster's
//! edge parts can be shifted in O(1) when an active cluster absorbs it.

use super::NONE;

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
    /// The edge part is deleted (its edge joined two parts of one cluster): popped, it is skipped.
    /// Kept here rather than beside the part's other state because the growth loop reads it right
    /// after popping the node, whose cache line is then at hand.
    deleted: bool,
}

/// Arena of pairing heap nodes shared by all clusters' heaps. A heap is
/// identified by its root node (`NONE` when empty); all operations mirror the
/// C++ `PairingHeap` exactly (same linking order, same tie-breaking: on equal
/// keys `link` makes its *second* argument the root).
pub(super) struct PairingHeaps {
    nodes: Vec<HeapNode>,
    buffer: Vec<u32>,
}

impl PairingHeaps {
    pub(super) fn new(num_nodes: usize) -> Self {
        let empty = HeapNode { sibling: NONE, child: NONE, left_up: NONE, value: 0.0, child_offset: 0.0, deleted: false };
        PairingHeaps { nodes: vec![empty; num_nodes], buffer: Vec::new() }
    }

    /// Minimum `(value, payload)` of the heap rooted at `root`.
    pub(super) fn get_min(&self, root: u32) -> Option<(f64, u32)> {
        (root != NONE).then(|| (self.nodes[root as usize].value, root))
    }

    /// Inserts node `node` with key `value`; returns the new root.
    pub(super) fn insert(&mut self, root: u32, node: u32, value: f64) -> u32 {
        let deleted = self.nodes[node as usize].deleted;
        self.nodes[node as usize] = HeapNode { sibling: NONE, child: NONE, left_up: NONE, value, child_offset: 0.0, deleted };
        self.link(root, node)
    }

    /// Whether edge part `node` is deleted.
    pub(super) fn is_deleted(&self, node: u32) -> bool {
        self.nodes[node as usize].deleted
    }

    /// Marks edge part `node` deleted (wherever it is: in a heap or popped).
    pub(super) fn mark_deleted(&mut self, node: u32) {
        self.nodes[node as usize].deleted = true;
    }

    /// Adds `value` to every key of the heap (lazily, through the root).
    pub(super) fn add_to_heap(&mut self, root: u32, value: f64) {
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
    pub(super) fn decrease_key(&mut self, root: u32, node: u32, from_value: f64, to_value: f64) -> u32 {
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
    pub(super) fn delete_min(&mut self, root: u32) -> (u32, u32) {
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
    pub(super) fn link(&mut self, node1: u32, node2: u32) -> u32 {
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
