//! `tgrag-bench bench-products` (`make bench`'s MiniLM section): the fused engine's
//! [`MiniLm::encode`] of the sentences of a Parquet file against the same linear-layer products
//! alone ([`MiniLm::products_alone`]: the same batches, threads and kernels, with no attention,
//! norm, bias or GELU), best of `--runs` each, alternated. Both rates are given in GFLOP/s of the
//! products, so their ratio is the engine's share of what its products reach alone.
//!
//! Prints one JSON line: `{"products": …, "texts": …, "flops": …, "encode_s": …, "alone_s": …,
//! "encode_gflops": …, "alone_gflops": …, "share": …}`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use tgrag_models::minilm::{self, EncodeOptions, MiniLm};
use tgrag_pipeline::bail_config;
use tgrag_pipeline::commands::embed::ProductsArg;
use tgrag_pipeline::commands::ids_and_texts;

/// `tgrag-bench bench-products` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchProductsArgs {
    /// Parquet file with `id` and `text` (as `tgrag embed --input`).
    #[arg(long)]
    pub input: PathBuf,
    /// As `tgrag embed --products`.
    #[arg(long, value_enum, default_value_t = ProductsArg::Auto)]
    pub products: ProductsArg,
    /// Timed runs of each (the best is kept), after one warm-up of each.
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    /// The model folder (default: weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub model: Option<PathBuf>,
}

pub fn run(a: BenchProductsArgs) -> Result<()> {
    if a.runs == 0 {
        bail_config!("--runs must be at least 1");
    }
    let batch = tgrag_schemas::io::read_parquet(&a.input)?;
    let (_, owned) = ids_and_texts(&batch, &a.input, "bench-products input", "id")?;
    let texts: Vec<&str> = owned.iter().map(String::as_str).collect();
    let dir = a.model.clone().unwrap_or_else(|| minilm::default_dir(std::path::Path::new(".")));
    let model = MiniLm::load_fused(&dir, a.products.into()).with_context(|| format!("loading {}", dir.display()))?;
    let opts = EncodeOptions::default();
    let (mut encode_s, mut alone_s, mut flops) = (f64::INFINITY, f64::INFINITY, 0);
    for run in 0..=a.runs {
        let t = Instant::now();
        model.encode(&texts, opts, &|_| {})?;
        let e = t.elapsed().as_secs_f64();
        let t = Instant::now();
        flops = model.products_alone(&texts, opts)?;
        let p = t.elapsed().as_secs_f64();
        if run > 0 {
            (encode_s, alone_s) = (encode_s.min(e), alone_s.min(p));
        }
    }
    let g = |s: f64| flops as f64 / s / 1e9;
    println!(
        "{{\"products\": \"{}\", \"texts\": {}, \"flops\": {flops}, \"encode_s\": {encode_s:.4}, \"alone_s\": {alone_s:.4}, \"encode_gflops\": {:.2}, \"alone_gflops\": {:.2}, \"share\": {:.4}}}",
        model.products(),
        texts.len(),
        g(encode_s),
        g(alone_s),
        alone_s / encode_s
    );
    Ok(())
}
