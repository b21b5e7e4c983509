//! Persistence of the BM25 index as the `bm25_*` tables (`bm25_index`, `bm25_terms`,
//! `bm25_postings`, `bm25_docs`), one scope per index, and its reload. Only counts are stored:
//! idf, weights and dense columns are recomputed on load, so a reloaded index scores exactly as the
//! one that was saved.

use std::sync::Arc;

use arrow::array::{Array, Float32Array, RecordBatch, StringArray, UInt32Array};
use tgrag_schemas::{columns, tables};

use super::index::{FxMap, Index, Postings};
use super::scoring::{Bm25Params, Bm25Stats, Variant, default_epsilon};
use crate::shared::text::TokenizerKind;
use crate::{Result, StageError};

impl Index {
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
}
