//! The layout rule of ARCHITECTURE.md, checked on the sources: a stage module never imports another
//! stage module, the shared layer imports no family, and modules import each other without cycles.
//! The module graph is read from the code as `tests/layout/modules.rs` says.
#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;

#[path = "../../tests/layout/modules.rs"]
mod modules;

use modules::{cycles, graph, sources};

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
    out.extend(cycles(&g));
    out
}

fn stage_modules() -> Vec<String> {
    crate::registry::all().iter().map(|s| s.info().module.replacen("tgrag_stages", "crate", 1)).collect()
}

#[test]
fn no_stage_module_imports_another_and_there_are_no_cycles() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    sources(&root, &root, "crate::layout_tests", &mut files)?;
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
