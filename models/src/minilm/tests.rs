//! MiniLM tests: an independent f64 re-implementation of BERT on a tiny random checkpoint,
//! strict weight loading, and parity with sentence-transformers (`tests/fixtures/minilm`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use super::fused::Products;
use super::*;

/// A checkpoint: name → (shape, values), in the sentence-transformers naming.
pub(crate) type Checkpoint = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// A tiny checkpoint: name → (shape, values), in the sentence-transformers naming.
fn tiny(cfg: &BertConfig, seed: u64) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let mut state = seed;
    let mut rnd = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 2.0 * scale
            })
            .collect()
    };
    let (d, i) = (cfg.hidden_size, cfg.intermediate_size);
    let mut m = BTreeMap::new();
    let mut put = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        let v = rnd(n, scale).into_iter().map(|x| x + offset).collect();
        m.insert(name, (shape, v));
    };
    put("embeddings.word_embeddings.weight".into(), vec![cfg.vocab_size, d], 1.0, 0.0);
    put("embeddings.position_embeddings.weight".into(), vec![cfg.max_position_embeddings, d], 0.5, 0.0);
    put("embeddings.token_type_embeddings.weight".into(), vec![cfg.type_vocab_size, d], 0.5, 0.0);
    put("embeddings.LayerNorm.weight".into(), vec![d], 0.2, 1.0);
    put("embeddings.LayerNorm.bias".into(), vec![d], 0.2, 0.0);
    for l in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        for (n, o, inn) in [
            ("attention.self.query", d, d),
            ("attention.self.key", d, d),
            ("attention.self.value", d, d),
            ("attention.output.dense", d, d),
            ("intermediate.dense", i, d),
            ("output.dense", d, i),
        ] {
            put(format!("{p}.{n}.weight"), vec![o, inn], 0.6, 0.0);
            put(format!("{p}.{n}.bias"), vec![o], 0.2, 0.0);
        }
        for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
            put(format!("{p}.{n}.weight"), vec![d], 0.2, 1.0);
            put(format!("{p}.{n}.bias"), vec![d], 0.2, 0.0);
        }
    }
    put("pooler.dense.weight".into(), vec![d, d], 0.5, 0.0);
    put("pooler.dense.bias".into(), vec![d], 0.5, 0.0);
    m
}

fn tiny_cfg() -> BertConfig {
    BertConfig {
        vocab_size: 23,
        hidden_size: 8,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        intermediate_size: 12,
        max_position_embeddings: 16,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".into(),
        model_type: None,
        pad_token_id: None,
        relative_attention_num_buckets: None,
    }
}

/// Serialize a checkpoint (plus the `position_ids` buffer) as safetensors bytes.
fn to_bytes(m: &BTreeMap<String, (Vec<usize>, Vec<f32>)>, max_pos: usize, with_pos_ids: bool) -> Vec<u8> {
    let raw: Vec<(String, Vec<usize>, Vec<u8>, Dtype)> = m
        .iter()
        .map(|(k, (s, v))| (k.clone(), s.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect(), Dtype::F32))
        .chain(with_pos_ids.then(|| {
            let bytes = (0..max_pos as i64).flat_map(|x| x.to_le_bytes()).collect();
            ("embeddings.position_ids".to_string(), vec![1, max_pos], bytes, Dtype::I64)
        }))
        .collect();
    let views: Vec<(String, TensorView<'_>)> =
        raw.iter().map(|(k, s, b, dt)| (k.clone(), TensorView::new(*dt, s.clone(), b).expect("view"))).collect();
    safetensors::tensor::serialize(views, None).expect("serialize")
}

/// Plain f64 BERT + mean pooling + L2, written from the HF definition, one sequence at a time.
pub(crate) fn reference(cfg: &BertConfig, m: &BTreeMap<String, (Vec<usize>, Vec<f32>)>, ids: &[u32]) -> Vec<f64> {
    let w = |n: &str| -> Vec<f64> { m[n].1.iter().map(|&x| f64::from(x)).collect() };
    let (d, h, inter) = (cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size);
    let dh = d / h;
    let ln = |x: &mut [f64], g: &[f64], b: &[f64]| {
        let mean = x.iter().sum::<f64>() / d as f64;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        for (j, v) in x.iter_mut().enumerate() {
            *v = (*v - mean) / (var + cfg.layer_norm_eps).sqrt() * g[j] + b[j];
        }
    };
    // y = x W^T + b with W stored (out, in)
    let lin = |x: &[f64], wt: &[f64], b: &[f64], din: usize, dout: usize| -> Vec<f64> {
        (0..dout).map(|o| b[o] + (0..din).map(|i| x[i] * wt[o * din + i]).sum::<f64>()).collect()
    };
    let erf = |x: f64| -> f64 {
        // Abramowitz–Stegun 7.1.26 is too coarse; integrate exp(-t²) with Simpson's rule instead.
        let n = 2000;
        let hstep = x / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(0.0) + f(x);
        for k in 1..n {
            s += f(k as f64 * hstep) * if k % 2 == 1 { 4.0 } else { 2.0 };
        }
        s * hstep / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
    };
    let (we, pe, te) =
        (w("embeddings.word_embeddings.weight"), w("embeddings.position_embeddings.weight"), w("embeddings.token_type_embeddings.weight"));
    let mut xs: Vec<Vec<f64>> = ids
        .iter()
        .enumerate()
        .map(|(p, &t)| {
            let mut x: Vec<f64> = (0..d).map(|j| we[t as usize * d + j] + pe[p * d + j] + te[j]).collect();
            ln(&mut x, &w("embeddings.LayerNorm.weight"), &w("embeddings.LayerNorm.bias"));
            x
        })
        .collect();
    let n = ids.len();
    for l in 0..cfg.num_hidden_layers {
        let p = |s: &str| format!("encoder.layer.{l}.{s}");
        let proj = |name: &str, xs: &Vec<Vec<f64>>| -> Vec<Vec<f64>> {
            xs.iter().map(|x| lin(x, &w(&p(&format!("{name}.weight"))), &w(&p(&format!("{name}.bias"))), d, d)).collect()
        };
        let (q, k, v) = (proj("attention.self.query", &xs), proj("attention.self.key", &xs), proj("attention.self.value", &xs));
        let mut ctx = vec![vec![0f64; d]; n];
        for head in 0..h {
            let r = head * dh..(head + 1) * dh;
            for i in 0..n {
                let s: Vec<f64> = (0..n).map(|j| r.clone().map(|c| q[i][c] * k[j][c]).sum::<f64>() / (dh as f64).sqrt()).collect();
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in r.clone() {
                    ctx[i][c] = (0..n).map(|j| e[j] / z * v[j][c]).sum();
                }
            }
        }
        for i in 0..n {
            let a = lin(&ctx[i], &w(&p("attention.output.dense.weight")), &w(&p("attention.output.dense.bias")), d, d);
            let mut x: Vec<f64> = a.iter().zip(&xs[i]).map(|(a, b)| a + b).collect();
            ln(&mut x, &w(&p("attention.output.LayerNorm.weight")), &w(&p("attention.output.LayerNorm.bias")));
            let hmid: Vec<f64> = lin(&x, &w(&p("intermediate.dense.weight")), &w(&p("intermediate.dense.bias")), d, inter)
                .into_iter()
                .map(|u| 0.5 * u * (1.0 + erf(u / std::f64::consts::SQRT_2)))
                .collect();
            let o = lin(&hmid, &w(&p("output.dense.weight")), &w(&p("output.dense.bias")), inter, d);
            let mut y: Vec<f64> = o.iter().zip(&x).map(|(a, b)| a + b).collect();
            ln(&mut y, &w(&p("output.LayerNorm.weight")), &w(&p("output.LayerNorm.bias")));
            xs[i] = y;
        }
    }
    let mean: Vec<f64> = (0..d).map(|j| xs.iter().map(|x| x[j]).sum::<f64>() / n as f64).collect();
    let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
    mean.iter().map(|x| x / norm).collect()
}

/// Sequences of different lengths: in one batch they exercise padding (burn) and packing (fused);
/// batch 3 splits them across length buckets; `[3]` is a single token.
pub(crate) fn tiny_seqs() -> Vec<Vec<u32>> {
    vec![vec![1, 5, 2], vec![1, 7, 8, 9, 10, 11, 2], vec![1, 2], vec![1, 22, 3, 3, 4, 2], vec![1, 0, 2], vec![1; 16], vec![3]]
}

/// Runs `encode(ids, batch_size)` on a tiny random checkpoint and compares every value with the f64
/// reference; then checks that too-long sequences and out-of-vocabulary ids are refused.
fn check_engine_against_reference(engine: &str, seed: u64, encode: impl Fn(&BertConfig, &[u8], &[Vec<u32>], usize) -> Result<Vec<f32>>) {
    let cfg = tiny_cfg();
    let m = tiny(&cfg, seed);
    let bytes = to_bytes(&m, cfg.max_position_embeddings, true);
    let seqs = tiny_seqs();
    for batch_size in [1, 3, 32] {
        let got = encode(&cfg, &bytes, &seqs, batch_size).expect("encode");
        for (s, ids) in seqs.iter().enumerate() {
            let want = reference(&cfg, &m, ids);
            for j in 0..cfg.hidden_size {
                let g = f64::from(got[s * cfg.hidden_size + j]);
                assert!((g - want[j]).abs() < 2e-5, "{engine}, batch {batch_size} seq {s} dim {j}: {g} vs {}", want[j]);
            }
        }
    }
    assert!(encode(&cfg, &bytes, &[vec![1u32; 17]], 32).is_err(), "{engine}: a sequence over max_position_embeddings");
    assert!(encode(&cfg, &bytes, &[vec![1, 23]], 32).is_err(), "{engine}: an id outside the vocabulary");
}

#[test]
fn burn_bert_matches_f64_reference_with_padding_and_bucketing() {
    check_engine_against_reference("burn", 7, |cfg, bytes, seqs, batch_size| {
        let bert = Bert::from_safetensors(cfg.clone(), Path::new("tiny.safetensors"), bytes, &Device::flex())?;
        bert.encode_ids(seqs, EncodeOptions { batch_size }, &|_| {})
    });
}

#[test]
fn fused_engine_matches_f64_reference_with_packing_and_bucketing() {
    check_engine_against_reference("fused", 11, |cfg, bytes, seqs, batch_size| {
        let fused = fused::FusedBert::from_safetensors(cfg.clone(), Path::new("tiny.safetensors"), bytes)?;
        // A token budget as well: with these short sequences it cuts batches the count does not.
        let run =
            |concurrent| encode_batched(cfg, seqs, EncodeOptions { batch_size }, &|_| {}, Some(9), concurrent, |b| fused.forward_pooled(b));
        // Batches on rayon's threads at once, as `encode` runs them: bit for bit the one-by-one rows.
        let (one_by_one, concurrent) = (run(false)?, run(true)?);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one_by_one), bits(&concurrent));
        Ok(concurrent)
    });
}

#[test]
fn products_alone_count_each_layers_four_products_for_every_product_kind() {
    let cfg = tiny_cfg();
    let bytes = to_bytes(&tiny(&cfg, 3), cfg.max_position_embeddings, true);
    let (d, di, layers) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers);
    // Per layer: x·[Wq Wk Wv] (d × 3d), ctx·Wo (d × d), x·Wi (d × di), GELU(·)·Wo2 (di × d).
    let per_token: usize = [(d, 3 * d), (d, d), (d, di), (di, d)].iter().map(|(k, n)| 2 * k * n).sum();
    let kinds = [fused::Products::F32, fused::Products::Bf16, fused::Products::Amx, fused::Products::AmxBf16];
    let mut ran = 0;
    for products in kinds {
        let Ok(engine) =
            fused::FusedBert::from_safetensors(cfg.clone(), Path::new("tiny.safetensors"), &bytes).and_then(|f| f.with_products(products))
        else {
            continue; // a product kind this CPU (or TGRAG_SIMD) lacks
        };
        for t in [1usize, 5, 17] {
            assert_eq!(
                engine.products_alone(t).expect("products"),
                (per_token * layers * t) as u64,
                "{} products, {t} tokens",
                engine.products()
            );
        }
        ran += 1;
    }
    assert!(ran >= 1, "f32 products run everywhere");
}

#[test]
fn batches_respect_both_limits_and_cover_the_order_once() {
    let ids: Vec<Vec<u32>> = [3usize, 5, 1, 8, 2, 2, 7, 4, 20, 1].iter().map(|&n| vec![1u32; n]).collect();
    let order: Vec<usize> = (0..ids.len()).rev().collect();
    for batch_size in [1usize, 2, 3, 32] {
        for max_tokens in [None, Some(1), Some(6), Some(10), Some(1000)] {
            let got = batches(&order, &ids, batch_size, max_tokens);
            // Consecutive, in order, every position once.
            assert_eq!(got.concat(), order, "{batch_size} {max_tokens:?}");
            for (b, next) in got.iter().zip(got.iter().skip(1).map(Some).chain([None])) {
                let tokens: usize = b.iter().map(|&i| ids[i].len()).sum();
                assert!(!b.is_empty() && b.len() <= batch_size, "{batch_size} {max_tokens:?}: {b:?}");
                if let Some(m) = max_tokens {
                    assert!(tokens <= m || b.len() == 1, "{batch_size} {max_tokens:?}: {b:?} holds {tokens} tokens");
                    // Greedy: the next batch's first sequence would not have fitted.
                    if let Some(n) = next.filter(|_| b.len() < batch_size) {
                        assert!(tokens + ids[n[0]].len() > m, "{batch_size} {max_tokens:?}: {b:?} could take {}", n[0]);
                    }
                } else if next.is_some() {
                    assert_eq!(b.len(), batch_size);
                }
            }
        }
    }
}

#[test]
fn vectorisable_erf_and_exp_are_accurate() {
    // erf against f64 libm on a fine grid, including the saturated tails.
    let mut worst_erf = 0.0f64;
    for i in -60_000..=60_000 {
        let x = i as f32 * 1e-4;
        let e = (f64::from(crate::ops::erf_approx(x)) - erf64(f64::from(x))).abs();
        worst_erf = worst_erf.max(e);
    }
    assert!(worst_erf < 5e-7, "erf max abs error {worst_erf}");
    // exp: relative error on [−86.99, 20] (below −87 it returns 0, as softmax needs).
    let mut worst_exp = 0.0f64;
    for i in -86_990..=20_000 {
        let x = i as f32 * 1e-3;
        let want = f64::from(x).exp();
        let e = ((f64::from(crate::ops::exp_approx(x)) - want) / want).abs();
        worst_exp = worst_exp.max(e);
    }
    assert!(worst_exp < 1e-6, "exp max relative error {worst_exp}");
    assert_eq!(crate::ops::exp_approx(-1e4), 0.0);
    assert_eq!(crate::ops::exp_approx(0.0), 1.0);
}

/// erf in f64 by its Taylor series (|x| < 3) and the continued fraction of erfc beyond: an
/// independent reference, accurate to ~1e-15 on the grid above.
fn erf64(x: f64) -> f64 {
    let a = x.abs();
    let v = if a < 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0f64);
        loop {
            n += 1.0;
            term *= -a * a / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // erfc(a) = exp(-a²)/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + …)))), evaluated bottom-up.
        let mut f = 0.0f64;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (a + f);
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f)
    };
    v.copysign(x)
}

#[test]
fn weight_loading_is_strict() {
    let cfg = tiny_cfg();
    let dev = Device::flex();
    let load = |m: &BTreeMap<String, (Vec<usize>, Vec<f32>)>, pos: bool| {
        Bert::from_safetensors(cfg.clone(), Path::new("w.safetensors"), &to_bytes(m, cfg.max_position_embeddings, pos), &dev)
            .err()
            .map(|e| e.to_string())
    };
    let m = tiny(&cfg, 1);
    assert_eq!(load(&m, true), None);
    // An unused tensor.
    let mut extra = m.clone();
    extra.insert("classifier.weight".into(), (vec![2, 8], vec![0.0; 16]));
    let e = load(&extra, true).expect("extra tensor must fail");
    assert!(e.contains("w.safetensors") && e.contains("classifier.weight") && e.contains("not used"), "{e}");
    let fused_err = |m: &BTreeMap<String, (Vec<usize>, Vec<f32>)>| {
        fused::FusedBert::from_safetensors(cfg.clone(), Path::new("w.safetensors"), &to_bytes(m, cfg.max_position_embeddings, true))
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(fused_err(&m), None);
    assert!(fused_err(&extra).is_some_and(|e| e.contains("classifier.weight")), "the CPU engine is strict too");
    // A missing tensor.
    let mut missing = m.clone();
    missing.remove("encoder.layer.1.output.dense.bias");
    let e = load(&missing, true).expect("missing tensor must fail");
    assert!(e.contains("missing tensor `encoder.layer.1.output.dense.bias`"), "{e}");
    // The position_ids buffer and the pooler are optional (newer transformers do not save the
    // buffer; sentence embeddings do not use the pooler), but checked when present.
    assert_eq!(load(&m, false), None, "a checkpoint without the position_ids buffer loads");
    let mut no_pooler = m.clone();
    no_pooler.remove("pooler.dense.weight");
    no_pooler.remove("pooler.dense.bias");
    assert_eq!(load(&no_pooler, true), None, "a checkpoint without the pooler loads");
    let mut half_pooler = m.clone();
    half_pooler.remove("pooler.dense.bias");
    assert!(load(&half_pooler, true).is_some_and(|e| e.contains("pooler.dense.bias")), "half a pooler is refused");
    let mut bad_pooler = m.clone();
    bad_pooler.insert("pooler.dense.weight".into(), (vec![8, 7], vec![0.0; 56]));
    assert!(load(&bad_pooler, true).is_some_and(|e| e.contains("pooler.dense.weight")), "a misshapen pooler is refused");
    // A misshapen tensor.
    let mut shaped = m.clone();
    shaped.insert("encoder.layer.0.intermediate.dense.weight".into(), (vec![12, 7], vec![0.0; 84]));
    let e = load(&shaped, true).expect("shape must fail");
    assert!(e.contains("shape [12, 7], expected [12, 8]"), "{e}");
    // Not safetensors at all.
    let e = Bert::from_safetensors(cfg.clone(), Path::new("w.safetensors"), b"garbage", &dev).err().expect("garbage");
    assert!(e.to_string().contains("not a safetensors file"), "{e}");
}

/// The committed fixture `<repo>/tests/fixtures/minilm` (its `make.py` regenerates it with
/// sentence-transformers); a missing one fails the test.
fn fixture() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/minilm");
    assert!(d.join("sentences.parquet").is_file(), "{} not found: the fixtures are committed under tests/fixtures", d.display());
    d
}

fn model_dir() -> PathBuf {
    default_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

fn read_batches(path: &Path) -> Vec<arrow::record_batch::RecordBatch> {
    let f = std::fs::File::open(path).expect("open");
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .expect("parquet")
        .build()
        .expect("reader")
        .map(|b| b.expect("batch"))
        .collect()
}

#[test]
fn matches_sentence_transformers_fixture() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float32Type, Int32Type, Int64Type};
    let fx = fixture();
    let dir = model_dir();
    if !dir.join("model.safetensors").exists() {
        skip(&format!("matches_sentence_transformers_fixture: no model in {} (run `make models`)", dir.display()));
        return;
    }
    let burn = MiniLm::load(&dir, &Device::flex()).expect("load model");
    let fused = MiniLm::load_fused(&dir, Products::F32).expect("load model");
    // On a CPU with AMX tiles, the split-bf16 products and the single ones (what `Auto` runs there).
    let amx = super::amx::available().then(|| MiniLm::load_fused(&dir, Products::Amx).expect("load model"));
    let amx1 = super::amx::available().then(|| MiniLm::load_fused(&dir, Products::AmxBf16).expect("load model"));
    match (&amx, &amx1) {
        (Some(a), Some(s)) => assert_eq!((a.products(), s.products()), ("amx-bf16x3", "amx-bf16")),
        _ => eprintln!("matches_sentence_transformers_fixture: no AMX-BF16 on this machine, the AMX products are not checked"),
    }
    // On a CPU with AVX512-BF16, single bf16 products (what `Auto` runs there without AMX).
    let single = super::bf16::available().then(|| MiniLm::load_fused(&dir, Products::Bf16).expect("load model"));
    match &single {
        Some(m) => assert_eq!(m.products(), "avx512-bf16"),
        None => {
            eprintln!("matches_sentence_transformers_fixture: no AVX512-BF16 on this machine, the single-bf16 products are not checked")
        }
    }
    let mut texts: Vec<(i64, String)> = Vec::new();
    for b in read_batches(&fx.join("sentences.parquet")) {
        let ids = b.column_by_name("sent_id").expect("sent_id");
        let ids: Vec<i64> = match ids.data_type() {
            arrow::datatypes::DataType::Int32 => ids.as_primitive::<Int32Type>().values().iter().map(|&x| i64::from(x)).collect(),
            _ => ids.as_primitive::<Int64Type>().values().to_vec(),
        };
        let t = b.column_by_name("text").expect("text");
        let t = arrow::compute::cast(t, &arrow::datatypes::DataType::Utf8).expect("cast");
        let t = t.as_string::<i32>();
        for (i, id) in ids.iter().enumerate() {
            texts.push((*id, t.value(i).to_string()));
        }
    }
    // Token ids, every sentence, every position.
    let mut want_ids: BTreeMap<i64, Vec<(i64, u32)>> = BTreeMap::new();
    for b in read_batches(&fx.join("input_ids.parquet")) {
        let col = |n: &str| arrow::compute::cast(b.column_by_name(n).expect(n), &arrow::datatypes::DataType::Int64).expect("cast");
        let (s, p, t) = (col("sent_id"), col("position"), col("token_id"));
        let (s, p, t) = (s.as_primitive::<Int64Type>(), p.as_primitive::<Int64Type>(), t.as_primitive::<Int64Type>());
        for i in 0..b.num_rows() {
            want_ids.entry(s.value(i)).or_default().push((p.value(i), t.value(i) as u32));
        }
    }
    for (id, text) in &texts {
        let mut want = want_ids[id].clone();
        want.sort_unstable();
        let want: Vec<u32> = want.into_iter().map(|(_, t)| t).collect();
        assert_eq!(fused.token_ids(text).expect("tokens"), want, "token ids of sentence {id}");
    }
    // Embeddings: cosine ≥ 0.9999 for every sentence.
    let refs: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    let f32_emb = fused.encode(&refs, EncodeOptions::default(), &|_| {}).expect("encode");
    let engines = [
        ("burn", Some(&burn)),
        ("cpu", Some(&fused)),
        ("cpu-amx", amx.as_ref()),
        ("cpu-amx-bf16", amx1.as_ref()),
        ("cpu-bf16", single.as_ref()),
    ];
    for (engine, model) in engines.into_iter().filter_map(|(e, m)| m.map(|m| (e, m))) {
        let got = model.encode(&refs, EncodeOptions::default(), &|_| {}).expect("encode");
        // Against the f32 engine too: the issue's bound for the single-bf16 products.
        let worst_f32 = (0..texts.len())
            .map(|r| {
                let (g, w) = (&got[r * DIM..(r + 1) * DIM], &f32_emb[r * DIM..(r + 1) * DIM]);
                let dot: f64 = g.iter().zip(w).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let n = |v: &[f32]| v.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
                dot / (n(g) * n(w))
            })
            .fold(1.0f64, f64::min);
        assert!(worst_f32 >= 0.9999, "{engine} engine: min cosine to the f32 engine {worst_f32}");
        let mut want_emb: BTreeMap<i64, Vec<f32>> = BTreeMap::new();
        for b in read_batches(&fx.join("embeddings.parquet")) {
            let s = arrow::compute::cast(b.column_by_name("sent_id").expect("sent_id"), &arrow::datatypes::DataType::Int64).expect("cast");
            let s = s.as_primitive::<Int64Type>();
            let cols: Vec<_> =
                (0..DIM).map(|j| b.column_by_name(&format!("e{j:03}")).expect("column").as_primitive::<Float32Type>().clone()).collect();
            for i in 0..b.num_rows() {
                want_emb.insert(s.value(i), cols.iter().map(|c| c.value(i)).collect());
            }
        }
        let mut worst = 1.0f64;
        for (r, (id, _)) in texts.iter().enumerate() {
            let g = &got[r * DIM..(r + 1) * DIM];
            let w = &want_emb[id];
            let dot: f64 = g.iter().zip(w).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let na: f64 = g.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = w.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            let cos = dot / (na * nb);
            worst = worst.min(cos);
            assert!(cos >= 0.9999, "{engine} engine, sentence {id}: cosine {cos}");
            // Split bf16 carries 16 significant bits: far closer than a single bf16 product (≈ 0.99997).
            if engine == "cpu-amx" {
                assert!(cos >= 0.999_999, "{engine} engine, sentence {id}: cosine {cos}, below what bf16×3 gives");
            }
        }
        eprintln!("minilm fixture ({engine} engine): {} sentences, min cosine {worst:.7} (to the f32 engine {worst_f32:.7})", texts.len());
    }
}

/// all-mpnet-base-v2 (`make models MODEL=all-mpnet-base-v2`) against sentence-transformers on the
/// minilm fixture's sentences (`tests/fixtures/mpnet`, its `make.py`): the token ids, truncated at
/// the folder's `max_seq_length` of 384 (two sentences reach it), and every embedding at cosine
/// ≥ 0.9999 on the fused engine with f32 products, and with the bf16 products the CPU has.
#[test]
fn mpnet_matches_sentence_transformers_fixture() {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float32Type, Int32Type};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = match std::env::var_os("TGRAG_MODELS") {
        Some(m) => PathBuf::from(m).join("all-mpnet-base-v2"),
        None => root.join("weights/all-mpnet-base-v2"),
    };
    if !dir.join("model.safetensors").exists() {
        // An optional model (even under CI=true): `make test` runs this where `make models` put it.
        eprintln!(
            "SKIP mpnet_matches_sentence_transformers_fixture: no model in {} (run `make models MODEL=all-mpnet-base-v2`)",
            dir.display()
        );
        return;
    }
    let fx = root.join("tests/fixtures/mpnet");
    let col = |b: &arrow::record_batch::RecordBatch, n: &str| b.column_by_name(n).expect(n).as_primitive::<Int32Type>().clone();
    let mut texts: Vec<(i32, String)> = Vec::new();
    for b in read_batches(&fixture().join("sentences.parquet")) {
        let t = arrow::compute::cast(b.column_by_name("text").expect("text"), &arrow::datatypes::DataType::Utf8).expect("cast");
        let ids = col(&b, "sent_id");
        texts.extend((0..b.num_rows()).map(|i| (ids.value(i), t.as_string::<i32>().value(i).to_string())));
    }
    let mut want_ids: BTreeMap<i32, Vec<(i32, u32)>> = BTreeMap::new();
    for b in read_batches(&fx.join("input_ids.parquet")) {
        let (s, p, t) = (col(&b, "sent_id"), col(&b, "position"), col(&b, "token_id"));
        for i in 0..b.num_rows() {
            want_ids.entry(s.value(i)).or_default().push((p.value(i), t.value(i) as u32));
        }
    }
    let mut want_emb: BTreeMap<i32, Vec<f32>> = BTreeMap::new();
    for b in read_batches(&fx.join("embeddings.parquet")) {
        let s = col(&b, "sent_id");
        let dim = b.num_columns() - 1;
        let cols: Vec<_> =
            (0..dim).map(|j| b.column_by_name(&format!("e{j:03}")).expect("column").as_primitive::<Float32Type>().clone()).collect();
        for i in 0..b.num_rows() {
            want_emb.insert(s.value(i), cols.iter().map(|c| c.value(i)).collect());
        }
    }
    assert_eq!(want_emb.len(), texts.len(), "one reference per sentence");
    let f32s = MiniLm::load_fused(&dir, Products::F32).expect("load all-mpnet-base-v2");
    for (id, text) in &texts {
        let mut want = want_ids[id].clone();
        want.sort_unstable();
        let want: Vec<u32> = want.into_iter().map(|(_, t)| t).collect();
        assert_eq!(f32s.token_ids(text).expect("tokens"), want, "token ids of sentence {id}");
    }
    assert!(want_ids.values().any(|v| v.len() == 384), "the fixture reaches the 384-piece truncation");
    let bf16 = super::bf16::available().then(|| MiniLm::load_fused(&dir, Products::Bf16).expect("load"));
    let refs: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    for (engine, model) in [("f32", Some(&f32s)), ("bf16", bf16.as_ref())].into_iter().filter_map(|(e, m)| m.map(|m| (e, m))) {
        let got = model.encode(&refs, EncodeOptions::default(), &|_| {}).expect("encode");
        let dim = got.len() / texts.len();
        assert_eq!(dim, 768, "all-mpnet-base-v2 is 768 wide");
        let mut worst = 1.0f64;
        for (r, (id, _)) in texts.iter().enumerate() {
            let (g, w) = (&got[r * dim..(r + 1) * dim], &want_emb[id]);
            let dot: f64 = g.iter().zip(w).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let n = |v: &[f32]| v.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            let cos = dot / (n(g) * n(w));
            worst = worst.min(cos);
            assert!(cos >= 0.9999, "{engine} products, sentence {id}: cosine {cos}");
        }
        eprintln!("mpnet fixture ({engine} products): {} sentences, min cosine {worst:.7}", texts.len());
    }
}

/// The word pieces per sentence come from the folder's `sentence_bert_config.json` as
/// sentence-transformers reads them, inside the model's positions; without one, 256 (or fewer
/// positions); a broken or out-of-range file is an error naming it.
#[test]
fn sentence_length_follows_sentence_bert_config_within_the_positions() {
    let cfg = tiny_cfg();
    let d = tempfile::tempdir().expect("tempdir");
    assert_eq!(max_seq_len(d.path(), &cfg).expect("absent"), MAX_SEQ_LEN.min(cfg.max_len()));
    assert_eq!(cfg.max_len(), 16, "BERT numbers its positions from 0");
    let file = d.path().join("sentence_bert_config.json");
    for (text, want) in
        [(r#"{"max_seq_length": 9, "do_lower_case": false}"#, Ok(9)), (r#"{"max_seq_length": 16}"#, Ok(16))].into_iter().chain([
            (r#"{"max_seq_length": 17}"#, Err("max_seq_length 17 must be within [2, 16]")),
            ("[1,", Err("not a sentence-transformers config")),
        ])
    {
        std::fs::write(&file, text).expect("write");
        match (max_seq_len(d.path(), &cfg), want) {
            (Ok(n), Ok(w)) => assert_eq!(n, w, "{text}"),
            (Err(e), Err(w)) => {
                let e = e.to_string();
                assert!(e.contains(w) && e.contains("sentence_bert_config.json"), "{text}: {e}");
            }
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }
    // The tokenizer truncates where it is told (MiniLM's tokenizer, where `make models` put it).
    let tok_path = model_dir().join("tokenizer.json");
    if tok_path.is_file() {
        let tok = load_tokenizer(&tok_path, 5).expect("tokenizer");
        let ids = tok.encode("one two three four five six seven", true).expect("encode");
        assert_eq!(ids.get_ids(), [101, 2028, 2048, 2093, 102], "[CLS] + 3 pieces + [SEP]");
    }
}

/// The tiny config, its random checkpoint of `seed` and the burn encoder loaded from it.
pub(crate) fn tiny_bert(seed: u64) -> (BertConfig, Checkpoint, Bert) {
    let cfg = tiny_cfg();
    let m = tiny(&cfg, seed);
    let bert = Bert::from_safetensors(
        cfg.clone(),
        Path::new("tiny.safetensors"),
        &to_bytes(&m, cfg.max_position_embeddings, true),
        &Device::flex(),
    )
    .expect("load");
    (cfg, m, bert)
}

/// The tuned top layers before any step are the checkpoint's layers: frozen lower states + top
/// layers + [`tune::TopLayers::embed`] give the f64 reference sentence embedding, for K = 1 and 2.
#[test]
fn untrained_top_layers_give_the_sentence_embedding() {
    let (cfg, m, bert) = tiny_bert(11);
    let dev = Device::flex();
    let seqs = tiny_seqs();
    for k in 1..=cfg.num_hidden_layers {
        let states = bert.hidden_states(&seqs, cfg.num_hidden_layers - k, EncodeOptions { batch_size: 3 }, &|_| {}).expect("states");
        for (s, ids) in states.iter().zip(&seqs) {
            assert_eq!(s.len(), ids.len() * cfg.hidden_size, "one state per token, padding dropped");
        }
        let top = tune::TopLayers::from_bert(&bert, bert.top_shape(k, 3), 0, &dev).expect("top");
        let got = top.embed(&bert.top_shape(k, 3), &states, 2, &dev).expect("embed");
        for (s, ids) in seqs.iter().enumerate() {
            let want = reference(&cfg, &m, ids);
            for j in 0..cfg.hidden_size {
                let g = f64::from(got[s * cfg.hidden_size + j]);
                assert!((g - want[j]).abs() < 2e-5, "K = {k}, seq {s} dim {j}: {g} vs {}", want[j]);
            }
        }
    }
    assert!(tune::TopLayers::from_bert(&bert, bert.top_shape(0, 3), 0, &dev).is_err(), "K = 0");
    assert!(tune::TopLayers::from_bert(&bert, bert.top_shape(3, 3), 0, &dev).is_err(), "K over the depth");
}

/// Fine-tuning learns a planted rule (class = whether token 5 occurs), deterministically, and the
/// saved layers reload strictly to the same embeddings.
#[test]
fn top_layer_tuning_learns_a_planted_rule() {
    let (_, _, bert) = tiny_bert(3);
    let dev = Device::flex();
    let mut state = 9u64;
    let mut rnd = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut seqs = Vec::new();
    for _ in 0..240 {
        let len = 3 + rnd(6) as usize;
        let mut s: Vec<u32> = (0..len).map(|_| 6 + rnd(17) as u32).collect();
        if rnd(2) == 1 {
            let at = rnd(len as u64) as usize;
            s[at] = 5;
        }
        seqs.push(s);
    }
    let labels: Vec<u32> = seqs.iter().map(|s| u32::from(s.contains(&5))).collect();
    let states = bert.hidden_states(&seqs, 1, EncodeOptions::default(), &|_| {}).expect("states");
    let (tr, va) = (160, 240);
    let tcfg = tune::TuneConfig { layers: 1, epochs: 25, batch: 16, lr: 1e-2, seed: 4 };
    let run = || {
        tune::train_top(&bert, 2, (&states[..tr], &labels[..tr]), (&states[tr..va], &labels[tr..va]), &tcfg, &dev, &|_| {}).expect("train")
    };
    let (model, shape, curve, epoch) = run();
    let first = curve[0];
    let kept = curve[epoch as usize - 1];
    assert!(kept.val_accuracy >= 0.9, "validation accuracy {} (curve {curve:?})", kept.val_accuracy);
    assert!(curve.last().map_or(f64::MAX, |c| c.train_loss) < first.train_loss * 0.5, "{curve:?}");
    assert!(curve.iter().all(|c| c.val_accuracy <= kept.val_accuracy), "the kept epoch has the best validation accuracy");
    let (_, _, curve2, epoch2) = run();
    assert_eq!((curve.clone(), epoch), (curve2, epoch2), "same seed, same curve");
    let dir = std::env::temp_dir().join(format!("tgrag-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("encoder.safetensors");
    model.save(&path).expect("save");
    let back = tune::TopLayers::load(&path, &bert, shape, &dev).expect("load");
    let (a, b) = (model.embed(&shape, &states, 32, &dev).expect("a"), back.embed(&shape, &states, 32, &dev).expect("b"));
    assert_eq!(a, b, "reloaded layers embed identically");
    assert!(tune::TopLayers::load(&path, &bert, bert.top_shape(2, 2), &dev).is_err(), "a two-layer shape does not load one layer");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prints why a test skips for lack of shared data or the model, except under `CI=true`, where
/// both must be there and their absence fails the test.
fn skip(why: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}, and CI=true requires it");
    eprintln!("SKIP {why}");
}

/// `auto` runs the best kernel this machine has; an explicit choice the CPU lacks is a
/// configuration error naming what is missing.
#[test]
fn products_resolve_to_what_this_cpu_runs() {
    use super::{amx, bf16};
    // `auto` picks a kernel this CPU runs (its explicit choice resolves), and AMX where the tiles
    // exist (the fastest here: docs/benchmarks.md).
    let auto = Products::Auto.resolve().expect("auto");
    assert_eq!(auto.resolve().expect("runnable"), auto);
    if amx::available() {
        assert_eq!(auto, Products::AmxBf16);
    }
    assert_eq!(Products::F32.resolve().expect("f32"), Products::F32);
    for (p, has, missing) in [
        (Products::Amx, amx::available(), "AMX-BF16"),
        (Products::AmxBf16, amx::available(), "AMX-BF16"),
        (Products::Bf16, bf16::available(), "AVX512-BF16"),
    ] {
        match p.resolve() {
            Ok(r) => assert!(has && r == p),
            Err(e) => {
                // Under a `TGRAG_SIMD` cap below v4 the message names the cap instead of the CPU.
                let named = if crate::simd::level() < crate::simd::Level::V4 { "TGRAG_SIMD=" } else { missing };
                assert!(!has && matches!(e, crate::error::ModelError::Config { .. }) && e.to_string().contains(named), "{e}")
            }
        }
    }
}

/// The tiny RoBERTa and MPNet checkpoints of `tests/fixtures/lm_parity` (made by transformers):
/// both engines' sentence embeddings (mean over the real tokens, L2-normalised) of the fixture's
/// prompts against transformers' own, and MPNet's relative position buckets against
/// `MPNetEncoder.relative_position_bucket` over distances −300…300.
#[test]
fn roberta_and_mpnet_sentences_match_transformers_on_both_engines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/lm_parity");
    for arch in ["roberta", "mpnet"] {
        let dir = root.join(arch);
        let case = crate::parity_case::Case::read(&dir);
        let (f32s, i64s) = (|name: &str| case.f32s(name), |name: &str| case.i64s(name));
        let (ids, shape) = i64s("ids");
        let (mask, _) = i64s("mask");
        let (b, len) = (shape[0], shape[1]);
        let rows: Vec<Vec<u32>> =
            (0..b).map(|r| (0..len).filter(|&c| mask[r * len + c] == 1).map(|c| ids[r * len + c] as u32).collect()).collect();
        let want = f32s("sentence");
        let (cfg, path, weights) = read_model(&dir).expect("config and checkpoint");
        let burn = Bert::from_safetensors(cfg.clone(), &path, &weights, &Device::flex()).expect("burn engine");
        let fused = fused::FusedBert::from_safetensors(cfg.clone(), &path, &weights).expect("fused engine");
        let refs: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
        for (engine, got) in [
            ("burn", burn.encode_ids(&rows, EncodeOptions { batch_size: 2 }, &|_| {}).expect("burn")),
            ("fused", fused.forward_pooled(&refs).expect("fused")),
        ] {
            assert_eq!(got.len(), want.len(), "{arch} {engine}: sizes");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-5, "{arch} {engine}[{i}]: {g} vs transformers {w}");
            }
        }
        if arch == "mpnet" {
            let (rel, _) = i64s("relative");
            let (buckets, _) = i64s("buckets");
            for (r, want) in rel.iter().zip(&buckets) {
                assert_eq!(relpos::bucket(*r) as i64, *want, "bucket of relative position {r}");
            }
        }
    }
}

/// The prompt's beginning and separator tokens come from the tokenizer's post-processor, not from
/// which special tokens the vocabulary holds: MiniLM's template gives `[CLS]`/`[SEP]` (101, 102);
/// the same vocabulary under a template of two other tokens (as MPNet's BERT vocabulary holds
/// `[CLS]` and `[SEP]` but wraps sentences in `<s>`/`</s>`) gives those two; a template of one
/// token is refused, naming the tokenizer file.
#[test]
fn bos_and_sep_come_from_the_tokenizers_post_processor() {
    let dir = model_dir();
    if !dir.join("model.safetensors").exists() {
        skip(&format!("bos_and_sep_come_from_the_tokenizers_post_processor: no model in {} (run `make models`)", dir.display()));
        return;
    }
    let minilm = MiniLm::load_fused(&dir, Products::F32).expect("MiniLM");
    assert_eq!(minilm.bos_sep().expect("bos/sep"), (101, 102));
    let text = std::fs::read_to_string(dir.join("tokenizer.json")).expect("tokenizer.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let with_template = |single: serde_json::Value, specials: serde_json::Value| {
        let mut j = json.clone();
        j["post_processor"] = serde_json::json!({ "type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": specials });
        let tmp = tempfile::tempdir().expect("tempdir");
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(dir.join(f), tmp.path().join(f)).expect("copy");
        }
        std::fs::write(tmp.path().join("tokenizer.json"), serde_json::to_string(&j).expect("json")).expect("write");
        let m = MiniLm::load_fused(tmp.path(), Products::F32).expect("load");
        (m.bos_sep().map_err(|e| e.to_string()), tmp)
    };
    let special = |name: &str, id: u32| serde_json::json!({ "id": name, "ids": [id], "tokens": [name] });
    let tok = |name: &str| serde_json::json!({ "SpecialToken": { "id": name, "type_id": 0 } });
    let seq = serde_json::json!({ "Sequence": { "id": "A", "type_id": 0 } });
    let (got, _keep) = with_template(
        serde_json::json!([tok("[unused0]"), seq.clone(), tok("[unused1]")]),
        serde_json::json!({ "[unused0]": special("[unused0]", 1), "[unused1]": special("[unused1]", 2) }),
    );
    assert_eq!(got, Ok((1, 2)), "the template's tokens, though the vocabulary holds [CLS] and [SEP]");
    let (got, _keep) = with_template(serde_json::json!([tok("[CLS]"), seq]), serde_json::json!({ "[CLS]": special("[CLS]", 101) }));
    let e = got.expect_err("one token around a sentence");
    assert!(e.contains("tokenizer.json") && e.contains("1 token(s)"), "{e}");
}
