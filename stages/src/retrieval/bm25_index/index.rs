//! Building the BM25 index: tokens → a term → (doc, tf) posting list, built in parallel, with every
//! posting's term score computed once (bm25s' eager scoring) and dense weight columns for the
//! frequent terms. The index is the [`Bm25Stats`] provider the scoring maths reads.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use rayon::prelude::*;

use super::scoring::{Bm25Params, Bm25Stats};
use crate::shared::text::{TokenizerKind, for_each_token};

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

pub(super) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// An inverted index over tokenised documents.
///
/// Postings are stored per term, sorted by document. Terms found in at least an eighth of the
/// documents also get a dense weight column (one f32 per document): a query that touches much of the
/// corpus then adds whole columns (vectorised) instead of scattering posting by posting. The dense
/// columns hold less than three times the memory of the postings they duplicate, and give bit-identical
/// scores (adding 0.0 for a document without the term changes nothing).
#[derive(Debug, Clone)]
pub struct Index {
    /// The parameters the weights were computed with.
    pub params: Bm25Params,
    /// The tokeniser the documents went through, when the index was built from texts.
    pub tokenizer: Option<TokenizerKind>,
    pub(super) vocab: FxMap<String, u32>,
    pub(super) doc_len: Vec<u32>,
    pub(super) avg_len: f32,
    /// Per document: k1·(1 − b + b·dl/avgdl), the length part of the tf denominator.
    norm: Vec<f32>,
    pub(super) offsets: Vec<u64>,
    pub(super) docs: Vec<u32>,
    pub(super) tfs: Vec<u32>,
    pub(super) idf: Vec<f32>,
    /// Per posting: its whole term score idf·tf·boost/(tf + norm), computed once at build time
    /// (bm25s' eager scoring), so a query only adds.
    pub(super) weights: Vec<f32>,
    /// Per term: the slot of its dense column in `dense`, or `u32::MAX`.
    pub(super) dense_slot: Vec<u32>,
    pub(super) dense: Vec<f32>,
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
pub(super) struct Postings {
    pub(super) offsets: Vec<u64>,
    pub(super) docs: Vec<u32>,
    pub(super) tfs: Vec<u32>,
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

impl LocalChunk {
    /// Indexes documents `s..e` with a chunk-local vocabulary; `visit` as in [`Index::build_with`].
    fn index<V>(s: usize, e: usize, visit: &V) -> LocalChunk
    where
        V: Fn(usize, &mut String, &mut dyn FnMut(&str)),
    {
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
    }
}

/// Merges the chunks in chunk order, so that term ids follow first occurrence in the corpus
/// whatever the thread count: the global vocabulary, the document lengths (`n` documents) and the
/// postings, term by term with documents ascending.
fn merge(locals: Vec<LocalChunk>, n: usize) -> (FxMap<String, u32>, Vec<u32>, Postings) {
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
    (vocab, doc_len, Postings { offsets, docs: pd, tfs: ptf })
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
        let locals: Vec<LocalChunk> = starts.par_iter().map(|&s| LocalChunk::index(s, (s + CHUNK).min(n), &visit)).collect();
        let (vocab, doc_len, postings) = merge(locals, n);
        Self::assemble(params, tokenizer, vocab, doc_len, postings)
    }

    /// build and for a reloaded index alike.
    pub(super) fn assemble(
        params: Bm25Params,
        tokenizer: Option<TokenizerKind>,
        vocab: FxMap<String, u32>,
        doc_len: Vec<u32>,
        postings: Postings,
    ) -> Index {
        let n = doc_len.len();
        let avg_len = if n == 0 { 0.0 } else { (doc_len.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64) as f32 };
        let norm = doc_len.iter().map(|&l| params.length_norm(l as f32, avg_len)).collect();
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
        index.idf = params.idfs(&index, index.vocab.len() as u32);
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

    /// Every posting's term score, idf·tf·boost/(tf + norm), in posting order.
    fn compute_weights(&self) -> Vec<f32> {
        let boost = self.params.boost();
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

    /// Number of distinct terms.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }
}
