//! TopoRAG's context quality (§6.1.2) without an LLM: the retrieved texts of each target, joined into
//! one context, against the target's hidden text: sentence BLEU-4 (sacrebleu), ROUGE-L F1
//! (rouge-score) and the MiniLM cosine, per target and per retriever (with corpus BLEU).

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use rayon::prelude::*;

use crate::Result;
use crate::shared::encoders::TextEncoder;
use crate::toporag::diffusion::Neighbour;
use crate::toporag::similarity::cos;
use crate::toporag::textmetrics;

/// What retrieval returns: the targets' ids, and the retrievable items (graph nodes or e-mails)
/// by index with their ids and texts.
pub struct Items<'a> {
    pub target_ids: Vec<u32>,
    pub ids: &'a [u32],
    pub texts: &'a [&'a str],
    /// Name of the item id column of `retrieved` (`node_id`, `email_id`).
    pub id_column: &'a str,
}

/// One retriever's mean quality over the targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub retriever: String,
    pub targets: u64,
    pub bleu4_mean: f64,
    pub bleu4_corpus: f64,
    pub rouge_l_f1_mean: f64,
    pub cosine_mean: f64,
}

/// The quality tables and the contexts (retrieved texts joined by spaces), retriever-major.
pub struct Quality {
    pub retrieved: RecordBatch,
    pub context_quality: RecordBatch,
    pub context_summary: RecordBatch,
    pub summary: Vec<Summary>,
    pub contexts: Vec<String>,
}

/// The quality of `hits` (per retriever, per target, item indices) against the targets' hidden
/// texts (`hid_emb`: their embeddings by `encoder`, `dim` wide).
pub fn quality(
    encoder: &TextEncoder,
    dim: usize,
    hits: &[(&str, Vec<Vec<Neighbour>>)],
    items: &Items<'_>,
    hidden: &[&str],
    hid_emb: &[f32],
) -> Result<Quality> {
    let (found, contexts) = retrieved_rows(hits, items);
    let ctx_refs: Vec<&str> = contexts.iter().map(String::as_str).collect();
    let ctx_emb = encoder.encode(&ctx_refs, "toporag: embed contexts")?;
    let scoring = Scoring { dim, ctx_refs: &ctx_refs, ctx_emb: &ctx_emb, hidden, hid_emb };
    let mut per_target: Vec<(u32, &str, Scores)> = Vec::new();
    let mut summary = Vec::new();
    for (ri, (name, _)) in hits.iter().enumerate() {
        let rows = scoring.scores(ri);
        for (qi, sc) in rows.iter().enumerate() {
            per_target.push((items.target_ids[qi], *name, *sc));
        }
        summary.push(scoring.summary(name, ri, &rows));
    }
    let retrieved = found.batch(items.id_column)?;
    let context_quality = RecordBatch::try_from_iter(vec![
        ("target", u32a(per_target.iter().map(|r| r.0).collect())),
        ("retriever", strs(per_target.iter().map(|r| r.1).collect())),
        ("bleu4", f64a(per_target.iter().map(|r| r.2.bleu).collect())),
        ("rouge_l_f1", f64a(per_target.iter().map(|r| r.2.rouge).collect())),
        ("minilm_cosine", f64a(per_target.iter().map(|r| r.2.cosine).collect())),
    ])?;
    let context_summary = RecordBatch::try_from_iter(vec![
        ("retriever", strs(summary.iter().map(|s| s.retriever.as_str()).collect())),
        ("targets", Arc::new(UInt64Array::from(summary.iter().map(|s| s.targets).collect::<Vec<_>>())) as ArrayRef),
        ("bleu4_mean", f64a(summary.iter().map(|s| s.bleu4_mean).collect())),
        ("bleu4_corpus", f64a(summary.iter().map(|s| s.bleu4_corpus).collect())),
        ("rouge_l_f1_mean", f64a(summary.iter().map(|s| s.rouge_l_f1_mean).collect())),
        ("cosine_mean", f64a(summary.iter().map(|s| s.cosine_mean).collect())),
    ])?;
    Ok(Quality { retrieved, context_quality, context_summary, summary, contexts })
}

fn strs(v: Vec<&str>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

fn u32a(v: Vec<u32>) -> ArrayRef {
    Arc::new(UInt32Array::from(v))
}

fn f64a(v: Vec<f64>) -> ArrayRef {
    Arc::new(Float64Array::from(v))
}

/// The rows of `retrieved`: one per (retriever, target, rank).
#[derive(Default)]
struct Retrieved<'a> {
    target: Vec<u32>,
    retriever: Vec<&'a str>,
    rank: Vec<u32>,
    item: Vec<u32>,
    score: Vec<f64>,
    text: Vec<&'a str>,
}

impl Retrieved<'_> {
    fn batch(self, id_column: &str) -> Result<RecordBatch> {
        Ok(RecordBatch::try_from_iter(vec![
            ("target", u32a(self.target)),
            ("retriever", strs(self.retriever)),
            ("rank", u32a(self.rank)),
            (id_column, u32a(self.item)),
            ("score", f64a(self.score)),
            ("text", strs(self.text)),
        ])?)
    }
}

/// Every hit as a `retrieved` row, and each (retriever, target)'s context: its retrieved texts
/// joined by spaces, retriever-major.
fn retrieved_rows<'a>(hits: &[(&'a str, Vec<Vec<Neighbour>>)], items: &Items<'a>) -> (Retrieved<'a>, Vec<String>) {
    let mut r = Retrieved::default();
    let mut contexts: Vec<String> = Vec::new();
    for (name, hs) in hits {
        for (qi, h) in hs.iter().enumerate() {
            for (rank, nb) in h.iter().enumerate() {
                r.target.push(items.target_ids[qi]);
                r.retriever.push(*name);
                r.rank.push(rank as u32 + 1);
                r.item.push(items.ids[nb.node as usize]);
                r.score.push(nb.score);
                r.text.push(items.texts[nb.node as usize]);
            }
            contexts.push(h.iter().map(|nb| items.texts[nb.node as usize]).collect::<Vec<_>>().join(" "));
        }
    }
    (r, contexts)
}

/// One context's scores against its target's hidden text.
#[derive(Debug, Clone, Copy)]
struct Scores {
    bleu: f64,
    rouge: f64,
    cosine: f64,
}

/// The contexts (retriever-major, `hidden.len()` per retriever) with their embeddings, and the
/// hidden texts with theirs.
struct Scoring<'a> {
    dim: usize,
    ctx_refs: &'a [&'a str],
    ctx_emb: &'a [f32],
    hidden: &'a [&'a str],
    hid_emb: &'a [f32],
}

impl Scoring<'_> {
    /// Retriever `ri`'s scores per target, in parallel: sentence BLEU-4, ROUGE-L F1 and the cosine
    /// (0 for an empty context).
    fn scores(&self, ri: usize) -> Vec<Scores> {
        let (m, dim) = (self.hidden.len(), self.dim);
        let f64v = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        (0..m)
            .into_par_iter()
            .map(|qi| {
                let c = self.ctx_refs[ri * m + qi];
                let bleu = textmetrics::sentence_bleu(c, self.hidden[qi]).score;
                let rouge = textmetrics::rouge_l(self.hidden[qi], c).2;
                let cs = if c.is_empty() {
                    0.0
                } else {
                    cos(&f64v(&self.ctx_emb[(ri * m + qi) * dim..(ri * m + qi + 1) * dim]), &f64v(&self.hid_emb[qi * dim..qi * dim + dim]))
                };
                Scores { bleu, rouge, cosine: cs }
            })
            .collect()
    }

    /// Retriever `ri`'s means over the targets and its corpus BLEU.
    fn summary(&self, name: &str, ri: usize, rows: &[Scores]) -> Summary {
        let m = self.hidden.len();
        let pairs_: Vec<(&str, &str)> = (0..m).map(|qi| (self.ctx_refs[ri * m + qi], self.hidden[qi])).collect();
        let mean = |f: fn(&Scores) -> f64| rows.iter().map(f).sum::<f64>() / m.max(1) as f64;
        Summary {
            retriever: name.to_string(),
            targets: m as u64,
            bleu4_mean: mean(|x| x.bleu),
            bleu4_corpus: textmetrics::corpus_bleu(&pairs_).score,
            rouge_l_f1_mean: mean(|x| x.rouge),
            cosine_mean: mean(|x| x.cosine),
        }
    }
}
