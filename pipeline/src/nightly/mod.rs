//! The nightly job's parts: which datasets a night runs ([`discover`]), what it collects from their
//! outputs ([`collect`]), how one night compares with another ([`diff`]), how it is reported
//! ([`render`], [`plots`]) and where it came from ([`provenance`]); and the dated result folders
//! (`<outputs>/nightly/<UTC date>T<time>Z/`) that appear whole or not at all.

pub mod cells;
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
/// The whole probe is bounded: the name lookup runs inside the 3 s too (`hub::reachable`), and it
/// sends no request (the downloads themselves are bounded by `TGRAG_HUB_*` timeouts).
pub fn hub_reachable() -> bool {
    tgrag_datasets::hub::reachable(&tgrag_datasets::hub::endpoint(), std::time::Duration::from_secs(3)).is_ok()
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

/// A finished night under the nightly folder: its folder, name and when it ran (from its
/// `provenance.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Night {
    pub dir: PathBuf,
    pub name: String,
    /// `YYYY-MM-DDTHH:MM:SSZ`, from the provenance.
    pub started_at: String,
}

/// What [`survey`] found in a nightly folder.
#[derive(Debug, Default)]
pub struct Survey {
    /// The nights, in the order they ran (by the start time of their provenance, then name).
    pub nights: Vec<Night>,
    /// Entries that are not nights, with the reason: never read as a night, never deleted.
    pub skipped: Vec<(PathBuf, String)>,
}

impl Night {
    /// When it ran, as an order: start time, then name.
    pub fn order(&self) -> (&str, &str) {
        (&self.started_at, &self.name)
    }
}

impl Survey {
    /// The nights that ran up to `at` (a start time and a name, as [`Night::order`]), oldest first.
    pub fn up_to(&self, at: (&str, &str)) -> Vec<&Night> {
        self.nights.iter().filter(|n| n.order() <= at).collect()
    }

    /// The nights that claim to have run after `at` (a clock set back, a planted folder).
    pub fn after(&self, at: (&str, &str)) -> Vec<&Night> {
        self.nights.iter().filter(|n| n.order() > at).collect()
    }

    /// Prints a warning for every skipped entry.
    pub fn warn(&self) {
        for (p, why) in &self.skipped {
            eprintln!("warning: {}: {why}; left alone", p.display());
        }
    }
}

/// The entries of `dir`: finished nights (a real folder named by a stamp whose `provenance.json`
/// checks and names the same stamp) and the rest, skipped with a reason. Hidden entries (the lock,
/// partial nights) are neither.
pub fn survey(dir: &Path) -> Survey {
    let mut out = Survey::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    let mut entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let path = e.path();
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            out.skipped.push((path, "not a night's folder (its name is not UTF-8)".into()));
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let kind = match std::fs::symlink_metadata(&path) {
            Ok(m) => m.file_type(),
            Err(e) => {
                out.skipped.push((path, format!("unreadable ({e})")));
                continue;
            }
        };
        if !is_stamp(&name) {
            out.skipped.push((path, "not a night's folder (a night is named YYYY-MM-DDTHHMMSS.mmmZ)".into()));
            continue;
        }
        if kind.is_symlink() || !kind.is_dir() {
            out.skipped.push((path, "named like a night but not a folder (a link or a file)".into()));
            continue;
        }
        match provenance::read(&path) {
            Ok((_, c)) if c.stamp == name => out.nights.push(Night { dir: path, name, started_at: c.started_at }),
            Ok((_, c)) => out.skipped.push((path, format!("not a night of this folder: its provenance.json is night {}", c.stamp))),
            Err(e) => out.skipped.push((path, format!("an incomplete night ({e:#})"))),
        }
    }
    out.nights.sort_by(|a, b| a.order().cmp(&b.order()));
    out
}

/// Removes what killed nights left behind (`.<stamp>.partial/` folders; nothing else, and never
/// through a link).
pub fn clean_partials(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let is_partial = n.strip_prefix('.').and_then(|r| r.strip_suffix(".partial")).is_some_and(is_stamp);
        if is_partial && std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.file_type().is_dir()) {
            std::fs::remove_dir_all(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// What [`prune`] did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// The nights removed.
    pub removed: Vec<PathBuf>,
    /// Nights left alone because they claim to have run after the current one.
    pub future: Vec<PathBuf>,
}

/// Keeps the newest `keep` nights (0: keep all) of those that ran up to `current` (the night just
/// written, always kept), ordered by when they ran; removes the older ones. Entries that are not
/// nights and nights that claim a later start are never removed.
pub fn prune(dir: &Path, keep: usize, current: &Path) -> Result<Pruned> {
    let s = survey(dir);
    let mut out = Pruned::default();
    let Some(cur) = s.nights.iter().find(|n| n.dir == current) else {
        bail_config!("{} is not a finished night of {}: nothing pruned", current.display(), dir.display());
    };
    out.future = s.after(cur.order()).into_iter().map(|n| n.dir.clone()).collect();
    if keep == 0 {
        return Ok(out);
    }
    let past: Vec<&Night> = s.up_to(cur.order()).into_iter().filter(|n| n.dir != current).collect();
    // `keep - 1` of the earlier nights stay beside the current one.
    let old = past.len().saturating_sub(keep - 1);
    for n in past.into_iter().take(old) {
        std::fs::remove_dir_all(&n.dir).with_context(|| format!("removing {}", n.dir.display()))?;
        out.removed.push(n.dir.clone());
    }
    Ok(out)
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

    /// A folder with a minimal valid provenance: night `name`, started at `started_at`.
    fn night(dir: &Path, name: &str, started_at: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::create_dir_all(&p).expect("mkdir");
        let prov = serde_json::json!({
            "stamp": name, "started_at": started_at, "finished_at": started_at,
            "code": { "code_digest": "ab12", "git_commit": null }, "previous": null,
        });
        std::fs::write(p.join("provenance.json"), prov.to_string()).expect("write");
        p
    }

    fn names(v: &[PathBuf]) -> Vec<String> {
        v.iter().map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).collect()
    }

    #[test]
    fn nights_are_ordered_by_when_they_ran_partials_cleaned_and_old_ones_pruned_but_nothing_else() {
        let d = tempfile::tempdir().expect("tmp");
        let a = night(d.path(), "2026-11-01T000000.000Z", "2026-11-01T00:00:00Z");
        // Named later than it ran: the provenance decides the order.
        let b = night(d.path(), "2026-11-03T000000.000Z", "2026-11-02T00:00:00Z");
        let c = night(d.path(), "2026-11-02T000000.000Z", "2026-11-03T00:00:00Z");
        // Not nights: a folder with another name, a stamp folder without provenance, a copy of a
        // night under another stamp, a stamp-named file, and a partial night.
        std::fs::create_dir_all(d.path().join("notes")).expect("mkdir");
        std::fs::create_dir_all(d.path().join("2026-10-01T000000.000Z")).expect("mkdir");
        let copy = night(d.path(), "2026-09-01T000000.000Z", "2026-09-01T00:00:00Z");
        std::fs::rename(&copy, d.path().join("2026-09-02T000000.000Z")).expect("rename");
        std::fs::write(d.path().join("2026-09-03T000000.000Z"), "x").expect("file");
        std::fs::create_dir_all(d.path().join(".2026-11-04T000000.000Z.partial")).expect("mkdir");
        std::fs::create_dir_all(d.path().join(".keep.partial")).expect("mkdir");
        std::fs::write(d.path().join(".tgrag.lock"), "").expect("lock");
        let s = survey(d.path());
        let listed: Vec<&str> = s.nights.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(listed, ["2026-11-01T000000.000Z", "2026-11-03T000000.000Z", "2026-11-02T000000.000Z"]);
        let skipped: Vec<String> = names(&s.skipped.iter().map(|x| x.0.clone()).collect::<Vec<_>>());
        assert_eq!(skipped, ["2026-09-02T000000.000Z", "2026-09-03T000000.000Z", "2026-10-01T000000.000Z", "notes"]);
        assert!(s.skipped[0].1.contains("provenance.json is night 2026-09-01T000000.000Z"), "{:?}", s.skipped);
        assert!(s.skipped[2].1.contains("incomplete"), "{:?}", s.skipped);
        clean_partials(d.path()).expect("clean");
        assert!(!d.path().join(".2026-11-04T000000.000Z.partial").exists());
        assert!(d.path().join(".keep.partial").exists() && d.path().join(".tgrag.lock").exists());
        // A night that claims a later start than the current one is neither pruned nor counted.
        let future = night(d.path(), "2099-01-01T000000.000Z", "2099-01-01T00:00:00Z");
        let p = prune(d.path(), 2, &b).expect("prune");
        assert_eq!((p.removed, p.future), (vec![], vec![c.clone(), future.clone()]));
        let p = prune(d.path(), 1, &b).expect("prune");
        assert_eq!((p.removed, p.future), (vec![a.clone()], vec![c.clone(), future.clone()]));
        let p = prune(d.path(), 1, &c).expect("prune");
        assert_eq!((p.removed, p.future), (vec![b.clone()], vec![future.clone()]));
        assert!(c.is_dir() && future.is_dir() && d.path().join("notes").is_dir() && d.path().join("2026-10-01T000000.000Z").is_dir());
        assert!(prune(d.path(), 0, &c).expect("keep all").removed.is_empty());
        assert!(prune(d.path(), 1, &d.path().join("notes")).is_err(), "pruning around a folder that is not a night");
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
