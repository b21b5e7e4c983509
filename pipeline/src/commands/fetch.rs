//! `tgrag fetch`: downloads with hf-hub (the sentence model, or a STaRK dataset into the hf-hub
//! cache), printing every file with its sha256. Downloads are bounded and checked before they are
//! kept (`tgrag_datasets::hub`: `TGRAG_HUB_CONNECT_TIMEOUT`, `TGRAG_HUB_TIMEOUT`,
//! `TGRAG_HUB_TOTAL_TIMEOUT`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tgrag_models::minilm;

/// What `tgrag fetch` downloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FetchWhat {
    /// all-MiniLM-L6-v2 at the pinned revision, into weights/ (or --dest).
    Minilm,
    /// STaRK Amazon (hf-hub cache).
    StarkAmazon,
    /// STaRK MAG (hf-hub cache).
    StarkMag,
    /// STaRK Prime (hf-hub cache).
    StarkPrime,
}

impl FetchWhat {
    fn as_str(self) -> &'static str {
        match self {
            FetchWhat::Minilm => "minilm",
            FetchWhat::StarkAmazon => "stark-amazon",
            FetchWhat::StarkMag => "stark-mag",
            FetchWhat::StarkPrime => "stark-prime",
        }
    }
}

/// `tgrag fetch` arguments.
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// What to fetch.
    #[arg(value_enum)]
    pub what: FetchWhat,
    /// Destination folder (minilm only; default weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub dest: Option<PathBuf>,
}

/// `tgrag fetch <what>`: `minilm` (the sentence model, into weights/), or a STaRK dataset into the
/// hf-hub cache. Prints every file with its sha256.
pub fn run(a: FetchArgs) -> Result<()> {
    let (what, dest) = (a.what.as_str(), a.dest);
    use tgrag_datasets::hub::{self, HubRepo};
    if a.what == FetchWhat::Minilm {
        let dest = dest.unwrap_or_else(|| minilm::default_dir(Path::new(".")));
        let repo =
            HubRepo { kind: "model", owner: "sentence-transformers", name: "all-MiniLM-L6-v2", revision: minilm::HF_REVISION.into() };
        let files: Vec<String> = minilm::FILES.iter().map(|(f, _)| f.to_string()).collect();
        // Every file is checked against its pin in the cache before anything reaches `dest`.
        let (_, fetched) = hub::fetch_pinned(&repo, &files, &minilm::FILES, &|f| eprintln!("fetch {}/{f} @ {}", repo.id(), repo.revision))?;
        std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
        for f in &fetched {
            let want = minilm::FILES.iter().find(|(n, _)| *n == f.file).map(|(_, s)| *s).unwrap_or("");
            if !want.is_empty() && want != f.sha256 {
                return Err(anyhow::Error::new(crate::fault::Faulted {
                    fault: crate::fault::Fault::Environment,
                    message: format!("{}: sha256 {} differs from the pinned {want}", f.file, f.sha256),
                }));
            }
            let bytes = std::fs::read(&f.local).with_context(|| format!("reading {}", f.local.display()))?;
            tgrag_schemas::io::write_bytes_atomic(&dest.join(&f.file), &bytes)?;
            println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
        }
        println!("model ready in {}", dest.display());
        return Ok(());
    }
    let spec = tgrag_datasets::registry::resolve(what, None, Default::default())?;
    let (root, fetched) =
        spec.stark_root(&|f| eprintln!("fetch {f}")).with_context(|| format!("`{what}` cannot be fetched from the hub"))?;
    for f in fetched.unwrap_or_default() {
        println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
    }
    println!("{what}: hub layout in {} (commit {})", root.display(), hub::snapshot_commit(&root).unwrap_or_default());
    Ok(())
}
