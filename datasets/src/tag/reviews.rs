//! Review graphs (TopoRAG §6.1: Book, Music, Pantry, Epinion): a node per review, an edge between two
//! reviews written by the same customer or posted on the same product.
//!
//! Input: every `*.json`, `*.jsonl` (optionally `.gz`) file of the folder, in name order, one review
//! per line, either
//! * Amazon 2018 (Ni et al. 2019) JSON: `reviewerID`, `asin`, `reviewText`, `unixReviewTime`,
//!   `overall` (e.g. `Prime_Pantry.json.gz`, `Digital_Music_5.json`, `Books_5.json`), or
//! * McAuley's Epinions lines, Python dict literals: `{'user': …, 'item': …, 'time': …,
//!   'review': …, 'stars': …}` (parsed as literals, never evaluated).
//!
//! Reviews without text are skipped. Nodes are numbered chronologically (time, then input order);
//! `fraction` < 1 keeps only the latest share (the paper keeps the latest 1% of Book). `time` is the
//! Unix time, `label` the rating, `key` `<customer>|<product>`. Edges (each pair once, `src < dst`)
//! form a clique per customer and per product, as the paper defines the graph.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{TagGraph, TagNode, lines, read_text};
use crate::error::{DatasetError, Result};
use crate::pyliteral::python_literal;

/// One review as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    pub user: String,
    pub item: String,
    pub time: i64,
    pub text: String,
    pub rating: Option<f64>,
}

/// The review files of a folder, in name order.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))?;
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            [".json", ".jsonl", ".json.gz", ".jsonl.gz"].iter().any(|s| n.ends_with(s))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Reads one file of reviews (format chosen per line: JSON, else a Python literal).
pub fn read(path: &Path) -> Result<Vec<Review>> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (line, l) in lines(&text) {
        let at = |field: &str| format!("line {line}, field {field}");
        let fields: serde_json::Map<String, Value> = match serde_json::from_str::<serde_json::Map<String, Value>>(l) {
            Ok(map) => map,
            Err(_) => match python_literal(l) {
                Ok(Value::Object(map)) => map,
                Ok(other) => return Err(DatasetError::malformed(path, format!("line {line}"), format!("expected a dict, found {other}"))),
                Err(why) => {
                    return Err(DatasetError::malformed(
                        path,
                        format!("line {line}"),
                        format!("neither a JSON object nor a Python dict literal: {why}"),
                    ));
                }
            },
        };
        let get = |names: &[&str]| names.iter().find_map(|n| fields.get(*n));
        let string = |names: &[&str]| -> Result<Option<String>> {
            match get(names) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(i)) if i.is_i64() => Ok(Some(i.to_string())),
                Some(other) => Err(DatasetError::malformed(path, at(names[0]), format!("expected a string, found {other}"))),
            }
        };
        let Some(text) = string(&["reviewText", "review"])?.filter(|t| !t.trim().is_empty()) else { continue };
        let user = string(&["reviewerID", "user"])?.ok_or_else(|| DatasetError::malformed(path, at("reviewerID/user"), "missing"))?;
        let item = string(&["asin", "item"])?.ok_or_else(|| DatasetError::malformed(path, at("asin/item"), "missing"))?;
        let time = get(&["unixReviewTime", "time"]).and_then(Value::as_i64).ok_or_else(|| {
            DatasetError::malformed(
                path,
                at("unixReviewTime/time"),
                format!("expected an integer Unix time, found {:?}", get(&["unixReviewTime", "time"])),
            )
        })?;
        let rating = match get(&["overall", "stars"]) {
            None | Some(Value::Null) => None,
            Some(Value::Number(x)) => x.as_f64(),
            Some(other) => return Err(DatasetError::malformed(path, at("overall/stars"), format!("expected a number, found {other}"))),
        };
        out.push(Review { user, item, time, text, rating });
    }
    Ok(out)
}

/// Builds the review graph from reviews in input order.
pub fn build(mut reviews: Vec<Review>, fraction: f64, nodes_path: &Path) -> TagGraph {
    reviews.sort_by_key(|r| r.time); // stable: input order among equal times
    let keep = ((reviews.len() as f64) * fraction.clamp(0.0, 1.0)).ceil() as usize;
    let reviews = reviews.split_off(reviews.len() - keep.min(reviews.len()));
    let mut groups: BTreeMap<(u8, &str), Vec<u32>> = BTreeMap::new();
    for (i, r) in reviews.iter().enumerate() {
        groups.entry((0, r.user.as_str())).or_default().push(i as u32);
        groups.entry((1, r.item.as_str())).or_default().push(i as u32);
    }
    let mut seen = HashSet::new();
    let mut edges = Vec::new();
    for members in groups.values() {
        for (k, &a) in members.iter().enumerate() {
            for &b in &members[k + 1..] {
                if seen.insert((a, b)) {
                    edges.push((a, b));
                }
            }
        }
    }
    edges.sort_unstable();
    let nodes = reviews
        .into_iter()
        .map(|r| TagNode {
            key: format!("{}|{}", r.user, r.item),
            text: r.text,
            label: r.rating.map(|x| format!("{x}")),
            time: Some(r.time),
        })
        .collect();
    TagGraph { nodes, edges, nodes_path: nodes_path.to_path_buf(), edges_path: nodes_path.to_path_buf() }
}

/// Loads every review file of `dir`.
pub fn load(dir: &Path, fraction: f64) -> Result<TagGraph> {
    let files = files(dir)?;
    let first =
        files.first().cloned().ok_or_else(|| DatasetError::malformed(dir, "folder", "no *.json / *.jsonl (.gz) review files here"))?;
    let mut all = Vec::new();
    for f in &files {
        all.extend(read(f)?);
    }
    Ok(build(all, fraction, &first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestResult, malformed_at, write};

    #[test]
    fn amazon_reviews_become_a_chronological_clique_graph() -> TestResult {
        let dir = tempfile::tempdir()?;
        write(
            dir.path(),
            "Prime_Pantry.json",
            concat!(
                r#"{"overall": 5.0, "reviewerID": "U1", "asin": "P1", "reviewText": "Great tea.", "unixReviewTime": 300}"#,
                "\n",
                r#"{"overall": 3.0, "reviewerID": "U2", "asin": "P1", "reviewText": "Fine tea.", "unixReviewTime": 100}"#,
                "\n",
                r#"{"overall": 4.0, "reviewerID": "U1", "asin": "P2", "reviewText": "Good salt.", "unixReviewTime": 200}"#,
                "\n",
                r#"{"overall": 1.0, "reviewerID": "U3", "asin": "P3", "unixReviewTime": 50}"#,
                "\n",
                r#"{"overall": 2.0, "reviewerID": "U3", "asin": "P2", "reviewText": "Meh salt.", "unixReviewTime": 400}"#,
                "\n"
            )
            .as_bytes(),
        )?;
        let g = load(dir.path(), 1.0)?;
        let order: Vec<(&str, Option<i64>, Option<&str>)> = g.nodes.iter().map(|n| (n.key.as_str(), n.time, n.label.as_deref())).collect();
        assert_eq!(
            order,
            [
                ("U2|P1", Some(100), Some("3")),
                ("U1|P2", Some(200), Some("4")),
                ("U1|P1", Some(300), Some("5")),
                ("U3|P2", Some(400), Some("2"))
            ]
        );
        // same customer U1: 1–2; same product P1: 0–2; P2: 1–3 (the text-less review is skipped).
        assert_eq!(g.edges, vec![(0, 2), (1, 2), (1, 3)]);
        let latest = load(dir.path(), 0.5)?;
        assert_eq!(latest.nodes.iter().map(|n| n.key.as_str()).collect::<Vec<_>>(), ["U1|P1", "U3|P2"]);
        assert!(latest.edges.is_empty());
        Ok(())
    }

    /// The reason a one-line `epinions.json` is refused with.
    fn load_err(dir: &Path, body: &[u8]) -> TestResult<String> {
        let sub = dir.join("bad");
        write(&sub, "epinions.json", body)?;
        let (_, _, why) = malformed_at(load(&sub, 1.0).err().ok_or("accepted")?)?;
        Ok(why)
    }

    #[test]
    fn epinions_python_literals_are_parsed_not_evaluated() -> TestResult {
        let dir = tempfile::tempdir()?;
        write(
            dir.path(),
            "epinions.json",
            b"{'user': 'ann', 'stars': 4.0, 'time': 1048723200, 'paid': 0.0, 'item': '81', 'review': \"It's \\\"fine\\\"\\n\\xe9t\\u00e9\"}\n{'user': 'bob', 'item': '81', 'time': 1, 'review': 'ok', 'stars': 2}\n",
        )?;
        let g = load(dir.path(), 1.0)?;
        assert_eq!(g.nodes[1].text, "It's \"fine\"\n\u{e9}t\u{e9}");
        assert_eq!(g.nodes[0].label.as_deref(), Some("2"));
        assert_eq!(g.edges, vec![(0, 1)]);
        let err = load_err(dir.path(), b"{'user': 'x', 'item': __import__('os')}\n")?;
        assert!(err.contains("not a literal"), "{err}");
        Ok(())
    }

    #[test]
    fn bad_review_lines_name_file_line_and_field() -> TestResult {
        let dir = tempfile::tempdir()?;
        let p = write(
            dir.path(),
            "a.json",
            b"{\"reviewerID\": \"U\", \"asin\": \"P\", \"reviewText\": \"x\", \"unixReviewTime\": \"soon\"}\n",
        )?;
        let (path, at, _) = malformed_at(load(dir.path(), 1.0).err().ok_or("string time accepted")?)?;
        assert_eq!((path, at.as_str()), (p.clone(), "line 1, field unixReviewTime/time"));
        write(dir.path(), "a.json", b"{'user': 'u', 'review': 'cut\n")?;
        let (_, at, why) = malformed_at(load(dir.path(), 1.0).err().ok_or("truncated literal accepted")?)?;
        assert!(at == "line 1" && why.contains("never closed"), "{at}: {why}");
        write(dir.path(), "a.json", b"{\"reviewerID\": 5, \"asin\": \"P\", \"reviewText\": [1], \"unixReviewTime\": 1}\n")?;
        let (_, at, _) = malformed_at(load(dir.path(), 1.0).err().ok_or("list text accepted")?)?;
        assert_eq!(at, "line 1, field reviewText");
        Ok(())
    }
}
