//! `tgrag-bench bench-lm` (`make bench` calls it next to PyTorch): the seconds of
//! one training step of the language model with soft tokens ([`tgrag_models::lm::bench_steps`]:
//! forward, backward, AdamW) on a batch of `--rows` × `--len` word pieces, full fine-tuning or LoRA,
//! on the host engine (`--engine host`, [`tgrag_models::lm::host`], the default) or on burn
//! (`--engine burn`: its CPU backend, or `--device gpu`).
//!
//! Prints one JSON line: `{"tuning": …, "engine": …, "products": …, "rows": …, "len": …, "trained": …, "step_s": [..], "best_s": …}`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tgrag_models::lm::{Tuning, bench_steps};
use tgrag_models::minilm::{self, Engine, MiniLm};
use tgrag_pipeline::bail_config;

/// `tgrag-bench bench-lm` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchLmArgs {
    /// `full` or `lora`.
    #[arg(long, default_value = "full")]
    pub tuning: String,
    #[arg(long, default_value_t = 16)]
    pub rows: usize,
    #[arg(long, default_value_t = 160)]
    pub len: usize,
    /// Timed steps (after one warm-up step).
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    #[arg(long, default_value_t = 8)]
    pub lora_rank: usize,
    #[arg(long, default_value_t = 16.0)]
    pub lora_alpha: f64,
    /// `cpu` or `gpu` (burn only).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `host` (the hand-written backward pass) or `burn` (burn's autodiff).
    #[arg(long, default_value = "host")]
    pub engine: String,
    /// The model folder (default: weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub model: Option<PathBuf>,
}

pub fn run(a: BenchLmArgs) -> Result<()> {
    let tuning = match a.tuning.as_str() {
        "full" => Tuning::Full,
        "lora" => Tuning::Lora { rank: a.lora_rank, alpha: a.lora_alpha },
        other => bail_config!("--tuning `{other}`: full or lora"),
    };
    let choice = match a.device.as_str() {
        "cpu" => tgrag_models::DeviceChoice::Cpu,
        "gpu" => tgrag_models::DeviceChoice::Gpu,
        other => bail_config!("--device `{other}`: cpu or gpu"),
    };
    if a.engine == "host" && a.device != "cpu" {
        bail_config!("--engine host runs on the CPU; --device gpu needs --engine burn");
    }
    if a.rows == 0 || a.len < 3 || a.steps == 0 {
        bail_config!("--rows and --steps must be at least 1, --len at least 3");
    }
    let dir = a.model.clone().unwrap_or_else(|| minilm::default_dir(std::path::Path::new(".")));
    let model = MiniLm::load(&dir, &choice.device()).with_context(|| format!("loading {}", dir.display()))?;
    let Engine::Burn(bert) = &model.engine else { anyhow::bail!("MiniLM did not load into burn") };
    let (times, trained, products) = match a.engine.as_str() {
        "burn" => {
            let (times, trained) = bench_steps(bert, tuning, (a.rows, a.len), a.steps, &choice.device())?;
            (times, trained, "burn")
        }
        "host" => tgrag_models::lm::host::bench_steps(bert, tuning, (a.rows, a.len), a.steps)?,
        other => bail_config!("--engine `{other}`: host or burn"),
    };
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let list: Vec<String> = times.iter().map(|t| format!("{t:.4}")).collect();
    println!(
        "{{\"tuning\": \"{}\", \"engine\": \"{}\", \"products\": \"{products}\", \"device\": \"{}\", \"rows\": {}, \"len\": {}, \"trained\": {trained}, \"step_s\": [{}], \"best_s\": {best:.4}}}",
        tuning.as_str(),
        a.engine,
        a.device,
        a.rows,
        a.len,
        list.join(", ")
    );
    Ok(())
}
