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
    let (mut r_t, mut r_ret, mut r_rank, mut r_node, mut r_score, mut r_text) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut contexts: Vec<String> = Vec::new();
    for (name, hs) in hits {
        for (qi, h) in hs.iter().enumerate() {
            for (rank, nb) in h.iter().enumerate() {
                r_t.push(items.target_ids[qi]);
                r_ret.push(*name);
                r_rank.push(rank as u32 + 1);
                r_node.push(items.ids[nb.node as usize]);
                r_score.push(nb.score);
                r_text.push(items.texts[nb.node as usize]);
            }
            contexts.push(h.iter().map(|nb| items.texts[nb.node as usize]).collect::<Vec<_>>().join(" "));
        }
    }
    let ctx_refs: Vec<&str> = contexts.iter().map(String::as_str).collect();
    let ctx_emb = encoder.encode(&ctx_refs, "toporag: embed contexts")?;
    let m = hidden.len();
    let f64v = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let (mut q_t, mut q_ret, mut q_bleu, mut q_rouge, mut q_cos) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut s_ret, mut s_n, mut s_bleu, mut s_cbleu, mut s_rouge, mut s_cos) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (ri, (name, _)) in hits.iter().enumerate() {
        let rows: Vec<(f64, f64, f64)> = (0..m)
            .into_par_iter()
            .map(|qi| {
                let c = ctx_refs[ri * m + qi];
                let bleu = textmetrics::sentence_bleu(c, hidden[qi]).score;
                let rouge = textmetrics::rouge_l(hidden[qi], c).2;
                let cs = if c.is_empty() {
                    0.0
                } else {
                    cos(&f64v(&ctx_emb[(ri * m + qi) * dim..(ri * m + qi + 1) * dim]), &f64v(&hid_emb[qi * dim..qi * dim + dim]))
                };
                (bleu, rouge, cs)
            })
            .collect();
        for (qi, (b, r, c)) in rows.iter().enumerate() {
            q_t.push(items.target_ids[qi]);
            q_ret.push(*name);
            q_bleu.push(*b);
            q_rouge.push(*r);
            q_cos.push(*c);
        }
        let pairs_: Vec<(&str, &str)> = (0..m).map(|qi| (ctx_refs[ri * m + qi], hidden[qi])).collect();
        let mean = |f: fn(&(f64, f64, f64)) -> f64| rows.iter().map(f).sum::<f64>() / m.max(1) as f64;
        s_ret.push(*name);
        s_n.push(m as u64);
        s_bleu.push(mean(|x| x.0));
        s_cbleu.push(textmetrics::corpus_bleu(&pairs_).score);
        s_rouge.push(mean(|x| x.1));
        s_cos.push(mean(|x| x.2));
    }
    let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let u32a = |v: Vec<u32>| Arc::new(UInt32Array::from(v)) as ArrayRef;
    let f64a = |v: Vec<f64>| Arc::new(Float64Array::from(v)) as ArrayRef;
    let summary = (0..s_ret.len())
        .map(|i| Summary {
            retriever: s_ret[i].to_string(),
            targets: s_n[i],
            bleu4_mean: s_bleu[i],
            bleu4_corpus: s_cbleu[i],
            rouge_l_f1_mean: s_rouge[i],
            cosine_mean: s_cos[i],
        })
        .collect();
    let retrieved = RecordBatch::try_from_iter(vec![
        ("target", u32a(r_t)),
        ("retriever", strs(r_ret)),
        ("rank", u32a(r_rank)),
        (items.id_column, u32a(r_node)),
        ("score", f64a(r_score)),
        ("text", strs(r_text)),
    ])?;
    let context_quality = RecordBatch::try_from_iter(vec![
        ("target", u32a(q_t)),
        ("retriever", strs(q_ret)),
        ("bleu4", f64a(q_bleu)),
        ("rouge_l_f1", f64a(q_rouge)),
        ("minilm_cosine", f64a(q_cos)),
    ])?;
    let context_summary = RecordBatch::try_from_iter(vec![
        ("retriever", strs(s_ret)),
        ("targets", Arc::new(UInt64Array::from(s_n)) as ArrayRef),
        ("bleu4_mean", f64a(s_bleu)),
        ("bleu4_corpus", f64a(s_cbleu)),
        ("rouge_l_f1_mean", f64a(s_rouge)),
        ("cosine_mean", f64a(s_cos)),
    ])?;
    Ok(Quality { retrieved, context_quality, context_summary, summary, contexts })
}
