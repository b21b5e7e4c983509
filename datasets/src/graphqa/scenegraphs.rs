//! SceneGraphs (GQA) as G-Retriever builds it: GQA's scene-graph JSON
//! (`{image_id: {width, height, objects: {object_id: {name, x, y, w, h, attributes, relations:
//! [{name, object}]}}}}`) and a GQA questions JSON (`{question_id: {imageId, question, answer, …}}`).
//!
//! The graph of an image is G-Retriever's `textualize_graph`: objects in file order are nodes with
//! text `name: N; attribute: a, b; (x,y,w,h): (x, y, w, h)` (no attribute part without attributes),
//! every relation of an object an edge from it to the related object. Each question gets its image's
//! graph; JSON key order is kept, since node ids follow it.

use std::path::Path;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::{GraphQaItem, TextGraph};
use crate::error::{DatasetError, Result};
use crate::raw::quote;

/// A JSON object with its key order kept (serde_json's map sorts keys in this build). A repeated key
/// keeps the place of its first occurrence and the value of its last, as Python's `json.load` does
/// (a `dict` built from the pairs in order).
#[derive(Debug, Clone)]
pub struct Ordered<T>(pub Vec<(String, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Ordered<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Ordered<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Self::Value, A::Error> {
                let mut out: Vec<(String, T)> = Vec::new();
                let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
                while let Some((k, v)) = m.next_entry::<String, T>()? {
                    match seen.get(&k) {
                        Some(&i) => out[i].1 = v,
                        None => {
                            seen.insert(k.clone(), out.len());
                            out.push((k, v));
                        }
                    }
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A coordinate as Python's `json.load` reads it: an integer of any size, or a float.
#[derive(Debug, Clone, PartialEq)]
pub enum Coord {
    /// The digits as written (Python's `int` has no size limit, so `str()` gives them back).
    Int(String),
    Float(f64),
}

/// Marks an integer token too large for 64 bits that [`big_ints_as_strings`] turned into a string.
const BIG_INT: char = '\0';

impl<'de> Deserialize<'de> for Coord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Coord;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Coord, E> {
                Ok(Coord::Int(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Coord, E> {
                Ok(Coord::Int(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Coord, E> {
                Ok(Coord::Float(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Coord, E> {
                match v.strip_prefix(BIG_INT) {
                    Some(digits) => Ok(Coord::Int(digits.to_string())),
                    None => Err(E::invalid_type(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// JSON text where every integer token that does not fit 64 bits (serde_json would read it as an
/// `f64` and lose digits: this build has no `arbitrary_precision`) is a string holding [`BIG_INT`] and
/// its digits, so that [`Coord`] keeps them as written. Strings are left as they are; the text only
/// grows after such a token (error columns on that line shift by 8 per token).
fn big_ints_as_strings(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let (mut i, mut copied, mut in_str) = (0usize, 0usize, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            match c {
                b'\\' => i += 1,
                b'"' => in_str = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_str = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                i += 1;
            }
            let tok = &text[start..i];
            let digits = tok.strip_prefix('-').unwrap_or(tok);
            let json_int = !digits.is_empty() && digits.bytes().all(|d| d.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
            if json_int && tok.parse::<i64>().is_err() && tok.parse::<u64>().is_err() {
                let o = out.get_or_insert_with(|| String::with_capacity(text.len() + 64));
                o.push_str(&text[copied..start]);
                o.push_str("\"\\u0000");
                o.push_str(tok);
                o.push('"');
                copied = i;
            }
            continue;
        }
        i += 1;
    }
    match out {
        Some(mut o) => {
            o.push_str(&text[copied..]);
            std::borrow::Cow::Owned(o)
        }
        None => std::borrow::Cow::Borrowed(text),
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Relation {
    pub name: String,
    pub object: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Object {
    pub name: String,
    pub x: Coord,
    pub y: Coord,
    pub w: Coord,
    pub h: Coord,
    #[serde(default)]
    pub attributes: Vec<String>,
    #[serde(default)]
    pub relations: Vec<Relation>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SceneGraph {
    pub objects: Ordered<Object>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    pub image_id: String,
    pub question: String,
    pub answer: String,
}

/// Python's `str()` of a JSON number as `json.load` returns it: an integer's digits as written, a
/// float's `repr`.
fn py_num(n: &Coord) -> String {
    match n {
        Coord::Int(s) => s.clone(),
        Coord::Float(f) => crate::pyrepr::float_repr(*f),
    }
}

/// G-Retriever's textualisation of one scene graph; `at` names the image in errors.
pub fn textualize(sg: &SceneGraph, path: &Path, at: &str) -> Result<TextGraph> {
    let index: std::collections::HashMap<&str, u32> = sg.objects.0.iter().enumerate().map(|(i, (k, _))| (k.as_str(), i as u32)).collect();
    let mut g = TextGraph::default();
    for (i, (_, o)) in sg.objects.0.iter().enumerate() {
        let mut text = format!("name: {}", o.name);
        if !o.attributes.is_empty() {
            text.push_str("; attribute: ");
            text.push_str(&o.attributes.join(", "));
        }
        text.push_str(&format!("; (x,y,w,h): ({}, {}, {}, {})", py_num(&o.x), py_num(&o.y), py_num(&o.w), py_num(&o.h)));
        g.nodes.push(text);
        for r in &o.relations {
            let dst = index.get(r.object.as_str()).ok_or_else(|| {
                DatasetError::malformed(
                    path,
                    format!("{at}, object {}", sg.objects.0[i].0),
                    format!("relation `{}` points to unknown object `{}`", quote(&r.name), quote(&r.object)),
                )
            })?;
            g.edges.push((i as u32, r.name.clone(), *dst));
        }
    }
    Ok(g)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = crate::raw::read_utf8(path)?;
    serde_json::from_str(&big_ints_as_strings(&text))
        .map_err(|e| DatasetError::malformed(path, format!("line {}, column {}", e.line(), e.column()), quote(&e.to_string())))
}

/// Questions over scene graphs: one item per question (in file order), split by `split_of`.
pub fn load(scene_graphs: &Path, questions: &[(&'static str, &Path)]) -> Result<Vec<GraphQaItem>> {
    let graphs: Ordered<SceneGraph> = read_json(scene_graphs)?;
    let by_image: std::collections::HashMap<&str, &SceneGraph> = graphs.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut cache: std::collections::HashMap<String, TextGraph> = std::collections::HashMap::new();
    let mut items = Vec::new();
    for &(split, qpath) in questions {
        let qs: Ordered<Question> = read_json(qpath)?;
        for (qid, q) in &qs.0 {
            let sg = by_image.get(q.image_id.as_str()).ok_or_else(|| {
                DatasetError::malformed(
                    qpath,
                    format!("question {qid}, field imageId"),
                    format!("image `{}` is not in {}", quote(&q.image_id), scene_graphs.display()),
                )
            })?;
            let g = match cache.get(q.image_id.as_str()) {
                Some(g) => g.clone(),
                None => {
                    let g = textualize(sg, scene_graphs, &format!("image {}", q.image_id))?;
                    cache.insert(q.image_id.clone(), g.clone());
                    g
                }
            };
            items.push(GraphQaItem {
                question: format!("Question: {}\n\nAnswer:", q.question),
                answer: q.answer.clone(),
                split,
                task: "scenegraphs",
                graph: g,
                source: scene_graphs.to_path_buf(),
                at: format!("image {} (of question {} in {})", quote(&q.image_id), quote(qid), qpath.display()),
            });
        }
    }
    Ok(items)
}

fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<std::path::PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))?;
    let mut v: Vec<_> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(suffix)))
        .collect();
    v.sort();
    Ok(v)
}

/// Every `*sceneGraphs.json` and `*questions.json` of a folder: questions in file order (files by
/// name), each with its image's graph, split 60/20/20 at random (seeded) as G-Retriever does.
pub fn load_dir(dir: &Path, seed: u64) -> Result<Vec<GraphQaItem>> {
    let sg_files = files_ending(dir, "sceneGraphs.json")?;
    let q_files = files_ending(dir, "questions.json")?;
    if sg_files.is_empty() || q_files.is_empty() {
        return Err(DatasetError::malformed(dir, "folder", "needs *sceneGraphs.json and *questions.json (GQA)"));
    }
    let mut graphs: std::collections::HashMap<String, (TextGraph, std::path::PathBuf)> = std::collections::HashMap::new();
    for f in &sg_files {
        let sgs: Ordered<SceneGraph> = read_json(f)?;
        for (image, sg) in &sgs.0 {
            let g = textualize(sg, f, &format!("image {image}"))?;
            graphs.insert(image.clone(), (g, f.clone()));
        }
    }
    let mut items = Vec::new();
    for f in &q_files {
        let qs: Ordered<Question> = read_json(f)?;
        for (qid, q) in &qs.0 {
            let (g, sg_file) = graphs.get(&q.image_id).ok_or_else(|| {
                DatasetError::malformed(
                    f,
                    format!("question {qid}, field imageId"),
                    format!("image `{}` is in no scene-graph file", quote(&q.image_id)),
                )
            })?;
            items.push(GraphQaItem {
                question: format!("Question: {}\n\nAnswer:", q.question),
                answer: q.answer.clone(),
                split: "train",
                task: "scenegraphs",
                graph: g.clone(),
                source: sg_file.clone(),
                at: format!("image {} (of question {} in {})", quote(&q.image_id), quote(qid), f.display()),
            });
        }
    }
    let splits = super::random_splits(items.len(), seed);
    for (it, s) in items.iter_mut().zip(splits) {
        it.split = s;
    }
    Ok(items)
}
