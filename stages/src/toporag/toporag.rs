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
//! Steps: [`crate::toporag::split`], [`topology`], [`retrieve`] (or the e-mail variant's
//! [`retrieve_emails`]), [`crate::toporag::quality`], [`task_features`] and
//! [`crate::toporag::tasks`], [`crate::toporag::similarity::correlation`], [`quality_scores`].
//! Writes `split` (`email_split`), `retrieved` (`email_retrieved`), `context_quality`,
//! `context_summary`, `correlation` (+ PNG plots), `node_classification`, `link_prediction`, `curves`
//! and `scores`.

use std::collections::HashMap;

use arrow::array::{Array, RecordBatch};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_datasets::rng::Rng;
use tgrag_models::gnn::{LinkPredConfig, NodeClassConfig};
use tgrag_schemas::columns;

use crate::shared::encoders::{DeviceChoice, Encoder, TextEncoder};
use crate::shared::run::by_score_then_id;
use crate::shared::scores::{ALL, Scores};
use crate::stage::Width;
use crate::toporag::diffusion::{Adjacency, Neighbour, cosine_top_k, diffuse_f32};
use crate::toporag::emails::{Mails, mail_pool, people_graph, read_mails};
use crate::toporag::quality::{Items, Quality, Summary, quality};
use crate::toporag::similarity::{Correlation, correlation, cos, l2_top_k};
use crate::toporag::split::{Split, SplitRule, paper_thresholds, split};
use crate::toporag::{graphwave, tasks};
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `toporag` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToporagConfig {
    /// Share of the kept nodes that stay fully observed; the rest become partially observed (the newest
    /// by `time` when every node has one, else a seeded choice).
    pub observed_fraction: f64,
    /// Words of its text a partially observed node shows.
    pub visible_words: usize,
    /// Drop nodes with fewer words; default (null): the paper's rule for the dataset, see
    /// [`paper_thresholds`].
    #[serde(default)]
    pub min_words: Option<usize>,
    /// Drop nodes with fewer characters; default (null) as for `min_words`.
    #[serde(default)]
    pub min_chars: Option<usize>,
    /// Texts retrieved per partially observed node.
    pub top_k: usize,
    /// Seed of the split, the random projection R and the retrievers.
    pub seed: u64,
    /// Width of the random projection R.
    pub dims: Width,
    /// α_1..α_K of the retrieval's proximity.
    pub alphas: Vec<f64>,
    /// GraphWave's heat-kernel scales (role similarity).
    pub scales: Vec<f64>,
    /// GraphWave's sample points of the characteristic function per scale.
    pub points: usize,
    #[serde(default)]
    pub encoder: Encoder,
    /// MiniLM model folder; default `$TGRAG_MODELS/all-MiniLM-L6-v2` or `weights/all-MiniLM-L6-v2`.
    #[serde(default)]
    pub model_dir: Option<String>,
    /// Width of the hashing encoder.
    pub hash_dim: Width,
    /// Pairs for the correlation analysis (all pairs when there are fewer).
    pub max_pairs: usize,
    /// Run the task-oriented evaluation (node classification, link prediction).
    pub tasks: bool,
    /// Node classification: epochs, early-stopping patience, the share of labelled observed nodes
    /// held out for early stopping.
    pub nc_max_epochs: usize,
    /// Node classification: epochs without a better validation accuracy before stopping.
    pub nc_patience: usize,
    /// Node classification: share of the labelled observed nodes held out for early stopping.
    pub nc_val_fraction: f64,
    /// Link prediction: epochs, patience, the share of non-test edges held out for validation, the
    /// negative pairs per evaluation set, K of Hits@K.
    pub lp_max_epochs: usize,
    /// Link prediction: epochs without a better validation score before stopping.
    pub lp_patience: usize,
    /// Link prediction: share of the non-test edges held out for validation.
    pub lp_val_fraction: f64,
    /// Link prediction: negative pairs per evaluation set.
    pub lp_negatives: usize,
    /// Link prediction: K of Hits@K.
    pub lp_hits_k: usize,
    /// Training seeds of the node classifiers and link predictors (weights, dropout, negatives):
    /// empty means `seed` alone; several give the mean ± std of the paper's Table 3 (the nightly
    /// job runs five).
    #[serde(default)]
    pub gnn_seeds: Vec<u64>,
    /// Where the GNNs train and the texts are embedded: `cpu` (the host GNN engine, the fused MiniLM
    /// engine), `gpu` (burn on wgpu) or `auto`.
    #[serde(default)]
    pub device: DeviceChoice,
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
            dims: const { Width::new(128) },
            alphas: vec![1.0, 1.0, 1.0],
            scales: vec![0.5, 1.0, 3.0],
            points: 25,
            encoder: Encoder::Minilm,
            model_dir: None,
            hash_dim: const { Width::new(256) },
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
            gnn_seeds: Vec::new(),
            device: DeviceChoice::Cpu,
        }
    }
}

/// The retrievers, in output order.
pub const RETRIEVERS: [&str; 5] = ["none", "random", "text", "topo-proximity", "topo-role"];

impl ToporagConfig {
    fn rule(&self) -> SplitRule {
        SplitRule { observed_fraction: self.observed_fraction, visible_words: self.visible_words, seed: self.seed }
    }

    fn encoder(&self, ctx: &StageContext<'_>) -> Result<TextEncoder> {
        TextEncoder::load(
            self.encoder,
            self.model_dir.as_deref(),
            self.hash_dim.get(),
            self.device,
            ctx.progress,
            "--set toporag.encoder=hash",
        )
    }
}

pub struct ToporagStage;

static INFO: StageInfo = StageInfo {
    name: "toporag",
    module: module_path!(),
    version: 5,
    about: "TopoRAG: observed/partial split, proximity (diffusion) and role (GraphWave) retrieval vs text/random/none, context quality (BLEU-4, ROUGE-L, MiniLM cosine), correlation analysis",
    deps: &["ingest"],
    needs: &[("ingest", "tag_nodes"), ("ingest", "tag_edges")],
    excludes: &[],
    collects: &[],
    outputs: &[
        "split",
        "email_split",
        "retrieved",
        "email_retrieved",
        "context_quality",
        "context_summary",
        "correlation",
        "node_classification",
        "link_prediction",
        "curves",
        "scores",
    ],
    files: &["correlation_by_k.png", "text_vs_proximity.png"],
    shards: None,
};

/// Proximity and role embeddings of a graph (rows = nodes).
pub struct Topology {
    /// The seeded Gaussian projection R (n × dims, f32).
    pub r: Vec<f32>,
    /// P = Σ α_k Â^k R (n × dims).
    pub prox: Vec<f64>,
    /// GraphWave embeddings (n × rw).
    pub role: Vec<f64>,
    pub rw: usize,
}

/// Step: proximity (diffusion of a seeded projection) and role (GraphWave, exact up to 2,000 nodes,
/// Chebyshev above) over `adj`.
pub fn topology(adj: &Adjacency, cfg: &ToporagConfig) -> Result<Topology> {
    let n = adj.n;
    let mut rng = Rng::new(cfg.seed);
    let r: Vec<f32> = (0..n * cfg.dims.get()).map(|_| rng.normal() as f32).collect();
    let prox = diffuse_f32(adj, &r, cfg.dims.get(), &cfg.alphas).iter().map(|&x| f64::from(x)).collect();
    let mode = if n <= 2000 { graphwave::Mode::Exact } else { graphwave::DEFAULT_CHEBYSHEV };
    let role = graphwave::embed(adj, &cfg.scales, cfg.points, graphwave::T_MAX, mode)?;
    Ok(Topology { r, prox, role, rw: cfg.scales.len() * 2 * cfg.points })
}

/// The retrievers' hits, in [`RETRIEVERS`] order: per retriever, per target, item indices.
pub type Hits = Vec<(&'static str, Vec<Vec<Neighbour>>)>;

/// `k` observed items drawn for a target (seeded by the target's id), the `random` retriever.
fn random_hits(targets: &[u32], kept: &[u32], observed: &[u32], k: usize, seed: u64) -> Vec<Vec<Neighbour>> {
    targets
        .iter()
        .map(|&t| {
            Rng::for_item(seed, "toporag-random", u64::from(kept[t as usize]))
                .sample_distinct(observed.len(), k)
                .into_iter()
                .map(|i| Neighbour { node: observed[i], score: 0.0 })
                .collect()
        })
        .collect()
}

/// Step (graph nodes): for every target (partial node), the top `k` observed nodes by each
/// retriever: `none`, `random`, `text` (cosine of the visible words' embedding, `vis_emb`, against
/// the observed full texts, `full`), `topo-proximity` (cosine of P), `topo-role` (smallest L2 of
/// GraphWave). Ties by node index.
#[allow(clippy::too_many_arguments)]
pub fn retrieve(
    targets: &[u32],
    observed: &[u32],
    kept: &[u32],
    vis_emb: &[f32],
    full: &[f64],
    dim: usize,
    topo: &Topology,
    cfg: &ToporagConfig,
) -> Hits {
    let k = cfg.top_k;
    let text: Vec<Vec<Neighbour>> = (0..targets.len())
        .into_par_iter()
        .map(|qi| {
            let q: Vec<f64> = vis_emb[qi * dim..qi * dim + dim].iter().map(|&x| f64::from(x)).collect();
            let mut s: Vec<Neighbour> =
                observed.iter().map(|&o| Neighbour { node: o, score: cos(&q, &full[o as usize * dim..o as usize * dim + dim]) }).collect();
            s.sort_by(by_score_then_id);
            s.truncate(k);
            s
        })
        .collect();
    let prox = cosine_top_k(&topo.prox, cfg.dims.get(), targets, observed, k);
    let role = l2_top_k(&topo.role, topo.rw, targets, observed, k);
    let random = random_hits(targets, kept, observed, k, cfg.seed);
    vec![("none", vec![Vec::new(); targets.len()]), ("random", random), ("text", text), ("topo-proximity", prox), ("topo-role", role)]
}

/// Step (task-oriented evaluation): the node features of each retriever: every node's full-text
/// embedding, with the partial nodes' rows replaced by the embedding of their visible words plus
/// the retriever's context (`none`: the visible words alone, `vis_emb`; the others: rows of
/// `rebuilt`, retriever-major over `retrievers`), and `oracle` (the full texts).
pub fn task_features(
    full_emb: &[f32],
    vis_emb: &[f32],
    rebuilt: &[f32],
    targets: &[u32],
    dim: usize,
    retrievers: &[&str],
) -> Vec<(String, Vec<f32>)> {
    let m = targets.len();
    let with_rows = |rows: &[f32]| {
        let mut f = full_emb.to_vec();
        for (qi, &t) in targets.iter().enumerate() {
            f[t as usize * dim..(t as usize + 1) * dim].copy_from_slice(&rows[qi * dim..(qi + 1) * dim]);
        }
        f
    };
    let mut features = vec![("none".to_string(), with_rows(vis_emb))];
    for (ri, name) in retrievers.iter().enumerate() {
        features.push((name.to_string(), with_rows(&rebuilt[ri * m * dim..(ri + 1) * m * dim])));
    }
    features.push(("oracle".to_string(), full_emb.to_vec()));
    features
}

/// Step: the context-quality rows of `scores` (per retriever, split `test`: the targets).
pub fn quality_scores(summary: &[Summary], scores: &mut Scores) {
    for s in summary {
        for (metric, value) in
            [("bleu4", s.bleu4_mean), ("bleu4_corpus", s.bleu4_corpus), ("rouge_l_f1", s.rouge_l_f1_mean), ("minilm_cosine", s.cosine_mean)]
        {
            scores.push(&s.retriever, "test", ALL, metric, value, s.targets, None);
        }
    }
}

impl StageSpec for ToporagStage {
    type Config = ToporagConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &ToporagConfig) -> std::result::Result<(), String> {
        if !(c.observed_fraction > 0.0 && c.observed_fraction < 1.0) {
            return Err("observed_fraction must be in (0, 1)".into());
        }
        if c.top_k == 0 || c.dims.get() == 0 || c.alphas.is_empty() || c.hash_dim.get() == 0 {
            return Err("top_k, dims, hash_dim must be ≥ 1 and alphas non-empty".into());
        }
        graphwave::check(&c.scales, c.points)
    }

    fn model(c: &ToporagConfig) -> Option<crate::ModelNeed> {
        (c.encoder == Encoder::Minilm).then(|| crate::ModelNeed { model_dir: c.model_dir.clone(), instead: "toporag.encoder=hash".into() })
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: ToporagConfig) -> Result<()> {
        if ctx.has_input("ingest", "emails") {
            return execute_emails(ctx, &cfg);
        }
        let nodes = ctx.input("ingest", "tag_nodes")?;
        let edges_b = ctx.input("ingest", "tag_edges")?;
        let graph = TagGraph::read(&nodes, &edges_b)?;
        let TagSplit { sp, observed, targets } = split_tag(ctx, &graph, &cfg)?;
        let n = sp.kept.len();
        let id_pos: HashMap<u32, usize> = graph.ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let full: Vec<&str> = sp.kept.iter().map(|id| id_pos.get(id).map_or("", |&i| graph.texts[i])).collect();
        let t = embed_texts(ctx, &cfg, &sp, &targets, full)?;

        let (s, d): (Vec<u32>, Vec<u32>) = sp.edges.iter().copied().unzip();
        let adj = Adjacency::from_edges(n, &s, &d, false)?;
        let topo = ctx.timed("topology", |_| topology(&adj, &cfg))?;
        let hits = ctx.timed("retrieve", |_| Ok(retrieve(&targets, &observed, &sp.kept, &t.vis_emb, &t.full64, t.dim, &topo, &cfg)))?;

        let items = Items {
            target_ids: targets.iter().map(|&t| sp.kept[t as usize]).collect(),
            ids: &sp.kept,
            texts: &t.full,
            id_column: "node_id",
        };
        let q = ctx.timed("context quality", |_| quality(&t.encoder, t.dim, &hits, &items, &t.hidden, &t.hid_emb))?;
        ctx.set_items(targets.len() as u64);
        let mut scores = Scores::new(&ctx.dataset.name, INFO.name);
        quality_scores(&q.summary, &mut scores);

        let tasks = if cfg.tasks {
            let partial = PartialNodes { nodes: &nodes, sp: &sp, targets: &targets, id_pos: &id_pos };
            Some(evaluate_tasks(ctx, &cfg, &t, &hits, &q.contexts, &partial, &mut scores)?)
        } else {
            None
        };

        let all: Vec<u32> = (0..n as u32).collect();
        let corr = ctx.timed("correlation", |_| {
            correlation(&adj, &topo.r, cfg.dims.get(), &topo.role, topo.rw, &t.full64, t.dim, &all, cfg.max_pairs, cfg.seed)
        })?;
        write_tag(ctx, &sp, &q, &corr, tasks, scores)
    }
}

/// The nodes (ids, texts, times when every node has one) and the edges of a text-attributed graph.
struct TagGraph<'a> {
    ids: Vec<u32>,
    texts: Vec<&'a str>,
    times: Option<Vec<i64>>,
    edges: Vec<(u32, u32)>,
}

impl<'a> TagGraph<'a> {
    /// Reads the `tag_nodes` and `tag_edges` tables.
    fn read(nodes: &'a RecordBatch, edges_b: &RecordBatch) -> Result<Self> {
        let ids = columns::u32s(nodes, "node_id")?.values().to_vec();
        let text_col = columns::strs(nodes, "text")?;
        let texts: Vec<&str> = (0..text_col.len()).map(|i| text_col.value(i)).collect();
        let times = times_of(nodes)?;
        let (src, dst) = (columns::u32s(edges_b, "src")?, columns::u32s(edges_b, "dst")?);
        let edges: Vec<(u32, u32)> = src.values().iter().copied().zip(dst.values().iter().copied()).collect();
        Ok(TagGraph { ids, texts, times, edges })
    }
}

/// A split of a text-attributed graph, with its observed and partial (target) items by index.
struct TagSplit {
    sp: Split,
    observed: Vec<u32>,
    targets: Vec<u32>,
}

/// Step 1 on a text-attributed graph: the split, refused when it leaves no target or fewer
/// observed nodes than `top_k`.
fn split_tag(ctx: &mut StageContext<'_>, g: &TagGraph<'_>, cfg: &ToporagConfig) -> Result<TagSplit> {
    let paper = paper_thresholds(&ctx.dataset.name);
    let limits = (cfg.min_words.unwrap_or(paper.0), cfg.min_chars.unwrap_or(paper.1));
    let sp = ctx.timed("split", |_| Ok(split(&g.ids, &g.texts, g.times.as_deref(), &g.edges, limits, &cfg.rule())))?;
    let n = sp.kept.len();
    let (observed, targets) = parts(&sp);
    if targets.is_empty() || observed.len() < cfg.top_k {
        return Err(StageError::Input(format!(
            "toporag: {n} of {} nodes have at least {} words and {} characters, too few to split (lower --set toporag.min_words=…)",
            g.ids.len(),
            limits.0,
            limits.1
        )));
    }
    Ok(TagSplit { sp, observed, targets })
}

/// The texts of a text-attributed graph run and their embeddings.
struct Texts<'a> {
    /// Full texts of every kept node.
    full: Vec<&'a str>,
    /// Visible words and hidden text of every target.
    visible: Vec<&'a str>,
    hidden: Vec<&'a str>,
    encoder: TextEncoder,
    dim: usize,
    full_emb: Vec<f32>,
    vis_emb: Vec<f32>,
    hid_emb: Vec<f32>,
    /// `full_emb` as f64.
    full64: Vec<f64>,
}

/// Text embeddings: full texts of every kept node, the visible words of the targets (and their
/// hidden texts, for the context quality).
fn embed_texts<'a>(
    ctx: &mut StageContext<'_>,
    cfg: &ToporagConfig,
    sp: &'a Split,
    targets: &[u32],
    full: Vec<&'a str>,
) -> Result<Texts<'a>> {
    let visible: Vec<&str> = targets.iter().map(|&t| sp.visible[t as usize].as_str()).collect();
    let hidden: Vec<&str> = targets.iter().map(|&t| sp.hidden[t as usize].as_str()).collect();
    let encoder = cfg.encoder(ctx)?;
    let dim = encoder.dim();
    let full_emb = ctx.timed("embed texts", |_| encoder.encode(&full, "toporag: embed texts"))?;
    let vis_emb = ctx.timed("embed visible words", |_| encoder.encode(&visible, "toporag: embed visible words"))?;
    let hid_emb = ctx.timed("embed hidden texts", |_| encoder.encode(&hidden, "toporag: embed hidden texts"))?;
    let full64: Vec<f64> = full_emb.iter().map(|&x| f64::from(x)).collect();
    Ok(Texts { full, visible, hidden, encoder, dim, full_emb, vis_emb, hid_emb, full64 })
}

/// What the task-oriented evaluation needs of the split graph.
struct PartialNodes<'a> {
    nodes: &'a RecordBatch,
    sp: &'a Split,
    targets: &'a [u32],
    id_pos: &'a HashMap<u32, usize>,
}

/// Task-oriented evaluation: the partial nodes' features rebuilt from their visible words plus
/// each retriever's texts (`none`: the visible words alone; `oracle`: the full text).
fn evaluate_tasks(
    ctx: &mut StageContext<'_>,
    cfg: &ToporagConfig,
    t: &Texts<'_>,
    hits: &Hits,
    contexts: &[String],
    p: &PartialNodes<'_>,
    scores: &mut Scores,
) -> Result<tasks::TaskTables> {
    let m = p.targets.len();
    let rebuilt: Vec<String> = (1..hits.len())
        .flat_map(|ri| (0..m).map(move |qi| (ri, qi)))
        .map(|(ri, qi)| format!("{} {}", t.visible[qi], contexts[ri * m + qi]))
        .collect();
    let refs: Vec<&str> = rebuilt.iter().map(String::as_str).collect();
    let re_emb = ctx.timed("embed rebuilt texts", |_| t.encoder.encode(&refs, "toporag: embed rebuilt texts"))?;
    let names: Vec<&str> = hits.iter().skip(1).map(|h| h.0).collect();
    let features = task_features(&t.full_emb, &t.vis_emb, &re_emb, p.targets, t.dim, &names);
    let labels = node_labels(p.nodes, &p.sp.kept, p.id_pos)?;
    let tcfg = task_config(cfg);
    let inputs = tasks::TaskInputs {
        n: p.sp.kept.len(),
        edges: &p.sp.edges,
        partial: &p.sp.partial,
        labels: labels.as_ref().map(|(l, c)| (l.as_slice(), *c)),
        dim: t.dim,
        features: &features,
    };
    let progress = ctx.progress;
    ctx.timed("train GNNs", |_| tasks::evaluate(&inputs, &tcfg, progress, scores))
}

/// The node classification and link prediction options of the stage's config.
fn task_config(cfg: &ToporagConfig) -> tasks::TaskConfig {
    tasks::TaskConfig {
        nc: NodeClassConfig { max_epochs: cfg.nc_max_epochs, patience: cfg.nc_patience, seed: cfg.seed, ..NodeClassConfig::default() },
        lp: LinkPredConfig {
            max_epochs: cfg.lp_max_epochs,
            patience: cfg.lp_patience,
            hits_k: cfg.lp_hits_k,
            seed: cfg.seed,
            ..LinkPredConfig::default()
        },
        val_fraction: cfg.nc_val_fraction,
        lp_val_fraction: cfg.lp_val_fraction,
        lp_negatives: cfg.lp_negatives,
        seed: cfg.seed,
        seeds: if cfg.gnn_seeds.is_empty() { vec![cfg.seed] } else { cfg.gnn_seeds.clone() },
        device: cfg.device,
    }
}

/// Writes the tables and plots of a text-attributed graph run.
fn write_tag(
    ctx: &mut StageContext<'_>,
    sp: &Split,
    q: &Quality,
    corr: &Correlation,
    tasks: Option<tasks::TaskTables>,
    scores: Scores,
) -> Result<()> {
    ctx.write("split", &sp.table("node_id")?)?;
    ctx.write("retrieved", &q.retrieved)?;
    ctx.write("context_quality", &q.context_quality)?;
    ctx.write("context_summary", &q.context_summary)?;
    ctx.write("correlation", &corr.table)?;
    for (file, png) in corr.plots(&ctx.dataset.name)? {
        ctx.write_bytes(file, &png)?;
    }
    if let Some(t) = tasks {
        ctx.write("node_classification", &t.node_classification)?;
        ctx.write("link_prediction", &t.link_prediction)?;
        ctx.write("curves", &t.curves)?;
    }
    ctx.write("scores", &scores.batch()?)
}

/// The observed and the partial (target) items of a split, by index.
fn parts(sp: &Split) -> (Vec<u32>, Vec<u32>) {
    let n = sp.kept.len() as u32;
    ((0..n).filter(|&k| !sp.partial[k as usize]).collect(), (0..n).filter(|&k| sp.partial[k as usize]).collect())
}

/// The `time` column when every row has one.
fn times_of(b: &RecordBatch) -> Result<Option<Vec<i64>>> {
    Ok(match b.column_by_name("time") {
        Some(_) => {
            let t = columns::i64s(b, "time")?;
            (t.null_count() == 0 && !t.is_empty()).then(|| t.values().to_vec())
        }
        None => None,
    })
}

/// Step (e-mails): for every target e-mail, `text` ranks every observed e-mail by text similarity
/// to the visible words; `topo-proximity` and `topo-role` take the sender's and its first
/// recipient's topologically closest people (themselves excluded, only people with an observed
/// e-mail) one at a time until their observed e-mails number at least `top_k`, then rank that pool
/// by text; `random` draws observed e-mails. `rows[k]`: the e-mail row of item k.
#[allow(clippy::too_many_arguments)]
pub fn retrieve_emails(
    mails: &Mails,
    rows: &[usize],
    targets: &[u32],
    observed: &[u32],
    kept: &[u32],
    mailbox: &[Vec<u32>],
    vis_emb: &[f32],
    full: &[f64],
    dim: usize,
    topo: &Topology,
    cfg: &ToporagConfig,
) -> Hits {
    let people = mailbox.len();
    let rw = topo.rw;
    let (prox, role) = (&topo.prox, &topo.role);
    let text_score = |qi: usize, k: u32| {
        let q: Vec<f64> = vis_emb[qi * dim..(qi + 1) * dim].iter().map(|&x| f64::from(x)).collect();
        cos(&q, &full[k as usize * dim..(k as usize + 1) * dim])
    };
    let rank_by_text = |qi: usize, pool: &[u32]| {
        let mut s: Vec<Neighbour> = pool.iter().map(|&k| Neighbour { node: k, score: text_score(qi, k) }).collect();
        s.sort_by(by_score_then_id);
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
                    -role[p as usize * rw..(p as usize + 1) * rw]
                        .iter()
                        .zip(&role[o as usize * rw..(o as usize + 1) * rw])
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f64>()
                        .sqrt()
                } else {
                    cos(
                        &prox[p as usize * cfg.dims.get()..(p as usize + 1) * cfg.dims.get()],
                        &prox[o as usize * cfg.dims.get()..(o as usize + 1) * cfg.dims.get()],
                    )
                };
                Neighbour { node: o, score }
            })
            .collect();
        s.sort_by(by_score_then_id);
        s.into_iter().map(|nb| nb.node).collect()
    };
    let topo_hits = |qi: usize, role_mode: bool| {
        let i = rows[targets[qi] as usize];
        let ends: Vec<u32> =
            std::iter::once(mails.sender[i]).chain(mails.recipients[i].iter().copied().filter(|&r| r != mails.sender[i]).take(1)).collect();
        let lists: Vec<Vec<u32>> = ends.iter().map(|&p| closest(p, role_mode)).collect();
        rank_by_text(qi, &mail_pool(&lists, mailbox, cfg.top_k))
    };
    let m = targets.len();
    let text: Vec<Vec<Neighbour>> = (0..m).into_par_iter().map(|qi| rank_by_text(qi, observed)).collect();
    let prox_h: Vec<Vec<Neighbour>> = (0..m).into_par_iter().map(|qi| topo_hits(qi, false)).collect();
    let role_h: Vec<Vec<Neighbour>> = (0..m).into_par_iter().map(|qi| topo_hits(qi, true)).collect();
    let random = random_hits(targets, kept, observed, cfg.top_k, cfg.seed);
    vec![("none", vec![Vec::new(); m]), ("random", random), ("text", text), ("topo-proximity", prox_h), ("topo-role", role_h)]
}

/// The paper's Enron variant (§6.1.3): items are e-mails, the graph is the people graph. The newest
/// `1 − observed_fraction` e-mails (by Date; seeded when some lack one) are the targets, shown by
/// their first `visible_words` words; e-mails with no more words than that are dropped, and so are
/// repeats of an earlier e-mail (same sender and body: the corpus keeps a message in every
/// mailbox it passed through, and a copy would hand a retriever the answer). The people graph
/// joins sender and recipients of the **observed** e-mails only. Retrieval: [`retrieve_emails`].
/// Correlation: between people who sent an observed e-mail, their mean e-mail embedding against P
/// and GraphWave. Node classification and link prediction are not run (e-mails have no labels;
/// the paper reports them for citation graphs).
fn execute_emails(ctx: &mut StageContext<'_>, cfg: &ToporagConfig) -> Result<()> {
    let people = ctx.input("ingest", "tag_nodes")?.num_rows();
    let mails = read_mails(&ctx.input("ingest", "emails")?)?;
    mails.check_people(people)?;
    let unique = mails.unique();
    let ids: Vec<u32> = unique.iter().map(|&i| mails.ids[i]).collect();
    let texts: Vec<&str> = unique.iter().map(|&i| mails.body[i].as_str()).collect();
    let times: Option<Vec<i64>> = mails.time.as_ref().map(|t| unique.iter().map(|&i| t[i]).collect());
    let paper = paper_thresholds(&ctx.dataset.name);
    let limits = (cfg.min_words.unwrap_or(paper.0).max(cfg.visible_words + 1), cfg.min_chars.unwrap_or(paper.1));
    let sp = ctx.timed("split", |_| Ok(split(&ids, &texts, times.as_deref(), &[], limits, &cfg.rule())))?;
    let row_of: HashMap<u32, usize> = mails.ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let rows: Vec<usize> = sp
        .kept
        .iter()
        .map(|id| row_of.get(id).copied().ok_or_else(|| StageError::Internal(format!("e-mail {id} lost"))))
        .collect::<Result<_>>()?;
    let n_mail = rows.len();
    let (observed, targets) = parts(&sp);
    if targets.is_empty() || observed.len() < cfg.top_k {
        return Err(StageError::Input(format!(
            "toporag: {n_mail} of {} e-mails have more than {} words, too few to split",
            mails.ids.len(),
            limits.0 - 1
        )));
    }
    let (pe, mailbox) = people_graph(&mails, &rows, &observed, people);
    let (ps, pd): (Vec<u32>, Vec<u32>) = pe.iter().copied().unzip();
    let adj = Adjacency::from_edges(people, &ps, &pd, false)?;
    let topo = ctx.timed("topology", |_| topology(&adj, cfg))?;

    let encoder = cfg.encoder(ctx)?;
    let dim = encoder.dim();
    let full: Vec<&str> = rows.iter().map(|&i| mails.body[i].as_str()).collect();
    let visible: Vec<&str> = targets.iter().map(|&t| sp.visible[t as usize].as_str()).collect();
    let hidden: Vec<&str> = targets.iter().map(|&t| sp.hidden[t as usize].as_str()).collect();
    let full_emb = ctx.timed("embed e-mails", |_| encoder.encode(&full, "toporag: embed e-mails"))?;
    let vis_emb = ctx.timed("embed visible words", |_| encoder.encode(&visible, "toporag: embed visible words"))?;
    let hid_emb = ctx.timed("embed hidden texts", |_| encoder.encode(&hidden, "toporag: embed hidden texts"))?;
    let full64: Vec<f64> = full_emb.iter().map(|&x| f64::from(x)).collect();
    let hits = ctx.timed("retrieve", |_| {
        Ok(retrieve_emails(&mails, &rows, &targets, &observed, &sp.kept, &mailbox, &vis_emb, &full64, dim, &topo, cfg))
    })?;
    ctx.set_items(targets.len() as u64);
    let items =
        Items { target_ids: targets.iter().map(|&t| sp.kept[t as usize]).collect(), ids: &sp.kept, texts: &full, id_column: "email_id" };
    let q = ctx.timed("context quality", |_| quality(&encoder, dim, &hits, &items, &hidden, &hid_emb))?;
    let mut scores = Scores::new(&ctx.dataset.name, INFO.name);
    quality_scores(&q.summary, &mut scores);

    // Correlation between people: mean embedding of the observed e-mails each sent.
    let mut person_text = vec![0f64; people * dim];
    let mut sent = vec![0usize; people];
    for &k in &observed {
        let s = mails.sender[rows[k as usize]] as usize;
        sent[s] += 1;
        person_text[s * dim..(s + 1) * dim].iter_mut().zip(&full64[k as usize * dim..(k as usize + 1) * dim]).for_each(|(a, b)| *a += b);
    }
    let senders: Vec<u32> = (0..people as u32).filter(|&p| sent[p as usize] > 0).collect();
    let corr = ctx.timed("correlation", |_| {
        correlation(&adj, &topo.r, cfg.dims.get(), &topo.role, topo.rw, &person_text, dim, &senders, cfg.max_pairs, cfg.seed)
    })?;
    ctx.write("email_split", &sp.table("email_id")?)?;
    ctx.write("email_retrieved", &q.retrieved)?;
    ctx.write("context_quality", &q.context_quality)?;
    ctx.write("context_summary", &q.context_summary)?;
    ctx.write("correlation", &corr.table)?;
    for (file, png) in corr.plots(&ctx.dataset.name)? {
        ctx.write_bytes(file, &png)?;
    }
    ctx.write("scores", &scores.batch()?)
}

/// Class indices (classes in sorted order; `u32::MAX`: no label) of the kept nodes and the class
/// count, or `None` when the dataset has no `label` column.
fn node_labels(nodes: &RecordBatch, kept: &[u32], id_pos: &HashMap<u32, usize>) -> Result<Option<(Vec<u32>, usize)>> {
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

    fn small() -> ToporagConfig {
        ToporagConfig { top_k: 2, dims: Width::new(4), scales: vec![1.0], points: 3, ..ToporagConfig::default() }
    }

    /// A path 0 – 1 – 2 – 3 – 4 – 5 (node 5 also joined to 0: a cycle).
    fn cycle() -> Adjacency {
        Adjacency::from_edges(6, &[0, 1, 2, 3, 4, 5], &[1, 2, 3, 4, 5, 0], false).expect("adjacency")
    }

    #[test]
    fn topology_is_seeded_and_sized() {
        let cfg = small();
        let a = topology(&cycle(), &cfg).expect("topology");
        let b = topology(&cycle(), &cfg).expect("topology");
        assert_eq!((a.r.len(), a.prox.len(), a.role.len(), a.rw), (6 * 4, 6 * 4, 6 * 6, 6));
        assert_eq!((a.r.clone(), a.prox.clone(), a.role.clone()), (b.r, b.prox, b.role));
        let other = topology(&cycle(), &ToporagConfig { seed: 7, ..cfg.clone() }).expect("topology");
        assert_ne!(a.r, other.r);
        // On a cycle every node plays the same role: GraphWave rows are equal.
        for v in 1..6 {
            for (x, y) in a.role[..6].iter().zip(&a.role[v * 6..v * 6 + 6]) {
                assert!((x - y).abs() < 1e-9, "node {v}");
            }
        }
    }

    #[test]
    fn retrieval_ranks_observed_nodes_only_by_each_measure() {
        let cfg = small();
        let topo = topology(&cycle(), &cfg).expect("topology");
        let (observed, targets, kept) = (vec![0, 1, 2, 3], vec![4, 5], vec![10, 11, 12, 13, 14, 15]);
        // Full texts of the six nodes and the targets' visible words (2-d embeddings).
        let full: Vec<f64> = vec![1.0, 0.0, 0.0, 1.0, 0.7, 0.7, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let vis: Vec<f32> = vec![0.0, 1.0, -1.0, 0.1];
        let hits = retrieve(&targets, &observed, &kept, &vis, &full, 2, &topo, &cfg);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), RETRIEVERS);
        assert!(hits[0].1.iter().all(Vec::is_empty), "none retrieves nothing");
        // Text: target 4 (0, 1) is closest to node 1 (cosine 1) then node 2 (0.707); target 5 to node 3.
        let text: Vec<Vec<u32>> = hits[2].1.iter().map(|h| h.iter().map(|n| n.node).collect()).collect();
        assert_eq!(text, vec![vec![1, 2], vec![3, 1]]);
        for (_, per_target) in &hits[1..] {
            for h in per_target {
                assert_eq!(h.len(), 2);
                assert!(h.iter().all(|n| observed.contains(&n.node)), "only observed nodes are retrieved");
                assert_ne!(h[0].node, h[1].node);
            }
        }
        assert_eq!(hits[3].1, cosine_top_k(&topo.prox, cfg.dims.get(), &targets, &observed, 2));
        assert_eq!(hits[4].1, l2_top_k(&topo.role, topo.rw, &targets, &observed, 2));
        assert_eq!(hits[1].1, retrieve(&targets, &observed, &kept, &vis, &full, 2, &topo, &cfg)[1].1, "random is seeded");
    }

    #[test]
    fn task_features_replace_the_partial_rows_per_retriever() {
        // Three nodes of width 2; node 1 is the only target.
        let full = vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0];
        let (vis, rebuilt) = (vec![9.0, 9.0], vec![7.0, 7.0, 8.0, 8.0]);
        let f = task_features(&full, &vis, &rebuilt, &[1], 2, &["text", "topo-role"]);
        let names: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["none", "text", "topo-role", "oracle"]);
        assert_eq!(f[0].1, vec![1.0, 1.0, 9.0, 9.0, 3.0, 3.0]);
        assert_eq!(f[1].1, vec![1.0, 1.0, 7.0, 7.0, 3.0, 3.0]);
        assert_eq!(f[2].1, vec![1.0, 1.0, 8.0, 8.0, 3.0, 3.0]);
        assert_eq!(f[3].1, full);
    }

    #[test]
    fn quality_lands_in_scores_per_retriever_and_metric() {
        let s =
            Summary { retriever: "text".into(), targets: 9, bleu4_mean: 0.1, bleu4_corpus: 0.2, rouge_l_f1_mean: 0.3, cosine_mean: 0.4 };
        let mut scores = Scores::new("synthetic", "toporag");
        quality_scores(&[s], &mut scores);
        let b = scores.batch().expect("scores");
        let metric = columns::strs(&b, "metric").expect("metric");
        assert_eq!((0..4).map(|i| metric.value(i)).collect::<Vec<_>>(), ["bleu4", "bleu4_corpus", "rouge_l_f1", "minilm_cosine"]);
        assert_eq!(columns::f64s(&b, "value").expect("value").values().to_vec(), vec![0.1, 0.2, 0.3, 0.4]);
        assert_eq!(columns::u64s(&b, "n").expect("n").values().to_vec(), vec![9; 4]);
        assert_eq!(columns::strs(&b, "split").expect("split").value(0), "test");
    }
}
