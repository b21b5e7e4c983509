//! What `make run` hands over: its last screen names every method family
//! with its headline metric (values as the `scores` tables hold them) and the paths of `report.md`
//! and `report.html`; every Parquet file it writes reads in polars, DuckDB and pyarrow with the
//! column types and key-value metadata `tgrag schema --json` declares; docs/outputs.md's examples
//! run as written (`pipeline/tests/outputs_check.py`, in the small venv `.venv-outputs` that `make
//! test` installs).

use std::path::Path;
use std::process::Command;

use arrow::array::Array;
use tgrag_schemas::{columns, io, tables};

use super::{ok, skip, stderr, stdout, tgrag};

/// The `scores` value of (method, split `test`, group `*`, metric, no seed) in `file`.
fn score(file: &Path, dataset: &str, method: &str, metric: &str) -> f64 {
    let b = io::read_table(file, &tables::SCORES).expect("scores");
    let (d, m, sp, g, mt) = (
        columns::strs(&b, "dataset").expect("dataset"),
        columns::strs(&b, "method").expect("method"),
        columns::strs(&b, "split").expect("split"),
        columns::strs(&b, "group").expect("group"),
        columns::strs(&b, "metric").expect("metric"),
    );
    let (v, seed) = (columns::f64s(&b, "value").expect("value"), columns::u64s(&b, "seed").expect("seed"));
    let rows: Vec<f64> = (0..b.num_rows())
        .filter(|&i| {
            d.value(i) == dataset
                && m.value(i) == method
                && sp.value(i) == "test"
                && g.value(i) == "*"
                && mt.value(i) == metric
                && seed.is_null(i)
        })
        .map(|i| v.value(i))
        .collect();
    assert_eq!(rows.len(), 1, "{method} {metric} in {}", file.display());
    rows[0]
}

/// The words of the line of `table` (a family's block of the last screen) that starts with `first`.
fn row<'a>(block: &'a str, first: &str) -> Vec<&'a str> {
    block.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|w| w.first() == Some(&first)).unwrap_or_default()
}

#[test]
fn a_tiny_run_shows_every_family_and_its_tables_read_in_polars_and_duckdb() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = repo.join(".venv-outputs");
    let python = venv.join("bin/python");
    let d = tempfile::tempdir().expect("tmp");
    let o = d.path().join("outputs");
    // `make run SIZE=tiny` (the helper passes --quiet: the last screen is printed all the same).
    let first = ok(tgrag(&o, &["run", "--dataset", "synthetic", "--size", "tiny", "--seed", "42"]));
    let root = o.join("synthetic");
    let last = first.split_once("\ndone in ").map(|(_, l)| l).expect("done line");
    // One block per family, in this order, each with its headline metrics.
    let (r, t, g) = (last.find("\nRanking — ").expect("ranking"), last.find("\nTopoRAG — ").expect("toporag"), last.find("\nGraphQA — "));
    let g = g.expect("graphqa");
    assert!(r < t && t < g, "{last}");
    let (ranking, topo, graphqa) = (&last[r..t], &last[t..g], &last[g..]);
    assert!(ranking.contains("split `test`") && row(ranking, "method") == ["method", "hit@1", "MRR"], "{ranking}");
    let metrics = root.join("metrics/scores.parquet");
    let (hit1, mrr) = (score(&metrics, "synthetic", "mor", "hit1"), score(&metrics, "synthetic", "mor", "mrr"));
    assert_eq!(row(ranking, "mor").join(" "), format!("mor {hit1:.3} {mrr:.3}"), "{ranking}");
    for m in ["bm25", "dense", "mor-no-rerank", "pasemiqa"] {
        assert_eq!(row(ranking, m).len(), 3, "{m}: {ranking}");
    }
    let header = row(topo, "retriever").join(" ");
    assert!(header.starts_with("retriever ROUGE-L MiniLM cos acc gcn") && header.contains("hits@100"), "{topo}");
    let text = row(topo, "text");
    assert_eq!(text[1], format!("{:.3}", score(&root.join("toporag/scores.parquet"), "synthetic", "text", "rouge_l_f1")), "{topo}");
    for m in ["none", "random", "topo-proximity", "topo-role", "oracle"] {
        assert!(!row(topo, m).is_empty(), "{m}: {topo}");
    }
    // `make run` trains one GraphQA seed (the nightly and `make graphqa` four): no ± is shown, as
    // one seed has no standard deviation.
    assert!(!graphqa.contains('±'), "{graphqa}");
    assert_eq!(row(graphqa, "method"), ["method", "scenegraphs", "accuracy", "webqsp", "hit@1"], "{graphqa}");
    let gr = root.join("gretriever/scores.parquet");
    let acc = score(&gr, "synthetic/scenegraphs", "gretriever-gcn", "accuracy");
    assert_eq!(
        row(graphqa, "gretriever-gcn")[..3].join(" "),
        format!("gretriever-gcn {acc:.3} {:.3}", score(&gr, "synthetic/webqsp", "gretriever-gcn", "hit1")),
        "{graphqa}"
    );
    for m in ["efficient-gretriever", "majority", "no-graph", "mixrag", "mixrag-entity"] {
        assert!(!row(graphqa, m).is_empty(), "{m}: {graphqa}");
    }
    // Then where the whole report is: report.md and report.html, the nightly's renderer with figures.
    let (md, html) = (root.join("report/report.md"), root.join("report/report.html"));
    assert!(last.contains(&format!("report: {}\n", md.display())) && last.contains(&format!("        {}\n", html.display())), "{last}");
    let page = std::fs::read_to_string(&html).expect("report.html");
    assert!(
        page.starts_with("<!DOCTYPE html>") && page.contains("Results: synthetic") && page.contains("<h1 id=\"s1\">Figures</h1>"),
        "report.html"
    );
    assert!(page.matches("<figure><img").count() >= 10 && page.contains("alt=\"mixrag: gates-webqsp\""), "report.html figures");
    // A second run skips every stage and prints the same last screen; the page is the same bytes.
    let second = ok(tgrag(&o, &["run", "--dataset", "synthetic", "--size", "tiny", "--seed", "42"]));
    let after_done = |s: &str| s.split_once("\ndone in ").and_then(|(_, l)| l.split_once('\n')).map(|(_, rest)| rest.to_string());
    assert_eq!(second.lines().filter(|l| l.starts_with("  ") && l.contains("up to date")).count(), 14, "{second}");
    assert_eq!(after_done(&second), after_done(&first));
    assert_eq!(std::fs::read_to_string(&html).expect("report.html"), page);

    if !venv.join("installed").is_file() {
        skip(&format!("outputs check: {} is not installed (`make test` installs it)", venv.display()));
        return;
    }
    let check = Command::new(&python)
        .arg(repo.join("pipeline/tests/outputs_check.py"))
        .arg(env!("CARGO_BIN_EXE_tgrag"))
        .arg(d.path())
        .arg(repo.join("docs/outputs.md"))
        .output()
        .expect("python");
    assert!(check.status.success(), "outputs_check.py failed:\n{}\n{}", stdout(&check), stderr(&check));
    let said = stdout(&check);
    assert!(said.contains("Parquet files, ") && said.contains("examples of outputs.md ran"), "{said}");
}
