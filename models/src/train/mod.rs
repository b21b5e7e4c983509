//! The training toolkit every model is built from: the one training loop (`fit`: epochs,
//! batches, evaluation, checkpoint, early stopping, curve rows, and the stopping rule documented
//! there once), the seeded `Stream`, the [`Dense`] layer, tensor helpers, the guards of every
//! run (`check_lr`, `check_losses`: a loss that is not finite stops the training), the shared
//! GraphQA [`TrainConfig`] and strict weight files (`save_layers`, `load_layers`).

mod dense;
pub(crate) mod fit;
mod guard;
pub mod optim;
mod settings;
mod stream;
mod tensors;
mod weights;

pub use dense::Dense;
pub(crate) use fit::{Batches, Evaluation, Fitted, Learner, Plan, Score, Stepped, fit, gnn_evaluation};
pub use fit::{EpochRow, Trained};
pub(crate) use guard::{check_losses, check_lr};
pub use settings::TrainConfig;
pub(crate) use stream::Stream;
pub(crate) use tensors::{floats, ints, mask};
pub(crate) use weights::{load_layers, save_layers};
