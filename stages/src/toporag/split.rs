//! TopoRAG's observed / partial split (§6.1.1): nodes (or e-mails) whose text is too short are
//! dropped; of the rest, `1 − observed_fraction` become partially observed (the newest by `time` when
//! every item has one, else a seeded random choice) and show only their first `visible_words` words.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, UInt32Array};
use tgrag_datasets::rng::Rng;

use crate::Result;

/// The parameters of the split rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitRule {
    pub observed_fraction: f64,
    pub visible_words: usize,
    pub seed: u64,
}

/// The paper's length thresholds `(min words, min characters)` by dataset (§6.1.1): abstracts under
/// 100 words are dropped in the citation graphs (Cora, PubMed, arXiv; CiteSeer treated alike),
/// reviews under 100 characters in the review graphs; nothing elsewhere (Products, `synthetic`,
/// folder datasets).
pub fn paper_thresholds(dataset: &str) -> (usize, usize) {
    match dataset {
        "cora" | "pubmed" | "arxiv" | "citeseer" => (100, 0),
        "book" | "epinion" | "music" | "pantry" => (0, 100),
        _ => (0, 0),
    }
}

/// The observed / partial split of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Kept node ids (dataset ids), in ascending order; graph index = position.
    pub kept: Vec<u32>,
    pub partial: Vec<bool>,
    pub visible: Vec<String>,
    pub hidden: Vec<String>,
    /// Edges between kept nodes (graph indices), partial–partial removed.
    pub edges: Vec<(u32, u32)>,
}

impl Split {
    /// The `split` table (`email_split` for e-mails), the kept ids under `id_column` (`node_id`,
    /// `email_id`).
    pub fn table(&self, id_column: &str) -> Result<RecordBatch> {
        let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
        Ok(RecordBatch::try_from_iter(vec![
            (id_column, Arc::new(UInt32Array::from(self.kept.clone())) as ArrayRef),
            ("split", strs(self.partial.iter().map(|&p| if p { "partial" } else { "observed" }).collect())),
            ("visible", strs(self.visible.iter().map(String::as_str).collect())),
            ("hidden", strs(self.hidden.iter().map(String::as_str).collect())),
        ])?)
    }
}

/// Applies the split rule (see the module docs). Partial–partial edges are removed.
pub fn split(
    ids: &[u32],
    texts: &[&str],
    times: Option<&[i64]>,
    edges: &[(u32, u32)],
    (min_words, min_chars): (usize, usize),
    rule: &SplitRule,
) -> Split {
    let mut order: Vec<usize> =
        (0..ids.len()).filter(|&i| texts[i].split_whitespace().count() >= min_words && texts[i].chars().count() >= min_chars).collect();
    order.sort_by_key(|&i| ids[i]);
    let kept: Vec<u32> = order.iter().map(|&i| ids[i]).collect();
    let n = kept.len();
    let n_partial = n - ((n as f64) * rule.observed_fraction).floor() as usize;
    let mut rank: Vec<usize> = (0..n).collect();
    match times {
        Some(t) => rank.sort_by_key(|&k| (std::cmp::Reverse(t[order[k]]), std::cmp::Reverse(kept[k]))),
        None => Rng::new(rule.seed).shuffle(&mut rank),
    }
    let mut partial = vec![false; n];
    rank.iter().take(n_partial).for_each(|&k| partial[k] = true);
    let (mut visible, mut hidden) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (k, &i) in order.iter().enumerate() {
        let words: Vec<&str> = texts[i].split_whitespace().collect();
        let cut = if partial[k] { rule.visible_words.min(words.len()) } else { words.len() };
        visible.push(words[..cut].join(" "));
        hidden.push(words[cut..].join(" "));
    }
    let pos: std::collections::HashMap<u32, u32> = kept.iter().enumerate().map(|(k, &id)| (id, k as u32)).collect();
    let edges = edges
        .iter()
        .filter_map(|(a, b)| Some((*pos.get(a)?, *pos.get(b)?)))
        .filter(|&(a, b)| !(partial[a as usize] && partial[b as usize]))
        .collect();
    Split { kept, partial, visible, hidden, edges }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> SplitRule {
        SplitRule { observed_fraction: 0.9, visible_words: 3, seed: 42 }
    }

    #[test]
    fn split_is_chronological_drops_short_texts_and_partial_pairs() {
        let ids = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];
        let long = "one two three four five";
        let mut texts = vec![long; 12];
        texts[3] = "too short";
        let times: Vec<i64> = vec![5, 1, 2, 9, 3, 4, 6, 7, 8, 0, 9, 9];
        // 11 kept, observed 0.8 → floor(8.8) = 8 observed, 3 partial: the newest are 20 and 21 (time 9)
        // and 18 (time 8); 13 also has time 9 but is dropped.
        let c = SplitRule { observed_fraction: 0.8, ..rule() };
        let edges = [(20, 21), (20, 10), (13, 10), (18, 21)];
        let s = split(&ids, &texts, Some(&times), &edges, (4, 0), &c);
        assert_eq!(s.kept, vec![10, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21]);
        let partial: Vec<u32> = s.kept.iter().zip(&s.partial).filter(|p| *p.1).map(|p| *p.0).collect();
        assert_eq!(partial, vec![18, 20, 21]);
        assert_eq!(s.visible[9], "one two three");
        assert_eq!(s.hidden[9], "four five");
        assert_eq!(s.visible[0], long);
        // (20,21) and (18,21) join two partial nodes; 13 was dropped; (20,10) stays as (9, 0).
        assert_eq!(s.edges, vec![(9, 0)]);
    }

    #[test]
    fn random_split_is_seeded() {
        let ids: Vec<u32> = (0..50).collect();
        let texts = vec!["a b c d e f"; 50];
        let a = split(&ids, &texts, None, &[], (4, 0), &rule());
        let b = split(&ids, &texts, None, &[], (4, 0), &rule());
        let c = split(&ids, &texts, None, &[], (4, 0), &SplitRule { seed: 7, ..rule() });
        assert_eq!(a, b);
        assert_ne!(a.partial, c.partial);
        assert_eq!(a.partial.iter().filter(|&&p| p).count(), 5);
    }
}
