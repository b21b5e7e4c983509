//! `toporag`: TopoRAG (Wang et al. 2024) retrieval for partially observed nodes of a text-attributed
//! graph, and its evaluation without an LLM.
//!
//! 1. **Split** (§6.1.1): nodes whose text has fewer than `min_words` words (or `min_chars`
//!    characters) are dropped; of the rest, `1 − observed_fraction` become partially observed: the
//!    newest by `time` when every node has one (ties by node id), else a seeded random choice. A
//!    partial node shows its first `visible_words` words; the rest is hidden. Edges between two
//!    partial nodes are removed. (A `split` column given by the dataset is ignored: the rule above
//!    is applied to every dataset alike.)
//! 2. **Similarities**: proximity P = Σ α_k Â^k R over the split graph (`diffusion`, R seeded
//!    Gaussian, f32), role = GraphWave embeddings (`graphwave`, exact up to 2,000 nodes, Chebyshev
//!    above), text = MiniLM (or hashing) embeddings.
//! 3. **Retrieval** for every partial node, among observed nodes, top `top_k`: `none`, `random`
//!    (seeded), `text` (visible words vs observed texts, cosine), `topo-proximity` (cosine of P),
//!    `topo-role` (smallest GraphWave L2 distance). Ties: by node id.
//! 4. **Context quality** of the concatenated retrieved texts against the hidden text: sentence
//!    BLEU-4 (sacrebleu), ROUGE-L F1 (rouge-score), MiniLM cosine; per target and per retriever
//!    (with corpus BLEU).
//! 5. **Correlation** (§4): Pearson correlation between text cosine (full texts) and proximity cosine
//!    for K = 1…5 (α = 1), and between text cosine and role L2 distance; over all pairs when there are
//!    at most `max_pairs`, else over `max_pairs` seeded random pairs.
//!
//! Writes `split`, `retrieved`, `context_quality`, `context_summary`, `correlation`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_datasets::rng::Rng;
use tgrag_schemas::columns;

use crate::dense::{DeviceChoice, Encoder, hash_embed, load_minilm};
use crate::diffusion::{Adjacency, Neighbour, cosine_top_k, diffuse_f32, diffuse_f64};
use crate::{Result, StageContext, StageError, StageInfo, StageSpec, graphwave, textmetrics};

/// Options of the `toporag` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToporagConfig {
    pub observed_fraction: f64,
    pub visible_words: usize,
    /// Drop nodes with fewer words; default (null): the paper's rule for the dataset, see
    /// [`paper_thresholds`].
    #[serde(default)]
    pub min_words: Option<usize>,
    /// Drop nodes with fewer characters; default (null) as for `min_words`.
    #[serde(default)]
    pub min_chars: Option<usize>,
    pub top_k: usize,
    pub seed: u64,
    /// Width of the random projection R.
    pub dims: usize,
    /// α_1..α_K of the retrieval's proximity.
    pub alphas: Vec<f64>,
    pub scales: Vec<f64>,
    pub points: usize,
    #[serde(default)]
    pub encoder: Encoder,
    #[serde(default)]
    pub model_dir: Option<String>,
    /// Width of the hashing encoder.
    pub hash_dim: usize,
    /// Pairs for the correlation analysis (all pairs when there are fewer).
    pub max_pairs: usize,
}

impl Default for ToporagConfig {
    fn default() -> Self {
        ToporagConfig {
            observed_fraction: 0.9,
            visible_words: 3,
            min_words: None,
            min_chars: None,
            top_k: 3,
            seed: 42,
            dims: 128,
            alphas: vec![1.0, 1.0, 1.0],
            scales: vec![0.5, 1.0, 3.0],
            points: 25,
            encoder: Encoder::Minilm,
            model_dir: None,
            hash_dim: 256,
            max_pairs: 2_000_000,
        }
    }
}

/// The retrievers, in output order.
pub const RETRIEVERS: [&str; 5] = ["none", "random", "text", "topo-proximity", "topo-role"];

/// The paper's length thresholds `(min words, min characters)` by dataset (§6.1.1): abstracts under
/// 100 words are dropped in the citation graphs (Cora, PubMed, arXiv; CiteSeer treated alike),
/// reviews under 100 characters in the review graphs; nothing elsewhere (Products, `synthetic`,
/// folder datasets).
pub fn paper_thresholds(dataset: &str) -> (usize, usize) {
    match dataset {
        "cora" | "pubmed" | "arxiv" | "citeseer" => (100, 0),
        "book" | "epinion" | "music" | "pantry" => (0, 100),
        _ => (0, 0),
    }
}

/// The observed / partial split of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Kept node ids (dataset ids), in ascending order; graph index = position.
    pub kept: Vec<u32>,
    pub partial: Vec<bool>,
    pub visible: Vec<String>,
    pub hidden: Vec<String>,
    /// Edges between kept nodes (graph indices), partial–partial removed.
    pub edges: Vec<(u32, u32)>,
}

/// Applies the split rule (see the module docs).
pub fn split(ids: &[u32], texts: &[&str], times: Option<&[i64]>, edges: &[(u32, u32)], (min_words, min_chars): (usize, usize), cfg: &ToporagConfig) -> Split {
    let mut order: Vec<usize> = (0..ids.len()).filter(|&i| texts[i].split_whitespace().count() >= min_words && texts[i].chars().count() >= min_chars).collect();
    order.sort_by_key(|&i| ids[i]);
    let kept: Vec<u32> = order.iter().map(|&i| ids[i]).collect();
    let n = kept.len();
    let n_partial = n - ((n as f64) * cfg.observed_fraction).floor() as usize;
    let mut rank: Vec<usize> = (0..n).collect();
    match times {
        Some(t) => rank.sort_by_key(|&k| (std::cmp::Reverse(t[order[k]]), std::cmp::Reverse(kept[k]))),
        None => Rng::new(cfg.seed).shuffle(&mut rank),
    }
    let mut partial = vec![false; n];
    rank.iter().take(n_partial).for_each(|&k| partial[k] = true);
    let (mut visible, mut hidden) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (k, &i) in order.iter().enumerate() {
        let words: Vec<&str> = texts[i].split_whitespace().collect();
        let cut = if partial[k] { cfg.visible_words.min(words.len()) } else { words.len() };
        visible.push(words[..cut].join(" "));
        hidden.push(words[cut..].join(" "));
    }
    let pos: std::collections::HashMap<u32, u32> = kept.iter().enumerate().map(|(k, &id)| (id, k as u32)).collect();
    let edges = edges
        .iter()
        .filter_map(|(a, b)| Some((*pos.get(a)?, *pos.get(b)?)))
        .filter(|&(a, b)| !(partial[a as usize] && partial[b as usize]))
        .collect();
    Split { kept, partial, visible, hidden, edges }
}

/// Pearson correlation of two equally long samples (0 when either is constant).
pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len()) as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 { 0.0 } else { sxy / (sxx * syy).sqrt() }
}

fn cos(a: &[f64], b: &[f64]) -> f64 {
    let (na, nb) = (a.iter().map(|v| v * v).sum::<f64>().sqrt(), b.iter().map(|v| v * v).sum::<f64>().sqrt());
    if na == 0.0 || nb == 0.0 { 0.0 } else { a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>() / (na * nb) }
}

/// Smallest-L2 top-k among `candidates` for each target (ties by id), self excluded.
fn l2_top_k(x: &[f64], d: usize, targets: &[u32], candidates: &[u32], k: usize) -> Vec<Vec<Neighbour>> {
    targets
        .par_iter()
        .map(|&t| {
            let row = &x[t as usize * d..t as usize * d + d];
            let mut s: Vec<Neighbour> = candidates
                .iter()
                .filter(|&&c| c != t)
                .map(|&c| Neighbour { node: c, score: row.iter().zip(&x[c as usize * d..c as usize * d + d]).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt() })
                .collect();
            s.sort_by(|a, b| a.score.total_cmp(&b.score).then(a.node.cmp(&b.node)));
            s.truncate(k);
            s
        })
        .collect()
}

/// The pairs of the correlation analysis: all when few enough, else seeded random distinct pairs.
fn pairs(n: usize, max_pairs: usize, seed: u64) -> (Vec<(u32, u32)>, bool) {
    let total = n * n.saturating_sub(1) / 2;
    if total <= max_pairs {
        return ((0..n as u32).flat_map(|i| (i + 1..n as u32).map(move |j| (i, j))).collect(), false);
    }
    let mut rng = Rng::new(seed ^ 0x70_70);
    let mut out = Vec::with_capacity(max_pairs);
    while out.len() < max_pairs {
        let (a, b) = (rng.below(n) as u32, rng.below(n) as u32);
        if a != b {
            out.push((a.min(b), a.max(b)));
        }
    }
    (out, true)
}

fn batch(cols: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    RecordBatch::try_from_iter(cols).map_err(|e| StageError::Internal(e.to_string()))
}

/// A text encoder: texts and a progress label → row-major embeddings and their width.
type EncodeFn = dyn Fn(&[&str], &str) -> Result<(Vec<f32>, usize)>;

pub struct ToporagStage;

static INFO: StageInfo = StageInfo {
    name: "toporag",
    version: 1,
    about: "TopoRAG: observed/partial split, proximity (diffusion) and role (GraphWave) retrieval vs text/random/none, context quality (BLEU-4, ROUGE-L, MiniLM cosine), correlation analysis",
    deps: &["ingest"],
    needs: &[("ingest", "tag_nodes"), ("ingest", "tag_edges")],
    // E-mail graphs (Enron) carry their texts on edges; the paper's e-mail variant is separate.
    excludes: &[("ingest", "emails")],
    outputs: &["split", "retrieved", "context_quality", "context_summary", "correlation"],
};

impl StageSpec for ToporagStage {
    type Config = ToporagConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &ToporagConfig) -> std::result::Result<(), String> {
        if !(c.observed_fraction > 0.0 && c.observed_fraction < 1.0) {
            return Err("observed_fraction must be in (0, 1)".into());
        }
        if c.top_k == 0 || c.dims == 0 || c.alphas.is_empty() || c.hash_dim == 0 {
            return Err("top_k, dims, hash_dim must be ≥ 1 and alphas non-empty".into());
        }
        graphwave::check(&c.scales, c.points).map_err(|e| e.to_string())
    }

    fn execute(&self, ctx: &mut StageContext<'_>, cfg: ToporagConfig) -> Result<()> {
        let nodes = ctx.input("ingest", "tag_nodes")?;
        let edges_b = ctx.input("ingest", "tag_edges")?;
        let ids = columns::u32s(&nodes, "node_id")?.values().to_vec();
        let text_col = columns::strs(&nodes, "text")?;
        let texts: Vec<&str> = (0..text_col.len()).map(|i| text_col.value(i)).collect();
        let times = match nodes.column_by_name("time") {
            Some(_) => {
                let t = columns::i64s(&nodes, "time")?;
                (t.null_count() == 0 && !t.is_empty()).then(|| t.values().to_vec())
            }
            None => None,
        };
        let (src, dst) = (columns::u32s(&edges_b, "src")?, columns::u32s(&edges_b, "dst")?);
        let edges: Vec<(u32, u32)> = src.values().iter().copied().zip(dst.values().iter().copied()).collect();
        let paper = paper_thresholds(&ctx.dataset.name);
        let limits = (cfg.min_words.unwrap_or(paper.0), cfg.min_chars.unwrap_or(paper.1));
        let sp = ctx.timed("split", |_| Ok(split(&ids, &texts, times.as_deref(), &edges, limits, &cfg)))?;
        let n = sp.kept.len();
        let observed: Vec<u32> = (0..n as u32).filter(|&k| !sp.partial[k as usize]).collect();
        let targets: Vec<u32> = (0..n as u32).filter(|&k| sp.partial[k as usize]).collect();
        if targets.is_empty() || observed.len() < cfg.top_k {
            return Err(StageError::Input(format!(
                "toporag: {n} of {} nodes have at least {} words and {} characters, too few to split (lower --set toporag.min_words=…)",
                ids.len(),
                limits.0,
                limits.1
            )));
        }
        let id_pos: std::collections::HashMap<u32, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let full: Vec<&str> = sp.kept.iter().map(|id| id_pos.get(id).map_or("", |&i| texts[i])).collect();

        // Text embeddings: full texts of every kept node, the visible words of the targets.
        let visible: Vec<&str> = targets.iter().map(|&t| sp.visible[t as usize].as_str()).collect();
        let hidden: Vec<&str> = targets.iter().map(|&t| sp.hidden[t as usize].as_str()).collect();
        let encode: Box<EncodeFn> = match cfg.encoder {
            Encoder::Hash => {
                let dim = cfg.hash_dim;
                Box::new(move |t: &[&str], _: &str| Ok((t.par_iter().map(|s| hash_embed(s, dim)).collect::<Result<Vec<_>>>()?.concat(), dim)))
            }
            Encoder::Minilm => {
                let model = load_minilm(cfg.model_dir.as_deref(), DeviceChoice::Cpu)?;
                let progress = ctx.progress;
                Box::new(move |t: &[&str], what: &str| {
                    let pb = progress.bar(t.len() as u64, what);
                    let out = model.encode(t, tgrag_models::minilm::EncodeOptions::default(), &|k| pb.inc(k as u64))?;
                    pb.finish_and_clear();
                    Ok((out, model.dim()))
                })
            }
        };
        let (full_emb, dim) = ctx.timed("embed texts", |_| encode(&full, "toporag: embed texts"))?;
        let (vis_emb, _) = ctx.timed("embed visible words", |_| encode(&visible, "toporag: embed visible words"))?;
        let (hid_emb, _) = ctx.timed("embed hidden texts", |_| encode(&hidden, "toporag: embed hidden texts"))?;
        let f64v = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let full64 = f64v(&full_emb);

        // Proximity and role over the split graph.
        let (s, d): (Vec<u32>, Vec<u32>) = sp.edges.iter().copied().unzip();
        let adj = Adjacency::from_edges(n, &s, &d, false)?;
        let mut rng = Rng::new(cfg.seed);
        let r: Vec<f32> = (0..n * cfg.dims).map(|_| rng.normal() as f32).collect();
        let prox = ctx.timed("diffusion", |_| Ok(f64v(&diffuse_f32(&adj, &r, cfg.dims, &cfg.alphas))))?;
        let ts = graphwave::sample_points(cfg.points, 100.0);
        let mode = if n <= 2000 { graphwave::Mode::Exact } else { graphwave::DEFAULT_CHEBYSHEV };
        let role = ctx.timed("graphwave", |_| graphwave::embed(&adj, &cfg.scales, &ts, mode))?;
        let rw = cfg.scales.len() * 2 * cfg.points;

        // Retrieval.
        let k = cfg.top_k;
        let text_hits: Vec<Vec<Neighbour>> = targets
            .par_iter()
            .enumerate()
            .map(|(qi, _)| {
                let q = f64v(&vis_emb[qi * dim..qi * dim + dim]);
                let mut s: Vec<Neighbour> = observed.iter().map(|&o| Neighbour { node: o, score: cos(&q, &full64[o as usize * dim..o as usize * dim + dim]) }).collect();
                s.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.node.cmp(&b.node)));
                s.truncate(k);
                s
            })
            .collect();
        let prox_hits = ctx.timed("retrieve", |_| Ok(cosine_top_k(&prox, cfg.dims, &targets, &observed, k)))?;
        let role_hits = l2_top_k(&role, rw, &targets, &observed, k);
        let random_hits: Vec<Vec<Neighbour>> = targets
            .iter()
            .map(|&t| Rng::for_item(cfg.seed, "toporag-random", u64::from(sp.kept[t as usize])).sample_distinct(observed.len(), k).into_iter().map(|i| Neighbour { node: observed[i], score: 0.0 }).collect())
            .collect();
        let per: [&Vec<Vec<Neighbour>>; 4] = [&random_hits, &text_hits, &prox_hits, &role_hits];
        let mut hits: Vec<(&str, Vec<Vec<Neighbour>>)> = vec![("none", vec![Vec::new(); targets.len()])];
        hits.extend(RETRIEVERS[1..].iter().zip(per).map(|(name, h)| (*name, h.clone())));

        // retrieved table.
        let (mut r_t, mut r_ret, mut r_rank, mut r_node, mut r_score, mut r_text) = (vec![], vec![], vec![], vec![], vec![], vec![]);
        // contexts per (retriever, target)
        let mut contexts: Vec<String> = Vec::new();
        for (name, hs) in &hits {
            for (qi, h) in hs.iter().enumerate() {
                for (rank, nb) in h.iter().enumerate() {
                    r_t.push(sp.kept[targets[qi] as usize]);
                    r_ret.push(*name);
                    r_rank.push(rank as u32 + 1);
                    r_node.push(sp.kept[nb.node as usize]);
                    r_score.push(nb.score);
                    r_text.push(full[nb.node as usize]);
                }
                contexts.push(h.iter().map(|nb| full[nb.node as usize]).collect::<Vec<_>>().join(" "));
            }
        }
        let ctx_refs: Vec<&str> = contexts.iter().map(String::as_str).collect();
        let (ctx_emb, _) = ctx.timed("embed contexts", |_| encode(&ctx_refs, "toporag: embed contexts"))?;
        ctx.set_items(targets.len() as u64);

        // Context quality.
        let m = targets.len();
        let (mut q_t, mut q_ret, mut q_bleu, mut q_rouge, mut q_cos) = (vec![], vec![], vec![], vec![], vec![]);
        let (mut s_ret, mut s_n, mut s_bleu, mut s_cbleu, mut s_rouge, mut s_cos) = (vec![], vec![], vec![], vec![], vec![], vec![]);
        for (ri, (name, _)) in hits.iter().enumerate() {
            let rows: Vec<(f64, f64, f64)> = (0..m)
                .into_par_iter()
                .map(|qi| {
                    let c = ctx_refs[ri * m + qi];
                    let bleu = textmetrics::sentence_bleu(c, hidden[qi]).score;
                    let rouge = textmetrics::rouge_l(hidden[qi], c).2;
                    let cs = if c.is_empty() { 0.0 } else { cos(&f64v(&ctx_emb[(ri * m + qi) * dim..(ri * m + qi + 1) * dim]), &f64v(&hid_emb[qi * dim..qi * dim + dim])) };
                    (bleu, rouge, cs)
                })
                .collect();
            for (qi, (b, r, c)) in rows.iter().enumerate() {
                q_t.push(sp.kept[targets[qi] as usize]);
                q_ret.push(*name);
                q_bleu.push(*b);
                q_rouge.push(*r);
                q_cos.push(*c);
            }
            let pairs_: Vec<(&str, &str)> = (0..m).map(|qi| (ctx_refs[ri * m + qi], hidden[qi])).collect();
            s_ret.push(*name);
            s_n.push(m as u64);
            s_bleu.push(rows.iter().map(|x| x.0).sum::<f64>() / m as f64);
            s_cbleu.push(textmetrics::corpus_bleu(&pairs_).score);
            s_rouge.push(rows.iter().map(|x| x.1).sum::<f64>() / m as f64);
            s_cos.push(rows.iter().map(|x| x.2).sum::<f64>() / m as f64);
        }

        // Correlation analysis.
        let (pp, sampled) = pairs(n, cfg.max_pairs, cfg.seed);
        let text_sim: Vec<f64> = pp.par_iter().map(|&(a, b)| cos(&full64[a as usize * dim..(a as usize + 1) * dim], &full64[b as usize * dim..(b as usize + 1) * dim])).collect();
        let r64: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
        let (mut c_measure, mut c_k, mut c_r) = (vec![], vec![], vec![]);
        for kk in 1..=5usize {
            let p = diffuse_f64(&adj, &r64, cfg.dims, &vec![1.0; kk]);
            let topo: Vec<f64> = pp.par_iter().map(|&(a, b)| cos(&p[a as usize * cfg.dims..(a as usize + 1) * cfg.dims], &p[b as usize * cfg.dims..(b as usize + 1) * cfg.dims])).collect();
            c_measure.push("proximity_cosine");
            c_k.push(kk as u32);
            c_r.push(pearson(&text_sim, &topo));
        }
        let role_d: Vec<f64> = pp.par_iter().map(|&(a, b)| role[a as usize * rw..(a as usize + 1) * rw].iter().zip(&role[b as usize * rw..(b as usize + 1) * rw]).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt()).collect();
        c_measure.push("role_l2_distance");
        c_k.push(0);
        c_r.push(pearson(&text_sim, &role_d));

        let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
        let u32a = |v: Vec<u32>| Arc::new(UInt32Array::from(v)) as ArrayRef;
        let f64a = |v: Vec<f64>| Arc::new(Float64Array::from(v)) as ArrayRef;
        ctx.write(
            "split",
            &batch(vec![
                ("node_id", u32a(sp.kept.clone())),
                ("split", strs(sp.partial.iter().map(|&p| if p { "partial" } else { "observed" }).collect())),
                ("visible", strs(sp.visible.iter().map(String::as_str).collect())),
                ("hidden", strs(sp.hidden.iter().map(String::as_str).collect())),
            ])?,
        )?;
        ctx.write(
            "retrieved",
            &batch(vec![("target", u32a(r_t)), ("retriever", strs(r_ret)), ("rank", u32a(r_rank)), ("node_id", u32a(r_node)), ("score", f64a(r_score)), ("text", strs(r_text))])?,
        )?;
        ctx.write(
            "context_quality",
            &batch(vec![("target", u32a(q_t)), ("retriever", strs(q_ret)), ("bleu4", f64a(q_bleu)), ("rouge_l_f1", f64a(q_rouge)), ("minilm_cosine", f64a(q_cos))])?,
        )?;
        ctx.write(
            "context_summary",
            &batch(vec![
                ("retriever", strs(s_ret)),
                ("targets", Arc::new(UInt64Array::from(s_n)) as ArrayRef),
                ("bleu4_mean", f64a(s_bleu)),
                ("bleu4_corpus", f64a(s_cbleu)),
                ("rouge_l_f1_mean", f64a(s_rouge)),
                ("cosine_mean", f64a(s_cos)),
            ])?,
        )?;
        let np = pp.len() as u64;
        ctx.write(
            "correlation",
            &batch(vec![
                ("measure", strs(c_measure)),
                ("k", u32a(c_k)),
                ("pearson", f64a(c_r)),
                ("pairs", Arc::new(UInt64Array::from(vec![np; 6])) as ArrayRef),
                ("sampled", Arc::new(BooleanArray::from(vec![sampled; 6])) as ArrayRef),
            ])?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ToporagConfig {
        ToporagConfig::default()
    }

    #[test]
    fn split_is_chronological_drops_short_texts_and_partial_pairs() {
        let ids = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];
        let long = "one two three four five";
        let mut texts = vec![long; 12];
        texts[3] = "too short";
        let times: Vec<i64> = vec![5, 1, 2, 9, 3, 4, 6, 7, 8, 0, 9, 9];
        // 11 kept, observed 0.8 → floor(8.8) = 8 observed, 3 partial: the newest are 20 and 21 (time 9)
        // and 18 (time 8); 13 also has time 9 but is dropped.
        let c = ToporagConfig { observed_fraction: 0.8, ..cfg() };
        let edges = [(20, 21), (20, 10), (13, 10), (18, 21)];
        let s = split(&ids, &texts, Some(&times), &edges, (4, 0), &c);
        assert_eq!(s.kept, vec![10, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21]);
        let partial: Vec<u32> = s.kept.iter().zip(&s.partial).filter(|p| *p.1).map(|p| *p.0).collect();
        assert_eq!(partial, vec![18, 20, 21]);
        assert_eq!(s.visible[9], "one two three");
        assert_eq!(s.hidden[9], "four five");
        assert_eq!(s.visible[0], long);
        // (20,21) and (18,21) join two partial nodes; 13 was dropped; (20,10) stays as (9, 0).
        assert_eq!(s.edges, vec![(9, 0)]);
    }

    #[test]
    fn random_split_is_seeded() {
        let ids: Vec<u32> = (0..50).collect();
        let texts = vec!["a b c d e f"; 50];
        let a = split(&ids, &texts, None, &[], (4, 0), &cfg());
        let b = split(&ids, &texts, None, &[], (4, 0), &cfg());
        let c = split(&ids, &texts, None, &[], (4, 0), &ToporagConfig { seed: 7, ..cfg() });
        assert_eq!(a, b);
        assert_ne!(a.partial, c.partial);
        assert_eq!(a.partial.iter().filter(|&&p| p).count(), 5);
    }

    #[test]
    fn pearson_hand_cases() {
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]) - 1.0).abs() < 1e-15);
        assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-15);
        // x = (1,2,3,4), y = (1,3,2,4): cov 4, var 5 and 5 → 0.8.
        assert!((pearson(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]) - 0.8).abs() < 1e-15);
        assert_eq!(pearson(&[1.0, 1.0], &[0.0, 5.0]), 0.0);
    }

    #[test]
    fn sampled_pairs_are_distinct_ends_and_all_pairs_are_complete() {
        let (all, sampled) = pairs(5, 100, 1);
        assert!(!sampled && all.len() == 10);
        let (s, sampled) = pairs(1000, 500, 1);
        assert!(sampled && s.len() == 500 && s.iter().all(|(a, b)| a < b));
    }
}
