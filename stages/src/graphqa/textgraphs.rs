//! `textgraphs`: the encoded textual graphs of graph QA. Every distinct text (node texts, edge texts,
//! questions) is embedded once, batched across all graphs, with all-MiniLM-L6-v2 (384 dims;
//! G-Retriever uses all-roberta-large-v1, 1024 dims) or the hashing encoder. Each graph keeps its
//! nodes and edges as references to those texts, and G-Retriever's textualisation `desc` (node CSV,
//! blank line, edge CSV) beside its question.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray, UInt32Array};
use serde::{Deserialize, Serialize};
use tgrag_datasets::graphqa::{TextGraph, desc};

use crate::graphqa::data::{QaGraph, read};
use crate::shared::encoders::{DeviceChoice, Encoder, TextEncoder, embedding_array};
use crate::stage::Width;
use crate::{Result, StageContext, StageInfo, StageSpec};

/// Options of the `textgraphs` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextgraphsConfig {
    #[serde(default)]
    pub encoder: Encoder,
    /// MiniLM model folder; default `$TGRAG_MODELS/all-MiniLM-L6-v2` or `weights/all-MiniLM-L6-v2`.
    #[serde(default)]
    pub model_dir: Option<String>,
    /// Width of the hashing encoder.
    pub hash_dim: Width,
    pub device: DeviceChoice,
    /// Another sentence encoder than MiniLM for node, edge and question texts
    /// (`--set textgraphs.lm=…`, with `encoder=minilm`): a model folder or a hub model id fetched
    /// with `tgrag fetch` (any BERT, RoBERTa or MPNet sentence-transformers checkpoint).
    #[serde(default)]
    pub lm: Option<String>,
}

impl Default for TextgraphsConfig {
    fn default() -> Self {
        TextgraphsConfig {
            encoder: Encoder::Minilm,
            model_dir: None,
            hash_dim: const { Width::new(256) },
            device: DeviceChoice::Cpu,
            lm: None,
        }
    }
}

pub struct TextgraphsStage;

static INFO: StageInfo = StageInfo {
    name: "textgraphs",
    module: module_path!(),
    version: 1,
    about: "graph QA: every distinct node, edge and question text embedded once (MiniLM or hashing); graphs as text references with G-Retriever's `desc`",
    deps: &["ingest"],
    needs: &[("ingest", "qa"), ("ingest", "graph_nodes"), ("ingest", "graph_edges")],
    excludes: &[],
    collects: &[],
    outputs: &["texts", "textgraph_nodes", "textgraph_edges", "textgraph_questions"],
    files: &[],
    shards: Some(crate::ShardPhase::Rows("embed texts")),
};

/// Distinct texts in first-seen order (per graph: question, node texts, edge texts) and, per graph,
/// the text ids of its question, nodes and edges.
pub struct TextIds {
    pub texts: Vec<String>,
    pub question: Vec<u32>,
    pub nodes: Vec<Vec<u32>>,
    pub edges: Vec<Vec<u32>>,
}

/// Step 1: the distinct texts of `graphs`.
pub fn text_ids(graphs: &[QaGraph]) -> TextIds {
    let mut id: HashMap<String, u32> = HashMap::new();
    let mut texts: Vec<String> = Vec::new();
    let mut intern = |t: &str| -> u32 {
        if let Some(&i) = id.get(t) {
            return i;
        }
        let i = texts.len() as u32;
        texts.push(t.to_string());
        id.insert(t.to_string(), i);
        i
    };
    let (mut question, mut nodes, mut edges) = (Vec::new(), Vec::new(), Vec::new());
    for g in graphs {
        question.push(intern(&g.question));
        nodes.push(g.nodes.iter().map(|t| intern(t)).collect());
        edges.push(g.edges.iter().map(|e| intern(&e.2)).collect());
    }
    TextIds { texts, question, nodes, edges }
}

/// Step 2: the four tables, given the texts' embeddings (row-major, `dim` wide).
pub fn tables(graphs: &[QaGraph], ids: &TextIds, embeddings: Vec<f32>, dim: usize) -> Result<[RecordBatch; 4]> {
    let u32a = |v: Vec<u32>| Arc::new(UInt32Array::from(v)) as ArrayRef;
    let texts = RecordBatch::try_from_iter(vec![
        ("text_id", u32a((0..ids.texts.len() as u32).collect())),
        ("text", Arc::new(StringArray::from_iter_values(ids.texts.iter())) as ArrayRef),
        ("embedding", embedding_array(embeddings, dim)?),
    ])?;
    let (mut ng, mut ni, mut nt) = (vec![], vec![], vec![]);
    let (mut eg, mut ei, mut es, mut ed, mut et) = (vec![], vec![], vec![], vec![], vec![]);
    for (k, g) in graphs.iter().enumerate() {
        for (v, &t) in ids.nodes[k].iter().enumerate() {
            ng.push(g.graph_id);
            ni.push(v as u32);
            nt.push(t);
        }
        for (j, (&t, e)) in ids.edges[k].iter().zip(&g.edges).enumerate() {
            eg.push(g.graph_id);
            ei.push(j as u32);
            es.push(e.0);
            ed.push(e.1);
            et.push(t);
        }
    }
    let nodes = RecordBatch::try_from_iter(vec![("graph_id", u32a(ng)), ("node_id", u32a(ni)), ("text_id", u32a(nt))])?;
    let edges = RecordBatch::try_from_iter(vec![
        ("graph_id", u32a(eg)),
        ("edge_index", u32a(ei)),
        ("src", u32a(es)),
        ("dst", u32a(ed)),
        ("text_id", u32a(et)),
    ])?;
    let descs: Vec<String> = graphs
        .iter()
        .map(|g| desc(&TextGraph { nodes: g.nodes.clone(), edges: g.edges.iter().map(|(s, d, r)| (*s, r.clone(), *d)).collect() }))
        .collect();
    let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let questions = RecordBatch::try_from_iter(vec![
        ("graph_id", u32a(graphs.iter().map(|g| g.graph_id).collect())),
        ("text_id", u32a(ids.question.clone())),
        ("task", strs(graphs.iter().map(|g| g.task.as_str()).collect())),
        ("split", strs(graphs.iter().map(|g| g.split.as_str()).collect())),
        ("answer", strs(graphs.iter().map(|g| g.answer.as_str()).collect())),
        ("desc", strs(descs.iter().map(String::as_str).collect())),
        ("hops", Arc::new(arrow::array::UInt8Array::from(graphs.iter().map(|g| g.hops).collect::<Vec<_>>())) as ArrayRef),
    ])?;
    Ok([texts, nodes, edges, questions])
}

impl StageSpec for TextgraphsStage {
    type Config = TextgraphsConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &TextgraphsConfig) -> std::result::Result<(), String> {
        if c.hash_dim.get() == 0 || c.hash_dim.get() > 1 << 16 {
            return Err("hash_dim must be within 1..=65536".into());
        }
        Ok(())
    }
    fn backbone(c: &TextgraphsConfig) -> Option<String> {
        c.lm.clone().filter(|_| c.encoder == Encoder::Minilm)
    }
    fn model(c: &TextgraphsConfig) -> Option<crate::ModelNeed> {
        (c.encoder == Encoder::Minilm && c.lm.is_none())
            .then(|| crate::ModelNeed { model_dir: c.model_dir.clone(), instead: "textgraphs.encoder=hash".into() })
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: TextgraphsConfig) -> Result<()> {
        let graphs = read(
            &ctx.input("ingest", "graph_nodes")?,
            &ctx.input("ingest", "graph_edges")?,
            &ctx.input("ingest", "qa")?,
            &ctx.dataset.name,
        )?;
        let ids = text_ids(&graphs);
        let progress = ctx.progress;
        let encoder = ctx.timed("load encoder", |_| match (&cfg.lm, cfg.encoder) {
            (Some(spec), Encoder::Minilm) => TextEncoder::backbone(spec, cfg.device, progress),
            _ => TextEncoder::load(
                cfg.encoder,
                cfg.model_dir.as_deref(),
                cfg.hash_dim.get(),
                cfg.device,
                progress,
                "--set textgraphs.encoder=hash",
            ),
        })?;
        let refs: Vec<&str> = ids.texts.iter().map(String::as_str).collect();
        // A shard run (`--shard I/N`) embeds its range of the texts into a partition and stops.
        let identity = encoder.identity();
        let Some(emb) =
            ctx.embed_sharded("embed texts", &refs, (&identity, encoder.dim()), |t| encoder.encode(t, "textgraphs: embed texts"))?
        else {
            return Ok(());
        };
        let [texts, nodes, edges, questions] = tables(&graphs, &ids, emb, encoder.dim())?;
        ctx.write("texts", &texts)?;
        ctx.write("textgraph_nodes", &nodes)?;
        ctx.write("textgraph_edges", &edges)?;
        ctx.write("textgraph_questions", &questions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphqa::data::tests::tables as qa_tables;
    use tgrag_schemas::columns;

    #[test]
    fn texts_are_embedded_once_and_graphs_refer_to_them() {
        let [n, e, q] = qa_tables(Some("webqsp"));
        let graphs = read(&n, &e, &q, "synthetic").expect("graphs");
        let ids = text_ids(&graphs);
        // Graph 0: question, 3 nodes, 2 edges; graph 1: question, nodes a, b, edge "left of".
        assert_eq!(ids.texts.len(), 1 + 3 + 2 + 1 + 2 + 1);
        assert_eq!(ids.nodes[0], vec![1, 2, 3]);
        let dim = 2;
        let emb: Vec<f32> = (0..ids.texts.len() * dim).map(|i| i as f32).collect();
        let [texts, nodes, edges, questions] = tables(&graphs, &ids, emb, dim).expect("tables");
        assert_eq!(texts.num_rows(), ids.texts.len());
        assert_eq!(columns::strs(&texts, "text").expect("text").value(1), "ren mo");
        assert_eq!(nodes.num_rows(), 5);
        assert_eq!(columns::u32s(&edges, "edge_index").expect("edge_index").values().to_vec(), vec![0, 1, 0]);
        let d = columns::strs(&questions, "desc").expect("desc");
        assert_eq!(d.value(1), "node_id,node_attr\n0,a\n1,b\n\nsrc,edge_attr,dst\n0,left of,1\n");
        for (spec, b) in [
            (&tgrag_schemas::tables::TEXTS, &texts),
            (&tgrag_schemas::tables::TEXTGRAPH_NODES, &nodes),
            (&tgrag_schemas::tables::TEXTGRAPH_EDGES, &edges),
            (&tgrag_schemas::tables::TEXTGRAPH_QUESTIONS, &questions),
        ] {
            tgrag_schemas::validate::check_written(spec, b).expect("declared");
        }
    }
}
