//! Commands for any files (data engineers' tools): `tgrag bm25`, `tgrag embed`, `tgrag fetch`.
//! Arguments are validated and inputs checked (file, row, column) before any work starts; outputs
//! are written to a temporary file and renamed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float32Array, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use rayon::prelude::*;
use tgrag_models::DeviceChoice;
use tgrag_models::minilm::{self, EncodeOptions, MiniLm};
use tgrag_stages::Progress;
use tgrag_stages::bm25::{Bm25Params, Index, Variant};
use tgrag_stages::text::TokenizerKind;

/// `tgrag bm25` arguments.
#[derive(Debug, clap::Args)]
pub struct Bm25Args {
    /// Corpus Parquet: `doc_id` and `text` (or `tokens`: list<utf8>, used as given).
    #[arg(long)]
    pub corpus: PathBuf,
    /// Queries Parquet: `query_id` and `text` (or `tokens`).
    #[arg(long)]
    pub queries: PathBuf,
    /// Results per query.
    #[arg(long, default_value_t = 20)]
    pub k: usize,
    #[arg(long, default_value_t = 1.5)]
    pub k1: f32,
    #[arg(long, default_value_t = 0.75)]
    pub b: f32,
    /// `lucene` (bm25s) or `okapi` (rank_bm25, ε idf floor 0.25).
    #[arg(long, default_value = "lucene")]
    pub variant: String,
    /// `bm25s` (lower-case, \w\w+, English stop words) or `simple`.
    #[arg(long, default_value = "bm25s")]
    pub tokenizer: String,
    /// Output Parquet: `query_id`, `doc_id`, `rank` (1-based), `score`.
    #[arg(long)]
    pub out: PathBuf,
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
    /// `cpu`, `gpu` (burn-wgpu) or `auto`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Sentences per forward pass (after sorting by length).
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// `fused` (the CPU engine: packed sequences, fused passes, AVX-512 gemm; `--device cpu` only)
    /// or `burn` (the burn model on the chosen device). Default: fused on cpu, burn on gpu.
    #[arg(long)]
    pub engine: Option<String>,
    /// Linear layers of the fused engine: `auto` (split bf16 on AMX tiles when the CPU has them,
    /// f32 otherwise) or `f32` (f32 gemm always).
    #[arg(long, default_value = "auto")]
    pub products: String,
}

pub(crate) fn column<'a>(b: &'a RecordBatch, path: &Path, name: &str) -> Result<&'a ArrayRef> {
    b.column_by_name(name).with_context(|| format!("{}: no column `{name}` (has: {})", path.display(), names(b)))
}

fn names(b: &RecordBatch) -> String {
    b.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
}

/// What a corpus or query file holds: token lists (used as given) or texts (tokenised here).
enum Lexical {
    Tokens(Vec<Vec<String>>),
    Texts(Vec<String>),
}

impl Lexical {
    fn len(&self) -> usize {
        match self {
            Lexical::Tokens(t) => t.len(),
            Lexical::Texts(t) => t.len(),
        }
    }
}

/// `tokens` (list<utf8>) when present, else `text`. Null values are an error naming the row.
fn lexical(b: &RecordBatch, path: &Path) -> Result<Lexical> {
    if let Some(t) = b.column_by_name("tokens") {
        let list = t.as_list_opt::<i32>().with_context(|| format!("{}: column `tokens` must be list<utf8>, is {}", path.display(), t.data_type()))?;
        let mut out = Vec::with_capacity(list.len());
        for i in 0..list.len() {
            if list.is_null(i) {
                bail!("{}: row {i}, column tokens: null", path.display());
            }
            let v = list.value(i);
            let s = v.as_string_opt::<i32>().with_context(|| format!("{}: column `tokens` must hold utf8 strings", path.display()))?;
            out.push((0..s.len()).map(|j| s.value(j).to_string()).collect());
        }
        return Ok(Lexical::Tokens(out));
    }
    Ok(Lexical::Texts(texts(b, path, "text")?))
}

pub(crate) fn texts(b: &RecordBatch, path: &Path, name: &str) -> Result<Vec<String>> {
    let c = column(b, path, name)?;
    let s = arrow::compute::cast(c, &DataType::Utf8).with_context(|| format!("{}: column `{name}` is not text", path.display()))?;
    let s = s.as_string::<i32>();
    (0..s.len())
        .map(|i| if s.is_null(i) { bail!("{}: row {i}, column {name}: null", path.display()) } else { Ok(s.value(i).to_string()) })
        .collect()
}

pub(crate) fn check_ids(c: &ArrayRef, path: &Path, name: &str) -> Result<()> {
    if !(c.data_type().is_integer() || matches!(c.data_type(), DataType::Utf8 | DataType::LargeUtf8)) {
        bail!("{}: column `{name}` must be integers or strings, is {}", path.display(), c.data_type());
    }
    if let Some(i) = (0..c.len()).find(|&i| c.is_null(i)) {
        bail!("{}: row {i}, column {name}: null id", path.display());
    }
    Ok(())
}

pub fn cmd_bm25(a: Bm25Args, quiet: bool) -> Result<()> {
    let variant = match a.variant.as_str() {
        "lucene" => Variant::Lucene,
        "okapi" => Variant::Okapi,
        v => bail!("--variant {v}: expected lucene or okapi"),
    };
    let kind = match a.tokenizer.as_str() {
        "bm25s" => TokenizerKind::Bm25s,
        "simple" => TokenizerKind::Simple,
        t => bail!("--tokenizer {t}: expected bm25s or simple"),
    };
    if a.k == 0 {
        bail!("--k must be at least 1");
    }
    if !(a.k1 >= 0.0 && (0.0..=1.0).contains(&a.b)) {
        bail!("--k1 must be ≥ 0 and --b within [0, 1]");
    }
    let corpus = tgrag_schemas::io::read_parquet(&a.corpus)?;
    let queries = tgrag_schemas::io::read_parquet(&a.queries)?;
    let doc_ids = column(&corpus, &a.corpus, "doc_id")?.clone();
    let query_ids = column(&queries, &a.queries, "query_id")?.clone();
    check_ids(&doc_ids, &a.corpus, "doc_id")?;
    check_ids(&query_ids, &a.queries, "query_id")?;
    // Reading the columns is I/O, not tokenisation: it stays outside the timings.
    let docs = lexical(&corpus, &a.corpus)?;
    let qs = lexical(&queries, &a.queries)?;
    let params = Bm25Params { k1: a.k1, b: a.b, variant, epsilon: 0.25 };
    let t1 = Instant::now();
    let index = match &docs {
        Lexical::Tokens(t) => Index::build(t, params),
        Lexical::Texts(t) => Index::build_texts(&t.iter().map(String::as_str).collect::<Vec<_>>(), kind, params),
    };
    let t_index = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let bar = Progress { quiet }.bar(qs.len() as u64, "bm25 search");
    let search = |i: usize| {
        let h = match &qs {
            Lexical::Tokens(t) => index.search(&t[i], a.k, None),
            Lexical::Texts(t) => index.search_text(&t[i], kind, a.k, None),
        };
        bar.inc(1);
        h
    };
    let hits: Vec<Vec<(u32, f32)>> = (0..qs.len()).into_par_iter().map(search).collect();
    bar.finish_and_clear();
    let t_search = t2.elapsed().as_secs_f64();
    let (mut qi, mut di, mut rank, mut score) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (q, h) in hits.iter().enumerate() {
        for (r, &(d, s)) in h.iter().enumerate() {
            qi.push(q as u32);
            di.push(d);
            rank.push(r as u32 + 1);
            score.push(s);
        }
    }
    let qcol = take(&query_ids, &UInt32Array::from(qi), None)?;
    let dcol = take(&doc_ids, &UInt32Array::from(di), None)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("query_id", qcol.data_type().clone(), false),
        Field::new("doc_id", dcol.data_type().clone(), false),
        Field::new("rank", DataType::UInt32, false),
        Field::new("score", DataType::Float32, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![qcol, dcol, Arc::new(UInt32Array::from(rank)), Arc::new(Float32Array::from(score))])?;
    tgrag_schemas::io::write_parquet_atomic(&a.out, &batch)?;
    eprintln!(
        "bm25: {} docs ({} terms), {} queries; tokenisation + index build {:.3}s, search {:.3}s ({:.1} µs/query incl. tokenisation) → {}",
        docs.len(),
        index.vocab_size(),
        qs.len(),
        t_index,
        t_search,
        1e6 * t_search / qs.len().max(1) as f64,
        a.out.display()
    );
    Ok(())
}

pub fn cmd_embed(a: EmbedArgs, quiet: bool) -> Result<()> {
    let device = DeviceChoice::parse(&a.device).with_context(|| format!("--device {}: expected cpu, gpu or auto", a.device))?;
    if a.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let on_gpu = device.resolved() == DeviceChoice::Gpu;
    let fused = match a.engine.as_deref() {
        None => !on_gpu,
        Some("fused") if on_gpu => bail!("--engine fused runs on the CPU only (use --engine burn with --device gpu)"),
        Some("fused") => true,
        Some("burn") => false,
        Some(e) => bail!("--engine {e}: expected fused or burn"),
    };
    let products = match a.products.as_str() {
        "auto" => minilm::fused::Products::Auto,
        "f32" => minilm::fused::Products::F32,
        p => bail!("--products {p}: expected auto or f32"),
    };
    if !fused && a.products != "auto" {
        bail!("--products applies to the fused engine only");
    }
    let dir = a.model.clone().unwrap_or_else(|| minilm::default_dir(Path::new(".")));
    if !dir.join("model.safetensors").is_file() {
        bail!("{}: no model.safetensors (run `make models` or `tgrag fetch minilm`)", dir.display());
    }
    let input = tgrag_schemas::io::read_parquet(&a.input)?;
    let ids = column(&input, &a.input, "id")?.clone();
    check_ids(&ids, &a.input, "id")?;
    let texts = texts(&input, &a.input, "text")?;
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
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", ids.data_type().clone(), false),
        Field::new("embedding", DataType::FixedSizeList(item, dim as i32), false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![ids, Arc::new(list)])?;
    tgrag_schemas::io::write_parquet_atomic(&a.out, &batch)?;
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

/// `tgrag fetch <what>`: `minilm` (the sentence model, into weights/), or a STaRK dataset into the
/// hf-hub cache. Prints every file with its sha256.
pub fn cmd_fetch(what: &str, dest: Option<PathBuf>) -> Result<()> {
    use tgrag_datasets::hub::{self, HubRepo};
    if what == "minilm" {
        let dest = dest.unwrap_or_else(|| minilm::default_dir(Path::new(".")));
        let repo = HubRepo { kind: "model", owner: "sentence-transformers", name: "all-MiniLM-L6-v2", revision: minilm::HF_REVISION.into() };
        let files: Vec<String> = minilm::FILES.iter().map(|(f, _)| f.to_string()).collect();
        let (_, fetched) = hub::fetch(&repo, &files, &|f| eprintln!("fetch {}/{f} @ {}", repo.id(), repo.revision))?;
        std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
        for f in &fetched {
            let want = minilm::FILES.iter().find(|(n, _)| *n == f.file).map(|(_, s)| *s).unwrap_or("");
            if !want.is_empty() && want != f.sha256 {
                bail!("{}: sha256 {} differs from the pinned {want}", f.file, f.sha256);
            }
            let bytes = std::fs::read(&f.local).with_context(|| format!("reading {}", f.local.display()))?;
            tgrag_schemas::io::write_bytes_atomic(&dest.join(&f.file), &bytes)?;
            println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
        }
        println!("model ready in {}", dest.display());
        return Ok(());
    }
    let spec = tgrag_datasets::registry::resolve(what, None, Default::default())?;
    let (root, fetched) = spec.stark_root(&|f| eprintln!("fetch {f}")).with_context(|| format!("`{what}` cannot be fetched from the hub"))?;
    for f in fetched.unwrap_or_default() {
        println!("{}  {} ({} bytes)", f.sha256, f.file, f.bytes);
    }
    println!("{what}: hub layout in {} (commit {})", root.display(), hub::snapshot_commit(&root).unwrap_or_default());
    Ok(())
}
