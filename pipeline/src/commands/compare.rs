//! `tgrag compare A B`: the difference between two nightly folders or outputs folders (A the
//! earlier, B the later), judged as a night judges it: regressions, improvements, new and vanished
//! methods, timings shown. An outputs folder is read as a night would collect it (every dataset's
//! `scores` tables and stage timings). Exits with code 4 when a metric regressed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use arrow::array::RecordBatch;

use crate::commands::nightly::Folder;
use crate::nightly::diff::Status;
use crate::nightly::{self, collect::Collected, diff};

/// `tgrag compare` arguments.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The earlier nightly folder (`outputs/nightly/<stamp>`) or outputs folder.
    pub a: PathBuf,
    /// The later nightly folder or outputs folder.
    pub b: PathBuf,
    /// Noise band of a metric: `--tolerance hit1=0.02` (repeatable).
    #[arg(long = "tolerance", value_name = "METRIC=VALUE")]
    pub tolerance: Vec<String>,
    /// Noise band of metrics without a configured band or a seed spread (≥ 0).
    #[arg(long, default_value_t = 0.01, allow_negative_numbers = true, value_parser = diff::tolerance_value)]
    pub default_tolerance: f64,
    /// Also list the unchanged metrics.
    #[arg(long)]
    pub all: bool,
}

/// What is compared of one side: its leaderboard and its stage timings.
struct Side {
    leaderboard: RecordBatch,
    timings: RecordBatch,
}

/// Reads one side: a night's folder (it has `leaderboard.parquet`) or an outputs folder (dataset
/// folders with stage manifests; `nightly/` and hidden entries are not datasets).
fn side(p: &Path) -> Result<Side> {
    if p.join("leaderboard.parquet").exists() {
        let f = Folder::read(p)?;
        return Ok(Side { leaderboard: f.leaderboard, timings: f.timings });
    }
    let entries = std::fs::read_dir(p).with_context(|| format!("{}: not a folder", p.display()))?;
    let mut datasets: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(|n| (n.to_string(), e.path())))
        .filter(|(n, dir)| !n.starts_with('.') && n != "nightly" && Collected::has_stages(dir))
        .collect();
    datasets.sort();
    if datasets.is_empty() {
        let hint = if !nightly::survey(p).nights.is_empty() || p.file_name().is_some_and(|n| n == "nightly") {
            " (for the nightly folder, name one night: <outputs>/nightly/<stamp>)"
        } else {
            ""
        };
        bail_config!(
            "{}: neither a nightly folder (no leaderboard.parquet) nor an outputs folder (no <dataset>/<stage>/manifest.json){hint}",
            p.display()
        );
    }
    let mut c = Collected::default();
    for (name, dir) in &datasets {
        c.add_dataset(name, dir, &[])?;
    }
    let leaderboard = c.leaderboard()?;
    diff::check(&leaderboard, &p.join("*/*/scores.parquet"))?;
    Ok(Side { leaderboard, timings: c.timings()? })
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let tol = diff::Tolerances::parse(&a.tolerance, a.default_tolerance)?;
    let (fa, fb) = (side(&a.a)?, side(&a.b)?);
    let mut known = diff::metrics(&fa.leaderboard)?;
    known.extend(diff::metrics(&fb.leaderboard)?);
    tol.check_known(&known, "either leaderboard")?;
    let (ra, rb) = (diff::rows(&fa.leaderboard)?, diff::rows(&fb.leaderboard)?);
    let compared = diff::compare(&ra, &rb, &tol);
    println!("{} → {}: {}", a.a.display(), a.b.display(), diff::status_counts(&compared, false));
    for status in Status::ALL.into_iter().filter(|s| a.all || *s != Status::Unchanged) {
        for r in compared.iter().filter(|r| r.status == status) {
            println!("  {:<11} {}", status.as_str(), diff::line(r));
        }
    }
    let (new, gone) = diff::method_changes(&ra, &rb);
    for (d, s, m) in &new {
        println!("  new method      {m} ({d}, {s})");
    }
    for (d, s, m) in &gone {
        println!("  vanished method {m} ({d}, {s})");
    }
    // Timings: shown, never a failure.
    let total = |f: &Side| -> Result<std::collections::BTreeMap<String, f64>> {
        let t = &f.timings;
        let (d, ph, s) = (
            tgrag_schemas::columns::strs(t, "dataset")?,
            tgrag_schemas::columns::strs(t, "phase")?,
            tgrag_schemas::columns::f64s(t, "seconds")?,
        );
        let mut m = std::collections::BTreeMap::new();
        for i in (0..t.num_rows()).filter(|&i| ph.value(i) == "total") {
            *m.entry(d.value(i).to_string()).or_insert(0.0) += s.value(i);
        }
        Ok(m)
    };
    let (ta, tb) = (total(&fa)?, total(&fb)?);
    for (d, b) in &tb {
        match ta.get(d) {
            Some(a) if *a > 0.0 => println!("  time {d}: {a:.1}s → {b:.1}s ({:.2}×)", b / a),
            _ => println!("  time {d}: {b:.1}s (new)"),
        }
    }
    Ok(if compared.iter().any(|r| r.status == Status::Regression) { ExitCode::from(nightly::EXIT_REGRESSION) } else { ExitCode::SUCCESS })
}
