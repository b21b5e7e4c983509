//! What a stage sees while it runs: its dataset, its validated config, its upstream artifacts, a place
//! to write its outputs (temporary files that the runner commits only when the stage succeeds), a
//! timer and progress bars.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tgrag_datasets::DatasetSpec;
use tgrag_schemas::{io, tables, validate};

use crate::shared::shards::{self, PartRecord, Shard};
use crate::shared::stage_info::StageInfo;
use crate::{Result, StageError};

/// Progress reporting: indicatif bars on a terminal, nothing in quiet mode.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub quiet: bool,
}

impl Progress {
    /// A bar of `len` steps labelled `msg` (hidden when quiet or when stderr is not a terminal).
    pub fn bar(&self, len: u64, msg: &str) -> ProgressBar {
        let pb = if self.quiet { ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden()) } else { ProgressBar::new(len) };
        let style = ProgressStyle::with_template("  {msg:<24} [{bar:32}] {human_pos}/{human_len} {per_sec} eta {eta}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        pb.set_style(style);
        pb.set_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    }
}

/// A file the stage wrote (still under its temporary name until the runner commits it).
#[derive(Debug, Clone)]
pub struct Written {
    /// Final file name inside the stage folder (`run.parquet`, `report.md`).
    pub file: String,
    pub tmp: PathBuf,
    /// Rows, for Parquet tables.
    pub rows: Option<usize>,
}

/// A timed phase of a stage.
#[derive(Debug, Clone)]
pub struct Timing {
    pub phase: String,
    pub seconds: f64,
    pub items: Option<u64>,
}

/// The running stage's view of the world.
pub struct StageContext<'a> {
    pub stage: &'static str,
    info: &'static StageInfo,
    /// The stages this one reads from (declared and collected), in pipeline order.
    deps: Vec<&'static str>,
    pub dataset: &'a DatasetSpec,
    pub config: &'a serde_json::Value,
    pub progress: Progress,
    /// `<outputs>/<dataset>`: upstream stages' folders live here.
    root: PathBuf,
    /// `<outputs>/<dataset>/<stage>`.
    dir: PathBuf,
    /// The cache key of this stage run (the runner's fingerprint), written into every Parquet file.
    cache_key: Option<String>,
    written: Vec<Written>,
    timings: Vec<Timing>,
    /// In a shard run, the shard whose partition the stage computes (and nothing else).
    shard: Option<Shard>,
    /// What the stage tells the run's outcome line (partitions read).
    notes: Vec<String>,
    /// In a shard run, the partition written.
    part: Option<PartRecord>,
    /// A listing of the stage's units ([`StageContext::with_listing`]): those named so far.
    listed: Option<Vec<shards::ListedUnit>>,
}

/// What a finished stage leaves the runner.
#[derive(Debug, Default)]
pub struct Finished {
    /// Files written (under temporary names).
    pub written: Vec<Written>,
    pub timings: Vec<Timing>,
    /// Lines for the run's outcome (`3 of 3 shard partitions read`).
    pub notes: Vec<String>,
    /// The partition a shard run wrote.
    pub part: Option<PartRecord>,
    /// A listing's units, in the stage's order.
    pub listed: Vec<shards::ListedUnit>,
}

impl<'a> StageContext<'a> {
    /// A context writing into `root/<stage>/`; `deps` are the stages it reads from
    /// (`tgrag_stages::deps_of`).
    pub fn new(
        info: &'static StageInfo,
        deps: Vec<&'static str>,
        dataset: &'a DatasetSpec,
        config: &'a serde_json::Value,
        root: &Path,
        progress: Progress,
    ) -> Self {
        let stage = info.name;
        StageContext {
            stage,
            info,
            deps,
            dataset,
            config,
            progress,
            root: root.to_path_buf(),
            dir: root.join(stage),
            cache_key: None,
            written: Vec::new(),
            timings: Vec::new(),
            shard: None,
            notes: Vec::new(),
            part: None,
            listed: None,
        }
    }

    /// A shard run: the stage computes `shard`'s partition of its embeddings
    /// ([`StageContext::embed_sharded`]) and writes no table.
    pub fn with_shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// A listing of the stage's units ([`shards::Units::listing`]): the stage meets them as a
    /// shard run would, computes none and writes nothing (a write is refused). With the cache key,
    /// each unit a shard finished says so.
    pub fn with_listing(mut self) -> Self {
        self.listed = Some(Vec::new());
        self
    }

    /// A listing writes nothing.
    fn refuse_listing(&self, what: &str) -> Result<()> {
        match self.listed {
            Some(_) => Err(StageError::Internal(format!("stage `{}` writes `{what}` while listing its units", self.stage))),
            None => Ok(()),
        }
    }

    /// The shard of a shard run.
    pub fn shard(&self) -> Option<Shard> {
        self.shard
    }

    /// Whether this run computes only part of the stage (a shard run or a listing of its units):
    /// the stage then writes no table.
    pub fn partial(&self) -> bool {
        self.shard.is_some() || self.listed.is_some()
    }

    /// The folder of this stage's shard partitions (`<stage>/shards`).
    pub fn shards_root(&self) -> PathBuf {
        self.dir.join(shards::SHARDS_DIR)
    }

    /// The stage's sharded work as units ([`shards::Units`]): hand it to the code that meets them,
    /// then to [`StageContext::end_units`].
    pub fn units(&self) -> shards::Units {
        match self.listed {
            Some(_) => shards::Units::listing(self.shards_root(), self.cache_key.as_deref()),
            None => shards::Units::new(self.shards_root(), self.cache_key.as_deref(), self.shard),
        }
    }

    /// After the last unit: a shard run's partition recorded, or the note of the units read.
    pub fn end_units(&mut self, units: shards::Units) -> Result<()> {
        if units.is_listing() {
            self.listed.get_or_insert_default().extend(units.finish_listing());
            return Ok(());
        }
        let (part, note) = units.finish()?;
        if part.is_some() {
            self.part = part;
        }
        self.notes.extend(note);
        Ok(())
    }

    /// The stage's sharded work, `texts` embedded by `encode` (row-major, `width` wide; `encoder`
    /// names the encoder as it runs, `minilm bf16`) as the timed `phase`.
    ///
    /// In a shard run, the shard's rows are embedded into its partition and `None` comes back: the
    /// stage then returns without writing a table. Otherwise every valid partition of this run's
    /// cache key and encoder is read, the rest embedded here, and all rows come back in order
    /// ([`shards::assemble`]): the bytes a run without shards computes.
    pub fn embed_sharded(
        &mut self,
        phase: &str,
        texts: &[&str],
        (encoder, width): (&str, usize),
        mut encode: impl FnMut(&[&str]) -> Result<Vec<f32>>,
    ) -> Result<Option<Vec<f32>>> {
        if self.listed.is_some() {
            return Err(StageError::Internal(format!("stage `{}`: its shards are ranges of rows, not units to list", self.stage)));
        }
        let root = self.shards_root();
        let Some(key) = self.cache_key.clone() else {
            if self.shard.is_some() {
                return Err(StageError::Internal("a shard run without a cache key".into()));
            }
            let emb = self.timed(phase, |_| encode(texts))?;
            self.set_items(texts.len() as u64);
            return Ok(Some(emb));
        };
        if let Some(shard) = self.shard {
            let dataset = self.dataset.name.clone();
            let rec = self.timed(phase, |_| shards::run_shard(&root, shard, (&key, encoder), texts, width, Some(&dataset), encode))?;
            self.set_items(rec.rows.map_or(0, |[a, b]| (b - a) as u64));
            self.part = Some(rec);
            return Ok(None);
        }
        let t0 = Instant::now();
        let (emb, how) = shards::assemble(&root, (&key, encoder), texts.len(), width, |r| encode(&texts[r]))?;
        self.timings.push(Timing { phase: phase.into(), seconds: t0.elapsed().as_secs_f64(), items: Some(how.rows_embedded as u64) });
        if let Some(note) = how.describe() {
            self.notes.push(note);
        }
        Ok(Some(emb))
    }

    /// The cache key of this run of the stage: every Parquet file it writes carries it (and the
    /// dataset's name) in its key-value metadata.
    pub fn with_cache_key(mut self, key: &str) -> Self {
        self.cache_key = Some(key.to_string());
        self
    }

    /// The stages this one reads from, in pipeline order.
    pub fn deps(&self) -> &[&'static str] {
        &self.deps
    }

    /// Path of an upstream artifact.
    pub fn input_path(&self, stage: &str, table: &str) -> PathBuf {
        self.root.join(stage).join(format!("{table}.parquet"))
    }

    /// Whether an upstream stage produced `table`.
    pub fn has_input(&self, stage: &str, table: &str) -> bool {
        self.input_path(stage, table).is_file()
    }

    /// Reads an upstream table; canonical tables are checked against their spec.
    pub fn input(&self, stage: &str, table: &str) -> Result<RecordBatch> {
        let path = self.input_path(stage, table);
        if !path.is_file() {
            return Err(StageError::MissingInput { stage: stage.into(), path });
        }
        Ok(match tables::by_name(table) {
            Ok(spec) => io::read_table(&path, spec)?,
            Err(_) => io::read_parquet(&path)?,
        })
    }

    fn ensure_dir(&self) -> Result<()> {
        // A stage folder replaced by a symbolic link is refused, never written through.
        Ok(io::ensure_owned_dir(&self.dir)?)
    }

    /// Writes `table` (a temporary file until the runner commits the stage). The table must be one
    /// of the stage's declared outputs, declared in `tgrag_schemas::tables`, and the batch must have
    /// its columns (names, order, types, no nulls where required): anything else is a bug in the
    /// stage. The file's key-value metadata names the table, its docs, the dataset, the cache key
    /// and the build's commit (`tgrag_schemas::io::file_metadata`).
    pub fn write(&mut self, table: &str, batch: &RecordBatch) -> Result<()> {
        self.refuse_listing(table)?;
        if !self.info.outputs.contains(&table) {
            return Err(StageError::Internal(format!("stage `{}` writes `{table}`, which is not among its declared outputs", self.stage)));
        }
        let spec = tables::by_name(table)
            .map_err(|_| StageError::Internal(format!("stage `{}` writes `{table}`, which no schema declares", self.stage)))?;
        validate::check_written(spec, batch)
            .map_err(|e| StageError::Internal(format!("stage `{}` wrote `{table}` against its schema: {e}", self.stage)))?;
        self.ensure_dir()?;
        let file = format!("{table}.parquet");
        let prov = io::Provenance { dataset: Some(&self.dataset.name), cache_key: self.cache_key.as_deref() };
        let tmp = io::write_table_tmp_with(spec, &self.dir.join(&file), batch, &prov)?;
        self.written.push(Written { file, tmp, rows: Some(batch.num_rows()) });
        Ok(())
    }

    /// Writes a text artifact such as a report.
    pub fn write_text(&mut self, file: &str, text: &str) -> Result<()> {
        self.write_bytes(file, text.as_bytes())
    }

    /// Writes a binary artifact such as a PNG plot (one of the stage's declared `files`).
    pub fn write_bytes(&mut self, file: &str, bytes: &[u8]) -> Result<()> {
        self.refuse_listing(file)?;
        if !self.info.files.contains(&file) {
            return Err(StageError::Internal(format!("stage `{}` writes `{file}`, which is not among its declared files", self.stage)));
        }
        self.ensure_dir()?;
        let tmp = io::write_bytes_tmp(&self.dir.join(file), bytes)?;
        self.written.push(Written { file: file.to_string(), tmp, rows: None });
        Ok(())
    }

    /// Runs `f` as the named phase and records its wall-clock time.
    pub fn timed<T>(&mut self, phase: &str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let t0 = Instant::now();
        let out = f(self)?;
        self.timings.push(Timing { phase: phase.into(), seconds: t0.elapsed().as_secs_f64(), items: None });
        Ok(out)
    }

    /// Records how many items the last timed phase processed.
    pub fn set_items(&mut self, items: u64) {
        if let Some(t) = self.timings.last_mut() {
            t.items = Some(items);
        }
    }

    /// The stage folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Files written so far, the phase timings, the notes and a shard run's partition (taken by
    /// the runner when the stage ends).
    pub fn finish(self) -> Finished {
        Finished {
            written: self.written,
            timings: self.timings,
            notes: self.notes,
            part: self.part,
            listed: self.listed.unwrap_or_default(),
        }
    }
}
