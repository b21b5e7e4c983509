//! The training settings the GraphQA models share: one struct that `QaConfig` (the answer heads),
//! `MixConfig` (MixRAG) and the `gretriever` / `mixrag` stage configs hold (flattened there, so the
//! options keep their names: `--set gretriever.lr=…`).

use burn::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamWConfig, ModuleOptimizer};
use serde::{Deserialize, Serialize};

use crate::train::{Batches, Plan};

/// Optimiser and schedule of a mini-batch training run (AdamW with norm clipping).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrainConfig {
    /// Learning rate: a finite number > 0.
    pub lr: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f32,
    /// Gradient clipping: the largest gradient norm.
    pub clip: f32,
    /// Training questions per optimiser step.
    pub batch: usize,
    /// Most epochs.
    pub epochs: usize,
    /// Epochs without improvement before stopping (the rule of `train::fit`).
    pub patience: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig { lr: 1e-3, weight_decay: 0.05, clip: 0.1, batch: 16, epochs: 30, patience: 5 }
    }
}

impl TrainConfig {
    /// The settings' own checks: a learning rate and a clipping norm that are finite and > 0, a
    /// weight decay that is finite and ≥ 0 (a negative decay grows the weights every step).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(format!("lr {} must be a finite number > 0", self.lr));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(format!("weight_decay {} must be a finite number ≥ 0", self.weight_decay));
        }
        if !(self.clip.is_finite() && self.clip > 0.0) {
            return Err(format!("clip {} must be a finite number > 0 (the largest gradient norm)", self.clip));
        }
        Ok(())
    }

    /// AdamW with this decay, ε = 1e-8 and gradient clipping by norm (burn clips each parameter
    /// tensor; torch, the global norm).
    pub(crate) fn adamw(&self) -> ModuleOptimizer {
        AdamWConfig::new()
            .with_weight_decay(self.weight_decay)
            .with_epsilon(1e-8)
            .with_grad_clipping(Some(GradientClippingConfig::Norm(self.clip)))
            .init()
    }

    /// The run of `items` training questions under these settings.
    pub(crate) fn plan<'a>(&self, model: &'a str, seed: u64, items: usize) -> Plan<'a> {
        Plan { model, seed, epochs: self.epochs, patience: Some(self.patience), batches: Batches::Shuffled { items, size: self.batch } }
    }
}
