//! ExplaGraphs (Saha et al. 2021) as G-Retriever uses it.
//!
//! * G-Retriever's `train_dev.tsv`: header `arg1 arg2 label graph`, read as pandas
//!   `read_csv(sep='\t')` does (so `"` quoting applies: five rows of the real file are quoted).
//!   Splits: G-Retriever's `split/*_indices.txt` when present, else a seeded 60/20/20.
//! * The original files `train.tsv`, `dev.tsv` (no header, `belief \t argument \t label \t graph`, split
//!   on tabs as the ExplaGraphs code does) and `test_no_labels.tsv` (belief and argument only).
//!   Splits: `train.tsv` → train (a seeded 10% → val), `dev.tsv` → test (ExplaGraphs evaluates on
//!   dev; the test labels are hidden, so `test_no_labels.tsv` has no graph and is not a QA item).
//!
//! The graph is G-Retriever's `textualize_graph`: every `\((.*?)\)` match split on `;` into head,
//! relation and tail, lower-cased and stripped; nodes are unique concepts in first-seen order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{GraphQaItem, TextGraph};
use crate::error::{DatasetError, Result};
use crate::raw::{Csv, read_utf8};

/// G-Retriever's prompt after the two arguments.
pub const PROMPT: &str = "Question: Do argument 1 and argument 2 support or counter each other? Answer in one word in the form of 'support' or 'counter'.\n\nAnswer:";

/// One ExplaGraphs row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub belief: String,
    pub argument: String,
    /// `support` or `counter`; `None` in `test_no_labels.tsv`.
    pub label: Option<String>,
    /// The raw `(head; relation; tail)…` string; `None` in `test_no_labels.tsv`.
    pub graph: Option<String>,
}

/// G-Retriever's `textualize_graph` of a triple string; `at` names the row in errors.
pub fn textualize(graph: &str, path: &Path, at: &str) -> Result<TextGraph> {
    let mut g = TextGraph::default();
    let mut index = HashMap::new();
    let mut rest = graph;
    // `re.findall(r'\((.*?)\)')`: from each `(` to the next `)`.
    while let Some(open) = rest.find('(') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(')') else { break };
        let triple = &after[..close];
        if triple.contains('\n') {
            // `.` does not match a newline: the regex moves on to the next `(`.
            rest = after;
            continue;
        }
        rest = &after[close + 1..];
        let parts: Vec<&str> = triple.split(';').collect();
        let [h, r, t] = parts[..] else {
            return Err(DatasetError::malformed(
                path,
                format!("{at}, column graph"),
                format!("`({})` has {} `;`-separated parts, not 3", crate::raw::quote(triple), parts.len()),
            ));
        };
        let (h, r, t) = (h.to_lowercase(), r.to_lowercase(), t.to_lowercase());
        let s = g.intern(&mut index, h.trim());
        let d = g.intern(&mut index, t.trim());
        g.edges.push((s, r.trim().to_string(), d));
    }
    if g.edges.is_empty() {
        return Err(DatasetError::malformed(path, format!("{at}, column graph"), "no `(head; relation; tail)` triple"));
    }
    Ok(g)
}

fn check_label(label: &str, path: &Path, at: &str) -> Result<()> {
    if label == "support" || label == "counter" {
        Ok(())
    } else {
        Err(DatasetError::malformed(
            path,
            format!("{at}, column label"),
            format!("`{}` is neither `support` nor `counter`", crate::raw::quote(label)),
        ))
    }
}

/// G-Retriever's `train_dev.tsv`.
pub fn read_gretriever_tsv(path: &Path) -> Result<Vec<Row>> {
    let csv = Csv::read_sep(path, b'\t')?;
    let (a1, a2, l, g) = (csv.col("arg1")?, csv.col("arg2")?, csv.col("label")?, csv.col("graph")?);
    let mut rows = Vec::with_capacity(csv.rows.len());
    for (i, r) in csv.rows.iter().enumerate() {
        check_label(&r[l], path, &format!("row {i}"))?;
        rows.push(Row { belief: r[a1].clone(), argument: r[a2].clone(), label: Some(r[l].clone()), graph: Some(r[g].clone()) });
    }
    Ok(rows)
}

/// An original ExplaGraphs file: 4 fields per line (`labelled`) or 2 (`test_no_labels.tsv`).
pub fn read_original_tsv(path: &Path, labelled: bool) -> Result<Vec<Row>> {
    let text = read_utf8(path)?;
    let want = if labelled { 4 } else { 2 };
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("line {}", i + 1);
        let f: Vec<&str> = line.trim().split('\t').collect();
        if f.len() != want {
            return Err(DatasetError::malformed(path, &at, format!("{} tab-separated fields, expected {want}", f.len())));
        }
        if labelled {
            check_label(f[2], path, &at)?;
        }
        rows.push(Row {
            belief: f[0].to_string(),
            argument: f[1].to_string(),
            label: labelled.then(|| f[2].to_string()),
            graph: labelled.then(|| f[3].to_string()),
        });
    }
    Ok(rows)
}

fn item(row: &Row, split: &'static str, path: &Path, at: &str) -> Result<GraphQaItem> {
    let graph = textualize(row.graph.as_deref().unwrap_or_default(), path, at)?;
    Ok(GraphQaItem {
        question: format!("Argument 1: {}\nArgument 2: {}\n{PROMPT}", row.belief, row.argument),
        answer: row.label.clone().unwrap_or_default(),
        split,
        task: "explagraphs",
        graph,
        source: path.to_path_buf(),
        at: at.to_string(),
    })
}

/// The G-Retriever file in `dir` (`train_dev.tsv` or the name it has in the shared data), if any.
pub fn gretriever_file(dir: &Path) -> Option<PathBuf> {
    ["train_dev.tsv", "train_dev_G-Retriever.tsv"].iter().map(|f| dir.join(f)).find(|p| p.is_file())
}

/// Loads ExplaGraphs from a folder: G-Retriever's file when present, else the original split files.
/// Returns the items and the file they came from.
pub fn load(dir: &Path, seed: u64) -> Result<(Vec<GraphQaItem>, PathBuf)> {
    if let Some(path) = gretriever_file(dir) {
        let rows = read_gretriever_tsv(&path)?;
        let splits = match super::read_split_files(dir, rows.len())? {
            Some(s) => s,
            None => super::random_splits(rows.len(), seed),
        };
        let items = rows.iter().zip(splits).enumerate().map(|(i, (r, s))| item(r, s, &path, &format!("row {i}"))).collect::<Result<_>>()?;
        return Ok((items, path));
    }
    let train = dir.join("train.tsv");
    if !train.is_file() {
        return Err(DatasetError::malformed(dir, "folder", "neither train_dev.tsv (G-Retriever) nor train.tsv (ExplaGraphs) is here"));
    }
    let rows = read_original_tsv(&train, true)?;
    let val = val_mask(rows.len(), seed);
    let mut items: Vec<GraphQaItem> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| item(r, if val[i] { "val" } else { "train" }, &train, &format!("line {}", i + 1)))
        .collect::<Result<_>>()?;
    let dev = dir.join("dev.tsv");
    if dev.is_file() {
        for (i, r) in read_original_tsv(&dev, true)?.iter().enumerate() {
            items.push(item(r, "test", &dev, &format!("line {}", i + 1))?);
        }
    }
    Ok((items, train))
}

/// A seeded 10% of `n` rows.
fn val_mask(n: usize, seed: u64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..n).collect();
    crate::rng::Rng::for_item(seed, "explagraphs-val", 0).shuffle(&mut order);
    let mut mask = vec![false; n];
    for &i in order.iter().take(n / 10) {
        mask[i] = true;
    }
    mask
}
