//! Downloads from the Hugging Face hub with hf-hub: a pinned revision, the standard cache
//! (`$HF_HOME/hub`, `HF_HUB_CACHE`), `HF_ENDPOINT` for mirrors, and `HF_HUB_OFFLINE=1` for
//! cache-only use. Every fetched file is hashed (sha256) so that the run manifest records exactly
//! which bytes a result came from.

use std::path::{Path, PathBuf};

use hf_hub::{HFClientSync, HFError};
use serde::Serialize;

use crate::error::{DatasetError, Result};

/// A repository on the hub at a pinned revision.
#[derive(Debug, Clone, Serialize)]
pub struct HubRepo {
    /// `model` or `dataset`.
    pub kind: &'static str,
    pub owner: &'static str,
    pub name: &'static str,
    pub revision: String,
}

impl HubRepo {
    pub fn id(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

/// One downloaded (or cached) file.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Fetched {
    /// Path inside the repository.
    pub file: String,
    /// Where the cache keeps it.
    #[serde(skip)]
    pub local: PathBuf,
    pub sha256: String,
    pub bytes: u64,
}

/// Whether the user asked for cache-only operation (`HF_HUB_OFFLINE=1`).
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Fetch `files` of `repo` into the hf-hub cache. Returns the snapshot folder (the repository
/// layout: `root.join(file)` is each file) and the files with their sha256.
pub fn fetch(repo: &HubRepo, files: &[String], on_file: &dyn Fn(&str)) -> Result<(PathBuf, Vec<Fetched>)> {
    let fail = |file: &str, reason: String| DatasetError::Download { repo: repo.id(), file: file.to_string(), reason };
    let client = HFClientSync::new().map_err(|e| fail("*", format!("cannot start the hub client: {e}")))?;
    let local_only = offline();
    let mut out = Vec::with_capacity(files.len());
    let mut root: Option<PathBuf> = None;
    for file in files {
        on_file(file);
        let result = match repo.kind {
            "model" => client
                .model(repo.owner, repo.name)
                .download_file()
                .filename(file.as_str())
                .revision(repo.revision.as_str())
                .local_files_only(local_only)
                .send(),
            _ => client
                .dataset(repo.owner, repo.name)
                .download_file()
                .filename(file.as_str())
                .revision(repo.revision.as_str())
                .local_files_only(local_only)
                .send(),
        };
        let local = result.map_err(|e| match e {
            HFError::LocalEntryNotFound { .. } => fail(file, "not in the local cache and HF_HUB_OFFLINE=1 forbids downloading".into()),
            other => fail(file, other.to_string()),
        })?;
        let bytes = std::fs::metadata(&local).map_err(|e| DatasetError::io(&local, e))?.len();
        let sha256 = sha256_file(&local)?;
        if root.is_none() {
            root = snapshot_root(&local, file);
        }
        out.push(Fetched { file: file.clone(), local, sha256, bytes });
    }
    let root = root.ok_or_else(|| fail("*", "could not locate the snapshot folder of the downloads".into()))?;
    Ok((root, out))
}

/// `…/snapshots/<commit>/<file>` → `…/snapshots/<commit>`.
fn snapshot_root(local: &Path, file: &str) -> Option<PathBuf> {
    let depth = file.split('/').count();
    let mut p = local.to_path_buf();
    for _ in 0..depth {
        p = p.parent()?.to_path_buf();
    }
    Some(p)
}

/// The commit the snapshot folder is named after (what the hub resolved the revision to).
pub fn snapshot_commit(root: &Path) -> Option<String> {
    root.file_name().map(|s| s.to_string_lossy().into_owned())
}

/// sha256 of a file, hex (the same routine that hashes every pipeline artifact).
pub fn sha256_file(path: &Path) -> Result<String> {
    Ok(tgrag_schemas::io::sha256_file(path)?)
}
