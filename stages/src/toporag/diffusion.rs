//! Proximity-based topological similarity (TopoRAG eq. 3): P = Σ_{k=1..K} α_k Â^k R with
//! Â = D⁻¹A (rows of nodes without out-edges stay zero) and R a seeded Gaussian N×d projection,
//! then cosine top-K neighbours.
//!
//! The core is plain slices: a CSR adjacency ([`Adjacency`]), row-major dense blocks, and one
//! concrete function per float type ([`diffuse_f32`], [`diffuse_f64`]) so that the hot loop is
//! compiled (optimised) in this crate, whatever crate calls it. Rows are processed in parallel with
//! rayon; each output row is the mean of its neighbours' rows, accumulated in neighbour order, so the
//! result does not depend on the thread count.

use rayon::prelude::*;

use crate::error::{Result, StageError};
use crate::shared::run::{Scored, by_score_then_id};

/// A CSR adjacency: `indices[indptr[i]..indptr[i+1]]` are the out-neighbours of `i` in the order
/// the edges were given (repeated edges count twice, as scipy's CSR sums duplicates).
#[derive(Debug, Clone, PartialEq)]
pub struct Adjacency {
    pub n: usize,
    pub indptr: Vec<usize>,
    pub indices: Vec<u32>,
}

impl Adjacency {
    /// From `(src, dst)` edges: arcs when `directed`, else each edge both ways (given once).
    pub fn from_edges(n: usize, src: &[u32], dst: &[u32], directed: bool) -> Result<Adjacency> {
        if src.len() != dst.len() {
            return Err(StageError::Input(format!("{} sources but {} destinations", src.len(), dst.len())));
        }
        if let Some((i, (&a, &b))) = src.iter().zip(dst).enumerate().find(|(_, (a, b))| **a as usize >= n || **b as usize >= n) {
            return Err(StageError::Input(format!("edge {i} ({a} → {b}) names a node ≥ N = {n}")));
        }
        let mut counts = vec![0usize; n + 1];
        for (&a, &b) in src.iter().zip(dst) {
            counts[a as usize + 1] += 1;
            if !directed {
                counts[b as usize + 1] += 1;
            }
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let indptr = counts.clone();
        let mut fill = counts;
        let mut indices = vec![0u32; indptr[n]];
        for (&a, &b) in src.iter().zip(dst) {
            indices[fill[a as usize]] = b;
            fill[a as usize] += 1;
            if !directed {
                indices[fill[b as usize]] = a;
                fill[b as usize] += 1;
            }
        }
        // Column order inside a row does not change the sums' set, but fixes their order: sort it
        // so that the result does not depend on the edge order either.
        indptr.windows(2).for_each(|w| indices[w[0]..w[1]].sort_unstable());
        Ok(Adjacency { n, indptr, indices })
    }

    pub fn degree(&self, i: usize) -> usize {
        self.indptr[i + 1] - self.indptr[i]
    }
}

/// How many stored edges ahead the gather loop prefetches (measured on the bench machine).
const PREFETCH_AHEAD: usize = 24;

/// Prefetches `len` elements of `x` from `start` (every 64-byte line) into all cache levels; a
/// hint only, out-of-range starts are ignored.
#[inline(always)]
fn prefetch_row<T>(x: &[T], start: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        if start + len <= x.len() {
            let base = x[start..].as_ptr().cast::<i8>();
            let bytes = len * std::mem::size_of::<T>();
            for off in (0..bytes).step_by(64) {
                // SAFETY: a prefetch is a hint that never faults or reads memory into the program,
                // whatever the address; SSE is part of the x86_64 baseline.
                #[allow(unsafe_code)]
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(off));
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, start, len);
}

/// A zeroed `len`-element buffer for the diffusion blocks. Large ones are anonymous maps advised
/// to use transparent huge pages (the gathers jump to a random row per edge: with 4 KiB pages
/// nearly every one is a TLB miss, and the first touch of each page a fault); small ones, or any
/// map the system refuses, are a plain `Vec`. Both are safe APIs (memmap2 + bytemuck).
pub struct Block<T: bytemuck::Pod> {
    inner: BlockInner<T>,
    len: usize,
}

enum BlockInner<T> {
    Map(memmap2::MmapMut),
    Vec(Vec<T>),
}

/// Below this many bytes a block is a plain `Vec` (huge pages are 2 MiB).
const HUGE_BLOCK_BYTES: usize = 8 << 20;

impl<T: bytemuck::Pod> Block<T> {
    pub fn zeroed(len: usize) -> Block<T> {
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= HUGE_BLOCK_BYTES
            && let Ok(map) = memmap2::MmapOptions::new().len(bytes).map_anon()
        {
            #[cfg(target_os = "linux")]
            let _ = map.advise(memmap2::Advice::HugePage);
            // An anonymous map is page-aligned and zero-filled, so the cast below always holds.
            if bytemuck::try_cast_slice::<u8, T>(&map[..]).is_ok() {
                return Block { inner: BlockInner::Map(map), len };
            }
        }
        Block { inner: BlockInner::Vec(vec![T::zeroed(); len]), len }
    }

    /// The values as an owned `Vec` (a copy when the block is a map).
    pub fn into_vec(self) -> Vec<T> {
        match self.inner {
            BlockInner::Vec(v) => v,
            BlockInner::Map(_) => self.to_vec(),
        }
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Block<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.inner {
            BlockInner::Map(m) => &bytemuck::cast_slice(&m[..])[..self.len],
            BlockInner::Vec(v) => v,
        }
    }
}

impl<T: bytemuck::Pod> std::ops::DerefMut for Block<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.inner {
            BlockInner::Map(m) => &mut bytemuck::cast_slice_mut(&mut m[..])[..self.len],
            BlockInner::Vec(v) => v,
        }
    }
}

impl<T: bytemuck::Pod + std::fmt::Debug> std::fmt::Debug for Block<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Rows per parallel work item.
const ROWS_PER_TASK: usize = 256;

macro_rules! diffuse_impl {
    ($name:ident, $t:ty) => {
        /// P = Σ_k alphas[k-1] · Â^k R for a row-major `n × d` block `r`; returns P (row-major).
        ///
        /// Memory-bound: every step gathers one d-wide row per stored edge. Narrow column panels
        /// (to keep X in the last-level cache) were measured slower on the 2-core bench machine than
        /// whole rows, so whole rows it is. The first step reads `r` in place; two huge-page blocks
        /// take turns as Â^k R and P accumulates in a third, which is returned.
        pub fn $name(adj: &Adjacency, r: &[$t], d: usize, alphas: &[f64]) -> Block<$t> {
            let n = adj.n;
            let mut acc: Block<$t> = Block::zeroed(n * d);
            if d == 0 || n == 0 || alphas.is_empty() {
                return acc;
            }
            let mut cur: Block<$t> = Block::zeroed(if alphas.len() > 1 { n * d } else { 0 });
            let mut next: Block<$t> = Block::zeroed(n * d);
            for (step, &alpha) in alphas.iter().enumerate() {
                let alpha = alpha as $t;
                let x: &[$t] = if step == 0 { r } else { &cur };
                let chunk = d * ROWS_PER_TASK;
                next.par_chunks_mut(chunk).zip(acc.par_chunks_mut(chunk)).enumerate().for_each(|(block, (out, pacc))| {
                    for (k, (row, prow)) in out.chunks_exact_mut(d).zip(pacc.chunks_exact_mut(d)).enumerate() {
                        let i = block * ROWS_PER_TASK + k;
                        let lo = adj.indptr[i];
                        let nb = &adj.indices[lo..adj.indptr[i + 1]];
                        row.fill(0.0);
                        if nb.is_empty() {
                            continue;
                        }
                        for (q, &j) in nb.iter().enumerate() {
                            // Random row gathers: ask for the row PREFETCH_AHEAD edges on now.
                            if let Some(&f) = adj.indices.get(lo + q + PREFETCH_AHEAD) {
                                prefetch_row(x, f as usize * d, d);
                            }
                            let src = &x[j as usize * d..j as usize * d + d];
                            for (o, s) in row.iter_mut().zip(src) {
                                *o += *s;
                            }
                        }
                        let inv = 1.0 / nb.len() as $t;
                        for (o, a) in row.iter_mut().zip(prow.iter_mut()) {
                            *o *= inv;
                            *a += alpha * *o;
                        }
                    }
                });
                std::mem::swap(&mut cur, &mut next);
            }
            acc
        }
    };
}

diffuse_impl!(diffuse_f64, f64);
diffuse_impl!(diffuse_f32, f32);

/// One node's top-K neighbours.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    pub node: u32,
    pub score: f64,
}

impl Scored for Neighbour {
    type Score = f64;
    fn id(&self) -> u32 {
        self.node
    }
    fn score(&self) -> f64 {
        self.score
    }
}

/// Cosine top-`k` among `candidates` (ids into `p`, row-major `n × d`, f64) for each of `targets`,
/// self excluded; cos = 0 when either row is all zero; order: cosine descending, then id ascending.
pub fn cosine_top_k(p: &[f64], d: usize, targets: &[u32], candidates: &[u32], k: usize) -> Vec<Vec<Neighbour>> {
    let norm = |i: u32| -> f64 { p[i as usize * d..i as usize * d + d].iter().map(|v| v * v).sum::<f64>().sqrt() };
    let cand_norm: Vec<f64> = candidates.iter().map(|&c| norm(c)).collect();
    targets
        .par_iter()
        .map(|&t| {
            let tn = norm(t);
            let row = &p[t as usize * d..t as usize * d + d];
            let mut scored: Vec<Neighbour> = candidates
                .iter()
                .zip(&cand_norm)
                .filter(|(c, _)| **c != t)
                .map(|(&c, &cn)| {
                    let score = if tn == 0.0 || cn == 0.0 {
                        0.0
                    } else {
                        row.iter().zip(&p[c as usize * d..c as usize * d + d]).map(|(a, b)| a * b).sum::<f64>() / (tn * cn)
                    };
                    Neighbour { node: c, score }
                })
                .collect();
            if scored.len() > k {
                scored.select_nth_unstable_by(k, by_score_then_id);
                scored.truncate(k);
            }
            scored.sort_unstable_by(by_score_then_id);
            scored
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense brute force: Â as a matrix, powers by plain loops.
    fn dense_reference(n: usize, edges: &[(u32, u32)], directed: bool, r: &[f64], d: usize, alphas: &[f64]) -> Vec<f64> {
        let mut a = vec![0.0; n * n];
        for &(s, t) in edges {
            a[s as usize * n + t as usize] += 1.0;
            if !directed {
                a[t as usize * n + s as usize] += 1.0;
            }
        }
        for i in 0..n {
            let deg: f64 = a[i * n..i * n + n].iter().sum();
            if deg > 0.0 {
                a[i * n..i * n + n].iter_mut().for_each(|v| *v /= deg);
            }
        }
        let mut x = r.to_vec();
        let mut p = vec![0.0; n * d];
        for &alpha in alphas {
            let mut y = vec![0.0; n * d];
            for i in 0..n {
                for j in 0..n {
                    for c in 0..d {
                        y[i * d + c] += a[i * n + j] * x[j * d + c];
                    }
                }
            }
            for (pv, yv) in p.iter_mut().zip(&y) {
                *pv += alpha * yv;
            }
            x = y;
        }
        p
    }

    #[test]
    fn diffusion_matches_the_dense_power_form() -> Result<()> {
        let mut rng = tgrag_datasets::rng::Rng::new(7);
        let n = 40;
        let edges: Vec<(u32, u32)> = (0..90).map(|_| (rng.below(n) as u32, rng.below(n) as u32)).filter(|(a, b)| a != b).collect();
        let d = 5;
        let r: Vec<f64> = (0..n * d).map(|_| rng.normal()).collect();
        for directed in [false, true] {
            let (s, t): (Vec<u32>, Vec<u32>) = edges.iter().copied().unzip();
            let adj = Adjacency::from_edges(n, &s, &t, directed)?;
            let want = dense_reference(n, &edges, directed, &r, d, &[0.5, 0.3, 0.2]);
            let got = diffuse_f64(&adj, &r, d, &[0.5, 0.3, 0.2]);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} vs {w}");
            }
            let r32: Vec<f32> = r.iter().map(|&v| v as f32).collect();
            let got32 = diffuse_f32(&adj, &r32, d, &[0.5, 0.3, 0.2]);
            for (g, w) in got32.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
        Ok(())
    }

    /// Sparse brute force, one row at a time, in edge-list form (no CSR, no parallelism).
    fn edge_list_reference(n: usize, edges: &[(u32, u32)], r: &[f32], d: usize, alphas: &[f64]) -> Vec<f64> {
        let mut nbrs: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(s, t) in edges {
            nbrs[s as usize].push(t);
            nbrs[t as usize].push(s);
        }
        let mut x: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
        let mut p = vec![0.0; n * d];
        for &alpha in alphas {
            let mut y = vec![0.0; n * d];
            for (i, nb) in nbrs.iter().enumerate() {
                for &j in nb {
                    for c in 0..d {
                        y[i * d + c] += x[j as usize * d + c] / nb.len() as f64;
                    }
                }
            }
            p.iter_mut().zip(&y).for_each(|(pv, yv)| *pv += alpha * yv);
            x = y;
        }
        p
    }

    #[test]
    fn huge_page_blocks_give_the_same_diffusion() -> Result<()> {
        // 20,000 × 128 f32 = 10 MiB per block: above HUGE_BLOCK_BYTES, so the mapped path runs.
        let (n, d) = (20_000usize, 128usize);
        assert!(n * d * 4 >= HUGE_BLOCK_BYTES);
        let mut rng = tgrag_datasets::rng::Rng::new(11);
        let edges: Vec<(u32, u32)> = (0..60_000).map(|_| (rng.below(n) as u32, rng.below(n) as u32)).filter(|(a, b)| a != b).collect();
        let r: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
        let (s, t): (Vec<u32>, Vec<u32>) = edges.iter().copied().unzip();
        let adj = Adjacency::from_edges(n, &s, &t, false)?;
        let want = edge_list_reference(n, &edges, &r, d, &[1.0, 0.5, 0.25]);
        let got = diffuse_f32(&adj, &r, d, &[1.0, 0.5, 0.25]);
        assert_eq!(got.len(), n * d);
        for (g, w) in got.iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
        }
        // A fresh block is zero and writable end to end, mapped or not.
        for len in [3usize, HUGE_BLOCK_BYTES / 8 + 5] {
            let mut b: Block<f64> = Block::zeroed(len);
            assert!(b.iter().all(|&v| v == 0.0));
            b[len - 1] = 2.5;
            assert_eq!(b.into_vec()[len - 1], 2.5);
        }
        Ok(())
    }

    #[test]
    fn isolated_rows_stay_zero_and_bad_edges_are_refused() -> Result<()> {
        let adj = Adjacency::from_edges(3, &[0], &[1], true)?;
        let p = diffuse_f64(&adj, &[1.0, 2.0, 3.0], 1, &[1.0, 1.0]);
        // 0 → 1 → nothing: Â R = (2, 0, 0), Â² R = (0, 0, 0).
        assert_eq!(&p[..], &[2.0, 0.0, 0.0]);
        assert!(Adjacency::from_edges(3, &[0], &[3], false).is_err());
        Ok(())
    }

    #[test]
    fn cosine_top_k_orders_by_score_then_id_and_handles_zero_rows() {
        // rows: 0 = (1,0), 1 = (1,0), 2 = (0,1), 3 = (0,0), 4 = (1,1)
        let p = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0];
        let all = [0, 1, 2, 3, 4];
        let got = cosine_top_k(&p, 2, &[0, 3], &all, 3);
        let ids: Vec<Vec<u32>> = got.iter().map(|v| v.iter().map(|n| n.node).collect()).collect();
        assert_eq!(ids, vec![vec![1, 4, 2], vec![0, 1, 2]]);
        assert!((got[0][1].score - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-15);
        assert!(got[1].iter().all(|n| n.score == 0.0));
    }
}
