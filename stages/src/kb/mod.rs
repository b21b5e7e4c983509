//! The knowledge-base methods (STaRK-style queries over a typed KB).
//!
//! Library modules: [`kb`] (the typed KB, name matching), [`paths`] (shortest typed paths, topic
//! entities), [`traversal`] (MoR's mixed traversal), [`rerank`] (MoR's reranker features),
//! [`mor_planner`] (the planner trained on MoR's plan files: `tgrag train-planner` / `plan`).
//!
//! Stages: `graph`, `planning`, `mor`, `pasemiqa`.

pub mod graph;
#[allow(clippy::module_inception)]
pub mod kb;
pub mod mor;
pub mod mor_planner;
pub mod pasemiqa;
pub mod paths;
pub mod planning;
pub mod rerank;
pub mod traversal;
