//! `tgrag compare A B`: the difference between two nightly folders (A the earlier, B the later),
//! judged as a night judges it: regressions, improvements, new and vanished methods, timings shown.
//! Exits with code 4 when a metric regressed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::commands::nightly::Folder;
use crate::nightly::{self, diff};

/// `tgrag compare` arguments.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The earlier nightly folder.
    pub a: PathBuf,
    /// The later nightly folder.
    pub b: PathBuf,
    /// Noise band of a metric: `--tolerance hit1=0.02` (repeatable).
    #[arg(long = "tolerance", value_name = "METRIC=VALUE")]
    pub tolerance: Vec<String>,
    /// Noise band of metrics without a configured band or a seed spread.
    #[arg(long, default_value_t = 0.01)]
    pub default_tolerance: f64,
    /// Also list the unchanged metrics.
    #[arg(long)]
    pub all: bool,
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let tol = diff::Tolerances::parse(&a.tolerance, a.default_tolerance)?;
    let (fa, fb) = (Folder::read(&a.a)?, Folder::read(&a.b)?);
    let (ra, rb) = (diff::rows(&fa.leaderboard)?, diff::rows(&fb.leaderboard)?);
    let compared = diff::compare(&ra, &rb, &tol);
    let count = |s: &str| compared.iter().filter(|r| r.status == s).count();
    println!(
        "{} → {}: {} regression(s), {} improvement(s), {} unchanged, {} changed without a better direction, {} new, {} vanished",
        a.a.display(),
        a.b.display(),
        count("regression"),
        count("improvement"),
        count("unchanged"),
        count("changed"),
        count("new"),
        count("vanished")
    );
    for status in ["regression", "improvement", "changed", "new", "vanished"].into_iter().chain(a.all.then_some("unchanged")) {
        for r in compared.iter().filter(|r| r.status == status) {
            println!("  {status:<11} {}", diff::line(r));
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
    let total = |f: &Folder| -> Result<std::collections::BTreeMap<String, f64>> {
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
    Ok(if count("regression") > 0 { ExitCode::from(nightly::EXIT_REGRESSION) } else { ExitCode::SUCCESS })
}
