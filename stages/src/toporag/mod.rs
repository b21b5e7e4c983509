//! TopoRAG (Wang et al. 2024): retrieval for partially observed nodes of text-attributed graphs.
//!
//! Library modules: [`split`] (observed / partial split), [`diffusion`] (proximity),
//! [`graphwave`] (role), [`similarity`] (top-k, Pearson, the correlation analysis),
//! [`textmetrics`] (BLEU-4, ROUGE-L), [`quality`] (context quality), [`tasks`] (the GNN
//! evaluation), [`emails`] (the e-mail variant's people graph).
//!
//! Stage: `toporag`.

pub mod diffusion;
pub mod emails;
pub mod graphwave;
pub mod quality;
pub mod similarity;
pub mod split;
pub mod tasks;
pub mod textmetrics;
#[allow(clippy::module_inception)]
pub mod toporag;

#[cfg(test)]
mod fixture_tests;
