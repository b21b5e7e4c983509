//! What a night gathers from the stage folders of each dataset it ran: every `scores` row (the
//! leaderboard), every `curves` and TopoRAG `correlation` row, the stage timings and the per-item
//! latencies, as the nightly tables of `tgrag_schemas::tables`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use tgrag_schemas::{columns, io, tables};

use crate::runner::read_manifest;

/// A leaderboard row: source, dataset, stage, method, split, group, metric, value, n, seed.
type LbRow = (String, String, String, String, String, String, String, f64, u64, Option<u64>);
/// A curve row: dataset, source, model, variant, seed, epoch, metric, value, kept.
type CurveRow = (String, String, String, String, u64, u32, String, f64, bool);

/// The nightly tables of one or more datasets, built up row by row.
#[derive(Debug, Default)]
pub struct Collected {
    // leaderboard
    lb: Vec<LbRow>,
    // nightly_timings: dataset, stage, phase, seconds, ran
    timings: Vec<(String, String, String, f64, bool)>,
    // nightly_latency: dataset, stage, what, ms
    latency: Vec<(String, String, String, f64)>,
    // nightly_curves: dataset, source, model, variant, seed, epoch, metric, value, kept
    curves: Vec<CurveRow>,
    // nightly_correlation: dataset, measure, k, pearson, pairs
    correlation: Vec<(String, String, u32, f64, u64)>,
}

fn strs(v: impl IntoIterator<Item = String>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
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
            self.timings.push((dataset.into(), name.into(), "total".into(), m.total_seconds, did_run));
            for t in &m.timings {
                self.timings.push((dataset.into(), name.into(), t.phase.clone(), t.seconds, did_run));
            }
            if has("scores.parquet") {
                let file = dir.join("scores.parquet");
                let b = io::read_table(&file, &tables::SCORES)?;
                {
                    use tgrag_schemas::validate::{InputRules, check_input};
                    let key = &crate::nightly::diff::KEY[1..];
                    check_input(
                        &file,
                        "scores",
                        &b,
                        &InputRules { required: &key[..6], unique: &[key], finite: &["value"], non_empty: false },
                    )?;
                }
                let (d, st, me, sp, g, mt) = (
                    columns::strs(&b, "dataset")?,
                    columns::strs(&b, "stage")?,
                    columns::strs(&b, "method")?,
                    columns::strs(&b, "split")?,
                    columns::strs(&b, "group")?,
                    columns::strs(&b, "metric")?,
                );
                let (v, n, seed) = (columns::f64s(&b, "value")?, columns::u64s(&b, "n")?, columns::u64s(&b, "seed")?);
                for i in 0..b.num_rows() {
                    self.lb.push((
                        name.into(),
                        d.value(i).into(),
                        st.value(i).into(),
                        me.value(i).into(),
                        sp.value(i).into(),
                        g.value(i).into(),
                        mt.value(i).into(),
                        v.value(i),
                        n.value(i),
                        (!seed.is_null(i)).then(|| seed.value(i)),
                    ));
                }
            }
            if has("curves.parquet") {
                let b = io::read_table(&dir.join("curves.parquet"), &tables::CURVES)?;
                let (mo, va, me) = (columns::strs(&b, "model")?, columns::strs(&b, "variant")?, columns::strs(&b, "metric")?);
                let (seed, ep, v) = (columns::u64s(&b, "seed")?, columns::u32s(&b, "epoch")?, columns::f64s(&b, "value")?);
                let kept = columns::bools(&b, "kept")?;
                for i in 0..b.num_rows() {
                    self.curves.push((
                        dataset.into(),
                        name.into(),
                        mo.value(i).into(),
                        va.value(i).into(),
                        seed.value(i),
                        ep.value(i),
                        me.value(i).into(),
                        v.value(i),
                        kept.value(i),
                    ));
                }
            }
            if has("correlation.parquet") {
                let b = io::read_table(&dir.join("correlation.parquet"), &tables::CORRELATION)?;
                let (me, k, p, n) =
                    (columns::strs(&b, "measure")?, columns::u32s(&b, "k")?, columns::f64s(&b, "pearson")?, columns::u64s(&b, "pairs")?);
                for i in 0..b.num_rows() {
                    self.correlation.push((dataset.into(), me.value(i).into(), k.value(i), p.value(i), n.value(i)));
                }
            }
            if has("latency.parquet") {
                let b = io::read_table(&dir.join("latency.parquet"), &tables::LATENCY)?;
                for (col, what) in [("plan_ms", "plan"), ("reason_ms", "reason"), ("organize_ms", "organize")] {
                    let v = columns::f64s(&b, col)?;
                    self.latency.extend((0..b.num_rows()).map(|i| (dataset.to_string(), name.to_string(), what.to_string(), v.value(i))));
                }
            }
            if has("retrieval_latency.parquet") {
                let b = io::read_table(&dir.join("retrieval_latency.parquet"), &tables::RETRIEVAL_LATENCY)?;
                let (me, ms) = (columns::strs(&b, "method")?, columns::f64s(&b, "ms")?);
                self.latency
                    .extend((0..b.num_rows()).map(|i| (dataset.to_string(), name.to_string(), me.value(i).to_string(), ms.value(i))));
            }
        }
        Ok(())
    }

    pub fn leaderboard(&self) -> Result<RecordBatch> {
        let l = &self.lb;
        Ok(tables::LEADERBOARD.batch(vec![
            strs(l.iter().map(|r| r.0.clone())),
            strs(l.iter().map(|r| r.1.clone())),
            strs(l.iter().map(|r| r.2.clone())),
            strs(l.iter().map(|r| r.3.clone())),
            strs(l.iter().map(|r| r.4.clone())),
            strs(l.iter().map(|r| r.5.clone())),
            strs(l.iter().map(|r| r.6.clone())),
            Arc::new(Float64Array::from_iter_values(l.iter().map(|r| r.7))),
            Arc::new(UInt64Array::from_iter_values(l.iter().map(|r| r.8))),
            Arc::new(UInt64Array::from_iter(l.iter().map(|r| r.9))),
        ])?)
    }

    pub fn timings(&self) -> Result<RecordBatch> {
        let t = &self.timings;
        Ok(tables::NIGHTLY_TIMINGS.batch(vec![
            strs(t.iter().map(|r| r.0.clone())),
            strs(t.iter().map(|r| r.1.clone())),
            strs(t.iter().map(|r| r.2.clone())),
            Arc::new(Float64Array::from_iter_values(t.iter().map(|r| r.3))),
            Arc::new(BooleanArray::from(t.iter().map(|r| r.4).collect::<Vec<_>>())),
        ])?)
    }

    pub fn latency(&self) -> Result<RecordBatch> {
        let t = &self.latency;
        Ok(tables::NIGHTLY_LATENCY.batch(vec![
            strs(t.iter().map(|r| r.0.clone())),
            strs(t.iter().map(|r| r.1.clone())),
            strs(t.iter().map(|r| r.2.clone())),
            Arc::new(Float64Array::from_iter_values(t.iter().map(|r| r.3))),
        ])?)
    }

    pub fn curves(&self) -> Result<RecordBatch> {
        let c = &self.curves;
        Ok(tables::NIGHTLY_CURVES.batch(vec![
            strs(c.iter().map(|r| r.0.clone())),
            strs(c.iter().map(|r| r.1.clone())),
            strs(c.iter().map(|r| r.2.clone())),
            strs(c.iter().map(|r| r.3.clone())),
            Arc::new(UInt64Array::from_iter_values(c.iter().map(|r| r.4))),
            Arc::new(UInt32Array::from_iter_values(c.iter().map(|r| r.5))),
            strs(c.iter().map(|r| r.6.clone())),
            Arc::new(Float64Array::from_iter_values(c.iter().map(|r| r.7))),
            Arc::new(BooleanArray::from(c.iter().map(|r| r.8).collect::<Vec<_>>())),
        ])?)
    }

    pub fn correlation(&self) -> Result<RecordBatch> {
        let c = &self.correlation;
        Ok(tables::NIGHTLY_CORRELATION.batch(vec![
            strs(c.iter().map(|r| r.0.clone())),
            strs(c.iter().map(|r| r.1.clone())),
            Arc::new(UInt32Array::from_iter_values(c.iter().map(|r| r.2))),
            Arc::new(Float64Array::from_iter_values(c.iter().map(|r| r.3))),
            Arc::new(UInt64Array::from_iter_values(c.iter().map(|r| r.4))),
        ])?)
    }
}
