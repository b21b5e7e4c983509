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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, ListBuilder, RecordBatch, StringArray, StringBuilder, UInt32Array};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;

use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// The knowledge base as typed adjacency lists: every stored edge is listed at both ends, with its
/// direction as seen from the listing node.
#[derive(Debug, Clone)]
pub struct TypedGraph {
    pub indptr: Vec<usize>,
    pub nbr: Vec<u32>,
    pub rel: Vec<u16>,
    /// `true`: the stored edge goes from the listing node to `nbr`.
    pub fwd: Vec<bool>,
    pub relations: Vec<String>,
    pub node_type: Vec<u16>,
    pub types: Vec<String>,
}

impl TypedGraph {
    /// From node types (indexed by node id) and stored `(src, dst, relation)` edges.
    pub fn new(node_types: &[&str], edges: &[(u32, u32, &str)]) -> Result<TypedGraph> {
        let n = node_types.len();
        let types: Vec<String> = node_types.iter().copied().collect::<BTreeSet<_>>().into_iter().map(str::to_string).collect();
        let type_id: HashMap<&str, u16> = types.iter().enumerate().map(|(i, t)| (t.as_str(), i as u16)).collect();
        let node_type: Vec<u16> = node_types.iter().map(|t| type_id[t]).collect();
        let relations: Vec<String> = edges.iter().map(|e| e.2).collect::<BTreeSet<_>>().into_iter().map(str::to_string).collect();
        let rel_id: HashMap<&str, u16> = relations.iter().enumerate().map(|(i, r)| (r.as_str(), i as u16)).collect();
        let mut arcs: Vec<(u32, u32, u16, bool)> = Vec::with_capacity(edges.len() * 2);
        for (i, &(s, d, r)) in edges.iter().enumerate() {
            if s as usize >= n || d as usize >= n {
                return Err(StageError::Internal(format!("edge {i}: node out of range 0..{n}")));
            }
            arcs.push((s, d, rel_id[r], true));
            arcs.push((d, s, rel_id[r], false));
        }
        arcs.par_sort_unstable();
        arcs.dedup();
        let mut indptr = vec![0usize; n + 1];
        for a in &arcs {
            indptr[a.0 as usize + 1] += 1;
        }
        for i in 0..n {
            indptr[i + 1] += indptr[i];
        }
        Ok(TypedGraph {
            indptr,
            nbr: arcs.iter().map(|a| a.1).collect(),
            rel: arcs.iter().map(|a| a.2).collect(),
            fwd: arcs.iter().map(|a| a.3).collect(),
            relations,
            node_type,
            types,
        })
    }

    pub fn num_nodes(&self) -> usize {
        self.node_type.len()
    }

    pub fn arcs(&self, v: u32) -> std::ops::Range<usize> {
        self.indptr[v as usize]..self.indptr[v as usize + 1]
    }

    pub fn type_id(&self, name: &str) -> Option<u16> {
        self.types.iter().position(|t| t == name).map(|i| i as u16)
    }

    pub fn relation_id(&self, name: &str) -> Option<u16> {
        self.relations.iter().position(|t| t == name).map(|i| i as u16)
    }
}

/// Lower-cased alphanumeric words of a text with their byte spans.
pub fn words(text: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((text[s..i].to_lowercase(), s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Exact name matching: node names as word sequences.
pub struct NameMatcher {
    by_name: HashMap<Vec<String>, Vec<u32>>,
    max_words: usize,
}

/// One matched mention: the byte span in the query and the nodes named so.
#[derive(Debug, Clone, PartialEq)]
pub struct Mention {
    pub start: usize,
    pub end: usize,
    pub nodes: Vec<u32>,
}

impl NameMatcher {
    /// Names of fewer than `min_chars` characters are not matched (colours, short codes).
    pub fn new(names: &[&str], min_chars: usize) -> NameMatcher {
        let mut by_name: HashMap<Vec<String>, Vec<u32>> = HashMap::new();
        for (id, name) in names.iter().enumerate() {
            if name.chars().filter(|c| c.is_alphanumeric()).count() < min_chars {
                continue;
            }
            let w: Vec<String> = words(name).into_iter().map(|w| w.0).collect();
            if !w.is_empty() {
                by_name.entry(w).or_default().push(id as u32);
            }
        }
        let max_words = by_name.keys().map(Vec::len).max().unwrap_or(0);
        NameMatcher { by_name, max_words }
    }

    /// Mentions left to right; at each word the longest name wins and matching resumes after it.
    pub fn find(&self, query: &str) -> Vec<Mention> {
        let w = words(query);
        let mut out = Vec::new();
        let mut i = 0;
        while i < w.len() {
            let longest = (1..=self.max_words.min(w.len() - i)).rev().find_map(|len| {
                let key: Vec<String> = w[i..i + len].iter().map(|x| x.0.clone()).collect();
                self.by_name.get(&key).map(|nodes| (len, nodes))
            });
            match longest {
                Some((len, nodes)) => {
                    out.push(Mention { start: w[i].1, end: w[i + len - 1].2, nodes: nodes.clone() });
                    i += len;
                }
                None => i += 1,
            }
        }
        out
    }
}

/// The query without the mentioned spans, whitespace-normalised and without edge punctuation.
pub fn remaining_text(query: &str, mentions: &[Mention]) -> String {
    let mut s = String::new();
    let mut at = 0;
    for m in mentions {
        s.push_str(&query[at..m.start]);
        s.push(' ');
        at = m.end;
    }
    s.push_str(&query[at..]);
    s.split_whitespace().collect::<Vec<_>>().join(" ").trim_matches(|c: char| !c.is_alphanumeric()).to_string()
}

/// One hop of a typed path: relation, direction (as stored), type reached.
pub type Hop = (u16, bool, u16);

/// The distinct shortest typed paths (≤ `max_hops`) from any of `sources` to each of `targets`:
/// `result[k]` = the paths (start type, hops) of `targets[k]` (empty when unreachable or a source).
/// At most `cap` paths are kept per node (the first in BFS order), bounding the work on hubs.
pub fn shortest_typed_paths(g: &TypedGraph, sources: &[u32], targets: &[u32], max_hops: usize, cap: usize) -> Vec<Vec<(u16, Vec<Hop>)>> {
    let mut paths: HashMap<u32, Vec<(u16, Vec<Hop>)>> = HashMap::new();
    let mut frontier: Vec<u32> = Vec::new();
    for &s in sources {
        if (s as usize) < g.num_nodes() && !paths.contains_key(&s) {
            paths.insert(s, vec![(g.node_type[s as usize], Vec::new())]);
            frontier.push(s);
        }
    }
    let wanted: BTreeSet<u32> = targets.iter().copied().collect();
    let mut found = 0;
    for _ in 0..max_hops {
        if frontier.is_empty() || found == wanted.len() {
            break;
        }
        let mut next: BTreeMap<u32, Vec<(u16, Vec<Hop>)>> = BTreeMap::new();
        for &u in &frontier {
            let from = paths[&u].clone();
            for a in g.arcs(u) {
                let v = g.nbr[a];
                if paths.contains_key(&v) {
                    continue;
                }
                let slot = next.entry(v).or_default();
                for (t0, p) in &from {
                    if slot.len() >= cap {
                        break;
                    }
                    let mut q = p.clone();
                    q.push((g.rel[a], g.fwd[a], g.node_type[v as usize]));
                    if !slot.iter().any(|(s0, s)| s0 == t0 && *s == q) {
                        slot.push((*t0, q));
                    }
                }
            }
        }
        frontier = next.keys().copied().collect();
        for (v, p) in next {
            if wanted.contains(&v) {
                found += 1;
            }
            paths.insert(v, p);
        }
    }
    let src: BTreeSet<u32> = sources.iter().copied().collect();
    targets.iter().map(|t| if src.contains(t) { Vec::new() } else { paths.get(t).cloned().unwrap_or_default() }).collect()
}

/// A hop as text: `rel>` (stored direction) or `<rel` (against it).
pub fn hop_token(g: &TypedGraph, h: &Hop) -> String {
    let r = &g.relations[h.0 as usize];
    if h.1 { format!("{r}>") } else { format!("<{r}") }
}

/// MoR-style metapath string with relations: `a -writes-> b <-cites- c`.
pub fn metapath_string(g: &TypedGraph, start: u16, hops: &[Hop]) -> String {
    let mut s = g.types[start as usize].clone();
    for h in hops {
        let r = &g.relations[h.0 as usize];
        s.push_str(&if h.1 { format!(" -{r}-> ") } else { format!(" <-{r}- ") });
        s.push_str(&g.types[h.2 as usize]);
    }
    s
}

/// Options of the `planning` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanningConfig {
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

/// Topic entities of a query: name mentions, or the dense fallback.
#[derive(Debug, Clone)]
pub struct Topics {
    pub mentions: Vec<Mention>,
    pub nodes: Vec<u32>,
    pub by_embedding: bool,
}

/// Topic entities by names, else the `k` nodes whose embeddings have the largest inner product with
/// the query's (ties: lower id).
pub fn topics(matcher: &NameMatcher, query: &str, q_emb: &[f32], node_emb: &[f32], dim: usize, k: usize) -> Topics {
    let mentions = matcher.find(query);
    let mut nodes: Vec<u32> = mentions.iter().flat_map(|m| m.nodes.iter().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    if !nodes.is_empty() || dim == 0 {
        return Topics { mentions, nodes, by_embedding: false };
    }
    let mut scored: Vec<(u32, f32)> = node_emb.chunks_exact(dim).enumerate().map(|(i, e)| (i as u32, e.iter().zip(q_emb).map(|(a, b)| a * b).sum())).collect();
    crate::bm25::top_k(&mut scored, k);
    Topics { mentions, nodes: scored.into_iter().map(|x| x.0).collect(), by_embedding: true }
}

/// Reads `query_embeddings`/`embeddings` of the dense stage as `(ids, flat, dim)`.
pub fn embedding_table(b: &RecordBatch, id_col: &str) -> Result<(Vec<u32>, Vec<f32>, usize)> {
    use arrow::array::{Array, AsArray};
    let ids = columns::u32s(b, id_col)?.values().to_vec();
    let col = b.column_by_name("embedding").ok_or_else(|| StageError::Internal("embedding column".into()))?;
    let list = col.as_fixed_size_list_opt().ok_or_else(|| StageError::Internal("embedding is not a fixed-size list".into()))?;
    let dim = list.value_length() as usize;
    let vals = list.values().as_primitive_opt::<arrow::datatypes::Float32Type>().ok_or_else(|| StageError::Internal("embedding values are not f32".into()))?;
    let _ = list.len();
    Ok((ids, vals.values().to_vec(), dim))
}

pub struct PlanningStage;

static INFO: StageInfo = StageInfo {
    name: "planning",
    version: 1,
    about: "planning-graph training data: topic entities (names, dense fallback), shortest typed paths to answers, PASemiQA relation paths with Q(z|q), MoR planning graphs",
    deps: &["ingest", "dense"],
    needs: &[("ingest", "nodes"), ("ingest", "edges"), ("ingest", "queries"), ("ingest", "answers")],
    excludes: &[],
    outputs: &["topic_entities", "relation_paths", "planning_graphs"],
};

/// Per-query planning data.
struct QueryPlan {
    qid: u32,
    topics: Topics,
    /// (start type, hops, weight, answers reached)
    paths: Vec<(u16, Vec<Hop>, f32, u32)>,
    best: Option<usize>,
    remaining: String,
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
        let kb = crate::mor::Kb::load(ctx)?;
        let queries = ctx.input("ingest", "queries")?;
        let (qids, qtext, split) = (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "text")?, columns::strs(&queries, "split")?);
        let answers = kb.answers(ctx)?;
        let rows: Vec<usize> = (0..queries.num_rows()).filter(|&i| matches!(split.value(i), "train" | "val")).collect();
        let plans: Vec<QueryPlan> = ctx.timed("topics + shortest paths", |_| {
            Ok(rows
                .par_iter()
                .map(|&i| {
                    let qid = qids.value(i);
                    let text = qtext.value(i);
                    let t = topics(&kb.matcher, text, kb.query_emb(qid), &kb.node_emb, kb.dim, cfg.fallback_k);
                    let gold = answers.get(&qid).cloned().unwrap_or_default();
                    let per = shortest_typed_paths(&kb.graph, &t.nodes, &gold, cfg.max_hops, cfg.max_paths_per_node);
                    let mut reach: BTreeMap<(u16, Vec<Hop>), u32> = BTreeMap::new();
                    for p in per.iter() {
                        for key in p {
                            *reach.entry(key.clone()).or_default() += 1;
                        }
                    }
                    let w = 1.0 / reach.len().max(1) as f32;
                    let paths: Vec<(u16, Vec<Hop>, f32, u32)> = reach.into_iter().map(|((s, h), c)| (s, h, w, c)).collect();
                    // The planning graph: most answers reached, then fewer hops, then the first.
                    let best = (0..paths.len()).min_by_key(|&k| (std::cmp::Reverse(paths[k].3), paths[k].1.len(), k));
                    let remaining = if t.by_embedding { text.to_string() } else { remaining_text(text, &t.mentions) };
                    QueryPlan { qid, topics: t, paths, best, remaining }
                })
                .collect())
        })?;
        ctx.set_items(plans.len() as u64);
        let g = &kb.graph;
        // topic_entities
        let (mut tq, mut tn, mut tm, mut ts) = (vec![], vec![], vec![], vec![]);
        for p in &plans {
            for &n in &p.topics.nodes {
                let span = p.topics.mentions.iter().find(|m| m.nodes.contains(&n)).map(|m| kb.query_text(p.qid)[m.start..m.end].to_string());
                tq.push(p.qid);
                tn.push(n);
                tm.push(if p.topics.by_embedding { "embedding" } else { "name" });
                ts.push(span);
            }
        }
        let topic = RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from(tq)) as ArrayRef),
            ("node_id", Arc::new(UInt32Array::from(tn)) as ArrayRef),
            ("method", Arc::new(StringArray::from(tm)) as ArrayRef),
            ("span", Arc::new(StringArray::from(ts)) as ArrayRef),
        ])?;
        ctx.write("topic_entities", &topic)?;
        // relation_paths
        let (mut rq, mut rs, mut rw, mut rc) = (vec![], vec![], vec![], vec![]);
        let mut rel_b = ListBuilder::new(StringBuilder::new());
        let mut typ_b = ListBuilder::new(StringBuilder::new());
        for p in &plans {
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
        let rel = RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from(rq)) as ArrayRef),
            ("metapath", Arc::new(StringArray::from(rs)) as ArrayRef),
            ("relations", Arc::new(rel_b.finish()) as ArrayRef),
            ("types", Arc::new(typ_b.finish()) as ArrayRef),
            ("weight", Arc::new(Float32Array::from(rw)) as ArrayRef),
            ("answers_reached", Arc::new(UInt32Array::from(rc)) as ArrayRef),
        ])?;
        ctx.write("relation_paths", &rel)?;
        // planning_graphs
        let (mut pq, mut pm, mut pr, mut ps) = (vec![], vec![], vec![], vec![]);
        for p in &plans {
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
            ps.push(split_of(&queries, p.qid)?);
        }
        let pg = RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from(pq)) as ArrayRef),
            ("split", Arc::new(StringArray::from(ps)) as ArrayRef),
            ("metapath", Arc::new(StringArray::from(pm)) as ArrayRef),
            ("restrictions", Arc::new(StringArray::from(pr)) as ArrayRef),
        ])?;
        ctx.write("planning_graphs", &pg)
    }
}

fn split_of(queries: &RecordBatch, qid: u32) -> Result<String> {
    let (ids, split) = (columns::u32s(queries, "query_id")?, columns::strs(queries, "split")?);
    (0..ids.len()).find(|&i| ids.value(i) == qid).map(|i| split.value(i).to_string()).ok_or_else(|| StageError::Internal(format!("query {qid}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// a(author 0) -writes-> p(paper 2) <-writes- b(author 1) -affiliated-> i(inst 3); a -affiliated-> i.
    fn toy() -> TypedGraph {
        let types = ["author", "author", "paper", "institution"];
        TypedGraph::new(&types, &[(0, 2, "writes"), (1, 2, "writes"), (1, 3, "affiliated_with"), (0, 3, "affiliated_with")]).expect("graph")
    }

    #[test]
    fn names_match_longest_first_on_word_boundaries() {
        let m = NameMatcher::new(&["Grace Haddad", "Grace", "Haddad Lab", "red"], 4);
        let q = "Papers by Grace Haddad Lab members, not Graceful ones; red.";
        let found = m.find(q);
        assert_eq!(found.len(), 1);
        assert_eq!(&q[found[0].start..found[0].end], "Grace Haddad");
        assert_eq!(found[0].nodes, vec![0]);
        assert_eq!(remaining_text(q, &found), "Papers by Lab members, not Graceful ones; red");
    }

    #[test]
    fn shortest_typed_paths_by_hand() {
        let g = toy();
        let (w, af) = (g.relation_id("writes").expect("w"), g.relation_id("affiliated_with").expect("a"));
        let (author, paper, inst) = (g.type_id("author").expect("t"), g.type_id("paper").expect("t"), g.type_id("institution").expect("t"));
        let got = shortest_typed_paths(&g, &[0], &[1, 3, 0], 3, 16);
        // 0 → 1: two shortest 2-hop paths, via the paper and via the institution.
        let mut p1 = got[0].clone();
        p1.sort();
        let mut want = vec![(author, vec![(w, true, paper), (w, false, author)]), (author, vec![(af, true, inst), (af, false, author)])];
        want.sort();
        assert_eq!(p1, want);
        // 0 → 3 directly; a source is not its own answer.
        assert_eq!(got[1], vec![(author, vec![(af, true, inst)])]);
        assert!(got[2].is_empty());
        assert_eq!(metapath_string(&g, author, &want[1].1), if want[1].1[0].0 == w { "author -writes-> paper <-writes- author" } else { "author -affiliated_with-> institution <-affiliated_with- author" });
        // Bounded hops: nothing beyond one hop.
        assert!(shortest_typed_paths(&g, &[0], &[1], 1, 16)[0].is_empty());
    }
}
