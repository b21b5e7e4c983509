//! Hostile training settings. A training whose loss is not
//! finite stops with an error naming the model, the seed and the epoch, and commits nothing; learning
//! rates that are not finite numbers > 0 and repeated seeds are refused before any work.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::{stderr, tgrag};

/// The small `gretriever` of the nightly suite's FAST settings (hash encoders, one GCN encoder, one
/// seed, two epochs) on the tiny synthetic dataset, with `extra` settings after them.
fn gretriever(outputs: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--size",
        "tiny",
        "--stages",
        "gretriever",
        "--set",
        "textgraphs.encoder=\"hash\"",
        "--set",
        "gretriever.seeds=[0]",
        "--set",
        "gretriever.epochs=2",
        "--set",
        "gretriever.encoders=[\"gcn\"]",
        "--set",
        "gretriever.efficient=false",
        "--set",
        "gretriever.whole_graph=false",
        "--set",
        "gretriever.text_head=false",
        "--set",
        "gretriever.hidden=16",
        "--set",
        "gretriever.head_hidden=16",
        "--set",
        "gretriever.heads=2",
        "--set",
        "gretriever.layers=1",
    ];
    args.extend_from_slice(extra);
    tgrag(outputs, &args)
}

/// A failure: non-zero exit (not a signal, not a panic) whose message holds every `must`.
fn failed(o: &Output, must: &[&str]) -> String {
    let err = super::hostile::failed_cleanly(o, must);
    assert!(!err.contains("internal error"), "a user's setting reported as a bug: {err}");
    err
}

/// Every file under `dir` (relative paths), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).map(|r| r.flatten().collect::<Vec<_>>()).unwrap_or_default() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// No stage folder was made: nothing ran (a lock file at the top is allowed).
fn nothing_ran(outputs: &Path) {
    let stages: Vec<PathBuf> = files(outputs).into_iter().filter(|p| p.components().count() > 1).collect();
    assert!(stages.is_empty(), "a refused run wrote {stages:?}");
}

#[test]
fn a_training_that_diverges_fails_naming_model_seed_and_epoch_and_commits_nothing() {
    let out = tempfile::tempdir().expect("tmp");
    let o = out.path();
    // The case of the issue: every loss NaN, yet accuracies were written and the run exited 0.
    let r = gretriever(o, &["--set", "gretriever.lr=1e300"]);
    let err =
        failed(&r, &["stage `gretriever`: invalid configuration: gretriever-gcn on ", ", seed 0: the ", " at epoch ", "training diverged"]);
    // The epoch is the first or second (the first step already blows the weights up).
    assert!(err.contains(" at epoch 1: ") || err.contains(" at epoch 2: "), "{err}");
    assert!(err.contains(" loss is NaN ") || err.contains(" loss is inf "), "{err}");
    // The upstream stages committed; gretriever left no scores, no manifest, no temporary file.
    let all = files(o);
    assert!(all.iter().any(|p| p.ends_with("textgraphs/manifest.json")), "{all:?}");
    let ours: Vec<&PathBuf> = all.iter().filter(|p| p.components().any(|c| c.as_os_str() == "gretriever")).collect();
    for p in &ours {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        assert!(!name.starts_with("scores") && name != "manifest.json" && !name.ends_with(".tmp"), "left behind: {ours:?}");
    }
    // A sane learning rate on the same outputs then runs and commits the scores.
    let fine = gretriever(o, &["--set", "gretriever.lr=0.001"]);
    assert!(fine.status.success(), "{}", stderr(&fine));
    let all = files(o);
    for f in ["gretriever/scores.parquet", "gretriever/manifest.json"] {
        assert!(all.iter().any(|p| p.ends_with(f)), "{f} missing: {all:?}");
    }
}

#[test]
fn learning_rates_that_are_not_finite_numbers_above_zero_are_refused_before_any_work() {
    for (set, shown) in [
        ("gretriever.lr=0", "lr must be a finite number > 0, got 0"),
        ("gretriever.lr=-1", "lr must be a finite number > 0, got -1"),
        ("gretriever.lr=nan", "lr must be a finite number > 0, got \"nan\""),
        ("gretriever.lr=inf", "lr must be a finite number > 0, got \"inf\""),
        ("gretriever.lr=1e400", "lr must be a finite number > 0, got \"1e400\""),
        ("gretriever.lr=null", "lr must be a finite number > 0, got null"),
        ("gretriever.text_lr=-0.5", "text_lr must be a finite number > 0, got -0.5"),
        ("mixrag.lr=0", "lr must be a finite number > 0, got 0"),
    ] {
        let out = tempfile::tempdir().expect("tmp");
        let r = gretriever(out.path(), &["--set", set]);
        let stage = set.split('.').next().unwrap_or_default();
        failed(&r, &[&format!("stage `{stage}`: invalid configuration: {shown}")]);
        nothing_ran(out.path());
    }
}

#[test]
fn repeated_seeds_are_refused_before_any_work() {
    for (set, shown) in [
        ("toporag.gnn_seeds=[0,0]", "stage `toporag`: invalid configuration: gnn_seeds lists seed 0 more than once"),
        ("gretriever.seeds=[1,2,1]", "stage `gretriever`: invalid configuration: seeds lists seed 1 more than once"),
        ("mixrag.seeds=[3,3]", "stage `mixrag`: invalid configuration: seeds lists seed 3 more than once"),
    ] {
        let out = tempfile::tempdir().expect("tmp");
        let r = tgrag(out.path(), &["run", "--size", "tiny", "--stages", "toporag", "--set", set]);
        failed(&r, &[shown, "every seed must be distinct"]);
        nothing_ran(out.path());
    }
    // Distinct seeds of any size still pass the checks (`gnn_seeds` is a list of seeds, not a size).
    let out = tempfile::tempdir().expect("tmp");
    let r = tgrag(out.path(), &["stages", "--size", "tiny", "--set", "toporag.gnn_seeds=[0,18446744073709551615]"]);
    assert!(r.status.success(), "{}", stderr(&r));
}

/// Settings that would grow the weights every step (a negative weight decay), clip nothing (a
/// negative norm), ask for more memory than a machine holds (projector and LoRA widths of 10^7) or
/// more positions than the model has, or a zero-width planner: refused before any work, as the
/// user's configuration, never an abort or an internal error.
#[test]
fn settings_that_would_abort_or_grow_the_weights_are_refused_before_any_work() {
    let lm = ["--set", "gretriever.lm_rows=[\"g-retriever-lora\"]"];
    for (set, extra, shown) in [
        ("gretriever.weight_decay=-5", &[][..], "stage `gretriever`: invalid configuration: weight_decay -5 must be a finite number ≥ 0"),
        ("gretriever.clip=-1", &[][..], "stage `gretriever`: invalid configuration: clip -1 must be a finite number > 0"),
        ("mixrag.weight_decay=-0.5", &[][..], "stage `mixrag`: invalid configuration: weight_decay -0.5 must be a finite number ≥ 0"),
        ("gretriever.lm_projector_hidden=10000000", &lm[..], "lm_projector_hidden 10000000 is above 65536"),
        ("gretriever.lm_rank=10000000", &lm[..], "lm_rank 10000000 is above 1024"),
        ("gretriever.lm_prompt_tokens=10000000", &lm[..], "do not fit the 512 positions"),
    ] {
        let out = tempfile::tempdir().expect("tmp");
        let mut args = vec!["--set", set];
        args.extend_from_slice(extra);
        let r = gretriever(out.path(), &args);
        failed(&r, &[shown]);
        nothing_ran(out.path());
    }
    let out = tempfile::tempdir().expect("tmp");
    let r = tgrag(out.path(), &["run", "--size", "tiny", "--stages", "mor", "--set", "mor.planner_hidden=0"]);
    failed(&r, &["stage `mor`: invalid configuration:", "planner_hidden must be ≥ 1"]);
    nothing_ran(out.path());
}
