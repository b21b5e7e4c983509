//! The built-in dataset `synthetic`: a seeded generator of a STaRK-like text-rich knowledge base in
//! three domains (products, papers, biomedicine) with templated 1–3 hop queries, a small scene-graph QA
//! set and a citation-like text-attributed graph. `Size` goes from `tiny` (tests, ~600 nodes) to `prime`
//! (STaRK-Prime scale: ~130k nodes, ~8M edges, 11k queries).

pub mod graphqa;
pub mod kb;
pub mod tag;
pub mod vocab;
pub mod webqsp;

use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, UInt8Array, UInt32Array};
use serde::{Deserialize, Serialize};
use tgrag_schemas::tables;

use crate::{DatasetError, DatasetTables, LoadedTable, Result, generated_source};

/// Version of the generator; part of the `ingest` stage's cache key.
pub const GENERATOR_VERSION: u32 = 2;

/// How big a synthetic dataset is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// ~600 nodes, 80 queries: unit and integration tests.
    Tiny,
    /// ~6.5k nodes, ~90k edges, 800 queries: the default of `make run`.
    Small,
    /// ~32k nodes, ~1.5M edges, 3k queries.
    Medium,
    /// STaRK-Prime scale: ~130k nodes, ~8M edges, 11k queries.
    Prime,
}

impl Size {
    /// (scale of node counts relative to Prime, queries, graph-QA graphs, text-attributed nodes)
    pub fn params(self) -> (f64, usize, usize, usize) {
        match self {
            Size::Tiny => (0.004, 80, 40, 300),
            Size::Small => (0.05, 800, 400, 3_000),
            Size::Medium => (0.25, 3_000, 2_000, 20_000),
            Size::Prime => (1.0, 11_000, 10_000, 100_000),
        }
    }

    /// The WebQSP-like set: (questions, entities per question graph).
    pub fn webqsp(self) -> (usize, usize) {
        match self {
            Size::Tiny => (12, 120),
            Size::Small => (40, 1_000),
            Size::Medium => (200, 1_000),
            Size::Prime => (1_000, 1_000),
        }
    }
}

impl FromStr for Size {
    type Err = DatasetError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tiny" => Ok(Size::Tiny),
            "small" => Ok(Size::Small),
            "medium" => Ok(Size::Medium),
            "prime" => Ok(Size::Prime),
            _ => Err(DatasetError::Config(format!("size `{s}` (expected tiny, small, medium or prime)"))),
        }
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Size::Tiny => "tiny",
            Size::Small => "small",
            Size::Medium => "medium",
            Size::Prime => "prime",
        };
        f.write_str(s)
    }
}

/// Options of the synthetic generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticConfig {
    pub size: Size,
    pub seed: u64,
}

fn arr<A: arrow::array::Array + 'static>(a: A) -> ArrayRef {
    Arc::new(a)
}

/// Query splits: 60% train, 20% val, 20% test, by a seeded shuffle.
fn splits(n: usize, seed: u64) -> Vec<&'static str> {
    crate::rng::split_60_20_20(n, seed, "splits")
}

/// The tables generated so far, each with the source named after the generator's settings.
struct Output {
    label: String,
    tables: DatasetTables,
}

impl Output {
    /// Checks `cols` against `spec` and appends the table.
    fn push(&mut self, spec: &'static tgrag_schemas::TableSpec, cols: Vec<ArrayRef>) -> Result<()> {
        let batch = spec.batch(cols)?;
        self.tables.tables.push(LoadedTable { spec, source: generated_source(&self.label, spec.name), batch });
        Ok(())
    }
}

/// Generates every table of the synthetic dataset.
pub fn generate(cfg: &SyntheticConfig) -> Result<DatasetTables> {
    let (scale, n_queries, n_graphs, n_tag) = cfg.size.params();
    let label = format!("synthetic[size={},seed={}]", cfg.size, cfg.seed);
    let mut out = Output { label, tables: DatasetTables::default() };
    kb_tables(&mut out, &kb::generate(scale, n_queries, cfg.seed), cfg.seed)?;
    graph_qa_tables(&mut out, cfg, n_graphs)?;
    tag_tables(&mut out, &tag::generate(n_tag, cfg.seed))?;
    Ok(out.tables)
}

/// The knowledge base: `nodes`, `edges`, `queries` and `answers`.
fn kb_tables(out: &mut Output, g: &kb::Kb, seed: u64) -> Result<()> {
    let n = g.names.len() as u32;
    let types: Vec<&str> = (0..n).map(|id| kb::TYPES[g.type_of(id)]).collect();
    out.push(
        &tables::NODES,
        vec![
            arr(UInt32Array::from_iter_values(0..n)),
            arr(StringArray::from(types)),
            arr(StringArray::from_iter_values(g.names.iter())),
            arr(StringArray::from_iter_values(g.docs.iter())),
        ],
    )?;
    let rels = kb::relation_names();
    out.push(
        &tables::EDGES,
        vec![
            arr(UInt32Array::from_iter_values(g.edges.iter().map(|e| e.0))),
            arr(UInt32Array::from_iter_values(g.edges.iter().map(|e| e.1))),
            arr(StringArray::from_iter_values(g.edges.iter().map(|e| rels[e.2 as usize]))),
        ],
    )?;
    let nq = g.queries.len();
    out.push(
        &tables::QUERIES,
        vec![
            arr(UInt32Array::from_iter_values(0..nq as u32)),
            arr(StringArray::from_iter_values(g.queries.iter().map(|q| q.text.as_str()))),
            arr(StringArray::from(splits(nq, seed))),
            arr(StringArray::from_iter(g.queries.iter().map(|q| Some(q.pattern)))),
            arr(UInt8Array::from_iter(g.queries.iter().map(|q| Some(q.hops)))),
        ],
    )?;
    let pairs: Vec<(u32, u32)> = g.queries.iter().enumerate().flat_map(|(i, q)| q.answers.iter().map(move |&a| (i as u32, a))).collect();
    out.push(
        &tables::ANSWERS,
        vec![arr(UInt32Array::from_iter_values(pairs.iter().map(|p| p.0))), arr(UInt32Array::from_iter_values(pairs.iter().map(|p| p.1)))],
    )
}

/// The columns of `graph_nodes` and `graph_edges`, filled graph by graph.
#[derive(Default)]
struct GraphColumns<'a> {
    node_graph: Vec<u32>,
    node_index: Vec<u32>,
    node_text: Vec<&'a str>,
    edge_graph: Vec<u32>,
    edge_src: Vec<u32>,
    edge_dst: Vec<u32>,
    edge_relation: Vec<&'static str>,
}

impl<'a> GraphColumns<'a> {
    /// Appends the nodes, then the edges, of graph `gid`.
    fn add(&mut self, gid: u32, nodes: &'a [String], edges: &[(u32, u32, &'static str)]) {
        for (i, t) in nodes.iter().enumerate() {
            self.node_graph.push(gid);
            self.node_index.push(i as u32);
            self.node_text.push(t.as_str());
        }
        for &(s, d, r) in edges {
            self.edge_graph.push(gid);
            self.edge_src.push(s);
            self.edge_dst.push(d);
            self.edge_relation.push(r);
        }
    }
}

/// Graph QA: the scene-graph set (task `scenegraphs`), then the WebQSP-like set (`webqsp`), graph
/// ids continuing; `graph_nodes`, `graph_edges` and `qa`.
fn graph_qa_tables(out: &mut Output, cfg: &SyntheticConfig, n_graphs: usize) -> Result<()> {
    let graphs = graphqa::generate(n_graphs, cfg.seed);
    let (n_web, web_nodes) = cfg.size.webqsp();
    let web = webqsp::generate(n_web, web_nodes, cfg.seed);
    let mut cols = GraphColumns::default();
    for (gid, sg) in graphs.iter().enumerate() {
        cols.add(gid as u32, &sg.nodes, &sg.edges);
    }
    for (k, wg) in web.iter().enumerate() {
        cols.add((graphs.len() + k) as u32, &wg.nodes, &wg.edges);
    }
    out.push(
        &tables::GRAPH_NODES,
        vec![arr(UInt32Array::from(cols.node_graph)), arr(UInt32Array::from(cols.node_index)), arr(StringArray::from(cols.node_text))],
    )?;
    out.push(
        &tables::GRAPH_EDGES,
        vec![
            arr(UInt32Array::from(cols.edge_graph)),
            arr(UInt32Array::from(cols.edge_src)),
            arr(UInt32Array::from(cols.edge_dst)),
            arr(StringArray::from(cols.edge_relation)),
        ],
    )?;
    let web_labels: Vec<String> = web.iter().map(|g| g.label()).collect();
    let mut qa_split = splits(graphs.len(), cfg.seed ^ 0x9a);
    qa_split.extend(splits(web.len(), cfg.seed ^ 0x9b));
    out.push(
        &tables::QA,
        vec![
            arr(UInt32Array::from_iter_values(0..(graphs.len() + web.len()) as u32)),
            arr(StringArray::from_iter_values(graphs.iter().map(|g| g.question.as_str()).chain(web.iter().map(|g| g.question.as_str())))),
            arr(StringArray::from_iter_values(graphs.iter().map(|g| g.answer.as_str()).chain(web_labels.iter().map(String::as_str)))),
            arr(StringArray::from(qa_split)),
            arr(StringArray::from_iter_values(
                std::iter::repeat_n("scenegraphs", graphs.len()).chain(std::iter::repeat_n("webqsp", web.len())),
            )),
            arr(arrow::array::UInt8Array::from_iter(std::iter::repeat_n(None, graphs.len()).chain(web.iter().map(|g| Some(g.hops))))),
        ],
    )
}

/// The citation-like text-attributed graph: `tag_nodes` and `tag_edges`.
fn tag_tables(out: &mut Output, t: &tag::Tag) -> Result<()> {
    out.push(
        &tables::TAG_NODES,
        vec![
            arr(UInt32Array::from_iter_values(0..t.nodes.len() as u32)),
            arr(StringArray::from_iter_values(t.nodes.iter().map(|n| n.text.as_str()))),
            arr(StringArray::from_iter(t.nodes.iter().map(|_| None::<&str>))),
            arr(StringArray::from_iter(t.nodes.iter().map(|n| Some(n.label)))),
            arr(Int64Array::from_iter(t.nodes.iter().map(|n| Some(n.time)))),
            arr(StringArray::from_iter(t.nodes.iter().map(|n| Some(if n.partial { "partial" } else { "observed" })))),
        ],
    )?;
    out.push(
        &tables::TAG_EDGES,
        vec![
            arr(UInt32Array::from_iter_values(t.edges.iter().map(|e| e.0))),
            arr(UInt32Array::from_iter_values(t.edges.iter().map(|e| e.1))),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn tiny_dataset_validates_and_has_every_family() {
        let t = generate(&SyntheticConfig { size: Size::Tiny, seed: 1 }).expect("generate");
        t.validate().expect("valid");
        for name in ["nodes", "edges", "queries", "answers", "graph_nodes", "graph_edges", "qa", "tag_nodes", "tag_edges"] {
            assert!(t.get(name).is_some_and(|x| x.batch.num_rows() > 0), "{name}");
        }
        let q = t.get("queries").expect("queries");
        assert_eq!(q.batch.num_rows(), 80);
    }

    #[test]
    fn splits_are_sixty_twenty_twenty() {
        let s = splits(100, 3);
        assert_eq!(s.iter().filter(|x| **x == "train").count(), 60);
        assert_eq!(s.iter().filter(|x| **x == "val").count(), 20);
        assert_eq!(s.iter().filter(|x| **x == "test").count(), 20);
    }
}
