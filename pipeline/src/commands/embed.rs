//! `tgrag embed`: MiniLM sentence embeddings of any texts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use arrow::array::{FixedSizeListArray, Float32Array};
use arrow::datatypes::{DataType, Field};
use tgrag_models::DeviceChoice;
use tgrag_models::minilm::{self, EncodeOptions, MiniLm};
use tgrag_schemas::tables;
use tgrag_stages::Progress;

use crate::commands::{DeviceArg, ids_and_texts};

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    /// The CPU engine: packed sequences, fused passes, AVX-512 gemm (`--device cpu` only).
    Fused,
    /// The burn model on the chosen device (on the CPU burn's backend is compiled unoptimised: a
    /// parity check, not a speed).
    Burn,
}

/// `--products`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProductsArg {
    /// The fastest within the single-bf16 bound (cosine ≥ 0.9999 to f32): single bf16 on AMX tiles
    /// when the CPU has them, else single bf16 on AVX512-BF16 on AMD cores (where it beats f32),
    /// else f32.
    Auto,
    /// f32 gemm always.
    F32,
    /// Single bf16 products with f32 accumulation (`vdpbf16ps`); refused where the CPU lacks AVX512-BF16.
    Bf16,
    /// Split bf16 on AMX tiles (about f32's accuracy); refused where the CPU or OS lacks them.
    Amx,
    /// Single bf16 products on AMX tiles (a third of `amx`'s tile work, `bf16`'s precision);
    /// refused where the CPU or OS lacks them.
    AmxBf16,
}

impl From<ProductsArg> for minilm::fused::Products {
    fn from(p: ProductsArg) -> Self {
        match p {
            ProductsArg::Auto => Self::Auto,
            ProductsArg::F32 => Self::F32,
            ProductsArg::Bf16 => Self::Bf16,
            ProductsArg::Amx => Self::Amx,
            ProductsArg::AmxBf16 => Self::AmxBf16,
        }
    }
}

/// `tgrag embed` arguments.
#[derive(Debug, clap::Args)]
pub struct EmbedArgs {
    /// Input Parquet: `id` and `text`.
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet: `id` and `embedding` (FixedSizeList<f32, 384>).
    #[arg(long)]
    pub out: PathBuf,
    /// Model folder (config.json, model.safetensors, tokenizer.json); default weights/all-MiniLM-L6-v2.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Sentences per forward pass (after sorting by length).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true, value_parser = crate::commands::num::count)]
    pub batch_size: usize,
    /// `fused` (the CPU engine: packed sequences, fused passes, AVX-512 gemm; `--device cpu` only)
    /// or `burn` (the burn model on the chosen device; slow on the CPU, where burn's backend is
    /// compiled unoptimised). Default: fused on cpu, burn on gpu.
    #[arg(long, value_enum)]
    pub engine: Option<EngineArg>,
    /// Linear layers of the fused engine: `auto` (split bf16 on AMX tiles when the CPU has them,
    /// else single bf16 on an AMD core with AVX512-BF16, else f32), `f32`, `bf16` or `amx` (refused where the CPU
    /// lacks it). The summary line names what ran.
    #[arg(long, value_enum, default_value_t = ProductsArg::Auto)]
    pub products: ProductsArg,
}

pub fn run(a: EmbedArgs, quiet: bool) -> Result<()> {
    let device = DeviceChoice::from(a.device);
    if a.batch_size == 0 {
        bail_config!("--batch-size must be at least 1");
    }
    let on_gpu = device.resolved() == DeviceChoice::Gpu;
    let fused = match a.engine {
        None => !on_gpu,
        Some(EngineArg::Fused) if on_gpu => bail_config!("--engine fused runs on the CPU only (use --engine burn with --device gpu)"),
        Some(EngineArg::Fused) => true,
        Some(EngineArg::Burn) => {
            if !on_gpu {
                eprintln!(
                    "note: --engine burn on the CPU runs burn's backend, compiled unoptimised in this build: slow (the fused engine is the CPU's)"
                );
            }
            false
        }
    };
    let products = minilm::fused::Products::from(a.products);
    if !fused && a.products != ProductsArg::Auto {
        bail_config!("--products applies to the fused engine only");
    }
    let dir = a.model.clone().unwrap_or_else(|| minilm::default_dir(Path::new(".")));
    if !dir.join("model.safetensors").is_file() {
        bail_config!("{}: no model.safetensors (run `make models` or `tgrag fetch minilm`)", dir.display());
    }
    let input = tgrag_schemas::io::read_parquet(&a.input)?;
    let (ids, texts) = ids_and_texts(&input, &a.input, "embed input", "id")?;
    let t0 = Instant::now();
    let model = if fused { MiniLm::load_fused(&dir, products)? } else { MiniLm::load(&dir, &device.device())? };
    let t_load = t0.elapsed().as_secs_f64();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bar = Progress { quiet }.bar(refs.len() as u64, "embed (MiniLM)");
    let t1 = Instant::now();
    let emb = model.encode(&refs, EncodeOptions { batch_size: a.batch_size }, &|n| bar.inc(n as u64))?;
    let t_enc = t1.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let dim = model.dim();
    let values = Arc::new(Float32Array::from(emb));
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let list = FixedSizeListArray::try_new(item.clone(), dim as i32, values, None)?;
    let batch = tables::EMBED_VECTORS.batch(vec![ids, Arc::new(list)])?;
    tgrag_schemas::io::write_table(&tables::EMBED_VECTORS, &a.out, &batch)?;
    eprintln!(
        "embed: {} texts on {} ({} engine, {} products) in {:.3}s ({:.1} texts/s; model load {:.2}s) → {}",
        refs.len(),
        device.resolved().as_str(),
        if fused { "fused" } else { "burn" },
        model.products(),
        t_enc,
        refs.len() as f64 / t_enc.max(1e-9),
        t_load,
        a.out.display()
    );
    Ok(())
}
