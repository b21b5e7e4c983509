//! The BM25 index: exact BM25 over tokenised documents, persisted as the `bm25_*` tables.
//!
//! Scoring follows bm25s `method="lucene"`: idf = ln(1 + (N − df + 0.5)/(df + 0.5)) and term score
//! tf/(tf + k1·(1 − b + b·dl/avgdl)) (bm25s' Lucene variant has no (k1+1) factor; it scales every score
//! alike and so never changes a ranking); the rank_bm25 Okapi variant, idf = ln((N − df + 0.5)/(df + 0.5))
//! floored at ε·mean idf and tf·(k1+1)/(…), is an option. The maths is pure ([`Bm25Params`] over a [`Bm25Stats`] provider); the index is a
//! term → (doc, tf) posting list built in parallel. Used by the `bm25` stage, by MoR (which loads the
//! index the `bm25` stage persisted) and by `tgrag bm25`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use arrow::array::{Array, Float32Array, RecordBatch, StringArray, UInt32Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::{columns, tables};

use crate::shared::run::top_k;
use crate::shared::text::{TokenizerKind, for_each_token};
use crate::{Result, StageError};

/// Which idf to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// bm25s `method="lucene"` (never-negative idf).
    #[default]
    Lucene,
    /// rank_bm25 `BM25Okapi`: idf = ln((N − df + 0.5)/(df + 0.5)), negative idf replaced by ε·mean idf.
    Okapi,
}

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bm25Params {
    pub k1: f32,
    pub b: f32,
    #[serde(default)]
    pub variant: Variant,
    /// Okapi's ε (fraction of the mean idf given to terms whose idf is negative).
    #[serde(default = "default_epsilon")]
    pub epsilon: f32,
}

fn default_epsilon() -> f32 {
    0.25
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.5, b: 0.75, variant: Variant::Lucene, epsilon: 0.25 }
    }
}

/// Corpus statistics BM25 needs (the index implements it; tests implement it by hand).
pub trait Bm25Stats {
    fn num_docs(&self) -> usize;
    fn avg_doc_len(&self) -> f32;
    fn doc_freq(&self, term: u32) -> usize;
}

impl Bm25Params {
    /// Lucene idf of a term with document frequency `df` among `n` documents.
    pub fn idf_lucene(n: usize, df: usize) -> f32 {
        let (n, df) = (n as f64, df as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32
    }

    /// Term-frequency part of the score (with the (k1+1) factor for Okapi only, as the libraries do).
    pub fn tf_part(&self, tf: f32, doc_len: f32, avg_len: f32) -> f32 {
        let norm = if avg_len > 0.0 { doc_len / avg_len } else { 0.0 };
        let boost = match self.variant {
            Variant::Lucene => 1.0,
            Variant::Okapi => self.k1 + 1.0,
        };
        tf * boost / (tf + self.k1 * (1.0 - self.b + self.b * norm))
    }
}

/// FxHash (rustc's hasher): a multiply-rotate hash, several times faster than SipHash on short
/// tokens; the vocabulary is not attacker-controlled, so DoS resistance is not needed here.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn write_u8(&mut self, b: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        // A multiply only carries entropy upwards; hashbrown takes bucket bits from the bottom,
        // so finish with murmur3's fmix64 avalanche.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// An inverted index over tokenised documents.
///
/// Postings are stored per term, sorted by document. Terms found in at least an eighth of the
/// documents also get a dense weight column (one f32 per document): a query that touches much of the
/// corpus then adds whole columns (vectorised) instead of scattering posting by posting. The dense
/// columns hold less than three times the memory of the postings they duplicate, and give bit-identical
/// scores (adding 0.0 for a document without the term changes nothing).
#[derive(Debug, Clone)]
pub struct Index {
    pub params: Bm25Params,
    /// The tokeniser the documents went through, when the index was built from texts.
    pub tokenizer: Option<TokenizerKind>,
    vocab: FxMap<String, u32>,
    doc_len: Vec<u32>,
    avg_len: f32,
    /// Per document: k1·(1 − b + b·dl/avgdl), the length part of the tf denominator.
    norm: Vec<f32>,
    offsets: Vec<u64>,
    docs: Vec<u32>,
    tfs: Vec<u32>,
    idf: Vec<f32>,
    /// Per posting: its whole term score idf·tf·boost/(tf + norm), computed once at build time
    /// (bm25s' eager scoring), so a query only adds.
    weights: Vec<f32>,
    /// Per term: the slot of its dense column in `dense`, or `u32::MAX`.
    dense_slot: Vec<u32>,
    dense: Vec<f32>,
}

impl Bm25Stats for Index {
    fn num_docs(&self) -> usize {
        self.doc_len.len()
    }
    fn avg_doc_len(&self) -> f32 {
        self.avg_len
    }
    fn doc_freq(&self, term: u32) -> usize {
        let t = term as usize;
        (self.offsets[t + 1] - self.offsets[t]) as usize
    }
}

/// Inverted lists: term t's postings are `docs[offsets[t]..offsets[t + 1]]` (documents ascending)
/// with their term frequencies in `tfs`.
struct Postings {
    offsets: Vec<u64>,
    docs: Vec<u32>,
    tfs: Vec<u32>,
}

/// One chunk of documents, indexed with a chunk-local vocabulary.
struct LocalChunk {
    /// Local term id → term, in order of first occurrence within the chunk.
    terms: Vec<String>,
    /// (local term id, tf) of every document (terms in first-occurrence order), concatenated;
    /// `ends[i]` closes document i.
    runs: Vec<(u32, u32)>,
    ends: Vec<usize>,
    lens: Vec<u32>,
}

impl Index {
    /// Builds the index of already tokenised documents (document i has id i).
    pub fn build(docs: &[Vec<String>], params: Bm25Params) -> Index {
        Self::build_with(docs.len(), params, None, |i, _buf, f| docs[i].iter().for_each(|t| f(t)))
    }

    /// Builds the index of raw texts (document i has id i), tokenising on the fly: no string is
    /// allocated per token, only per distinct term of each chunk.
    /// (Not generic on purpose: generic code is compiled in the calling crate, with its optimisation
    /// level; this keeps the hot loop in this optimised crate.)
    pub fn build_texts(texts: &[&str], kind: TokenizerKind, params: Bm25Params) -> Index {
        Self::build_with(texts.len(), params, Some(kind), |i, buf, f| for_each_token(texts[i], kind, buf, f))
    }

    /// The common build, in parallel: chunks of documents get local vocabularies, merged in chunk
    /// order so that term ids follow first occurrence in the corpus whatever the thread count.
    /// `visit(i, buf, f)` calls `f` with every token of document i (`buf` is scratch space).
    fn build_with<V>(n: usize, params: Bm25Params, tokenizer: Option<TokenizerKind>, visit: V) -> Index
    where
        V: Fn(usize, &mut String, &mut dyn FnMut(&str)) + Sync,
    {
        const CHUNK: usize = 2048;
        let starts: Vec<usize> = (0..n).step_by(CHUNK).collect();
        let locals: Vec<LocalChunk> = starts
            .par_iter()
            .map(|&s| {
                let e = (s + CHUNK).min(n);
                let mut map: FxMap<String, u32> = FxMap::default();
                let mut buf = String::new();
                // Per local term: its count in the current document; `uniq` lists the terms seen
                // in it (first occurrence order), so counts are reset without a sort or a scan.
                let mut counts: Vec<u32> = Vec::new();
                let mut uniq: Vec<u32> = Vec::new();
                let mut chunk =
                    LocalChunk { terms: Vec::new(), runs: Vec::new(), ends: Vec::with_capacity(e - s), lens: Vec::with_capacity(e - s) };
                for i in s..e {
                    let mut len = 0u32;
                    visit(i, &mut buf, &mut |t: &str| {
                        let id = match map.get(t) {
                            Some(&id) => id,
                            None => {
                                let id = chunk.terms.len() as u32;
                                map.insert(t.to_string(), id);
                                chunk.terms.push(t.to_string());
                                counts.push(0);
                                id
                            }
                        };
                        let c = &mut counts[id as usize];
                        if *c == 0 {
                            uniq.push(id);
                        }
                        *c += 1;
                        len += 1;
                    });
                    chunk.lens.push(len);
                    for &id in &uniq {
                        chunk.runs.push((id, std::mem::take(&mut counts[id as usize])));
                    }
                    uniq.clear();
                    chunk.ends.push(chunk.runs.len());
                }
                chunk
            })
            .collect();
        let mut vocab: FxMap<String, u32> = FxMap::default();
        let maps: Vec<Vec<u32>> = locals
            .iter()
            .map(|c| {
                c.terms
                    .iter()
                    .map(|t| match vocab.get(t.as_str()) {
                        Some(&g) => g,
                        None => {
                            let g = vocab.len() as u32;
                            vocab.insert(t.clone(), g);
                            g
                        }
                    })
                    .collect()
            })
            .collect();
        let nt = vocab.len();
        let mut offsets = vec![0u64; nt + 1];
        for (c, map) in locals.iter().zip(&maps) {
            for &(t, _) in &c.runs {
                offsets[map[t as usize] as usize + 1] += 1;
            }
        }
        for i in 0..nt {
            offsets[i + 1] += offsets[i];
        }
        let total = offsets[nt] as usize;
        let (mut pd, mut ptf) = (vec![0u32; total], vec![0u32; total]);
        let mut fill = offsets.clone();
        let mut doc = 0u32;
        let mut doc_len: Vec<u32> = Vec::with_capacity(n);
        for (c, map) in locals.iter().zip(&maps) {
            let mut a = 0;
            for &end in &c.ends {
                for &(t, tf) in &c.runs[a..end] {
                    let g = map[t as usize] as usize;
                    let p = fill[g] as usize;
                    pd[p] = doc;
                    ptf[p] = tf;
                    fill[g] += 1;
                }
                a = end;
                doc += 1;
            }
            doc_len.extend_from_slice(&c.lens);
        }
        drop(locals);
        Self::assemble(params, tokenizer, vocab, doc_len, Postings { offsets, docs: pd, tfs: ptf })
    }

    /// The index from its counts (vocabulary, document lengths, postings): everything derived
    /// (average length, length norms, idf, weights, dense columns) is computed here, for a fresh
    /// build and for a reloaded index alike.
    fn assemble(
        params: Bm25Params,
        tokenizer: Option<TokenizerKind>,
        vocab: FxMap<String, u32>,
        doc_len: Vec<u32>,
        postings: Postings,
    ) -> Index {
        let n = doc_len.len();
        let avg_len = if n == 0 { 0.0 } else { (doc_len.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64) as f32 };
        let norm = doc_len
            .iter()
            .map(|&l| {
                let r = if avg_len > 0.0 { l as f32 / avg_len } else { 0.0 };
                params.k1 * (1.0 - params.b + params.b * r)
            })
            .collect();
        let Postings { offsets, docs, tfs } = postings;
        let mut index = Index {
            params,
            tokenizer,
            vocab,
            doc_len,
            avg_len,
            norm,
            offsets,
            docs,
            tfs,
            idf: Vec::new(),
            weights: Vec::new(),
            dense_slot: Vec::new(),
            dense: Vec::new(),
        };
        index.idf = index.compute_idf();
        index.weights = index.compute_weights();
        index.build_dense();
        index
    }

    /// Dense weight columns for the terms in at least an eighth of the documents.
    fn build_dense(&mut self) {
        let n = self.num_docs();
        let nt = self.vocab.len();
        self.dense_slot = vec![u32::MAX; nt];
        if n < 64 {
            return;
        }
        let heavy: Vec<usize> = (0..nt).filter(|&t| self.doc_freq(t as u32) * 8 >= n).collect();
        for (slot, &t) in heavy.iter().enumerate() {
            self.dense_slot[t] = slot as u32;
        }
        let mut dense = vec![0f32; heavy.len() * n];
        dense.par_chunks_mut(n).zip(&heavy).for_each(|(col, &t)| {
            let (a, b) = (self.offsets[t] as usize, self.offsets[t + 1] as usize);
            for (&d, &w) in self.docs[a..b].iter().zip(&self.weights[a..b]) {
                col[d as usize] = w;
            }
        });
        self.dense = dense;
    }

    fn compute_weights(&self) -> Vec<f32> {
        let boost = match self.params.variant {
            Variant::Lucene => 1.0,
            Variant::Okapi => self.params.k1 + 1.0,
        };
        let mut weights = vec![0f32; self.docs.len()];
        weights.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
            let start = c << 16;
            // The term of the first posting of this block, then walk forward.
            let mut t = self.offsets.partition_point(|&o| o as usize <= start).saturating_sub(1);
            for (j, w) in out.iter_mut().enumerate() {
                let p = start + j;
                while self.offsets[t + 1] as usize <= p {
                    t += 1;
                }
                let tf = self.tfs[p] as f32;
                *w = self.idf[t] * (tf * boost / (tf + self.norm[self.docs[p] as usize]));
            }
        });
        weights
    }

    fn compute_idf(&self) -> Vec<f32> {
        let n = self.num_docs();
        let nt = self.vocab.len() as u32;
        match self.params.variant {
            Variant::Lucene => (0..nt).map(|t| Bm25Params::idf_lucene(n, self.doc_freq(t))).collect(),
            Variant::Okapi => {
                let raw: Vec<f64> = (0..nt)
                    .map(|t| {
                        let df = self.doc_freq(t) as f64;
                        ((n as f64 - df + 0.5) / (df + 0.5)).ln()
                    })
                    .collect();
                let mean = if raw.is_empty() { 0.0 } else { raw.iter().sum::<f64>() / raw.len() as f64 };
                let floor = f64::from(self.params.epsilon) * mean;
                raw.into_iter().map(|v| if v < 0.0 { floor as f32 } else { v as f32 }).collect()
            }
        }
    }

    /// The index as persisted rows under `scope`: (bm25_index, bm25_terms, bm25_postings,
    /// bm25_docs). `node_of[d]` is the node id of document d and must ascend (index order).
    pub fn to_tables(&self, scope: &str, node_of: &[u32]) -> Result<[RecordBatch; 4]> {
        if node_of.len() != self.num_docs() || node_of.windows(2).any(|w| w[0] >= w[1]) {
            return Err(StageError::Internal("bm25 persist: node ids must ascend, one per document".into()));
        }
        let nt = self.vocab.len();
        let mut terms = vec![""; nt];
        for (t, &id) in &self.vocab {
            terms[id as usize] = t.as_str();
        }
        let np = self.docs.len();
        let variant = match self.params.variant {
            Variant::Lucene => "lucene",
            Variant::Okapi => "okapi",
        };
        let tokenizer = match self.tokenizer {
            Some(TokenizerKind::Simple) => "simple",
            _ => "bm25s",
        };
        let index = tables::BM25_INDEX.batch(vec![
            Arc::new(StringArray::from(vec![scope])),
            Arc::new(UInt32Array::from(vec![self.num_docs() as u32])),
            Arc::new(UInt32Array::from(vec![nt as u32])),
            Arc::new(Float32Array::from(vec![self.avg_len])),
            Arc::new(Float32Array::from(vec![self.params.k1])),
            Arc::new(Float32Array::from(vec![self.params.b])),
            Arc::new(StringArray::from(vec![variant])),
            Arc::new(StringArray::from(vec![tokenizer])),
        ])?;
        let term_rows = tables::BM25_TERMS.batch(vec![
            Arc::new(StringArray::from(vec![scope; nt])),
            Arc::new(UInt32Array::from_iter_values(0..nt as u32)),
            Arc::new(StringArray::from(terms)),
            Arc::new(UInt32Array::from_iter_values((0..nt as u32).map(|t| self.doc_freq(t) as u32))),
            Arc::new(Float32Array::from(self.idf.clone())),
        ])?;
        let mut term_of = Vec::with_capacity(np);
        for t in 0..nt {
            term_of.extend(std::iter::repeat_n(t as u32, self.doc_freq(t as u32)));
        }
        let postings = tables::BM25_POSTINGS.batch(vec![
            Arc::new(StringArray::from(vec![scope; np])),
            Arc::new(UInt32Array::from(term_of)),
            Arc::new(UInt32Array::from_iter_values(self.docs.iter().map(|&d| node_of[d as usize]))),
            Arc::new(UInt32Array::from(self.tfs.clone())),
        ])?;
        let docs = tables::BM25_DOCS.batch(vec![
            Arc::new(StringArray::from(vec![scope; node_of.len()])),
            Arc::new(UInt32Array::from(node_of.to_vec())),
            Arc::new(UInt32Array::from(self.doc_len.clone())),
        ])?;
        Ok([index, term_rows, postings, docs])
    }

    /// Loads the index of `scope` from persisted tables (as [`Index::to_tables`] writes them,
    /// possibly concatenated over scopes). Returns the index and the node id of each document.
    /// Weights, idf and dense columns are recomputed from the counts, so a loaded index scores
    /// exactly as the one that was saved.
    pub fn from_tables(
        scope: &str,
        index: &RecordBatch,
        terms: &RecordBatch,
        postings: &RecordBatch,
        docs: &RecordBatch,
    ) -> Result<(Index, Vec<u32>)> {
        let bad = |m: String| StageError::Internal(format!("bm25 index `{scope}`: {m}"));
        let sc = columns::strs(index, "scope")?;
        let row = (0..sc.len()).find(|&i| sc.value(i) == scope).ok_or_else(|| bad("no such scope".into()))?;
        let variant = match columns::strs(index, "variant")?.value(row) {
            "lucene" => Variant::Lucene,
            "okapi" => Variant::Okapi,
            v => return Err(bad(format!("unknown variant `{v}`"))),
        };
        let tokenizer = match columns::strs(index, "tokenizer")?.value(row) {
            "bm25s" => TokenizerKind::Bm25s,
            "simple" => TokenizerKind::Simple,
            v => return Err(bad(format!("unknown tokenizer `{v}`"))),
        };
        let params = Bm25Params {
            k1: columns::f32s(index, "k1")?.value(row),
            b: columns::f32s(index, "b")?.value(row),
            variant,
            epsilon: default_epsilon(),
        };
        // Documents in index order.
        let (dsc, dnode, dlen) = (columns::strs(docs, "scope")?, columns::u32s(docs, "node_id")?, columns::u32s(docs, "len")?);
        let rows: Vec<usize> = (0..dsc.len()).filter(|&i| dsc.value(i) == scope).collect();
        let node_of: Vec<u32> = rows.iter().map(|&i| dnode.value(i)).collect();
        let doc_len: Vec<u32> = rows.iter().map(|&i| dlen.value(i)).collect();
        if node_of.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad("bm25_docs node ids do not ascend".into()));
        }
        // Vocabulary in term-id order.
        let (tsc, tid, tterm) = (columns::strs(terms, "scope")?, columns::u32s(terms, "term_id")?, columns::strs(terms, "term")?);
        let mut vocab: FxMap<String, u32> = FxMap::default();
        for i in (0..tsc.len()).filter(|&i| tsc.value(i) == scope) {
            let id = tid.value(i);
            if id as usize != vocab.len() || vocab.insert(tterm.value(i).to_string(), id).is_some() {
                return Err(bad(format!("bm25_terms row {i}: term ids must run 0, 1, … without repeats")));
            }
        }
        let nt = vocab.len();
        // Postings grouped by term, documents ascending.
        let (psc, pterm, pnode, ptf) = (
            columns::strs(postings, "scope")?,
            columns::u32s(postings, "term_id")?,
            columns::u32s(postings, "node_id")?,
            columns::u32s(postings, "tf")?,
        );
        let mut offsets = vec![0u64; nt + 1];
        let (mut pd, mut ptfs) = (Vec::new(), Vec::new());
        let mut last: Option<(u32, u32)> = None;
        for i in (0..psc.len()).filter(|&i| psc.value(i) == scope) {
            let (t, node) = (pterm.value(i), pnode.value(i));
            if (t as usize) >= nt || last.is_some_and(|l| (t, node) <= l) {
                return Err(bad(format!("bm25_postings row {i}: postings must be sorted by term then node, with known terms")));
            }
            let d = node_of.binary_search(&node).map_err(|_| bad(format!("bm25_postings row {i}: node {node} is not a document")))?;
            offsets[t as usize + 1] += 1;
            pd.push(d as u32);
            ptfs.push(ptf.value(i));
            last = Some((t, node));
        }
        for i in 0..nt {
            offsets[i + 1] += offsets[i];
        }
        let idx = Self::assemble(params, Some(tokenizer), vocab, doc_len, Postings { offsets, docs: pd, tfs: ptfs });
        Ok((idx, node_of))
    }

    /// Number of distinct terms.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

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
                let hits = dense_top_k(acc, k, allowed);
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

/// The `k` best positive entries of `scores` (score desc, id asc), one pass with a bounded heap.
/// Blocks of 64 whose maximum cannot enter the heap are skipped after a vectorised max.
fn dense_top_k(scores: &[f32], k: usize, allowed: Option<&[bool]>) -> Vec<(u32, f32)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if k == 0 {
        return Vec::new();
    }
    // Heap of the kept hits, worst on top: lowest score, then highest id.
    #[derive(PartialEq)]
    struct Hit(f32, u32);
    impl Eq for Hit {}
    impl PartialOrd for Hit {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Hit {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&o.0).then(o.1.cmp(&self.1))
        }
    }
    let mut heap: BinaryHeap<Reverse<Hit>> = BinaryHeap::with_capacity(k + 1);
    let mut threshold = 0.0f32;
    const BLOCK: usize = 64;
    for (bi, block) in scores.chunks(BLOCK).enumerate() {
        if heap.len() == k {
            let max = block.iter().fold(0.0f32, |m, &x| if x > m { x } else { m });
            if max <= threshold {
                continue;
            }
        }
        for (j, &s) in block.iter().enumerate() {
            let d = bi * BLOCK + j;
            // Ids ascend, so an equal score never displaces a kept (smaller) id.
            if s > threshold || (heap.len() < k && s > 0.0) {
                if allowed.is_some_and(|a| !a.get(d).copied().unwrap_or(false)) {
                    continue;
                }
                heap.push(Reverse(Hit(s, d as u32)));
                if heap.len() > k {
                    heap.pop();
                }
                if heap.len() == k {
                    threshold = heap.peek().map_or(0.0, |r| r.0.0);
                }
            }
        }
    }
    let mut hits: Vec<(u32, f32)> = heap.into_iter().map(|Reverse(Hit(s, d))| (d, s)).collect();
    hits.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    hits
}

thread_local! {
    /// Per-thread score accumulator, seen marks and touched list, reused across queries.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<bool>, Vec<u32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Brute-force BM25 straight from the formula, for comparison with the index.
    fn brute(docs: &[Vec<String>], q: &[String], p: Bm25Params) -> Vec<f32> {
        let n = docs.len();
        let avg = docs.iter().map(Vec::len).sum::<usize>() as f32 / n as f32;
        let dfs: Vec<usize> = q.iter().map(|t| docs.iter().filter(|x| x.contains(t)).count()).collect();
        docs.iter()
            .map(|d| {
                q.iter()
                    .zip(&dfs)
                    .map(|(t, &df)| {
                        let tf = d.iter().filter(|x| *x == t).count() as f32;
                        if tf == 0.0 {
                            return 0.0;
                        }
                        let idf = ((1.0 + (n as f64 - df as f64 + 0.5) / (df as f64 + 0.5)).ln()) as f32;
                        idf * tf / (tf + p.k1 * (1.0 - p.b + p.b * d.len() as f32 / avg))
                    })
                    .sum()
            })
            .collect()
    }

    #[test]
    fn a_k_beyond_the_corpus_returns_every_match_without_allocating_k() {
        let docs: Vec<Vec<String>> = ["red tent", "blue tent", "red shoe"].iter().map(|s| toks(s)).collect();
        let idx = Index::build(&docs, Bm25Params::default());
        // Dense and sparse paths: a common term (every doc) and a rare one; k = 10^15 would abort
        // the process if a heap were sized by it.
        assert_eq!(idx.search(&toks("tent red shoe blue"), 1_000_000_000_000_000, None).len(), 3);
        assert_eq!(idx.search(&toks("shoe"), usize::MAX, None).len(), 1);
    }

    #[test]
    fn index_matches_formula_and_orders_ties_by_id() {
        let docs: Vec<Vec<String>> =
            ["red tent tent", "blue tent", "red red red shoe", "green mug", "tent red"].iter().map(|s| toks(s)).collect();
        let p = Bm25Params::default();
        let idx = Index::build(&docs, p);
        let q = toks("red tent");
        let want = brute(&docs, &q, p);
        let got = idx.search(&q, 10, None);
        for &(d, s) in &got {
            assert!((s - want[d as usize]).abs() < 1e-5, "doc {d}: {s} vs {}", want[d as usize]);
        }
        assert_eq!(got.len(), 4, "doc 3 has no query term");
        let mut sorted: Vec<(u32, f32)> = (0..5).map(|d| (d, want[d as usize])).filter(|x| x.1 > 0.0).collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), sorted.iter().map(|x| x.0).collect::<Vec<_>>());
    }

    fn token_lists(path: &std::path::Path, id_col: &str) -> Vec<(u32, Vec<String>)> {
        use arrow::array::AsArray;
        let b = tgrag_schemas::io::read_parquet(path).expect("read fixture");
        let ids = arrow::compute::cast(b.column_by_name(id_col).expect("ids"), &arrow::datatypes::DataType::UInt32).expect("cast");
        let ids = ids.as_primitive::<arrow::datatypes::UInt32Type>();
        let toks = b.column_by_name("tokens").expect("tokens").as_list::<i32>();
        (0..b.num_rows())
            .map(|i| {
                let l = toks.value(i);
                let s = l.as_string::<i32>();
                (ids.value(i), (0..s.len()).map(|j| s.value(j).to_string()).collect())
            })
            .collect()
    }

    /// Compares top-20 lists with the fixture: same ids up to ties (same score set), scores within tol.
    fn check_against(dir: &std::path::Path, file: &str, params: Bm25Params, tol: f32) {
        use arrow::array::AsArray;
        let docs = token_lists(&dir.join("corpus.parquet"), "doc_id");
        assert!(docs.iter().enumerate().all(|(i, d)| d.0 as usize == i));
        let corpus: Vec<Vec<String>> = docs.into_iter().map(|d| d.1).collect();
        let index = Index::build(&corpus, params);
        let queries = token_lists(&dir.join("queries.parquet"), "query_id");
        let want = tgrag_schemas::io::read_parquet(&dir.join(file)).expect("top20");
        let cast = |c: &str, t| arrow::compute::cast(want.column_by_name(c).expect("col"), &t).expect("cast");
        let (q, d, s) = (
            cast("query_id", arrow::datatypes::DataType::UInt32),
            cast("doc_id", arrow::datatypes::DataType::UInt32),
            cast("score", arrow::datatypes::DataType::Float64),
        );
        let (q, d, s) = (
            q.as_primitive::<arrow::datatypes::UInt32Type>(),
            d.as_primitive::<arrow::datatypes::UInt32Type>(),
            s.as_primitive::<arrow::datatypes::Float64Type>(),
        );
        let mut expected: HashMap<u32, Vec<(u32, f64)>> = HashMap::new();
        for i in 0..want.num_rows() {
            expected.entry(q.value(i)).or_default().push((d.value(i), s.value(i)));
        }
        for (qid, toks) in &queries {
            let got = index.search(toks, 20, None);
            let exp = expected.get(qid).cloned().unwrap_or_default();
            assert_eq!(got.len(), exp.len(), "query {qid}: {got:?} vs {exp:?}");
            for (g, e) in got.iter().zip(&exp) {
                assert!(((g.1 as f64) - e.1).abs() <= f64::from(tol) * e.1.abs().max(1.0), "query {qid}: score {} vs {}", g.1, e.1);
                if g.0 != e.0 {
                    // Only a tie may reorder ids.
                    let tied = exp.iter().any(|x| x.0 == g.0 && (x.1 - e.1).abs() < 1e-4);
                    assert!(tied, "query {qid}: doc {} where {} was expected", g.0, e.0);
                }
            }
        }
    }

    #[test]
    fn matches_bm25s_lucene_fixture() {
        check_against(
            &crate::shared::test_support::fixture("bm25"),
            "bm25s_lucene_top20.parquet",
            Bm25Params { k1: 1.2, b: 0.75, variant: Variant::Lucene, epsilon: 0.25 },
            1e-4,
        );
    }

    #[test]
    fn matches_rank_bm25_okapi_fixture() {
        let dir = crate::shared::test_support::fixture("bm25");
        check_against(&dir, "rank_bm25_top20.parquet", Bm25Params { k1: 1.5, b: 0.75, variant: Variant::Okapi, epsilon: 0.25 }, 1e-4);
    }

    /// A seeded corpus with a skewed vocabulary: several terms are in more than an eighth of the
    /// documents (dense columns, dense accumulation) and there are more documents than one build chunk.
    fn skewed_corpus(n: usize) -> Vec<String> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|_| {
                let len = 3 + next() % 12;
                (0..len)
                    .map(|_| {
                        // Term index with a heavy head: min of two uniforms over 0..60, squared-ish.
                        let a = next() % 60;
                        let b = next() % 60;
                        format!("w{}", a.min(b) * a.min(b) / 60)
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn dense_columns_and_chunking_agree_with_brute_force() {
        let texts = skewed_corpus(4500);
        let toks: Vec<Vec<String>> = texts.iter().map(|t| crate::shared::text::tokenize(t, TokenizerKind::Bm25s)).collect();
        let p = Bm25Params::default();
        let from_texts = Index::build_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>(), TokenizerKind::Bm25s, p);
        let from_tokens = Index::build(&toks, p);
        assert!(from_texts.dense_slot.iter().filter(|&&s| s != u32::MAX).count() >= 3, "the head terms must get dense columns");
        assert_eq!(from_texts.vocab_size(), from_tokens.vocab_size());
        for q in ["w0", "w0 w1 w2", "w3 w57", "w40 w0 w0", "w9 w16 w25 w36"] {
            let qt = toks_of(q);
            let want = brute(&toks, &qt, p);
            let got = from_texts.search_text(q, TokenizerKind::Bm25s, 25, None);
            assert_eq!(got, from_tokens.search(&qt, 25, None), "query {q}: both builds rank alike");
            let mut exp: Vec<(u32, f32)> = want.iter().enumerate().filter(|x| *x.1 > 0.0).map(|(d, &s)| (d as u32, s)).collect();
            exp.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            exp.truncate(25);
            assert_eq!(got.len(), exp.len(), "query {q}");
            for (g, e) in got.iter().zip(&exp) {
                assert!((g.1 - e.1).abs() <= 1e-4 * e.1.max(1.0), "query {q}: {g:?} vs {e:?}");
            }
            // Ranks agree except among near-equal scores.
            for (g, e) in got.iter().zip(&exp) {
                assert!(g.0 == e.0 || (want[g.0 as usize] - e.1).abs() < 1e-4, "query {q}: {g:?} vs {e:?}");
            }
        }
    }

    #[test]
    fn persisted_index_reloads_and_scores_identically() {
        let texts = skewed_corpus(3000);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let p = Bm25Params { k1: 1.2, b: 0.6, variant: Variant::Okapi, epsilon: 0.25 };
        let a = Index::build_texts(&refs, TokenizerKind::Simple, p);
        let b = Index::build_texts(&refs[..700], TokenizerKind::Bm25s, Bm25Params::default());
        let nodes_a: Vec<u32> = (0..3000).map(|d| 10 * d + 3).collect();
        let nodes_b: Vec<u32> = (0..700).map(|d| 2 * d).collect();
        let (ta, tb) = (a.to_tables("*", &nodes_a).expect("a"), b.to_tables("paper", &nodes_b).expect("b"));
        let cat = |k: usize| arrow::compute::concat_batches(&ta[k].schema(), &[ta[k].clone(), tb[k].clone()]).expect("concat");
        let (idx, terms, postings, docs) = (cat(0), cat(1), cat(2), cat(3));
        for (scope, orig, nodes) in [("*", &a, &nodes_a), ("paper", &b, &nodes_b)] {
            let (re, node_of) = Index::from_tables(scope, &idx, &terms, &postings, &docs).expect("load");
            assert_eq!(&node_of, nodes);
            assert_eq!((re.params, re.tokenizer, re.vocab_size()), (orig.params, orig.tokenizer, orig.vocab_size()));
            for q in ["w0", "w1 w2 w3", "w57 w0", "w30"] {
                let kind = orig.tokenizer.unwrap_or_default();
                assert_eq!(re.search_text(q, kind, 30, None), orig.search_text(q, kind, 30, None), "scope {scope}, query {q}");
            }
        }
        assert!(Index::from_tables("nope", &idx, &terms, &postings, &docs).is_err());
        // Postings out of order are refused, not silently mis-scored.
        let rev = arrow::compute::take_record_batch(&postings, &UInt32Array::from_iter_values((0..postings.num_rows() as u32).rev()))
            .expect("take");
        let e = Index::from_tables("*", &idx, &terms, &rev, &docs).expect_err("unsorted postings");
        assert!(e.to_string().contains("sorted by term then node"), "{e}");
    }

    fn toks_of(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn lucene_idf_hand_computed() {
        // N = 4, df = 1: ln(1 + 3.5/1.5) = ln(3.3333)
        assert!((Bm25Params::idf_lucene(4, 1) - (10.0f32 / 3.0).ln()).abs() < 1e-6);
    }
}
