//! `planning`: planning-graph training data for the STaRK-style methods (MoR, PASemiQA).
//!
//! For every training and validation query: topic entities by exact name matching (node names found
//! in the query as whole words, longest match first; PASemiQA §4.1.1), with the dense top-k nodes as
//! the fallback when no name matches; then the shortest typed paths (≤ `max_hops`, a bounded BFS
//! over the typed graph, both edge directions) from the topic entities to each answer. Emitted:
//! (a) relation paths z = (r1 … rl) with PASemiQA's target weight Q(z|q) = 1/|Z*| (eq. 3, Z* = the
//! distinct shortest relation paths to the query's answers), and (b) MoR planning graphs: the type
//! path that reaches the most answers, with text restrictions (the matched spans on the first type,
//! the rest of the query on the last type).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, ListBuilder, RecordBatch, StringArray, StringBuilder, UInt32Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;

use crate::kb::kb::{Kb, remaining_text};
use crate::kb::paths::{Hop, Topics, hop_token, metapath_string, shortest_typed_paths, topics};
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `planning` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanningConfig {
    /// Longest typed path (in hops) searched from a topic entity to an answer.
    pub max_hops: usize,
    /// Dense fallback: top-k nodes when no name matches.
    pub fallback_k: usize,
    /// Names shorter than this (alphanumeric characters) are not matched.
    pub min_name_chars: usize,
    /// Shortest paths kept per node during the BFS.
    pub max_paths_per_node: usize,
}

impl Default for PlanningConfig {
    fn default() -> Self {
        PlanningConfig { max_hops: 3, fallback_k: 3, min_name_chars: 4, max_paths_per_node: 16 }
    }
}
pub struct PlanningStage;

static INFO: StageInfo = StageInfo {
    name: "planning",
    module: module_path!(),
    version: 1,
    about: "planning-graph training data: topic entities (names, dense fallback), shortest typed paths to answers, PASemiQA relation paths with Q(z|q), MoR planning graphs",
    deps: &["ingest", "dense"],
    needs: &[("ingest", "nodes"), ("ingest", "edges"), ("ingest", "queries"), ("ingest", "answers")],
    excludes: &[],
    collects: &[],
    outputs: &["topic_entities", "relation_paths", "planning_graphs"],
    files: &[],
    shards: None,
};

/// Per-query planning data.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    pub qid: u32,
    pub topics: Topics,
    /// (start type, hops, weight, answers reached)
    pub paths: Vec<(u16, Vec<Hop>, f32, u32)>,
    /// The planning graph: the path reaching the most answers, then with fewer hops, then the first.
    pub best: Option<usize>,
    pub remaining: String,
}

/// Step 1, per query: topic entities, the distinct shortest typed paths to its answers with
/// PASemiQA's weight Q(z|q) = 1/|Z*| and how many answers each reaches, and the planning graph.
pub fn query_plan(kb: &Kb, qid: u32, text: &str, gold: &[u32], cfg: &PlanningConfig) -> QueryPlan {
    let t = topics(&kb.matcher, text, kb.query_emb(qid), &kb.node_emb, kb.dim, cfg.fallback_k);
    let per = shortest_typed_paths(&kb.graph, &t.nodes, gold, cfg.max_hops, cfg.max_paths_per_node);
    let mut reach: BTreeMap<(u16, Vec<Hop>), u32> = BTreeMap::new();
    for p in per.iter() {
        for key in p {
            *reach.entry(key.clone()).or_default() += 1;
        }
    }
    let w = 1.0 / reach.len().max(1) as f32;
    let paths: Vec<(u16, Vec<Hop>, f32, u32)> = reach.into_iter().map(|((s, h), c)| (s, h, w, c)).collect();
    let best = (0..paths.len()).min_by_key(|&k| (std::cmp::Reverse(paths[k].3), paths[k].1.len(), k));
    let remaining = if t.by_embedding { text.to_string() } else { remaining_text(text, &t.mentions) };
    QueryPlan { qid, topics: t, paths, best, remaining }
}

/// Step 2: the `topic_entities` table.
pub fn topic_entities(kb: &Kb, plans: &[QueryPlan]) -> Result<RecordBatch> {
    let (mut tq, mut tn, mut tm, mut ts) = (vec![], vec![], vec![], vec![]);
    for p in plans {
        for &n in &p.topics.nodes {
            let span = p.topics.mentions.iter().find(|m| m.nodes.contains(&n)).map(|m| kb.query_text(p.qid)[m.start..m.end].to_string());
            tq.push(p.qid);
            tn.push(n);
            tm.push(if p.topics.by_embedding { "embedding" } else { "name" });
            ts.push(span);
        }
    }
    Ok(RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from(tq)) as ArrayRef),
        ("node_id", Arc::new(UInt32Array::from(tn)) as ArrayRef),
        ("method", Arc::new(StringArray::from(tm)) as ArrayRef),
        ("span", Arc::new(StringArray::from(ts)) as ArrayRef),
    ])?)
}

/// Step 3: the `relation_paths` table (PASemiQA's training targets).
pub fn relation_paths(kb: &Kb, plans: &[QueryPlan]) -> Result<RecordBatch> {
    let g = &kb.graph;
    let (mut rq, mut rs, mut rw, mut rc) = (vec![], vec![], vec![], vec![]);
    let mut rel_b = ListBuilder::new(StringBuilder::new());
    let mut typ_b = ListBuilder::new(StringBuilder::new());
    for p in plans {
        for (s, hops, w, c) in &p.paths {
            rq.push(p.qid);
            rs.push(metapath_string(g, *s, hops));
            for h in hops {
                rel_b.values().append_value(hop_token(g, h));
            }
            rel_b.append(true);
            typ_b.values().append_value(&g.types[*s as usize]);
            for h in hops {
                typ_b.values().append_value(&g.types[h.2 as usize]);
            }
            typ_b.append(true);
            rw.push(*w);
            rc.push(*c);
        }
    }
    Ok(RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from(rq)) as ArrayRef),
        ("metapath", Arc::new(StringArray::from(rs)) as ArrayRef),
        ("relations", Arc::new(rel_b.finish()) as ArrayRef),
        ("types", Arc::new(typ_b.finish()) as ArrayRef),
        ("weight", Arc::new(Float32Array::from(rw)) as ArrayRef),
        ("answers_reached", Arc::new(UInt32Array::from(rc)) as ArrayRef),
    ])?)
}

/// Step 4: the `planning_graphs` table (MoR's training targets): per query with a path, its best
/// path as a metapath, and restrictions (matched names on the first type, the rest of the query on
/// the last type) as JSON.
pub fn planning_graphs(kb: &Kb, plans: &[QueryPlan], split_of: &HashMap<u32, &str>) -> Result<RecordBatch> {
    let g = &kb.graph;
    let (mut pq, mut pm, mut pr, mut ps) = (vec![], vec![], vec![], vec![]);
    for p in plans {
        let Some(b) = p.best else { continue };
        let (s, hops, _, _) = &p.paths[b];
        let first = g.types[*s as usize].clone();
        let last = hops.last().map_or(first.clone(), |h| g.types[h.2 as usize].clone());
        let mut r: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if !p.topics.by_embedding {
            for m in &p.topics.mentions {
                r.entry(first.clone()).or_default().push(kb.query_text(p.qid)[m.start..m.end].to_string());
            }
        }
        if !p.remaining.is_empty() {
            r.entry(last).or_default().push(p.remaining.clone());
        }
        pq.push(p.qid);
        pm.push(metapath_string(g, *s, hops));
        pr.push(serde_json::to_string(&r).map_err(|e| StageError::Internal(e.to_string()))?);
        ps.push(split_of.get(&p.qid).copied().ok_or_else(|| StageError::Internal(format!("query {} has no split", p.qid)))?);
    }
    Ok(RecordBatch::try_from_iter(vec![
        ("query_id", Arc::new(UInt32Array::from(pq)) as ArrayRef),
        ("split", Arc::new(StringArray::from(ps)) as ArrayRef),
        ("metapath", Arc::new(StringArray::from(pm)) as ArrayRef),
        ("restrictions", Arc::new(StringArray::from(pr)) as ArrayRef),
    ])?)
}

impl StageSpec for PlanningStage {
    type Config = PlanningConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &PlanningConfig) -> std::result::Result<(), String> {
        if c.max_hops == 0 || c.max_hops > 4 || c.max_paths_per_node == 0 {
            return Err("max_hops must be 1..=4 and max_paths_per_node ≥ 1".into());
        }
        Ok(())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: PlanningConfig) -> Result<()> {
        let kb = Kb::load(ctx, cfg.min_name_chars)?;
        let queries = ctx.input("ingest", "queries")?;
        let (qids, qtext, split) =
            (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "text")?, columns::strs(&queries, "split")?);
        let answers = kb.answers(ctx)?;
        let rows: Vec<usize> = (0..queries.num_rows()).filter(|&i| matches!(split.value(i), "train" | "val")).collect();
        let plans: Vec<QueryPlan> = ctx.timed("topics + shortest paths", |_| {
            Ok(rows
                .par_iter()
                .map(|&i| query_plan(&kb, qids.value(i), qtext.value(i), answers.get(&qids.value(i)).map_or(&[][..], Vec::as_slice), &cfg))
                .collect())
        })?;
        ctx.set_items(plans.len() as u64);
        let split_of: HashMap<u32, &str> = (0..qids.len()).map(|i| (qids.value(i), split.value(i))).collect();
        let topic = topic_entities(&kb, &plans)?;
        ctx.write("topic_entities", &topic)?;
        let rel = relation_paths(&kb, &plans)?;
        ctx.write("relation_paths", &rel)?;
        let pg = planning_graphs(&kb, &plans, &split_of)?;
        ctx.write("planning_graphs", &pg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::kb::tests::toy_kb;

    #[test]
    fn a_query_plan_and_its_three_tables_by_hand() {
        let kb = toy_kb();
        let cfg = PlanningConfig { fallback_k: 2, ..PlanningConfig::default() };
        // "waterproof tent from Acme": Acme by name; its answer Rain Tent (3) is one hop against
        // has_brand; the rest of the query restricts the product.
        let p = query_plan(&kb, 0, kb.query_text(0), &[3], &cfg);
        assert_eq!((p.topics.nodes.clone(), p.topics.by_embedding), (vec![0], false));
        assert_eq!(p.paths.len(), 1);
        let (start, hops, weight, reached) = &p.paths[0];
        assert_eq!(metapath_string(&kb.graph, *start, hops), "brand <-has_brand- product");
        assert_eq!((*weight, *reached, p.best), (1.0, 1, Some(0)));
        assert_eq!(p.remaining, "waterproof tent from");
        // Two answers by the same path: one path reaching both, Q(z|q) = 1.
        let two = query_plan(&kb, 0, kb.query_text(0), &[2, 3], &cfg);
        assert_eq!(two.paths.iter().map(|p| (p.2, p.3)).collect::<Vec<_>>(), vec![(1.0, 2)]);
        // No name in the query: the dense top-2 (inner product with (1, 0): Acme 1.0, Trail Tent 0.8),
        // and the whole query as the remaining text; no answer reachable → no planning graph.
        let q = query_plan(&kb, 2, kb.query_text(2), &[], &cfg);
        assert_eq!((q.topics.nodes.clone(), q.topics.by_embedding, q.best), (vec![0, 2], true, None));
        assert_eq!(q.remaining, "camping gear");

        let plans = vec![p, q];
        let topics = topic_entities(&kb, &plans).expect("topics");
        assert_eq!(columns::u32s(&topics, "node_id").expect("node_id").values().to_vec(), vec![0, 0, 2]);
        let method = columns::strs(&topics, "method").expect("method");
        let span = columns::strs(&topics, "span").expect("span");
        assert_eq!((method.value(0), span.value(0), method.value(1)), ("name", "Acme", "embedding"));
        assert!(arrow::array::Array::is_null(span, 1));
        let rel = relation_paths(&kb, &plans).expect("relation paths");
        assert_eq!(rel.num_rows(), 1);
        assert_eq!(columns::string_lists(&rel, "relations").expect("relations"), vec![vec!["<has_brand".to_string()]]);
        assert_eq!(columns::string_lists(&rel, "types").expect("types"), vec![vec!["brand".to_string(), "product".to_string()]]);
        let split_of = HashMap::from([(0, "train"), (2, "test")]);
        let pg = planning_graphs(&kb, &plans, &split_of).expect("planning graphs");
        assert_eq!(pg.num_rows(), 1, "only queries with a path");
        assert_eq!(columns::strs(&pg, "split").expect("split").value(0), "train");
        assert_eq!(columns::strs(&pg, "restrictions").expect("r").value(0), r#"{"brand":["Acme"],"product":["waterproof tent from"]}"#);
        // A query without a split is a bug, not a silent default.
        assert!(planning_graphs(&kb, &plans, &HashMap::new()).is_err());
    }
}
