//! Sharded embeddings: `tgrag run --stages dense --shard I/N` and `tgrag embed --shard I/N` write
//! one partition each, a killed shard reruns alone while the finished ones are skipped, and the
//! run without `--shard` reads the partitions into the bytes of a run that never had shards.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{ok, stderr, stdout, tgrag};

/// The MiniLM folder `make models` fills, or `None` (skipped) without it.
fn minilm() -> Option<PathBuf> {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights/all-MiniLM-L6-v2");
    if model.join("model.safetensors").is_file() {
        return Some(model);
    }
    super::skip(&format!("no model in {} (run `make models`)", model.display()));
    None
}

const TINY: &[&str] = &["--dataset", "synthetic", "--size", "tiny"];

fn run(outputs: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run"];
    args.extend(TINY);
    args.extend(extra);
    tgrag(outputs, &args)
}

/// The line a shard run prints: `… shard I/N: <verb> …`.
fn shard_verb(out: &str) -> Option<String> {
    out.lines().find_map(|l| {
        l.split_once(": ").and_then(|(_, rest)| rest.split_once(": ")).map(|(_, v)| v.split_whitespace().next().unwrap_or("").to_string())
    })
}

/// Kills the command `c` once `marker` exists (the shard has started its work), and waits for it.
fn kill_when(mut c: Command, marker: &Path) {
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let t0 = Instant::now();
    while !marker.exists() && t0.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(marker.exists(), "{} never appeared", marker.display());
}

fn tgrag_cmd(outputs: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tgrag"));
    c.env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights")).arg("--outputs").arg(outputs).arg("--quiet").args(args);
    c
}

#[test]
fn dense_shards_a_killed_one_rerun_alone_merge_to_the_bytes_of_one_run() {
    let Some(_) = minilm() else { return };
    let d = tempfile::tempdir().expect("tmp");
    let (one, split) = (d.path().join("one"), d.path().join("split"));
    ok(run(&one, &["--stages", "dense"]));

    // A shard reads its upstream stages as they are: they must be up to date first.
    let early = run(&split, &["--stages", "dense", "--shard", "0/3"]);
    assert_eq!(early.status.code(), Some(78), "{}", stderr(&early));
    assert!(
        stderr(&early).contains("stage `ingest` is not up to date") && stderr(&early).contains("--stages ingest"),
        "{}",
        stderr(&early)
    );
    // --shard needs one stage with a sharded phase, and I < N.
    let bm25 = run(&split, &["--stages", "bm25", "--shard", "0/3"]);
    assert_eq!(bm25.status.code(), Some(78), "{}", stderr(&bm25));
    assert!(stderr(&bm25).contains("no sharded phase") && stderr(&bm25).contains("dense, textgraphs"), "{}", stderr(&bm25));
    let bad = run(&split, &["--stages", "dense", "--shard", "3/3"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("0 ≤ I < N"), "{}", stderr(&bad));

    ok(run(&split, &["--stages", "ingest"]));
    let parts = split.join("synthetic/dense/shards");
    for i in ["0/3", "2/3"] {
        let o = ok(run(&split, &["--stages", "dense", "--shard", i]));
        assert_eq!(shard_verb(&o).as_deref(), Some("ran"), "{o}");
    }
    // Shard 1 killed while it embeds: its folder (and lock) exist, its record never does.
    let mut args = vec!["run"];
    args.extend(TINY);
    args.extend(["--stages", "dense", "--shard", "1/3"]);
    let killed = parts.join("00001-of-00003");
    kill_when(tgrag_cmd(&split, &args), &killed.join(".tgrag.lock"));
    assert!(!killed.join("record.json").exists(), "a killed shard leaves no record");

    // The three shards again: the finished ones are skipped, the killed one runs.
    for (i, want) in [("0/3", "skipped"), ("1/3", "ran"), ("2/3", "skipped")] {
        let o = ok(run(&split, &["--stages", "dense", "--shard", i]));
        assert_eq!(shard_verb(&o).as_deref(), Some(want), "shard {i}: {o}");
    }
    let merge = ok(run(&split, &["--stages", "dense"]));
    assert!(merge.contains("3 of 3 shard partitions read"), "{merge}");
    assert!(!parts.exists(), "the merge removes the partitions it read");
    for t in ["embeddings", "query_embeddings", "run"] {
        let (a, b) = (one.join(format!("synthetic/dense/{t}.parquet")), split.join(format!("synthetic/dense/{t}.parquet")));
        assert!(std::fs::read(&a).expect("one") == std::fs::read(&b).expect("split"), "{t}: the merged table differs from one run's");
    }
    // Up to date now, like any stage.
    let again = ok(run(&split, &["--stages", "dense"]));
    assert!(super::verbs(&again).contains(&("dense".to_string(), "skipped".to_string())), "{again}");
}

#[test]
fn textgraphs_shards_merge_to_the_bytes_of_one_run() {
    let d = tempfile::tempdir().expect("tmp");
    let (one, split) = (d.path().join("one"), d.path().join("split"));
    let hash = ["--set", "textgraphs.encoder=\"hash\""];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&["--stages", "textgraphs"][..], &hash[..], extra].concat() };
    ok(run(&one, &with(&[])));
    ok(run(&split, &["--stages", "ingest"]));
    for i in ["0/2", "1/2"] {
        ok(run(&split, &with(&["--shard", i])));
    }
    let merge = ok(run(&split, &with(&[])));
    assert!(merge.contains("2 of 2 shard partitions read"), "{merge}");
    for t in ["texts", "textgraph_nodes", "textgraph_edges", "textgraph_questions"] {
        let (a, b) = (one.join(format!("synthetic/textgraphs/{t}.parquet")), split.join(format!("synthetic/textgraphs/{t}.parquet")));
        assert!(std::fs::read(&a).expect("one") == std::fs::read(&b).expect("split"), "{t} differs");
    }
}

#[test]
fn embed_shards_merge_to_the_bytes_of_one_embed_and_a_changed_input_embeds_again() {
    use std::sync::Arc;
    let Some(model) = minilm() else { return };
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let words = ["graph", "retrieval", "planning", "queries", "paper", "author", "drug", "gene"];
    let texts: Vec<String> =
        (0..60).map(|i| (0..1 + i % 9).map(|j| words[(i * 7 + j * 3) % words.len()]).collect::<Vec<_>>().join(" ")).collect();
    let write = |path: &Path, texts: &[String]| {
        let ids: Vec<String> = (0..texts.len()).map(|i| format!("t{i}")).collect();
        let b = arrow::array::RecordBatch::try_from_iter([
            ("id", Arc::new(arrow::array::StringArray::from(ids)) as arrow::array::ArrayRef),
            ("text", Arc::new(arrow::array::StringArray::from(texts.to_vec())) as arrow::array::ArrayRef),
        ])
        .expect("batch");
        tgrag_schemas::io::write_parquet_atomic(path, &b).expect("write");
    };
    let (t, whole, split) = (o.join("t.parquet"), o.join("whole.parquet"), o.join("split.parquet"));
    write(&t, &texts);
    let embed = |out: &Path, extra: &[&str]| {
        let mut args = vec!["embed".to_string(), "--input".into(), s(&t), "--out".into(), s(out), "--model".into(), s(&model)];
        args.extend(extra.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        tgrag(o, &refs)
    };
    ok(embed(&whole, &[]));
    for i in ["0/2", "1/2"] {
        let r = embed(&split, &["--shard", i]);
        assert!(r.status.success() && stderr(&r).contains(&format!("shard {i}, rows")), "{}", stderr(&r));
    }
    assert!(!split.exists(), "a shard writes its partition, not --out");
    let again = embed(&split, &["--shard", "1/2"]);
    assert!(stderr(&again).contains("shard 1/2 is up to date"), "{}", stderr(&again));
    let merged = embed(&split, &[]);
    assert!(merged.status.success() && stderr(&merged).contains("2 of 2 shard partitions read"), "{}", stderr(&merged));
    assert!(
        std::fs::read(&whole).expect("whole") == std::fs::read(&split).expect("split"),
        "the merged embeddings differ from one embed's"
    );
    assert!(!o.join("split.parquet.shards").exists(), "the merge removes the partitions");

    // Partitions of another input are never read: the merge embeds everything again.
    ok(embed(&split, &["--shard", "0/2"]));
    let mut changed = texts.clone();
    changed[0] = "a changed first text".into();
    write(&t, &changed);
    let r = embed(&split, &[]);
    assert!(r.status.success() && !stderr(&r).contains("partitions read"), "{}", stderr(&r));
    assert!(stdout(&r).is_empty() || !stdout(&r).contains("partitions"), "{}", stdout(&r));
    // … and its table is that of the changed input, as one embed of it writes it.
    let fresh = o.join("fresh.parquet");
    ok(embed(&fresh, &[]));
    assert!(std::fs::read(&fresh).expect("fresh") == std::fs::read(&split).expect("split"), "the stale partition leaked into the table");
}

/// The language-model rows of G-Retriever and MixRAG, small: two seeds, two epochs, one encoder.
const LM_ROWS: &[&str] = &[
    "--set",
    "textgraphs.encoder=\"hash\"",
    "--set",
    "gretriever.lm_rows=[\"g-retriever-lora\",\"lora\"]",
    "--set",
    "gretriever.seeds=[0,1]",
    "--set",
    "gretriever.lm_epochs=2",
    "--set",
    "gretriever.epochs=3",
    "--set",
    "gretriever.encoders=[\"gcn\"]",
    "--set",
    "gretriever.efficient=false",
    "--set",
    "gretriever.whole_graph=false",
    "--set",
    "mixrag.lm_rows=[\"mixrag-lora\"]",
    "--set",
    "mixrag.seeds=[0,1]",
    "--set",
    "mixrag.lm_epochs=2",
    "--set",
    "mixrag.epochs=3",
    "--set",
    "mixrag.ablation_depths=[]",
    "--set",
    "mixrag.ablation_experts=false",
];

/// The units `tgrag run --units` lists: (id, name, state) per line.
fn listed_units(out: &str) -> Vec<(usize, String, String)> {
    out.lines()
        .filter_map(|l| {
            let (id, rest) = l.trim_start().split_once("  ")?;
            let (name, state) = rest.trim().rsplit_once("  ")?;
            Some((id.parse().ok()?, name.trim().to_string(), state.trim().to_string()))
        })
        .collect()
}

#[test]
fn language_model_rows_as_unit_shards_merge_to_the_bytes_of_one_run_and_a_rerun_resumes() {
    let Some(_) = minilm() else { return };
    let d = tempfile::tempdir().expect("tmp");
    let (one, split) = (d.path().join("one"), d.path().join("split"));
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [LM_ROWS, extra].concat() };
    ok(run(&one, &with(&["--stages", "mixrag"])));
    // The units cannot be listed before the stages upstream are up to date.
    let early = run(&split, &with(&["--stages", "gretriever", "--units"]));
    assert_eq!(early.status.code(), Some(78), "{}", stderr(&early));
    assert!(stderr(&early).contains("is not up to date for the units of `gretriever`"), "{}", stderr(&early));
    ok(run(&split, &with(&["--stages", "subgraphs"])));
    let before = listed_units(&ok(run(&split, &with(&["--stages", "gretriever", "--units"]))));
    assert_eq!(before.iter().map(|u| u.0).collect::<Vec<_>>(), [0, 1, 2, 3], "{before:?}");
    assert!(before.iter().all(|u| u.2 == "pending"), "{before:?}");
    // Rows in the order `lm_rows` names them, each row's seeds in order.
    for (u, (row, seed)) in before.iter().zip([("gretriever-lora", 0), ("gretriever-lora", 1), ("-lora", 0), ("-lora", 1)]) {
        assert!(u.1.ends_with(&format!("{row} seed {seed}")), "{u:?}");
    }
    assert!(before[2].1 != before[0].1 && !before[2].1.contains("gretriever-lora"), "{before:?}");
    // Listing ran nothing and wrote nothing.
    assert!(!split.join("synthetic/gretriever").exists(), "a listing writes no stage folder");
    // G-Retriever's 4 row-seeds in 3 shards: units 0 and 3 to shard 0, 1 to shard 1, 2 to shard 2.
    for (i, units) in [("0/3", 2), ("1/3", 1), ("2/3", 1)] {
        let o = ok(run(&split, &with(&["--stages", "gretriever", "--shard", i])));
        assert!(o.contains("ran in") && o.contains(&format!("({units} units, ")), "shard {i}: {o}");
    }
    let after = listed_units(&ok(run(&split, &with(&["--stages", "gretriever", "--units"]))));
    assert_eq!(after.len(), 4, "{after:?}");
    for (k, u) in after.iter().enumerate() {
        assert_eq!((&u.1, u.2.as_str()), (&before[k].1, format!("done in shard {}/3", k % 3).as_str()), "unit {k}");
        // The id is the one the shard stored the unit under.
        let file = split.join(format!("synthetic/gretriever/shards/{:05}-of-00003/unit-{k:06}.json", k % 3));
        let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).expect("unit file")).expect("unit json");
        assert_eq!(stored["name"].as_str(), Some(u.1.as_str()), "unit {k}");
    }
    // A stage whose shards are row ranges has no units to list.
    let dense = run(&split, &["--stages", "dense", "--units"]);
    assert_eq!(dense.status.code(), Some(78), "{}", stderr(&dense));
    assert!(stderr(&dense).contains("ranges of rows") && stderr(&dense).contains("gretriever, mixrag"), "{}", stderr(&dense));
    // A shard killed after its units were stored (its record never written) resumes: it reads them.
    let dir = split.join("synthetic/gretriever/shards/00000-of-00003");
    let unit = dir.join("unit-000003.json");
    let before = std::fs::metadata(&unit).and_then(|m| m.modified()).expect("unit 3");
    std::fs::remove_file(dir.join("record.json")).expect("rm record");
    let o = ok(run(&split, &with(&["--stages", "gretriever", "--shard", "0/3"])));
    assert!(o.contains("(2 units, no complete partition)"), "{o}");
    assert_eq!(std::fs::metadata(&unit).and_then(|m| m.modified()).expect("unit 3"), before, "a stored unit is read, not trained again");
    let merge = ok(run(&split, &with(&["--stages", "gretriever"])));
    assert!(merge.contains("4 of 4 units read from shard partitions"), "{merge}");
    // MixRAG's 2 row-seeds in 2 shards.
    for i in ["0/2", "1/2"] {
        ok(run(&split, &with(&["--stages", "mixrag", "--shard", i])));
    }
    let merge = ok(run(&split, &with(&["--stages", "mixrag"])));
    assert!(merge.contains("2 of 2 units read from shard partitions"), "{merge}");
    // Once merged, the partitions are gone and the listing says the stage holds every unit.
    let out = ok(run(&split, &with(&["--stages", "mixrag", "--units"])));
    assert!(out.contains("2 units, 0 finished by shards; the stage is up to date"), "{out}");
    assert_eq!(listed_units(&out).len(), 2, "{out}");
    for (stage, tables) in
        [("gretriever", &["predictions", "curves", "scores"][..]), ("mixrag", &["predictions", "curves", "scores", "gate_weights"][..])]
    {
        assert!(!split.join(format!("synthetic/{stage}/shards")).exists(), "{stage}: the merge removes the partitions");
        for t in tables {
            let (a, b) = (one.join(format!("synthetic/{stage}/{t}.parquet")), split.join(format!("synthetic/{stage}/{t}.parquet")));
            assert!(
                std::fs::read(&a).expect("one") == std::fs::read(&b).expect("split"),
                "{stage} {t}: the merged table differs from one run's"
            );
        }
    }
}
