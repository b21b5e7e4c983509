//! The ranked-list helpers every retriever shares: top-k with the project's tie rule (score
//! descending, id ascending) and the writer of the `run` table.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, RecordBatch, StringArray, UInt32Array, new_null_array};
use tgrag_schemas::tables;

use crate::Result;

/// Keeps the `k` best (score desc, id asc) entries, sorted.
pub fn top_k(hits: &mut Vec<(u32, f32)>, k: usize) {
    let cmp = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if hits.len() > k && k > 0 {
        hits.select_nth_unstable_by(k - 1, cmp);
        hits.truncate(k);
    }
    if k == 0 {
        hits.clear();
    }
    hits.sort_unstable_by(cmp);
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

/// The `k` largest entries of `row` as (index, value), best first, ties by index ascending, with a
/// bounded heap (one pass, no copy of the row).
pub fn heap_top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    /// Heap entry ordered so that the heap's top is the worst kept hit.
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
        // Greater = worse: lower score, or equal score and higher index.
        fn cmp(&self, o: &Self) -> Ordering {
            o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
        }
    }
    // No more hits than items, whatever k a caller asks for (the heap is sized by k).
    let k = k.min(row.len());
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Worst> = BinaryHeap::with_capacity(k + 1);
    for (j, &x) in row.iter().enumerate() {
        if heap.len() < k {
            heap.push(Worst(x, j as u32));
        } else if let Some(top) = heap.peek()
            && Worst(x, j as u32) < *top
        {
            heap.pop();
            heap.push(Worst(x, j as u32));
        }
    }
    let mut v: Vec<(u32, f32)> = heap.into_iter().map(|w| (w.1, w.0)).collect();
    top_k(&mut v, k);
    v
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
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.truncate(k);
            assert_eq!(heap_top_k(&row, k), all);
        }
    }
}
