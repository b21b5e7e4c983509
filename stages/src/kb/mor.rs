//! `mor`: MoR (Planning → Reasoning → Organizing) on a knowledge base, in four named steps.
//!
//! * [`plan`]: the burn planner ([`tgrag_models::planner`]) trained on the `planning` stage's
//!   planning graphs of the training queries (validation queries pick the checkpoint), fed the
//!   query's dense vector; its metapath tokens are the whitespace pieces of MoR's string syntax.
//! * [`reason`] (mixed traversal, [`crate::kb::traversal`], MoR's release constants): restrictions
//!   copied from the query (matched node names on the first type, the rest of the query on the last
//!   type); seeds = BM25 top-5 among nodes of the path's first type for `query + " " +
//!   restrictions`; each hop follows neighbours of the next type (and relation/direction where
//!   given); a type with a restriction adds its BM25 top-10; the first path to reach a node wins;
//!   paths are intersected (union when empty); an invalid or empty plan falls back to BM25 top-100;
//!   BM25 fills up to 100 candidates, ordered by the dense score. BM25 is the `bm25` stage's own
//!   index, with its parameters.
//! * [`organize`]: the structure-aware reranker ([`tgrag_models::reranker`], features from
//!   [`crate::kb::rerank`]; `reranker_head` picks the paper's MLP head or MoR's released linear one).
//! * [`write()`]: `plans`, `run` (with trajectories), `curves`, and the per-query latency of each phase
//!   in `latency` (run-dependent, like `timings`).
//!
//! Runs: `mor` (reranked), `mor-no-rerank` (dense order), `mor-no-text` (no BM25 additions or fill),
//! `mor-no-structure` (BM25 on the restrictions within the target type, no traversal).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float32Builder, Float64Array, ListBuilder, RecordBatch, StringArray, StringBuilder, UInt8Array,
    UInt32Array, UInt32Builder,
};
use burn::tensor::Device;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_models::planner::{PlannerConfig, PlannerEpoch, PlannerShape, SeqData, train_planner};
use tgrag_models::reranker::{Features, Group, Head, RerankerConfig, RerankerEpoch, train_reranker};
use tgrag_schemas::columns;

use crate::kb::kb::{Kb, MIN_NAME_CHARS, TypedGraph, remaining_text};
use crate::kb::rerank::{Ranked, features};
use crate::kb::traversal::{TextIndex, Traj, TraversalConfig, parse_tokens, traverse};
use crate::shared::curves::Curves;
use crate::shared::run::by_score_then_id;
use crate::stage::Width;
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `mor` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MorConfig {
    /// The mixed traversal's bounds (MoR's release constants).
    pub traversal: TraversalConfig,
    /// Epochs of the planner (the metapath decoder trained on the planning graphs).
    pub planner_epochs: usize,
    /// Hidden width of the planner.
    pub planner_hidden: Width,
    /// Epochs of the structure-aware reranker.
    pub reranker_epochs: usize,
    /// Negative candidates per training query of the reranker (queries with fewer are left out).
    pub negatives: usize,
    /// Reranker head: `paper` (1280 → 256 → ReLU → 1) or `released` (MoR's code: 1280 → 1 → 1).
    #[serde(default)]
    pub reranker_head: Head,
    /// Seed of the planner and the reranker (weights, batches, negatives).
    pub seed: u64,
    /// Where the planner and the reranker train: `cpu`, `gpu` (burn on wgpu) or `auto`.
    #[serde(default)]
    pub device: tgrag_models::DeviceChoice,
}

impl Default for MorConfig {
    fn default() -> Self {
        MorConfig {
            traversal: TraversalConfig::default(),
            planner_epochs: 40,
            planner_hidden: const { Width::new(256) },
            reranker_epochs: 20,
            negatives: 15,
            reranker_head: Head::Paper,
            seed: 0,
            device: tgrag_models::DeviceChoice::Cpu,
        }
    }
}

pub struct MorStage;

static INFO: StageInfo = StageInfo {
    name: "mor",
    module: module_path!(),
    version: 3,
    about: "MoR: burn planner → mixed traversal (BM25 + typed BFS) → structure-aware reranker (methods mor, mor-no-rerank, mor-no-text, mor-no-structure)",
    deps: &["ingest", "bm25", "dense", "planning"],
    needs: &[("ingest", "nodes"), ("ingest", "edges"), ("ingest", "queries"), ("ingest", "answers")],
    excludes: &[],
    collects: &[],
    outputs: &["plans", "run", "curves", "latency"],
    files: &[],
    shards: None,
};

/// The methods of the `run` table, in order.
pub const METHODS: [&str; 4] = ["mor", "mor-no-rerank", "mor-no-text", "mor-no-structure"];

/// The planner's training data: metapath token sequences of the planning graphs (training queries
/// train, the others validate) and the token vocabulary (`<bos>`, `<eos>`, then first-seen order).
pub struct PlanData {
    pub vocab: Vec<String>,
    pub train: SeqData,
    pub val: SeqData,
}

/// The planner's training data of the `planning_graphs` table.
pub fn plan_data(kb: &Kb, planning_graphs: &RecordBatch) -> Result<PlanData> {
    let (pq, ps, pm) = (
        columns::u32s(planning_graphs, "query_id")?,
        columns::strs(planning_graphs, "split")?,
        columns::strs(planning_graphs, "metapath")?,
    );
    let mut vocab: Vec<String> = vec!["<bos>".into(), "<eos>".into()];
    let mut tok_id: HashMap<String, u32> = HashMap::new();
    let (mut train, mut val) = (SeqData { dim: kb.dim, ..Default::default() }, SeqData { dim: kb.dim, ..Default::default() });
    for i in 0..pq.len() {
        let data = if ps.value(i) == "train" { &mut train } else { &mut val };
        let mut seq = Vec::new();
        for t in pm.value(i).split_whitespace() {
            let id = *tok_id.entry(t.to_string()).or_insert_with(|| {
                vocab.push(t.to_string());
                vocab.len() as u32 - 1
            });
            seq.push(id);
        }
        let row = data.n_queries() as u32;
        data.queries.extend_from_slice(kb.query_emb(pq.value(i)));
        data.targets.push((row, seq, 1.0));
    }
    Ok(PlanData { vocab, train, val })
}

/// What planning produced: one token sequence per query (in `order`), the training curve, the kept
/// epoch, and the per-query share of the decoding time.
pub struct Planned {
    pub plans: Vec<Vec<String>>,
    pub curve: Vec<PlannerEpoch>,
    pub best: u32,
    pub seconds_each: f64,
}

/// Step 1: trains the planner and decodes a plan for every query of `order` (greedy). Without
/// training plans (no training query reaches an answer) every plan is empty, and MoR falls back to
/// text retrieval, as it does for an invalid plan.
pub fn plan(kb: &Kb, data: &PlanData, order: &[u32], cfg: &MorConfig, dev: &Device) -> Result<Planned> {
    let pcfg = PlannerConfig { hidden: cfg.planner_hidden.get(), epochs: cfg.planner_epochs, seed: cfg.seed, ..Default::default() };
    let shape = PlannerShape { dim: kb.dim, vocab: data.vocab.len(), hidden: pcfg.hidden, max_len: pcfg.max_len };
    if data.train.targets.is_empty() {
        return Ok(Planned { plans: vec![Vec::new(); order.len()], curve: Vec::new(), best: 0, seconds_each: 0.0 });
    }
    let (planner, curve, best) = train_planner(shape, &data.train, &data.val, &pcfg, dev)?;
    let all_q: Vec<f32> = order.iter().flat_map(|q| kb.query_emb(*q).to_vec()).collect();
    let t0 = Instant::now();
    let tokens = planner.greedy(&all_q, kb.dim, pcfg.max_len, dev)?;
    // Plans are decoded in one batch: the per-query figure is the batch time over the queries.
    let seconds_each = t0.elapsed().as_secs_f64() / order.len().max(1) as f64;
    let plans = tokens.iter().map(|t| t.iter().map(|&id| data.vocab.get(id as usize).cloned().unwrap_or_default()).collect()).collect();
    Ok(Planned { plans, curve, best, seconds_each })
}

/// One query after reasoning.
#[derive(Debug, Clone, PartialEq)]
pub struct Reasoned {
    /// The plan as text and whether it parsed against the KB.
    pub metapath: String,
    pub valid: bool,
    /// Restrictions by type name, as JSON.
    pub restrictions: String,
    /// Candidates of `mor-no-rerank` (full traversal), `mor-no-text`, `mor-no-structure`.
    pub runs: [Ranked; 3],
    /// BM25 scores of the query with its restrictions (top 1,000), the reranker's text features.
    pub bm25: HashMap<u32, f32>,
    pub seconds: f64,
}

/// Step 2: MoR's mixed traversal of one query with its plan tokens.
pub fn reason(kb: &Kb, ti: &TextIndex, qid: u32, tokens: &[String], tcfg: &TraversalConfig) -> Result<Reasoned> {
    let t0 = Instant::now();
    let g = &kb.graph;
    let query = kb.query_text(qid);
    let strs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let metapath = strs.join(" ");
    let parsed = parse_tokens(g, &strs).filter(|p| !p.is_empty());
    let mentions = kb.matcher.find(query);
    let mut restr: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    if let Some(p) = parsed.as_ref().and_then(|p| p.first()) {
        for m in &mentions {
            restr.entry(p.start).or_default().push(query[m.start..m.end].to_string());
        }
        let rest = remaining_text(query, &mentions);
        let last = p.hops.last().map_or(p.start, |h| h.to);
        if !rest.is_empty() {
            restr.entry(last).or_default().push(rest);
        }
    }
    let text_all = format!("{query} {}", restr.values().flatten().cloned().collect::<Vec<_>>().join(" "));
    let bm25: HashMap<u32, f32> = ti.top(&text_all, None, 1000).into_iter().collect();
    let finish = |mut c: Vec<(u32, Traj)>, fill: bool| -> Ranked {
        if fill {
            let have: HashSet<u32> = c.iter().map(|x| x.0).collect();
            for (v, _) in ti.top(&text_all, None, tcfg.candidates) {
                if c.len() >= tcfg.candidates {
                    break;
                }
                if !have.contains(&v) {
                    c.push((v, Traj { path: vec![v], via: vec![1], traversal: 255 }));
                }
            }
        }
        let mut r: Ranked = c.into_iter().map(|(v, t)| (v, kb.dense(qid, v), t)).collect();
        r.sort_by(by_score_then_id);
        r.truncate(tcfg.candidates);
        r
    };
    let runs = match &parsed {
        Some(p) => {
            let last = p[0].hops.last().map_or(p[0].start, |h| h.to);
            let structless: Vec<(u32, Traj)> = ti
                .top(&text_all, Some(last), tcfg.candidates)
                .into_iter()
                .map(|(v, _)| (v, Traj { path: vec![v], via: vec![1], traversal: 0 }))
                .collect();
            [
                finish(traverse(g, ti, query, p, &restr, tcfg, true), true),
                finish(traverse(g, ti, query, p, &restr, tcfg, false), false),
                finish(structless, false),
            ]
        }
        None => {
            let fb = || {
                ti.top(&text_all, None, tcfg.candidates)
                    .into_iter()
                    .map(|(v, _)| (v, Traj { path: vec![v], via: vec![1], traversal: 255 }))
                    .collect::<Vec<_>>()
            };
            [finish(fb(), true), finish(fb(), false), finish(fb(), false)]
        }
    };
    let named: BTreeMap<&str, &Vec<String>> = restr.iter().map(|(t, v)| (g.types[*t as usize].as_str(), v)).collect();
    let restrictions = serde_json::to_string(&named).map_err(|e| StageError::Internal(format!("restrictions as JSON: {e}")))?;
    Ok(Reasoned { metapath, valid: parsed.is_some(), restrictions, runs, bm25, seconds: t0.elapsed().as_secs_f64() })
}

/// What organizing produced: the reranked candidates of every query (with the seconds each took),
/// the reranker's curve and kept epoch (empty when no reranker could be trained).
pub struct Organized {
    pub ranked: Vec<(Ranked, f64)>,
    pub curve: Vec<RerankerEpoch>,
    pub best: u32,
}

/// Step 3: trains the reranker on the training queries' candidates (validation queries pick the
/// checkpoint) and reranks every query's full-traversal candidates. A reranker needs training
/// queries with an answer among enough candidates; without them `mor` keeps the dense order of
/// `mor-no-rerank`.
pub fn organize(
    kb: &Kb,
    order: &[(u32, String)],
    reasoned: &[Reasoned],
    answers: &HashMap<u32, Vec<u32>>,
    cfg: &MorConfig,
    dev: &Device,
) -> Result<Organized> {
    let g = &kb.graph;
    let group = |i: usize| -> Group {
        let qid = order[i].0;
        let gold: HashSet<u32> = answers.get(&qid).map(|a| a.iter().copied().collect()).unwrap_or_default();
        let r = &reasoned[i].runs[0];
        Group {
            candidates: r.iter().map(|(_, d, t)| features(t, &reasoned[i].bm25, *d, g)).collect(),
            positive: r.iter().map(|(v, _, _)| gold.contains(v)).collect(),
        }
    };
    let train_g: Vec<Group> = (0..order.len()).filter(|&i| order[i].1 == "train").map(group).collect();
    let val_g: Vec<Group> = (0..order.len()).filter(|&i| order[i].1 == "val").map(group).collect();
    let rcfg = RerankerConfig {
        head: cfg.reranker_head,
        epochs: cfg.reranker_epochs,
        negatives: cfg.negatives,
        seed: cfg.seed,
        ..Default::default()
    };
    let usable = train_g.iter().any(|x| x.positive.iter().any(|&p| p) && x.positive.iter().filter(|&&p| !p).count() >= rcfg.negatives);
    let trained = if usable { Some(train_reranker(g.types.len(), &train_g, &val_g, Features::default(), &rcfg, dev)?) } else { None };
    let scorer = trained.as_ref().map(|(reranker, _, _)| reranker.scorer(dev)).transpose()?;
    let ranked = (0..order.len())
        .map(|i| {
            let t0 = Instant::now();
            let s = match &scorer {
                Some(scorer) => scorer.score(&group(i).candidates, Features::default())?,
                None => reasoned[i].runs[0].iter().map(|x| x.1).collect(),
            };
            let mut r: Ranked = reasoned[i].runs[0].iter().zip(&s).map(|((v, _, t), &sc)| (*v, sc, t.clone())).collect();
            r.sort_by(by_score_then_id);
            Ok((r, t0.elapsed().as_secs_f64()))
        })
        .collect::<Result<Vec<_>>>()?;
    let (curve, best) = trained.map(|(_, c, b)| (c, b)).unwrap_or_default();
    Ok(Organized { ranked, curve, best })
}

/// Step 4: the stage's tables.
pub struct Written {
    pub plans: RecordBatch,
    pub run: RecordBatch,
    pub curves: RecordBatch,
    pub latency: RecordBatch,
}

/// Step 4: builds `plans`, `run`, `curves` and `latency` from the steps' results.
pub fn write(
    kb: &Kb,
    order: &[(u32, String)],
    planned: &Planned,
    reasoned: &[Reasoned],
    organized: &Organized,
    seed: u64,
) -> Result<Written> {
    let g = &kb.graph;
    let plans = RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from_iter_values(order.iter().map(|x| x.0))) as ArrayRef),
        ("metapath", Arc::new(StringArray::from_iter_values(reasoned.iter().map(|r| r.metapath.as_str()))) as ArrayRef),
        ("valid", Arc::new(BooleanArray::from(reasoned.iter().map(|r| r.valid).collect::<Vec<_>>())) as ArrayRef),
        ("restrictions", Arc::new(StringArray::from_iter_values(reasoned.iter().map(|r| r.restrictions.as_str()))) as ArrayRef),
    ])?;
    let mut rb = RunBuilder::default();
    for (i, (qid, _)) in order.iter().enumerate() {
        let r = &reasoned[i];
        let dense = |v| kb.dense(*qid, v);
        rb.push(METHODS[0], *qid, &organized.ranked[i].0, &r.bm25, g, dense);
        for (method, run) in METHODS[1..].iter().zip(&r.runs) {
            rb.push(method, *qid, run, &r.bm25, g, dense);
        }
    }
    let latency = RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from_iter_values(order.iter().map(|x| x.0))) as ArrayRef),
        ("plan_ms", Arc::new(Float64Array::from(vec![planned.seconds_each * 1e3; order.len()])) as ArrayRef),
        ("reason_ms", Arc::new(Float64Array::from_iter_values(reasoned.iter().map(|r| r.seconds * 1e3))) as ArrayRef),
        ("organize_ms", Arc::new(Float64Array::from_iter_values(organized.ranked.iter().map(|r| r.1 * 1e3))) as ArrayRef),
    ])?;
    let mut curves = Curves::default();
    for c in &planned.curve {
        curves.push(
            "planner",
            "",
            seed,
            c.epoch,
            c.epoch == planned.best,
            &[("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metapath_exact", c.val_exact)],
        );
    }
    for c in &organized.curve {
        curves.push("reranker", "", seed, c.epoch, c.epoch == organized.best, &[("train_loss", c.train_loss), ("val_hit1", c.val_hit1)]);
    }
    Ok(Written { plans, run: rb.finish()?, curves: curves.batch()?, latency })
}

impl StageSpec for MorStage {
    type Config = MorConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &MorConfig) -> std::result::Result<(), String> {
        if c.traversal.candidates == 0
            || c.traversal.seeds == 0
            || c.negatives == 0
            || c.planner_epochs == 0
            || c.reranker_epochs == 0
            || c.planner_hidden.get() == 0
        {
            return Err("candidates, seeds, negatives, epochs and planner_hidden must be ≥ 1".into());
        }
        Ok(())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: MorConfig) -> Result<()> {
        let kb = ctx.timed("load", |c| Kb::load(c, MIN_NAME_CHARS))?;
        let answers = kb.answers(ctx)?;
        let ti = ctx.timed("load bm25 index", |c| TextIndex::load(c, &kb.graph))?;
        let queries = ctx.input("ingest", "queries")?;
        let (qids, split) = (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "split")?);
        let mut order: Vec<(u32, String)> = (0..qids.len()).map(|i| (qids.value(i), split.value(i).to_string())).collect();
        order.sort_unstable();
        let ids: Vec<u32> = order.iter().map(|x| x.0).collect();
        let dev = cfg.device.device();
        let data = plan_data(&kb, &ctx.input("planning", "planning_graphs")?)?;
        let planned = ctx.timed("plan", |_| plan(&kb, &data, &ids, &cfg, &dev))?;
        ctx.set_items(order.len() as u64);
        let reasoned: Vec<Reasoned> =
            ctx.timed("reason", |_| ids.par_iter().zip(&planned.plans).map(|(q, p)| reason(&kb, &ti, *q, p, &cfg.traversal)).collect())?;
        let organized = ctx.timed("organize", |_| organize(&kb, &order, &reasoned, &answers, &cfg, &dev))?;
        let out = write(&kb, &order, &planned, &reasoned, &organized, cfg.seed)?;
        ctx.write("plans", &out.plans)?;
        ctx.write("run", &out.run)?;
        ctx.write("latency", &out.latency)?;
        ctx.write("curves", &out.curves)
    }
}

/// Rows of the `run` table with trajectory columns.
#[derive(Default)]
struct RunBuilder {
    q: Vec<u32>,
    n: Vec<u32>,
    rank: Vec<u32>,
    score: Vec<f32>,
    method: Vec<&'static str>,
    path: ListBuilder<UInt32Builder>,
    types: ListBuilder<StringBuilder>,
    scores: ListBuilder<Float32Builder>,
    tid: Vec<u8>,
    dense: Vec<f32>,
}

impl RunBuilder {
    fn push(&mut self, method: &'static str, qid: u32, r: &Ranked, bm: &HashMap<u32, f32>, g: &TypedGraph, dense: impl Fn(u32) -> f32) {
        for (k, (v, s, t)) in r.iter().enumerate() {
            self.q.push(qid);
            self.n.push(*v);
            self.rank.push(k as u32 + 1);
            self.score.push(*s);
            self.method.push(method);
            for &p in &t.path {
                self.path.values().append_value(p);
                self.types.values().append_value(&g.types[g.node_type[p as usize] as usize]);
                self.scores.values().append_value(bm.get(&p).copied().unwrap_or(0.0));
            }
            self.path.append(true);
            self.types.append(true);
            self.scores.append(true);
            self.tid.push(t.traversal);
            self.dense.push(dense(*v));
        }
    }

    fn finish(mut self) -> Result<RecordBatch> {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(self.q)),
            Arc::new(UInt32Array::from(self.n)),
            Arc::new(UInt32Array::from(self.rank)),
            Arc::new(Float32Array::from(self.score)),
            Arc::new(StringArray::from(self.method)),
            Arc::new(self.path.finish()),
            Arc::new(self.types.finish()),
            Arc::new(self.scores.finish()),
            Arc::new(UInt8Array::from(self.tid)),
            Arc::new(Float32Array::from(self.dense)),
        ];
        Ok(tgrag_schemas::tables::RUN.batch(cols)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::kb::tests::toy_kb;
    use crate::retrieval::bm25_index::{Bm25Params, Index};
    use crate::shared::text::TokenizerKind;

    fn text_index(kb: &Kb) -> TextIndex {
        let docs: Vec<&str> = kb.docs.iter().map(String::as_str).collect();
        TextIndex::new(&kb.graph, Index::build_texts(&docs, TokenizerKind::Bm25s, Bm25Params::default()))
    }

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn nodes(r: &Ranked) -> Vec<u32> {
        r.iter().map(|x| x.0).collect()
    }

    fn planning_graphs(rows: &[(u32, &str, &str)]) -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef),
            ("split", Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))) as ArrayRef),
            ("metapath", Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))) as ArrayRef),
            ("restrictions", Arc::new(StringArray::from_iter_values(rows.iter().map(|_| "{}"))) as ArrayRef),
        ])
        .expect("planning graphs")
    }

    #[test]
    fn plan_data_splits_by_query_and_numbers_tokens_in_first_seen_order() {
        let kb = toy_kb();
        let pg = planning_graphs(&[
            (0, "train", "brand <-has_brand- product"),
            (1, "val", "product -has_brand-> brand"),
            (2, "train", "product"),
        ]);
        let d = plan_data(&kb, &pg).expect("data");
        assert_eq!(d.vocab, ["<bos>", "<eos>", "brand", "<-has_brand-", "product", "-has_brand->"]);
        assert_eq!(d.train.targets, vec![(0, vec![2, 3, 4], 1.0), (1, vec![4], 1.0)]);
        assert_eq!(d.val.targets, vec![(0, vec![4, 5, 2], 1.0)]);
        assert_eq!(d.train.queries, [kb.query_emb(0), kb.query_emb(2)].concat());
        assert_eq!(d.val.queries, kb.query_emb(1));
    }

    #[test]
    fn planning_learns_the_training_plan_and_needs_training_plans() {
        let kb = toy_kb();
        let cfg = MorConfig { planner_epochs: 25, planner_hidden: Width::new(16), ..MorConfig::default() };
        let dev = burn::tensor::Device::flex();
        let empty = plan_data(&kb, &planning_graphs(&[(1, "val", "brand")])).expect("data");
        let none = plan(&kb, &empty, &[0, 1, 2], &cfg, &dev).expect("plan");
        assert_eq!((none.plans, none.curve.len()), (vec![Vec::<String>::new(); 3], 0), "no training plan: no plan, no curve");
        let metapath = "brand <-has_brand- product";
        let data = plan_data(&kb, &planning_graphs(&[(0, "train", metapath), (2, "train", metapath), (1, "val", metapath)])).expect("data");
        let p = plan(&kb, &data, &[0, 1, 2], &cfg, &dev).expect("plan");
        assert_eq!(p.curve.len(), 25);
        assert!(p.curve.iter().any(|c| c.epoch == p.best));
        // The training queries get their training plan back.
        assert_eq!((p.plans[0].clone(), p.plans[2].clone()), (toks(metapath), toks(metapath)), "{:?}", p.plans);
        assert_eq!(plan(&kb, &data, &[0, 1, 2], &cfg, &dev).expect("again").plans, p.plans, "seeded");
    }

    #[test]
    fn reasoning_by_hand_with_a_valid_and_an_invalid_plan() {
        let kb = toy_kb();
        let ti = text_index(&kb);
        let tcfg = TraversalConfig { seeds: 1, per_layer_text: 1, candidates: 4, max_layer: 100 };
        // "waterproof tent from Acme": Acme seeds the brand layer; its products 2 and 3 are reached
        // structurally; the product restriction's BM25 top-1 (3) is already there; BM25 fills with
        // Acme (0); the dense order with the query vector (0.6, 0.8) is 3 (1.0), 2 (0.96), 0 (0.6).
        let r = reason(&kb, &ti, 0, &toks("brand <-has_brand- product"), &tcfg).expect("reason");
        assert!(r.valid);
        assert_eq!(r.metapath, "brand <-has_brand- product");
        assert_eq!(r.restrictions, r#"{"brand":["Acme"],"product":["waterproof tent from"]}"#);
        assert_eq!(nodes(&r.runs[0]), vec![3, 2, 0]);
        assert_eq!(r.runs[0][0].2, Traj { path: vec![0, 3], via: vec![1, 2], traversal: 0 });
        assert_eq!(r.runs[0][2].2, Traj { path: vec![0], via: vec![1], traversal: 255 }, "a fill is textual");
        assert!((r.runs[0][1].1 - 0.96).abs() < 1e-6, "candidates carry their dense score");
        assert_eq!(nodes(&r.runs[1]), vec![3, 2], "no text: traversal only, no fill");
        assert_eq!(nodes(&r.runs[2]), vec![3, 2], "no structure: BM25 within the target type");
        assert!(r.runs[2].iter().all(|x| x.2.via == vec![1]));
        assert!(r.bm25.contains_key(&3) && r.bm25.contains_key(&0) && !r.bm25.contains_key(&4));
        // An unknown relation: no valid plan, BM25 over every node for all three runs.
        let bad = reason(&kb, &ti, 0, &toks("brand <-sells- product"), &tcfg).expect("reason");
        assert!(!bad.valid);
        assert_eq!(bad.restrictions, "{}");
        assert_eq!(nodes(&bad.runs[0]), vec![3, 2, 0]);
        assert_eq!(nodes(&bad.runs[0]), nodes(&bad.runs[1]));
        assert!(bad.runs[0].iter().all(|x| x.2.traversal == 255));
    }

    #[test]
    fn organizing_without_a_usable_reranker_keeps_the_dense_order_and_writing_lays_out_the_tables() {
        let kb = toy_kb();
        let ti = text_index(&kb);
        let tcfg = TraversalConfig { seeds: 1, per_layer_text: 1, candidates: 4, max_layer: 100 };
        let order: Vec<(u32, String)> = vec![(0, "train".into()), (1, "val".into())];
        let plans = [toks("brand <-has_brand- product"), toks("brand <-has_brand- product")];
        let reasoned: Vec<Reasoned> = order.iter().zip(&plans).map(|((q, _), p)| reason(&kb, &ti, *q, p, &tcfg).expect("reason")).collect();
        let answers = HashMap::from([(0, vec![3]), (1, vec![4])]);
        // Fewer candidates than the reranker's 15 negatives: nothing to train on.
        let cfg = MorConfig::default();
        let o = organize(&kb, &order, &reasoned, &answers, &cfg, &burn::tensor::Device::flex()).expect("organize");
        assert!(o.curve.is_empty());
        for (i, r) in reasoned.iter().enumerate() {
            assert_eq!(nodes(&o.ranked[i].0), nodes(&r.runs[0]));
        }
        let planned = Planned { plans: plans.to_vec(), curve: Vec::new(), best: 0, seconds_each: 0.002 };
        let w = write(&kb, &order, &planned, &reasoned, &o, 0).expect("write");
        let run = &w.run;
        let method = columns::strs(run, "method").expect("method");
        let per_method = |m: &str| (0..run.num_rows()).filter(|&i| method.value(i) == m).count();
        let expect: Vec<usize> = reasoned.iter().map(|r| r.runs[0].len()).collect();
        assert_eq!(per_method("mor"), expect.iter().sum::<usize>());
        assert_eq!(per_method("mor-no-structure"), reasoned.iter().map(|r| r.runs[2].len()).sum::<usize>());
        // The first row: query 0's best candidate (3), reached from Acme: types brand → product.
        let types = columns::string_lists(run, "path_types").expect("types");
        assert_eq!(
            (columns::u32s(run, "node_id").expect("node").value(0), types[0].clone()),
            (3, vec!["brand".to_string(), "product".to_string()])
        );
        assert_eq!(w.plans.num_rows(), 2);
        assert_eq!(columns::f64s(&w.latency, "plan_ms").expect("plan_ms").value(1), 2.0);
        assert_eq!(w.curves.num_rows(), 0);
        assert!(tgrag_schemas::validate::check_written(&tgrag_schemas::tables::RUN, run).is_ok());
        assert!(tgrag_schemas::validate::check_written(&tgrag_schemas::tables::PLANS, &w.plans).is_ok());
    }
}
