//! `pasemiqa`: PASemiQA without an agent (paper §4, eqs. 1–3).
//!
//! * Topic nodes: exact name matching, longest first, with the dense top-k as fallback
//!   ([`crate::kb::paths::topics`], §4.1.1).
//! * Planner: the burn decoder of [`tgrag_models::planner`] over relation-hop tokens (`rel>` along a
//!   stored edge, `<rel` against it), trained on the `planning` stage's shortest relation paths of
//!   the training queries with target weights Q(z|q) = 1/|Z*| (eq. 3); validation queries pick the
//!   checkpoint.
//! * Retrieval: the `top_paths` most likely relation paths z among those seen in training (scored
//!   exactly with the planner's sequence log-probabilities), P(z|q) renormalised over them; A_{q,z}
//!   = the nodes reached by following z from the topic nodes; score(a) = Σ_z P(z|q)·1[a ∈ A_{q,z}] /
//!   |A_{q,z}| (eqs. 1–2). Ties break by the dense score, then node id.
//! * Fallback (text only): when no path reaches a node, the dense ranking; reached nodes are also
//!   followed by dense-ranked nodes up to `candidates`, scored below every reached node.
//!
//! Steps: [`path_data`] (training targets), [`plan`] (train, then P(z|q) per query), [`reason`]
//! (follow and score one query), [`write()`]. Outputs: `run` (method `pasemiqa`), `paths` (per query
//! the chosen paths, P(z|q) and |A_{q,z}|), `curves`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array};
use burn::tensor::Device;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_models::planner::{PlannerConfig, PlannerEpoch, PlannerShape, SeqData, train_planner};
use tgrag_schemas::columns;

use crate::kb::kb::{Kb, MIN_NAME_CHARS, TypedGraph};
use crate::kb::paths::topics;
use crate::shared::curves::Curves;
use crate::shared::run::{run_batch, top_k};
use crate::stage::Width;
use crate::{Result, StageContext, StageInfo, StageSpec};

/// Options of the `pasemiqa` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PasemiqaConfig {
    /// Relation paths kept per query (the paper's top-K).
    pub top_paths: usize,
    /// Dense fallback: topic nodes when no name matches.
    pub fallback_k: usize,
    /// Candidates per query: the nodes the kept paths reach, then dense-ranked nodes up to this many.
    pub candidates: usize,
    /// Epochs of the relation-path planner.
    pub planner_epochs: usize,
    /// Hidden width of the relation-path planner.
    pub planner_hidden: Width,
    /// Nodes reached per hop are capped (hubs), keeping the lowest ids.
    pub max_frontier: usize,
    /// Seed of the planner (weights, batches).
    pub seed: u64,
    /// Where the relation-path planner trains: `cpu`, `gpu` (burn on wgpu) or `auto`.
    #[serde(default)]
    pub device: tgrag_models::DeviceChoice,
}

impl Default for PasemiqaConfig {
    fn default() -> Self {
        PasemiqaConfig {
            top_paths: 3,
            fallback_k: 3,
            candidates: 100,
            planner_epochs: 40,
            planner_hidden: const { Width::new(256) },
            max_frontier: 20_000,
            seed: 0,
            device: tgrag_models::DeviceChoice::Cpu,
        }
    }
}

pub struct PasemiqaStage;

static INFO: StageInfo = StageInfo {
    name: "pasemiqa",
    module: module_path!(),
    version: 2,
    about: "PASemiQA: topic nodes + burn relation-path planner trained on Q(z|q); answers scored over the nodes each path reaches (method pasemiqa)",
    deps: &["ingest", "dense", "planning"],
    needs: &[("ingest", "nodes"), ("ingest", "edges"), ("ingest", "queries"), ("ingest", "answers")],
    excludes: &[],
    collects: &[],
    outputs: &["run", "paths", "curves"],
    files: &[],
    shards: None,
};

/// A relation hop `(relation, along the stored direction)` from its token.
fn parse_hop(g: &TypedGraph, tok: &str) -> Option<(u16, bool)> {
    if let Some(r) = tok.strip_suffix('>') {
        g.relation_id(r).map(|id| (id, true))
    } else {
        tok.strip_prefix('<').and_then(|r| g.relation_id(r)).map(|id| (id, false))
    }
}

/// The nodes reached from `sources` by following `hops` (sorted; at most `cap` kept per hop).
pub fn follow(g: &TypedGraph, sources: &[u32], hops: &[(u16, bool)], cap: usize) -> Vec<u32> {
    let mut cur: BTreeSet<u32> = sources.iter().copied().filter(|&s| (s as usize) < g.num_nodes()).collect();
    for &(rel, fwd) in hops {
        let mut next = BTreeSet::new();
        for &u in &cur {
            for a in g.arcs(u) {
                if g.rel[a] == rel && g.fwd[a] == fwd {
                    next.insert(g.nbr[a]);
                }
            }
        }
        cur = next.into_iter().take(cap).collect();
        if cur.is_empty() {
            break;
        }
    }
    cur.into_iter().collect()
}

/// PASemiQA's answer scores (eqs. 1–2): `paths` = (P(z|q), A_{q,z}).
pub fn answer_scores(paths: &[(f64, Vec<u32>)]) -> HashMap<u32, f64> {
    let mut s: HashMap<u32, f64> = HashMap::new();
    for (p, a) in paths {
        if a.is_empty() {
            continue;
        }
        let share = p / a.len() as f64;
        for &v in a {
            *s.entry(v).or_default() += share;
        }
    }
    s
}

/// The `k` best candidates by log-probability (ties: lower index) with probabilities renormalised
/// over them.
pub fn top_paths(log_probs: &[f64], k: usize) -> Vec<(usize, f64)> {
    let mut idx: Vec<usize> = (0..log_probs.len()).collect();
    idx.sort_by(|&a, &b| log_probs[b].total_cmp(&log_probs[a]).then(a.cmp(&b)));
    idx.truncate(k);
    let m = idx.first().map_or(0.0, |&i| log_probs[i]);
    let z: f64 = idx.iter().map(|&i| (log_probs[i] - m).exp()).sum();
    idx.into_iter().map(|i| (i, (log_probs[i] - m).exp() / z)).collect()
}

/// The planner's training data: relation-hop sequences of the `relation_paths` table with their
/// weights Q(z|q) (training queries train, the others validate), the token vocabulary (`<bos>`,
/// `<eos>`, then first-seen order) and the distinct training sequences (the candidate paths).
pub struct PathData {
    pub vocab: Vec<String>,
    pub train: SeqData,
    pub val: SeqData,
    pub candidates: Vec<Vec<u32>>,
}

/// Step 1: the planner's training data of the `relation_paths` table.
pub fn path_data(kb: &Kb, relation_paths: &RecordBatch, split_of: &HashMap<u32, &str>) -> Result<PathData> {
    let (rq, rw) = (columns::u32s(relation_paths, "query_id")?, columns::f32s(relation_paths, "weight")?);
    let rels = columns::string_lists(relation_paths, "relations")?;
    let mut vocab: Vec<String> = vec!["<bos>".into(), "<eos>".into()];
    let mut tok_id: HashMap<String, u32> = HashMap::new();
    let mut seqs: BTreeMap<Vec<u32>, ()> = BTreeMap::new();
    let (mut train, mut val) = (SeqData { dim: kb.dim, ..Default::default() }, SeqData { dim: kb.dim, ..Default::default() });
    let (mut train_row, mut val_row): (HashMap<u32, u32>, HashMap<u32, u32>) = (HashMap::new(), HashMap::new());
    for (i, hops) in rels.iter().enumerate() {
        let q = rq.value(i);
        let is_train = split_of.get(&q) == Some(&"train");
        let seq: Vec<u32> = hops
            .iter()
            .map(|t| {
                *tok_id.entry(t.clone()).or_insert_with(|| {
                    vocab.push(t.clone());
                    vocab.len() as u32 - 1
                })
            })
            .collect();
        if seq.is_empty() {
            continue;
        }
        let (data, rows) = if is_train { (&mut train, &mut train_row) } else { (&mut val, &mut val_row) };
        let row = *rows.entry(q).or_insert_with(|| {
            data.queries.extend_from_slice(kb.query_emb(q));
            data.n_queries() as u32 - 1
        });
        if is_train {
            seqs.insert(seq.clone(), ());
        }
        data.targets.push((row, seq, rw.value(i)));
    }
    Ok(PathData { vocab, train, val, candidates: seqs.into_keys().collect() })
}

/// What planning produced: per query (in `order`) the log-probability of every candidate path, the
/// training curve and the kept epoch.
pub struct Planned {
    pub log_probs: Vec<Vec<f64>>,
    pub curve: Vec<PlannerEpoch>,
    pub best: u32,
}

/// Step 2: trains the planner (validation targets with tokens unseen in training can still be
/// scored: the vocabulary covers them) and scores every candidate path for every query of `order`.
/// Without training paths every query falls back to text.
pub fn plan(kb: &Kb, data: &PathData, order: &[u32], cfg: &PasemiqaConfig, dev: &Device) -> Result<Planned> {
    let max_len = data.candidates.iter().map(|c| c.len() + 1).max().unwrap_or(1).max(4);
    let pcfg =
        PlannerConfig { hidden: cfg.planner_hidden.get(), epochs: cfg.planner_epochs, seed: cfg.seed, max_len, ..Default::default() };
    let shape = PlannerShape { dim: kb.dim, vocab: data.vocab.len(), hidden: pcfg.hidden, max_len };
    if data.train.targets.is_empty() {
        return Ok(Planned { log_probs: vec![Vec::new(); order.len()], curve: Vec::new(), best: 0 });
    }
    let (planner, curve, best) = train_planner(shape, &data.train, &data.val, &pcfg, dev)?;
    let log_probs = if data.candidates.is_empty() {
        vec![Vec::new(); order.len()]
    } else {
        let all_q: Vec<f32> = order.iter().flat_map(|q| kb.query_emb(*q).to_vec()).collect();
        planner.sequence_log_probs(&all_q, kb.dim, &data.candidates, dev)?
    };
    Ok(Planned { log_probs, curve, best })
}

/// One query's result: its ranking, the chosen paths `(candidate, P(z|q), |A_{q,z}|)`, and whether
/// no path reached a node (text fallback).
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub ranked: Vec<(u32, f32)>,
    pub paths: Vec<(usize, f64, usize)>,
    pub text_fallback: bool,
}

/// Step 3: follows the `top_paths` most likely candidate paths from the query's topic nodes and
/// scores the reached nodes (eqs. 1–2); ties by the dense score, then node id; dense-ranked nodes
/// fill up to `candidates`, below every reached node.
pub fn reason(kb: &Kb, qid: u32, log_probs: &[f64], hop_of: &[Vec<(u16, bool)>], cfg: &PasemiqaConfig) -> Answered {
    let g = &kb.graph;
    let qe = kb.query_emb(qid);
    let tp = topics(&kb.matcher, kb.query_text(qid), qe, &kb.node_emb, kb.dim, cfg.fallback_k);
    let chosen = top_paths(log_probs, cfg.top_paths);
    let reached: Vec<(f64, Vec<u32>)> = chosen.iter().map(|&(z, p)| (p, follow(g, &tp.nodes, &hop_of[z], cfg.max_frontier))).collect();
    let scores = answer_scores(&reached);
    let dense = |v: u32| kb.dense(qid, v);
    let mut ranked: Vec<(u32, f32)> = scores.iter().map(|(&v, &s)| (v, s as f32)).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(dense(b.0).total_cmp(&dense(a.0))).then(a.0.cmp(&b.0)));
    ranked.truncate(cfg.candidates);
    let text_fallback = ranked.is_empty();
    if ranked.len() < cfg.candidates {
        let have: HashSet<u32> = ranked.iter().map(|x| x.0).collect();
        let mut d: Vec<(u32, f32)> = (0..g.num_nodes() as u32).filter(|v| !have.contains(v)).map(|v| (v, dense(v))).collect();
        top_k(&mut d, cfg.candidates - ranked.len());
        // Below every reached node (scores > 0): dense ∈ [−1, 1] shifted under 0.
        ranked.extend(d.into_iter().map(|(v, s)| (v, s - 2.0)));
    }
    let paths = chosen.iter().zip(&reached).map(|(&(z, p), (_, a))| (z, p, a.len())).collect();
    Answered { ranked, paths, text_fallback }
}

/// Step 4: the `run`, `paths` and `curves` tables.
pub fn write(
    order: &[u32],
    out: &[Answered],
    data: &PathData,
    planned: &Planned,
    seed: u64,
) -> Result<(RecordBatch, RecordBatch, RecordBatch)> {
    let rows: Vec<(u32, Vec<(u32, f32)>)> = order.iter().zip(out).map(|(q, o)| (*q, o.ranked.clone())).collect();
    let run = run_batch("pasemiqa", &rows)?;
    let (mut pq, mut pk, mut pz, mut pp, mut pn, mut pf) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (q, o) in order.iter().zip(out) {
        for (k, &(z, p, n)) in o.paths.iter().enumerate() {
            pq.push(*q);
            pk.push(k as u32 + 1);
            pz.push(data.candidates[z].iter().map(|&t| data.vocab[t as usize].as_str()).collect::<Vec<_>>().join(" "));
            pp.push(p);
            pn.push(n as u32);
            pf.push(o.text_fallback);
        }
    }
    let paths = RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from(pq)) as ArrayRef),
        ("rank", Arc::new(UInt32Array::from(pk))),
        ("relations", Arc::new(StringArray::from(pz))),
        ("prob", Arc::new(Float64Array::from(pp))),
        ("reached", Arc::new(UInt32Array::from(pn))),
        ("text_fallback", Arc::new(BooleanArray::from(pf))),
    ])?;
    let mut curves = Curves::default();
    for c in &planned.curve {
        curves.push(
            "planner",
            "",
            seed,
            c.epoch,
            c.epoch == planned.best,
            &[("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_path_exact", c.val_exact)],
        );
    }
    Ok((run, paths, curves.batch()?))
}

impl StageSpec for PasemiqaStage {
    type Config = PasemiqaConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &PasemiqaConfig) -> std::result::Result<(), String> {
        if c.top_paths == 0 || c.candidates == 0 || c.planner_epochs == 0 || c.planner_hidden.get() == 0 || c.max_frontier == 0 {
            return Err("top_paths, candidates, planner_epochs, planner_hidden and max_frontier must be ≥ 1".into());
        }
        Ok(())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: PasemiqaConfig) -> Result<()> {
        let kb = ctx.timed("load", |c| Kb::load(c, MIN_NAME_CHARS))?;
        let queries = ctx.input("ingest", "queries")?;
        let (qids, split) = (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "split")?);
        let mut order: Vec<(u32, &str)> = (0..qids.len()).map(|i| (qids.value(i), split.value(i))).collect();
        order.sort_unstable();
        let split_of: HashMap<u32, &str> = order.iter().copied().collect();
        let ids: Vec<u32> = order.iter().map(|x| x.0).collect();
        let data = path_data(&kb, &ctx.input("planning", "relation_paths")?, &split_of)?;
        let dev = cfg.device.device();
        let planned = ctx.timed("plan", |_| plan(&kb, &data, &ids, &cfg, &dev))?;
        ctx.set_items(order.len() as u64);
        let hop_of: Vec<Vec<(u16, bool)>> =
            data.candidates.iter().map(|c| c.iter().filter_map(|&t| parse_hop(&kb.graph, &data.vocab[t as usize])).collect()).collect();
        let out: Vec<Answered> = ctx
            .timed("reason", |_| Ok(ids.par_iter().zip(&planned.log_probs).map(|(q, lp)| reason(&kb, *q, lp, &hop_of, &cfg)).collect()))?;
        let (run, paths, curves) = write(&ids, &out, &data, &planned, cfg.seed)?;
        ctx.write("run", &run)?;
        ctx.write("paths", &paths)?;
        ctx.write("curves", &curves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::kb::tests::toy_kb;
    use arrow::array::{Float32Array, ListBuilder, StringBuilder};

    fn relation_paths(rows: &[(u32, &[&str], f32)]) -> RecordBatch {
        let mut rel = ListBuilder::new(StringBuilder::new());
        for (_, hops, _) in rows {
            for h in *hops {
                rel.values().append_value(h);
            }
            rel.append(true);
        }
        RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef),
            ("relations", Arc::new(rel.finish()) as ArrayRef),
            ("weight", Arc::new(Float32Array::from_iter_values(rows.iter().map(|r| r.2))) as ArrayRef),
        ])
        .expect("relation paths")
    }

    #[test]
    fn path_data_weights_rows_per_query_and_candidates_from_training_only() {
        let kb = toy_kb();
        let rp =
            relation_paths(&[(0, &["<has_brand"], 0.5), (0, &["<has_brand", "has_brand>"], 0.5), (1, &["has_brand>"], 1.0), (2, &[], 1.0)]);
        let split_of = HashMap::from([(0, "train"), (1, "val"), (2, "train")]);
        let d = path_data(&kb, &rp, &split_of).expect("data");
        assert_eq!(d.vocab, ["<bos>", "<eos>", "<has_brand", "has_brand>"]);
        // Query 0's two paths share one query row; the empty path is skipped.
        assert_eq!(d.train.targets, vec![(0, vec![2], 0.5), (0, vec![2, 3], 0.5)]);
        assert_eq!(d.train.queries, kb.query_emb(0));
        assert_eq!(d.val.targets, vec![(0, vec![3], 1.0)]);
        assert_eq!(d.candidates, vec![vec![2], vec![2, 3]], "validation paths are not candidates");
    }

    #[test]
    fn reasoning_scores_reached_nodes_then_fills_densely_below_them() {
        let kb = toy_kb();
        let cfg = PasemiqaConfig { candidates: 4, ..PasemiqaConfig::default() };
        let g = &kb.graph;
        let against = (g.relation_id("has_brand").expect("rel"), false);
        // From Acme (0) against has_brand: Rain Tent (3) and Trail Tent (2), 0.5 each; the tie goes to
        // the dense score (1.0 vs 0.96); then the densest of the others, shifted below 0: Zeta (1)
        // and Steel Mug (4) at 0.8 − 2 (ties by id).
        let a = reason(&kb, 0, &[0.0], &[vec![against]], &cfg);
        assert_eq!(a.ranked.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 2, 1, 4]);
        assert_eq!((a.ranked[0].1, a.ranked[1].1), (0.5, 0.5));
        assert!((a.ranked[2].1 + 1.2).abs() < 1e-6);
        assert_eq!((a.paths.clone(), a.text_fallback), (vec![(0, 1.0, 2)], false));
        // No path: the dense ranking alone, flagged as the text fallback.
        let b = reason(&kb, 0, &[], &[], &cfg);
        assert!(b.text_fallback && b.paths.is_empty());
        assert_eq!(b.ranked.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 2, 1, 4]);
        let data = PathData {
            vocab: vec!["<bos>".into(), "<eos>".into(), "<has_brand".into()],
            train: SeqData::default(),
            val: SeqData::default(),
            candidates: vec![vec![2]],
        };
        let planned = Planned { log_probs: vec![vec![0.0], vec![]], curve: Vec::new(), best: 0 };
        let (run, paths, curves) = write(&[0, 1], &[a, b], &data, &planned, 0).expect("write");
        assert_eq!(run.num_rows(), 8);
        assert_eq!(paths.num_rows(), 1);
        assert_eq!(columns::strs(&paths, "relations").expect("relations").value(0), "<has_brand");
        assert_eq!(curves.num_rows(), 0);
    }

    #[test]
    fn follow_scores_and_top_paths_by_hand() -> Result<()> {
        // a0 -writes-> p2, a0 -writes-> p3, a1 -writes-> p3, p3 -cites-> p4.
        let types = ["author", "author", "paper", "paper", "paper"];
        let g = TypedGraph::new(&types, &[(0, 2, "writes"), (0, 3, "writes"), (1, 3, "writes"), (3, 4, "cites")])?;
        let writes = g.relation_id("writes").ok_or_else(|| crate::StageError::Internal("rel".into()))?;
        let cites = g.relation_id("cites").ok_or_else(|| crate::StageError::Internal("rel".into()))?;
        assert_eq!(follow(&g, &[0], &[(writes, true)], 10), vec![2, 3]);
        assert_eq!(follow(&g, &[0], &[(writes, true), (writes, false)], 10), vec![0, 1]);
        assert_eq!(follow(&g, &[0], &[(writes, true), (cites, true)], 10), vec![4]);
        assert_eq!(follow(&g, &[0], &[(cites, true)], 10), Vec::<u32>::new());
        assert_eq!(follow(&g, &[0], &[(writes, true)], 1), vec![2]);
        assert_eq!(parse_hop(&g, "writes>"), Some((writes, true)));
        assert_eq!(parse_hop(&g, "<cites"), Some((cites, false)));
        assert_eq!(parse_hop(&g, "likes>"), None);
        // Eq. 1–2: P = 0.75 over {2, 3}, P = 0.25 over {4}.
        let s = answer_scores(&[(0.75, vec![2, 3]), (0.25, vec![4]), (0.5, vec![])]);
        assert_eq!(s.len(), 3);
        assert!((s[&2] - 0.375).abs() < 1e-12 && (s[&3] - 0.375).abs() < 1e-12 && (s[&4] - 0.25).abs() < 1e-12);
        // Top-2 of log-probs ln(.5), ln(.2), ln(.3): indices 0, 2 with .5/.8 and .3/.8.
        let t = top_paths(&[0.5f64.ln(), 0.2f64.ln(), 0.3f64.ln()], 2);
        assert_eq!(t.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 2]);
        assert!((t[0].1 - 0.625).abs() < 1e-12 && (t[1].1 - 0.375).abs() < 1e-12);
        Ok(())
    }
}
