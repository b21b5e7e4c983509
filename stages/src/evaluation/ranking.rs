//! Ranking metrics with STaRK's evaluator semantics, computed without materialising the full
//! candidate list: candidates a run did not retrieve share one score (STaRK: min(retrieved) − 1;
//! MoR's evaluator: 0), every tie is broken by node id ascending, and ranks are over all candidates.

use serde::{Deserialize, Serialize};

use crate::shared::run::by_score_then_id;

/// How unretrieved candidates are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EvalMode {
    /// STaRK: min(retrieved scores) − 1 (or 0 when nothing was retrieved).
    #[default]
    Stark,
    /// MoR's evaluator: 0.
    Mor,
}

impl EvalMode {
    /// Both evaluators.
    pub const ALL: [EvalMode; 2] = [EvalMode::Stark, EvalMode::Mor];

    /// The evaluator's name in reports (`STaRK`, `MoR`).
    pub fn label(self) -> &'static str {
        match self {
            EvalMode::Stark => "STaRK",
            EvalMode::Mor => "MoR",
        }
    }

    /// The `scores` metric names of hit@1, hit@5, recall@20 and MRR under this evaluator: the
    /// plain names for STaRK's, `mor_`-prefixed ones for MoR's (other numbers, so other metrics;
    /// the mode travels in `scores` and a report never reads the stage's configuration).
    pub fn metrics(self) -> [&'static str; 4] {
        match self {
            EvalMode::Stark => ["hit1", "hit5", "recall20", "mrr"],
            EvalMode::Mor => ["mor_hit1", "mor_hit5", "mor_recall20", "mor_mrr"],
        }
    }

    /// The evaluator whose ranking metrics include `metric`, and its position in [`EvalMode::metrics`].
    pub fn of_metric(metric: &str) -> Option<(EvalMode, usize)> {
        EvalMode::ALL.into_iter().find_map(|m| m.metrics().iter().position(|x| *x == metric).map(|k| (m, k)))
    }
}

/// Metrics of one query.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueryMetrics {
    pub hit1: f64,
    pub hit5: f64,
    pub recall20: f64,
    pub mrr: f64,
}

/// The candidate set: the ids `0..n`, or any sorted, distinct node ids.
#[derive(Debug, Clone)]
pub enum Candidates {
    /// `0..n`, never materialised (n may be 2³² − 1).
    Range(u32),
    /// Sorted, distinct ids.
    Sorted(Vec<u32>),
}

impl Candidates {
    /// Candidates from any list of ids.
    pub fn new(mut ids: Vec<u32>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        Candidates::Sorted(ids)
    }
    /// `0..n`.
    pub fn range(n: u32) -> Self {
        Candidates::Range(n)
    }
    pub fn contains(&self, id: u32) -> bool {
        match self {
            Candidates::Range(n) => id < *n,
            Candidates::Sorted(s) => s.binary_search(&id).is_ok(),
        }
    }
    /// Number of candidates with id < `id`.
    fn count_below(&self, id: u32) -> usize {
        match self {
            Candidates::Range(n) => id.min(*n) as usize,
            Candidates::Sorted(s) => s.partition_point(|&x| x < id),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Candidates::Range(n) => *n as usize,
            Candidates::Sorted(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 1-based ranks of `answers` in the full candidate ranking of `retrieved` (`None` for answers that
/// are not candidates).
pub fn answer_ranks(retrieved: &[(u32, f32)], answers: &[u32], cands: &Candidates, mode: EvalMode) -> Vec<Option<usize>> {
    // Keep retrieved candidates only; one score per node (the best, if a run repeats a node).
    let mut r: Vec<(u32, f32)> = retrieved.iter().copied().filter(|&(n, _)| cands.contains(n)).collect();
    // By id first (best score first within an id), for the dedup; not the ranking order.
    r.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    r.dedup_by_key(|x| x.0);
    let unret_score = match mode {
        EvalMode::Stark => r.iter().map(|x| x.1).min_by(f32::total_cmp).map_or(0.0, |m| m - 1.0),
        EvalMode::Mor => 0.0,
    };
    let by_id: Vec<u32> = r.iter().map(|x| x.0).collect();
    let mut ranked = r.clone();
    ranked.sort_unstable_by(by_score_then_id);
    let n_unret = cands.len() - r.len();
    // Unretrieved candidates ahead of (score s, id a): those with U > s, or U == s and id < a.
    let unret_ahead = |s: f32, a: u32| -> usize {
        if unret_score > s {
            n_unret
        } else if unret_score == s {
            cands.count_below(a) - by_id.partition_point(|&x| x < a)
        } else {
            0
        }
    };
    answers
        .iter()
        .map(|&a| {
            if !cands.contains(a) {
                return None;
            }
            let (s, ret_ahead) = match by_id.binary_search(&a) {
                Ok(i) => {
                    let s = r[i].1;
                    (s, ranked.partition_point(|x| x.1 > s || (x.1 == s && x.0 < a)))
                }
                Err(_) => {
                    let s = unret_score;
                    (s, ranked.partition_point(|x| x.1 > s || (x.1 == s && x.0 < a)))
                }
            };
            Some(ret_ahead + unret_ahead(s, a) + 1)
        })
        .collect()
}

/// hit@1, hit@5, recall@20 and MRR of one query (all 0 when it has no answer).
pub fn query_metrics(retrieved: &[(u32, f32)], answers: &[u32], cands: &Candidates, mode: EvalMode) -> QueryMetrics {
    let mut answers = answers.to_vec();
    answers.sort_unstable();
    answers.dedup();
    if answers.is_empty() {
        return QueryMetrics::default();
    }
    let ranks = answer_ranks(retrieved, &answers, cands, mode);
    let best = ranks.iter().flatten().copied().min();
    let within = |k: usize| ranks.iter().flatten().filter(|&&r| r <= k).count();
    QueryMetrics {
        hit1: f64::from(u8::from(best.is_some_and(|b| b <= 1))),
        hit5: f64::from(u8::from(best.is_some_and(|b| b <= 5))),
        recall20: within(20) as f64 / answers.len() as f64,
        mrr: best.map_or(0.0, |b| 1.0 / b as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: materialise every candidate's score and sort, as STaRK's evaluator does.
    fn brute(retrieved: &[(u32, f32)], answers: &[u32], n: u32, mode: EvalMode) -> QueryMetrics {
        let min = retrieved.iter().map(|x| x.1).fold(f32::INFINITY, f32::min);
        let u = match mode {
            EvalMode::Stark => {
                if retrieved.is_empty() {
                    0.0
                } else {
                    min - 1.0
                }
            }
            EvalMode::Mor => 0.0,
        };
        let mut all: Vec<(u32, f32)> = (0..n).map(|i| (i, u)).collect();
        for &(i, s) in retrieved {
            all[i as usize].1 = s;
        }
        all.sort_by(by_score_then_id);
        let rank = |a: u32| all.iter().position(|x| x.0 == a).map(|p| p + 1);
        let ranks: Vec<usize> = answers.iter().filter_map(|&a| rank(a)).collect();
        let best = ranks.iter().copied().min();
        QueryMetrics {
            hit1: f64::from(u8::from(best == Some(1))),
            hit5: f64::from(u8::from(best.is_some_and(|b| b <= 5))),
            recall20: ranks.iter().filter(|&&r| r <= 20).count() as f64 / answers.len() as f64,
            mrr: best.map_or(0.0, |b| 1.0 / b as f64),
        }
    }

    #[test]
    fn matches_materialised_ranking_on_random_runs() {
        let mut rng = tgrag_datasets::rng::Rng::new(5);
        for case in 0..500 {
            let n = 1 + rng.below(60) as u32;
            let k = rng.below(n as usize + 1);
            let ids = rng.sample_distinct(n as usize, k);
            // Few distinct scores, some negative, to exercise ties and the MoR 0-score block.
            let retrieved: Vec<(u32, f32)> = ids.iter().map(|&i| (i as u32, (rng.below(7) as f32) - 2.0)).collect();
            let na = 1 + rng.below(4);
            let answers: Vec<u32> = rng.sample_distinct(n as usize, na).into_iter().map(|a| a as u32).collect();
            for mode in [EvalMode::Stark, EvalMode::Mor] {
                let got = query_metrics(&retrieved, &answers, &Candidates::range(n), mode);
                let want = brute(&retrieved, &answers, n, mode);
                assert_eq!(got, want, "case {case} mode {mode:?} n {n} run {retrieved:?} answers {answers:?}");
                // The unmaterialised range and the same ids as a list rank alike.
                assert_eq!(query_metrics(&retrieved, &answers, &Candidates::new((0..n).collect()), mode), want);
            }
        }
    }

    #[test]
    fn matches_ranking_metrics_fixture() {
        use arrow::array::AsArray;
        use arrow::datatypes::{DataType, Float64Type, UInt32Type};
        use std::collections::HashMap;
        let dir = crate::shared::test_support::fixture("ranking_metrics");
        let read = |f: &str| tgrag_schemas::io::read_parquet(&dir.join(f)).expect("fixture");
        let col =
            |b: &arrow::array::RecordBatch, c: &str, t: DataType| arrow::compute::cast(b.column_by_name(c).expect(c), &t).expect("cast");
        let run = read("run.parquet");
        let (rq, rn, rs) =
            (col(&run, "qid", DataType::UInt32), col(&run, "node_id", DataType::UInt32), col(&run, "score", DataType::Float32));
        let (rq, rn, rs) =
            (rq.as_primitive::<UInt32Type>(), rn.as_primitive::<UInt32Type>(), rs.as_primitive::<arrow::datatypes::Float32Type>());
        let mut runs: HashMap<u32, Vec<(u32, f32)>> = HashMap::new();
        for i in 0..run.num_rows() {
            runs.entry(rq.value(i)).or_default().push((rn.value(i), rs.value(i)));
        }
        let qrels = read("qrels.parquet");
        let (aq, an) = (col(&qrels, "qid", DataType::UInt32), col(&qrels, "node_id", DataType::UInt32));
        let (aq, an) = (aq.as_primitive::<UInt32Type>(), an.as_primitive::<UInt32Type>());
        let mut gold: HashMap<u32, Vec<u32>> = HashMap::new();
        for i in 0..qrels.num_rows() {
            gold.entry(aq.value(i)).or_default().push(an.value(i));
        }
        let m = read("metrics.parquet");
        let q = col(&m, "qid", DataType::UInt32);
        let q = q.as_primitive::<UInt32Type>();
        let want: Vec<_> = ["hit1", "hit5", "recall20", "mrr"].iter().map(|c| col(&m, c, DataType::Float64)).collect();
        let cands = Candidates::range(1000);
        for i in 0..m.num_rows() {
            let qid = q.value(i);
            let got = query_metrics(runs.get(&qid).map_or(&[][..], Vec::as_slice), &gold[&qid], &cands, EvalMode::Stark);
            let w: Vec<f64> = want.iter().map(|a| a.as_primitive::<Float64Type>().value(i)).collect();
            for (name, g, w) in
                [("hit1", got.hit1, w[0]), ("hit5", got.hit5, w[1]), ("recall20", got.recall20, w[2]), ("mrr", got.mrr, w[3])]
            {
                assert!((g - w).abs() < 1e-9, "query {qid} {name}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn hand_computed_case() {
        // Candidates 0..10; run ranks 7 (0.9), 3 (0.5); answers {3, 8}.
        // STaRK: 3 is rank 2; 8 unretrieved: after 7, 3 and the unretrieved ids 0,1,2,4,5,6 → rank 9.
        let m = query_metrics(&[(7, 0.9), (3, 0.5)], &[3, 8], &Candidates::range(10), EvalMode::Stark);
        assert_eq!(m, QueryMetrics { hit1: 0.0, hit5: 1.0, recall20: 1.0, mrr: 0.5 });
        assert_eq!(answer_ranks(&[(7, 0.9), (3, 0.5)], &[3, 8], &Candidates::range(10), EvalMode::Stark), vec![Some(2), Some(9)]);
        // No answers → all zero.
        assert_eq!(query_metrics(&[(1, 1.0)], &[], &Candidates::range(3), EvalMode::Stark), QueryMetrics::default());
    }
}
