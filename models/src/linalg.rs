//! Dense f64 linear algebra for the topology stages: a bounds-checked matrix product (gemm, the
//! crate's second audited `unsafe` call) and a symmetric eigendecomposition (Householder
//! tridiagonalisation + implicit QL, the EISPACK tred2/tql2 pair as JAMA writes them).

use crate::error::{ModelError, Result};

/// `a (m×k) · b (k×n)`, both row-major, returned row-major (m×n). Parallel with rayon.
#[allow(unsafe_code)]
pub fn matmul_f64(m: usize, k: usize, n: usize, a: &[f64], b: &[f64]) -> Result<Vec<f64>> {
    if a.len() != m * k || b.len() != k * n {
        return Err(ModelError::Internal(format!("matmul {m}×{k}·{k}×{n}: operands hold {} and {} values", a.len(), b.len())));
    }
    let mut c = vec![0.0f64; m * n];
    if m == 0 || n == 0 || k == 0 {
        return Ok(c);
    }
    // gemm picks its kernel under TGRAG_SIMD\'s cap (set when the level is first read).
    crate::simd::level();
    // SAFETY: the three slices hold exactly m×k, k×n and m×n values laid out row-major with the
    // strides given; `c` is a fresh exclusive buffer.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
    }
    Ok(c)
}

/// A row-major matrix operand of [`gemm_f32`], possibly read transposed.
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    pub data: &'a [f32],
    /// Rows and columns of the stored (row-major) matrix.
    pub rows: usize,
    pub cols: usize,
    /// Read as its transpose.
    pub t: bool,
}

impl<'a> Op<'a> {
    pub fn n(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Op { data, rows, cols, t: false }
    }
    pub fn t(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Op { data, rows, cols, t: true }
    }
    /// (rows, cols) as read, and (row stride, column stride) of the read matrix.
    fn read(&self) -> ((usize, usize), (usize, usize)) {
        if self.t { ((self.cols, self.rows), (1, self.cols)) } else { ((self.rows, self.cols), (self.cols, 1)) }
    }
}

/// `dst (m×n, row-major) = a · b` (or `dst += a · b` with `accumulate`), single-threaded: the small
/// trainings of [`crate::gnn::fast`] run several at once, one per core. Shapes are checked before the
/// one audited `unsafe` call.
pub fn gemm_f32(dst: &mut [f32], a: Op<'_>, b: Op<'_>, accumulate: bool) -> Result<()> {
    gemm_f32_on(dst, a, b, accumulate, gemm::Parallelism::None)
}

/// [`gemm_f32`] spread over rayon's threads (the language model's host engine: one training at a
/// time, large products).
pub fn gemm_f32_par(dst: &mut [f32], a: Op<'_>, b: Op<'_>, accumulate: bool) -> Result<()> {
    gemm_f32_on(dst, a, b, accumulate, gemm::Parallelism::Rayon(0))
}

/// [`gemm_f32`] with the rows of `dst` in two halves on two rayon tasks when the product is large
/// enough (the GraphQA host engine: one training or several side by side; a busy pool runs both
/// halves on the calling thread). Each half is a single-threaded product, so small products keep
/// gemm's own blocking (its rayon split of a 160-row product was slower than one thread).
pub fn gemm_f32_halves(dst: &mut [f32], a: Op<'_>, b: Op<'_>, accumulate: bool) -> Result<()> {
    // A transposed right-hand side (`dz · Wᵀ`, a layer's input gradient) is packed by `gemm`
    // element by element, by each half in full; over a few hundred rows that packing is most of
    // the product (160 × 1,024 · 1,024 × 384: 0.93 ms on two Zen 5 cores; 0.56 ms with the
    // transpose made first on both threads, 0.33 ms without its cost). Below about 100 rows, from
    // about 1,000 rows (the packing amortised) and for weights under 2^18 values (256 × 256: the
    // transpose costs what it saves) it is not made. Same values in the same order: the product is
    // bit for bit the one from the transposed operand (tested).
    let ((m, _), _) = a.read();
    if b.t && (96..=768).contains(&m) && b.data.len() == b.rows * b.cols && b.rows * b.cols >= 1 << 18 {
        // The thread's buffer, taken out while in use (a task this thread runs while it waits in
        // the halves' join finds it empty and allocates its own); a fresh allocation of this size
        // per call cost as much as the transpose (pages mapped and zeroed each time).
        let mut bt = TRANSPOSED.with(|t| std::mem::take(&mut *t.borrow_mut()));
        bt.resize(b.data.len(), 0.0);
        // On both threads, so that the other one is awake for the product's halves that follow (a
        // transpose on one thread alone let it fall asleep: the product then waited for its wake-up).
        transpose_halves(b.data, b.rows, b.cols, &mut bt);
        let out = gemm_f32_halves(dst, a, Op::n(&bt, b.cols, b.rows), accumulate);
        TRANSPOSED.with(|t| *t.borrow_mut() = bt);
        return out;
    }
    let ((m, k), (a_rs, a_cs)) = a.read();
    let ((k2, n), (b_rs, b_cs)) = b.read();
    if m < 64 || m * n * k < 1 << 21 || k != k2 || a.data.len() != a.rows * a.cols || b.data.len() != b.rows * b.cols || dst.len() != m * n
    {
        return gemm_f32(dst, a, b, accumulate);
    }
    let h = (m / 2 + 7) & !7;
    let (d0, d1) = dst.split_at_mut(h * n);
    let part = |d: &mut [f32], rows: usize, first: usize| {
        let a = Strided { data: a.data, offset: first * a_rs, rs: a_rs, cs: a_cs };
        let b = Strided { data: b.data, offset: 0, rs: b_rs, cs: b_cs };
        raw_gemm(d, rows, n, k, a, b, accumulate)
    };
    let (top, bottom) = rayon::join(|| part(d0, h, 0), || part(d1, m - h, h));
    top.and(bottom)
}

/// A matrix read from `data[offset..]` with row and column strides.
#[derive(Clone, Copy)]
struct Strided<'a> {
    data: &'a [f32],
    offset: usize,
    rs: usize,
    cs: usize,
}

/// `dst (rows×n) (+)= a (rows×k) · b (k×n)`, single-threaded, for `rows, n, k ≥ 1`; every read is
/// checked to lie within its slice first: `offset + (rows−1)·rs + (cols−1)·cs < len`.
#[allow(unsafe_code)]
fn raw_gemm(dst: &mut [f32], rows: usize, n: usize, k: usize, a: Strided<'_>, b: Strided<'_>, accumulate: bool) -> Result<()> {
    let fits = |s: &Strided<'_>, r: usize, c: usize| s.offset + (r - 1) * s.rs + (c - 1) * s.cs < s.data.len();
    if rows == 0 || n == 0 || k == 0 || dst.len() != rows * n || !fits(&a, rows, k) || !fits(&b, k, n) {
        return Err(ModelError::Internal(format!("gemm half {rows}×{k}·{k}×{n}: an operand or the result is out of bounds")));
    }
    // gemm picks its kernel under TGRAG_SIMD\'s cap (set when the level is first read).
    crate::simd::level();
    // SAFETY: checked just above: every element read lies within its slice, `dst` holds rows×n
    // values and is exclusive.
    unsafe {
        gemm::gemm(
            rows,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr().add(a.offset),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.offset),
            b.cs as isize,
            b.rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}

#[allow(unsafe_code)]
fn gemm_f32_on(dst: &mut [f32], a: Op<'_>, b: Op<'_>, accumulate: bool, par: gemm::Parallelism) -> Result<()> {
    let ((m, k), (a_rs, a_cs)) = a.read();
    let ((k2, n), (b_rs, b_cs)) = b.read();
    if k != k2 || a.data.len() != a.rows * a.cols || b.data.len() != b.rows * b.cols || dst.len() != m * n {
        return Err(ModelError::Internal(format!(
            "gemm {m}×{k}·{k2}×{n}: operands hold {} and {} values, the result {}",
            a.data.len(),
            b.data.len(),
            dst.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return Ok(());
    }
    if k == 1 {
        // An outer product (the link predictor's one-output layer, back-propagated): one
        // multiplication per element, as `gemm` computes it, without its blocking, which ran this
        // shape at about 2 GFLOP/s.
        for (i, row) in dst.chunks_exact_mut(n).enumerate() {
            let x = a.data[i * a_rs];
            let y = |j: usize| b.data[j * b_cs];
            if accumulate {
                row.iter_mut().enumerate().for_each(|(j, o)| *o += x * y(j));
            } else {
                row.iter_mut().enumerate().for_each(|(j, o)| *o = x * y(j));
            }
        }
        return Ok(());
    }
    // gemm picks its kernel under TGRAG_SIMD\'s cap (set when the level is first read).
    crate::simd::level();
    // SAFETY: every operand holds exactly rows×cols values and is read with the row-major strides
    // of its (possibly transposed) shape, checked above; `dst` is an exclusive m×n buffer.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.data.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// Eigenvalues (ascending) and eigenvectors of a symmetric `n × n` row-major matrix. The vectors
/// come back as rows: `vectors[j*n..(j+1)*n]` is the unit eigenvector of `values[j]`.
pub fn sym_eigen(n: usize, a: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    if a.len() != n * n {
        return Err(ModelError::Internal(format!("eigen: {} values for a {n}×{n} matrix", a.len())));
    }
    if n == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut v = a.to_vec();
    let mut d = vec![0.0; n];
    let mut e = vec![0.0; n];
    tred2(n, &mut v, &mut d, &mut e);
    // tql2 rotates columns of V; work on its transpose so that each rotation touches two rows.
    let mut vt = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            vt[j * n + i] = v[i * n + j];
        }
    }
    tql2(n, &mut vt, &mut d, &mut e)?;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| d[x].total_cmp(&d[y]).then(x.cmp(&y)));
    let values = order.iter().map(|&j| d[j]).collect();
    let mut vectors = Vec::with_capacity(n * n);
    for &j in &order {
        vectors.extend_from_slice(&vt[j * n..j * n + n]);
    }
    Ok((values, vectors))
}

fn tred2(n: usize, v: &mut [f64], d: &mut [f64], e: &mut [f64]) {
    let at = |i: usize, j: usize| i * n + j;
    for j in 0..n {
        d[j] = v[at(n - 1, j)];
    }
    for i in (1..n).rev() {
        let mut scale = 0.0;
        let mut h = 0.0;
        for dk in d.iter().take(i) {
            scale += dk.abs();
        }
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = v[at(i - 1, j)];
                v[at(i, j)] = 0.0;
                v[at(j, i)] = 0.0;
            }
        } else {
            for dk in d.iter_mut().take(i) {
                *dk /= scale;
                h += *dk * *dk;
            }
            let mut f = d[i - 1];
            let mut g = h.sqrt();
            if f > 0.0 {
                g = -g;
            }
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            e.iter_mut().take(i).for_each(|x| *x = 0.0);
            for j in 0..i {
                f = d[j];
                v[at(j, i)] = f;
                g = e[j] + v[at(j, j)] * f;
                for k in j + 1..i {
                    g += v[at(k, j)] * d[k];
                    e[k] += v[at(k, j)] * f;
                }
                e[j] = g;
            }
            f = 0.0;
            for j in 0..i {
                e[j] /= h;
                f += e[j] * d[j];
            }
            let hh = f / (h + h);
            for j in 0..i {
                e[j] -= hh * d[j];
            }
            for j in 0..i {
                f = d[j];
                g = e[j];
                for k in j..i {
                    v[at(k, j)] -= f * e[k] + g * d[k];
                }
                d[j] = v[at(i - 1, j)];
                v[at(i, j)] = 0.0;
            }
        }
        d[i] = h;
    }
    for i in 0..n - 1 {
        v[at(n - 1, i)] = v[at(i, i)];
        v[at(i, i)] = 1.0;
        let h = d[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                d[k] = v[at(k, i + 1)] / h;
            }
            for j in 0..=i {
                let mut g = 0.0;
                for k in 0..=i {
                    g += v[at(k, i + 1)] * v[at(k, j)];
                }
                for k in 0..=i {
                    v[at(k, j)] -= g * d[k];
                }
            }
        }
        for k in 0..=i {
            v[at(k, i + 1)] = 0.0;
        }
    }
    for j in 0..n {
        d[j] = v[at(n - 1, j)];
        v[at(n - 1, j)] = 0.0;
    }
    v[at(n - 1, n - 1)] = 1.0;
    e[0] = 0.0;
}

/// `vt` is Vᵀ: row `i` is column `i` of V.
fn tql2(n: usize, vt: &mut [f64], d: &mut [f64], e: &mut [f64]) -> Result<()> {
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    let mut f = 0.0;
    let mut tst1: f64 = 0.0;
    let eps = f64::EPSILON;
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let mut m = l;
        while m < n && e[m].abs() > eps * tst1 {
            m += 1;
        }
        // e[n-1] is 0, so m < n always holds here.
        let m = m.min(n - 1);
        if m > l {
            let mut iter = 0;
            loop {
                iter += 1;
                if iter > 60 {
                    return Err(ModelError::Internal(format!("eigen: QL iteration did not converge for eigenvalue {l}")));
                }
                let mut g = d[l];
                let mut p = (d[l + 1] - g) / (2.0 * e[l]);
                let mut r = p.hypot(1.0);
                if p < 0.0 {
                    r = -r;
                }
                d[l] = e[l] / (p + r);
                d[l + 1] = e[l] * (p + r);
                let dl1 = d[l + 1];
                let mut h = g - d[l];
                for di in d.iter_mut().skip(l + 2) {
                    *di -= h;
                }
                f += h;
                p = d[m];
                let mut c = 1.0;
                let mut c2 = c;
                let mut c3 = c;
                let el1 = e[l + 1];
                let mut s = 0.0;
                let mut s2 = 0.0;
                for i in (l..m).rev() {
                    c3 = c2;
                    c2 = c;
                    s2 = s;
                    g = c * e[i];
                    h = c * p;
                    r = p.hypot(e[i]);
                    e[i + 1] = s * r;
                    s = e[i] / r;
                    c = p / r;
                    p = c * d[i] - s * g;
                    d[i + 1] = h + s * (c * g + s * d[i]);
                    let (lo, hi) = vt.split_at_mut((i + 1) * n);
                    let (row_i, row_i1) = (&mut lo[i * n..], &mut hi[..n]);
                    for (a, b) in row_i.iter_mut().zip(row_i1.iter_mut()) {
                        let hb = *b;
                        *b = s * *a + c * hb;
                        *a = c * *a - s * hb;
                    }
                }
                p = -s * s2 * c3 * el1 * e[l] / dl1;
                e[l] = s * p;
                d[l] = c * p;
                if e[l].abs() <= eps * tst1 {
                    break;
                }
            }
        }
        d[l] += f;
        e[l] = 0.0;
    }
    Ok(())
}

thread_local! {
    /// [`gemm_f32_halves`]' transposed right-hand side, kept between calls.
    static TRANSPOSED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `src` (`rows × cols`) transposed into `dst` (`cols × rows`), the columns of `src` in two halves on
/// two rayon tasks.
fn transpose_halves(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    let h = cols / 2;
    let (d0, d1) = dst.split_at_mut(h * rows);
    rayon::join(|| transpose_cols(src, rows, cols, 0..h, d0), || transpose_cols(src, rows, cols, h..cols, d1));
}

/// Columns `range` of `src` (`rows × cols`) as the rows of `dst` (`range.len() × rows`), in 16 × 16 tiles.
fn transpose_cols(src: &[f32], rows: usize, cols: usize, range: std::ops::Range<usize>, dst: &mut [f32]) {
    const T: usize = 16;
    let first = range.start;
    for r0 in (0..rows).step_by(T) {
        for c0 in range.clone().step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                for c in c0..(c0 + T).min(range.end) {
                    dst[(c - first) * rows + r] = src[r * cols + c];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-halves product is the single-threaded one (plain and transposed operands, stored
    /// and accumulated), also at sizes where it splits unevenly or not at all.
    #[test]
    fn halves_products_equal_the_single_threaded_product() -> Result<()> {
        let mut state = 3u64;
        let mut rnd = || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for (m, k, n) in [(150, 96, 200), (301, 130, 70), (20, 8, 9)] {
            let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
            let start: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            for (ta, acc) in [(false, false), (true, false), (false, true), (true, true)] {
                let at: Vec<f32> = if ta { (0..k * m).map(|i| a[(i % m) * k + i / m]).collect() } else { a.clone() };
                fn op(d: &[f32], ta: bool, m: usize, k: usize) -> Op<'_> {
                    if ta { Op::t(d, k, m) } else { Op::n(d, m, k) }
                }
                let (mut one, mut two) = (start.clone(), start.clone());
                gemm_f32(&mut one, op(&at, ta, m, k), Op::n(&b, k, n), acc)?;
                rayon::scope(|_| gemm_f32_halves(&mut two, op(&at, ta, m, k), Op::n(&b, k, n), acc))?;
                let worst = one.iter().zip(&two).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                assert!(worst <= 1e-5, "{m}×{k}×{n} t={ta} acc={acc}: {worst}");
                // Against a plain triple loop.
                let want = (0..m * n)
                    .map(|i| (0..k).map(|j| a[(i / n) * k + j] * b[j * n + i % n]).sum::<f32>() + if acc { start[i] } else { 0.0 });
                let off = want.zip(&two).map(|(w, g)| (w - g).abs()).fold(0f32, f32::max);
                assert!(off <= 1e-4, "{m}×{k}×{n} t={ta} acc={acc}: {off} from the loop");
            }
        }
        Ok(())
    }

    /// A transposed right-hand side gives, to the bit, the product `gemm` computes from the strided
    /// operand itself (single-threaded [`gemm_f32`], which never transposes first) and the product
    /// of the same matrix stored transposed, whether `gemm_f32_halves` transposes it first (rows
    /// within its band) or not, stored and accumulated; and the transpose itself is exact at sizes
    /// off its tile and its halves.
    #[test]
    fn transposed_right_hand_sides_give_the_stored_products_bit_for_bit() -> Result<()> {
        let mut stream = crate::train::Stream(5);
        let mut noise = |len: usize| -> Vec<f32> { (0..len).map(|_| stream.unit() as f32 - 0.5).collect() };
        for (m, k, n) in [(160, 256, 1030), (97, 301, 901), (40, 200, 90), (900, 64, 300)] {
            let a = noise(m * k);
            // `w` is `n × k`, read transposed as the `k × n` right-hand side.
            let w = noise(n * k);
            let mut wt = vec![0f32; k * n];
            transpose_halves(&w, n, k, &mut wt);
            for (i, v) in wt.iter().enumerate() {
                assert_eq!(v.to_bits(), w[(i % n) * k + i / n].to_bits(), "transpose {n}×{k} at {i}");
            }
            let start = noise(m * n);
            for acc in [false, true] {
                let (mut read_t, mut strided, mut stored) = (start.clone(), start.clone(), start.clone());
                rayon::scope(|_| gemm_f32_halves(&mut read_t, Op::n(&a, m, k), Op::t(&w, n, k), acc))?;
                gemm_f32(&mut strided, Op::n(&a, m, k), Op::t(&w, n, k), acc)?;
                rayon::scope(|_| gemm_f32_halves(&mut stored, Op::n(&a, m, k), Op::n(&wt, k, n), acc))?;
                let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same(&read_t, &strided), "{m}×{k}×{n} acc={acc}: against gemm's strided product");
                assert!(same(&read_t, &stored), "{m}×{k}×{n} acc={acc}: against the stored transpose");
                let off = (0..m * n)
                    .map(|i| (0..k).map(|j| a[(i / n) * k + j] * w[(i % n) * k + j]).sum::<f32>() + if acc { start[i] } else { 0.0 })
                    .zip(&read_t)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(off <= 1e-4, "{m}×{k}×{n} acc={acc}: {off} from the loop");
            }
        }
        Ok(())
    }

    /// An inner dimension of one is an outer product: each element one multiplication (plus the
    /// accumulated value), to the bit, whichever operand is read transposed.
    #[test]
    fn rank_one_products_are_exact_outer_products() -> Result<()> {
        let (m, n) = (37, 70);
        let x: Vec<f32> = (0..m).map(|i| (i as f32 * 0.37).sin() * 3.1).collect();
        let y: Vec<f32> = (0..n).map(|j| (j as f32 * 0.91).cos() / 7.0).collect();
        let start: Vec<f32> = (0..m * n).map(|i| (i as f32 * 0.013).sin()).collect();
        for (ta, tb, acc) in [(false, false, false), (true, true, false), (false, true, true), (true, false, true)] {
            // A column m×1 (stored as 1×m when read transposed) and a row 1×n (stored as n×1).
            let a = if ta { Op::t(&x, 1, m) } else { Op::n(&x, m, 1) };
            let b = if tb { Op::t(&y, n, 1) } else { Op::n(&y, 1, n) };
            let mut got = start.clone();
            gemm_f32(&mut got, a, b, acc)?;
            for (i, g) in got.iter().enumerate() {
                let p = x[i / n] * y[i % n];
                let want = if acc { start[i] + p } else { p };
                assert_eq!(g.to_bits(), want.to_bits(), "ta={ta} tb={tb} acc={acc} at {i}");
            }
        }
        Ok(())
    }

    #[test]
    fn eigen_reconstructs_the_matrix_and_is_orthonormal() -> Result<()> {
        // A path-graph Laplacian (repeated structure) plus a random symmetric matrix.
        for n in [1usize, 2, 5, 40] {
            let mut a = vec![0.0; n * n];
            let mut s = 12345u64;
            for i in 0..n {
                for j in 0..=i {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let x = ((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5;
                    a[i * n + j] = x;
                    a[j * n + i] = x;
                }
            }
            let (w, u) = sym_eigen(n, &a)?;
            assert!(w.windows(2).all(|p| p[0] <= p[1]));
            for i in 0..n {
                for j in 0..n {
                    let rec: f64 = (0..n).map(|k| u[k * n + i] * w[k] * u[k * n + j]).sum();
                    assert!((rec - a[i * n + j]).abs() < 1e-12, "A[{i},{j}]");
                    let dot: f64 = (0..n).map(|k| u[i * n + k] * u[j * n + k]).sum();
                    assert!((dot - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
                }
            }
        }
        // Hand case: [[2,1],[1,2]] has eigenvalues 1 and 3.
        let (w, _) = sym_eigen(2, &[2.0, 1.0, 1.0, 2.0])?;
        assert!((w[0] - 1.0).abs() < 1e-15 && (w[1] - 3.0).abs() < 1e-15);
        Ok(())
    }

    #[test]
    fn matmul_matches_loops() -> Result<()> {
        let (m, k, n) = (7, 5, 3);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64).cos()).collect();
        let c = matmul_f64(m, k, n, &a, &b)?;
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
                assert!((c[i * n + j] - want).abs() < 1e-13);
            }
        }
        assert!(matmul_f64(2, 2, 2, &a[..3], &b[..4]).is_err());
        Ok(())
    }
}
