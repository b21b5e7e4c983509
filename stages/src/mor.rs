//! `mor`: MoR (Planning → Reasoning → Organizing) on a knowledge base.
//!
//! * Planning: the burn planner ([`tgrag_models::planner`]) trained on the `planning` stage's
//!   planning graphs of the training queries (validation queries pick the checkpoint), fed the
//!   query's dense vector; its metapath tokens are the whitespace pieces of MoR's string syntax.
//!   Restrictions are copied from the query: matched node names on the first type, the rest of the
//!   query on the last type.
//! * Reasoning (mixed traversal, MoR's release constants): seeds = BM25 top-5 among nodes of the
//!   path's first type for `query + " " + restrictions`; each hop follows neighbours of the next type
//!   (and relation/direction where given); a type with a restriction adds its BM25 top-10; the first
//!   path to reach a node wins; paths are intersected (union when empty); an invalid or empty plan
//!   falls back to BM25 top-100; BM25 fills up to 100 candidates, ordered by the dense score.
//! * Organizing: the structure-aware reranker ([`tgrag_models::reranker`]; `reranker_head` picks the
//!   paper's MLP head or MoR's released linear one). Per-query latency of each phase goes to
//!   `latency` (run-dependent, like `timings`).
//!
//! Runs: `mor` (reranked), `mor-no-rerank` (dense order), `mor-no-text` (no BM25 additions or fill),
//! `mor-no-structure` (BM25 on the restrictions within the target type, no traversal).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Float64Array, ListBuilder, RecordBatch, StringArray, StringBuilder, UInt8Array, UInt32Array, UInt32Builder, Float32Builder};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_models::planner::{PlannerConfig, PlannerShape, SeqData, train_planner};
use tgrag_models::reranker::{Features, Group, RerankerConfig, Trajectory, train_reranker};
use tgrag_schemas::columns;

use crate::bm25::{Bm25Params, Index};
use crate::planning::{NameMatcher, TypedGraph, embedding_table, remaining_text};
use crate::text::TokenizerKind;
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// The knowledge base as the STaRK-style methods see it.
pub struct Kb {
    pub graph: TypedGraph,
    pub matcher: NameMatcher,
    pub node_emb: Vec<f32>,
    pub dim: usize,
    q_row: HashMap<u32, usize>,
    q_emb: Vec<f32>,
    q_text: HashMap<u32, String>,
    pub docs: Vec<String>,
}

impl Kb {
    /// Nodes (ids must be 0..N), edges, and the dense stage's embeddings.
    pub fn load(ctx: &StageContext<'_>) -> Result<Kb> {
        let nodes = ctx.input("ingest", "nodes")?;
        let edges = ctx.input("ingest", "edges")?;
        let queries = ctx.input("ingest", "queries")?;
        let (ids, types, names, docs) = (columns::u32s(&nodes, "node_id")?, columns::strs(&nodes, "node_type")?, columns::strs(&nodes, "name")?, columns::strs(&nodes, "doc")?);
        let n = ids.len();
        let mut row = vec![usize::MAX; n];
        for i in 0..n {
            let id = ids.value(i) as usize;
            if id >= n || row[id] != usize::MAX {
                return Err(StageError::Internal(format!("nodes: node ids must be 0..{n} once each (row {}: {id})", i + 1)));
            }
            row[id] = i;
        }
        let t: Vec<&str> = row.iter().map(|&r| types.value(r)).collect();
        let (s, d, r) = (columns::u32s(&edges, "src")?, columns::u32s(&edges, "dst")?, columns::strs(&edges, "relation")?);
        let e: Vec<(u32, u32, &str)> = (0..s.len()).map(|i| (s.value(i), d.value(i), r.value(i))).collect();
        let graph = TypedGraph::new(&t, &e)?;
        let name_list: Vec<&str> = row.iter().map(|&r| names.value(r)).collect();
        let matcher = NameMatcher::new(&name_list, 4);
        let (eids, emb, dim) = embedding_table(&ctx.input("dense", "embeddings")?, "node_id")?;
        let mut node_emb = vec![0f32; n * dim];
        for (k, &id) in eids.iter().enumerate() {
            if (id as usize) < n {
                node_emb[id as usize * dim..(id as usize + 1) * dim].copy_from_slice(&emb[k * dim..(k + 1) * dim]);
            }
        }
        let (qids, q_emb, _) = embedding_table(&ctx.input("dense", "query_embeddings")?, "query_id")?;
        let q_row = qids.iter().enumerate().map(|(k, &q)| (q, k)).collect();
        let (qi, qt) = (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "text")?);
        let q_text = (0..qi.len()).map(|i| (qi.value(i), qt.value(i).to_string())).collect();
        Ok(Kb { graph, matcher, node_emb, dim, q_row, q_emb, q_text, docs: row.iter().map(|&r| docs.value(r).to_string()).collect() })
    }

    pub fn query_emb(&self, qid: u32) -> &[f32] {
        self.q_row.get(&qid).map_or(&[][..], |&k| &self.q_emb[k * self.dim..(k + 1) * self.dim])
    }

    pub fn query_text(&self, qid: u32) -> &str {
        self.q_text.get(&qid).map_or("", String::as_str)
    }

    pub fn answers(&self, ctx: &StageContext<'_>) -> Result<HashMap<u32, Vec<u32>>> {
        let a = ctx.input("ingest", "answers")?;
        let (q, n) = (columns::u32s(&a, "query_id")?, columns::u32s(&a, "node_id")?);
        let mut m: HashMap<u32, Vec<u32>> = HashMap::new();
        for i in 0..q.len() {
            m.entry(q.value(i)).or_default().push(n.value(i));
        }
        Ok(m)
    }

    /// Inner product of a query's and a node's dense vectors (0 for an unknown query).
    pub fn dense(&self, qid: u32, node: u32) -> f32 {
        let q = self.query_emb(qid);
        if q.is_empty() {
            return 0.0;
        }
        self.node_emb[node as usize * self.dim..(node as usize + 1) * self.dim].iter().zip(q).map(|(a, b)| a * b).sum()
    }
}

/// One hop of a plan: relation (if given), direction (if given), type reached.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanHop {
    pub rel: Option<u16>,
    pub fwd: Option<bool>,
    pub to: u16,
}

/// A parsed plan path.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanPath {
    pub start: u16,
    pub hops: Vec<PlanHop>,
}

/// Parses metapath tokens (`a -rel-> b <-rel- c -> d <- e | f …`) against the graph's types and
/// relations; `None` when any piece is unknown or out of place (an invalid plan).
pub fn parse_tokens(g: &TypedGraph, tokens: &[&str]) -> Option<Vec<PlanPath>> {
    let mut out = Vec::new();
    for part in tokens.split(|t| *t == "|") {
        let start = g.type_id(part.first()?)?;
        let mut hops = Vec::new();
        for pair in part[1..].chunks(2) {
            let [arrow, ty] = pair else { return None };
            let (rel, fwd) = match *arrow {
                "->" => (None, Some(true)),
                "<-" => (None, Some(false)),
                "--" => (None, None),
                a if a.starts_with("<-") && a.ends_with('-') && a.len() > 3 => (Some(g.relation_id(&a[2..a.len() - 1])?), Some(false)),
                a if a.starts_with('-') && a.ends_with("->") && a.len() > 3 => (Some(g.relation_id(&a[1..a.len() - 2])?), Some(true)),
                _ => return None,
            };
            hops.push(PlanHop { rel, fwd, to: g.type_id(ty)? });
        }
        out.push(PlanPath { start, hops });
    }
    Some(out)
}

/// A candidate's trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct Traj {
    pub path: Vec<u32>,
    /// 1 = textual matching, 2 = structural traversal, per path node.
    pub via: Vec<u8>,
    /// Which plan path reached the node first (255: text fallback or fill).
    pub traversal: u8,
}

/// Traversal knobs (MoR's release constants by default).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraversalConfig {
    pub seeds: usize,
    pub per_layer_text: usize,
    pub candidates: usize,
    /// Nodes kept per traversal layer (first reached first), bounding hub explosions.
    pub max_layer: usize,
}

impl Default for TraversalConfig {
    fn default() -> Self {
        TraversalConfig { seeds: 5, per_layer_text: 10, candidates: 100, max_layer: 5000 }
    }
}

/// BM25 over node documents with per-type masks.
pub struct TextIndex {
    pub index: Index,
    pub masks: Vec<Vec<bool>>,
    pub kind: TokenizerKind,
}

impl TextIndex {
    pub fn new(g: &TypedGraph, docs: &[String]) -> TextIndex {
        let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
        let kind = TokenizerKind::Bm25s;
        let index = Index::build_texts(&texts, kind, Bm25Params::default());
        let masks = (0..g.types.len()).map(|t| g.node_type.iter().map(|&x| x as usize == t).collect()).collect();
        TextIndex { index, masks, kind }
    }

    pub fn top(&self, text: &str, ty: Option<u16>, k: usize) -> Vec<(u32, f32)> {
        self.index.search_text(text, self.kind, k, ty.map(|t| self.masks[t as usize].as_slice()))
    }
}

/// MoR's mixed traversal for one plan: candidates (in reach order) with trajectories.
/// `text` off drops the per-layer BM25 additions (seeds stay textual: a traversal needs a start).
pub fn traverse(g: &TypedGraph, ti: &TextIndex, query: &str, plan: &[PlanPath], restrictions: &BTreeMap<u16, Vec<String>>, cfg: &TraversalConfig, text: bool) -> Vec<(u32, Traj)> {
    let with = |t: u16| -> String {
        let r = restrictions.get(&t).map(|v| v.join(" ")).unwrap_or_default();
        format!("{query} {r}")
    };
    let mut per_path: Vec<Vec<(u32, Traj)>> = Vec::new();
    for (pi, p) in plan.iter().enumerate() {
        let tid = pi.min(254) as u8;
        let mut layer: Vec<(u32, Traj)> = ti.top(&with(p.start), Some(p.start), cfg.seeds).into_iter().map(|(v, _)| (v, Traj { path: vec![v], via: vec![1], traversal: tid })).collect();
        for hop in &p.hops {
            let mut seen: HashSet<u32> = HashSet::new();
            let mut next: Vec<(u32, Traj)> = Vec::new();
            'outer: for (u, tr) in &layer {
                for a in g.arcs(*u) {
                    let v = g.nbr[a];
                    if g.node_type[v as usize] != hop.to || hop.rel.is_some_and(|r| r != g.rel[a]) || hop.fwd.is_some_and(|f| f != g.fwd[a]) || !seen.insert(v) {
                        continue;
                    }
                    let mut t = tr.clone();
                    t.path.push(v);
                    t.via.push(2);
                    next.push((v, t));
                    if next.len() >= cfg.max_layer {
                        break 'outer;
                    }
                }
            }
            if text && restrictions.contains_key(&hop.to) {
                for (v, _) in ti.top(&with(hop.to), Some(hop.to), cfg.per_layer_text) {
                    if seen.insert(v) {
                        next.push((v, Traj { path: vec![v], via: vec![1], traversal: tid }));
                    }
                }
            }
            layer = next;
        }
        per_path.push(layer);
    }
    let Some(first) = per_path.first() else { return Vec::new() };
    // Intersection across paths (the first path's trajectory wins), else the union in path order.
    let sets: Vec<HashSet<u32>> = per_path.iter().map(|l| l.iter().map(|x| x.0).collect()).collect();
    let inter: Vec<(u32, Traj)> = first.iter().filter(|(v, _)| sets.iter().all(|s| s.contains(v))).cloned().collect();
    if !inter.is_empty() {
        return inter;
    }
    let mut seen = HashSet::new();
    per_path.into_iter().flatten().filter(|(v, _)| seen.insert(*v)).collect()
}

/// Options of the `mor` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MorConfig {
    pub traversal: TraversalConfig,
    pub planner_epochs: usize,
    pub planner_hidden: usize,
    pub reranker_epochs: usize,
    pub negatives: usize,
    /// Reranker head: `paper` (1280 → 256 → ReLU → 1) or `released` (MoR's code: 1280 → 1 → 1).
    #[serde(default)]
    pub reranker_head: tgrag_models::reranker::Head,
    pub seed: u64,
}

impl Default for MorConfig {
    fn default() -> Self {
        MorConfig { traversal: TraversalConfig::default(), planner_epochs: 40, planner_hidden: 256, reranker_epochs: 20, negatives: 15, reranker_head: tgrag_models::reranker::Head::Paper, seed: 0 }
    }
}

pub struct MorStage;

static INFO: StageInfo = StageInfo {
    name: "mor",
    version: 2,
    about: "MoR: burn planner → mixed traversal (BM25 + typed BFS) → structure-aware reranker (methods mor, mor-no-rerank, mor-no-text, mor-no-structure)",
    deps: &["ingest", "dense", "planning"],
    needs: &[("ingest", "nodes"), ("ingest", "edges"), ("ingest", "queries"), ("ingest", "answers")],
    excludes: &[],
    outputs: &["plans", "run", "planner_curve", "reranker_curve", "latency"],
};

/// One query's candidates for one method: (node, score, trajectory).
type Ranked = Vec<(u32, f32, Traj)>;

fn features(tr: &Traj, bm: &HashMap<u32, f32>, dense: f32, g: &TypedGraph) -> Trajectory {
    let k = tr.path.len();
    let mut f = Trajectory { tf: [0.0, 0.0, 0.0, dense], sf: [0; 3], ti: [0; 3] };
    for j in 0..3.min(k) {
        let node = tr.path[k - 1 - j];
        f.tf[2 - j] = bm.get(&node).copied().unwrap_or(0.0).ln_1p();
        f.sf[2 - j] = u32::from(g.node_type[node as usize]) + 1;
        f.ti[2 - j] = u32::from(tr.via[k - 1 - j]);
    }
    f
}

impl StageSpec for MorStage {
    type Config = MorConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &MorConfig) -> std::result::Result<(), String> {
        if c.traversal.candidates == 0 || c.traversal.seeds == 0 || c.negatives == 0 || c.planner_epochs == 0 || c.reranker_epochs == 0 {
            return Err("candidates, seeds, negatives and epochs must be ≥ 1".into());
        }
        Ok(())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: MorConfig) -> Result<()> {
        let kb = ctx.timed("load", |c| Kb::load(c))?;
        let answers = kb.answers(ctx)?;
        let g = &kb.graph;
        let ti = ctx.timed("bm25 index", |_| Ok(TextIndex::new(g, &kb.docs)))?;
        let queries = ctx.input("ingest", "queries")?;
        let (qids, split) = (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "split")?);
        let mut order: Vec<(u32, String)> = (0..qids.len()).map(|i| (qids.value(i), split.value(i).to_string())).collect();
        order.sort_unstable();
        // ---- Planning: train the planner on the planning graphs.
        let pg = ctx.input("planning", "planning_graphs")?;
        let (pq, ps, pm) = (columns::u32s(&pg, "query_id")?, columns::strs(&pg, "split")?, columns::strs(&pg, "metapath")?);
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
        let dev = tgrag_models::DeviceChoice::Cpu.device();
        let pcfg = PlannerConfig { hidden: cfg.planner_hidden, epochs: cfg.planner_epochs, seed: cfg.seed, ..Default::default() };
        let shape = PlannerShape { dim: kb.dim, vocab: vocab.len(), hidden: pcfg.hidden, max_len: pcfg.max_len };
        // Without training plans (no training query reaches an answer) every plan is invalid and
        // MoR falls back to text retrieval, as it does for an invalid plan.
        let trained = if train.targets.is_empty() { None } else { Some(ctx.timed("train planner", |_| Ok(train_planner(shape, &train, &val, &pcfg, &dev)?))?) };
        let all_q: Vec<f32> = order.iter().flat_map(|(q, _)| kb.query_emb(*q).to_vec()).collect();
        let t_plan = std::time::Instant::now();
        let plans = match &trained {
            Some((planner, _, _)) => ctx.timed("plan", |_| Ok(planner.greedy(&all_q, kb.dim, pcfg.max_len, &dev)?))?,
            None => vec![Vec::new(); order.len()],
        };
        // Plans are decoded in one batch: the per-query figure is the batch time over the queries.
        let plan_each = t_plan.elapsed().as_secs_f64() / order.len().max(1) as f64;
        let (pcurve, pbest) = trained.map(|(_, c, b)| (c, b)).unwrap_or_default();
        ctx.set_items(order.len() as u64);
        // ---- Reasoning: traversal per query, in parallel.
        let tcfg = cfg.traversal;
        #[allow(clippy::type_complexity)]
        let reasoned: Vec<(String, bool, String, [Ranked; 3], HashMap<u32, f32>, f64)> = ctx.timed("reason", |_| {
            Ok(order
                .par_iter()
                .zip(&plans)
                .map(|((qid, _), toks)| {
                    let t0 = std::time::Instant::now();
                    let query = kb.query_text(*qid);
                    let strs: Vec<&str> = toks.iter().map(|&t| vocab[t as usize].as_str()).collect();
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
                    let bm: HashMap<u32, f32> = ti.top(&text_all, None, 1000).into_iter().collect();
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
                        let mut r: Ranked = c.into_iter().map(|(v, t)| (v, kb.dense(*qid, v), t)).collect();
                        r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                        r.truncate(tcfg.candidates);
                        r
                    };
                    let (full, no_text, no_struct) = match &parsed {
                        Some(p) => {
                            let last = p[0].hops.last().map_or(p[0].start, |h| h.to);
                            let structless: Vec<(u32, Traj)> = ti.top(&text_all, Some(last), tcfg.candidates).into_iter().map(|(v, _)| (v, Traj { path: vec![v], via: vec![1], traversal: 0 })).collect();
                            (finish(traverse(g, &ti, query, p, &restr, &tcfg, true), true), finish(traverse(g, &ti, query, p, &restr, &tcfg, false), false), finish(structless, false))
                        }
                        None => {
                            let fb = || ti.top(&text_all, None, tcfg.candidates).into_iter().map(|(v, _)| (v, Traj { path: vec![v], via: vec![1], traversal: 255 })).collect::<Vec<_>>();
                            (finish(fb(), true), finish(fb(), false), finish(fb(), false))
                        }
                    };
                    let rjson = serde_json::to_string(&restr.iter().map(|(t, v)| (g.types[*t as usize].clone(), v.clone())).collect::<BTreeMap<_, _>>()).unwrap_or_default();
                    (metapath, parsed.is_some(), rjson, [full, no_text, no_struct], bm, t0.elapsed().as_secs_f64())
                })
                .collect())
        })?;
        // ---- Organizing: train the reranker on training queries' candidates, validate on val.
        let group = |i: usize| -> Group {
            let (qid, _) = &order[i];
            let gold: HashSet<u32> = answers.get(qid).map(|a| a.iter().copied().collect()).unwrap_or_default();
            let r = &reasoned[i].3[0];
            Group { candidates: r.iter().map(|(_, d, t)| features(t, &reasoned[i].4, *d, g)).collect(), positive: r.iter().map(|(v, _, _)| gold.contains(v)).collect() }
        };
        let train_g: Vec<Group> = (0..order.len()).filter(|&i| order[i].1 == "train").map(group).collect();
        let val_g: Vec<Group> = (0..order.len()).filter(|&i| order[i].1 == "val").map(group).collect();
        let rcfg = RerankerConfig { head: cfg.reranker_head, epochs: cfg.reranker_epochs, negatives: cfg.negatives, seed: cfg.seed, ..Default::default() };
        // A reranker needs training queries with an answer among enough candidates; without them
        // `mor` keeps the dense order of `mor-no-rerank`.
        let usable = train_g.iter().any(|x| x.positive.iter().any(|&p| p) && x.positive.iter().filter(|&&p| !p).count() >= rcfg.negatives);
        let trained = if usable { Some(ctx.timed("train reranker", |_| Ok(train_reranker(g.types.len(), &train_g, &val_g, Features::default(), &rcfg, &dev)?))?) } else { None };
        let reranked: Vec<(Ranked, f64)> = ctx.timed("organize", |_| {
            (0..order.len())
                .map(|i| {
                    let t0 = std::time::Instant::now();
                    let gi = group(i);
                    let s = match &trained {
                        Some((reranker, _, _)) => reranker.score(&gi.candidates, Features::default(), &dev)?,
                        None => reasoned[i].3[0].iter().map(|x| x.1).collect(),
                    };
                    let mut r: Ranked = reasoned[i].3[0].iter().zip(&s).map(|((v, _, t), &sc)| (*v, sc, t.clone())).collect();
                    r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                    Ok((r, t0.elapsed().as_secs_f64()))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let (rcurve, rbest) = trained.map(|(_, c, b)| (c, b)).unwrap_or_default();
        // ---- Outputs.
        let plan_batch = RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from_iter_values(order.iter().map(|x| x.0))) as ArrayRef),
            ("metapath", Arc::new(StringArray::from_iter_values(reasoned.iter().map(|r| r.0.as_str()))) as ArrayRef),
            ("valid", Arc::new(arrow::array::BooleanArray::from(reasoned.iter().map(|r| r.1).collect::<Vec<_>>())) as ArrayRef),
            ("restrictions", Arc::new(StringArray::from_iter_values(reasoned.iter().map(|r| r.2.as_str()))) as ArrayRef),
        ])?;
        ctx.write("plans", &plan_batch)?;
        let mut rb = RunBuilder::default();
        for (i, (qid, _)) in order.iter().enumerate() {
            rb.push("mor", *qid, &reranked[i].0, &reasoned[i].4, g, |v| kb.dense(*qid, v));
            rb.push("mor-no-rerank", *qid, &reasoned[i].3[0], &reasoned[i].4, g, |v| kb.dense(*qid, v));
            rb.push("mor-no-text", *qid, &reasoned[i].3[1], &reasoned[i].4, g, |v| kb.dense(*qid, v));
            rb.push("mor-no-structure", *qid, &reasoned[i].3[2], &reasoned[i].4, g, |v| kb.dense(*qid, v));
        }
        ctx.write("run", &rb.finish()?)?;
        // Per-query latency (run-dependent, like `timings`; not part of the byte-identical outputs).
        let lat = RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from_iter_values(order.iter().map(|x| x.0))) as ArrayRef),
            ("plan_ms", Arc::new(Float64Array::from(vec![plan_each * 1e3; order.len()])) as ArrayRef),
            ("reason_ms", Arc::new(Float64Array::from_iter_values(reasoned.iter().map(|r| r.5 * 1e3))) as ArrayRef),
            ("organize_ms", Arc::new(Float64Array::from_iter_values(reranked.iter().map(|r| r.1 * 1e3))) as ArrayRef),
        ])?;
        ctx.write("latency", &lat)?;
        let pc = RecordBatch::try_from_iter(vec![
            ("epoch", Arc::new(UInt32Array::from_iter_values(pcurve.iter().map(|c| c.epoch))) as ArrayRef),
            ("train_loss", Arc::new(Float64Array::from_iter_values(pcurve.iter().map(|c| c.train_loss))) as ArrayRef),
            ("val_loss", Arc::new(Float64Array::from_iter_values(pcurve.iter().map(|c| c.val_loss))) as ArrayRef),
            ("val_metapath_exact", Arc::new(Float64Array::from_iter_values(pcurve.iter().map(|c| c.val_exact))) as ArrayRef),
            ("kept", Arc::new(arrow::array::BooleanArray::from(pcurve.iter().map(|c| c.epoch == pbest).collect::<Vec<_>>())) as ArrayRef),
        ])?;
        ctx.write("planner_curve", &pc)?;
        let rc = RecordBatch::try_from_iter(vec![
            ("epoch", Arc::new(UInt32Array::from_iter_values(rcurve.iter().map(|c| c.epoch))) as ArrayRef),
            ("train_loss", Arc::new(Float64Array::from_iter_values(rcurve.iter().map(|c| c.train_loss))) as ArrayRef),
            ("val_hit1", Arc::new(Float64Array::from_iter_values(rcurve.iter().map(|c| c.val_hit1))) as ArrayRef),
            ("kept", Arc::new(arrow::array::BooleanArray::from(rcurve.iter().map(|c| c.epoch == rbest).collect::<Vec<_>>())) as ArrayRef),
        ])?;
        ctx.write("reranker_curve", &rc)
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

    /// brand b0 "acme" (0), b1 "zeta" (1); products 2, 3 of b0 and 4 of b1; 3 and 4 are "waterproof".
    fn toy() -> (TypedGraph, TextIndex) {
        let types = ["brand", "brand", "product", "product", "product"];
        let g = TypedGraph::new(&types, &[(2, 0, "has_brand"), (3, 0, "has_brand"), (4, 1, "has_brand")]).expect("graph");
        let docs: Vec<String> = ["acme brand", "zeta brand", "plain tent", "waterproof tent", "waterproof jacket"].iter().map(|s| s.to_string()).collect();
        let ti = TextIndex::new(&g, &docs);
        (g, ti)
    }

    #[test]
    fn traversal_by_hand_with_and_without_text() {
        let (g, ti) = toy();
        let plan = parse_tokens(&g, &["brand", "<-has_brand-", "product"]).expect("valid plan");
        let (brand, product) = (g.type_id("brand").expect("t"), g.type_id("product").expect("t"));
        let restr = BTreeMap::from([(brand, vec!["acme".to_string()]), (product, vec!["waterproof".to_string()])]);
        let cfg = TraversalConfig { seeds: 1, per_layer_text: 1, candidates: 10, max_layer: 100 };
        // Seed: BM25 top-1 brand for "query acme" = 0; hop: products of brand 0 = 2, 3 (structural);
        // the product restriction adds BM25 top-1 product for "waterproof": 3 (tie with 4 → lower
        // id), already reached, so nothing new.
        let got = traverse(&g, &ti, "query", &plan, &restr, &cfg, true);
        let want = vec![
            (2, Traj { path: vec![0, 2], via: vec![1, 2], traversal: 0 }),
            (3, Traj { path: vec![0, 3], via: vec![1, 2], traversal: 0 }),
        ];
        assert_eq!(got, want);
        // Two textual additions: 4 joins as a textual node.
        let cfg2 = TraversalConfig { per_layer_text: 2, ..cfg };
        let got2 = traverse(&g, &ti, "query", &plan, &restr, &cfg2, true);
        assert_eq!(got2.last(), Some(&(4, Traj { path: vec![4], via: vec![1], traversal: 0 })));
        assert_eq!(traverse(&g, &ti, "query", &plan, &restr, &cfg2, false), want);
        // Forward along has_brand from a brand reaches nothing; unknown pieces are invalid plans.
        let wrong = parse_tokens(&g, &["brand", "-has_brand->", "product"]).expect("parses");
        assert!(traverse(&g, &ti, "query", &wrong, &restr, &cfg, true).iter().all(|(_, t)| t.via == vec![1]));
        assert!(parse_tokens(&g, &["brand", "<-sells-", "product"]).is_none());
        assert!(parse_tokens(&g, &["brand", "<-"]).is_none());
        // Two paths: the intersection (first path's trajectories); disjoint paths give the union.
        let both = parse_tokens(&g, &["brand", "<-has_brand-", "product", "|", "brand", "<-", "product"]).expect("two paths");
        assert_eq!(traverse(&g, &ti, "query", &both, &restr, &cfg, true), want);
    }
}
