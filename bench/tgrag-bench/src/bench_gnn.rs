//! `tgrag-bench bench-gnn` (`make bench` calls it next to PyG): epoch times of the GNN trainings.
//!
//! * `node`: a full-batch node classifier (GCN, GraphSAGE or MLP; hidden 64, 2 layers, dropout 0.5,
//!   Adam 0.01) on a graph from Parquet (`--edges`: `src`, `dst`; `--features`: `node`, `f000`…;
//!   `--labels`: `node`, `label`, `split` train|val|test), for `--epochs` epochs without early
//!   stopping: the host engine on `--device cpu`, burn on `--device gpu`.
//! * `batch`: mini-batches of `--graphs` random graphs (`--nodes` nodes each, a path plus chords:
//!   `--degree` incoming edges per node on average; 384-wide node and edge features) through
//!   G-Retriever's `--encoder` (4 layers, hidden 256, 4 heads; `gt2` with attention pooling, the
//!   others mean pooling; or `mixrag`, MixRAG as its stage trains it) and the classification head: the median of `--steps` optimiser steps
//!   (after one warm-up step), on the host engine (`--engine host`, the CPU default), burn's
//!   autodiff (`--engine burn`), or, for `gt`, `gat` and `gcn`, the engine prototypes of docs/engines.md
//!   (`--engine tape`, `burn-fused`, `burn-ops`).
//!
//! Prints one JSON line: `{"ms_per_epoch": …, "epochs": …, "accuracy": …}` (`node`) or
//! `{"ms_per_step": …, "steps": …, "graphs": …}` (`batch`).

use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::AsArray;
use arrow::datatypes::{DataType, Float32Type, UInt32Type};
use tgrag_models::DeviceChoice;
use tgrag_models::gnn::{self, GnnKind, NodeClassConfig, NodeClassData};
use tgrag_pipeline::bail_config;

use tgrag_pipeline::commands::DeviceArg;

/// `--model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelArg {
    Gcn,
    Sage,
    Mlp,
}

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    Host,
    Burn,
    /// The graph transformer written once over the engine interface, on the host tape.
    Tape,
    /// The same definition on burn's autodiff with the fused TransformerConv op.
    BurnFused,
    /// The same definition on burn's autodiff, every op burn's own (the GPU's path).
    BurnOps,
}

/// What to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WhatArg {
    Node,
    Batch,
}

/// `tgrag-bench bench-gnn` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchGnnArgs {
    #[arg(value_enum)]
    pub what: WhatArg,
    #[arg(long)]
    pub edges: Option<std::path::PathBuf>,
    #[arg(long)]
    pub features: Option<std::path::PathBuf>,
    #[arg(long)]
    pub labels: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t = ModelArg::Gcn)]
    pub model: ModelArg,
    #[arg(long, default_value_t = 100, value_parser = tgrag_pipeline::commands::num::count)]
    pub epochs: usize,
    #[arg(long, default_value_t = 32, value_parser = tgrag_pipeline::commands::num::count)]
    pub graphs: usize,
    #[arg(long, default_value_t = 5, value_parser = tgrag_pipeline::commands::num::count)]
    pub nodes: usize,
    #[arg(long, default_value = "gt")]
    pub encoder: String,
    #[arg(long, default_value_t = 50, value_parser = tgrag_pipeline::commands::num::count)]
    pub steps: usize,
    /// `batch`: edges per node (1: a path plus one chord, ExplaGraphs-like).
    #[arg(long, default_value_t = 1, value_parser = tgrag_pipeline::commands::num::count)]
    pub degree: usize,
    /// `batch`: edge features drawn from this many distinct rows (relation embeddings, as in
    /// ExplaGraphs, scene graphs and WebQSP); 0: every edge its own random row.
    #[arg(long, default_value_t = 0)]
    pub relations: usize,
    /// `batch`: the trainer (`host`: the hand-written backward, CPU only; `burn`: autodiff;
    /// `tape`, `burn-fused` and `burn-ops`: the engine prototypes of docs/engines.md, `--encoder
    /// gt`, `gat` or `gcn` on the CPU).
    #[arg(long, value_enum, default_value_t = EngineArg::Host)]
    pub engine: EngineArg,
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
}

fn u32s(b: &arrow::array::RecordBatch, path: &std::path::Path, c: &str) -> Result<Vec<u32>> {
    let col = b.column_by_name(c).with_context(|| format!("{}: no column `{c}`", path.display()))?;
    let col = arrow::compute::cast(col, &DataType::UInt32)?;
    Ok(col.as_primitive::<UInt32Type>().values().to_vec())
}

pub fn run(a: BenchGnnArgs) -> Result<()> {
    let device: DeviceChoice = a.device.into();
    match a.what {
        WhatArg::Node => bench_node(&a, device)?,
        WhatArg::Batch => bench_batch(&a, device)?,
    }
    Ok(())
}

/// A node-classification graph read from `--edges`, `--features` and `--labels`.
struct NodeGraph {
    n: usize,
    edges: Vec<(u32, u32)>,
    /// Row-major `n × dim` features (the `f…` columns in file order).
    x: Vec<f32>,
    dim: usize,
    /// Per node; `u32::MAX` for a node without a label.
    labels: Vec<u32>,
    classes: usize,
    train: Vec<u32>,
    val: Vec<u32>,
    test: Vec<u32>,
}

impl NodeGraph {
    fn read(ep: &std::path::Path, fp: &std::path::Path, lp: &std::path::Path) -> Result<NodeGraph> {
        let (eb, fb, lb) =
            (tgrag_schemas::io::read_parquet(ep)?, tgrag_schemas::io::read_parquet(fp)?, tgrag_schemas::io::read_parquet(lp)?);
        let edges: Vec<(u32, u32)> = u32s(&eb, ep, "src")?.into_iter().zip(u32s(&eb, ep, "dst")?).collect();
        let n = fb.num_rows();
        let fcols: Vec<String> = fb.schema().fields().iter().map(|f| f.name().clone()).filter(|c| c.starts_with('f')).collect();
        let dim = fcols.len();
        let mut x = vec![0f32; n * dim];
        for (j, c) in fcols.iter().enumerate() {
            let col = arrow::compute::cast(fb.column_by_name(c).context("feature column")?, &DataType::Float32)?;
            for (i, v) in col.as_primitive::<Float32Type>().values().iter().enumerate() {
                x[i * dim + j] = *v;
            }
        }
        let (nodes, labels_in) = (u32s(&lb, lp, "node")?, u32s(&lb, lp, "label")?);
        let split = lb.column_by_name("split").context("labels: no `split`")?.as_string::<i32>().clone();
        let mut labels = vec![u32::MAX; n];
        let (mut tr, mut va, mut te) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..lb.num_rows() {
            labels[nodes[i] as usize] = labels_in[i];
            match split.value(i) {
                "train" => tr.push(nodes[i]),
                "val" => va.push(nodes[i]),
                _ => te.push(nodes[i]),
            }
        }
        let classes = labels_in.iter().max().map_or(1, |m| *m as usize + 1);
        Ok(NodeGraph { n, edges, x, dim, labels, classes, train: tr, val: va, test: te })
    }
}

/// `node`: `--epochs` epochs of the node classifier without early stopping.
fn bench_node(a: &BenchGnnArgs, device: DeviceChoice) -> Result<()> {
    let (Some(ep), Some(fp), Some(lp)) = (&a.edges, &a.features, &a.labels) else {
        bail_config!("bench-gnn node needs --edges, --features and --labels");
    };
    let NodeGraph { n, edges, x, dim, labels, classes, train: tr, val: va, test: te } = NodeGraph::read(ep, fp, lp)?;
    let data = NodeClassData { features: &x, dim, labels: &labels, classes, train: &tr, val: &va, test: &te };
    let cfg = NodeClassConfig { max_epochs: a.epochs, patience: a.epochs + 1, ..NodeClassConfig::default() };
    let kind = match a.model {
        ModelArg::Gcn => GnnKind::Gcn,
        ModelArg::Sage => GnnKind::Sage,
        ModelArg::Mlp => GnnKind::Mlp,
    };
    let t0 = Instant::now();
    let t = if device.resolved() == DeviceChoice::Gpu {
        gnn::train_node_classifier(kind, n, &edges, &data, &cfg, &device.device())?
    } else {
        let g = gnn::fast::FastGraph::new(n, &edges);
        gnn::fast::train_node_classifier(kind, n, &g, &data, &cfg)?
    };
    let ms = t0.elapsed().as_secs_f64() * 1e3 / t.curve.len().max(1) as f64;
    println!("{{\"ms_per_epoch\": {ms:.4}, \"epochs\": {}, \"accuracy\": {:.4}}}", t.curve.len(), t.test_metric);
    Ok(())
}

/// `batch`: `--steps` optimiser steps of G-Retriever's `--encoder` and classification head over
/// mini-batches of `--graphs` small random graphs.
fn bench_batch(a: &BenchGnnArgs, device: DeviceChoice) -> Result<()> {
    use tgrag_models::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
    use tgrag_models::graphqa::{HeadKind, QaConfig, QaShape, step_times};
    use tgrag_models::train::TrainConfig;
    let dim = 384usize;
    if a.encoder == "mixrag" {
        return bench_mixrag(a, device, dim);
    }
    let kind = match a.encoder.as_str() {
        "gt" => EncoderKind::Gt,
        "gat" => EncoderKind::Gat,
        "gcn" => EncoderKind::Gcn,
        "gt2" => EncoderKind::Gt2,
        other => bail_config!("--encoder {other}: gt, gat, gcn, gt2 or mixrag"),
    };
    let examples = random_examples(a.graphs * a.steps, a.nodes, a.degree, a.relations, dim);
    let pooling = if kind == EncoderKind::Gt2 { Pooling::Attention } else { Pooling::Mean };
    let enc = EncoderShape { kind, in_dim: dim, edge_dim: dim, hidden: 256, layers: 4, heads: 4, pooling };
    let shape = QaShape { encoder: Some(enc), question_dim: dim, head: HeadKind::Classify { classes: 2 }, head_hidden: 256 };
    let cfg = QaConfig {
        train: TrainConfig { epochs: 1, patience: 2, batch: a.graphs, ..TrainConfig::default() },
        head_hidden: 256,
        ..QaConfig::default()
    };
    let host = a.engine != EngineArg::Burn;
    if host && device.resolved() == DeviceChoice::Gpu {
        bail_config!("--engine host, tape, burn-fused and burn-ops run on the CPU: use --engine burn with --device gpu");
    }
    let mut times = match a.engine {
        EngineArg::Host | EngineArg::Burn => step_times(host, shape, &examples, dim, dim, &cfg, a.steps, &device.device())?,
        EngineArg::Tape | EngineArg::BurnFused | EngineArg::BurnOps => {
            use tgrag_models::engine::step::{self, Which};
            if kind == EncoderKind::Gt2 {
                bail_config!("--engine tape, burn-fused and burn-ops cover --encoder gt, gat and gcn");
            }
            let which = match a.engine {
                EngineArg::Tape => Which::Tape,
                EngineArg::BurnFused => Which::BurnFused,
                _ => Which::BurnOps,
            };
            step::step_times(which, &shape, &examples, (dim, dim), &cfg, a.steps)?
        }
    };
    times.sort_by(f64::total_cmp);
    let ms = 1e3 * times.get(times.len() / 2).copied().unwrap_or(0.0);
    println!("{{\"ms_per_step\": {ms:.4}, \"steps\": {}, \"graphs\": {}}}", a.steps, a.graphs);
    Ok(())
}

/// `batch --encoder mixrag`: MixRAG as the `mixrag` stage trains it (hidden 128, 3 query-aware
/// layers, top-k 20, all experts, the first epoch's temperature) with a classification head.
fn bench_mixrag(a: &BenchGnnArgs, device: DeviceChoice, dim: usize) -> Result<()> {
    use tgrag_models::gnn::mixrag::{MixConfig, MixShape, step_times};
    use tgrag_models::graphqa::{HeadKind, QaConfig};
    use tgrag_models::train::TrainConfig;
    let examples = random_examples(a.graphs * a.steps, a.nodes, a.degree, a.relations, dim);
    let shape = MixShape {
        dim,
        edge_dim: dim,
        question_dim: dim,
        hidden: 128,
        layers: 3,
        top_k: 20,
        experts: [true; 3],
        head: HeadKind::Classify { classes: 2 },
        head_hidden: 256,
    };
    let cfg = MixConfig {
        qa: QaConfig {
            train: TrainConfig { epochs: 1, batch: a.graphs, ..TrainConfig::default() },
            head_hidden: 256,
            ..QaConfig::default()
        },
        ..MixConfig::default()
    };
    let host = a.engine == EngineArg::Host;
    if host && device.resolved() == DeviceChoice::Gpu {
        bail_config!("--engine host runs on the CPU: use --engine burn with --device gpu");
    }
    let mut times = step_times(host, shape, &examples, &cfg, a.steps, &device.device())?;
    times.sort_by(f64::total_cmp);
    let ms = 1e3 * times.get(times.len() / 2).copied().unwrap_or(0.0);
    println!("{{\"ms_per_step\": {ms:.4}, \"steps\": {}, \"graphs\": {}}}", a.steps, a.graphs);
    Ok(())
}

/// `count` graphs of `k` nodes (a path plus the chord from the first node to the last, and with
/// `degree` > 1 that many − 1 further edges into each node from random nodes), node, edge and
/// question features from one seeded generator (edge features one of `relations` fixed rows, or
/// each edge its own with 0), classes alternating.
fn random_examples(count: usize, k: usize, degree: usize, relations: usize, dim: usize) -> Vec<tgrag_models::graphqa::QaExample> {
    use tgrag_models::graphqa::{QaExample, Target};
    let mut state = 7u64;
    let mut rnd = || {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) as f32
    };
    let table: Vec<f32> = (0..relations * dim).map(|_| rnd()).collect();
    (0..count)
        .map(|i| {
            let mut edges: Vec<(u32, u32)> = (1..k as u32).map(|v| (v - 1, v)).collect();
            edges.push((0, (k - 1) as u32));
            for v in 0..k as u32 {
                for _ in 1..degree {
                    edges.push(((rnd() * k as f32) as u32 % k as u32, v));
                }
            }
            let x = (0..k * dim).map(|_| rnd()).collect();
            let edge_x = if relations == 0 {
                (0..edges.len() * dim).map(|_| rnd()).collect()
            } else {
                let mut ex = Vec::with_capacity(edges.len() * dim);
                for _ in 0..edges.len() {
                    let r = (rnd() * relations as f32) as usize % relations;
                    ex.extend_from_slice(&table[r * dim..(r + 1) * dim]);
                }
                ex
            };
            QaExample { x, n: k, edges, edge_x, question: (0..dim).map(|_| rnd()).collect(), target: Target::Class((i % 2) as u32) }
        })
        .collect()
}
