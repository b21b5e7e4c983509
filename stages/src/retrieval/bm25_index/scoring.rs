//! The BM25 maths, pure: parameters, idf and the term-frequency part, over a [`Bm25Stats`]
//! provider of corpus statistics (as tantivy's `query/bm25.rs` scores behind its statistics
//! provider). Nothing here knows how the statistics are stored.

use serde::{Deserialize, Serialize};

/// Which idf to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// bm25s `method="lucene"` (never-negative idf).
    #[default]
    Lucene,
    /// rank_bm25 `BM25Okapi`: idf = ln((N − df + 0.5)/(df + 0.5)), negative idf replaced by ε·mean idf.
    Okapi,
}

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Document-length normalisation (0: none, 1: full).
    pub b: f32,
    /// Which idf.
    #[serde(default)]
    pub variant: Variant,
    /// Okapi's ε (fraction of the mean idf given to terms whose idf is negative).
    #[serde(default = "default_epsilon")]
    pub epsilon: f32,
}

/// Okapi's ε when none is given (rank_bm25's default); the persisted tables do not store it.
pub(super) fn default_epsilon() -> f32 {
    0.25
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.5, b: 0.75, variant: Variant::Lucene, epsilon: 0.25 }
    }
}

/// Corpus statistics BM25 needs (the index implements it; a test may implement it by hand).
pub trait Bm25Stats {
    /// Number of documents.
    fn num_docs(&self) -> usize;
    /// Mean document length, in tokens.
    fn avg_doc_len(&self) -> f32;
    /// Number of documents that contain term `term`.
    fn doc_freq(&self, term: u32) -> usize;
}

impl Bm25Params {
    /// Lucene idf of a term with document frequency `df` among `n` documents.
    pub fn idf_lucene(n: usize, df: usize) -> f32 {
        let (n, df) = (n as f64, df as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32
    }

    /// The idf of terms `0..num_terms` under this variant. Okapi's floor is ε times the mean raw idf
    /// over all those terms, so the idf of a term depends on the whole vocabulary.
    pub fn idfs<S: Bm25Stats + ?Sized>(&self, stats: &S, num_terms: u32) -> Vec<f32> {
        let n = stats.num_docs();
        match self.variant {
            Variant::Lucene => (0..num_terms).map(|t| Self::idf_lucene(n, stats.doc_freq(t))).collect(),
            Variant::Okapi => {
                let raw: Vec<f64> = (0..num_terms)
                    .map(|t| {
                        let df = stats.doc_freq(t) as f64;
                        ((n as f64 - df + 0.5) / (df + 0.5)).ln()
                    })
                    .collect();
                let mean = if raw.is_empty() { 0.0 } else { raw.iter().sum::<f64>() / raw.len() as f64 };
                let floor = f64::from(self.epsilon) * mean;
                raw.into_iter().map(|v| if v < 0.0 { floor as f32 } else { v as f32 }).collect()
            }
        }
    }

    /// The numerator's factor: (k1 + 1) for Okapi only, as the libraries do (it scales every score
    /// alike, so it never changes a ranking).
    pub fn boost(&self) -> f32 {
        match self.variant {
            Variant::Lucene => 1.0,
            Variant::Okapi => self.k1 + 1.0,
        }
    }

    /// The length part of the tf denominator, k1·(1 − b + b·dl/avgdl) (dl/avgdl taken as 0 for an
    /// empty corpus).
    pub fn length_norm(&self, doc_len: f32, avg_len: f32) -> f32 {
        let r = if avg_len > 0.0 { doc_len / avg_len } else { 0.0 };
        self.k1 * (1.0 - self.b + self.b * r)
    }

    /// Term-frequency part of the score, tf·boost/(tf + k1·(1 − b + b·dl/avgdl)).
    pub fn tf_part(&self, tf: f32, doc_len: f32, avg_len: f32) -> f32 {
        tf * self.boost() / (tf + self.length_norm(doc_len, avg_len))
    }
}
