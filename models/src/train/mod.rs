//! The training toolkit every model is built from: the seeded [`Stream`], the [`Dense`] layer,
//! tensor helpers, the checkpoint rules ([`Checkpoint`], [`EarlyStopping`]), the guards of every
//! training loop ([`check_lr`], [`check_losses`]: a loss that is not finite stops the training) and
//! strict weight files ([`save_layers`], [`load_layers`]).

mod checkpoint;
mod dense;
mod guard;
mod stream;
mod tensors;
mod weights;

pub(crate) use checkpoint::{Checkpoint, EarlyStopping};
pub use checkpoint::{EpochRow, Trained};
pub use dense::Dense;
pub(crate) use guard::{check_losses, check_lr};
pub(crate) use stream::Stream;
pub(crate) use tensors::{floats, ints, mask};
pub(crate) use weights::{load_layers, save_layers};
