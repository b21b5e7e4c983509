//! The graph-QA tables as per-question graphs: `graph_nodes`, `graph_edges` and `qa` of the ingest
//! stage (one small textual graph per question), checked and grouped.

use std::collections::BTreeMap;

use arrow::array::{Array, RecordBatch};
use tgrag_schemas::columns;

use crate::{Result, StageError};

/// One question with its graph: node texts (node id = position), `(src, dst, relation)` edges in
/// table order.
#[derive(Debug, Clone, PartialEq)]
pub struct QaGraph {
    pub graph_id: u32,
    pub question: String,
    pub answer: String,
    pub split: String,
    /// The benchmark the question belongs to (`explagraphs`, `scenegraphs`, `webqsp`).
    pub task: String,
    /// Relation hops to the answers, where the dataset knows them.
    pub hops: Option<u8>,
    pub nodes: Vec<String>,
    pub edges: Vec<(u32, u32, String)>,
}

/// The tasks and their answer formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// A label (support / counter).
    ExplaGraphs,
    /// One of the answers seen in training.
    SceneGraphs,
    /// Entities of the graph (`|`-joined names in `answer`).
    WebQsp,
}

impl Task {
    pub fn parse(s: &str) -> Option<Task> {
        match s {
            "explagraphs" => Some(Task::ExplaGraphs),
            "scenegraphs" => Some(Task::SceneGraphs),
            "webqsp" => Some(Task::WebQsp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Task::ExplaGraphs => "explagraphs",
            Task::SceneGraphs => "scenegraphs",
            Task::WebQsp => "webqsp",
        }
    }
}

/// The task of a question: the `qa.task` column, else the dataset's name when it is a task, else
/// `scenegraphs` (answers are labels seen in training).
pub fn task_of(task: Option<&str>, dataset: &str) -> Result<Task> {
    match task {
        Some(t) => Task::parse(t).ok_or_else(|| StageError::Input(format!("qa: unknown task `{t}` (explagraphs, scenegraphs or webqsp)"))),
        None => Ok(Task::parse(dataset).unwrap_or(Task::SceneGraphs)),
    }
}

/// The dataset name `scores` use for a task: the dataset itself when it is the task, else
/// `<dataset>/<task>` (the built-in `synthetic` holds several tasks).
pub fn scored_dataset(dataset: &str, task: Task) -> String {
    if dataset == task.as_str() { dataset.to_string() } else { format!("{dataset}/{}", task.as_str()) }
}

/// Refuses a task whose questions leave a split empty that a trained stage needs (`train` to fit,
/// `val` to pick the epoch, `test` to report): it would pick epochs on nothing and report nothing.
/// The error names the dataset, the task and the split, with the counts of all three.
pub fn require_splits<'a>(stage: &str, dataset: &str, task: Task, splits: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut n = [0usize; 3];
    for s in splits {
        if let Some(i) = ["train", "val", "test"].iter().position(|&x| x == s) {
            n[i] += 1;
        }
    }
    match ["train", "val", "test"].iter().zip(n).find(|&(_, c)| c == 0) {
        Some((split, _)) => Err(StageError::Input(format!(
            "dataset `{dataset}`: the `{split}` split has no {} questions (train {}, val {}, test {}); stage `{stage}` fits on train, \
             picks its epoch on val and reports val and test (GraphQA folders: split/{{train,val,test}}_indices.txt or the `split` column of qa)",
            task.as_str(),
            n[0],
            n[1],
            n[2]
        ))),
        None => Ok(()),
    }
}

/// The answer strings of a question (`|`-separated, trimmed, lower-cased).
pub fn answers(answer: &str) -> Vec<String> {
    answer.split('|').map(|a| a.trim().to_lowercase()).filter(|a| !a.is_empty()).collect()
}

/// The graphs of the ingest tables, by graph id. Node ids must be `0..n` within each graph and
/// edges must join nodes of their graph (the ingest validation guarantees the latter).
pub fn read(nodes: &RecordBatch, edges: &RecordBatch, qa: &RecordBatch, dataset: &str) -> Result<Vec<QaGraph>> {
    let (ng, ni, nt) = (columns::u32s(nodes, "graph_id")?, columns::u32s(nodes, "node_id")?, columns::strs(nodes, "text")?);
    let (eg, es, ed, et) =
        (columns::u32s(edges, "graph_id")?, columns::u32s(edges, "src")?, columns::u32s(edges, "dst")?, columns::strs(edges, "text")?);
    let (qg, qq, qa_, qs) =
        (columns::u32s(qa, "graph_id")?, columns::strs(qa, "question")?, columns::strs(qa, "answer")?, columns::strs(qa, "split")?);
    let task_col = match qa.column_by_name("task") {
        Some(_) => Some(columns::strs(qa, "task")?),
        None => None,
    };
    let hops_col = match qa.column_by_name("hops") {
        Some(_) => Some(columns::u8s(qa, "hops")?),
        None => None,
    };
    let mut graphs: BTreeMap<u32, QaGraph> = BTreeMap::new();
    for i in 0..qa.num_rows() {
        let task = task_of(task_col.filter(|c| c.is_valid(i)).map(|c| c.value(i)), dataset)?;
        graphs.insert(
            qg.value(i),
            QaGraph {
                graph_id: qg.value(i),
                question: qq.value(i).to_string(),
                answer: qa_.value(i).to_string(),
                split: qs.value(i).to_string(),
                task: task.as_str().to_string(),
                hops: hops_col.filter(|c| c.is_valid(i)).map(|c| c.value(i)),
                nodes: Vec::new(),
                edges: Vec::new(),
            },
        );
    }
    let mut texts: BTreeMap<u32, Vec<(u32, usize)>> = BTreeMap::new();
    for r in 0..nodes.num_rows() {
        texts.entry(ng.value(r)).or_default().push((ni.value(r), r));
    }
    for (gid, mut rows) in texts {
        let Some(g) = graphs.get_mut(&gid) else { continue };
        rows.sort_unstable();
        for (k, &(id, r)) in rows.iter().enumerate() {
            if id as usize != k {
                return Err(StageError::Input(format!(
                    "graph_nodes: row {r}: graph {gid} has node {id} where node {k} was expected (node ids are 0..n within a graph)"
                )));
            }
            g.nodes.push(nt.value(r).to_string());
        }
    }
    for r in 0..edges.num_rows() {
        if let Some(g) = graphs.get_mut(&eg.value(r)) {
            g.edges.push((es.value(r), ed.value(r), et.value(r).to_string()));
        }
    }
    Ok(graphs.into_values().collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::{ArrayRef, StringArray, UInt32Array};
    use std::sync::Arc;

    pub(crate) fn tables(task: Option<&str>) -> [RecordBatch; 3] {
        let u = |v: &[u32]| Arc::new(UInt32Array::from(v.to_vec())) as ArrayRef;
        let s = |v: &[&str]| Arc::new(StringArray::from(v.to_vec())) as ArrayRef;
        let nodes = RecordBatch::try_from_iter(vec![
            ("graph_id", u(&[0, 0, 0, 1, 1])),
            ("node_id", u(&[1, 0, 2, 0, 1])),
            ("text", s(&["kor ven", "ren mo", "li tor", "a", "b"])),
        ])
        .expect("nodes");
        let edges = RecordBatch::try_from_iter(vec![
            ("graph_id", u(&[0, 0, 1])),
            ("src", u(&[0, 0, 0])),
            ("dst", u(&[1, 2, 1])),
            ("text", s(&["people.person.children", "film.film.genre", "left of"])),
        ])
        .expect("edges");
        let mut qa = vec![
            ("graph_id", u(&[0, 1])),
            ("question", s(&["who are the children of ren mo?", "what is left of b?"])),
            ("answer", s(&["Kor Ven|nobody", "a"])),
            ("split", s(&["train", "test"])),
        ];
        if let Some(t) = task {
            qa.push(("task", s(&[t, "scenegraphs"])));
        }
        [nodes, edges, RecordBatch::try_from_iter(qa).expect("qa")]
    }

    #[test]
    fn graphs_are_grouped_with_nodes_in_id_order_and_tasks_resolved() {
        let [n, e, q] = tables(Some("webqsp"));
        let g = read(&n, &e, &q, "synthetic").expect("graphs");
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].nodes, vec!["ren mo", "kor ven", "li tor"]);
        assert_eq!(g[0].edges[1], (0, 2, "film.film.genre".to_string()));
        assert_eq!((g[0].task.as_str(), g[1].task.as_str()), ("webqsp", "scenegraphs"));
        assert_eq!(answers(&g[0].answer), vec!["kor ven", "nobody"]);
        // Without a task column: the dataset's name when it is a task.
        let [n, e, q] = tables(None);
        assert_eq!(read(&n, &e, &q, "explagraphs").expect("graphs")[0].task, "explagraphs");
        assert_eq!(read(&n, &e, &q, "mine").expect("graphs")[0].task, "scenegraphs");
        assert_eq!(
            (scored_dataset("synthetic", Task::WebQsp), scored_dataset("webqsp", Task::WebQsp)),
            ("synthetic/webqsp".to_string(), "webqsp".to_string())
        );
        // Node ids with a gap are refused, naming the row.
        let u = |v: &[u32]| Arc::new(UInt32Array::from(v.to_vec())) as ArrayRef;
        let gap = RecordBatch::try_from_iter(vec![
            ("graph_id", u(&[0, 0])),
            ("node_id", u(&[0, 2])),
            ("text", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef),
        ])
        .expect("nodes");
        let err = read(&gap, &e, &q, "mine").expect_err("gap");
        assert!(err.to_string().contains("row 1: graph 0 has node 2 where node 1"), "{err}");
    }
}
