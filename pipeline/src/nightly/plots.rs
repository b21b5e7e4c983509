//! The nightly report's figures, drawn from the night's Parquet tables alone (so that `tgrag report
//! --from` draws the same ones): metric bars per dataset and method, latency histograms, training and
//! validation curves of every trained model, TopoRAG's correlation by K.

use std::collections::BTreeMap;

use anyhow::Result;
use arrow::array::{Array, RecordBatch};
use tgrag_schemas::columns;
use tgrag_stages::shared::plots::{Mark, Series, bars, chart, histogram};

/// One figure: its file name under `plots/`, the dataset it belongs to (empty: the whole night),
/// its caption and its PNG bytes.
#[derive(Debug, Clone)]
pub struct Figure {
    pub file: String,
    pub dataset: String,
    pub caption: String,
    pub png: Vec<u8>,
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect::<String>()
        .trim_matches('-')
        .to_string()
}

const SIZE: (u32, u32) = (760, 380);

/// The headline metrics of a leaderboard section: where a dataset's source has rows without a
/// breakdown, one bar chart per (dataset, source, split) with a group per method and a bar per
/// metric (at most six; seeded methods by their mean over seeds).
pub fn metric_bars(lb: &RecordBatch) -> Result<Vec<Figure>> {
    let (panels, order) = panels(lb)?;
    // Per (dataset, source): the test split when there is one, else the first split seen.
    let mut out = Vec::new();
    let mut done: Vec<(String, String)> = Vec::new();
    let mut keys = order.clone();
    keys.sort_by_key(|k| (k.dataset.clone(), k.source.clone(), k.split != "test" && k.split != "all"));
    for key in keys {
        let ds = (key.dataset.clone(), key.source.clone());
        if done.contains(&ds) {
            continue;
        }
        done.push(ds);
        let p = &panels[&key];
        let title = format!("{} — {} ({})", key.dataset, key.source, key.split);
        let png = bars(&title, "value", &p.methods, &p.series(), SIZE)?;
        out.push(Figure {
            file: format!("bars-{}-{}-{}.png", slug(&key.dataset), slug(&key.source), slug(&key.split)),
            dataset: key.dataset.clone(),
            caption: title,
            png,
        });
    }
    Ok(out)
}

/// Which bar chart a leaderboard row belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct PanelKey {
    dataset: String,
    source: String,
    split: String,
}

/// One (method, metric) value: the unseeded value, or the values over seeds.
#[derive(Default)]
struct Cell {
    mean: Option<f64>,
    seeds: Vec<f64>,
}

/// One bar chart: methods and metrics in the order first seen, and their values.
#[derive(Default)]
struct Panel {
    methods: Vec<String>,
    metrics: Vec<String>,
    cells: BTreeMap<(String, String), Cell>,
}

impl Panel {
    /// A series per metric: each method's value (the mean over seeds for a seeded method).
    fn series(&self) -> Vec<(&str, Vec<Option<f64>>)> {
        self.metrics
            .iter()
            .map(|m| {
                let vals = self
                    .methods
                    .iter()
                    .map(|me| {
                        self.cells.get(&(me.clone(), m.clone())).and_then(|Cell { mean, seeds }| {
                            mean.or_else(|| (!seeds.is_empty()).then(|| seeds.iter().sum::<f64>() / seeds.len() as f64))
                        })
                    })
                    .collect();
                (m.as_str(), vals)
            })
            .collect()
    }
}

/// The panels of the rows without a breakdown whose metric is better higher (not `_std`), and
/// their keys in the order first seen.
fn panels(lb: &RecordBatch) -> Result<(BTreeMap<PanelKey, Panel>, Vec<PanelKey>)> {
    let (so, d, me, sp, g, mt) = (
        columns::strs(lb, "source")?,
        columns::strs(lb, "dataset")?,
        columns::strs(lb, "method")?,
        columns::strs(lb, "split")?,
        columns::strs(lb, "group")?,
        columns::strs(lb, "metric")?,
    );
    let (v, seed) = (columns::f64s(lb, "value")?, columns::u64s(lb, "seed")?);
    let mut panels: BTreeMap<PanelKey, Panel> = BTreeMap::new();
    let mut order: Vec<PanelKey> = Vec::new();
    for i in 0..lb.num_rows() {
        let metric = mt.value(i);
        if g.value(i) != "*" || metric.ends_with("_std") || crate::nightly::diff::higher_is_better(metric) != Some(true) {
            continue;
        }
        // The ranking metrics are drawn over all splits; other sources per split, test first.
        let split = sp.value(i);
        if so.value(i) == "metrics" && split != "all" {
            continue;
        }
        let key = PanelKey { dataset: d.value(i).to_string(), source: so.value(i).to_string(), split: split.to_string() };
        if !panels.contains_key(&key) {
            order.push(key.clone());
        }
        let p = panels.entry(key).or_default();
        if !p.methods.iter().any(|m| m == me.value(i)) {
            p.methods.push(me.value(i).to_string());
        }
        if !p.metrics.iter().any(|m| m == metric) && p.metrics.len() < 6 {
            p.metrics.push(metric.to_string());
        }
        let c = p.cells.entry((me.value(i).to_string(), metric.to_string())).or_default();
        if seed.is_null(i) {
            c.mean = Some(v.value(i));
        } else {
            c.seeds.push(v.value(i));
        }
    }
    Ok((panels, order))
}

/// One histogram per (dataset, stage, what) of the per-item latencies.
pub fn latency_histograms(lat: &RecordBatch) -> Result<Vec<Figure>> {
    let (d, st, w, ms) =
        (columns::strs(lat, "dataset")?, columns::strs(lat, "stage")?, columns::strs(lat, "what")?, columns::f64s(lat, "ms")?);
    let mut groups: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for i in 0..lat.num_rows() {
        groups.entry((d.value(i).into(), st.value(i).into(), w.value(i).into())).or_default().push(ms.value(i));
    }
    let mut out = Vec::new();
    for ((ds, stage, what), v) in groups {
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
        let title = format!("{ds} — {stage} {what}: median {median:.2} ms over {}", v.len());
        let png = histogram(&title, "ms", &v, 30, SIZE)?;
        out.push(Figure { file: format!("latency-{}-{}-{}.png", slug(&ds), slug(&stage), slug(&what)), dataset: ds, caption: title, png });
    }
    Ok(out)
}

/// One chart per (dataset, source, model): the training loss and the first validation metric of
/// each variant, for the lowest seed (at most 12 lines).
pub fn curve_charts(c: &RecordBatch) -> Result<Vec<Figure>> {
    let (d, so, mo, va, mt) = (
        columns::strs(c, "dataset")?,
        columns::strs(c, "source")?,
        columns::strs(c, "model")?,
        columns::strs(c, "variant")?,
        columns::strs(c, "metric")?,
    );
    let (seed, ep, v) = (columns::u64s(c, "seed")?, columns::u32s(c, "epoch")?, columns::f64s(c, "value")?);
    let mut min_seed: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for i in 0..c.num_rows() {
        let k = (d.value(i).to_string(), so.value(i).to_string(), mo.value(i).to_string());
        let s = min_seed.entry(k).or_insert(seed.value(i));
        *s = (*s).min(seed.value(i));
    }
    // (dataset, source, model) → series name (in first-seen order) → points
    type Lines = Vec<(String, Vec<(f64, f64)>)>;
    let mut charts: BTreeMap<(String, String, String), Lines> = BTreeMap::new();
    let mut val_metric: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for i in 0..c.num_rows() {
        let k = (d.value(i).to_string(), so.value(i).to_string(), mo.value(i).to_string());
        if seed.value(i) != min_seed[&k] {
            continue;
        }
        let metric = mt.value(i);
        let wanted = metric == "train_loss"
            || (metric.starts_with("val_")
                && metric != "val_loss"
                && val_metric.entry(k.clone()).or_insert_with(|| metric.to_string()) == metric);
        if !wanted {
            continue;
        }
        let name = if va.value(i).is_empty() { metric.to_string() } else { format!("{} {metric}", va.value(i)) };
        let series = charts.entry(k).or_default();
        let point = (f64::from(ep.value(i)), v.value(i));
        match series.iter().position(|s| s.0 == name) {
            Some(j) => series[j].1.push(point),
            None if series.len() < 12 => series.push((name, vec![point])),
            None => {}
        }
    }
    let mut out = Vec::new();
    for ((ds, source, model), series) in charts {
        let s: Vec<Series<'_>> = series.iter().map(|(n, p)| Series { name: n, points: p.clone() }).collect();
        let title = format!("{ds} — {source} {model}: training curves (seed {})", min_seed[&(ds.clone(), source.clone(), model.clone())]);
        let png = chart(&title, "epoch", "value", &s, Mark::Lines, SIZE)?;
        out.push(Figure { file: format!("curves-{}-{}-{}.png", slug(&ds), slug(&source), slug(&model)), dataset: ds, caption: title, png });
    }
    Ok(out)
}

/// TopoRAG's correlation per dataset: Pearson r of text cosine with proximity cosine by K, and the
/// role distance's r at K = 0.
pub fn correlation_charts(c: &RecordBatch) -> Result<Vec<Figure>> {
    let (d, me, k, p) = (columns::strs(c, "dataset")?, columns::strs(c, "measure")?, columns::u32s(c, "k")?, columns::f64s(c, "pearson")?);
    let mut by: BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    for i in 0..c.num_rows() {
        by.entry(d.value(i).into()).or_default().entry(me.value(i).into()).or_default().push((f64::from(k.value(i)), p.value(i)));
    }
    let mut out = Vec::new();
    for (ds, measures) in by {
        let s: Vec<Series<'_>> = measures.iter().map(|(n, pts)| Series { name: n, points: pts.clone() }).collect();
        let title = format!("{ds} — TopoRAG: Pearson r with text similarity");
        let png = chart(&title, "K (diffusion hops; 0: role)", "Pearson r", &s, Mark::Lines, SIZE)?;
        out.push(Figure { file: format!("correlation-{}.png", slug(&ds)), dataset: ds, caption: title, png });
    }
    Ok(out)
}

/// Every figure of a night.
pub fn all(lb: &RecordBatch, latency: &RecordBatch, curves: &RecordBatch, correlation: &RecordBatch) -> Result<Vec<Figure>> {
    let mut v = metric_bars(lb)?;
    v.extend(correlation_charts(correlation)?);
    v.extend(latency_histograms(latency)?);
    v.extend(curve_charts(curves)?);
    Ok(v)
}
