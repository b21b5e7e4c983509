//! `tgrag sql`: DataFusion over every Parquet artifact under the outputs folder. The file
//! `<outputs>/<dataset>/<stage>/<table>.parquet` is the table `<dataset>_<stage>_<table>`, with every
//! character that is not a letter, digit or `_` replaced by `_` (so `stark-prime` → `stark_prime`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

/// The SQL name of an artifact.
pub fn table_name(dataset: &str, stage: &str, table: &str) -> String {
    format!("{dataset}_{stage}_{table}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c.to_ascii_lowercase() } else { '_' })
        .collect()
}

/// Every `(name, path)` artifact under `outputs`, sorted by name.
pub fn artifacts(outputs: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let read = |p: &Path| -> Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> =
            std::fs::read_dir(p).with_context(|| format!("reading {}", p.display()))?.flatten().map(|e| e.path()).collect();
        v.sort();
        Ok(v)
    };
    if !outputs.is_dir() {
        return Ok(out);
    }
    for ds in read(outputs)?.into_iter().filter(|p| p.is_dir()) {
        for st in read(&ds)?.into_iter().filter(|p| p.is_dir()) {
            for f in read(&st)? {
                let Some(name) = f.file_name().and_then(|n| n.to_str()) else { continue };
                let Some(table) = name.strip_suffix(".parquet") else { continue };
                if name.starts_with('.') {
                    continue;
                }
                let (Some(d), Some(s)) = (ds.file_name().and_then(|n| n.to_str()), st.file_name().and_then(|n| n.to_str())) else {
                    continue;
                };
                out.push((table_name(d, s, table), f));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `tgrag sql` arguments.
#[derive(Debug, clap::Args)]
pub struct SqlArgs {
    /// The query, e.g. "SELECT count(*) AS n FROM synthetic_ingest_nodes".
    pub query: String,
    /// List the registered tables instead of running a query.
    #[arg(long)]
    pub list: bool,
}

/// Runs the query (or lists the tables) and prints the result as a table.
pub fn run(outputs: &Path, a: SqlArgs) -> Result<()> {
    let (query, list) = (a.query.as_str(), a.list);
    let tables = artifacts(outputs)?;
    if list {
        for (name, path) in &tables {
            println!("{name:<40} {}", path.display());
        }
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let text = rt.block_on(async {
        let ctx = SessionContext::new();
        for (name, path) in &tables {
            let p = path.to_str().with_context(|| format!("non-UTF-8 path {}", path.display()))?;
            ctx.register_parquet(name.as_str(), p, ParquetReadOptions::default())
                .await
                .with_context(|| format!("registering {}", path.display()))?;
        }
        let df = ctx.sql(query).await.with_context(|| {
            let names: Vec<&str> = tables.iter().map(|t| t.0.as_str()).collect();
            format!("in query (tables: {})", if names.is_empty() { "none: run `tgrag run` first".to_string() } else { names.join(", ") })
        })?;
        let batches = df.collect().await?;
        anyhow::Ok(pretty_format_batches(&batches)?.to_string())
    })?;
    println!("{text}");
    Ok(())
}
