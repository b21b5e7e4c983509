//! The GraphQA graph classifier written once over [`Engine`]: G-Retriever's encoders with mean
//! pooling (GCN, GAT or the graph transformer, with a batch norm and ReLU between layers) and the
//! classification head of [`crate::graphqa`] over `[graph vector; question]`.

use super::{Engine, LayerSpec, ParamSpec};
use crate::error::{ModelError, Result};
use crate::gnn::encoders::{EncoderKind, EncoderShape, Pooling};

/// The model's sizes: `layers` convolutions of `kind` (`heads` heads; `hidden` channels out)
/// with a batch norm and ReLU between them, mean pooling, `[graph | question]` through a hidden
/// layer to `classes` logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassifierShape {
    /// The encoder (mean pooling; not gt2).
    pub encoder: EncoderShape,
    pub question_dim: usize,
    pub head_hidden: usize,
    pub classes: usize,
}

impl ClassifierShape {
    /// Checks the sizes the ops need.
    pub fn check(&self) -> Result<()> {
        let split = self.encoder.kind != EncoderKind::Gt || self.encoder.hidden.is_multiple_of(self.encoder.heads.max(1));
        if self.encoder.kind == EncoderKind::Gt2
            || self.encoder.pooling != Pooling::Mean
            || self.encoder.layers == 0
            || self.encoder.heads == 0
            || !split
            || self.classes == 0
        {
            return Err(ModelError::Internal(format!("graph classifier: unusable shape {self:?}")));
        }
        Ok(())
    }

    /// Every tensor by name, in burn's module order for [`crate::graphqa::GraphQa`] (so that a
    /// model starts from the same seeded weights).
    pub fn params(&self) -> Vec<ParamSpec> {
        let mut out = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, trained: bool| out.push(ParamSpec { name, shape, trained });
        let names = ClassifierNames::new(self);
        for (i, conv) in names.conv.iter().enumerate() {
            let din = if i == 0 { self.encoder.in_dim } else { self.encoder.hidden };
            let (h, d) = (self.encoder.heads, self.encoder.hidden);
            match self.encoder.kind {
                EncoderKind::Gcn => {
                    push(format!("{conv}.weight"), vec![din, d], true);
                    push(format!("{conv}.bias"), vec![d], true);
                }
                EncoderKind::Gat => {
                    push(format!("{conv}.lin.weight"), vec![din, h * d], true);
                    push(format!("{conv}.lin.bias"), vec![h * d], true);
                    push(format!("{conv}.att_src"), vec![h, d], true);
                    push(format!("{conv}.att_dst"), vec![h, d], true);
                    push(format!("{conv}.bias"), vec![d], true);
                }
                _ => {
                    for (part, dp) in [("q", din), ("k", din), ("v", din), ("e", self.encoder.edge_dim), ("skip", din)] {
                        push(format!("{conv}.{part}.weight"), vec![dp, d], true);
                        push(format!("{conv}.{part}.bias"), vec![d], true);
                    }
                }
            }
        }
        for norm in &names.norm {
            push(format!("{norm}.gamma"), vec![self.encoder.hidden], true);
            push(format!("{norm}.beta"), vec![self.encoder.hidden], true);
            push(format!("{norm}.running_mean"), vec![self.encoder.hidden], false);
            push(format!("{norm}.running_var"), vec![self.encoder.hidden], false);
        }
        let z = self.encoder.hidden + self.question_dim;
        for (name, din, dout) in [("head.h1", z, self.head_hidden), ("head.h2", self.head_hidden, self.classes)] {
            push(format!("{name}.weight"), vec![din, dout], true);
            push(format!("{name}.bias"), vec![dout], true);
        }
        out
    }

    /// The layers, in the order of [`ClassifierShape::params`].
    pub fn layer_specs(&self) -> Vec<LayerSpec> {
        let names = ClassifierNames::new(self);
        let mut out: Vec<LayerSpec> = names
            .conv
            .iter()
            .map(|name| match self.encoder.kind {
                EncoderKind::Gcn => LayerSpec::Gcn(name.clone()),
                EncoderKind::Gat => LayerSpec::Gat { name: name.clone(), heads: self.encoder.heads },
                _ => LayerSpec::Conv { name: name.clone(), heads: self.encoder.heads },
            })
            .collect();
        out.extend(names.norm.iter().map(|n| LayerSpec::Norm(n.clone())));
        out.extend(["head.h1", "head.h2"].map(|n| LayerSpec::Linear(n.into())));
        out
    }
}

/// The names of the model's layers, formatted once.
pub struct ClassifierNames {
    kind: EncoderKind,
    conv: Vec<String>,
    norm: Vec<String>,
}

impl ClassifierNames {
    pub fn new(shape: &ClassifierShape) -> ClassifierNames {
        let part = match shape.encoder.kind {
            EncoderKind::Gcn => "gcn",
            EncoderKind::Gat => "gat",
            _ => "gt",
        };
        ClassifierNames {
            kind: shape.encoder.kind,
            conv: (0..shape.encoder.layers).map(|i| format!("encoder.{part}.{i}")).collect(),
            norm: (0..shape.encoder.layers.saturating_sub(1)).map(|i| format!("encoder.bn.{i}")).collect(),
        }
    }
}

/// The training loss of one batch: node features `x` (`n × in_dim`), questions (`graphs ×
/// question_dim`), each graph's class. The engine holds the batch's graph structure.
#[allow(clippy::too_many_arguments)]
pub fn loss<E: Engine>(
    e: &mut E,
    shape: &ClassifierShape,
    names: &ClassifierNames,
    x: Vec<f32>,
    n: usize,
    questions: Vec<f32>,
    targets: &[u32],
) -> Result<E::T> {
    let mut h = e.input(x, n, shape.encoder.in_dim)?;
    for (i, conv) in names.conv.iter().enumerate() {
        h = match names.kind {
            EncoderKind::Gcn => e.gcn_conv(&h, conv)?,
            EncoderKind::Gat => e.gat_conv(&h, conv)?,
            _ => e.transformer_conv(&h, conv)?,
        };
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
