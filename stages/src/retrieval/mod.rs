//! Text retrieval: the BM25 index ([`lexical`], a library) and the stages `bm25` and `dense`.

pub mod bm25;
pub mod dense;
pub mod lexical;
