//! The checkpoint rules: which epoch's model a training run keeps.
//!
//! * [`Checkpoint`]: the epoch with the highest validation metric; on equal metrics the lower
//!   tie-break value (e.g. validation loss) wins, else the earlier epoch (planner, tagger, reranker,
//!   tuned MiniLM layers).
//! * [`EarlyStopping`]: the same rule with patience, keeping the whole curve and the kept epoch's
//!   metrics (the GNNs).

use crate::error::{ModelError, Result};

/// One epoch of a training curve.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochRow {
    pub epoch: u32,
    pub train_loss: f64,
    pub val_loss: f64,
    /// Validation accuracy (node classification) or Hits@K (link prediction).
    pub val_metric: f64,
    /// The test metric at this epoch.
    pub test_metric: f64,
}

/// The result of a training run: the curve, and the epoch early stopping kept.
#[derive(Debug, Clone)]
pub struct Trained {
    pub curve: Vec<EpochRow>,
    pub best_epoch: u32,
    pub val_metric: f64,
    pub test_metric: f64,
}

/// Early stopping on the validation metric (ties: lower validation loss), keeping the curve.
#[derive(Debug, Default)]
pub(crate) struct EarlyStopping {
    curve: Vec<EpochRow>,
    best: Option<EpochRow>,
}

impl EarlyStopping {
    /// Records an epoch; whether `patience` epochs have passed since the best one.
    pub(crate) fn stop_after(&mut self, row: EpochRow, patience: usize) -> bool {
        let key = |r: &EpochRow| (r.val_metric, -r.val_loss);
        let stop = match &self.best {
            Some(b) if key(&row) <= key(b) => (row.epoch - b.epoch) as usize >= patience,
            _ => {
                self.best = Some(row.clone());
                false
            }
        };
        self.curve.push(row);
        stop
    }

    pub(crate) fn finish(self) -> Result<Trained> {
        let best = self.best.ok_or_else(|| ModelError::Internal("no epoch ran (max_epochs = 0)".into()))?;
        Ok(Trained { curve: self.curve, best_epoch: best.epoch, val_metric: best.val_metric, test_metric: best.test_metric })
    }
}

/// The checkpoint kept over a training run: the epoch with the highest validation metric; on equal
/// metrics the lower tie-break value (e.g. validation loss) wins, else the earlier epoch.
pub(crate) struct Checkpoint<M> {
    best: Option<(f64, f64, u32, M)>,
}

impl<M> Checkpoint<M> {
    pub(crate) fn new() -> Self {
        Checkpoint { best: None }
    }

    /// Keeps `model` when it beats the current checkpoint.
    pub(crate) fn offer(&mut self, metric: f64, tie_break: f64, epoch: u32, model: M) {
        if self.best.as_ref().is_none_or(|(m, t, _, _)| metric > *m || (metric == *m && tie_break < *t)) {
            self.best = Some((metric, tie_break, epoch, model));
        }
    }

    /// The kept model and its epoch.
    pub(crate) fn take(self) -> Result<(M, u32)> {
        self.best.map(|(_, _, e, m)| (m, e)).ok_or_else(|| ModelError::Internal("no epoch ran".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(epoch: u32, val_metric: f64, val_loss: f64) -> EpochRow {
        EpochRow { epoch, train_loss: 1.0, val_loss, val_metric, test_metric: f64::from(epoch) }
    }

    #[test]
    fn checkpoint_keeps_best_metric_then_lower_tie_break_then_earliest() {
        let mut c = Checkpoint::new();
        c.offer(0.5, 1.0, 1, "a");
        c.offer(0.7, 2.0, 2, "b");
        c.offer(0.7, 3.0, 3, "c");
        c.offer(0.7, 1.5, 4, "d");
        c.offer(0.7, 1.5, 5, "e");
        c.offer(0.6, 0.1, 6, "f");
        assert_eq!(c.take().expect("kept"), ("d", 4));
        assert!(Checkpoint::<()>::new().take().is_err(), "no epoch ran");
    }

    #[test]
    fn early_stopping_waits_patience_epochs_after_the_best() {
        let mut s = EarlyStopping::default();
        assert!(!s.stop_after(row(1, 0.5, 1.0), 2));
        assert!(!s.stop_after(row(2, 0.6, 1.0), 2));
        // Equal metric, higher loss: not better; 1 epoch since the best.
        assert!(!s.stop_after(row(3, 0.6, 2.0), 2));
        // 2 epochs since epoch 2: stop.
        assert!(s.stop_after(row(4, 0.4, 0.5), 2));
        let t = s.finish().expect("trained");
        assert_eq!((t.best_epoch, t.val_metric, t.test_metric, t.curve.len()), (2, 0.6, 2.0, 4));
        // Equal metric with a lower loss is better.
        let mut s = EarlyStopping::default();
        assert!(!s.stop_after(row(1, 0.6, 1.0), 5));
        assert!(!s.stop_after(row(2, 0.6, 0.5), 5));
        assert_eq!(s.finish().expect("trained").best_epoch, 2);
        assert!(EarlyStopping::default().finish().is_err());
    }
}
