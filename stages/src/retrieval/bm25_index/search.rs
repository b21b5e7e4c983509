//! Querying the BM25 index: a query's terms add their postings' precomputed weights into a
//! per-thread accumulator (whole dense columns for the frequent terms when a query touches much of
//! the corpus), and the best `k` documents come out in the project's ranking order.

use super::index::Index;
use super::scoring::{Bm25Stats, Variant};
use crate::shared::run::{positive_top_k, top_k};
use crate::shared::text::{TokenizerKind, for_each_token};

impl Index {
    /// Term ids of a tokenised query (unknown terms dropped, repeats kept).
    fn term_ids<'a>(&self, query: impl IntoIterator<Item = &'a str>) -> Vec<usize> {
        query.into_iter().filter_map(|t| self.vocab.get(t)).map(|&t| t as usize).collect()
    }

    /// Scores of every document for a tokenised query (each query token counts once per occurrence,
    /// as in bm25s and rank_bm25). `touched` receives every document with a posting, once.
    pub fn scores_into(&self, query: &[String], scores: &mut [f32], seen: &mut [bool], touched: &mut Vec<u32>) {
        let terms = self.term_ids(query.iter().map(String::as_str));
        self.accumulate_sparse(&terms, scores, seen, touched);
    }

    fn accumulate_sparse(&self, terms: &[usize], scores: &mut [f32], seen: &mut [bool], touched: &mut Vec<u32>) {
        for &t in terms {
            let (a, b) = (self.offsets[t] as usize, self.offsets[t + 1] as usize);
            for (&d, &w) in self.docs[a..b].iter().zip(&self.weights[a..b]) {
                let d = d as usize;
                if !seen[d] {
                    seen[d] = true;
                    touched.push(d as u32);
                }
                scores[d] += w;
            }
        }
    }

    /// The `k` best documents among `allowed` (all when None), best first, ties by doc id ascending.
    /// Documents without any query term are not returned.
    pub fn search(&self, query: &[String], k: usize, allowed: Option<&[bool]>) -> Vec<(u32, f32)> {
        let terms = self.term_ids(query.iter().map(String::as_str));
        self.search_terms(&terms, k, allowed)
    }

    /// [`Index::search`] on raw query text, tokenised by `kind` (normally the documents' tokenizer).
    pub fn search_text(&self, query: &str, kind: TokenizerKind, k: usize, allowed: Option<&[bool]>) -> Vec<(u32, f32)> {
        let mut terms = Vec::new();
        let mut buf = String::new();
        for_each_token(query, kind, &mut buf, |t| {
            if let Some(&id) = self.vocab.get(t) {
                terms.push(id as usize);
            }
        });
        self.search_terms(&terms, k, allowed)
    }

    fn search_terms(&self, terms: &[usize], k: usize, allowed: Option<&[bool]>) -> Vec<(u32, f32)> {
        let n = self.num_docs();
        // No more hits than documents, whatever k a caller asks for (the heaps below are sized by k).
        let k = k.min(n);
        let postings: u64 = terms.iter().map(|&t| self.offsets[t + 1] - self.offsets[t]).sum();
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let (scores, seen, touched) = &mut *scratch;
            if scores.len() < n {
                scores.resize(n, 0.0);
                seen.resize(n, false);
            }
            // Dense mode when the query touches a large share of the corpus (Lucene idf > 0, so a
            // document has a posting exactly when its score is > 0): accumulate (whole columns for
            // the frequent terms), then one pass with a bounded heap, then clear the accumulator.
            if self.params.variant == Variant::Lucene && postings as usize * 4 > n {
                let acc = &mut scores[..n];
                for &t in terms {
                    let slot = self.dense_slot[t] as usize;
                    if slot != u32::MAX as usize {
                        for (s, &w) in acc.iter_mut().zip(&self.dense[slot * n..(slot + 1) * n]) {
                            *s += w;
                        }
                    } else {
                        let (a, b) = (self.offsets[t] as usize, self.offsets[t + 1] as usize);
                        for (&d, &w) in self.docs[a..b].iter().zip(&self.weights[a..b]) {
                            acc[d as usize] += w;
                        }
                    }
                }
                let hits = positive_top_k(acc, k, allowed);
                acc.fill(0.0);
                return hits;
            }
            touched.clear();
            self.accumulate_sparse(terms, scores, seen, touched);
            let mut hits: Vec<(u32, f32)> = touched
                .iter()
                .filter(|&&d| allowed.is_none_or(|a| a.get(d as usize).copied().unwrap_or(false)))
                .map(|&d| (d, scores[d as usize]))
                .collect();
            // Reset only what this query touched.
            for &d in touched.iter() {
                scores[d as usize] = 0.0;
                seen[d as usize] = false;
            }
            top_k(&mut hits, k);
            hits
        })
    }
}

thread_local! {
    /// Per-thread score accumulator, seen marks and touched list, reused across queries.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<bool>, Vec<u32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}
