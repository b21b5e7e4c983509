//! Hostile model folders for `tgrag embed --model`: checkpoints whose head dimension is not a
//! multiple of any vector width run on the fused engine at every dispatch level, and a config or
//! weights that cannot give finite embeddings are refused before any work, naming the file and
//! the field, never an abort.

use super::*;

/// A BERT checkpoint shaped like all-MiniLM-L6-v2 (its tensor names, vocabulary and tokenizer)
/// with width `d` over `heads` heads and an intermediate of `2·d`, seeded weights, written into a
/// new folder of `root`; `edit` may change any tensor's values and `config` the config.
/// `vocab` rows of word embeddings (MiniLM's tokenizer has 30,522 word pieces).
fn tiny_bert(
    root: &Path,
    name: &str,
    (d, heads, vocab): (usize, usize, usize),
    edit: &dyn Fn(&str, &mut [f32]),
    config: &dyn Fn(&mut serde_json::Value),
) -> Option<PathBuf> {
    let minilm = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/all-MiniLM-L6-v2");
    if !minilm.join("model.safetensors").exists() {
        skip(&format!("hostile model folders: no model in {} (run `make models`)", minilm.display()));
        return None;
    }
    let bytes = std::fs::read(minilm.join("model.safetensors")).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let (mut out_header, mut data) = (serde_json::Map::new(), Vec::<u8>::new());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for (tname, info) in &header {
        if tname == "__metadata__" {
            continue;
        }
        let shape: Vec<usize> = info["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|v| match v.as_u64().expect("dim") as usize {
                384 => d,
                1536 => 2 * d,
                30522 => vocab,
                other => other,
            })
            .collect();
        let count: usize = shape.iter().product();
        let dtype = info["dtype"].as_str().expect("dtype").to_string();
        let start = data.len();
        if dtype == "I64" {
            for i in 0..count as i64 {
                data.extend_from_slice(&i.to_le_bytes());
            }
        } else {
            let mut v: Vec<f32> = (0..count)
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
                })
                .collect();
            if tname.contains("LayerNorm.weight") {
                v.iter_mut().for_each(|w| *w = 1.0);
            }
            edit(tname, &mut v);
            for w in v {
                data.extend_from_slice(&w.to_le_bytes());
            }
        }
        out_header.insert(tname.clone(), serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}));
    }
    let mut head = serde_json::to_vec(&out_header).expect("json");
    while (head.len() + 8) % 8 != 0 {
        head.push(b' ');
    }
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut file = (head.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&head);
    file.extend_from_slice(&data);
    std::fs::write(dir.join("model.safetensors"), file).expect("weights");
    std::fs::copy(minilm.join("tokenizer.json"), dir.join("tokenizer.json")).expect("tokenizer");
    let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(minilm.join("config.json")).expect("config")).expect("json");
    cfg["hidden_size"] = serde_json::json!(d);
    cfg["num_attention_heads"] = serde_json::json!(heads);
    cfg["intermediate_size"] = serde_json::json!(2 * d);
    cfg["vocab_size"] = serde_json::json!(vocab);
    config(&mut cfg);
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&cfg).expect("json")).expect("config");
    Some(dir)
}

fn texts(dir: &Path) -> PathBuf {
    let texts: Vec<String> = (0..12).map(|i| format!("a hostile checkpoint reads sentence {i} {}", "again ".repeat(i * 5))).collect();
    let path = dir.join("texts.parquet");
    if !path.exists() {
        write_texts(&path, (0..12).collect(), texts);
    }
    path
}

fn embed(dir: &Path, model: &Path, level: &str, extra: &[&str]) -> (Output, PathBuf) {
    let out = dir.join(format!("{}-{level}-{}.parquet", model.file_name().expect("name").to_string_lossy(), extra.join("")));
    let input = texts(dir);
    let o = Command::new(env!("CARGO_BIN_EXE_tgrag"))
        .env("TGRAG_SIMD", level)
        .arg("--outputs")
        .arg(dir)
        .arg("--quiet")
        .args(["embed", "--input", input.to_str().expect("utf8"), "--out", out.to_str().expect("utf8"), "--model"])
        .arg(model)
        .args(extra)
        .output()
        .expect("spawn tgrag");
    (o, out)
}

/// Head dimensions 8 and 12 (BERT checkpoints with 64 and 96 hidden over 8 heads) and 24 embed on
/// the fused engine at every level this CPU has, as on burn's engine: unit-length finite rows of
/// the model's width, the fused rows within 1e-4 of burn's.
#[test]
fn hostile_model_head_dimensions_8_12_and_24_run_at_every_level() {
    use tgrag_models::simd::Level;
    let dir = tempfile::tempdir().expect("tempdir");
    for (d, heads) in [(64, 8), (96, 8), (96, 4)] {
        let Some(model) = tiny_bert(dir.path(), &format!("bert-{d}-{heads}"), (d, heads, 30522), &|_, _| {}, &|_| {}) else { return };
        let read = |o: Output, path: &Path| -> Vec<f32> {
            ok(o);
            let (width, rows) = embeddings(path);
            assert_eq!(width, d);
            rows
        };
        let (o, p) = embed(dir.path(), &model, "auto", &["--engine", "burn"]);
        let burn = read(o, &p);
        for level in Level::ALL.into_iter().filter(|l| *l <= Level::detected()) {
            let (o, p) = embed(dir.path(), &model, level.name(), &["--engine", "fused", "--products", "f32"]);
            let fused = read(o, &p);
            for (i, (a, b)) in fused.chunks_exact(d).zip(burn.chunks_exact(d)).enumerate() {
                let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-4, "{level}, head dim {}: text {i} has norm {norm}", d / heads);
                let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                assert!(worst < 1e-4, "{level}, head dim {}: text {i} is {worst} off burn's", d / heads);
            }
        }
    }
}

/// A config or weights that cannot give finite embeddings: refused before any work with the file
/// and the field named (a layer count far above the file's tensors, a negative LayerNorm epsilon,
/// one NaN weight on either engine), or, for finite weights that overflow f32 (every word
/// embedding 3e38), refused after the forward pass naming the model, and a tokenizer whose word
/// pieces the checkpoint's vocabulary lacks, refused as the model folder's fault; no output written.
#[test]
fn hostile_model_configs_and_weights_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let none = |_: &str, _: &mut [f32]| {};
    let keep = |_: &mut serde_json::Value| {};
    type Edit = Box<dyn Fn(&str, &mut [f32])>;
    type ConfigEdit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, ConfigEdit, Vec<&str>)> = vec![
        (
            "layers",
            Box::new(none),
            Box::new(|c| c["num_hidden_layers"] = serde_json::json!(1_000_000_000_000u64)),
            vec!["config.json", "num_hidden_layers 1000000000000"],
        ),
        ("eps", Box::new(none), Box::new(|c| c["layer_norm_eps"] = serde_json::json!(-1.0)), vec!["config.json", "layer_norm_eps -1"]),
        (
            "nan",
            Box::new(|n, v| {
                if n == "encoder.layer.0.attention.self.query.weight" {
                    v[5] = f32::NAN;
                }
            }),
            Box::new(keep),
            vec!["model.safetensors", "encoder.layer.0.attention.self.query.weight", "NaN at index 5"],
        ),
        (
            "huge",
            Box::new(|n, v| {
                if n.contains("word_embeddings") {
                    v.iter_mut().for_each(|w| *w = 3e38);
                }
            }),
            Box::new(keep),
            vec!["huge", "not finite", "overflow"],
        ),
        // A tokenizer of another model: word pieces beyond the checkpoint's 1,000-row vocabulary.
        ("tokenizer", Box::new(none), Box::new(keep), vec!["tokenizer.json gives token id", "vocabulary of 1000", "not this model's"]),
    ];
    // A tokenizer.json cut in half: the model folder's file named, not an internal error.
    if let Some(model) = tiny_bert(dir.path(), "cut", (64, 8, 30522), &none, &keep) {
        let text = std::fs::read(model.join("tokenizer.json")).expect("tokenizer");
        std::fs::write(model.join("tokenizer.json"), &text[..text.len() / 2]).expect("cut");
        let (o, out) = embed(dir.path(), &model, "auto", &[]);
        hostile::failed_cleanly(&o, &["tokenizer", "cut/tokenizer.json"]);
        assert!(!out.exists(), "a cut tokenizer.json: an output was written");
    }
    for (name, edit, config, must) in &cases {
        let vocab = if *name == "tokenizer" { 1000 } else { 30522 };
        let Some(model) = tiny_bert(dir.path(), name, (64, 8, vocab), edit.as_ref(), config.as_ref()) else { return };
        for engine in ["fused", "burn"] {
            let (o, out) = embed(dir.path(), &model, "auto", &["--engine", engine]);
            hostile::failed_cleanly(&o, must);
            assert!(!out.exists(), "{name} on {engine}: an output was written");
        }
    }
}
