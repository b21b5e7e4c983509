//! WebQSP (Yih et al. 2016).
//!
//! * Questions, in either format: ToG's (`QuestionId, RawQuestion, answer: [name], topic_entity:
//!   {mid: name}`) or the original annotated one (`QuestionId, RawQuestion, ProcessedQuestion,
//!   Parses: [{TopicEntityMid, TopicEntityName, InferentialChain, Answers: [{AnswerType,
//!   AnswerArgument, EntityName}]}]`, a JSON list or `{"Questions": [...]}`). The format is told per
//!   item, by its fields.
//! * Per-question Freebase subgraphs in RoG's Parquet layout (`rmanluo/RoG-webqsp`: `id, question,
//!   answer: list<str>, graph: list<list<str>>` of `[head, relation, tail]`), which G-Retriever
//!   textualises: heads and tails lower-cased, nodes in first-seen order, the answer `|`-joined and
//!   lower-cased.

use std::collections::HashMap;
use std::path::Path;

use arrow::array::{Array, AsArray, ListArray};
use serde_json::Value;

use super::{GraphQaItem, TextGraph};
use crate::error::{DatasetError, Result};

/// One answer: a Freebase mid (original format, entity answers) and a name or literal value.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub mid: Option<String>,
    pub name: String,
}

/// One WebQSP question.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub id: String,
    pub text: String,
    /// Distinct answers (by name) in file order, over all parses.
    pub answers: Vec<Answer>,
    /// `(mid, name)` of the topic entities.
    pub topic_entities: Vec<(String, String)>,
    /// Gold relation paths (`InferentialChain`), one per parse that has one; empty in ToG's format.
    pub chains: Vec<Vec<String>>,
}

fn field<'a>(v: &'a Value, key: &str, path: &Path, at: &str) -> Result<&'a Value> {
    v.get(key).ok_or_else(|| DatasetError::malformed(path, format!("{at}, field {key}"), "missing"))
}

fn string(v: &Value, key: &str, path: &Path, at: &str) -> Result<String> {
    field(v, key, path, at)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| DatasetError::malformed(path, format!("{at}, field {key}"), if v[key].is_null() { NULL } else { "not a string" }))
}

fn push_answer(out: &mut Vec<Answer>, a: Answer) {
    if !out.iter().any(|x| x.name == a.name) {
        out.push(a);
    }
}

fn topic_map(v: Option<&Value>, path: &Path, at: &str) -> Result<Vec<(String, String)>> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| DatasetError::malformed(path, format!("{at}, field topic_entity.{k}"), "not a string"))
            })
            .collect(),
        Some(_) => Err(DatasetError::malformed(path, format!("{at}, field topic_entity"), "not an object")),
    }
}

fn parse_item(v: &Value, path: &Path, i: usize) -> Result<Question> {
    let at = format!("item {i}");
    let id = string(v, "QuestionId", path, &at)?;
    let at = format!("item {i} ({id})");
    let text = string(v, "RawQuestion", path, &at)?;
    let mut q =
        Question { id, text, answers: Vec::new(), topic_entities: topic_map(v.get("topic_entity"), path, &at)?, chains: Vec::new() };
    if let Some(parses) = v.get("Parses") {
        let parses = parses.as_array().ok_or_else(|| DatasetError::malformed(path, format!("{at}, field Parses"), "not a list"))?;
        for (p_i, p) in parses.iter().enumerate() {
            let pat = format!("{at}, parse {p_i}");
            if let (Some(mid), Some(name)) =
                (p.get("TopicEntityMid").and_then(Value::as_str), p.get("TopicEntityName").and_then(Value::as_str))
                && !q.topic_entities.iter().any(|(m, _)| m == mid)
            {
                q.topic_entities.push((mid.to_string(), name.to_string()));
            }
            match p.get("InferentialChain") {
                Some(Value::Array(c)) => q.chains.push(
                    c.iter()
                        .map(|r| {
                            r.as_str().map(str::to_string).ok_or_else(|| {
                                DatasetError::malformed(path, format!("{pat}, field InferentialChain"), "not a list of strings")
                            })
                        })
                        .collect::<Result<_>>()?,
                ),
                None | Some(Value::Null) => {}
                Some(_) => return Err(DatasetError::malformed(path, format!("{pat}, field InferentialChain"), "not a list")),
            }
            let answers = field(p, "Answers", path, &pat)?
                .as_array()
                .ok_or_else(|| DatasetError::malformed(path, format!("{pat}, field Answers"), "not a list"))?;
            for (a_i, a) in answers.iter().enumerate() {
                let aat = format!("{pat}, answer {a_i}");
                let arg = string(a, "AnswerArgument", path, &aat)?;
                let entity = a.get("AnswerType").and_then(Value::as_str) == Some("Entity");
                let name = a.get("EntityName").and_then(Value::as_str).map(str::to_string);
                let ans =
                    if entity { Answer { mid: Some(arg.clone()), name: name.unwrap_or(arg) } } else { Answer { mid: None, name: arg } };
                push_answer(&mut q.answers, ans);
            }
        }
    } else {
        let answers = field(v, "answer", path, &at)?
            .as_array()
            .ok_or_else(|| DatasetError::malformed(path, format!("{at}, field answer"), "not a list"))?;
        // ToG's file has `null` for 53 answers whose value had no name: they carry nothing to match.
        for a in answers.iter().filter(|a| !a.is_null()) {
            let name = a.as_str().ok_or_else(|| DatasetError::malformed(path, format!("{at}, field answer"), "not a list of strings"))?;
            push_answer(&mut q.answers, Answer { mid: None, name: name.to_string() });
        }
    }
    Ok(q)
}

/// Questions from a WebQSP JSON file of either format.
pub fn load_questions(path: &Path) -> Result<Vec<Question>> {
    let text = crate::raw::read_utf8(path)?;
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        DatasetError::malformed(path, format!("line {}, column {}", e.line(), e.column()), crate::raw::quote(&e.to_string()))
    })?;
    let items = match &v {
        Value::Array(a) => a,
        Value::Object(m) => match m.get("Questions") {
            Some(Value::Array(a)) => a,
            _ => return Err(DatasetError::malformed(path, "top level", "an object without a `Questions` list")),
        },
        _ => return Err(DatasetError::malformed(path, "top level", "neither a list of questions nor {\"Questions\": [...]}")),
    };
    items.iter().enumerate().map(|(i, it)| parse_item(it, path, i)).collect()
}

/// The strings of `a`; a null is an error at `at(i)` (RoG's nulls are missing data, not empty text).
fn str_list(a: &dyn Array, path: &Path, at: &dyn Fn(usize) -> String) -> Result<Vec<String>> {
    let s = arrow::compute::cast(a, &arrow::datatypes::DataType::Utf8)
        .map_err(|e| DatasetError::malformed(path, at(0), format!("not strings: {e}")))?;
    let s = s.as_string::<i32>();
    (0..s.len()).map(|i| if s.is_null(i) { Err(DatasetError::malformed(path, at(i), NULL)) } else { Ok(s.value(i).to_string()) }).collect()
}

const NULL: &str = "null where a string is expected (missing data)";

fn list_col<'a>(b: &'a arrow::record_batch::RecordBatch, name: &str, path: &Path) -> Result<&'a ListArray> {
    b.column_by_name(name)
        .ok_or_else(|| DatasetError::malformed(path, format!("column {name}"), "missing"))?
        .as_list_opt::<i32>()
        .ok_or_else(|| DatasetError::malformed(path, format!("column {name}"), "not a list column"))
}

/// One RoG-layout Parquet file (one split) as G-Retriever's WebQSP items.
pub fn load_rog_parquet(path: &Path, split: &'static str) -> Result<Vec<GraphQaItem>> {
    let b = tgrag_schemas::io::read_parquet(path)?;
    let q = b.column_by_name("question").ok_or_else(|| DatasetError::malformed(path, "column question", "missing"))?;
    let questions = str_list(q.as_ref(), path, &|r| format!("row {r}, column question"))?;
    let (answers, graphs) = (list_col(&b, "answer", path)?, list_col(&b, "graph", path)?);
    let mut items = Vec::with_capacity(b.num_rows());
    for (r, question) in questions.iter().enumerate() {
        let at = format!("row {r}");
        for (col, list) in [("answer", answers), ("graph", graphs)] {
            if list.is_null(r) {
                return Err(DatasetError::malformed(path, format!("{at}, column {col}"), "null where a list is expected (missing data)"));
            }
        }
        let ans = str_list(answers.value(r).as_ref(), path, &|i| format!("{at}, column answer, item {i}"))?;
        let triples = graphs.value(r);
        let triples = triples
            .as_list_opt::<i32>()
            .ok_or_else(|| DatasetError::malformed(path, format!("{at}, column graph"), "not a list of [head, relation, tail] lists"))?;
        let mut g = TextGraph::default();
        let mut index = HashMap::new();
        for t in 0..triples.len() {
            if triples.is_null(t) {
                return Err(DatasetError::malformed(path, format!("{at}, column graph, triple {t}"), "null where a triple is expected"));
            }
            let tri = str_list(triples.value(t).as_ref(), path, &|k| format!("{at}, column graph, triple {t}, item {k}"))?;
            let [h, rel, tl] = &tri[..] else {
                return Err(DatasetError::malformed(
                    path,
                    format!("{at}, column graph, triple {t}"),
                    format!("{} items, not 3", tri.len()),
                ));
            };
            let s = g.intern(&mut index, &h.to_lowercase());
            let d = g.intern(&mut index, &tl.to_lowercase());
            g.edges.push((s, rel.clone(), d));
        }
        items.push(GraphQaItem {
            question: format!("Question: {question}\nAnswer: "),
            answer: ans.join("|").to_lowercase(),
            split,
            task: "webqsp",
            graph: g,
            source: path.to_path_buf(),
            at: format!("{at}, column graph"),
        });
    }
    Ok(items)
}

/// Every RoG Parquet file under `dir` (or `dir/data`): `train-*` → train, `validation-*` → val,
/// `test-*` → test, files in name order. Empty when there is none.
pub fn load_rog_dir(dir: &Path) -> Result<Vec<GraphQaItem>> {
    let mut files = Vec::new();
    for d in [dir.to_path_buf(), dir.join("data")] {
        if let Ok(rd) = std::fs::read_dir(&d) {
            files.extend(rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "parquet")));
        }
    }
    files.sort();
    let mut items = Vec::new();
    for f in files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let split = if name.starts_with("train") {
            "train"
        } else if name.starts_with("validation") || name.starts_with("val") {
            "val"
        } else if name.starts_with("test") {
            "test"
        } else {
            return Err(DatasetError::malformed(&f, "file name", "a RoG file name starts with train, validation or test"));
        };
        items.extend(load_rog_parquet(&f, split)?);
    }
    Ok(items)
}
