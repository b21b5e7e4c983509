//! The one shape of every training-curve table (`curves`, declared in `tgrag_schemas::tables`):
//! long format, one row per (model, variant, epoch, metric), so that a report plots any model's
//! curves with one query, whatever the model reports.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use tgrag_schemas::tables;

use crate::Result;

/// Rows of a `curves` table, in the order they are pushed.
#[derive(Debug, Default)]
pub struct Curves {
    model: Vec<String>,
    variant: Vec<String>,
    seed: Vec<u64>,
    epoch: Vec<u32>,
    metric: Vec<String>,
    value: Vec<f64>,
    kept: Vec<bool>,
}

impl Curves {
    /// One epoch of a trained model: `variant` tells apart several trainings of the same model in
    /// one stage (e.g. the retriever whose features a GNN was trained on; empty when there is one),
    /// `kept` marks the epoch whose weights were kept, `metrics` are (name, value) in order.
    pub fn push(&mut self, model: &str, variant: &str, seed: u64, epoch: u32, kept: bool, metrics: &[(&str, f64)]) {
        for &(name, value) in metrics {
            self.model.push(model.to_string());
            self.variant.push(variant.to_string());
            self.seed.push(seed);
            self.epoch.push(epoch);
            self.metric.push(name.to_string());
            self.value.push(value);
            self.kept.push(kept);
        }
    }

    /// Appends every row of `other`.
    pub fn extend(&mut self, other: Curves) {
        self.model.extend(other.model);
        self.variant.extend(other.variant);
        self.seed.extend(other.seed);
        self.epoch.extend(other.epoch);
        self.metric.extend(other.metric);
        self.value.extend(other.value);
        self.kept.extend(other.kept);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.value.len()
    }

    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// The `curves` table.
    pub fn batch(self) -> Result<RecordBatch> {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(self.model)),
            Arc::new(StringArray::from(self.variant)),
            Arc::new(UInt64Array::from(self.seed)),
            Arc::new(UInt32Array::from(self.epoch)),
            Arc::new(StringArray::from(self.metric)),
            Arc::new(Float64Array::from(self.value)),
            Arc::new(BooleanArray::from(self.kept)),
        ];
        Ok(tables::CURVES.batch(cols)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgrag_schemas::columns;

    #[test]
    fn one_row_per_metric_in_push_order() {
        let mut c = Curves::default();
        c.push("planner", "", 0, 1, false, &[("train_loss", 2.0), ("val_loss", 3.0)]);
        c.push("gcn", "text", 7, 2, true, &[("val_accuracy", 0.5)]);
        assert_eq!(c.len(), 3);
        let b = c.batch().expect("batch");
        assert_eq!(b.schema().metadata().get("tgrag.table").map(String::as_str), Some("curves"));
        let metric = columns::strs(&b, "metric").expect("metric");
        assert_eq!((0..3).map(|i| metric.value(i)).collect::<Vec<_>>(), ["train_loss", "val_loss", "val_accuracy"]);
        assert_eq!(columns::f64s(&b, "value").expect("value").values().to_vec(), vec![2.0, 3.0, 0.5]);
        assert_eq!(columns::u64s(&b, "seed").expect("seed").values().to_vec(), vec![0, 0, 7]);
        assert!(tgrag_schemas::validate::check_written(&tables::CURVES, &b).is_ok());
    }
}
