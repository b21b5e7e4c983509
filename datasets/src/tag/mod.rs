//! Text-attributed graphs in the raw layouts their papers ship (TopoRAG's datasets other than
//! CiteSeer and Enron, which have [`crate::tape`] and [`crate::enron`]):
//!
//! * [`planetoid`]: Cora and PubMed as TAPE reads them (the LINQS / Planetoid files plus the texts
//!   TAPE joins to them);
//! * [`ogb`]: ogbn-arxiv and ogbn-products in OGB's raw layout (`raw/*.csv.gz`, `mapping/*.csv.gz`)
//!   plus the text files OGB and TAPE use (`titleabs.tsv`, Amazon-3M `trn.json`/`tst.json`);
//! * [`reviews`]: review graphs (Amazon 2018 JSON lines for Book, Music and Pantry; McAuley's
//!   Epinions Python-literal lines): a node per review, an edge between two reviews of the same
//!   customer or the same product.
//!
//! Each loader returns a [`TagGraph`], written as `tag_nodes` and `tag_edges`. Loaders keep every
//! node; the paper's length thresholds are applied by the TopoRAG split stage.

pub mod ogb;
pub mod planetoid;
pub mod reviews;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::Int64Array;
use tgrag_schemas::tables;

use crate::DatasetTables;
use crate::error::{DatasetError, Result};
use crate::raw::{Tables, opt_strs, strs, u32s};

/// One node of a text-attributed graph.
#[derive(Debug, Clone, PartialEq)]
pub struct TagNode {
    /// The dataset's own id (paper id, review key).
    pub key: String,
    pub text: String,
    pub label: Option<String>,
    /// Year or Unix time, when the dataset has one.
    pub time: Option<i64>,
}

/// A loaded text-attributed graph: nodes in id order and `(src, dst)` edges.
#[derive(Debug, Clone)]
pub struct TagGraph {
    pub nodes: Vec<TagNode>,
    pub edges: Vec<(u32, u32)>,
    /// The files the node and edge tables came from (validation errors name them).
    pub nodes_path: PathBuf,
    pub edges_path: PathBuf,
}

impl TagGraph {
    /// `tag_nodes` (no split yet) and `tag_edges`.
    pub fn to_tables(&self) -> Result<DatasetTables> {
        let mut t = Tables::new();
        let n = self.nodes.len() as u32;
        t.push(
            &tables::TAG_NODES,
            &self.nodes_path,
            vec![
                u32s(0..n),
                strs(self.nodes.iter().map(|p| p.text.as_str())),
                opt_strs(self.nodes.iter().map(|p| Some(p.key.as_str()))),
                opt_strs(self.nodes.iter().map(|p| p.label.as_deref())),
                Arc::new(Int64Array::from(self.nodes.iter().map(|p| p.time).collect::<Vec<_>>())),
                opt_strs(self.nodes.iter().map(|_| None::<&str>)),
            ],
        )?;
        t.push(&tables::TAG_EDGES, &self.edges_path, vec![u32s(self.edges.iter().map(|e| e.0)), u32s(self.edges.iter().map(|e| e.1))])?;
        Ok(t.finish())
    }
}

/// A file as UTF-8, gunzipped first when its name ends in `.gz`, without its byte order mark
/// ([`crate::raw::text_of`]). A truncated or corrupt gzip stream, NUL bytes and invalid UTF-8 are
/// errors naming the file (and the line, for the last two).
pub fn read_text(path: &Path) -> Result<String> {
    let is_gz = path.extension().is_some_and(|e| e == "gz");
    if !is_gz {
        return crate::raw::read_utf8(path);
    }
    let file = crate::raw::open_regular(path)?;
    let mut bytes = Vec::new();
    flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file))
        .read_to_end(&mut bytes)
        .map_err(|e| DatasetError::malformed(path, "gzip stream", format!("cannot decompress: {e} (truncated or not gzip?)")))?;
    crate::raw::text_of(bytes, path).map_err(|e| match e {
        DatasetError::Malformed { path, at, reason } => DatasetError::Malformed { path, at: format!("{at} (after gunzip)"), reason },
        other => other,
    })
}

/// The first of `names` (each tried as given and with `.gz`) that exists under `dir`.
pub fn find(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().flat_map(|n| [dir.join(n), dir.join(format!("{n}.gz"))]).find(|p| p.is_file())
}

/// [`find`], or an error naming the folder and what was looked for.
pub fn require(dir: &Path, names: &[&str]) -> Result<PathBuf> {
    find(dir, names).ok_or_else(|| DatasetError::malformed(dir, "folder", format!("none of {} (or .gz) here", names.join(", "))))
}

/// Lines of a text without their line ends, numbered from 1, skipping blank lines.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n').enumerate().map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l))).filter(|(_, l)| !l.trim().is_empty())
}

/// Sorted, de-duplicated edges without self-loops, kept in first-seen order.
pub(crate) fn dedup(edges: impl IntoIterator<Item = (u32, u32)>) -> Vec<(u32, u32)> {
    let mut seen = std::collections::HashSet::new();
    edges.into_iter().filter(|&(a, b)| a != b && seen.insert((a, b))).collect()
}

/// TAPE's text of a paper: `Title: <title>\nAbstract: <abstract>`.
pub fn title_abstract(title: &str, abstract_: &str) -> String {
    format!("Title: {title}\nAbstract: {abstract_}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestResult, malformed_at, write};

    #[test]
    fn gzip_files_are_read_and_broken_ones_are_named() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut enc, b"0,1\n1,2\n")?;
        let gz = enc.finish()?;
        let p = write(dir.path(), "edge.csv.gz", &gz)?;
        assert_eq!(read_text(&p)?, "0,1\n1,2\n");
        assert_eq!(find(dir.path(), &["edge.csv"]), Some(p));
        let cut = write(dir.path(), "cut.csv.gz", &gz[..gz.len() - 6])?;
        let (path, at, _) = malformed_at(read_text(&cut).err().ok_or("truncated gzip accepted")?)?;
        assert_eq!((path, at.as_str()), (cut, "gzip stream"));
        let bad = write(dir.path(), "bad.txt", b"ok\n\xff\n")?;
        let (_, at, why) = malformed_at(read_text(&bad).err().ok_or("bad UTF-8 accepted")?)?;
        assert!(at.starts_with("line 2") && why.contains("UTF-8"), "{at}: {why}");
        Ok(())
    }

    #[test]
    fn dedup_drops_loops_and_repeats_in_order() {
        assert_eq!(dedup([(1, 2), (2, 2), (0, 1), (1, 2), (2, 1)]), vec![(1, 2), (0, 1), (2, 1)]);
    }
}
