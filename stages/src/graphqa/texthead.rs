//! The text answer head (`gretriever-minilm`): where G-Retriever's LLM reads the question and the
//! retrieved subgraph as text, a MiniLM cross-encoder reads them: the question, then the subgraph's
//! triples `(head; relation; tail)` in edge order (and the texts of isolated nodes), truncated to the
//! tokenizer's 128 tokens. The lower `6 − K` layers stay frozen (their token states are computed
//! once for every question); the top `K` layers and a linear head over the training answers are
//! fine-tuned ([`tgrag_models::minilm::tune`]: Adam, learning rate decaying linearly to 0, the epoch
//! with the best validation accuracy kept).

use tgrag_models::minilm::tune::{TuneConfig, TuneEpoch, train_top};
use tgrag_models::minilm::{EncodeOptions, Engine, MiniLm};

use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::Subgraph;
use crate::shared::context::Progress;
use crate::{Result, StageError};

/// The text the head reads for a question and its subgraph.
pub fn text(enc: &EncodedGraphs, g: &EncodedGraph, sub: &Subgraph) -> String {
    let t = |id: u32| enc.texts[id as usize].as_str();
    let mut s = t(g.question).to_string();
    let mut touched = vec![false; g.nodes.len()];
    for &e in &sub.edges {
        let (a, b) = g.edges[e as usize];
        touched[a as usize] = true;
        touched[b as usize] = true;
        s.push_str(&format!(" ({}; {}; {})", t(g.nodes[a as usize]), t(g.edge_text[e as usize]), t(g.nodes[b as usize])));
    }
    for &v in &sub.nodes {
        if !touched[v as usize] {
            s.push_str(&format!(" ({})", t(g.nodes[v as usize])));
        }
    }
    s
}

/// Frozen token states of `texts` after the first `6 − layers` MiniLM layers.
pub fn states(bert: &MiniLm, layers: usize, texts: &[String], progress: Progress) -> Result<Vec<Vec<f32>>> {
    let Engine::Burn(b) = &bert.engine else { return Err(StageError::Internal("the text head needs MiniLM's burn engine".into())) };
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| bert.token_ids(t)).collect::<std::result::Result<_, _>>()?;
    let depth = b.config().num_hidden_layers;
    if layers == 0 || layers > depth {
        return Err(StageError::Config { stage: "gretriever".into(), message: format!("text_layers must be within 1..={depth}") });
    }
    let pb = progress.bar(texts.len() as u64, "gretriever: frozen MiniLM layers");
    let st = b.hidden_states(&ids, depth - layers, EncodeOptions::default(), &|n| pb.inc(n as u64))?;
    pb.finish_and_clear();
    Ok(st)
}

/// Trains the head on `train` (states, class) with `val` picking the epoch, and predicts `eval`.
pub fn train_and_predict(
    bert: &MiniLm,
    classes: usize,
    train: (&[Vec<f32>], &[u32]),
    val: (&[Vec<f32>], &[u32]),
    eval: &[Vec<f32>],
    cfg: &TuneConfig,
    dev: &burn::tensor::Device,
) -> Result<(Vec<u32>, Vec<TuneEpoch>, u32)> {
    let Engine::Burn(b) = &bert.engine else { return Err(StageError::Internal("the text head needs MiniLM's burn engine".into())) };
    let (model, shape, curve, best) = train_top(b, classes, train, val, cfg, dev, &|_| {})?;
    let pred = model.predict(&shape, eval, 64, dev)?;
    Ok((pred, curve, best))
}
