//! MoR's mixed traversal (the Reasoning step): plan paths parsed against the KB's types and
//! relations, BM25 seeds and per-layer text additions from the `bm25` stage's index restricted to a
//! node type, typed BFS along each hop, intersection across paths.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::kb::kb::TypedGraph;
use crate::retrieval::bm25_index::Index;
use crate::shared::text::TokenizerKind;
use crate::{Result, StageContext, StageError};

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
#[derive(Debug, Clone, Copy, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraversalConfig {
    /// Start nodes per plan: the best BM25 matches of the plan's first entity type.
    pub seeds: usize,
    /// Nodes added per traversal layer by text (BM25 on the plan's restriction within the layer's
    /// type).
    pub per_layer_text: usize,
    /// Candidates per query: the reached nodes, then BM25 on the restrictions up to this many.
    pub candidates: usize,
    /// Nodes kept per traversal layer (first reached first), bounding hub explosions.
    pub max_layer: usize,
}

impl Default for TraversalConfig {
    fn default() -> Self {
        TraversalConfig { seeds: 5, per_layer_text: 10, candidates: 100, max_layer: 5000 }
    }
}

/// The `bm25` stage's index over node documents (document d = node d) with per-type masks.
pub struct TextIndex {
    pub index: Index,
    pub masks: Vec<Vec<bool>>,
    pub kind: TokenizerKind,
}

impl TextIndex {
    /// An index over the KB's documents (document d must be node d) with a mask per node type.
    pub fn new(g: &TypedGraph, index: Index) -> TextIndex {
        let kind = index.tokenizer.unwrap_or_default();
        let masks = (0..g.types.len()).map(|t| g.node_type.iter().map(|&x| x as usize == t).collect()).collect();
        TextIndex { index, masks, kind }
    }

    /// The global index (scope `*`) the `bm25` stage persisted, with its parameters and tokenizer.
    pub fn load(ctx: &StageContext<'_>, g: &TypedGraph) -> Result<TextIndex> {
        let (index, node_of) = Index::from_tables(
            "*",
            &ctx.input("bm25", "bm25_index")?,
            &ctx.input("bm25", "bm25_terms")?,
            &ctx.input("bm25", "bm25_postings")?,
            &ctx.input("bm25", "bm25_docs")?,
        )?;
        if node_of.len() != g.num_nodes() || node_of.iter().enumerate().any(|(d, &v)| v as usize != d) {
            return Err(StageError::Input(format!(
                "bm25_docs: the `*` index holds {} documents, not the KB's nodes 0..{}",
                node_of.len(),
                g.num_nodes()
            )));
        }
        Ok(TextIndex::new(g, index))
    }

    pub fn top(&self, text: &str, ty: Option<u16>, k: usize) -> Vec<(u32, f32)> {
        self.index.search_text(text, self.kind, k, ty.map(|t| self.masks[t as usize].as_slice()))
    }
}

/// MoR's mixed traversal for one plan: candidates (in reach order) with trajectories.
/// `text` off drops the per-layer BM25 additions (seeds stay textual: a traversal needs a start).
pub fn traverse(
    g: &TypedGraph,
    ti: &TextIndex,
    query: &str,
    plan: &[PlanPath],
    restrictions: &BTreeMap<u16, Vec<String>>,
    cfg: &TraversalConfig,
    text: bool,
) -> Vec<(u32, Traj)> {
    let with = |t: u16| -> String {
        let r = restrictions.get(&t).map(|v| v.join(" ")).unwrap_or_default();
        format!("{query} {r}")
    };
    let mut per_path: Vec<Vec<(u32, Traj)>> = Vec::new();
    for (pi, p) in plan.iter().enumerate() {
        let tid = pi.min(254) as u8;
        let mut layer: Vec<(u32, Traj)> = ti
            .top(&with(p.start), Some(p.start), cfg.seeds)
            .into_iter()
            .map(|(v, _)| (v, Traj { path: vec![v], via: vec![1], traversal: tid }))
            .collect();
        for hop in &p.hops {
            let mut seen: HashSet<u32> = HashSet::new();
            let mut next: Vec<(u32, Traj)> = Vec::new();
            'outer: for (u, tr) in &layer {
                for a in g.arcs(*u) {
                    let v = g.nbr[a];
                    if g.node_type[v as usize] != hop.to
                        || hop.rel.is_some_and(|r| r != g.rel[a])
                        || hop.fwd.is_some_and(|f| f != g.fwd[a])
                        || !seen.insert(v)
                    {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::retrieval::bm25_index::Bm25Params;

    /// brand b0 "acme" (0), b1 "zeta" (1); products 2, 3 of b0 and 4 of b1; 3 and 4 are "waterproof".
    pub(crate) fn toy() -> (TypedGraph, TextIndex) {
        let types = ["brand", "brand", "product", "product", "product"];
        let g = TypedGraph::new(&types, &[(2, 0, "has_brand"), (3, 0, "has_brand"), (4, 1, "has_brand")]).expect("graph");
        let docs = ["acme brand", "zeta brand", "plain tent", "waterproof tent", "waterproof jacket"];
        let ti = TextIndex::new(&g, Index::build_texts(&docs, TokenizerKind::Bm25s, Bm25Params::default()));
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
