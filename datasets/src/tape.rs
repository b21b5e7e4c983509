//! Text-attributed citation graphs in TAPE's raw layout (He et al. 2024; `dataset/CiteSeer-Orig`):
//! `<name>_texts.txt` holds three lines per paper (`paper_id`, title + abstract, label) and
//! `<name>.cites` holds `cited \t citing` lines (the LINQS `.cites` format: the edge is citing → cited).
//!
//! Nodes are numbered in file order and keep the paper id as `key`. Edges are stored citing → cited,
//! once; lines naming a paper without text and self-citations are dropped (counted in [`CitesStats`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::DatasetTables;
use crate::error::{DatasetError, Result};
use crate::raw::read_utf8;

/// One paper.
#[derive(Debug, Clone, PartialEq)]
pub struct Paper {
    pub key: String,
    pub text: String,
    pub label: String,
}

/// What happened to the lines of the `.cites` file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CitesStats {
    pub lines: usize,
    /// Lines where both ends have text.
    pub both_known: usize,
    pub self_loops: usize,
    pub duplicates: usize,
    pub kept: usize,
}

/// A loaded TAPE graph.
#[derive(Debug, Clone)]
pub struct TapeGraph {
    pub papers: Vec<Paper>,
    /// `(citing, cited)` node ids.
    pub edges: Vec<(u32, u32)>,
    pub stats: CitesStats,
    /// Distinct paper ids of the `.cites` file that have no text.
    pub unknown_ids: usize,
    pub texts_path: PathBuf,
    pub cites_path: PathBuf,
}

/// Reads `<name>_texts.txt`.
pub fn read_texts(path: &Path) -> Result<Vec<Paper>> {
    let text = read_utf8(path)?;
    let lines: Vec<&str> = text.strip_suffix('\n').unwrap_or(&text).split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if !lines.len().is_multiple_of(3) {
        return Err(DatasetError::malformed(
            path,
            format!("line {}", lines.len()),
            format!("{} lines is not a whole number of 3-line records (truncated file?)", lines.len()),
        ));
    }
    let mut seen = HashMap::new();
    let mut papers = Vec::with_capacity(lines.len() / 3);
    for (r, rec) in lines.chunks(3).enumerate() {
        let line = 3 * r + 1;
        let key = rec[0].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(DatasetError::malformed(
                path,
                format!("line {line}"),
                format!("`{}` is not a paper id (record {r})", crate::raw::quote(key)),
            ));
        }
        if rec[2].trim().is_empty() {
            return Err(DatasetError::malformed(
                path,
                format!("line {}", line + 2),
                format!("record {r} ({}) has no label", crate::raw::quote(key)),
            ));
        }
        if let Some(prev) = seen.insert(key.to_string(), r) {
            return Err(DatasetError::malformed(
                path,
                format!("line {line}"),
                format!("paper id `{}` repeats record {prev}", crate::raw::quote(key)),
            ));
        }
        papers.push(Paper { key: key.to_string(), text: rec[1].to_string(), label: rec[2].trim().to_string() });
    }
    Ok(papers)
}

/// Loads `<name>_texts.txt` and `<name>.cites` from `dir`, for the one `<name>` present.
pub fn load(dir: &Path) -> Result<TapeGraph> {
    let entries = std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix("_texts.txt")).map(str::to_string))
        .collect();
    names.sort();
    let name = match &names[..] {
        [one] => one.clone(),
        [] => return Err(DatasetError::malformed(dir, "folder", "no `<name>_texts.txt` (TAPE layout) here")),
        many => {
            return Err(DatasetError::malformed(dir, "folder", format!("several TAPE graphs ({}); keep one per folder", many.join(", "))));
        }
    };
    let texts_path = dir.join(format!("{name}_texts.txt"));
    let cites_path = dir.join(format!("{name}.cites"));
    let papers = read_texts(&texts_path)?;
    let index: HashMap<&str, u32> = papers.iter().enumerate().map(|(i, p)| (p.key.as_str(), i as u32)).collect();
    let cites = read_utf8(&cites_path)?;
    let mut stats = CitesStats::default();
    let mut unknown = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut edges = Vec::new();
    for (i, line) in cites.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        stats.lines += 1;
        let f: Vec<&str> = line.split('\t').collect();
        let [cited, citing] = f[..] else {
            return Err(DatasetError::malformed(
                &cites_path,
                format!("line {}", i + 1),
                format!("{} tab-separated fields, expected 2 (cited, citing)", f.len()),
            ));
        };
        let (a, b) = (index.get(citing.trim()), index.get(cited.trim()));
        for (k, id) in [(citing, a), (cited, b)] {
            if id.is_none() {
                unknown.insert(k.trim().to_string());
            }
        }
        let (Some(&a), Some(&b)) = (a, b) else { continue };
        stats.both_known += 1;
        if a == b {
            stats.self_loops += 1;
        } else if !seen.insert((a, b)) {
            stats.duplicates += 1;
        } else {
            edges.push((a, b));
        }
    }
    stats.kept = edges.len();
    Ok(TapeGraph { papers, edges, stats, unknown_ids: unknown.len(), texts_path, cites_path })
}

impl TapeGraph {
    /// `tag_nodes` (no time: TopoRAG then splits at random) and `tag_edges`.
    pub fn to_tables(&self) -> Result<DatasetTables> {
        crate::tag::TagGraph {
            nodes: self
                .papers
                .iter()
                .map(|p| crate::tag::TagNode { key: p.key.clone(), text: p.text.clone(), label: Some(p.label.clone()), time: None })
                .collect(),
            edges: self.edges.clone(),
            nodes_path: self.texts_path.clone(),
            edges_path: self.cites_path.clone(),
        }
        .to_tables()
    }
}
