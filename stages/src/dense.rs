//! `dense`: dense retrieval by cosine similarity, computed as blocked matrix products with burn (the
//! Flex CPU backend, or wgpu on a GPU). The encoder is all-MiniLM-L6-v2 (default; method `dense`) or,
//! with `encoder = "hash"` (no model needed), a hashing embedding: BERT normalisation and
//! pre-tokenisation (tokenizers crate), unigrams and bigrams hashed (FNV-1a, signed) into `dim`
//! buckets, sub-linear term frequency, L2 normalisation (method `dense-hash`). Embeddings are stored
//! as `FixedSizeList<f32, dim>`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field};
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use crate::bm25::{run_batch, top_k};
use crate::{Result, StageContext, StageError, StageInfo, StageSpec};

pub use tgrag_models::DeviceChoice;

/// Which text encoder the `dense` stage uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Encoder {
    /// all-MiniLM-L6-v2 (384 dims; `make models` puts it in weights/). Method name `dense`.
    #[default]
    Minilm,
    /// The hashing embedding below (`dim` dims, no model needed). Method name `dense-hash`.
    Hash,
}

/// Options of the `dense` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseConfig {
    #[serde(default)]
    pub encoder: Encoder,
    /// MiniLM model folder; default `$TGRAG_MODELS/all-MiniLM-L6-v2` or `weights/all-MiniLM-L6-v2`.
    /// Its `model.safetensors` must be the pinned file (sha256 checked), so the cache key holds.
    #[serde(default)]
    pub model_dir: Option<String>,
    /// Embedding width of the hashing encoder (MiniLM's is 384).
    pub dim: usize,
    pub top_k: usize,
    /// Queries per matrix product.
    pub batch: usize,
    pub device: DeviceChoice,
}

impl Default for DenseConfig {
    fn default() -> Self {
        DenseConfig { encoder: Encoder::Minilm, model_dir: None, dim: 256, top_k: 100, batch: 256, device: DeviceChoice::Cpu }
    }
}

/// The MiniLM sentence encoder of a stage config: the model folder, its weights checked against the
/// pinned sha256, and the CPU engine (`cpu`) or burn on wgpu (`gpu`).
pub fn load_minilm(model_dir: Option<&str>, device: DeviceChoice) -> Result<tgrag_models::minilm::MiniLm> {
    Ok(tgrag_models::minilm::MiniLm::for_device(&checked_minilm_dir(model_dir)?, device)?)
}

/// The MiniLM model on burn's generic engine (on `device`): what fine-tuning builds on.
pub fn load_minilm_burn(model_dir: Option<&str>, device: DeviceChoice) -> Result<tgrag_models::minilm::MiniLm> {
    Ok(tgrag_models::minilm::MiniLm::load(&checked_minilm_dir(model_dir)?, &device.device())?)
}

/// The MiniLM folder, with its weights checked against the pinned sha256.
fn checked_minilm_dir(model_dir: Option<&str>) -> Result<std::path::PathBuf> {
    use tgrag_models::minilm;
    let dir = model_dir.map_or_else(|| minilm::default_dir(std::path::Path::new(".")), std::path::PathBuf::from);
    let w = dir.join("model.safetensors");
    if !w.is_file() {
        return Err(StageError::ModelFile(format!(
            "no MiniLM model at {} (run `make models` or `tgrag fetch minilm`, or use --set dense.encoder=hash)",
            w.display()
        )));
    }
    let pinned = minilm::FILES.iter().find(|(f, _)| *f == "model.safetensors").map(|(_, h)| *h).unwrap_or_default();
    let got = tgrag_schemas::io::sha256_file(&w)?;
    if got != pinned {
        return Err(StageError::ModelFile(format!("{} has sha256 {got}, not the pinned all-MiniLM-L6-v2 weights ({pinned})", w.display())));
    }
    Ok(dir)
}

fn words(text: &str) -> std::result::Result<Vec<String>, StageError> {
    let err = |e: tokenizers::Error| StageError::Internal(format!("tokenizers: {e}"));
    let mut n = NormalizedString::from(text);
    BertNormalizer::default().normalize(&mut n).map_err(err)?;
    let mut p = PreTokenizedString::from(n);
    BertPreTokenizer.pre_tokenize(&mut p).map_err(err)?;
    Ok(p.get_splits(OffsetReferential::Original, OffsetType::None)
        .into_iter()
        .map(|s| s.0)
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(str::to_string)
        .collect())
}

fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h ^= 0x20;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        for b in p.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// The hashing embedding of `text` (L2-normalised; all zeros for text without words).
pub fn hash_embed(text: &str, dim: usize) -> Result<Vec<f32>> {
    let w = words(text)?;
    let mut counts = std::collections::HashMap::<(usize, bool), f32>::new();
    let feats = w.iter().map(|a| fnv1a(&[a])).chain(w.windows(2).map(|p| fnv1a(&[&p[0], &p[1]])));
    for h in feats {
        *counts.entry(((h % dim as u64) as usize, h >> 63 == 1)).or_insert(0.0) += 1.0;
    }
    let mut v = vec![0f32; dim];
    let mut keys: Vec<_> = counts.into_iter().collect();
    keys.sort_unstable_by_key(|k| k.0);
    for ((i, neg), tf) in keys {
        let x = 1.0 + tf.ln();
        v[i] += if neg { -x } else { x };
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    Ok(v)
}

/// Exact top-k inner products of each query row against every document row (row-major `n × dim` and
/// `m × dim`), computed as blocked matrix products on `device`. Ties break by document index.
pub fn top_k_inner(docs: &[f32], queries: &[f32], dim: usize, k: usize, batch: usize, device: &Device) -> Result<Vec<Vec<(u32, f32)>>> {
    let n = docs.len() / dim.max(1);
    let m = queries.len() / dim.max(1);
    if n == 0 || m == 0 {
        return Ok(vec![Vec::new(); m]);
    }
    // The transposed document matrix is materialised once (dim × n, contiguous), so that every block
    // is a plain [rows × dim] · [dim × n] product.
    let mut t = vec![0f32; n * dim];
    for (j, row) in docs.chunks_exact(dim).enumerate() {
        for (i, &x) in row.iter().enumerate() {
            t[i * n + j] = x;
        }
    }
    let dt: Tensor<2> = Tensor::from_data(TensorData::new(t, [dim, n]), device);
    let mut out = Vec::with_capacity(m);
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

/// The `k` largest entries of `row` as (index, value), best first, ties by index ascending, with a
/// bounded heap (one pass, no copy of the row).
pub fn heap_top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    /// Heap entry ordered so that the heap's top is the worst kept hit.
    struct Worst(f32, u32);
    impl PartialEq for Worst {
        fn eq(&self, o: &Self) -> bool {
            self.cmp(o) == Ordering::Equal
        }
    }
    impl Eq for Worst {}
    impl PartialOrd for Worst {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Worst {
        // Greater = worse: lower score, or equal score and higher index.
        fn cmp(&self, o: &Self) -> Ordering {
            o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
        }
    }
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Worst> = BinaryHeap::with_capacity(k + 1);
    for (j, &x) in row.iter().enumerate() {
        if heap.len() < k {
            heap.push(Worst(x, j as u32));
        } else if let Some(top) = heap.peek()
            && Worst(x, j as u32) < *top
        {
            heap.pop();
            heap.push(Worst(x, j as u32));
        }
    }
    let mut v: Vec<(u32, f32)> = heap.into_iter().map(|w| (w.1, w.0)).collect();
    top_k(&mut v, k);
    v
}

/// `FixedSizeList<f32, dim>` column of row-major embeddings.
pub fn embedding_array(flat: Vec<f32>, dim: usize) -> Result<ArrayRef> {
    let field = Arc::new(Field::new("item", DataType::Float32, true));
    FixedSizeListArray::try_new(field, dim as i32, Arc::new(Float32Array::from(flat)), None)
        .map(|a| Arc::new(a) as ArrayRef)
        .map_err(|e| StageError::Internal(format!("embedding column: {e}")))
}

fn embed_all(texts: &[&str], dim: usize) -> Result<Vec<f32>> {
    let rows: Vec<Vec<f32>> = texts.par_iter().map(|t| hash_embed(t, dim)).collect::<Result<_>>()?;
    Ok(rows.concat())
}

pub struct DenseStage;

static INFO: StageInfo = StageInfo {
    name: "dense",
    version: 3,
    about: "MiniLM (or hashing) embeddings + exact cosine top-k with burn (method `dense` or `dense-hash`)",
    deps: &["ingest"],
    needs: &[("ingest", "nodes"), ("ingest", "queries")],
    excludes: &[],
    outputs: &["embeddings", "query_embeddings", "run"],
};

impl StageSpec for DenseStage {
    type Config = DenseConfig;
    const INFO: &'static StageInfo = &INFO;
    fn validate(c: &DenseConfig) -> std::result::Result<(), String> {
        if c.dim == 0 || c.top_k == 0 || c.batch == 0 {
            return Err("dim, top_k and batch must be ≥ 1".into());
        }
        Ok(())
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
        let (demb, qemb, dim, method) = match cfg.encoder {
            Encoder::Hash => {
                let demb = ctx.timed("embed nodes", |_| embed_all(&doc_texts, cfg.dim))?;
                ctx.set_items(doc_texts.len() as u64);
                let qemb = ctx.timed("embed queries", |_| embed_all(&q_texts, cfg.dim))?;
                (demb, qemb, cfg.dim, "dense-hash")
            }
            Encoder::Minilm => {
                let model = ctx.timed("load MiniLM", |_| load_minilm(cfg.model_dir.as_deref(), cfg.device))?;
                let opts = tgrag_models::minilm::EncodeOptions::default();
                let progress = ctx.progress;
                let encode = |texts: &[&str], what: &str| -> Result<Vec<f32>> {
                    let pb = progress.bar(texts.len() as u64, what);
                    let out = model.encode(texts, opts, &|n| pb.inc(n as u64)).map_err(StageError::from);
                    pb.finish_and_clear();
                    out
                };
                let demb = ctx.timed("embed nodes", |_| encode(&doc_texts, "dense: embed nodes (MiniLM)"))?;
                ctx.set_items(doc_texts.len() as u64);
                let qemb = ctx.timed("embed queries", |_| encode(&q_texts, "dense: embed queries (MiniLM)"))?;
                (demb, qemb, model.dim(), "dense")
            }
        };
        let device = cfg.device.device();
        let hits = ctx.timed("cosine top-k (burn)", |_| top_k_inner(&demb, &qemb, dim, cfg.top_k, cfg.batch, &device))?;
        ctx.set_items(q_texts.len() as u64);
        let rows: Vec<(u32, Vec<(u32, f32)>)> =
            hits.into_iter().enumerate().map(|(i, h)| (qids.value(i), h.into_iter().map(|(d, s)| (doc_ids[d as usize], s)).collect())).collect();
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

    #[test]
    fn hash_embedding_is_unit_norm_and_similar_texts_score_higher() {
        let a = hash_embed("Waterproof hiking tent, lightweight!", 128).expect("a");
        let b = hash_embed("a lightweight waterproof tent for hiking", 128).expect("b");
        let c = hash_embed("monoclonal antibody for renal fibrosis", 128).expect("c");
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert!(dot(&a, &b) > dot(&a, &c) + 0.2, "{} vs {}", dot(&a, &b), dot(&a, &c));
        assert!(hash_embed("!!!", 16).expect("empty").iter().all(|&x| x == 0.0));
    }

    #[test]
    fn heap_top_k_matches_sorting_with_ties() {
        let mut rng = tgrag_datasets::rng::Rng::new(8);
        for _ in 0..200 {
            let n = 1 + rng.below(50);
            let row: Vec<f32> = (0..n).map(|_| rng.below(6) as f32).collect();
            let k = rng.below(n + 3);
            let mut all: Vec<(u32, f32)> = row.iter().enumerate().map(|(j, &x)| (j as u32, x)).collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.truncate(k);
            assert_eq!(heap_top_k(&row, k), all);
        }
    }

    #[test]
    fn burn_top_k_matches_brute_force() {
        let mut rng = tgrag_datasets::rng::Rng::new(3);
        let (n, m, dim) = (97, 13, 8);
        let docs: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let qs: Vec<f32> = (0..m * dim).map(|_| rng.normal() as f32).collect();
        let got = top_k_inner(&docs, &qs, dim, 5, 4, &Device::flex()).expect("top-k");
        for (qi, hits) in got.iter().enumerate() {
            let mut all: Vec<(u32, f32)> = (0..n)
                .map(|j| (j as u32, (0..dim).map(|t| qs[qi * dim + t] * docs[j * dim + t]).sum::<f32>()))
                .collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), all[..5].iter().map(|h| h.0).collect::<Vec<_>>());
            for (h, w) in hits.iter().zip(&all) {
                assert!((h.1 - w.1).abs() < 1e-4);
            }
        }
    }
}
