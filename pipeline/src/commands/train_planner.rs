//! `tgrag train-planner`: the burn planner (metapath decoder + restriction tagger,
//! `tgrag_stages::kb::mor_planner`) trained on MoR's plan files.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::RecordBatch;
use tgrag_schemas::rows::Rows;
use tgrag_schemas::tables;
use tgrag_stages::Progress;
use tgrag_stages::kb::mor_planner::{Decode, Dropped, Figures, Scored, TrainOptions, Trained, train};
use tgrag_stages::shared::curves::Curves;
use tgrag_stages::shared::encoders::Encoder;

use crate::commands::DeviceArg;

/// `--encoder`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EncoderArg {
    /// The MiniLM sentence embedding followed by hashed uni/bigrams.
    Minilm,
    /// Hashed uni/bigrams only (no model needed).
    Hash,
}

/// `--decode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecodeArg {
    /// The most likely of the training plans' metapaths and the greedy plan.
    Candidates,
    /// Token by token.
    Greedy,
}

/// `tgrag train-planner` arguments.
#[derive(Debug, clap::Args)]
pub struct TrainPlannerArgs {
    /// Folder with MoR's `llama_ft.jsonl`, `plans_train.jsonl` and `plans_val.jsonl`.
    #[arg(long)]
    pub plans: PathBuf,
    /// Model folder to write: `model.json`, `planner.safetensors`, `tagger.safetensors`,
    /// `curves.parquet`, `validation.parquet`, `report.parquet`.
    #[arg(long)]
    pub out: PathBuf,
    /// Query encoder.
    #[arg(long, value_enum, default_value_t = EncoderArg::Minilm)]
    pub encoder: EncoderArg,
    /// MiniLM model folder (default weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub model_dir: Option<String>,
    /// Planner epochs.
    #[arg(long, default_value_t = 30, allow_negative_numbers = true, value_parser = crate::commands::num::count)]
    pub epochs: usize,
    /// Tagger epochs.
    #[arg(long, default_value_t = 12, allow_negative_numbers = true, value_parser = crate::commands::num::count)]
    pub tagger_epochs: usize,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = crate::commands::num::seed)]
    pub seed: u64,
    /// Weight of llama_ft.jsonl's plans in the planner loss (plans_train.jsonl weighs 1).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = crate::commands::num::non_negative)]
    pub finetune_weight: f32,
    /// Width of the hashed uni/bigram part of the query vector.
    #[arg(long, default_value_t = TrainOptions::default().hash_dim, allow_negative_numbers = true, value_parser = crate::commands::num::dim)]
    pub hash_dim: usize,
    /// Metapath decoding stored with the model.
    #[arg(long, value_enum, default_value_t = DecodeArg::Candidates)]
    pub decode: DecodeArg,
    /// MiniLM top layers to fine-tune as a metapath classifier before the planner trains on the
    /// tuned sentence embedding (0: the frozen embedding; at most 6). Default: 2 with
    /// `--encoder minilm`, 0 with `hash` (which has no MiniLM to tune).
    #[arg(long, allow_negative_numbers = true, value_parser = crate::commands::num::count0)]
    pub tune_layers: Option<usize>,
    /// Epochs of that fine-tuning (the epoch with the best dev accuracy is kept).
    #[arg(long, default_value_t = TrainOptions::default().tune.epochs, allow_negative_numbers = true, value_parser = crate::commands::num::count0)]
    pub tune_epochs: usize,
    /// Where the models train.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
}

/// `--tune-layers` when not given (with `--encoder minilm`).
const DEFAULT_TUNE_LAYERS: usize = 2;

pub fn run(a: TrainPlannerArgs, quiet: bool) -> Result<()> {
    let opts = train_options(&a)?;
    let progress = Progress { quiet };
    let t0 = Instant::now();
    let t = train(&a.plans, &opts, progress)?;
    let t_train = t0.elapsed().as_secs_f64();
    note_dropped(&a.plans, &t.dropped);
    // Everything goes to a sibling folder first, renamed over `--out` at the end: a failed or
    // killed run leaves no half-written model.
    let name = a.out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    let partial = a.out.with_file_name(format!(".{name}.partial"));
    // Any failure from here on removes the partial folder: nothing half-written is left.
    let (fig, t_val) = match write_model(&t, &a, &partial, progress) {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    println!(
        "train-planner {}: {} training plans ({} for checkpoints); plans_val.jsonl: {} lines ({} gold plans unparseable, {} predictions not a plan): metapath exact {:.4}, as path sets {:.4}, restriction token F1 {:.4}; planner epoch {}, tagger epoch {}; train {:.1}s, validate {:.1}s → {}",
        a.plans.display(),
        t.train_plans,
        t.dev_plans,
        fig.lines,
        fig.rejected,
        fig.malformed,
        fig.metapath_exact,
        fig.path_set_exact,
        fig.restriction_token_f1,
        t.planner_epoch,
        t.tagger_epoch,
        t_train,
        t_val,
        a.out.display()
    );
    Ok(())
}

/// The training options the arguments ask for, after checking them and the plan folder.
fn train_options(a: &TrainPlannerArgs) -> Result<TrainOptions> {
    let encoder = match a.encoder {
        EncoderArg::Minilm => Encoder::Minilm,
        EncoderArg::Hash => Encoder::Hash,
    };
    let decode = match a.decode {
        DecodeArg::Candidates => Decode::Candidates,
        DecodeArg::Greedy => Decode::Greedy,
    };
    if !(0.0..=100.0).contains(&a.finetune_weight) {
        bail_config!("--finetune-weight {}: expected a weight in [0, 100]", a.finetune_weight);
    }
    if !(16..=1 << 16).contains(&a.hash_dim) {
        bail_config!("--hash-dim {}: expected a width in [16, 65536]", a.hash_dim);
    }
    if a.epochs == 0 || a.tagger_epochs == 0 {
        bail_config!("--epochs and --tagger-epochs must be at least 1");
    }
    let tune_layers = a.tune_layers.unwrap_or(if encoder == Encoder::Minilm { DEFAULT_TUNE_LAYERS } else { 0 });
    if tune_layers > 6 {
        bail_config!("--tune-layers {tune_layers}: all-MiniLM-L6-v2 has 6 layers");
    }
    if tune_layers > 0 && (encoder != Encoder::Minilm || a.tune_epochs == 0) {
        bail_config!("--tune-layers {tune_layers} needs --encoder minilm and --tune-epochs of at least 1");
    }
    for f in ["llama_ft.jsonl", "plans_train.jsonl", "plans_val.jsonl"] {
        if !a.plans.join(f).is_file() {
            bail_input!("{}: missing (--plans must hold llama_ft.jsonl, plans_train.jsonl and plans_val.jsonl)", a.plans.join(f).display());
        }
    }
    let mut opts = TrainOptions {
        encoder,
        model_dir: a.model_dir.clone(),
        device: a.device.into(),
        seed: a.seed,
        finetune_weight: a.finetune_weight,
        hash_dim: a.hash_dim,
        decode,
        ..TrainOptions::default()
    };
    opts.planner.epochs = a.epochs;
    opts.tagger.epochs = a.tagger_epochs;
    opts.tune.layers = tune_layers;
    opts.tune.epochs = a.tune_epochs;
    Ok(opts)
}

/// Every plan left out is said, with its line and reason (all of them in dropped.parquet).
fn note_dropped(plans: &Path, dropped: &[Dropped]) {
    for d in dropped.iter().take(20) {
        eprintln!("note: {}: line {}: plan left out of training: {}", plans.join(d.file).display(), d.line, d.reason);
    }
    if dropped.len() > 20 {
        eprintln!("note: … and {} more plans left out (all listed in dropped.parquet)", dropped.len() - 20);
    }
}

/// Writes the model and its tables into `partial`, scores `plans_val.jsonl`, then renames
/// `partial` over `--out`; returns the validation figures and the seconds they took.
fn write_model(t: &Trained, a: &TrainPlannerArgs, partial: &Path, progress: Progress) -> Result<(Figures, f64)> {
    if partial.exists() {
        std::fs::remove_dir_all(partial).with_context(|| format!("removing {}", partial.display()))?;
    }
    t.model.save(partial)?;
    let curves = curves(t, a.seed)?;
    tgrag_schemas::io::write_table(&tables::CURVES, &partial.join("curves.parquet"), &curves)?;
    let t1 = Instant::now();
    let (fig, rows) = t.model.score_file(&a.plans.join("plans_val.jsonl"), progress)?;
    let t_val = t1.elapsed().as_secs_f64();
    write_validation(&rows, partial)?;
    let mut dropped = Rows::new(&tables::PLANNER_DROPPED);
    for d in &t.dropped {
        dropped.put(d.file).put(d.line as u32).put(&d.reason).end_row();
    }
    tgrag_schemas::io::write_table(&tables::PLANNER_DROPPED, &partial.join("dropped.parquet"), &dropped.finish()?)?;
    let mut report = Rows::new(&tables::PLANNER_REPORT);
    report.put(&a.plans.display().to_string()).put(t.train_plans as u32).put(t.dev_plans as u32).put(t.dropped.len() as u32);
    report.put(fig.lines as u32).put(fig.rejected as u32).put(fig.malformed as u32);
    report.put(fig.metapath_exact).put(fig.path_set_exact).put(fig.restriction_token_f1);
    report.put(t.planner_epoch).put(t.tagger_epoch).put(t.model.meta.tune_layers as u32).put(t.encoder_epoch).end_row();
    tgrag_schemas::io::write_table(&tables::PLANNER_REPORT, &partial.join("report.parquet"), &report.finish()?)?;
    if a.out.exists() {
        std::fs::remove_dir_all(&a.out).with_context(|| format!("replacing {}", a.out.display()))?;
    }
    std::fs::rename(partial, &a.out).with_context(|| format!("renaming {} to {}", partial.display(), a.out.display()))?;
    Ok((fig, t_val))
}

/// Curves in the shared shape (`val_loss` where a model has one; the encoder's metric is the
/// metapath accuracy, the planner's exact match, the tagger's label F1).
fn curves(t: &Trained, seed: u64) -> Result<RecordBatch> {
    let mut curves = Curves::default();
    for c in &t.encoder_curve {
        curves.push(
            "encoder",
            "",
            seed,
            c.epoch,
            c.epoch == t.encoder_epoch,
            &[("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metapath_accuracy", c.val_accuracy)],
        );
    }
    for c in &t.planner_curve {
        curves.push(
            "planner",
            "",
            seed,
            c.epoch,
            c.epoch == t.planner_epoch,
            &[("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metapath_exact", c.val_exact)],
        );
    }
    for c in &t.tagger_curve {
        curves.push("tagger", "", seed, c.epoch, c.epoch == t.tagger_epoch, &[("train_loss", c.train_loss), ("val_label_f1", c.val_f1)]);
    }
    Ok(curves.batch()?)
}

/// `validation.parquet`: per line of `plans_val.jsonl`, gold and predicted plans and scores.
fn write_validation(rows: &[Scored], out: &Path) -> Result<()> {
    let mut validation = Rows::new(&tables::PLANNER_VALIDATION);
    for r in rows {
        let gold = r.gold.as_ref();
        validation.put(r.line as u32).put(r.q_id).put(gold.map(|g| &g.metapath)).put(&r.pred.metapath).put(r.exact);
        validation.put(gold.map(|g| &g.restrictions)).put(&r.pred.restrictions).put(r.token_f1).end_row();
    }
    tgrag_schemas::io::write_table(&tables::PLANNER_VALIDATION, &out.join("validation.parquet"), &validation.finish()?)?;
    Ok(())
}
