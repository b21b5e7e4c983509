//! `report`: `report.md` rendered from the `scores` tables of every upstream stage that writes one
//! (found through [`crate::StageInfo::collects`]) and from nothing else: the ranking metrics of the
//! `metrics` stage as the familiar hit@1 / hit@5 / recall@20 / MRR tables (the evaluator, STaRK's
//! or MoR's, read from the metric names: [`EvalMode::metrics`]), every other stage's
//! scores as one table per (dataset, split, group key) with a row per method (and group value) and a
//! column per metric, `mean ± std` where several seeds ran.

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use serde::{Deserialize, Serialize};
use tgrag_models::gnn::mixrag::MixShape;

use crate::evaluation::ranking::EvalMode;
use crate::shared::scores::{ALL, ALL_SPLITS, ScoreRow, score_rows};
use crate::{Result, StageContext, StageInfo, StageSpec};

/// Options of the `report` stage (none yet).
#[derive(Debug, Clone, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportConfig {}

/// One `scores` row, borrowed.
type Row<'a> = ScoreRow<'a>;

fn rows(scores: &RecordBatch) -> Result<Vec<Row<'_>>> {
    score_rows(scores)
}

/// The ranking section: the `metrics` stage's rows (in aggregate order) as tables of all queries, by
/// split, by hop count and by logical pattern, per evaluator whose metrics the rows hold (its name
/// from the metric names, [`EvalMode::of_metric`]; in practice one).
pub fn ranking_section(scores: &RecordBatch) -> Result<String> {
    let all = rows(scores)?;
    let mut out = String::new();
    for mode in EvalMode::ALL {
        out.push_str(&evaluator_tables(&all, mode));
    }
    Ok(out)
}

/// The ranking tables of `mode`'s metrics among `all` (empty when there are none).
fn evaluator_tables(all: &[Row<'_>], mode: EvalMode) -> String {
    // One report row per (method, split, group), its metrics in `mode.metrics()` order.
    let mut table: Vec<(Row<'_>, [f64; 4])> = Vec::new();
    for r in all {
        let Some(k) = EvalMode::of_metric(r.metric).and_then(|(m, k)| (m == mode).then_some(k)) else { continue };
        match table.last_mut() {
            Some((first, v)) if (first.method, first.split, first.group) == (r.method, r.split, r.group) => v[k] = r.value,
            _ => {
                let mut v = [0.0; 4];
                v[k] = r.value;
                table.push((*r, v));
            }
        }
    }
    // (report group, value) of a row.
    let kind = |r: &Row<'_>| -> (String, String) {
        match (r.split, r.group) {
            (ALL_SPLITS, ALL) => ("all".into(), ALL.into()),
            (s, ALL) => ("split".into(), s.into()),
            (_, g) => g.split_once('=').map_or(("other".into(), g.into()), |(k, v)| (k.into(), v.into())),
        }
    };
    let mut out = String::new();
    for (g, title) in [("all", "all queries"), ("split", "by split"), ("hops", "by hop count"), ("pattern", "by logical pattern")] {
        let these: Vec<&(Row<'_>, [f64; 4])> = table.iter().filter(|(r, _)| kind(r).0 == g).collect();
        if these.is_empty() {
            continue;
        }
        out.push_str(&format!("\n## Retrieval: {title}\n\n"));
        if g == "all" {
            out.push_str(&format!(
                "Evaluator: {} semantics (candidates = all nodes unless the dataset lists candidate types; ties by node id).\n\n",
                mode.label()
            ));
        }
        out.push_str(&format!("| method | {g} | queries | hit@1 | hit@5 | recall@20 | MRR |\n|---|---|---:|---:|---:|---:|---:|\n"));
        for (r, v) in these {
            out.push_str(&format!("| {} | {} | {} | {:.4} | {:.4} | {:.4} | {:.4} |\n", r.method, kind(r).1, r.n, v[0], v[1], v[2], v[3]));
        }
    }
    out
}

/// A value cell: `v`, or `v ± sd` when the row has a standard deviation over seeds.
fn cell(v: f64, sd: Option<f64>) -> String {
    match sd {
        Some(s) => format!("{v:.4} ± {s:.4}"),
        None => format!("{v:.4}"),
    }
}

/// The section of one stage's scores: a table per (dataset, split, group key), rows per method (and
/// group value), columns per metric in first-seen order. Rows without a seed (results of untrained
/// methods, or the mean over seeds) are shown; `<metric>_std` rows become `± sd`; per-seed rows show
/// only where no mean exists (one seed: its value; several: their mean, with the seed count).
pub fn stage_section(stage: &str, scores: &RecordBatch) -> Result<String> {
    let all = rows(scores)?;
    let mut out = String::new();
    for (key, rs) in &group_tables(&all) {
        let metrics = table_metrics(rs);
        let lines = table_lines(rs);
        table_header(&mut out, stage, key, &metrics);
        for (id, cells) in &lines {
            table_line(&mut out, key, &metrics, id, cells);
        }
    }
    Ok(out)
}

/// Which table of a stage section a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TableKey<'a> {
    dataset: &'a str,
    split: &'a str,
    /// The group key (`ALL` for rows without a breakdown).
    group_key: &'a str,
}

/// The rows of each (dataset, split, group key), tables and rows in first-seen order.
fn group_tables<'a>(all: &[Row<'a>]) -> Vec<(TableKey<'a>, Vec<Row<'a>>)> {
    let mut tables: Vec<(TableKey<'_>, Vec<Row<'_>>)> = Vec::new();
    for r in all {
        let key = r.group.split_once('=').map_or(ALL, |(k, _)| k);
        let t = TableKey { dataset: r.dataset, split: r.split, group_key: key };
        match tables.iter_mut().find(|(k, _)| *k == t) {
            Some((_, v)) => v.push(*r),
            None => tables.push((t, vec![*r])),
        }
    }
    tables
}

/// A table's metric columns in first-seen order (`_std` rows are not columns of their own).
fn table_metrics<'a>(rs: &[Row<'a>]) -> Vec<&'a str> {
    let mut m: Vec<&str> = Vec::new();
    for r in rs {
        if !r.metric.ends_with("_std") && !m.contains(&r.metric) {
            m.push(r.metric);
        }
    }
    m
}

/// One metric of one line: the unseeded value, its std, the per-seed values and the row count.
struct Cell {
    value: Option<f64>,
    sd: Option<f64>,
    seeds: Vec<f64>,
    n: u64,
}

/// A table's lines: (method, group value) in first-seen order → metric → cell.
type Lines<'a> = Vec<((&'a str, &'a str), BTreeMap<&'a str, Cell>)>;

fn table_lines<'a>(rs: &[Row<'a>]) -> Lines<'a> {
    let mut lines: Lines<'a> = Vec::new();
    for r in rs {
        let gv = r.group.split_once('=').map_or("", |(_, v)| v);
        let id = (r.method, gv);
        let idx = match lines.iter().position(|(k, _)| *k == id) {
            Some(i) => i,
            None => {
                lines.push((id, BTreeMap::new()));
                lines.len() - 1
            }
        };
        let cells = &mut lines[idx].1;
        let empty = || Cell { value: None, sd: None, seeds: Vec::new(), n: r.n };
        if let Some(base) = r.metric.strip_suffix("_std") {
            cells.entry(base).or_insert_with(empty).sd = Some(r.value);
            continue;
        }
        let c = cells.entry(r.metric).or_insert_with(empty);
        match r.seed {
            None => {
                c.value = Some(r.value);
                c.n = r.n;
            }
            Some(_) => c.seeds.push(r.value),
        }
    }
    lines
}

/// A table's heading, column names and alignment row.
fn table_header(out: &mut String, stage: &str, key: &TableKey<'_>, metrics: &[&str]) {
    let TableKey { dataset, split, group_key: key } = *key;
    let split_words = if split == ALL_SPLITS { "all splits".to_string() } else { format!("split `{split}`") };
    let by = if key == ALL { String::new() } else { format!(", by {key}") };
    out.push_str(&format!("\n## {stage}: {dataset}, {split_words}{by}\n\n| method |"));
    if key != ALL {
        out.push_str(&format!(" {key} |"));
    }
    out.push_str(" n |");
    for m in metrics {
        out.push_str(&format!(" {m} |"));
    }
    out.push_str("\n|---|");
    if key != ALL {
        out.push_str("---|");
    }
    out.push_str("---:|");
    out.push_str(&"---:|".repeat(metrics.len()));
    out.push('\n');
}

/// One line of a table: method, group value, row count (of the first metric that has a cell) and
/// a cell per metric.
fn table_line(out: &mut String, key: &TableKey<'_>, metrics: &[&str], (method, gv): &(&str, &str), cells: &BTreeMap<&str, Cell>) {
    let n = metrics.iter().find_map(|m| cells.get(m).map(|c| c.n)).unwrap_or(0);
    out.push_str(&format!("| {method} |"));
    if key.group_key != ALL {
        out.push_str(&format!(" {gv} |"));
    }
    out.push_str(&format!(" {n} |"));
    for m in metrics {
        let text = match cells.get(m) {
            Some(Cell { value: Some(v), sd, .. }) => cell(*v, *sd),
            Some(Cell { value: None, seeds, .. }) if seeds.len() == 1 => cell(seeds[0], None),
            Some(Cell { value: None, seeds, .. }) if !seeds.is_empty() => {
                format!("{:.4} ({} seeds)", seeds.iter().sum::<f64>() / seeds.len() as f64, seeds.len())
            }
            _ => String::new(),
        };
        out.push_str(&format!(" {text} |"));
    }
    out.push('\n');
}

/// The rows of G-Retriever's table (its Table 3, Llama-2-7B) and MixRAG's main result, beside the
/// method that reproduces each here: (paper row, method, published ExplaGraphs accuracy, SceneGraphs
/// accuracy, WebQSP Hit@1 as a fraction). `None`: no published figure (rows of this project only).
const PAPER_ROWS: &[(&str, &str, Option<[f64; 3]>)] = &[
    ("Prompt tuning", "lm-prompt-tuning", Some([0.5763, 0.6341, 0.4834])),
    ("GraphToken", "lm-graphtoken", Some([0.8508, 0.4903, 0.5705])),
    ("G-Retriever (frozen LM, graph token)", "lm-gretriever", Some([0.8516, 0.8131, 0.7049])),
    ("LoRA", "lm-lora", Some([0.8538, 0.7862, 0.6603])),
    ("G-Retriever w/ LoRA", "lm-gretriever-lora", Some([0.8705, 0.8683, 0.7379])),
    ("MixRAG w/ LoRA", "lm-mixrag-lora", Some([0.8863, 0.8712, 0.7531])),
    ("MixRAG (frozen LM)", "lm-mixrag", None),
    ("full fine-tuning", "lm-full", None),
    ("G-Retriever, full fine-tuning", "lm-gretriever-full", None),
    ("Efficient G-Retriever (frozen LM)", "lm-efficient-gretriever", None),
    ("Efficient G-Retriever w/ LoRA", "lm-efficient-gretriever-lora", None),
    ("Efficient G-Retriever, full fine-tuning", "lm-efficient-gretriever-full", None),
    ("no language model: G-Retriever's graph transformer + head", "gretriever-gt", None),
    ("no language model: Efficient G-Retriever + head", "efficient-gretriever", None),
    ("no language model: MixRAG + head", "mixrag", None),
    ("no language model: MiniLM cross-encoder, top 2 layers", "gretriever-minilm", None),
];

/// The papers' table for each GraphQA dataset whose scores hold at least one language-model row:
/// our test figure (mean ± std over seeds) beside the published one, row by row.
pub fn paper_section(scores: &[RecordBatch]) -> Result<String> {
    /// A method's test figure: the mean over seeds, its std and the number of seeds.
    type Figure = (Option<f64>, Option<f64>, usize);
    let mut by_ds: BTreeMap<String, BTreeMap<String, Figure>> = BTreeMap::new();
    for b in scores {
        for r in rows(b)? {
            if r.split != "test" || r.group != ALL {
                continue;
            }
            let metric = if r.dataset.contains("webqsp") { "hit1" } else { "accuracy" };
            let e = by_ds.entry(r.dataset.to_string()).or_default().entry(r.method.to_string()).or_default();
            match (r.seed, r.metric) {
                (None, m) if m == metric => e.0 = Some(r.value),
                (None, m) if m.strip_suffix("_std") == Some(metric) => e.1 = Some(r.value),
                (Some(_), m) if m == metric => e.2 += 1,
                _ => {}
            }
        }
    }
    let mut out = String::new();
    for (ds, methods) in &by_ds {
        if !methods.keys().any(|m| m.starts_with("lm-")) {
            continue;
        }
        let col = if ds.contains("explagraphs") {
            0
        } else if ds.contains("scenegraphs") {
            1
        } else {
            2
        };
        let metric = if col == 2 { "Hit@1" } else { "accuracy" };
        out.push_str(&format!(
            "\n## GraphQA with a language model: {ds} (test {metric}; published with Llama-2-7B)\n\n| row | method | ours | seeds | published |\n|---|---|---:|---:|---:|\n"
        ));
        for (row, method, published) in PAPER_ROWS {
            let Some((Some(v), sd, seeds)) = methods.get(*method) else { continue };
            let published = published.map_or("—".to_string(), |p| format!("{:.4}", p[col]));
            out.push_str(&format!("| {row} | `{method}` | {} | {seeds} | {published} |\n", cell(*v, *sd)));
        }
        out.push_str(&experts_table(ds, col, methods));
    }
    Ok(out)
}

/// MixRAG's Table 4 (accuracy of each expert combination, Llama-2-7B with LoRA), in the paper's
/// order: (paper row, the experts on (entity, relation, subgraph), published ExplaGraphs accuracy
/// and WebQSP Hit@1).
const EXPERT_ROWS: &[(&str, [bool; 3], [f64; 2])] = &[
    ("Only Entity", [true, false, false], [0.8247, 0.6776]),
    ("Only Relation", [false, true, false], [0.8466, 0.6989]),
    ("Only Subgraph", [false, false, true], [0.8765, 0.7399]),
    ("Entity + Relation", [true, true, false], [0.8574, 0.7192]),
    ("Entity + Subgraph", [true, false, true], [0.8646, 0.7291]),
    ("Relation + Subgraph", [false, true, true], [0.8682, 0.7303]),
    ("MixRAG (All)", [true; 3], [0.8863, 0.7531]),
];

/// The MixRAG methods an expert ablation can run under: (column, method of all three experts).
const EXPERT_BASES: &[(&str, &str)] =
    &[("trained head", "mixrag"), ("frozen LM", "lm-mixrag"), ("LM w/ LoRA", "lm-mixrag-lora"), ("LM, full", "lm-mixrag-full")];

/// The method of `base` (a MixRAG method of all three experts) with only `experts` on, named as
/// the `mixrag` stage names them ([`MixShape::experts_name`]'s suffix after `base`).
fn expert_method(base: &str, experts: [bool; 3]) -> String {
    let name = MixShape::experts_name(experts);
    format!("{base}{}", name.strip_prefix("mixrag").unwrap_or(&name))
}

/// Table 4 for one dataset (`col`: 0 ExplaGraphs, 1 SceneGraphs, 2 WebQSP) when a language-model
/// row ran the expert ablation: a column per MixRAG method whose ablation ran, the published
/// figure last (none for SceneGraphs: the paper omits it).
fn experts_table(ds: &str, col: usize, methods: &BTreeMap<String, (Option<f64>, Option<f64>, usize)>) -> String {
    let ran = |base: &str| {
        EXPERT_ROWS.iter().any(|(_, experts, _)| *experts != [true; 3] && methods.contains_key(&expert_method(base, *experts)))
    };
    if !EXPERT_BASES.iter().any(|(_, base)| base.starts_with("lm-") && ran(base)) {
        return String::new();
    }
    let bases: Vec<&(&str, &str)> = EXPERT_BASES.iter().filter(|(_, base)| ran(base)).collect();
    let mut out = format!("\n### MixRAG's expert combinations (its Table 4): {ds}, test, mean ± std (seeds)\n\n| experts |");
    for (name, base) in &bases {
        out.push_str(&format!(" {name} (`{base}-…`) |"));
    }
    out.push_str(" published |\n|---|");
    out.push_str(&"---:|".repeat(bases.len() + 1));
    out.push('\n');
    for (row, experts, published) in EXPERT_ROWS {
        out.push_str(&format!("| {row} |"));
        for (_, base) in &bases {
            let text = match methods.get(&expert_method(base, *experts)) {
                Some((Some(v), sd, 0)) => cell(*v, *sd),
                Some((Some(v), sd, seeds)) => format!("{} ({seeds})", cell(*v, *sd)),
                _ => String::new(),
            };
            out.push_str(&format!(" {text} |"));
        }
        let published = match col {
            0 => format!("{:.4}", published[0]),
            2 => format!("{:.4}", published[1]),
            _ => "—".into(),
        };
        out.push_str(&format!(" {published} |\n"));
    }
    out
}

pub struct ReportStage;

static INFO: StageInfo = StageInfo {
    name: "report",
    module: module_path!(),
    version: 1,
    about: "report.md from the scores tables of every stage that writes one",
    deps: &[],
    needs: &[],
    excludes: &[],
    collects: &["scores"],
    outputs: &[],
    files: &["report.md"],
    shards: None,
};

impl StageSpec for ReportStage {
    type Config = ReportConfig;
    const INFO: &'static StageInfo = &INFO;
    fn execute(&self, ctx: &mut StageContext<'_>, _cfg: ReportConfig) -> Result<()> {
        let mut text = format!("# Results: {}\n", ctx.dataset.name);
        let mut sources = Vec::new();
        let mut body = String::new();
        // The ranking metrics first (the table `make run` prints), then every other stage in pipeline order.
        let mut stages: Vec<&'static str> = ctx.deps().to_vec();
        stages.sort_by_key(|s| *s != "metrics");
        let mut graphqa = Vec::new();
        for stage in stages {
            if !ctx.has_input(stage, "scores") {
                continue;
            }
            let scores = ctx.input(stage, "scores")?;
            if stage == "gretriever" || stage == "mixrag" {
                graphqa.push(scores.clone());
            }
            sources.push(stage);
            if stage == "metrics" {
                body.push_str(&ranking_section(&scores)?);
            } else {
                body.push_str(&stage_section(stage, &scores)?);
            }
        }
        if sources.is_empty() {
            text.push_str("\nNo stage wrote scores for this dataset.\n");
        } else {
            text.push_str(&format!("\nFrom the `scores` tables of: {}.\n", sources.join(", ")));
            text.push_str(&paper_section(&graphqa)?);
            text.push_str(&body);
        }
        ctx.write_text("report.md", &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::scores::Scores;

    #[test]
    fn seeded_scores_render_as_mean_and_std_and_groups_get_their_own_column() {
        let mut s = Scores::new("ds/task", "gretriever");
        // Two seeds, then their mean and sample std, as the gretriever stage writes them.
        s.push("gt", "test", ALL, "accuracy", 0.6, 10, Some(0));
        s.push("gt", "test", ALL, "accuracy", 0.8, 10, Some(1));
        s.push("gt", "test", ALL, "accuracy", 0.7, 10, None);
        s.push("gt", "test", ALL, "accuracy_std", 0.141_421_356, 10, None);
        s.push("majority", "test", ALL, "accuracy", 0.5, 10, None);
        s.push("gcn", "val", "model=x", "hits_at_10", 0.25, 4, Some(0));
        s.push("sage", "val", "model=x", "hits_at_10", 0.5, 4, Some(0));
        s.push("sage", "val", "model=x", "hits_at_10", 0.75, 4, Some(1));
        let text = stage_section("gretriever", &s.batch().expect("batch")).expect("render");
        assert!(text.contains("## gretriever: ds/task, split `test`\n"), "{text}");
        assert!(text.contains("| gt | 10 | 0.7000 ± 0.1414 |\n"), "{text}");
        assert!(text.contains("| majority | 10 | 0.5000 |\n"), "{text}");
        // Per-seed rows only: their mean, with the count.
        assert!(text.contains("## gretriever: ds/task, split `val`, by model\n\n| method | model | n | hits_at_10 |"), "{text}");
        assert!(text.contains("| gcn | x | 4 | 0.2500 |\n| sage | x | 4 | 0.6250 (2 seeds) |\n"), "{text}");
    }

    #[test]
    fn the_papers_table_puts_our_rows_beside_the_published_figures() {
        let mut g = Scores::new("explagraphs", "gretriever");
        for (seed, v) in [(0, 0.70), (1, 0.74)] {
            g.push("lm-gretriever-lora", "test", ALL, "accuracy", v, 554, Some(seed));
        }
        g.push("lm-gretriever-lora", "test", ALL, "accuracy", 0.72, 554, None);
        g.push("lm-gretriever-lora", "test", ALL, "accuracy_std", 0.028_284_27, 554, None);
        g.push("gretriever-gt", "test", ALL, "accuracy", 0.65, 554, Some(0));
        g.push("gretriever-gt", "test", ALL, "accuracy", 0.65, 554, None);
        g.push("lm-gretriever-lora", "val", ALL, "accuracy", 0.9, 553, None);
        let mut m = Scores::new("explagraphs", "mixrag");
        m.push("lm-mixrag-lora", "test", ALL, "accuracy", 0.75, 554, Some(0));
        m.push("lm-mixrag-lora", "test", ALL, "accuracy", 0.75, 554, None);
        // A dataset without language-model rows gets no table.
        let mut w = Scores::new("synthetic/webqsp", "gretriever");
        w.push("gretriever-gt", "test", ALL, "hit1", 0.1, 8, None);
        let text = paper_section(&[g.batch().expect("g"), m.batch().expect("m"), w.batch().expect("w")]).expect("render");
        assert!(text.contains("## GraphQA with a language model: explagraphs (test accuracy; published with Llama-2-7B)"), "{text}");
        assert!(text.contains("| G-Retriever w/ LoRA | `lm-gretriever-lora` | 0.7200 ± 0.0283 | 2 | 0.8705 |\n"), "{text}");
        assert!(text.contains("| MixRAG w/ LoRA | `lm-mixrag-lora` | 0.7500 | 1 | 0.8863 |\n"), "{text}");
        assert!(
            text.contains("| no language model: G-Retriever's graph transformer + head | `gretriever-gt` | 0.6500 | 1 | — |"),
            "{text}"
        );
        assert!(!text.contains("0.9000") && !text.contains("webqsp"), "validation rows and datasets without LM rows stay out: {text}");
        // Rows in the paper's order: LoRA rows after the frozen ones, the no-LM rows last.
        assert!(text.find("G-Retriever w/ LoRA").expect("a") < text.find("MixRAG w/ LoRA").expect("b"));
        assert!(text.find("MixRAG w/ LoRA").expect("b") < text.find("no language model").expect("c"));
        assert!(!text.contains("Table 4"), "no expert ablation ran with the language model: {text}");
    }

    #[test]
    fn the_expert_ablation_with_the_language_model_renders_as_table_4() {
        let mut m = Scores::new("explagraphs", "mixrag");
        // Heads: the full model and one combination; the LM (LoRA): two seeds of `-subgraph`, the full row.
        m.push("mixrag", "test", ALL, "accuracy", 0.70, 554, None);
        m.push("mixrag-entity", "test", ALL, "accuracy", 0.60, 554, None);
        m.push("lm-mixrag-lora", "test", ALL, "accuracy", 0.74, 554, Some(0));
        m.push("lm-mixrag-lora", "test", ALL, "accuracy", 0.74, 554, None);
        for (seed, v) in [(0, 0.71), (1, 0.73)] {
            m.push("lm-mixrag-lora-subgraph", "test", ALL, "accuracy", v, 554, Some(seed));
        }
        m.push("lm-mixrag-lora-subgraph", "test", ALL, "accuracy", 0.72, 554, None);
        m.push("lm-mixrag-lora-subgraph", "test", ALL, "accuracy_std", 0.014_142_136, 554, None);
        m.push("lm-mixrag-lora-subgraph", "val", ALL, "accuracy", 0.99, 553, None);
        let text = paper_section(&[m.batch().expect("m")]).expect("render");
        assert!(text.contains("### MixRAG's expert combinations (its Table 4): explagraphs"), "{text}");
        assert!(
            text.contains("| experts | trained head (`mixrag-…`) | LM w/ LoRA (`lm-mixrag-lora-…`) | published |\n|---|---:|---:|---:|\n"),
            "{text}"
        );
        assert!(text.contains("| Only Entity | 0.6000 |  | 0.8247 |\n"), "{text}");
        assert!(text.contains("| Only Subgraph |  | 0.7200 ± 0.0141 (2) | 0.8765 |\n"), "{text}");
        assert!(text.contains("| MixRAG (All) | 0.7000 | 0.7400 (1) | 0.8863 |\n"), "{text}");
        assert!(!text.contains("frozen LM") && !text.contains("0.9900"), "{text}");
        // The rows in the paper's order.
        assert!(text.find("Only Relation").expect("r") < text.find("Entity + Relation").expect("er"));
    }

    #[test]
    fn ranking_rows_render_in_aggregate_order_per_group_kind() {
        let mut s = Scores::new("synthetic", "bm25");
        for (split, group, base) in [(ALL_SPLITS, ALL, 0.1), ("test", ALL, 0.2), (ALL_SPLITS, "hops=2", 0.3)] {
            for (k, m) in EvalMode::Stark.metrics().iter().enumerate() {
                s.push("bm25", split, group, m, base + k as f64 / 100.0, 5, None);
            }
        }
        let text = ranking_section(&s.batch().expect("batch")).expect("render");
        assert!(text.contains("Evaluator: STaRK semantics") && !text.contains("MoR"), "{text}");
        let all = text.find("## Retrieval: all queries").expect("all");
        let split = text.find("## Retrieval: by split").expect("split");
        let hops = text.find("## Retrieval: by hop count").expect("hops");
        assert!(all < split && split < hops && !text.contains("by logical pattern"), "{text}");
        assert!(text.contains("| bm25 | * | 5 | 0.1000 | 0.1100 | 0.1200 | 0.1300 |"), "{text}");
        assert!(text.contains("| bm25 | test | 5 | 0.2000 | 0.2100 | 0.2200 | 0.2300 |"), "{text}");
        assert!(text.contains("| bm25 | 2 | 5 | 0.3000 | 0.3100 | 0.3200 | 0.3300 |"), "{text}");
    }

    #[test]
    fn the_evaluator_is_read_from_the_metric_names() {
        // MoR's evaluator writes `mor_`-prefixed names; the section says so without any config.
        let mut s = Scores::new("synthetic", "metrics");
        for (k, m) in EvalMode::Mor.metrics().iter().enumerate() {
            s.push("mor", ALL_SPLITS, ALL, m, 0.5 + k as f64 / 100.0, 7, None);
        }
        let text = ranking_section(&s.batch().expect("batch")).expect("render");
        assert!(text.contains("Evaluator: MoR semantics") && !text.contains("STaRK"), "{text}");
        assert!(text.contains("| mor | * | 7 | 0.5000 | 0.5100 | 0.5200 | 0.5300 |"), "{text}");
        // Every evaluator's metrics are declared, better when higher, and no two evaluators share a name.
        for mode in EvalMode::ALL {
            for (k, m) in mode.metrics().iter().enumerate() {
                assert_eq!(crate::shared::metric::direction(m), Ok(crate::shared::metric::Direction::Higher), "{m}");
                assert_eq!(EvalMode::of_metric(m), Some((mode, k)));
            }
        }
        assert_eq!(EvalMode::of_metric("accuracy"), None);
    }
}
