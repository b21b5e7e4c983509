//! The long-format `scores` table every evaluation writes (declared in `tgrag_schemas::tables`): one
//! row per (dataset, stage, method, split, group, metric[, seed]) with its value and the number of
//! items it averages. Reports and the nightly comparison read only this table.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use tgrag_schemas::tables;

use crate::{Result, StageError};

/// The `split` of a score computed over every split.
pub const ALL_SPLITS: &str = "all";
/// The `group` of a score computed over the whole split.
pub const ALL: &str = "*";

/// One row of a `scores` table, borrowed from its batch (what every reader of the table sees:
/// the report, MixRAG's encoder ablation, `tgrag run`'s summary, the nightly's collection).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreRow<'a> {
    pub dataset: &'a str,
    pub stage: &'a str,
    pub method: &'a str,
    pub split: &'a str,
    pub group: &'a str,
    pub metric: &'a str,
    pub value: f64,
    pub n: u64,
    /// `None`: a result over every seed (or of an unseeded method).
    pub seed: Option<u64>,
}

/// Every row of a `scores` batch, in order.
pub fn score_rows(b: &RecordBatch) -> Result<Vec<ScoreRow<'_>>> {
    use arrow::array::Array;
    use tgrag_schemas::columns;
    let (d, st, me, sp) =
        (columns::strs(b, "dataset")?, columns::strs(b, "stage")?, columns::strs(b, "method")?, columns::strs(b, "split")?);
    let (g, mt) = (columns::strs(b, "group")?, columns::strs(b, "metric")?);
    let (v, n, seed) = (columns::f64s(b, "value")?, columns::u64s(b, "n")?, columns::u64s(b, "seed")?);
    Ok((0..b.num_rows())
        .map(|i| ScoreRow {
            dataset: d.value(i),
            stage: st.value(i),
            method: me.value(i),
            split: sp.value(i),
            group: g.value(i),
            metric: mt.value(i),
            value: v.value(i),
            n: n.value(i),
            seed: (!seed.is_null(i)).then(|| seed.value(i)),
        })
        .collect())
}

/// Rows of a `scores` table for one dataset and stage, in the order they are pushed.
#[derive(Debug)]
pub struct Scores {
    dataset: String,
    current_stage: String,
    stage: Vec<String>,
    method: Vec<String>,
    split: Vec<String>,
    group: Vec<String>,
    metric: Vec<String>,
    value: Vec<f64>,
    n: Vec<u64>,
    seed: Vec<Option<u64>>,
}

impl Scores {
    /// Scores of `dataset` produced by `stage`.
    pub fn new(dataset: &str, stage: &str) -> Scores {
        Scores {
            dataset: dataset.to_string(),
            current_stage: stage.to_string(),
            stage: Vec::new(),
            method: Vec::new(),
            split: Vec::new(),
            group: Vec::new(),
            metric: Vec::new(),
            value: Vec::new(),
            n: Vec::new(),
            seed: Vec::new(),
        }
    }

    /// The stage whose results the next rows score (the `metrics` stage scores the runs of other
    /// stages).
    pub fn set_stage(&mut self, stage: &str) {
        self.current_stage = stage.to_string();
    }

    /// One score: `group` is [`ALL`] or `key=value` (e.g. `hops=2`, `model=gcn`); `n` is the number
    /// of items (queries, targets, nodes, edges) the value is computed over; `seed` where the method
    /// was trained with one.
    #[allow(clippy::too_many_arguments)]
    pub fn push(&mut self, method: &str, split: &str, group: &str, metric: &str, value: f64, n: u64, seed: Option<u64>) {
        self.stage.push(self.current_stage.clone());
        self.method.push(method.to_string());
        self.split.push(split.to_string());
        self.group.push(group.to_string());
        self.metric.push(metric.to_string());
        self.value.push(value);
        self.n.push(n);
        self.seed.push(seed);
    }

    pub fn len(&self) -> usize {
        self.value.len()
    }

    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// The `scores` table; an error when a metric is not declared in [`crate::shared::metric`].
    pub fn batch(self) -> Result<RecordBatch> {
        if let Some(e) = self.metric.iter().find_map(|m| crate::shared::metric::lookup(m).err()) {
            return Err(StageError::Internal(format!("stage `{}` writes scores: {e}", self.current_stage)));
        }
        let rows = self.value.len();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![self.dataset.as_str(); rows])),
            Arc::new(StringArray::from(self.stage)),
            Arc::new(StringArray::from(self.method)),
            Arc::new(StringArray::from(self.split)),
            Arc::new(StringArray::from(self.group)),
            Arc::new(StringArray::from(self.metric)),
            Arc::new(Float64Array::from(self.value)),
            Arc::new(UInt64Array::from(self.n)),
            Arc::new(UInt64Array::from(self.seed)),
        ];
        Ok(tables::SCORES.batch(cols)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgrag_schemas::columns;

    #[test]
    fn rows_carry_dataset_stage_and_optional_seed() {
        let mut s = Scores::new("synthetic", "metrics");
        s.push("bm25", ALL_SPLITS, ALL, "hit1", 0.25, 40, None);
        s.set_stage("graphqa");
        s.push("gretriever-gcn", "test", "hops=2", "accuracy", 0.8, 12, Some(3));
        let b = s.batch().expect("batch");
        assert_eq!(b.num_rows(), 2);
        assert!(tgrag_schemas::validate::check_written(&tables::SCORES, &b).is_ok());
        let ds = columns::strs(&b, "dataset").expect("dataset");
        assert_eq!((ds.value(0), ds.value(1)), ("synthetic", "synthetic"));
        let seed = columns::u64s(&b, "seed").expect("seed");
        assert!(arrow::array::Array::is_null(seed, 0));
        assert_eq!(seed.value(1), 3);
        assert_eq!(columns::strs(&b, "group").expect("group").value(1), "hops=2");
        let st = columns::strs(&b, "stage").expect("stage");
        assert_eq!((st.value(0), st.value(1)), ("metrics", "graphqa"));
    }
}
