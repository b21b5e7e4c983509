//! `tgrag-bench bench-read` (`make bench` calls it next to polars): the time the
//! project's own readers take on one large input, through the functions the loaders call.
//!
//! * `reviews <file>`: an Amazon-2018 review JSON-lines file through
//!   [`tgrag_datasets::tag::reviews::read`] (rows: the reviews kept, those with text).
//! * `ogb-edges <file>`: an OGB `raw/edge.csv(.gz)` through [`tgrag_datasets::tag::ogb::read_edges`]
//!   (gunzip, parse, drop self-loops and repeats; no node bound: every `u32` id is accepted).
//! * `stark-csv <folder>`: a STaRK QA folder (`stark_qa/stark_qa.csv`, `split/*.index`) through
//!   [`tgrag_datasets::stark::qa::Qa::load_dir`] (rows: the queries).
//! * `nightly-scores <folder>`: every `<folder>/<night>/scores.parquet`, in name order, through the
//!   nightly's collection (`Collected::read_scores`: read, checked, one leaderboard row per score),
//!   then the leaderboard table built (rows: its rows).
//!
//! Prints one JSON line: `{"kind": …, "rows": …, "seconds": …, "peak_rss_mb": …}` (`peak_rss_mb`:
//! the process's `VmHWM`, `null` where `/proc/self/status` has none).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use tgrag_datasets::stark::qa::Qa;
use tgrag_datasets::tag::{ogb, reviews};

use tgrag_pipeline::nightly::collect::Collected;

/// What to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    Reviews,
    OgbEdges,
    StarkCsv,
    NightlyScores,
}

impl KindArg {
    fn name(self) -> &'static str {
        match self {
            KindArg::Reviews => "reviews",
            KindArg::OgbEdges => "ogb-edges",
            KindArg::StarkCsv => "stark-csv",
            KindArg::NightlyScores => "nightly-scores",
        }
    }
}

/// `tgrag-bench bench-read` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchReadArgs {
    #[arg(value_enum)]
    pub kind: KindArg,
    /// The file (`reviews`, `ogb-edges`) or folder (`stark-csv`, `nightly-scores`) to read.
    pub path: PathBuf,
}

pub fn run(a: BenchReadArgs) -> Result<()> {
    let kind = a.kind.name();
    let path = &a.path;
    std::fs::metadata(path).with_context(|| format!("bench-read {kind}: cannot read {}", path.display()))?;
    let t0 = Instant::now();
    let rows = match a.kind {
        KindArg::Reviews => reviews::read(path)?.len(),
        KindArg::OgbEdges => ogb::read_edges(path, usize::MAX)?.len(),
        KindArg::StarkCsv => Qa::load_dir(path, false)?.rows.len(),
        KindArg::NightlyScores => nightly_scores(path)?,
    };
    let seconds = t0.elapsed().as_secs_f64();
    let peak = peak_rss_mb().map_or_else(|| "null".to_string(), |mb| format!("{mb:.1}"));
    println!("{{\"kind\": \"{kind}\", \"rows\": {rows}, \"seconds\": {seconds:.4}, \"peak_rss_mb\": {peak}}}");
    Ok(())
}

/// The leaderboard rows of every `<night>/scores.parquet` under `dir`, collected as a night does.
fn nightly_scores(dir: &Path) -> Result<usize> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("bench-read nightly-scores: cannot list {}", dir.display()))? {
        let f = e.with_context(|| format!("bench-read nightly-scores: cannot list {}", dir.display()))?.path().join("scores.parquet");
        if f.is_file() {
            files.push(f);
        }
    }
    files.sort();
    anyhow::ensure!(!files.is_empty(), "bench-read nightly-scores: no <night>/scores.parquet under {}", dir.display());
    let mut c = Collected::default();
    for f in &files {
        c.read_scores("bench", f)?;
    }
    Ok(c.leaderboard()?.num_rows())
}

/// `VmHWM` (peak resident memory) of this process in MiB, on Linux.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1024.0)
}
