//! `tgrag sql`: DataFusion over every Parquet artifact under the outputs folder. The file
//! `<outputs>/<dataset>/<stage>/<table>.parquet` is the table `<dataset>_<stage>_<table>`, with every
//! character that is not a letter, digit or `_` replaced by `_` (so `stark-prime` → `stark_prime`).
//!
//! Read-only: only queries (`SELECT`, `WITH`, `VALUES`, `EXPLAIN`, `SHOW`, `DESCRIBE`) run; DataFusion
//! refuses every plan that writes (`COPY … TO`, `INSERT`), creates or drops (`CREATE EXTERNAL TABLE`,
//! `DROP`) or sets (`SET`). The tables are the Parquet files under the outputs folder only: symbolic
//! links are not followed, and a `*.parquet` file that is not Parquet is skipped with a warning.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::util::pretty::pretty_format_batches;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

/// The SQL name of an artifact.
pub fn table_name(dataset: &str, stage: &str, table: &str) -> String {
    format!("{dataset}_{stage}_{table}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c.to_ascii_lowercase() } else { '_' })
        .collect()
}

/// Every `(name, path)` artifact under `outputs`, sorted by name. Symbolic links (to folders or
/// files) are left out, so that nothing outside `outputs` becomes readable.
pub fn artifacts(outputs: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    // Entries of `p` that are real folders (`dirs`) or real files, never symbolic links.
    let read = |p: &Path, dirs: bool| -> Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("reading {}", p.display()))?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| if dirs { t.is_dir() } else { t.is_file() }))
            .map(|e| e.path())
            .collect();
        v.sort();
        Ok(v)
    };
    if !outputs.is_dir() {
        return Ok(out);
    }
    for ds in read(outputs, true)? {
        for st in read(&ds, true)? {
            for f in read(&st, false)? {
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

/// Whether `path` looks like a Parquet file: `PAR1` at both ends, room for a footer.
fn is_parquet(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return false };
    let mut head = [0u8; 4];
    let mut tail = [0u8; 4];
    f.metadata().is_ok_and(|m| m.len() >= 12)
        && f.read_exact(&mut head).is_ok()
        && f.seek(SeekFrom::End(-4)).is_ok()
        && f.read_exact(&mut tail).is_ok()
        && &head == b"PAR1"
        && &tail == b"PAR1"
}

/// The statements `tgrag sql` runs: queries only.
const READ_ONLY: [&str; 7] = ["select", "with", "values", "explain", "show", "describe", "desc"];

/// Refuses anything but a query before DataFusion parses it (DataFusion's plan check follows).
fn check_read_only(query: &str) -> Result<()> {
    let first = query.trim_start().trim_start_matches('(').split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
    if READ_ONLY.contains(&first.to_ascii_lowercase().as_str()) {
        return Ok(());
    }
    anyhow::bail!(
        "`tgrag sql` is read-only: `{}` statements are refused (allowed: SELECT, WITH, VALUES, EXPLAIN, SHOW, DESCRIBE)",
        if first.is_empty() { "empty" } else { first }
    )
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
            if is_parquet(path) {
                println!("{name:<40} {}", path.display());
            } else {
                eprintln!("warning: skipping {} (not a Parquet file)", path.display());
            }
        }
        return Ok(());
    }
    check_read_only(query)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let text = rt.block_on(async {
        // `SHOW TABLES` / `SHOW COLUMNS` read the information schema.
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        let mut registered = Vec::new();
        for (name, path) in &tables {
            let Some(p) = path.to_str() else {
                eprintln!("warning: skipping {} (not a UTF-8 path)", path.display());
                continue;
            };
            if !is_parquet(path) {
                eprintln!("warning: skipping {} (not a Parquet file)", path.display());
                continue;
            }
            match ctx.register_parquet(name.as_str(), p, ParquetReadOptions::default()).await {
                Ok(()) => registered.push(name.as_str()),
                Err(e) => eprintln!("warning: skipping {} (not a readable Parquet file: {e})", path.display()),
            }
        }
        let options = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
        let df = ctx.sql_with_options(query, options).await.with_context(|| {
            let names = &registered;
            format!("in query (tables: {})", if names.is_empty() { "none: run `tgrag run` first".to_string() } else { names.join(", ") })
        })?;
        let batches = df.collect().await?;
        anyhow::Ok(pretty_format_batches(&batches)?.to_string())
    })?;
    println!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_read_only;

    #[test]
    fn only_queries_pass_the_first_word_check() {
        for q in [
            "SELECT 1",
            "  select 1",
            "(SELECT 1)",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "EXPLAIN SELECT 1",
            "SHOW TABLES",
            "DESCRIBE t",
            "VALUES (1)",
        ] {
            assert!(check_read_only(q).is_ok(), "{q}");
        }
        for q in [
            "COPY (SELECT 1) TO '/tmp/x' STORED AS CSV",
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
            "DROP TABLE t",
            "SET x = 1",
            "INSERT INTO t VALUES (1)",
            "",
            ";",
        ] {
            let e = check_read_only(q).expect_err(q).to_string();
            assert!(e.contains("read-only"), "{q}: {e}");
        }
    }
}
