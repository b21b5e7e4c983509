//! The wgpu code path of every trained model, on whatever adapter wgpu finds (in CI, Mesa's
//! software Vulkan, which `make test` installs): one short training per model family on the GPU
//! next to the same training on the CPU. The weights and dropout masks come from the same seeded
//! stream, so the first epoch's training loss is the same function of the same weights on both
//! devices: they agree within 1e-3 (the backends sum in different orders), and the GPU's runs
//! are finite and improve. Skipped (failed under `CI=true`) where wgpu finds no adapter at all.

use burn::tensor::{Device, DeviceKind};

use crate::device::{hardware_adapter, software_adapter};

/// The wgpu device, or `None` (with a message) where there is no adapter.
fn gpu() -> Option<Device> {
    let adapter = hardware_adapter().or_else(software_adapter);
    match adapter {
        Some(a) => {
            eprintln!("GPU tests on {} ({}, {})", a.name, a.backend, a.kind);
            Some(Device::wgpu(if a.kind == "software" { DeviceKind::DefaultDevice } else { a.device_kind.clone() }))
        }
        None => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true: wgpu finds no adapter (the Makefile installs mesa-vulkan-drivers)"
            );
            eprintln!("skipped: wgpu finds no adapter (install mesa-vulkan-drivers for the software one)");
            None
        }
    }
}

/// The first losses agree, and the GPU run is finite.
fn same_start(what: &str, cpu: &[f64], gpu: &[f64]) {
    assert!(!cpu.is_empty() && cpu.len() == gpu.len(), "{what}: {cpu:?} vs {gpu:?}");
    assert!(
        (cpu[0] - gpu[0]).abs() < 1e-3 * cpu[0].abs().max(1.0),
        "{what}: first-epoch loss {} on the CPU, {} on the GPU",
        cpu[0],
        gpu[0]
    );
    assert!(gpu.iter().all(|x| x.is_finite()), "{what}: {gpu:?}");
}

#[test]
fn every_model_family_trains_on_the_gpu_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let cpu = Device::flex();
    // GNNs: node classification (GCN, SAGE, MLP) and link prediction.
    {
        use crate::gnn::{GnnKind, LinkPredConfig, LinkPredData, NodeClassConfig, NodeClassData};
        let n = 60;
        let (x, labels, edges) = crate::gnn::node::tests::planted(n, 0.6);
        let idx: Vec<u32> = (0..n as u32).collect();
        let data =
            NodeClassData { features: &x, dim: 4, labels: &labels, classes: 2, train: &idx[..30], val: &idx[30..45], test: &idx[45..] };
        let cfg = NodeClassConfig { max_epochs: 3, patience: 10, hidden: 16, ..NodeClassConfig::default() };
        for kind in GnnKind::ALL {
            let loss = |dev: &Device| -> Vec<f64> {
                crate::gnn::train_node_classifier(kind, n, &edges, &data, &cfg, dev)
                    .expect("train")
                    .curve
                    .iter()
                    .map(|c| c.train_loss)
                    .collect()
            };
            same_start(kind.as_str(), &loss(&cpu), &loss(&gpu));
        }
        let (train, test) = edges.split_at(edges.len() * 4 / 5);
        let ld = LinkPredData { features: &x, dim: 4, message: train, val_pos: test, val_neg: train, test_pos: test, test_neg: train };
        let lcfg = LinkPredConfig { max_epochs: 2, patience: 5, hits_k: 5, hidden: 16, ..LinkPredConfig::default() };
        let loss = |dev: &Device| -> Vec<f64> {
            crate::gnn::train_link_predictor(n, &ld, &lcfg, dev).expect("train").curve.iter().map(|c| c.train_loss).collect()
        };
        same_start("link prediction", &loss(&cpu), &loss(&gpu));
    }
    // The planner (MoR, PASemiQA, train-planner) and the restriction tagger.
    {
        use crate::planner::{PlannerConfig, PlannerShape, train_planner};
        let (train, val) = (crate::planner::tests::planted(32, 1), crate::planner::tests::planted(16, 2));
        let shape = PlannerShape { dim: 8, vocab: 7, hidden: 16, max_len: 8 };
        let cfg = PlannerConfig { hidden: 16, epochs: 2, batch: 16, lr: 5e-3, max_len: 8, seed: 3 };
        let loss = |dev: &Device| -> Vec<f64> {
            train_planner(shape, &train, &val, &cfg, dev).expect("train").1.iter().map(|c| c.train_loss).collect()
        };
        same_start("planner", &loss(&cpu), &loss(&gpu));
        use crate::tagger::{TaggerConfig, TaggerShape, train_tagger};
        let (train, val) = (crate::tagger::tests::planted(40, 1), crate::tagger::tests::planted(20, 2));
        let shape = TaggerShape { buckets: 64, window: 2, qdim: 2, types: 2, hidden: 16 };
        let cfg = TaggerConfig { epochs: 2, batch: 20, lr: 5e-3, seed: 4 };
        let loss = |dev: &Device| -> Vec<f64> {
            train_tagger(shape, &train, &val, &cfg, dev).expect("train").1.iter().map(|c| c.train_loss).collect()
        };
        same_start("tagger", &loss(&cpu), &loss(&gpu));
    }
    // MoR's structure-aware reranker.
    {
        use crate::reranker::{Features, Head, RerankerConfig, train_reranker};
        let (train, val) = (crate::reranker::tests::groups(16, 1), crate::reranker::tests::groups(8, 2));
        let cfg = RerankerConfig { head: Head::Paper, epochs: 2, negatives: 7, batch: 8, lr: 3e-3, seed: 5 };
        let loss = |dev: &Device| -> Vec<f64> {
            train_reranker(4, &train, &val, Features::default(), &cfg, dev).expect("train").1.iter().map(|c| c.train_loss).collect()
        };
        same_start("reranker", &loss(&cpu), &loss(&gpu));
    }
    // GraphQA: G-Retriever's graph transformer and GCN with the classification head.
    {
        use crate::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
        use crate::graphqa::{HeadKind, QaConfig, QaShape, train};
        let (tr, va) = (crate::graphqa::tests::planted(24, 1), crate::graphqa::tests::planted(12, 2));
        for kind in [EncoderKind::Gt, EncoderKind::Gcn] {
            let enc = EncoderShape { kind, in_dim: 4, edge_dim: 2, hidden: 8, layers: 2, heads: 2, pooling: Pooling::Mean };
            let shape = QaShape { encoder: Some(enc), question_dim: 2, head: HeadKind::Classify { classes: 2 }, head_hidden: 8 };
            let cfg = QaConfig {
                train: crate::train::TrainConfig { lr: 5e-3, epochs: 2, patience: 5, batch: 12, ..Default::default() },
                head_hidden: 8,
                ..QaConfig::default()
            };
            let loss = |dev: &Device| -> Vec<f64> {
                train(shape, &tr, &va, 4, 2, &cfg, dev).expect("train").1.iter().map(|c| c.train_loss).collect()
            };
            same_start(&format!("graphqa {}", kind.as_str()), &loss(&cpu), &loss(&gpu));
        }
    }
    // MixRAG: the three experts, the query-aware GNN and the node-wise gate (one batch per epoch,
    // so the first epoch's loss is that of the initial weights; the Gumbel noise is drawn on the host).
    {
        use crate::gnn::mixrag::{MixConfig, train};
        use crate::graphqa::QaConfig;
        let (tr, va) = (crate::graphqa::tests::planted(24, 1), crate::graphqa::tests::planted(12, 2));
        let shape = crate::gnn::mixrag::tests::planted_shape(8, 5);
        let mut cfg = MixConfig::default();
        cfg.qa = QaConfig {
            train: crate::train::TrainConfig { lr: 5e-3, epochs: 2, patience: 5, batch: tr.len(), ..cfg.qa.train },
            head_hidden: 8,
            ..cfg.qa
        };
        let loss =
            |dev: &Device| -> Vec<f64> { train(shape, &tr, &va, &cfg, dev).expect("train").1.iter().map(|c| c.train_loss).collect() };
        same_start("mixrag", &loss(&cpu), &loss(&gpu));
    }
    // MiniLM's tuned top layers (the text head and train-planner --tune-layers), on a tiny BERT.
    {
        let (_, _, bert) = crate::minilm::tests::tiny_bert(3);
        let seqs: Vec<Vec<u32>> = (0..24u32).map(|i| (0..4 + i % 3).map(|j| 6 + (i * 7 + j) % 17).collect()).collect();
        let labels: Vec<u32> = (0..24).map(|i| i % 2).collect();
        let states = bert.hidden_states(&seqs, 1, crate::minilm::EncodeOptions::default(), &|_| {}).expect("states");
        let tcfg = crate::minilm::tune::TuneConfig { layers: 1, epochs: 2, batch: 8, lr: 1e-2, seed: 4 };
        let loss = |dev: &Device| -> Vec<f64> {
            crate::minilm::tune::train_top(&bert, 2, (&states[..16], &labels[..16]), (&states[16..], &labels[16..]), &tcfg, dev, &|_| {})
                .expect("train")
                .2
                .iter()
                .map(|c| c.train_loss)
                .collect()
        };
        same_start("minilm top layers", &loss(&cpu), &loss(&gpu));
    }
}
