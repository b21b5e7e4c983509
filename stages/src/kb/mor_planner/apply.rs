//! A loaded planner applied: plans for queries (the metapath, then the restrictions tagged with
//! its types), and a plan file scored against its gold plans (the figures of the module doc).

use std::collections::HashMap;
use std::path::Path;

use tgrag_datasets::mor_plans::{Metapath, Plan};
use tgrag_models::planner::{BOS, EOS};
use tgrag_models::tagger::TagData;

use super::bio::{sentence, spans, token_f1};
use super::grammar::{Produced, gold_plan, plan_types, produced, render_metapath, tokens_to_paths};
use super::model_io::{PlanModel, encode};
use crate::{Progress, Result, StageError};

/// Per-file figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub lines: usize,
    /// Lines whose gold plan does not parse (left out of the metapath figures).
    pub rejected: usize,
    pub metapath_exact: f64,
    pub path_set_exact: f64,
    pub restriction_token_f1: f64,
    /// Predicted token sequences that were not a plan (scored as the empty plan).
    pub malformed: usize,
}

/// Per validation line: gold and predicted plans and the per-query scores.
#[derive(Debug, Clone)]
pub struct Scored {
    pub line: usize,
    pub q_id: Option<i64>,
    pub gold: Option<Produced>,
    pub pred: Produced,
    pub exact: Option<bool>,
    pub token_f1: f64,
}

impl PlanModel {
    /// Plans for queries: the metapath (greedy, or the best of the decoding candidates), then
    /// restrictions tagged with the plan's types.
    pub fn plan(&self, texts: &[&str], progress: Progress) -> Result<Vec<Produced>> {
        let m = &self.meta;
        let (q, qdim) = encode(
            texts,
            m.encoder,
            m.hash_dim,
            (self.minilm.as_ref(), self.tuned.as_ref()),
            progress,
            "plan: embed queries",
            &self.device,
        )?;
        if qdim != m.qdim {
            // model.json's width and its encoder's disagree: the model folder does not fit together.
            return Err(StageError::ModelFile(format!(
                "model.json: the planner reads queries {} wide, but its encoder ({:?}, hash_dim {}) gives {qdim}: the model folder \
                 does not fit its encoder (retrain it with `tgrag train-planner`)",
                m.qdim, m.encoder, m.hash_dim
            )));
        }
        let tok_id: HashMap<&str, u32> = m.plan_tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32 + 2)).collect();
        let candidates: Vec<Vec<u32>> = m
            .candidates
            .iter()
            .map(|c| c.iter().map(|t| tok_id.get(t.as_str()).copied()).collect::<Option<Vec<u32>>>())
            .collect::<Option<_>>()
            .ok_or_else(|| StageError::Input("model.json: a decoding candidate uses a token outside plan_tokens".into()))?;
        let seqs = self.planner.best_of(&q, qdim, m.max_len, &candidates, &self.device)?;
        let type_id: HashMap<String, u32> = m.types.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut data = TagData { qdim, queries: q, sentences: Vec::new() };
        let mut paths_of = Vec::new();
        let mut words_of = Vec::new();
        let mut malformed = Vec::new();
        for (i, (text, seq)) in texts.iter().zip(&seqs).enumerate() {
            let toks: Vec<String> =
                seq.iter().filter(|&&t| t != BOS && t != EOS).filter_map(|&t| m.plan_tokens.get(t as usize - 2).cloned()).collect();
            // A sequence that does not alternate type / hop is no plan (MoR's `''`), and counted.
            let parsed = tokens_to_paths(&toks);
            malformed.push(parsed.is_none());
            let paths = parsed.unwrap_or_default();
            let (mut s, ws) = sentence(i as u32, text, m.buckets);
            s.plan_types = plan_types(&Plan { metapaths: paths.clone(), restrictions: Vec::new() }, &type_id);
            data.sentences.push(s);
            paths_of.push(paths);
            words_of.push(ws);
        }
        let labels = self.tagger.predict(&m.tagger_shape(), &data, &self.device)?;
        texts
            .iter()
            .zip(paths_of)
            .zip(words_of.iter().zip(&labels))
            .zip(malformed)
            .map(|(((text, paths), (ws, l)), malformed)| produced(paths, spans(text, ws, l, &m.types), m.syntax, malformed))
            .collect()
    }

    /// Plans every line of a plan file and scores them against its gold plans.
    pub fn score_file(&self, path: &Path, progress: Progress) -> Result<(Figures, Vec<Scored>)> {
        let lines = if path.file_name().is_some_and(|f| f == "llama_ft.jsonl") {
            tgrag_datasets::mor_plans::read_finetune(path, None)?
        } else {
            tgrag_datasets::mor_plans::read_plans(path, None)?
        };
        let texts: Vec<&str> = lines.iter().map(|l| l.query.as_str()).collect();
        let pred = self.plan(&texts, progress)?;
        let mut rows = Vec::with_capacity(lines.len());
        let (mut judged, mut exact, mut set_exact, mut f1_sum) = (0usize, 0usize, 0usize, 0.0);
        let malformed = pred.iter().filter(|p| p.malformed).count();
        for (l, p) in lines.iter().zip(pred) {
            let gold = gold_plan(l);
            let (g, ex, f1) = match &gold {
                Some(g) => {
                    let gold = produced(g.metapaths.clone(), g.restrictions.clone(), self.meta.syntax, false)?;
                    // Exact: the same paths in the same order, as written in the plan file's syntax.
                    let ex = gold.metapath == p.metapath;
                    let one = |m: &Metapath| render_metapath(std::slice::from_ref(m), self.meta.syntax);
                    let mut a: Vec<String> = g.metapaths.iter().map(one).collect::<Result<_>>()?;
                    let mut b: Vec<String> = p.paths.iter().map(one).collect::<Result<_>>()?;
                    a.sort();
                    b.sort();
                    judged += 1;
                    exact += usize::from(ex);
                    set_exact += usize::from(a == b);
                    let f1 = token_f1(&p.restriction_spans, &g.restrictions);
                    (Some(gold), Some(ex), f1)
                }
                None => (None, None, 0.0),
            };
            if gold.is_some() {
                f1_sum += f1;
            }
            rows.push(Scored { line: l.line, q_id: l.q_id, gold: g, pred: p, exact: ex, token_f1: f1 });
        }
        let d = judged.max(1) as f64;
        Ok((
            Figures {
                lines: lines.len(),
                rejected: lines.len() - judged,
                metapath_exact: exact as f64 / d,
                path_set_exact: set_exact as f64 / d,
                restriction_token_f1: f1_sum / d,
                malformed,
            },
            rows,
        ))
    }
}
