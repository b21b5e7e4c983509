//! `mixrag`: MixRAG (entity, relation and subgraph experts, the query-aware GNN, a node-wise
//! mixture-of-experts gate; [`tgrag_models::gnn::mixrag`], where every choice the paper leaves open
//! is written down) over G-Retriever's PCST subgraphs of the `subgraphs` stage (ExplaGraphs: the
//! whole graph), answered by the same trained heads as `gretriever` instead of an LLM, with the
//! paper's ablations:
//!
//! * methods `mixrag` (all three experts, `layers` query-aware layers) and, with
//!   `ablation_experts`, `mixrag-<experts>` for the other six expert combinations (Table 4);
//! * `mixrag-depth<L>` for every other depth of `ablation_depths` (Fig. 4);
//! * the query-aware GNN (`mixrag-subgraph`) against G-Retriever's graph transformer over the same
//!   subgraphs (`gretriever-gt` of the `gretriever` stage's `scores`, same seeds);
//! * the full model's mean gate weight per expert by question type (Fig. 5: `hops=1` against
//!   `hops=2` where the dataset records hops, the synthetic WebQSP-like set; per task elsewhere).
//!
//! Every trained method runs once per seed; `scores` holds each seed, the mean and `<metric>_std`;
//! `mixrag_ablation` the ablations as mean ± std; `gate_weights` the full model's per-node gates
//! (first seed); PNG plots per task. Settings are chosen on validation only: the kept epoch is the
//! best on validation, and the test rows are reported, never used.

use std::collections::{BTreeMap, HashMap};

use arrow::array::{ArrayRef, Float32Array, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_models::DeviceChoice;
use tgrag_models::gnn::mixrag::{self, EXPERTS, MixConfig, MixShape};
use tgrag_models::graphqa::{HeadKind, QaConfig, QaExample, correct};
use tgrag_models::train::TrainConfig;
use tgrag_schemas::tables;

use crate::graphqa::answer::{Prediction, classes, example, loose_hit, predictions_batch, read_subgraphs, task_scores};
use crate::graphqa::data::{Task, scored_dataset};
use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::{Subgraph, SubgraphMethod};
use crate::shared::curves::Curves;
use crate::shared::plots;
use crate::shared::scores::{Scores, score_rows};
use crate::stage::Width;
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `mixrag` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MixragConfig {
    /// Seeds: every trained model runs once per seed. One by default, as `gretriever`; `make
    /// graphqa` and the nightly run seeds 0–3.
    pub seeds: Vec<u64>,
    /// Model width `d`.
    pub hidden: Width,
    /// Layers of the query-aware GNN of `mixrag` (the paper's best: 3).
    pub layers: usize,
    /// Elements the differentiable top-k keeps per graph (the paper: 20).
    pub top_k: usize,
    /// Hidden width of the answer head.
    pub head_hidden: Width,
    /// The training settings (`lr`, `weight_decay`, `clip`, `batch`, `epochs`, `patience`: options of
    /// this stage under the same names).
    #[serde(flatten)]
    pub train: TrainConfig,
    /// Gumbel-softmax temperature at the first epoch, annealed geometrically to `tau_end`.
    pub tau_start: f64,
    /// Gumbel-softmax temperature at the last epoch.
    pub tau_end: f64,
    /// Train the six other expert combinations (Table 4).
    pub ablation_experts: bool,
    /// Query-aware GNN depths to compare (Fig. 4); `layers` is `mixrag` itself.
    pub ablation_depths: Vec<usize>,
    /// MixRAG read by the language model (`lm_rows`: `mixrag`, `mixrag-lora`, `mixrag-full`;
    /// classification tasks, [`crate::graphqa::lm`]); none by default. Needs the model.
    #[serde(default)]
    pub lm_rows: Vec<crate::graphqa::lm::MixLmRow>,
    /// The experts ablation (Table 4) with the language model, under the first of `lm_rows`.
    #[serde(default)]
    pub lm_ablation_experts: bool,
    #[serde(flatten)]
    pub lm: crate::graphqa::lm::LmSettings,
    /// MiniLM model folder of the default language model; default `$TGRAG_MODELS/all-MiniLM-L6-v2` or
    /// `weights/all-MiniLM-L6-v2`.
    #[serde(default)]
    pub model_dir: Option<String>,
    #[serde(default)]
    pub device: DeviceChoice,
}

impl Default for MixragConfig {
    fn default() -> Self {
        MixragConfig {
            seeds: vec![0],
            hidden: const { Width::new(128) },
            layers: 3,
            top_k: 20,
            head_hidden: const { Width::new(256) },
            train: TrainConfig { epochs: 20, ..TrainConfig::default() },
            tau_start: 1.0,
            tau_end: 0.1,
            ablation_experts: true,
            ablation_depths: vec![1, 2, 3, 4],
            lm_rows: Vec::new(),
            lm_ablation_experts: false,
            lm: crate::graphqa::lm::LmSettings::default(),
            model_dir: None,
            device: DeviceChoice::Cpu,
        }
    }
}

pub struct MixragStage;

/// One PNG per (plot, task).
const FILES: &[&str] = &[
    "experts-explagraphs.png",
    "experts-scenegraphs.png",
    "experts-webqsp.png",
    "depth-explagraphs.png",
    "depth-scenegraphs.png",
    "depth-webqsp.png",
    "gates-explagraphs.png",
    "gates-scenegraphs.png",
    "gates-webqsp.png",
    "encoders-explagraphs.png",
    "encoders-scenegraphs.png",
    "encoders-webqsp.png",
];

static INFO: StageInfo = StageInfo {
    name: "mixrag",
    module: module_path!(),
    version: 1,
    about: "MixRAG: entity, relation and subgraph experts, the query-aware GNN, a node-wise MoE gate over the PCST subgraphs, answered by trained heads; expert, depth and encoder ablations, gate weights by question type",
    deps: &["textgraphs", "subgraphs", "gretriever"],
    needs: &[("textgraphs", "textgraph_questions")],
    excludes: &[],
    collects: &[],
    outputs: &["predictions", "curves", "scores", "gate_weights", "mixrag_ablation"],
    files: FILES,
    shards: Some(crate::ShardPhase::Units("language-model rows (one unit per row and seed)")),
};

/// A trained variant: its method name, experts and depth, and the ablation it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub name: String,
    pub experts: [bool; 3],
    pub layers: usize,
}

/// Every variant the configuration trains, `mixrag` first.
pub fn variants(cfg: &MixragConfig) -> Vec<Variant> {
    let mut v = vec![Variant { name: "mixrag".into(), experts: [true; 3], layers: cfg.layers }];
    if cfg.ablation_experts {
        for bits in [
            [true, false, false],
            [false, true, false],
            [false, false, true],
            [true, true, false],
            [true, false, true],
            [false, true, true],
        ] {
            v.push(Variant { name: MixShape::experts_name(bits), experts: bits, layers: cfg.layers });
        }
    }
    for &l in &cfg.ablation_depths {
        if l != cfg.layers {
            v.push(Variant { name: format!("mixrag-depth{l}"), experts: [true; 3], layers: l });
        }
    }
    v
}

/// What one task produced.
pub struct TaskOut {
    pub predictions: Vec<Prediction>,
    pub curves: Curves,
    /// The full model's first seed: per evaluated question (index into the task's graphs), the mean
    /// gate weights and every node's.
    pub gates: Vec<(usize, [f32; 3], Vec<[f32; 3]>)>,
}

/// Step: every variant of one task, each seed trained in parallel.
pub fn run_task(
    enc: &EncodedGraphs,
    graphs: &[&EncodedGraph],
    subs: &HashMap<(u32, SubgraphMethod), Subgraph>,
    task: Task,
    cfg: &MixragConfig,
    text_model: Option<&tgrag_models::minilm::MiniLm>,
    (progress, units): (crate::shared::context::Progress, &mut crate::shared::shards::Units),
) -> Result<TaskOut> {
    let class_names = classes(graphs);
    let class_of: HashMap<&str, u32> = class_names.iter().enumerate().map(|(i, c)| (c.as_str(), i as u32)).collect();
    for g in graphs {
        if !subs.contains_key(&(g.graph_id, SubgraphMethod::Pcst)) {
            return Err(StageError::Input(format!("graph {}: no `pcst` subgraph in the subgraphs stage's tables", g.graph_id)));
        }
    }
    let sub_of = |g: &EncodedGraph| subs.get(&(g.graph_id, SubgraphMethod::Pcst)).cloned().unwrap_or_default();
    let ids = |f: &dyn Fn(&str) -> bool| -> Vec<usize> { (0..graphs.len()).filter(|&i| f(&graphs[i].split)).collect() };
    let (tr, va, ev) = (ids(&|s| s == "train"), ids(&|s| s == "val"), ids(&|s| s == "val" || s == "test"));
    let ex = |set: &[usize]| -> Vec<QaExample> { set.iter().map(|&i| example(enc, graphs[i], &sub_of(graphs[i]), &class_of)).collect() };
    let (train_x, val_x, eval_x) = (ex(&tr), ex(&va), ex(&ev));
    let head = if task == Task::WebQsp { HeadKind::Nodes } else { HeadKind::Classify { classes: class_names.len() } };
    // A shard run does its language-model rows alone.
    let jobs: Vec<(Variant, u64)> = match units.in_shard() {
        true => Vec::new(),
        false => variants(cfg).into_iter().flat_map(|v| cfg.seeds.iter().map(move |&s| (v.clone(), s))).collect(),
    };
    let sets = Sets { train: &train_x, val: &val_x, eval: &eval_x };
    let results = train_jobs(&jobs, &sets, enc.dim, head, task, cfg);
    let mut out = TaskOut { predictions: Vec::new(), curves: Curves::default(), gates: Vec::new() };
    let first_seed = cfg.seeds.first().copied();
    for ((v, seed), r) in jobs.iter().zip(results) {
        let (curve, best, p) = r?;
        for c in &curve {
            let metrics = [("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metric", c.val_metric)];
            out.curves.push(&v.name, task.as_str(), *seed, c.epoch, c.epoch == best, &metrics);
        }
        for (k, (&i, x)) in ev.iter().zip(&eval_x).enumerate() {
            let g = graphs[i];
            let pred = p.pred[k];
            let text = match task {
                Task::WebQsp => {
                    let sub = sub_of(g);
                    sub.nodes.get(pred as usize).map(|&n| enc.texts[g.nodes[n as usize] as usize].clone()).unwrap_or_default()
                }
                _ => class_names.get(pred as usize).cloned().unwrap_or_default(),
            };
            out.predictions.push(Prediction {
                graph: i,
                method: v.name.clone(),
                seed: Some(*seed),
                loose: loose_hit(&text, &g.answer),
                text,
                correct: correct(x, pred),
            });
            if v.name == "mixrag" && Some(*seed) == first_seed {
                out.gates.push((i, p.question_gates[k], p.node_gates[k].clone()));
            }
        }
    }
    if let (Some(bert), false, false) = (text_model, task == Task::WebQsp, cfg.lm_rows.is_empty()) {
        let class_of: HashMap<String, u32> = class_of.iter().map(|(c, &i)| (c.to_string(), i)).collect();
        let lm = LmTask { enc, graphs, sub_of: &sub_of, class_names: &class_names, class_of: &class_of, sets: (&tr, &va, &ev) };
        lm_rows(&lm, task, cfg, bert, (progress, units), &mut out)?;
    }
    Ok(out)
}

/// A task's questions as the language-model rows read them.
struct LmTask<'a> {
    enc: &'a EncodedGraphs,
    graphs: &'a [&'a EncodedGraph],
    sub_of: &'a dyn Fn(&EncodedGraph) -> Subgraph,
    class_names: &'a [String],
    class_of: &'a HashMap<String, u32>,
    /// Training, validation and evaluated questions (indices into `graphs`).
    sets: (&'a [usize], &'a [usize], &'a [usize]),
}

/// MixRAG read by the language model: every row of `lm_rows` (all three experts) and, with
/// `lm_ablation_experts`, the six other expert subsets under the first row, per seed.
fn lm_rows(
    t: &LmTask<'_>,
    task: Task,
    cfg: &MixragConfig,
    bert: &tgrag_models::minilm::MiniLm,
    (progress, units): (crate::shared::context::Progress, &mut crate::shared::shards::Units),
    out: &mut TaskOut,
) -> Result<()> {
    use crate::graphqa::lm;
    let class_of: HashMap<&str, u32> = t.class_of.iter().map(|(c, &i)| (c.as_str(), i)).collect();
    let read = |ids: &[usize]| -> Result<Vec<tgrag_models::graphqa::lm::LmExample>> {
        let g = |i: usize| t.graphs[i];
        let descs: Vec<String> = ids.iter().map(|&i| lm::desc(t.enc, g(i), &(t.sub_of)(g(i)))).collect();
        let questions: Vec<String> = ids.iter().map(|&i| t.enc.texts[g(i).question as usize].clone()).collect();
        let qa: Vec<QaExample> = ids.iter().map(|&i| example(t.enc, g(i), &(t.sub_of)(g(i)), &class_of)).collect();
        lm::examples(bert, qa, &descs, &questions)
    };
    let (train_x, val_x, eval_x) = (read(t.sets.0)?, read(t.sets.1)?, read(t.sets.2)?);
    let dim = t.enc.dim;
    let source = |experts: [bool; 3]| tgrag_models::graphqa::lm::MixSource {
        shape: MixShape {
            dim,
            edge_dim: dim,
            question_dim: dim,
            hidden: cfg.hidden.get(),
            layers: cfg.layers,
            top_k: cfg.top_k,
            experts,
            head: HeadKind::Classify { classes: t.class_names.len() },
            head_hidden: cfg.head_hidden.get(),
        },
        tau_start: cfg.tau_start,
        tau_end: cfg.tau_end,
    };
    let mut specs: Vec<lm::RowSpec> = cfg.lm_rows.iter().map(|r| r.spec(&cfg.lm, source([true; 3]))).collect();
    if let (true, Some(first)) = (cfg.lm_ablation_experts, cfg.lm_rows.first()) {
        for experts in lm_expert_sets().into_iter().skip(1) {
            specs.push(first.spec(&cfg.lm, source(experts)));
        }
    }
    let run = lm::RowsRun {
        stage: INFO.name,
        task: task.as_str(),
        classes: t.class_names.len(),
        settings: &cfg.lm,
        base: &cfg.train,
        head_hidden: cfg.head_hidden.get(),
    };
    let sets = (train_x.as_slice(), val_x.as_slice(), eval_x.as_slice());
    let TaskOut { predictions, curves, .. } = out;
    lm::run_rows(
        bert,
        &run,
        &specs,
        &cfg.seeds,
        sets,
        (&mut lm::Starts::default(), units),
        &cfg.device.device(),
        progress,
        curves,
        |method, seed, predicted| {
            for ((&i, x), &p) in t.sets.2.iter().zip(&eval_x).zip(predicted) {
                let g = t.graphs[i];
                let text = t.class_names.get(p as usize).cloned().unwrap_or_default();
                predictions.push(Prediction {
                    graph: i,
                    method: method.to_string(),
                    seed: Some(seed),
                    loose: loose_hit(&text, &g.answer),
                    text,
                    correct: correct(&x.qa, p),
                });
            }
        },
    )
}

/// A task's training, validation and evaluated examples.
struct Sets<'a> {
    train: &'a [QaExample],
    val: &'a [QaExample],
    eval: &'a [QaExample],
}

/// What one (variant, seed) job gives: its curve, the kept epoch and its predictions.
type JobResult = Result<(Vec<tgrag_models::graphqa::QaEpoch>, u32, mixrag::MixPredictions)>;

/// Trains every (variant, seed) job in parallel and predicts the evaluated questions with the
/// kept model (at the kept epoch's temperature); results in job order.
fn train_jobs(jobs: &[(Variant, u64)], sets: &Sets<'_>, dim: usize, head: HeadKind, task: Task, cfg: &MixragConfig) -> Vec<JobResult> {
    let dev = cfg.device.device();
    let inner = dev.clone().autodiff().inner();
    jobs.par_iter()
        .map(|(v, seed)| {
            let shape = MixShape {
                dim,
                edge_dim: dim,
                question_dim: dim,
                hidden: cfg.hidden.get(),
                layers: v.layers,
                top_k: cfg.top_k,
                experts: v.experts,
                head,
                head_hidden: cfg.head_hidden.get(),
            };
            let mc = MixConfig {
                qa: QaConfig { train: cfg.train.clone(), head_hidden: cfg.head_hidden.get(), seed: *seed },
                tau_start: cfg.tau_start,
                tau_end: cfg.tau_end,
            };
            let (model, curve, best) = mixrag::train(shape, sets.train, sets.val, &mc, &dev)
                .map_err(|e| StageError::training(INFO.name, &format!("{} on {}", v.name, task.as_str()), e))?;
            let p = mixrag::predict(&model, &shape, sets.eval, mc.tau(best as usize), 64, &inner)?;
            Ok((curve, best, p))
        })
        .collect()
}

/// Mean and sample standard deviation.
fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let s = if v.len() > 1 { (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
    (m, s)
}

/// One row of `mixrag_ablation`.
#[derive(Debug, Clone, PartialEq)]
pub struct AblationRow {
    pub dataset: String,
    pub ablation: &'static str,
    pub setting: String,
    pub group: String,
    pub split: String,
    pub metric: String,
    pub mean: f64,
    pub std: f64,
    pub seeds: u32,
    pub n: u64,
}

/// Step: the ablation rows of one task from its predictions, the gates, and G-Retriever's graph
/// transformer rows of the `gretriever` stage's `scores` (`gt`: (split → mean, std, n, seeds)).
pub fn ablations(
    dataset: &str,
    task: Task,
    graphs: &[&EncodedGraph],
    out: &TaskOut,
    cfg: &MixragConfig,
    gt: &BTreeMap<String, (f64, f64, u64, u32)>,
) -> Vec<AblationRow> {
    let metric = if task == Task::WebQsp { "hit1" } else { "accuracy" };
    let mut rows = method_ablations(dataset, metric, graphs, out, cfg);
    rows.extend(graph_transformer_rows(dataset, metric, gt));
    rows.extend(gate_rows(dataset, graphs, out));
    rows
}

/// The experts, depth and encoder ablations: accuracy (or hit@1) per variant and split, mean and
/// std over seeds.
fn method_ablations(dataset: &str, metric: &str, graphs: &[&EncodedGraph], out: &TaskOut, cfg: &MixragConfig) -> Vec<AblationRow> {
    // (method, split) → seed → (right, n)
    type PerSeed = BTreeMap<u64, (u64, u64)>;
    let mut acc: BTreeMap<(&str, &str), PerSeed> = BTreeMap::new();
    for p in &out.predictions {
        let e = acc.entry((p.method.as_str(), graphs[p.graph].split.as_str())).or_default().entry(p.seed.unwrap_or(0)).or_default();
        e.0 += u64::from(p.correct);
        e.1 += 1;
    }
    let mut rows = Vec::new();
    let mut push = |ablation: &'static str, setting: String, method: &str, split: &str| {
        if let Some(by_seed) = acc.get(&(method, split)) {
            let vals: Vec<f64> = by_seed.values().map(|(r, n)| *r as f64 / (*n).max(1) as f64).collect();
            let (mean, std) = mean_std(&vals);
            let n = by_seed.values().next().map_or(0, |x| x.1);
            rows.push(AblationRow {
                dataset: dataset.into(),
                ablation,
                setting,
                group: "*".into(),
                split: split.into(),
                metric: metric.into(),
                mean,
                std,
                seeds: vals.len() as u32,
                n,
            });
        }
    };
    for split in ["val", "test"] {
        for v in variants(cfg) {
            if v.layers == cfg.layers {
                push("experts", experts_setting(v.experts), &v.name, split);
            }
            if v.experts == [true; 3] {
                push("depth", v.layers.to_string(), &v.name, split);
            }
        }
        push("encoder", "query-aware-gnn".into(), "mixrag-subgraph", split);
        if let (true, Some(first)) = (cfg.lm_ablation_experts, cfg.lm_rows.first()) {
            for experts in lm_expert_sets() {
                push("experts-lm", experts_setting(experts), &first.method(experts), split);
            }
        }
    }
    rows
}

/// An expert combination as `mixrag_ablation`'s `setting` spells it: `entity+subgraph`.
fn experts_setting(experts: [bool; 3]) -> String {
    let on: Vec<&str> = EXPERTS.iter().zip(experts).filter(|x| x.1).map(|x| *x.0).collect();
    on.join("+")
}

/// The expert combinations the language model's ablation trains: all three first, then Table 4's six.
fn lm_expert_sets() -> Vec<[bool; 3]> {
    let all = MixragConfig { ablation_depths: Vec::new(), ablation_experts: true, ..MixragConfig::default() };
    variants(&all).into_iter().map(|v| v.experts).collect()
}

/// The encoder ablation's other arm: `gretriever-gt`'s figures per split (read from its scores).
fn graph_transformer_rows(dataset: &str, metric: &str, gt: &BTreeMap<String, (f64, f64, u64, u32)>) -> Vec<AblationRow> {
    ["val", "test"]
        .into_iter()
        .filter_map(|split| {
            gt.get(split).map(|&(mean, std, n, seeds)| AblationRow {
                dataset: dataset.into(),
                ablation: "encoder",
                setting: "graph-transformer".into(),
                group: "*".into(),
                split: split.into(),
                metric: metric.into(),
                mean,
                std,
                seeds,
                n,
            })
        })
        .collect()
}

/// Mean gate weight per expert by question type (over questions; the full model's first seed).
fn gate_rows(dataset: &str, graphs: &[&EncodedGraph], out: &TaskOut) -> Vec<AblationRow> {
    let mut rows = Vec::new();
    for split in ["val", "test"] {
        let mut groups: BTreeMap<String, Vec<[f32; 3]>> = BTreeMap::new();
        for (i, g, _) in &out.gates {
            if graphs[*i].split != split {
                continue;
            }
            groups.entry("*".into()).or_default().push(*g);
            if let Some(h) = graphs[*i].hops {
                groups.entry(format!("hops={h}")).or_default().push(*g);
            }
        }
        for (group, gs) in groups {
            for (k, expert) in EXPERTS.iter().enumerate() {
                let v: Vec<f64> = gs.iter().map(|g| f64::from(g[k])).collect();
                let (mean, std) = mean_std(&v);
                rows.push(AblationRow {
                    dataset: dataset.into(),
                    ablation: "gate",
                    setting: (*expert).into(),
                    group: group.clone(),
                    split: split.into(),
                    metric: "gate_weight".into(),
                    mean,
                    std,
                    seeds: 1,
                    n: gs.len() as u64,
                });
            }
        }
    }
    rows
}

/// The `mixrag_ablation` table.
pub fn ablation_batch(rows: &[AblationRow]) -> Result<RecordBatch> {
    let s = |f: &dyn Fn(&AblationRow) -> String| Arc::new(StringArray::from_iter_values(rows.iter().map(f))) as ArrayRef;
    Ok(tables::MIXRAG_ABLATION.batch(vec![
        s(&|r| r.dataset.clone()),
        s(&|r| r.ablation.to_string()),
        s(&|r| r.setting.clone()),
        s(&|r| r.group.clone()),
        s(&|r| r.split.clone()),
        s(&|r| r.metric.clone()),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.mean))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.std))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.seeds))),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.n))),
    ])?)
}

use std::sync::Arc;

/// The four plots of a task (test split): expert combinations, depth, gates by question type, the
/// query-aware GNN against the graph transformer.
pub fn task_plots(task: Task, rows: &[AblationRow]) -> Result<Vec<(String, Vec<u8>)>> {
    let t = task.as_str();
    let test: Vec<&AblationRow> = rows.iter().filter(|r| r.split == "test").collect();
    let mut out = Vec::new();
    // An ablation's rows over all questions.
    let overall = |ab: &'static str| test.iter().filter(move |r| r.ablation == ab && r.group == "*");
    let bars_of = |ab: &'static str| -> (Vec<String>, Vec<Option<f64>>) {
        (overall(ab).map(|r| r.setting.clone()).collect(), overall(ab).map(|r| Some(r.mean)).collect())
    };
    // The combinations of both expert ablations, the trained heads' first.
    let mut cats: Vec<String> = Vec::new();
    for r in overall("experts").chain(overall("experts-lm")) {
        if !cats.contains(&r.setting) {
            cats.push(r.setting.clone());
        }
    }
    if !cats.is_empty() {
        let metric = test.first().map_or("accuracy", |r| r.metric.as_str());
        let series_of =
            |ab: &'static str| -> Vec<Option<f64>> { cats.iter().map(|c| overall(ab).find(|r| &r.setting == c).map(|r| r.mean)).collect() };
        let mut series = vec![("trained head", series_of("experts"))];
        if test.iter().any(|r| r.ablation == "experts-lm") {
            series.push(("language model", series_of("experts-lm")));
        }
        out.push((
            format!("experts-{t}.png"),
            plots::bars(&format!("MixRAG experts — {t} (test, {metric})"), metric, &cats, &series, (760, 380))?,
        ));
    }
    let depth: Vec<(f64, f64)> =
        test.iter().filter(|r| r.ablation == "depth").filter_map(|r| r.setting.parse::<f64>().ok().map(|l| (l, r.mean))).collect();
    if !depth.is_empty() {
        let mut depth = depth;
        depth.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.push((
            format!("depth-{t}.png"),
            plots::chart(
                &format!("MixRAG query-aware GNN depth — {t} (test)"),
                "layers",
                "score",
                &[plots::Series { name: "mixrag", points: depth }],
                plots::Mark::Lines,
                (760, 380),
            )?,
        ));
    }
    let gates: Vec<&&AblationRow> = test.iter().filter(|r| r.ablation == "gate").collect();
    if !gates.is_empty() {
        let mut groups: Vec<String> = gates.iter().map(|r| r.group.clone()).collect();
        groups.dedup();
        let series: Vec<(&str, Vec<Option<f64>>)> = EXPERTS
            .iter()
            .map(|e| (*e, groups.iter().map(|g| gates.iter().find(|r| &r.group == g && r.setting == *e).map(|r| r.mean)).collect()))
            .collect();
        out.push((
            format!("gates-{t}.png"),
            plots::bars(&format!("MixRAG gate weight by question type — {t} (test)"), "mean gate weight", &groups, &series, (760, 380))?,
        ));
    }
    let (cats, vals) = bars_of("encoder");
    if !cats.is_empty() {
        out.push((
            format!("encoders-{t}.png"),
            plots::bars(&format!("Query-aware GNN vs graph transformer — {t} (test)"), "score", &cats, &[("test", vals)], (760, 380))?,
        ));
    }
    Ok(out)
}

/// G-Retriever's graph transformer rows (`gretriever-gt`, the mean over seeds) of a task's dataset
/// in the `gretriever` stage's `scores`: split → (mean, std, n, seeds).
fn gt_rows(scores: &RecordBatch, dataset: &str, metric: &str) -> Result<BTreeMap<String, (f64, f64, u64, u32)>> {
    let mut out: BTreeMap<String, (f64, f64, u64, u32)> = BTreeMap::new();
    let std_name = format!("{metric}_std");
    for r in score_rows(scores)? {
        if r.dataset != dataset || r.method != "gretriever-gt" {
            continue;
        }
        let e = out.entry(r.split.to_string()).or_insert((f64::NAN, 0.0, r.n, 0));
        match (r.metric, r.seed.is_none()) {
            (x, true) if x == metric => e.0 = r.value,
            (x, true) if x == std_name => e.1 = r.value,
            (x, false) if x == metric => e.3 += 1,
            _ => {}
        }
    }
    out.retain(|_, x| x.0.is_finite());
    Ok(out)
}

impl StageSpec for MixragStage {
    type Config = MixragConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &MixragConfig) -> std::result::Result<(), String> {
        if c.seeds.is_empty()
            || c.hidden.get() == 0
            || c.layers == 0
            || c.top_k == 0
            || c.train.batch == 0
            || c.train.epochs == 0
            || c.head_hidden.get() == 0
        {
            return Err("seeds must be non-empty; hidden, layers, top_k, batch, epochs, head_hidden ≥ 1".into());
        }
        if c.ablation_depths.iter().any(|&l| l == 0 || l > 16) {
            return Err("ablation_depths must be within 1..=16".into());
        }
        if !(c.train.lr > 0.0
            && c.train.lr.is_finite()
            && c.tau_start > 0.0
            && c.tau_end > 0.0
            && c.tau_start.is_finite()
            && c.tau_end.is_finite())
        {
            return Err("lr, tau_start and tau_end must be finite and > 0".into());
        }
        c.train.validate()?;
        if !c.lm_rows.is_empty() {
            c.lm.validate()?;
        }
        if c.lm.experimental.lm_graph_init != crate::graphqa::lm::GraphInit::Scratch {
            return Err(
                "experimental.lm_graph_init applies to G-Retriever's graph token (gretriever.lm_rows); MixRAG's rows start from scratch"
                    .into(),
            );
        }
        Ok(())
    }
    fn model(c: &MixragConfig) -> Option<crate::ModelNeed> {
        (!c.lm_rows.is_empty() && c.lm.backbone.is_none())
            .then(|| crate::ModelNeed { model_dir: c.model_dir.clone(), instead: "mixrag.lm_rows=[]".into() })
    }
    fn backbone(c: &MixragConfig) -> Option<String> {
        c.lm.backbone.clone().filter(|_| !c.lm_rows.is_empty())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: MixragConfig) -> Result<()> {
        let enc = ctx.timed("load", |c| EncodedGraphs::load(c))?;
        let subs = read_subgraphs(
            &ctx.input("subgraphs", "subgraph_nodes")?,
            &ctx.input("subgraphs", "subgraph_edges")?,
            &ctx.input("subgraphs", "subgraph_summary")?,
        )?;
        let gscores = if ctx.has_input("gretriever", "scores") { Some(ctx.input("gretriever", "scores")?) } else { None };
        let dataset = ctx.dataset.name.clone();
        let mut by_task: BTreeMap<&str, Vec<&EncodedGraph>> = BTreeMap::new();
        for g in &enc.graphs {
            by_task.entry(g.task.as_str()).or_default().push(g);
        }
        let text_model = if !cfg.lm_rows.is_empty() && enc.graphs.iter().any(|g| g.task != Task::WebQsp) {
            Some(ctx.timed("load the language model", |_| match &cfg.lm.backbone {
                Some(spec) => crate::shared::encoders::load_backbone(spec, cfg.device),
                None => crate::shared::encoders::load_minilm_burn(cfg.model_dir.as_deref(), cfg.device, "--set mixrag.lm_rows=[]"),
            })?)
        } else {
            None
        };
        let progress = ctx.progress;
        let mut units = ctx.units();
        let (mut parts, mut preds, mut ablation, mut pngs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut curves = Curves::default();
        let (mut gg, mut gn, mut ge, mut gr, mut gs) = (vec![], vec![], vec![], vec![], vec![]);
        for (task_name, graphs) in &by_task {
            let task = Task::parse(task_name).unwrap_or(Task::SceneGraphs);
            crate::graphqa::data::require_splits(INFO.name, &dataset, task, graphs.iter().map(|g| g.split.as_str()))?;
            let out = ctx.timed(&format!("train + answer {task_name}"), |_| {
                run_task(&enc, graphs, &subs, task, &cfg, text_model.as_ref(), (progress, &mut units))
            })?;
            if units.in_shard() {
                continue;
            }
            let ds = scored_dataset(&dataset, task);
            let mut scores = Scores::new(&ds, INFO.name);
            task_scores(&dataset, task, graphs, &out.predictions, &mut scores);
            parts.push(scores.batch()?);
            preds.push(predictions_batch(graphs, &out.predictions)?);
            let metric = if task == Task::WebQsp { "hit1" } else { "accuracy" };
            let gt = match &gscores {
                Some(s) => gt_rows(s, &ds, metric)?,
                None => BTreeMap::new(),
            };
            let rows = ablations(&ds, task, graphs, &out, &cfg, &gt);
            pngs.extend(task_plots(task, &rows)?);
            ablation.extend(rows);
            for (i, _, nodes) in &out.gates {
                for (k, w) in nodes.iter().enumerate() {
                    gg.push(graphs[*i].graph_id);
                    gn.push(k as u32);
                    ge.push(w[0]);
                    gr.push(w[1]);
                    gs.push(w[2]);
                }
            }
            curves.extend(out.curves);
        }
        ctx.end_units(units)?;
        if ctx.partial() {
            // A shard run (its rows are in its partition) or a listing: the full run writes the tables.
            return Ok(());
        }
        let predictions = match preds.first() {
            Some(f) => arrow::compute::concat_batches(&f.schema(), &preds)?,
            None => predictions_batch(&[], &[])?,
        };
        let scores = arrow::compute::concat_batches(&tables::SCORES.schema(), &parts)?;
        let f32a = |v: Vec<f32>| Arc::new(Float32Array::from(v)) as ArrayRef;
        let gates = tables::GATE_WEIGHTS.batch(vec![
            Arc::new(UInt32Array::from(gg)),
            Arc::new(UInt32Array::from(gn)),
            f32a(ge),
            f32a(gr),
            f32a(gs),
        ])?;
        ctx.write("predictions", &predictions)?;
        ctx.write("curves", &curves.batch()?)?;
        ctx.write("scores", &scores)?;
        ctx.write("gate_weights", &gates)?;
        ctx.write("mixrag_ablation", &ablation_batch(&ablation)?)?;
        for (file, png) in pngs {
            ctx.write_bytes(&file, &png)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trained_start_is_g_retrievers_option_only() {
        let mut v = serde_json::to_value(MixragConfig::default()).expect("config");
        v["experimental"] = serde_json::json!({"lm_graph_init": "trained"});
        let c: MixragConfig = serde_json::from_value(v).expect("parses");
        assert_eq!(c.lm.experimental.lm_graph_init, crate::graphqa::lm::GraphInit::Trained);
        assert!(MixragStage::validate(&c).is_err_and(|e| e.contains("lm_graph_init")));
        assert!(MixragStage::validate(&MixragConfig::default()).is_ok());
    }

    #[test]
    fn variants_cover_table_4_and_figure_4() {
        let cfg = MixragConfig::default();
        let v = variants(&cfg);
        let names: Vec<&str> = v.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names[0], "mixrag");
        for n in [
            "mixrag-entity",
            "mixrag-relation",
            "mixrag-subgraph",
            "mixrag-entity+relation",
            "mixrag-entity+subgraph",
            "mixrag-relation+subgraph",
        ] {
            assert!(names.contains(&n), "{n}: {names:?}");
        }
        assert_eq!(names.iter().filter(|n| n.starts_with("mixrag-depth")).count(), 3, "{names:?}");
        let lean = MixragConfig { ablation_experts: false, ablation_depths: vec![], ..cfg };
        assert_eq!(variants(&lean).len(), 1);
    }

    #[test]
    fn the_language_models_expert_ablation_lands_in_the_ablation_table() {
        use crate::graphqa::lm::MixLmRow;
        let enc = crate::graphqa::answer::tests::planted();
        let graphs: Vec<&EncodedGraph> = enc.graphs.iter().collect();
        let test: Vec<usize> = (0..graphs.len()).filter(|&i| graphs[i].split == "test").collect();
        assert!(test.len() >= 4, "the planted task has a test split");
        let sets = lm_expert_sets();
        assert_eq!(sets.len(), 7);
        assert_eq!(sets[0], [true; 3], "the full row first: the ablation skips it");
        // Every combination under the LoRA row, two seeds: right on every `k + seed + 1`-th question.
        let mut out = TaskOut { predictions: Vec::new(), curves: Curves::default(), gates: Vec::new() };
        for (k, &experts) in sets.iter().enumerate() {
            for seed in [0u64, 1] {
                for (j, &i) in test.iter().enumerate() {
                    out.predictions.push(Prediction {
                        graph: i,
                        method: MixLmRow::MixragLora.method(experts),
                        seed: Some(seed),
                        text: String::new(),
                        loose: false,
                        correct: j % (k + seed as usize + 1) == 0,
                    });
                }
            }
        }
        let cfg =
            MixragConfig { lm_rows: vec![MixLmRow::MixragLora, MixLmRow::Mixrag], lm_ablation_experts: true, ..MixragConfig::default() };
        let rows = ablations("ds", Task::ExplaGraphs, &graphs, &out, &cfg, &BTreeMap::new());
        let lm: Vec<&AblationRow> = rows.iter().filter(|r| r.ablation == "experts-lm" && r.split == "test").collect();
        let settings: Vec<&str> = lm.iter().map(|r| r.setting.as_str()).collect();
        assert_eq!(
            settings,
            ["entity+relation+subgraph", "entity", "relation", "subgraph", "entity+relation", "entity+subgraph", "relation+subgraph"]
        );
        let n = test.len();
        for (k, r) in lm.iter().enumerate() {
            // Brute force: the fraction of multiples per seed, then mean and sample std over the two.
            let acc = |step: usize| (0..n).filter(|j| j % step == 0).count() as f64 / n as f64;
            let (a, b) = (acc(k + 1), acc(k + 2));
            let mean = (a + b) / 2.0;
            let std = ((a - mean).powi(2) + (b - mean).powi(2)).sqrt();
            assert!((r.mean - mean).abs() < 1e-12 && (r.std - std).abs() < 1e-12, "{k}: {r:?} against {mean} ± {std}");
            assert_eq!((r.seeds, r.n), (2, n as u64));
        }
        // Without the option the table has no such rows, and the head ablation finds no predictions.
        let off = ablations(
            "ds",
            Task::ExplaGraphs,
            &graphs,
            &out,
            &MixragConfig { lm_ablation_experts: false, ..cfg.clone() },
            &BTreeMap::new(),
        );
        assert!(off.iter().all(|r| r.ablation != "experts-lm") && off.iter().all(|r| r.ablation != "experts"));
        assert!(ablation_batch(&rows).is_ok());
        let plots = task_plots(Task::ExplaGraphs, &rows).expect("plots");
        assert!(
            plots.iter().any(|(name, png)| name == "experts-explagraphs.png" && png.starts_with(b"\x89PNG")),
            "the LM's bars alone draw the plot"
        );
    }

    #[test]
    fn mixrag_learns_the_planted_relation_and_reports_its_ablations() {
        let enc = crate::graphqa::answer::tests::planted();
        let graphs: Vec<&EncodedGraph> = enc.graphs.iter().collect();
        let subs: HashMap<(u32, SubgraphMethod), Subgraph> =
            graphs.iter().map(|g| ((g.graph_id, SubgraphMethod::Pcst), Subgraph::whole(g.nodes.len(), g.edges.len()))).collect();
        let cfg = MixragConfig {
            seeds: vec![0, 1],
            hidden: Width::new(16),
            head_hidden: Width::new(16),
            train: TrainConfig { epochs: 15, patience: 15, lr: 5e-3, ..TrainConfig::default() },
            ablation_depths: vec![1, 3],
            ..MixragConfig::default()
        };
        let task = |units: &mut crate::shared::shards::Units| {
            run_task(&enc, &graphs, &subs, Task::ExplaGraphs, &cfg, None, (crate::shared::context::Progress { quiet: true }, units))
        };
        let run = || task(&mut crate::shared::shards::Units::new(Default::default(), None, None)).expect("run");
        let out = run();
        // A listing of the units trains no variant.
        let none = task(&mut crate::shared::shards::Units::listing(Default::default(), None)).expect("listing");
        assert!(none.predictions.is_empty() && none.curves.is_empty() && none.gates.is_empty() && !out.predictions.is_empty());
        let acc = |m: &str| {
            let p: Vec<&Prediction> = out.predictions.iter().filter(|p| p.method == m && graphs[p.graph].split == "test").collect();
            p.iter().filter(|p| p.correct).count() as f64 / p.len().max(1) as f64
        };
        assert!(acc("mixrag") >= 0.85, "mixrag reads the relation off the graph: {}", acc("mixrag"));
        let mut gt = BTreeMap::new();
        gt.insert("test".to_string(), (0.5, 0.1, 20, 2));
        let rows = ablations("ds", Task::ExplaGraphs, &graphs, &out, &cfg, &gt);
        let find = |ab: &str, set: &str| rows.iter().find(|r| r.ablation == ab && r.setting == set && r.split == "test" && r.group == "*");
        assert_eq!(find("experts", "entity+relation+subgraph").map(|r| r.seeds), Some(2));
        assert!((find("experts", "entity+relation+subgraph").map_or(0.0, |r| r.mean) - acc("mixrag")).abs() < 1e-9);
        assert!(find("depth", "1").is_some() && find("depth", "3").is_some() && find("experts", "relation").is_some());
        assert_eq!(find("encoder", "graph-transformer").map(|r| r.mean), Some(0.5));
        // Gate weights: one distribution per expert, summing to 1 over the experts.
        let gates: Vec<&AblationRow> = rows.iter().filter(|r| r.ablation == "gate" && r.split == "test" && r.group == "*").collect();
        assert_eq!(gates.len(), 3);
        assert!((gates.iter().map(|r| r.mean).sum::<f64>() - 1.0).abs() < 1e-4);
        assert!(ablation_batch(&rows).is_ok() && !task_plots(Task::ExplaGraphs, &rows).expect("plots").is_empty());
        // Deterministic.
        let again = run();
        assert_eq!(out.predictions, again.predictions);
    }
}
