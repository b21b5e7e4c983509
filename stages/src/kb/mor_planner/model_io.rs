//! The model folder (`model.json`, `planner.safetensors`, `tagger.safetensors`, with a tuned
//! encoder also `encoder.safetensors`) and the query encoder its metadata describes.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tgrag_models::minilm::tune::{TopLayers, TopShape};
use tgrag_models::minilm::{EncodeOptions, Engine, MiniLm};
use tgrag_models::planner::{Planner, PlannerShape};
use tgrag_models::tagger::{Tagger, TaggerShape};

use super::grammar::PlanSyntax;
use crate::shared::encoders::{DeviceChoice, Encoder, hash_embed, load_minilm, load_minilm_burn};
use crate::{Progress, Result, StageError};

/// The hint for `tgrag plan` when MiniLM is missing: it applies a trained model and has no `--encoder`.
const PLAN_HINT: &str = "a model retrained with `tgrag train-planner --encoder hash`";

/// `model.json`: everything needed to rebuild the inputs of the saved weights.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelMeta {
    pub format: u32,
    pub encoder: Encoder,
    pub model_dir: Option<String>,
    pub hash_dim: usize,
    pub qdim: usize,
    /// How the plan files write metapaths (and how produced plans are written back).
    pub syntax: PlanSyntax,
    /// Plan tokens; id = index + 2 (0 and 1 are BOS and EOS).
    pub plan_tokens: Vec<String>,
    /// Node types restrictions attach to.
    pub types: Vec<String>,
    pub planner_hidden: usize,
    pub max_len: usize,
    pub buckets: usize,
    pub window: usize,
    pub tagger_hidden: usize,
    /// Decoding candidates: the distinct token sequences of the training plans, first-seen order.
    /// A query's metapath is the most likely of these and its greedy plan
    /// ([`Planner::best_of`]); empty (as in models written before this field existed, or with
    /// `--decode greedy`): the greedy plan.
    #[serde(default)]
    pub candidates: Vec<Vec<String>>,
    /// MiniLM top layers fine-tuned into `encoder.safetensors` (0: none; the MiniLM part of the
    /// query vector is then the frozen sentence embedding), and the classes of their head.
    #[serde(default)]
    pub tune_layers: usize,
    #[serde(default)]
    pub tune_classes: usize,
}

impl ModelMeta {
    pub(super) fn planner_shape(&self) -> PlannerShape {
        PlannerShape { dim: self.qdim, vocab: self.plan_tokens.len() + 2, hidden: self.planner_hidden, max_len: self.max_len }
    }
    pub(super) fn tagger_shape(&self) -> TaggerShape {
        TaggerShape { buckets: self.buckets, window: self.window, qdim: self.qdim, types: self.types.len(), hidden: self.tagger_hidden }
    }
}

/// A loaded planner: metadata, both models, the query encoder.
pub struct PlanModel {
    pub meta: ModelMeta,
    pub(super) planner: Planner,
    pub(super) tagger: Tagger,
    pub(super) minilm: Option<MiniLm>,
    pub(super) tuned: Option<Tuned>,
    pub(super) device: burn::tensor::Device,
}

/// The fine-tuned query encoder: the frozen lower MiniLM layers (the burn model's weights; on the
/// CPU they run on the host engine) and the tuned top.
pub(super) struct Tuned {
    pub(super) bert: MiniLm,
    pub(super) top: TopLayers,
    pub(super) shape: TopShape,
}

impl Tuned {
    /// Token states of `texts` after the frozen layers.
    pub(super) fn states(bert: &MiniLm, layers: usize, texts: &[&str], progress: Progress, what: &str) -> Result<Vec<Vec<f32>>> {
        let Engine::Burn(b) = &bert.engine else { return Err(StageError::Internal("the tuned encoder needs MiniLM's burn engine".into())) };
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| bert.token_ids(t)).collect::<std::result::Result<_, _>>()?;
        let pb = progress.bar(texts.len() as u64, what);
        let depth = b.config().num_hidden_layers;
        let st = b.hidden_states(&ids, depth.saturating_sub(layers), EncodeOptions::default(), &|n| pb.inc(n as u64))?;
        pb.finish_and_clear();
        Ok(st)
    }

    /// Tuned sentence embeddings (`texts.len() × 384`).
    pub(super) fn embed(&self, texts: &[&str], progress: Progress, what: &str, dev: &burn::tensor::Device) -> Result<Vec<f32>> {
        let st = Self::states(&self.bert, self.shape.layers, texts, progress, what)?;
        Ok(self.top.embed(&self.shape, &st, 64, dev)?)
    }
}

/// Query vectors (`n × qdim`).
pub(super) fn encode(
    texts: &[&str],
    meta_encoder: Encoder,
    hash_dim: usize,
    enc: (Option<&MiniLm>, Option<&Tuned>),
    progress: Progress,
    what: &str,
    dev: &burn::tensor::Device,
) -> Result<(Vec<f32>, usize)> {
    let dense = match (meta_encoder, enc) {
        (Encoder::Minilm, (_, Some(t))) => Some((t.embed(texts, progress, what, dev)?, t.shape.dim)),
        (Encoder::Minilm, (Some(m), None)) => {
            let pb = progress.bar(texts.len() as u64, what);
            let v = m.encode(texts, tgrag_models::minilm::EncodeOptions::default(), &|n| pb.inc(n as u64))?;
            pb.finish_and_clear();
            Some((v, m.dim()))
        }
        (Encoder::Minilm, (None, None)) => return Err(StageError::Internal("MiniLM encoder not loaded".into())),
        (Encoder::Hash, _) => None,
    };
    let ddim = dense.as_ref().map_or(0, |d| d.1);
    let qdim = ddim + hash_dim;
    let mut out = Vec::with_capacity(texts.len() * qdim);
    for (i, t) in texts.iter().enumerate() {
        if let Some((v, d)) = &dense {
            out.extend_from_slice(&v[i * d..(i + 1) * d]);
        }
        out.extend(hash_embed(t, hash_dim)?);
    }
    Ok((out, qdim))
}

impl PlanModel {
    /// Writes `model.json`, `planner.safetensors` and `tagger.safetensors` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| StageError::Io { path: dir.to_path_buf(), source })?;
        self.planner.save(&dir.join("planner.safetensors"))?;
        self.tagger.save(&dir.join("tagger.safetensors"))?;
        if let Some(t) = &self.tuned {
            t.top.save(&dir.join("encoder.safetensors"))?;
        }
        let json = serde_json::to_vec_pretty(&self.meta).map_err(|e| StageError::Internal(format!("model.json: {e}")))?;
        tgrag_schemas::io::write_bytes_atomic(&dir.join("model.json"), &json)?;
        Ok(())
    }

    /// Loads a folder written by [`PlanModel::save`] (strict weights; the MiniLM model when the
    /// planner was trained with it).
    pub fn load(dir: &Path, device: DeviceChoice) -> Result<Self> {
        let mp = dir.join("model.json");
        let bytes = std::fs::read(&mp).map_err(|source| StageError::Io { path: mp.clone(), source })?;
        let meta: ModelMeta =
            serde_json::from_slice(&bytes).map_err(|e| StageError::Input(format!("{}: not a planner model.json: {e}", mp.display())))?;
        if meta.format != 1 {
            return Err(StageError::Input(format!("{}: format {} (this tgrag reads format 1)", mp.display(), meta.format)));
        }
        let dev = device.device();
        let planner = Planner::load(&dir.join("planner.safetensors"), meta.planner_shape(), &dev)?;
        let tagger = Tagger::load(&dir.join("tagger.safetensors"), meta.tagger_shape(), &dev)?;
        let tuning = meta.encoder == Encoder::Minilm && meta.tune_layers > 0;
        let minilm = match meta.encoder {
            Encoder::Minilm if !tuning => Some(load_minilm(meta.model_dir.as_deref(), device, PLAN_HINT)?),
            _ => None,
        };
        let tuned = if tuning {
            let bert = load_minilm_burn(meta.model_dir.as_deref(), device, PLAN_HINT)?;
            let Engine::Burn(b) = &bert.engine else {
                return Err(StageError::Internal("the tuned encoder needs MiniLM's burn engine".into()));
            };
            let shape = b.top_shape(meta.tune_layers, meta.tune_classes);
            let top = TopLayers::load(&dir.join("encoder.safetensors"), b, shape, &dev)?;
            Some(Tuned { bert, top, shape })
        } else {
            None
        };
        Ok(PlanModel { meta, planner, tagger, minilm, tuned, device: dev })
    }
}
