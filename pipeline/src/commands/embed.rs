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

use tgrag_stages::shared::shards::{self, Shard};

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
    /// Embed shard I of N (`0 ≤ I < N`): the I-th of N contiguous ranges of the input's rows, into
    /// a partition under `<out>.shards/` (`--out` is not written). A run without `--shard` then
    /// reads the partitions of the same input, model and options, embeds the rest and writes
    /// `--out`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
}

/// The folder of `out`'s shard partitions: `<out>.shards`.
pub fn shards_root(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".shards");
    out.with_file_name(name)
}

/// The cache key of an embedding: the code, the input file, the weights and the batch size.
fn cache_key(input: &Path, model_dir: &Path, batch_size: usize) -> Result<String> {
    use sha2::{Digest, Sha256};
    let key = serde_json::json!({
        "tool": "embed",
        "code": crate::runner::CODE_DIGEST,
        "input": tgrag_schemas::io::sha256_file(input)?,
        "model": tgrag_schemas::io::sha256_file(&model_dir.join("model.safetensors"))?,
        "batch_size": batch_size,
    });
    Ok(tgrag_schemas::io::hex(&Sha256::digest(key.to_string().as_bytes())))
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
    let dim = model.dim();
    let identity = match fused {
        true => format!("minilm {dim} {} {}", model.products(), tgrag_models::simd::level().name()),
        false => format!("minilm {dim} burn {}", device.resolved().as_str()),
    };
    let key = cache_key(&a.input, &dir, a.batch_size)?;
    let root = shards_root(&a.out);
    let encode = |t: &[&str], label: &str| -> Result<Vec<f32>> {
        let bar = Progress { quiet }.bar(t.len() as u64, label);
        let emb = model.encode(t, EncodeOptions { batch_size: a.batch_size }, &|n| bar.inc(n as u64))?;
        bar.finish_and_clear();
        Ok(emb)
    };
    let t1 = Instant::now();
    if let Some(shard) = a.shard {
        if shards::valid(&root, shard, &key).is_some() {
            eprintln!("embed: shard {shard} is up to date → {}", shards::part_dir(&root, shard).display());
            return Ok(());
        }
        let rec = shards::run_shard(&root, shard, (&key, &identity), &refs, dim, None, |t| {
            encode(t, "embed (MiniLM)").map_err(|e| tgrag_stages::StageError::Internal(format!("{e:#}")))
        })?;
        let [first, end] = rec.rows.unwrap_or_default();
        let n = end - first;
        eprintln!(
            "embed: shard {shard}, rows {first}..{end} ({n} texts, {} products) in {:.3}s ({:.1} texts/s) → {}",
            model.products(),
            rec.seconds,
            n as f64 / rec.seconds.max(1e-9),
            shards::part_dir(&root, shard).display()
        );
        return Ok(());
    }
    let mut failure = None;
    let (emb, how) = shards::assemble(&root, (&key, &identity), refs.len(), dim, |r| {
        encode(&refs[r], "embed (MiniLM)").map_err(|e| {
            let text = format!("{e:#}");
            failure = Some(e);
            tgrag_stages::StageError::Internal(text)
        })
    })
    .map_err(|e| failure.take().unwrap_or_else(|| e.into()))?;
    let t_enc = t1.elapsed().as_secs_f64();
    let values = Arc::new(Float32Array::from(emb));
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let list = FixedSizeListArray::try_new(item.clone(), dim as i32, values, None)?;
    let batch = tables::EMBED_VECTORS.batch(vec![ids, Arc::new(list)])?;
    tgrag_schemas::io::write_table(&tables::EMBED_VECTORS, &a.out, &batch)?;
    // The table holds the partitions now.
    crate::runner::remove_partitions(&root);
    if let Some(line) = how.describe() {
        eprintln!("embed: {line}");
    }
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
