//! `tgrag report --from DIR`: renders a nightly folder's `report.md`, `report.html` and `plots/`
//! again from its Parquet tables and `provenance.json` alone (after a change to the renderer, or to
//! get back a deleted report).

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::commands::nightly::{Folder, render_into};
use crate::lock::FolderLock;
use crate::nightly::diff;

/// `tgrag report` arguments.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A nightly folder (`outputs/nightly/<stamp>`).
    #[arg(long = "from")]
    pub from: PathBuf,
}

pub fn run(a: ReportArgs, wait: bool) -> Result<()> {
    let dir = a.from;
    let f = Folder::read(&dir)?;
    let stamp = f.provenance["stamp"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    // The night's folder is written under the lock of the nightly folder, as a night writes it.
    let parent = dir.parent().map(PathBuf::from).context("the folder has no parent")?;
    let _lock = FolderLock::acquire(&parent, wait)?;
    let compared = diff::from_batch(&f.regressions, &dir.join("regressions.parquet"))?;
    let prev_name = f.provenance["previous"].as_str().map(str::to_string);
    let prev_timings = prev_name.as_ref().and_then(|p| Folder::read(&parent.join(p)).ok()).map(|p| p.timings);
    render_into(&dir, &stamp, &f, &compared, prev_name.as_deref().map(|n| (n, prev_timings.as_ref())))?;
    println!("report: {} and {}", dir.join("report.md").display(), dir.join("report.html").display());
    Ok(())
}
