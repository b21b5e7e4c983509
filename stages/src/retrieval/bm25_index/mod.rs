//! The BM25 index, a library: exact BM25 over tokenised documents, persisted as the `bm25_*` tables.
//! Used by the `bm25` stage, by MoR (which loads the index the `bm25` stage persisted) and by
//! `tgrag bm25`.
//!
//! Scoring follows bm25s `method="lucene"`: idf = ln(1 + (N − df + 0.5)/(df + 0.5)) and term score
//! tf/(tf + k1·(1 − b + b·dl/avgdl)) (bm25s' Lucene variant has no (k1+1) factor; it scales every score
//! alike and so never changes a ranking); the rank_bm25 Okapi variant, idf = ln((N − df + 0.5)/(df + 0.5))
//! floored at ε·mean idf and tf·(k1+1)/(…), is an option.
//!
//! * [`scoring`]: the pure maths, [`Bm25Params`] over a [`Bm25Stats`] provider of corpus statistics
//!   (the split tantivy makes between `Bm25Weight` and its statistics provider).
//! * [`index`]: the [`Index`], a term → (doc, tf) posting list built in parallel, with each posting's
//!   weight computed at build time; it provides the statistics.
//! * [`persist`]: the index as the `bm25_*` tables and back.
//! * [`search`]: top-k queries over the index.

pub mod index;
pub mod persist;
pub mod scoring;
pub mod search;
#[cfg(test)]
mod tests;

pub use index::{FxHasher, Index};
pub use scoring::{Bm25Params, Bm25Stats, Variant};
