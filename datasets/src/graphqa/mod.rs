//! Graph QA datasets (G-Retriever's GraphQA benchmark): one small textual graph per question.
//!
//! * [`explagraphs`]: ExplaGraphs TSVs (the original split files and G-Retriever's `train_dev.tsv`).
//! * [`scenegraphs`]: GQA scene graphs + questions JSON (SceneGraphs).
//! * [`webqsp`]: WebQSP questions (ToG and original formats) and RoG-style per-question subgraphs.
//! * G-Retriever's own per-graph files `nodes/{i}.csv` (`node_id,node_attr`) and `edges/{i}.csv`
//!   (`src,edge_attr,dst`) are read and written here ([`read_gretriever_graph`],
//!   [`write_gretriever_graph`]).
//!
//! Every loader returns [`GraphQaItem`]s; [`to_tables`] turns them into `graph_nodes`, `graph_edges`
//! and `qa`.

pub mod explagraphs;
pub mod scenegraphs;
pub mod webqsp;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::DatasetTables;
use crate::error::{DatasetError, Result};
use crate::raw::{Csv, Tables, strs, u32s};
use tgrag_schemas::tables;

/// A small textual graph: node texts (ids are positions) and `(src, relation, dst)` edges.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TextGraph {
    pub nodes: Vec<String>,
    pub edges: Vec<(u32, String, u32)>,
}

impl TextGraph {
    /// Adds a node text if new (first-seen order, as G-Retriever's dict does) and returns its id.
    pub fn intern(&mut self, index: &mut std::collections::HashMap<String, u32>, text: &str) -> u32 {
        if let Some(&i) = index.get(text) {
            return i;
        }
        let i = self.nodes.len() as u32;
        self.nodes.push(text.to_string());
        index.insert(text.to_string(), i);
        i
    }
}

/// One question with its graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphQaItem {
    pub question: String,
    pub answer: String,
    pub split: &'static str,
    /// The benchmark (`explagraphs`, `scenegraphs`, `webqsp`): it decides how answers are scored.
    pub task: &'static str,
    pub graph: TextGraph,
    /// The input file and the place in it (`row 3`, `question 17`, `image 2`) that made this item, named
    /// by errors about it.
    pub source: PathBuf,
    pub at: String,
}

/// `graph_nodes`, `graph_edges` and `qa` for items (graph id = position); `source` names the file the
/// items came from in validation errors.
pub fn to_tables(items: &[GraphQaItem], source: &Path) -> Result<DatasetTables> {
    let mut t = Tables::new();
    let (mut ng, mut ni, mut nt) = (Vec::new(), Vec::new(), Vec::new());
    let (mut eg, mut es, mut ed, mut et) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (g, it) in items.iter().enumerate() {
        // A question without a graph: every GraphQA method needs one. Named by its input, not by the
        // `qa` table it would otherwise break.
        if it.graph.nodes.is_empty() {
            return Err(DatasetError::malformed(
                &it.source,
                &it.at,
                "the question's graph is empty (no nodes): a GraphQA question needs a graph",
            ));
        }
        for (i, n) in it.graph.nodes.iter().enumerate() {
            ng.push(g as u32);
            ni.push(i as u32);
            nt.push(n.as_str());
        }
        for (s, r, d) in &it.graph.edges {
            eg.push(g as u32);
            es.push(*s);
            ed.push(*d);
            et.push(r.as_str());
        }
    }
    t.push(&tables::GRAPH_NODES, source, vec![u32s(ng), u32s(ni), strs(nt)])?;
    t.push(&tables::GRAPH_EDGES, source, vec![u32s(eg), u32s(es), u32s(ed), strs(et)])?;
    t.push(
        &tables::QA,
        source,
        vec![
            u32s(0..items.len() as u32),
            strs(items.iter().map(|i| i.question.as_str())),
            strs(items.iter().map(|i| i.answer.as_str())),
            strs(items.iter().map(|i| i.split)),
            strs(items.iter().map(|i| i.task)),
            std::sync::Arc::new(arrow::array::UInt8Array::from(vec![None::<u8>; items.len()])),
        ],
    )?;
    Ok(t.finish())
}

/// Seeded 60/20/20 train/val/test assignment of `n` items (G-Retriever splits its GraphQA sets
/// 60/20/20 at random; its exact sklearn permutation is not reproduced).
pub fn random_splits(n: usize, seed: u64) -> Vec<&'static str> {
    crate::rng::split_60_20_20(n, seed, "graphqa-splits")
}

/// G-Retriever's split files `split/{train,val,test}_indices.txt` (one index per line), when present:
/// the split of each of `n` items. Every item must be in exactly one file. All three files or none:
/// some but not all is an error naming the missing ones (never a silent random split).
pub fn read_split_files(dir: &Path, n: usize) -> Result<Option<Vec<&'static str>>> {
    let names = [("train", "train_indices.txt"), ("val", "val_indices.txt"), ("test", "test_indices.txt")];
    let present = |f: &str| std::fs::symlink_metadata(dir.join("split").join(f)).is_ok();
    let missing: Vec<&str> = names.iter().map(|&(_, f)| f).filter(|f| !present(f)).collect();
    if missing.len() == names.len() {
        return Ok(None);
    }
    if let Some(first) = missing.first() {
        return Err(DatasetError::malformed(
            dir.join("split").join(first),
            "split files",
            format!(
                "missing, while {} {} here: give all three of train_indices.txt, val_indices.txt and test_indices.txt, or none (then the split is a seeded 60/20/20)",
                names.iter().map(|&(_, f)| f).filter(|f| present(f)).collect::<Vec<_>>().join(" and "),
                if names.len() - missing.len() == 1 { "is" } else { "are" },
            ),
        ));
    }
    let mut out: Vec<Option<&'static str>> = vec![None; n];
    for (split, f) in names {
        let p = dir.join("split").join(f);
        let text = crate::raw::read_utf8(&p)?;
        for (ln, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() {
                continue;
            }
            let at = format!("line {}", ln + 1);
            let i: usize =
                l.parse().map_err(|e| DatasetError::malformed(&p, &at, format!("`{}` is not an index: {e}", crate::raw::quote(l))))?;
            let slot = out
                .get_mut(i)
                .ok_or_else(|| DatasetError::malformed(&p, &at, format!("index {i} is out of range (there are {n} items)")))?;
            if let Some(prev) = slot.replace(split) {
                return Err(DatasetError::malformed(&p, &at, format!("index {i} is already in the {prev} split")));
            }
        }
    }
    match out.iter().position(Option::is_none) {
        Some(i) => Err(DatasetError::malformed(dir.join("split"), format!("item {i}"), "is in no split file")),
        None => Ok(Some(out.into_iter().map(|s| s.unwrap_or("train")).collect())),
    }
}

fn gretriever_paths(dir: &Path, i: usize) -> (PathBuf, PathBuf) {
    (dir.join("nodes").join(format!("{i}.csv")), dir.join("edges").join(format!("{i}.csv")))
}

/// Reads G-Retriever's `nodes/{i}.csv` and `edges/{i}.csv` under `dir`. Node ids must be `0..n` in
/// order (G-Retriever writes them so); edges must refer to existing nodes. An edges file with no
/// rows (pandas writes an empty frame as a bare newline) is a graph without edges.
pub fn read_gretriever_graph(dir: &Path, i: usize) -> Result<TextGraph> {
    let (np, ep) = gretriever_paths(dir, i);
    let nodes = Csv::read(&np)?;
    let (ci, ca) = (nodes.col("node_id")?, nodes.col("node_attr")?);
    let mut g = TextGraph::default();
    for r in 0..nodes.rows.len() {
        let id: u32 = nodes.int(r, ci)?;
        if id as usize != r {
            return Err(DatasetError::malformed(
                &np,
                format!("row {r}, column node_id"),
                format!("node id {id} where {r} was expected (ids are 0..n in order)"),
            ));
        }
        g.nodes.push(nodes.rows[r][ca].clone());
    }
    let text = crate::raw::read_utf8(&ep)?;
    if text.trim().is_empty() || text.trim() == "\"\"" {
        return Ok(g);
    }
    let edges = Csv::read(&ep)?;
    let (cs, cr, cd) = (edges.col("src")?, edges.col("edge_attr")?, edges.col("dst")?);
    for r in 0..edges.rows.len() {
        let (s, d): (u32, u32) = (edges.int(r, cs)?, edges.int(r, cd)?);
        for (v, c) in [(s, "src"), (d, "dst")] {
            if v as usize >= g.nodes.len() {
                return Err(DatasetError::malformed(
                    &ep,
                    format!("row {r}, column {c}"),
                    format!("node {v} is not in {} ({} nodes)", np.display(), g.nodes.len()),
                ));
            }
        }
        g.edges.push((s, edges.rows[r][cr].clone(), d));
    }
    Ok(g)
}

/// G-Retriever's textualisation of a graph (`desc`): the nodes as CSV (`node_id,node_attr`), a blank
/// line, the edges as CSV (`src,edge_attr,dst`), as pandas `to_csv(index=False)` writes them.
pub fn desc(g: &TextGraph) -> String {
    let mut s = String::from("node_id,node_attr\n");
    for (k, n) in g.nodes.iter().enumerate() {
        s.push_str(&format!("{k},{}\n", csv_field(n)));
    }
    s.push_str("\nsrc,edge_attr,dst\n");
    for (a, r, b) in &g.edges {
        s.push_str(&format!("{a},{},{b}\n", csv_field(r)));
    }
    s
}

/// A CSV field as pandas `to_csv` writes it (QUOTE_MINIMAL).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// Writes a graph as G-Retriever's `nodes/{i}.csv` and `edges/{i}.csv` (pandas `to_csv(index=False)`
/// layout), each through a temporary file renamed into place.
pub fn write_gretriever_graph(dir: &Path, i: usize, g: &TextGraph) -> Result<()> {
    let (np, ep) = gretriever_paths(dir, i);
    let mut nodes = String::from("node_id,node_attr\n");
    for (k, n) in g.nodes.iter().enumerate() {
        nodes.push_str(&format!("{k},{}\n", csv_field(n)));
    }
    let mut edges = String::from("src,edge_attr,dst\n");
    for (s, r, d) in &g.edges {
        edges.push_str(&format!("{s},{},{d}\n", csv_field(r)));
    }
    for (p, body) in [(np, nodes), (ep, edges)] {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| DatasetError::io(parent, e))?;
        }
        tgrag_schemas::io::write_bytes_atomic(&p, body.as_bytes()).map_err(DatasetError::from)?;
    }
    Ok(())
}
