//! Role-based topological similarity (TopoRAG eqs. 4–6, GraphWave): for every node `a` and scale
//! `s`, the heat wavelet Ψ_s = exp(−sL) e_a with the combinatorial Laplacian L = D − A, and its
//! empirical characteristic function φ_a(t) = (1/N) Σ_m exp(i t Ψ_s[m, a]) sampled at T points
//! t_j = 100·j/(T−1). The embedding of `a` is, per scale, [Re φ(t_0..t_{T−1}), Im φ(t_0..t_{T−1})]
//! (column `scale·2T + part·T + j`).
//!
//! Two ways to get Ψ:
//! * **exact**: eigendecomposition L = U Λ Uᵀ (tred2/tql2), Ψ_s = U e^{−sΛ} Uᵀ; O(N³) time,
//!   O(N²) memory, used up to `exact_max_nodes`.
//! * **Chebyshev**: e^{−sλ} on [0, λ̄] expanded in Chebyshev polynomials of L̃ = 2L/λ̄ − I, where
//!   λ̄ = max over edges of d_u + d_v (Anderson–Morley, an upper bound of λ_max). The order is chosen
//!   per scale as the first k after which every coefficient is below `tol` (default 1e-10, at most
//!   `max_order`). Columns of Ψ are produced in blocks of 32 by the three-term recurrence over the
//!   sparse L (cost order × nnz per column), so memory stays O(N·32) per thread. Its error against
//!   the exact mode is measured in the tests (`chebyshev_matches_exact_within_its_tolerance`).

use rayon::prelude::*;

use crate::error::Result;
use crate::toporag::diffusion::Adjacency;

/// How Ψ is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Exact,
    Chebyshev { tol: f64, max_order: usize },
}

/// The end of GraphWave's sample interval [0, t_max], as in the reference implementation and the
/// scipy fixture (`tgrag graphwave` and TopoRAG's role embeddings both sample it).
pub const T_MAX: f64 = 100.0;

/// The spacing Δ of the `points` sample points t_j = jΔ = t_max·j/(T−1) (numpy.linspace(0, t_max,
/// T)); 0 when there is at most one point (t_0 = 0).
fn step(points: usize, t_max: f64) -> f64 {
    if points > 1 { t_max / (points - 1) as f64 } else { 0.0 }
}

/// Embeddings of all `adj.n` nodes (row-major `n × scales·2T`) at T = `points` sample points
/// t_j = t_max·j/(T−1). `adj` must be undirected.
pub fn embed(adj: &Adjacency, scales: &[f64], points: usize, t_max: f64, mode: Mode) -> Result<Vec<f64>> {
    let n = adj.n;
    let width = scales.len() * 2 * points;
    let dt = step(points, t_max);
    let mut out = vec![0.0; n * width];
    if n == 0 || width == 0 {
        return Ok(out);
    }
    match mode {
        Mode::Exact => embed_exact(adj, scales, (points, dt), &mut out)?,
        Mode::Chebyshev { tol, max_order } => embed_chebyshev(adj, scales, (points, dt), tol, max_order, &mut out),
    }
    Ok(out)
}

/// The exact mode: Ψ_s = U e^{−sΛ} Uᵀ from the eigendecomposition of the dense Laplacian.
fn embed_exact(adj: &Adjacency, scales: &[f64], (points, dt): (usize, f64), out: &mut [f64]) -> Result<()> {
    let n = adj.n;
    let width = scales.len() * 2 * points;
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        l[i * n + i] = adj.degree(i) as f64;
        for &j in &adj.indices[adj.indptr[i]..adj.indptr[i + 1]] {
            l[i * n + j as usize] -= 1.0;
        }
    }
    let (lam, u) = tgrag_models::linalg::sym_eigen(n, &l)?;
    // uᵀ as a row-major matrix: ut[m][k] = u_k[m].
    let mut ut = vec![0.0; n * n];
    for k in 0..n {
        for m in 0..n {
            ut[m * n + k] = u[k * n + m];
        }
    }
    for (si, &s) in scales.iter().enumerate() {
        let mut scaled = u.clone();
        for (k, row) in scaled.chunks_exact_mut(n).enumerate() {
            let w = (-s * lam[k]).exp();
            row.iter_mut().for_each(|v| *v *= w);
        }
        let psi = tgrag_models::linalg::matmul_f64(n, n, n, &ut, &scaled)?;
        // Ψ is symmetric: row a is column a.
        out.par_chunks_mut(width)
            .enumerate()
            .for_each(|(a, row)| charfn(psi[a * n..a * n + n].iter().copied(), n, dt, &mut row[si * 2 * points..(si + 1) * 2 * points]));
    }
    Ok(())
}

/// Columns of Ψ computed per block at once.
const BLOCK: usize = 32;

/// The Chebyshev mode: per block of `BLOCK` nodes, the three-term recurrence over the sparse
/// Laplacian, every scale's Ψ columns summed from its own coefficients.
fn embed_chebyshev(adj: &Adjacency, scales: &[f64], (points, dt): (usize, f64), tol: f64, max_order: usize, out: &mut [f64]) {
    let n = adj.n;
    let width = scales.len() * 2 * points;
    let bound = laplacian_bound(adj);
    if bound == 0.0 {
        // No edges: L = 0 and Ψ = I for every scale.
        out.par_chunks_mut(width).enumerate().for_each(|(a, row)| {
            for si in 0..scales.len() {
                charfn((0..n).map(|m| if m == a { 1.0 } else { 0.0 }), n, dt, &mut row[si * 2 * points..(si + 1) * 2 * points]);
            }
        });
        return;
    }
    let coeffs: Vec<Vec<f64>> = scales.iter().map(|&s| heat_coefficients(s, bound, tol, max_order)).collect();
    let order = coeffs.iter().map(Vec::len).max().unwrap_or(1);
    out.par_chunks_mut(width * BLOCK).enumerate().for_each(|(block, rows)| {
        let b = rows.len() / width;
        let psi = chebyshev_block(adj, &coeffs, order, bound, block * BLOCK, b);
        for (c, row) in rows.chunks_exact_mut(width).enumerate() {
            for (si, ps) in psi.iter().enumerate() {
                charfn((0..n).map(|m| ps[m * b + c]), n, dt, &mut row[si * 2 * points..(si + 1) * 2 * points]);
            }
        }
    });
}

/// λ̄ = max over edges of d_u + d_v (Anderson–Morley), 0 without edges.
fn laplacian_bound(adj: &Adjacency) -> f64 {
    adj.indptr
        .windows(2)
        .enumerate()
        .flat_map(|(u, w)| adj.indices[w[0]..w[1]].iter().map(move |&v| (u, v as usize)))
        .map(|(u, v)| adj.degree(u) + adj.degree(v))
        .max()
        .unwrap_or(0) as f64
}

/// Ψ's columns `a0..a0 + b` for every scale, each as n × b row-major, by the recurrence
/// T_{k+1} = 2 L̃ T_k − T_{k−1} up to `order` terms.
fn chebyshev_block(adj: &Adjacency, coeffs: &[Vec<f64>], order: usize, bound: f64, a0: usize, b: usize) -> Vec<Vec<f64>> {
    let n = adj.n;
    // Column blocks as n × b row-major: T_{k-1}, T_k, and Ψ per scale.
    let mut prev = vec![0.0; n * b];
    for c in 0..b {
        prev[(a0 + c) * b + c] = 1.0;
    }
    let mut cur = apply_shifted(adj, &prev, b, bound);
    let mut psi: Vec<Vec<f64>> = coeffs
        .iter()
        .map(|c| prev.iter().zip(&cur).map(|(t0, t1)| c[0] / 2.0 * t0 + c.get(1).copied().unwrap_or(0.0) * t1).collect())
        .collect();
    for k in 2..order {
        let mut next = apply_shifted(adj, &cur, b, bound);
        next.iter_mut().zip(&prev).for_each(|(x, p)| *x = 2.0 * *x - p);
        for (c, ps) in coeffs.iter().zip(psi.iter_mut()) {
            if let Some(&ck) = c.get(k) {
                ps.iter_mut().zip(&next).for_each(|(p, t)| *p += ck * t);
            }
        }
        prev = std::mem::replace(&mut cur, next);
    }
    psi
}

/// [Re φ(t_0..), Im φ(t_0..)] of one wavelet at t_j = j·`dt` (`out`: 2T values).
///
/// The terms e^{i t_j v} are powers of e^{i dt v}: one `sin_cos` per entry, then a complex product
/// per point, for eight entries at a time (independent chains), each point's sums still taken over
/// the entries in order. After 24 products a term is within about 3e-15 of `sin_cos(t_j v)`, no
/// further than the rounding of t_j v itself (1e-14 at t = 100).
fn charfn(psi: impl Iterator<Item = f64>, n: usize, dt: f64, out: &mut [f64]) {
    const LANES: usize = 8;
    out.fill(0.0);
    let (re, im) = out.split_at_mut(out.len() / 2);
    let mut vs = psi.peekable();
    while vs.peek().is_some() {
        let (mut c, mut s, mut c1, mut s1) = ([1.0; LANES], [0.0; LANES], [0.0; LANES], [0.0; LANES]);
        let mut lanes = 0;
        for v in vs.by_ref().take(LANES) {
            (s1[lanes], c1[lanes]) = (dt * v).sin_cos();
            lanes += 1;
        }
        for (rj, ij) in re.iter_mut().zip(im.iter_mut()) {
            for l in 0..lanes {
                *rj += c[l];
                *ij += s[l];
            }
            for l in 0..LANES {
                (c[l], s[l]) = (c[l] * c1[l] - s[l] * s1[l], s[l] * c1[l] + c[l] * s1[l]);
            }
        }
    }
    out.iter_mut().for_each(|x| *x /= n as f64);
}

/// L̃X = (2/λ̄)(D X − A X) − X for an n × b row-major block.
fn apply_shifted(adj: &Adjacency, x: &[f64], b: usize, bound: f64) -> Vec<f64> {
    let n = adj.n;
    let mut y = vec![0.0; n * b];
    let f = 2.0 / bound;
    for i in 0..n {
        let row = &mut y[i * b..i * b + b];
        for &j in &adj.indices[adj.indptr[i]..adj.indptr[i + 1]] {
            row.iter_mut().zip(&x[j as usize * b..j as usize * b + b]).for_each(|(r, v)| *r -= v);
        }
        let deg = adj.degree(i) as f64;
        row.iter_mut().zip(&x[i * b..i * b + b]).for_each(|(r, v)| *r = f * (*r + deg * v) - v);
    }
    y
}

/// Chebyshev coefficients of λ ↦ e^{−sλ} on [0, bound] (x = 2λ/bound − 1), computed by
/// Chebyshev–Gauss quadrature on 4·max_order nodes, cut after the last coefficient ≥ tol.
pub fn heat_coefficients(s: f64, bound: f64, tol: f64, max_order: usize) -> Vec<f64> {
    let max_order = max_order.max(2);
    let m = 4 * max_order;
    let f: Vec<(f64, f64)> = (0..m)
        .map(|j| {
            let theta = std::f64::consts::PI * (j as f64 + 0.5) / m as f64;
            let lam = (theta.cos() + 1.0) * bound / 2.0;
            (theta, (-s * lam).exp())
        })
        .collect();
    let c: Vec<f64> = (0..max_order).map(|k| 2.0 / m as f64 * f.iter().map(|(th, g)| g * (k as f64 * th).cos()).sum::<f64>()).collect();
    let keep = c.iter().rposition(|v| v.abs() >= tol).map_or(1, |p| p + 1).max(2);
    c[..keep].to_vec()
}

/// The Chebyshev settings used when a graph is too large for the exact mode.
pub const DEFAULT_CHEBYSHEV: Mode = Mode::Chebyshev { tol: 1e-10, max_order: 2000 };

/// Validates scales and points before work starts: what is wrong, in words (the caller names the
/// option's owner: a stage's configuration or a command's arguments).
pub fn check(scales: &[f64], points: usize) -> std::result::Result<(), String> {
    if scales.is_empty() || scales.iter().any(|s| !s.is_finite() || *s <= 0.0) {
        return Err(format!("scales must be positive numbers, got {scales:?}"));
    }
    tgrag_schemas::limits::at_most("points", points, tgrag_schemas::limits::MAX_POINTS)?;
    if scales.len() > tgrag_schemas::limits::MAX_COUNT {
        return Err(format!("at most {} scales, got {}", tgrag_schemas::limits::MAX_COUNT, scales.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_graph(n: u32) -> Result<Adjacency> {
        let src: Vec<u32> = (0..n - 1).collect();
        let dst: Vec<u32> = (1..n).collect();
        Adjacency::from_edges(n as usize, &src, &dst, false)
    }

    /// The sample points as the module documents them, t_j = t_max·j/(T−1) (numpy.linspace),
    /// each computed on its own: the reference the characteristic function is checked against.
    fn sample_points(points: usize, t_max: f64) -> Vec<f64> {
        match points {
            0 => Vec::new(),
            1 => vec![0.0],
            p => (0..p).map(|j| t_max * j as f64 / (p - 1) as f64).collect(),
        }
    }

    #[test]
    fn the_characteristic_function_by_powers_is_sin_cos_of_every_term() {
        // 1,001 entries (not a multiple of the eight lanes) of a wavelet-like spread: most tiny,
        // some near 1, some negative; every t_j v computed on its own with sin_cos as reference.
        let mut rng = tgrag_datasets::rng::Rng::new(11);
        let psi: Vec<f64> = (0..1001).map(|i| (rng.unit() - 0.3) * if i % 7 == 0 { 1.0 } else { 1e-3 }).collect();
        for (points, t_max) in [(25, 100.0), (2, 100.0), (9, 3.5), (1, 100.0)] {
            let ts = sample_points(points, t_max);
            let mut got = vec![0.0; 2 * points];
            charfn(psi.iter().copied(), psi.len(), step(points, t_max), &mut got);
            for (j, &t) in ts.iter().enumerate() {
                let re = psi.iter().map(|v| (t * v).cos()).sum::<f64>() / psi.len() as f64;
                let im = psi.iter().map(|v| (t * v).sin()).sum::<f64>() / psi.len() as f64;
                assert!((got[j] - re).abs() < 1e-13, "re at t = {t}: {} vs {re}", got[j]);
                assert!((got[points + j] - im).abs() < 1e-13, "im at t = {t}: {} vs {im}", got[points + j]);
            }
        }
    }

    #[test]
    fn two_node_graph_matches_the_closed_form() -> Result<()> {
        // L = [[1,-1],[-1,1]]: eigenvalues 0 and 2, Ψ_s = ½[[1+e,1−e],[1−e,1+e]], e = e^{−2s}.
        let adj = path_graph(2)?;
        let ts = sample_points(3, 100.0);
        let got = embed(&adj, &[0.7], 3, 100.0, Mode::Exact)?;
        let e = (-1.4f64).exp();
        let (p, q) = ((1.0 + e) / 2.0, (1.0 - e) / 2.0);
        for (j, &t) in ts.iter().enumerate() {
            let re = ((t * p).cos() + (t * q).cos()) / 2.0;
            let im = ((t * p).sin() + (t * q).sin()) / 2.0;
            assert!((got[j] - re).abs() < 1e-12 && (got[3 + j] - im).abs() < 1e-12, "t = {t}");
        }
        Ok(())
    }

    #[test]
    fn chebyshev_matches_exact_within_its_tolerance() -> Result<()> {
        let mut rng = tgrag_datasets::rng::Rng::new(3);
        let n = 70;
        let (mut s, mut d) = (Vec::new(), Vec::new());
        for _ in 0..150 {
            let (a, b) = (rng.below(n) as u32, rng.below(n) as u32);
            if a < b {
                s.push(a);
                d.push(b);
            }
        }
        let adj = Adjacency::from_edges(n, &s, &d, false)?;
        let exact = embed(&adj, &[0.5, 1.0, 3.0], 25, 100.0, Mode::Exact)?;
        let cheb = embed(&adj, &[0.5, 1.0, 3.0], 25, 100.0, Mode::Chebyshev { tol: 1e-12, max_order: 400 })?;
        let err = exact.iter().zip(&cheb).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-8, "max abs error {err:e}");
        Ok(())
    }

    #[test]
    fn heat_coefficients_reproduce_the_function() {
        let c = heat_coefficients(1.5, 10.0, 1e-14, 200);
        for lam in [0.0, 0.3, 2.0, 7.7, 10.0] {
            let x: f64 = 2.0 * lam / 10.0 - 1.0;
            let th = x.acos();
            let approx: f64 = c[0] / 2.0 + c.iter().enumerate().skip(1).map(|(k, ck)| ck * (k as f64 * th).cos()).sum::<f64>();
            assert!((approx - (-1.5 * lam).exp()).abs() < 1e-13, "λ = {lam}");
        }
        assert!(c.len() < 200, "the series was not cut: {}", c.len());
    }
}
