//! The typed knowledge base as the STaRK-style methods (planning, MoR, PASemiQA) see it: typed
//! adjacency lists, exact name matching of node names in queries, and the dense stage's node and
//! query embeddings.

use std::collections::{BTreeSet, HashMap};

use arrow::array::RecordBatch;
use rayon::prelude::*;
use tgrag_schemas::columns;

use crate::shared::encoders::embedding_table;
use crate::{Result, StageContext, StageError};

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
        let relations: Vec<String> = edges.iter().map(|e| e.2).collect::<BTreeSet<_>>().into_iter().map(str::to_string).collect();
        // Type and relation ids are 16-bit: more distinct names than that is the data's fault.
        for (what, table, column, count) in
            [("node types", "nodes", "node_type", types.len()), ("relation types", "edges", "relation", relations.len())]
        {
            if count > usize::from(u16::MAX) + 1 {
                return Err(StageError::Input(format!(
                    "{table}: column `{column}`: {count} distinct {what}; the knowledge-base methods support at most {}",
                    usize::from(u16::MAX) + 1
                )));
            }
        }
        let ids16 = |names: &[String]| -> HashMap<String, u16> {
            names.iter().enumerate().filter_map(|(i, t)| u16::try_from(i).ok().map(|i| (t.clone(), i))).collect()
        };
        let (type_id, rel_id) = (ids16(&types), ids16(&relations));
        let node_type: Vec<u16> = node_types.iter().map(|t| type_id[*t]).collect();
        let mut arcs: Vec<(u32, u32, u16, bool)> = Vec::with_capacity(edges.len() * 2);
        for (i, &(s, d, r)) in edges.iter().enumerate() {
            if s as usize >= n || d as usize >= n {
                return Err(StageError::Input(format!("edges: row {i}: node {} is not in 0..{n}", s.max(d))));
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

    /// Number of distinct neighbours of `v` (both directions, every relation; a self-loop counts
    /// `v` once): the degree of the undirected simple graph STaRK's conversion makes.
    pub fn degree(&self, v: u32) -> usize {
        let nbr = &self.nbr[self.arcs(v)];
        // Arcs are sorted by (node, neighbour, relation, direction): equal neighbours are adjacent.
        nbr.iter().enumerate().filter(|&(i, w)| i == 0 || nbr[i - 1] != *w).count()
    }

    /// Number of connected components of the undirected graph (an isolated node is one).
    pub fn components(&self) -> usize {
        // Union-find with path halving and union by index.
        let n = self.num_nodes();
        let mut parent: Vec<u32> = (0..n as u32).collect();
        fn root(parent: &mut [u32], mut v: u32) -> u32 {
            while parent[v as usize] != v {
                let up = parent[parent[v as usize] as usize];
                parent[v as usize] = up;
                v = up;
            }
            v
        }
        let mut count = n;
        for v in 0..n as u32 {
            for &w in &self.nbr[self.arcs(v)] {
                let (a, b) = (root(&mut parent, v), root(&mut parent, w));
                if a != b {
                    parent[a.max(b) as usize] = a.min(b);
                    count -= 1;
                }
            }
        }
        count
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

/// Node names shorter than this (alphanumeric characters) are not matched in queries (colours,
/// short codes); the `planning` stage's `min_name_chars` default, used by MoR and PASemiQA.
pub const MIN_NAME_CHARS: usize = 4;

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
    /// The KB of the ingest and dense stages' outputs; names shorter than `min_name_chars`
    /// alphanumeric characters are not matched.
    pub fn load(ctx: &StageContext<'_>, min_name_chars: usize) -> Result<Kb> {
        Kb::from_tables(
            &ctx.input("ingest", "nodes")?,
            &ctx.input("ingest", "edges")?,
            &ctx.input("ingest", "queries")?,
            &ctx.input("dense", "embeddings")?,
            &ctx.input("dense", "query_embeddings")?,
            min_name_chars,
        )
    }

    /// Nodes (ids must be 0..N, once each), edges, queries, and the node and query embeddings (one
    /// width). A KB that breaks these rules is the input's fault ([`StageError::Input`]).
    pub fn from_tables(
        nodes: &RecordBatch,
        edges: &RecordBatch,
        queries: &RecordBatch,
        embeddings: &RecordBatch,
        query_embeddings: &RecordBatch,
        min_name_chars: usize,
    ) -> Result<Kb> {
        let (ids, types, names, docs) = (
            columns::u32s(nodes, "node_id")?,
            columns::strs(nodes, "node_type")?,
            columns::strs(nodes, "name")?,
            columns::strs(nodes, "doc")?,
        );
        let n = ids.len();
        let mut row = vec![usize::MAX; n];
        for i in 0..n {
            let id = ids.value(i) as usize;
            if id >= n || row[id] != usize::MAX {
                return Err(StageError::Input(format!(
                    "nodes: row {i}, column `node_id`: {id}; the knowledge-base methods need node ids 0..{n} (0..N−1), each once"
                )));
            }
            row[id] = i;
        }
        let t: Vec<&str> = row.iter().map(|&r| types.value(r)).collect();
        let (s, d, r) = (columns::u32s(edges, "src")?, columns::u32s(edges, "dst")?, columns::strs(edges, "relation")?);
        let e: Vec<(u32, u32, &str)> = (0..s.len()).map(|i| (s.value(i), d.value(i), r.value(i))).collect();
        let graph = TypedGraph::new(&t, &e)?;
        let name_list: Vec<&str> = row.iter().map(|&r| names.value(r)).collect();
        let matcher = NameMatcher::new(&name_list, min_name_chars);
        let (eids, emb, dim) = embedding_table(embeddings, "node_id")?;
        let mut node_emb = vec![0f32; n * dim];
        for (k, &id) in eids.iter().enumerate() {
            if (id as usize) < n {
                node_emb[id as usize * dim..(id as usize + 1) * dim].copy_from_slice(&emb[k * dim..(k + 1) * dim]);
            }
        }
        let (qids, q_emb, qdim) = embedding_table(query_embeddings, "query_id")?;
        if qdim != dim && !qids.is_empty() {
            return Err(StageError::Input(format!(
                "query_embeddings are {qdim} wide but node embeddings {dim}: both must come from one encoder"
            )));
        }
        let q_row = qids.iter().enumerate().map(|(k, &q)| (q, k)).collect();
        let (qi, qt) = (columns::u32s(queries, "query_id")?, columns::strs(queries, "text")?);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::{ArrayRef, StringArray, UInt32Array};
    use std::sync::Arc;
    use tgrag_schemas::tables;

    use crate::shared::encoders::embedding_array;

    fn u32a(v: &[u32]) -> ArrayRef {
        Arc::new(UInt32Array::from(v.to_vec()))
    }

    fn strs(v: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from(v.to_vec()))
    }

    /// The toy KB's tables: brands Acme (0) and Zeta (1); products Trail Tent (2) and Rain Tent (3)
    /// of Acme, Steel Mug (4) of Zeta. Queries: 0 "waterproof tent from Acme" (train), 1 "a mug by
    /// Zeta" (val), 2 "camping gear" (test, no name). Two-dimensional embeddings.
    pub(crate) fn toy_tables(node_ids: &[u32], qdim: usize) -> [RecordBatch; 5] {
        let nodes = tables::NODES
            .batch(vec![
                u32a(node_ids),
                strs(&["brand", "brand", "product", "product", "product"]),
                strs(&["Acme", "Zeta", "Trail Tent", "Rain Tent", "Steel Mug"]),
                strs(&["acme outdoor brand", "zeta kitchen brand", "trail tent light", "waterproof rain tent", "steel mug"]),
            ])
            .expect("nodes");
        let edges = tables::EDGES.batch(vec![u32a(&[2, 3, 4]), u32a(&[0, 0, 1]), strs(&["has_brand"; 3])]).expect("edges");
        let queries = RecordBatch::try_from_iter(vec![
            ("query_id", u32a(&[0, 1, 2])),
            ("text", strs(&["waterproof tent from Acme", "a mug by Zeta", "camping gear"])),
            ("split", strs(&["train", "val", "test"])),
        ])
        .expect("queries");
        let emb = RecordBatch::try_from_iter(vec![
            ("node_id", u32a(&[0, 1, 2, 3, 4])),
            ("embedding", embedding_array(vec![1.0, 0.0, 0.0, 1.0, 0.8, 0.6, 0.6, 0.8, 0.0, 1.0], 2).expect("emb")),
        ])
        .expect("embeddings");
        let q: Vec<f32> = [0.6f32, 0.8, 0.0, 1.0, 1.0, 0.0].iter().copied().cycle().take(3 * qdim).collect();
        let qemb = RecordBatch::try_from_iter(vec![("query_id", u32a(&[0, 1, 2])), ("embedding", embedding_array(q, qdim).expect("qemb"))])
            .expect("qemb");
        [nodes, edges, queries, emb, qemb]
    }

    /// The toy KB (see [`toy_tables`]).
    pub(crate) fn toy_kb() -> Kb {
        let [n, e, q, emb, qemb] = toy_tables(&[0, 1, 2, 3, 4], 2);
        Kb::from_tables(&n, &e, &q, &emb, &qemb, MIN_NAME_CHARS).expect("toy kb")
    }

    #[test]
    fn the_kb_reads_its_tables_and_refuses_what_breaks_its_rules() {
        let kb = toy_kb();
        assert_eq!((kb.graph.num_nodes(), kb.dim), (5, 2));
        assert_eq!(kb.graph.types, vec!["brand", "product"]);
        assert_eq!(kb.query_text(1), "a mug by Zeta");
        assert_eq!(kb.query_emb(1), &[0.0, 1.0]);
        assert!((kb.dense(0, 3) - (0.6 * 0.6 + 0.8 * 0.8)).abs() < 1e-6);
        assert_eq!(kb.dense(99, 3), 0.0, "an unknown query scores 0");
        assert_eq!(kb.matcher.find("tents by Acme")[0].nodes, vec![0]);
        // Node ids must be 0..N once each: a user's data, so an input error naming the row.
        let [n, e, q, emb, qemb] = toy_tables(&[0, 1, 2, 3, 7], 2);
        let err = Kb::from_tables(&n, &e, &q, &emb, &qemb, MIN_NAME_CHARS).err().expect("ids 0..N");
        assert!(matches!(err, StageError::Input(_)) && err.to_string().contains("row 4"), "{err}");
        // Query and node embeddings of different widths.
        let [n, e, q, emb, qemb] = toy_tables(&[0, 1, 2, 3, 4], 3);
        let err = Kb::from_tables(&n, &e, &q, &emb, &qemb, MIN_NAME_CHARS).err().expect("widths");
        assert!(matches!(err, StageError::Input(_)) && err.to_string().contains("3 wide but node embeddings 2"), "{err}");
        // An edge to a node outside 0..N.
        let err = TypedGraph::new(&["a", "b"], &[(0, 5, "r")]).expect_err("edge");
        assert!(matches!(err, StageError::Input(_)) && err.to_string().contains("edges: row 0"), "{err}");
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
}
