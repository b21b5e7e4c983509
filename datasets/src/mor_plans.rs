//! MoR's planning graphs (Yoega/MoR): its planner fine-tuning set `llama_ft.jsonl`
//! (`{"conversations": [{role: user, content: QUERY}, {role: assistant, content: PLAN}]}` where PLAN is
//! a Python-literal dict) and its cached plans `plans_{train,val}.jsonl` (`{q_id, query, answer_ids,
//! plan: {Metapath, Restriction}}`).
//!
//! Plan grammar: Amazon/MAG `'Metapath': 'a -> b <- c'` (one path; `->` follows an edge forward, `<-`
//! backward), Prime `'Metapath': [[type, relation, type, …], …]` (one list per path, types at even
//! positions); `'Restriction': {type: [text, …]}`. An empty Metapath means the planner gave no
//! valid plan. [`parse_plan`] returns a [`Plan`] or the reason it rejects one; the file readers keep
//! every rejected line with its number and reason.

use std::path::Path;

use serde_json::Value;

use crate::error::{DatasetError, Result};

/// Direction of a hop in MoR's arrow syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Forward,
    Backward,
}

/// One typed path: node types, and between consecutive types a relation (Prime) and a direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Metapath {
    pub types: Vec<String>,
    /// `types.len() - 1` hops: `(relation, direction)`; relation is `None` in the arrow syntax.
    pub hops: Vec<(Option<String>, Dir)>,
}

/// A parsed plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub metapaths: Vec<Metapath>,
    /// Restrictions per node type (sorted by type).
    pub restrictions: Vec<(String, Vec<String>)>,
}

impl Metapath {
    /// MoR's string syntax (`a -> b <- c`), or the Prime list syntax when hops carry relations.
    pub fn to_mor_string(&self) -> String {
        let mut s = self.types.first().cloned().unwrap_or_default();
        for (i, (rel, dir)) in self.hops.iter().enumerate() {
            match rel {
                Some(r) => s.push_str(&format!(" -{r}-> ")),
                None => s.push_str(if *dir == Dir::Forward { " -> " } else { " <- " }),
            }
            s.push_str(&self.types[i + 1]);
        }
        s
    }
}

/// Parses the arrow syntax `a -> b <- c`.
pub fn parse_arrow_path(s: &str) -> std::result::Result<Metapath, String> {
    let mut types = Vec::new();
    let mut hops = Vec::new();
    let mut rest = s.trim();
    loop {
        let next =
            [("->", Dir::Forward), ("<-", Dir::Backward)].iter().filter_map(|&(a, d)| rest.find(a).map(|i| (i, d))).min_by_key(|x| x.0);
        let (ty, after) = match next {
            Some((i, d)) => {
                hops.push((None, d));
                (&rest[..i], Some(&rest[i + 2..]))
            }
            None => (rest, None),
        };
        let ty = ty.trim();
        if ty.is_empty() {
            return Err(format!("empty node type in `{}`", crate::raw::quote(s)));
        }
        if !ty.chars().all(|c| c.is_alphanumeric() || " _/".contains(c)) {
            return Err(format!("`{}` in `{}` is not a node type", crate::raw::quote(ty), crate::raw::quote(s)));
        }
        types.push(ty.to_string());
        match after {
            Some(a) => rest = a,
            None => break,
        }
    }
    Ok(Metapath { types, hops })
}

fn str_list(v: &Value, what: &str) -> std::result::Result<Vec<String>, String> {
    let a = v.as_array().ok_or_else(|| format!("{what} is not a list"))?;
    a.iter().map(|x| x.as_str().map(str::to_string).ok_or_else(|| format!("{what} holds a non-string {x}"))).collect()
}

/// A plan from its dict (as JSON). `known_types`, when given, are the KB's node types: a path
/// through any other type is rejected.
pub fn parse_plan(v: &Value, known_types: Option<&[&str]>) -> std::result::Result<Plan, String> {
    let obj = v.as_object().ok_or("the plan is not a dict")?;
    let m = obj.get("Metapath").ok_or("no `Metapath` key")?;
    let metapaths = match m {
        Value::String(s) if s.trim().is_empty() => return Err("empty Metapath (the planner gave no valid plan)".into()),
        // A few LLM plans list several paths in one string, separated by commas.
        Value::String(s) => s.split(',').map(parse_arrow_path).collect::<std::result::Result<Vec<Metapath>, String>>()?,
        Value::Array(paths) if paths.is_empty() => return Err("empty Metapath list".into()),
        Value::Array(paths) => paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let items = str_list(p, &format!("path {i}"))?;
                if items.len() % 2 == 0 {
                    return Err(format!("path {i} has {} items; a [type, relation, type, …] list has an odd number", items.len()));
                }
                let types: Vec<String> = items.iter().step_by(2).cloned().collect();
                let hops = items.iter().skip(1).step_by(2).map(|r| (Some(r.clone()), Dir::Forward)).collect();
                Ok(Metapath { types, hops })
            })
            .collect::<std::result::Result<_, String>>()?,
        other => return Err(format!("Metapath is neither a string nor a list of lists: {other}")),
    };
    if let Some(known) = known_types {
        for p in &metapaths {
            if let Some(t) = p.types.iter().find(|t| !known.contains(&t.as_str())) {
                return Err(format!("node type `{}` is not a type of this KB", crate::raw::quote(t)));
            }
        }
    }
    let restrictions = match obj.get("Restriction") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(r)) => r
            .iter()
            .map(|(k, v)| Ok((k.clone(), str_list(v, &format!("Restriction[{k}]"))?)))
            .collect::<std::result::Result<_, String>>()?,
        Some(other) => return Err(format!("Restriction is not a dict: {other}")),
    };
    Ok(Plan { metapaths, restrictions })
}

pub use crate::pyliteral::python_literal;

/// One line of a plan file: the query, its plan or the reason it was rejected.
#[derive(Debug, Clone)]
pub struct PlanLine {
    /// 1-based line number.
    pub line: usize,
    pub q_id: Option<i64>,
    pub query: String,
    pub answer_ids: Vec<i64>,
    pub plan: std::result::Result<Plan, String>,
}

fn read_lines(path: &Path) -> Result<Vec<(usize, Value)>> {
    let text = crate::raw::read_utf8(path)?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(l).map_err(|e| DatasetError::malformed(path, format!("line {}", i + 1), format!("not JSON: {e}")))?;
        out.push((i + 1, v));
    }
    Ok(out)
}

/// `llama_ft.jsonl`: the user's query and the assistant's plan per line. A line that is not a
/// conversation is an error; a plan that does not parse is kept as rejected.
pub fn read_finetune(path: &Path, known_types: Option<&[&str]>) -> Result<Vec<PlanLine>> {
    read_lines(path)?
        .into_iter()
        .map(|(line, v)| {
            let conv = v.get("conversations").and_then(Value::as_array);
            let turn = |role: &str| {
                conv.and_then(|c| c.iter().find(|t| t.get("role").and_then(Value::as_str) == Some(role)))
                    .and_then(|t| t.get("content"))
                    .and_then(Value::as_str)
            };
            let (Some(query), Some(plan)) = (turn("user"), turn("assistant")) else {
                return Err(DatasetError::malformed(path, format!("line {line}"), "not a {\"conversations\": [user, assistant]} record"));
            };
            let plan = python_literal(plan).and_then(|p| parse_plan(&p, known_types));
            Ok(PlanLine { line, q_id: None, query: query.to_string(), answer_ids: Vec::new(), plan })
        })
        .collect()
}

/// `plans_{train,val}.jsonl`.
pub fn read_plans(path: &Path, known_types: Option<&[&str]>) -> Result<Vec<PlanLine>> {
    read_lines(path)?
        .into_iter()
        .map(|(line, v)| {
            let at = |f: &str| format!("line {line}, field {f}");
            let q_id = v
                .get("q_id")
                .and_then(Value::as_i64)
                .ok_or_else(|| DatasetError::malformed(path, at("q_id"), "missing or not an integer"))?;
            let query = v
                .get("query")
                .and_then(Value::as_str)
                .ok_or_else(|| DatasetError::malformed(path, at("query"), "missing or not a string"))?;
            let answer_ids = v
                .get("answer_ids")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
                .ok_or_else(|| DatasetError::malformed(path, at("answer_ids"), "missing or not a list of integers"))?;
            let plan = v.get("plan").ok_or_else(|| DatasetError::malformed(path, at("plan"), "missing"))?;
            Ok(PlanLine { line, q_id: Some(q_id), query: query.to_string(), answer_ids, plan: parse_plan(plan, known_types) })
        })
        .collect()
}
