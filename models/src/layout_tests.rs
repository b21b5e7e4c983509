//! The layout of the models crate, checked on the sources: modules import each other without
//! cycles (the module graph read as `tests/layout/modules.rs` says), and the tools every engine
//! shares are defined once, outside the model files: the optimisers in [`crate::train::optim`],
//! the elementwise math (e^x, erf, GELU, argmax) in [`crate::ops`].
#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;

#[path = "../../tests/layout/modules.rs"]
mod modules;

use modules::{cycles, graph, sources};

/// Each shared tool's definition and the one module that may hold it.
const SHARED: &[(&str, &str)] = &[
    ("pub struct AdamW", "crate::train::optim"),
    ("struct Adam {", "crate::train::optim"),
    ("fn argmax(", "crate::ops"),
    ("fn gelu(", "crate::ops"),
    ("fn gelu_vec<", "crate::ops"),
    ("fn erf_approx(", "crate::ops"),
    ("fn exp_approx(", "crate::ops"),
];

/// Import cycles, and every definition of a shared tool outside its module (or a tool defined
/// nowhere).
fn violations(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = cycles(&graph(files));
    for (def, home) in SHARED {
        let at: Vec<&String> = files.iter().filter(|(_, src)| src.contains(def)).map(|(m, _)| m).collect();
        if at.is_empty() {
            out.push(format!("`{def}` is defined nowhere (expected in {home})"));
        }
        for m in at.iter().filter(|m| m.as_str() != *home) {
            out.push(format!("`{def}` is defined in {m}, not in {home}"));
        }
    }
    out
}

#[test]
fn models_have_no_import_cycle_and_shared_tools_live_in_one_place() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    sources(&root, &root, "crate::layout_tests", &mut files)?;
    assert!(
        files.contains_key("crate::minilm::fused") && files.contains_key("crate::train::optim"),
        "sources not found under {}",
        root.display()
    );
    let v = violations(&files);
    assert!(v.is_empty(), "models layout broken (ARCHITECTURE.md):\n{}", v.join("\n"));
    Ok(())
}

#[test]
fn the_check_finds_a_planted_cycle_through_a_use_tree_and_a_second_optimizer() {
    let files: BTreeMap<String, String> = [
        ("crate", "pub mod minilm; pub mod ops; pub mod train;"),
        ("crate::minilm", "pub mod fused; pub mod amx;"),
        // fused → amx through `super::{…}`, amx → fused through a path: a cycle.
        ("crate::minilm::fused", "use super::{amx, attention};\nfn f() { amx::g(); }"),
        ("crate::minilm::amx", "fn g() { let gelu = super::fused::gelu; }"),
        ("crate::minilm::attention", "// use crate::minilm::fused; (a comment, not an import)\nuse crate::ops::exp_approx;"),
        ("crate::ops", "pub fn argmax(v: &[f32]) -> u32 { 0 }\npub fn gelu(x: f32) -> f32 { x }\npub fn gelu_vec<S>() {}\npub fn erf_approx(x: f32) -> f32 { x }\npub fn exp_approx(x: f32) -> f32 { x }"),
        ("crate::train::optim", "pub struct AdamW {}\npub(crate) struct Adam { t: i32 }"),
        ("crate::gnn::fast", "struct Adam { t: i32 }"),
    ]
    .iter()
    .map(|(m, s)| (m.to_string(), s.to_string()))
    .collect();
    let v = violations(&files);
    assert!(
        v.iter().any(|x| x.starts_with("import cycle") && x.contains("crate::minilm::fused") && x.contains("crate::minilm::amx")),
        "{v:?}"
    );
    assert!(v.contains(&"`struct Adam {` is defined in crate::gnn::fast, not in crate::train::optim".to_string()), "{v:?}");
    assert!(!v.iter().any(|x| x.contains("attention →")), "comments are not imports: {v:?}");
    assert_eq!(v.len(), 2, "{v:?}");
}
