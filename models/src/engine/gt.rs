//! The graph transformer answer model (G-Retriever's encoder with mean pooling and the
//! classification head of [`crate::graphqa`]) written once over [`Engine`].

use super::{Engine, LayerSpec, ParamSpec};
use crate::error::{ModelError, Result};

/// The model's sizes: `layers` TransformerConv layers (`heads` heads, `hidden` channels in all)
/// with a batch norm and ReLU between them, mean pooling, `[graph | question]` through a hidden
/// layer to `classes` logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GtShape {
    pub in_dim: usize,
    pub edge_dim: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub question_dim: usize,
    pub head_hidden: usize,
    pub classes: usize,
}

impl GtShape {
    /// Checks the sizes the ops need.
    pub fn check(&self) -> Result<()> {
        if self.layers == 0 || self.heads == 0 || !self.hidden.is_multiple_of(self.heads) || self.classes == 0 {
            return Err(ModelError::Internal(format!("graph transformer: unusable shape {self:?}")));
        }
        Ok(())
    }

    /// Every tensor by name, in burn's module order for [`crate::graphqa::GraphQa`] (so that a
    /// prototype starts from the same seeded weights).
    pub fn params(&self) -> Vec<ParamSpec> {
        let mut out = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, trained: bool| out.push(ParamSpec { name, shape, trained });
        for i in 0..self.layers {
            let din = if i == 0 { self.in_dim } else { self.hidden };
            for (part, d) in [("q", din), ("k", din), ("v", din), ("e", self.edge_dim), ("skip", din)] {
                push(format!("encoder.gt.{i}.{part}.weight"), vec![d, self.hidden], true);
                push(format!("encoder.gt.{i}.{part}.bias"), vec![self.hidden], true);
            }
        }
        for i in 0..self.layers - 1 {
            push(format!("encoder.bn.{i}.gamma"), vec![self.hidden], true);
            push(format!("encoder.bn.{i}.beta"), vec![self.hidden], true);
            push(format!("encoder.bn.{i}.running_mean"), vec![self.hidden], false);
            push(format!("encoder.bn.{i}.running_var"), vec![self.hidden], false);
        }
        let z = self.hidden + self.question_dim;
        for (name, din, dout) in [("head.h1", z, self.head_hidden), ("head.h2", self.head_hidden, self.classes)] {
            push(format!("{name}.weight"), vec![din, dout], true);
            push(format!("{name}.bias"), vec![dout], true);
        }
        out
    }
}

/// The names of the model's layers, formatted once.
#[derive(Debug, Clone)]
pub struct GtNames {
    conv: Vec<String>,
    norm: Vec<String>,
}

impl GtNames {
    pub fn new(shape: &GtShape) -> GtNames {
        GtNames {
            conv: (0..shape.layers).map(|i| format!("encoder.gt.{i}")).collect(),
            norm: (0..shape.layers.saturating_sub(1)).map(|i| format!("encoder.bn.{i}")).collect(),
        }
    }
}

/// The training loss of one batch: node features `x` (`n × in_dim`), questions (`graphs ×
/// question_dim`), each graph's class. The engine holds the batch's graph structure.
#[allow(clippy::too_many_arguments)]
pub fn loss<E: Engine>(
    e: &mut E,
    shape: &GtShape,
    names: &GtNames,
    x: Vec<f32>,
    n: usize,
    questions: Vec<f32>,
    targets: &[u32],
) -> Result<E::T> {
    let mut h = e.input(x, n, shape.in_dim)?;
    for (i, conv) in names.conv.iter().enumerate() {
        h = e.transformer_conv(&h, conv)?;
        if let Some(norm) = names.norm.get(i) {
            h = e.batch_norm(&h, norm)?;
            h = e.relu(&h)?;
        }
    }
    let pooled = e.mean_pool(&h)?;
    let q = e.input(questions, targets.len(), shape.question_dim)?;
    let z = e.concat(&pooled, &q)?;
    let a = e.linear(&z, "head.h1")?;
    let a = e.relu(&a)?;
    let logits = e.linear(&a, "head.h2")?;
    e.cross_entropy(&logits, targets)
}

impl GtShape {
    /// The layers, in the order of [`GtShape::params`].
    pub fn layer_specs(&self) -> Vec<LayerSpec> {
        let mut out: Vec<LayerSpec> =
            (0..self.layers).map(|i| LayerSpec::Conv { name: format!("encoder.gt.{i}"), heads: self.heads }).collect();
        out.extend((0..self.layers - 1).map(|i| LayerSpec::Norm(format!("encoder.bn.{i}"))));
        out.extend(["head.h1", "head.h2"].map(|n| LayerSpec::Linear(n.into())));
        out
    }
}
