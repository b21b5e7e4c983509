//! `tgrag-bench bench-gemm` (`make bench`'s `gemm` section, next to `torch.matmul`): GFLOP/s of
//! the f32 products the host engines make ([`tgrag_models::linalg::gemm_f32_par`], `gemm` on
//! rayon's threads under `TGRAG_SIMD`'s cap), on one `m×k · k×n` shape, best of `--runs` after
//! two warm-ups. It tells a host engine's own overhead from the product kernel's speed.
//!
//! Prints one JSON line: `{"m": …, "k": …, "n": …, "seconds": …, "gflops": …}`.

use std::time::Instant;

use anyhow::Result;
use tgrag_models::linalg::{Op, gemm_f32_par};
use tgrag_pipeline::bail_config;

/// `tgrag-bench bench-gemm` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchGemmArgs {
    #[arg(long)]
    pub m: usize,
    #[arg(long)]
    pub k: usize,
    #[arg(long)]
    pub n: usize,
    /// Timed products (the best is kept).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
}

pub fn run(a: BenchGemmArgs) -> Result<()> {
    if a.m == 0 || a.k == 0 || a.n == 0 || a.runs == 0 {
        bail_config!("--m, --k, --n and --runs must be at least 1");
    }
    let fill = |len: usize, salt: usize| -> Vec<f32> { (0..len).map(|i| ((i * 31 + salt) % 97) as f32 / 97.0 - 0.5).collect() };
    let (lhs, rhs) = (fill(a.m * a.k, 1), fill(a.k * a.n, 2));
    let mut dst = vec![0f32; a.m * a.n];
    let mut best = f64::INFINITY;
    for run in 0..a.runs + 2 {
        let t = Instant::now();
        gemm_f32_par(&mut dst, Op::n(&lhs, a.m, a.k), Op::n(&rhs, a.k, a.n), false)?;
        if run >= 2 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    let gflops = 2.0 * (a.m * a.k * a.n) as f64 / best / 1e9;
    println!("{{\"m\": {}, \"k\": {}, \"n\": {}, \"seconds\": {best:.6}, \"gflops\": {gflops:.2}}}", a.m, a.k, a.n);
    Ok(())
}
