//! The layout rule of ARCHITECTURE.md, checked on the sources: a stage module never imports another
//! stage module, the shared layer imports no family, and modules import each other without cycles.
//! References are read from the code (comments removed): `use crate::…` trees (braces expanded),
//! inline `crate::a::b` paths and `super::x` siblings, each resolved to the longest known module.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`crate::kb::mor`) of a source file relative to `src/`.
fn module_of(rel: &Path) -> String {
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

/// Every `crate::…` path a source refers to (relative to `crate`), and its `super::x` names.
fn references(src: &str) -> (Vec<String>, Vec<String>) {
    let code = code(src);
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        expand(&code[i + "crate::".len()..], "", &mut paths);
    }
    let mut supers = Vec::new();
    for (i, _) in code.match_indices("super::") {
        let rest: String = code[i + "super::".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !rest.is_empty() {
            supers.push(rest);
        }
    }
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
fn graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
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

/// The modules below the shared layer: the stage layer's errors. They import nothing of the crate
/// (checked), so every layer may use them.
const BASE: &[&str] = &["crate::error"];

/// The module that lists every stage (`all()`): the one importer of stage modules.
const REGISTRY: &str = "crate::registry";

/// Violations of the rule: stage modules imported by other modules, family modules imported by the
/// shared layer, and import cycles.
fn violations(files: &BTreeMap<String, String>, stages: &[String]) -> Vec<String> {
    let g = graph(files);
    let mut out = Vec::new();
    for b in BASE {
        if let Some(to) = g.get(*b).filter(|to| !to.is_empty()) {
            out.push(format!("the base module {b} imports {}", to.iter().cloned().collect::<Vec<_>>().join(", ")));
        }
    }
    for (m, to) in &g {
        // The root declares modules; the registry is the one module that names every stage.
        if m == "crate" || m == REGISTRY {
            continue;
        }
        for t in to {
            if stages.contains(t) {
                out.push(format!("{m} imports the stage module {t}"));
            }
            if m.starts_with("crate::shared") && !t.starts_with("crate::shared") && !BASE.contains(&t.as_str()) {
                out.push(format!("the shared layer module {m} imports {t}"));
            }
        }
    }
    // Cycles: depth-first search over the graph without the crate root.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
        out: &mut Vec<String>,
    ) {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for t in g.get(m).into_iter().flatten() {
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
    let mut state = BTreeMap::new();
    for m in g.keys().filter(|m| *m != "crate") {
        if !state.contains_key(m.as_str()) {
            visit(m, &g, &mut state, &mut Vec::new(), &mut out);
        }
    }
    out
}

/// Every `.rs` file under `dir`, by module path. A file outside `root` cannot occur (the walk starts
/// at `root`); I/O errors are returned to the test, which reports them.
fn sources(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let p: PathBuf = e.path();
        if p.is_dir() {
            sources(&p, root, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            let Ok(rel) = p.strip_prefix(root) else { continue };
            let module = module_of(rel);
            // This checker names modules in its own test data.
            if module != "crate::layout_tests" {
                out.insert(module, std::fs::read_to_string(&p)?);
            }
        }
    }
    Ok(())
}

fn stage_modules() -> Vec<String> {
    crate::registry::all().iter().map(|s| s.info().module.replacen("tgrag_stages", "crate", 1)).collect()
}

#[test]
fn no_stage_module_imports_another_and_there_are_no_cycles() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    sources(&root, &root, &mut files)?;
    let stages = stage_modules();
    for s in &stages {
        assert!(files.contains_key(s), "stage module {s} has no source file");
    }
    let v = violations(&files, &stages);
    assert!(v.is_empty(), "layout rule broken (ARCHITECTURE.md):\n{}", v.join("\n"));
    Ok(())
}

#[test]
fn the_check_finds_a_stage_import_a_shared_import_and_a_cycle() {
    let files: BTreeMap<String, String> = [
        ("crate", "pub mod kb; pub mod shared;\npub use kb::{planning::PlanningStage, kb::Kb};"),
        ("crate::kb::mor", "use crate::kb::{planning::PlanningStage, kb::Kb};\nuse crate::{Result, StageError};"),
        ("crate::kb::planning", "// crate::kb::mor is only named in a comment\nuse crate::kb::kb::Kb;"),
        ("crate::kb::kb", "use super::paths::Hop;"),
        ("crate::kb::paths", "fn f() { crate::kb::kb::words(\"\"); }"),
        ("crate::shared::run", "use crate::kb::paths::Hop;"),
        // Through the root's re-export: the same imports as `crate::kb::planning::PlanningStage`.
        ("crate::shared::plots", "use crate::{PlanningStage, Result};"),
        ("crate::error", "use crate::kb::kb::Kb;"),
    ]
    .iter()
    .map(|(m, s)| (m.to_string(), s.to_string()))
    .collect();
    let stages = vec!["crate::kb::mor".to_string(), "crate::kb::planning".to_string()];
    let v = violations(&files, &stages);
    assert!(v.contains(&"crate::kb::mor imports the stage module crate::kb::planning".to_string()), "{v:?}");
    assert!(v.iter().any(|x| x.starts_with("the shared layer module crate::shared::run imports crate::kb::paths")), "{v:?}");
    assert!(v.iter().any(|x| x.starts_with("import cycle") && x.contains("crate::kb::kb") && x.contains("crate::kb::paths")), "{v:?}");
    assert!(!v.iter().any(|x| x.starts_with("crate::kb::planning imports")), "comments are not imports: {v:?}");
    assert!(v.contains(&"crate::shared::plots imports the stage module crate::kb::planning".to_string()), "{v:?}");
    assert!(v.contains(&"the shared layer module crate::shared::plots imports crate::kb::planning".to_string()), "{v:?}");
    assert!(v.contains(&"the base module crate::error imports crate::kb::kb".to_string()), "{v:?}");
    assert_eq!(v.len(), 6, "{v:?}");
}
