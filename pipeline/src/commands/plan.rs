//! `tgrag plan`: plans for any queries with a model folder written by `tgrag train-planner`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use arrow::array::{ArrayRef, StringArray};
use tgrag_models::DeviceChoice;
use tgrag_schemas::tables;
use tgrag_stages::Progress;
use tgrag_stages::kb::mor_planner::PlanModel;

use crate::commands::{DeviceArg, ids_and_texts};

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
    /// Where the models run.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
}

pub fn run(a: PlanArgs, quiet: bool) -> Result<()> {
    let dev: DeviceChoice = a.device.into();
    if !a.model.join("model.json").is_file() {
        bail_config!("{}: no model.json (train one with `tgrag train-planner`)", a.model.display());
    }
    let input = tgrag_schemas::io::read_parquet(&a.queries)?;
    let (ids, texts) = ids_and_texts(&input, &a.queries, "plan queries", "query_id")?;
    let model = PlanModel::load(&a.model, dev)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let plans = model.plan(&refs, Progress { quiet })?;
    let secs = t0.elapsed().as_secs_f64();
    let batch = tables::QUERY_PLANS.batch(vec![
        ids,
        Arc::new(StringArray::from(plans.iter().map(|p| p.metapath.clone()).collect::<Vec<_>>())) as ArrayRef,
        Arc::new(StringArray::from(plans.iter().map(|p| p.restrictions.clone()).collect::<Vec<_>>())),
    ])?;
    tgrag_schemas::io::write_table(&tables::QUERY_PLANS, &a.out, &batch)?;
    eprintln!("plan: {} queries in {:.2}s ({:.2} ms/query) → {}", refs.len(), secs, 1e3 * secs / refs.len().max(1) as f64, a.out.display());
    Ok(())
}
