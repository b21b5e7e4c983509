//! TopoRAG's task-oriented evaluation (paper §6.1.3, Table 3), used by the `toporag` stage: the
//! partially observed nodes' text features are rebuilt from their visible words plus the retrieved
//! texts (one feature set per retriever, plus `oracle`: the full hidden text), then
//!
//! * **node classification**: GCN, GraphSAGE and MLP ([`tgrag_models::gnn`]) trained on the
//!   labelled observed nodes (a seeded `val_fraction` of them for early stopping), tested on the
//!   labelled partial nodes: accuracy per retriever and model;
//! * **link prediction**: every edge with a partial end is a test positive (and removed from the
//!   GCN's graph), a seeded `lp_val_fraction` of the other edges validates, the rest train; test
//!   negatives pair a random partial node with a random node, validation negatives are random
//!   pairs, none of them an edge; Hits@100 per retriever.
//!
//! Every run is seeded and full-batch, so the tables are byte-identical for the same inputs. Every
//! (model, retriever) trains once per seed of `seeds` (the split stays that of `seed`); with several
//! seeds `scores` also holds the mean and the sample standard deviation (`<metric>_std`), as the
//! paper's Table 3 reports them. On the CPU the trainings run on [`tgrag_models::gnn::fast`] (host
//! buffers, hand-written backward pass, one training per core); on a GPU on the burn trainers.

use std::collections::HashSet;

use arrow::array::RecordBatch;
use rayon::prelude::*;
use tgrag_datasets::rng::Rng;
use tgrag_models::DeviceChoice;
use tgrag_models::gnn::{self, GnnKind, LinkPredConfig, NodeClassConfig, Trained};
use tgrag_schemas::rows::{self, Row, Rows};
use tgrag_schemas::tables;

use crate::shared::context::Progress;
use crate::shared::curves::Curves;
use crate::shared::scores::Scores;
use crate::{Result, StageError};

/// Hyper-parameters and sizes of the evaluation.
#[derive(Debug, Clone)]
pub struct TaskConfig {
    pub nc: NodeClassConfig,
    pub lp: LinkPredConfig,
    pub val_fraction: f64,
    pub lp_val_fraction: f64,
    pub lp_negatives: usize,
    /// The split's seed.
    pub seed: u64,
    /// Training seeds (weights, dropout, negatives).
    pub seeds: Vec<u64>,
    /// `cpu`: the host engine; `gpu`: burn on wgpu.
    pub device: DeviceChoice,
}

/// The graph and features the tasks run on (graph indices `0..n`).
pub struct TaskInputs<'a> {
    pub n: usize,
    pub edges: &'a [(u32, u32)],
    pub partial: &'a [bool],
    /// Class per node (`u32::MAX`: none) and the class count; `None` skips node classification.
    pub labels: Option<(&'a [u32], usize)>,
    pub dim: usize,
    /// `(retriever, features)`: row-major `n × dim`.
    pub features: &'a [(String, Vec<f32>)],
}

/// The three output tables (`curves` in the shared curve shape).
pub struct TaskTables {
    pub node_classification: RecordBatch,
    pub link_prediction: RecordBatch,
    pub curves: RecordBatch,
}

/// Node-classification index sets: (train, val, test).
pub fn class_split(labels: &[u32], partial: &[bool], val_fraction: f64, seed: u64) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut observed: Vec<u32> = (0..labels.len() as u32).filter(|&v| labels[v as usize] != u32::MAX && !partial[v as usize]).collect();
    let test = (0..labels.len() as u32).filter(|&v| labels[v as usize] != u32::MAX && partial[v as usize]).collect();
    Rng::new(seed ^ 0x6e63_7661).shuffle(&mut observed);
    let n_val = ((observed.len() as f64) * val_fraction).round() as usize;
    let mut val = observed[..n_val].to_vec();
    let mut train = observed[n_val..].to_vec();
    val.sort_unstable();
    train.sort_unstable();
    (train, val, test)
}

/// Link-prediction pairs: (message/train edges, val positives, val negatives, test positives,
/// test negatives).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSplit {
    pub message: Vec<(u32, u32)>,
    pub val_pos: Vec<(u32, u32)>,
    pub val_neg: Vec<(u32, u32)>,
    pub test_pos: Vec<(u32, u32)>,
    pub test_neg: Vec<(u32, u32)>,
}

pub fn link_split(n: usize, edges: &[(u32, u32)], partial: &[bool], cfg: &TaskConfig) -> LinkSplit {
    let key = |a: u32, b: u32| (a.min(b), a.max(b));
    let known: HashSet<(u32, u32)> = edges.iter().map(|&(a, b)| key(a, b)).collect();
    type Pairs = Vec<(u32, u32)>;
    let (test_pos, mut rest): (Pairs, Pairs) = edges.iter().copied().partition(|&(a, b)| partial[a as usize] || partial[b as usize]);
    let mut rng = Rng::new(cfg.seed ^ 0x6c70_7370);
    rng.shuffle(&mut rest);
    let n_val = if rest.len() > 1 { (((rest.len() as f64) * cfg.lp_val_fraction).round() as usize).max(1) } else { 0 };
    let val_pos = rest[..n_val].to_vec();
    let message = rest[n_val..].to_vec();
    let partials: Vec<u32> = (0..n as u32).filter(|&v| partial[v as usize]).collect();
    let mut negatives = |from_partial: bool| {
        let mut out = Vec::with_capacity(cfg.lp_negatives);
        // Bounded: a graph too dense for the requested negatives yields fewer.
        for _ in 0..cfg.lp_negatives.saturating_mul(20) {
            if out.len() == cfg.lp_negatives || n < 2 {
                break;
            }
            let a = if from_partial && !partials.is_empty() { partials[rng.below(partials.len())] } else { rng.below(n) as u32 };
            let b = rng.below(n) as u32;
            if a != b && !known.contains(&key(a, b)) {
                out.push((a, b));
            }
        }
        out
    };
    let val_neg = negatives(false);
    let test_neg = negatives(true);
    LinkSplit { message, val_pos, val_neg, test_pos, test_neg }
}

enum Job<'a> {
    Class(GnnKind, &'a str, &'a [f32], u64),
    Link(&'a str, &'a [f32], u64),
}

/// One row of `node_classification`: one (model, retriever, seed) training.
struct ClassRow<'a> {
    model: &'a str,
    retriever: &'a str,
    accuracy: f64,
    val_accuracy: f64,
    best_epoch: u32,
    epochs: u32,
    train_nodes: u32,
    test_nodes: u32,
    seed: u64,
}

impl Row for ClassRow<'_> {
    fn put(&self, out: &mut Rows) {
        out.put(self.model).put(self.retriever).put(self.accuracy).put(self.val_accuracy).put(self.best_epoch);
        out.put(self.epochs).put(self.train_nodes).put(self.test_nodes).put(self.seed);
    }
}

/// One row of `link_prediction`: one (retriever, seed) training.
struct LinkRow<'a> {
    retriever: &'a str,
    k: u32,
    hits: f64,
    val_hits: f64,
    best_epoch: u32,
    epochs: u32,
    test_edges: u32,
    test_negatives: u32,
    seed: u64,
}

impl Row for LinkRow<'_> {
    fn put(&self, out: &mut Rows) {
        out.put(self.retriever).put(self.k).put(self.hits).put(self.val_hits).put(self.best_epoch);
        out.put(self.epochs).put(self.test_edges).put(self.test_negatives).put(self.seed);
    }
}

/// Runs every training (in parallel, each deterministic), builds the tables and adds the results to
/// `scores`: per retriever (the method) and model (`group` = `model=…`), test and validation
/// accuracy (node classification) and Hits@K (link prediction).
pub fn evaluate(inp: &TaskInputs<'_>, cfg: &TaskConfig, progress: Progress, scores: &mut Scores) -> Result<TaskTables> {
    let class = inp.labels.map(|(labels, classes)| {
        let (train, val, test) = class_split(labels, inp.partial, cfg.val_fraction, cfg.seed);
        ClassSplit { labels, classes, train, val, test }
    });
    let class = class.filter(|c| c.classes >= 2 && !c.train.is_empty() && !c.test.is_empty());
    let links = link_split(inp.n, inp.edges, inp.partial, cfg);
    let jobs = jobs(inp, cfg, class.is_some(), &links);
    let results = train_all(&jobs, inp, cfg, class.as_ref(), &links, progress)?;
    tabulate(&jobs, &results, cfg, class.as_ref(), &links, scores)
}

/// The node-classification labels, class count and index sets.
struct ClassSplit<'a> {
    labels: &'a [u32],
    classes: usize,
    train: Vec<u32>,
    val: Vec<u32>,
    test: Vec<u32>,
}

/// Every training, in table order: per model, retriever and seed the node classifiers (when there
/// is a class split), then per retriever and seed the link predictors (when there are test pairs).
fn jobs<'a>(inp: &TaskInputs<'a>, cfg: &TaskConfig, classify: bool, links: &LinkSplit) -> Vec<Job<'a>> {
    let do_links = !links.test_pos.is_empty() && !links.message.is_empty() && !links.test_neg.is_empty();
    let mut jobs = Vec::new();
    if classify {
        for kind in GnnKind::ALL {
            for (name, f) in inp.features {
                jobs.extend(cfg.seeds.iter().map(|&s| Job::Class(kind, name.as_str(), f.as_slice(), s)));
            }
        }
    }
    if do_links {
        for (name, f) in inp.features {
            jobs.extend(cfg.seeds.iter().map(|&s| Job::Link(name.as_str(), f.as_slice(), s)));
        }
    }
    jobs
}

/// Where the trainings run: the graphs of the host engine (built once and shared by every
/// training), or burn on the device.
struct Engines {
    on_gpu: bool,
    dev: burn::tensor::Device,
    class_graph: gnn::fast::FastGraph,
    link_graph: gnn::fast::FastGraph,
}

/// Trains every job in parallel; the results in job order.
fn train_all(
    jobs: &[Job<'_>],
    inp: &TaskInputs<'_>,
    cfg: &TaskConfig,
    class: Option<&ClassSplit<'_>>,
    links: &LinkSplit,
    progress: Progress,
) -> Result<Vec<Trained>> {
    let engines = Engines {
        on_gpu: cfg.device.resolved() == DeviceChoice::Gpu,
        dev: cfg.device.device(),
        class_graph: gnn::fast::FastGraph::new(inp.n, inp.edges),
        link_graph: gnn::fast::FastGraph::new(inp.n, &links.message),
    };
    let pb = progress.bar(jobs.len() as u64, "toporag: train GNNs");
    let results: Vec<Trained> = jobs
        .par_iter()
        .map(|job| {
            let out = train_one(job, inp, cfg, class, links, &engines);
            pb.inc(1);
            // The model as the `curves` and `scores` tables name it.
            let model = match job {
                Job::Class(kind, features, ..) => format!("{} node classifier on {features} features", kind.as_str()),
                Job::Link(features, ..) => format!("link predictor on {features} features"),
            };
            out.map_err(|e| StageError::training("toporag", &model, e))
        })
        .collect::<Result<_>>()?;
    pb.finish_and_clear();
    Ok(results)
}

fn train_one(
    job: &Job<'_>,
    inp: &TaskInputs<'_>,
    cfg: &TaskConfig,
    class: Option<&ClassSplit<'_>>,
    links: &LinkSplit,
    e: &Engines,
) -> std::result::Result<Trained, tgrag_models::ModelError> {
    match (job, class) {
        (Job::Class(kind, _, f, seed), Some(c)) => {
            let data = gnn::NodeClassData {
                features: f,
                dim: inp.dim,
                labels: c.labels,
                classes: c.classes,
                train: &c.train,
                val: &c.val,
                test: &c.test,
            };
            let nc = NodeClassConfig { seed: *seed, ..cfg.nc.clone() };
            if e.on_gpu {
                gnn::train_node_classifier(*kind, inp.n, inp.edges, &data, &nc, &e.dev)
            } else {
                gnn::fast::train_node_classifier(*kind, inp.n, &e.class_graph, &data, &nc)
            }
        }
        (Job::Link(_, f, seed), _) => {
            let data = gnn::LinkPredData {
                features: f,
                dim: inp.dim,
                message: &links.message,
                val_pos: &links.val_pos,
                val_neg: &links.val_neg,
                test_pos: &links.test_pos,
                test_neg: &links.test_neg,
            };
            let lp = LinkPredConfig { seed: *seed, ..cfg.lp.clone() };
            if e.on_gpu {
                gnn::train_link_predictor(inp.n, &data, &lp, &e.dev)
            } else {
                gnn::fast::train_link_predictor(inp.n, &e.link_graph, &data, &lp)
            }
        }
        (Job::Class(..), None) => Err(tgrag_models::ModelError::Internal("classification without labels".into())),
    }
}

/// (retriever, split, group, metric): the scores whose mean and std over seeds are reported.
type SeedKey<'a> = (&'a str, &'a str, String, &'a str);

/// The tables of the trainings, and their scores (per seed, then the mean and std over seeds).
fn tabulate(
    jobs: &[Job<'_>],
    results: &[Trained],
    cfg: &TaskConfig,
    class: Option<&ClassSplit<'_>>,
    links: &LinkSplit,
    scores: &mut Scores,
) -> Result<TaskTables> {
    let (mut nc_rows, mut lp_rows): (Vec<ClassRow>, Vec<LinkRow>) = (Vec::new(), Vec::new());
    let mut curves = Curves::default();
    let hits = format!("hits_at_{}", cfg.lp.hits_k);
    // (retriever, split, group, metric) → (per-seed values, n), for the mean and std over seeds.
    let mut by_seed: Vec<(SeedKey, Vec<f64>, u64)> = Vec::new();
    for (job, t) in jobs.iter().zip(results) {
        let (task, model, ret, seed) = match job {
            Job::Class(kind, name, _, seed) => {
                let Some(c) = class else {
                    return Err(StageError::Internal("a node-classification training without a class split".into()));
                };
                nc_rows.push(ClassRow {
                    model: kind.as_str(),
                    retriever: name,
                    accuracy: t.test_metric,
                    val_accuracy: t.val_metric,
                    best_epoch: t.best_epoch,
                    epochs: t.curve.len() as u32,
                    train_nodes: c.train.len() as u32,
                    test_nodes: c.test.len() as u32,
                    seed: *seed,
                });
                ("node_classification", kind.as_str(), *name, *seed)
            }
            Job::Link(name, _, seed) => {
                lp_rows.push(LinkRow {
                    retriever: name,
                    k: cfg.lp.hits_k as u32,
                    hits: t.test_metric,
                    val_hits: t.val_metric,
                    best_epoch: t.best_epoch,
                    epochs: t.curve.len() as u32,
                    test_edges: links.test_pos.len() as u32,
                    test_negatives: links.test_neg.len() as u32,
                    seed: *seed,
                });
                ("link_prediction", "gcn-mlp", *name, *seed)
            }
        };
        let (metric, n_test, n_val) = match job {
            Job::Class(..) => ("accuracy", class.map_or(0, |c| c.test.len()), class.map_or(0, |c| c.val.len())),
            Job::Link(..) => (hits.as_str(), links.test_pos.len(), links.val_pos.len()),
        };
        let group = format!("model={model}");
        for (split, value, n) in [("test", t.test_metric, n_test), ("val", t.val_metric, n_val)] {
            scores.push(ret, split, &group, metric, value, n as u64, Some(seed));
            let key = (ret, split, group.clone(), metric);
            match by_seed.iter_mut().find(|x| x.0 == key) {
                Some(x) => x.1.push(value),
                None => by_seed.push((key, vec![value], n as u64)),
            }
        }
        curve_rows(&mut curves, t, model, &format!("{task}/{ret}"), seed, metric);
    }
    // Several seeds: the mean and the sample standard deviation, as the paper's Table 3.
    if cfg.seeds.len() > 1 {
        for ((ret, split, group, metric), v, n) in &by_seed {
            let (mean, sd) = mean_std(v);
            scores.push(ret, split, group, metric, mean, *n, None);
            scores.push(ret, split, group, &format!("{metric}_std"), sd, *n, None);
        }
    }
    Ok(TaskTables {
        node_classification: rows::batch(&tables::NODE_CLASSIFICATION, &nc_rows)?,
        link_prediction: rows::batch(&tables::LINK_PREDICTION, &lp_rows)?,
        curves: curves.batch()?,
    })
}

/// One training's curve: losses, and the validation and test `metric`, per epoch.
fn curve_rows(curves: &mut Curves, t: &Trained, model: &str, source: &str, seed: u64, metric: &str) {
    let (val_name, test_name) = (format!("val_{metric}"), format!("test_{metric}"));
    for row in &t.curve {
        curves.push(
            model,
            source,
            seed,
            row.epoch,
            row.epoch == t.best_epoch,
            &[
                ("train_loss", row.train_loss),
                ("val_loss", row.val_loss),
                (val_name.as_str(), row.val_metric),
                (test_name.as_str(), row.test_metric),
            ],
        );
    }
}

/// Mean and sample standard deviation (0 for one value).
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_std_by_hand() {
        assert_eq!(mean_std(&[0.5]), (0.5, 0.0));
        let (m, s) = mean_std(&[1.0, 2.0, 3.0, 4.0]);
        assert!((m - 2.5).abs() < 1e-12 && (s - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    fn cfg() -> TaskConfig {
        TaskConfig {
            nc: NodeClassConfig::default(),
            lp: LinkPredConfig::default(),
            val_fraction: 0.25,
            lp_val_fraction: 0.5,
            lp_negatives: 6,
            seed: 1,
            seeds: vec![1],
            device: DeviceChoice::Cpu,
        }
    }

    #[test]
    fn class_split_keeps_labelled_nodes_and_tests_the_partial_ones() {
        let labels = [0, 1, u32::MAX, 0, 1, 1, 0, 0, 1, 0];
        let partial = [false, false, false, false, false, false, false, false, true, true];
        let (train, val, test) = class_split(&labels, &partial, 0.25, 3);
        assert_eq!(test, vec![8, 9]);
        assert_eq!(val.len(), 2);
        let mut all: Vec<u32> = train.iter().chain(&val).copied().collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 3, 4, 5, 6, 7]);
        assert_eq!(class_split(&labels, &partial, 0.25, 3), (train, val, test));
    }

    #[test]
    fn link_split_tests_the_partial_edges_and_draws_non_edges() {
        // 0-1-2-3-4-5 path plus 0-5; node 5 is partial.
        let edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)];
        let partial = [false, false, false, false, false, true];
        let s = link_split(6, &edges, &partial, &cfg());
        assert_eq!(s.test_pos, vec![(4, 5), (5, 0)]);
        assert_eq!(s.val_pos.len(), 2);
        assert_eq!(s.message.len(), 2);
        let edge_set: HashSet<(u32, u32)> = edges.iter().map(|&(a, b)| (a.min(b), a.max(b))).collect();
        for &(a, b) in s.val_neg.iter().chain(&s.test_neg) {
            assert!(a != b && !edge_set.contains(&(a.min(b), a.max(b))));
        }
        assert!(s.test_neg.iter().all(|&(a, _)| a == 5));
        assert_eq!(s.test_neg.len(), 6);
        assert_eq!(s, link_split(6, &edges, &partial, &cfg()));
    }
}
