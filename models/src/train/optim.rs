//! The optimisers of the host engines, written once, over flat buffers: burn's Adam (coupled L2
//! decay; TopoRAG's GNNs) and AdamW (decoupled weight decay, PyTorch's `torch.optim.AdamW`; every
//! other host engine). Their updates run as passes under pulp's dispatch ([`crate::simd::arch`]),
//! so each compiles for the level the CPU (or `TGRAG_SIMD`) allows.

use rayon::prelude::*;

use crate::error::{ModelError, Result};

/// Elements per parallel task of AdamW's passes.
const CHUNK: usize = 1 << 14;

/// An optimiser's update, run through pulp's runtime dispatch (a struct, not a closure: `with_simd`
/// is inlined into the target-feature function, a closure body may not be).
enum Pass<'a> {
    AdamW { p: &'a mut [f32], g: &'a [f32], m: &'a mut [f32], v: &'a mut [f32], c: AdamCoefficients },
    Adam { p: &'a mut [f32], g: &'a [f32], m: &'a mut [f32], v: &'a mut [f32], c: AdamScalars },
}

impl pulp::WithSimd for Pass<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        match self {
            Pass::AdamW { p, g, m, v, c } => {
                let AdamCoefficients { lr, b1, b2, eps, wd, c1, c2, scale } = c;
                let (ic1, ic2) = (1.0 / c1, 1.0 / c2);
                let (clip, coef) = (scale.is_some(), scale.unwrap_or(1.0));
                for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                    let g = if clip { g * coef } else { g };
                    *p -= lr * wd * *p;
                    *m = b1 * *m + (1.0 - b1) * g;
                    *v = b2 * *v + (1.0 - b2) * g * g;
                    *p -= lr * (*m * ic1) / ((*v * ic2).sqrt() + eps);
                }
            }
            Pass::Adam { p, g, m, v, c } => c.update(p, g, m, v),
        }
    }
}

fn simd(pass: Pass<'_>) {
    crate::simd::arch().dispatch(pass)
}

/// `Σ v²` in f64 over 8 independent lanes (vectorised; a single running sum is a chain of
/// dependent additions, a quarter of the GraphQA host engine's optimiser step).
fn sum_squares(x: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v) * f64::from(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    acc.iter().sum::<f64>() + tail
}

/// One AdamW step's scalars: learning rate, betas, epsilon, weight decay, bias corrections.
#[derive(Clone, Copy)]
struct AdamCoefficients {
    lr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    wd: f32,
    c1: f32,
    c2: f32,
    /// The gradient's clipping factor, if it is clipped.
    scale: Option<f32>,
}

/// AdamW (decoupled weight decay, bias-corrected moments; PyTorch's `torch.optim.AdamW`) over flat
/// buffers. Moments are kept per tensor, in the order they are given.
#[derive(Debug, Clone)]
pub struct AdamW {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Gradient clipping by norm, per tensor (burn's `GradientClippingConfig::Norm`): a gradient
    /// whose norm exceeds it is scaled down to it.
    pub clip: Option<f32>,
    step: i32,
    /// Per tensor: first and second moments and the steps it took part in (burn and torch keep
    /// the bias-correction count per parameter).
    moments: Vec<(Vec<f32>, Vec<f32>, i32)>,
}

impl AdamW {
    pub fn new(weight_decay: f32) -> Self {
        AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay, clip: None, step: 0, moments: Vec::new() }
    }

    /// One step at learning rate `lr` over `(tensor, gradient)` pairs (same order every step).
    pub fn step<'a>(&mut self, lr: f32, pairs: impl Iterator<Item = (&'a mut Vec<f32>, &'a Vec<f32>)>) -> Result<()> {
        self.step_some(lr, pairs.map(|(p, g)| (p, Some(g))))
    }

    /// [`AdamW::step`] where a tensor without a gradient (`None`: it took no part in this step's
    /// loss) is left alone, as burn's optimiser leaves a parameter the backward pass did not
    /// reach: no decay, no moment update, its step count unchanged.
    pub fn step_some<'a>(&mut self, lr: f32, pairs: impl Iterator<Item = (&'a mut Vec<f32>, Option<&'a Vec<f32>>)>) -> Result<()> {
        self.step += 1;
        let (b1, b2, eps, wd) = (self.beta1, self.beta2, self.eps, self.weight_decay);
        for (i, (p, g)) in pairs.enumerate() {
            if self.moments.len() <= i {
                self.moments.push((vec![0f32; p.len()], vec![0f32; p.len()], 0));
            }
            let Some(g) = g else { continue };
            if p.len() != g.len() {
                return Err(ModelError::Internal(format!("AdamW: tensor {i} has {} values, its gradient {}", p.len(), g.len())));
            }
            let (m, v, t) = &mut self.moments[i];
            if m.len() != p.len() {
                return Err(ModelError::Internal(format!("AdamW: tensor {i} changed size between steps")));
            }
            *t += 1;
            let c1 = 1.0 - b1.powi(*t);
            let c2 = 1.0 - b2.powi(*t);
            // The clipped gradient is `g · scale`, applied inside the update pass.
            let scale = match self.clip {
                Some(limit) => {
                    let partial: Vec<f64> = g.par_chunks(CHUNK).map(sum_squares).collect();
                    let norm = partial.iter().sum::<f64>().sqrt() as f32;
                    let coef = limit / (norm + f32::MIN_POSITIVE);
                    if coef < 1.0 { Some(coef) } else { None }
                }
                None => None,
            };
            let c = AdamCoefficients { lr, b1, b2, eps, wd, c1, c2, scale };
            p.par_chunks_mut(CHUNK)
                .zip(g.par_chunks(CHUNK))
                .zip(m.par_chunks_mut(CHUNK))
                .zip(v.par_chunks_mut(CHUNK))
                .for_each(|(((p, g), m), v)| simd(Pass::AdamW { p, g, m, v, c }));
        }
        Ok(())
    }

    /// Steps taken.
    pub fn steps(&self) -> i32 {
        self.step
    }
}

/// burn's Adam (β = 0.9, 0.999), L2 decay added to the gradient before the moments (TopoRAG's
/// GNN host engine, [`crate::gnn::fast`]).
pub(crate) struct Adam {
    lr: f32,
    eps: f32,
    decay: f32,
    t: i32,
}

impl Adam {
    pub(crate) fn new(lr: f32, eps: f32, decay: f32) -> Self {
        Adam { lr, eps, decay, t: 0 }
    }

    /// The next step's scalars (the step count moves on): [`AdamScalars::apply`] them to every
    /// tensor of the step.
    pub(crate) fn next_step(&mut self) -> AdamScalars {
        self.t += 1;
        let (b1, b2) = (0.9f32, 0.999f32);
        let bc2 = (1.0 - b2.powi(self.t)).sqrt();
        AdamScalars {
            b1,
            b2,
            factor: bc2 / (1.0 - b1.powi(self.t)),
            eps: self.eps * bc2,
            lr: self.lr,
            decay: self.decay,
            first: self.t == 1,
        }
    }
}

/// One Adam step's scalars.
#[derive(Clone, Copy)]
pub(crate) struct AdamScalars {
    pub(crate) b1: f32,
    pub(crate) b2: f32,
    /// √(1 − β₂ᵗ) / (1 − β₁ᵗ).
    pub(crate) factor: f32,
    /// ε · √(1 − β₂ᵗ).
    pub(crate) eps: f32,
    pub(crate) lr: f32,
    pub(crate) decay: f32,
    pub(crate) first: bool,
}

impl AdamScalars {
    /// The update of one tensor `p` with its gradient and moments, in a dispatched pass.
    pub(crate) fn apply(self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        simd(Pass::Adam { p, g, m, v, c: self });
    }

    #[inline(always)]
    fn update(self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        let AdamScalars { b1, b2, factor, eps, lr, decay, first } = self;
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            let g = if decay != 0.0 { *p * decay + g } else { g };
            if first {
                *m = g * (1.0 - b1);
                *v = g * g * (1.0 - b2);
            } else {
                *m = *m * b1 + g * (1.0 - b1);
                *v = *v * b2 + g * g * (1.0 - b2);
            }
            *p -= (*m * factor / (v.sqrt() + eps)) * lr;
        }
    }
}
