//! One night against another: every leaderboard metric compared, within a noise band per metric.
//!
//! * The band of a metric is the configured tolerance for its name when one is given; else, where
//!   several seeds ran (a `<metric>_std` row beside it), twice the larger of the two nights'
//!   seed-to-seed standard deviations; else the default absolute tolerance.
//! * Metrics with a better direction (declared with the metric, `tgrag_stages::shared::metric`)
//!   are `regression` or `improvement` when they move beyond the band, else `unchanged`; the others
//!   (subgraph sizes, counts) are `changed` or `unchanged` and never fail a night, and so is a
//!   metric no declaration names (a leaderboard written by other code): it is never guessed from
//!   its name. Rows only in one night are `new` or `vanished`.
//! * Per-seed rows are compared only where no mean over seeds (a row without seed) exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Result;
use arrow::array::{Array, Float64Array, RecordBatch, StringArray, UInt64Array};
use serde::{Deserialize, Serialize};
use tgrag_schemas::rows::{Row, Rows};
use tgrag_schemas::{SchemaError, columns, tables};
use tgrag_stages::shared::metric::{self, Direction};

/// A leaderboard row's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub source: String,
    pub dataset: String,
    pub stage: String,
    pub method: String,
    pub split: String,
    pub group: String,
    pub metric: String,
    pub seed: Option<u64>,
}

impl Key {
    fn with_metric(&self, metric: &str, seed: Option<u64>) -> Key {
        Key { metric: metric.to_string(), seed, ..self.clone() }
    }
}

/// The columns that identify a leaderboard row.
pub const KEY: [&str; 8] = ["source", "dataset", "stage", "method", "split", "group", "metric", "seed"];

/// Checks a leaderboard read from `file`: every key once, every value a finite number (a NaN has no
/// direction, and a second row of a key would silently replace the first).
pub fn check(lb: &RecordBatch, file: &Path) -> Result<()> {
    use tgrag_schemas::validate::{InputRules, check_input};
    check_input(file, "leaderboard", lb, &InputRules { required: &KEY[..7], unique: &[&KEY], finite: &["value"], non_empty: false })?;
    Ok(())
}

/// The metric names of a leaderboard that a band can apply to (not the `_std` rows).
pub fn metrics(lb: &RecordBatch) -> Result<BTreeSet<String>> {
    let m = columns::strs(lb, "metric")?;
    Ok((0..lb.num_rows()).map(|i| m.value(i)).filter(|m| !m.ends_with("_std")).map(str::to_string).collect())
}

/// Parses `--default-tolerance`: a finite number ≥ 0.
pub fn tolerance_value(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("must be a finite number ≥ 0, got {s}"));
    }
    Ok(v)
}

/// The key columns of a leaderboard or `regressions` table.
struct KeyColumns<'a> {
    source: &'a StringArray,
    dataset: &'a StringArray,
    stage: &'a StringArray,
    method: &'a StringArray,
    split: &'a StringArray,
    group: &'a StringArray,
    metric: &'a StringArray,
    seed: &'a UInt64Array,
}

impl<'a> KeyColumns<'a> {
    fn of(b: &'a RecordBatch) -> Result<KeyColumns<'a>> {
        let c = |n: &str| columns::strs(b, n);
        Ok(KeyColumns {
            source: c("source")?,
            dataset: c("dataset")?,
            stage: c("stage")?,
            method: c("method")?,
            split: c("split")?,
            group: c("group")?,
            metric: c("metric")?,
            seed: columns::u64s(b, "seed")?,
        })
    }

    fn key(&self, i: usize) -> Key {
        Key {
            source: self.source.value(i).into(),
            dataset: self.dataset.value(i).into(),
            stage: self.stage.value(i).into(),
            method: self.method.value(i).into(),
            split: self.split.value(i).into(),
            group: self.group.value(i).into(),
            metric: self.metric.value(i).into(),
            seed: (!self.seed.is_null(i)).then(|| self.seed.value(i)),
        }
    }
}

/// The leaderboard as a map.
pub fn rows(lb: &RecordBatch) -> Result<BTreeMap<Key, f64>> {
    let keys = KeyColumns::of(lb)?;
    let v = columns::f64s(lb, "value")?;
    Ok((0..lb.num_rows()).map(|i| (keys.key(i), v.value(i))).collect())
}

/// Which way a metric is better: `Some(true)` higher, `Some(false)` lower, `None` neither, as its
/// declaration says; `None` (the declared default) for a name no declaration covers.
pub fn higher_is_better(metric: &str) -> Option<bool> {
    metric::direction(metric).ok().and_then(Direction::higher_is_better)
}

/// How a row of the `regressions` table compares (written as its lowercase name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A metric with a better direction moved the wrong way beyond its band.
    Regression,
    /// A metric with a better direction moved the right way beyond its band.
    Improvement,
    /// Within the band.
    Unchanged,
    /// A metric without a better direction moved beyond its band.
    Changed,
    /// Only in the current night.
    New,
    /// Only in the previous night.
    Vanished,
}

impl Status {
    /// Every status, in the order reports list them.
    pub const ALL: [Status; 6] =
        [Status::Regression, Status::Improvement, Status::Changed, Status::New, Status::Vanished, Status::Unchanged];

    /// The name written to the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Regression => "regression",
            Status::Improvement => "improvement",
            Status::Unchanged => "unchanged",
            Status::Changed => "changed",
            Status::New => "new",
            Status::Vanished => "vanished",
        }
    }
}

/// How many of `compared` have each status, as the one line the nightly report and `tgrag compare`
/// print: `2 regression(s), 1 improvement(s), 5 unchanged, 0 changed without a better direction,
/// 0 new, 0 vanished`; `bold` sets the regressions in Markdown bold.
pub fn status_counts(compared: &[Compared], bold: bool) -> String {
    let count = |s: Status| compared.iter().filter(|r| r.status == s).count();
    let regressions = format!("{} regression(s)", count(Status::Regression));
    format!(
        "{}, {} improvement(s), {} unchanged, {} changed without a better direction, {} new, {} vanished",
        if bold { format!("**{regressions}**") } else { regressions },
        count(Status::Improvement),
        count(Status::Unchanged),
        count(Status::Changed),
        count(Status::New),
        count(Status::Vanished)
    )
}

/// Where a row's band came from (written as the words below).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ToleranceSource {
    /// `--tolerance METRIC=VALUE`.
    #[serde(rename = "configured")]
    Configured,
    /// Twice the larger seed-to-seed standard deviation of the two nights.
    #[serde(rename = "seed spread")]
    SeedSpread,
    /// `--default-tolerance`.
    #[serde(rename = "default")]
    Default,
}

impl ToleranceSource {
    /// Every source.
    pub const ALL: [ToleranceSource; 3] = [ToleranceSource::Configured, ToleranceSource::SeedSpread, ToleranceSource::Default];

    /// The words written to the `tolerance_from` column.
    pub fn as_str(self) -> &'static str {
        match self {
            ToleranceSource::Configured => "configured",
            ToleranceSource::SeedSpread => "seed spread",
            ToleranceSource::Default => "default",
        }
    }
}

macro_rules! words {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<Self, String> {
                <$t>::ALL.into_iter().find(|x| x.as_str() == s).ok_or_else(|| {
                    let names: Vec<&str> = <$t>::ALL.iter().map(|x| x.as_str()).collect();
                    format!("`{}` is none of {}", tgrag_schemas::quote(s), names.join(", "))
                })
            }
        }
    };
}
words!(Status);
words!(ToleranceSource);

/// How changes are judged.
#[derive(Debug, Clone)]
pub struct Tolerances {
    /// Per metric name (`hit1=0.02`).
    pub per_metric: BTreeMap<String, f64>,
    /// Where neither a configured value nor a seed spread applies.
    pub default: f64,
}

impl Default for Tolerances {
    fn default() -> Self {
        Tolerances { per_metric: BTreeMap::new(), default: 0.01 }
    }
}

impl Tolerances {
    /// Parses `metric=value` settings.
    pub fn parse(items: &[String], default: f64) -> Result<Tolerances> {
        let mut per_metric = BTreeMap::new();
        for it in items {
            let (m, v) = it.split_once('=').ok_or_else(|| crate::config!("--tolerance {it}: expected METRIC=VALUE"))?;
            let v: f64 = v.trim().parse().map_err(|_| crate::config!("--tolerance {it}: `{v}` is not a number"))?;
            if !(v.is_finite() && v >= 0.0) {
                bail_config!("--tolerance {it}: the tolerance must be a finite number ≥ 0");
            }
            per_metric.insert(m.trim().to_string(), v);
        }
        if !(default.is_finite() && default >= 0.0) {
            bail_config!("--default-tolerance {default}: must be a finite number ≥ 0");
        }
        Ok(Tolerances { per_metric, default })
    }

    /// Refuses a band for a metric not in `known` (the metrics of `what`): it could never apply.
    pub fn check_known(&self, known: &BTreeSet<String>, what: &str) -> Result<()> {
        if let Some(m) = self.per_metric.keys().find(|m| !known.contains(*m)) {
            let list: Vec<&str> = known.iter().map(String::as_str).collect();
            bail_config!(
                "--tolerance {m}=…: no metric `{m}` in {what}; known metrics: {}",
                if list.is_empty() { "none".to_string() } else { list.join(", ") }
            );
        }
        Ok(())
    }
}

/// One compared metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    pub key: Key,
    pub previous: Option<f64>,
    pub current: Option<f64>,
    pub tolerance: f64,
    pub tolerance_from: ToleranceSource,
    pub status: Status,
}

impl Compared {
    pub fn delta(&self) -> Option<f64> {
        Some(self.current? - self.previous?)
    }
}

/// Every metric of `current` and `previous` compared (see the module docs), in key order.
pub fn compare(previous: &BTreeMap<Key, f64>, current: &BTreeMap<Key, f64>, tol: &Tolerances) -> Vec<Compared> {
    let keys: BTreeSet<&Key> = previous.keys().chain(current.keys()).collect();
    let has_mean =
        |k: &Key| previous.contains_key(&k.with_metric(&k.metric, None)) || current.contains_key(&k.with_metric(&k.metric, None));
    let mut out = Vec::new();
    for k in keys {
        if k.metric.ends_with("_std") || (k.seed.is_some() && has_mean(k)) {
            continue;
        }
        let (p, c) = (previous.get(k).copied(), current.get(k).copied());
        let std_key = k.with_metric(&format!("{}_std", k.metric), None);
        let spread = [previous.get(&std_key), current.get(&std_key)]
            .into_iter()
            .flatten()
            .copied()
            .filter(|s| s.is_finite())
            .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
        let (tolerance, from) = match (tol.per_metric.get(&k.metric), spread) {
            (Some(&t), _) => (t, ToleranceSource::Configured),
            (None, Some(s)) if s > 0.0 => (2.0 * s, ToleranceSource::SeedSpread),
            _ => (tol.default, ToleranceSource::Default),
        };
        let status = match (p, c) {
            (None, Some(_)) => Status::New,
            (Some(_), None) => Status::Vanished,
            (Some(p), Some(c)) => {
                let d = c - p;
                let same = d.abs() <= tolerance || (p.is_nan() && c.is_nan());
                match higher_is_better(&k.metric) {
                    _ if same => Status::Unchanged,
                    Some(true) if d < 0.0 => Status::Regression,
                    Some(true) => Status::Improvement,
                    Some(false) if d > 0.0 => Status::Regression,
                    Some(false) => Status::Improvement,
                    None => Status::Changed,
                }
            }
            (None, None) => continue,
        };
        out.push(Compared { key: k.clone(), previous: p, current: c, tolerance, tolerance_from: from, status });
    }
    out
}

/// A method of a dataset's stage folder: (dataset, source, method).
pub type MethodId = (String, String, String);

/// Methods (per dataset and source) present in only one of the two nights: (new, vanished).
pub fn method_changes(previous: &BTreeMap<Key, f64>, current: &BTreeMap<Key, f64>) -> (Vec<MethodId>, Vec<MethodId>) {
    let set = |m: &BTreeMap<Key, f64>| -> BTreeSet<MethodId> {
        m.keys().map(|k| (k.dataset.clone(), k.source.clone(), k.method.clone())).collect()
    };
    let (p, c) = (set(previous), set(current));
    (c.difference(&p).cloned().collect(), p.difference(&c).cloned().collect())
}

impl Row for Compared {
    fn put(&self, out: &mut Rows) {
        let k = &self.key;
        out.put(&k.source).put(&k.dataset).put(&k.stage).put(&k.method).put(&k.split).put(&k.group).put(&k.metric).put(k.seed);
        out.put(self.previous).put(self.current).put(self.delta()).put(self.tolerance);
        out.put(self.tolerance_from.as_str()).put(self.status.as_str());
    }
}

/// The `regressions` table.
pub fn batch(rows: &[Compared]) -> Result<RecordBatch> {
    Ok(tgrag_schemas::rows::batch(&tables::REGRESSIONS, rows)?)
}

/// The `regressions` table read back from `file`; a `status` or `tolerance_from` that is not one of
/// its words is an error naming the file, row and column.
pub fn from_batch(b: &RecordBatch, file: &Path) -> Result<Vec<Compared>> {
    let keys = KeyColumns::of(b)?;
    let (tf, status) = (columns::strs(b, "tolerance_from")?, columns::strs(b, "status")?);
    let (prev, cur, tol) = (columns::f64s(b, "previous")?, columns::f64s(b, "current")?, columns::f64s(b, "tolerance")?);
    let opt = |a: &Float64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
    fn word<T: std::str::FromStr<Err = String>>(col: &StringArray, file: &Path, column: &str, i: usize) -> Result<T, SchemaError> {
        col.value(i).parse().map_err(|e: String| SchemaError::violation(file, "regressions", Some(i), Some(column), e))
    }
    (0..b.num_rows())
        .map(|i| {
            Ok(Compared {
                key: keys.key(i),
                previous: opt(prev, i),
                current: opt(cur, i),
                tolerance: tol.value(i),
                tolerance_from: word(tf, file, "tolerance_from", i)?,
                status: word(status, file, "status", i)?,
            })
        })
        .collect()
}

/// A compared metric in one line (`synthetic metrics/mor hit1 (all, *): 0.8125 → 0.7000 (−0.1125; band 0.0100, default)`).
pub fn line(r: &Compared) -> String {
    let k = &r.key;
    let seed = k.seed.map(|s| format!(", seed {s}")).unwrap_or_default();
    let f = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.4}"));
    let delta = r.delta().map(|d| format!(" ({d:+.4}; band {:.4}, {})", r.tolerance, r.tolerance_from)).unwrap_or_default();
    format!(
        "{} {}/{} {} ({}, {}{seed}): {} → {}{delta}",
        k.dataset,
        k.source,
        k.method,
        k.metric,
        k.split,
        k.group,
        f(r.previous),
        f(r.current)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(method: &str, metric: &str, seed: Option<u64>) -> Key {
        Key {
            source: "metrics".into(),
            dataset: "synthetic".into(),
            stage: method.into(),
            method: method.into(),
            split: "all".into(),
            group: "*".into(),
            metric: metric.into(),
            seed,
        }
    }

    #[test]
    fn directions_bands_and_statuses() {
        assert_eq!(higher_is_better("hit1"), Some(true));
        assert_eq!(higher_is_better("hits_at_100"), Some(true));
        assert_eq!(higher_is_better("answer_recall"), Some(true));
        assert_eq!(higher_is_better("mor_mrr"), Some(true));
        assert_eq!(higher_is_better("subgraph_nodes"), None);
        assert_eq!(higher_is_better("accuracy_std"), None);
        // Not declared: no direction, whatever its name suggests.
        assert_eq!(higher_is_better("train_loss"), None);
        assert_eq!(higher_is_better("hit_rate"), None);
        let prev: BTreeMap<Key, f64> = [
            (key("mor", "hit1", None), 0.80),
            (key("bm25", "hit1", None), 0.15),
            (key("bm25", "mrr", None), 0.20),
            (key("gcn", "accuracy", None), 0.70),
            (key("gcn", "accuracy_std", None), 0.05),
            (key("gcn", "accuracy", Some(0)), 0.65),
            (key("pcst", "subgraph_nodes", None), 10.0),
            (key("old", "hit1", None), 0.5),
        ]
        .into();
        let cur: BTreeMap<Key, f64> = [
            (key("mor", "hit1", None), 0.70),     // −0.10: regression
            (key("bm25", "hit1", None), 0.155),   // within the default band
            (key("bm25", "mrr", None), 0.25),     // +0.05: improvement
            (key("gcn", "accuracy", None), 0.62), // −0.08 within 2 × 0.05
            (key("gcn", "accuracy_std", None), 0.04),
            (key("gcn", "accuracy", Some(0)), 0.40),     // per-seed row: a mean exists, not judged
            (key("pcst", "subgraph_nodes", None), 14.0), // no direction: changed
            (key("new", "hit1", None), 0.3),
        ]
        .into();
        let got = compare(&prev, &cur, &Tolerances::default());
        let status = |m: &str, metric: &str| {
            got.iter().find(|r| r.key.method == m && r.key.metric == metric && r.key.seed.is_none()).map(|r| r.status)
        };
        assert_eq!(status("mor", "hit1"), Some(Status::Regression));
        assert_eq!(status("bm25", "hit1"), Some(Status::Unchanged));
        assert_eq!(status("bm25", "mrr"), Some(Status::Improvement));
        assert_eq!(status("gcn", "accuracy"), Some(Status::Unchanged));
        assert_eq!(status("pcst", "subgraph_nodes"), Some(Status::Changed));
        assert_eq!(status("new", "hit1"), Some(Status::New));
        assert_eq!(status("old", "hit1"), Some(Status::Vanished));
        assert!(got.iter().all(|r| r.key.seed.is_none() && !r.key.metric.ends_with("_std")));
        let gcn = got.iter().find(|r| r.key.method == "gcn").expect("gcn");
        assert_eq!((gcn.tolerance, gcn.tolerance_from), (0.1, ToleranceSource::SeedSpread));
        // A configured band wins; a tighter one turns the gcn drop into a regression.
        let tight = Tolerances::parse(&["accuracy=0.01".into()], 0.01).expect("parse");
        let got = compare(&prev, &cur, &tight);
        assert_eq!(
            got.iter().find(|r| r.key.method == "gcn").map(|r| (r.status, r.tolerance_from)),
            Some((Status::Regression, ToleranceSource::Configured))
        );
        // Unchanged nights compare as unchanged everywhere.
        assert!(compare(&cur, &cur, &Tolerances::default()).iter().all(|r| r.status == Status::Unchanged));
        // The table round-trips.
        let b = batch(&got).expect("batch");
        assert_eq!(from_batch(&b, Path::new("regressions.parquet")).expect("read"), got);
        let (new, gone) = method_changes(&prev, &cur);
        assert_eq!(new, vec![("synthetic".into(), "metrics".into(), "new".into())]);
        assert_eq!(gone, vec![("synthetic".into(), "metrics".into(), "old".into())]);
        assert!(Tolerances::parse(&["hit1".into()], 0.01).is_err() && Tolerances::parse(&["hit1=-1".into()], 0.01).is_err());
    }

    #[test]
    fn statuses_and_sources_round_trip_as_the_words_written_today() {
        let words = ["regression", "improvement", "changed", "new", "vanished", "unchanged"];
        for (st, w) in Status::ALL.into_iter().zip(words) {
            assert_eq!((st.to_string(), w.parse::<Status>()), (w.to_string(), Ok(st)));
            assert_eq!(serde_json::to_string(&st).expect("json"), format!("\"{w}\""));
            assert_eq!(serde_json::from_str::<Status>(&format!("\"{w}\"")).expect("json"), st);
        }
        for (t, w) in ToleranceSource::ALL.into_iter().zip(["configured", "seed spread", "default"]) {
            assert_eq!((t.to_string(), w.parse::<ToleranceSource>()), (w.to_string(), Ok(t)));
            assert_eq!(serde_json::to_string(&t).expect("json"), format!("\"{w}\""));
        }
        // The table declares the same set of statuses.
        let declared = tables::REGRESSIONS.columns.iter().find(|c| c.name == "status").and_then(|c| c.values).expect("set");
        let mut want: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        let mut got = declared.to_vec();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn a_status_read_back_outside_the_set_is_an_error_naming_file_row_and_column() {
        let rows: Vec<Compared> = ["hit1", "mrr"]
            .into_iter()
            .map(|m| Compared {
                key: key("bm25", m, None),
                previous: Some(0.5),
                current: Some(0.5),
                tolerance: 0.01,
                tolerance_from: ToleranceSource::Default,
                status: Status::Unchanged,
            })
            .collect();
        let good = batch(&rows).expect("batch");
        let file = Path::new("night/regressions.parquet");
        // Row 1's word replaced by one the writer never writes (a hand-edited file, another version).
        let with = |column: &str, word: &str| {
            let i = good.schema().index_of(column).expect("column");
            let mut cols = good.columns().to_vec();
            let first = columns::strs(&good, column).expect("words").value(0).to_string();
            cols[i] = std::sync::Arc::new(StringArray::from(vec![first, word.to_string()]));
            RecordBatch::try_new(good.schema(), cols).expect("batch")
        };
        for (column, word) in [("status", "worse"), ("status", "Regression"), ("tolerance_from", "guessed")] {
            let e = from_batch(&with(column, word), file).expect_err(word);
            let v = match e.downcast_ref::<SchemaError>() {
                Some(SchemaError::Violation(v)) => v,
                _ => panic!("not a violation: {e:#}"),
            };
            assert_eq!((v.file.as_path(), v.row, v.column.as_deref()), (file, Some(1), Some(column)), "{e:#}");
            assert!(v.message.contains(&format!("`{word}`")), "{e:#}");
        }
    }
}
