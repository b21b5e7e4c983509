//! The registry: every stage, in a valid execution order. The one module that names every stage
//! module (the runner, `tgrag stages` and the layout test read the list from here).

use crate::stage::Stage;
use crate::{evaluation, graphqa, ingest, kb, retrieval, toporag};

/// Every stage, in a valid execution order.
pub fn all() -> Vec<&'static dyn Stage> {
    vec![
        &ingest::Ingest,
        &kb::graph::GraphStage,
        &retrieval::bm25::Bm25Stage,
        &retrieval::dense::DenseStage,
        &kb::planning::PlanningStage,
        &kb::mor::MorStage,
        &kb::pasemiqa::PasemiqaStage,
        &toporag::toporag::ToporagStage,
        &graphqa::textgraphs::TextgraphsStage,
        &graphqa::subgraphs::SubgraphsStage,
        &graphqa::gretriever::GretrieverStage,
        &graphqa::mixrag::MixragStage,
        &evaluation::metrics::Metrics,
        &evaluation::report::ReportStage,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StageError;
    use crate::options::known;
    use crate::stage::{check_sizes, check_training_options, is_learning_rate, is_seed_list};

    #[test]
    fn sizes_beyond_the_limits_are_refused_before_a_stage_runs_and_defaults_pass() {
        for s in all() {
            assert!(s.check_config(&s.default_config()).is_ok(), "{}: default config", s.info().name);
        }
        let bm25 = all().into_iter().find(|s| s.info().name == "bm25").expect("bm25");
        let mut c = bm25.default_config();
        c["top_k"] = serde_json::json!(1_000_000_000_000u64);
        let e = bm25.check_config(&c).expect_err("huge top_k").to_string();
        assert!(e.contains("top_k must be at most 10000000, got 1000000000000"), "{e}");
        let dense = all().into_iter().find(|s| s.info().name == "dense").expect("dense");
        let mut c = dense.default_config();
        c["dim"] = serde_json::json!(10_000_000);
        assert!(dense.check_config(&c).expect_err("wide").to_string().contains("dim must be at most 65536"));
        // Seeds may be any u64.
        let mor = all().into_iter().find(|s| s.info().name == "mor").expect("mor");
        let mut c = mor.default_config();
        c["seed"] = serde_json::json!(u64::MAX);
        assert!(mor.check_config(&c).is_ok());
        // Nested options are checked too.
        assert!(
            check_sizes(&serde_json::json!({"traversal": {"candidates": 1u64 << 40}}), "")
                .expect_err("nested")
                .contains("traversal.candidates")
        );
    }

    fn refusal(stage: &str, key: &str, value: serde_json::Value) -> String {
        let s = all().into_iter().find(|s| s.info().name == stage).expect("stage");
        let mut c = s.default_config();
        assert!(c.get(key).is_some(), "{stage} has an option {key}");
        c[key] = value;
        match s.check_config(&c) {
            Err(e @ StageError::Config { .. }) => e.to_string(),
            other => panic!("{stage}.{key}: expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn every_learning_rate_is_a_finite_number_above_zero() {
        // Every learning-rate option of every stage, found by name in the defaults.
        let mut found = Vec::new();
        for s in all() {
            let d = s.default_config();
            for k in d.as_object().into_iter().flat_map(|o| o.keys()).filter(|k| is_learning_rate(k)) {
                found.push(format!("{}.{k}", s.info().name));
                for (bad, shown) in [
                    (serde_json::json!(0), "got 0"),
                    (serde_json::json!(-1), "got -1"),
                    (serde_json::json!(-0.001), "got -0.001"),
                    (serde_json::json!("nan"), "got \"nan\""),
                    (serde_json::json!("inf"), "got \"inf\""),
                    (serde_json::json!(null), "got null"),
                ] {
                    let e = refusal(s.info().name, k, bad);
                    assert!(
                        e.contains(&format!("stage `{}`: invalid configuration: {k} must be a finite number > 0, {shown}", s.info().name)),
                        "{e}"
                    );
                }
                // Large but finite passes the check: training reports its divergence.
                let mut c = d.clone();
                c[k.as_str()] = serde_json::json!(1e300);
                assert!(s.check_config(&c).is_ok(), "{}.{k}=1e300", s.info().name);
            }
        }
        assert_eq!(found, ["gretriever.lr", "gretriever.text_lr", "mixrag.lr"]);
        assert!(check_training_options(&serde_json::json!({"tune": {"lr": 0.0}}), "").expect_err("nested").starts_with("tune.lr must be"));
    }

    #[test]
    fn every_seed_list_holds_each_seed_once() {
        let mut found = Vec::new();
        for s in all() {
            let d = s.default_config();
            for k in d.as_object().into_iter().flat_map(|o| o.keys()).filter(|k| is_seed_list(k) && d[k.as_str()].is_array()) {
                found.push(format!("{}.{k}", s.info().name));
                let e = refusal(s.info().name, k, serde_json::json!([0, 3, 0]));
                assert!(
                    e.contains(&format!(
                        "stage `{}`: invalid configuration: {k} lists seed 0 more than once; every seed must be distinct",
                        s.info().name
                    )),
                    "{e}"
                );
                let mut c = d.clone();
                c[k.as_str()] = serde_json::json!([0, 3, 1]);
                assert!(s.check_config(&c).is_ok(), "{}.{k}: distinct seeds", s.info().name);
            }
        }
        assert_eq!(found, ["toporag.gnn_seeds", "gretriever.seeds", "mixrag.seeds"]);
        // A count named `seeds` is not a list.
        assert!(check_training_options(&serde_json::json!({"traversal": {"seeds": 3}}), "").is_ok());
    }

    /// The width options that `check_sizes` once knew by name are widths by type in every stage.
    #[test]
    fn every_width_option_of_every_stage_is_refused_above_the_limit() {
        for s in all() {
            let defaults = s.default_config();
            for k in
                ["dim", "dims", "hash_dim", "hidden", "planner_hidden", "head_hidden"].into_iter().filter(|k| defaults.get(k).is_some())
            {
                let mut c = defaults.clone();
                c[k] = serde_json::json!(65_537);
                let e = s.check_config(&c).expect_err(k).to_string();
                assert!(e.contains(&format!("{k} must be at most 65536, got 65537")), "{}: {e}", s.info().name);
            }
        }
    }

    #[test]
    fn every_stage_option_has_a_doc_comment() {
        let missing: Vec<String> = crate::all()
            .into_iter()
            .flat_map(|s| s.options().into_iter().filter(|o| o.doc.is_empty()).map(move |o| format!("{}.{}", s.info().name, o.name)))
            .collect();
        assert!(missing.is_empty(), "options without a doc comment: {missing:?}");
    }

    #[test]
    fn every_default_key_is_a_documented_option() {
        // The options list and the defaults the runner starts from name the same keys.
        for s in crate::all() {
            let opts = s.options();
            let d = s.default_config();
            for k in d.as_object().into_iter().flat_map(|o| o.keys()) {
                assert!(known(&opts, k), "{}.{k}: in the defaults but not among the options", s.info().name);
            }
        }
    }
}
