//! The one training loop: [`fit`] runs the epochs of every model tgrag trains (planner, tagger,
//! reranker, tuned MiniLM layers, node and link GNNs on burn and on the host engine, the GraphQA
//! heads, MixRAG). A model says what one optimiser step and one evaluation are (a [`Learner`]);
//! `fit` owns the rest: the epochs, the seeded mini-batch order, the mean training loss, the
//! divergence guard, the curve rows, the checkpoint and early stopping.
//!
//! # The stopping rule (the one meaning of "best" and of "patience")
//!
//! * An epoch **improves** on the kept one when its validation metric is higher, or equal with a
//!   lower validation loss. A model without a validation loss never improves on an equal metric,
//!   so the earlier epoch stays. A model without validation data ([`Score::Unvalidated`]) improves
//!   at every epoch: the last one is kept.
//! * The **checkpoint** is the last improving epoch: its [`Evaluation::keep`] (the model's
//!   weights, or the figures a caller needs) is what [`Fitted::kept`] returns.
//! * **Patience** `p`: training stops after the first epoch `e` with `e − best ≥ p`, i.e. after `p`
//!   epochs in a row that did not improve. `None`: every epoch runs.

use crate::error::{ModelError, Result};
use crate::train::{Stream, check_losses};

/// One epoch of a GNN's training curve (node classification, link prediction).
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

/// The result of a GNN's training run: the curve, and the epoch the stopping rule kept.
#[derive(Debug, Clone)]
pub struct Trained {
    pub curve: Vec<EpochRow>,
    pub best_epoch: u32,
    pub val_metric: f64,
    pub test_metric: f64,
}

impl Trained {
    /// The run [`fit`] made of a GNN whose checkpoint keeps nothing but its curve row.
    pub(crate) fn from_fitted(f: Fitted<(), EpochRow>) -> Result<Self> {
        let kept = f.curve.iter().find(|r| r.epoch == f.best_epoch).cloned();
        let kept = kept.ok_or_else(|| ModelError::Internal(format!("kept epoch {} is not in the curve", f.best_epoch)))?;
        Ok(Trained { curve: f.curve, best_epoch: f.best_epoch, val_metric: kept.val_metric, test_metric: kept.test_metric })
    }
}

/// The evaluation of a GNN epoch: the rule compares validation metric and loss.
pub(crate) fn gnn_evaluation(row: EpochRow) -> Evaluation<(), EpochRow> {
    Evaluation { score: Score::Validated { metric: row.val_metric, loss: Some(row.val_loss) }, keep: (), row }
}

/// How an epoch's training set is cut into optimiser steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batches {
    /// One step over the whole training set (full-batch GNN training).
    Whole,
    /// The `items` training items in a fresh seeded order every epoch, `size` at a time (the last
    /// step takes the rest).
    Shuffled { items: usize, size: usize },
}

/// What a training run is: the model's name (for the guard's errors), its seed, the epochs, the
/// patience (see the module docs) and the batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan<'a> {
    pub model: &'a str,
    pub seed: u64,
    pub epochs: usize,
    pub patience: Option<usize>,
    pub batches: Batches,
}

impl<'a> Plan<'a> {
    /// Every epoch runs (the checkpoint is kept, no early stopping), over seeded mini-batches of
    /// `size` among `items`.
    pub(crate) fn every_epoch(model: &'a str, seed: u64, epochs: usize, items: usize, size: usize) -> Self {
        Plan { model, seed, epochs, patience: None, batches: Batches::Shuffled { items, size } }
    }

    /// Full-batch epochs (one step over the whole training set each) with early stopping.
    pub(crate) fn full_batch(model: &'a str, seed: u64, epochs: usize, patience: usize) -> Self {
        Plan { model, seed, epochs, patience: Some(patience), batches: Batches::Whole }
    }
}

/// The validation figures the stopping rule compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Score {
    /// The validation metric (higher is better) and, where the model has one, the validation
    /// loss (lower breaks a tie; it is also checked by the divergence guard).
    Validated { metric: f64, loss: Option<f64> },
    /// No validation data: every epoch improves (the last is kept). `loss` is still guarded.
    Unvalidated { loss: Option<f64> },
}

impl Score {
    fn loss(self) -> Option<f64> {
        match self {
            Score::Validated { loss, .. } | Score::Unvalidated { loss } => loss,
        }
    }

    /// Whether `self` improves on `kept` (the module docs' rule).
    fn improves_on(self, kept: Score) -> bool {
        match (self, kept) {
            (Score::Validated { metric, loss }, Score::Validated { metric: m, loss: l }) => {
                metric > m || (metric == m && matches!((loss, l), (Some(a), Some(b)) if a < b))
            }
            _ => true,
        }
    }
}

/// One epoch's evaluation: the figures the rule compares, what to keep should this epoch become
/// the checkpoint, and the model's curve row.
pub(crate) struct Evaluation<K, R> {
    pub score: Score,
    pub keep: K,
    pub row: R,
}

/// What a step returns: the updated model, and the step's mean loss with its weight (`None`: a
/// batch with nothing to learn from).
pub(crate) type Stepped<M> = (M, Option<(f64, f64)>);

/// What [`fit`] trains: one optimiser step, one evaluation.
pub(crate) trait Learner {
    /// The trained model, handed from step to step by value (burn's optimisers take it so).
    type Model;
    /// What the checkpoint keeps (the evaluated model, or `()` when the curve row says enough).
    type Kept;
    /// One row of the model's curve.
    type Row;

    /// Called before an epoch's steps (1-based `epoch`): schedules that change per epoch.
    fn begin_epoch(&mut self, _epoch: usize) {}

    /// One optimiser step on the training items of `batch` (`None`: the whole training set, under
    /// [`Batches::Whole`]). Returns the updated model and the step's mean loss with its weight
    /// (the items or the summed item weights), or `None` for a batch with nothing to learn from.
    /// `rng` is the run's stream, after the epoch's batch order was drawn from it.
    fn step(&mut self, model: Self::Model, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<Self::Model>>;

    /// The evaluation after epoch `epoch` (1-based), whose mean training loss was `train_loss`.
    fn evaluate(&mut self, model: &Self::Model, epoch: usize, train_loss: f64) -> Result<Evaluation<Self::Kept, Self::Row>>;
}

/// A finished training run.
#[derive(Debug, Clone)]
pub(crate) struct Fitted<K, R> {
    /// Every epoch's row, in order (the epochs that ran).
    pub curve: Vec<R>,
    /// The kept epoch (1-based).
    pub best_epoch: u32,
    /// What the kept epoch's evaluation gave to keep.
    pub kept: K,
}

/// Trains `model` with `learner` under `plan`, drawing the batch orders from `rng` (see the module
/// docs for the stopping rule). A loss that is not finite stops the run with
/// [`ModelError::Diverged`]; `plan.epochs = 0` is an internal error (no epoch to keep).
pub(crate) fn fit<L: Learner>(plan: &Plan<'_>, learner: &mut L, mut model: L::Model, rng: &mut Stream) -> Result<Fitted<L::Kept, L::Row>> {
    let mut curve = Vec::new();
    let mut best: Option<(u32, Score, L::Kept)> = None;
    for epoch in 1..=plan.epochs {
        learner.begin_epoch(epoch);
        let (mut sum, mut weight) = (0.0f64, 0.0f64);
        let mut add = |step: Option<(f64, f64)>| {
            if let Some((loss, w)) = step {
                sum += loss * w;
                weight += w;
            }
        };
        match plan.batches {
            Batches::Whole => {
                let (m, step) = learner.step(model, None, rng)?;
                model = m;
                add(step);
            }
            Batches::Shuffled { items, size } => {
                for chunk in rng.shuffled(items).chunks(size.max(1)) {
                    let (m, step) = learner.step(model, Some(chunk), rng)?;
                    model = m;
                    add(step);
                }
            }
        }
        let train_loss = sum / weight.max(f64::MIN_POSITIVE);
        let ev = learner.evaluate(&model, epoch, train_loss)?;
        let mut losses = vec![("training", train_loss)];
        losses.extend(ev.score.loss().map(|l| ("validation", l)));
        check_losses(plan.model, plan.seed, epoch, &losses)?;
        curve.push(ev.row);
        let epoch_u32 = epoch as u32;
        let best_epoch = match &best {
            Some((e, kept, _)) if !ev.score.improves_on(*kept) => *e,
            _ => {
                best = Some((epoch_u32, ev.score, ev.keep));
                epoch_u32
            }
        };
        if plan.patience.is_some_and(|p| (epoch_u32 - best_epoch) as usize >= p) {
            break;
        }
    }
    let (best_epoch, _, kept) = best.ok_or_else(|| ModelError::Internal(format!("{}: no epoch ran (0 epochs)", plan.model)))?;
    Ok(Fitted { curve, best_epoch, kept })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A learner that replays a script of (training loss, score) per epoch; its "model" counts
    /// the steps taken and each step records the batch it was given.
    struct Scripted {
        script: Vec<(f64, Score)>,
        epoch: usize,
        batches: Vec<Option<Vec<usize>>>,
        draws: Vec<u64>,
    }

    impl Scripted {
        fn new(script: Vec<(f64, Score)>) -> Self {
            Scripted { script, epoch: 0, batches: Vec::new(), draws: Vec::new() }
        }
    }

    impl Learner for Scripted {
        type Model = usize;
        type Kept = usize;
        type Row = (usize, f64);

        fn begin_epoch(&mut self, epoch: usize) {
            self.epoch = epoch;
        }

        fn step(&mut self, model: usize, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<usize>> {
            self.batches.push(batch.map(<[usize]>::to_vec));
            self.draws.push(rng.next());
            let w = batch.map_or(1.0, |b| b.len() as f64);
            Ok((model + 1, Some((self.script[self.epoch - 1].0, w))))
        }

        fn evaluate(&mut self, model: &usize, epoch: usize, train_loss: f64) -> Result<Evaluation<usize, (usize, f64)>> {
            Ok(Evaluation { score: self.script[epoch - 1].1, keep: *model, row: (epoch, train_loss) })
        }
    }

    fn val(metric: f64, loss: f64) -> Score {
        Score::Validated { metric, loss: Some(loss) }
    }

    fn plan(epochs: usize, patience: Option<usize>) -> Plan<'static> {
        Plan { model: "m", seed: 3, epochs, patience, batches: Batches::Whole }
    }

    fn run(p: &Plan<'_>, script: Vec<(f64, Score)>) -> Result<Fitted<usize, (usize, f64)>> {
        fit(p, &mut Scripted::new(script), 0, &mut Stream(1))
    }

    #[test]
    fn keeps_the_highest_metric_then_the_lower_loss_then_the_earlier_epoch() {
        let s = vec![
            (1.0, val(0.5, 1.0)),
            (1.0, val(0.7, 2.0)),
            (1.0, val(0.7, 3.0)),
            (1.0, val(0.7, 1.5)),
            (1.0, val(0.7, 1.5)),
            (1.0, val(0.6, 0.1)),
        ];
        let f = run(&plan(6, None), s).unwrap();
        // Epoch 4: 0.7 with the lowest loss; epoch 5 ties it exactly and is not kept.
        assert_eq!((f.best_epoch, f.kept, f.curve.len()), (4, 4, 6));
        // Without a validation loss an equal metric never improves: the earliest stays.
        let no_loss = |m: f64| Score::Validated { metric: m, loss: None };
        let f = run(&plan(3, None), vec![(1.0, no_loss(0.2)), (1.0, no_loss(0.9)), (1.0, no_loss(0.9))]).unwrap();
        assert_eq!(f.best_epoch, 2);
        // Without validation data the last epoch is kept.
        let f = run(&plan(3, None), vec![(1.0, Score::Unvalidated { loss: Some(0.0) }); 3]).unwrap();
        assert_eq!((f.best_epoch, f.kept), (3, 3));
    }

    #[test]
    fn patience_counts_epochs_since_the_last_improvement_ties_with_a_lower_loss_included() {
        let s = vec![(1.0, val(0.5, 1.0)), (1.0, val(0.6, 1.0)), (1.0, val(0.6, 2.0)), (1.0, val(0.4, 0.5)), (1.0, val(0.9, 0.1))];
        // Epochs 3 and 4 do not improve on epoch 2: with patience 2 the run stops after epoch 4.
        let f = run(&plan(5, Some(2)), s.clone()).unwrap();
        assert_eq!((f.best_epoch, f.curve.len()), (2, 4));
        // With patience 3, epoch 5 runs and improves.
        let f = run(&plan(5, Some(3)), s).unwrap();
        assert_eq!((f.best_epoch, f.curve.len()), (5, 5));
        // An equal metric with a lower loss is an improvement and resets the count.
        let s = vec![(1.0, val(0.6, 1.0)), (1.0, val(0.6, 0.5)), (1.0, val(0.6, 0.4)), (1.0, val(0.6, 0.4))];
        let f = run(&plan(4, Some(1)), s).unwrap();
        assert_eq!((f.best_epoch, f.curve.len()), (3, 4));
    }

    #[test]
    fn batches_are_a_seeded_shuffle_of_every_item_and_the_loss_is_their_weighted_mean() {
        let p = Plan { model: "m", seed: 0, epochs: 2, patience: None, batches: Batches::Shuffled { items: 7, size: 3 } };
        let mut l = Scripted::new(vec![(0.5, val(0.1, 1.0)), (0.25, val(0.2, 1.0))]);
        let f = fit(&p, &mut l, 0, &mut Stream(9)).unwrap();
        // Three steps per epoch (3 + 3 + 1 items), each epoch a permutation of 0..7.
        assert_eq!(l.batches.len(), 6);
        for e in 0..2 {
            let mut seen: Vec<usize> = l.batches[e * 3..e * 3 + 3].iter().flat_map(|b| b.clone().unwrap()).collect();
            assert_eq!(l.batches[e * 3 + 2].as_ref().unwrap().len(), 1);
            seen.sort_unstable();
            assert_eq!(seen, (0..7).collect::<Vec<_>>());
        }
        // The order and the steps' draws come from one stream, in that order.
        let mut rng = Stream(9);
        let first = rng.shuffled(7);
        assert_eq!(l.batches[0].as_deref(), Some(&first[..3]));
        assert_eq!(l.draws[0], rng.next());
        // Every step of an epoch had the same loss: the weighted mean is that loss.
        assert_eq!(f.curve, vec![(1, 0.5), (2, 0.25)]);
        assert_eq!(f.kept, 6, "the model went through every step");
        // A whole-set epoch is one step with no batch.
        let mut l = Scripted::new(vec![(0.5, val(0.1, 1.0))]);
        fit(&plan(1, None), &mut l, 0, &mut Stream(9)).unwrap();
        assert_eq!(l.batches, vec![None]);
    }

    #[test]
    fn a_loss_that_is_not_finite_stops_the_run_naming_model_seed_and_epoch() {
        let e = run(&plan(3, None), vec![(1.0, val(0.5, 1.0)), (1.0, val(0.5, f64::NAN)), (1.0, val(0.5, 1.0))]).unwrap_err();
        assert_eq!(e.to_string(), "m, seed 3: the validation loss is NaN at epoch 2: training diverged (try a smaller learning rate)");
        let e = run(&plan(3, None), vec![(f64::INFINITY, Score::Unvalidated { loss: None })]).unwrap_err();
        assert!(e.to_string().contains("the training loss is inf at epoch 1"), "{e}");
        assert!(run(&plan(0, None), Vec::new()).is_err(), "no epoch ran");
    }
}
