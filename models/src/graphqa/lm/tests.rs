//! The language-model answer path: the prompt layout by hand, and on graphs whose class only an
//! edge carries, that the graph token reaches a frozen language model (it learns the rule) while
//! the text alone and a learned prompt cannot.

use burn::tensor::Device;

use super::*;
use crate::gnn::encoders::{EncoderKind, Pooling};
use crate::graphqa::tests::planted;
use crate::minilm::tests::tiny_bert;

const LAYOUT: Layout = Layout { bos: 1, sep: 2, desc_budget: 4, max_len: 16, with_desc: true };

#[test]
fn the_prompt_is_in_g_retrievers_order() {
    let desc = [10, 11, 12, 13, 14, 15];
    // [bos] soft [desc ≤ 4] [sep] question [sep]
    let (ids, slots) = layout(&LAYOUT, 1, &desc, &[20, 21]).expect("layout");
    assert_eq!(ids, vec![1, 1, 10, 11, 12, 13, 2, 20, 21, 2]);
    assert_eq!(slots, vec![1]);
    // The graph text gives way to a long question; the question is whole.
    let q: Vec<u32> = (30..40).collect();
    let (ids, _) = layout(&LAYOUT, 2, &desc, &q).expect("layout");
    assert_eq!(ids.len(), 16);
    // 16 positions − (bos, 2 soft, sep, 10 question pieces, sep) leave one for the graph text.
    assert_eq!(&ids[..4], &[1, 1, 1, 10]);
    assert_eq!(&ids[4..], &[2, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 2]);
    // GraphToken: no graph text; no soft token: none.
    let (ids, slots) = layout(&Layout { with_desc: false, ..LAYOUT }, 1, &desc, &[20]).expect("layout");
    assert_eq!((ids, slots), (vec![1, 1, 2, 20, 2], vec![1]));
    assert_eq!(layout(&LAYOUT, 0, &desc[..1], &[20]).expect("layout").0, vec![1, 10, 2, 20, 2]);
    // A question that cannot fit is refused, never cut.
    let long: Vec<u32> = (0..14).collect();
    assert!(layout(&LAYOUT, 1, &desc, &long).is_err());
}

/// The planted graphs (class told by one edge feature) with uninformative text.
fn examples(n: usize, seed: u64) -> Vec<LmExample> {
    let mut rng = Stream(seed ^ 77);
    planted(n, seed)
        .into_iter()
        .map(|qa| {
            let desc = (0..3 + rng.below(4)).map(|_| 5 + rng.below(17) as u32).collect();
            LmExample { qa, desc, question: vec![6, 7] }
        })
        .collect()
}

fn shape(soft: Soft, tuning: Tuning) -> LmQaShape {
    let enc = EncoderShape { kind: EncoderKind::Gt, in_dim: 4, edge_dim: 2, hidden: 16, layers: 2, heads: 2, pooling: Pooling::Mean };
    LmQaShape {
        encoder: Some(enc),
        mix: None,
        soft,
        tuning,
        projector_hidden: 16,
        projector_zero: false,
        head_token: false,
        classes: 2,
        layout: LAYOUT,
    }
}

fn kept(curve: &[QaEpoch], best: u32) -> f64 {
    curve.iter().find(|c| c.epoch == best).expect("kept epoch").val_metric
}

#[test]
fn the_graph_token_reaches_a_frozen_language_model_and_the_text_alone_cannot() {
    let (_, _, bert) = tiny_bert(21);
    let dev = Device::flex();
    let (tr, va) = (examples(160, 1), examples(60, 2));
    let cfg = TrainConfig { lr: 5e-3, epochs: 25, patience: 25, batch: 16, ..TrainConfig::default() };
    let g = shape(Soft::Graph, Tuning::Frozen);
    let (model, curve, best) =
        train(host_engine(&dev), &bert, &g, &tr, &va, Rates { cfg: &cfg, side: None }, (0, None), &dev).expect("train");
    let acc = kept(&curve, best);
    assert!(acc >= 0.9, "graph token, frozen model: validation accuracy {acc} ({curve:?})");
    assert_eq!(model.lm_trained_parameters(), 0, "frozen");
    let pred = predict(&model, &g, &va, 1.0, 7, &dev).expect("predict");
    let right = va.iter().zip(&pred).filter(|(e, p)| e.qa.target == Target::Class(**p)).count() as f64 / va.len() as f64;
    assert!((right - acc).abs() < 1e-9, "predict agrees with the kept epoch: {right} vs {acc}");
    let (_, again, _) = train(host_engine(&dev), &bert, &g, &tr, &va, Rates { cfg: &cfg, side: None }, (0, None), &dev).expect("train");
    assert_eq!(curve, again, "same seed, same curve");
    for soft in [Soft::None, Soft::Prompt { tokens: 2 }] {
        let (_, c, b) = train(
            host_engine(&dev),
            &bert,
            &shape(soft, Tuning::Lora { rank: 2, alpha: 4.0 }),
            &tr,
            &va,
            Rates { cfg: &cfg, side: None },
            (0, None),
            &dev,
        )
        .expect("train");
        assert!(kept(&c, b) <= 0.65, "{soft:?}: the text carries nothing, validation accuracy {}", kept(&c, b));
    }
    assert!(LmQa::new(&bert, &LmQaShape { encoder: None, ..g }, 0, &dev).is_err(), "a graph token needs an encoder");
    assert!(LmQa::new(&bert, &shape(Soft::Prompt { tokens: 0 }, Tuning::Frozen), 0, &dev).is_err());
}

/// MixRAG's gated experts as the soft token reach a frozen language model too, and learn the rule.
#[test]
fn mixrags_soft_prompt_reaches_a_frozen_language_model() {
    let (_, _, bert) = tiny_bert(21);
    let dev = Device::flex();
    let (tr, va) = (examples(160, 1), examples(60, 2));
    let cfg = TrainConfig { lr: 5e-3, epochs: 20, patience: 20, batch: 16, ..TrainConfig::default() };
    let mix = MixSource { shape: crate::gnn::mixrag::tests::planted_shape(16, 20), tau_start: 1.0, tau_end: 0.1 };
    let s = LmQaShape { encoder: None, mix: Some(mix), ..shape(Soft::Mix, Tuning::Frozen) };
    let (model, curve, best) =
        train(host_engine(&dev), &bert, &s, &tr, &va, Rates { cfg: &cfg, side: None }, (0, None), &dev).expect("train");
    let acc = kept(&curve, best);
    assert!(acc >= 0.9, "MixRAG token, frozen model: validation accuracy {acc} ({curve:?})");
    let tau = temperature(&s, cfg.epochs, best as usize);
    assert!((temperature(&s, cfg.epochs, 1) - 1.0).abs() < 1e-12 && (temperature(&s, cfg.epochs, cfg.epochs) - 0.1).abs() < 1e-12);
    let pred = predict(&model, &s, &va, tau, 16, &dev).expect("predict");
    let right = va.iter().zip(&pred).filter(|(e, p)| e.qa.target == Target::Class(**p)).count() as f64 / va.len() as f64;
    assert!((right - acc).abs() < 1e-9, "predict at the kept epoch's temperature agrees: {right} vs {acc}");
    assert!(LmQa::new(&bert, &LmQaShape { mix: None, ..s }, 0, &dev).is_err(), "a MixRAG token needs MixRAG");
}

/// The host engine (CPU) and burn train the same model: same initial weights, batches and
/// optimiser, so their curves agree to rounding, under every tuning and soft-token source.
#[test]
fn the_host_engine_trains_as_burn_does() {
    let (_, _, bert) = tiny_bert(21);
    let dev = Device::flex();
    let (tr, va) = (examples(64, 3), examples(24, 4));
    let cfg = TrainConfig { lr: 3e-3, epochs: 3, patience: 3, batch: 16, ..TrainConfig::default() };
    // The soft-token side at its own rate in three cases: both engines must apply it to that side only.
    // Efficient G-Retriever's token: `gt2` with attention pooling.
    let efficient = |s: LmQaShape| LmQaShape {
        encoder: s.encoder.map(|e| EncoderShape { kind: EncoderKind::Gt2, pooling: Pooling::Attention, ..e }),
        ..s
    };
    for case in [
        (Soft::Graph, Tuning::Frozen, None, false),
        (Soft::Graph, Tuning::Lora { rank: 2, alpha: 4.0 }, Some(3e-2), false),
        (Soft::Graph, Tuning::Full, Some(1e-2), true),
        (Soft::Prompt { tokens: 2 }, Tuning::Full, Some(1e-4), false),
        (Soft::None, Tuning::Full, None, false),
    ]
    .into_iter()
    .map(|c| (c, false))
    // The head also reading the soft tokens' states: one token (LoRA), two (a prompt), none.
    .chain([
        ((Soft::Graph, Tuning::Lora { rank: 2, alpha: 4.0 }, None, false), true),
        ((Soft::Prompt { tokens: 2 }, Tuning::Frozen, None, false), true),
        ((Soft::None, Tuning::Lora { rank: 2, alpha: 4.0 }, None, false), true),
    ]) {
        let ((soft, tuning, side, gt2), head_token) = case;
        let s = if gt2 { efficient(shape(soft, tuning)) } else { shape(soft, tuning) };
        let s = LmQaShape { head_token, ..s };
        let rates = Rates { cfg: &cfg, side };
        let (host, hc, _) = train(true, &bert, &s, &tr, &va, rates, (5, None), &dev).expect("host");
        let (burn, bc, _) = train(false, &bert, &s, &tr, &va, rates, (5, None), &dev).expect("burn");
        assert!(matches!(host, TrainedQa::Host(_)) && matches!(burn, TrainedQa::Burn(_)));
        if head_token {
            // The option takes effect where there are soft tokens (a wider head, drawn otherwise)
            // and changes nothing without them; that the second half is the soft tokens' states,
            // forward and backward, is the host-against-burn comparison below.
            let mean_only = LmQaShape { head_token: false, ..s };
            let (_, plain, _) = train(true, &bert, &mean_only, &tr, &va, rates, (5, None), &dev).expect("host");
            if soft == Soft::None {
                assert_eq!(hc, plain, "no soft token: the head reads the mean alone");
            } else {
                assert_ne!(hc, plain, "{soft:?} {tuning:?}: the soft tokens' states reach the head");
            }
        }
        if side.is_some() {
            let (_, one_rate, _) = train(true, &bert, &s, &tr, &va, Rates { cfg: &cfg, side: None }, (5, None), &dev).expect("host");
            assert_ne!(hc, one_rate, "{soft:?} {tuning:?}: the side's own rate changes training");
        }
        let fresh = crate::lm::LanguageModel::from_bert(&bert, tuning, 5, &dev.clone().autodiff()).expect("lm").trained_parameters();
        assert_eq!(host.lm_trained_parameters(), fresh, "{soft:?} {tuning:?}: trained scalars");
        assert_eq!(hc.len(), bc.len());
        for (h, b) in hc.iter().zip(&bc) {
            for (what, x, y) in [("train", h.train_loss, b.train_loss), ("validation", h.val_loss, b.val_loss)] {
                assert!(
                    (x - y).abs() <= 2e-3 * y.abs().max(1.0),
                    "{soft:?} {tuning:?} epoch {}: {what} loss {x} (host) vs {y} (burn)",
                    h.epoch
                );
            }
        }
        // The losses moved: the comparison is of training, not of two untrained models.
        assert!(hc.last().expect("epochs").train_loss < hc[0].train_loss, "{soft:?} {tuning:?}: {hc:?}");
    }
}

/// A graph token started from given encoder weights: the weights the seed itself would draw give
/// exactly the curve of a run from scratch, on both engines (so the given weights are the ones
/// read, and they still train); other weights give another curve; a row without a graph token
/// refuses them.
#[test]
fn a_graph_token_starts_from_given_encoder_weights_and_trains_them() {
    let (_, _, bert) = tiny_bert(21);
    let dev = Device::flex();
    let (tr, va) = (examples(48, 5), examples(16, 6));
    let cfg = TrainConfig { lr: 3e-3, epochs: 2, patience: 2, batch: 16, ..TrainConfig::default() };
    let s = shape(Soft::Graph, Tuning::Frozen);
    let enc = s.encoder.expect("encoder");
    let (own, other) = (GraphEncoder::new(enc, 5, &dev).expect("encoder"), GraphEncoder::new(enc, 6, &dev).expect("encoder"));
    let rates = Rates { cfg: &cfg, side: None };
    for host in [true, false] {
        let (_, scratch, _) = train(host, &bert, &s, &tr, &va, rates, (5, None), &dev).expect("scratch");
        let (_, same, _) = train(host, &bert, &s, &tr, &va, rates, (5, Some(&own)), &dev).expect("own weights");
        assert_eq!(scratch, same, "host engine {host}: the seed's own weights, given, train as from scratch");
        let (_, moved, _) = train(host, &bert, &s, &tr, &va, rates, (5, Some(&other)), &dev).expect("other weights");
        assert_ne!(scratch, moved, "host engine {host}: other weights give another run");
    }
    let text = shape(Soft::None, Tuning::Frozen);
    assert!(train(true, &bert, &text, &tr, &va, rates, (5, Some(&own)), &dev).is_err(), "no graph token, no encoder weights");
}

/// A zero-started projector (`projector_zero`): before training the graph token is the zero
/// vector whatever the graph (a drawn projector's token differs between graphs), the weights
/// before it are the drawn start's; training moves the token off zero, by graph, and it still
/// carries the planted rule to a frozen language model.
#[test]
fn a_zero_started_projector_gives_a_zero_token_that_learns() {
    let (_, _, bert) = tiny_bert(21);
    let dev = Device::flex();
    let (tr, va) = (examples(160, 1), examples(60, 2));
    let drawn = shape(Soft::Graph, Tuning::Frozen);
    let zero = LmQaShape { projector_zero: true, ..drawn };
    let some: Vec<&LmExample> = va.iter().take(8).collect();
    let values = |t: Option<Tensor<2>>| -> Vec<f32> { t.expect("a token").into_data().try_to_vec::<f32>().expect("f32") };
    let (z, d) = (LmQa::new(&bert, &zero, 0, &dev).expect("zero"), LmQa::new(&bert, &drawn, 0, &dev).expect("drawn"));
    let tokens = |m: &LmQa, s: &LmQaShape| values(m.side.soft(&some, s, (1.0, None), &dev).expect("tokens"));
    assert!(tokens(&z, &zero).iter().all(|&x| x == 0.0), "the zero start's token is zero");
    let drawn_tokens = tokens(&d, &drawn);
    let width = drawn_tokens.len() / some.len();
    assert!(drawn_tokens.chunks(width).any(|row| row != &drawn_tokens[..width]), "a drawn token depends on the graph");
    let before = |m: &LmQa| {
        let enc = read_tensors(m.side.encoder.as_ref().expect("encoder"), "encoder").expect("weights");
        let p1 = read_tensors(m.side.proj1.as_ref().expect("projector"), "projector").expect("weights");
        (enc, p1)
    };
    assert_eq!(before(&z), before(&d), "only the last layer starts otherwise");

    let cfg = TrainConfig { lr: 5e-3, epochs: 25, patience: 25, batch: 16, ..TrainConfig::default() };
    let (model, curve, best) = train(true, &bert, &zero, &tr, &va, Rates { cfg: &cfg, side: None }, (0, None), &dev).expect("train");
    assert!(kept(&curve, best) >= 0.9, "zero-started graph token, frozen model: {curve:?}");
    let TrainedQa::Host(h) = model else { panic!("the host engine's model") };
    let trained = values(h.side.soft(&some, &zero, (1.0, None), &dev).expect("tokens"));
    assert!(trained.chunks(width).any(|row| row != &trained[..width]), "the trained token depends on the graph");
}
