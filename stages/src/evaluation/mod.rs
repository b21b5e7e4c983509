//! Evaluation: STaRK's ranking metrics ([`ranking`], a library) and the `metrics` stage.

pub mod metrics;
pub mod ranking;
