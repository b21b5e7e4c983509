//! A night split into cells: each dataset of the matrix is one cell (its stages form one DAG; two
//! datasets share nothing), run on its own (`tgrag nightly --cell ID`, on any machine that sees the
//! outputs folder) and gathered by `tgrag nightly --collect` into the night a single machine
//! would have written.
//!
//! A cell writes the very folder a one-machine night writes (`<outputs>/<dataset>/`, under that
//! folder's lock, with the same manifests and cache keys), then its record:
//! `<outputs>/cells/<plan>/<cell>.json` (status, stages that ran, seconds, host). The plan id is a
//! digest of the code, every stage's settings, the synthetic seed and the datasets of the matrix, so
//! the cells of one matrix are never mixed with another's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tgrag_datasets::registry::{DatasetSpec, RawKind, Source};
use tgrag_datasets::synthetic::Size;

use crate::nightly::Planned;

/// What a cell needs of a cluster node: cores, memory and wall-clock limit. Defaults by the kind of
/// dataset (`--sbatch` options override them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Resources {
    pub cpus: u32,
    pub mem_gb: u32,
    pub minutes: u32,
}

/// One cell of a night's matrix: a dataset, available or not.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The stable id: the dataset's outputs folder name.
    pub id: String,
    /// The dataset's kind, in words (`synthetic tiny`, `graphqa`, `stark`, …).
    pub kind: &'static str,
    pub resources: Resources,
    pub planned: Planned,
}

/// A night's matrix: its cells and its id.
#[derive(Debug, Clone)]
pub struct Plan {
    pub id: String,
    pub cells: Vec<Cell>,
}

/// The kind and default resources of a dataset.
fn kind_of(p: &Planned) -> (&'static str, Resources) {
    let r = |cpus, mem_gb, minutes| Resources { cpus, mem_gb, minutes };
    let Ok(spec) = &p.spec else { return ("unavailable", r(1, 1, 10)) };
    match &spec.source {
        Source::Synthetic(c) => match c.size {
            Size::Tiny => ("synthetic tiny", r(2, 4, 30)),
            Size::Small => ("synthetic small", r(2, 8, 60)),
            Size::Medium => ("synthetic medium", r(4, 16, 240)),
            _ => ("synthetic large", r(8, 24, 720)),
        },
        Source::Stark { .. } => ("stark", r(4, 24, 720)),
        Source::Raw { kind, .. } => match kind {
            RawKind::ExplaGraphs | RawKind::SceneGraphs | RawKind::WebQsp => ("graphqa", r(2, 16, 240)),
            RawKind::PrimekgPaths => ("paths", r(2, 8, 60)),
            RawKind::OgbProducts => ("text-attributed graph, large", r(4, 24, 720)),
            _ => ("text-attributed graph", r(2, 16, 240)),
        },
        Source::Folder(_) => ("folder", r(2, 8, 120)),
        Source::NotYetAvailable { .. } => ("unavailable", r(1, 1, 10)),
    }
}

impl Plan {
    /// The plan of the discovered datasets under these settings (`configs`: every stage's, as the
    /// night runs them).
    pub fn new(planned: Vec<Planned>, configs: &BTreeMap<String, serde_json::Value>, seed: u64) -> Plan {
        let names: Vec<&str> = planned.iter().map(|p| p.name.as_str()).collect();
        let key = serde_json::json!({
            "code": crate::runner::CODE_DIGEST,
            "configs": configs,
            "seed": seed,
            "datasets": names,
        });
        let id = tgrag_schemas::io::hex(&Sha256::digest(key.to_string().as_bytes()))[..16].to_string();
        let cells = planned
            .into_iter()
            .map(|p| {
                let (kind, resources) = kind_of(&p);
                Cell { id: p.name.clone(), kind, resources, planned: p }
            })
            .collect();
        Plan { id, cells }
    }

    /// The cells that can run (their dataset is available).
    pub fn runnable(&self) -> impl Iterator<Item = &Cell> {
        self.cells.iter().filter(|c| c.planned.spec.is_ok())
    }

    /// The cell `id` and its dataset; a config error when it is unavailable, or not a cell of the
    /// plan (listing the plan's cells).
    pub fn cell(&self, id: &str) -> Result<(&Cell, &DatasetSpec)> {
        match self.cells.iter().find(|c| c.id == id) {
            Some(c) => match &c.planned.spec {
                Ok(spec) => Ok((c, spec)),
                Err(why) => bail_config!("--cell {id}: the dataset is unavailable on this machine ({why})"),
            },
            None => {
                let ids: Vec<&str> = self.runnable().map(|c| c.id.as_str()).collect();
                bail_config!("--cell {id}: not a cell of this night's plan {} (its cells: {})", self.id, ids.join(", "))
            }
        }
    }

    /// Where the records of this plan's cells go: `<outputs>/cells/<plan>/`.
    pub fn dir(&self, outputs: &Path) -> PathBuf {
        outputs.join("cells").join(&self.id)
    }
}

/// What a finished cell says of itself (`<outputs>/cells/<plan>/<cell>.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub plan: String,
    pub cell: String,
    /// `ok` or `failed`.
    pub status: String,
    /// The error when failed; empty when ok.
    pub detail: String,
    /// The stages that ran (the others were up to date).
    pub ran: Vec<String>,
    pub skipped: u32,
    pub seconds: f64,
    pub host: String,
    pub started_at: String,
    pub finished_at: String,
}

/// The state of one cell, read back from its record.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// No record: not run yet, running, or killed before it finished.
    Pending,
    Done(Box<Record>),
}

fn record_path(dir: &Path, cell: &str) -> PathBuf {
    dir.join(format!("{cell}.json"))
}

/// Writes a cell's record atomically (a killed cell leaves no record, and its rerun skips the
/// stages it finished).
pub fn write_record(dir: &Path, r: &Record) -> Result<()> {
    tgrag_schemas::io::ensure_owned_dir(dir)?;
    let text = serde_json::to_string_pretty(r).context("a cell record as JSON")?;
    tgrag_schemas::io::write_bytes_atomic(&record_path(dir, &r.cell), text.as_bytes())?;
    Ok(())
}

/// Reads a cell's record: pending when there is none; an input error naming the file when it does
/// not read, or belongs to another cell or plan.
pub fn read_record(dir: &Path, plan: &str, cell: &str) -> Result<State> {
    let path = record_path(dir, cell);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::Pending),
        Err(e) => bail_input!("{}: {e}", path.display()),
    };
    let r: Record = serde_json::from_str(&text).map_err(|e| input!("{}: not a cell record: {e}", path.display()))?;
    if r.plan != plan || r.cell != cell {
        bail_input!("{}: the record of cell {} of plan {}, not of cell {cell} of plan {plan}", path.display(), r.cell, r.plan);
    }
    if r.status != "ok" && r.status != "failed" {
        bail_input!("{}: field `status`: {:?} is neither \"ok\" nor \"failed\"", path.display(), r.status);
    }
    if !r.seconds.is_finite() || r.seconds < 0.0 {
        bail_input!("{}: field `seconds`: {} is not a duration", path.display(), r.seconds);
    }
    Ok(State::Done(Box::new(r)))
}

/// The lines `--plan` prints: one per cell (id, kind, resources, availability).
pub fn describe(plan: &Plan) -> Vec<String> {
    let mut out = vec![format!("plan {}: {} cell(s), {} runnable", plan.id, plan.cells.len(), plan.runnable().count())];
    out.push(format!("  {:<20} {:<30} {:>4} {:>6} {:>8}  status", "cell", "kind", "cpus", "memory", "time"));
    for c in &plan.cells {
        let status = match &c.planned.spec {
            Ok(_) => "runnable".to_string(),
            Err(why) => format!("unavailable ({why})"),
        };
        let r = c.resources;
        out.push(format!("  {:<20} {:<30} {:>4} {:>5}G {:>8}  {status}", c.id, c.kind, r.cpus, r.mem_gb, hours(r.minutes)));
    }
    out
}

/// `H:MM:00`, as sbatch's `--time` reads it.
pub fn hours(minutes: u32) -> String {
    format!("{}:{:02}:00", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(name: &str, ok: bool) -> Planned {
        let spec = if ok {
            tgrag_datasets::registry::resolve("synthetic", None, tgrag_datasets::registry::DatasetOptions { size: Size::Tiny, seed: 1 })
                .map_err(|e| e.to_string())
        } else {
            Err("not here".to_string())
        };
        Planned { name: name.into(), spec }
    }

    #[test]
    fn plan_ids_change_with_settings_and_datasets_and_records_round_trip() {
        let cfg = |k: u64| BTreeMap::from([("bm25".to_string(), serde_json::json!({ "k": k }))]);
        let a = Plan::new(vec![planned("synthetic-tiny", true), planned("enron", false)], &cfg(10), 42);
        let same = Plan::new(vec![planned("synthetic-tiny", true), planned("enron", false)], &cfg(10), 42);
        assert_eq!(a.id, same.id, "the same matrix has the same id");
        assert_ne!(a.id, Plan::new(vec![planned("synthetic-tiny", true)], &cfg(10), 42).id);
        assert_ne!(a.id, Plan::new(vec![planned("synthetic-tiny", true), planned("enron", false)], &cfg(11), 42).id);
        assert_ne!(a.id, Plan::new(vec![planned("synthetic-tiny", true), planned("enron", false)], &cfg(10), 7).id);
        assert_eq!(a.runnable().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["synthetic-tiny"]);
        assert!(a.cell("enron").is_err() && a.cell("nope").is_err() && a.cell("synthetic-tiny").is_ok());

        let d = tempfile::tempdir().expect("tmp");
        assert_eq!(read_record(d.path(), &a.id, "synthetic-tiny").expect("read"), State::Pending);
        let r = Record {
            plan: a.id.clone(),
            cell: "synthetic-tiny".into(),
            status: "ok".into(),
            detail: String::new(),
            ran: vec!["ingest".into()],
            skipped: 3,
            seconds: 1.5,
            host: "h".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:00:01Z".into(),
        };
        write_record(d.path(), &r).expect("write");
        assert_eq!(read_record(d.path(), &a.id, "synthetic-tiny").expect("read"), State::Done(Box::new(r.clone())));
        // Another plan's record, a bad status and a torn file are refused, naming the file.
        let e = read_record(d.path(), "0000", "synthetic-tiny").expect_err("other plan");
        assert!(e.to_string().contains("synthetic-tiny.json"), "{e}");
        write_record(d.path(), &Record { status: "maybe".into(), ..r }).expect("write");
        assert!(read_record(d.path(), &a.id, "synthetic-tiny").expect_err("status").to_string().contains("`status`"));
        std::fs::write(d.path().join("synthetic-tiny.json"), "{\"plan\":").expect("write");
        assert!(read_record(d.path(), &a.id, "synthetic-tiny").is_err());
    }

    #[test]
    fn sbatch_times_read_as_hours_and_minutes() {
        assert_eq!(hours(30), "0:30:00");
        assert_eq!(hours(720), "12:00:00");
        assert_eq!(hours(61), "1:01:00");
    }
}
