//! The planner trained on MoR's own plan files (`llama_ft.jsonl`, `plans_train.jsonl`,
//! `plans_val.jsonl`, see `tgrag_datasets::mor_plans`): the burn decoder of `models::planner` for the
//! metapath and the span tagger of `models::tagger` for the restrictions. Used by
//! `tgrag train-planner` and `tgrag plan`.
//!
//! * Query vector: the MiniLM sentence embedding (encoder `minilm`) followed by the hashed
//!   uni/bigram vector of `shared::encoders::hash_embed` (`hash_dim` wide); encoder `hash` uses the latter alone.
//! * Plan tokens: per path its node types and hops (`->`, `<-`, or `-relation->` for Prime's lists),
//!   `|` between paths. An empty plan (MoR's `''`, "no valid plan") is the empty sequence.
//! * Restrictions: BIO labels over the query's words ([`crate::kb::kb::words`]); a gold restriction
//!   is labelled at its first unlabelled occurrence as a word sequence (restrictions the planner
//!   paraphrased have none and only count in the token F1).
//! * Training: `llama_ft.jsonl` and 90 % of `plans_train.jsonl`; checkpoints are chosen on the other
//!   10 % (seeded); `plans_val.jsonl` is only used for the reported figures.
//!
//! Figures (per file): metapath exact match (the rendered metapath equals the gold one; lines whose
//! gold plan does not parse are left out and counted), the same with paths compared as a set, and
//! restriction token F1: per query, the multiset of (type, lower-cased word) of all predicted
//! restrictions against the gold one, F1 = 2|P∩G|/(|P|+|G|) (1 when both are empty), averaged.
//!
//! Modules: [`grammar`] (plan tokens, parsing and rendering of metapaths), [`bio`] (BIO labels of
//! restrictions over a query's words, restriction token F1), [`model_io`] (the model folder and the
//! query encoder), [`apply`] (planning queries and scoring plan files), [`training`] (training
//! both models on a plan folder).

pub mod apply;
pub mod bio;
pub mod grammar;
pub mod model_io;
pub mod training;

#[cfg(test)]
mod tests;

pub use apply::{Figures, Scored};
pub use bio::token_f1;
pub use grammar::{PlanSyntax, Produced, plan_tokens, render_metapath, tokens_to_paths};
pub use model_io::{ModelMeta, PlanModel};
pub use training::{Decode, Dropped, TrainOptions, Trained, dropped_lines, train};
