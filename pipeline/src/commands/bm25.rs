//! `tgrag bm25`: BM25 over any corpus and queries (the index of the `bm25` stage). Arguments are
//! validated and inputs checked (file, row, column) before any work starts; the output is written to
//! a temporary file and renamed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, AsArray, Float32Array, UInt32Array};
use arrow::compute::take;
use arrow::record_batch::RecordBatch;
use rayon::prelude::*;
use tgrag_schemas::tables;
use tgrag_stages::Progress;
use tgrag_stages::retrieval::bm25_index::{Bm25Params, Index, Variant};
use tgrag_stages::shared::text::TokenizerKind;

use crate::commands::{check_ids, column, texts};

/// `--variant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VariantArg {
    /// bm25s `method="lucene"` (never-negative idf).
    Lucene,
    /// rank_bm25 `BM25Okapi` (ε idf floor 0.25).
    Okapi,
}

/// `--tokenizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TokenizerArg {
    /// bm25s: lower-case, `\w\w+`, English stop words removed.
    Bm25s,
    /// Lower-case, split on every non-alphanumeric character.
    Simple,
}

/// `tgrag bm25` arguments.
#[derive(Debug, clap::Args)]
pub struct Bm25Args {
    /// Corpus Parquet: `doc_id` and `text` (or `tokens`: `list<utf8>`, used as given).
    #[arg(long)]
    pub corpus: PathBuf,
    /// Queries Parquet: `query_id` and `text` (or `tokens`).
    #[arg(long)]
    pub queries: PathBuf,
    /// Results per query.
    #[arg(long, default_value_t = 20, allow_negative_numbers = true, value_parser = crate::commands::num::top_k)]
    pub k: usize,
    #[arg(long, default_value_t = 1.5, allow_negative_numbers = true, value_parser = crate::commands::num::non_negative)]
    pub k1: f32,
    #[arg(long, default_value_t = 0.75, allow_negative_numbers = true, value_parser = crate::commands::num::unit)]
    pub b: f32,
    /// Which idf and term weight.
    #[arg(long, value_enum, default_value_t = VariantArg::Lucene)]
    pub variant: VariantArg,
    /// How texts become tokens.
    #[arg(long, value_enum, default_value_t = TokenizerArg::Bm25s)]
    pub tokenizer: TokenizerArg,
    /// Output Parquet: `query_id`, `doc_id`, `rank` (1-based), `score`.
    #[arg(long)]
    pub out: PathBuf,
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
        let list = t
            .as_list_opt::<i32>()
            .with_context(|| format!("{}: column `tokens` must be list<utf8>, is {}", path.display(), t.data_type()))?;
        let mut out = Vec::with_capacity(list.len());
        for i in 0..list.len() {
            if list.is_null(i) {
                bail_input!("{}: row {i}, column tokens: null", path.display());
            }
            let v = list.value(i);
            let s = v.as_string_opt::<i32>().with_context(|| format!("{}: column `tokens` must hold utf8 strings", path.display()))?;
            out.push((0..s.len()).map(|j| s.value(j).to_string()).collect());
        }
        return Ok(Lexical::Tokens(out));
    }
    Ok(Lexical::Texts(texts(b, path, "text")?))
}

pub fn run(a: Bm25Args, quiet: bool) -> Result<()> {
    let variant = match a.variant {
        VariantArg::Lucene => Variant::Lucene,
        VariantArg::Okapi => Variant::Okapi,
    };
    let kind = match a.tokenizer {
        TokenizerArg::Bm25s => TokenizerKind::Bm25s,
        TokenizerArg::Simple => TokenizerKind::Simple,
    };
    if a.k == 0 {
        bail_config!("--k must be at least 1");
    }
    if !(a.k1 >= 0.0 && (0.0..=1.0).contains(&a.b)) {
        bail_config!("--k1 must be ≥ 0 and --b within [0, 1]");
    }
    let inputs = read_inputs(&a)?;
    let k = a.k.min(inputs.corpus.num_rows());
    if k < a.k {
        eprintln!("note: --k {} is more than the {} documents of {}: every document is ranked", a.k, k, a.corpus.display());
    }
    // Reading the columns is I/O, not tokenisation: it stays outside the timings.
    let docs = lexical(&inputs.corpus, &a.corpus)?;
    let qs = lexical(&inputs.queries, &a.queries)?;
    let params = Bm25Params { k1: a.k1, b: a.b, variant, epsilon: 0.25 };
    let t1 = Instant::now();
    let index = match &docs {
        Lexical::Tokens(t) => Index::build(t, params),
        Lexical::Texts(t) => Index::build_texts(&t.iter().map(String::as_str).collect::<Vec<_>>(), kind, params),
    };
    let t_index = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let hits = search_all(&index, &qs, kind, k, quiet);
    let t_search = t2.elapsed().as_secs_f64();
    let batch = ranking(&hits, &inputs)?;
    tgrag_schemas::io::write_table(&tables::BM25_RANKING, &a.out, &batch)?;
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

/// The corpus and the queries, checked, with their id columns.
struct Inputs {
    corpus: RecordBatch,
    queries: RecordBatch,
    doc_ids: ArrayRef,
    query_ids: ArrayRef,
}

/// Reads both files and runs the checks ingest runs: ids present, unique and never null; a corpus
/// with documents (no queries is a warning).
fn read_inputs(a: &Bm25Args) -> Result<Inputs> {
    let corpus = tgrag_schemas::io::read_parquet(&a.corpus)?;
    let queries = tgrag_schemas::io::read_parquet(&a.queries)?;
    use tgrag_schemas::validate::{InputRules, check_input};
    check_input(
        &a.corpus,
        "bm25 corpus",
        &corpus,
        &InputRules { required: &["doc_id"], unique: &[&["doc_id"]], non_empty: true, ..Default::default() },
    )?;
    check_input(
        &a.queries,
        "bm25 queries",
        &queries,
        &InputRules { required: &["query_id"], unique: &[&["query_id"]], ..Default::default() },
    )?;
    let doc_ids = column(&corpus, &a.corpus, "doc_id")?.clone();
    let query_ids = column(&queries, &a.queries, "query_id")?.clone();
    check_ids(&doc_ids, &a.corpus, "doc_id")?;
    check_ids(&query_ids, &a.queries, "query_id")?;
    if queries.num_rows() == 0 {
        eprintln!("warning: {}: no queries; the output has no rows", a.queries.display());
    }
    Ok(Inputs { corpus, queries, doc_ids, query_ids })
}

/// The top `k` (document position, score) of every query, in parallel, with a progress bar.
fn search_all(index: &Index, qs: &Lexical, kind: TokenizerKind, k: usize, quiet: bool) -> Vec<Vec<(u32, f32)>> {
    let bar = Progress { quiet }.bar(qs.len() as u64, "bm25 search");
    let search = |i: usize| {
        let h = match qs {
            Lexical::Tokens(t) => index.search(&t[i], k, None),
            Lexical::Texts(t) => index.search_text(&t[i], kind, k, None),
        };
        bar.inc(1);
        h
    };
    let hits: Vec<Vec<(u32, f32)>> = (0..qs.len()).into_par_iter().map(search).collect();
    bar.finish_and_clear();
    hits
}

/// The `bm25_ranking` table: each hit with the ids of its query and document, 1-based ranks.
fn ranking(hits: &[Vec<(u32, f32)>], inputs: &Inputs) -> Result<RecordBatch> {
    let (mut qi, mut di, mut rank, mut score) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (q, h) in hits.iter().enumerate() {
        for (r, &(d, s)) in h.iter().enumerate() {
            qi.push(q as u32);
            di.push(d);
            rank.push(r as u32 + 1);
            score.push(s);
        }
    }
    let qcol = take(&inputs.query_ids, &UInt32Array::from(qi), None)?;
    let dcol = take(&inputs.doc_ids, &UInt32Array::from(di), None)?;
    Ok(tables::BM25_RANKING.batch(vec![qcol, dcol, Arc::new(UInt32Array::from(rank)), Arc::new(Float32Array::from(score))])?)
}
