//! Hostile input data: files that are not what their names say, bounds, ids, split files.

use super::*;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// `tgrag` with extra environment variables, killed (and the test failed) past `limit`: a reader that
/// blocks (a FIFO) must not hang the suite.
fn tgrag_within(outputs: &Path, env: &[(&str, &str)], args: &[&str], limit: Duration) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tgrag"));
    cmd.env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .arg("--outputs")
        .arg(outputs)
        .arg("--quiet")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tgrag");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tgrag {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A refused run: not a panic or a signal, the message has every `must`, quotes no more than a few
/// lines of input, and no ingest folder was left.
fn refused(o: &Output, must: &[&str], outputs: &Path) {
    let err = super::hostile::failed_cleanly(o, must);
    assert!(err.len() < 4000, "the message quotes too much input ({} bytes)", err.len());
    let left = files_named(outputs, |n| n.ends_with(".parquet") || n.ends_with(".tmp") || n == "manifest.json");
    assert!(left.is_empty(), "artifacts left behind: {left:?}");
}

const NODES: &str = "node_id,node_type,name,doc\n0,product,Tent,A tent\n1,brand,Zentra,A brand\n";
const EDGES: &str = "src,dst,relation\n0,1,has_brand\n";

fn ingest(o: &Path, data: &Path, dataset: &str, env: &[(&str, &str)]) -> Output {
    tgrag_within(o, env, &["run", "--dataset", dataset, "--data-dir", s(data), "--stages", "ingest"], Duration::from_secs(120))
}

#[test]
fn binary_and_endless_csv_files_are_refused_by_byte_offset_and_record_bound() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("out");
    // NUL bytes from the first byte (a disk image, /dev/zero copied): refused at byte 0, nothing read.
    let data = folder(&[("edges.csv", EDGES)]);
    std::fs::write(data.path().join("nodes.csv"), vec![0u8; 1 << 20]).expect("write");
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &["nodes.csv", "line 1, byte 0", "a NUL byte: this is binary data, not text"], &o);
    // NUL bytes after good rows: the byte offset in the file.
    let mut bytes = NODES.as_bytes().to_vec();
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(data.path().join("nodes.csv"), &bytes).expect("write");
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &["nodes.csv", &format!("line 4, byte {}", NODES.len()), "NUL byte"], &o);
    // 80 MB without a line break under a 1 MiB bound: refused at the bound (the reader holds one
    // record at most, so memory is bounded by the bound whatever the size of the file).
    let mut f = std::fs::File::create(data.path().join("nodes.csv")).expect("create");
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..80 {
        std::io::Write::write_all(&mut f, &chunk).expect("write");
    }
    drop(f);
    let r = ingest(&o, data.path(), "mine", &[("TGRAG_MAX_LINE_BYTES", "1048576")]);
    refused(&r, &["nodes.csv", "line 1", "a record longer than 1048576 bytes", "TGRAG_MAX_LINE_BYTES"], &o);
    // The bound itself is checked.
    let r = ingest(&o, data.path(), "mine", &[("TGRAG_MAX_LINE_BYTES", "lots")]);
    refused(&r, &["TGRAG_MAX_LINE_BYTES=lots", "expected a positive number of bytes"], &o);
}

#[test]
fn a_byte_order_mark_is_stripped_by_every_text_reader() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path();
    let bom = |t: &str| format!("\u{feff}{t}");
    let data = folder(&[("nodes.csv", &bom(NODES)), ("edges.tsv", &bom("src\tdst\trelation\n0\t1\thas_brand\n"))]);
    let r = ingest(o, data.path(), "mine", &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    let nodes = table(&o.join("mine/ingest/nodes.parquet"));
    assert_eq!(nodes.num_rows(), 2);
    // A raw GraphQA file (pandas `to_csv(encoding='utf-8-sig')`) and its split files.
    let graph = "(tent; used for; camping)(camping; is a; hobby)";
    let rows: String = (0..5).map(|i| format!("belief {i}\targ {i}\tsupport\t{graph}\n")).collect();
    let eg = folder(&[("train_dev.tsv", &bom(&format!("arg1\targ2\tlabel\tgraph\n{rows}")))]);
    std::fs::create_dir(eg.path().join("split")).expect("mkdir");
    for (f, t) in [("train_indices.txt", "0\n1\n2\n"), ("val_indices.txt", "3\n"), ("test_indices.txt", "4\n")] {
        std::fs::write(eg.path().join("split").join(f), bom(t)).expect("write");
    }
    let r = ingest(o, eg.path(), "explagraphs", &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert_eq!(table(&o.join("explagraphs/ingest/qa.parquet")).num_rows(), 5);
}

#[test]
fn errors_quote_at_most_200_escaped_characters_of_the_input() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("out");
    // A 20 MB header: the message quotes its first 200 characters and says how much it left out.
    let header = "A".repeat(20 << 20);
    let data = folder(&[("nodes.csv", &format!("{header}\n0\n")), ("edges.csv", EDGES)]);
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &["nodes.csv", "header", "missing column `node_id`", &"A".repeat(200), "… (20971320 more characters)"], &o);
    // Control characters are escaped, never written to the terminal.
    let data = folder(&[("nodes.csv", "\u{1b}[2J\u{1b}[31mnode,\u{7}x\n0,1\n"), ("edges.csv", EDGES)]);
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &["missing column `node_id`", "\\u{1b}[2J\\u{1b}[31mnode,\\u{7}x"], &o);
    assert!(!stderr(&r).contains('\u{1b}'), "a raw escape sequence in: {}", stderr(&r));
    // A copy of /proc/self/environ: NUL-separated, refused as binary, none of it printed.
    let data = folder(&[("nodes.csv", "HOME=/root\0SECRET_TOKEN=hunter2\0"), ("edges.csv", EDGES)]);
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &["nodes.csv", "line 1, byte 10", "NUL byte"], &o);
    assert!(!stderr(&r).contains("hunter2"), "{}", stderr(&r));
}

#[test]
fn a_fifo_a_folder_or_a_dangling_link_named_nodes_csv_is_named_for_what_it_is() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("out");
    let data = folder(&[("edges.csv", EDGES)]);
    let nodes = data.path().join("nodes.csv");
    std::fs::create_dir(&nodes).expect("mkdir");
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &[&format!("{}: is a directory, not a regular file", nodes.display())], &o);
    std::fs::remove_dir(&nodes).expect("rmdir");
    std::os::unix::fs::symlink(data.path().join("moved.csv"), &nodes).expect("link");
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &[&format!("{}: is a dangling symbolic link", nodes.display()), "moved.csv", "not a regular file"], &o);
    std::fs::remove_file(&nodes).expect("unlink");
    let made = Command::new("mkfifo").arg(&nodes).status().is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipped the FIFO case: no mkfifo here");
        return;
    }
    // Nobody ever writes to it: opening it would block for good (tgrag_within fails the test then).
    let r = ingest(&o, data.path(), "mine", &[]);
    refused(&r, &[&format!("{}: is a FIFO, not a regular file", nodes.display())], &o);
}

/// A node id the stages cannot hold (u32::MAX, the "no node" mark, or one far beyond the node
/// count, which `graph` would give a table entry each) is refused at ingest naming the file, row
/// and column, before any later stage allocates; ids a little sparse still ingest.
#[test]
fn node_ids_the_stages_cannot_hold_are_refused_at_ingest() {
    let d = tempfile::tempdir().expect("tmp");
    for (id, fine) in [("4294967295", false), ("2000000", false), ("900", true)] {
        let o = d.path().join(format!("out-{id}"));
        let nodes = format!("node_id,node_type,name,doc\n0,product,Tent,A tent\n{id},brand,Zentra,A brand\n");
        let edges = format!("src,dst,relation\n0,{id},has_brand\n");
        let data = folder(&[("nodes.csv", &nodes), ("edges.csv", &edges)]);
        let r = tgrag_within(
            &o,
            &[],
            &["run", "--dataset", "mine", "--data-dir", s(data.path()), "--stages", "graph"],
            Duration::from_secs(60),
        );
        if fine {
            ok(r);
        } else {
            refused(&r, &["nodes.csv", "row 1", "`node_id`", &format!("node_id {id} is above")], &o);
        }
    }
}

/// An ExplaGraphs folder in G-Retriever's layout: `n` rows and the given split files.
pub(super) fn explagraphs(n: usize, splits: &[(&str, &str)]) -> tempfile::TempDir {
    let graph = "(tent; used for; camping)(camping; is a; hobby)";
    let rows: String =
        (0..n).map(|i| format!("belief {i}\targument {i}\t{}\t{graph}\n", if i % 2 == 0 { "support" } else { "counter" })).collect();
    let d = folder(&[("train_dev.tsv", &format!("arg1\targ2\tlabel\tgraph\n{rows}"))]);
    std::fs::create_dir(d.path().join("split")).expect("mkdir");
    for (f, t) in splits {
        std::fs::write(d.path().join("split").join(f), t).expect("write");
    }
    d
}

#[test]
fn graphqa_split_files_are_all_or_none_and_an_empty_split_stops_the_trained_stages() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("out");
    // Two of three split files: an error naming the missing one, not a silent random split.
    let data = explagraphs(6, &[("train_indices.txt", "0\n1\n2\n3\n"), ("test_indices.txt", "4\n5\n")]);
    let r = ingest(&o, data.path(), "explagraphs", &[]);
    refused(
        &r,
        &[
            &data.path().join("split/val_indices.txt").display().to_string(),
            "missing, while train_indices.txt and test_indices.txt are here",
        ],
        &o,
    );
    // No validation question: ingest is fine, the trained stages refuse to pick epochs on nothing.
    let data = explagraphs(8, &[("train_indices.txt", "0\n1\n2\n3\n4\n5\n"), ("val_indices.txt", ""), ("test_indices.txt", "6\n7\n")]);
    let cheap = [
        "--set",
        "textgraphs.encoder=\"hash\"",
        "--set",
        "gretriever.seeds=[0]",
        "--set",
        "gretriever.epochs=1",
        "--set",
        "gretriever.encoders=[\"gcn\"]",
        "--set",
        "gretriever.text_head=false",
        "--set",
        "gretriever.whole_graph=false",
        "--set",
        "mixrag.seeds=[0]",
        "--set",
        "mixrag.epochs=1",
        "--set",
        "mixrag.ablation_experts=false",
        "--set",
        "mixrag.ablation_depths=[]",
    ];
    for stage in ["gretriever", "mixrag"] {
        let mut args = vec!["run", "--dataset", "explagraphs", "--data-dir", s(data.path()), "--stages", stage];
        args.extend(cheap);
        let r = tgrag_within(&o, &[], &args, Duration::from_secs(300));
        let err = stderr(&r);
        assert!(!r.status.success() && r.status.code() != Some(101), "{stage}: {err}");
        // mixrag runs after gretriever (its upstream), which refuses first.
        for m in ["dataset `explagraphs`", "the `val` split has no explagraphs questions (train 6, val 0, test 2)", "stage `gretriever`"] {
            assert!(err.contains(m), "{stage}: missing `{m}` in {err}");
        }
        eprintln!("refused as expected: {}", err.trim());
        assert!(!o.join("explagraphs").join(stage).join("manifest.json").exists(), "{stage} reported success");
    }
}

/// A RoG-layout Parquet file (`question`, `answer: list<str>`, `graph: list<list<str>>`) of rows,
/// `None` for a null.
type Row<'a> = (Option<&'a str>, Option<Vec<Option<&'a str>>>, Option<Vec<Option<Vec<Option<&'a str>>>>>);

fn rog(dir: &Path, rows: &[Row<'_>]) -> PathBuf {
    use arrow::array::{ListBuilder, StringBuilder};
    let mut ans = ListBuilder::new(StringBuilder::new());
    let mut graph = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
    for (_, a, triples) in rows {
        for x in a.iter().flatten() {
            ans.values().append_option(*x);
        }
        ans.append(a.is_some());
        for t in triples.iter().flatten() {
            for x in t.iter().flatten() {
                graph.values().values().append_option(*x);
            }
            graph.values().append(t.is_some());
        }
        graph.append(triples.is_some());
    }
    let batch = RecordBatch::try_from_iter([
        ("question", Arc::new(StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())) as ArrayRef),
        ("answer", Arc::new(ans.finish())),
        ("graph", Arc::new(graph.finish())),
    ])
    .expect("batch");
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    let p = dir.join("data/test-00000-of-00001.parquet");
    tgrag_schemas::io::write_parquet_atomic(&p, &batch).expect("parquet");
    p
}

#[test]
fn rog_nulls_and_empty_graphs_are_named_by_file_row_and_column() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("out");
    let data = tempfile::tempdir().expect("tmp");
    let triple = |h: Option<&'static str>| Some(vec![h, Some("r"), Some("Kansas City")]);
    let good: Row<'static> = (Some("where?"), Some(vec![Some("Kansas City")]), Some(vec![triple(Some("Jovan Belcher"))]));
    let cases: [(Row<'static>, &str, &str); 5] = [
        ((None, good.1.clone(), good.2.clone()), "row 1, column question", "null where a string is expected"),
        ((good.0, Some(vec![None]), good.2.clone()), "row 1, column answer, item 0", "null where a string is expected"),
        ((good.0, good.1.clone(), Some(vec![triple(None)])), "row 1, column graph, triple 0, item 0", "null where a string is expected"),
        ((good.0, good.1.clone(), None), "row 1, column graph", "null where a list is expected"),
        ((good.0, good.1.clone(), Some(vec![])), "row 1, column graph", "the question's graph is empty"),
    ];
    for (bad, at, why) in cases {
        let p = rog(data.path(), &[good.clone(), bad]);
        let r = ingest(&o, data.path(), "webqsp", &[]);
        refused(&r, &[&format!("{}: {at}: {why}", p.display())], &o);
        assert!(!stderr(&r).contains("table `qa`"), "blamed on an internal table: {}", stderr(&r));
    }
}

#[test]
fn scene_graphs_read_as_python_reads_them_and_an_empty_one_is_named() {
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("out");
    // Object `a` twice (json.load keeps the last, at the first's place) and a 30-digit coordinate.
    let scene = r#"{"1": {"objects": {
      "a": {"name": "ghost", "x": 1, "y": 2, "w": 3, "h": 4},
      "b": {"name": "bench", "x": 123456789012345678901234567890, "y": 0, "w": 3, "h": 4.50, "relations": [{"name": "near", "object": "a"}]},
      "a": {"name": "man", "x": 5, "y": 6, "w": 7, "h": 8}}}}"#;
    let questions = r#"{"q1": {"imageId": "1", "question": "Who is near the bench?", "answer": "man"}}"#;
    let data = folder(&[("val_sceneGraphs.json", scene), ("val_balanced_questions.json", questions)]);
    let r = ingest(&o, data.path(), "scenegraphs", &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    let nodes = table(&o.join("scenegraphs/ingest/graph_nodes.parquet"));
    let text = nodes.column_by_name("text").expect("text");
    let text = text.as_any().downcast_ref::<StringArray>().expect("strings");
    let texts: Vec<&str> = (0..arrow::array::Array::len(text)).map(|i| text.value(i)).collect();
    assert_eq!(
        texts,
        ["name: man; (x,y,w,h): (5, 6, 7, 8)", "name: bench; (x,y,w,h): (123456789012345678901234567890, 0, 3, 4.5)"],
        "Python: str(json.load(...)) of the same file"
    );
    // An image without objects: named by its file and image, not by the `qa` table.
    let data = folder(&[
        ("val_sceneGraphs.json", r#"{"1": {"objects": {"a": {"name": "m", "x": 1, "y": 2, "w": 3, "h": 4}}}, "2": {"objects": {}}}"#),
        (
            "val_balanced_questions.json",
            r#"{"q1": {"imageId": "1", "question": "?", "answer": "m"}, "q2": {"imageId": "2", "question": "?", "answer": "m"}}"#,
        ),
    ]);
    let o2 = d.path().join("out2");
    let r = ingest(&o2, data.path(), "scenegraphs", &[]);
    refused(
        &r,
        &[&format!("{}: image 2 (of question q2 in", data.path().join("val_sceneGraphs.json").display()), "the question's graph is empty"],
        &o2,
    );
    assert!(!stderr(&r).contains("table `qa`"), "{}", stderr(&r));
}
