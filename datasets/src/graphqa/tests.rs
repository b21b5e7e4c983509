//! GraphQA loaders: hand-derived graphs for G-Retriever's textualisation, the real ExplaGraphs and
//! WebQSP files of `../shared/datasets` with their MANIFEST counts, and malformed variants.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::test_support::{TestResult, malformed_at, shared, write};

#[test]
fn explagraphs_textualisation_by_hand() -> TestResult {
    let g = explagraphs::textualize(
        "(Cannabis; synonym of; Marijuana)(legal; causes ; more available)(marijuana; capable of; good thing)(good thing; desires; legal)",
        Path::new("x"),
        "row 1",
    )?;
    assert_eq!(g.nodes, ["cannabis", "marijuana", "legal", "more available", "good thing"]);
    assert_eq!(
        g.edges,
        [(0, "synonym of".to_string(), 1), (2, "causes".to_string(), 3), (1, "capable of".to_string(), 4), (4, "desires".to_string(), 2)]
    );
    // A triple spanning a newline is skipped by the regex, which restarts at the next `(`.
    let g = explagraphs::textualize("(a; b\n; c)(d; e; f)", Path::new("x"), "row 1")?;
    assert_eq!(g.nodes, ["d", "f"]);
    Ok(())
}

#[test]
fn explagraphs_real_files_have_manifest_counts() -> TestResult {
    let Some(dir) = shared("explagraphs") else { return Ok(()) };
    let train = explagraphs::read_original_tsv(&dir.join("train.tsv"), true)?;
    let dev = explagraphs::read_original_tsv(&dir.join("dev.tsv"), true)?;
    let test = explagraphs::read_original_tsv(&dir.join("test_no_labels.tsv"), false)?;
    let gr = explagraphs::read_gretriever_tsv(&dir.join("train_dev_G-Retriever.tsv"))?;
    assert_eq!((train.len(), dev.len(), test.len(), gr.len()), (2368, 398, 400, 2766));
    let support = train.iter().filter(|r| r.label.as_deref() == Some("support")).count();
    assert_eq!((support, train.len() - support), (1335, 1033));
    // G-Retriever's file is train + dev; 5 rows differ only by its whitespace/punctuation clean-up.
    let orig: Vec<_> = train.iter().chain(&dev).collect();
    let differ =
        orig.iter().zip(&gr).filter(|(a, b)| (a.belief.as_str(), a.argument.as_str()) != (b.belief.as_str(), b.argument.as_str())).count();
    assert!(differ <= 5, "{differ} rows differ");
    assert!(orig.iter().zip(&gr).all(|(a, b)| a.label == b.label));
    let mut triples = 0usize;
    for (i, r) in gr.iter().enumerate() {
        let g = explagraphs::textualize(r.graph.as_deref().unwrap_or_default(), Path::new("gr"), &format!("row {i}"))?;
        assert!((3..=8).contains(&g.edges.len()), "row {i}: {} triples", g.edges.len());
        triples += g.edges.len();
    }
    let mean = triples as f64 / gr.len() as f64;
    assert!((mean - 4.2).abs() < 0.05, "mean {mean}");
    // The relation vocabulary is the 28 of relations.txt.
    let rels = crate::raw::read_utf8(&dir.join("relations.txt"))?;
    let rels: std::collections::HashSet<&str> = rels.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert_eq!(rels.len(), 28);

    // The whole dataset, both layouts, through the registry.
    let (items, src) = explagraphs::load(&dir, 42)?;
    assert!(src.ends_with("train_dev_G-Retriever.tsv"));
    assert_eq!(items.len(), 2766);
    let n = |s: &str| items.iter().filter(|i| i.split == s).count();
    // G-Retriever's exact split (split/*_indices.txt, MANIFEST): 1,659 / 553 / 554, row by row.
    assert_eq!((n("train"), n("val"), n("test")), (1659, 553, 554));
    for (file, split) in [("train_indices.txt", "train"), ("val_indices.txt", "val"), ("test_indices.txt", "test")] {
        let idx = crate::raw::read_utf8(&dir.join("split").join(file))?;
        for line in idx.lines().filter(|l| !l.trim().is_empty()) {
            let row: usize = line.trim().parse()?;
            assert_eq!(items[row].split, split, "row {row} of {file}");
        }
    }
    assert!(items[0].question.starts_with("Argument 1: Cannabis should be legal.\nArgument 2: "));
    let t = to_tables(&items, &src)?;
    t.validate()?;
    let tmp = tempfile::tempdir()?;
    for f in ["train.tsv", "dev.tsv"] {
        std::fs::copy(dir.join(f), tmp.path().join(f))?;
    }
    let (orig_items, _) = explagraphs::load(tmp.path(), 42)?;
    let n = |s: &str| orig_items.iter().filter(|i| i.split == s).count();
    assert_eq!((n("train"), n("val"), n("test")), (2132, 236, 398));
    Ok(())
}

#[test]
fn explagraphs_malformed_rows_are_located() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let cases: &[(&str, &[u8], &str, &str)] = &[
        ("a.tsv", b"b\ta\tsupport\t(x; y)\n", "line 1, column graph", "2 `;`-separated parts"),
        ("b.tsv", b"b\ta\tsupport\t(x; r; y)\nb\ta\tmaybe\t(x; r; y)\n", "line 2, column label", "neither"),
        ("c.tsv", b"b\ta\tsupport\n", "line 1", "3 tab-separated fields"),
        ("d.tsv", b"b\ta\tsupport\t(x; r; \xff)\n", "line 1, byte", "UTF-8"),
        ("e.tsv", b"b\ta\tsupport\tno triples here\n", "line 1, column graph", "no `(head"),
    ];
    for &(name, body, at, reason) in cases {
        let p = write(tmp.path(), name, body)?;
        let r = explagraphs::read_original_tsv(&p, true).and_then(|rows| {
            rows.iter().enumerate().try_for_each(|(i, r)| {
                explagraphs::textualize(r.graph.as_deref().unwrap_or_default(), &p, &format!("line {}", i + 1)).map(|_| ())
            })
        });
        let (path, got_at, got_reason) = malformed_at(r.err().ok_or(format!("{name}: accepted"))?)?;
        assert_eq!(path, p);
        assert!(got_at.starts_with(at), "{name}: {got_at}");
        assert!(got_reason.contains(reason), "{name}: {got_reason}");
    }
    let p = write(tmp.path(), "train_dev.tsv", b"arg1\targ2\tlabel\tgraph\n\"open\ta\tsupport\t(x; r; y)\n")?;
    let (path, at, _) = malformed_at(explagraphs::read_gretriever_tsv(&p).err().ok_or("accepted an unclosed quote")?)?;
    assert_eq!((path, at), (p, "line 2".to_string()));
    Ok(())
}

#[test]
fn gretriever_graph_files_round_trip_and_hand_written() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let g = TextGraph {
        nodes: vec!["name: man; attribute: tall, \"smiling\"".into(), "a,b".into(), "multi\nline".into()],
        edges: vec![(0, "to the left of".into(), 1), (2, "has, with comma".into(), 0)],
    };
    write_gretriever_graph(tmp.path(), 7, &g)?;
    assert_eq!(read_gretriever_graph(tmp.path(), 7)?, g);
    let nodes = std::fs::read_to_string(tmp.path().join("nodes/7.csv"))?;
    assert_eq!(nodes, "node_id,node_attr\n0,\"name: man; attribute: tall, \"\"smiling\"\"\"\n1,\"a,b\"\n2,\"multi\nline\"\n");
    // As pandas writes a graph without edges: a bare newline.
    write(tmp.path(), "nodes/1.csv", b"node_id,node_attr\n0,cat\n")?;
    write(tmp.path(), "edges/1.csv", b"\n")?;
    let g1 = read_gretriever_graph(tmp.path(), 1)?;
    assert_eq!((g1.nodes.len(), g1.edges.len()), (1, 0));
    write(tmp.path(), "nodes/2.csv", b"node_id,node_attr\n0,cat\n1,dog\n")?;
    let e = write(tmp.path(), "edges/2.csv", b"src,edge_attr,dst\n0,chases,1\n1,sees,5\n")?;
    let (path, at, _) = malformed_at(read_gretriever_graph(tmp.path(), 2).err().ok_or("accepted a dangling edge")?)?;
    assert_eq!((path, at.as_str()), (e, "row 1, column dst"));
    let n = write(tmp.path(), "nodes/3.csv", b"node_id,node_attr\n0,cat\nx,dog\n")?;
    write(tmp.path(), "edges/3.csv", b"\n")?;
    let (path, at, _) = malformed_at(read_gretriever_graph(tmp.path(), 3).err().ok_or("accepted a bad id")?)?;
    assert_eq!((path, at.as_str()), (n, "row 1, column node_id"));
    Ok(())
}

#[test]
fn split_files_override_the_random_split() -> TestResult {
    let tmp = tempfile::tempdir()?;
    write(tmp.path(), "split/train_indices.txt", b"0\n2\n")?;
    write(tmp.path(), "split/val_indices.txt", b"1\n")?;
    write(tmp.path(), "split/test_indices.txt", b"3\n")?;
    assert_eq!(read_split_files(tmp.path(), 4)?, Some(vec!["train", "val", "train", "test"]));
    write(tmp.path(), "split/test_indices.txt", b"3\n1\n")?;
    let (_, at, reason) = malformed_at(read_split_files(tmp.path(), 4).err().ok_or("accepted a repeat")?)?;
    assert_eq!(at, "line 2");
    assert!(reason.contains("already in the val split"), "{reason}");
    Ok(())
}

const SCENE: &str = r#"{"2386621": {"width": 500, "height": 333, "objects": {
  "z1": {"name": "man", "x": 10, "y": 20, "w": 30, "h": 40, "attributes": ["tall", "smiling"], "relations": [{"name": "to the left of", "object": "a2"}]},
  "a2": {"name": "bench", "x": 1.5, "y": 0, "w": 3, "h": 4, "attributes": [], "relations": []}}}}"#;

#[test]
fn scene_graphs_follow_gretriever_textualisation() -> TestResult {
    let tmp = tempfile::tempdir()?;
    write(tmp.path(), "val_sceneGraphs.json", SCENE.as_bytes())?;
    write(
        tmp.path(),
        "val_balanced_questions.json",
        br#"{"q9": {"imageId": "2386621", "question": "Who is left of the bench?", "answer": "man", "fullAnswer": "The man."}}"#,
    )?;
    let items = scenegraphs::load_dir(tmp.path(), 1)?;
    assert_eq!(items.len(), 1);
    let g = &items[0].graph;
    // File order, not key order: z1 is node 0.
    assert_eq!(g.nodes, ["name: man; attribute: tall, smiling; (x,y,w,h): (10, 20, 30, 40)", "name: bench; (x,y,w,h): (1.5, 0, 3, 4)"]);
    assert_eq!(g.edges, [(0, "to the left of".to_string(), 1)]);
    assert_eq!((items[0].question.as_str(), items[0].answer.as_str()), ("Question: Who is left of the bench?\n\nAnswer:", "man"));
    to_tables(&items, tmp.path())?.validate()?;

    write(tmp.path(), "val_balanced_questions.json", br#"{"q9": {"imageId": "404", "question": "?", "answer": "x"}}"#)?;
    let (_, at, _) = malformed_at(scenegraphs::load_dir(tmp.path(), 1).err().ok_or("accepted an unknown image")?)?;
    assert_eq!(at, "question q9, field imageId");
    write(tmp.path(), "val_sceneGraphs.json", SCENE.replace("\"a2\"}", "\"nope\"}").as_bytes())?;
    let (_, at, reason) = malformed_at(scenegraphs::load_dir(tmp.path(), 1).err().ok_or("accepted a dangling relation")?)?;
    assert_eq!(at, "image 2386621, object z1");
    assert!(reason.contains("nope"));
    write(tmp.path(), "val_sceneGraphs.json", &SCENE.as_bytes()[..100])?;
    let (_, at, _) = malformed_at(scenegraphs::load_dir(tmp.path(), 1).err().ok_or("accepted truncated JSON")?)?;
    assert!(at.starts_with("line "), "{at}");
    Ok(())
}

#[test]
fn webqsp_both_question_formats() -> TestResult {
    let Some(dir) = shared("webqsp-questions") else { return Ok(()) };
    let tog = webqsp::load_questions(&dir.join("WebQSP_test_ToG-format.json"))?;
    assert_eq!(tog.len(), 1639);
    assert!(tog.iter().all(|q| q.id.starts_with("WebQTest-") && !q.topic_entities.is_empty() && q.chains.is_empty()));
    let coleridge = tog.iter().find(|q| q.id == "WebQTest-1198").ok_or("WebQTest-1198 missing")?;
    assert_eq!(coleridge.text, "who influenced samuel taylor coleridge?");
    assert_eq!(coleridge.answers.len(), 10);
    assert_eq!(coleridge.topic_entities, [("m.078w2".to_string(), "Samuel Taylor Coleridge".to_string())]);
    let orig = webqsp::load_questions(&dir.join("WebQSP_100_original-format.json"))?;
    assert_eq!(orig.len(), 100);
    let ids: std::collections::HashSet<&str> = tog.iter().map(|q| q.id.as_str()).collect();
    assert!(orig.iter().all(|q| ids.contains(q.id.as_str())), "the 100 are a subset of the test set");
    assert_eq!(orig.iter().map(|q| q.chains.len()).sum::<usize>(), 109, "111 parses, 2 without a chain");
    assert!(orig.iter().flat_map(|q| &q.chains).all(|c| (1..=2).contains(&c.len())));
    let q = orig.iter().find(|q| q.id == "WebQTest-459").ok_or("WebQTest-459 missing")?;
    assert_eq!(q.chains, [vec!["people.deceased_person.place_of_death".to_string()]]);
    assert_eq!(q.answers, [webqsp::Answer { mid: Some("m.04f_d".into()), name: "Kansas City".into() }]);
    // A questions-only folder is recognised but has no subgraphs.
    assert!(webqsp::load_rog_dir(&dir)?.is_empty());
    Ok(())
}

#[test]
fn webqsp_malformed_and_rog_subgraphs() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let p =
        write(tmp.path(), "q.json", br#"[{"QuestionId": "a", "RawQuestion": "q?", "answer": ["x"]}, {"QuestionId": "b", "answer": []}]"#)?;
    let (_, at, _) = malformed_at(webqsp::load_questions(&p).err().ok_or("accepted a missing field")?)?;
    assert_eq!(at, "item 1 (b), field RawQuestion");
    let p = write(
        tmp.path(),
        "q2.json",
        br#"{"Questions": [{"QuestionId": "a", "RawQuestion": "q?", "Parses": [{"Answers": [{"AnswerType": "Value"}]}]}]}"#,
    )?;
    let (_, at, _) = malformed_at(webqsp::load_questions(&p).err().ok_or("accepted an answer without argument")?)?;
    assert_eq!(at, "item 0 (a), parse 0, answer 0, field AnswerArgument");

    use arrow::array::{ListBuilder, StringBuilder};
    let mut ans = ListBuilder::new(StringBuilder::new());
    let mut graph = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
    for (a, triples) in [(
        vec!["Kansas City"],
        vec![
            ["Jovan Belcher", "people.deceased_person.place_of_death", "Kansas City"],
            ["Kansas City", "location.location.containedby", "Missouri"],
        ],
    )] {
        for x in a {
            ans.values().append_value(x);
        }
        ans.append(true);
        for t in triples {
            for x in t {
                graph.values().values().append_value(x);
            }
            graph.values().append(true);
        }
        graph.append(true);
    }
    let batch = arrow::record_batch::RecordBatch::try_from_iter([
        ("id", Arc::new(arrow::array::StringArray::from(vec!["WebQTest-459"])) as arrow::array::ArrayRef),
        ("question", Arc::new(arrow::array::StringArray::from(vec!["where did jovan belcher kill himself"]))),
        ("answer", Arc::new(ans.finish())),
        ("graph", Arc::new(graph.finish())),
    ])?;
    std::fs::create_dir_all(tmp.path().join("data"))?;
    tgrag_schemas::io::write_parquet_atomic(&tmp.path().join("data/test-00000-of-00001.parquet"), &batch)?;
    let items = webqsp::load_rog_dir(tmp.path())?;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].graph.nodes, ["jovan belcher", "kansas city", "missouri"]);
    assert_eq!(items[0].graph.edges[1], (1, "location.location.containedby".to_string(), 2));
    assert_eq!((items[0].answer.as_str(), items[0].split), ("kansas city", "test"));
    Ok(())
}

#[test]
fn partial_split_files_name_the_missing_one() -> TestResult {
    let tmp = tempfile::tempdir()?;
    assert_eq!(read_split_files(tmp.path(), 4)?, None, "no split file: the seeded split");
    write(tmp.path(), "split/train_indices.txt", b"0\n2\n")?;
    write(tmp.path(), "split/test_indices.txt", b"1\n3\n")?;
    let (path, at, reason) = malformed_at(read_split_files(tmp.path(), 4).err().ok_or("two of three split files accepted")?)?;
    assert_eq!(path, tmp.path().join("split/val_indices.txt"));
    assert_eq!(at, "split files");
    assert!(reason.starts_with("missing, while train_indices.txt and test_indices.txt are here"), "{reason}");
    Ok(())
}

#[test]
fn scene_graphs_keep_the_last_of_repeated_ids_and_the_digits_of_big_integers() -> TestResult {
    let tmp = tempfile::tempdir()?;
    // Python: json.loads('{"a": 1, "b": 2, "a": 3}') == {'a': 3, 'b': 2}: the first place, the last value.
    let scene = r#"{"1": {"objects": {
      "a": {"name": "first", "x": 1, "y": 2, "w": 3, "h": 4, "relations": [{"name": "near", "object": "b"}]},
      "b": {"name": "bench", "x": 123456789012345678901234567890, "y": -98765432109876543210, "w": 18446744073709551615, "h": 2.50},
      "a": {"name": "man", "x": 5, "y": 6, "w": 7, "h": 8, "attributes": ["say \"123456789012345678901234567890\""]}}}}"#;
    write(tmp.path(), "val_sceneGraphs.json", scene.as_bytes())?;
    write(tmp.path(), "val_balanced_questions.json", br#"{"q": {"imageId": "1", "question": "?", "answer": "man"}}"#)?;
    let items = scenegraphs::load_dir(tmp.path(), 1)?;
    let g = &items[0].graph;
    assert_eq!(
        g.nodes,
        [
            "name: man; attribute: say \"123456789012345678901234567890\"; (x,y,w,h): (5, 6, 7, 8)",
            "name: bench; (x,y,w,h): (123456789012345678901234567890, -98765432109876543210, 18446744073709551615, 2.5)",
        ]
    );
    // The first `a`'s relation went with it.
    assert!(g.edges.is_empty(), "{:?}", g.edges);
    // A coordinate given as a string is still refused.
    write(tmp.path(), "val_sceneGraphs.json", br#"{"1": {"objects": {"a": {"name": "m", "x": "1", "y": 2, "w": 3, "h": 4}}}}"#)?;
    let (_, at, reason) = malformed_at(scenegraphs::load_dir(tmp.path(), 1).err().ok_or("a string coordinate accepted")?)?;
    assert!(at.starts_with("line 1") && reason.contains("expected a number"), "{at}: {reason}");
    Ok(())
}

#[test]
fn an_empty_graph_is_named_by_its_input_file_and_place() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let sg = write(tmp.path(), "val_sceneGraphs.json", br#"{"1": {"objects": {}}}"#)?;
    let qs = write(tmp.path(), "val_balanced_questions.json", br#"{"q7": {"imageId": "1", "question": "?", "answer": "man"}}"#)?;
    let items = scenegraphs::load_dir(tmp.path(), 1)?;
    let (path, at, reason) = malformed_at(to_tables(&items, tmp.path()).err().ok_or("an empty graph accepted")?)?;
    assert_eq!(path, sg);
    assert_eq!(at, format!("image 1 (of question q7 in {})", qs.display()));
    assert!(reason.contains("graph is empty"), "{reason}");
    Ok(())
}

type Triple<'a> = Option<Vec<Option<&'a str>>>;
/// A RoG row: question, answers, triples (`None` for a null).
type RogRow<'a> = (Option<&'a str>, Option<Vec<Option<&'a str>>>, Option<Vec<Triple<'a>>>);

/// A RoG Parquet file of rows `(question, answers, triples)`, `None` for a null.
fn rog_file(dir: &Path, rows: &[RogRow<'_>]) -> TestResult<std::path::PathBuf> {
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
    let batch = arrow::record_batch::RecordBatch::try_from_iter([
        ("question", Arc::new(arrow::array::StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())) as arrow::array::ArrayRef),
        ("answer", Arc::new(ans.finish())),
        ("graph", Arc::new(graph.finish())),
    ])?;
    let p = dir.join("test-00000-of-00001.parquet");
    tgrag_schemas::io::write_parquet_atomic(&p, &batch)?;
    Ok(p)
}

#[test]
fn rog_nulls_are_errors_naming_row_and_column() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let t = |h: Option<&'static str>| Some(vec![h, Some("r"), Some("t")]);
    let ok = (Some("q?"), Some(vec![Some("a")]), Some(vec![t(Some("h"))]));
    let cases = [
        ((None, Some(vec![Some("a")]), Some(vec![t(Some("h"))])), "row 1, column question"),
        ((Some("q?"), None, Some(vec![t(Some("h"))])), "row 1, column answer"),
        ((Some("q?"), Some(vec![Some("a"), None]), Some(vec![t(Some("h"))])), "row 1, column answer, item 1"),
        ((Some("q?"), Some(vec![Some("a")]), None), "row 1, column graph"),
        ((Some("q?"), Some(vec![Some("a")]), Some(vec![t(Some("h")), None])), "row 1, column graph, triple 1"),
        ((Some("q?"), Some(vec![Some("a")]), Some(vec![t(Some("h")), t(None)])), "row 1, column graph, triple 1, item 0"),
    ];
    for (bad, want) in cases {
        let p = rog_file(tmp.path(), &[ok.clone(), bad])?;
        let (path, at, reason) = malformed_at(webqsp::load_rog_dir(tmp.path()).err().ok_or(format!("null accepted at {want}"))?)?;
        assert_eq!((path, at.as_str()), (p, want));
        assert!(reason.starts_with("null where"), "{reason}");
    }
    // An empty triple list is a question without a graph: named by file and row at conversion.
    let p = rog_file(tmp.path(), &[ok.clone(), (Some("q?"), Some(vec![Some("a")]), Some(vec![]))])?;
    let items = webqsp::load_rog_dir(tmp.path())?;
    let (path, at, _) = malformed_at(to_tables(&items, tmp.path()).err().ok_or("an empty graph accepted")?)?;
    assert_eq!((path, at.as_str()), (p, "row 1, column graph"));
    Ok(())
}
