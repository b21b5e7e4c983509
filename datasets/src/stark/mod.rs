//! STaRK knowledge bases (Amazon, MAG, Prime) read from the Hugging Face dataset layout of
//! `snap-stanford/stark`, reproducing `stark_qa`'s loader:
//!
//! * `skb/<kb>/processed.zip` → node_info / type dictionaries (pickles, read by [`crate::pickle`]
//!   without executing code) and `edge_index` / `edge_types` / `node_types` (torch `.pt`, views
//!   applied), Amazon from `processed/cache/brand-category-color/`;
//! * MAG's type dictionaries replaced by `MagSKB`'s class attributes, Prime's node_info passed
//!   through `clean_dict`;
//! * `SKB.__init__`'s undirected conversion when the stored graph is not undirected (concat with the
//!   flipped edges, coalesce by (row, col), edge type = mean of merged type ids truncated);
//! * candidate ids, neighbour lists (`get_neighbor_nodes`: ascending, de-duplicated, self loops kept);
//! * documents ([`docs`]): `get_doc_info(i, add_rel=False, compact=False)` byte for byte;
//! * QA ([`qa`]): `stark_qa.csv`, the human-generated set and the four split files.

pub mod docs;
pub mod qa;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray, UInt32Array};
use tgrag_schemas::tables;

use crate::archive::{self, ZipFiles};
use crate::error::{DatasetError, Result};
use crate::pickle::{self, Value};

/// One of the three STaRK knowledge bases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kb {
    Amazon,
    Mag,
    Prime,
}

impl Kb {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "amazon" => Some(Kb::Amazon),
            "mag" => Some(Kb::Mag),
            "prime" | "primekg" => Some(Kb::Prime),
            _ => None,
        }
    }
    /// Folder name under `skb/` and `qa/`.
    pub fn name(self) -> &'static str {
        match self {
            Kb::Amazon => "amazon",
            Kb::Mag => "mag",
            Kb::Prime => "prime",
        }
    }
    /// Hub files the loader needs, relative to the repository root.
    pub fn hub_files(self) -> Vec<String> {
        let k = self.name();
        let mut f = vec![format!("skb/{k}/processed.zip")];
        match self {
            Kb::Amazon => f.push("skb/amazon/category_list.json".into()),
            Kb::Mag => {
                f.push("skb/mag/schema/mag.json".into());
                f.push("skb/mag/schema/reduced_mag.json".into());
            }
            Kb::Prime => {}
        }
        f.push(format!("qa/{k}/stark_qa/stark_qa.csv"));
        f.push(format!("qa/{k}/stark_qa/stark_qa_human_generated_eval.csv"));
        for s in qa::SPLIT_FILES {
            f.push(format!("qa/{k}/split/{s}.index"));
        }
        f
    }
    /// Folder inside `processed.zip` that the loader reads.
    fn processed_dir(self) -> &'static str {
        match self {
            Kb::Amazon => "processed/cache/brand-category-color/",
            Kb::Mag | Kb::Prime => "processed/",
        }
    }
    /// Node types whose nodes are ranking candidates.
    pub fn candidate_types(self) -> &'static [&'static str] {
        match self {
            Kb::Amazon => &["product"],
            Kb::Mag => &["paper"],
            Kb::Prime => &[
                "disease",
                "gene/protein",
                "molecular_function",
                "drug",
                "pathway",
                "anatomy",
                "effect/phenotype",
                "biological_process",
                "cellular_component",
                "exposure",
            ],
        }
    }
}

/// A loaded STaRK knowledge base.
#[derive(Debug, Clone)]
pub struct Skb {
    pub kb: Kb,
    /// `node_info[i]`: the node's attribute dict.
    pub node_info: Vec<Value>,
    pub node_types: Vec<i64>,
    pub node_type_dict: Vec<(i64, String)>,
    pub edge_type_dict: Vec<(i64, String)>,
    /// Edges exactly as stored in the `.pt` files.
    pub stored: Edges,
    /// Edges after `SKB.__init__` (converted to undirected when they were not).
    pub edges: Edges,
    pub to_undirected_applied: bool,
    pub candidate_ids: Vec<u32>,
    /// Neighbour lists per relation (and `"*"`), per node: `get_neighbor_nodes`.
    neighbors: BTreeMap<String, Vec<Vec<u32>>>,
}

/// Parallel edge columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Edges {
    pub src: Vec<i64>,
    pub dst: Vec<i64>,
    pub etype: Vec<i64>,
}

impl Skb {
    /// Load `skb/<kb>/processed.zip` under `root` (the hub layout).
    pub fn load(kb: Kb, root: &Path) -> Result<Self> {
        let zip_path = root.join(format!("skb/{}/processed.zip", kb.name()));
        let bytes = std::fs::read(&zip_path).map_err(|e| DatasetError::io(&zip_path, e))?;
        let z = ZipFiles::read(&zip_path, bytes)?;
        if kb == Kb::Mag {
            check_mag_schema(root)?;
        }
        let files = ProcessedFiles::read(kb, &zip_path, &z)?;
        let n = files.node_types.values.len();
        let folder = zip_path.join(kb.processed_dir());
        let node_info = node_info_by_id(files.info, n, kb, &folder)?;
        let stored = stored_edges(files.edge_index, files.edge_types, n, &folder)?;
        let node_types = files.node_types.values;
        let (node_type_dict, edge_type_dict) = (files.node_type_dict, files.edge_type_dict);
        check_type_ids(&node_types, &node_type_dict, &stored.etype, &edge_type_dict, &folder)?;
        let undirected = is_undirected(&stored);
        let edges = if undirected { stored.clone() } else { to_undirected_mean(&stored) };
        let neighbors = neighbor_lists(&edges, &edge_type_dict, n);
        let cand_type_ids: Vec<i64> =
            node_type_dict.iter().filter(|(_, name)| kb.candidate_types().contains(&name.as_str())).map(|(k, _)| *k).collect();
        let candidate_ids = (0..n as u32).filter(|&i| cand_type_ids.contains(&node_types[i as usize])).collect();
        Ok(Skb {
            kb,
            node_info,
            node_types,
            node_type_dict,
            edge_type_dict,
            stored,
            edges,
            to_undirected_applied: !undirected,
            candidate_ids,
            neighbors,
        })
    }

    pub fn num_nodes(&self) -> usize {
        self.node_types.len()
    }

    /// The type name of node `i`.
    pub fn node_type(&self, i: usize) -> &str {
        let t = self.node_types[i];
        self.node_type_dict.iter().find(|(k, _)| *k == t).map(|(_, v)| v.as_str()).unwrap_or("")
    }

    /// The relation name of type id `t`.
    pub fn edge_type_name(&self, t: i64) -> &str {
        self.edge_type_dict.iter().find(|(k, _)| *k == t).map(|(_, v)| v.as_str()).unwrap_or("")
    }

    /// `rel_type_lst()`: relation names in dictionary order.
    pub fn rel_types(&self) -> Vec<&str> {
        self.edge_type_dict.iter().map(|(_, v)| v.as_str()).collect()
    }

    /// `get_neighbor_nodes(i, rel)` (`"*"` = any relation).
    pub fn neighbors(&self, i: usize, rel: &str) -> &[u32] {
        self.neighbors.get(rel).and_then(|l| l.get(i)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// An attribute of node `i`.
    pub fn attr(&self, i: usize, key: &str) -> Option<&Value> {
        self.node_info.get(i).and_then(|d| d.get(key))
    }

    /// The name a query would use for node `i` (title, DisplayName, name, brand_name, ...).
    pub fn name(&self, i: usize) -> String {
        let keys: &[&str] = match self.kb {
            Kb::Amazon => &["title", "brand_name", "category_name", "color_name"],
            Kb::Mag => &["title", "DisplayName"],
            Kb::Prime => &["name"],
        };
        keys.iter().find_map(|k| self.attr(i, k)).map(crate::pyrepr::py_str).unwrap_or_default()
    }
}

/// MagSKB needs `<root>/schema/` (it would download it otherwise); check it is there.
fn check_mag_schema(root: &Path) -> Result<()> {
    for f in ["mag.json", "reduced_mag.json"] {
        let p = root.join("skb/mag/schema").join(f);
        let text = crate::raw::read_utf8(&p)?;
        serde_json::from_str::<serde_json::Value>(&text)
            .map_err(|e| DatasetError::malformed(&p, "json", crate::raw::quote(&e.to_string())))?;
    }
    Ok(())
}

/// The files of `processed.zip` the loader reads, as stored (MAG's type dictionaries are
/// `MagSKB`'s class attributes).
struct ProcessedFiles {
    info: Value,
    node_types: archive::LongTensor,
    edge_index: archive::LongTensor,
    edge_types: archive::LongTensor,
    node_type_dict: Vec<(i64, String)>,
    edge_type_dict: Vec<(i64, String)>,
}

impl ProcessedFiles {
    /// Reads node_info, node_types, edge_index, edge_types, then the type dictionaries.
    fn read(kb: Kb, zip_path: &Path, z: &ZipFiles) -> Result<ProcessedFiles> {
        let dir = kb.processed_dir();
        let entry = |name: &str| -> Result<(PathBuf, &[u8])> {
            let full = format!("{dir}{name}");
            Ok((zip_path.join(&full), z.get(&full)?))
        };
        let pkl = |name: &str| -> Result<Value> {
            let (p, b) = entry(name)?;
            pickle::load(b).map_err(|e| DatasetError::malformed(&p, "pickle", e.to_string()))
        };
        let pt = |name: &str| -> Result<archive::LongTensor> {
            let (p, b) = entry(name)?;
            archive::read_pt_long(&p, b.to_vec())
        };
        let info = pkl("node_info.pkl")?;
        let node_types = pt("node_types.pt")?;
        let edge_index = pt("edge_index.pt")?;
        let edge_types = pt("edge_types.pt")?;
        let (node_type_dict, edge_type_dict) = match kb {
            Kb::Mag => (
                vec![(0, "author".into()), (1, "institution".into()), (2, "field_of_study".into()), (3, "paper".into())],
                vec![
                    (0, "author___affiliated_with___institution".into()),
                    (1, "paper___cites___paper".into()),
                    (2, "paper___has_topic___field_of_study".into()),
                    (3, "author___writes___paper".into()),
                ],
            ),
            _ => (int_str_dict(&pkl("node_type_dict.pkl")?, zip_path)?, int_str_dict(&pkl("edge_type_dict.pkl")?, zip_path)?),
        };
        Ok(ProcessedFiles { info, node_types, edge_index, edge_types, node_type_dict, edge_type_dict })
    }
}

/// node_info: {int id: dict}, ids 0..n-1 (any order of insertion); Prime's dicts through
/// [`clean_dict`]. Every node must have an attribute dict.
fn node_info_by_id(info: Value, n: usize, kb: Kb, folder: &Path) -> Result<Vec<Value>> {
    let bad = |reason: String| DatasetError::malformed(folder, "node_info.pkl", reason);
    let Value::Dict(pairs) = info else { return Err(bad("not a dict".into())) };
    let mut node_info = vec![Value::None; n];
    for (k, v) in pairs {
        let id = k.as_int().filter(|&i| i >= 0 && (i as usize) < n).ok_or_else(|| bad(format!("key {k:?} is not a node id in 0..{n}")))?;
        node_info[id as usize] = if kb == Kb::Prime { clean_dict(&v) } else { v };
    }
    if let Some(i) = node_info.iter().position(|v| !matches!(v, Value::Dict(_))) {
        return Err(bad(format!("node {i} has no attribute dict")));
    }
    Ok(node_info)
}

/// The stored edges: `edge_index` of shape [2, E], one type per edge, every end a node id.
fn stored_edges(edge_index: archive::LongTensor, edge_types: archive::LongTensor, n: usize, folder: &Path) -> Result<Edges> {
    let bad = |at: &str, reason: String| DatasetError::malformed(folder, at, reason);
    if edge_index.shape.len() != 2 || edge_index.shape[0] != 2 {
        return Err(bad("edge_index.pt", format!("shape {:?}, expected [2, E]", edge_index.shape)));
    }
    let e = edge_index.shape[1];
    if edge_types.values.len() != e {
        return Err(bad("edge_types.pt", format!("{} types for {e} edges", edge_types.values.len())));
    }
    let stored = Edges { src: edge_index.values[..e].to_vec(), dst: edge_index.values[e..].to_vec(), etype: edge_types.values };
    if let Some(i) = (0..e).find(|&i| stored.src[i] < 0 || stored.dst[i] < 0 || stored.src[i] as usize >= n || stored.dst[i] as usize >= n)
    {
        return Err(bad("edge_index.pt", format!("edge {i} ({} -> {}) is outside 0..{n}", stored.src[i], stored.dst[i])));
    }
    Ok(stored)
}

/// Every node type id is in `node_type_dict`, every edge type id in `edge_type_dict`.
fn check_type_ids(
    node_types: &[i64],
    node_type_dict: &[(i64, String)],
    edge_types: &[i64],
    edge_type_dict: &[(i64, String)],
    folder: &Path,
) -> Result<()> {
    let bad = |at: &str, reason: String| DatasetError::malformed(folder, at, reason);
    if let Some(i) = node_types.iter().position(|t| !node_type_dict.iter().any(|(k, _)| k == t)) {
        return Err(bad("node_types.pt", format!("node {i} has type id {} missing from node_type_dict", node_types[i])));
    }
    if let Some(i) = edge_types.iter().position(|t| !edge_type_dict.iter().any(|(k, _)| k == t)) {
        return Err(bad("edge_types.pt", format!("edge {i} has type id {} missing from edge_type_dict", edge_types[i])));
    }
    Ok(())
}

/// `get_neighbor_nodes`' lists: per relation name (and `"*"` for any), per node, ascending and
/// de-duplicated.
fn neighbor_lists(edges: &Edges, edge_type_dict: &[(i64, String)], n: usize) -> BTreeMap<String, Vec<Vec<u32>>> {
    let mut neighbors: BTreeMap<String, Vec<Vec<u32>>> = BTreeMap::new();
    let mut all = vec![Vec::new(); n];
    let mut by_type: BTreeMap<i64, Vec<Vec<u32>>> = edge_type_dict.iter().map(|(k, _)| (*k, vec![Vec::new(); n])).collect();
    for i in 0..edges.src.len() {
        let (s, d) = (edges.src[i] as usize, edges.dst[i] as u32);
        all[s].push(d);
        if let Some(t) = by_type.get_mut(&edges.etype[i]) {
            t[s].push(d);
        }
    }
    let norm = |mut lists: Vec<Vec<u32>>| {
        for l in &mut lists {
            l.sort_unstable();
            l.dedup();
        }
        lists
    };
    neighbors.insert("*".into(), norm(all));
    for (k, name) in edge_type_dict {
        if let Some(l) = by_type.remove(k) {
            neighbors.insert(name.clone(), norm(l));
        }
    }
    neighbors
}

/// `{int: str}` dictionaries (node_type_dict.pkl, edge_type_dict.pkl).
fn int_str_dict(v: &Value, path: &Path) -> Result<Vec<(i64, String)>> {
    let bad = || DatasetError::malformed(path, "type dictionary", "expected a dict of int to str");
    let Value::Dict(p) = v else { return Err(bad()) };
    p.iter().map(|(k, v)| Ok((k.as_int().ok_or_else(bad)?, v.as_str().ok_or_else(bad)?.to_string()))).collect()
}

/// `stark_qa.tools.process_text.clean_dict`: drop values whose `str()` is `''` or `'nan'`,
/// recursing into dicts (not lists).
pub fn clean_dict(v: &Value) -> Value {
    match v {
        Value::Dict(p) => Value::Dict(
            p.iter()
                .filter_map(|(k, v)| match v {
                    Value::Dict(_) => Some((k.clone(), clean_dict(v))),
                    other => {
                        let s = crate::pyrepr::py_str(other);
                        (!s.is_empty() && s != "nan").then(|| (k.clone(), other.clone()))
                    }
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// torch_geometric's `is_undirected`: the multiset of (u, v) equals the multiset of (v, u).
pub fn is_undirected(e: &Edges) -> bool {
    let mut a: Vec<(i64, i64)> = e.src.iter().zip(&e.dst).map(|(&s, &d)| (s, d)).collect();
    let mut b: Vec<(i64, i64)> = e.src.iter().zip(&e.dst).map(|(&s, &d)| (d, s)).collect();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// `to_undirected(edge_index, edge_types, reduce='mean')` then `.long()`: every edge and its flip,
/// sorted by (row, col), duplicates merged with the mean of their type ids, truncated.
pub fn to_undirected_mean(e: &Edges) -> Edges {
    let mut all: Vec<(i64, i64, i64)> = Vec::with_capacity(e.src.len() * 2);
    for i in 0..e.src.len() {
        all.push((e.src[i], e.dst[i], e.etype[i]));
    }
    for i in 0..e.src.len() {
        all.push((e.dst[i], e.src[i], e.etype[i]));
    }
    all.sort_by_key(|&(s, d, _)| (s, d));
    let mut out = Edges::default();
    let mut i = 0;
    while i < all.len() {
        let (s, d, _) = all[i];
        let mut j = i;
        let mut sum = 0f64;
        while j < all.len() && all[j].0 == s && all[j].1 == d {
            sum += all[j].2 as f64;
            j += 1;
        }
        out.src.push(s);
        out.dst.push(d);
        out.etype.push((sum / (j - i) as f64).trunc() as i64);
        i = j;
    }
    out
}

/// The Hugging Face repository of STaRK. No commit of it is pinned upstream; tgrag asks for
/// `TGRAG_STARK_REVISION` (default `main`) and records the commit it resolved to and every file's
/// sha256 in the run manifest.
pub fn hub_repo() -> crate::hub::HubRepo {
    crate::hub::HubRepo {
        kind: "dataset",
        owner: "snap-stanford",
        name: "stark",
        revision: std::env::var("TGRAG_STARK_REVISION").unwrap_or_else(|_| "main".into()),
    }
}

/// Canonical tables of a STaRK KB: nodes (with `get_doc_info` documents), the loaded edges, the
/// queries of `stark_qa.csv` with their split (`test-0.1` is a subset of `test` and is not a split
/// of its own) and answers, and the candidate types.
pub fn to_tables(skb: &Skb, qa: &Qa, root: &Path) -> Result<crate::DatasetTables> {
    let n = skb.num_nodes();
    let label = root.join(format!("skb/{}", skb.kb.name()));
    let mut out = crate::DatasetTables::default();
    graph_tables(&mut out, skb, &label)?;
    let qa_path = root.join(format!("qa/{}/stark_qa/stark_qa.csv", skb.kb.name()));
    let q = QueryColumns::new(qa, n, &qa_path)?;
    let nulls_u8: arrow::array::UInt8Array = std::iter::repeat_n(None::<u8>, q.ids.len()).collect();
    let nulls_s: StringArray = std::iter::repeat_n(None::<&str>, q.ids.len()).collect();
    push(
        &mut out,
        &tables::QUERIES,
        qa_path.clone(),
        vec![
            Arc::new(UInt32Array::from(q.ids)) as ArrayRef,
            Arc::new(StringArray::from(q.texts)),
            Arc::new(StringArray::from(q.splits)),
            Arc::new(nulls_s),
            Arc::new(nulls_u8),
        ],
    )?;
    push(
        &mut out,
        &tables::ANSWERS,
        qa_path,
        vec![Arc::new(UInt32Array::from(q.answer_query)) as ArrayRef, Arc::new(UInt32Array::from(q.answer_node))],
    )?;
    let cand: Vec<&str> = skb.kb.candidate_types().to_vec();
    push(&mut out, &tables::CANDIDATE_TYPES, label, vec![Arc::new(StringArray::from(cand)) as ArrayRef])?;
    Ok(out)
}

/// Checks `cols` against `spec` and appends the table.
fn push(out: &mut crate::DatasetTables, spec: &'static tgrag_schemas::TableSpec, source: PathBuf, cols: Vec<ArrayRef>) -> Result<()> {
    let batch = spec.batch(cols)?;
    out.tables.push(crate::LoadedTable { spec, source, batch });
    Ok(())
}

/// `nodes` (documents built in parallel) and `edges`, both from `processed.zip`.
fn graph_tables(out: &mut crate::DatasetTables, skb: &Skb, label: &Path) -> Result<()> {
    let n = skb.num_nodes();
    let docs: Vec<String> = {
        use rayon::prelude::*;
        (0..n).into_par_iter().map(|i| skb.doc(i)).collect()
    };
    push(
        out,
        &tables::NODES,
        label.join("processed.zip"),
        vec![
            Arc::new(UInt32Array::from_iter_values(0..n as u32)) as ArrayRef,
            Arc::new(StringArray::from_iter_values((0..n).map(|i| skb.node_type(i)))),
            Arc::new(StringArray::from_iter_values((0..n).map(|i| skb.name(i)))),
            Arc::new(StringArray::from_iter_values(docs.iter())),
        ],
    )?;
    let e = &skb.edges;
    push(
        out,
        &tables::EDGES,
        label.join("processed.zip"),
        vec![
            Arc::new(UInt32Array::from_iter_values(e.src.iter().map(|&x| x as u32))) as ArrayRef,
            Arc::new(UInt32Array::from_iter_values(e.dst.iter().map(|&x| x as u32))),
            Arc::new(StringArray::from_iter_values(e.etype.iter().map(|&t| skb.edge_type_name(t)))),
        ],
    )
}

/// The columns of `queries` (id, text, split) and `answers` (query id, node id), in CSV row order.
struct QueryColumns<'a> {
    ids: Vec<u32>,
    texts: Vec<&'a str>,
    splits: Vec<&'a str>,
    answer_query: Vec<u32>,
    answer_node: Vec<u32>,
}

impl<'a> QueryColumns<'a> {
    /// Each row's id must fit a u32 and each answer be a node id in 0..n; a row in no split (other
    /// than `test-0.1`) is `unassigned`.
    fn new(qa: &'a Qa, n: usize, qa_path: &Path) -> Result<QueryColumns<'a>> {
        let mut split_of = vec![""; qa.rows.len()];
        for (name, positions) in &qa.splits {
            if name == "test-0.1" {
                continue;
            }
            for &p in positions {
                split_of[p] = name.as_str();
            }
        }
        let mut q =
            QueryColumns { ids: Vec::new(), texts: Vec::new(), splits: Vec::new(), answer_query: Vec::new(), answer_node: Vec::new() };
        for (p, row) in qa.rows.iter().enumerate() {
            let id = u32::try_from(row.id)
                .map_err(|_| DatasetError::malformed(qa_path, format!("query id {}", row.id), "does not fit a u32"))?;
            q.ids.push(id);
            q.texts.push(row.query.as_str());
            q.splits.push(if split_of[p].is_empty() { "unassigned" } else { split_of[p] });
            for &a in &row.answer_ids {
                if a < 0 || a as usize >= n {
                    return Err(DatasetError::malformed(
                        qa_path,
                        format!("query id {}, column answer_ids", row.id),
                        format!("answer {a} is not a node id"),
                    ));
                }
                q.answer_query.push(id);
                q.answer_node.push(a as u32);
            }
        }
        Ok(q)
    }
}

pub use qa::Qa;

#[cfg(test)]
mod tests;
