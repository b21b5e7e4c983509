//! What the graph-QA methods share once a question is answered, whichever stage answers it
//! (`gretriever`, `mixrag`): the classes of a task, a question as a training example over its
//! retrieved subgraph, G-Retriever's loose hit, the subgraphs read back from the `subgraphs` stage,
//! the `scores` rows of a task's predictions (per seed, then the mean and standard deviation over
//! seeds) and the `predictions` table.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray, UInt32Array, UInt64Array};
use tgrag_models::graphqa::{QaExample, Target};
use tgrag_schemas::columns;

use crate::graphqa::data::{Task, answers};
use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::{Subgraph, SubgraphMethod};
use crate::shared::scores::{ALL, Scores};
use crate::{Result, StageError};

/// The classes of a classification task: the distinct training answers (sorted).
pub fn classes(graphs: &[&EncodedGraph]) -> Vec<String> {
    let mut c: Vec<String> = graphs.iter().filter(|g| g.split == "train").map(|g| g.answer.clone()).collect();
    c.sort();
    c.dedup();
    c
}

/// One question as a training example over `sub` (an empty subgraph becomes one zero node).
pub fn example(enc: &EncodedGraphs, g: &EncodedGraph, sub: &Subgraph, class_of: &HashMap<&str, u32>) -> QaExample {
    let dim = enc.dim;
    let local: HashMap<u32, u32> = sub.nodes.iter().enumerate().map(|(i, &v)| (v, i as u32)).collect();
    let (x, n) = if sub.nodes.is_empty() {
        (vec![0.0; dim], 1)
    } else {
        (enc.rows(sub.nodes.iter().map(|&v| g.nodes[v as usize])), sub.nodes.len())
    };
    let mut edges = Vec::with_capacity(sub.edges.len());
    let mut etext = Vec::with_capacity(sub.edges.len());
    for &e in &sub.edges {
        let (s, d) = g.edges[e as usize];
        if let (Some(&a), Some(&b)) = (local.get(&s), local.get(&d)) {
            edges.push((a, b));
            etext.push(g.edge_text[e as usize]);
        }
    }
    let target = match g.task {
        Task::WebQsp => Target::Nodes(enc.answer_nodes(g).iter().filter_map(|v| local.get(v).copied()).collect()),
        _ => Target::Class(class_of.get(g.answer.as_str()).copied().unwrap_or(u32::MAX)),
    };
    QaExample { x, n, edges, edge_x: enc.rows(etext), question: enc.vec(g.question).to_vec(), target }
}

/// G-Retriever's normalisation for the loose hit: lower-cased, punctuation and articles removed.
pub fn normalise(s: &str) -> String {
    let lower: String = s.to_lowercase().chars().map(|c| if c.is_alphanumeric() || c.is_whitespace() { c } else { ' ' }).collect();
    lower.split_whitespace().filter(|w| !matches!(*w, "a" | "an" | "the")).collect::<Vec<_>>().join(" ")
}

/// Whether any answer (normalised) is a substring of the prediction (normalised).
pub fn loose_hit(prediction: &str, answer: &str) -> bool {
    let p = normalise(prediction);
    answers(answer).iter().map(|a| normalise(a)).any(|a| !a.is_empty() && p.contains(&a))
}

/// One prediction: the question, the method, the seed (none for untrained rules), what was
/// predicted and whether it was right (and loosely right).
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub graph: usize,
    pub method: String,
    pub seed: Option<u64>,
    pub text: String,
    pub correct: bool,
    pub loose: bool,
}

/// The subgraph of each question for a method, from the `subgraphs` stage's tables (the summary
/// lists every (question, method), empty subgraphs included).
pub fn read_subgraphs(nodes: &RecordBatch, edges: &RecordBatch, summary: &RecordBatch) -> Result<HashMap<(u32, SubgraphMethod), Subgraph>> {
    let method = |table: &str, col: &StringArray, r: usize| {
        SubgraphMethod::parse(col.value(r)).ok_or_else(|| {
            StageError::Input(format!(
                "{table} row {r}: column method: unknown subgraph method `{}` (known: pcst, attention, whole)",
                tgrag_schemas::quote(col.value(r))
            ))
        })
    };
    let mut out: HashMap<(u32, SubgraphMethod), Subgraph> = HashMap::new();
    let (sg, sm) = (columns::u32s(summary, "graph_id")?, columns::strs(summary, "method")?);
    for r in 0..summary.num_rows() {
        out.entry((sg.value(r), method("subgraph_summary", sm, r)?)).or_default();
    }
    let (ng, nm, nn) = (columns::u32s(nodes, "graph_id")?, columns::strs(nodes, "method")?, columns::u32s(nodes, "node_id")?);
    for r in 0..nodes.num_rows() {
        out.entry((ng.value(r), method("subgraph_nodes", nm, r)?)).or_default().nodes.push(nn.value(r));
    }
    let (eg, em, ee) = (columns::u32s(edges, "graph_id")?, columns::strs(edges, "method")?, columns::u32s(edges, "edge_index")?);
    for r in 0..edges.num_rows() {
        out.entry((eg.value(r), method("subgraph_edges", em, r)?)).or_default().edges.push(ee.value(r));
    }
    Ok(out)
}

/// The `scores` rows of a task's predictions: per method, split and seed, then the mean and
/// standard deviation over seeds.
pub fn task_scores(dataset: &str, task: Task, graphs: &[&EncodedGraph], preds: &[Prediction], scores: &mut Scores) {
    let metrics: &[&str] = if task == Task::WebQsp { &["hit1", "loose_hit"] } else { &["accuracy"] };
    // (method, split) → seed → (hits per metric, n)
    type BySeed = BTreeMap<Option<u64>, ([u64; 2], u64)>;
    let mut acc: BTreeMap<(&str, &str), BySeed> = BTreeMap::new();
    for p in preds {
        let split = graphs[p.graph].split.as_str();
        let e = acc.entry((p.method.as_str(), split)).or_default().entry(p.seed).or_default();
        e.0[0] += u64::from(p.correct);
        e.0[1] += u64::from(p.loose);
        e.1 += 1;
    }
    let _ = dataset;
    for ((method, split), by_seed) in &acc {
        for (k, metric) in metrics.iter().enumerate() {
            let vals: Vec<f64> = by_seed.values().map(|(h, n)| h[k] as f64 / (*n).max(1) as f64).collect();
            for (seed, (h, n)) in by_seed {
                scores.push(method, split, ALL, metric, h[k] as f64 / (*n).max(1) as f64, *n, *seed);
            }
            if by_seed.keys().any(Option::is_some) {
                let n = by_seed.values().next().map_or(0, |x| x.1);
                let mean = vals.iter().sum::<f64>() / vals.len() as f64;
                scores.push(method, split, ALL, metric, mean, n, None);
                // A standard deviation needs two seeds: one seed has none (not a zero).
                if vals.len() > 1 {
                    let sd = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (vals.len() - 1) as f64).sqrt();
                    scores.push(method, split, ALL, &format!("{metric}_std"), sd, n, None);
                }
            }
        }
    }
}

/// The `predictions` table of some questions' predictions (`graphs` indexes them).
pub fn predictions_batch(graphs: &[&EncodedGraph], preds: &[Prediction]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_from_iter(vec![
        ("graph_id", Arc::new(UInt32Array::from(preds.iter().map(|p| graphs[p.graph].graph_id).collect::<Vec<_>>())) as ArrayRef),
        ("method", Arc::new(StringArray::from(preds.iter().map(|p| p.method.as_str()).collect::<Vec<_>>())) as ArrayRef),
        ("seed", Arc::new(UInt64Array::from(preds.iter().map(|p| p.seed).collect::<Vec<_>>())) as ArrayRef),
        ("prediction", Arc::new(StringArray::from(preds.iter().map(|p| p.text.as_str()).collect::<Vec<_>>())) as ArrayRef),
        ("correct", Arc::new(BooleanArray::from(preds.iter().map(|p| p.correct).collect::<Vec<_>>())) as ArrayRef),
        ("loose_hit", Arc::new(BooleanArray::from(preds.iter().map(|p| p.loose).collect::<Vec<_>>())) as ArrayRef),
    ])?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An ExplaGraphs-like task whose label is carried by one relation of the graph ("antonym of"
    /// → counter, "synonym of" → support), with uninformative questions: the graph encoder must
    /// learn it, the question-only baseline and the majority class cannot.
    pub(crate) fn planted() -> EncodedGraphs {
        let mut rng = tgrag_datasets::rng::Rng::new(4);
        // Texts: 0 question, 1 "synonym of", 2 "antonym of", 3..13 concepts (random 4-d vectors).
        let mut texts = vec!["do they agree?".to_string(), "synonym of".into(), "antonym of".into()];
        texts.extend((0..10).map(|i| format!("concept {i}")));
        let dim = 4;
        let mut emb = vec![0.5, 0.5, 0.5, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        emb.extend((0..10 * dim).map(|_| rng.normal() as f32));
        let graphs = (0..300)
            .map(|i| {
                let counter = i % 3 == 0;
                let n = 3 + rng.below(3);
                let nodes: Vec<u32> = (0..n).map(|_| 3 + rng.below(10) as u32).collect();
                let edges: Vec<(u32, u32)> = (1..n as u32).map(|v| (v - 1, v)).collect();
                let mut edge_text = vec![1u32; edges.len()];
                if counter {
                    edge_text[rng.below(edges.len())] = 2;
                }
                let split = match i % 10 {
                    0..=5 => "train",
                    6 | 7 => "val",
                    _ => "test",
                };
                EncodedGraph {
                    graph_id: i as u32,
                    task: Task::ExplaGraphs,
                    split: split.into(),
                    answer: (if counter { "counter" } else { "support" }).into(),
                    hops: None,
                    question: 0,
                    nodes,
                    edges,
                    edge_text,
                }
            })
            .collect();
        EncodedGraphs { texts, emb, dim, graphs }
    }
}
