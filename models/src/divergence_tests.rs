//! Every trainer stops on a loss that is not finite: one short training per model family with a
//! learning rate of 1e300 (finite, so it passes the learning-rate check; the first optimiser step
//! turns the f32 weights into inf and NaN) fails with [`ModelError::Diverged`] naming the trainer's
//! model, the seed it was given and an early epoch, instead of returning a curve of NaN and the
//! metrics of a broken model. The same trainings with a learning rate of 0, −1 or NaN are refused
//! before any work ([`ModelError::Config`]).

use burn::tensor::Device;

use crate::error::{ModelError, Result};

const HUGE: f64 = 1e300;

/// `r` failed with a divergence of `model` under `seed`, at epoch 1 or 2 (a trainer whose only
/// check after the first step is the next epoch's training loss stops at 2).
fn diverged<T>(r: Result<T>, model: &str, seed: u64) {
    match r {
        Err(e @ ModelError::Diverged { .. }) => {
            let ModelError::Diverged { model: m, seed: s, epoch, loss, .. } = &e else { unreachable!() };
            assert_eq!((m.as_str(), *s), (model, seed), "{e}");
            assert!((1..=2).contains(epoch), "{e}");
            assert!(!loss.is_finite(), "{e}");
            let text = e.to_string();
            assert!(text.starts_with(&format!("{model}, seed {seed}: the ")), "{text}");
            assert!(text.contains(&format!(" at epoch {epoch}: training diverged")), "{text}");
            assert!(e.is_config());
        }
        Err(e) => panic!("{model}: expected a divergence, got {e}"),
        Ok(_) => panic!("{model}: training on a learning rate of {HUGE} succeeded"),
    }
}

/// `train(lr)` is refused before any work for every learning rate that is not a finite number > 0.
fn bad_rates_refused<T>(model: &str, train: impl Fn(f64) -> Result<T>) {
    for lr in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        match train(lr) {
            Err(e @ ModelError::Config { .. }) => {
                assert!(e.to_string().starts_with(&format!("{model}: the learning rate must be a finite number > 0")), "{e}")
            }
            Err(e) => panic!("{model}, lr {lr}: expected a configuration error, got {e}"),
            Ok(_) => panic!("{model}: trained with lr {lr}"),
        }
    }
}

#[test]
fn node_classifiers_and_link_predictors_stop_on_a_non_finite_loss_on_both_engines() {
    use crate::gnn::fast::FastGraph;
    use crate::gnn::{GnnKind, LinkPredConfig, LinkPredData, NodeClassConfig, NodeClassData};
    let n = 40;
    let (x, labels, edges) = crate::gnn::node::tests::planted(n, 0.6);
    let idx: Vec<u32> = (0..n as u32).collect();
    let data = NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..20], val: &idx[20..30], test: &idx[30..] };
    let g = FastGraph::new(n, &edges);
    for kind in GnnKind::ALL {
        let name = format!("{} node classifier", kind.as_str());
        let cfg = |lr: f64| NodeClassConfig { max_epochs: 5, patience: 10, hidden: 8, lr, seed: 11, ..NodeClassConfig::default() };
        diverged(crate::gnn::train_node_classifier(kind, n, &edges, &data, &cfg(HUGE), &Device::flex()), &name, 11);
        diverged(crate::gnn::fast::train_node_classifier(kind, n, &g, &data, &cfg(HUGE)), &name, 11);
        bad_rates_refused(&name, |lr| crate::gnn::fast::train_node_classifier(kind, n, &g, &data, &cfg(lr)));
        bad_rates_refused(&name, |lr| crate::gnn::train_node_classifier(kind, n, &edges, &data, &cfg(lr), &Device::flex()));
    }
    let (train, test) = edges.split_at(edges.len() * 4 / 5);
    let ld = LinkPredData { features: &x, dim: 4, message: train, val_pos: test, val_neg: train, test_pos: test, test_neg: train };
    let lcfg = |lr: f64| LinkPredConfig { max_epochs: 5, patience: 10, hits_k: 5, hidden: 8, lr, seed: 12 };
    let lg = FastGraph::new(n, train);
    diverged(crate::gnn::train_link_predictor(n, &ld, &lcfg(HUGE), &Device::flex()), "link predictor", 12);
    diverged(crate::gnn::fast::train_link_predictor(n, &lg, &ld, &lcfg(HUGE)), "link predictor", 12);
    bad_rates_refused("link predictor", |lr| crate::gnn::fast::train_link_predictor(n, &lg, &ld, &lcfg(lr)));
    bad_rates_refused("link predictor", |lr| crate::gnn::train_link_predictor(n, &ld, &lcfg(lr), &Device::flex()));
}

#[test]
fn planner_and_tagger_stop_on_a_non_finite_loss() {
    use crate::planner::{PlannerConfig, PlannerShape, train_planner};
    let (train, val) = (crate::planner::tests::planted(32, 1), crate::planner::tests::planted(16, 2));
    let shape = PlannerShape { dim: 8, vocab: 7, hidden: 8, max_len: 8 };
    let cfg = |lr: f64| PlannerConfig { hidden: 8, epochs: 3, batch: 16, lr, max_len: 8, seed: 3 };
    diverged(train_planner(shape, &train, &val, &cfg(HUGE), &Device::flex()), "planner", 3);
    bad_rates_refused("planner", |lr| train_planner(shape, &train, &val, &cfg(lr), &Device::flex()));
    use crate::tagger::{TaggerConfig, TaggerShape, train_tagger};
    let (train, val) = (crate::tagger::tests::planted(40, 1), crate::tagger::tests::planted(20, 2));
    let shape = TaggerShape { buckets: 64, window: 2, qdim: 2, types: 2, hidden: 8 };
    let cfg = |lr: f64| TaggerConfig { epochs: 3, batch: 20, lr, seed: 4 };
    diverged(train_tagger(shape, &train, &val, &cfg(HUGE), &Device::flex()), "tagger", 4);
    bad_rates_refused("tagger", |lr| train_tagger(shape, &train, &val, &cfg(lr), &Device::flex()));
}

#[test]
fn reranker_stops_on_a_non_finite_loss() {
    use crate::reranker::{Features, Head, RerankerConfig, train_reranker};
    let (train, val) = (crate::reranker::tests::groups(16, 1), crate::reranker::tests::groups(8, 2));
    let cfg = |lr: f64| RerankerConfig { head: Head::Paper, epochs: 3, negatives: 7, batch: 8, lr, seed: 5 };
    diverged(train_reranker(4, &train, &val, Features::default(), &cfg(HUGE), &Device::flex()), "reranker", 5);
    bad_rates_refused("reranker", |lr| train_reranker(4, &train, &val, Features::default(), &cfg(lr), &Device::flex()));
}

#[test]
fn graph_qa_heads_and_mixrag_stop_on_a_non_finite_loss() {
    use crate::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
    use crate::graphqa::{HeadKind, QaConfig, QaShape, train};
    let (tr, va) = (crate::graphqa::tests::planted(24, 1), crate::graphqa::tests::planted(12, 2));
    let qa = |lr: f64| QaConfig {
        train: crate::train::TrainConfig { lr, epochs: 3, patience: 5, batch: 12, ..Default::default() },
        head_hidden: 8,
        seed: 6,
    };
    for kind in [EncoderKind::Gt, EncoderKind::Gcn] {
        let enc = EncoderShape { kind, in_dim: 4, edge_dim: 2, hidden: 8, layers: 1, heads: 2, pooling: Pooling::Mean };
        let shape = QaShape { encoder: Some(enc), question_dim: 2, head: HeadKind::Classify { classes: 2 }, head_hidden: 8 };
        diverged(train(shape, &tr, &va, 4, 2, &qa(HUGE), &Device::flex()), "graph QA model", 6);
        bad_rates_refused("graph QA model", |lr| train(shape, &tr, &va, 4, 2, &qa(lr), &Device::flex()));
    }
    use crate::gnn::mixrag::MixConfig;
    let shape = crate::gnn::mixrag::tests::planted_shape(8, 5);
    let mix = |lr: f64| MixConfig { qa: qa(lr), ..MixConfig::default() };
    diverged(crate::gnn::mixrag::train(shape, &tr, &va, &mix(HUGE), &Device::flex()), "MixRAG", 6);
    bad_rates_refused("MixRAG", |lr| crate::gnn::mixrag::train(shape, &tr, &va, &mix(lr), &Device::flex()));
}

#[test]
fn minilm_top_layers_stop_on_a_non_finite_loss() {
    let (_, _, bert) = crate::minilm::tests::tiny_bert(3);
    let seqs: Vec<Vec<u32>> = (0..24u32).map(|i| (0..4 + i % 3).map(|j| 6 + (i * 7 + j) % 17).collect()).collect();
    let labels: Vec<u32> = (0..24).map(|i| i % 2).collect();
    let states = bert.hidden_states(&seqs, 1, crate::minilm::EncodeOptions::default(), &|_| {}).expect("states");
    let tune = |lr: f64| {
        let cfg = crate::minilm::tune::TuneConfig { layers: 1, epochs: 3, batch: 8, lr, seed: 8 };
        crate::minilm::tune::train_top(
            &bert,
            2,
            (&states[..16], &labels[..16]),
            (&states[16..], &labels[16..]),
            &cfg,
            &Device::flex(),
            &|_| {},
        )
    };
    diverged(tune(HUGE), "MiniLM top layers", 8);
    bad_rates_refused("MiniLM top layers", tune);
}
