//! Cora and PubMed with text, in the layouts TAPE (He et al. 2024, `core/data_utils/load_{cora,pubmed}.py`)
//! reads; TopoRAG uses these texts.
//!
//! **Cora** (`cora_orig/`): `cora.content` (LINQS: paper id, 1,433 word indicators, class label,
//! whitespace-separated), `cora.cites` (`cited citing`), `mccallum/cora/papers` (`paper id \t file
//! name \t …`) and `mccallum/cora/extractions/<file name>`, whose last `Title:` and last `Abstract:`
//! lines are the text, joined by a newline as TAPE does (`ti + '\n' + ab`, prefixes kept).
//!
//! **PubMed** (`PubMed_orig/`): `data/Pubmed-Diabetes.NODE.paper.tab` (two header lines, then
//! `pmid \t label=k \t …`), `data/Pubmed-Diabetes.DIRECTED.cites.tab` (two header lines, then
//! `id \t paper:citing \t | \t paper:cited`) and `pubmed.json` (a list of `{"PMID", "TI", "AB"}`
//! records); text = `Title: <TI>\nAbstract: <AB>` with missing fields as empty strings. Records are
//! matched to nodes by PMID (TAPE relies on the file order; both agree on the released files).
//!
//! Nodes are numbered in `.content` / `NODE.paper.tab` order with the paper id as key; edges are
//! citing → cited, self-citations and repeats dropped, lines naming unknown papers skipped.

use std::collections::HashMap;
use std::path::Path;

use super::{TagGraph, TagNode, dedup, lines, read_text, require};
use crate::error::{DatasetError, Result};

/// Loads TAPE's `cora_orig` folder.
pub fn load_cora(dir: &Path) -> Result<TagGraph> {
    let content_path = require(dir, &["cora.content", "cora/cora.content"])?;
    let cites_path = require(dir, &["cora.cites", "cora/cora.cites"])?;
    let papers_path = require(dir, &["mccallum/cora/papers", "papers"])?;
    let extractions = papers_path.parent().map(|p| p.join("extractions")).unwrap_or_default();

    let content = read_text(&content_path)?;
    let mut keys = Vec::new();
    let mut labels = Vec::new();
    for (line, l) in lines(&content) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 2 {
            return Err(DatasetError::malformed(&content_path, format!("line {line}"), "expected `paper_id features… label`"));
        }
        keys.push(f[0].to_string());
        labels.push(f[f.len() - 1].to_string());
    }
    let index = key_index(&keys, &content_path)?;

    let papers = read_text(&papers_path)?;
    let mut file_of: HashMap<&str, &str> = HashMap::new();
    for (line, l) in lines(&papers) {
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 2 {
            return Err(DatasetError::malformed(&papers_path, format!("line {line}"), "expected `paper_id \\t file name \\t …`"));
        }
        file_of.insert(f[0], f[1]);
    }
    let mut nodes = Vec::with_capacity(keys.len());
    for (key, label) in keys.iter().zip(labels) {
        let file = file_of.get(key.as_str()).ok_or_else(|| {
            DatasetError::malformed(
                &papers_path,
                "file",
                format!("paper `{}` of {} has no line here", crate::raw::quote(key), content_path.display()),
            )
        })?;
        let path = extractions.join(file);
        let body = read_text(&path)?;
        let (mut ti, mut ab) = ("", "");
        for (_, l) in lines(&body) {
            if l.contains("Title:") {
                ti = l;
            }
            if l.contains("Abstract:") {
                ab = l;
            }
        }
        nodes.push(TagNode { key: key.clone(), text: format!("{ti}\n{ab}"), label: Some(label), time: None });
    }

    let cites = read_text(&cites_path)?;
    let mut edges = Vec::new();
    for (line, l) in lines(&cites) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let [cited, citing] = f[..] else {
            return Err(DatasetError::malformed(
                &cites_path,
                format!("line {line}"),
                format!("{} fields, expected 2 (cited citing)", f.len()),
            ));
        };
        if let (Some(&a), Some(&b)) = (index.get(citing), index.get(cited)) {
            edges.push((a, b));
        }
    }
    Ok(TagGraph { nodes, edges: dedup(edges), nodes_path: content_path, edges_path: cites_path })
}

/// Loads TAPE's `PubMed_orig` folder.
pub fn load_pubmed(dir: &Path) -> Result<TagGraph> {
    let node_path = require(dir, &["data/Pubmed-Diabetes.NODE.paper.tab", "Pubmed-Diabetes.NODE.paper.tab"])?;
    let cites_path = require(dir, &["data/Pubmed-Diabetes.DIRECTED.cites.tab", "Pubmed-Diabetes.DIRECTED.cites.tab"])?;
    let json_path = require(dir, &["pubmed.json"])?;

    let (keys, labels) = pubmed_labels(&node_path)?;
    let index = key_index(&keys, &node_path)?;
    let texts = pubmed_texts(&json_path, &index, keys.len())?;
    let mut nodes = Vec::with_capacity(keys.len());
    for ((key, label), text) in keys.iter().zip(labels).zip(texts) {
        let text = text.ok_or_else(|| {
            DatasetError::malformed(&json_path, "records", format!("no record for PMID {key} of {}", node_path.display()))
        })?;
        nodes.push(TagNode { key: key.clone(), text, label: Some(label), time: None });
    }
    let edges = pubmed_edges(&cites_path, &index)?;
    Ok(TagGraph { nodes, edges: dedup(edges), nodes_path: node_path, edges_path: cites_path })
}

/// `NODE.paper.tab` after its two header lines: each paper's PMID and `label=<int>`, in file order.
fn pubmed_labels(node_path: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let node_text = read_text(node_path)?;
    let mut keys = Vec::new();
    let mut labels = Vec::new();
    for (line, l) in lines(&node_text).skip(2) {
        let f: Vec<&str> = l.trim().split('\t').collect();
        let label = f.get(1).and_then(|x| x.strip_prefix("label=")).filter(|x| x.parse::<u32>().is_ok()).ok_or_else(|| {
            DatasetError::malformed(
                node_path,
                format!("line {line}, field 2"),
                format!("`{}` is not `label=<int>`", crate::raw::quote(f.get(1).unwrap_or(&""))),
            )
        })?;
        keys.push(f[0].to_string());
        labels.push(label.to_string());
    }
    Ok((keys, labels))
}

/// `pubmed.json`'s records matched to nodes by PMID: each known node's `Title: … Abstract: …` text
/// (`None` where no record names it).
fn pubmed_texts(json_path: &Path, index: &HashMap<&str, u32>, n: usize) -> Result<Vec<Option<String>>> {
    let records: Vec<serde_json::Value> = serde_json::from_str(&read_text(json_path)?).map_err(|e| {
        DatasetError::malformed(
            json_path,
            format!("line {}, column {}", e.line(), e.column()),
            format!("expected a JSON list of records: {e}"),
        )
    })?;
    let mut texts: Vec<Option<String>> = vec![None; n];
    for (r, rec) in records.iter().enumerate() {
        let field = |name: &str| -> Result<String> {
            match rec.get(name) {
                None | Some(serde_json::Value::Null) => Ok(String::new()),
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(DatasetError::malformed(
                    json_path,
                    format!("record {r}, field {name}"),
                    format!("expected a string, found {other}"),
                )),
            }
        };
        let pmid = match rec.get("PMID") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            other => {
                return Err(DatasetError::malformed(
                    json_path,
                    format!("record {r}, field PMID"),
                    format!("expected a PMID, found {other:?}"),
                ));
            }
        };
        if let Some(&i) = index.get(pmid.as_str()) {
            texts[i as usize] = Some(super::title_abstract(&field("TI")?, &field("AB")?));
        }
    }
    Ok(texts)
}

/// `DIRECTED.cites.tab` after its two header lines: citing → cited between known papers.
fn pubmed_edges(cites_path: &Path, index: &HashMap<&str, u32>) -> Result<Vec<(u32, u32)>> {
    let cites = read_text(cites_path)?;
    let mut edges = Vec::new();
    for (line, l) in lines(&cites).skip(2) {
        let f: Vec<&str> = l.trim().split('\t').collect();
        if f.len() != 4 || !f[1].starts_with("paper:") || !f[3].starts_with("paper:") {
            return Err(DatasetError::malformed(
                cites_path,
                format!("line {line}"),
                "expected `id \\t paper:<citing> \\t | \\t paper:<cited>`",
            ));
        }
        let (citing, cited) = (&f[1]["paper:".len()..], &f[3]["paper:".len()..]);
        if let (Some(&a), Some(&b)) = (index.get(citing), index.get(cited)) {
            edges.push((a, b));
        }
    }
    Ok(edges)
}

fn key_index<'a>(keys: &'a [String], path: &Path) -> Result<HashMap<&'a str, u32>> {
    let mut index = HashMap::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        if index.insert(k.as_str(), i as u32).is_some() {
            return Err(DatasetError::malformed(
                path,
                format!("record {}", i + 1),
                format!("paper id `{}` appears twice", crate::raw::quote(k)),
            ));
        }
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestResult, malformed_at, write};

    fn cora(dir: &Path) -> TestResult {
        write(dir, "cora.content", b"35\t0\t1\t0\tTheory\n1033\t1\t0\t0\tNeural_Networks\n77\t0\t0\t1\tTheory\n")?;
        write(dir, "cora.cites", b"35\t1033\n35\t77\n1033\t77\n35\t1033\n77\t77\n999\t35\n")?;
        write(dir, "mccallum/cora/papers", b"35\ta.txt\tcitation a\n1033\tb.txt\tx\n77\tc.txt\ty\n")?;
        write(dir, "mccallum/cora/extractions/a.txt", b"URL: x\nTitle: Old title\nTitle: Learning trees\nAbstract: We learn trees.\n")?;
        write(dir, "mccallum/cora/extractions/b.txt", b"Title: Nets\nAbstract: Deep nets.\r\n")?;
        write(dir, "mccallum/cora/extractions/c.txt", b"Title: No abstract here\n")?;
        Ok(())
    }

    #[test]
    fn cora_joins_text_labels_and_citations_as_tape_does() -> TestResult {
        let dir = tempfile::tempdir()?;
        cora(dir.path())?;
        let g = load_cora(dir.path())?;
        let keys: Vec<&str> = g.nodes.iter().map(|n| n.key.as_str()).collect();
        assert_eq!(keys, ["35", "1033", "77"]);
        assert_eq!(g.nodes[0].text, "Title: Learning trees\nAbstract: We learn trees.");
        assert_eq!(g.nodes[1].text, "Title: Nets\nAbstract: Deep nets.");
        assert_eq!(g.nodes[2].text, "Title: No abstract here\n");
        assert_eq!(g.nodes[1].label.as_deref(), Some("Neural_Networks"));
        // `cited citing`: 1033 cites 35, 77 cites 35, 77 cites 1033; repeat, self-cite and unknown dropped.
        assert_eq!(g.edges, vec![(1, 0), (2, 0), (2, 1)]);
        let t = g.to_tables()?;
        assert_eq!(t.get("tag_nodes").ok_or("no tag_nodes")?.batch.num_rows(), 3);
        Ok(())
    }

    #[test]
    fn cora_errors_name_the_file_and_line() -> TestResult {
        let dir = tempfile::tempdir()?;
        cora(dir.path())?;
        let p = write(dir.path(), "cora.cites", b"35\t1033\n35 1033 77\n")?;
        let (path, at, _) = malformed_at(load_cora(dir.path()).err().ok_or("bad cites accepted")?)?;
        assert_eq!((path, at.as_str()), (p, "line 2"));
        cora(dir.path())?;
        let p = write(dir.path(), "mccallum/cora/papers", b"35\ta.txt\n1033\tb.txt\n")?;
        let (path, _, why) = malformed_at(load_cora(dir.path()).err().ok_or("missing paper accepted")?)?;
        assert!(path == p && why.contains("`77`"), "{why}");
        cora(dir.path())?;
        write(dir.path(), "mccallum/cora/extractions/b.txt", b"Title: \xc3\x28\n")?;
        let (path, at, _) = malformed_at(load_cora(dir.path()).err().ok_or("bad UTF-8 accepted")?)?;
        assert!(path.ends_with("b.txt") && at.starts_with("line 1"), "{at}");
        Ok(())
    }

    fn pubmed(dir: &Path) -> TestResult {
        write(dir, "data/Pubmed-Diabetes.NODE.paper.tab", b"NODE\tpaper\ncat=numeric:w-rat:0.0\tsummary\n12187484\tlabel=1\tw-rat=0.03\tsummary=a\n2344352\tlabel=3\tw-rat=0.1\n14654069\tlabel=2\n")?;
        write(
            dir,
            "data/Pubmed-Diabetes.DIRECTED.cites.tab",
            b"DIRECTED\tcites\nNO_FEATURES\n33824\tpaper:12187484\t|\tpaper:2344352\n33825\tpaper:14654069\t|\tpaper:2344352\n1\tpaper:1\t|\tpaper:2344352\n",
        )?;
        write(dir, "pubmed.json", br#"[{"PMID": "2344352", "TI": "Insulin", "AB": "About insulin."}, {"PMID": 12187484, "TI": "Rats", "AB": null}, {"PMID": "14654069", "TI": "Type 2"}, {"PMID": "5", "TI": "unused"}]"#)?;
        Ok(())
    }

    #[test]
    fn pubmed_matches_records_by_pmid() -> TestResult {
        let dir = tempfile::tempdir()?;
        pubmed(dir.path())?;
        let g = load_pubmed(dir.path())?;
        let got: Vec<(&str, &str, Option<&str>)> = g.nodes.iter().map(|n| (n.key.as_str(), n.text.as_str(), n.label.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("12187484", "Title: Rats\nAbstract: ", Some("1")),
                ("2344352", "Title: Insulin\nAbstract: About insulin.", Some("3")),
                ("14654069", "Title: Type 2\nAbstract: ", Some("2")),
            ]
        );
        assert_eq!(g.edges, vec![(0, 1), (2, 1)]);
        Ok(())
    }

    #[test]
    fn pubmed_errors_name_the_file_and_field() -> TestResult {
        let dir = tempfile::tempdir()?;
        pubmed(dir.path())?;
        write(dir.path(), "pubmed.json", br#"[{"PMID": "2344352", "TI": 7}]"#)?;
        let (_, at, _) = malformed_at(load_pubmed(dir.path()).err().ok_or("wrong type accepted")?)?;
        assert_eq!(at, "record 0, field TI");
        write(dir.path(), "pubmed.json", br#"[{"PMID": "2344352", "TI": "x""#)?;
        let (path, at, _) = malformed_at(load_pubmed(dir.path()).err().ok_or("truncated JSON accepted")?)?;
        assert!(path.ends_with("pubmed.json") && at.starts_with("line 1"), "{at}");
        pubmed(dir.path())?;
        write(dir.path(), "data/Pubmed-Diabetes.NODE.paper.tab", b"NODE\tpaper\nh\n1\tlabel=x\n")?;
        let (_, at, _) = malformed_at(load_pubmed(dir.path()).err().ok_or("bad label accepted")?)?;
        assert_eq!(at, "line 3, field 2");
        Ok(())
    }
}
