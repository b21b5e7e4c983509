//! Sentence encoders shared by every stage that embeds text: all-MiniLM-L6-v2 (the pinned weights,
//! checked by sha256, on the fused CPU engine or burn on wgpu) and a hashing embedding that needs no
//! model: BERT normalisation and pre-tokenisation (tokenizers crate), unigrams and bigrams hashed
//! (FNV-1a, signed) into `dim` buckets, sub-linear term frequency, L2 normalisation. Embedding
//! columns are `FixedSizeList<f32, dim>`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float32Array, RecordBatch};
use arrow::datatypes::{DataType, Field};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tgrag_schemas::columns;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use crate::shared::context::Progress;
use crate::{Result, StageError};

pub use tgrag_models::DeviceChoice;

/// Which text encoder a stage uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoder {
    /// all-MiniLM-L6-v2 (384 dims; `make models` puts it in weights/).
    #[default]
    Minilm,
    /// The hashing embedding (`dim` dims, no model needed).
    Hash,
}

/// The MiniLM sentence encoder of a stage config: the model folder, its weights checked against the
/// pinned sha256, and the CPU engine (`cpu`) or burn on wgpu (`gpu`). `option` is the setting that
/// switches the caller to the hashing encoder (named in the error when the model is missing).
pub fn load_minilm(model_dir: Option<&str>, device: DeviceChoice, option: &str) -> Result<tgrag_models::minilm::MiniLm> {
    Ok(tgrag_models::minilm::MiniLm::for_device(&checked_minilm_dir(model_dir, option)?, device)?)
}

/// The MiniLM model on burn's generic engine (on `device`): what fine-tuning builds on.
pub fn load_minilm_burn(model_dir: Option<&str>, device: DeviceChoice, option: &str) -> Result<tgrag_models::minilm::MiniLm> {
    Ok(tgrag_models::minilm::MiniLm::load(&checked_minilm_dir(model_dir, option)?, &device.device())?)
}

/// A hub model id `<owner>/<name>` (letters, digits, `-`, `_`, `.`; no `.` or `..` alone).
pub fn hub_id(id: &str) -> Option<(&str, &str)> {
    let (owner, name) = id.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty() && s.len() <= 96 && s != "." && s != ".." && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    (ok(owner) && ok(name)).then_some((owner, name))
}

/// The folder of a language model named by a stage's `lm` option: an existing folder, or a hub
/// model id `<owner>/<name>`, read from where `tgrag fetch <owner>/<name>` puts it
/// ([`tgrag_models::minilm::fetched_dir`]). Stages never download: a missing model is an error
/// naming the fetch command. The folder must hold `config.json`, `model.safetensors` and
/// `tokenizer.json`.
pub fn backbone_dir(spec: &str) -> Result<std::path::PathBuf> {
    backbone_dir_with(spec, &tgrag_models::minilm::fetched_dir)
}

/// [`backbone_dir`] with `fetched` saying where a hub model's folder is.
fn backbone_dir_with(spec: &str, fetched: &dyn Fn(&str) -> std::path::PathBuf) -> Result<std::path::PathBuf> {
    let path = std::path::Path::new(spec);
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else if let Some((_, name)) = hub_id(spec) {
        let dir = fetched(name);
        if !dir.is_dir() {
            return Err(StageError::ModelFile(format!(
                "lm `{spec}`: no model folder {}; fetch it first: `tgrag fetch {spec}`",
                dir.display()
            )));
        }
        dir
    } else {
        return Err(StageError::ModelFile(format!("lm `{spec}` is neither a model folder nor a hub model id `<owner>/<name>`")));
    };
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        if !dir.join(f).is_file() {
            return Err(StageError::ModelFile(format!("lm `{spec}`: {} has no {f}", dir.display())));
        }
    }
    Ok(dir)
}

/// The language model of `spec` ([`backbone_dir`]) on burn's generic engine (on `device`),
/// strictly loaded, its architecture read from its config.
pub fn load_backbone(spec: &str, device: DeviceChoice) -> Result<tgrag_models::minilm::MiniLm> {
    Ok(tgrag_models::minilm::MiniLm::load(&backbone_dir(spec)?, &device.device())?)
}

/// The MiniLM folder, with its weights checked against the pinned sha256.
pub fn checked_minilm_dir(model_dir: Option<&str>, option: &str) -> Result<std::path::PathBuf> {
    use tgrag_models::minilm;
    let dir = model_dir.map_or_else(|| minilm::default_dir(std::path::Path::new(".")), std::path::PathBuf::from);
    let w = dir.join("model.safetensors");
    if !w.is_file() {
        return Err(StageError::ModelFile(format!(
            "no MiniLM model at {} (run `make models` or `tgrag fetch minilm`, or use {option})",
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

/// Hashing embeddings of many texts, row-major.
pub fn hash_embed_all(texts: &[&str], dim: usize) -> Result<Vec<f32>> {
    let rows: Vec<Vec<f32>> = texts.par_iter().map(|t| hash_embed(t, dim)).collect::<Result<_>>()?;
    Ok(rows.concat())
}

/// Embeddings a MiniLM encoder has computed, by text: a text a stage embeds again (the same
/// context retrieved by two retrievers, a node text that is also a query) is embedded once.
type Memo = std::sync::Mutex<std::collections::HashMap<String, Box<[f32]>>>;

/// A loaded text encoder: MiniLM (with a progress bar per call and a memo of what it embedded) or
/// hashing.
pub enum TextEncoder {
    Minilm { model: Box<tgrag_models::minilm::MiniLm>, progress: Progress, memo: Memo },
    Hash { dim: usize },
}

impl TextEncoder {
    /// The encoder of a stage config: `hash_dim` is the hashing width; `option` names the setting
    /// that selects the hashing encoder (for the missing-model message).
    pub fn load(
        encoder: Encoder,
        model_dir: Option<&str>,
        hash_dim: usize,
        device: DeviceChoice,
        progress: Progress,
        option: &str,
    ) -> Result<TextEncoder> {
        Ok(match encoder {
            Encoder::Hash => TextEncoder::Hash { dim: hash_dim },
            Encoder::Minilm => {
                TextEncoder::Minilm { model: Box::new(load_minilm(model_dir, device, option)?), progress, memo: Memo::default() }
            }
        })
    }

    /// The sentence encoder of a language model named by a stage's `lm` option ([`backbone_dir`]):
    /// any BERT, RoBERTa or MPNet sentence-transformers checkpoint, mean-pooled and normalised as
    /// sentence-transformers does, on the fused CPU engine (or burn on wgpu).
    pub fn backbone(spec: &str, device: DeviceChoice, progress: Progress) -> Result<TextEncoder> {
        let model = tgrag_models::minilm::MiniLm::for_device(&backbone_dir(spec)?, device)?;
        Ok(TextEncoder::Minilm { model: Box::new(model), progress, memo: Memo::default() })
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        match self {
            TextEncoder::Minilm { model, .. } => model.dim(),
            TextEncoder::Hash { dim } => *dim,
        }
    }

    /// The encoder as it runs, for the shard partitions it computes: the model's width, what its
    /// linear layers run on and the instruction-set level (`minilm 384 bf16 v4`), or the hashing
    /// width (`hash 256`). Two encoders with the same identity give the same bytes.
    pub fn identity(&self) -> String {
        match self {
            TextEncoder::Minilm { model, .. } => {
                format!("minilm {} {} {}", model.dim(), model.products(), tgrag_models::simd::level().name())
            }
            TextEncoder::Hash { dim } => format!("hash {dim}"),
        }
    }

    /// Row-major embeddings of `texts`; `what` labels the progress bar.
    pub fn encode(&self, texts: &[&str], what: &str) -> Result<Vec<f32>> {
        match self {
            TextEncoder::Hash { dim } => hash_embed_all(texts, *dim),
            TextEncoder::Minilm { model, progress, memo } => {
                let dim = model.dim();
                let mut memo = memo.lock().map_err(|_| StageError::Internal("the embedding memo was poisoned".into()))?;
                // Each distinct text not embedded before, once, in first-seen order.
                let mut seen = std::collections::HashSet::new();
                let fresh: Vec<&str> = texts.iter().copied().filter(|t| !memo.contains_key(*t) && seen.insert(*t)).collect();
                let pb = progress.bar(fresh.len() as u64, what);
                let emb = model.encode(&fresh, tgrag_models::minilm::EncodeOptions::default(), &|n| pb.inc(n as u64))?;
                pb.finish_and_clear();
                for (t, e) in fresh.iter().zip(emb.chunks(dim.max(1))) {
                    memo.insert((*t).to_string(), e.into());
                }
                let mut out = Vec::with_capacity(texts.len() * dim);
                for t in texts {
                    out.extend_from_slice(
                        memo.get(*t).ok_or_else(|| StageError::Internal("a text missing from the embedding memo".into()))?,
                    );
                }
                Ok(out)
            }
        }
    }
}

/// `FixedSizeList<f32, dim>` column of row-major embeddings.
pub fn embedding_array(flat: Vec<f32>, dim: usize) -> Result<ArrayRef> {
    let field = Arc::new(Field::new("item", DataType::Float32, true));
    FixedSizeListArray::try_new(field, dim as i32, Arc::new(Float32Array::from(flat)), None)
        .map(|a| Arc::new(a) as ArrayRef)
        .map_err(|e| StageError::Internal(format!("embedding column: {e}")))
}

/// Reads an embedding table (`embeddings`, `query_embeddings`) as `(ids, flat, dim)`.
pub fn embedding_table(b: &RecordBatch, id_col: &str) -> Result<(Vec<u32>, Vec<f32>, usize)> {
    let ids = columns::u32s(b, id_col)?.values().to_vec();
    let col = b.column_by_name("embedding").ok_or_else(|| StageError::Input(format!("{id_col} table: no `embedding` column")))?;
    let list =
        col.as_fixed_size_list_opt().ok_or_else(|| StageError::Input(format!("{id_col} table: `embedding` is not a fixed-size list")))?;
    let dim = list.value_length() as usize;
    let vals = list
        .values()
        .as_primitive_opt::<arrow::datatypes::Float32Type>()
        .ok_or_else(|| StageError::Input(format!("{id_col} table: embedding values are not f32")))?;
    if list.null_count() > 0 || vals.len() != ids.len() * dim {
        return Err(StageError::Input(format!(
            "{id_col} table: {} embeddings of width {dim} for {} ids",
            vals.len() / dim.max(1),
            ids.len()
        )));
    }
    Ok((ids, vals.values().to_vec(), dim))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A language model is a folder with config, weights and tokenizer, or a hub id read from
    /// where `tgrag fetch` puts it; anything else is a model-file error that says what to do.
    #[test]
    fn a_backbone_is_a_complete_folder_or_a_fetched_hub_id() {
        let root = tempfile::tempdir().expect("tempdir");
        let fetched = |name: &str| root.path().join(name);
        let model = root.path().join("all-roberta-large-v1");
        std::fs::create_dir_all(&model).expect("mkdir");
        for f in ["config.json", "model.safetensors"] {
            std::fs::write(model.join(f), b"{}").expect("write");
        }
        let msg = |r: Result<std::path::PathBuf>| match r {
            Err(StageError::ModelFile(m)) => m,
            other => panic!("expected a model-file error, got {other:?}"),
        };
        // Incomplete: the missing file is named.
        let m = msg(backbone_dir_with("sentence-transformers/all-roberta-large-v1", &fetched));
        assert!(m.contains("tokenizer.json"), "{m}");
        std::fs::write(model.join("tokenizer.json"), b"{}").expect("write");
        assert_eq!(backbone_dir_with("sentence-transformers/all-roberta-large-v1", &fetched).expect("hub id"), model);
        let folder = model.to_str().expect("utf-8");
        assert_eq!(backbone_dir_with(folder, &fetched).expect("folder"), model);
        // Not fetched: the fetch command is named.
        let m = msg(backbone_dir_with("sentence-transformers/all-mpnet-base-v2", &fetched));
        assert!(m.contains("tgrag fetch sentence-transformers/all-mpnet-base-v2"), "{m}");
        for bad in ["a/../b", "no-slash-and-no-folder", "a/b/c"] {
            let m = msg(backbone_dir_with(bad, &fetched));
            assert!(m.contains("neither a model folder nor a hub model id"), "{bad}: {m}");
        }
    }

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
}
