//! The planner trained on MoR's own plan files (`llama_ft.jsonl`, `plans_train.jsonl`,
//! `plans_val.jsonl`, see `tgrag_datasets::mor_plans`): the burn decoder of `models::planner` for the
//! metapath and the span tagger of `models::tagger` for the restrictions. Used by
//! `tgrag train-planner` and `tgrag plan`.
//!
//! * Query vector: the MiniLM sentence embedding (encoder `minilm`) followed by the hashed
//!   uni/bigram vector of `shared::encoders::hash_embed` (`hash_dim` wide); encoder `hash` uses the latter alone.
//! * Plan tokens: per path its node types and hops (`->`, `<-`, or `-relation->` for Prime's lists),
//!   `|` between paths. An empty plan (MoR's `''`, "no valid plan") is the empty sequence.
//! * Restrictions: BIO labels over the query's words ([`crate::kb::kb::words`]); a gold restriction
//!   is labelled at its first unlabelled occurrence as a word sequence (restrictions the planner
//!   paraphrased have none and only count in the token F1).
//! * Training: `llama_ft.jsonl` and 90 % of `plans_train.jsonl`; checkpoints are chosen on the other
//!   10 % (seeded); `plans_val.jsonl` is only used for the reported figures.
//!
//! Figures (per file): metapath exact match (the rendered metapath equals the gold one; lines whose
//! gold plan does not parse are left out and counted), the same with paths compared as a set, and
//! restriction token F1: per query, the multiset of (type, lower-cased word) of all predicted
//! restrictions against the gold one, F1 = 2|P∩G|/(|P|+|G|) (1 when both are empty), averaged.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tgrag_datasets::mor_plans::{Dir, Metapath, Plan, PlanLine};
use tgrag_models::minilm::tune::{TopLayers, TopShape, TuneConfig, TuneEpoch};
use tgrag_models::minilm::{EncodeOptions, Engine, MiniLm};
use tgrag_models::planner::{BOS, EOS, Planner, PlannerConfig, PlannerEpoch, PlannerShape, SeqData};
use tgrag_models::tagger::{Sentence, TagData, Tagger, TaggerConfig, TaggerEpoch, TaggerShape};

use crate::kb::kb::words;
use crate::shared::encoders::{DeviceChoice, Encoder, hash_embed, load_minilm, load_minilm_burn};
use crate::{Progress, Result, StageError};

/// The setting that trains without MiniLM (named when the model is missing).
const HASH_OPTION: &str = "--encoder hash";
/// The same hint for `tgrag plan`, which applies a trained model and has no `--encoder`.
const PLAN_HINT: &str = "a model retrained with `tgrag train-planner --encoder hash`";

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

/// `model.json`: everything needed to rebuild the inputs of the saved weights.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelMeta {
    pub format: u32,
    pub encoder: Encoder,
    pub model_dir: Option<String>,
    pub hash_dim: usize,
    pub qdim: usize,
    /// How the plan files write metapaths (and how produced plans are written back).
    pub syntax: PlanSyntax,
    /// Plan tokens; id = index + 2 (0 and 1 are BOS and EOS).
    pub plan_tokens: Vec<String>,
    /// Node types restrictions attach to.
    pub types: Vec<String>,
    pub planner_hidden: usize,
    pub max_len: usize,
    pub buckets: usize,
    pub window: usize,
    pub tagger_hidden: usize,
    /// Decoding candidates: the distinct token sequences of the training plans, first-seen order.
    /// A query's metapath is the most likely of these and its greedy plan
    /// ([`Planner::best_of`]); empty (as in models written before this field existed, or with
    /// `--decode greedy`): the greedy plan.
    #[serde(default)]
    pub candidates: Vec<Vec<String>>,
    /// MiniLM top layers fine-tuned into `encoder.safetensors` (0: none; the MiniLM part of the
    /// query vector is then the frozen sentence embedding), and the classes of their head.
    #[serde(default)]
    pub tune_layers: usize,
    #[serde(default)]
    pub tune_classes: usize,
}

impl ModelMeta {
    fn planner_shape(&self) -> PlannerShape {
        PlannerShape { dim: self.qdim, vocab: self.plan_tokens.len() + 2, hidden: self.planner_hidden, max_len: self.max_len }
    }
    fn tagger_shape(&self) -> TaggerShape {
        TaggerShape { buckets: self.buckets, window: self.window, qdim: self.qdim, types: self.types.len(), hidden: self.tagger_hidden }
    }
}

/// A loaded planner: metadata, both models, the query encoder.
pub struct PlanModel {
    pub meta: ModelMeta,
    planner: Planner,
    tagger: Tagger,
    minilm: Option<MiniLm>,
    tuned: Option<Tuned>,
    device: burn::tensor::Device,
}

/// The fine-tuned query encoder: the frozen lower MiniLM layers (burn engine) and the tuned top.
struct Tuned {
    bert: MiniLm,
    top: TopLayers,
    shape: TopShape,
}

impl Tuned {
    /// Token states of `texts` after the frozen layers.
    fn states(bert: &MiniLm, layers: usize, texts: &[&str], progress: Progress, what: &str) -> Result<Vec<Vec<f32>>> {
        let Engine::Burn(b) = &bert.engine else { return Err(StageError::Internal("the tuned encoder needs MiniLM's burn engine".into())) };
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| bert.token_ids(t)).collect::<std::result::Result<_, _>>()?;
        let pb = progress.bar(texts.len() as u64, what);
        let depth = b.config().num_hidden_layers;
        let st = b.hidden_states(&ids, depth.saturating_sub(layers), EncodeOptions::default(), &|n| pb.inc(n as u64))?;
        pb.finish_and_clear();
        Ok(st)
    }

    /// Tuned sentence embeddings (`texts.len() × 384`).
    fn embed(&self, texts: &[&str], progress: Progress, what: &str, dev: &burn::tensor::Device) -> Result<Vec<f32>> {
        let st = Self::states(&self.bert, self.shape.layers, texts, progress, what)?;
        Ok(self.top.embed(&self.shape, &st, 64, dev)?)
    }
}

/// One produced plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Produced {
    /// The metapaths, in order (none when the planner gave no plan).
    pub paths: Vec<Metapath>,
    /// The restrictions: (node type, texts), types sorted.
    pub restriction_spans: Vec<(String, Vec<String>)>,
    /// `paths` in MoR syntax ([`PlanSyntax`]): `a -> b <- c` (several paths joined by `, `) or
    /// Prime's JSON list of lists; empty when the planner gave no plan.
    pub metapath: String,
    /// `restriction_spans` as JSON `{type: [text, …]}` (types sorted).
    pub restrictions: String,
    /// The decoder's tokens did not alternate type and hop, so no plan was produced (counted in
    /// [`Figures::malformed`]; MoR treats it as its empty plan).
    pub malformed: bool,
}

/// Per-file figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub lines: usize,
    /// Lines whose gold plan does not parse (left out of the metapath figures).
    pub rejected: usize,
    pub metapath_exact: f64,
    pub path_set_exact: f64,
    pub restriction_token_f1: f64,
    /// Predicted token sequences that were not a plan (scored as the empty plan).
    pub malformed: usize,
}

/// Per validation line: gold and predicted plans and the per-query scores.
#[derive(Debug, Clone)]
pub struct Scored {
    pub line: usize,
    pub q_id: Option<i64>,
    pub gold: Option<Produced>,
    pub pred: Produced,
    pub exact: Option<bool>,
    pub token_f1: f64,
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

fn hop_token(rel: &Option<String>, dir: Dir) -> String {
    match (rel, dir) {
        (Some(r), Dir::Forward) => format!("-{r}->"),
        (Some(r), Dir::Backward) => format!("<-{r}-"),
        (None, Dir::Forward) => "->".into(),
        (None, Dir::Backward) => "<-".into(),
    }
}

/// The token sequence of a plan's metapaths.
pub fn plan_tokens(paths: &[Metapath]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            out.push("|".to_string());
        }
        for (k, t) in p.types.iter().enumerate() {
            if k > 0 {
                out.push(hop_token(&p.hops[k - 1].0, p.hops[k - 1].1));
            }
            out.push(t.clone());
        }
    }
    out
}

fn parse_hop(tok: &str) -> Option<(Option<String>, Dir)> {
    match tok {
        "->" => Some((None, Dir::Forward)),
        "<-" => Some((None, Dir::Backward)),
        _ if tok.len() > 3 && tok.starts_with('-') && tok.ends_with("->") => Some((Some(tok[1..tok.len() - 2].to_string()), Dir::Forward)),
        _ if tok.len() > 3 && tok.starts_with("<-") && tok.ends_with('-') => Some((Some(tok[2..tok.len() - 1].to_string()), Dir::Backward)),
        _ => None,
    }
}

/// Metapaths from tokens; `None` when the sequence does not alternate type / hop / type.
pub fn tokens_to_paths(tokens: &[String]) -> Option<Vec<Metapath>> {
    if tokens.is_empty() {
        return Some(Vec::new());
    }
    tokens
        .split(|t| t == "|")
        .map(|seg| {
            if seg.len() % 2 == 0 {
                return None;
            }
            let mut p = Metapath { types: Vec::new(), hops: Vec::new() };
            for (k, t) in seg.iter().enumerate() {
                if k % 2 == 0 {
                    if t == "|" || parse_hop(t).is_some() {
                        return None;
                    }
                    p.types.push(t.clone());
                } else {
                    p.hops.push(parse_hop(t)?);
                }
            }
            Some(p)
        })
        .collect()
}

/// How MoR's plan files write a metapath: `model.json`'s `syntax`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanSyntax {
    /// Amazon's and MAG's strings: `a -> b <- c`, several paths joined by `, `.
    Arrow,
    /// Prime's JSON list of lists: `[[type, relation, type, …], …]`.
    Lists,
}

/// Renders metapaths in MoR's syntax; paths in the given order.
pub fn render_metapath(paths: &[Metapath], syntax: PlanSyntax) -> Result<String> {
    if paths.is_empty() {
        return Ok(String::new());
    }
    if syntax == PlanSyntax::Lists {
        let lists: Vec<Vec<String>> = paths
            .iter()
            .map(|p| {
                let mut v = vec![p.types[0].clone()];
                for (k, (r, _)) in p.hops.iter().enumerate() {
                    v.push(r.clone().unwrap_or_default());
                    v.push(p.types[k + 1].clone());
                }
                v
            })
            .collect();
        serde_json::to_string(&lists).map_err(|e| StageError::Internal(format!("metapath as JSON: {e}")))
    } else {
        Ok(paths.iter().map(Metapath::to_mor_string).collect::<Vec<_>>().join(", "))
    }
}

/// A plan as produced: the typed paths and restrictions, and both rendered as MoR writes them.
fn produced(paths: Vec<Metapath>, restriction_spans: Vec<(String, Vec<String>)>, syntax: PlanSyntax, malformed: bool) -> Result<Produced> {
    Ok(Produced {
        metapath: render_metapath(&paths, syntax)?,
        restrictions: render_restrictions(&restriction_spans)?,
        paths,
        restriction_spans,
        malformed,
    })
}

fn render_restrictions(r: &[(String, Vec<String>)]) -> Result<String> {
    let m: BTreeMap<&str, &Vec<String>> = r.iter().map(|(k, v)| (k.as_str(), v)).collect();
    serde_json::to_string(&m).map_err(|e| StageError::Internal(format!("restrictions as JSON: {e}")))
}

/// The gold plan of a line: parsed, or the empty plan for MoR's `''`; `None` for other rejections.
fn gold_plan(l: &PlanLine) -> Option<Plan> {
    match &l.plan {
        Ok(p) => Some(p.clone()),
        Err(e) if e.starts_with("empty Metapath") => Some(Plan { metapaths: Vec::new(), restrictions: Vec::new() }),
        Err(_) => None,
    }
}

/// Word shape ids (see `models::tagger::SHAPES`): case/digit class, +5 when next to a quote.
fn shape(text: &str, s: usize, e: usize) -> u32 {
    let w = &text[s..e];
    let base = if w.chars().any(|c| c.is_numeric()) {
        4
    } else if w.chars().all(|c| !c.is_uppercase()) {
        1
    } else if w.chars().count() > 1 && w.chars().all(|c| !c.is_lowercase()) {
        3
    } else if w.chars().next().is_some_and(char::is_uppercase) {
        2
    } else {
        5
    };
    let quote = |c: Option<char>| c.is_some_and(|c| "'\"“”‘’".contains(c));
    let near_quote = quote(text[..s].chars().next_back()) || quote(text[e..].chars().next());
    base + if near_quote { 5 } else { 0 }
}

fn bucket(word: &str, buckets: usize) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    1 + (h % (buckets.max(2) as u64 - 1)) as u32
}

/// Tagger input of a query (labels empty).
fn sentence(query: u32, text: &str, buckets: usize) -> (Sentence, Vec<(String, usize, usize)>) {
    let ws = words(text);
    let s = Sentence {
        query,
        words: ws.iter().map(|(w, _, _)| bucket(w, buckets)).collect(),
        shapes: ws.iter().map(|(_, s, e)| shape(text, *s, *e)).collect(),
        plan_types: Vec::new(),
        labels: Vec::new(),
    };
    (s, ws)
}

/// BIO labels of gold restrictions over the query's words.
fn gold_labels(ws: &[(String, usize, usize)], restrictions: &[(String, Vec<String>)], types: &HashMap<String, u32>) -> Vec<u32> {
    let mut labels = vec![0u32; ws.len()];
    for (ty, texts) in restrictions {
        let Some(&t) = types.get(ty) else { continue };
        for text in texts {
            let span: Vec<String> = words(text).into_iter().map(|w| w.0).collect();
            if span.is_empty() || span.len() > ws.len() {
                continue;
            }
            let at = (0..=ws.len() - span.len()).find(|&i| (0..span.len()).all(|k| labels[i + k] == 0 && ws[i + k].0 == span[k]));
            if let Some(i) = at {
                labels[i] = 1 + 2 * t;
                for l in &mut labels[i + 1..i + span.len()] {
                    *l = 2 + 2 * t;
                }
            }
        }
    }
    labels
}

/// Restriction spans from labels: `(type, text)` in order of appearance.
fn spans(text: &str, ws: &[(String, usize, usize)], labels: &[u32], types: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cur: Option<(u32, usize, usize)> = None;
    let mut flush = |c: Option<(u32, usize, usize)>| {
        if let Some((t, s, e)) = c
            && let Some(ty) = types.get(t as usize)
        {
            out.entry(ty.clone()).or_default().push(text[s..e].to_string());
        }
    };
    for (i, &l) in labels.iter().enumerate() {
        let (_, s, e) = ws[i];
        if l == 0 {
            flush(cur.take());
            continue;
        }
        let t = (l - 1) / 2;
        match cur {
            Some((ct, cs, _)) if ct == t && l % 2 == 0 => cur = Some((ct, cs, e)),
            _ => {
                flush(cur.take());
                cur = Some((t, s, e));
            }
        }
    }
    flush(cur);
    out.into_iter().collect()
}

/// Restriction token F1 of one query (see the module doc).
pub fn token_f1(pred: &[(String, Vec<String>)], gold: &[(String, Vec<String>)]) -> f64 {
    let bag = |r: &[(String, Vec<String>)]| {
        let mut m: HashMap<(String, String), usize> = HashMap::new();
        for (t, texts) in r {
            for x in texts {
                for (w, _, _) in words(x) {
                    *m.entry((t.clone(), w)).or_default() += 1;
                }
            }
        }
        m
    };
    let (p, g) = (bag(pred), bag(gold));
    let (np, ng): (usize, usize) = (p.values().sum(), g.values().sum());
    if np + ng == 0 {
        return 1.0;
    }
    let common: usize = p.iter().map(|(k, &c)| c.min(g.get(k).copied().unwrap_or(0))).sum();
    2.0 * common as f64 / (np + ng) as f64
}

/// Query vectors (`n × qdim`).
fn encode(
    texts: &[&str],
    meta_encoder: Encoder,
    hash_dim: usize,
    enc: (Option<&MiniLm>, Option<&Tuned>),
    progress: Progress,
    what: &str,
    dev: &burn::tensor::Device,
) -> Result<(Vec<f32>, usize)> {
    let dense = match (meta_encoder, enc) {
        (Encoder::Minilm, (_, Some(t))) => Some((t.embed(texts, progress, what, dev)?, t.shape.dim)),
        (Encoder::Minilm, (Some(m), None)) => {
            let pb = progress.bar(texts.len() as u64, what);
            let v = m.encode(texts, tgrag_models::minilm::EncodeOptions::default(), &|n| pb.inc(n as u64))?;
            pb.finish_and_clear();
            Some((v, m.dim()))
        }
        (Encoder::Minilm, (None, None)) => return Err(StageError::Internal("MiniLM encoder not loaded".into())),
        (Encoder::Hash, _) => None,
    };
    let ddim = dense.as_ref().map_or(0, |d| d.1);
    let qdim = ddim + hash_dim;
    let mut out = Vec::with_capacity(texts.len() * qdim);
    for (i, t) in texts.iter().enumerate() {
        if let Some((v, d)) = &dense {
            out.extend_from_slice(&v[i * d..(i + 1) * d]);
        }
        out.extend(hash_embed(t, hash_dim)?);
    }
    Ok((out, qdim))
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
    // Seeded 10 % of plans_train for checkpoint selection.
    let mut rng = tgrag_datasets::rng::Rng::new(opts.seed ^ 0x6465_7673);
    let mut is_dev: Vec<bool> = tr.iter().map(|_| rng.chance(0.1)).collect();
    if !is_dev.iter().any(|&d| d)
        && let Some(d) = is_dev.first_mut()
    {
        *d = true;
    }
    let train_lines: Vec<&PlanLine> = ft.iter().chain(tr.iter().zip(&is_dev).filter(|(_, d)| !**d).map(|(l, _)| l)).collect();
    let dev_lines: Vec<&PlanLine> = tr.iter().zip(&is_dev).filter(|(_, d)| **d).map(|(l, _)| l).collect();
    let gold_train: Vec<Option<Plan>> = train_lines.iter().map(|l| gold_plan(l)).collect();
    if gold_train.iter().all(Option::is_none) {
        return Err(StageError::Input(format!("{}: no plan parses; nothing to train on", plans.display())));
    }
    // Vocabularies, in first-seen order over the training lines (deterministic).
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
    fn texts<'a>(ls: &[&'a PlanLine]) -> Vec<&'a str> {
        ls.iter().map(|l| l.query.as_str()).collect()
    }
    let dev = opts.device.device();
    let tuning = opts.encoder == Encoder::Minilm && opts.tune.layers > 0;
    let minilm = match opts.encoder {
        Encoder::Minilm if !tuning => Some(load_minilm(opts.model_dir.as_deref(), opts.device, HASH_OPTION)?),
        _ => None,
    };
    let (tuned, encoder_curve, encoder_epoch) = if tuning {
        let (t, c, e) = tune_encoder(opts, &train_lines, &gold_train, &dev_lines, progress)?;
        (Some(t), c, e)
    } else {
        (None, Vec::new(), 0)
    };
    let enc = (minilm.as_ref(), tuned.as_ref());
    let (q_train, qdim) =
        encode(&texts(&train_lines), opts.encoder, opts.hash_dim, enc, progress, "train-planner: embed training queries", &dev)?;
    let (q_dev, _) = encode(&texts(&dev_lines), opts.encoder, opts.hash_dim, enc, progress, "train-planner: embed dev queries", &dev)?;
    let mut candidates: Vec<Vec<String>> = Vec::new();
    if opts.decode == Decode::Candidates {
        for (l, p) in train_lines.iter().zip(&gold_train) {
            let w = if l.q_id.is_none() { opts.finetune_weight } else { 1.0 };
            if let Some(p) = p.as_ref().filter(|_| w > 0.0) {
                let toks = plan_tokens_of(p);
                if !candidates.contains(&toks) {
                    candidates.push(toks);
                }
            }
        }
    }
    let meta = ModelMeta {
        format: 1,
        encoder: opts.encoder,
        model_dir: opts.model_dir.clone(),
        hash_dim: opts.hash_dim,
        qdim,
        syntax: if lists { PlanSyntax::Lists } else { PlanSyntax::Arrow },
        plan_tokens,
        types,
        planner_hidden: opts.planner.hidden,
        max_len,
        buckets: opts.buckets,
        window: opts.window,
        tagger_hidden: opts.tagger_hidden,
        candidates,
        tune_layers: tuned.as_ref().map_or(0, |t| t.shape.layers),
        tune_classes: tuned.as_ref().map_or(0, |t| t.shape.classes),
    };
    let tok_id: HashMap<&str, u32> = meta.plan_tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32 + 2)).collect();
    let type_id: HashMap<String, u32> = meta.types.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let seq_data = |lines: &[&PlanLine], q: Vec<f32>| {
        let mut d = SeqData { dim: qdim, queries: q, targets: Vec::new() };
        for (i, l) in lines.iter().enumerate() {
            // llama_ft lines are the ones without a q_id.
            let w = if l.q_id.is_none() { opts.finetune_weight } else { 1.0 };
            if w > 0.0
                && let Some(p) = gold_plan(l)
                && let Some(ids) = plan_tokens_of(&p).iter().map(|t| tok_id.get(t.as_str()).copied()).collect::<Option<Vec<u32>>>()
                && ids.len() < max_len
            {
                d.targets.push((i as u32, ids, w));
            }
        }
        d
    };
    let tag_data = |lines: &[&PlanLine], q: Vec<f32>| {
        let mut d = TagData { qdim, queries: q, sentences: Vec::new() };
        for (i, l) in lines.iter().enumerate() {
            let Some(p) = gold_plan(l) else { continue };
            let (mut s, ws) = sentence(i as u32, &l.query, meta.buckets);
            s.plan_types = plan_types(&p, &type_id);
            s.labels = gold_labels(&ws, &p.restrictions, &type_id);
            d.sentences.push(s);
        }
        d
    };
    let pcfg = PlannerConfig { max_len, seed: opts.seed, ..opts.planner.clone() };
    let (planner, planner_curve, planner_epoch) = tgrag_models::planner::train_planner(
        meta.planner_shape(),
        &seq_data(&train_lines, q_train.clone()),
        &seq_data(&dev_lines, q_dev.clone()),
        &pcfg,
        &dev,
    )?;
    let tcfg = TaggerConfig { seed: opts.seed, ..opts.tagger.clone() };
    let (tagger, tagger_curve, tagger_epoch) = tgrag_models::tagger::train_tagger(
        meta.tagger_shape(),
        &tag_data(&train_lines, q_train),
        &tag_data(&dev_lines, q_dev),
        &tcfg,
        &dev,
    )?;
    Ok(Trained {
        model: PlanModel { meta, planner, tagger, minilm, tuned, device: dev },
        encoder_curve,
        encoder_epoch,
        planner_curve,
        planner_epoch,
        tagger_curve,
        tagger_epoch,
        train_plans: gold_train.iter().flatten().count(),
        dev_plans: dev_lines.iter().filter(|l| gold_plan(l).is_some()).count(),
        dropped: dropped_lines(&train_lines.iter().chain(&dev_lines).copied().collect::<Vec<_>>()),
    })
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

fn plan_tokens_of(p: &Plan) -> Vec<String> {
    plan_tokens(&p.metapaths)
}

fn plan_types(p: &Plan, type_id: &HashMap<String, u32>) -> Vec<u32> {
    let mut v: Vec<u32> = p.metapaths.iter().flat_map(|m| m.types.iter()).filter_map(|t| type_id.get(t).copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl PlanModel {
    /// Writes `model.json`, `planner.safetensors` and `tagger.safetensors` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| StageError::Io { path: dir.to_path_buf(), source })?;
        self.planner.save(&dir.join("planner.safetensors"))?;
        self.tagger.save(&dir.join("tagger.safetensors"))?;
        if let Some(t) = &self.tuned {
            t.top.save(&dir.join("encoder.safetensors"))?;
        }
        let json = serde_json::to_vec_pretty(&self.meta).map_err(|e| StageError::Internal(format!("model.json: {e}")))?;
        tgrag_schemas::io::write_bytes_atomic(&dir.join("model.json"), &json)?;
        Ok(())
    }

    /// Loads a folder written by [`PlanModel::save`] (strict weights; the MiniLM model when the
    /// planner was trained with it).
    pub fn load(dir: &Path, device: DeviceChoice) -> Result<Self> {
        let mp = dir.join("model.json");
        let bytes = std::fs::read(&mp).map_err(|source| StageError::Io { path: mp.clone(), source })?;
        let meta: ModelMeta =
            serde_json::from_slice(&bytes).map_err(|e| StageError::Input(format!("{}: not a planner model.json: {e}", mp.display())))?;
        if meta.format != 1 {
            return Err(StageError::Input(format!("{}: format {} (this tgrag reads format 1)", mp.display(), meta.format)));
        }
        let dev = device.device();
        let planner = Planner::load(&dir.join("planner.safetensors"), meta.planner_shape(), &dev)?;
        let tagger = Tagger::load(&dir.join("tagger.safetensors"), meta.tagger_shape(), &dev)?;
        let tuning = meta.encoder == Encoder::Minilm && meta.tune_layers > 0;
        let minilm = match meta.encoder {
            Encoder::Minilm if !tuning => Some(load_minilm(meta.model_dir.as_deref(), device, PLAN_HINT)?),
            _ => None,
        };
        let tuned = if tuning {
            let bert = load_minilm_burn(meta.model_dir.as_deref(), device, PLAN_HINT)?;
            let Engine::Burn(b) = &bert.engine else {
                return Err(StageError::Internal("the tuned encoder needs MiniLM's burn engine".into()));
            };
            let shape = b.top_shape(meta.tune_layers, meta.tune_classes);
            let top = TopLayers::load(&dir.join("encoder.safetensors"), shape, &dev)?;
            Some(Tuned { bert, top, shape })
        } else {
            None
        };
        Ok(PlanModel { meta, planner, tagger, minilm, tuned, device: dev })
    }

    /// Plans for queries: the metapath (greedy, or the best of the decoding candidates), then
    /// restrictions tagged with the plan's types.
    pub fn plan(&self, texts: &[&str], progress: Progress) -> Result<Vec<Produced>> {
        let m = &self.meta;
        let (q, qdim) = encode(
            texts,
            m.encoder,
            m.hash_dim,
            (self.minilm.as_ref(), self.tuned.as_ref()),
            progress,
            "plan: embed queries",
            &self.device,
        )?;
        if qdim != m.qdim {
            // model.json's width and its encoder's disagree: the model folder does not fit together.
            return Err(StageError::ModelFile(format!(
                "model.json: the planner reads queries {} wide, but its encoder ({:?}, hash_dim {}) gives {qdim}: the model folder \
                 does not fit its encoder (retrain it with `tgrag train-planner`)",
                m.qdim, m.encoder, m.hash_dim
            )));
        }
        let tok_id: HashMap<&str, u32> = m.plan_tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32 + 2)).collect();
        let candidates: Vec<Vec<u32>> = m
            .candidates
            .iter()
            .map(|c| c.iter().map(|t| tok_id.get(t.as_str()).copied()).collect::<Option<Vec<u32>>>())
            .collect::<Option<_>>()
            .ok_or_else(|| StageError::Input("model.json: a decoding candidate uses a token outside plan_tokens".into()))?;
        let seqs = self.planner.best_of(&q, qdim, m.max_len, &candidates, &self.device)?;
        let type_id: HashMap<String, u32> = m.types.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut data = TagData { qdim, queries: q, sentences: Vec::new() };
        let mut paths_of = Vec::new();
        let mut words_of = Vec::new();
        let mut malformed = Vec::new();
        for (i, (text, seq)) in texts.iter().zip(&seqs).enumerate() {
            let toks: Vec<String> =
                seq.iter().filter(|&&t| t != BOS && t != EOS).filter_map(|&t| m.plan_tokens.get(t as usize - 2).cloned()).collect();
            // A sequence that does not alternate type / hop is no plan (MoR's `''`), and counted.
            let parsed = tokens_to_paths(&toks);
            malformed.push(parsed.is_none());
            let paths = parsed.unwrap_or_default();
            let (mut s, ws) = sentence(i as u32, text, m.buckets);
            s.plan_types = plan_types(&Plan { metapaths: paths.clone(), restrictions: Vec::new() }, &type_id);
            data.sentences.push(s);
            paths_of.push(paths);
            words_of.push(ws);
        }
        let labels = self.tagger.predict(&m.tagger_shape(), &data, &self.device)?;
        texts
            .iter()
            .zip(paths_of)
            .zip(words_of.iter().zip(&labels))
            .zip(malformed)
            .map(|(((text, paths), (ws, l)), malformed)| produced(paths, spans(text, ws, l, &m.types), m.syntax, malformed))
            .collect()
    }

    /// Plans every line of a plan file and scores them against its gold plans.
    pub fn score_file(&self, path: &Path, progress: Progress) -> Result<(Figures, Vec<Scored>)> {
        let lines = if path.file_name().is_some_and(|f| f == "llama_ft.jsonl") {
            tgrag_datasets::mor_plans::read_finetune(path, None)?
        } else {
            tgrag_datasets::mor_plans::read_plans(path, None)?
        };
        let texts: Vec<&str> = lines.iter().map(|l| l.query.as_str()).collect();
        let pred = self.plan(&texts, progress)?;
        let mut rows = Vec::with_capacity(lines.len());
        let (mut judged, mut exact, mut set_exact, mut f1_sum) = (0usize, 0usize, 0usize, 0.0);
        let malformed = pred.iter().filter(|p| p.malformed).count();
        for (l, p) in lines.iter().zip(pred) {
            let gold = gold_plan(l);
            let (g, ex, f1) = match &gold {
                Some(g) => {
                    let gold = produced(g.metapaths.clone(), g.restrictions.clone(), self.meta.syntax, false)?;
                    // Exact: the same paths in the same order, as written in the plan file's syntax.
                    let ex = gold.metapath == p.metapath;
                    let one = |m: &Metapath| render_metapath(std::slice::from_ref(m), self.meta.syntax);
                    let mut a: Vec<String> = g.metapaths.iter().map(one).collect::<Result<_>>()?;
                    let mut b: Vec<String> = p.paths.iter().map(one).collect::<Result<_>>()?;
                    a.sort();
                    b.sort();
                    judged += 1;
                    exact += usize::from(ex);
                    set_exact += usize::from(a == b);
                    let f1 = token_f1(&p.restriction_spans, &g.restrictions);
                    (Some(gold), Some(ex), f1)
                }
                None => (None, None, 0.0),
            };
            if gold.is_some() {
                f1_sum += f1;
            }
            rows.push(Scored { line: l.line, q_id: l.q_id, gold: g, pred: p, exact: ex, token_f1: f1 });
        }
        let d = judged.max(1) as f64;
        Ok((
            Figures {
                lines: lines.len(),
                rejected: lines.len() - judged,
                metapath_exact: exact as f64 / d,
                path_set_exact: set_exact as f64 / d,
                restriction_token_f1: f1_sum / d,
                malformed,
            },
            rows,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens of a rendered metapath, read back independently of [`render_metapath`] (JSON parser,
    /// MoR's arrow parser).
    fn p_tokens(s: &str, syntax: PlanSyntax) -> Result<Vec<String>> {
        if s.is_empty() {
            return Ok(Vec::new());
        }
        let paths: Vec<Metapath> = if syntax == PlanSyntax::Lists {
            let lists: Vec<Vec<String>> =
                serde_json::from_str(s).map_err(|e| StageError::Internal(format!("re-reading the metapath {s}: {e}")))?;
            lists
                .into_iter()
                .map(|l| Metapath {
                    types: l.iter().step_by(2).cloned().collect(),
                    hops: l.iter().skip(1).step_by(2).map(|r| (Some(r.clone()), Dir::Forward)).collect(),
                })
                .collect()
        } else {
            s.split(", ")
                .map(|p| {
                    tgrag_datasets::mor_plans::parse_arrow_path(p)
                        .map_err(|e| StageError::Internal(format!("re-reading the metapath {s}: {e}")))
                })
                .collect::<Result<_>>()?
        };
        Ok(plan_tokens(&paths))
    }

    fn r(v: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        v.iter().map(|(t, x)| (t.to_string(), x.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn tokens_round_trip_both_syntaxes_and_bad_sequences_are_no_plan() {
        let arrow = tgrag_datasets::mor_plans::parse_arrow_path("institution -> author -> paper <- field_of_study")
            .unwrap_or_else(|e| panic!("{e}"));
        let t = plan_tokens(std::slice::from_ref(&arrow));
        assert_eq!(t, ["institution", "->", "author", "->", "paper", "<-", "field_of_study"]);
        assert_eq!(tokens_to_paths(&t), Some(vec![arrow.clone()]));
        assert_eq!(render_metapath(&[arrow], PlanSyntax::Arrow).expect("render"), "institution -> author -> paper <- field_of_study");
        let prime = vec![
            Metapath {
                types: vec!["anatomy".into(), "gene/protein".into()],
                hops: vec![(Some("expression present".into()), Dir::Forward)],
            },
            Metapath { types: vec!["disease".into(), "disease".into()], hops: vec![(Some("parent-child".into()), Dir::Forward)] },
        ];
        let t = plan_tokens(&prime);
        assert_eq!(t, ["anatomy", "-expression present->", "gene/protein", "|", "disease", "-parent-child->", "disease"]);
        let s = render_metapath(&prime, PlanSyntax::Lists).expect("render");
        assert_eq!(s, r#"[["anatomy","expression present","gene/protein"],["disease","parent-child","disease"]]"#);
        assert_eq!(p_tokens(&s, PlanSyntax::Lists).expect("tokens"), t);
        assert!(p_tokens("[[\"anatomy\"", PlanSyntax::Lists).is_err(), "a metapath that does not read back is an error, not an empty plan");
        for bad in [vec!["->"], vec!["a", "->"], vec!["a", "b"], vec!["a", "|"]] {
            let bad: Vec<String> = bad.into_iter().map(String::from).collect();
            assert_eq!(tokens_to_paths(&bad), None, "{bad:?}");
        }
        assert_eq!(tokens_to_paths(&[]), Some(vec![]));
    }

    #[test]
    fn gold_labels_and_spans_round_trip_by_hand() {
        let q = "Papers from Eckerd College on the neutron scattering of 6He?";
        let types: Vec<String> = vec!["institution".into(), "paper".into()];
        let ids: HashMap<String, u32> = types.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let ws = words(q);
        let gold = r(&[("institution", &["Eckerd College"]), ("paper", &["neutron scattering of 6He", "not in the query"])]);
        let l = gold_labels(&ws, &gold, &ids);
        //                  papers from eckerd college on the neutron scattering of 6he
        assert_eq!(l, vec![0, 0, 1, 2, 0, 0, 3, 4, 4, 4]);
        assert_eq!(spans(q, &ws, &l, &types), r(&[("institution", &["Eckerd College"]), ("paper", &["neutron scattering of 6He"])]));
        // Two adjacent B labels are two spans; an I after O starts one.
        assert_eq!(
            spans(q, &ws, &[0, 0, 1, 1, 0, 0, 0, 4, 0, 0], &types),
            r(&[("institution", &["Eckerd", "College"]), ("paper", &["scattering"])])
        );
    }

    #[test]
    fn token_f1_by_hand() {
        let gold = r(&[("paper", &["neutron scattering"]), ("institution", &["Eckerd College"])]);
        // pred: paper {neutron}, institution {eckerd, college, university}: common 3; |P| = 4, |G| = 4.
        let pred = r(&[("paper", &["Neutron"]), ("institution", &["Eckerd College University"])]);
        assert!((token_f1(&pred, &gold) - 6.0 / 8.0).abs() < 1e-12);
        // The type matters.
        assert_eq!(token_f1(&r(&[("author", &["neutron scattering"])]), &r(&[("paper", &["neutron scattering"])])), 0.0);
        assert_eq!(token_f1(&[], &[]), 1.0);
    }

    #[test]
    fn shapes() {
        let q = "from 'Eckerd' NASA 6He data x";
        let s: Vec<u32> = words(q).iter().map(|(_, a, b)| shape(q, *a, *b)).collect();
        assert_eq!(s, vec![1, 7, 3, 4, 1, 1]);
    }
}
