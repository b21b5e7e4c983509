//! `tgrag fetch <dataset>`: a catalogue entry (`sources`) downloaded and unpacked into the folder the
//! registry reads it from. Everything is built in a fresh staging folder next to the destination
//! and renamed into place only when the loader recognises it, so a failure leaves no partial
//! dataset folder. Hub files go through `hub` (its private staging, checks and cache); plain URLs
//! through `download` (its `.part` files, kept in `<root>/.tgrag-downloads/<folder>/` between
//! calls so that an interrupted download resumes).

use std::path::{Path, PathBuf};

use crate::error::{DatasetError, Result};
use crate::hub::{self, HubRepo};
use crate::registry::RawKind;
use crate::sources::{DatasetSource, Origin};

/// What the caller hears while a dataset is fetched.
pub struct Events<'a> {
    /// A file is about to be fetched (its URL or repository path).
    pub on_file: &'a dyn Fn(&str),
    /// Bytes so far and the total, when known, of the current plain-HTTP download.
    pub progress: &'a dyn Fn(u64, Option<u64>),
}

/// One fetched file with the sha256 of its bytes (printed so that a user can pin them).
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedFile {
    pub source: String,
    pub sha256: String,
    pub bytes: u64,
    /// Bytes an earlier, interrupted call had already downloaded.
    pub resumed_from: u64,
}

/// The result of a fetch.
#[derive(Debug, Clone)]
pub struct Report {
    pub dest: PathBuf,
    pub files: Vec<FetchedFile>,
    /// The hub commit the data came from.
    pub commit: Option<String>,
    /// The folder was already there and recognised: nothing was downloaded.
    pub already: bool,
}

/// The folder the registry reads `name` from under `root` (`RawKind::for_name`'s folder).
pub fn default_dest(root: &Path, name: &str) -> Option<PathBuf> {
    RawKind::for_name(name).map(|(_, folder)| root.join(folder))
}

/// Fetches `src` into `dest`.
pub fn fetch_dataset(src: &DatasetSource, dest: &Path, ev: &Events<'_>) -> Result<Report> {
    let (kind, folder) = RawKind::for_name(src.name).ok_or_else(|| DatasetError::Config(format!("`{}` has no loader", src.name)))?;
    if let Origin::Manual(why) = src.origin {
        return Err(DatasetError::NotAvailable { name: src.name.to_string(), reason: format!("no download: {why}") });
    }
    if std::fs::symlink_metadata(dest).is_ok() {
        if dest.is_dir() && kind.recognises(dest) {
            return Ok(Report { dest: dest.to_path_buf(), files: Vec::new(), commit: None, already: true });
        }
        return Err(DatasetError::Config(format!(
            "{} exists and does not hold {}; remove it or pass another --dest",
            dest.display(),
            kind.expects()
        )));
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| DatasetError::io(&parent, e))?;
    let staging = fresh_dir(&parent, folder)?;
    let result = fill(src, kind, &parent, folder, &staging, ev).and_then(|(files, commit)| {
        std::fs::rename(&staging, dest).map_err(|e| DatasetError::io(dest, e))?;
        Ok(Report { dest: dest.to_path_buf(), files, commit, already: false })
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// A fresh hidden folder `<parent>/.<folder>.tgrag-fetch-<pid>-<n>`.
fn fresh_dir(parent: &Path, folder: &str) -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for n in 0..100u32 {
        let dir = parent.join(format!(".{folder}.tgrag-fetch-{}-{nanos}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(DatasetError::io(&dir, e)),
        }
    }
    Err(DatasetError::Config(format!("no fresh staging folder could be made in {}", parent.display())))
}

/// Downloads and unpacks everything into `staging`; checks that the loader recognises it.
fn fill(
    src: &DatasetSource,
    kind: RawKind,
    parent: &Path,
    folder: &str,
    staging: &Path,
    ev: &Events<'_>,
) -> Result<(Vec<FetchedFile>, Option<String>)> {
    let mut files = Vec::new();
    let mut commit = None;
    match src.origin {
        Origin::Manual(_) => {}
        Origin::Hub(h) => {
            let repo = HubRepo { kind: "dataset", owner: h.owner, name: h.name, revision: h.revision.to_string() };
            let (c, listed) = hub::list(&repo, h.under)?;
            let prefix = if h.under.is_empty() { String::new() } else { format!("{}/", h.under) };
            let wanted: Vec<&hub::Listed> = listed
                .iter()
                .filter(|l| {
                    l.path
                        .strip_prefix(&prefix)
                        .is_some_and(|n| !n.contains('/') && h.prefixes.iter().any(|p| n.starts_with(p)) && n.ends_with(h.suffix))
                })
                .collect();
            if wanted.is_empty() {
                return Err(DatasetError::Download {
                    repo: repo.id(),
                    file: format!("{prefix}*{}", h.suffix),
                    reason: format!("commit {c} lists no such file ({} files listed)", listed.len()),
                });
            }
            let names: Vec<String> = wanted.iter().map(|l| l.path.clone()).collect();
            let pins: Vec<(&str, &str)> = wanted.iter().filter_map(|l| l.sha256.as_deref().map(|s| (l.path.as_str(), s))).collect();
            let pinned = HubRepo { revision: c.clone(), ..repo };
            let (_, fetched) = hub::fetch_pinned(&pinned, &names, &pins, ev.on_file)?;
            for f in fetched {
                let to = staging.join(&f.file);
                if let Some(p) = to.parent() {
                    std::fs::create_dir_all(p).map_err(|e| DatasetError::io(p, e))?;
                }
                // The snapshot entry is a link to the blob: link (or copy) the blob itself.
                let blob = f.local.canonicalize().map_err(|e| DatasetError::io(&f.local, e))?;
                if std::fs::hard_link(&blob, &to).is_err() {
                    std::fs::copy(&blob, &to).map_err(|e| DatasetError::io(&to, e))?;
                }
                files.push(FetchedFile {
                    source: format!("{}/{}", pinned.id(), f.file),
                    sha256: f.sha256,
                    bytes: f.bytes,
                    resumed_from: 0,
                });
            }
            commit = Some(c);
        }
        Origin::Http(remotes) => {
            let downloads = parent.join(".tgrag-downloads").join(folder);
            for r in remotes {
                let url = crate::sources::mirrored(r.url);
                (ev.on_file)(&url);
                let name = r.url.rsplit('/').next().unwrap_or("download").to_string();
                let got = crate::download::download(&url, &downloads, &name, r.sha256, r.max_bytes, ev.progress)?;
                crate::unpack::unpack(&got.path, r.unpack, staging, r.max_bytes.saturating_mul(4))?;
                let _ = std::fs::remove_file(&got.path);
                files.push(FetchedFile { source: url, sha256: got.sha256, bytes: got.bytes, resumed_from: got.resumed_from });
            }
            // `download`'s lock file goes with the folder once every file is in.
            let _ = std::fs::remove_file(downloads.join(".lock"));
            let _ = std::fs::remove_dir(&downloads);
            let _ = std::fs::remove_dir(parent.join(".tgrag-downloads"));
        }
    }
    if !kind.recognises(staging) {
        return Err(DatasetError::NotAvailable {
            name: src.name.to_string(),
            reason: format!("the downloads do not hold {}; nothing was kept", kind.expects()),
        });
    }
    Ok((files, commit))
}
