//! The guards every training loop runs: a learning rate is a finite number > 0 (checked before any
//! work), and a loss that is not finite (NaN or infinite: the weights diverged) stops the training
//! at that epoch with an error naming the model, the seed and the epoch, instead of a curve of NaN
//! and the metrics of a broken model.

use crate::error::{ModelError, Result};

/// Refuses a learning rate that is not a finite number > 0.
pub(crate) fn check_lr(model: &str, lr: f64) -> Result<()> {
    if lr.is_finite() && lr > 0.0 {
        Ok(())
    } else {
        Err(ModelError::Config { model: model.to_string(), reason: format!("the learning rate must be a finite number > 0, got {lr}") })
    }
}

/// Checks the losses of one epoch (`("training", loss)`, `("validation", loss)`): the first one that
/// is not finite is a [`ModelError::Diverged`] naming `model`, `seed` and the 1-based `epoch`.
pub(crate) fn check_losses(model: &str, seed: u64, epoch: usize, losses: &[(&'static str, f64)]) -> Result<()> {
    match losses.iter().find(|(_, l)| !l.is_finite()) {
        None => Ok(()),
        Some(&(which, loss)) => Err(ModelError::Diverged { model: model.to_string(), seed, epoch, which, loss }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learning_rates_must_be_finite_and_positive() {
        assert!(check_lr("m", 1e-3).is_ok());
        assert!(check_lr("m", 1e300).is_ok(), "large but finite: training decides");
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0] {
            let e = check_lr("planner", bad).expect_err("refused");
            assert!(e.is_config(), "{e}");
            assert!(e.to_string().starts_with("planner: the learning rate must be a finite number > 0, got "), "{e}");
        }
    }

    #[test]
    fn the_first_loss_that_is_not_finite_names_model_seed_epoch_and_which_loss() {
        assert!(check_losses("m", 0, 1, &[("training", 0.5), ("validation", 1e30)]).is_ok());
        let e = check_losses("gcn", 7, 3, &[("training", 0.5), ("validation", f64::NAN)]).expect_err("nan");
        assert_eq!(e.to_string(), "gcn, seed 7: the validation loss is NaN at epoch 3: training diverged (try a smaller learning rate)");
        let e = check_losses("gcn", 7, 3, &[("training", f64::INFINITY), ("validation", f64::NAN)]).expect_err("inf");
        assert!(e.to_string().contains("the training loss is inf at epoch 3"), "{e}");
        // The caller names the model as the user knows it.
        let e = e.for_model("gretriever-gt on explagraphs");
        assert!(e.to_string().starts_with("gretriever-gt on explagraphs, seed 7: "), "{e}");
        assert!(e.is_config());
        assert!(!ModelError::Internal("x".into()).for_model("y").is_config());
    }
}
