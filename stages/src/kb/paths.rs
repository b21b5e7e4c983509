//! Shortest typed paths and topic entities: the training signal the `planning` stage derives for
//! MoR (planning graphs) and PASemiQA (relation paths with Q(z|q)).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::kb::kb::{Mention, NameMatcher, TypedGraph};
use crate::shared::run::top_k;

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
    let mut scored: Vec<(u32, f32)> =
        node_emb.chunks_exact(dim).enumerate().map(|(i, e)| (i as u32, e.iter().zip(q_emb).map(|(a, b)| a * b).sum())).collect();
    top_k(&mut scored, k);
    Topics { mentions, nodes: scored.into_iter().map(|x| x.0).collect(), by_embedding: true }
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
        assert_eq!(
            metapath_string(&g, author, &want[1].1),
            if want[1].1[0].0 == w {
                "author -writes-> paper <-writes- author"
            } else {
                "author -affiliated_with-> institution <-affiliated_with- author"
            }
        );
        // Bounded hops: nothing beyond one hop.
        assert!(shortest_typed_paths(&g, &[0], &[1], 1, 16)[0].is_empty());
    }
}
