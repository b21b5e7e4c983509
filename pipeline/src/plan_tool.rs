//! `tgrag train-planner` and `tgrag plan`: the burn planner (metapath decoder + restriction tagger,
//! `tgrag_stages::mor_planner`) trained on MoR's plan files and applied to any queries.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array};
use tgrag_models::DeviceChoice;
use tgrag_stages::Progress;
use tgrag_stages::dense::Encoder;
use tgrag_stages::mor_planner::{Decode, PlanModel, TrainOptions, train};

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
    /// Query encoder: `minilm` (sentence embedding + hashed n-grams) or `hash` (hashed n-grams only).
    #[arg(long, default_value = "minilm")]
    pub encoder: String,
    /// MiniLM model folder (default weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub model_dir: Option<String>,
    /// Planner epochs.
    #[arg(long, default_value_t = 30)]
    pub epochs: usize,
    /// Tagger epochs.
    #[arg(long, default_value_t = 12)]
    pub tagger_epochs: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Weight of llama_ft.jsonl's plans in the planner loss (plans_train.jsonl weighs 1).
    #[arg(long, default_value_t = 1.0)]
    pub finetune_weight: f32,
    /// Width of the hashed uni/bigram part of the query vector.
    #[arg(long, default_value_t = TrainOptions::default().hash_dim)]
    pub hash_dim: usize,
    /// Metapath decoding stored with the model: `candidates` (the most likely of the training
    /// plans' metapaths and the greedy plan) or `greedy` (token by token).
    #[arg(long, default_value = "candidates")]
    pub decode: String,
    /// MiniLM top layers to fine-tune as a metapath classifier before the planner trains on the
    /// tuned sentence embedding (0: the frozen embedding; at most 6). Default: 2 with
    /// `--encoder minilm`, 0 with `hash` (which has no MiniLM to tune).
    #[arg(long)]
    pub tune_layers: Option<usize>,
    /// Epochs of that fine-tuning (the epoch with the best dev accuracy is kept).
    #[arg(long, default_value_t = TrainOptions::default().tune.epochs)]
    pub tune_epochs: usize,
    /// `cpu`, `gpu` (burn-wgpu) or `auto`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// `tgrag plan` arguments.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// A folder written by `tgrag train-planner`.
    #[arg(long)]
    pub model: PathBuf,
    /// Queries Parquet: `query_id`, `text`.
    #[arg(long)]
    pub queries: PathBuf,
    /// Output Parquet: `query_id`, `metapath` (MoR syntax), `restrictions` (JSON).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// `--tune-layers` when not given (with `--encoder minilm`).
const DEFAULT_TUNE_LAYERS: usize = 2;

fn device(s: &str) -> Result<DeviceChoice> {
    DeviceChoice::parse(s).with_context(|| format!("--device {s}: expected cpu, gpu or auto"))
}

pub fn cmd_train_planner(a: TrainPlannerArgs, quiet: bool) -> Result<()> {
    let encoder = match a.encoder.as_str() {
        "minilm" => Encoder::Minilm,
        "hash" => Encoder::Hash,
        e => bail!("--encoder {e}: expected minilm or hash"),
    };
    let decode = match a.decode.as_str() {
        "candidates" => Decode::Candidates,
        "greedy" => Decode::Greedy,
        d => bail!("--decode {d}: expected candidates or greedy"),
    };
    if !(0.0..=100.0).contains(&a.finetune_weight) {
        bail!("--finetune-weight {}: expected a weight in [0, 100]", a.finetune_weight);
    }
    if !(16..=1 << 16).contains(&a.hash_dim) {
        bail!("--hash-dim {}: expected a width in [16, 65536]", a.hash_dim);
    }
    if a.epochs == 0 || a.tagger_epochs == 0 {
        bail!("--epochs and --tagger-epochs must be at least 1");
    }
    let tune_layers = a.tune_layers.unwrap_or(if encoder == Encoder::Minilm { DEFAULT_TUNE_LAYERS } else { 0 });
    if tune_layers > 6 {
        bail!("--tune-layers {tune_layers}: all-MiniLM-L6-v2 has 6 layers");
    }
    if tune_layers > 0 && (encoder != Encoder::Minilm || a.tune_epochs == 0) {
        bail!("--tune-layers {tune_layers} needs --encoder minilm and --tune-epochs of at least 1");
    }
    for f in ["llama_ft.jsonl", "plans_train.jsonl", "plans_val.jsonl"] {
        if !a.plans.join(f).is_file() {
            bail!("{}: missing (--plans must hold llama_ft.jsonl, plans_train.jsonl and plans_val.jsonl)", a.plans.join(f).display());
        }
    }
    let mut opts = TrainOptions { encoder, model_dir: a.model_dir.clone(), device: device(&a.device)?, seed: a.seed, finetune_weight: a.finetune_weight, hash_dim: a.hash_dim, decode, ..TrainOptions::default() };
    opts.planner.epochs = a.epochs;
    opts.tagger.epochs = a.tagger_epochs;
    opts.tune.layers = tune_layers;
    opts.tune.epochs = a.tune_epochs;
    let progress = Progress { quiet };
    let t0 = Instant::now();
    let t = train(&a.plans, &opts, progress)?;
    let t_train = t0.elapsed().as_secs_f64();
    // Everything goes to a sibling folder first, renamed over `--out` at the end: a failed or
    // killed run leaves no half-written model.
    let name = a.out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    let final_out = a.out.clone();
    let a = TrainPlannerArgs { out: a.out.with_file_name(format!(".{name}.partial")), ..a };
    if a.out.exists() {
        std::fs::remove_dir_all(&a.out).with_context(|| format!("removing {}", a.out.display()))?;
    }
    t.model.save(&a.out)?;
    // Curves: one table for all models (`val_metric`: encoder metapath accuracy, planner exact
    // match, tagger label F1).
    // Rows (model, epoch, train loss, validation loss, validation metric).
    let rows: Vec<(&str, u32, f64, Option<f64>, f64)> = t
        .encoder_curve
        .iter()
        .map(|c| ("encoder", c.epoch, c.train_loss, Some(c.val_loss), c.val_accuracy))
        .chain(t.planner_curve.iter().map(|c| ("planner", c.epoch, c.train_loss, Some(c.val_loss), c.val_exact)))
        .chain(t.tagger_curve.iter().map(|c| ("tagger", c.epoch, c.train_loss, None, c.val_f1)))
        .collect();
    let model: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let epoch: Vec<u32> = rows.iter().map(|r| r.1).collect();
    let tl: Vec<f64> = rows.iter().map(|r| r.2).collect();
    let vl: Vec<Option<f64>> = rows.iter().map(|r| r.3).collect();
    let vm: Vec<f64> = rows.iter().map(|r| r.4).collect();
    let curves = RecordBatch::try_from_iter(vec![
        ("model", Arc::new(StringArray::from(model)) as ArrayRef),
        ("epoch", Arc::new(UInt32Array::from(epoch))),
        ("train_loss", Arc::new(Float64Array::from(tl))),
        ("val_loss", Arc::new(Float64Array::from(vl))),
        ("val_metric", Arc::new(Float64Array::from(vm))),
    ])?;
    tgrag_schemas::io::write_parquet_atomic(&a.out.join("curves.parquet"), &curves)?;
    let t1 = Instant::now();
    let (fig, rows) = t.model.score_file(&a.plans.join("plans_val.jsonl"), progress)?;
    let t_val = t1.elapsed().as_secs_f64();
    let opt_s = |f: &dyn Fn(&tgrag_stages::mor_planner::Produced) -> String| rows.iter().map(|r| r.gold.as_ref().map(f)).collect::<Vec<Option<String>>>();
    let validation = RecordBatch::try_from_iter(vec![
        ("line", Arc::new(UInt32Array::from(rows.iter().map(|r| r.line as u32).collect::<Vec<_>>())) as ArrayRef),
        ("q_id", Arc::new(arrow::array::Int64Array::from(rows.iter().map(|r| r.q_id).collect::<Vec<_>>()))),
        ("gold_metapath", Arc::new(StringArray::from(opt_s(&|p| p.metapath.clone())))),
        ("metapath", Arc::new(StringArray::from(rows.iter().map(|r| r.pred.metapath.clone()).collect::<Vec<_>>()))),
        ("exact", Arc::new(BooleanArray::from(rows.iter().map(|r| r.exact).collect::<Vec<_>>()))),
        ("gold_restrictions", Arc::new(StringArray::from(opt_s(&|p| p.restrictions.clone())))),
        ("restrictions", Arc::new(StringArray::from(rows.iter().map(|r| r.pred.restrictions.clone()).collect::<Vec<_>>()))),
        ("token_f1", Arc::new(Float64Array::from(rows.iter().map(|r| r.token_f1).collect::<Vec<_>>()))),
    ])?;
    tgrag_schemas::io::write_parquet_atomic(&a.out.join("validation.parquet"), &validation)?;
    let report = RecordBatch::try_from_iter(vec![
        ("plans", Arc::new(StringArray::from(vec![a.plans.display().to_string()])) as ArrayRef),
        ("train_plans", Arc::new(UInt32Array::from(vec![t.train_plans as u32]))),
        ("dev_plans", Arc::new(UInt32Array::from(vec![t.dev_plans as u32]))),
        ("val_lines", Arc::new(UInt32Array::from(vec![fig.lines as u32]))),
        ("val_rejected", Arc::new(UInt32Array::from(vec![fig.rejected as u32]))),
        ("metapath_exact", Arc::new(Float64Array::from(vec![fig.metapath_exact]))),
        ("path_set_exact", Arc::new(Float64Array::from(vec![fig.path_set_exact]))),
        ("restriction_token_f1", Arc::new(Float64Array::from(vec![fig.restriction_token_f1]))),
        ("planner_epoch", Arc::new(UInt32Array::from(vec![t.planner_epoch]))),
        ("tagger_epoch", Arc::new(UInt32Array::from(vec![t.tagger_epoch]))),
        ("tune_layers", Arc::new(UInt32Array::from(vec![t.model.meta.tune_layers as u32]))),
        ("encoder_epoch", Arc::new(UInt32Array::from(vec![t.encoder_epoch]))),
    ])?;
    tgrag_schemas::io::write_parquet_atomic(&a.out.join("report.parquet"), &report)?;
    if final_out.exists() {
        std::fs::remove_dir_all(&final_out).with_context(|| format!("replacing {}", final_out.display()))?;
    }
    std::fs::rename(&a.out, &final_out).with_context(|| format!("renaming {} to {}", a.out.display(), final_out.display()))?;
    let a = TrainPlannerArgs { out: final_out, ..a };
    println!(
        "train-planner {}: {} training plans ({} for checkpoints); plans_val.jsonl: {} lines ({} gold plans unparseable): metapath exact {:.4}, as path sets {:.4}, restriction token F1 {:.4}; planner epoch {}, tagger epoch {}; train {:.1}s, validate {:.1}s → {}",
        a.plans.display(),
        t.train_plans,
        t.dev_plans,
        fig.lines,
        fig.rejected,
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

pub fn cmd_plan(a: PlanArgs, quiet: bool) -> Result<()> {
    let dev = device(&a.device)?;
    if !a.model.join("model.json").is_file() {
        bail!("{}: no model.json (train one with `tgrag train-planner`)", a.model.display());
    }
    let input = tgrag_schemas::io::read_parquet(&a.queries)?;
    let ids = crate::tools::column(&input, &a.queries, "query_id")?.clone();
    crate::tools::check_ids(&ids, &a.queries, "query_id")?;
    let texts = crate::tools::texts(&input, &a.queries, "text")?;
    let model = PlanModel::load(&a.model, dev)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let plans = model.plan(&refs, Progress { quiet })?;
    let secs = t0.elapsed().as_secs_f64();
    let batch = RecordBatch::try_from_iter(vec![
        ("query_id", ids),
        ("metapath", Arc::new(StringArray::from(plans.iter().map(|p| p.metapath.clone()).collect::<Vec<_>>())) as ArrayRef),
        ("restrictions", Arc::new(StringArray::from(plans.iter().map(|p| p.restrictions.clone()).collect::<Vec<_>>()))),
    ])?;
    tgrag_schemas::io::write_parquet_atomic(&a.out, &batch)?;
    eprintln!("plan: {} queries in {:.2}s ({:.2} ms/query) → {}", refs.len(), secs, 1e3 * secs / refs.len().max(1) as f64, a.out.display());
    Ok(())
}
