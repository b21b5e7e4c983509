//! Evaluation: STaRK's ranking metrics ([`ranking`], a library), the `metrics` stage (ranking
//! metrics of every `run`) and the `report` stage (`report.md` from every `scores` table).

pub mod metrics;
pub mod ranking;
pub mod report;
