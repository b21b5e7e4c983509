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
use arrow::array::{Array, StringArray};
use tgrag_models::minilm::{self, EncodeOptions, MiniLm, fused::Products};
use tgrag_pipeline::bail_config;

/// `tgrag-bench bench-products` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchProductsArgs {
    /// Parquet file with a `text` column.
    #[arg(long)]
    pub input: PathBuf,
    /// `auto`, `f32`, `bf16`, `amx` or `amx-bf16` (as `tgrag embed --products`).
    #[arg(long, default_value = "auto")]
    pub products: String,
    /// Timed runs of each (the best is kept), after one warm-up of each.
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    /// The model folder (default: weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub model: Option<PathBuf>,
}

pub fn run(a: BenchProductsArgs) -> Result<()> {
    let products = match a.products.as_str() {
        "auto" => Products::Auto,
        "f32" => Products::F32,
        "bf16" => Products::Bf16,
        "amx" => Products::Amx,
        "amx-bf16" => Products::AmxBf16,
        other => bail_config!("--products `{other}`: auto, f32, bf16, amx or amx-bf16"),
    };
    if a.runs == 0 {
        bail_config!("--runs must be at least 1");
    }
    let batch = tgrag_schemas::io::read_parquet(&a.input)?;
    let col = batch
        .column_by_name("text")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .with_context(|| format!("{}: no string column `text`", a.input.display()))?;
    let texts: Vec<&str> = (0..col.len()).map(|i| col.value(i)).collect();
    let dir = a.model.clone().unwrap_or_else(|| minilm::default_dir(std::path::Path::new(".")));
    let model = MiniLm::load_fused(&dir, products).with_context(|| format!("loading {}", dir.display()))?;
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
