//! `dense`: dense retrieval by cosine similarity, computed as blocked matrix products (`gemm` on
//! the CPU, burn's wgpu backend on a GPU). The encoder ([`crate::shared::encoders`]) is
//! all-MiniLM-L6-v2 (default; method `dense`) or the hashing embedding (`encoder = "hash"`, no model
//! needed; method `dense-hash`). Embeddings are stored as `FixedSizeList<f32, dim>`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_models::linalg::{Op, gemm_f32_par};
use tgrag_schemas::columns;

use crate::shared::encoders::{DeviceChoice, Encoder, TextEncoder, embedding_array};
use crate::shared::run::{heap_top_k, run_batch};
use crate::stage::Width;
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

/// Options of the `dense` stage.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DenseConfig {
    #[serde(default)]
    pub encoder: Encoder,
    /// MiniLM model folder; default `$TGRAG_MODELS/all-MiniLM-L6-v2` or `weights/all-MiniLM-L6-v2`.
    /// Its `model.safetensors` must be the pinned file (sha256 checked), so the cache key holds.
    #[serde(default)]
    pub model_dir: Option<String>,
    /// Embedding width of the hashing encoder (MiniLM's is 384).
    pub dim: Width,
    /// Candidates kept per query.
    pub top_k: usize,
    /// Queries per matrix product.
    pub batch: usize,
    pub device: DeviceChoice,
}

impl Default for DenseConfig {
    fn default() -> Self {
        DenseConfig {
            encoder: Encoder::Minilm,
            model_dir: None,
            dim: const { Width::new(256) },
            top_k: 100,
            batch: 256,
            device: DeviceChoice::Cpu,
        }
    }
}

/// Exact top-k inner products of each query row against every document row (row-major `n × dim` and
/// `m × dim`), computed as blocked matrix products (gemm on the CPU, burn on a GPU). Ties break by
/// document index.
pub fn top_k_inner(docs: &[f32], queries: &[f32], dim: usize, k: usize, batch: usize, device: &Device) -> Result<Vec<Vec<(u32, f32)>>> {
    let n = docs.len() / dim.max(1);
    let m = queries.len() / dim.max(1);
    if n == 0 || m == 0 {
        return Ok(vec![Vec::new(); m]);
    }
    if !tgrag_models::device::host_engine(device) {
        return top_k_burn(docs, queries, (n, m, dim), k, batch, device);
    }
    // On the CPU, gemm reads the documents transposed in place ([dim × n] by strides).
    let mut out = Vec::with_capacity(m);
    let mut scores = vec![0f32; batch.max(1).min(m) * n];
    for start in (0..m).step_by(batch.max(1)) {
        let rows = batch.max(1).min(m - start);
        let q = Op::n(&queries[start * dim..(start + rows) * dim], rows, dim);
        gemm_f32_par(&mut scores[..rows * n], q, Op::t(docs, n, dim), false)?;
        out.extend(scores[..rows * n].par_chunks_exact(n).map(|row| heap_top_k(row, k)).collect::<Vec<_>>());
    }
    Ok(out)
}

/// [`top_k_inner`]'s products on burn's `device` (whatever it is).
fn top_k_burn(
    docs: &[f32],
    queries: &[f32],
    (n, m, dim): (usize, usize, usize),
    k: usize,
    batch: usize,
    device: &Device,
) -> Result<Vec<Vec<(u32, f32)>>> {
    // The transposed document matrix is materialised once (dim × n, contiguous), so that every block
    // is a plain [rows × dim] · [dim × n] product.
    let mut t = vec![0f32; n * dim];
    for (j, row) in docs.chunks_exact(dim).enumerate() {
        for (i, &x) in row.iter().enumerate() {
            t[i * n + j] = x;
        }
    }
    let mut out = Vec::with_capacity(m);
    let dt: Tensor<2> = Tensor::from_data(TensorData::new(t, [dim, n]), device);
    for start in (0..m).step_by(batch.max(1)) {
        let rows = batch.max(1).min(m - start);
        let q: Tensor<2> = Tensor::from_data(TensorData::new(queries[start * dim..(start + rows) * dim].to_vec(), [rows, dim]), device);
        let scores = q.matmul(dt.clone()).into_data();
        let s = scores.as_slice::<f32>().map_err(|e| StageError::Internal(format!("reading scores: {e:?}")))?;
        let block: Vec<Vec<(u32, f32)>> = s.par_chunks_exact(n).map(|row| heap_top_k(row, k)).collect();
        out.extend(block);
    }
    Ok(out)
}

pub struct DenseStage;

static INFO: StageInfo = StageInfo {
    name: "dense",
    module: module_path!(),
    version: 3,
    about: "MiniLM (or hashing) embeddings + exact cosine top-k (method `dense` or `dense-hash`)",
    deps: &["ingest"],
    needs: &[("ingest", "nodes"), ("ingest", "queries")],
    excludes: &[],
    collects: &[],
    outputs: &["embeddings", "query_embeddings", "run"],
    files: &[],
    shards: Some(crate::ShardPhase::Rows("embed nodes")),
};

impl StageSpec for DenseStage {
    type Config = DenseConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &DenseConfig) -> std::result::Result<(), String> {
        if c.dim.get() == 0 || c.top_k == 0 || c.batch == 0 {
            return Err("dim, top_k and batch must be ≥ 1".into());
        }
        Ok(())
    }
    fn model(c: &DenseConfig) -> Option<crate::ModelNeed> {
        (c.encoder == Encoder::Minilm).then(|| crate::ModelNeed { model_dir: c.model_dir.clone(), instead: "dense.encoder=hash".into() })
    }
    fn execute(&self, ctx: &mut StageContext<'_>, cfg: DenseConfig) -> Result<()> {
        let nodes = ctx.input("ingest", "nodes")?;
        let queries = ctx.input("ingest", "queries")?;
        let (ids, docs) = (columns::u32s(&nodes, "node_id")?, columns::strs(&nodes, "doc")?);
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&i| ids.value(i));
        let doc_texts: Vec<&str> = order.iter().map(|&i| docs.value(i)).collect();
        let doc_ids: Vec<u32> = order.iter().map(|&i| ids.value(i)).collect();
        let (qids, qtext) = (columns::u32s(&queries, "query_id")?, columns::strs(&queries, "text")?);
        let q_texts: Vec<&str> = (0..qtext.len()).map(|i| qtext.value(i)).collect();
        let progress = ctx.progress;
        let encoder = ctx.timed("load encoder", |_| {
            TextEncoder::load(cfg.encoder, cfg.model_dir.as_deref(), cfg.dim.get(), cfg.device, progress, "--set dense.encoder=hash")
        })?;
        let (dim, method) = (encoder.dim(), if cfg.encoder == Encoder::Hash { "dense-hash" } else { "dense" });
        // A shard run (`--shard I/N`) embeds its range of the documents into a partition and stops.
        let identity = encoder.identity();
        let Some(demb) = ctx.embed_sharded("embed nodes", &doc_texts, (&identity, dim), |t| encoder.encode(t, "dense: embed nodes"))?
        else {
            return Ok(());
        };
        let qemb = ctx.timed("embed queries", |_| encoder.encode(&q_texts, "dense: embed queries"))?;
        let device = cfg.device.device();
        let hits = ctx.timed("cosine top-k", |_| top_k_inner(&demb, &qemb, dim, cfg.top_k, cfg.batch, &device))?;
        ctx.set_items(q_texts.len() as u64);
        let rows: Vec<(u32, Vec<(u32, f32)>)> = hits
            .into_iter()
            .enumerate()
            .map(|(i, h)| (qids.value(i), h.into_iter().map(|(d, s)| (doc_ids[d as usize], s)).collect()))
            .collect();
        let emb = RecordBatch::try_from_iter(vec![
            ("node_id", Arc::new(UInt32Array::from(doc_ids.clone())) as ArrayRef),
            ("embedding", embedding_array(demb, dim)?),
        ])?;
        ctx.write("embeddings", &emb)?;
        let qemb_batch = RecordBatch::try_from_iter(vec![
            ("query_id", Arc::new(UInt32Array::from(qids.values().to_vec())) as ArrayRef),
            ("embedding", embedding_array(qemb, dim)?),
        ])?;
        ctx.write("query_embeddings", &qemb_batch)?;
        ctx.write("run", &run_batch(method, &rows)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::run::by_score_then_id;

    #[test]
    fn top_k_matches_brute_force() {
        let mut rng = tgrag_datasets::rng::Rng::new(3);
        let (n, m, dim) = (97, 13, 8);
        let docs: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let qs: Vec<f32> = (0..m * dim).map(|_| rng.normal() as f32).collect();
        let got = top_k_inner(&docs, &qs, dim, 5, 4, &Device::flex()).expect("top-k");
        // burn's path (a GPU's) gives the same hits, and the same scores to rounding.
        let burn = top_k_burn(&docs, &qs, (n, m, dim), 5, 4, &Device::flex()).expect("burn top-k");
        for (a, b) in burn.iter().zip(&got) {
            assert_eq!(a.iter().map(|h| h.0).collect::<Vec<_>>(), b.iter().map(|h| h.0).collect::<Vec<_>>());
            assert!(a.iter().zip(b).all(|(x, y)| (x.1 - y.1).abs() <= 1e-6), "{a:?} vs {b:?}");
        }
        for (qi, hits) in got.iter().enumerate() {
            let mut all: Vec<(u32, f32)> =
                (0..n).map(|j| (j as u32, (0..dim).map(|t| qs[qi * dim + t] * docs[j * dim + t]).sum::<f32>())).collect();
            all.sort_by(by_score_then_id);
            assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), all[..5].iter().map(|h| h.0).collect::<Vec<_>>());
            for (h, w) in hits.iter().zip(&all) {
                assert!((h.1 - w.1).abs() < 1e-4);
            }
        }
    }
}
