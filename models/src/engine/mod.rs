//! One model definition over an engine interface, as a measured prototype: the GraphQA graph
//! classifier's training step ([`classifier::loss`]: GCN, GAT or the graph transformer with mean
//! pooling and the classification head) written once and run by two engines —
//! [`tape::Tape`], host ops each with its own forward and backward recorded on a tape, and
//! [`burn_engine::BurnParams`], burn's autodiff with the TransformerConv propagation as one
//! fused custom op carrying its own backward over host kernels. docs/engines.md compares both
//! with the host engine of [`crate::graphqa`] (a whole-model backward written by hand) and
//! chooses between them from the figures.
//!
//! Parameters are named (`encoder.gt.0.q.weight`, `encoder.bn.0.gamma`, `head.h1.bias`, …) and
//! an engine finds them by name, never by position.

pub mod burn_engine;
pub mod classifier;
#[cfg(test)]
mod op_tests;
pub mod step;
pub mod tape;

use std::collections::HashMap;

use crate::error::{ModelError, Result};

/// The ops a model is written with; each engine runs them its own way (records them on a tape,
/// or builds burn's autodiff graph). Layers are named: the engine holds their parameters.
pub trait Engine {
    /// A value in the engine (a tape slot, a burn tensor).
    type T;

    /// A constant `rows × cols` input (no gradient).
    fn input(&mut self, v: Vec<f32>, rows: usize, cols: usize) -> Result<Self::T>;
    /// `x W + b` with the named layer's `weight` (`d_in × d_out`) and `bias`.
    fn linear(&mut self, x: &Self::T, layer: &str) -> Result<Self::T>;
    /// The named `TransformerConv(heads, concat, edge_dim, root_weight)` over the step's graph
    /// batch and its edge features.
    fn transformer_conv(&mut self, x: &Self::T, layer: &str) -> Result<Self::T>;
    /// The named `GCNConv` (symmetric normalisation with self-loops) over the step's graph batch.
    fn gcn_conv(&mut self, x: &Self::T, layer: &str) -> Result<Self::T>;
    /// The named `GATConv(heads, concat=False)` (self-loops, LeakyReLU 0.2, heads averaged).
    fn gat_conv(&mut self, x: &Self::T, layer: &str) -> Result<Self::T>;
    /// The named batch norm over rows (batch statistics; running statistics updated).
    fn batch_norm(&mut self, x: &Self::T, layer: &str) -> Result<Self::T>;
    fn relu(&mut self, x: &Self::T) -> Result<Self::T>;
    /// Each graph's mean node row.
    fn mean_pool(&mut self, x: &Self::T) -> Result<Self::T>;
    /// `[a | b]` by columns.
    fn concat(&mut self, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// Mean softmax cross-entropy of `logits` rows against `targets`.
    fn cross_entropy(&mut self, logits: &Self::T, targets: &[u32]) -> Result<Self::T>;
}

/// Tensors by name.
pub type Named = Vec<(String, Vec<f32>)>;

/// A named parameter tensor, or a running statistic (trained: `false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub trained: bool,
}

/// A layer's declaration: an engine builds the layer's parameters from the named tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerSpec {
    /// `<name>.weight`, `<name>.bias`.
    Linear(String),
    /// `<name>.{q,k,v,e,skip}.{weight,bias}` with `heads` heads.
    Conv { name: String, heads: usize },
    /// `<name>.weight`, `<name>.bias`.
    Gcn(String),
    /// `<name>.lin.{weight,bias}`, `<name>.{att_src,att_dst,bias}` with `heads` heads.
    Gat { name: String, heads: usize },
    /// `<name>.{gamma,beta,running_mean,running_var}`.
    Norm(String),
}

/// The tensors of `specs`, in their order, taken by name from `tensors`; every missing,
/// mis-shaped and unexpected tensor is named in the one error.
pub fn by_name(specs: &[ParamSpec], mut tensors: HashMap<String, Vec<f32>>) -> Result<Vec<(ParamSpec, Vec<f32>)>> {
    let mut out = Vec::with_capacity(specs.len());
    let mut faults = Vec::new();
    for s in specs {
        let want: usize = s.shape.iter().product();
        match tensors.remove(&s.name) {
            Some(v) if v.len() == want => out.push((s.clone(), v)),
            Some(v) => faults.push(format!("`{}` has {} values, its shape {:?} wants {want}", s.name, v.len(), s.shape)),
            None => faults.push(format!("`{}` is missing", s.name)),
        }
    }
    let mut unexpected: Vec<&String> = tensors.keys().collect();
    unexpected.sort();
    faults.extend(unexpected.into_iter().map(|n| format!("`{n}` is not a tensor of the model")));
    if faults.is_empty() { Ok(out) } else { Err(ModelError::Internal(format!("model tensors: {}", faults.join("; ")))) }
}
