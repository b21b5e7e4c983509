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

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_datasets::rng::Rng;
use tgrag_schemas::columns;

use crate::dense::{DeviceChoice, Encoder, hash_embed, load_minilm};
use crate::diffusion::{Adjacency, Neighbour, cosine_top_k, diffuse_f32, diffuse_f64};
use crate::{Result, StageContext, StageError, StageInfo, StageSpec, graphwave, plots, textmetrics, topotasks};
use tgrag_models::gnn::{LinkPredConfig, NodeClassConfig};

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
    /// Run the task-oriented evaluation (node classification, link prediction).
    pub tasks: bool,
    /// Node classification: epochs, early-stopping patience, the share of labelled observed nodes
    /// held out for early stopping.
    pub nc_max_epochs: usize,
    pub nc_patience: usize,
    pub nc_val_fraction: f64,
    /// Link prediction: epochs, patience, the share of non-test edges held out for validation, the
    /// negative pairs per evaluation set, K of Hits@K.
    pub lp_max_epochs: usize,
    pub lp_patience: usize,
    pub lp_val_fraction: f64,
    pub lp_negatives: usize,
    pub lp_hits_k: usize,
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
            tasks: true,
            nc_max_epochs: 1000,
            nc_patience: 100,
            nc_val_fraction: 0.2,
            lp_max_epochs: 500,
            lp_patience: 50,
            lp_val_fraction: 0.1,
            lp_negatives: 1000,
            lp_hits_k: 100,
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

impl Split {
    /// Writes the `split` table, the kept ids under `id_column` (`node_id`, `email_id`).
    fn write(&self, ctx: &mut StageContext<'_>, id_column: &str) -> Result<()> {
        ctx.write(
            "split",
            &batch(vec![
                (id_column, u32a(self.kept.clone())),
                ("split", strs(self.partial.iter().map(|&p| if p { "partial" } else { "observed" }).collect())),
                ("visible", strs(self.visible.iter().map(String::as_str).collect())),
                ("hidden", strs(self.hidden.iter().map(String::as_str).collect())),
            ])?,
        )
    }
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
    version: 3,
    about: "TopoRAG: observed/partial split, proximity (diffusion) and role (GraphWave) retrieval vs text/random/none, context quality (BLEU-4, ROUGE-L, MiniLM cosine), correlation analysis",
    deps: &["ingest"],
    needs: &[("ingest", "tag_nodes"), ("ingest", "tag_edges")],
    excludes: &[],
    outputs: &["split", "retrieved", "context_quality", "context_summary", "correlation", "node_classification", "link_prediction", "training_curves"],
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
        if ctx.has_input("ingest", "emails") {
            return execute_emails(ctx, &cfg);
        }
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
        let encode = encoder(ctx, &cfg)?;
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

        let contexts = write_quality(ctx, &*encode, dim, &hits, &Items { target_ids: targets.iter().map(|&t| sp.kept[t as usize]).collect(), ids: &sp.kept, texts: &full, id_column: "node_id" }, &hidden, &hid_emb)?;
        let ctx_refs: Vec<&str> = contexts.iter().map(String::as_str).collect();
        let m = targets.len();

        // Task-oriented evaluation: the partial nodes' features rebuilt from their visible words plus
        // each retriever's texts (`none`: the visible words alone; `oracle`: the full text).
        let tasks = if cfg.tasks {
            let rebuilt: Vec<String> = (1..hits.len()).flat_map(|ri| (0..m).map(move |qi| (ri, qi))).map(|(ri, qi)| format!("{} {}", visible[qi], ctx_refs[ri * m + qi])).collect();
            let refs: Vec<&str> = rebuilt.iter().map(String::as_str).collect();
            let (re_emb, _) = ctx.timed("embed rebuilt texts", |_| encode(&refs, "toporag: embed rebuilt texts"))?;
            let with_rows = |rows: &[f32]| {
                let mut f = full_emb.clone();
                for (qi, &t) in targets.iter().enumerate() {
                    f[t as usize * dim..(t as usize + 1) * dim].copy_from_slice(&rows[qi * dim..(qi + 1) * dim]);
                }
                f
            };
            let mut features = vec![("none".to_string(), with_rows(&vis_emb))];
            for (ri, (name, _)) in hits.iter().enumerate().skip(1) {
                features.push((name.to_string(), with_rows(&re_emb[(ri - 1) * m * dim..ri * m * dim])));
            }
            features.push(("oracle".to_string(), full_emb.clone()));
            let labels = node_labels(&nodes, &sp.kept, &id_pos)?;
            let tcfg = topotasks::TaskConfig {
                nc: NodeClassConfig { max_epochs: cfg.nc_max_epochs, patience: cfg.nc_patience, seed: cfg.seed, ..NodeClassConfig::default() },
                lp: LinkPredConfig { max_epochs: cfg.lp_max_epochs, patience: cfg.lp_patience, hits_k: cfg.lp_hits_k, seed: cfg.seed, ..LinkPredConfig::default() },
                val_fraction: cfg.nc_val_fraction,
                lp_val_fraction: cfg.lp_val_fraction,
                lp_negatives: cfg.lp_negatives,
                seed: cfg.seed,
            };
            let inputs = topotasks::TaskInputs { n, edges: &sp.edges, partial: &sp.partial, labels: labels.as_ref().map(|(l, c)| (l.as_slice(), *c)), dim, features: &features };
            let progress = ctx.progress;
            Some(ctx.timed("train GNNs", |_| topotasks::evaluate(&inputs, &tcfg, progress))?)
        } else {
            None
        };

        let all: Vec<u32> = (0..n as u32).collect();
        let corr = ctx.timed("correlation", |_| correlation(&adj, &r, cfg.dims, &role, rw, &full64, dim, &all, &cfg))?;
        sp.write(ctx, "node_id")?;
        corr.write(ctx)?;
        if let Some(t) = tasks {
            ctx.write("node_classification", &t.node_classification)?;
            ctx.write("link_prediction", &t.link_prediction)?;
            ctx.write("training_curves", &t.curves)?;
        }
        Ok(())
    }
}

/// The text encoder of the config (MiniLM with a progress bar, or hashing).
fn encoder(ctx: &StageContext<'_>, cfg: &ToporagConfig) -> Result<Box<EncodeFn>> {
    Ok(match cfg.encoder {
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
    })
}

/// An e-mail graph's messages, as the e-mail variant reads them.
struct Mails {
    ids: Vec<u32>,
    sender: Vec<u32>,
    recipients: Vec<Vec<u32>>,
    time: Option<Vec<i64>>,
    body: Vec<String>,
}

fn read_mails(emails: &RecordBatch) -> Result<Mails> {
    let ids = columns::u32s(emails, "email_id")?.values().to_vec();
    let sender = columns::u32s(emails, "sender")?.values().to_vec();
    let rec = emails
        .column_by_name("recipients")
        .and_then(|c| c.as_list_opt::<i32>())
        .ok_or_else(|| StageError::Input("emails: column `recipients` is not a list of u32".into()))?;
    let mut recipients = Vec::with_capacity(rec.len());
    for i in 0..rec.len() {
        let v = rec.value(i);
        let v = v.as_primitive_opt::<arrow::datatypes::UInt32Type>().ok_or_else(|| StageError::Input(format!("emails row {i}: `recipients` is not a list of u32")))?;
        recipients.push(v.values().to_vec());
    }
    let time = match emails.column_by_name("time") {
        Some(_) => {
            let t = columns::i64s(emails, "time")?;
            (t.null_count() == 0 && !t.is_empty()).then(|| t.values().to_vec())
        }
        None => None,
    };
    let b = columns::strs(emails, "body")?;
    let body = (0..b.len()).map(|i| b.value(i).to_string()).collect();
    Ok(Mails { ids, sender, recipients, time, body })
}

/// The paper's Enron variant (§6.1.3): items are e-mails, the graph is the people graph. The newest
/// `1 − observed_fraction` e-mails (by Date; seeded when some lack one) are the targets, shown by
/// their first `visible_words` words; e-mails with no more words than that are dropped, and so are
/// repeats of an earlier e-mail (same sender and body: the corpus keeps a message in every
/// mailbox it passed through, and a copy would hand a retriever the answer). The people graph
/// joins sender and recipients of the **observed** e-mails only. For a target, the sender's and
/// its first recipient's topologically closest people (proximity: cosine of P; role: GraphWave L2;
/// themselves excluded, only people with an observed e-mail) are taken one at a time until their
/// observed e-mails number at least `top_k`; the pooled e-mails are ranked by text similarity to the
/// visible words. `text` ranks every observed e-mail, `random` draws them. Correlation: between
/// people who sent an observed e-mail, their mean e-mail embedding against P and GraphWave.
/// Node classification and link prediction are not run (e-mails have no labels; the paper reports
/// them for citation graphs).
fn execute_emails(ctx: &mut StageContext<'_>, cfg: &ToporagConfig) -> Result<()> {
    let people = ctx.input("ingest", "tag_nodes")?.num_rows();
    let mails = read_mails(&ctx.input("ingest", "emails")?)?;
    if let Some((i, &p)) = mails.sender.iter().chain(mails.recipients.iter().flatten()).enumerate().find(|(_, p)| **p as usize >= people) {
        return Err(StageError::Input(format!("emails: person {p} (entry {i}) is not a tag_nodes row ({people} people)")));
    }
    // Drop repeats: the first e-mail with a (sender, body) wins.
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<usize> = (0..mails.ids.len()).filter(|&i| seen.insert((mails.sender[i], mails.body[i].trim()))).collect();
    let ids: Vec<u32> = unique.iter().map(|&i| mails.ids[i]).collect();
    let texts: Vec<&str> = unique.iter().map(|&i| mails.body[i].as_str()).collect();
    let times: Option<Vec<i64>> = mails.time.as_ref().map(|t| unique.iter().map(|&i| t[i]).collect());
    let paper = paper_thresholds(&ctx.dataset.name);
    let limits = (cfg.min_words.unwrap_or(paper.0).max(cfg.visible_words + 1), cfg.min_chars.unwrap_or(paper.1));
    let sp = ctx.timed("split", |_| Ok(split(&ids, &texts, times.as_deref(), &[], limits, cfg)))?;
    let row_of: std::collections::HashMap<u32, usize> = mails.ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let rows: Vec<usize> = sp.kept.iter().map(|id| row_of.get(id).copied().ok_or_else(|| StageError::Internal(format!("e-mail {id} lost")))).collect::<Result<_>>()?;
    let n_mail = rows.len();
    let observed: Vec<u32> = (0..n_mail as u32).filter(|&k| !sp.partial[k as usize]).collect();
    let targets: Vec<u32> = (0..n_mail as u32).filter(|&k| sp.partial[k as usize]).collect();
    if targets.is_empty() || observed.len() < cfg.top_k {
        return Err(StageError::Input(format!("toporag: {n_mail} of {} e-mails have more than {} words, too few to split", mails.ids.len(), limits.0 - 1)));
    }

    // The people graph of the observed e-mails, and each person's observed e-mails.
    let mut pe: Vec<(u32, u32)> = Vec::new();
    let mut mailbox: Vec<Vec<u32>> = vec![Vec::new(); people];
    for &k in &observed {
        let i = rows[k as usize];
        let s = mails.sender[i];
        mailbox[s as usize].push(k);
        for &r in &mails.recipients[i] {
            if r != s {
                pe.push((s.min(r), s.max(r)));
                mailbox[r as usize].push(k);
            }
        }
    }
    pe.sort_unstable();
    pe.dedup();
    mailbox.iter_mut().for_each(|m| m.dedup());
    let (ps, pd): (Vec<u32>, Vec<u32>) = pe.iter().copied().unzip();
    let adj = Adjacency::from_edges(people, &ps, &pd, false)?;
    let mut rng = Rng::new(cfg.seed);
    let r: Vec<f32> = (0..people * cfg.dims).map(|_| rng.normal() as f32).collect();
    let prox = ctx.timed("diffusion", |_| Ok(diffuse_f32(&adj, &r, cfg.dims, &cfg.alphas)))?;
    let prox: Vec<f64> = prox.iter().map(|&x| f64::from(x)).collect();
    let ts = graphwave::sample_points(cfg.points, 100.0);
    let mode = if people <= 2000 { graphwave::Mode::Exact } else { graphwave::DEFAULT_CHEBYSHEV };
    let role = ctx.timed("graphwave", |_| graphwave::embed(&adj, &cfg.scales, &ts, mode))?;
    let rw = cfg.scales.len() * 2 * cfg.points;

    let encode = encoder(ctx, cfg)?;
    let full: Vec<&str> = rows.iter().map(|&i| mails.body[i].as_str()).collect();
    let visible: Vec<&str> = targets.iter().map(|&t| sp.visible[t as usize].as_str()).collect();
    let hidden: Vec<&str> = targets.iter().map(|&t| sp.hidden[t as usize].as_str()).collect();
    let (full_emb, dim) = ctx.timed("embed e-mails", |_| encode(&full, "toporag: embed e-mails"))?;
    let (vis_emb, _) = ctx.timed("embed visible words", |_| encode(&visible, "toporag: embed visible words"))?;
    let (hid_emb, _) = ctx.timed("embed hidden texts", |_| encode(&hidden, "toporag: embed hidden texts"))?;
    let full64: Vec<f64> = full_emb.iter().map(|&x| f64::from(x)).collect();
    let text_score = |qi: usize, k: u32| {
        let q: Vec<f64> = vis_emb[qi * dim..(qi + 1) * dim].iter().map(|&x| f64::from(x)).collect();
        cos(&q, &full64[k as usize * dim..(k as usize + 1) * dim])
    };
    let rank_by_text = |qi: usize, pool: &[u32]| {
        let mut s: Vec<Neighbour> = pool.iter().map(|&k| Neighbour { node: k, score: text_score(qi, k) }).collect();
        s.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.node.cmp(&b.node)));
        s.truncate(cfg.top_k);
        s
    };
    let with_mail: Vec<u32> = (0..people as u32).filter(|&p| !mailbox[p as usize].is_empty()).collect();
    // People ordered by topological closeness to `p` (best first, ties by id, `p` excluded).
    let closest = |p: u32, role_mode: bool| -> Vec<u32> {
        let mut s: Vec<Neighbour> = with_mail
            .iter()
            .filter(|&&o| o != p)
            .map(|&o| {
                let score = if role_mode {
                    -role[p as usize * rw..(p as usize + 1) * rw].iter().zip(&role[o as usize * rw..(o as usize + 1) * rw]).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
                } else {
                    cos(&prox[p as usize * cfg.dims..(p as usize + 1) * cfg.dims], &prox[o as usize * cfg.dims..(o as usize + 1) * cfg.dims])
                };
                Neighbour { node: o, score }
            })
            .collect();
        s.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.node.cmp(&b.node)));
        s.into_iter().map(|nb| nb.node).collect()
    };
    let topo = |qi: usize, role_mode: bool| {
        let i = rows[targets[qi] as usize];
        let ends: Vec<u32> = std::iter::once(mails.sender[i]).chain(mails.recipients[i].iter().copied().filter(|&r| r != mails.sender[i]).take(1)).collect();
        let lists: Vec<Vec<u32>> = ends.iter().map(|&p| closest(p, role_mode)).collect();
        rank_by_text(qi, &mail_pool(&lists, &mailbox, cfg.top_k))
    };
    let m = targets.len();
    let (text_hits, prox_hits, role_hits) = ctx.timed("retrieve", |_| {
        let text: Vec<Vec<Neighbour>> = (0..m).into_par_iter().map(|qi| rank_by_text(qi, &observed)).collect();
        let prox_h: Vec<Vec<Neighbour>> = (0..m).into_par_iter().map(|qi| topo(qi, false)).collect();
        let role_h: Vec<Vec<Neighbour>> = (0..m).into_par_iter().map(|qi| topo(qi, true)).collect();
        Ok((text, prox_h, role_h))
    })?;
    ctx.set_items(m as u64);
    let random_hits: Vec<Vec<Neighbour>> = targets
        .iter()
        .map(|&t| Rng::for_item(cfg.seed, "toporag-random", u64::from(sp.kept[t as usize])).sample_distinct(observed.len(), cfg.top_k).into_iter().map(|i| Neighbour { node: observed[i], score: 0.0 }).collect())
        .collect();
    let hits: Vec<(&str, Vec<Vec<Neighbour>>)> = vec![("none", vec![Vec::new(); m]), ("random", random_hits), ("text", text_hits), ("topo-proximity", prox_hits), ("topo-role", role_hits)];
    write_quality(ctx, &*encode, dim, &hits, &Items { target_ids: targets.iter().map(|&t| sp.kept[t as usize]).collect(), ids: &sp.kept, texts: &full, id_column: "email_id" }, &hidden, &hid_emb)?;

    // Correlation between people: mean embedding of the observed e-mails each sent.
    let mut person_text = vec![0f64; people * dim];
    let mut sent = vec![0usize; people];
    for &k in &observed {
        let s = mails.sender[rows[k as usize]] as usize;
        sent[s] += 1;
        person_text[s * dim..(s + 1) * dim].iter_mut().zip(&full64[k as usize * dim..(k as usize + 1) * dim]).for_each(|(a, b)| *a += b);
    }
    let senders: Vec<u32> = (0..people as u32).filter(|&p| sent[p as usize] > 0).collect();
    let corr = ctx.timed("correlation", |_| correlation(&adj, &r, cfg.dims, &role, rw, &person_text, dim, &senders, cfg))?;
    sp.write(ctx, "email_id")?;
    corr.write(ctx)
}

/// The e-mails of the closest people: the first person of every list (closest to the sender, to the
/// receiver), then the second of every list, … until at least `k` distinct e-mails are pooled or the
/// lists run out. Sorted by e-mail index.
fn mail_pool(lists: &[Vec<u32>], mailbox: &[Vec<u32>], k: usize) -> Vec<u32> {
    let mut pool: Vec<u32> = Vec::new();
    let mut depth = 0;
    while pool.len() < k && lists.iter().any(|l| depth < l.len()) {
        for l in lists {
            if let Some(&p) = l.get(depth) {
                pool.extend(&mailbox[p as usize]);
            }
        }
        pool.sort_unstable();
        pool.dedup();
        depth += 1;
    }
    pool
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

/// What retrieval returns: the targets' ids, and the retrievable items (graph nodes or e-mails)
/// by index with their ids and texts.
struct Items<'a> {
    target_ids: Vec<u32>,
    ids: &'a [u32],
    texts: &'a [&'a str],
    /// Name of the item id column of `retrieved` (`node_id`, `email_id`).
    id_column: &'a str,
}

/// Writes `retrieved`, `context_quality` and `context_summary` for `hits` (per retriever, per
/// target, item indices) against the targets' hidden texts; returns the contexts (the retrieved
/// texts joined by spaces), retriever-major.
fn write_quality(ctx: &mut StageContext<'_>, encode: &EncodeFn, dim: usize, hits: &[(&str, Vec<Vec<Neighbour>>)], items: &Items<'_>, hidden: &[&str], hid_emb: &[f32]) -> Result<Vec<String>> {
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
    let (ctx_emb, _) = ctx.timed("embed contexts", |_| encode(&ctx_refs, "toporag: embed contexts"))?;
    let m = hidden.len();
    ctx.set_items(m as u64);
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
                let cs = if c.is_empty() { 0.0 } else { cos(&f64v(&ctx_emb[(ri * m + qi) * dim..(ri * m + qi + 1) * dim]), &f64v(&hid_emb[qi * dim..qi * dim + dim])) };
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
    ctx.write(
        "retrieved",
        &batch(vec![("target", u32a(r_t)), ("retriever", strs(r_ret)), ("rank", u32a(r_rank)), (items.id_column, u32a(r_node)), ("score", f64a(r_score)), ("text", strs(r_text))])?,
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
    Ok(contexts)
}

/// The correlation table (§4) over pairs of `nodes`: Pearson between the text cosine (rows of
/// `text`, `dim` wide) and the proximity cosine for K = 1…5 (α = 1, f64), and the role L2 distance.
#[allow(clippy::too_many_arguments)]
fn correlation(adj: &Adjacency, r: &[f32], dims: usize, role: &[f64], rw: usize, text: &[f64], dim: usize, nodes: &[u32], cfg: &ToporagConfig) -> Result<Correlation> {
    let (pp, sampled) = pairs(nodes.len(), cfg.max_pairs, cfg.seed);
    let pp: Vec<(usize, usize)> = pp.iter().map(|&(a, b)| (nodes[a as usize] as usize, nodes[b as usize] as usize)).collect();
    let text_sim: Vec<f64> = pp.par_iter().map(|&(a, b)| cos(&text[a * dim..(a + 1) * dim], &text[b * dim..(b + 1) * dim])).collect();
    let r64: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
    let (mut c_measure, mut c_k, mut c_r) = (vec![], vec![], vec![]);
    let mut scatter = Vec::new();
    for kk in 1..=5usize {
        let p = diffuse_f64(adj, &r64, dims, &vec![1.0; kk]);
        let topo: Vec<f64> = pp.par_iter().map(|&(a, b)| cos(&p[a * dims..(a + 1) * dims], &p[b * dims..(b + 1) * dims])).collect();
        if kk == 3 {
            scatter = text_sim.iter().copied().zip(topo.iter().copied()).step_by((pp.len() / SCATTER_POINTS).max(1)).take(SCATTER_POINTS).collect();
        }
        c_measure.push("proximity_cosine");
        c_k.push(kk as u32);
        c_r.push(pearson(&text_sim, &topo));
    }
    let role_d: Vec<f64> = pp.par_iter().map(|&(a, b)| role[a * rw..(a + 1) * rw].iter().zip(&role[b * rw..(b + 1) * rw]).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt()).collect();
    c_measure.push("role_l2_distance");
    c_k.push(0);
    c_r.push(pearson(&text_sim, &role_d));
    let np = pp.len() as u64;
    let by_k: Vec<(f64, f64)> = c_r[..5].iter().enumerate().map(|(i, &r)| (i as f64 + 1.0, r)).collect();
    let role_r = c_r[5];
    let table = batch(vec![
        ("measure", strs(c_measure)),
        ("k", u32a(c_k)),
        ("pearson", f64a(c_r)),
        ("pairs", Arc::new(UInt64Array::from(vec![np; 6])) as ArrayRef),
        ("sampled", Arc::new(BooleanArray::from(vec![sampled; 6])) as ArrayRef),
    ])?;
    Ok(Correlation { table, by_k, role_r, scatter })
}

/// Points of the text-vs-proximity scatter plot (evenly strided over the pairs of the analysis).
const SCATTER_POINTS: usize = 5000;

/// The correlation analysis: its table and what its plots show.
struct Correlation {
    table: RecordBatch,
    by_k: Vec<(f64, f64)>,
    role_r: f64,
    /// (text cosine, proximity cosine at K = 3) of strided pairs.
    scatter: Vec<(f64, f64)>,
}

impl Correlation {
    /// Writes the table and the plots `correlation_by_k.png`, `text_vs_proximity.png`.
    fn write(&self, ctx: &mut StageContext<'_>) -> Result<()> {
        ctx.write("correlation", &self.table)?;
        let ds = ctx.dataset.name.clone();
        let title = format!("{ds}: Pearson(text cosine, proximity cosine); role: {:.3}", self.role_r);
        let png = plots::chart(&title, "K (hops of the diffusion)", "Pearson r", &[plots::Series { name: "proximity", points: self.by_k.clone() }], plots::Mark::Lines, (800, 500))?;
        ctx.write_bytes("correlation_by_k.png", &png)?;
        let title = format!("{ds}: {} pairs, K = 3", self.scatter.len());
        let png = plots::chart(&title, "text cosine (MiniLM)", "proximity cosine", &[plots::Series { name: "pairs", points: self.scatter.clone() }], plots::Mark::Dots, (800, 600))?;
        ctx.write_bytes("text_vs_proximity.png", &png)
    }
}

/// Class indices (classes in sorted order; `u32::MAX`: no label) of the kept nodes and the class
/// count, or `None` when the dataset has no `label` column.
fn node_labels(nodes: &RecordBatch, kept: &[u32], id_pos: &std::collections::HashMap<u32, usize>) -> Result<Option<(Vec<u32>, usize)>> {
    if nodes.column_by_name("label").is_none() {
        return Ok(None);
    }
    let col = columns::strs(nodes, "label")?;
    let label = |id: &u32| id_pos.get(id).filter(|&&i| col.is_valid(i)).map(|&i| col.value(i));
    let mut classes: Vec<&str> = kept.iter().filter_map(label).collect();
    classes.sort_unstable();
    classes.dedup();
    let out = kept.iter().map(|id| label(id).and_then(|l| classes.binary_search(&l).ok()).map_or(u32::MAX, |c| c as u32)).collect();
    Ok(Some((out, classes.len())))
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
    fn mail_pool_takes_the_closest_people_first_and_widens_only_when_short() {
        // Person 0's mailbox holds e-mails 1 and 4, person 1's 4 and 7, person 2's 9, person 3 none.
        let mailbox = vec![vec![1, 4], vec![4, 7], vec![9], vec![]];
        // Closest to the sender: 1 then 2; to the receiver: 0 then 3. Depth 0 pools {1, 4, 7}.
        let lists = vec![vec![1, 2], vec![0, 3]];
        assert_eq!(mail_pool(&lists, &mailbox, 3), vec![1, 4, 7]);
        // Four wanted: depth 1 adds person 2's e-mail 9 (and person 3's nothing).
        assert_eq!(mail_pool(&lists, &mailbox, 4), vec![1, 4, 7, 9]);
        // More than there are: everything, then stop.
        assert_eq!(mail_pool(&lists, &mailbox, 10), vec![1, 4, 7, 9]);
        assert_eq!(mail_pool(&[vec![3]], &mailbox, 1), Vec::<u32>::new());
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
