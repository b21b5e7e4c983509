//! One night against another: every leaderboard metric compared, within a noise band per metric.
//!
//! * The band of a metric is the configured tolerance for its name when one is given; else, where
//!   several seeds ran (a `<metric>_std` row beside it), twice the larger of the two nights'
//!   seed-to-seed standard deviations; else the default absolute tolerance.
//! * Metrics with a better direction (hit@k, recall, MRR, accuracy, F1, BLEU, ROUGE, cosine, Hits@K:
//!   higher; losses and times: lower) are `regression` or `improvement` when they move beyond the
//!   band, else `unchanged`; the others (subgraph sizes, counts) are `changed` or `unchanged` and
//!   never fail a night. Rows only in one night are `new` or `vanished`.
//! * Per-seed rows are compared only where no mean over seeds (a row without seed) exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use arrow::array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use tgrag_schemas::{columns, tables};

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

/// The leaderboard as a map.
pub fn rows(lb: &RecordBatch) -> Result<BTreeMap<Key, f64>> {
    let c = |n: &str| columns::strs(lb, n);
    let (so, d, st, me, sp, g, mt) = (c("source")?, c("dataset")?, c("stage")?, c("method")?, c("split")?, c("group")?, c("metric")?);
    let (v, seed) = (columns::f64s(lb, "value")?, columns::u64s(lb, "seed")?);
    Ok((0..lb.num_rows())
        .map(|i| {
            (
                Key {
                    source: so.value(i).into(),
                    dataset: d.value(i).into(),
                    stage: st.value(i).into(),
                    method: me.value(i).into(),
                    split: sp.value(i).into(),
                    group: g.value(i).into(),
                    metric: mt.value(i).into(),
                    seed: (!seed.is_null(i)).then(|| seed.value(i)),
                },
                v.value(i),
            )
        })
        .collect())
}

/// Which way a metric is better: `Some(true)` higher, `Some(false)` lower, `None` neither.
pub fn higher_is_better(metric: &str) -> Option<bool> {
    let m = metric.to_ascii_lowercase();
    const HIGHER: [&str; 16] = [
        "hit",
        "recall",
        "mrr",
        "accuracy",
        "f1",
        "exact",
        "bleu",
        "rouge",
        "cosine",
        "precision",
        "ndcg",
        "auc",
        "hits",
        "pearson",
        "map",
        "loose",
    ];
    const LOWER: [&str; 5] = ["loss", "error", "seconds", "latency", "_ms"];
    if m.ends_with("_std") {
        return None;
    }
    if LOWER.iter().any(|w| m.contains(w)) {
        return Some(false);
    }
    if HIGHER.iter().any(|w| m.starts_with(w) || m.contains(&format!("_{w}"))) {
        return Some(true);
    }
    None
}

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
            let (m, v) = it.split_once('=').ok_or_else(|| anyhow::anyhow!("--tolerance {it}: expected METRIC=VALUE"))?;
            let v: f64 = v.trim().parse().map_err(|_| anyhow::anyhow!("--tolerance {it}: `{v}` is not a number"))?;
            if !(v.is_finite() && v >= 0.0) {
                anyhow::bail!("--tolerance {it}: the tolerance must be a finite number ≥ 0");
            }
            per_metric.insert(m.trim().to_string(), v);
        }
        if !(default.is_finite() && default >= 0.0) {
            anyhow::bail!("--default-tolerance {default}: must be a finite number ≥ 0");
        }
        Ok(Tolerances { per_metric, default })
    }

    /// Refuses a band for a metric not in `known` (the metrics of `what`): it could never apply.
    pub fn check_known(&self, known: &BTreeSet<String>, what: &str) -> Result<()> {
        if let Some(m) = self.per_metric.keys().find(|m| !known.contains(*m)) {
            let list: Vec<&str> = known.iter().map(String::as_str).collect();
            anyhow::bail!(
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
    pub tolerance_from: &'static str,
    pub status: &'static str,
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
            (Some(&t), _) => (t, "configured"),
            (None, Some(s)) if s > 0.0 => (2.0 * s, "seed spread"),
            _ => (tol.default, "default"),
        };
        let status = match (p, c) {
            (None, Some(_)) => "new",
            (Some(_), None) => "vanished",
            (Some(p), Some(c)) => {
                let d = c - p;
                let same = d.abs() <= tolerance || (p.is_nan() && c.is_nan());
                match higher_is_better(&k.metric) {
                    _ if same => "unchanged",
                    Some(true) if d < 0.0 => "regression",
                    Some(true) => "improvement",
                    Some(false) if d > 0.0 => "regression",
                    Some(false) => "improvement",
                    None => "changed",
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

/// The `regressions` table.
pub fn batch(rows: &[Compared]) -> Result<RecordBatch> {
    let s = |f: &dyn Fn(&Compared) -> String| -> ArrayRef { Arc::new(StringArray::from_iter_values(rows.iter().map(f))) };
    Ok(tables::REGRESSIONS.batch(vec![
        s(&|r| r.key.source.clone()),
        s(&|r| r.key.dataset.clone()),
        s(&|r| r.key.stage.clone()),
        s(&|r| r.key.method.clone()),
        s(&|r| r.key.split.clone()),
        s(&|r| r.key.group.clone()),
        s(&|r| r.key.metric.clone()),
        Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.key.seed))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.previous))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.current))),
        Arc::new(Float64Array::from_iter(rows.iter().map(Compared::delta))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.tolerance))),
        s(&|r| r.tolerance_from.to_string()),
        s(&|r| r.status.to_string()),
    ])?)
}

/// The `regressions` table read back.
pub fn from_batch(b: &RecordBatch) -> Result<Vec<Compared>> {
    let c = |n: &str| columns::strs(b, n);
    let (so, d, st, me, sp, g, mt, tf, status) = (
        c("source")?,
        c("dataset")?,
        c("stage")?,
        c("method")?,
        c("split")?,
        c("group")?,
        c("metric")?,
        c("tolerance_from")?,
        c("status")?,
    );
    let (seed, prev, cur, tol) =
        (columns::u64s(b, "seed")?, columns::f64s(b, "previous")?, columns::f64s(b, "current")?, columns::f64s(b, "tolerance")?);
    let opt = |a: &Float64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
    let leak = |s: &str| -> &'static str {
        ["configured", "seed spread", "default", "regression", "improvement", "unchanged", "changed", "new", "vanished"]
            .into_iter()
            .find(|x| *x == s)
            .unwrap_or("changed")
    };
    Ok((0..b.num_rows())
        .map(|i| Compared {
            key: Key {
                source: so.value(i).into(),
                dataset: d.value(i).into(),
                stage: st.value(i).into(),
                method: me.value(i).into(),
                split: sp.value(i).into(),
                group: g.value(i).into(),
                metric: mt.value(i).into(),
                seed: (!seed.is_null(i)).then(|| seed.value(i)),
            },
            previous: opt(prev, i),
            current: opt(cur, i),
            tolerance: tol.value(i),
            tolerance_from: leak(tf.value(i)),
            status: leak(status.value(i)),
        })
        .collect())
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
        assert_eq!(higher_is_better("train_loss"), Some(false));
        assert_eq!(higher_is_better("nodes"), None);
        assert_eq!(higher_is_better("accuracy_std"), None);
        let prev: BTreeMap<Key, f64> = [
            (key("mor", "hit1", None), 0.80),
            (key("bm25", "hit1", None), 0.15),
            (key("bm25", "mrr", None), 0.20),
            (key("gcn", "accuracy", None), 0.70),
            (key("gcn", "accuracy_std", None), 0.05),
            (key("gcn", "accuracy", Some(0)), 0.65),
            (key("pcst", "nodes", None), 10.0),
            (key("old", "hit1", None), 0.5),
        ]
        .into();
        let cur: BTreeMap<Key, f64> = [
            (key("mor", "hit1", None), 0.70),     // −0.10: regression
            (key("bm25", "hit1", None), 0.155),   // within the default band
            (key("bm25", "mrr", None), 0.25),     // +0.05: improvement
            (key("gcn", "accuracy", None), 0.62), // −0.08 within 2 × 0.05
            (key("gcn", "accuracy_std", None), 0.04),
            (key("gcn", "accuracy", Some(0)), 0.40), // per-seed row: a mean exists, not judged
            (key("pcst", "nodes", None), 14.0),      // no direction: changed
            (key("new", "hit1", None), 0.3),
        ]
        .into();
        let got = compare(&prev, &cur, &Tolerances::default());
        let status = |m: &str, metric: &str| {
            got.iter().find(|r| r.key.method == m && r.key.metric == metric && r.key.seed.is_none()).map(|r| r.status)
        };
        assert_eq!(status("mor", "hit1"), Some("regression"));
        assert_eq!(status("bm25", "hit1"), Some("unchanged"));
        assert_eq!(status("bm25", "mrr"), Some("improvement"));
        assert_eq!(status("gcn", "accuracy"), Some("unchanged"));
        assert_eq!(status("pcst", "nodes"), Some("changed"));
        assert_eq!(status("new", "hit1"), Some("new"));
        assert_eq!(status("old", "hit1"), Some("vanished"));
        assert!(got.iter().all(|r| r.key.seed.is_none() && !r.key.metric.ends_with("_std")));
        let gcn = got.iter().find(|r| r.key.method == "gcn").expect("gcn");
        assert_eq!((gcn.tolerance, gcn.tolerance_from), (0.1, "seed spread"));
        // A configured band wins; a tighter one turns the gcn drop into a regression.
        let tight = Tolerances::parse(&["accuracy=0.01".into()], 0.01).expect("parse");
        let got = compare(&prev, &cur, &tight);
        assert_eq!(got.iter().find(|r| r.key.method == "gcn").map(|r| (r.status, r.tolerance_from)), Some(("regression", "configured")));
        // Unchanged nights compare as unchanged everywhere.
        assert!(compare(&cur, &cur, &Tolerances::default()).iter().all(|r| r.status == "unchanged"));
        // The table round-trips.
        let b = batch(&got).expect("batch");
        assert_eq!(from_batch(&b).expect("read"), got);
        let (new, gone) = method_changes(&prev, &cur);
        assert_eq!(new, vec![("synthetic".into(), "metrics".into(), "new".into())]);
        assert_eq!(gone, vec![("synthetic".into(), "metrics".into(), "old".into())]);
        assert!(Tolerances::parse(&["hit1".into()], 0.01).is_err() && Tolerances::parse(&["hit1=-1".into()], 0.01).is_err());
    }
}
