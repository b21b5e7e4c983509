//! The ranked-list helpers every retriever shares: the project's ranking order (score descending,
//! id ascending), top-k under it (a sort, a bounded heap over a dense row, and a thresholded scan of
//! positive scores), and the writer of the `run` table.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, RecordBatch, StringArray, UInt32Array, new_null_array};
use tgrag_schemas::tables;

use crate::Result;

/// A score with a total order (`total_cmp`), so that a ranking never depends on the sort algorithm.
pub trait Score: Copy {
    /// `total_cmp` of the two scores.
    fn total(self, other: Self) -> Ordering;
}

impl Score for f32 {
    fn total(self, other: Self) -> Ordering {
        self.total_cmp(&other)
    }
}

impl Score for f64 {
    fn total(self, other: Self) -> Ordering {
        self.total_cmp(&other)
    }
}

/// An entry of a ranked list: an id and its score.
pub trait Scored {
    /// The score's type.
    type Score: Score;
    /// The id (node, document, candidate) the ties are broken on.
    fn id(&self) -> u32;
    /// The score, higher first.
    fn score(&self) -> Self::Score;
}

impl Scored for (u32, f32) {
    type Score = f32;
    fn id(&self) -> u32 {
        self.0
    }
    fn score(&self) -> f32 {
        self.1
    }
}

impl<T> Scored for (u32, f32, T) {
    type Score = f32;
    fn id(&self) -> u32 {
        self.0
    }
    fn score(&self) -> f32 {
        self.1
    }
}

/// The project's ranking order: score descending, then id ascending. It is total on distinct ids,
/// so every sort (stable or not) and every top-k gives the same list.
pub fn by_score_then_id<T: Scored>(a: &T, b: &T) -> Ordering {
    b.score().total(a.score()).then(a.id().cmp(&b.id()))
}

/// Keeps the `k` best entries ([`by_score_then_id`]), sorted.
pub fn top_k(hits: &mut Vec<(u32, f32)>, k: usize) {
    if hits.len() > k && k > 0 {
        hits.select_nth_unstable_by(k - 1, by_score_then_id);
        hits.truncate(k);
    }
    if k == 0 {
        hits.clear();
    }
    hits.sort_unstable_by(by_score_then_id);
}

/// Rows of a `run` table (trajectory columns null).
pub fn run_batch(method: &str, rows: &[(u32, Vec<(u32, f32)>)]) -> Result<RecordBatch> {
    let n: usize = rows.iter().map(|r| r.1.len()).sum();
    let (mut q, mut node, mut rank, mut score) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for (qid, hits) in rows {
        for (i, &(d, s)) in hits.iter().enumerate() {
            q.push(*qid);
            node.push(d);
            rank.push(i as u32 + 1);
            score.push(s);
        }
    }
    let spec = &tables::RUN;
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(q)),
        Arc::new(UInt32Array::from(node)),
        Arc::new(UInt32Array::from(rank)),
        Arc::new(Float32Array::from(score)),
        Arc::new(StringArray::from(vec![method; n])),
    ];
    for c in &spec.columns[cols.len()..] {
        cols.push(new_null_array(&c.ty.data_type(), n));
    }
    Ok(spec.batch(cols)?)
}

/// Heap entry ordered so that a max-heap's top is the worst kept hit: lower score, or equal score
/// and higher id, is greater.
struct Worst(f32, u32);

impl PartialEq for Worst {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> Ordering {
        by_score_then_id(&(self.1, self.0), &(o.1, o.0))
    }
}

/// The `k` best hits offered so far (k ≥ 1), in a bounded heap: one pass, no copy of the scores.
struct Best {
    heap: BinaryHeap<Worst>,
    k: usize,
}

impl Best {
    /// `k` must not exceed the number of items scanned (the heap is sized by it).
    fn new(k: usize) -> Self {
        Best { heap: BinaryHeap::with_capacity(k + 1), k }
    }

    fn is_full(&self) -> bool {
        self.heap.len() >= self.k
    }

    /// Keeps (id, score) while there is room, then only if it ranks before the worst kept hit.
    fn offer(&mut self, id: u32, score: f32) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(score, id));
        } else if let Some(top) = self.heap.peek()
            && Worst(score, id) < *top
        {
            self.heap.pop();
            self.heap.push(Worst(score, id));
        }
    }

    /// The score of the worst kept hit (0 when none is kept).
    fn worst_score(&self) -> f32 {
        self.heap.peek().map_or(0.0, |w| w.0)
    }

    /// The kept hits, best first.
    fn into_sorted(self) -> Vec<(u32, f32)> {
        let mut v: Vec<(u32, f32)> = self.heap.into_iter().map(|w| (w.1, w.0)).collect();
        v.sort_unstable_by(by_score_then_id);
        v
    }
}

/// The `k` largest entries of `row` as (index, value), best first, ties by index ascending, with a
/// bounded heap (one pass, no copy of the row).
pub fn heap_top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    // No more hits than items, whatever k a caller asks for (the heap is sized by k).
    let k = k.min(row.len());
    if k == 0 {
        return Vec::new();
    }
    let mut best = Best::new(k);
    for (j, &x) in row.iter().enumerate() {
        best.offer(j as u32, x);
    }
    best.into_sorted()
}

/// The `k` best positive entries of `scores` among `allowed` (all when None) as (index, score),
/// best first, ties by index ascending: [`heap_top_k`] for a sparse accumulator, where most entries
/// are 0. Blocks of 64 whose maximum cannot enter the heap are skipped after a vectorised max.
pub fn positive_top_k(scores: &[f32], k: usize, allowed: Option<&[bool]>) -> Vec<(u32, f32)> {
    const BLOCK: usize = 64;
    let k = k.min(scores.len());
    if k == 0 {
        return Vec::new();
    }
    let mut best = Best::new(k);
    // The worst kept score once the heap is full; 0 until then, so that only positive scores enter.
    let mut threshold = 0.0f32;
    for (bi, block) in scores.chunks(BLOCK).enumerate() {
        if best.is_full() {
            let max = block.iter().fold(0.0f32, |m, &x| if x > m { x } else { m });
            if max <= threshold {
                continue;
            }
        }
        for (j, &s) in block.iter().enumerate() {
            let d = bi * BLOCK + j;
            // Ids ascend, so an equal score never displaces a kept (smaller) id.
            if s > threshold || (!best.is_full() && s > 0.0) {
                if allowed.is_some_and(|a| !a.get(d).copied().unwrap_or(false)) {
                    continue;
                }
                best.offer(d as u32, s);
                if best.is_full() {
                    threshold = best.worst_score();
                }
            }
        }
    }
    best.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_k_beyond_the_row_gives_the_whole_row_without_allocating_k() {
        // usize::MAX would abort the process if the heap were sized by k.
        assert_eq!(heap_top_k(&[1.0, 3.0, 2.0], usize::MAX), vec![(1, 3.0), (2, 2.0), (0, 1.0)]);
        assert!(heap_top_k(&[], 5).is_empty());
    }

    #[test]
    fn top_k_keeps_best_with_id_tiebreak() {
        let mut v = vec![(5, 1.0), (2, 3.0), (9, 3.0), (1, 0.5), (3, 2.0)];
        top_k(&mut v, 3);
        assert_eq!(v, vec![(2, 3.0), (9, 3.0), (3, 2.0)]);
    }

    #[test]
    fn heap_top_k_matches_sorting_with_ties() {
        let mut rng = tgrag_datasets::rng::Rng::new(8);
        for _ in 0..200 {
            let n = 1 + rng.below(50);
            let row: Vec<f32> = (0..n).map(|_| rng.below(6) as f32).collect();
            let k = rng.below(n + 3);
            let mut all: Vec<(u32, f32)> = row.iter().enumerate().map(|(j, &x)| (j as u32, x)).collect();
            all.sort_by(by_score_then_id);
            all.truncate(k);
            assert_eq!(heap_top_k(&row, k), all);
        }
    }

    #[test]
    fn positive_top_k_matches_sorting_the_allowed_positive_entries() {
        let mut rng = tgrag_datasets::rng::Rng::new(9);
        for round in 0..300 {
            // Mostly zeros, small integer scores (many ties), over several 64-wide blocks.
            let n = 1 + rng.below(400);
            let row: Vec<f32> = (0..n).map(|_| if rng.below(3) == 0 { rng.below(5) as f32 } else { 0.0 }).collect();
            let mask: Vec<bool> = (0..n).map(|_| rng.below(4) != 0).collect();
            let allowed = (round % 2 == 1).then_some(mask.as_slice());
            let k = rng.below(n + 3);
            let mut want: Vec<(u32, f32)> =
                row.iter().enumerate().filter(|&(j, &x)| x > 0.0 && allowed.is_none_or(|a| a[j])).map(|(j, &x)| (j as u32, x)).collect();
            want.sort_by(by_score_then_id);
            want.truncate(k);
            assert_eq!(positive_top_k(&row, k, allowed), want, "round {round}");
        }
        assert!(positive_top_k(&[1.0, 2.0], 0, None).is_empty());
        assert_eq!(positive_top_k(&[1.0, 2.0], usize::MAX, None), vec![(1, 2.0), (0, 1.0)]);
    }

    #[test]
    fn the_ranking_order_is_score_descending_then_id_ascending_for_every_scored_shape() {
        assert_eq!(by_score_then_id(&(3, 1.0f32), &(1, 0.5f32)), Ordering::Less);
        assert_eq!(by_score_then_id(&(1, 1.0f32), &(3, 1.0f32)), Ordering::Less);
        assert_eq!(by_score_then_id(&(3, 1.0f32, "t"), &(1, 1.0f32, "u")), Ordering::Greater);
        assert_eq!(by_score_then_id(&(2, 0.0f32), &(2, 0.0f32)), Ordering::Equal);
    }
}
