//! `tgrag-bench bench-gpu` (`make bench-gpu`): on a machine with a GPU, one table
//! of what it gives against the CPU, written to `<outputs>/bench/bench_gpu.parquet` (table
//! `bench_gpu`) and printed.
//!
//! * `minilm`: sentences per second of all-MiniLM-L6-v2 over `--sentences` generated sentences of
//!   40–80 words (batch 32): burn on wgpu against the fused CPU engine (its default products); the
//!   smallest cosine between the GPU's and the fused engine's embeddings. (No burn-on-the-CPU row:
//!   burn's CPU backend is compiled at opt-level 0, as nothing on the CPU runs through it.)
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
//!
//! The table is written after each section. `--resume` goes on from a bench-gpu into the same
//! outputs folder that was stopped (a device lent for minutes): the sections the table holds are
//! kept, and the runs resume where they stopped (completed stages are skipped and keep their
//! timings) instead of starting over.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use tgrag_models::DeviceChoice;
use tgrag_models::minilm::{self, EncodeOptions, MiniLm, fused::Products};
use tgrag_pipeline::bail_config;
use tgrag_schemas::rows::Rows;
use tgrag_schemas::tables;

/// `tgrag-bench bench-gpu` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchGpuArgs {
    /// Sentences embedded by each MiniLM engine.
    #[arg(long, default_value_t = 1000, value_parser = tgrag_pipeline::commands::num::count)]
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
    /// Go on from an earlier bench-gpu into the same outputs folder that was stopped (a device's
    /// time limit): the sections its table already holds are kept, and its `tgrag run`s resume
    /// where they stopped instead of starting over (`--force` is left out).
    #[arg(long)]
    pub resume: bool,
}

/// One row of `bench_gpu`.
#[derive(Clone, Debug, PartialEq)]
struct Figure {
    section: String,
    system: String,
    device: String,
    metric: String,
    value: f64,
    unit: String,
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
    let earlier = if a.resume && out.is_file() { load(&out)? } else { Vec::new() };
    let runs = outputs.join("bench").join("gpu-runs");
    let mut figures = Vec::new();
    for section in ["minilm", "training", "end-to-end"] {
        let kept: Vec<Figure> = earlier.iter().filter(|f| f.section == section).cloned().collect();
        if !kept.is_empty() && measured_as_asked(section, &kept, &a) {
            eprintln!("bench-gpu: {section}: kept the {} figures of the earlier run (--resume)", kept.len());
            figures.extend(kept);
            continue;
        }
        if !kept.is_empty() {
            eprintln!("bench-gpu: {section}: the earlier run measured other sizes; measured again");
        }
        let force = !a.resume;
        match section {
            "minilm" => figures.extend(minilm_figures(&dir, a.sentences, &note)?),
            "training" => figures.extend(training_figures(&runs, &a.size, &note, force)?),
            _ if a.no_e2e => continue,
            _ => figures.extend(end_to_end(&runs, &a.e2e_size, &note, force)?),
        }
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
        rows.put(f.section.as_str())
            .put(f.system.as_str())
            .put(f.device.as_str())
            .put(f.metric.as_str())
            .put(f.value)
            .put(f.unit.as_str())
            .put(f.note.as_str())
            .end_row();
    }
    tgrag_schemas::io::write_table(&tables::BENCH_GPU, out, &rows.finish()?)?;
    Ok(())
}

/// Whether an earlier run's figures of `section` were measured with this run's settings (the
/// sentence count, the training run's size, the end-to-end size), as their notes and names say.
fn measured_as_asked(section: &str, kept: &[Figure], a: &BenchGpuArgs) -> bool {
    match section {
        "minilm" => kept.iter().any(|f| f.note.starts_with(&minilm_setting(a.sentences))),
        "training" => kept.iter().any(|f| f.note.starts_with(&training_setting(&a.size))),
        _ => kept.iter().any(|f| f.system == end_to_end_system(&a.e2e_size)),
    }
}

/// How a MiniLM figure's note begins: the sentence count it was measured on. The producer
/// ([`minilm_figures`]) and the checker ([`measured_as_asked`]) both format it here.
fn minilm_setting(sentences: usize) -> String {
    format!("{sentences} sentences of 40-80 words")
}

/// How a training figure's note begins: the synthetic size its runs used.
fn training_setting(size: &str) -> String {
    format!("synthetic {size};")
}

/// The system name of the end-to-end wall-time figure: the size it ran.
fn end_to_end_system(size: &str) -> String {
    format!("tgrag run --size {size}")
}

/// The figures of an earlier `bench_gpu` table.
fn load(path: &Path) -> Result<Vec<Figure>> {
    let t = tgrag_schemas::io::read_table(path, &tables::BENCH_GPU)?;
    let col = |name: &str| tgrag_schemas::columns::strs(&t, name);
    let (section, system, device, metric, unit, note) =
        (col("section")?, col("system")?, col("device")?, col("metric")?, col("unit")?, col("note")?);
    let value = tgrag_schemas::columns::f64s(&t, "value")?;
    Ok((0..t.num_rows())
        .map(|i| Figure {
            section: section.value(i).into(),
            system: system.value(i).into(),
            device: device.value(i).into(),
            metric: metric.value(i).into(),
            value: value.value(i),
            unit: unit.value(i).into(),
            note: note.value(i).into(),
        })
        .collect())
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
    for (name, device) in [("fused", "cpu"), ("burn-wgpu", "gpu")] {
        let model = match name {
            "fused" => MiniLm::load_fused(dir, Products::Auto),
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
            section: "minilm".into(),
            system: name.to_string(),
            device: device.into(),
            metric: "sentences_per_s".into(),
            value: n as f64 / secs,
            unit: "1/s".into(),
            note: format!("{}, batch 32, {} products; {note}", minilm_setting(n), model.products()),
        });
        embedded.push(e);
    }
    let dim = embedded[0].len() / n.max(1);
    let cos = (0..n)
        .map(|i| {
            let (a, b) = (&embedded[1][i * dim..(i + 1) * dim], &embedded[0][i * dim..(i + 1) * dim]);
            let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            dot / (norm(a) * norm(b)).max(1e-30)
        })
        .fold(1.0f64, f64::min);
    out.push(Figure {
        section: "minilm".into(),
        system: "burn-wgpu vs fused".into(),
        device: "gpu/cpu".into(),
        metric: "min_cosine".into(),
        value: cos,
        unit: "cosine".into(),
        note: note.to_string(),
    });
    let ratio = out[1].value / out[0].value;
    out.push(Figure {
        section: "minilm".into(),
        system: "burn-wgpu vs fused".into(),
        device: "gpu/cpu".into(),
        metric: "throughput_ratio".into(),
        value: ratio,
        unit: "x".into(),
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

/// The `tgrag` binary: `$TGRAG`, else the one built beside this harness.
fn tgrag_exe() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("TGRAG") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().context("the tgrag-bench executable")?;
    let exe = me.with_file_name("tgrag");
    anyhow::ensure!(exe.is_file(), "no tgrag binary beside {} (build the workspace, or set TGRAG)", me.display());
    Ok(exe)
}

/// `tgrag run` of the synthetic dataset in a child process (every stage rerun with `force`, else
/// resumed: a stage an earlier run finished is skipped and keeps its timings); its wall time.
fn child_run(outputs: &Path, size: &str, device: &str, force: bool) -> Result<f64> {
    let exe = tgrag_exe()?;
    let t = Instant::now();
    let status = Command::new(exe)
        .arg("--outputs")
        .arg(outputs)
        .arg("--quiet")
        .args(["run", "--dataset", "synthetic", "--size", size, "--seed", "42", "--device", device])
        .args(force.then_some("--force"))
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

fn training_figures(runs: &Path, size: &str, note: &str, force: bool) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let mut per: Vec<[(f64, usize); 2]> = vec![[(0.0, 0); 2]; TRAINING.len()];
    for (d, device) in ["cpu", "gpu"].into_iter().enumerate() {
        let folder = runs.join(device);
        child_run(&folder, size, device, force)?;
        for (i, (stage, _)) in TRAINING.iter().enumerate() {
            per[i][d] = stage_figures(&dataset_dir(&folder), stage)?;
        }
    }
    for ((stage, what), [cpu, gpu]) in TRAINING.iter().zip(&per) {
        let system = format!("{stage} ({what})");
        let rate = |(s, e): (f64, usize)| if s > 0.0 { e as f64 / s } else { 0.0 };
        for (device, (s, e)) in [("cpu", *cpu), ("gpu", *gpu)] {
            let n = format!("{} {e} epochs in {s:.2} s of stage time; {note}", training_setting(size));
            out.push(Figure {
                section: "training".into(),
                system: system.clone(),
                device: device.into(),
                metric: "stage_seconds".into(),
                value: s,
                unit: "s".into(),
                note: n.clone(),
            });
            out.push(Figure {
                section: "training".into(),
                system: system.clone(),
                device: device.into(),
                metric: "epochs_per_s".into(),
                value: rate((s, e)),
                unit: "1/s".into(),
                note: n,
            });
        }
        out.push(Figure {
            section: "training".into(),
            system,
            device: "gpu/cpu".into(),
            metric: "speedup".into(),
            value: if gpu.0 > 0.0 { cpu.0 / gpu.0 } else { 0.0 },
            unit: "x".into(),
            note: format!("cpu stage time / gpu stage time; {note}"),
        });
    }
    Ok(out)
}

fn end_to_end(runs: &Path, size: &str, note: &str, force: bool) -> Result<Vec<Figure>> {
    let folder = runs.join(format!("e2e-{size}"));
    let wall = child_run(&folder, size, "gpu", force)?;
    // A resumed run's wall time is that of its last part; the stage rows below cover every stage.
    let wall_note = if force { note.to_string() } else { format!("resumed (--resume): the wall time of the last part only; {note}") };
    let root = dataset_dir(&folder);
    let mut out = vec![Figure {
        section: "end-to-end".into(),
        system: end_to_end_system(size),
        device: "gpu".into(),
        metric: "wall_seconds".into(),
        value: wall,
        unit: "s".into(),
        note: wall_note,
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
            section: "end-to-end".into(),
            system: stage,
            device: "gpu".into(),
            metric: "stage_seconds".into(),
            value: s,
            unit: "s".into(),
            note: note.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments as `tgrag-bench bench-gpu ARGS` parses them.
    fn args(a: &[&str]) -> BenchGpuArgs {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            a: BenchGpuArgs,
        }
        let argv = std::iter::once("bench-gpu").chain(a.iter().copied());
        <Wrap as clap::Parser>::try_parse_from(argv).expect("arguments").a
    }

    /// bench-gpu (never run in tests: it needs a GPU) checks its arguments and the model before any
    /// work, names what is wrong and writes nothing.
    #[test]
    fn bench_gpu_refuses_bad_arguments_before_any_work() {
        let d = tempfile::tempdir().expect("tmp");
        let o = d.path().join("outputs");
        let e = run(&o, args(&["--size", "huge"])).expect_err("huge").to_string();
        assert!(e.contains("huge") && e.contains("tiny, small, medium or prime"), "{e}");
        let nowhere = d.path().join("nowhere");
        let err = run(&o, args(&["--model", nowhere.to_str().expect("utf-8")])).expect_err("no model");
        assert!(err.to_string().contains("nowhere") && err.to_string().contains("model.safetensors"), "{err}");
        assert_eq!(tgrag_pipeline::fault::fault_of(&err), Some(tgrag_schemas::Fault::Config), "a user fault");
        assert!(!o.join("bench").exists(), "nothing is written");
    }

    /// `--resume` keeps every section an earlier, stopped bench-gpu wrote: with all three in the
    /// table it measures nothing again (no MiniLM pass, no `tgrag run`) and leaves the table's rows
    /// as they were.
    #[test]
    fn bench_gpu_resume_keeps_the_sections_an_earlier_run_wrote() {
        let d = tempfile::tempdir().expect("tmp");
        let o = d.path().join("outputs");
        let path = o.join("bench/bench_gpu.parquet");
        std::fs::create_dir_all(o.join("bench")).expect("mkdir");
        // A model folder the argument check accepts (nothing reads it when every section is kept).
        let model = d.path().join("model");
        std::fs::create_dir_all(&model).expect("mkdir");
        std::fs::write(model.join("model.safetensors"), b"unread").expect("write");
        let mut rows = Rows::new(&tables::BENCH_GPU);
        // As bench-gpu writes them with its defaults: 1000 sentences, a `small` training run,
        // `prime` end to end (the notes and the run's name say which).
        for (section, system, device, metric, value, note) in [
            ("minilm", "fused", "cpu", "sentences_per_s", 873.25, "1000 sentences of 40-80 words"),
            ("training", "mor (MoR planner + reranker)", "cpu", "stage_seconds", 11.5, "synthetic small; 60 epochs"),
            ("end-to-end", "tgrag run --size prime", "gpu", "wall_seconds", 301.5, "an earlier run"),
            ("end-to-end", "dense", "gpu", "stage_seconds", 71.5, "an earlier run"),
        ] {
            rows.put(section).put(system).put(device).put(metric).put(value).put("u").put(note).end_row();
        }
        let batch = rows.finish().expect("rows");
        tgrag_schemas::io::write_table(&tables::BENCH_GPU, &path, &batch).expect("write");
        run(&o, args(&["--resume", "--model", model.to_str().expect("utf-8")])).expect("resumed");
        assert!(!o.join("bench/gpu-runs").exists(), "no run was started");
        let again = tgrag_schemas::io::read_table(&path, &tables::BENCH_GPU).expect("read");
        assert_eq!(again.columns(), batch.columns(), "the kept rows are the earlier ones");
    }

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

    /// What `--resume` keeps: the figures a table holds read back as they were written.
    #[test]
    fn saved_figures_read_back_for_a_resumed_run() {
        let d = tempfile::tempdir().expect("tmp");
        let out = d.path().join("bench_gpu.parquet");
        let figures: Vec<Figure> =
            [("minilm", "fused", "cpu", "sentences_per_s", 873.5, "1/s"), ("training", "mor (MoR)", "gpu/cpu", "speedup", 0.25, "x")]
                .into_iter()
                .map(|(section, system, device, metric, value, unit)| Figure {
                    section: section.into(),
                    system: system.into(),
                    device: device.into(),
                    metric: metric.into(),
                    value,
                    unit: unit.into(),
                    note: format!("note of {system}"),
                })
                .collect();
        save(&figures, &out).expect("save");
        assert_eq!(load(&out).expect("load"), figures);
        // A file that is not the table is an error naming it, never an empty start.
        std::fs::write(&out, b"not parquet").expect("write");
        let e = load(&out).expect_err("garbage").to_string();
        assert!(e.contains("bench_gpu.parquet"), "{e}");
    }

    /// `--resume` keeps a section only when it was measured with the settings asked for now.
    #[test]
    fn only_figures_of_the_same_settings_are_kept() {
        let fig = |section: &str, system: &str, note: &str| Figure {
            section: section.into(),
            system: system.into(),
            device: "cpu".into(),
            metric: "m".into(),
            value: 1.0,
            unit: "u".into(),
            note: note.into(),
        };
        let minilm = [fig("minilm", "fused", "1000 sentences of 40-80 words, batch 32")];
        let training =
            [fig("training", "mor (MoR)", "cpu stage time / gpu stage time"), fig("training", "mor (MoR)", "synthetic small; 60 epochs")];
        let e2e = [fig("end-to-end", "dense", ""), fig("end-to-end", "tgrag run --size prime", "")];
        let defaults = args(&[]);
        assert!(measured_as_asked("minilm", &minilm, &defaults));
        assert!(measured_as_asked("training", &training, &defaults));
        assert!(measured_as_asked("end-to-end", &e2e, &defaults));
        let other = args(&["--sentences", "100", "--size", "tiny", "--e2e-size", "medium"]);
        assert!(!measured_as_asked("minilm", &minilm, &other));
        assert!(!measured_as_asked("training", &training, &other));
        assert!(!measured_as_asked("end-to-end", &e2e, &other));
    }
}
