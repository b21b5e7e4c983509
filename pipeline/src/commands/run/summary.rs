//! The last screen of `tgrag run`: one compact table per method family whose stages wrote `scores`
//! in this dataset folder (ranking: hit@1 / MRR per method; TopoRAG: context quality and task
//! accuracy per retriever; GraphQA: accuracy / hit@1 per method, `mean ± std` where seeds ran), and
//! `report.html`: the run's `report.md` through the nightly's renderer, with the nightly's figures
//! and the stages' own plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use tgrag_schemas::{io, tables};

use crate::nightly::collect::Collected;
use crate::nightly::plots::{self, Figure};
use crate::nightly::render;
use crate::runner::read_manifest;
use tgrag_stages::shared::scores::score_rows;

/// A method family on the last screen: which stages' scores it shows (by the stages' family folder,
/// so that a new stage of the family appears without a list), how its columns are made and which
/// metrics it keeps (metric → label).
struct Family {
    title: &'static str,
    folder: &'static str,
    what: &'static str,
    row_word: &'static str,
    metrics: &'static [(&'static str, &'static str)],
    /// How a column is told apart beyond its metric.
    column: Column,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    /// The metric alone (rows without a breakdown).
    Metric,
    /// The metric, and the breakdown value for rows with one (`model=gcn` → `acc gcn`).
    MetricAndGroup,
    /// The dataset's task (`synthetic/webqsp` → `webqsp`) and the metric.
    TaskAndMetric,
}

const FAMILIES: [Family; 3] = [
    Family {
        title: "Ranking",
        folder: "evaluation",
        what: "STaRK metrics per method",
        row_word: "method",
        metrics: &[("hit1", "hit@1"), ("mrr", "MRR")],
        column: Column::Metric,
    },
    Family {
        title: "TopoRAG",
        folder: "toporag",
        what: "context quality and task accuracy per retriever",
        row_word: "retriever",
        metrics: &[("rouge_l_f1", "ROUGE-L"), ("minilm_cosine", "MiniLM cos"), ("accuracy", "acc"), ("hits_at_100", "hits@100")],
        column: Column::MetricAndGroup,
    },
    Family {
        title: "GraphQA",
        folder: "graphqa",
        what: "accuracy / hit@1 per method",
        row_word: "method",
        metrics: &[("accuracy", "accuracy"), ("hit1", "hit@1")],
        column: Column::TaskAndMetric,
    },
];

/// One `scores` row, as the summary needs it.
struct Score {
    family: usize,
    dataset: String,
    method: String,
    split: String,
    group: String,
    metric: String,
    value: f64,
    n: u64,
    seeded: bool,
}

/// The family folder of a stage module path (`tgrag_stages::graphqa::gretriever` → `graphqa`).
fn folder_of(module: &str) -> &str {
    module.split("::").nth(1).unwrap_or("")
}

/// Every `scores` row of the stage folders under `root` that have a valid manifest listing one, in
/// pipeline order, with its family.
fn read_scores(root: &Path) -> Result<Vec<Score>> {
    let mut out = Vec::new();
    for stage in tgrag_stages::all() {
        let info = stage.info();
        let Some(family) = FAMILIES.iter().position(|f| f.folder == folder_of(info.module)) else { continue };
        let dir = root.join(info.name);
        let listed = read_manifest(&dir).is_some_and(|m| m.outputs.contains_key("scores.parquet"));
        if !listed {
            continue;
        }
        let b = io::read_table(&dir.join("scores.parquet"), &tables::SCORES)?;
        for r in score_rows(&b)? {
            out.push(Score {
                family,
                dataset: r.dataset.into(),
                method: r.method.into(),
                split: r.split.into(),
                group: r.group.into(),
                metric: r.metric.into(),
                value: r.value,
                n: r.n,
                seeded: r.seed.is_some(),
            });
        }
    }
    Ok(out)
}

/// A cell: the unseeded value (a result, or the mean over seeds) with its `_std` row, else the mean
/// of the per-seed values.
#[derive(Default)]
struct Cell {
    value: Option<f64>,
    std: Option<f64>,
    seeds: Vec<f64>,
}

impl Cell {
    fn text(&self) -> String {
        match (self.value, self.std) {
            (Some(v), Some(s)) => format!("{v:.3} ± {s:.3}"),
            (Some(v), None) => format!("{v:.3}"),
            _ if self.seeds.is_empty() => "—".into(),
            _ => format!("{:.3}", self.seeds.iter().sum::<f64>() / self.seeds.len() as f64),
        }
    }
}

/// A family's table: its title line and its aligned rows.
fn family_table(f: &Family, rows: &[&Score]) -> Option<String> {
    let kept = |r: &&&Score| f.metrics.iter().any(|(m, _)| r.metric == *m || r.metric.strip_suffix("_std") == Some(m));
    // The held-out split where there is one, else every split pooled, else the first seen.
    let splits: Vec<&str> = rows.iter().filter(kept).map(|r| r.split.as_str()).collect();
    let split = ["test", "all"].into_iter().find(|s| splits.contains(s)).or_else(|| splits.first().copied())?;
    let label = |m: &str| f.metrics.iter().find(|(k, _)| *k == m).map_or_else(|| m.to_string(), |(_, l)| (*l).to_string());
    let mut cols: Vec<String> = Vec::new();
    let mut lines: Vec<(String, BTreeMap<String, Cell>)> = Vec::new();
    let mut n_max = 0;
    let mut seeded = false;
    for r in rows.iter().filter(kept).filter(|r| r.split == split) {
        let base = r.metric.strip_suffix("_std").unwrap_or(&r.metric);
        let col = match f.column {
            Column::Metric if r.group != "*" => continue,
            Column::Metric => label(base),
            Column::MetricAndGroup => match r.group.split_once('=') {
                Some((_, v)) => format!("{} {v}", label(base)),
                None => label(base),
            },
            Column::TaskAndMetric if r.group != "*" => continue,
            Column::TaskAndMetric => {
                format!("{} {}", r.dataset.rsplit_once('/').map_or(r.dataset.as_str(), |(_, t)| t), label(base))
            }
        };
        if !cols.contains(&col) {
            cols.push(col.clone());
        }
        let idx = match lines.iter().position(|(m, _)| *m == r.method) {
            Some(i) => i,
            None => {
                lines.push((r.method.clone(), BTreeMap::new()));
                lines.len() - 1
            }
        };
        let cell = lines[idx].1.entry(col).or_default();
        if r.metric.ends_with("_std") {
            cell.std = Some(r.value);
            seeded = true;
        } else if r.seeded {
            cell.seeds.push(r.value);
        } else {
            cell.value = Some(r.value);
        }
        n_max = n_max.max(r.n);
    }
    if lines.is_empty() {
        return None;
    }
    let texts: Vec<Vec<String>> =
        lines.iter().map(|(_, cells)| cols.iter().map(|c| cells.get(c).map_or("—".into(), Cell::text)).collect()).collect();
    let w0 = lines.iter().map(|(m, _)| m.chars().count()).chain([f.row_word.len()]).max().unwrap_or(0);
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(j, c)| texts.iter().map(|t| t[j].chars().count()).chain([c.chars().count()]).max().unwrap_or(0))
        .collect();
    let mut s = String::new();
    let what = if seeded { format!("{}, mean ± std over seeds", f.what) } else { f.what.to_string() };
    let over = if f.column == Column::Metric { format!(", {n_max} queries") } else { String::new() };
    let _ = writeln!(s, "{} — {what} (split `{split}`{over})", f.title);
    let _ = write!(s, "  {:<w0$}", f.row_word);
    for (c, w) in cols.iter().zip(&widths) {
        let _ = write!(s, "  {c:>w$}");
    }
    s.push('\n');
    for ((method, _), t) in lines.iter().zip(&texts) {
        let _ = write!(s, "  {method:<w0$}");
        for (c, w) in t.iter().zip(&widths) {
            let _ = write!(s, "  {c:>w$}");
        }
        s.push('\n');
    }
    Some(s)
}

/// The last screen's tables, one per family with scores under `root` (empty when none has).
pub fn tables(root: &Path) -> Result<String> {
    let scores = read_scores(root)?;
    let mut out = String::new();
    for (i, f) in FAMILIES.iter().enumerate() {
        let rows: Vec<&Score> = scores.iter().filter(|s| s.family == i).collect();
        if let Some(t) = family_table(f, &rows) {
            out.push('\n');
            out.push_str(&t);
        }
    }
    Ok(out)
}

/// Writes `<root>/report/report.html` next to `report.md`: the nightly's renderer over the run's
/// `report.md` and a Figures section (the nightly's metric bars, training curves and TopoRAG
/// correlations of this folder, then every PNG a stage wrote). Deterministic: the same outputs give
/// the same bytes, and a page already drawn from them is kept (its last line names what it was
/// drawn from). Returns its path; `None` when there is no `report.md`.
pub fn write_html(root: &Path, dataset: &str) -> Result<Option<PathBuf>> {
    let md_path = root.join("report").join("report.md");
    if !md_path.is_file() {
        return Ok(None);
    }
    let path = root.join("report").join("report.html");
    // What the page is drawn from: every stage's outputs (their manifests' digests) and this build.
    // A page drawn from the same ends with the same stamp and is not drawn again.
    let mut h = Sha256::new();
    h.update(crate::runner::BUILD_COMMIT.as_bytes());
    h.update(crate::runner::CODE_DIGEST.as_bytes());
    for stage in tgrag_stages::all() {
        if let Some(m) = read_manifest(&root.join(stage.info().name)) {
            h.update(format!("\n{} {}", stage.info().name, m.outputs_digest()).as_bytes());
        }
    }
    let stamp = format!("<!-- tgrag report.html from {} -->\n", io::hex(&h.finalize()));
    if std::fs::read(&path).is_ok_and(|old| old.ends_with(stamp.as_bytes())) {
        return Ok(Some(path));
    }
    let md = std::fs::read_to_string(&md_path).with_context(|| format!("reading {}", md_path.display()))?;
    let mut c = Collected::default();
    c.add_dataset(dataset, root, &[])?;
    let mut figures = plots::metric_bars(&c.leaderboard()?)?;
    figures.extend(plots::correlation_charts(&c.correlation()?)?);
    figures.extend(plots::curve_charts(&c.curves()?)?);
    for stage in tgrag_stages::all() {
        let name = stage.info().name;
        let dir = root.join(name);
        let Some(m) = read_manifest(&dir) else { continue };
        for file in m.outputs.keys().filter(|f| f.ends_with(".png")) {
            let png = std::fs::read(dir.join(file)).with_context(|| format!("reading {}", dir.join(file).display()))?;
            let caption = format!("{name}: {}", file.trim_end_matches(".png"));
            figures.push(Figure { file: format!("{name}-{file}"), dataset: dataset.to_string(), caption, png });
        }
    }
    let mut doc = md;
    if !figures.is_empty() {
        doc.push_str("\n# Figures\n\n");
        for f in &figures {
            let _ = writeln!(doc, "![{}](plots/{})\n", f.caption.replace(']', ")"), f.file);
        }
    }
    let mut html = render::html(&doc, &format!("tgrag results: {dataset}"), &figures);
    html.push_str(&stamp);
    io::write_bytes_atomic(&path, html.as_bytes())?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn score(family: usize, dataset: &str, method: &str, split: &str, group: &str, metric: &str, value: f64, seeded: bool) -> Score {
        Score {
            family,
            dataset: dataset.into(),
            method: method.into(),
            split: split.into(),
            group: group.into(),
            metric: metric.into(),
            value,
            n: 8,
            seeded,
        }
    }

    #[test]
    fn families_come_from_the_stages_folders() {
        let folders: Vec<&str> = tgrag_stages::all()
            .iter()
            .filter(|s| s.info().outputs.contains(&"scores"))
            .filter_map(|s| FAMILIES.iter().find(|f| f.folder == folder_of(s.info().module)).map(|f| f.title))
            .collect();
        assert_eq!(folders, ["TopoRAG", "GraphQA", "GraphQA", "GraphQA", "Ranking"]);
    }

    #[test]
    fn ranking_keeps_its_headline_metrics_on_the_test_split() {
        let rows = [
            score(0, "d", "bm25", "all", "*", "hit1", 0.5, false),
            score(0, "d", "bm25", "test", "*", "hit1", 0.25, false),
            score(0, "d", "bm25", "test", "*", "mrr", 0.375, false),
            score(0, "d", "bm25", "test", "*", "hit5", 0.9, false),
            score(0, "d", "bm25", "test", "hops=1", "hit1", 1.0, false),
            score(0, "d", "mor", "test", "*", "hit1", 0.75, false),
        ];
        let refs: Vec<&Score> = rows.iter().collect();
        let t = family_table(&FAMILIES[0], &refs).expect("table");
        assert_eq!(
            t,
            "Ranking — STaRK metrics per method (split `test`, 8 queries)\n  method  hit@1    MRR\n  bm25    0.250  0.375\n  mor     0.750      —\n"
        );
    }

    #[test]
    fn graphqa_shows_mean_and_std_per_task_and_toporag_per_model() {
        let rows = [
            score(2, "s/scenegraphs", "gretriever-gcn", "test", "*", "accuracy", 0.5, false),
            score(2, "s/scenegraphs", "gretriever-gcn", "test", "*", "accuracy_std", 0.125, false),
            score(2, "s/scenegraphs", "gretriever-gcn", "test", "*", "accuracy", 0.25, true),
            score(2, "s/scenegraphs", "majority", "test", "*", "accuracy", 0.25, false),
            score(2, "s/webqsp", "gretriever-gcn", "test", "*", "hit1", 0.375, false),
            score(2, "s/webqsp", "gretriever-gcn", "val", "*", "hit1", 0.0, false),
            score(2, "s/webqsp", "pcst", "all", "*", "answer_recall", 0.9, false),
        ];
        let refs: Vec<&Score> = rows.iter().collect();
        let t = family_table(&FAMILIES[2], &refs).expect("table");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "GraphQA — accuracy / hit@1 per method, mean ± std over seeds (split `test`)");
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["method", "scenegraphs", "accuracy", "webqsp", "hit@1"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["gretriever-gcn", "0.500", "±", "0.125", "0.375"]);
        assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["majority", "0.250", "—"]);
        assert_eq!(lines.len(), 4);
        let topo = [
            score(1, "d", "text", "test", "*", "rouge_l_f1", 0.2, false),
            score(1, "d", "text", "test", "model=gcn", "accuracy", 0.9, true),
            score(1, "d", "text", "test", "model=gcn", "accuracy", 0.8, true),
            score(1, "d", "oracle", "test", "model=gcn", "accuracy", 1.0, true),
        ];
        let refs: Vec<&Score> = topo.iter().collect();
        let t = family_table(&FAMILIES[1], &refs).expect("table");
        let lines: Vec<Vec<&str>> = t.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines, [vec!["retriever", "ROUGE-L", "acc", "gcn"], vec!["text", "0.200", "0.850"], vec!["oracle", "—", "1.000"]]);
        // No row of the family's metrics: no table.
        assert!(family_table(&FAMILIES[1], &[]).is_none());
    }
}
