//! Each op's backward on the host tape against burn's autodiff over burn's own ops, one op at a
//! time, on random shapes and on the edge cases: a batch without an edge, graphs of one node, a
//! batch of one node.
//!
//! A probe wraps the op between two linear layers, `x → linear "pre" → op → linear "post" →
//! cross-entropy`: the gradient of `pre` carries the op's input gradient and that of `post` its
//! output, and the op's own layer (linear, TransformerConv, GCN, GAT, batch norm) its parameter
//! gradients.

use std::collections::HashMap;

use super::burn_engine::{BurnParams, Conv};
use super::tape::{HostParams, Tape};
use super::{Engine, LayerSpec, Named, ParamSpec};
use crate::error::Result;
use crate::gnn::host::HostBatch;
use crate::graphqa::host::{edge_rows, host_batch};
use crate::graphqa::{QaExample, Target};
use crate::train::Stream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Linear,
    Conv,
    Gcn,
    Gat,
    Norm,
    Relu,
    Pool,
    Concat,
}

const PROBES: [Probe; 8] = [Probe::Linear, Probe::Conv, Probe::Gcn, Probe::Gat, Probe::Norm, Probe::Relu, Probe::Pool, Probe::Concat];

/// Sizes: input features, the op's width, heads, edge features, classes, the side branch of
/// `concat`.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    d: usize,
    w: usize,
    heads: usize,
    edge_dim: usize,
    classes: usize,
    side: usize,
}

fn forward<E: Engine>(e: &mut E, p: Probe, s: Sizes, x: Vec<f32>, n: usize, targets: &[u32]) -> Result<E::T> {
    let x = e.input(x, n, s.d)?;
    let h = e.linear(&x, "pre")?;
    let y = match p {
        Probe::Linear => e.linear(&h, "op")?,
        Probe::Conv => e.transformer_conv(&h, "op")?,
        Probe::Gcn => e.gcn_conv(&h, "op")?,
        Probe::Gat => e.gat_conv(&h, "op")?,
        Probe::Norm => e.batch_norm(&h, "op")?,
        Probe::Relu => e.relu(&h)?,
        Probe::Pool => e.mean_pool(&h)?,
        Probe::Concat => {
            let side = e.linear(&x, "side")?;
            e.concat(&h, &side)?
        }
    };
    let z = e.linear(&y, "post")?;
    e.cross_entropy(&z, targets)
}

/// The probe's layers and tensors.
fn specs(p: Probe, s: Sizes) -> (Vec<LayerSpec>, Vec<ParamSpec>) {
    let (mut layers, mut params) = (Vec::new(), Vec::new());
    let mut lin = |layers: &mut Vec<LayerSpec>, name: &str, din: usize, dout: usize| {
        layers.push(LayerSpec::Linear(name.into()));
        params.push(ParamSpec { name: format!("{name}.weight"), shape: vec![din, dout], trained: true });
        params.push(ParamSpec { name: format!("{name}.bias"), shape: vec![dout], trained: true });
    };
    lin(&mut layers, "pre", s.d, s.w);
    let mut out = s.w;
    match p {
        Probe::Linear => lin(&mut layers, "op", s.w, s.w),
        Probe::Concat => {
            lin(&mut layers, "side", s.d, s.side);
            out += s.side;
        }
        _ => {}
    }
    lin(&mut layers, "post", out, s.classes);
    if p == Probe::Conv {
        layers.push(LayerSpec::Conv { name: "op".into(), heads: s.heads });
        for (part, d) in [("q", s.w), ("k", s.w), ("v", s.w), ("e", s.edge_dim), ("skip", s.w)] {
            params.push(ParamSpec { name: format!("op.{part}.weight"), shape: vec![d, s.w], trained: true });
            params.push(ParamSpec { name: format!("op.{part}.bias"), shape: vec![s.w], trained: true });
        }
    }
    if p == Probe::Gcn {
        layers.push(LayerSpec::Gcn("op".into()));
        params.push(ParamSpec { name: "op.weight".into(), shape: vec![s.w, s.w], trained: true });
        params.push(ParamSpec { name: "op.bias".into(), shape: vec![s.w], trained: true });
    }
    if p == Probe::Gat {
        layers.push(LayerSpec::Gat { name: "op".into(), heads: s.heads });
        for (t, shape) in [
            ("lin.weight", vec![s.w, s.heads * s.w]),
            ("lin.bias", vec![s.heads * s.w]),
            ("att_src", vec![s.heads, s.w]),
            ("att_dst", vec![s.heads, s.w]),
            ("bias", vec![s.w]),
        ] {
            params.push(ParamSpec { name: format!("op.{t}"), shape, trained: true });
        }
    }
    if p == Probe::Norm {
        layers.push(LayerSpec::Norm("op".into()));
        for (t, trained) in [("gamma", true), ("beta", true), ("running_mean", false), ("running_var", false)] {
            params.push(ParamSpec { name: format!("op.{t}"), shape: vec![s.w], trained });
        }
    }
    (layers, params)
}

/// Random tensors for `params` (a batch norm's scale around 1, its variance positive).
fn tensors(params: &[ParamSpec], rng: &mut Stream) -> HashMap<String, Vec<f32>> {
    params
        .iter()
        .map(|p| {
            let len: usize = p.shape.iter().product();
            let v = (0..len)
                .map(|_| {
                    let u = rng.unit() as f32 - 0.5;
                    if p.name.ends_with("gamma") || p.name.ends_with("running_var") { 1.0 + u } else { u }
                })
                .collect();
            (p.name.clone(), v)
        })
        .collect()
}

/// `graphs` graphs of `nodes[i]` nodes; `edges`: random edges (and a path) inside each graph of
/// two or more nodes, some repeated edge-feature rows.
fn batch(nodes: &[usize], edges: bool, s: Sizes, rng: &mut Stream) -> (HostBatch, usize) {
    let table: Vec<Vec<f32>> = (0..3).map(|_| (0..s.edge_dim).map(|_| rng.unit() as f32 - 0.5).collect()).collect();
    let examples: Vec<QaExample> = nodes
        .iter()
        .map(|&n| {
            let x = (0..n * s.d).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect();
            let mut es: Vec<(u32, u32)> = Vec::new();
            if edges && n > 1 {
                es.extend((1..n as u32).map(|v| (v - 1, v)));
                es.extend((0..n).map(|_| (rng.below(n) as u32, rng.below(n) as u32)));
            }
            let edge_x = es.iter().flat_map(|_| table[rng.below(3)].clone()).collect();
            QaExample { x, n, edges: es, edge_x, question: vec![0.0], target: Target::Class(0) }
        })
        .collect();
    let rows = edge_rows(&examples, s.edge_dim);
    let refs: Vec<&QaExample> = examples.iter().collect();
    let r: Vec<_> = rows.iter().collect();
    let (b, _) = host_batch(&refs, &r, s.d, s.edge_dim).unwrap();
    let n = b.n;
    (b, n)
}

/// The tape's and burn's loss and gradients of one probe.
/// A loss and the gradients by name.
type Grads = (f64, Named);

fn both(p: Probe, s: Sizes, b: &HostBatch, seed: u64) -> (Grads, Grads) {
    let mut rng = Stream(seed);
    let (layers, params) = specs(p, s);
    let t = tensors(&params, &mut rng);
    let rows = if p == Probe::Pool { b.graphs } else { b.n };
    let targets: Vec<u32> = (0..rows).map(|_| rng.below(s.classes) as u32).collect();
    let mut host = HostParams::new(&layers, &params, t.clone()).unwrap();
    let tape_loss = {
        let mut tape = Tape::new(&mut host, b);
        let loss = forward(&mut tape, p, s, b.x.clone(), b.n, &targets).unwrap();
        tape.backward(loss).unwrap()
    };
    let mut tape_grads = host.gradients();
    tape_grads.sort_by(|a, c| a.0.cmp(&c.0));
    let burn = BurnParams::new(&params, t, Conv::BurnOps).unwrap();
    let (burn_loss, mut burn_grads) = burn
        .gradients(b.clone(), (s.heads, s.w), |e| {
            let (x, n) = (e.batch().x.clone(), e.batch().n);
            forward(e, p, s, x, n, &targets)
        })
        .unwrap();
    burn_grads.sort_by(|a, c| a.0.cmp(&c.0));
    ((tape_loss, tape_grads), (burn_loss, burn_grads))
}

fn agree(what: &str, tape: &Grads, burn: &Grads) {
    assert!((tape.0 - burn.0).abs() <= 1e-5 * (1.0 + burn.0.abs()), "{what}: loss {} against burn's {}", tape.0, burn.0);
    let names = |v: &[(String, Vec<f32>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&tape.1), names(&burn.1), "{what}: the tensors the loss reaches");
    for ((name, g), (_, want)) in tape.1.iter().zip(&burn.1) {
        assert_eq!(g.len(), want.len(), "{what}: `{name}`");
        // Relative to the tensor's largest gradient; a gradient that is zero in exact arithmetic
        // (a bias in front of a batch norm or a softmax) is rounding on both sides.
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = g.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-4 * scale + 1e-6, "{what}: `{name}` differs by {worst} (largest gradient {scale})");
    }
}

/// Random shapes: 1–4 graphs of 1–5 nodes with edges, widths and heads drawn per case.
#[test]
fn every_op_backward_is_burns_autodiff_on_random_shapes() {
    let mut rng = Stream(17);
    let mut with_edges = 0;
    for case in 0..8u64 {
        let heads = 1 + rng.below(2);
        let s = Sizes {
            d: 2 + rng.below(4),
            w: heads * (2 + rng.below(3)),
            heads,
            edge_dim: 1 + rng.below(3),
            classes: 2 + rng.below(2),
            side: 3,
        };
        let nodes: Vec<usize> = (0..1 + rng.below(4)).map(|_| 1 + rng.below(5)).collect();
        let (b, _) = batch(&nodes, true, s, &mut rng);
        with_edges += usize::from(b.m > 0);
        for p in PROBES {
            let (tape, burn) = both(p, s, &b, 100 + case);
            agree(&format!("{p:?}, case {case}, {s:?}, nodes {nodes:?}"), &tape, &burn);
        }
    }
    assert!(with_edges >= 4, "{with_edges} of 8 random batches have an edge");
}

/// A batch without an edge (the TransformerConv reaches its root weight alone), graphs of one
/// node each, and a batch of a single node (a batch norm over one row).
#[test]
fn every_op_backward_is_burns_autodiff_on_the_edge_cases() {
    let s = Sizes { d: 3, w: 4, heads: 2, edge_dim: 2, classes: 3, side: 2 };
    let mut rng = Stream(5);
    for (what, nodes, edges) in [("no edge", vec![3, 2, 4], false), ("one-node graphs", vec![1, 1, 1], true), ("one node", vec![1], true)] {
        let (b, n) = batch(&nodes, edges, s, &mut rng);
        assert_eq!(b.m == 0, !edges || nodes.iter().all(|&k| k == 1), "{what}");
        assert_eq!(n, nodes.iter().sum::<usize>());
        for p in PROBES {
            let (tape, burn) = both(p, s, &b, 9);
            agree(&format!("{p:?}, {what}"), &tape, &burn);
        }
    }
    // The TransformerConv without an edge: only the root (skip) weight and the layers around it.
    let (b, _) = batch(&[3, 2], false, s, &mut rng);
    let (tape, _) = both(Probe::Conv, s, &b, 9);
    let reached: Vec<&str> = tape.1.iter().map(|(n, _)| n.as_str()).filter(|n| n.starts_with("op.")).collect();
    assert_eq!(reached, ["op.skip.bias", "op.skip.weight"]);
}
