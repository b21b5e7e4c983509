//! Text retrieval: the BM25 index ([`bm25_index`], a library) and the stages `bm25` and `dense`.

pub mod bm25;
pub mod bm25_index;
pub mod dense;
