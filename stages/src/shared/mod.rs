//! The shared layer: what every family of stages builds on. Nothing here imports a family module.
//!
//! * [`context`]: what a running stage sees (inputs, outputs checked against their declared
//!   tables, timings, progress bars).
//! * [`text`]: tokenisation for lexical retrieval.
//! * [`run`]: top-k with the project's tie rule and the `run` table writer.
//! * [`encoders`]: sentence encoders (MiniLM, hashing) and embedding columns.
//! * [`curves`], [`scores`]: the one training-curve table and the one long-format scores table;
//!   [`metric`]: every metric name `scores` may hold, with the direction it is better in.
//! * [`plots`]: PNG charts.
//! * [`shards`]: a stage's embeddings cut into partitions that separate processes compute.
//! * [`stage_info`]: what a stage is, as data (`StageInfo`, `ModelNeed`); the traits over it live in
//!   `crate::stage`.

pub mod context;
pub mod curves;
pub mod encoders;
pub mod metric;
pub mod plots;
pub mod run;
pub mod scores;
pub mod shards;
pub mod stage_info;
pub mod text;

#[cfg(test)]
pub(crate) mod test_support;
