//! The GraphQA encoders ([`crate::gnn::encoders`]) again on host buffers, with a hand-written
//! backward pass, as [`crate::gnn::fast`] does for TopoRAG: `GCNConv`, `GATConv`,
//! `TransformerConv`, batch norm, layer norm, mean and attention pooling, each a forward pass that
//! keeps what its backward pass reads. Burn's autodiff records and frees a graph of small ops per
//! step; on a mini-batch of 32 five-node graphs that bookkeeping is the whole cost, and on
//! WebQSP-sized graphs the gathers and scatter-adds of `[edges, hidden]` tensors are. Here the
//! products are single-threaded `gemm` calls and everything per edge is one loop over the
//! destination's incoming edges.
//!
//! The arithmetic is burn's, op for op (tested against burn's trainer in
//! `crate::graphqa::host`, and against PyG's outputs and gradients by the `pyg_parity` tests):
//! softmax scores clamped to ±30 before the exponential, batch norm with the batch's biased
//! variance in training and the running statistics (momentum 0.1) in evaluation, ε = 1e-5.
//!
//! Edge features enter every `TransformerConv` layer of G-Retriever's encoder through a linear map;
//! a batch may list each distinct edge-feature row once ([`HostBatch::new`]'s `dedup`): relation
//! texts repeat over thousands of edges, and the map then runs over the distinct rows only.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::batch::SmallGraph;
use crate::gnn::fast::{add_bias_rows, column_sums, relu_grad, relu_in_place};
use crate::gnn::reuse;
use crate::linalg::{Op, gemm_f32_halves as gemm_f32};

/// Runs `f` compiled for the widest vector instructions this CPU has (pulp's runtime dispatch:
/// AVX-512, AVX2 or the baseline). Callers mark the closure `#[inline(always)]`: pulp calls it from
/// each of its dispatched functions, and a closure left to the inliner stayed one separate function
/// compiled for the baseline (seen in `perf annotate`), which defeats the dispatch. The crates are built
/// for baseline x86-64, so an elementwise loop outside it runs four floats wide, and a loop that
/// stores conditionally not vectorised at all. Same operations per element in the same order
/// (sums stay sequential: no reassociation, no fused multiply-add), so the results are the plain
/// loops' bit for bit.
#[inline(always)]
fn wide<R>(f: impl FnOnce() -> R) -> R {
    crate::simd::arch().dispatch(f)
}

/// `o += a · v`, element by element.
#[inline(always)]
fn axpy(o: &mut [f32], a: f32, v: &[f32]) {
    o.iter_mut().zip(v).for_each(|(o, v)| *o += a * v);
}

/// Every float tensor of a burn module (parameters and running statistics), in its visiting
/// order, with its shape: what a host engine starts from.
pub fn read_tensors<M: Module>(model: &M, what: &str) -> Result<Vec<(Vec<usize>, Vec<f32>)>> {
    struct Collect(Vec<(Vec<usize>, Vec<f32>)>, Option<String>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let t = param.val();
            let shape = t.dims().to_vec();
            match t.into_data().try_to_vec::<f32>() {
                Ok(v) => self.0.push((shape, v)),
                Err(e) => self.1 = Some(format!("{e:?}")),
            }
        }
    }
    let mut c = Collect(Vec::new(), None);
    model.visit(&mut c);
    match c.1 {
        Some(e) => Err(ModelError::Internal(format!("{what}: reading the burn model: {e}"))),
        None => Ok(c.0),
    }
}

/// Every float tensor's gradient in `grads` (`None` where burn's backward pass did not reach it),
/// in [`read_tensors`]' order: what the host engines' gradient tests compare with.
#[cfg(test)]
pub(crate) fn burn_gradients<M: Module>(model: &M, grads: &burn::tensor::Gradients) -> Vec<Option<Vec<f32>>> {
    struct Grads<'a>(&'a burn::tensor::Gradients, Vec<Option<Vec<f32>>>);
    impl ModuleVisitor for Grads<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let g = param.val().grad(self.0).map(|g| g.into_data().try_to_vec::<f32>().expect("f32"));
            self.1.push(g);
        }
    }
    let mut g = Grads(grads, Vec::new());
    model.visit(&mut g);
    g.1
}

/// Asserts that the host gradients `got` are burn's `want` ([`burn_gradients`]), tensor by tensor,
/// to `tol` of burn's largest gradient (which must not be zero), and that the tensors burn's graph
/// leaves without a gradient are exactly those listed in `no_grad` (embedding biases: burn reads an
/// embedding's weight rows alone), all zero on the host.
#[cfg(test)]
pub(crate) fn assert_gradients_are_burns(what: &str, got: &[&Vec<f32>], want: &[Option<Vec<f32>>], tol: f32, no_grad: &[usize]) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().flatten().flatten().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: no gradient at all");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        match w {
            Some(w) => {
                assert_eq!(g.len(), w.len(), "{what}: tensor {i}: {} host values, {} burn values", g.len(), w.len());
                let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst <= tol * scale, "{what}: tensor {i}: max |diff| {worst:e} (largest gradient {scale:e})");
            }
            None => {
                assert!(no_grad.contains(&i), "{what}: tensor {i} has no burn gradient");
                assert!(g.iter().all(|v| *v == 0.0), "{what}: tensor {i} has a gradient burn lacks");
            }
        }
    }
}

/// `model` with its float tensors replaced, in [`read_tensors`]' order, by `values` (one per
/// tensor, each of the tensor's size): a host engine's trained state written back.
pub fn write_tensors<M: Module>(model: M, values: Vec<&[f32]>, what: &str) -> Result<M> {
    struct Replace<'a> {
        values: std::vec::IntoIter<&'a [f32]>,
        error: Option<String>,
    }
    impl ModuleMapper for Replace<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let next = self.values.next();
            param.map(|t| match next {
                Some(v) if v.len() == t.shape().num_elements() => {
                    // A parameter that trains keeps training: the new value is tracked as the old one was.
                    let tracked = t.is_require_grad();
                    Tensor::from_data(TensorData::new(v.to_vec(), t.shape()), &t.device()).set_require_grad(tracked)
                }
                _ => {
                    self.error = Some(format!("a tensor of shape {:?} has no host value of that size", t.dims()));
                    t
                }
            })
        }
    }
    let n = values.len();
    let mut r = Replace { values: values.into_iter(), error: None };
    let model = model.map(&mut r);
    if let Some(e) = r.error {
        return Err(ModelError::Internal(format!("{what}: writing the burn model: {e}")));
    }
    if r.values.len() != 0 {
        return Err(ModelError::Internal(format!("{what}: {} of {n} host tensors left unwritten", r.values.len())));
    }
    Ok(model)
}

/// A parameter tensor and its gradient (row-major, burn's layout).
#[derive(Debug, Clone, Default)]
pub struct P {
    pub v: Vec<f32>,
    pub g: Vec<f32>,
}

impl P {
    pub fn new(v: Vec<f32>) -> P {
        let g = vec![0.0; v.len()];
        P { v, g }
    }

    pub fn zero_grad(&mut self) {
        self.g.iter_mut().for_each(|g| *g = 0.0);
    }
}

/// A block-diagonal batch of small graphs on the host, with its edges grouped by destination.
#[derive(Debug, Clone)]
pub struct HostBatch {
    pub n: usize,
    pub m: usize,
    pub graphs: usize,
    pub dim: usize,
    pub edge_dim: usize,
    pub x: Vec<f32>,
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
    pub node_graph: Vec<u32>,
    pub counts: Vec<usize>,
    pub offsets: Vec<usize>,
    /// Distinct edge-feature rows (`rows × edge_dim`) and each edge's row.
    pub edge_rows: Vec<f32>,
    pub edge_row: Vec<u32>,
    pub n_rows: usize,
    /// Incoming edges of each node: `inc[inc_ptr[d]..inc_ptr[d + 1]]` (edge ids, in edge order).
    inc_ptr: Vec<usize>,
    inc: Vec<u32>,
    /// Outgoing edges of each node, the same way: `out[out_ptr[s]..out_ptr[s + 1]]`.
    out_ptr: Vec<usize>,
    out: Vec<u32>,
}

impl Drop for HostBatch {
    fn drop(&mut self) {
        reuse::give_all([&mut self.x, &mut self.edge_rows]);
    }
}

/// A graph's distinct edge-feature rows, found once (a training run batches each graph every epoch).
#[derive(Debug, Clone)]
pub struct EdgeRows {
    /// Distinct rows (`count × edge_dim`), each edge's row, and each row's hash (`None`: every
    /// edge its own row, never shared).
    rows: Vec<f32>,
    row_of_edge: Vec<u32>,
    hashes: Option<Vec<u64>>,
}

impl EdgeRows {
    /// The distinct rows of `edge_x` (`m × edge_dim`).
    pub fn distinct(edge_x: &[f32], m: usize, edge_dim: usize) -> EdgeRows {
        let (mut rows, mut row_of_edge, mut hashes) = (Vec::new(), Vec::with_capacity(m), Vec::new());
        let mut seen: HashMap<u64, u32> = HashMap::new();
        for e in 0..m {
            let row = edge_x.get(e * edge_dim..(e + 1) * edge_dim).unwrap_or_default();
            let key = row_hash(row);
            let next = hashes.len() as u32;
            // The first row with this hash and these values; a row whose hash is taken by other
            // values is listed again (correct, only not shared).
            let id = match seen.get(&key) {
                Some(&id) if rows[id as usize * edge_dim..(id as usize + 1) * edge_dim] == *row => id,
                found => {
                    if found.is_none() {
                        seen.insert(key, next);
                    }
                    rows.extend_from_slice(row);
                    hashes.push(key);
                    next
                }
            };
            row_of_edge.push(id);
        }
        EdgeRows { rows, row_of_edge, hashes: Some(hashes) }
    }

    /// Every edge its own row (`m` edges).
    pub fn each(edge_x: &[f32], m: usize) -> EdgeRows {
        EdgeRows { rows: edge_x.to_vec(), row_of_edge: (0..m as u32).collect(), hashes: None }
    }
}

impl HostBatch {
    /// The batch of `graphs` (each with at least one node); `dedup` lists each distinct edge-feature
    /// row once.
    pub fn new(graphs: &[SmallGraph<'_>], dim: usize, edge_dim: usize, dedup: bool) -> Result<HostBatch> {
        let rows: Vec<EdgeRows> = graphs
            .iter()
            .map(|g| if dedup { EdgeRows::distinct(g.edge_x, g.edges.len(), edge_dim) } else { EdgeRows::each(g.edge_x, g.edges.len()) })
            .collect();
        let refs: Vec<&EdgeRows> = rows.iter().collect();
        Self::with_rows(graphs, &refs, dim, edge_dim)
    }

    /// The batch of `graphs` with their edge rows already found (rows shared across graphs are
    /// listed once).
    pub fn with_rows(graphs: &[SmallGraph<'_>], rows: &[&EdgeRows], dim: usize, edge_dim: usize) -> Result<HostBatch> {
        let n: usize = graphs.iter().map(|g| g.n).sum();
        let m: usize = graphs.iter().map(|g| g.edges.len()).sum();
        let (mut x, mut src, mut dst) = (reuse::with_capacity(n * dim), Vec::with_capacity(m), Vec::with_capacity(m));
        let (mut node_graph, mut counts, mut offsets) = (Vec::with_capacity(n), Vec::new(), Vec::new());
        let (mut edge_rows, mut edge_row) = (Vec::new(), Vec::with_capacity(m));
        let mut seen: HashMap<u64, u32> = HashMap::new();
        let mut off = 0usize;
        if rows.len() != graphs.len() {
            return Err(ModelError::Internal(format!("{} graphs, {} edge row sets", graphs.len(), rows.len())));
        }
        for (gi, (g, r)) in graphs.iter().zip(rows).enumerate() {
            if g.n == 0 {
                return Err(ModelError::Internal(format!("graph {gi} of the batch has no node")));
            }
            if g.x.len() != g.n * dim || g.edge_x.len() != g.edges.len() * edge_dim || r.row_of_edge.len() != g.edges.len() {
                return Err(ModelError::Internal(format!(
                    "graph {gi}: {} node / {} edge feature values for {} nodes, {} edges",
                    g.x.len(),
                    g.edge_x.len(),
                    g.n,
                    g.edges.len()
                )));
            }
            x.extend_from_slice(g.x);
            // This graph's rows as the batch's.
            let local = r.row_of_edge.iter().map(|&i| i as usize + 1).max().unwrap_or(0);
            let mut global = Vec::with_capacity(local);
            for i in 0..local {
                let row = &r.rows[i * edge_dim..(i + 1) * edge_dim];
                let next = (edge_rows.len() / edge_dim.max(1)) as u32;
                let id = match &r.hashes {
                    Some(h) => match seen.get(&h[i]) {
                        Some(&id) if edge_rows[id as usize * edge_dim..(id as usize + 1) * edge_dim] == *row => id,
                        found => {
                            if found.is_none() {
                                seen.insert(h[i], next);
                            }
                            edge_rows.extend_from_slice(row);
                            next
                        }
                    },
                    None => {
                        edge_rows.extend_from_slice(row);
                        next
                    }
                };
                global.push(id);
            }
            for (k, &(s, d)) in g.edges.iter().enumerate() {
                if s as usize >= g.n || d as usize >= g.n {
                    return Err(ModelError::Internal(format!("graph {gi}: edge ({s}, {d}) outside its {} nodes", g.n)));
                }
                src.push((off + s as usize) as u32);
                dst.push((off + d as usize) as u32);
                edge_row.push(global[r.row_of_edge[k] as usize]);
            }
            node_graph.extend(std::iter::repeat_n(gi as u32, g.n));
            counts.push(g.n);
            offsets.push(off);
            off += g.n;
        }
        let n_rows = edge_rows.len().checked_div(edge_dim).unwrap_or(m);
        let (inc_ptr, inc) = group_edges(&dst, n);
        let (out_ptr, out) = group_edges(&src, n);
        Ok(HostBatch {
            n,
            m,
            graphs: graphs.len(),
            dim,
            edge_dim,
            x,
            src,
            dst,
            node_graph,
            counts,
            offsets,
            edge_rows,
            edge_row,
            n_rows,
            inc_ptr,
            inc,
            out_ptr,
            out,
        })
    }

    /// Incoming edge ids of node `d`.
    fn incoming(&self, d: usize) -> &[u32] {
        &self.inc[self.inc_ptr[d]..self.inc_ptr[d + 1]]
    }

    /// Outgoing edge ids of node `s`, in edge order.
    fn outgoing(&self, s: usize) -> &[u32] {
        &self.out[self.out_ptr[s]..self.out_ptr[s + 1]]
    }

    /// Each edge's feature row expanded (`m × edge_dim`).
    pub fn edge_x(&self) -> Vec<f32> {
        let de = self.edge_dim;
        let mut out = vec![0f32; self.m * de];
        for (e, &r) in self.edge_row.iter().enumerate() {
            out[e * de..(e + 1) * de].copy_from_slice(&self.edge_rows[r as usize * de..(r as usize + 1) * de]);
        }
        out
    }
}

/// Edge ids grouped by their end in `ends` (a CSR over `n` nodes), each group in edge order.
fn group_edges(ends: &[u32], n: usize) -> (Vec<usize>, Vec<u32>) {
    let mut ptr = vec![0usize; n + 1];
    for &d in ends {
        ptr[d as usize + 1] += 1;
    }
    for i in 0..n {
        ptr[i + 1] += ptr[i];
    }
    let mut fill = ptr.clone();
    let mut ids = vec![0u32; ends.len()];
    for (e, &d) in ends.iter().enumerate() {
        ids[fill[d as usize]] = e as u32;
        fill[d as usize] += 1;
    }
    (ptr, ids)
}

/// Edges (or nodes) from which a per-edge pass is split over rayon's threads; below it one thread
/// runs it (the small graphs' passes take microseconds).
const PAR_MIN: usize = 2048;

/// `f(i, row)` for every row of `rows_of` (`width` values each), on rayon's threads when there are
/// `PAR_MIN` rows or more. Each row is written by one call, so the results do not depend on the
/// split.
fn each_row<F: Fn(usize, &mut [f32]) + Sync + Send>(rows_of: &mut [f32], width: usize, f: F) {
    use rayon::prelude::*;
    if width == 0 {
        return;
    }
    if rows_of.len() / width >= PAR_MIN {
        rows_of.par_chunks_mut(width).with_min_len(256).enumerate().for_each(|(i, r)| f(i, r));
    } else {
        rows_of.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

/// A 64-bit hash of a row's bit patterns (four independent multiply-rotate lanes).
fn row_hash(row: &[f32]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = [1u64, 2, 3, 4];
    let mut chunks = row.chunks_exact(4);
    for c in &mut chunks {
        for (h, v) in h.iter_mut().zip(c) {
            *h = (*h ^ u64::from(v.to_bits())).wrapping_mul(K).rotate_left(29);
        }
    }
    for v in chunks.remainder() {
        h[0] = (h[0] ^ u64::from(v.to_bits())).wrapping_mul(K).rotate_left(29);
    }
    (h[0] ^ h[1].rotate_left(16) ^ h[2].rotate_left(32) ^ h[3].rotate_left(48)).wrapping_mul(K) ^ row.len() as u64
}

/// `dst = a · b` (`a`: `rows × k`, `b`: `k × cols`), or `dst += a · b`.
fn mm(dst: &mut [f32], a: &[f32], rows: usize, k: usize, b: &[f32], cols: usize, acc: bool) -> Result<()> {
    gemm_f32(dst, Op::n(a, rows, k), Op::n(b, k, cols), acc)
}

/// A linear map `x W (+ b)`: burn's `Dense` (`w`: `d_in × d_out`).
#[derive(Debug, Clone)]
pub struct Lin {
    pub w: P,
    pub b: P,
    pub din: usize,
    pub dout: usize,
}

impl Lin {
    pub fn new(w: Vec<f32>, b: Vec<f32>, din: usize, dout: usize) -> Result<Lin> {
        if w.len() != din * dout || b.len() != dout {
            return Err(ModelError::Internal(format!("linear {din}→{dout}: {} weights, {} biases", w.len(), b.len())));
        }
        Ok(Lin { w: P::new(w), b: P::new(b), din, dout })
    }

    /// `x W + b` over `rows` rows.
    pub fn forward(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let mut out = self.linear(x, rows)?;
        add_bias_rows(&mut out, &self.b.v);
        Ok(out)
    }

    /// `x W` (no bias).
    pub fn linear(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let mut out = reuse::zeros(rows * self.dout);
        mm(&mut out, x, rows, self.din, &self.w.v, self.dout, false)?;
        Ok(out)
    }

    /// Gradients of `x W (+ b)` given `dz`: `W` (and `b` when `bias`) accumulate; `dx` receives
    /// (or, `acc`, accumulates) `dz Wᵀ` when given.
    pub fn backward(&mut self, x: &[f32], dz: &[f32], rows: usize, bias: bool, dx: Option<&mut [f32]>, acc: bool) -> Result<()> {
        gemm_f32(&mut self.w.g, Op::t(x, rows, self.din), Op::n(dz, rows, self.dout), true)?;
        if bias {
            column_sums(&mut self.b.g, dz);
        }
        if let Some(dx) = dx {
            gemm_f32(dx, Op::n(dz, rows, self.dout), Op::t(&self.w.v, self.din, self.dout), acc)?;
        }
        Ok(())
    }
}

/// burn's clamp before the exponential of every attention softmax.
const CLAMP: f32 = 30.0;

fn clamp_exp(z: f32) -> f32 {
    z.clamp(-CLAMP, CLAMP).exp()
}

/// The gradient of the clamp (burn passes it where the value lies within the range).
fn clamp_pass(z: f32) -> f32 {
    if (-CLAMP..=CLAMP).contains(&z) { 1.0 } else { 0.0 }
}

/// Softmax over groups of rows (`scores`: `rows × h`, one softmax per group and column), clamped.
fn group_softmax<G: IntoIterator<Item = usize> + Clone>(scores: &[f32], h: usize, groups: impl Iterator<Item = G>, out: &mut [f32]) {
    for rows in groups {
        for k in 0..h {
            let mut s = 0f32;
            for r in rows.clone() {
                let e = clamp_exp(scores[r * h + k]);
                out[r * h + k] = e;
                s += e;
            }
            for r in rows.clone() {
                out[r * h + k] /= s;
            }
        }
    }
}

/// Backward of [`group_softmax`]: `dscore = α (dα − Σ α dα) · clamp'`.
fn group_softmax_back<G: IntoIterator<Item = usize> + Clone>(
    scores: &[f32],
    alpha: &[f32],
    dalpha: &[f32],
    h: usize,
    groups: impl Iterator<Item = G>,
    ds: &mut [f32],
) {
    for rows in groups {
        for k in 0..h {
            let dot: f32 = rows.clone().into_iter().map(|r| alpha[r * h + k] * dalpha[r * h + k]).sum();
            for r in rows.clone() {
                let i = r * h + k;
                ds[i] = alpha[i] * (dalpha[i] - dot) * clamp_pass(scores[i]);
            }
        }
    }
}

/// `GCNConv`: `Â X W + b` with `Â = D^-½ (A + I) D^-½`, D the in-degree plus one.
#[derive(Debug, Clone)]
pub struct Gcn {
    pub lin: Lin,
}

/// What a GCN layer's backward pass reads.
pub struct GcnCache {
    x: Vec<f32>,
}

impl Drop for GcnCache {
    fn drop(&mut self) {
        reuse::give_all([&mut self.x]);
    }
}

/// The symmetric normalisation of every edge and self-loop: `(edge weights, loop weights)`.
fn gcn_norm(b: &HostBatch) -> (Vec<f32>, Vec<f32>) {
    let deg: Vec<f32> = (0..b.n).map(|d| (b.incoming(d).len() + 1) as f32).collect();
    let w = b.src.iter().zip(&b.dst).map(|(&s, &d)| 1.0 / (deg[s as usize] * deg[d as usize]).sqrt()).collect();
    let l = deg.iter().map(|&g| 1.0 / (g * g).sqrt()).collect();
    (w, l)
}

impl Gcn {
    pub fn forward(&self, x: &[f32], b: &HostBatch) -> Result<(Vec<f32>, GcnCache)> {
        let c = self.lin.dout;
        let h = self.lin.linear(x, b.n)?;
        let (w, l) = gcn_norm(b);
        let mut out = reuse::zeros(b.n * c);
        wide(
            #[inline(always)]
            || {
                for d in 0..b.n {
                    let o = &mut out[d * c..(d + 1) * c];
                    for &e in b.incoming(d) {
                        let (s, we) = (b.src[e as usize] as usize, w[e as usize]);
                        axpy(o, we, &h[s * c..(s + 1) * c]);
                    }
                    o.iter_mut().zip(&h[d * c..(d + 1) * c]).zip(&self.lin.b.v).for_each(|((o, v), bb)| *o += l[d] * v + bb);
                }
            },
        );
        reuse::give(h);
        Ok((out, GcnCache { x: reuse::copy(x) }))
    }

    pub fn backward(&mut self, cache: &GcnCache, dout: &[f32], b: &HostBatch, dx: Option<&mut [f32]>) -> Result<()> {
        let c = self.lin.dout;
        column_sums(&mut self.lin.b.g, dout);
        let (w, l) = gcn_norm(b);
        let mut dh = reuse::zeros(b.n * c);
        wide(
            #[inline(always)]
            || {
                for d in 0..b.n {
                    let g = &dout[d * c..(d + 1) * c];
                    for &e in b.incoming(d) {
                        let (s, we) = (b.src[e as usize] as usize, w[e as usize]);
                        axpy(&mut dh[s * c..(s + 1) * c], we, g);
                    }
                    axpy(&mut dh[d * c..(d + 1) * c], l[d], g);
                }
            },
        );
        self.lin.backward(&cache.x, &dh, b.n, false, dx, false)?;
        reuse::give(dh);
        Ok(())
    }
}

/// `GATConv(heads, concat=False)`: self-loops, LeakyReLU(0.2) scores, heads averaged, bias.
#[derive(Debug, Clone)]
pub struct Gat {
    /// `x W` (its bias unused, as in burn's layer).
    pub lin: Lin,
    /// `heads × c` each.
    pub att_src: P,
    pub att_dst: P,
    pub bias: P,
    pub heads: usize,
}

pub struct GatCache {
    x: Vec<f32>,
    hx: Vec<f32>,
    /// Pre-activation scores and attention of every edge then every self-loop: `(m + n) × heads`.
    z: Vec<f32>,
    alpha: Vec<f32>,
}

impl Drop for GatCache {
    fn drop(&mut self) {
        reuse::give_all([&mut self.x, &mut self.hx, &mut self.z, &mut self.alpha]);
    }
}

/// Edge ids into `d` with its self-loop (`m + d`) last.
fn with_loop(b: &HostBatch, d: usize) -> Vec<usize> {
    b.incoming(d).iter().map(|&e| e as usize).chain(std::iter::once(b.m + d)).collect()
}

impl Gat {
    fn ends(b: &HostBatch, e: usize) -> (usize, usize) {
        if e < b.m { (b.src[e] as usize, b.dst[e] as usize) } else { (e - b.m, e - b.m) }
    }

    pub fn forward(&self, x: &[f32], b: &HostBatch) -> Result<(Vec<f32>, GatCache)> {
        let (h, c) = (self.heads, self.bias.v.len());
        let hx = self.lin.linear(x, b.n)?;
        let dot = |att: &[f32]| -> Vec<f32> { (0..b.n * h).map(|i| (0..c).map(|j| hx[i * c + j] * att[(i % h) * c + j]).sum()).collect() };
        let (a_s, a_d) = (dot(&self.att_src.v), dot(&self.att_dst.v));
        let edges = b.m + b.n;
        let mut z = vec![0f32; edges * h];
        for e in 0..edges {
            let (s, d) = Self::ends(b, e);
            for k in 0..h {
                z[e * h + k] = a_s[s * h + k] + a_d[d * h + k];
            }
        }
        let l: Vec<f32> = z.iter().map(|&v| if v > 0.0 { v } else { 0.2 * v }).collect();
        let mut alpha = vec![0f32; edges * h];
        group_softmax(&l, h, (0..b.n).map(|d| with_loop(b, d)), &mut alpha);
        let mut out = reuse::zeros(b.n * c);
        let inv = 1.0 / h as f32;
        for d in 0..b.n {
            let o = &mut out[d * c..(d + 1) * c];
            for e in with_loop(b, d) {
                let s = Self::ends(b, e).0;
                for k in 0..h {
                    let a = alpha[e * h + k] * inv;
                    o.iter_mut().zip(&hx[(s * h + k) * c..(s * h + k + 1) * c]).for_each(|(o, v)| *o += a * v);
                }
            }
            o.iter_mut().zip(&self.bias.v).for_each(|(o, bb)| *o += bb);
        }
        Ok((out, GatCache { x: reuse::copy(x), hx, z, alpha }))
    }

    pub fn backward(&mut self, cache: &GatCache, dout: &[f32], b: &HostBatch, dx: Option<&mut [f32]>) -> Result<()> {
        let (h, c) = (self.heads, self.bias.v.len());
        let GatCache { x, hx, z, alpha } = cache;
        column_sums(&mut self.bias.g, dout);
        let edges = b.m + b.n;
        let inv = 1.0 / h as f32;
        let mut dhx = reuse::zeros(b.n * h * c);
        let mut dalpha = vec![0f32; edges * h];
        for e in 0..edges {
            let (s, d) = Self::ends(b, e);
            let g = &dout[d * c..(d + 1) * c];
            for k in 0..h {
                let hs = &hx[(s * h + k) * c..(s * h + k + 1) * c];
                dalpha[e * h + k] = inv * g.iter().zip(hs).map(|(a, b)| a * b).sum::<f32>();
                let a = alpha[e * h + k] * inv;
                dhx[(s * h + k) * c..(s * h + k + 1) * c].iter_mut().zip(g).for_each(|(o, v)| *o += a * v);
            }
        }
        let l: Vec<f32> = z.iter().map(|&v| if v > 0.0 { v } else { 0.2 * v }).collect();
        let mut dl = vec![0f32; edges * h];
        group_softmax_back(&l, alpha, &dalpha, h, (0..b.n).map(|d| with_loop(b, d)), &mut dl);
        let (mut da_s, mut da_d) = (vec![0f32; b.n * h], vec![0f32; b.n * h]);
        for e in 0..edges {
            let (s, d) = Self::ends(b, e);
            for k in 0..h {
                let dz = dl[e * h + k] * if z[e * h + k] > 0.0 { 1.0 } else { 0.2 };
                da_s[s * h + k] += dz;
                da_d[d * h + k] += dz;
            }
        }
        for i in 0..b.n * h {
            let k = i % h;
            let row = &mut dhx[i * c..(i + 1) * c];
            let hr = &hx[i * c..(i + 1) * c];
            for j in 0..c {
                row[j] += da_s[i] * self.att_src.v[k * c + j] + da_d[i] * self.att_dst.v[k * c + j];
                self.att_src.g[k * c + j] += da_s[i] * hr[j];
                self.att_dst.g[k * c + j] += da_d[i] * hr[j];
            }
        }
        self.lin.backward(x, &dhx, b.n, false, dx, false)?;
        reuse::give(dhx);
        Ok(())
    }
}

/// `TransformerConv(heads, concat=True, edge_dim, root_weight=True)`.
#[derive(Debug, Clone)]
pub struct Transformer {
    pub q: Lin,
    pub k: Lin,
    pub v: Lin,
    /// `lin_edge` (its bias unused).
    pub e: Lin,
    pub skip: Lin,
    pub heads: usize,
}

/// A layer's edge input: the batch's distinct rows with each edge's row, or one row per edge.
#[derive(Clone, Copy)]
pub enum EdgeIn<'a> {
    Rows { rows: &'a [f32], n_rows: usize, row: &'a [u32] },
    PerEdge(&'a [f32]),
}

impl EdgeIn<'_> {
    fn row(&self, e: usize) -> usize {
        match self {
            EdgeIn::Rows { row, .. } => row[e] as usize,
            EdgeIn::PerEdge(_) => e,
        }
    }

    fn data(&self) -> (&[f32], usize) {
        match self {
            EdgeIn::Rows { rows, n_rows, .. } => (rows, *n_rows),
            EdgeIn::PerEdge(d) => (d, 0),
        }
    }
}

pub struct TransformerCache {
    x: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// The edge projection of every distinct row (or edge).
    ee: Vec<f32>,
    scores: Vec<f32>,
    alpha: Vec<f32>,
}

impl Drop for TransformerCache {
    fn drop(&mut self) {
        let TransformerCache { x, q, k, v, ee, scores, alpha } = self;
        reuse::give_all([x, q, k, v, ee, scores, alpha]);
    }
}

impl Transformer {
    pub fn forward(&self, x: &[f32], edge: EdgeIn<'_>, b: &HostBatch) -> Result<(Vec<f32>, TransformerCache)> {
        let (n, m) = (b.n, b.m);
        let hc = self.q.dout;
        let (h, c) = (self.heads, hc / self.heads);
        let mut out = self.skip.forward(x, n)?;
        let (q, k, v) = (self.q.forward(x, n)?, self.k.forward(x, n)?, self.v.forward(x, n)?);
        let (ed, rows) = edge.data();
        let rows = if rows == 0 { m } else { rows };
        let ee = if m == 0 { Vec::new() } else { self.e.linear(ed, rows)? };
        let edges = EdgeLoop { b, edge, h, c, q: &q, k: &k, v: &v, ee: &ee };
        let (scores, alpha) = edges.forward(&mut out);
        Ok((out, TransformerCache { x: reuse::copy(x), q, k, v, ee, scores, alpha }))
    }

    /// Gradients; `dx` receives `∂/∂x`, and `dedge` (one row per distinct row, or per edge)
    /// receives (accumulates) the gradient of the edge input when given.
    pub fn backward(
        &mut self,
        cache: &TransformerCache,
        dout: &[f32],
        edge: EdgeIn<'_>,
        b: &HostBatch,
        dx: Option<&mut [f32]>,
        dedge: Option<&mut [f32]>,
    ) -> Result<()> {
        let (n, m) = (b.n, b.m);
        let hc = self.q.dout;
        let (h, c) = (self.heads, hc / self.heads);
        let TransformerCache { x, q, k, v, ee, scores, alpha } = cache;
        let (ed, rows) = edge.data();
        let rows = if rows == 0 { m } else { rows };
        let g = if m > 0 {
            let g = EdgeLoop { b, edge, h, c, q, k, v, ee }.backward(scores, alpha, dout, rows);
            self.e.backward(ed, &g.dee, rows, false, dedge, true)?;
            g
        } else {
            EdgeGrads { dq: reuse::zeros(n * hc), dk: reuse::zeros(n * hc), dv: reuse::zeros(n * hc), dee: Vec::new() }
        };
        let (dq, dk, dv) = (&g.dq, &g.dk, &g.dv);

        match dx {
            Some(dx) => {
                self.skip.backward(x, dout, n, true, Some(&mut *dx), false)?;
                self.q.backward(x, dq, n, true, Some(&mut *dx), true)?;
                self.k.backward(x, dk, n, true, Some(&mut *dx), true)?;
                self.v.backward(x, dv, n, true, Some(dx), true)?;
            }
            None => {
                self.skip.backward(x, dout, n, true, None, false)?;
                self.q.backward(x, dq, n, true, None, false)?;
                self.k.backward(x, dk, n, true, None, false)?;
                self.v.backward(x, dv, n, true, None, false)?;
            }
        }
        Ok(())
    }
}

/// A TransformerConv layer's loop over edges: the scores `q_d · (k_s + e) / √c`, the softmax over
/// each destination's incoming edges and the messages `α (v_s + e)`, and their gradients. Every
/// value is accumulated in the order a plain loop over the edges adds its terms, by whichever group
/// owns it — an edge, a source over its outgoing edges, a destination over its incoming edges, all
/// in edge order — so that the groups can run on two threads (large batches) with the plain loop's
/// results bit for bit (test `the_split_edge_loop_is_the_plain_loop_bit_for_bit`).
struct EdgeLoop<'a> {
    b: &'a HostBatch,
    edge: EdgeIn<'a>,
    /// Heads and channels per head.
    h: usize,
    c: usize,
    /// Node projections (`n × h·c`) and the edge projection (one row per distinct row or edge).
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    ee: &'a [f32],
}

/// The edge loop's gradients: queries, keys and values per node, the edge projection per row.
struct EdgeGrads {
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    dee: Vec<f32>,
}

impl Drop for EdgeGrads {
    fn drop(&mut self) {
        reuse::give_all([&mut self.dq, &mut self.dk, &mut self.dv, &mut self.dee]);
    }
}

impl EdgeLoop<'_> {
    /// Adds every destination's messages to `out` (`n × h·c`); returns the scores and attention
    /// (`m × h`).
    fn forward(&self, out: &mut [f32]) -> (Vec<f32>, Vec<f32>) {
        let EdgeLoop { b, edge, h, c, q, k, v, ee } = *self;
        let (n, m, hc) = (b.n, b.m, h * c);
        let scale = 1.0 / (c as f32).sqrt();
        let mut scores = reuse::zeros(m * h);
        each_row(&mut scores, h, |e, sc| {
            let (s, d, r) = (b.src[e] as usize, b.dst[e] as usize, edge.row(e));
            let (qd, ks, er) = (&q[d * hc..(d + 1) * hc], &k[s * hc..(s + 1) * hc], &ee[r * hc..(r + 1) * hc]);
            for (kk, sc) in sc.iter_mut().enumerate() {
                let at = kk * c..(kk + 1) * c;
                *sc = qd[at.clone()].iter().zip(&ks[at.clone()]).zip(&er[at]).map(|((q, k), e)| q * (k + e)).sum::<f32>() * scale;
            }
        });
        let mut alpha = reuse::zeros(m * h);
        group_softmax(&scores, h, (0..n).map(|d| b.incoming(d).iter().map(|&e| e as usize)), &mut alpha);
        each_row(out, hc, |d, o| {
            for &e in b.incoming(d) {
                let e = e as usize;
                let (s, r) = (b.src[e] as usize, edge.row(e));
                let (vs, er) = (&v[s * hc..(s + 1) * hc], &ee[r * hc..(r + 1) * hc]);
                for kk in 0..h {
                    let a = alpha[e * h + kk];
                    let at = kk * c..(kk + 1) * c;
                    o[at.clone()].iter_mut().zip(&vs[at.clone()]).zip(&er[at]).for_each(|((o, v), e)| *o += a * (v + e));
                }
            }
        });
        (scores, alpha)
    }

    /// The gradients from the output's `dout` (`n × h·c`); `rows` edge-projection rows.
    fn backward(&self, scores: &[f32], alpha: &[f32], dout: &[f32], rows: usize) -> EdgeGrads {
        let EdgeLoop { b, edge, h, c, q, k, v, ee } = *self;
        let (n, m, hc) = (b.n, b.m, h * c);
        let scale = 1.0 / (c as f32).sqrt();
        let (mut dq, mut dk, mut dv) = (reuse::zeros(n * hc), reuse::zeros(n * hc), reuse::zeros(n * hc));
        let mut dee = reuse::zeros(rows * hc);
        // The gradients of the edge loop, each value accumulated in the order the plain loop
        // over edges added its terms (edge order; `dee` all first-pass terms, then all
        // second-pass ones), by whichever group owns it: per edge (`dα`, per-edge `dee`), per
        // source over its outgoing edges (`dv`, `dk`), per destination over its incoming edges
        // (`dq`). Each group is written by one call, on two threads when the batch is large.
        let mut dalpha = reuse::zeros(m * h);
        each_row(&mut dalpha, h, |e, da| {
            let (s, d, r) = (b.src[e] as usize, b.dst[e] as usize, edge.row(e));
            let g = &dout[d * hc..(d + 1) * hc];
            let (vs, er) = (&v[s * hc..(s + 1) * hc], &ee[r * hc..(r + 1) * hc]);
            for (kk, da) in da.iter_mut().enumerate() {
                let at = kk * c..(kk + 1) * c;
                *da = g[at.clone()].iter().zip(&vs[at.clone()]).zip(&er[at]).map(|((g, v), e)| g * (v + e)).sum();
            }
        });
        each_row(&mut dv, hc, |s, o| {
            for &e in b.outgoing(s) {
                let e = e as usize;
                let d = b.dst[e] as usize;
                let g = &dout[d * hc..(d + 1) * hc];
                for kk in 0..h {
                    let (a, at) = (alpha[e * h + kk], kk * c..(kk + 1) * c);
                    o[at.clone()].iter_mut().zip(&g[at]).for_each(|(o, g)| *o += a * g);
                }
            }
        });
        let mut ds = reuse::zeros(m * h);
        group_softmax_back(scores, alpha, &dalpha, h, (0..n).map(|d| b.incoming(d).iter().map(|&e| e as usize)), &mut ds);
        // The second pass skips an edge's head whose weight is zero, as the plain loop did.
        let weight = |e: usize, kk: usize| ds[e * h + kk] * scale;
        each_row(&mut dq, hc, |d, o| {
            for &e in b.incoming(d) {
                let e = e as usize;
                let (s, r) = (b.src[e] as usize, edge.row(e));
                for kk in 0..h {
                    let w = weight(e, kk);
                    if w == 0.0 {
                        continue;
                    }
                    let at = kk * c..(kk + 1) * c;
                    let (ks, er) = (&k[s * hc..(s + 1) * hc][at.clone()], &ee[r * hc..(r + 1) * hc][at.clone()]);
                    o[at].iter_mut().zip(ks).zip(er).for_each(|((o, k), e)| *o += w * (k + e));
                }
            }
        });
        each_row(&mut dk, hc, |s, o| {
            for &e in b.outgoing(s) {
                let e = e as usize;
                let d = b.dst[e] as usize;
                for kk in 0..h {
                    let w = weight(e, kk);
                    if w == 0.0 {
                        continue;
                    }
                    let at = kk * c..(kk + 1) * c;
                    o[at.clone()].iter_mut().zip(&q[d * hc..(d + 1) * hc][at]).for_each(|(o, q)| *o += w * q);
                }
            }
        });
        // `dee`: both passes' terms of an edge's row.
        let first = |e: usize, kk: usize, o: &mut [f32]| {
            let (d, at) = (b.dst[e] as usize, kk * c..(kk + 1) * c);
            let a = alpha[e * h + kk];
            o[at.clone()].iter_mut().zip(&dout[d * hc..(d + 1) * hc][at]).for_each(|(o, g)| *o += a * g);
        };
        let second = |e: usize, kk: usize, o: &mut [f32]| {
            let w = weight(e, kk);
            if w != 0.0 {
                let (d, at) = (b.dst[e] as usize, kk * c..(kk + 1) * c);
                o[at.clone()].iter_mut().zip(&q[d * hc..(d + 1) * hc][at]).for_each(|(o, q)| *o += w * q);
            }
        };
        match edge {
            // One row per edge: the edge's own terms, first pass then second.
            EdgeIn::PerEdge(_) => each_row(&mut dee, hc, |e, o| {
                (0..h).for_each(|kk| first(e, kk, o));
                (0..h).for_each(|kk| second(e, kk, o));
            }),
            // Rows shared by edges: every edge's first-pass terms, then every edge's second-pass terms.
            EdgeIn::Rows { .. } => {
                for pass in [&first as &dyn Fn(usize, usize, &mut [f32]), &second] {
                    for e in 0..m {
                        let r = edge.row(e);
                        (0..h).for_each(|kk| pass(e, kk, &mut dee[r * hc..(r + 1) * hc]));
                    }
                }
            }
        }
        reuse::give_all([&mut dalpha, &mut ds]);
        EdgeGrads { dq, dk, dv, dee }
    }
}

/// Batch norm over rows (burn's `BatchNorm`, ε = 1e-5, momentum 0.1).
#[derive(Debug, Clone)]
pub struct BatchNorm {
    pub gamma: P,
    pub beta: P,
    pub running_mean: Vec<f32>,
    pub running_var: Vec<f32>,
}

pub struct NormCache {
    xhat: Vec<f32>,
    /// Per feature (batch norm) or per row (layer norm).
    inv_std: Vec<f32>,
}

impl Drop for NormCache {
    fn drop(&mut self) {
        reuse::give_all([&mut self.xhat, &mut self.inv_std]);
    }
}

const EPS: f32 = 1e-5;

impl BatchNorm {
    /// Training: the batch's statistics (running statistics updated); evaluation: the running ones.
    pub fn forward(&mut self, x: &[f32], rows: usize, train: bool) -> (Vec<f32>, NormCache) {
        wide(
            #[inline(always)]
            || self.forward_loops(x, rows, train),
        )
    }

    #[inline(always)]
    fn forward_loops(&mut self, x: &[f32], rows: usize, train: bool) -> (Vec<f32>, NormCache) {
        let f = self.gamma.v.len();
        let (mean, var) = if train {
            let mut mean = vec![0f32; f];
            for r in x.chunks_exact(f) {
                mean.iter_mut().zip(r).for_each(|(m, v)| *m += v);
            }
            mean.iter_mut().for_each(|m| *m /= rows as f32);
            let mut var = vec![0f32; f];
            for r in x.chunks_exact(f) {
                var.iter_mut().zip(r).zip(&mean).for_each(|((s, v), m)| *s += (v - m) * (v - m));
            }
            var.iter_mut().for_each(|s| *s /= rows as f32);
            for j in 0..f {
                self.running_mean[j] = self.running_mean[j] * 0.9 + mean[j] * 0.1;
                self.running_var[j] = self.running_var[j] * 0.9 + var[j] * 0.1;
            }
            (mean, var)
        } else {
            (self.running_mean.clone(), self.running_var.clone())
        };
        let inv_std: Vec<f32> = var.iter().map(|v| 1.0 / (v + EPS).sqrt()).collect();
        let mut xhat = reuse::zeros(x.len());
        let mut out = reuse::zeros(x.len());
        let (g, bb) = (&self.gamma.v[..f], &self.beta.v[..f]);
        for ((xr, hr), or) in x.chunks_exact(f).zip(xhat.chunks_exact_mut(f)).zip(out.chunks_exact_mut(f)) {
            for (((((h, o), &x), &m), &s), (&g, &b)) in
                hr.iter_mut().zip(or.iter_mut()).zip(xr).zip(&mean).zip(&inv_std).zip(g.iter().zip(bb))
            {
                *h = (x - m) * s;
                *o = *h * g + b;
            }
        }
        (out, NormCache { xhat, inv_std })
    }

    /// burn's `batch_norm_train_backward`: returns `dx`.
    pub fn backward(&mut self, cache: &NormCache, dout: &[f32], rows: usize) -> Vec<f32> {
        wide(
            #[inline(always)]
            || self.backward_loops(cache, dout, rows),
        )
    }

    #[inline(always)]
    fn backward_loops(&mut self, cache: &NormCache, dout: &[f32], rows: usize) -> Vec<f32> {
        let f = self.gamma.v.len();
        let (mut sg, mut sng) = (vec![0f32; f], vec![0f32; f]);
        for (g, hr) in dout.chunks_exact(f).zip(cache.xhat.chunks_exact(f)) {
            for (((a, b), &g), &h) in sg.iter_mut().zip(sng.iter_mut()).zip(g).zip(hr) {
                *a += g;
                *b += g * h;
            }
        }
        self.beta.g.iter_mut().zip(&sg).for_each(|(o, v)| *o += v);
        self.gamma.g.iter_mut().zip(&sng).for_each(|(o, v)| *o += v);
        let mg: Vec<f32> = sg.iter().map(|v| v / rows as f32).collect();
        let mng: Vec<f32> = sng.iter().map(|v| v / rows as f32).collect();
        let scale: Vec<f32> = self.gamma.v.iter().zip(&cache.inv_std).map(|(g, s)| g * s).collect();
        let mut dx = reuse::zeros(dout.len());
        for ((g, hr), dr) in dout.chunks_exact(f).zip(cache.xhat.chunks_exact(f)).zip(dx.chunks_exact_mut(f)) {
            for (((((d, &g), &h), &m), &mn), &sc) in dr.iter_mut().zip(g).zip(hr).zip(&mg).zip(&mng).zip(&scale) {
                *d = sc * ((g - m) - h * mn);
            }
        }
        dx
    }
}

/// Layer norm over each row's features (burn's `LayerNorm`, ε = 1e-5).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub gamma: P,
    pub beta: P,
}

impl LayerNorm {
    pub fn forward(&self, x: &[f32]) -> (Vec<f32>, NormCache) {
        wide(
            #[inline(always)]
            || self.forward_loops(x),
        )
    }

    #[inline(always)]
    fn forward_loops(&self, x: &[f32]) -> (Vec<f32>, NormCache) {
        let f = self.gamma.v.len();
        let rows = x.len() / f.max(1);
        let (mut xhat, mut out, mut inv_std) = (reuse::zeros(x.len()), reuse::zeros(x.len()), vec![0f32; rows]);
        for (r, ((xr, hr), or)) in x.chunks_exact(f).zip(xhat.chunks_exact_mut(f)).zip(out.chunks_exact_mut(f)).enumerate() {
            let mean = xr.iter().sum::<f32>() / f as f32;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / f as f32;
            let is = 1.0 / (var + EPS).sqrt();
            inv_std[r] = is;
            for j in 0..f {
                hr[j] = (xr[j] - mean) * is;
                or[j] = hr[j] * self.gamma.v[j] + self.beta.v[j];
            }
        }
        (out, NormCache { xhat, inv_std })
    }

    pub fn backward(&mut self, cache: &NormCache, dout: &[f32]) -> Vec<f32> {
        wide(
            #[inline(always)]
            || self.backward_loops(cache, dout),
        )
    }

    #[inline(always)]
    fn backward_loops(&mut self, cache: &NormCache, dout: &[f32]) -> Vec<f32> {
        let f = self.gamma.v.len();
        let mut dx = reuse::zeros(dout.len());
        for (r, ((g, hr), dr)) in dout.chunks_exact(f).zip(cache.xhat.chunks_exact(f)).zip(dx.chunks_exact_mut(f)).enumerate() {
            // The parameters' gradients element by element (vectorised), then the two sums in
            // order (sequential, as before).
            for j in 0..f {
                self.beta.g[j] += g[j];
                self.gamma.g[j] += g[j] * hr[j];
            }
            let (mut s1, mut s2) = (0f32, 0f32);
            for j in 0..f {
                let dh = g[j] * self.gamma.v[j];
                s1 += dh;
                s2 += dh * hr[j];
            }
            let (s1, s2) = (s1 / f as f32, s2 / f as f32);
            for j in 0..f {
                dr[j] = cache.inv_std[r] * (g[j] * self.gamma.v[j] - s1 - hr[j] * s2);
            }
        }
        dx
    }
}

/// `dst += src`, element by element.
pub fn add(dst: &mut [f32], src: &[f32]) {
    dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
}

/// Row-wise log-softmax in place over rows of `v` (the maximum subtracted first).
pub fn log_softmax_rows(x: &mut [f32], v: usize) {
    for row in x.chunks_exact_mut(v) {
        let m = row.iter().fold(f32::NEG_INFINITY, |m, &a| m.max(a));
        let lse = m + row.iter().map(|&a| (a - m).exp()).sum::<f32>().ln();
        row.iter_mut().for_each(|a| *a -= lse);
    }
}

/// The negative log-likelihood of `target` under row-wise log-probabilities `lp` (`rows × v`) —
/// weighted by `w` and divided by the summed weight, or (`None`) the mean over the rows — with the
/// summed weight (the row count without `w`) and the loss's gradient with respect to the logits
/// the log-softmax read: `s·(softmax − one-hot)` per row, `s` the row's share of the weight.
pub fn nll(lp: &[f32], target: &[u32], w: Option<&[f32]>, v: usize) -> (f64, f64, Vec<f32>) {
    let bw: f32 = w.map_or(target.len().max(1) as f32, |w| w.iter().sum());
    let inv = 1.0 / bw.max(f32::MIN_POSITIVE);
    let mut loss = 0f64;
    let mut d = vec![0f32; lp.len()];
    for (r, (row, drow)) in lp.chunks_exact(v).zip(d.chunks_exact_mut(v)).enumerate() {
        let y = target[r] as usize;
        let s = w.map_or(inv, |w| w[r] * inv);
        loss -= match w {
            Some(_) => f64::from(row[y]) * f64::from(s),
            None => f64::from(row[y]),
        };
        for (j, (dj, &l)) in drow.iter_mut().zip(row).enumerate() {
            *dj = s * (l.exp() - if j == y { 1.0 } else { 0.0 });
        }
    }
    if w.is_none() {
        loss /= f64::from(bw);
    }
    (loss, f64::from(bw), d)
}

/// ReLU in place (TopoRAG's engine's pass).
pub fn relu(x: &mut [f32]) {
    relu_in_place(x);
}

/// ReLU's backward from its output: `d` zeroed where the output is not positive (TopoRAG's
/// engine's pass; a ReLU's output is never NaN).
pub fn relu_back(out: &[f32], d: &mut [f32]) {
    relu_grad(d, out);
}

/// Mean of each graph's node rows.
pub fn mean_pool(h: &[f32], f: usize, b: &HostBatch) -> Vec<f32> {
    let mut out = vec![0f32; b.graphs * f];
    wide(
        #[inline(always)]
        || {
            for (i, r) in h.chunks_exact(f).enumerate() {
                let g = b.node_graph[i] as usize;
                out[g * f..(g + 1) * f].iter_mut().zip(r).for_each(|(o, v)| *o += v);
            }
            for (g, r) in out.chunks_exact_mut(f).enumerate() {
                let inv = 1.0 / b.counts[g] as f32;
                r.iter_mut().for_each(|v| *v *= inv);
            }
        },
    );
    out
}

pub fn mean_pool_back(dp: &[f32], f: usize, b: &HostBatch) -> Vec<f32> {
    let mut dh = vec![0f32; b.n * f];
    for (i, r) in dh.chunks_exact_mut(f).enumerate() {
        let g = b.node_graph[i] as usize;
        let inv = 1.0 / b.counts[g] as f32;
        r.iter_mut().zip(&dp[g * f..(g + 1) * f]).for_each(|(o, v)| *o = v * inv);
    }
    dh
}

/// Softmax of `scores` (`n × h`) over each graph's nodes, clamped.
pub fn graph_softmax(scores: &[f32], h: usize, b: &HostBatch) -> Vec<f32> {
    let mut out = vec![0f32; scores.len()];
    group_softmax(scores, h, (0..b.graphs).map(|g| b.offsets[g]..b.offsets[g] + b.counts[g]), &mut out);
    out
}

pub fn graph_softmax_back(scores: &[f32], alpha: &[f32], dalpha: &[f32], h: usize, b: &HostBatch) -> Vec<f32> {
    let mut ds = vec![0f32; scores.len()];
    group_softmax_back(scores, alpha, dalpha, h, (0..b.graphs).map(|g| b.offsets[g]..b.offsets[g] + b.counts[g]), &mut ds);
    ds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: &mut crate::train::Stream) -> Vec<f32> {
        (0..n).map(|_| seed.unit() as f32 - 0.5).collect()
    }

    /// The edge loop as one plain loop over the edges (the engine's code before it was split into
    /// groups): forward scores and messages, then both gradient passes.
    fn plain(l: &EdgeLoop<'_>, out: &mut [f32], dout: &[f32], rows: usize) -> (Vec<f32>, Vec<f32>, EdgeGrads) {
        let EdgeLoop { b, edge, h, c, q, k, v, ee } = *l;
        let (n, m, hc) = (b.n, b.m, h * c);
        let scale = 1.0 / (c as f32).sqrt();
        let mut scores = vec![0f32; m * h];
        for e in 0..m {
            let (s, d, r) = (b.src[e] as usize, b.dst[e] as usize, edge.row(e));
            let (qd, ks, er) = (&q[d * hc..(d + 1) * hc], &k[s * hc..(s + 1) * hc], &ee[r * hc..(r + 1) * hc]);
            for kk in 0..h {
                let at = kk * c..(kk + 1) * c;
                scores[e * h + kk] =
                    qd[at.clone()].iter().zip(&ks[at.clone()]).zip(&er[at]).map(|((q, k), e)| q * (k + e)).sum::<f32>() * scale;
            }
        }
        let mut alpha = vec![0f32; m * h];
        group_softmax(&scores, h, (0..n).map(|d| b.incoming(d).iter().map(|&e| e as usize)), &mut alpha);
        for d in 0..n {
            let o = &mut out[d * hc..(d + 1) * hc];
            for &e in b.incoming(d) {
                let e = e as usize;
                let (s, r) = (b.src[e] as usize, edge.row(e));
                let (vs, er) = (&v[s * hc..(s + 1) * hc], &ee[r * hc..(r + 1) * hc]);
                for kk in 0..h {
                    let a = alpha[e * h + kk];
                    let at = kk * c..(kk + 1) * c;
                    o[at.clone()].iter_mut().zip(&vs[at.clone()]).zip(&er[at]).for_each(|((o, v), e)| *o += a * (v + e));
                }
            }
        }
        let (mut dq, mut dk, mut dv) = (vec![0f32; n * hc], vec![0f32; n * hc], vec![0f32; n * hc]);
        let mut dee = vec![0f32; rows * hc];
        let mut dalpha = vec![0f32; m * h];
        for e in 0..m {
            let (s, d, r) = (b.src[e] as usize, b.dst[e] as usize, edge.row(e));
            let g = &dout[d * hc..(d + 1) * hc];
            let (vs, er) = (&v[s * hc..(s + 1) * hc], &ee[r * hc..(r + 1) * hc]);
            for kk in 0..h {
                let at = kk * c..(kk + 1) * c;
                dalpha[e * h + kk] = g[at.clone()].iter().zip(&vs[at.clone()]).zip(&er[at.clone()]).map(|((g, v), e)| g * (v + e)).sum();
                let (a, gk) = (alpha[e * h + kk], &g[at.clone()]);
                dv[s * hc..(s + 1) * hc][at.clone()].iter_mut().zip(gk).for_each(|(o, g)| *o += a * g);
                dee[r * hc..(r + 1) * hc][at].iter_mut().zip(gk).for_each(|(o, g)| *o += a * g);
            }
        }
        let mut ds = vec![0f32; m * h];
        group_softmax_back(&scores, &alpha, &dalpha, h, (0..n).map(|d| b.incoming(d).iter().map(|&e| e as usize)), &mut ds);
        for e in 0..m {
            let (s, d, r) = (b.src[e] as usize, b.dst[e] as usize, edge.row(e));
            for kk in 0..h {
                let w = ds[e * h + kk] * scale;
                if w == 0.0 {
                    continue;
                }
                let at = kk * c..(kk + 1) * c;
                let (ks, er, qd) =
                    (&k[s * hc..(s + 1) * hc][at.clone()], &ee[r * hc..(r + 1) * hc][at.clone()], &q[d * hc..(d + 1) * hc][at.clone()]);
                dq[d * hc..(d + 1) * hc][at.clone()].iter_mut().zip(ks).zip(er).for_each(|((o, k), e)| *o += w * (k + e));
                dk[s * hc..(s + 1) * hc][at.clone()].iter_mut().zip(qd).for_each(|(o, q)| *o += w * q);
                dee[r * hc..(r + 1) * hc][at].iter_mut().zip(qd).for_each(|(o, q)| *o += w * q);
            }
        }
        (scores, alpha, EdgeGrads { dq, dk, dv, dee })
    }

    /// The first position where `a` and `b` differ in their bits (or in length).
    fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
        if a.len() != b.len() {
            return Some(a.len().min(b.len()));
        }
        a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits())
    }

    /// The edge loop split into groups (an edge, a source's outgoing edges, a destination's
    /// incoming edges) on two threads gives the plain loop's scores, attention, messages and
    /// gradients to the bit, with edge rows shared (G-Retriever's relation rows) and one per edge
    /// (gt2's edge states), on a batch large enough to be split (nodes and edges over `PAR_MIN`),
    /// with repeated and self edges, nodes without incoming edges, and a graph of one node.
    #[test]
    fn the_split_edge_loop_is_the_plain_loop_bit_for_bit() {
        let mut seed = crate::train::Stream(7);
        let (dim, edge_dim, h, c) = (3, 5, 4, 3);
        let sizes = [1200usize, 1, 1500];
        let xs: Vec<Vec<f32>> = sizes.iter().map(|&n| noise(n * dim, &mut seed)).collect();
        let edges: Vec<Vec<(u32, u32)>> = sizes
            .iter()
            .map(|&n| {
                let picks = noise(6 * n, &mut seed);
                // Sources and destinations skewed towards low ids: some nodes get no incoming edge.
                let pick = |u: f32, span: usize| (((u + 0.5) * (u + 0.5)) * span as f32) as u32 % n as u32;
                let mut e: Vec<(u32, u32)> = picks.chunks(2).map(|p| (pick(p[0], n), pick(p[1], n))).collect();
                e.push((0, 0));
                e.push((0, 0));
                e
            })
            .collect();
        let table = noise(30 * edge_dim, &mut seed);
        let edge_xs: Vec<Vec<f32>> = edges
            .iter()
            .map(|es| {
                let which = noise(es.len(), &mut seed);
                which.iter().flat_map(|u| table[((u + 0.5) * 29.99) as usize * edge_dim..][..edge_dim].to_vec()).collect()
            })
            .collect();
        let graphs: Vec<SmallGraph<'_>> =
            (0..sizes.len()).map(|i| SmallGraph { x: &xs[i], n: sizes[i], edges: &edges[i], edge_x: &edge_xs[i] }).collect();
        let b = HostBatch::new(&graphs, dim, edge_dim, true).expect("batch");
        assert!(b.n >= PAR_MIN && b.m >= PAR_MIN && b.n_rows <= 30, "{} nodes, {} edges, {} rows", b.n, b.m, b.n_rows);
        let hc = h * c;
        let (q, k, v) = (noise(b.n * hc, &mut seed), noise(b.n * hc, &mut seed), noise(b.n * hc, &mut seed));
        let dout = noise(b.n * hc, &mut seed);
        let per_edge = noise(b.m * hc, &mut seed);
        let shared = noise(b.n_rows * hc, &mut seed);
        let cases = [
            (EdgeIn::Rows { rows: &b.edge_rows, n_rows: b.n_rows, row: &b.edge_row }, &shared, b.n_rows),
            (EdgeIn::PerEdge(&per_edge), &per_edge, b.m),
        ];
        for (edge, ee, rows) in cases {
            let l = EdgeLoop { b: &b, edge, h, c, q: &q, k: &k, v: &v, ee };
            let start = noise(b.n * hc, &mut seed);
            let (mut out, mut want_out) = (start.clone(), start);
            let (scores, alpha) = l.forward(&mut out);
            let got = l.backward(&scores, &alpha, &dout, rows);
            let (want_scores, want_alpha, want) = plain(&l, &mut want_out, &dout, rows);
            let grads = [("dq", &got.dq, &want.dq), ("dk", &got.dk, &want.dk), ("dv", &got.dv, &want.dv), ("dee", &got.dee, &want.dee)];
            let all = [("scores", &scores, &want_scores), ("attention", &alpha, &want_alpha), ("messages", &out, &want_out)];
            for (name, g, w) in all.into_iter().chain(grads) {
                assert_eq!(first_difference(g, w), None, "{name} ({rows} edge rows): first differing value");
                assert!(w.iter().any(|&x| x != 0.0), "{name} is all zero: the case tests nothing");
            }
        }
    }
}
