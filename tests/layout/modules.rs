//! The module graph of a crate, read from its sources, for the layout tests of `tgrag-stages` and
//! `tgrag-models` (each includes this file with `#[path]`). References are read from the code
//! (comments removed): `use crate::…` trees (braces expanded), inline `crate::a::b` paths and
//! `super::…` paths and trees, each resolved to the longest known module; a name the crate root
//! re-exports resolves to the module that defines it. A module's references to its own ancestors
//! are left out (a child may use its parent's items).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`crate::kb::mor`) of a source file relative to `src/`.
pub fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    std::iter::once("crate".to_string()).chain(parts).collect::<Vec<_>>().join("::")
}

/// The code of a source file without comments (string contents kept, they hold no paths we read).
fn code(src: &str) -> String {
    src.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

/// Expands a use tree starting at `s` (just after `crate::`): `a::b::{c, d::e}` → `a::b::c`, `a::b::d::e`.
fn expand(s: &str, prefix: &str, out: &mut Vec<String>) -> usize {
    let bytes: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut seg = String::new();
    let mut path = prefix.to_string();
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_alphanumeric() || c == '_' || c == '*' {
            seg.push(c);
            i += 1;
        } else if c == ':' {
            if !seg.is_empty() {
                path = if path.is_empty() { seg.clone() } else { format!("{path}::{seg}") };
                seg.clear();
            }
            i += 1;
        } else if c == '{' {
            i += 1;
            loop {
                while i < bytes.len() && (bytes[i].is_whitespace() || bytes[i] == ',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == '}' {
                    i += 1;
                    break;
                }
                i += expand(&s[s.char_indices().nth(i).map_or(s.len(), |(b, _)| b)..], &path, out);
            }
            return i;
        } else if c.is_whitespace() && seg.is_empty() && !path.is_empty() && bytes.get(i + 1).is_some_and(|&n| n == ':' || n == '{') {
            i += 1;
        } else {
            break;
        }
    }
    if !seg.is_empty() && seg != "*" {
        path = if path.is_empty() { seg } else { format!("{path}::{seg}") };
    }
    out.push(path);
    i
}

/// Whether the match of a path keyword at `i` starts a path (not the tail of a longer name or of
/// `super::super::`).
fn starts_path(code: &str, i: usize) -> bool {
    !(i > 0 && code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':'))
}

/// Every `crate::…` path a source refers to (relative to `crate`), and its `super::…` paths
/// (relative to the parent module).
fn references(src: &str) -> (Vec<String>, Vec<String>) {
    let code = code(src);
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if starts_path(&code, i) {
            expand(&code[i + "crate::".len()..], "", &mut paths);
        }
    }
    let mut supers = Vec::new();
    for (i, _) in code.match_indices("super::") {
        // `super::super::x`: the grandparent's, which an ancestor edge would be; left out.
        if starts_path(&code, i) && !code[i + "super::".len()..].starts_with("super::") {
            expand(&code[i + "super::".len()..], "", &mut supers);
        }
    }
    supers.retain(|s| !s.is_empty());
    (paths, supers)
}

/// The crate root's re-exports: name → the path it stands for (`StageInfo` →
/// `shared::stage_info::StageInfo`), read from its `pub use` trees.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let code = code(root);
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("pub use ") {
        expand(&code[i + "pub use ".len()..], "", &mut paths);
    }
    paths.into_iter().filter_map(|p| p.rsplit_once("::").map(|(_, name)| (name.to_string(), p.clone()))).collect()
}

/// Module → the modules it refers to, each resolved to the longest known module; a name the crate
/// root re-exports (`crate::StageInfo`) resolves to the module that defines it, so no edge needs
/// dropping: the root itself only declares modules and re-exports.
pub fn graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    let names = files.get("crate").map(|r| reexports(r)).unwrap_or_default();
    let resolve = |path: &str| -> Option<String> {
        let path = match path.split_once("::").map_or((path, ""), |(a, b)| (a, b)) {
            (first, rest) if names.contains_key(first) => {
                if rest.is_empty() {
                    names[first].clone()
                } else {
                    format!("{}::{rest}", names[first])
                }
            }
            _ => path.to_string(),
        };
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|k| format!("crate::{}", parts[..k].join("::"))).find(|m| modules.contains(m.as_str()))
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, src) in files {
        let (paths, supers) = references(src);
        let parent = m.rsplit_once("::").map_or("crate", |p| p.0);
        let rel_parent = parent.strip_prefix("crate").unwrap_or(parent).trim_start_matches("::");
        let mut to: BTreeSet<String> = paths.iter().filter_map(|p| resolve(p)).collect();
        to.extend(supers.iter().filter_map(|s| resolve(&if rel_parent.is_empty() { s.clone() } else { format!("{rel_parent}::{s}") })));
        to.retain(|t| t != m && !m.starts_with(&format!("{t}::")));
        g.insert(m.clone(), to);
    }
    g
}

/// Every import cycle of `g` (the crate root left out: it declares modules), one line each:
/// `import cycle: a → b → a`.
pub fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
        out: &mut Vec<String>,
    ) {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for t in g.get(m).into_iter().flatten().filter(|t| *t != "crate") {
            match state.get(t.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|s| s == t).unwrap_or(0);
                    out.push(format!("import cycle: {} → {t}", stack[start..].join(" → ")));
                }
                0 => visit(t, g, state, stack, out),
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
    }
    let mut out = Vec::new();
    let mut state = BTreeMap::new();
    for m in g.keys().filter(|m| *m != "crate") {
        if !state.contains_key(m.as_str()) {
            visit(m, g, &mut state, &mut Vec::new(), &mut out);
        }
    }
    out
}

/// Every `.rs` file under `dir` by module path, but `skip` (the layout test itself, which names
/// modules in its test data). I/O errors are returned to the test, which reports them.
pub fn sources(dir: &Path, root: &Path, skip: &str, out: &mut BTreeMap<String, String>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let p: PathBuf = e.path();
        if p.is_dir() {
            sources(&p, root, skip, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            let Ok(rel) = p.strip_prefix(root) else { continue };
            let module = module_of(rel);
            if module != skip {
                out.insert(module, std::fs::read_to_string(&p)?);
            }
        }
    }
    Ok(())
}
