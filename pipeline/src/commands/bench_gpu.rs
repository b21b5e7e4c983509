//! `tgrag bench-gpu` (hidden; `make bench-gpu`, issue 30 item 6): on a machine with a GPU, one table
//! of what it gives against the CPU, written to `<outputs>/bench/bench_gpu.parquet` (table
//! `bench_gpu`) and printed.
//!
//! * `minilm`: sentences per second of all-MiniLM-L6-v2 over `--sentences` generated sentences of
//!   40–80 words (batch 32): burn on wgpu against the fused CPU engine (its default products) and
//!   burn on the CPU; the smallest cosine between the GPU's and the fused engine's embeddings.
//! * `training`: `tgrag run --dataset synthetic --size <--size> --force` once on `--device cpu` and
//!   once on `--device gpu` (child processes, `<outputs>/bench/gpu-runs/{cpu,gpu}`); for every stage
//!   that trains a model family (MoR's planner and reranker, PASemiQA's planner, TopoRAG's node and
//!   link GNNs, the GraphQA encoders and heads, MixRAG) its training epochs (the `curves` rows of
//!   `train_loss`), its time (the sum of its `timings` phases) and epochs per second on each
//!   device, and the ratio.
//! * `end-to-end`: `tgrag run --dataset synthetic --size <--e2e-size> --device gpu --force`
//!   (default `prime`, STaRK-Prime scale): the wall time and every stage's time.
//!
//! Where wgpu finds no hardware adapter the figures are those of a software rasteriser (the note
//! says so): a smoke check of the path, not a GPU's speed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use tgrag_models::DeviceChoice;
use tgrag_models::minilm::{self, EncodeOptions, MiniLm, fused::Products};
use tgrag_schemas::rows::Rows;
use tgrag_schemas::tables;

/// `tgrag bench-gpu` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchGpuArgs {
    /// Sentences embedded by each MiniLM engine.
    #[arg(long, default_value_t = 1000, value_parser = crate::commands::num::count)]
    pub sentences: usize,
    /// Size of the synthetic run whose trainings are compared on cpu and gpu.
    #[arg(long, default_value = "small")]
    pub size: String,
    /// Size of the end-to-end run on the GPU.
    #[arg(long, default_value = "prime")]
    pub e2e_size: String,
    /// Leave the end-to-end run out.
    #[arg(long)]
    pub no_e2e: bool,
    /// The MiniLM folder (default: weights/all-MiniLM-L6-v2).
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// One row of `bench_gpu`.
struct Figure {
    section: &'static str,
    system: String,
    device: &'static str,
    metric: &'static str,
    value: f64,
    unit: &'static str,
    note: String,
}

pub fn run(outputs: &Path, a: BenchGpuArgs) -> Result<()> {
    for s in [&a.size, &a.e2e_size] {
        if !["tiny", "small", "medium", "prime"].contains(&s.as_str()) {
            bail_config!("--size / --e2e-size `{s}`: tiny, small, medium or prime");
        }
    }
    let dir = a.model.clone().unwrap_or_else(|| minilm::default_dir(Path::new(".")));
    if !dir.join("model.safetensors").is_file() {
        bail_config!("{}: no model.safetensors (run `make models` or `tgrag fetch minilm`)", dir.display());
    }
    let adapter = DeviceChoice::Gpu.describe();
    let hardware = tgrag_models::device::hardware_adapter().is_some();
    let note = if hardware { adapter.clone() } else { format!("{adapter}; NOT a hardware GPU: a smoke check, not a GPU's speed") };
    eprintln!("bench-gpu: {note}");
    // The table is written after every section, so a run cut short (a device's time limit) keeps
    // what it measured.
    let out = outputs.join("bench").join("bench_gpu.parquet");
    std::fs::create_dir_all(outputs.join("bench")).with_context(|| format!("creating {}", outputs.join("bench").display()))?;
    let mut figures = minilm_figures(&dir, a.sentences, &note)?;
    save(&figures, &out)?;
    let runs = outputs.join("bench").join("gpu-runs");
    figures.extend(training_figures(&runs, &a.size, &note)?);
    save(&figures, &out)?;
    if !a.no_e2e {
        figures.extend(end_to_end(&runs, &a.e2e_size, &note)?);
        save(&figures, &out)?;
    }
    for f in &figures {
        println!("  {:<11} {:<24} {:<8} {:<22} {:>12.3} {}", f.section, f.system, f.device, f.metric, f.value, f.unit);
    }
    println!("wrote {}", out.display());
    Ok(())
}

/// Writes `figures` as the `bench_gpu` table (through a temporary file renamed into place).
fn save(figures: &[Figure], out: &Path) -> Result<()> {
    let mut rows = Rows::new(&tables::BENCH_GPU);
    for f in figures {
        rows.put(f.section).put(f.system.as_str()).put(f.device).put(f.metric).put(f.value).put(f.unit).put(f.note.as_str()).end_row();
    }
    tgrag_schemas::io::write_table(&tables::BENCH_GPU, out, &rows.finish()?)?;
    Ok(())
}

/// `n` seeded sentences of 40–80 words from a fixed vocabulary (as `make bench`'s MiniLM bench).
fn sentences(n: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "graph",
        "retrieval",
        "over",
        "text",
        "rich",
        "knowledge",
        "bases",
        "ranks",
        "entities",
        "by",
        "structure",
        "and",
        "while",
        "the",
        "planner",
        "proposes",
        "relation",
        "paths",
        "reranker",
        "scores",
        "every",
        "trajectory",
        "with",
        "textual",
        "structural",
        "traversal",
        "fingerprints",
        "for",
        "each",
        "candidate",
        "answer",
        "node",
    ];
    let mut state = 11u64;
    let mut next = || {
        state = tgrag_schemas::seed::splitmix64(state);
        state
    };
    (0..n)
        .map(|_| {
            let len = 40 + (next() % 41) as usize;
            (0..len).map(|_| WORDS[(next() % WORDS.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

fn minilm_figures(dir: &Path, n: usize, note: &str) -> Result<Vec<Figure>> {
    let texts = sentences(n);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let opts = EncodeOptions::default();
    let mut out = Vec::new();
    let mut embedded: Vec<Vec<f32>> = Vec::new();
    for (name, device) in [("fused", "cpu"), ("burn", "cpu"), ("burn-wgpu", "gpu")] {
        let model = match name {
            "fused" => MiniLm::load_fused(dir, Products::Auto),
            "burn" => MiniLm::load(dir, &DeviceChoice::Cpu.device()),
            _ => MiniLm::load(dir, &DeviceChoice::Gpu.device()),
        }
        .with_context(|| format!("loading MiniLM ({name} on {device})"))?;
        // One warm-up batch (the GPU compiles its kernels), then the timed pass.
        model.encode(&refs[..refs.len().min(32)], opts, &|_| {})?;
        let t = Instant::now();
        let e = model.encode(&refs, opts, &|_| {})?;
        let secs = t.elapsed().as_secs_f64();
        eprintln!("bench-gpu: minilm {name} on {device}: {:.1} sentences/s ({} products)", n as f64 / secs, model.products());
        out.push(Figure {
            section: "minilm",
            system: name.to_string(),
            device,
            metric: "sentences_per_s",
            value: n as f64 / secs,
            unit: "1/s",
            note: format!("{n} sentences of 40-80 words, batch 32, {} products; {note}", model.products()),
        });
        embedded.push(e);
    }
    let dim = embedded[0].len() / n.max(1);
    let cos = (0..n)
        .map(|i| {
            let (a, b) = (&embedded[2][i * dim..(i + 1) * dim], &embedded[0][i * dim..(i + 1) * dim]);
            let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            dot / (norm(a) * norm(b)).max(1e-30)
        })
        .fold(1.0f64, f64::min);
    out.push(Figure {
        section: "minilm",
        system: "burn-wgpu vs fused".into(),
        device: "gpu/cpu",
        metric: "min_cosine",
        value: cos,
        unit: "cosine",
        note: note.to_string(),
    });
    let ratio = out[2].value / out[0].value;
    out.push(Figure {
        section: "minilm",
        system: "burn-wgpu vs fused".into(),
        device: "gpu/cpu",
        metric: "throughput_ratio",
        value: ratio,
        unit: "x",
        note: note.to_string(),
    });
    Ok(out)
}

/// The stages whose models train, with what trains there.
const TRAINING: &[(&str, &str)] = &[
    ("mor", "MoR planner + reranker"),
    ("pasemiqa", "PASemiQA planner"),
    ("toporag", "TopoRAG node + link GNNs"),
    ("gretriever", "GraphQA encoders + heads"),
    ("mixrag", "MixRAG experts + gate"),
];

/// `tgrag run` of the synthetic dataset in a child process; its wall time.
fn child_run(outputs: &Path, size: &str, device: &str) -> Result<f64> {
    let exe = std::env::current_exe().context("the tgrag executable")?;
    let t = Instant::now();
    let status = Command::new(exe)
        .arg("--outputs")
        .arg(outputs)
        .arg("--quiet")
        .args(["run", "--dataset", "synthetic", "--size", size, "--seed", "42", "--device", device, "--force"])
        .status()
        .context("starting tgrag run")?;
    if !status.success() {
        anyhow::bail!("tgrag run --size {size} --device {device} failed ({status})");
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The synthetic dataset's folder under a run's `outputs` (every size writes `synthetic/`; each run
/// here has an outputs folder of its own).
fn dataset_dir(outputs: &Path) -> PathBuf {
    outputs.join("synthetic")
}

/// A stage's time (the sum of its `timings` phases) and its training epochs (`train_loss` rows).
fn stage_figures(root: &Path, stage: &str) -> Result<(f64, usize)> {
    let timings = tgrag_schemas::io::read_table(&root.join(stage).join("timings.parquet"), &tables::TIMINGS)?;
    let secs: f64 = tgrag_schemas::columns::f64s(&timings, "seconds")?.values().iter().sum();
    let curves = root.join(stage).join("curves.parquet");
    let epochs = if curves.is_file() {
        let c = tgrag_schemas::io::read_table(&curves, &tables::CURVES)?;
        let metric = tgrag_schemas::columns::strs(&c, "metric")?;
        (0..c.num_rows()).filter(|&i| metric.value(i) == "train_loss").count()
    } else {
        0
    };
    Ok((secs, epochs))
}

fn training_figures(runs: &Path, size: &str, note: &str) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let mut per: Vec<[(f64, usize); 2]> = vec![[(0.0, 0); 2]; TRAINING.len()];
    for (d, device) in ["cpu", "gpu"].into_iter().enumerate() {
        let folder = runs.join(device);
        child_run(&folder, size, device)?;
        for (i, (stage, _)) in TRAINING.iter().enumerate() {
            per[i][d] = stage_figures(&dataset_dir(&folder), stage)?;
        }
    }
    for ((stage, what), [cpu, gpu]) in TRAINING.iter().zip(&per) {
        let system = format!("{stage} ({what})");
        let rate = |(s, e): (f64, usize)| if s > 0.0 { e as f64 / s } else { 0.0 };
        for (device, (s, e)) in [("cpu", *cpu), ("gpu", *gpu)] {
            let n = format!("synthetic {size}; {e} epochs in {s:.2} s of stage time; {note}");
            out.push(Figure {
                section: "training",
                system: system.clone(),
                device,
                metric: "stage_seconds",
                value: s,
                unit: "s",
                note: n.clone(),
            });
            out.push(Figure {
                section: "training",
                system: system.clone(),
                device,
                metric: "epochs_per_s",
                value: rate((s, e)),
                unit: "1/s",
                note: n,
            });
        }
        out.push(Figure {
            section: "training",
            system,
            device: "gpu/cpu",
            metric: "speedup",
            value: if gpu.0 > 0.0 { cpu.0 / gpu.0 } else { 0.0 },
            unit: "x",
            note: format!("cpu stage time / gpu stage time; {note}"),
        });
    }
    Ok(out)
}

fn end_to_end(runs: &Path, size: &str, note: &str) -> Result<Vec<Figure>> {
    let folder = runs.join(format!("e2e-{size}"));
    let wall = child_run(&folder, size, "gpu")?;
    let root = dataset_dir(&folder);
    let mut out = vec![Figure {
        section: "end-to-end",
        system: format!("tgrag run --size {size}"),
        device: "gpu",
        metric: "wall_seconds",
        value: wall,
        unit: "s",
        note: note.to_string(),
    }];
    let mut stages: Vec<String> = std::fs::read_dir(&root)
        .with_context(|| format!("reading {}", root.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("timings.parquet").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    stages.sort();
    for stage in stages {
        let (s, _) = stage_figures(&root, &stage)?;
        out.push(Figure {
            section: "end-to-end",
            system: stage,
            device: "gpu",
            metric: "stage_seconds",
            value: s,
            unit: "s",
            note: note.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stage's figures are the sum of its timed phases and the count of its `train_loss` rows,
    /// read from the declared tables a run writes.
    #[test]
    fn stage_figures_sum_phases_and_count_training_epochs() {
        let d = tempfile::tempdir().expect("tmp");
        let stage = d.path().join("toporag");
        std::fs::create_dir_all(&stage).expect("dir");
        let mut t = Rows::new(&tables::TIMINGS);
        for (phase, s) in [("embed texts", 1.5), ("train GNNs", 2.25)] {
            t.put("toporag").put(phase).put(s).put(None::<u64>).end_row();
        }
        tgrag_schemas::io::write_table(&tables::TIMINGS, &stage.join("timings.parquet"), &t.finish().expect("timings")).expect("write");
        let mut c = Rows::new(&tables::CURVES);
        for (epoch, metric) in [(1u32, "train_loss"), (1, "val_loss"), (2, "train_loss"), (2, "val_acc"), (3, "train_loss")] {
            c.put("gcn").put("").put(0u64).put(epoch).put(metric).put(0.5).put(epoch == 2).end_row();
        }
        tgrag_schemas::io::write_table(&tables::CURVES, &stage.join("curves.parquet"), &c.finish().expect("curves")).expect("write");
        let (secs, epochs) = stage_figures(d.path(), "toporag").expect("figures");
        assert!((secs - 3.75).abs() < 1e-12 && epochs == 3, "{secs} {epochs}");
        // A stage without curves trained nothing; a stage without timings is an error naming it.
        std::fs::remove_file(stage.join("curves.parquet")).expect("rm");
        assert_eq!(stage_figures(d.path(), "toporag").expect("figures").1, 0);
        let e = stage_figures(d.path(), "mor").expect_err("no timings").to_string();
        assert!(e.contains("mor") && e.contains("timings.parquet"), "{e}");
    }
}
