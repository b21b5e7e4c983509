//! TopoRAG's similarities between nodes and the correlation analysis (§4): cosine and L2 top-k among
//! candidates, Pearson's r, and the correlation of text similarity with proximity (K = 1…5) and with
//! role distance, with its two PNG plots.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use rayon::prelude::*;
use tgrag_datasets::rng::Rng;

use crate::Result;
use crate::shared::plots;
use crate::toporag::diffusion::{Adjacency, Neighbour, diffuse_f64};

/// Pearson correlation of two equally long samples (0 when either is constant).
pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len()) as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 { 0.0 } else { sxy / (sxx * syy).sqrt() }
}

pub fn cos(a: &[f64], b: &[f64]) -> f64 {
    let (na, nb) = (a.iter().map(|v| v * v).sum::<f64>().sqrt(), b.iter().map(|v| v * v).sum::<f64>().sqrt());
    if na == 0.0 || nb == 0.0 { 0.0 } else { a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>() / (na * nb) }
}

/// Smallest-L2 top-k among `candidates` for each target (ties by id), self excluded.
pub fn l2_top_k(x: &[f64], d: usize, targets: &[u32], candidates: &[u32], k: usize) -> Vec<Vec<Neighbour>> {
    targets
        .par_iter()
        .map(|&t| {
            let row = &x[t as usize * d..t as usize * d + d];
            let mut s: Vec<Neighbour> = candidates
                .iter()
                .filter(|&&c| c != t)
                .map(|&c| Neighbour {
                    node: c,
                    score: row.iter().zip(&x[c as usize * d..c as usize * d + d]).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt(),
                })
                .collect();
            s.sort_by(|a, b| a.score.total_cmp(&b.score).then(a.node.cmp(&b.node)));
            s.truncate(k);
            s
        })
        .collect()
}

/// The pairs of the correlation analysis: all when few enough, else seeded random distinct pairs.
pub fn pairs(n: usize, max_pairs: usize, seed: u64) -> (Vec<(u32, u32)>, bool) {
    let total = n * n.saturating_sub(1) / 2;
    if total <= max_pairs {
        return ((0..n as u32).flat_map(|i| (i + 1..n as u32).map(move |j| (i, j))).collect(), false);
    }
    let mut rng = Rng::new(seed ^ 0x70_70);
    let mut out = Vec::with_capacity(max_pairs);
    while out.len() < max_pairs {
        let (a, b) = (rng.below(n) as u32, rng.below(n) as u32);
        if a != b {
            out.push((a.min(b), a.max(b)));
        }
    }
    (out, true)
}

/// The correlation table (§4) over pairs of `nodes`: Pearson between the text cosine (rows of
/// `text`, `dim` wide) and the proximity cosine for K = 1…5 (α = 1, f64, projection `r` of width
/// `dims`), and the role L2 distance (rows of `role`, `rw` wide). At most `max_pairs` pairs (seeded
/// sample beyond).
#[allow(clippy::too_many_arguments)]
pub fn correlation(
    adj: &Adjacency,
    r: &[f32],
    dims: usize,
    role: &[f64],
    rw: usize,
    text: &[f64],
    dim: usize,
    nodes: &[u32],
    max_pairs: usize,
    seed: u64,
) -> Result<Correlation> {
    let (pp, sampled) = pairs(nodes.len(), max_pairs, seed);
    let pp: Vec<(usize, usize)> = pp.iter().map(|&(a, b)| (nodes[a as usize] as usize, nodes[b as usize] as usize)).collect();
    let text_sim: Vec<f64> = pp.par_iter().map(|&(a, b)| cos(&text[a * dim..(a + 1) * dim], &text[b * dim..(b + 1) * dim])).collect();
    let r64: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
    let (mut c_measure, mut c_k, mut c_r) = (vec![], vec![], vec![]);
    let mut scatter = Vec::new();
    for kk in 1..=5usize {
        let p = diffuse_f64(adj, &r64, dims, &vec![1.0; kk]);
        let topo: Vec<f64> = pp.par_iter().map(|&(a, b)| cos(&p[a * dims..(a + 1) * dims], &p[b * dims..(b + 1) * dims])).collect();
        if kk == 3 {
            scatter = text_sim
                .iter()
                .copied()
                .zip(topo.iter().copied())
                .step_by((pp.len() / SCATTER_POINTS).max(1))
                .take(SCATTER_POINTS)
                .collect();
        }
        c_measure.push("proximity_cosine");
        c_k.push(kk as u32);
        c_r.push(pearson(&text_sim, &topo));
    }
    let role_d: Vec<f64> = pp
        .par_iter()
        .map(|&(a, b)| {
            role[a * rw..(a + 1) * rw].iter().zip(&role[b * rw..(b + 1) * rw]).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt()
        })
        .collect();
    c_measure.push("role_l2_distance");
    c_k.push(0);
    c_r.push(pearson(&text_sim, &role_d));
    let np = pp.len() as u64;
    let by_k: Vec<(f64, f64)> = c_r[..5].iter().enumerate().map(|(i, &r)| (i as f64 + 1.0, r)).collect();
    let role_r = c_r[5];
    let table = RecordBatch::try_from_iter(vec![
        ("measure", Arc::new(StringArray::from(c_measure)) as ArrayRef),
        ("k", Arc::new(UInt32Array::from(c_k)) as ArrayRef),
        ("pearson", Arc::new(Float64Array::from(c_r)) as ArrayRef),
        ("pairs", Arc::new(UInt64Array::from(vec![np; 6])) as ArrayRef),
        ("sampled", Arc::new(BooleanArray::from(vec![sampled; 6])) as ArrayRef),
    ])?;
    Ok(Correlation { table, by_k, role_r, scatter })
}

/// Points of the text-vs-proximity scatter plot (evenly strided over the pairs of the analysis).
const SCATTER_POINTS: usize = 5000;

/// The correlation analysis: its table and what its plots show.
pub struct Correlation {
    pub table: RecordBatch,
    pub by_k: Vec<(f64, f64)>,
    pub role_r: f64,
    /// (text cosine, proximity cosine at K = 3) of strided pairs.
    pub scatter: Vec<(f64, f64)>,
}

impl Correlation {
    /// The plots `correlation_by_k.png` and `text_vs_proximity.png` of `dataset`, as (file, PNG).
    pub fn plots(&self, dataset: &str) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let title = format!("{dataset}: Pearson(text cosine, proximity cosine); role: {:.3}", self.role_r);
        let by_k = plots::chart(
            &title,
            "K (hops of the diffusion)",
            "Pearson r",
            &[plots::Series { name: "proximity", points: self.by_k.clone() }],
            plots::Mark::Lines,
            (800, 500),
        )?;
        let title = format!("{dataset}: {} pairs, K = 3", self.scatter.len());
        let scatter = plots::chart(
            &title,
            "text cosine (MiniLM)",
            "proximity cosine",
            &[plots::Series { name: "pairs", points: self.scatter.clone() }],
            plots::Mark::Dots,
            (800, 600),
        )?;
        Ok(vec![("correlation_by_k.png", by_k), ("text_vs_proximity.png", scatter)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pearson_hand_cases() {
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]) - 1.0).abs() < 1e-15);
        assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-15);
        // x = (1,2,3,4), y = (1,3,2,4): cov 4, var 5 and 5 → 0.8.
        assert!((pearson(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]) - 0.8).abs() < 1e-15);
        assert_eq!(pearson(&[1.0, 1.0], &[0.0, 5.0]), 0.0);
    }

    #[test]
    fn sampled_pairs_are_distinct_ends_and_all_pairs_are_complete() {
        let (all, sampled) = pairs(5, 100, 1);
        assert!(!sampled && all.len() == 10);
        let (s, sampled) = pairs(1000, 500, 1);
        assert!(sampled && s.len() == 500 && s.iter().all(|(a, b)| a < b));
    }
}
