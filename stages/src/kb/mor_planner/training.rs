//! Training on a MoR plan folder: the lines split into training and checkpoint lines, the
//! vocabularies, the query encoder (optionally MiniLM's top layers fine-tuned), then the planner
//! and the tagger.

use std::collections::HashMap;
use std::path::Path;

use tgrag_datasets::mor_plans::{Plan, PlanLine};
use tgrag_models::minilm::Engine;
use tgrag_models::minilm::MiniLm;
use tgrag_models::minilm::tune::{TuneConfig, TuneEpoch};
use tgrag_models::planner::{PlannerConfig, PlannerEpoch, SeqData};
use tgrag_models::tagger::{TagData, TaggerConfig, TaggerEpoch};

use super::bio::{gold_labels, sentence};
use super::grammar::{PlanSyntax, gold_plan, plan_tokens_of, plan_types};
use super::model_io::{ModelMeta, PlanModel, Tuned, encode};
use crate::shared::encoders::{DeviceChoice, Encoder, load_minilm, load_minilm_burn};
use crate::{Progress, Result, StageError};

/// The setting that trains without MiniLM (named when the model is missing).
const HASH_OPTION: &str = "--encoder hash";

/// Options of `train-planner`.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub encoder: Encoder,
    pub model_dir: Option<String>,
    pub hash_dim: usize,
    pub buckets: usize,
    pub window: usize,
    pub planner: PlannerConfig,
    pub tagger: TaggerConfig,
    pub tagger_hidden: usize,
    pub device: DeviceChoice,
    pub seed: u64,
    /// Weight of `llama_ft.jsonl`'s plans in the planner's loss (the cached plans weigh 1). MoR's
    /// fine-tuned planner agrees with these LLM-written labels on only 60–92 % of the same queries,
    /// and `plans_val.jsonl` comes from that planner.
    pub finetune_weight: f32,
    /// How `plan` decodes the metapath.
    pub decode: Decode,
    /// Fine-tuning of MiniLM's top layers as a metapath classifier before the planner and the
    /// tagger train on the tuned sentence embedding (`layers` 0: the frozen embedding).
    pub tune: TuneConfig,
}

/// Metapath decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// Token by token, the most likely next token (ties: lowest id).
    Greedy,
    /// The most likely whole sequence among the training plans' metapaths and the greedy one.
    Candidates,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            encoder: Encoder::Minilm,
            model_dir: None,
            hash_dim: 1024,
            buckets: 8192,
            window: 2,
            planner: PlannerConfig { epochs: 30, ..PlannerConfig::default() },
            tagger: TaggerConfig::default(),
            tagger_hidden: 128,
            device: DeviceChoice::Cpu,
            seed: 0,
            finetune_weight: 1.0,
            decode: Decode::Candidates,
            tune: TuneConfig { layers: 0, ..TuneConfig::default() },
        }
    }
}

/// What training returns.
pub struct Trained {
    pub model: PlanModel,
    /// Fine-tuning of the MiniLM top layers (empty without `tune.layers`).
    pub encoder_curve: Vec<TuneEpoch>,
    pub encoder_epoch: u32,
    pub planner_curve: Vec<PlannerEpoch>,
    pub planner_epoch: u32,
    pub tagger_curve: Vec<TaggerEpoch>,
    pub tagger_epoch: u32,
    /// Plans used: training lines (llama_ft.jsonl + 90 % of plans_train.jsonl) and checkpoint lines
    /// whose gold plan parses.
    pub train_plans: usize,
    pub dev_plans: usize,
    /// Every line left out because its gold plan does not parse, with the reason.
    pub dropped: Vec<Dropped>,
}

/// A plan line left out of training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub file: &'static str,
    /// 1-based line of the file.
    pub line: usize,
    pub reason: String,
}

/// The lines among `lines` whose gold plan does not parse, by file and line.
pub fn dropped_lines(lines: &[&PlanLine]) -> Vec<Dropped> {
    let mut d: Vec<Dropped> = lines
        .iter()
        .filter(|l| gold_plan(l).is_none())
        .map(|l| Dropped {
            file: if l.q_id.is_none() { "llama_ft.jsonl" } else { "plans_train.jsonl" },
            line: l.line,
            reason: l.plan.as_ref().err().cloned().unwrap_or_default(),
        })
        .collect();
    d.sort_by(|a, b| (a.file, a.line).cmp(&(b.file, b.line)));
    d
}

/// Reads `<dir>/<name>` with the MoR plan readers.
fn read(dir: &Path, name: &str) -> Result<Vec<PlanLine>> {
    let p = dir.join(name);
    Ok(if name == "llama_ft.jsonl" {
        tgrag_datasets::mor_plans::read_finetune(&p, None)?
    } else {
        tgrag_datasets::mor_plans::read_plans(&p, None)?
    })
}

/// Trains on a MoR plan folder.
pub fn train(plans: &Path, opts: &TrainOptions, progress: Progress) -> Result<Trained> {
    let ft = read(plans, "llama_ft.jsonl")?;
    let tr = read(plans, "plans_train.jsonl")?;
    let split = split_lines(&ft, &tr, opts.seed);
    if split.gold_train.iter().all(Option::is_none) {
        return Err(StageError::Input(format!("{}: no plan parses; nothing to train on", plans.display())));
    }
    let vocab = vocabularies(&split.gold_train);
    let dev = opts.device.device();
    let qe = query_encoder(opts, &split, progress)?;
    let enc = (qe.minilm.as_ref(), qe.tuned.as_ref());
    let (q_train, qdim) =
        encode(&queries(&split.train), opts.encoder, opts.hash_dim, enc, progress, "train-planner: embed training queries", &dev)?;
    let (q_dev, _) = encode(&queries(&split.dev), opts.encoder, opts.hash_dim, enc, progress, "train-planner: embed dev queries", &dev)?;
    let candidates = decoding_candidates(opts, &split);
    let meta = model_meta(opts, vocab, qdim, candidates, qe.tuned.as_ref());
    let pcfg = PlannerConfig { max_len: meta.max_len, seed: opts.seed, ..opts.planner.clone() };
    let (planner, planner_curve, planner_epoch) = tgrag_models::planner::train_planner(
        meta.planner_shape(),
        &seq_data(&split.train, q_train.clone(), &meta, opts.finetune_weight),
        &seq_data(&split.dev, q_dev.clone(), &meta, opts.finetune_weight),
        &pcfg,
        &dev,
    )?;
    let tcfg = TaggerConfig { seed: opts.seed, ..opts.tagger.clone() };
    let (tagger, tagger_curve, tagger_epoch) = tgrag_models::tagger::train_tagger(
        meta.tagger_shape(),
        &tag_data(&split.train, q_train, &meta),
        &tag_data(&split.dev, q_dev, &meta),
        &tcfg,
        &dev,
    )?;
    let QueryEncoder { minilm, tuned, curve: encoder_curve, epoch: encoder_epoch } = qe;
    Ok(Trained {
        model: PlanModel { meta, planner, tagger, minilm, tuned, device: dev },
        encoder_curve,
        encoder_epoch,
        planner_curve,
        planner_epoch,
        tagger_curve,
        tagger_epoch,
        train_plans: split.gold_train.iter().flatten().count(),
        dev_plans: split.dev.iter().filter(|l| gold_plan(l).is_some()).count(),
        dropped: dropped_lines(&split.train.iter().chain(&split.dev).copied().collect::<Vec<_>>()),
    })
}

/// The training lines (`llama_ft.jsonl` and 90 % of `plans_train.jsonl`), the checkpoint lines
/// (the other 10 %) and the gold plans of the training lines.
struct Split<'a> {
    train: Vec<&'a PlanLine>,
    dev: Vec<&'a PlanLine>,
    gold_train: Vec<Option<Plan>>,
}

/// Splits off a seeded 10 % of `plans_train.jsonl` for checkpoint selection (at least one line).
fn split_lines<'a>(ft: &'a [PlanLine], tr: &'a [PlanLine], seed: u64) -> Split<'a> {
    let mut rng = tgrag_datasets::rng::Rng::new(seed ^ 0x6465_7673);
    let mut is_dev: Vec<bool> = tr.iter().map(|_| rng.chance(0.1)).collect();
    if !is_dev.iter().any(|&d| d)
        && let Some(d) = is_dev.first_mut()
    {
        *d = true;
    }
    let train: Vec<&PlanLine> = ft.iter().chain(tr.iter().zip(&is_dev).filter(|(_, d)| !**d).map(|(l, _)| l)).collect();
    let dev: Vec<&PlanLine> = tr.iter().zip(&is_dev).filter(|(_, d)| **d).map(|(l, _)| l).collect();
    let gold_train: Vec<Option<Plan>> = train.iter().map(|l| gold_plan(l)).collect();
    Split { train, dev, gold_train }
}

/// The training plans' vocabularies and sizes.
struct Vocab {
    plan_tokens: Vec<String>,
    types: Vec<String>,
    /// Some hop names its relation: the plans are Prime's lists ([`PlanSyntax::Lists`]).
    lists: bool,
    max_len: usize,
}

/// Plan tokens and node types in first-seen order over the training plans (deterministic).
fn vocabularies(gold_train: &[Option<Plan>]) -> Vocab {
    let mut plan_tokens: Vec<String> = Vec::new();
    let mut types: Vec<String> = Vec::new();
    let mut lists = false;
    for p in gold_train.iter().flatten() {
        for t in plan_tokens_of(p) {
            if !plan_tokens.contains(&t) {
                plan_tokens.push(t);
            }
        }
        lists |= p.metapaths.iter().any(|m| m.hops.iter().any(|h| h.0.is_some()));
        for t in p.metapaths.iter().flat_map(|m| m.types.iter()).chain(p.restrictions.iter().map(|r| &r.0)) {
            if !types.contains(t) {
                types.push(t.clone());
            }
        }
    }
    let max_len = gold_train.iter().flatten().map(|p| plan_tokens_of(p).len() + 1).max().unwrap_or(1).max(8);
    Vocab { plan_tokens, types, lists, max_len }
}

/// The query encoder training uses: frozen MiniLM, MiniLM with fine-tuned top layers (and the
/// fine-tuning's curve and chosen epoch), or none (`--encoder hash`).
struct QueryEncoder {
    minilm: Option<MiniLm>,
    tuned: Option<Tuned>,
    curve: Vec<TuneEpoch>,
    epoch: u32,
}

fn query_encoder(opts: &TrainOptions, split: &Split<'_>, progress: Progress) -> Result<QueryEncoder> {
    let tuning = opts.encoder == Encoder::Minilm && opts.tune.layers > 0;
    let minilm = match opts.encoder {
        Encoder::Minilm if !tuning => Some(load_minilm(opts.model_dir.as_deref(), opts.device, HASH_OPTION)?),
        _ => None,
    };
    let (tuned, curve, epoch) = if tuning {
        let (t, c, e) = tune_encoder(opts, &split.train, &split.gold_train, &split.dev, progress)?;
        (Some(t), c, e)
    } else {
        (None, Vec::new(), 0)
    };
    Ok(QueryEncoder { minilm, tuned, curve, epoch })
}

fn queries<'a>(ls: &[&'a PlanLine]) -> Vec<&'a str> {
    ls.iter().map(|l| l.query.as_str()).collect()
}

/// `--decode candidates`: the distinct token sequences of the training plans that carry weight,
/// first-seen order; empty with `--decode greedy`.
fn decoding_candidates(opts: &TrainOptions, split: &Split<'_>) -> Vec<Vec<String>> {
    let mut candidates: Vec<Vec<String>> = Vec::new();
    if opts.decode == Decode::Candidates {
        for (l, p) in split.train.iter().zip(&split.gold_train) {
            let w = if l.q_id.is_none() { opts.finetune_weight } else { 1.0 };
            if let Some(p) = p.as_ref().filter(|_| w > 0.0) {
                let toks = plan_tokens_of(p);
                if !candidates.contains(&toks) {
                    candidates.push(toks);
                }
            }
        }
    }
    candidates
}

fn model_meta(opts: &TrainOptions, vocab: Vocab, qdim: usize, candidates: Vec<Vec<String>>, tuned: Option<&Tuned>) -> ModelMeta {
    ModelMeta {
        format: 1,
        encoder: opts.encoder,
        model_dir: opts.model_dir.clone(),
        hash_dim: opts.hash_dim,
        qdim,
        syntax: if vocab.lists { PlanSyntax::Lists } else { PlanSyntax::Arrow },
        plan_tokens: vocab.plan_tokens,
        types: vocab.types,
        planner_hidden: opts.planner.hidden,
        max_len: vocab.max_len,
        buckets: opts.buckets,
        window: opts.window,
        tagger_hidden: opts.tagger_hidden,
        candidates,
        tune_layers: tuned.map_or(0, |t| t.shape.layers),
        tune_classes: tuned.map_or(0, |t| t.shape.classes),
    }
}

/// The planner's data: the lines' query vectors `q`, and as targets the token ids of every gold
/// plan that carries weight and fits `max_len`.
fn seq_data(lines: &[&PlanLine], q: Vec<f32>, meta: &ModelMeta, finetune_weight: f32) -> SeqData {
    let tok_id: HashMap<&str, u32> = meta.plan_tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32 + 2)).collect();
    let mut d = SeqData { dim: meta.qdim, queries: q, targets: Vec::new() };
    for (i, l) in lines.iter().enumerate() {
        // llama_ft lines are the ones without a q_id.
        let w = if l.q_id.is_none() { finetune_weight } else { 1.0 };
        if w > 0.0
            && let Some(p) = gold_plan(l)
            && let Some(ids) = plan_tokens_of(&p).iter().map(|t| tok_id.get(t.as_str()).copied()).collect::<Option<Vec<u32>>>()
            && ids.len() < meta.max_len
        {
            d.targets.push((i as u32, ids, w));
        }
    }
    d
}

/// The tagger's data: per line with a gold plan, its sentence, the plan's types and the gold BIO labels.
fn tag_data(lines: &[&PlanLine], q: Vec<f32>, meta: &ModelMeta) -> TagData {
    let type_id: HashMap<String, u32> = meta.types.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let mut d = TagData { qdim: meta.qdim, queries: q, sentences: Vec::new() };
    for (i, l) in lines.iter().enumerate() {
        let Some(p) = gold_plan(l) else { continue };
        let (mut s, ws) = sentence(i as u32, &l.query, meta.buckets);
        s.plan_types = plan_types(&p, &type_id);
        s.labels = gold_labels(&ws, &p.restrictions, &type_id);
        d.sentences.push(s);
    }
    d
}

/// Fine-tunes MiniLM's top `opts.tune.layers` layers to classify each training line's metapath
/// among the distinct metapaths of the training lines (lines without a plan are left out; so are
/// dev lines whose metapath is not one of them).
fn tune_encoder(
    opts: &TrainOptions,
    train_lines: &[&PlanLine],
    gold_train: &[Option<Plan>],
    dev_lines: &[&PlanLine],
    progress: Progress,
) -> Result<(Tuned, Vec<TuneEpoch>, u32)> {
    let device = opts.device.device();
    let bert = load_minilm_burn(opts.model_dir.as_deref(), opts.device, HASH_OPTION)?;
    let mut classes: Vec<Vec<String>> = Vec::new();
    let mut class_of = |p: &Plan, add: bool| {
        let toks = plan_tokens_of(p);
        match classes.iter().position(|c| *c == toks) {
            Some(i) => Some(i as u32),
            None if add => {
                classes.push(toks);
                Some(classes.len() as u32 - 1)
            }
            None => None,
        }
    };
    let train_lab: Vec<Option<u32>> = gold_train.iter().map(|p| p.as_ref().and_then(|p| class_of(p, true))).collect();
    let dev_lab: Vec<Option<u32>> = dev_lines.iter().map(|l| gold_plan(l).and_then(|p| class_of(&p, false))).collect();
    let pick = |ls: &[&PlanLine], lab: &[Option<u32>]| -> (Vec<String>, Vec<u32>) {
        ls.iter().zip(lab).filter_map(|(l, y)| y.map(|y| (l.query.clone(), y))).unzip()
    };
    let (tq, ty) = pick(train_lines, &train_lab);
    let (dq, dy) = pick(dev_lines, &dev_lab);
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let k = opts.tune.layers;
    let ts = Tuned::states(&bert, k, &refs(&tq), progress, "train-planner: frozen MiniLM layers, training queries")?;
    let ds = Tuned::states(&bert, k, &refs(&dq), progress, "train-planner: frozen MiniLM layers, dev queries")?;
    let Engine::Burn(b) = &bert.engine else { return Err(StageError::Internal("the tuned encoder needs MiniLM's burn engine".into())) };
    let pb = progress.bar((ts.len() * opts.tune.epochs) as u64, "train-planner: fine-tune MiniLM top layers");
    let cfg = TuneConfig { seed: opts.seed, ..opts.tune.clone() };
    let (top, shape, curve, epoch) =
        tgrag_models::minilm::tune::train_top(b, classes.len(), (&ts, &ty), (&ds, &dy), &cfg, &device, &|n| pb.inc(n as u64))?;
    pb.finish_and_clear();
    Ok((Tuned { bert, top, shape }, curve, epoch))
}
