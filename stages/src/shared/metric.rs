//! Every metric name a `scores` table may hold, declared once with the way it is better: the
//! nightly comparison and its plots read the direction from here instead of guessing it from the
//! name. [`crate::shared::scores::Scores::batch`] refuses a metric that is not declared, so a new
//! evaluation declares its metrics here or fails its first test.
//!
//! Two kinds of names are derived from a declared one: `<metric>_std` (the sample standard
//! deviation over seeds, which has no better direction) and, for a declared family such as
//! `hits_at_K`, the family name with `K` replaced by a positive whole number (`hits_at_100`).

use std::fmt;

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Larger values are better (hit rates, recall, accuracy, text overlap).
    Higher,
    /// Smaller values are better (losses, times).
    Lower,
    /// Neither: a description, not a quality (subgraph sizes, counts, a spread over seeds).
    Neither,
}

impl Direction {
    /// `Some(true)` higher, `Some(false)` lower, `None` neither.
    pub fn higher_is_better(self) -> Option<bool> {
        match self {
            Direction::Higher => Some(true),
            Direction::Lower => Some(false),
            Direction::Neither => None,
        }
    }
}

/// A declared metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// Its name in `scores` (a family ends in `_K`: `K` stands for a positive whole number).
    pub name: &'static str,
    /// Which way it is better.
    pub direction: Direction,
    /// What it measures (and who writes it).
    pub doc: &'static str,
}

const fn m(name: &'static str, direction: Direction, doc: &'static str) -> Metric {
    Metric { name, direction, doc }
}

use Direction::{Higher, Neither};

/// Every metric a stage writes to `scores`.
pub static METRICS: &[Metric] = &[
    // Ranking (the `metrics` stage), STaRK's evaluator; graph QA's WebQSP also writes `hit1`.
    m("hit1", Higher, "share of queries whose top-ranked item is an answer (STaRK's evaluator; WebQSP answer hit@1)"),
    m("hit5", Higher, "share of queries with an answer in the top 5 (STaRK's evaluator)"),
    m("recall20", Higher, "share of a query's answers in the top 20, averaged (STaRK's evaluator)"),
    m("mrr", Higher, "mean reciprocal rank of the first answer (STaRK's evaluator)"),
    // The same four under MoR's evaluator (unretrieved candidates score 0): other numbers, other names.
    m("mor_hit1", Higher, "hit@1 under MoR's evaluator"),
    m("mor_hit5", Higher, "hit@5 under MoR's evaluator"),
    m("mor_recall20", Higher, "recall@20 under MoR's evaluator"),
    m("mor_mrr", Higher, "MRR under MoR's evaluator"),
    // TopoRAG.
    m("accuracy", Higher, "share of correct answers / node classes (TopoRAG node classification, graph QA)"),
    m("hits_at_K", Higher, "link prediction: share of true edges ranked above all but K−1 negatives (TopoRAG)"),
    m("bleu4", Higher, "mean sentence BLEU-4 of retrieved contexts against the target text (TopoRAG)"),
    m("bleu4_corpus", Higher, "corpus BLEU-4 of retrieved contexts (TopoRAG)"),
    m("rouge_l_f1", Higher, "mean ROUGE-L F1 of retrieved contexts (TopoRAG)"),
    m("minilm_cosine", Higher, "mean MiniLM cosine of retrieved contexts and targets (TopoRAG)"),
    // Graph QA.
    m("loose_hit", Higher, "WebQSP: the normalised answer is a substring of the top node's text"),
    m("answer_recall", Higher, "share of answer nodes the retrieved subgraph keeps (subgraphs)"),
    m("subgraph_nodes", Neither, "mean nodes per retrieved subgraph (subgraphs)"),
    m("subgraph_edges", Neither, "mean edges per retrieved subgraph (subgraphs)"),
    m("empty_graphs", Neither, "questions whose graph is empty (subgraphs)"),
];

/// The suffix of a standard deviation over seeds.
pub const STD_SUFFIX: &str = "_std";

/// A metric name that is not declared in [`METRICS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMetric(pub String);

impl fmt::Display for UnknownMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metric `{}` is not declared in tgrag_stages::shared::metric::METRICS", self.0)
    }
}

impl std::error::Error for UnknownMetric {}

/// The declaration of `name` itself (not of a `_std` name): exact, or a `_K` family.
fn declared(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| match m.name.strip_suffix("_K") {
        Some(stem) => name
            .strip_prefix(stem)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) && k.bytes().any(|b| b != b'0')),
        None => m.name == name,
    })
}

/// Whether `name` is a standard deviation over seeds of a declared metric (`accuracy_std`).
pub fn is_std(name: &str) -> bool {
    name.strip_suffix(STD_SUFFIX).is_some_and(|base| declared(base).is_some())
}

/// The declared metric `name` is, or is the standard deviation of.
pub fn lookup(name: &str) -> Result<&'static Metric, UnknownMetric> {
    declared(name).or_else(|| name.strip_suffix(STD_SUFFIX).and_then(declared)).ok_or_else(|| UnknownMetric(name.to_string()))
}

/// Which way `name` is better: its declaration's direction; [`Direction::Neither`] for a `_std`
/// name; an error for an undeclared name.
pub fn direction(name: &str) -> Result<Direction, UnknownMetric> {
    if is_std(name) {
        return Ok(Direction::Neither);
    }
    lookup(name).map(|m| m.direction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_written_metric_has_its_declared_direction() {
        // The metrics a synthetic run writes, with the direction each one is better in.
        for (name, want) in [
            ("hit1", Higher),
            ("hit5", Higher),
            ("recall20", Higher),
            ("mrr", Higher),
            ("mor_mrr", Higher),
            ("accuracy", Higher),
            ("hits_at_100", Higher),
            ("hits_at_7", Higher),
            ("bleu4", Higher),
            ("bleu4_corpus", Higher),
            ("rouge_l_f1", Higher),
            ("minilm_cosine", Higher),
            ("loose_hit", Higher),
            ("answer_recall", Higher),
            ("subgraph_nodes", Neither),
            ("empty_graphs", Neither),
            ("accuracy_std", Neither),
            ("hits_at_100_std", Neither),
        ] {
            assert_eq!(direction(name), Ok(want), "{name}");
        }
        assert_eq!(lookup("accuracy_std").map(|m| m.name), Ok("accuracy"));
        assert!(is_std("hit1_std") && !is_std("hit1") && !is_std("nodes_std"));
    }

    #[test]
    fn undeclared_names_are_errors_not_guesses() {
        // Names the old substring guess would have given a direction to.
        for name in ["train_loss", "hit_rate", "my_recall", "hits_at_", "hits_at_0", "hits_at_x", "hits_at_K", "nodes", "x_std", "_std"] {
            let e = direction(name).expect_err(name);
            assert_eq!(e, UnknownMetric(name.to_string()));
            assert!(e.to_string().contains(&format!("`{name}`")), "{e}");
        }
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
    }
}
