//! The nightly job's parts: which datasets a night runs ([`discover`]), what it collects from their
//! outputs ([`collect`]), how one night compares with another ([`diff`]), how it is reported
//! ([`render`], [`plots`]) and where it came from ([`provenance`]); and the dated result folders
//! (`<outputs>/nightly/<UTC date>T<time>Z/`) that appear whole or not at all.

pub mod collect;
pub mod diff;
pub mod plots;
pub mod provenance;
pub mod render;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tgrag_datasets::registry::{self, DatasetOptions, DatasetSpec, KNOWN, RawKind};
use tgrag_datasets::synthetic::Size;

/// Exit code of a nightly run (or `tgrag compare`) that found a regression.
pub const EXIT_REGRESSION: u8 = 4;
/// Exit code of a nightly run in which a dataset failed (and nothing regressed).
pub const EXIT_DATASET_FAILED: u8 = 5;

/// One dataset a night considers: ready to run, or unavailable (with the reason).
#[derive(Debug, Clone)]
pub struct Planned {
    pub name: String,
    pub spec: std::result::Result<DatasetSpec, String>,
}

/// Where a night looks for data and what it runs.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// Folders holding real datasets in their own layouts (`explagraphs/`, `citeseer-text/`, …).
    pub roots: Vec<PathBuf>,
    /// Sizes of the synthetic dataset (`small` → `synthetic`, others → `synthetic-<size>`).
    pub sizes: Vec<Size>,
    pub seed: u64,
    /// Whether to try the STaRK KBs on the Hugging Face hub (or `HF_ENDPOINT`'s mirror).
    pub stark: bool,
    /// Only these datasets, when given.
    pub only: Option<Vec<String>>,
}

/// The outputs folder name of the synthetic dataset of `size` (`synthetic` for `make run`'s size,
/// so that a night and `make run` share their cache).
pub fn synthetic_name(size: Size) -> String {
    match size {
        Size::Small => "synthetic".into(),
        s => format!("synthetic-{}", size_word(s)),
    }
}

pub fn size_word(s: Size) -> &'static str {
    match s {
        Size::Tiny => "tiny",
        Size::Small => "small",
        Size::Medium => "medium",
        Size::Prime => "prime",
    }
}

/// Whether the hub (or the mirror named by `HF_ENDPOINT`) answers a TCP connection within 3 s.
pub fn hub_reachable() -> bool {
    use std::net::ToSocketAddrs;
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("https", endpoint.as_str()));
    let hostport = rest.split('/').next().unwrap_or(rest);
    let with_port =
        if hostport.contains(':') { hostport.to_string() } else { format!("{hostport}:{}", if scheme == "http" { 80 } else { 443 }) };
    let Ok(addrs) = with_port.to_socket_addrs() else { return false };
    addrs.into_iter().any(|a| std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(3)).is_ok())
}

/// Every dataset of a night, in a fixed order: the synthetic sizes, the real datasets found under
/// the roots (first root that has one wins), then the STaRK KBs. A dataset that cannot run here is
/// kept with the reason, so that the report lists it.
pub fn discover(d: &Discovery) -> Vec<Planned> {
    let wanted = |n: &str| d.only.as_ref().is_none_or(|o| o.iter().any(|x| x == n));
    let mut out = Vec::new();
    for &size in &d.sizes {
        let name = synthetic_name(size);
        if wanted(&name) || wanted("synthetic") {
            let spec = registry::resolve("synthetic", None, DatasetOptions { size, seed: d.seed })
                .map(|mut s| {
                    s.name = name.clone();
                    s
                })
                .map_err(|e| e.to_string());
            out.push(Planned { name, spec });
        }
    }
    for (name, _) in KNOWN {
        let Some((kind, folder)) = RawKind::for_name(name) else { continue };
        if !wanted(name) {
            continue;
        }
        let found = d.roots.iter().map(|r| r.join(folder)).find(|dir| dir.is_dir() && kind.recognises(dir));
        match found {
            Some(dir) => {
                let spec = registry::resolve(name, Some(dir), DatasetOptions::default()).map_err(|e| e.to_string());
                out.push(Planned { name: name.to_string(), spec });
            }
            // Asked for by name but absent: reported; not asked for and absent: silently not part of the night.
            None if d.only.is_some() => out.push(Planned {
                name: name.to_string(),
                spec: Err(format!("no `{folder}/` with {} under the data roots", kind.expects())),
            }),
            None => {}
        }
    }
    let stark: Vec<&str> = ["stark-amazon", "stark-mag", "stark-prime"].into_iter().filter(|n| wanted(n)).collect();
    if d.stark && !stark.is_empty() {
        let reachable = hub_reachable();
        for name in stark {
            let spec = if reachable {
                registry::resolve(name, None, DatasetOptions::default()).map_err(|e| e.to_string())
            } else {
                Err("the Hugging Face hub (or HF_ENDPOINT's mirror) does not answer".to_string())
            };
            out.push(Planned { name: name.to_string(), spec });
        }
    }
    out
}

/// A folder name for a night starting at `unix_ms`: `YYYY-MM-DDTHHMMSS.mmmZ` (UTC; sorts in time order).
pub fn stamp(unix_ms: u128) -> String {
    let secs = (unix_ms / 1000) as u64;
    let iso = crate::lock::utc(secs); // YYYY-MM-DDTHH:MM:SSZ
    format!("{}.{:03}Z", iso.trim_end_matches('Z').replace(':', ""), unix_ms % 1000)
}

/// Whether a folder name is a finished night's (`YYYY-MM-DDTHHMMSS.mmmZ`).
pub fn is_stamp(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 22
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[17] == b'.'
        && b[21] == b'Z'
        && name.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10 | 17 | 21) || c.is_ascii_digit())
}

/// The finished nights under `dir`, oldest first.
pub fn nights(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.flatten().filter(|e| e.file_name().to_str().is_some_and(is_stamp) && e.path().is_dir()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Removes what killed nights left behind (`.<stamp>.partial/` folders).
pub fn clean_partials(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with('.') && n.ends_with(".partial") {
            std::fs::remove_dir_all(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Keeps the newest `keep` nights (0: keep all); returns the folders removed.
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<PathBuf>> {
    let all = nights(dir);
    if keep == 0 || all.len() <= keep {
        return Ok(Vec::new());
    }
    let old = all[..all.len() - keep].to_vec();
    for p in &old {
        std::fs::remove_dir_all(p).with_context(|| format!("removing {}", p.display()))?;
    }
    Ok(old)
}

/// Makes a finished partial folder visible under its final name in one rename, after syncing its
/// files, so that a night appears whole or not at all.
pub fn publish(partial: &Path, final_dir: &Path) -> Result<()> {
    fn sync_tree(p: &Path) -> Result<()> {
        for e in std::fs::read_dir(p).with_context(|| format!("reading {}", p.display()))?.flatten() {
            let path = e.path();
            if path.is_dir() {
                sync_tree(&path)?;
            } else {
                std::fs::File::open(&path).and_then(|f| f.sync_all()).with_context(|| format!("syncing {}", path.display()))?;
            }
        }
        std::fs::File::open(p).and_then(|f| f.sync_all()).with_context(|| format!("syncing {}", p.display()))
    }
    sync_tree(partial)?;
    std::fs::rename(partial, final_dir).with_context(|| format!("renaming {} to {}", partial.display(), final_dir.display()))?;
    if let Some(parent) = final_dir.parent() {
        let _ = std::fs::File::open(parent).and_then(|f| f.sync_all());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_sort_in_time_order_and_are_recognised() {
        let a = stamp(1_795_996_800_000 + 3_661_007);
        assert_eq!(a, "2026-11-30T010101.007Z");
        assert!(is_stamp(&a));
        let b = stamp(1_795_996_800_000 + 3_661_010);
        assert!(a < b && is_stamp(&b));
        for bad in [".2026-11-30T010101.007Z.partial", "2026-11-30", "latest", "2026-11-30T01:01:01Z"] {
            assert!(!is_stamp(bad), "{bad}");
        }
    }

    #[test]
    fn nights_are_listed_oldest_first_partials_cleaned_and_old_ones_pruned() {
        let d = tempfile::tempdir().expect("tmp");
        let names = ["2026-11-01T000000.000Z", "2026-11-03T000000.000Z", "2026-11-02T000000.000Z"];
        for n in names {
            std::fs::create_dir_all(d.path().join(n)).expect("mkdir");
        }
        std::fs::create_dir_all(d.path().join(".2026-11-04T000000.000Z.partial")).expect("mkdir");
        std::fs::write(d.path().join(".tgrag.lock"), "").expect("lock");
        let listed: Vec<String> = nights(d.path()).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(listed, ["2026-11-01T000000.000Z", "2026-11-02T000000.000Z", "2026-11-03T000000.000Z"]);
        clean_partials(d.path()).expect("clean");
        assert!(!d.path().join(".2026-11-04T000000.000Z.partial").exists() && d.path().join(".tgrag.lock").exists());
        let gone = prune(d.path(), 2).expect("prune");
        assert_eq!(gone, vec![d.path().join("2026-11-01T000000.000Z")]);
        assert_eq!(nights(d.path()).len(), 2);
        assert!(prune(d.path(), 0).expect("keep all").is_empty());
    }

    #[test]
    fn discovery_finds_real_datasets_under_the_roots_and_reports_missing_ones() {
        let d = tempfile::tempdir().expect("tmp");
        let tape = d.path().join("citeseer-text");
        std::fs::create_dir_all(&tape).expect("mkdir");
        std::fs::write(tape.join("citeseer_texts.txt"), "x").expect("write");
        let disc =
            Discovery { roots: vec![d.path().to_path_buf()], sizes: vec![Size::Tiny, Size::Small], seed: 42, stark: false, only: None };
        let got: Vec<(String, bool)> = discover(&disc).into_iter().map(|p| (p.name, p.spec.is_ok())).collect();
        assert_eq!(got, [("synthetic-tiny".to_string(), true), ("synthetic".to_string(), true), ("citeseer".to_string(), true)]);
        let only = Discovery { only: Some(vec!["enron".into()]), ..disc };
        let got = discover(&only);
        assert_eq!(got.len(), 1);
        assert!(got[0].spec.as_ref().expect_err("absent").contains("enron-sample"));
    }
}
