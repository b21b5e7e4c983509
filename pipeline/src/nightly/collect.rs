//! What a night gathers from the stage folders of each dataset it ran: every `scores` row (the
//! leaderboard), every `curves` and TopoRAG `correlation` row, the stage timings and the per-item
//! latencies, as the nightly tables of `tgrag_schemas::tables`.

use std::path::Path;

use anyhow::Result;
use arrow::array::RecordBatch;
use tgrag_schemas::rows::{self, Row, Rows};
use tgrag_schemas::{columns, io, tables};

use crate::runner::read_manifest;
use tgrag_stages::shared::scores::score_rows;

/// A `leaderboard` row: a `scores` row and the stage folder it came from.
#[derive(Debug, Clone, PartialEq)]
struct LbRow {
    source: String,
    dataset: String,
    stage: String,
    method: String,
    split: String,
    group: String,
    metric: String,
    value: f64,
    n: u64,
    seed: Option<u64>,
}

impl Row for LbRow {
    fn put(&self, out: &mut Rows) {
        out.put(&self.source).put(&self.dataset).put(&self.stage).put(&self.method).put(&self.split).put(&self.group);
        out.put(&self.metric).put(self.value).put(self.n).put(self.seed);
    }
}

/// A `nightly_timings` row: a stage's total or one phase.
#[derive(Debug, Clone, PartialEq)]
struct TimingRow {
    dataset: String,
    stage: String,
    phase: String,
    seconds: f64,
    ran: bool,
}

impl Row for TimingRow {
    fn put(&self, out: &mut Rows) {
        out.put(&self.dataset).put(&self.stage).put(&self.phase).put(self.seconds).put(self.ran);
    }
}

/// A `nightly_latency` row: one item's time.
#[derive(Debug, Clone, PartialEq)]
struct LatencyRow {
    dataset: String,
    stage: String,
    what: String,
    ms: f64,
}

impl Row for LatencyRow {
    fn put(&self, out: &mut Rows) {
        out.put(&self.dataset).put(&self.stage).put(&self.what).put(self.ms);
    }
}

/// A `nightly_curves` row: a `curves` row and where it came from.
#[derive(Debug, Clone, PartialEq)]
struct CurveRow {
    dataset: String,
    source: String,
    model: String,
    variant: String,
    seed: u64,
    epoch: u32,
    metric: String,
    value: f64,
    kept: bool,
}

impl Row for CurveRow {
    fn put(&self, out: &mut Rows) {
        out.put(&self.dataset).put(&self.source).put(&self.model).put(&self.variant).put(self.seed).put(self.epoch);
        out.put(&self.metric).put(self.value).put(self.kept);
    }
}

/// A `nightly_correlation` row.
#[derive(Debug, Clone, PartialEq)]
struct CorrelationRow {
    dataset: String,
    measure: String,
    k: u32,
    pearson: f64,
    pairs: u64,
}

impl Row for CorrelationRow {
    fn put(&self, out: &mut Rows) {
        out.put(&self.dataset).put(&self.measure).put(self.k).put(self.pearson).put(self.pairs);
    }
}

/// The nightly tables of one or more datasets, built up row by row.
#[derive(Debug, Default)]
pub struct Collected {
    lb: Vec<LbRow>,
    timings: Vec<TimingRow>,
    latency: Vec<LatencyRow>,
    curves: Vec<CurveRow>,
    correlation: Vec<CorrelationRow>,
}

impl Collected {
    /// Reads every stage folder of `root` (`<outputs>/<dataset>`) that has a manifest, in
    /// pipeline order; `ran` names the stages this night ran (the others were up to date). Every
    /// `scores` table is checked as a leaderboard is (unique keys, finite values). On an error
    /// nothing of the dataset is added.
    pub fn add_dataset(&mut self, dataset: &str, root: &Path, ran: &[&str]) -> Result<()> {
        let mut one = Collected::default();
        one.read_dataset(dataset, root, ran)?;
        self.lb.append(&mut one.lb);
        self.timings.append(&mut one.timings);
        self.latency.append(&mut one.latency);
        self.curves.append(&mut one.curves);
        self.correlation.append(&mut one.correlation);
        Ok(())
    }

    /// Whether `root` has a stage folder with a manifest (a dataset's outputs folder).
    pub fn has_stages(root: &Path) -> bool {
        tgrag_stages::all().iter().any(|s| read_manifest(&root.join(s.info().name)).is_some())
    }

    fn read_dataset(&mut self, dataset: &str, root: &Path, ran: &[&str]) -> Result<()> {
        for stage in tgrag_stages::all() {
            let name = stage.info().name;
            let dir = root.join(name);
            let Some(m) = read_manifest(&dir) else { continue };
            let has = |f: &str| m.outputs.contains_key(f) && dir.join(f).is_file();
            let did_run = ran.contains(&name);
            let timing = |phase: &str, seconds: f64| TimingRow {
                dataset: dataset.into(),
                stage: name.into(),
                phase: phase.into(),
                seconds,
                ran: did_run,
            };
            self.timings.push(timing("total", m.total_seconds));
            self.timings.extend(m.timings.iter().map(|t| timing(&t.phase, t.seconds)));
            if has("scores.parquet") {
                self.read_scores(name, &dir.join("scores.parquet"))?;
            }
            if has("curves.parquet") {
                self.read_curves(dataset, name, &dir.join("curves.parquet"))?;
            }
            if has("correlation.parquet") {
                self.read_correlation(dataset, &dir.join("correlation.parquet"))?;
            }
            if has("latency.parquet") {
                let b = io::read_table(&dir.join("latency.parquet"), &tables::LATENCY)?;
                for (col, what) in [("plan_ms", "plan"), ("reason_ms", "reason"), ("organize_ms", "organize")] {
                    let v = columns::f64s(&b, col)?;
                    self.latency.extend((0..b.num_rows()).map(|i| LatencyRow {
                        dataset: dataset.into(),
                        stage: name.into(),
                        what: what.into(),
                        ms: v.value(i),
                    }));
                }
            }
            if has("retrieval_latency.parquet") {
                let b = io::read_table(&dir.join("retrieval_latency.parquet"), &tables::RETRIEVAL_LATENCY)?;
                let (me, ms) = (columns::strs(&b, "method")?, columns::f64s(&b, "ms")?);
                self.latency.extend((0..b.num_rows()).map(|i| LatencyRow {
                    dataset: dataset.into(),
                    stage: name.into(),
                    what: me.value(i).into(),
                    ms: ms.value(i),
                }));
            }
        }
        Ok(())
    }

    /// The leaderboard rows of a stage's `scores.parquet` (checked: the comparison key is given
    /// and unique, values are finite).
    pub fn read_scores(&mut self, name: &str, file: &Path) -> Result<()> {
        let b = io::read_table(file, &tables::SCORES)?;
        {
            use tgrag_schemas::validate::{InputRules, check_input};
            let key = &crate::nightly::diff::KEY[1..];
            check_input(file, "scores", &b, &InputRules { required: &key[..6], unique: &[key], finite: &["value"], non_empty: false })?;
        }
        for r in score_rows(&b)? {
            self.lb.push(LbRow {
                source: name.into(),
                dataset: r.dataset.into(),
                stage: r.stage.into(),
                method: r.method.into(),
                split: r.split.into(),
                group: r.group.into(),
                metric: r.metric.into(),
                value: r.value,
                n: r.n,
                seed: r.seed,
            });
        }
        Ok(())
    }

    fn read_curves(&mut self, dataset: &str, name: &str, file: &Path) -> Result<()> {
        let b = io::read_table(file, &tables::CURVES)?;
        let (mo, va, me) = (columns::strs(&b, "model")?, columns::strs(&b, "variant")?, columns::strs(&b, "metric")?);
        let (seed, ep, v) = (columns::u64s(&b, "seed")?, columns::u32s(&b, "epoch")?, columns::f64s(&b, "value")?);
        let kept = columns::bools(&b, "kept")?;
        for i in 0..b.num_rows() {
            self.curves.push(CurveRow {
                dataset: dataset.into(),
                source: name.into(),
                model: mo.value(i).into(),
                variant: va.value(i).into(),
                seed: seed.value(i),
                epoch: ep.value(i),
                metric: me.value(i).into(),
                value: v.value(i),
                kept: kept.value(i),
            });
        }
        Ok(())
    }

    fn read_correlation(&mut self, dataset: &str, file: &Path) -> Result<()> {
        let b = io::read_table(file, &tables::CORRELATION)?;
        let (me, k, p, n) =
            (columns::strs(&b, "measure")?, columns::u32s(&b, "k")?, columns::f64s(&b, "pearson")?, columns::u64s(&b, "pairs")?);
        for i in 0..b.num_rows() {
            self.correlation.push(CorrelationRow {
                dataset: dataset.into(),
                measure: me.value(i).into(),
                k: k.value(i),
                pearson: p.value(i),
                pairs: n.value(i),
            });
        }
        Ok(())
    }

    /// The `leaderboard` table.
    pub fn leaderboard(&self) -> Result<RecordBatch> {
        Ok(rows::batch(&tables::LEADERBOARD, &self.lb)?)
    }

    /// The `nightly_timings` table.
    pub fn timings(&self) -> Result<RecordBatch> {
        Ok(rows::batch(&tables::NIGHTLY_TIMINGS, &self.timings)?)
    }

    /// The `nightly_latency` table.
    pub fn latency(&self) -> Result<RecordBatch> {
        Ok(rows::batch(&tables::NIGHTLY_LATENCY, &self.latency)?)
    }

    /// The `nightly_curves` table.
    pub fn curves(&self) -> Result<RecordBatch> {
        Ok(rows::batch(&tables::NIGHTLY_CURVES, &self.curves)?)
    }

    /// The `nightly_correlation` table.
    pub fn correlation(&self) -> Result<RecordBatch> {
        Ok(rows::batch(&tables::NIGHTLY_CORRELATION, &self.correlation)?)
    }
}
