//! ogbn-arxiv and ogbn-products in OGB's raw layout (what `ogb.nodeproppred` downloads and unpacks),
//! plus the texts OGB links to.
//!
//! * `raw/edge.csv.gz`: `src,dst` per line, no header (arxiv: citing → cited; products: each
//!   co-purchase pair once).
//! * `raw/node-label.csv.gz`: one class index per line, one line per node (fixes the node count).
//! * `raw/node_year.csv.gz` (arxiv): one year per line → `time`.
//! * `mapping/nodeidx2paperid.csv.gz` (arxiv) or `mapping/nodeidx2asin.csv.gz` (products): header
//!   then `node idx,<id>` → `key`.
//! * `mapping/labelidx2arxivcategeory.csv.gz` / `labelidx2productcategory.csv.gz` (optional):
//!   header then `label idx,<name>` → label names (else the index).
//! * Texts, in the folder or under `raw/`: arxiv `titleabs.tsv` (`paper id \t title \t abstract`,
//!   OGB's file; lines whose id is not a number, such as a header, are skipped) → TAPE's
//!   `Title: …\nAbstract: …`; products: Amazon-3M `trn.json` / `tst.json` (JSON lines with `uid`,
//!   `title`, `content`) → `Product: <title>\nDescription: <content>` as TAPE's products text.
//!   A node without text gets an empty text (the split stage drops it by its length threshold).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{TagGraph, TagNode, dedup, find, lines, read_text, require};
use crate::error::{DatasetError, Result};

/// Which OGB graph a folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OgbGraph {
    Arxiv,
    Products,
}

impl OgbGraph {
    fn mapping(self) -> &'static str {
        match self {
            OgbGraph::Arxiv => "mapping/nodeidx2paperid.csv",
            OgbGraph::Products => "mapping/nodeidx2asin.csv",
        }
    }
    fn label_names(self) -> &'static str {
        match self {
            OgbGraph::Arxiv => "mapping/labelidx2arxivcategeory.csv",
            OgbGraph::Products => "mapping/labelidx2productcategory.csv",
        }
    }
}

/// Loads an OGB node-property folder (`ogbn_arxiv/` or `ogbn_products/`).
pub fn load(dir: &Path, which: OgbGraph) -> Result<TagGraph> {
    let labels_path = require(dir, &["raw/node-label.csv"])?;
    let edges_path = require(dir, &["raw/edge.csv"])?;
    let mapping_path = require(dir, &[which.mapping()])?;

    let labels = read_text(&labels_path)?;
    let mut label_idx = Vec::new();
    for (line, l) in lines(&labels) {
        label_idx.push(int::<i64>(l.trim(), &labels_path, line, "label")?);
    }
    let n = label_idx.len();
    let names = match find(dir, &[which.label_names()]) {
        Some(p) => two_columns(&p)?.into_iter().collect::<HashMap<_, _>>(),
        None => HashMap::new(),
    };

    let mut keys: Vec<Option<String>> = vec![None; n];
    for (idx, key) in two_columns(&mapping_path)? {
        let slot = keys.get_mut(idx as usize).ok_or_else(|| {
            DatasetError::malformed(&mapping_path, format!("node idx {idx}"), format!("beyond the {n} nodes of {}", labels_path.display()))
        })?;
        *slot = Some(key);
    }

    let times: Vec<Option<i64>> = match find(dir, &["raw/node_year.csv"]) {
        Some(p) => {
            let text = read_text(&p)?;
            let years = lines(&text).map(|(line, l)| int::<i64>(l.trim(), &p, line, "year").map(Some)).collect::<Result<Vec<_>>>()?;
            if years.len() != n {
                return Err(DatasetError::malformed(&p, "file", format!("{} years for {n} nodes", years.len())));
            }
            years
        }
        None => vec![None; n],
    };

    let texts = match which {
        OgbGraph::Arxiv => arxiv_texts(dir)?,
        OgbGraph::Products => product_texts(dir)?,
    };
    let nodes = (0..n)
        .map(|i| {
            let key = keys[i].clone().unwrap_or_else(|| i.to_string());
            let text = texts.get(key.as_str()).cloned().unwrap_or_default();
            let label = names.get(&label_idx[i]).cloned().unwrap_or_else(|| label_idx[i].to_string());
            TagNode { key, text, label: Some(label), time: times[i] }
        })
        .collect();

    let edges = read_edges(&edges_path, n)?;
    Ok(TagGraph { nodes, edges, nodes_path: labels_path, edges_path })
}

/// The edges of `raw/edge.csv(.gz)` (`src,dst` per line, no header) for a graph of `n` nodes:
/// de-duplicated, without self-loops, in first-seen order; an id `>= n` is an error.
pub fn read_edges(path: &Path, n: usize) -> Result<Vec<(u32, u32)>> {
    let edge_text = read_text(path)?;
    let mut edges = Vec::new();
    for (line, l) in lines(&edge_text) {
        let (a, b) = l.split_once(',').ok_or_else(|| DatasetError::malformed(path, format!("line {line}"), "expected `src,dst`"))?;
        let (a, b) = (int::<u32>(a.trim(), path, line, "src")?, int::<u32>(b.trim(), path, line, "dst")?);
        if a as usize >= n || b as usize >= n {
            return Err(DatasetError::malformed(path, format!("line {line}"), format!("node id beyond the {n} nodes")));
        }
        edges.push((a, b));
    }
    Ok(dedup(edges))
}

fn int<T: std::str::FromStr>(s: &str, path: &Path, line: usize, what: &str) -> Result<T> {
    s.parse()
        .map_err(|_| DatasetError::malformed(path, format!("line {line}"), format!("{what} `{}` is not an integer", crate::raw::quote(s))))
}

/// A `idx,value` CSV with a header line.
fn two_columns(path: &Path) -> Result<Vec<(i64, String)>> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (line, l) in lines(&text).skip(1) {
        let (a, b) = l.split_once(',').ok_or_else(|| DatasetError::malformed(path, format!("line {line}"), "expected `idx,value`"))?;
        out.push((int::<i64>(a.trim(), path, line, "idx")?, b.trim().to_string()));
    }
    Ok(out)
}

fn text_file(dir: &Path, name: &str) -> Option<PathBuf> {
    find(dir, &[name]).or_else(|| find(&dir.join("raw"), &[name]))
}

fn arxiv_texts(dir: &Path) -> Result<HashMap<String, String>> {
    let path = text_file(dir, "titleabs.tsv")
        .ok_or_else(|| DatasetError::malformed(dir, "folder", "no titleabs.tsv (or .gz), here or under raw/: OGB's arxiv texts"))?;
    let text = read_text(&path)?;
    let mut out = HashMap::new();
    for (line, l) in lines(&text) {
        let f: Vec<&str> = l.split('\t').collect();
        if f[0].trim().parse::<u64>().is_err() {
            continue;
        }
        let [id, title, abs] = f[..] else {
            return Err(DatasetError::malformed(
                &path,
                format!("line {line}"),
                format!("{} tab-separated fields, expected 3 (paper id, title, abstract)", f.len()),
            ));
        };
        out.insert(id.trim().to_string(), super::title_abstract(title, abs));
    }
    Ok(out)
}

fn product_texts(dir: &Path) -> Result<HashMap<String, String>> {
    let files: Vec<PathBuf> = ["trn.json", "tst.json"].iter().filter_map(|n| text_file(dir, n)).collect();
    if files.is_empty() {
        return Err(DatasetError::malformed(
            dir,
            "folder",
            "no trn.json / tst.json, here or under raw/: the Amazon-3M texts of ogbn-products are on Google Drive (TAPE links them), so `tgrag fetch products` fetches the graph only; put them in this folder",
        ));
    }
    let mut out = HashMap::new();
    for path in files {
        let text = read_text(&path)?;
        for (line, l) in lines(&text) {
            let v: serde_json::Value = serde_json::from_str(l)
                .map_err(|e| DatasetError::malformed(&path, format!("line {line}"), format!("not a JSON object: {e}")))?;
            let get = |k: &str| -> Result<String> {
                match v.get(k) {
                    Some(serde_json::Value::String(s)) => Ok(s.clone()),
                    None | Some(serde_json::Value::Null) if k != "uid" => Ok(String::new()),
                    other => Err(DatasetError::malformed(
                        &path,
                        format!("line {line}, field {k}"),
                        format!("expected a string, found {other:?}"),
                    )),
                }
            };
            out.insert(get("uid")?, format!("Product: {}\nDescription: {}", get("title")?, get("content")?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestResult, malformed_at, write};

    fn gz(body: &[u8]) -> TestResult<Vec<u8>> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut enc, body)?;
        Ok(enc.finish()?)
    }

    fn arxiv(dir: &Path) -> TestResult {
        write(dir, "raw/edge.csv.gz", &gz(b"1,0\n2,0\n2,1\n2,1\n")?)?;
        write(dir, "raw/node-label.csv.gz", &gz(b"4\n5\n4\n")?)?;
        write(dir, "raw/node_year.csv.gz", &gz(b"2013\n2015\n2019\n")?)?;
        write(dir, "mapping/nodeidx2paperid.csv.gz", &gz(b"node idx,paper id\n0,9657784\n1,39886162\n2,116214155\n")?)?;
        write(dir, "mapping/labelidx2arxivcategeory.csv.gz", &gz(b"label idx,arxiv category\n4,arxiv cs ai\n5,arxiv cs cl\n")?)?;
        write(dir, "titleabs.tsv", b"paper id\ttitle\tabstract\n9657784\tEvasion\tWe evade.\n39886162\tParsing\tWe parse.\n")?;
        Ok(())
    }

    #[test]
    fn arxiv_reads_ogb_raw_files_and_titleabs() -> TestResult {
        let dir = tempfile::tempdir()?;
        arxiv(dir.path())?;
        let g = load(dir.path(), OgbGraph::Arxiv)?;
        let got: Vec<(&str, &str, Option<&str>, Option<i64>)> =
            g.nodes.iter().map(|n| (n.key.as_str(), n.text.as_str(), n.label.as_deref(), n.time)).collect();
        assert_eq!(
            got,
            [
                ("9657784", "Title: Evasion\nAbstract: We evade.", Some("arxiv cs ai"), Some(2013)),
                ("39886162", "Title: Parsing\nAbstract: We parse.", Some("arxiv cs cl"), Some(2015)),
                ("116214155", "", Some("arxiv cs ai"), Some(2019)),
            ]
        );
        assert_eq!(g.edges, vec![(1, 0), (2, 0), (2, 1)]);
        Ok(())
    }

    #[test]
    fn ogb_errors_name_file_and_line() -> TestResult {
        let dir = tempfile::tempdir()?;
        arxiv(dir.path())?;
        let p = write(dir.path(), "raw/edge.csv.gz", &gz(b"1,0\n2,x\n")?)?;
        let (path, at, why) = malformed_at(load(dir.path(), OgbGraph::Arxiv).err().ok_or("bad edge accepted")?)?;
        assert!(path == p && at == "line 2" && why.contains("dst"), "{at}: {why}");
        write(dir.path(), "raw/edge.csv.gz", &gz(b"1,7\n")?)?;
        let (_, _, why) = malformed_at(load(dir.path(), OgbGraph::Arxiv).err().ok_or("out-of-range edge accepted")?)?;
        assert!(why.contains("beyond"), "{why}");
        arxiv(dir.path())?;
        let full = gz(b"2013\n2015\n2019\n")?;
        write(dir.path(), "raw/node_year.csv.gz", &full[..full.len() - 5])?;
        let (_, at, _) = malformed_at(load(dir.path(), OgbGraph::Arxiv).err().ok_or("truncated gzip accepted")?)?;
        assert_eq!(at, "gzip stream");
        Ok(())
    }

    #[test]
    fn products_take_amazon_3m_texts_by_asin() -> TestResult {
        let dir = tempfile::tempdir()?;
        write(dir.path(), "raw/edge.csv.gz", &gz(b"0,1\n")?)?;
        write(dir.path(), "raw/node-label.csv.gz", &gz(b"0\n1\n")?)?;
        write(dir.path(), "mapping/nodeidx2asin.csv.gz", &gz(b"node idx,asin\n0,B001\n1,B002\n")?)?;
        write(dir.path(), "raw/trn.json", b"{\"uid\": \"B001\", \"title\": \"Lamp\", \"content\": \"Bright.\"}\n")?;
        write(dir.path(), "raw/tst.json", b"{\"uid\": \"B002\", \"title\": \"Mug\"}\n")?;
        let g = load(dir.path(), OgbGraph::Products)?;
        assert_eq!(g.nodes[0].text, "Product: Lamp\nDescription: Bright.");
        assert_eq!(g.nodes[1].text, "Product: Mug\nDescription: ");
        assert_eq!(g.nodes[1].label.as_deref(), Some("1"));
        write(dir.path(), "raw/tst.json", b"{\"uid\": 3}\n")?;
        let (_, at, _) = malformed_at(load(dir.path(), OgbGraph::Products).err().ok_or("numeric uid accepted")?)?;
        assert_eq!(at, "line 1, field uid");
        Ok(())
    }
}
