//! The language-model answer path of the GraphQA stages: the rows of G-Retriever's
//! table ([`LmRow`]), the textualised graph as G-Retriever writes it ([`desc`]), and one row's
//! training and answers over [`tgrag_models::graphqa::lm`].
//!
//! G-Retriever textualises a (sub)graph as two CSV blocks — `node_id,node_attr` then
//! `src,edge_attr,dst` (the `desc` of `tgrag_datasets::graphqa`, here of the retrieved subgraph) —
//! which the model reads after the graph token and before the question.

use serde::{Deserialize, Serialize};
use tgrag_models::gnn::encoders::EncoderShape;
use tgrag_models::gnn::mixrag::MixShape;
use tgrag_models::graphqa::lm::{Layout, LmExample, LmQaShape, MixSource, Rates, Soft, host_engine, predict, temperature, train};
use tgrag_models::graphqa::{GraphQa, HeadKind, QaConfig, QaEpoch, QaExample, QaShape};
use tgrag_models::lm::Tuning;
use tgrag_models::minilm::{Engine, MiniLm};
use tgrag_models::train::TrainConfig;

use tgrag_datasets::graphqa::TextGraph;

use crate::graphqa::encoded::{EncodedGraph, EncodedGraphs};
use crate::graphqa::retrieval::Subgraph;
use crate::{Result, StageError};

/// A row of G-Retriever's table (its Table 3: inference-only rows aside), with the language model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LmRow {
    /// Frozen model, learned soft prompt, textualised graph and question.
    PromptTuning,
    /// Frozen model, graph token and question, no textualised graph.
    Graphtoken,
    /// Frozen model, graph token, textualised graph and question ("frozen LLM w/ PT").
    GRetriever,
    /// LoRA, textualised graph and question, no graph token.
    Lora,
    /// LoRA with the graph token.
    GRetrieverLora,
    /// Every weight trained, textualised graph and question, no graph token.
    Full,
    /// Every weight trained, with the graph token.
    GRetrieverFull,
    /// Efficient G-Retriever's token (`gt2`, attention pooling, over the attention subgraph and
    /// its textualisation), frozen model.
    EfficientGRetriever,
    /// Efficient G-Retriever's token with LoRA (its paper's "G-Retriever w/ LoRA" configuration).
    EfficientGRetrieverLora,
    /// Efficient G-Retriever's token, every weight trained.
    EfficientGRetrieverFull,
}

impl LmRow {
    /// The method name in `scores` and `predictions`.
    pub fn method(self) -> &'static str {
        match self {
            LmRow::PromptTuning => "lm-prompt-tuning",
            LmRow::Graphtoken => "lm-graphtoken",
            LmRow::GRetriever => "lm-gretriever",
            LmRow::Lora => "lm-lora",
            LmRow::GRetrieverLora => "lm-gretriever-lora",
            LmRow::Full => "lm-full",
            LmRow::GRetrieverFull => "lm-gretriever-full",
            LmRow::EfficientGRetriever => "lm-efficient-gretriever",
            LmRow::EfficientGRetrieverLora => "lm-efficient-gretriever-lora",
            LmRow::EfficientGRetrieverFull => "lm-efficient-gretriever-full",
        }
    }

    /// Whether the row is Efficient G-Retriever's: `gt2` with attention pooling over the
    /// attention subgraph (else G-Retriever's graph transformer, mean-pooled, over PCST's).
    pub fn efficient(self) -> bool {
        matches!(self, LmRow::EfficientGRetriever | LmRow::EfficientGRetrieverLora | LmRow::EfficientGRetrieverFull)
    }

    /// Where its soft tokens come from (`prompt_tokens` for prompt tuning).
    pub fn soft(self, prompt_tokens: usize) -> Soft {
        match self {
            LmRow::PromptTuning => Soft::Prompt { tokens: prompt_tokens },
            LmRow::Lora | LmRow::Full => Soft::None,
            _ => Soft::Graph,
        }
    }

    /// How the language model trains.
    pub fn tuning(self, rank: usize, alpha: f64) -> Tuning {
        match self {
            LmRow::PromptTuning | LmRow::Graphtoken | LmRow::GRetriever | LmRow::EfficientGRetriever => Tuning::Frozen,
            LmRow::Lora | LmRow::GRetrieverLora | LmRow::EfficientGRetrieverLora => Tuning::Lora { rank, alpha },
            LmRow::Full | LmRow::GRetrieverFull | LmRow::EfficientGRetrieverFull => Tuning::Full,
        }
    }

    /// Whether the textualised graph is in the prompt.
    pub fn with_desc(self) -> bool {
        self != LmRow::Graphtoken
    }
}

/// Where a graph token's encoder starts ([`LmExperimental::lm_graph_init`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GraphInit {
    /// Weights drawn with the seed (G-Retriever trains its GNN from scratch with the projector).
    #[default]
    Scratch,
    /// The encoder's weights after training it with an answer head first (same data, seed and
    /// training settings as the stage's head methods; validation keeps its epoch).
    Trained,
}

/// The language model's settings (options of the `gretriever` and `mixrag` stages, `lm_*`; each
/// stage has its own `lm_rows`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LmSettings {
    /// Learning rate of the rows with the language model frozen (they train the graph encoder, the
    /// projector, the prompt and the head only, and take a larger step).
    pub lm_lr_frozen: f64,
    /// Learning rate of the LoRA rows (the adapters, and the row's graph side and head).
    pub lm_lr_lora: f64,
    /// Learning rate of the fully tuned rows (the reference point's 5e-5).
    pub lm_lr_full: f64,
    /// Epochs per row; the epoch kept is the best on validation.
    pub lm_epochs: usize,
    /// Questions per batch.
    pub lm_batch: usize,
    /// Epochs without a better validation accuracy before a row stops.
    pub lm_patience: usize,
    /// LoRA's rank r (the query and value projections of every layer).
    pub lm_rank: usize,
    /// LoRA's alpha (the update is scaled by alpha / r).
    pub lm_alpha: f64,
    /// Word pieces of the textualised graph (G-Retriever: 512 of Llama's tokens).
    pub lm_desc_budget: usize,
    /// Soft-prompt tokens of the prompt-tuning rows.
    pub lm_prompt_tokens: usize,
    /// Hidden width of the projector (graph vector → the model's token width).
    pub lm_projector_hidden: usize,
    /// Options of graph-token experiments that did not beat the papers' setting, kept to reproduce
    /// them (docs/experiments/graphqa-lm.md); all off by default, and then left out of
    /// `config.json` and the cache key (`--set <stage>.experimental.<name>=…`).
    #[serde(default, skip_serializing_if = "LmExperimental::is_off")]
    pub experimental: LmExperimental,
    /// The language model (`--set <stage>.lm=…`): a model folder, or a hub model id
    /// `<owner>/<name>` fetched with `tgrag fetch <owner>/<name>` (any BERT, RoBERTa or MPNet
    /// sentence-transformers checkpoint, e.g. `sentence-transformers/all-roberta-large-v1`).
    /// Default: the pinned all-MiniLM-L6-v2 of `model_dir`.
    #[serde(default, rename = "lm")]
    pub backbone: Option<String>,
}

impl Default for LmSettings {
    fn default() -> Self {
        LmSettings {
            lm_lr_frozen: 1e-3,
            lm_lr_lora: 3e-4,
            lm_lr_full: 5e-5,
            lm_epochs: 4,
            lm_batch: 16,
            lm_patience: 2,
            lm_rank: 8,
            lm_alpha: 16.0,
            lm_desc_budget: 192,
            lm_prompt_tokens: 4,
            lm_projector_hidden: 1024,
            experimental: LmExperimental::default(),
            backbone: None,
        }
    }
}

/// The graph-token experiments' options ([`LmSettings::experimental`]), with what each measured
/// on ExplaGraphs (all-MiniLM-L6-v2, test accuracy, seeds 0–3; docs/experiments/graphqa-lm.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LmExperimental {
    /// Learning rate of the soft-token side (graph encoder or MixRAG, projector, prompt) in every
    /// row; absent (`null`), the row's own rate above. The graph encoder and projector start from
    /// random weights, where the language model starts trained. Measured, `lm-gretriever-full` at
    /// `0.001`: 0.770 ± 0.033, against 0.772 ± 0.011 at the row's own rate.
    #[serde(default)]
    pub lm_lr_graph: Option<f64>,
    /// Where the graph token's encoder starts (G-Retriever's rows): `scratch` (the papers: drawn
    /// with the seed) or `trained` (the weights of the same encoder first trained, same seed, with
    /// the stage's answer head over `[graph vector; question]`, as its `gretriever-<kind>` method).
    /// Measured, `lm-gretriever-full` with `lm_lr_graph=0.001`: `trained` 0.712 ± 0.065.
    #[serde(default)]
    pub lm_graph_init: GraphInit,
    /// The projector's last layer starts at zero, so a graph (or MixRAG) token starts as the zero
    /// vector, a neutral slot, and grows as training finds it useful; `false` (the papers):
    /// drawn like every other layer. Measured with `lm_lr_graph=0.001`: `lm-gretriever-lora` 0.730
    /// ± 0.012 (0.702 ± 0.044 drawn; `lm-lora`, no token, 0.748 ± 0.025), `lm-gretriever-full`
    /// 0.776 ± 0.018 (`lm-full` 0.777 ± 0.014).
    #[serde(default)]
    pub lm_projector_zero: bool,
    /// The answer head also reads the soft token's final state (the mean of a prompt's soft
    /// tokens) beside the mean of all token states; `false` (as the papers' reading of the
    /// model's output): the mean alone. Rows without a soft token read the mean either way.
    /// Measured with `lm_projector_zero` and `lm_lr_graph=0.001`: `lm-gretriever-lora` 0.720 ±
    /// 0.027, `lm-gretriever-full` 0.777 ± 0.025.
    #[serde(default)]
    pub lm_head_token: bool,
}

impl LmExperimental {
    /// Whether every option is off (its default).
    pub fn is_off(&self) -> bool {
        *self == LmExperimental::default()
    }
}

/// The widest BERT-class model the language-model rows read (RoBERTa-large: 1,024).
const MAX_LM_WIDTH: usize = 1024;
/// The positions of a BERT-class model.
const MAX_LM_POSITIONS: usize = 512;

impl LmSettings {
    /// The settings' own checks.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let positive = |x: f64| x > 0.0 && x.is_finite();
        let rates = [self.lm_lr_frozen, self.lm_lr_lora, self.lm_lr_full, self.lm_alpha];
        if !rates.into_iter().chain(self.experimental.lm_lr_graph).all(positive) {
            return Err("lm_lr_frozen, lm_lr_lora, lm_lr_full, lm_lr_graph and lm_alpha must be finite and > 0".into());
        }
        if self.lm_epochs == 0 || self.lm_batch == 0 || self.lm_rank == 0 || self.lm_prompt_tokens == 0 || self.lm_projector_hidden == 0 {
            return Err("lm_epochs, lm_batch, lm_rank, lm_prompt_tokens and lm_projector_hidden must be ≥ 1".into());
        }
        // Bounds that keep every accepted value inside what a BERT-class backbone can use: a LoRA
        // rank up to the widest such model (1,024), a projector no wider than 64 × that, and the
        // soft prompt and textualised graph inside the 512 positions.
        if self.lm_rank > MAX_LM_WIDTH {
            return Err(format!("lm_rank {} is above {MAX_LM_WIDTH} (a LoRA rank above the model's width adds nothing)", self.lm_rank));
        }
        if self.lm_projector_hidden > 64 * MAX_LM_WIDTH {
            return Err(format!("lm_projector_hidden {} is above {}", self.lm_projector_hidden, 64 * MAX_LM_WIDTH));
        }
        if self.lm_prompt_tokens.saturating_add(self.lm_desc_budget) > MAX_LM_POSITIONS {
            return Err(format!(
                "lm_prompt_tokens {} + lm_desc_budget {} do not fit the {MAX_LM_POSITIONS} positions of a BERT-class model",
                self.lm_prompt_tokens, self.lm_desc_budget
            ));
        }
        Ok(())
    }

    fn train(&self, base: &TrainConfig, tuning: Tuning) -> TrainConfig {
        let lr = match tuning {
            Tuning::Frozen => self.lm_lr_frozen,
            Tuning::Lora { .. } => self.lm_lr_lora,
            Tuning::Full => self.lm_lr_full,
        };
        TrainConfig { lr, epochs: self.lm_epochs, batch: self.lm_batch, patience: self.lm_patience, ..base.clone() }
    }
}

/// G-Retriever's textualisation of `sub` (`tgrag_datasets::graphqa::desc`: `node_id,node_attr`
/// rows with local ids in subgraph order, a blank line, `src,edge_attr,dst` rows, pandas' CSV
/// quoting).
pub fn desc(enc: &EncodedGraphs, g: &EncodedGraph, sub: &Subgraph) -> String {
    let t = |id: u32| enc.texts[id as usize].clone();
    let mut local = vec![u32::MAX; g.nodes.len()];
    let mut tg = TextGraph::default();
    for (i, &v) in sub.nodes.iter().enumerate() {
        local[v as usize] = i as u32;
        tg.nodes.push(t(g.nodes[v as usize]));
    }
    for &e in &sub.edges {
        let (a, b) = g.edges[e as usize];
        let (la, lb) = (local[a as usize], local[b as usize]);
        if la != u32::MAX && lb != u32::MAX {
            tg.edges.push((la, t(g.edge_text[e as usize]), lb));
        }
    }
    tgrag_datasets::graphqa::desc(&tg)
}

/// One row's answers: the model's classes for `eval`, its curve and the kept epoch.
pub struct RowResult {
    pub predicted: Vec<u32>,
    pub curve: Vec<QaEpoch>,
    pub best: u32,
}

/// A [`RowResult`] as a shard stores it: the curve's floats as their bits, so that the row read
/// back is the row computed, to the bit.
#[derive(Serialize, Deserialize)]
pub struct StoredRow {
    predicted: Vec<u32>,
    /// Per epoch: the epoch, then the bits of the train loss, validation loss and metric.
    curve: Vec<(u32, u64, u64, u64)>,
    best: u32,
}

impl From<RowResult> for StoredRow {
    fn from(r: RowResult) -> StoredRow {
        let curve = r.curve.iter().map(|c| (c.epoch, c.train_loss.to_bits(), c.val_loss.to_bits(), c.val_metric.to_bits())).collect();
        StoredRow { predicted: r.predicted, curve, best: r.best }
    }
}

impl From<StoredRow> for RowResult {
    fn from(r: StoredRow) -> RowResult {
        let curve = r
            .curve
            .iter()
            .map(|&(epoch, t, v, m)| QaEpoch {
                epoch,
                train_loss: f64::from_bits(t),
                val_loss: f64::from_bits(v),
                val_metric: f64::from_bits(m),
            })
            .collect();
        RowResult { predicted: r.predicted, curve, best: r.best }
    }
}

/// The questions as the language model reads them: the answer model's example (graph, target), the
/// word pieces of the textualised subgraph and of the question.
pub fn examples(bert: &MiniLm, qa: Vec<QaExample>, descs: &[String], questions: &[String]) -> Result<Vec<LmExample>> {
    qa.into_iter()
        .zip(descs.iter().zip(questions))
        .map(|(qa, (d, q))| Ok(LmExample { qa, desc: bert.pieces(d)?, question: bert.pieces(q)? }))
        .collect()
}

/// What one row trains: its method name, soft tokens, tuning, whether the graph text is read, and
/// the graph side (G-Retriever's encoder or MixRAG).
#[derive(Debug, Clone)]
pub struct RowSpec {
    pub method: String,
    pub soft: Soft,
    pub tuning: Tuning,
    pub with_desc: bool,
    pub encoder: Option<EncoderShape>,
    pub mix: Option<MixSource>,
}

impl LmRow {
    /// The row over G-Retriever's graph encoder `encoder`.
    pub fn spec(self, settings: &LmSettings, encoder: EncoderShape) -> RowSpec {
        RowSpec {
            method: self.method().into(),
            soft: self.soft(settings.lm_prompt_tokens),
            tuning: self.tuning(settings.lm_rank, settings.lm_alpha),
            with_desc: self.with_desc(),
            encoder: Some(encoder),
            mix: None,
        }
    }
}

/// MixRAG with the language model (MixRAG's "w/ LoRA" row and its frozen and full variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MixLmRow {
    /// Frozen model: MixRAG's token, textualised graph and question.
    Mixrag,
    /// LoRA (MixRAG's own setting).
    MixragLora,
    /// Every weight trained.
    MixragFull,
}

impl MixLmRow {
    /// The method name: `lm-mixrag`, `lm-mixrag-lora`, `lm-mixrag-full`; with an expert subset
    /// (Table 4's ablation), `-<expert>+<expert>` appended.
    pub fn method(self, experts: [bool; 3]) -> String {
        let base = match self {
            MixLmRow::Mixrag => "lm-mixrag",
            MixLmRow::MixragLora => "lm-mixrag-lora",
            MixLmRow::MixragFull => "lm-mixrag-full",
        };
        match MixShape::experts_name(experts).strip_prefix("mixrag") {
            Some(rest) => format!("{base}{rest}"),
            None => base.into(),
        }
    }

    /// The row over MixRAG `mix`.
    pub fn spec(self, settings: &LmSettings, mix: MixSource) -> RowSpec {
        let tuning = match self {
            MixLmRow::Mixrag => Tuning::Frozen,
            MixLmRow::MixragLora => Tuning::Lora { rank: settings.lm_rank, alpha: settings.lm_alpha },
            MixLmRow::MixragFull => Tuning::Full,
        };
        RowSpec { method: self.method(mix.shape.experts), soft: Soft::Mix, tuning, with_desc: true, encoder: None, mix: Some(mix) }
    }
}

/// Where a stage's rows run and what they are told: the stage's name (for errors), the task,
/// the number of classes, the settings and the stage's base training settings.
pub struct RowsRun<'a> {
    pub stage: &'a str,
    pub task: &'a str,
    pub classes: usize,
    pub settings: &'a LmSettings,
    pub base: &'a TrainConfig,
    /// The answer head's hidden width (the encoder's first training, `lm_graph_init=trained`).
    pub head_hidden: usize,
}

/// Every (row, seed) of `specs` × `seeds`, in that order, with one progress bar: each row's curve
/// goes into `curves` (model = the row's method, variant = the task) and `answer` hears its
/// method, seed and predicted classes for `sets.2`. The one loop of the `gretriever` and `mixrag`
/// language-model rows. Each (row, seed) is one of the stage's `units`: in a shard run only the
/// shard's are trained (and the others left out), in a full run those a shard finished are read.
#[allow(clippy::too_many_arguments)]
pub fn run_rows(
    bert: &MiniLm,
    run: &RowsRun<'_>,
    specs: &[RowSpec],
    seeds: &[u64],
    sets: (&[LmExample], &[LmExample], &[LmExample]),
    (starts, units): (&mut Starts, &mut crate::shared::shards::Units),
    dev: &burn::tensor::Device,
    progress: crate::shared::context::Progress,
    curves: &mut crate::shared::curves::Curves,
    mut answer: impl FnMut(&str, u64, &[u32]),
) -> Result<()> {
    let pb = progress.bar((specs.len() * seeds.len()) as u64, &format!("{}: language model", run.stage));
    for spec in specs {
        for &seed in seeds {
            let name = format!("{} {} {} seed {seed}", run.stage, run.task, spec.method);
            let stored = units.unit(&name, || {
                run_row(bert, spec, run, sets, seed, starts, dev).map(StoredRow::from).map_err(|e| match e {
                    StageError::Model(e) => StageError::training(run.stage, &format!("{} on {}", spec.method, run.task), e),
                    e => e,
                })
            })?;
            let Some(stored) = stored else {
                pb.inc(1);
                continue;
            };
            let r = RowResult::from(stored);
            for c in &r.curve {
                let metrics = [("train_loss", c.train_loss), ("val_loss", c.val_loss), ("val_metric", c.val_metric)];
                curves.push(&spec.method, run.task, seed, c.epoch, c.epoch == r.best, &metrics);
            }
            answer(&spec.method, seed, &r.predicted);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    Ok(())
}

/// Graph encoders trained with the stage's answer head over `[graph vector; question]` (the
/// `gretriever-gt` way), per (encoder, seed), over one set of questions: where the rows of
/// `lm_graph_init=trained` start their graph token. Each is trained once, however many rows read
/// it; a stage that already trained one over the same questions hands it over ([`Starts::keep`]).
#[derive(Default)]
pub struct Starts(Vec<(EncoderShape, u64, GraphQa)>);

impl Starts {
    /// `model` (encoder `encoder`, seed `seed`), trained over the questions the rows will read.
    pub fn keep(&mut self, encoder: EncoderShape, seed: u64, model: GraphQa) {
        if !self.0.iter().any(|(e, s, _)| *e == encoder && *s == seed) {
            self.0.push((encoder, seed, model));
        }
    }

    /// The model of (`encoder`, `seed`), trained on `train` (validation picks the epoch) if no
    /// row has needed it before.
    fn trained(
        &mut self,
        encoder: EncoderShape,
        run: &RowsRun<'_>,
        (train_x, val_x): (&[LmExample], &[LmExample]),
        seed: u64,
        dev: &burn::tensor::Device,
    ) -> Result<&GraphQa> {
        let at = match self.0.iter().position(|(e, s, _)| *e == encoder && *s == seed) {
            Some(at) => at,
            None => {
                let qa = |x: &[LmExample]| -> Vec<QaExample> { x.iter().map(|e| e.qa.clone()).collect() };
                let head = HeadKind::Classify { classes: run.classes };
                let shape = QaShape { encoder: Some(encoder), question_dim: encoder.in_dim, head, head_hidden: run.head_hidden };
                let qcfg = QaConfig { train: run.base.clone(), head_hidden: run.head_hidden, seed };
                let (model, _, _) =
                    tgrag_models::graphqa::train(shape, &qa(train_x), &qa(val_x), encoder.in_dim, encoder.edge_dim, &qcfg, dev)?;
                self.0.push((encoder, seed, model));
                self.0.len() - 1
            }
        };
        Ok(&self.0[at].2)
    }
}

/// Trains `spec` with `seed` on `train` (validation picks the epoch) and answers `eval`; the
/// graph token of `lm_graph_init=trained` starts from `starts`.
#[allow(clippy::too_many_arguments)]
pub fn run_row(
    bert: &MiniLm,
    spec: &RowSpec,
    run: &RowsRun<'_>,
    (train_x, val_x, eval_x): (&[LmExample], &[LmExample], &[LmExample]),
    seed: u64,
    starts: &mut Starts,
    dev: &burn::tensor::Device,
) -> Result<RowResult> {
    let (classes, settings) = (run.classes, run.settings);
    let Engine::Burn(b) = &bert.engine else {
        return Err(StageError::Internal("the language-model rows need MiniLM's burn engine".into()));
    };
    let (bos, sep) = bert.bos_sep()?;
    let layout = Layout { bos, sep, desc_budget: settings.lm_desc_budget, max_len: b.config().max_len(), with_desc: spec.with_desc };
    let shape = LmQaShape {
        encoder: spec.encoder,
        mix: spec.mix,
        soft: spec.soft,
        tuning: spec.tuning,
        projector_hidden: settings.lm_projector_hidden,
        projector_zero: settings.experimental.lm_projector_zero,
        head_token: settings.experimental.lm_head_token,
        classes,
        layout,
    };
    let cfg = settings.train(run.base, spec.tuning);
    let start_encoder = match (settings.experimental.lm_graph_init, spec.soft, spec.encoder) {
        (GraphInit::Trained, Soft::Graph, Some(e)) => starts.trained(e, run, (train_x, val_x), seed, dev)?.encoder(),
        _ => None,
    };
    let rates = Rates { cfg: &cfg, side: settings.experimental.lm_lr_graph };
    let (model, curve, best) = train(host_engine(dev), b, &shape, train_x, val_x, rates, (seed, start_encoder), dev)?;
    let tau = temperature(&shape, cfg.epochs, best as usize);
    let predicted = predict(&model, &shape, eval_x, tau, 32, &dev.clone().autodiff().inner())?;
    Ok(RowResult { predicted, curve, best })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphqa::answer::tests::planted;

    /// `lm_graph_init=trained`: each (encoder, seed) is trained once however many rows read it,
    /// and a model handed over (the trained methods' own) is used as it is, never trained again.
    #[test]
    fn a_trained_start_is_trained_once_per_encoder_and_seed() {
        use std::collections::HashMap;
        use tgrag_models::gnn::encoders::{EncoderKind, Pooling};
        use tgrag_models::gnn::host::read_tensors;
        let enc = planted();
        let class_of: HashMap<&str, u32> = [("counter", 0), ("support", 1)].into_iter().collect();
        let split = |name: &str| -> Vec<LmExample> {
            enc.graphs
                .iter()
                .filter(|g| g.split == name)
                .map(|g| {
                    let sub = Subgraph { nodes: (0..g.nodes.len() as u32).collect(), edges: (0..g.edges.len() as u32).collect() };
                    LmExample { qa: crate::graphqa::answer::example(&enc, g, &sub, &class_of), desc: vec![], question: vec![] }
                })
                .collect()
        };
        let (tr, va) = (split("train"), split("val"));
        let e = EncoderShape {
            kind: EncoderKind::Gt,
            in_dim: enc.dim,
            edge_dim: enc.dim,
            hidden: 8,
            layers: 1,
            heads: 2,
            pooling: Pooling::Mean,
        };
        let base = TrainConfig { epochs: 2, ..TrainConfig::default() };
        let settings = LmSettings::default();
        let run = RowsRun { stage: "gretriever", task: "explagraphs", classes: 2, settings: &settings, base: &base, head_hidden: 8 };
        let dev = burn::tensor::Device::flex();
        let weights = |m: &GraphQa| read_tensors(m, "test").unwrap_or_else(|err| panic!("weights: {err:?}"));
        let none: &[LmExample] = &[];

        let mut starts = Starts::default();
        // Training refuses an empty training set, so an answer without questions is a kept model.
        assert!(starts.trained(e, &run, (none, none), 3, &dev).is_err(), "nothing kept yet: it trains");
        let first = weights(starts.trained(e, &run, (&tr, &va), 3, &dev).unwrap_or_else(|err| panic!("trains: {err:?}")));
        let again = weights(starts.trained(e, &run, (none, none), 3, &dev).unwrap_or_else(|err| panic!("kept: {err:?}")));
        assert_eq!(first, again);
        assert!(starts.trained(e, &run, (none, none), 4, &dev).is_err(), "another seed is another model");
        let wider = EncoderShape { hidden: 16, ..e };
        assert!(starts.trained(wider, &run, (none, none), 3, &dev).is_err(), "another encoder is another model");

        // Handed over: a model with other weights (seed 9's) is the one the rows of seed 3 read.
        let mut other = Starts::default();
        let theirs = weights(other.trained(e, &run, (&tr, &va), 9, &dev).unwrap_or_else(|err| panic!("trains: {err:?}")));
        assert_ne!(theirs, first);
        let Some((_, _, model)) = other.0.pop() else { panic!("one model kept") };
        let mut handed = Starts::default();
        handed.keep(e, 3, model);
        let used = weights(handed.trained(e, &run, (&tr, &va), 3, &dev).unwrap_or_else(|err| panic!("kept: {err:?}")));
        assert_eq!(used, theirs);
    }

    /// A subgraph's text: its nodes renumbered in subgraph order, edges with an end outside it dropped.
    #[test]
    fn desc_is_g_retrievers_csv_of_the_subgraph() {
        let mut enc = planted();
        let g = &mut enc.graphs[0];
        g.nodes = vec![3, 4, 5, 6];
        g.edges = vec![(0, 1), (1, 2), (2, 3)];
        g.edge_text = vec![1, 2, 1];
        enc.texts[5] = "says \"no\", twice".into();
        let g = &enc.graphs[0];
        let sub = Subgraph { nodes: vec![2, 1, 3], edges: vec![0, 1, 2] };
        assert_eq!(
            desc(&enc, g, &sub),
            "node_id,node_attr\n0,\"says \"\"no\"\", twice\"\n1,concept 1\n2,concept 3\n\nsrc,edge_attr,dst\n1,antonym of,0\n0,synonym of,2\n"
        );
        // Row names and settings as the stages' options spell them.
        let rows: Vec<LmRow> = serde_json::from_str(
            r#"["prompt-tuning","graphtoken","g-retriever","lora","g-retriever-lora","full","g-retriever-full",
                "efficient-g-retriever","efficient-g-retriever-lora","efficient-g-retriever-full"]"#,
        )
        .expect("rows");
        let methods: Vec<&str> = rows.iter().map(|r| r.method()).collect();
        assert_eq!(
            methods,
            [
                "lm-prompt-tuning",
                "lm-graphtoken",
                "lm-gretriever",
                "lm-lora",
                "lm-gretriever-lora",
                "lm-full",
                "lm-gretriever-full",
                "lm-efficient-gretriever",
                "lm-efficient-gretriever-lora",
                "lm-efficient-gretriever-full"
            ]
        );
        let efficient: Vec<bool> = rows.iter().map(|r| r.efficient()).collect();
        assert_eq!(efficient, [false, false, false, false, false, false, false, true, true, true]);
        let tunings: Vec<Tuning> = rows[7..].iter().map(|r| r.tuning(8, 16.0)).collect();
        assert_eq!(tunings, [Tuning::Frozen, Tuning::Lora { rank: 8, alpha: 16.0 }, Tuning::Full]);
        assert_eq!(MixLmRow::MixragLora.method([true; 3]), "lm-mixrag-lora");
        assert_eq!(MixLmRow::Mixrag.method([true, false, true]), "lm-mixrag-entity+subgraph");
        assert!(LmSettings { lm_rank: 0, ..LmSettings::default() }.validate().is_err());
        assert!(
            LmSettings { experimental: LmExperimental { lm_lr_graph: Some(0.0), ..LmExperimental::default() }, ..LmSettings::default() }
                .validate()
                .is_err()
        );
        assert!(
            LmSettings { experimental: LmExperimental { lm_lr_graph: Some(1e-3), ..LmExperimental::default() }, ..LmSettings::default() }
                .validate()
                .is_ok()
        );
    }
}
