//! `tgrag sql`: DataFusion over the Parquet artifacts under the outputs folder. The file
//! `<outputs>/<dataset>/<stage>/<table>.parquet` is the table `<dataset>_<stage>_<table>`, with every
//! character that is not a letter, digit or `_` replaced by `_` (so `stark-prime` → `stark_prime`);
//! which files are visible, and the names of two files that would share one, are `tables`' job.
//!
//! Read-only: only queries (`SELECT`, `WITH`, `VALUES`, `EXPLAIN`, `SHOW`, `DESCRIBE`) run; DataFusion
//! refuses every plan that writes (`COPY … TO`, `INSERT`), creates or drops (`CREATE EXTERNAL TABLE`,
//! `DROP`) or sets (`SET`). Bounded: the statement's nesting (`statement::MAX_DEPTH`), the memory
//! DataFusion's operators may hold (`--memory-limit`, nothing spills to disk), the size one
//! function call may build (`bounded`), the wall time (`--timeout`) and the rows printed
//! (`--max-rows`). The query runs on a thread of its own with a large stack; a panic inside
//! DataFusion or Parquet on a damaged file is reported as an error naming the files the query read.

mod bounded;
mod statement;
mod tables;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow::array::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::common::TableReference;
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

/// The name of the query thread (the runtime's workers add `-worker`).
const THREAD: &str = "tgrag-sql";

/// Stack of the threads that parse, plan and run a query (only the pages touched are used).
const STACK_BYTES: usize = 256 << 20;

/// Largest `--max-rows`.
const MAX_ROWS_BOUND: u64 = 10_000_000;

/// `tgrag sql` arguments.
#[derive(Debug, clap::Args)]
pub struct SqlArgs {
    /// The query, e.g. "SELECT count(*) AS n FROM synthetic_ingest_nodes" (it may start with a `--` comment).
    #[arg(allow_hyphen_values = true)]
    pub query: String,
    /// List the registered tables instead of running a query.
    #[arg(long)]
    pub list: bool,
    /// Memory the query may hold (bytes, or with a unit: 512MiB, 2GiB); past it the query stops
    /// with an error (nothing spills to disk).
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes, allow_hyphen_values = true)]
    pub memory_limit: u64,
    /// Seconds the query may run before it is stopped.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=604_800), allow_hyphen_values = true)]
    pub timeout: u64,
    /// Rows printed at most; the rest are counted and left out.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_ROWS_BOUND), allow_hyphen_values = true)]
    pub max_rows: u64,
}

/// `--memory-limit`: bytes, optionally with a unit (`k`/`KiB` … `GiB`, `KB` … `GB`), from 16 MiB to 1 TiB.
fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number.parse().map_err(|_| format!("`{text}` is not a size: a number of bytes, optionally with a unit (512MiB, 2GiB)"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        u => return Err(format!("unknown unit `{u}` in `{text}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)")),
    };
    let bytes = n.checked_mul(scale).ok_or_else(|| format!("`{text}` is too large"))?;
    let (lo, hi) = (16u64 << 20, 1u64 << 40);
    if !(lo..=hi).contains(&bytes) {
        return Err(format!("must be within [16MiB, 1TiB], got {bytes} bytes"));
    }
    Ok(bytes)
}

/// Runs the query (or lists the tables) and prints the result as a table.
pub fn run(outputs: &Path, a: SqlArgs) -> Result<()> {
    let catalog = tables::discover(outputs)?;
    for w in &catalog.warnings {
        eprintln!("warning: {w}");
    }
    if a.list {
        list(&catalog.tables);
        return Ok(());
    }
    statement::check_read_only(&a.query)?;
    let limits = Limits {
        memory: usize::try_from(a.memory_limit).context("--memory-limit does not fit this machine's address space")?,
        max_rows: usize::try_from(a.max_rows).context("--max-rows does not fit this machine's address space")?,
    };
    let timeout = Duration::from_secs(a.timeout);
    let deadline = Instant::now() + timeout;
    let panicked = keep_query_panics();
    // The files the query reads (set once it is parsed), for the message of a panic.
    let reads: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let rx = spawn_query(&catalog.tables, &a.query, limits, Arc::clone(&reads))?;

    let wait = |deadline: Instant| rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    let first = match wait(deadline) {
        Ok(m) => m,
        Err(mpsc::RecvTimeoutError::Timeout) => return Err(stopped(a.timeout)),
        Err(mpsc::RecvTimeoutError::Disconnected) => Message::Panicked,
    };
    let first = first_rows(first, &panicked, &reads)?;
    println!("{}", first.text);
    if !first.more {
        return Ok(());
    }
    // The rows left out are counted from the same run of the query, within what is left of the time.
    report_left_out(wait(deadline).ok(), first.shown, a.timeout);
    Ok(())
}

/// `--list`: each table's name (quoted when it holds a `/`) and file.
fn list(tables: &[tables::Table]) {
    for t in tables {
        let name = if t.name.contains('/') { format!("\"{}\"", t.name) } else { t.name.clone() };
        println!("{name:<40} {}", t.path.display());
    }
}

/// The error of a query stopped at `--timeout`.
fn stopped(timeout: u64) -> anyhow::Error {
    crate::config!(
        "the query ran longer than --timeout {} s and was stopped (a recursive query that never ends, or a very large \
         input: add LIMIT or WHERE, or raise --timeout)",
        timeout
    )
}

/// A panic inside DataFusion or Parquet (a damaged file the checks let through) is caught on the
/// query thread and reported; its message is kept in the returned slot rather than printed.
fn keep_query_panics() -> Arc<Mutex<Option<String>>> {
    let panicked: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = Arc::clone(&panicked);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !std::thread::current().name().is_some_and(|n| n.starts_with(THREAD)) {
            return previous(info);
        }
        if let Ok(mut m) = seen.lock()
            && m.is_none()
        {
            *m = Some(info.to_string());
        }
    }));
    panicked
}

/// Starts the query thread (large stack, panics caught); its messages come through the receiver.
fn spawn_query(tables: &[tables::Table], query: &str, limits: Limits, reads: Arc<Mutex<Vec<PathBuf>>>) -> Result<mpsc::Receiver<Message>> {
    let (tx, rx) = mpsc::channel::<Message>();
    let query = query.to_string();
    let registered = tables.to_vec();
    std::thread::Builder::new().name(THREAD.into()).stack_size(STACK_BYTES).spawn(move || {
        let worker = tx.clone();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(&registered, &query, limits, &worker, &reads)));
        if outcome.is_err() {
            let _ = tx.send(Message::Panicked);
        }
    })?;
    Ok(rx)
}

/// The rows the query thread sent first: the table to print, how many rows it shows, and whether
/// there are more.
struct FirstRows {
    text: String,
    shown: usize,
    more: bool,
}

/// The first message as rows, or the error it stands for (a panic names the files the query read).
fn first_rows(first: Message, panicked: &Mutex<Option<String>>, reads: &Mutex<Vec<PathBuf>>) -> Result<FirstRows> {
    match first {
        Message::Rows { text, shown, more } => Ok(FirstRows { text, shown, more }),
        Message::Failed(e) => Err(e),
        Message::Total(_) => Err(crate::internal!("the query thread sent a row count before the rows")),
        Message::Panicked => {
            let why = panicked.lock().ok().and_then(|m| m.clone()).unwrap_or_else(|| "no message".into());
            let files: Vec<String> = reads.lock().map(|r| r.iter().map(|p| p.display().to_string()).collect()).unwrap_or_default();
            bail_input!(
                "the query stopped on data that DataFusion or Parquet could not read ({why}); {}",
                if files.is_empty() {
                    "it read no table".to_string()
                } else {
                    format!("one of the files it read is probably damaged: {}", files.join(", "))
                }
            )
        }
    }
}

/// Tells how many rows `--max-rows` left out (`second`: the thread's next message, if it came in
/// time).
fn report_left_out(second: Option<Message>, shown: usize, timeout: u64) {
    match second {
        Some(Message::Total(n)) => eprintln!(
            "({n} rows: the first {shown} are shown, {} left out by --max-rows {shown}; add LIMIT/OFFSET or raise --max-rows)",
            n.saturating_sub(shown)
        ),
        _ => eprintln!(
            "(more than {shown} rows: the first {shown} are shown, the rest left out by --max-rows {shown}; counting them passed \
             --timeout {} s)",
            timeout
        ),
    }
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    memory: usize,
    max_rows: usize,
}

/// What the query thread tells the command.
enum Message {
    /// The rows printed, and whether there are more.
    Rows {
        text: String,
        shown: usize,
        more: bool,
    },
    /// How many rows the query has in all (sent after `Rows` with `more`).
    Total(usize),
    Failed(anyhow::Error),
    Panicked,
}

/// Parses, plans and runs the query on the current (large-stack) thread, sending what it finds.
fn execute(tables: &[tables::Table], query: &str, limits: Limits, tx: &mpsc::Sender<Message>, reads: &Mutex<Vec<PathBuf>>) {
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(format!("{THREAD}-worker"))
        .thread_stack_size(STACK_BYTES)
        .enable_all()
        .build();
    let rt = match built {
        Ok(rt) => rt,
        Err(e) => {
            let _ = tx.send(Message::Failed(anyhow::Error::new(e).context("starting the query runtime")));
            return;
        }
    };
    rt.block_on(async {
        match rows(tables, query, limits, reads).await {
            Ok((mut rest, text, shown, mut total)) => {
                let more = total > shown;
                let _ = tx.send(Message::Rows { text, shown, more });
                if more {
                    // The rows left out are counted from the same run of the query.
                    use futures::StreamExt;
                    while let Some(Ok(b)) = rest.next().await {
                        total += b.num_rows();
                    }
                    let _ = tx.send(Message::Total(total));
                }
            }
            Err(e) => {
                let _ = tx.send(Message::Failed(e));
            }
        }
    });
}

/// The session: bounded memory, no spilling (nothing is written outside the outputs folder), the
/// bounded functions, the tables.
async fn session(tables: &[tables::Table], limits: Limits) -> Result<(SessionContext, Vec<String>)> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(limits.memory, 1.0)
        .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled))
        .build_arc()?;
    // `SHOW TABLES` / `SHOW COLUMNS` read the information schema.
    let ctx = SessionContext::new_with_config_rt(SessionConfig::new().with_information_schema(true), runtime);
    bounded::install(&ctx, u64::try_from(limits.memory / 4).unwrap_or(u64::MAX));
    let mut registered = Vec::new();
    for t in tables {
        let Some(p) = t.path.to_str() else {
            eprintln!("warning: skipping {} (not a UTF-8 path)", t.path.display());
            continue;
        };
        match ctx.register_parquet(TableReference::bare(t.name.as_str()), p, ParquetReadOptions::default()).await {
            Ok(()) => registered.push(t.name.clone()),
            Err(e) => eprintln!("warning: skipping {} (not a readable Parquet file: {e})", t.path.display()),
        }
    }
    Ok((ctx, registered))
}

/// Runs the query until more than `max_rows` rows came (or it ended): the rest of the stream (for
/// counting what is left out), the rows shown as a table, how many are shown, and how many came.
async fn rows(
    tables: &[tables::Table],
    query: &str,
    limits: Limits,
    reads: &Mutex<Vec<PathBuf>>,
) -> Result<(datafusion::execution::SendableRecordBatchStream, String, usize, usize)> {
    let (ctx, registered) = session(tables, limits).await?;
    let in_query = || {
        let names: Vec<String> = registered.iter().map(|n| if n.contains('/') { format!("\"{n}\"") } else { n.clone() }).collect();
        format!("in query (tables: {})", if names.is_empty() { "none: run `tgrag run` first".to_string() } else { names.join(", ") })
    };
    let state = ctx.state();
    let dialect = state.config().options().sql_parser.dialect;
    let parsed = state.sql_to_statement(query, &dialect).map_err(|e| explain(e, limits)).with_context(in_query)?;
    statement::check_depth(&parsed)?;
    if let (Ok(refs), Ok(mut r)) = (state.resolve_table_references(&parsed), reads.lock()) {
        r.extend(tables.iter().filter(|t| refs.iter().any(|x| x.table() == t.name)).map(|t| t.path.clone()));
    }
    let plan = state.statement_to_plan(parsed).await.map_err(|e| explain(e, limits)).with_context(in_query)?;
    let options = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
    options.verify_plan(&plan).map_err(|e| explain(e, limits)).with_context(in_query)?;
    let df = ctx.execute_logical_plan(plan).await.map_err(|e| explain(e, limits))?;
    let over = || {
        let files: Vec<String> = reads.lock().map(|r| r.iter().map(|p| p.display().to_string()).collect()).unwrap_or_default();
        if files.is_empty() { "running the query".to_string() } else { format!("running the query over {}", files.join(", ")) }
    };
    use futures::StreamExt;
    let mut stream = df.execute_stream().await.map_err(|e| explain(e, limits)).with_context(over)?;
    let (mut batches, mut total) = (Vec::new(), 0usize);
    while total <= limits.max_rows {
        let Some(b) = stream.next().await else { break };
        let b = b.map_err(|e| explain(e, limits)).with_context(over)?;
        total += b.num_rows();
        batches.push(b);
    }
    let shown = total.min(limits.max_rows);
    let kept = keep_rows(&batches, shown);
    let text = pretty_format_batches(&kept)?.to_string();
    Ok((stream, text, shown, total))
}

/// The first `n` rows of `batches`.
fn keep_rows(batches: &[RecordBatch], n: usize) -> Vec<RecordBatch> {
    let mut left = n;
    let mut out = Vec::new();
    for b in batches {
        if left == 0 {
            break;
        }
        let take = b.num_rows().min(left);
        out.push(b.slice(0, take));
        left -= take;
    }
    // An empty result still prints its header.
    if out.is_empty()
        && let Some(b) = batches.first()
    {
        out.push(b.slice(0, 0));
    }
    out
}

/// A DataFusion error, with what to do about running out of memory.
fn explain(e: DataFusionError, limits: Limits) -> anyhow::Error {
    let exhausted = matches!(e.find_root(), DataFusionError::ResourcesExhausted(_));
    let e = anyhow::Error::new(e);
    if exhausted {
        e.context(format!(
            "the query needs more memory than --memory-limit allows ({} bytes): aggregate or filter the rows, or raise --memory-limit",
            limits.memory
        ))
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn memory_limits_parse_with_units_and_bounds() {
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("100MB"), Ok(100_000_000));
        assert_eq!(parse_bytes("33554432"), Ok(32 << 20));
        for bad in ["-1", "1KiB", "2 parsecs", "", "99999999999999999999GiB", "2PiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
