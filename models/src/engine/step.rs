//! The prototype's training steps: the graph-QA batches of [`crate::graphqa`], the model of
//! [`super::classifier`] on each engine, timed on the same batches as today's host engine.

use std::collections::HashMap;

use burn::tensor::Device;

use super::burn_engine::{BurnParams, Conv};
use super::classifier::{ClassifierNames, ClassifierShape};
use super::tape::{HostParams, Tape};
use crate::error::{ModelError, Result};
use crate::gnn::host::{EdgeRows, HostBatch, read_tensors};
use crate::gnn::reuse;
use crate::graphqa::host::{edge_rows, host_batch};
use crate::graphqa::{EachStep, GraphQa, HeadKind, QaConfig, QaExample, QaShape, Target};
use crate::train::optim::AdamW;

/// An engine of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Today's host engine ([`crate::graphqa`]'s whole-model backward).
    Host,
    /// The model written once, on the host tape.
    Tape,
    /// The model written once, on burn's autodiff (CPU backend) with the fused TransformerConv.
    BurnFused,
    /// The model written once, on burn's autodiff with burn's own ops only (the GPU's path).
    BurnOps,
    /// Today's burn model on burn's autodiff (CPU backend), every op burn's own.
    Burn,
}

/// The prototype's shape for a graph-QA shape: GCN, GAT or the graph transformer with mean pooling
/// and a classification head, the models the prototype covers.
pub fn classifier_shape(shape: &QaShape) -> Result<ClassifierShape> {
    let (Some(e), HeadKind::Classify { classes }) = (shape.encoder, shape.head) else {
        return Err(ModelError::Internal("engine prototype: a classification head over an encoder".into()));
    };
    let s = ClassifierShape { encoder: e, question_dim: shape.question_dim, head_hidden: shape.head_hidden, classes: classes.max(1) };
    s.check()?;
    Ok(s)
}

/// The burn model's seeded tensors, named.
pub fn seeded(shape: &QaShape, seed: u64) -> Result<(ClassifierShape, HashMap<String, Vec<f32>>)> {
    let gt = classifier_shape(shape)?;
    Ok((gt, named_from(&gt, &GraphQa::new(*shape, seed, &Device::flex())?)?))
}

/// The burn model's tensors by name (its module order is [`ClassifierShape::params`]' order; each shape
/// is checked).
fn named_from(gt: &ClassifierShape, burn: &GraphQa) -> Result<HashMap<String, Vec<f32>>> {
    let tensors = read_tensors(burn, "engine prototype")?;
    let specs = gt.params();
    if tensors.len() != specs.len() {
        return Err(ModelError::Internal(format!("engine prototype: {} burn tensors for {} names", tensors.len(), specs.len())));
    }
    let mut out = HashMap::new();
    for (spec, (shape, v)) in specs.into_iter().zip(tensors) {
        if shape != spec.shape {
            return Err(ModelError::Internal(format!("engine prototype: `{}` is {shape:?} in burn, {:?} by name", spec.name, spec.shape)));
        }
        out.insert(spec.name, v);
    }
    Ok(out)
}

/// Each example's class.
fn targets(examples: &[&QaExample]) -> Result<Vec<u32>> {
    examples
        .iter()
        .map(|e| match e.target {
            Target::Class(c) => Ok(c),
            Target::Nodes(_) => Err(ModelError::Internal("engine prototype: a node target under a classification head".into())),
        })
        .collect()
}

/// One training step on the host tape: the loss.
pub fn tape_step(
    params: &mut HostParams,
    optim: &mut AdamW,
    lr: f32,
    (gt, names): (&ClassifierShape, &ClassifierNames),
    b: &HostBatch,
    questions: Vec<f32>,
    targets: &[u32],
) -> Result<f64> {
    let mut tape = Tape::new(params, b);
    let loss = super::classifier::loss(&mut tape, gt, names, reuse::copy(&b.x), b.n, questions, targets)?;
    let value = tape.backward(loss)?;
    params.adamw(optim, lr)?;
    Ok(value)
}

pub use super::Named;

/// An engine's trained state.
enum State {
    Tape(HostParams),
    Burn(BurnParams),
}

/// `steps` training steps of `which` on consecutive batches (the batches of
/// [`crate::graphqa::step_times`]): each step's loss (`NaN` for a batch without a target) and the
/// tensors at the end, by name. [`Which::Host`] and [`Which::Burn`] run today's engines, whose
/// tensors are named as the prototype names them.
pub fn train_steps(
    which: Which,
    shape: &QaShape,
    examples: &[QaExample],
    (dim, edge_dim): (usize, usize),
    cfg: &QaConfig,
    steps: usize,
) -> Result<(Vec<f64>, Named)> {
    let mut losses = Vec::with_capacity(steps);
    let named = run(which, shape, examples, (dim, edge_dim), cfg, steps, &mut |_, loss, _| losses.push(loss.unwrap_or(f64::NAN)))?;
    Ok((losses, named))
}

/// Seconds of each of `steps` steps after one warm-up step, timed as
/// [`crate::graphqa::step_times`] times today's engines (batch building, forward, loss,
/// backward, AdamW).
pub fn step_times(
    which: Which,
    shape: &QaShape,
    examples: &[QaExample],
    (dim, edge_dim): (usize, usize),
    cfg: &QaConfig,
    steps: usize,
) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(steps);
    run(which, shape, examples, (dim, edge_dim), cfg, steps + 1, &mut |i, _, secs| {
        if i > 0 {
            times.push(secs);
        }
    })?;
    Ok(times)
}

fn run(
    which: Which,
    shape: &QaShape,
    examples: &[QaExample],
    (dim, edge_dim): (usize, usize),
    cfg: &QaConfig,
    steps: usize,
    each: EachStep<'_>,
) -> Result<Named> {
    let gt = classifier_shape(shape)?;
    if matches!(which, Which::Host | Which::Burn) {
        let model = crate::graphqa::run_steps(which == Which::Host, *shape, examples, (dim, edge_dim), cfg, steps, &Device::flex(), each)?;
        let mut v: Named = named_from(&gt, &model)?.into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        return Ok(v);
    }
    if examples.is_empty() {
        return Err(ModelError::Internal("no example to train on".into()));
    }
    let names = ClassifierNames::new(&gt);
    let tensors = named_from(&gt, &GraphQa::new(*shape, cfg.seed, &Device::flex())?)?;
    let mut state = match which {
        Which::Tape => State::Tape(HostParams::new(&gt.layer_specs(), &gt.params(), tensors)?),
        Which::BurnOps => State::Burn(BurnParams::new(&gt.params(), tensors, Conv::BurnOps)?),
        _ => State::Burn(BurnParams::new(&gt.params(), tensors, Conv::Fused)?),
    };
    let t = &cfg.train;
    let batch = t.batch.max(1);
    let mut optim = AdamW::new(t.weight_decay);
    optim.clip = Some(t.clip);
    let rows = edge_rows(examples, edge_dim);
    rayon::scope(|_| {
        let _kept = reuse::Scope::open();
        for i in 0..steps {
            let ids: Vec<usize> = (0..batch).map(|j| (i * batch + j) % examples.len()).collect();
            let refs: Vec<&QaExample> = ids.iter().map(|&j| &examples[j]).collect();
            let r: Vec<&EdgeRows> = ids.iter().map(|&j| &rows[j]).collect();
            let tg = targets(&refs)?;
            let t0 = std::time::Instant::now();
            let (b, q) = host_batch(&refs, &r, dim, edge_dim)?;
            let loss = match &mut state {
                State::Tape(p) => tape_step(p, &mut optim, t.lr as f32, (&gt, &names), &b, q, &tg)?,
                State::Burn(p) => p.step(&mut optim, t.lr as f32, (&gt, &names), b, q, &tg)?,
            };
            each(i, Some(loss), t0.elapsed().as_secs_f64());
        }
        Ok::<_, ModelError>(())
    })?;
    let mut v = match state {
        State::Tape(p) => p.named(),
        State::Burn(p) => p.named(),
    };
    v.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
    use crate::train::{Stream, TrainConfig};

    /// Graphs of 1–6 nodes with two edge kinds; one graph in five has no edge, and with `bare`
    /// a whole batch (the first) has none. Classes by the first node's first feature.
    fn examples(count: usize, seed: u64, bare: bool) -> Vec<QaExample> {
        let mut rng = Stream(seed);
        (0..count)
            .map(|i| {
                let n = 1 + rng.below(6);
                let x: Vec<f32> = (0..n * 6).map(|_| rng.unit() as f32 - 0.5).collect();
                let edges: Vec<(u32, u32)> =
                    if i % 5 == 2 || (bare && i < 4) { vec![] } else { (1..n as u32).flat_map(|v| [(0, v), (v, v - 1)]).collect() };
                let edge_x = edges.iter().flat_map(|&(s, _)| if s == 0 { [1.0, 0.0, 0.5] } else { [0.0, 1.0, -0.5] }).collect();
                let target = Target::Class(u32::from(x[0] > 0.0));
                QaExample { x, n, edges, edge_x, question: vec![0.3, -0.2, rng.unit() as f32], target }
            })
            .collect()
    }

    const KINDS: [EncoderKind; 3] = [EncoderKind::Gt, EncoderKind::Gcn, EncoderKind::Gat];

    fn shape(layers: usize) -> QaShape {
        kind_shape(EncoderKind::Gt, layers)
    }

    fn kind_shape(kind: EncoderKind, layers: usize) -> QaShape {
        let encoder = EncoderShape { kind, in_dim: 6, edge_dim: 3, hidden: 8, layers, heads: 2, pooling: Pooling::Mean };
        QaShape { encoder: Some(encoder), question_dim: 3, head: HeadKind::Classify { classes: 3 }, head_hidden: 5 }
    }

    fn cfg() -> QaConfig {
        QaConfig { train: TrainConfig { batch: 4, lr: 0.01, ..TrainConfig::default() }, head_hidden: 5, seed: 3 }
    }

    fn close(what: &str, a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)], tol: f32) {
        let names = |v: &[(String, Vec<f32>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(a), names(b), "{what}: tensor names");
        for ((n, x), (_, y)) in a.iter().zip(b) {
            let worst = x.iter().zip(y).map(|(p, q)| (p - q).abs() / (1.0 + q.abs())).fold(0f32, f32::max);
            assert!(worst <= tol, "{what}: `{n}` differs by {worst}");
        }
    }

    /// The model written once on the host tape is today's host engine, bit for bit: the losses
    /// and every tensor after eight steps, over batches with and without edges, one-node graphs,
    /// one and three layers.
    #[test]
    fn the_tape_engine_trains_as_the_host_engine_bit_for_bit() {
        for kind in KINDS {
            for (layers, bare) in [(1, false), (3, false), (3, true)] {
                let ex = examples(40, 7 + layers as u64, bare);
                let (hl, ht) = train_steps(Which::Host, &kind_shape(kind, layers), &ex, (6, 3), &cfg(), 8).unwrap();
                let (tl, tt) = train_steps(Which::Tape, &kind_shape(kind, layers), &ex, (6, 3), &cfg(), 8).unwrap();
                assert_eq!(hl, tl, "losses, {kind:?}, {layers} layers");
                close(&format!("tape, {kind:?}, {layers} layers"), &tt, &ht, 0.0);
                assert!(hl.iter().all(|l| l.is_finite()) && hl[0] != hl[7], "{hl:?}");
            }
        }
    }

    /// The model written once on burn trains as today's burn model (every op burn's own), up to
    /// float summation order, both with the fused TransformerConv (a custom op with its own
    /// backward over host kernels) and with burn's own ops in its place: every tensor after one
    /// step, the losses of five. (Later tensors drift further apart: AdamW divides by the
    /// gradient's size, so a near-zero gradient's rounding moves a step by `lr`.)
    #[test]
    fn the_burn_engines_train_as_todays_burn_model() {
        for (kind, layers, bare) in KINDS.into_iter().flat_map(|k| [(k, 2, false), (k, 2, true), (k, 1, false)]) {
            let ex = examples(24, 11, bare);
            let s = kind_shape(kind, layers);
            let (_, bt) = train_steps(Which::Burn, &s, &ex, (6, 3), &cfg(), 1).unwrap();
            let (bl, _) = train_steps(Which::Burn, &s, &ex, (6, 3), &cfg(), 5).unwrap();
            // A batch norm takes out a constant shift of its input, so the biases of the value and
            // root projections before one have a zero gradient, up to rounding; AdamW's first step
            // (`lr · g / |g|`) turns that rounding into anything up to `lr`. The key bias shifts
            // every score of a destination alike, which its softmax takes out: zero as well, and
            // so is GAT's destination attention (and its source attention over self-loops alone).
            let shifted = |n: &str| {
                n.ends_with(".k.bias")
                    || n.ends_with(".att_dst")
                    || (bare && n.ends_with(".att_src"))
                    || (0..layers - 1).any(|i| {
                        ["gt.{i}.v.bias", "gt.{i}.skip.bias", "gcn.{i}.bias", "gat.{i}.bias"]
                            .iter()
                            .any(|p| format!("encoder.{}", p.replace("{i}", &i.to_string())) == n)
                    })
            };
            let keep = |v: Vec<(String, Vec<f32>)>| v.into_iter().filter(|(n, _)| !shifted(n)).collect::<Vec<_>>();
            for which in [Which::BurnFused, Which::BurnOps] {
                let what = format!("{which:?}, {kind:?}, {layers} layers, bare {bare}");
                let (_, ft) = train_steps(which, &s, &ex, (6, 3), &cfg(), 1).unwrap();
                close(&format!("{what}, one step"), &keep(ft), &keep(bt.clone()), 1e-5);
                let (fl, _) = train_steps(which, &s, &ex, (6, 3), &cfg(), 5).unwrap();
                for (a, b) in bl.iter().zip(&fl) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "{what}: losses {bl:?} against {fl:?}");
                }
            }
        }
    }

    /// Loading by name reports every missing, mis-shaped and unexpected tensor at once.
    #[test]
    fn loading_names_every_missing_misshaped_and_unexpected_tensor() {
        let (gt, mut t) = seeded(&shape(2), 0).unwrap();
        t.remove("encoder.gt.1.k.bias");
        t.insert("encoder.bn.0.gamma".into(), vec![1.0; 3]);
        t.insert("head.h3.weight".into(), vec![0.0; 4]);
        let want = ["`encoder.gt.1.k.bias` is missing", "`encoder.bn.0.gamma` has 3 values", "`head.h3.weight` is not a tensor"];
        let Err(e) = HostParams::new(&gt.layer_specs(), &gt.params(), t.clone()) else { panic!("loaded") };
        let Err(f) = BurnParams::new(&gt.params(), t, Conv::Fused) else { panic!("loaded") };
        for msg in [e.to_string(), f.to_string()] {
            for w in want {
                assert!(msg.contains(w), "{w} not in {msg}");
            }
        }
        let (gt, t) = seeded(&shape(2), 0).unwrap();
        assert!(HostParams::new(&gt.layer_specs(), &gt.params(), t).is_ok());
    }
}
