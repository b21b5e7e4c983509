//! The `textgraphs` stage's tables read back as per-question graphs with embeddings (what the
//! `subgraphs` and `gretriever` stages work on).

use std::collections::BTreeMap;

use arrow::array::{Array, RecordBatch};
use tgrag_schemas::columns;

use crate::graphqa::data::{Task, answers};
use crate::shared::encoders::embedding_table;
use crate::{Result, StageContext, StageError};

/// One question's graph: text ids of its question, nodes and edges.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedGraph {
    pub graph_id: u32,
    pub task: Task,
    pub split: String,
    pub answer: String,
    /// Relation hops of the question, where the dataset knows them (question type).
    pub hops: Option<u8>,
    pub question: u32,
    pub nodes: Vec<u32>,
    pub edges: Vec<(u32, u32)>,
    pub edge_text: Vec<u32>,
}

/// All graphs and the embedding of every text.
#[derive(Debug, Clone)]
pub struct EncodedGraphs {
    pub texts: Vec<String>,
    pub emb: Vec<f32>,
    pub dim: usize,
    pub graphs: Vec<EncodedGraph>,
}

impl EncodedGraphs {
    /// The embedding of text `t`.
    pub fn vec(&self, t: u32) -> &[f32] {
        &self.emb[t as usize * self.dim..(t as usize + 1) * self.dim]
    }

    /// Row-major embeddings of several texts.
    pub fn rows(&self, ts: impl IntoIterator<Item = u32>) -> Vec<f32> {
        ts.into_iter().flat_map(|t| self.vec(t).iter().copied()).collect()
    }

    /// The nodes of graph `g` whose text is one of its answers (lower-cased equality).
    pub fn answer_nodes(&self, g: &EncodedGraph) -> Vec<u32> {
        let a = answers(&g.answer);
        (0..g.nodes.len() as u32).filter(|&v| a.contains(&self.texts[g.nodes[v as usize] as usize].trim().to_lowercase())).collect()
    }

    /// The tables of the `textgraphs` stage.
    pub fn load(ctx: &StageContext<'_>) -> Result<EncodedGraphs> {
        EncodedGraphs::from_tables(
            &ctx.input("textgraphs", "texts")?,
            &ctx.input("textgraphs", "textgraph_nodes")?,
            &ctx.input("textgraphs", "textgraph_edges")?,
            &ctx.input("textgraphs", "textgraph_questions")?,
        )
    }

    pub fn from_tables(texts: &RecordBatch, nodes: &RecordBatch, edges: &RecordBatch, questions: &RecordBatch) -> Result<EncodedGraphs> {
        let (ids, emb, dim) = embedding_table(texts, "text_id")?;
        if ids.iter().enumerate().any(|(i, &t)| t as usize != i) {
            return Err(StageError::Input("texts: text ids must be 0..n in order".into()));
        }
        let tcol = columns::strs(texts, "text")?;
        let text: Vec<String> = (0..tcol.len()).map(|i| tcol.value(i).to_string()).collect();
        let (qg, qt, qk, qs, qa) = (
            columns::u32s(questions, "graph_id")?,
            columns::u32s(questions, "text_id")?,
            columns::strs(questions, "task")?,
            columns::strs(questions, "split")?,
            columns::strs(questions, "answer")?,
        );
        let hops = questions
            .column_by_name("hops")
            .and_then(|c| arrow::array::AsArray::as_primitive_opt::<arrow::datatypes::UInt8Type>(c).cloned());
        let mut graphs: BTreeMap<u32, EncodedGraph> = BTreeMap::new();
        for i in 0..questions.num_rows() {
            let task = Task::parse(qk.value(i))
                .ok_or_else(|| StageError::Input(format!("textgraph_questions: row {i}: unknown task `{}`", qk.value(i))))?;
            graphs.insert(
                qg.value(i),
                EncodedGraph {
                    graph_id: qg.value(i),
                    task,
                    split: qs.value(i).to_string(),
                    answer: qa.value(i).to_string(),
                    hops: hops.as_ref().filter(|c| c.is_valid(i)).map(|c| c.value(i)),
                    question: qt.value(i),
                    nodes: Vec::new(),
                    edges: Vec::new(),
                    edge_text: Vec::new(),
                },
            );
        }
        let (ng, ni, nt) = (columns::u32s(nodes, "graph_id")?, columns::u32s(nodes, "node_id")?, columns::u32s(nodes, "text_id")?);
        for r in 0..nodes.num_rows() {
            let g = graphs
                .get_mut(&ng.value(r))
                .ok_or_else(|| StageError::Input(format!("textgraph_nodes: row {r}: graph {} has no question", ng.value(r))))?;
            if ni.value(r) as usize != g.nodes.len() {
                return Err(StageError::Input(format!(
                    "textgraph_nodes: row {r}: node ids of graph {} must be 0..n in order",
                    ng.value(r)
                )));
            }
            g.nodes.push(nt.value(r));
        }
        let (eg, es, ed, et) = (
            columns::u32s(edges, "graph_id")?,
            columns::u32s(edges, "src")?,
            columns::u32s(edges, "dst")?,
            columns::u32s(edges, "text_id")?,
        );
        for r in 0..edges.num_rows() {
            let g = graphs
                .get_mut(&eg.value(r))
                .ok_or_else(|| StageError::Input(format!("textgraph_edges: row {r}: graph {} has no question", eg.value(r))))?;
            g.edges.push((es.value(r), ed.value(r)));
            g.edge_text.push(et.value(r));
        }
        let n_texts = text.len() as u32;
        for g in graphs.values() {
            if std::iter::once(&g.question).chain(&g.nodes).chain(&g.edge_text).any(|&t| t >= n_texts) {
                return Err(StageError::Input(format!("graph {}: a text id beyond the {n_texts} texts", g.graph_id)));
            }
        }
        Ok(EncodedGraphs { texts: text, emb, dim, graphs: graphs.into_values().collect() })
    }
}
