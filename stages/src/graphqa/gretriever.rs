//! `gretriever`: G-Retriever and Efficient G-Retriever answered without an LLM, with baselines.
//!
//! Methods, per task (ExplaGraphs, SceneGraphs, WebQSP) and seed:
//! * `gretriever-<encoder>` (`gt`, `gat`, `gcn`): the encoder over the `pcst` subgraph (ExplaGraphs:
//!   the whole graph), mean pooling, and the trained answer head of [`tgrag_models::graphqa`];
//! * `efficient-gretriever`: Efficient G-Retriever's encoder (`gt2`, attention pooling) over the
//!   `attention` subgraph;
//! * `whole-graph`: the `gt` encoder over the whole graph (no retrieval; not run on ExplaGraphs,
//!   where it is `gretriever-gt`);
//! * `gretriever-minilm` (classification tasks): a MiniLM cross-encoder reads the question and the
//!   `pcst` subgraph as text, as G-Retriever's LLM reads them ([`crate::graphqa::texthead`]; its top
//!   `text_layers` layers fine-tuned);
//! * `no-graph`: the question alone (classification: an MLP on its embedding; WebQSP: the node most
//!   similar to the question, untrained);
//! * `majority`: the most frequent training answer (classification tasks).
//!
//! Metrics in `scores` per method, split (`val`, `test`) and seed: `accuracy` (ExplaGraphs,
//! SceneGraphs: the predicted class is the answer; an answer never seen in training is a miss), or
//! `hit1` (WebQSP: the top-scored node is an answer) and `loose_hit` (G-Retriever's: an answer,
//! normalised, is a substring of the top node's text); then the mean over seeds (seed null) and
//! `<metric>_std` (sample standard deviation, with two seeds or more). Settings are chosen on validation only; the test
//! rows are reported, never used.

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_models::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
use tgrag_models::graphqa::{GraphQa, HeadKind, QaConfig, QaExample, QaShape, correct, predict, train};
use tgrag_models::train::TrainConfig;

pub use crate::graphqa::answer::{Prediction, classes, example, loose_hit, normalise, predictions_batch, read_subgraphs, task_scores};
use crate::graphqa::data::{Task, scored_dataset};
use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::{Subgraph, SubgraphMethod, cosines};
use crate::shared::curves::Curves;
use crate::shared::scores::Scores;
use crate::stage::Width;
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `gretriever` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GretrieverConfig {
    /// Seeds: every trained method runs once per seed. One by default (the demo and a first
    /// look); `make graphqa` and the nightly run seeds 0–3 and report mean ± std.
    pub seeds: Vec<u64>,
    /// G-Retriever's encoders over the PCST subgraphs.
    pub encoders: Vec<EncoderKind>,
    /// Also train Efficient G-Retriever (`efficient-gretriever`: gt2 with attention pooling over the
    /// attention subgraph).
    pub efficient: bool,
    /// Also train the `whole-graph` baseline (the graph transformer over the whole graph; not on
    /// ExplaGraphs, whose graphs are the subgraphs).
    pub whole_graph: bool,
    /// Hidden width of the graph encoders.
    pub hidden: Width,
    /// Layers of the graph encoders.
    pub layers: usize,
    /// Attention heads of the GAT and graph-transformer encoders.
    pub heads: usize,
    /// Hidden width of the answer head (an MLP over the graph vector and the question).
    pub head_hidden: Width,
    /// The training settings (`lr`, `weight_decay`, `clip`, `batch`, `epochs`, `patience`: options of
    /// this stage under the same names).
    #[serde(flatten)]
    pub train: TrainConfig,
    /// The MiniLM text head (`gretriever-minilm`) on classification tasks: off by default (minutes
    /// per seed on 2 cores); `make graphqa` turns it on for ExplaGraphs. Needs the model (`make models`).
    pub text_head: bool,
    /// Top MiniLM layers fine-tuned by the text head (`gretriever-minilm`).
    pub text_layers: usize,
    /// Epochs of the text head.
    pub text_epochs: usize,
    /// Learning rate of the text head.
    pub text_lr: f64,
    /// Batch size of the text head.
    pub text_batch: usize,
    /// MiniLM model folder of the text head and the default language model; default
    /// `$TGRAG_MODELS/all-MiniLM-L6-v2` or `weights/all-MiniLM-L6-v2`.
    #[serde(default)]
    pub model_dir: Option<String>,
    /// The language-model rows (`lm_rows`: `prompt-tuning`, `graphtoken`, `g-retriever`, `lora`,
    /// `g-retriever-lora`, `full`, `g-retriever-full`, and Efficient G-Retriever's `efficient-g-retriever`,
    /// `efficient-g-retriever-lora`, `efficient-g-retriever-full`) and their settings (`lm_lr_frozen`, `lm_lr_lora`, `lm_lr_full`, `lm_epochs`, …),
    /// classification tasks only ([`crate::graphqa::lm`]). None by default. Needs the model.
    pub lm_rows: Vec<crate::graphqa::lm::LmRow>,
    #[serde(flatten)]
    pub lm: crate::graphqa::lm::LmSettings,
    /// Where the encoders, heads and the text head train: `cpu`, `gpu` (burn on wgpu) or `auto`.
    #[serde(default)]
    pub device: tgrag_models::DeviceChoice,
}

impl Default for GretrieverConfig {
    fn default() -> Self {
        GretrieverConfig {
            seeds: vec![0],
            encoders: vec![EncoderKind::Gt, EncoderKind::Gat, EncoderKind::Gcn],
            efficient: true,
            whole_graph: true,
            hidden: const { Width::new(256) },
            layers: 4,
            heads: 4,
            head_hidden: const { Width::new(256) },
            train: TrainConfig { epochs: 20, ..TrainConfig::default() },
            text_head: false,
            text_layers: 2,
            text_epochs: 5,
            text_lr: 1e-4,
            text_batch: 16,
            model_dir: None,
            lm_rows: Vec::new(),
            lm: crate::graphqa::lm::LmSettings::default(),
            device: tgrag_models::DeviceChoice::Cpu,
        }
    }
}

impl GretrieverConfig {
    /// The graph encoder `kind` with `pooling` at this stage's sizes, over `dim`-wide node and edge
    /// features.
    fn encoder(&self, kind: EncoderKind, pooling: Pooling, dim: usize) -> EncoderShape {
        EncoderShape { kind, in_dim: dim, edge_dim: dim, hidden: self.hidden.get(), layers: self.layers, heads: self.heads, pooling }
    }
}

pub struct GretrieverStage;

static INFO: StageInfo = StageInfo {
    name: "gretriever",
    module: module_path!(),
    version: 1,
    about: "G-Retriever (GT/GAT/GCN over PCST subgraphs) and Efficient G-Retriever (gt2 over attention subgraphs) with trained answer heads instead of an LLM; baselines no-graph, majority, whole-graph",
    deps: &["textgraphs", "subgraphs"],
    needs: &[("textgraphs", "textgraph_questions")],
    excludes: &[],
    collects: &[],
    outputs: &["predictions", "curves", "scores"],
    files: &[],
    shards: Some(crate::ShardPhase::Units("language-model rows (one unit per row and seed)")),
};

/// A trained (or rule) method: its name, the subgraph it reads and its encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct Method {
    pub name: String,
    /// The subgraph it reads.
    pub subgraph: SubgraphMethod,
    pub encoder: Option<(EncoderKind, Pooling)>,
}

/// The trained methods of a task under `cfg`.
pub fn methods(task: Task, cfg: &GretrieverConfig) -> Vec<Method> {
    let mut m: Vec<Method> = cfg
        .encoders
        .iter()
        .map(|&k| Method { name: format!("gretriever-{}", k.as_str()), subgraph: SubgraphMethod::Pcst, encoder: Some((k, Pooling::Mean)) })
        .collect();
    if cfg.efficient {
        m.push(Method {
            name: "efficient-gretriever".into(),
            subgraph: SubgraphMethod::Attention,
            encoder: Some((EncoderKind::Gt2, Pooling::Attention)),
        });
    }
    if cfg.whole_graph && task != Task::ExplaGraphs {
        m.push(Method { name: "whole-graph".into(), subgraph: SubgraphMethod::Whole, encoder: Some((EncoderKind::Gt, Pooling::Mean)) });
    }
    if task != Task::WebQsp {
        m.push(Method { name: "no-graph".into(), subgraph: SubgraphMethod::Whole, encoder: None });
    }
    m
}

/// Everything one task's evaluation produced.
pub struct TaskResult {
    pub predictions: Vec<Prediction>,
    pub curves: Curves,
}

/// One task's questions as the methods see them: the class names, the splits and the subgraphs.
struct TaskData<'a> {
    enc: &'a EncodedGraphs,
    graphs: &'a [&'a EncodedGraph],
    subs: &'a HashMap<(u32, SubgraphMethod), Subgraph>,
    task: Task,
    class_names: Vec<String>,
    class_of: HashMap<String, u32>,
    /// Indices into `graphs`: training, validation, and evaluated (validation and test) questions.
    tr: Vec<usize>,
    va: Vec<usize>,
    eval: Vec<usize>,
}

impl<'a> TaskData<'a> {
    /// The task's data; every (question, method) the trained methods read must have been retrieved.
    fn new(
        enc: &'a EncodedGraphs,
        graphs: &'a [&'a EncodedGraph],
        subs: &'a HashMap<(u32, SubgraphMethod), Subgraph>,
        task: Task,
        cfg: &GretrieverConfig,
    ) -> Result<Self> {
        let mut read: Vec<SubgraphMethod> = methods(task, cfg).iter().map(|m| m.subgraph).collect();
        if task != Task::WebQsp {
            // The language-model rows' subgraphs.
            read.extend(cfg.lm_rows.iter().map(|r| lm_source(r.efficient()).0));
        }
        read.retain(|&m| m != SubgraphMethod::Whole);
        for g in graphs {
            for &m in &read {
                if !subs.contains_key(&(g.graph_id, m)) {
                    return Err(StageError::Input(format!("graph {}: no `{m}` subgraph in the subgraphs stage's tables", g.graph_id)));
                }
            }
        }
        let class_names = classes(graphs);
        let class_of = class_names.iter().enumerate().map(|(i, c)| (c.clone(), i as u32)).collect();
        let idx = |split: &str| -> Vec<usize> { (0..graphs.len()).filter(|&i| graphs[i].split == split).collect() };
        let (tr, va) = (idx("train"), idx("val"));
        let eval = (0..graphs.len()).filter(|&i| graphs[i].split == "val" || graphs[i].split == "test").collect();
        Ok(TaskData { enc, graphs, subs, task, class_names, class_of, tr, va, eval })
    }

    /// The subgraph `m` reads of `g` (the whole graph for [`SubgraphMethod::Whole`]).
    fn sub_of(&self, g: &EncodedGraph, m: SubgraphMethod) -> Subgraph {
        if m == SubgraphMethod::Whole {
            Subgraph::whole(g.nodes.len(), g.edges.len())
        } else {
            self.subs.get(&(g.graph_id, m)).cloned().unwrap_or_default()
        }
    }

    /// The answer-model examples of questions `ids` through method `m`'s subgraph.
    fn examples(&self, ids: &[usize], m: SubgraphMethod) -> Vec<QaExample> {
        let class_of: HashMap<&str, u32> = self.class_of.iter().map(|(c, &i)| (c.as_str(), i)).collect();
        ids.iter().map(|&i| example(self.enc, self.graphs[i], &self.sub_of(self.graphs[i], m), &class_of)).collect()
    }

    /// A prediction of question `i` whose answer text is `text`.
    fn prediction(&self, i: usize, method: &str, seed: Option<u64>, text: String, correct: bool) -> Prediction {
        Prediction { graph: i, method: method.into(), seed, loose: loose_hit(&text, &self.graphs[i].answer), text, correct }
    }
}

/// Step: every method of one task (`graphs` all of that task), each seed trained in parallel.
pub fn run_task(
    enc: &EncodedGraphs,
    graphs: &[&EncodedGraph],
    subs: &HashMap<(u32, SubgraphMethod), Subgraph>,
    task: Task,
    cfg: &GretrieverConfig,
    (text_model, lm_model): (Option<&tgrag_models::minilm::MiniLm>, Option<&tgrag_models::minilm::MiniLm>),
    (progress, units): (crate::shared::context::Progress, &mut crate::shared::shards::Units),
) -> Result<TaskResult> {
    let d = TaskData::new(enc, graphs, subs, task, cfg)?;
    // A shard run does its language-model rows alone; the trained methods only where those rows
    // start from them (`lm_graph_init=trained`). A listing trains nothing.
    let shard = units.in_shard();
    let mut out = TaskResult { predictions: if shard { Vec::new() } else { rule_predictions(&d) }, curves: Curves::default() };
    let trained = if units.is_listing() || (shard && cfg.lm.experimental.lm_graph_init != crate::graphqa::lm::GraphInit::Trained) {
        Vec::new()
    } else {
        trained_methods(&d, cfg, &mut out)?
    };
    if task != Task::WebQsp {
        if let (Some(bert), true, false) = (text_model, cfg.text_head, shard) {
            text_head(&d, cfg, bert, progress, &mut out)?;
        }
        // The language-model rows read `lm` when it is set, else MiniLM.
        if let Some(bert) = lm_model.or(text_model) {
            lm_rows(&d, cfg, bert, trained, (progress, units), &mut out)?;
        }
    }
    Ok(out)
}

/// The untrained rules: WebQSP's node most similar to the question (`no-graph`), the classification
/// tasks' most frequent training answer (`majority`).
fn rule_predictions(d: &TaskData<'_>) -> Vec<Prediction> {
    let (enc, graphs) = (d.enc, d.graphs);
    if d.task == Task::WebQsp {
        return d
            .eval
            .iter()
            .map(|&i| {
                let g = graphs[i];
                let scores = cosines(enc.vec(g.question), &enc.rows(g.nodes.iter().copied()), enc.dim);
                let top = (0..scores.len()).max_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(b.cmp(&a)));
                let text = top.map(|v| enc.texts[g.nodes[v] as usize].clone()).unwrap_or_default();
                let right = top.is_some_and(|v| enc.answer_nodes(g).contains(&(v as u32)));
                d.prediction(i, "no-graph", None, text, right)
            })
            .collect();
    }
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for &i in &d.tr {
        *count.entry(graphs[i].answer.as_str()).or_default() += 1;
    }
    let majority = count.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|x| x.0.to_string()).unwrap_or_default();
    d.eval.iter().map(|&i| d.prediction(i, "majority", None, majority.clone(), graphs[i].answer == majority)).collect()
}

/// The trained methods, every (method, seed) a job run in parallel; their curves and predictions
/// in job order. Returns the models the language-model rows start their graph token from
/// (`lm_graph_init=trained`), each with the subgraph it read; none otherwise.
fn trained_methods(
    d: &TaskData<'_>,
    cfg: &GretrieverConfig,
    out: &mut TaskResult,
) -> Result<Vec<(SubgraphMethod, EncoderShape, u64, GraphQa)>> {
    let (enc, task) = (d.enc, d.task);
    let jobs: Vec<(Method, u64)> = methods(task, cfg).into_iter().flat_map(|m| cfg.seeds.iter().map(move |&s| (m.clone(), s))).collect();
    let dev = cfg.device.device();
    let results = jobs
        .par_iter()
        .map(|(m, seed)| {
            let (train_x, val_x, eval_x) = (d.examples(&d.tr, m.subgraph), d.examples(&d.va, m.subgraph), d.examples(&d.eval, m.subgraph));
            let head = if task == Task::WebQsp { HeadKind::Nodes } else { HeadKind::Classify { classes: d.class_names.len() } };
            let encoder = m.encoder.map(|(kind, pooling)| cfg.encoder(kind, pooling, enc.dim));
            let shape = QaShape { encoder, question_dim: enc.dim, head, head_hidden: cfg.head_hidden.get() };
            let qcfg = QaConfig { train: cfg.train.clone(), head_hidden: cfg.head_hidden.get(), seed: *seed };
            let (model, curve, best) = train(shape, &train_x, &val_x, enc.dim, enc.dim, &qcfg, &dev)
                .map_err(|e| StageError::training(INFO.name, &format!("{} on {}", m.name, task.as_str()), e))?;
            let pred = predict(&model, &shape, &eval_x, enc.dim, enc.dim, 64, &dev)?;
            let read_by_rows = cfg.lm_rows.iter().any(|r| {
                let (subgraph, kind, pooling) = lm_source(r.efficient());
                m.subgraph == subgraph && m.encoder == Some((kind, pooling))
            });
            let keep = encoder.filter(|_| read_by_rows && cfg.lm.experimental.lm_graph_init == crate::graphqa::lm::GraphInit::Trained);
            Ok::<_, StageError>((curve, best, eval_x, pred, keep.map(|e| (m.subgraph, e, *seed, model))))
        })
        .collect::<Vec<_>>();
    let mut kept = Vec::new();
    for ((m, seed), r) in jobs.iter().zip(results) {
        let (curve, best, eval_x, pred, keep) = r?;
        kept.extend(keep);
        for c in &curve {
            let metrics = [("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metric", c.val_metric)];
            out.curves.push(&m.name, task.as_str(), *seed, c.epoch, c.epoch == best, &metrics);
        }
        for ((&i, x), &p) in d.eval.iter().zip(&eval_x).zip(&pred) {
            let g = d.graphs[i];
            let text = match task {
                Task::WebQsp => {
                    let sub = d.sub_of(g, m.subgraph);
                    sub.nodes.get(p as usize).map(|&v| enc.texts[g.nodes[v as usize] as usize].clone()).unwrap_or_default()
                }
                _ => d.class_names.get(p as usize).cloned().unwrap_or_default(),
            };
            out.predictions.push(d.prediction(i, &m.name, Some(*seed), text, correct(x, p)));
        }
    }
    Ok(kept)
}

/// The MiniLM text head over the question and the `pcst` subgraph (classification tasks), per seed.
fn text_head(
    d: &TaskData<'_>,
    cfg: &GretrieverConfig,
    bert: &tgrag_models::minilm::MiniLm,
    progress: crate::shared::context::Progress,
    out: &mut TaskResult,
) -> Result<()> {
    let (graphs, task) = (d.graphs, d.task);
    let texts: Vec<String> = graphs.iter().map(|g| crate::graphqa::texthead::text(d.enc, g, &d.sub_of(g, SubgraphMethod::Pcst))).collect();
    let st = crate::graphqa::texthead::states(bert, cfg.text_layers, &texts, progress)?;
    let label = |i: usize| d.class_of.get(graphs[i].answer.as_str()).copied();
    let pick = |ids: &[usize]| -> (Vec<Vec<f32>>, Vec<u32>) { ids.iter().filter_map(|&i| label(i).map(|y| (st[i].clone(), y))).unzip() };
    let (trs, try_) = pick(&d.tr);
    let (vas, vay) = pick(&d.va);
    let eval_states: Vec<Vec<f32>> = d.eval.iter().map(|&i| st[i].clone()).collect();
    let dev = cfg.device.device();
    for &seed in &cfg.seeds {
        let tcfg = tgrag_models::minilm::tune::TuneConfig {
            layers: cfg.text_layers,
            epochs: cfg.text_epochs,
            batch: cfg.text_batch,
            lr: cfg.text_lr,
            seed,
        };
        let (pred, curve, best) =
            crate::graphqa::texthead::train_and_predict(bert, d.class_names.len(), (&trs, &try_), (&vas, &vay), &eval_states, &tcfg, &dev)
                .map_err(|e| match e {
                    StageError::Model(e) => StageError::training(INFO.name, &format!("gretriever-minilm on {}", task.as_str()), e),
                    e => e,
                })?;
        for c in &curve {
            let metrics = [("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metric", c.val_accuracy)];
            out.curves.push("gretriever-minilm", task.as_str(), seed, c.epoch, c.epoch == best, &metrics);
        }
        for (&i, &p) in d.eval.iter().zip(&pred) {
            let text = d.class_names.get(p as usize).cloned().unwrap_or_default();
            out.predictions.push(d.prediction(i, "gretriever-minilm", Some(seed), text, label(i) == Some(p)));
        }
    }
    Ok(())
}

/// What a language-model row's graph token reads (`efficient`: [`crate::graphqa::lm::LmRow::efficient`]):
/// Efficient G-Retriever's `gt2` with attention pooling over the attention subgraph, else
/// G-Retriever's graph transformer, mean-pooled, over PCST's.
fn lm_source(efficient: bool) -> (SubgraphMethod, EncoderKind, Pooling) {
    if efficient {
        (SubgraphMethod::Attention, EncoderKind::Gt2, Pooling::Attention)
    } else {
        (SubgraphMethod::Pcst, EncoderKind::Gt, Pooling::Mean)
    }
}

/// The language-model rows (classification tasks), per row and seed: G-Retriever's graph
/// transformer (mean-pooled) over the `pcst` subgraph, or for Efficient G-Retriever's rows `gt2`
/// with attention pooling over the `attention` subgraph; that subgraph's textualisation and the
/// question are read by the language model. `trained`: the trained methods' models a row of
/// `lm_graph_init=trained` starts from ([`trained_methods`]).
fn lm_rows(
    d: &TaskData<'_>,
    cfg: &GretrieverConfig,
    bert: &tgrag_models::minilm::MiniLm,
    mut trained: Vec<(SubgraphMethod, EncoderShape, u64, GraphQa)>,
    (progress, units): (crate::shared::context::Progress, &mut crate::shared::shards::Units),
    out: &mut TaskResult,
) -> Result<()> {
    use crate::graphqa::lm;
    let (graphs, task, enc) = (d.graphs, d.task, d.enc);
    for efficient in [false, true] {
        let rows: Vec<lm::LmRow> = cfg.lm_rows.iter().copied().filter(|r| r.efficient() == efficient).collect();
        if rows.is_empty() {
            continue;
        }
        let (subgraph, kind, pooling) = lm_source(efficient);
        let read = |ids: &[usize]| -> Result<Vec<tgrag_models::graphqa::lm::LmExample>> {
            let descs: Vec<String> = ids.iter().map(|&i| lm::desc(enc, graphs[i], &d.sub_of(graphs[i], subgraph))).collect();
            let questions: Vec<String> = ids.iter().map(|&i| enc.texts[graphs[i].question as usize].clone()).collect();
            lm::examples(bert, d.examples(ids, subgraph), &descs, &questions)
        };
        let (train_x, val_x, eval_x) = (read(&d.tr)?, read(&d.va)?, read(&d.eval)?);
        let specs: Vec<lm::RowSpec> = rows.iter().map(|r| r.spec(&cfg.lm, cfg.encoder(kind, pooling, enc.dim))).collect();
        let run = lm::RowsRun {
            stage: INFO.name,
            task: task.as_str(),
            classes: d.class_names.len(),
            settings: &cfg.lm,
            base: &cfg.train,
            head_hidden: cfg.head_hidden.get(),
        };
        let sets = (train_x.as_slice(), val_x.as_slice(), eval_x.as_slice());
        // The answer-head models the trained methods left over these same questions.
        let mut starts = lm::Starts::default();
        for (_, e, seed, model) in trained.extract_if(.., |t| t.0 == subgraph) {
            starts.keep(e, seed, model);
        }
        let TaskResult { predictions, curves } = &mut *out;
        lm::run_rows(
            bert,
            &run,
            &specs,
            &cfg.seeds,
            sets,
            (&mut starts, &mut *units),
            &cfg.device.device(),
            progress,
            curves,
            |method, seed, predicted| {
                for ((&i, x), &p) in d.eval.iter().zip(&eval_x).zip(predicted) {
                    let text = d.class_names.get(p as usize).cloned().unwrap_or_default();
                    predictions.push(d.prediction(i, method, Some(seed), text, correct(&x.qa, p)));
                }
            },
        )?;
    }
    Ok(())
}

impl StageSpec for GretrieverStage {
    type Config = GretrieverConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &GretrieverConfig) -> std::result::Result<(), String> {
        if c.seeds.is_empty()
            || c.hidden.get() == 0
            || c.layers == 0
            || c.heads == 0
            || !c.hidden.get().is_multiple_of(c.heads)
            || c.train.batch == 0
            || c.train.epochs == 0
            || c.head_hidden.get() == 0
        {
            return Err("seeds must be non-empty; hidden, layers, heads, batch, epochs, head_hidden ≥ 1; hidden a multiple of heads".into());
        }
        if !(c.train.lr > 0.0 && c.train.lr.is_finite() && c.text_lr > 0.0 && c.text_lr.is_finite()) {
            return Err("lr and text_lr must be > 0".into());
        }
        c.train.validate()?;
        if !c.lm_rows.is_empty() {
            c.lm.validate()?;
        }
        if c.text_head && (c.text_layers == 0 || c.text_layers > 6 || c.text_epochs == 0 || c.text_batch == 0) {
            return Err("with text_head: text_layers within 1..=6, text_epochs and text_batch ≥ 1".into());
        }
        Ok(())
    }
    fn model(c: &GretrieverConfig) -> Option<crate::ModelNeed> {
        (c.text_head || (!c.lm_rows.is_empty() && c.lm.backbone.is_none())).then(|| crate::ModelNeed {
            model_dir: c.model_dir.clone(),
            instead: "gretriever.text_head=false gretriever.lm_rows=[]".into(),
        })
    }
    fn backbone(c: &GretrieverConfig) -> Option<String> {
        c.lm.backbone.clone().filter(|_| !c.lm_rows.is_empty())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: GretrieverConfig) -> Result<()> {
        let enc = ctx.timed("load", |c| EncodedGraphs::load(c))?;
        let subs = read_subgraphs(
            &ctx.input("subgraphs", "subgraph_nodes")?,
            &ctx.input("subgraphs", "subgraph_edges")?,
            &ctx.input("subgraphs", "subgraph_summary")?,
        )?;
        let dataset = ctx.dataset.name.clone();
        let classify = enc.graphs.iter().any(|g| g.task != Task::WebQsp);
        let lm_rows = classify && !cfg.lm_rows.is_empty();
        let needs_text = classify && (cfg.text_head || (lm_rows && cfg.lm.backbone.is_none()));
        let text_model = if needs_text {
            Some(ctx.timed("load MiniLM", |_| {
                crate::shared::encoders::load_minilm_burn(cfg.model_dir.as_deref(), cfg.device, "--set gretriever.text_head=false")
            })?)
        } else {
            None
        };
        let lm_model = match (&cfg.lm.backbone, lm_rows) {
            (Some(spec), true) => Some(ctx.timed("load the language model", |_| crate::shared::encoders::load_backbone(spec, cfg.device))?),
            _ => None,
        };
        let progress = ctx.progress;
        let mut by_task: BTreeMap<&str, Vec<&EncodedGraph>> = BTreeMap::new();
        for g in &enc.graphs {
            by_task.entry(g.task.as_str()).or_default().push(g);
        }
        let mut curves = Curves::default();
        let mut parts = Vec::new();
        let mut pred_parts = Vec::new();
        let mut units = ctx.units();
        for (task_name, graphs) in &by_task {
            let task = Task::parse(task_name).unwrap_or(Task::SceneGraphs);
            crate::graphqa::data::require_splits(INFO.name, &dataset, task, graphs.iter().map(|g| g.split.as_str()))?;
            let r = ctx.timed(&format!("train + answer {task_name}"), |_| {
                run_task(&enc, graphs, &subs, task, &cfg, (text_model.as_ref(), lm_model.as_ref()), (progress, &mut units))
            })?;
            if units.in_shard() {
                continue;
            }
            let mut scores = Scores::new(&scored_dataset(&dataset, task), INFO.name);
            task_scores(&dataset, task, graphs, &r.predictions, &mut scores);
            parts.push(scores.batch()?);
            pred_parts.push(predictions_batch(graphs, &r.predictions)?);
            curves.extend(r.curves);
        }
        ctx.end_units(units)?;
        if ctx.partial() {
            // A shard run (its rows are in its partition) or a listing: the full run writes the tables.
            return Ok(());
        }
        let predictions = match pred_parts.first() {
            Some(first) => arrow::compute::concat_batches(&first.schema(), &pred_parts)?,
            None => predictions_batch(&[], &[])?,
        };
        let scores = arrow::compute::concat_batches(&tgrag_schemas::tables::SCORES.schema(), &parts)?;
        ctx.write("predictions", &predictions)?;
        ctx.write("curves", &curves.batch()?)?;
        ctx.write("scores", &scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgrag_schemas::columns;

    /// `--set gretriever.lm=<id>` names the language model of the language-model rows: it is the
    /// stage's backbone (checked before the run, digested into its cache key) and MiniLM is then
    /// needed only by the text head; without rows it names nothing.
    #[test]
    fn the_lm_option_names_the_backbone_of_the_language_model_rows() {
        let parse = |v: serde_json::Value| -> GretrieverConfig {
            let mut base = serde_json::to_value(GretrieverConfig::default()).expect("json");
            for (k, x) in v.as_object().expect("object") {
                base[k] = x.clone();
            }
            serde_json::from_value(base).expect("config")
        };
        let id = "sentence-transformers/all-roberta-large-v1";
        let c = parse(serde_json::json!({ "lm": id, "lm_rows": ["g-retriever-lora"] }));
        assert_eq!(GretrieverStage::backbone(&c).as_deref(), Some(id));
        assert!(GretrieverStage::model(&c).is_none(), "MiniLM is not needed");
        let c = parse(serde_json::json!({ "lm": id, "lm_rows": ["lora"], "text_head": true }));
        assert!(GretrieverStage::model(&c).is_some(), "the text head still reads MiniLM");
        let c = parse(serde_json::json!({ "lm": id }));
        assert_eq!(GretrieverStage::backbone(&c), None, "no rows, no backbone");
        // Unset by default (`null`: an option `--set` knows).
        let default = serde_json::to_value(GretrieverConfig::default()).expect("json");
        assert_eq!(default.get("lm"), Some(&serde_json::Value::Null), "{default}");
    }

    #[test]
    fn loose_hits_normalise_as_g_retriever_does() {
        assert!(loose_hit("The United States of America!", "united states|canada"));
        assert!(!loose_hit("canad", "canada"));
        assert_eq!(normalise("An Apple, the pie"), "apple pie");
    }

    use crate::graphqa::answer::tests::planted;

    #[test]
    fn a_graph_encoder_learns_what_the_graph_says_and_scores_have_seed_statistics() {
        let enc = planted();
        let graphs: Vec<&EncodedGraph> = enc.graphs.iter().collect();
        let cfg = GretrieverConfig {
            seeds: vec![0, 1],
            encoders: vec![EncoderKind::Gt],
            efficient: false,
            hidden: Width::new(16),
            layers: 2,
            heads: 2,
            head_hidden: Width::new(16),
            train: TrainConfig { lr: 5e-3, epochs: 25, patience: 25, ..TrainConfig::default() },
            ..GretrieverConfig::default()
        };
        assert!(
            run_task(
                &enc,
                &graphs,
                &HashMap::new(),
                Task::ExplaGraphs,
                &cfg,
                (None, None),
                (crate::shared::context::Progress { quiet: true }, &mut crate::shared::shards::Units::new(Default::default(), None, None)),
            )
            .is_err(),
            "a missing subgraph is an error, not an empty graph"
        );
        // ExplaGraphs' `pcst` subgraph is the whole graph.
        let subs: HashMap<(u32, SubgraphMethod), Subgraph> =
            graphs.iter().map(|g| ((g.graph_id, SubgraphMethod::Pcst), Subgraph::whole(g.nodes.len(), g.edges.len()))).collect();
        let task = |units: &mut crate::shared::shards::Units| {
            run_task(&enc, &graphs, &subs, Task::ExplaGraphs, &cfg, (None, None), (crate::shared::context::Progress { quiet: true }, units))
        };
        let r = task(&mut crate::shared::shards::Units::new(Default::default(), None, None)).expect("task");
        // A listing of the units trains nothing and answers nothing.
        let none = task(&mut crate::shared::shards::Units::listing(Default::default(), None)).expect("listing");
        assert!(none.predictions.is_empty() && none.curves.is_empty() && !r.predictions.is_empty());
        let acc = |m: &str, split: &str| {
            let p: Vec<&Prediction> = r.predictions.iter().filter(|p| p.method == m && graphs[p.graph].split == split).collect();
            p.iter().filter(|p| p.correct).count() as f64 / p.len().max(1) as f64
        };
        assert!(acc("gretriever-gt", "test") >= 0.9, "gt {}", acc("gretriever-gt", "test"));
        assert!(acc("no-graph", "test") <= 0.7, "no-graph {}", acc("no-graph", "test"));
        let support = graphs.iter().filter(|g| g.split == "test" && g.answer == "support").count() as f64
            / graphs.iter().filter(|g| g.split == "test").count() as f64;
        assert!((acc("majority", "test") - support).abs() < 1e-12, "majority answers `support`");
        // Two seeds: per-seed rows, then the mean and the standard deviation (seed null).
        let mut scores = Scores::new("explagraphs", "gretriever");
        task_scores("explagraphs", Task::ExplaGraphs, &graphs, &r.predictions, &mut scores);
        let b = scores.batch().expect("scores");
        let (m, split, metric, seed) = (
            columns::strs(&b, "method").expect("m"),
            columns::strs(&b, "split").expect("s"),
            columns::strs(&b, "metric").expect("metric"),
            columns::u64s(&b, "seed").expect("seed"),
        );
        let rows: Vec<usize> = (0..b.num_rows()).filter(|&i| m.value(i) == "gretriever-gt" && split.value(i) == "test").collect();
        assert_eq!(rows.len(), 4, "seed 0, seed 1, mean, std");
        assert_eq!(rows.iter().filter(|&&i| arrow::array::Array::is_null(seed, i)).count(), 2);
        assert!(rows.iter().any(|&i| metric.value(i) == "accuracy_std"));
        assert!(!r.curves.is_empty());
        // One seed: its row and the mean, no standard deviation (one value has none).
        let one: Vec<Prediction> = r.predictions.iter().filter(|p| p.seed != Some(1)).cloned().collect();
        let mut scores = Scores::new("explagraphs", "gretriever");
        task_scores("explagraphs", Task::ExplaGraphs, &graphs, &one, &mut scores);
        let b = scores.batch().expect("scores");
        let (m, metric) = (columns::strs(&b, "method").expect("m"), columns::strs(&b, "metric").expect("metric"));
        let gt: Vec<&str> = (0..b.num_rows()).filter(|&i| m.value(i) == "gretriever-gt").map(|i| metric.value(i)).collect();
        assert!(!gt.is_empty() && !gt.iter().any(|x| x.ends_with("_std")), "{gt:?}");
    }

    #[test]
    fn methods_per_task() {
        let cfg = GretrieverConfig::default();
        let names = |t| methods(t, &cfg).into_iter().map(|m| m.name).collect::<Vec<_>>();
        assert_eq!(names(Task::ExplaGraphs), ["gretriever-gt", "gretriever-gat", "gretriever-gcn", "efficient-gretriever", "no-graph"]);
        assert_eq!(names(Task::WebQsp), ["gretriever-gt", "gretriever-gat", "gretriever-gcn", "efficient-gretriever", "whole-graph"]);
    }
}
