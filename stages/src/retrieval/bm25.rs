//! `bm25`: the stage that indexes every node document with BM25 ([`crate::retrieval::bm25_index`]),
//! ranks every query (method `bm25`) and persists the index (`bm25_index`, `bm25_terms`,
//! `bm25_postings`, `bm25_docs`) so that MoR and readers use this one index and its parameters.

use arrow::array::Array;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;

use crate::retrieval::bm25_index::{Bm25Params, Index};
use crate::shared::run::run_batch;
use crate::shared::text::TokenizerKind;
use crate::{Result, StageContext, StageInfo, StageSpec};

/// Options of the `bm25` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Bm25Config {
    #[serde(flatten)]
    pub params: Bm25Params,
    pub tokenizer: TokenizerKind,
    /// Candidates kept per query.
    pub top_k: usize,
}

impl Default for Bm25Config {
    fn default() -> Self {
        Bm25Config { params: Bm25Params::default(), tokenizer: TokenizerKind::Bm25s, top_k: 100 }
    }
}

pub struct Bm25Stage;

static INFO: StageInfo = StageInfo {
    name: "bm25",
    module: module_path!(),
    version: 3,
    about: "exact BM25 over node documents (index persisted for MoR and readers); top-k per query (method `bm25`)",
    deps: &["ingest"],
    needs: &[("ingest", "nodes"), ("ingest", "queries")],
    excludes: &[],
    collects: &[],
    outputs: &["run", "bm25_index", "bm25_terms", "bm25_postings", "bm25_docs"],
    files: &[],
    shards: None,
};

impl StageSpec for Bm25Stage {
    type Config = Bm25Config;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &Bm25Config) -> std::result::Result<(), String> {
        if c.params.k1.is_nan() || c.params.k1 < 0.0 {
            return Err("k1 must be ≥ 0".into());
        }
        if !(0.0..=1.0).contains(&c.params.b) {
            return Err("b must be within [0, 1]".into());
        }
        if c.top_k == 0 {
            return Err("top_k must be ≥ 1".into());
        }
        Ok(())
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: Bm25Config) -> Result<()> {
        let nodes = ctx.input("ingest", "nodes")?;
        let queries = ctx.input("ingest", "queries")?;
        let ids = columns::u32s(&nodes, "node_id")?;
        let docs = columns::strs(&nodes, "doc")?;
        // Documents in node-id order, so that ties (broken by document index) are broken by node id.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&i| ids.value(i));
        let doc_node: Vec<u32> = order.iter().map(|&i| ids.value(i)).collect();
        let progress = ctx.progress;
        let index = ctx.timed("tokenize+index", |_| {
            let pb = progress.bar(1, "bm25 index");
            let texts: Vec<&str> = order.iter().map(|&i| docs.value(i)).collect();
            let index = Index::build_texts(&texts, cfg.tokenizer, cfg.params);
            pb.finish_and_clear();
            Ok(index)
        })?;
        ctx.set_items(docs.len() as u64);
        let qids = columns::u32s(&queries, "query_id")?;
        let qtext = columns::strs(&queries, "text")?;
        let rows = ctx.timed("search", |_| {
            let pb = progress.bar(qids.len() as u64, "bm25 search");
            let rows: Vec<(u32, Vec<(u32, f32)>)> = (0..qids.len())
                .into_par_iter()
                .map(|i| {
                    pb.inc(1);
                    let hits = index.search_text(qtext.value(i), cfg.tokenizer, cfg.top_k, None);
                    (qids.value(i), hits.into_iter().map(|(d, s)| (doc_node[d as usize], s)).collect())
                })
                .collect();
            pb.finish_and_clear();
            Ok(rows)
        })?;
        ctx.set_items(qids.len() as u64);
        ctx.write("run", &run_batch("bm25", &rows)?)?;
        // The persisted index (scope `*`: every node), which MoR loads instead of building its own.
        let [index_t, terms_t, postings_t, docs_t] = index.to_tables("*", &doc_node)?;
        ctx.write("bm25_index", &index_t)?;
        ctx.write("bm25_terms", &terms_t)?;
        ctx.write("bm25_postings", &postings_t)?;
        ctx.write("bm25_docs", &docs_t)?;
        Ok(())
    }
}
