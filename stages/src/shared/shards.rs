//! Shards of an embedding: the texts a stage (or `tgrag embed`) embeds, cut into `N` contiguous
//! ranges, each embedded by its own process into its own partition, so that `N` machines share a
//! large knowledge base's embeddings.
//!
//! * A partition lives in `<root>/<IIIII>-of-<NNNNN>/` (the root is `<stage folder>/shards`, or
//!   `<out>.shards` beside `tgrag embed`'s output): `embedding_part.parquet` (the
//!   [`tables::EMBEDDING_PART`] table) and, written last, `record.json` ([`PartRecord`]). A shard
//!   killed at any moment leaves no valid record, so it reruns; a finished one is skipped.
//! * A partition belongs to one cache key (a stage's fingerprint: code, config and inputs) and one
//!   encoder as it ran (`minilm bf16`, `hash 256`): the full run ([`assemble`]) reads the
//!   partitions of its own key and encoder, embeds what none holds, and so writes the bytes a
//!   single run writes. A partition another encoder computed (a shard on another CPU kind, where
//!   `auto` products differ) is embedded again, and the run says so.
//! * A stage whose sharded work is a list of independent **units** (the language-model rows, one
//!   per row and seed) deals them round-robin: unit `k` to shard `k mod N` ([`Units`]). Each unit's
//!   result is its own file in its shard's folder (`unit-<kkkkkk>.json`, written atomically), so a
//!   killed shard resumes at its first unfinished unit; the full run reads every unit a shard of its
//!   key finished and computes the others.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, AsArray, FixedSizeListArray, Float32Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Float32Type};
use serde::{Deserialize, Serialize};
use tgrag_schemas::{columns, io, tables};

use crate::{Result, StageError};

/// The most shards a text list is cut into.
pub const MAX_SHARDS: u32 = 100_000;
/// The folder of a stage's partitions, inside its stage folder.
pub const SHARDS_DIR: &str = "shards";
/// A partition's table, in its folder.
pub const PART_FILE: &str = "embedding_part.parquet";
/// A partition's record, in its folder (written last).
pub const RECORD_FILE: &str = "record.json";
/// The most bytes of a record read (a real one is under 1 KB).
const RECORD_MAX_BYTES: u64 = 64 << 10;

/// Shard `index` of `count` (`--shard I/N`, `0 ≤ I < N`): the `index`-th of `count` contiguous
/// ranges of a text list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> std::result::Result<Shard, String> {
        if count == 0 || count > MAX_SHARDS {
            return Err(format!("the shard count must be within 1..={MAX_SHARDS}, got {count}"));
        }
        if index >= count {
            return Err(format!("shard {index}/{count}: shards are numbered 0..{count} (0 ≤ I < N), as Slurm array tasks are"));
        }
        Ok(Shard { index, count })
    }

    /// The shard's number, `0..count`.
    pub fn index(self) -> u32 {
        self.index
    }

    /// How many shards the list is cut into.
    pub fn count(self) -> u32 {
        self.count
    }

    /// The rows of a list of `len` texts this shard embeds: `[len·I/N, len·(I+1)/N)`, so the `N`
    /// ranges are contiguous, in order, cover the list and differ in size by at most one.
    pub fn rows(self, len: usize) -> Range<usize> {
        let at = |i: u32| ((len as u128 * u128::from(i)) / u128::from(self.count)) as usize;
        at(self.index)..at(self.index + 1)
    }

    /// The partition's folder name: `00002-of-00008` (sorts in shard order).
    pub fn folder(self) -> String {
        format!("{:05}-of-{:05}", self.index, self.count)
    }

    /// The shard a partition folder name stands for.
    pub fn from_folder(name: &str) -> Option<Shard> {
        let (i, n) = name.split_once("-of-")?;
        Shard::new(i.parse().ok()?, n.parse().ok()?).ok()
    }

    /// Every shard of this one's count, in order.
    pub fn all(count: u32) -> impl Iterator<Item = Shard> {
        (0..count).map(move |index| Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Shard, String> {
        let bad = || format!("expected I/N (shard I of N, 0 ≤ I < N), got `{s}`");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        Shard::new(i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?)
    }
}

/// What a partition's `record.json` says: written after its files, so a record names a complete
/// partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartRecord {
    /// The cache key of the run the partition belongs to (a stage's fingerprint).
    pub key: String,
    /// The encoder as it ran (`minilm 384 bf16 v4`, `hash 256`; empty for units).
    pub encoder: String,
    /// `I/N`.
    pub shard: String,
    /// An embedding partition: the rows of the text list it holds, `[start, end)`.
    pub rows: Option<[usize; 2]>,
    /// A partition of units: how many units are the shard's.
    pub units: usize,
    /// The embedding width (0 for units).
    pub width: usize,
    /// Its files, each with its sha256.
    pub files: BTreeMap<String, String>,
    /// Seconds the shard took (run-dependent: not part of any table).
    pub seconds: f64,
}

impl PartRecord {
    /// What the partition holds, for a status line: `rows 0..186` or `4 units`.
    pub fn holds(&self) -> String {
        match self.rows {
            Some([a, b]) => format!("rows {a}..{b}"),
            None => format!("{} units", self.units),
        }
    }
}

/// The folder of `shard`'s partition under `root`.
pub fn part_dir(root: &Path, shard: Shard) -> PathBuf {
    root.join(shard.folder())
}

/// The record of `shard`'s partition under `root` when it is complete and belongs to `key`: its
/// record names this shard and key, and its table has the recorded sha256. Anything else (no
/// record, a killed shard, another key, a changed table) is no partition.
pub fn valid(root: &Path, shard: Shard, key: &str) -> Option<PartRecord> {
    let dir = part_dir(root, shard);
    let path = dir.join(RECORD_FILE);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > RECORD_MAX_BYTES {
        return None;
    }
    let rec: PartRecord = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    if rec.key != key || rec.shard != shard.to_string() {
        return None;
    }
    let file_ok = |name: &str, sha: &str| {
        let p = dir.join(name);
        plain_name(name) && std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) && io::sha256_file(&p).is_ok_and(|h| h == sha)
    };
    rec.files.iter().all(|(n, h)| file_ok(n, h)).then_some(rec)
}

/// A file name a record may list: one plain component of the partition folder.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != RECORD_FILE && !name.starts_with('.') && !name.contains(['/', '\\']) && !name.chars().any(char::is_control)
}

/// Writes `rec` as `dir`'s record, atomically (last, after the files it lists).
fn write_record(dir: &Path, rec: &PartRecord) -> Result<()> {
    let text = serde_json::to_string_pretty(rec).map_err(|e| StageError::Internal(format!("shard record: {e}")))?;
    Ok(io::write_bytes_atomic(&dir.join(RECORD_FILE), text.as_bytes())?)
}

/// Removes `dir`'s record (a shard about to work leaves none until it is done).
pub fn remove_record(dir: &Path) -> Result<()> {
    let record = dir.join(RECORD_FILE);
    match std::fs::remove_file(&record) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StageError::Io { path: record, source: e }),
    }
}

/// Creates `root`'s parent, `root` and `shard`'s folder under it (links refused), and returns the last.
fn make_part_dir(root: &Path, shard: Shard) -> Result<PathBuf> {
    let dir = part_dir(root, shard);
    if let Some(parent) = root.parent() {
        io::ensure_owned_dir(parent)?;
    }
    io::ensure_owned_dir(root)?;
    io::ensure_owned_dir(&dir)?;
    Ok(dir)
}

/// The shards whose partition folders exist under `root` (complete or not), in order. A `root`
/// that is not a real folder (a symbolic link planted in its place) has none: nothing is read or
/// removed through it.
pub fn present(root: &Path) -> Vec<Shard> {
    if !std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()) {
        return Vec::new();
    }
    let mut out: Vec<Shard> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().to_str().and_then(Shard::from_folder))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Writes `shard`'s partition: `emb` (row-major, `width` wide) holds the rows `rows` of the text
/// list. The old record goes first and the new one last (both files written atomically), so a
/// shard killed at any moment leaves no valid record. `dataset` and `key` go into the table's
/// metadata.
pub fn write(
    root: &Path,
    shard: Shard,
    (key, encoder): (&str, &str),
    rows: Range<usize>,
    (emb, width): (Vec<f32>, usize),
    seconds: f64,
    dataset: Option<&str>,
) -> Result<PartRecord> {
    let n = rows.len();
    if emb.len() != n * width {
        return Err(StageError::Internal(format!("shard {shard}: {} values for {n} rows of width {width}", emb.len())));
    }
    let dir = make_part_dir(root, shard)?;
    remove_record(&dir)?;
    let first = u32::try_from(rows.start).map_err(|_| StageError::Input(format!("shard {shard}: more than 2^32 texts")))?;
    let last = u32::try_from(rows.end).map_err(|_| StageError::Input(format!("shard {shard}: more than 2^32 texts")))?;
    let batch = RecordBatch::try_from_iter(vec![
        ("row", Arc::new(UInt32Array::from_iter_values(first..last)) as ArrayRef),
        ("embedding", vectors(emb, width)?),
    ])?;
    let table = dir.join(PART_FILE);
    io::write_table_with(&tables::EMBEDDING_PART, &table, &batch, &io::Provenance { dataset, cache_key: Some(key) })?;
    let rec = PartRecord {
        key: key.to_string(),
        encoder: encoder.to_string(),
        shard: shard.to_string(),
        rows: Some([rows.start, rows.end]),
        units: 0,
        width,
        files: BTreeMap::from([(PART_FILE.to_string(), io::sha256_file(&table)?)]),
        seconds,
    };
    write_record(&dir, &rec)?;
    Ok(rec)
}

/// The embeddings of a valid partition (row-major), checked against its record.
pub fn read(root: &Path, shard: Shard, rec: &PartRecord) -> Result<Vec<f32>> {
    let path = part_dir(root, shard).join(PART_FILE);
    let b = io::read_table(&path, &tables::EMBEDDING_PART)?;
    let rows = columns::u32s(&b, "row")?;
    let [first, end] = rec.rows.ok_or_else(|| StageError::Input(format!("{}: its record holds no rows", path.display())))?;
    if rows.len() != end.saturating_sub(first) || rows.values().iter().zip(first..end).any(|(&r, e)| r as usize != e) {
        return Err(StageError::Input(format!("{}: rows are not {first}..{end} as its record says", path.display())));
    }
    let col = b.column_by_name("embedding").ok_or_else(|| StageError::Input(format!("{}: no `embedding` column", path.display())))?;
    let list = col.as_fixed_size_list_opt().ok_or_else(|| StageError::Input(format!("{}: `embedding` is not a vector", path.display())))?;
    if list.value_length() as usize != rec.width {
        return Err(StageError::Input(format!("{}: width {} where its record says {}", path.display(), list.value_length(), rec.width)));
    }
    let values = list
        .values()
        .as_primitive_opt::<Float32Type>()
        .ok_or_else(|| StageError::Input(format!("{}: embedding values are not f32", path.display())))?;
    Ok(values.values().to_vec())
}

/// How [`assemble`] came by a text list's embeddings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assembled {
    /// The shard count of the partitions read (0: none read).
    pub count: u32,
    /// Partitions read.
    pub read: usize,
    /// Rows read from partitions.
    pub rows_read: usize,
    /// Rows embedded here.
    pub rows_embedded: usize,
    /// Partitions of this key that another encoder computed (embedded here again), with that encoder.
    pub other_encoder: Vec<(Shard, String)>,
}

impl Assembled {
    /// One line for a run's outcome, `None` when no partition was there.
    pub fn describe(&self) -> Option<String> {
        if self.count == 0 && self.other_encoder.is_empty() {
            return None;
        }
        let mut s = format!("{} of {} shard partitions read", self.read, self.count);
        if !self.other_encoder.is_empty() {
            let which: Vec<String> = self.other_encoder.iter().map(|(sh, e)| format!("{sh} by `{e}`")).collect();
            s.push_str(&format!(", embedded again here (another encoder): {}", which.join(", ")));
        }
        Some(s)
    }
}

/// The embeddings of a list of `len` texts for cache key `key` and `encoder`: the valid partitions
/// under `root` of one shard count (the count with the most usable ones) are read, every other
/// range is embedded by `embed(range)`, in row order. With no partition, one `embed(0..len)`.
pub fn assemble(
    root: &Path,
    (key, encoder): (&str, &str),
    len: usize,
    width: usize,
    mut embed: impl FnMut(Range<usize>) -> Result<Vec<f32>>,
) -> Result<(Vec<f32>, Assembled)> {
    let mut by_count: std::collections::BTreeMap<u32, Vec<(Shard, PartRecord)>> = Default::default();
    for shard in present(root) {
        if let Some(rec) = valid(root, shard, key) {
            by_count.entry(shard.count()).or_default().push((shard, rec));
        }
    }
    let usable = |v: &Vec<(Shard, PartRecord)>| {
        v.iter().filter(|(s, r)| r.encoder == encoder && r.width == width && r.rows == Some([s.rows(len).start, s.rows(len).end])).count()
    };
    // The count with the most usable partitions; the smaller count on a tie.
    let best = by_count.iter().max_by(|a, b| usable(a.1).cmp(&usable(b.1)).then(b.0.cmp(a.0))).map(|(c, v)| (*c, v.clone()));
    let Some((count, parts)) = best else {
        let emb = embed(0..len)?;
        return Ok((emb, Assembled { rows_embedded: len, ..Assembled::default() }));
    };
    let mut out = Vec::with_capacity(len * width);
    let mut done = Assembled { count, ..Assembled::default() };
    for shard in Shard::all(count) {
        let range = shard.rows(len);
        let part = parts.iter().find(|(s, _)| *s == shard).map(|(_, r)| r);
        match part {
            Some(rec) if rec.encoder == encoder && rec.width == width && rec.rows == Some([range.start, range.end]) => {
                out.extend(read(root, shard, rec)?);
                done.read += 1;
                done.rows_read += range.len();
            }
            other => {
                if let Some(rec) = other.filter(|r| r.encoder != encoder) {
                    done.other_encoder.push((shard, rec.encoder.clone()));
                }
                done.rows_embedded += range.len();
                out.extend(embed(range)?);
            }
        }
    }
    Ok((out, done))
}

/// Embeds `shard`'s rows of `texts` with `encode` and writes its partition under `root`.
pub fn run_shard(
    root: &Path,
    shard: Shard,
    (key, encoder): (&str, &str),
    texts: &[&str],
    width: usize,
    dataset: Option<&str>,
    encode: impl FnOnce(&[&str]) -> Result<Vec<f32>>,
) -> Result<PartRecord> {
    let rows = shard.rows(texts.len());
    let t0 = Instant::now();
    let emb = encode(&texts[rows.clone()])?;
    write(root, shard, (key, encoder), rows, (emb, width), t0.elapsed().as_secs_f64(), dataset)
}

/// A stage's units of sharded work (its language-model rows, one per row and seed), in the order
/// the stage meets them. In a shard run, unit `k` is the shard's when `k mod N = I`: computed (or
/// read, when a killed run of the shard finished it) and stored; the others are left to their
/// shards. In a full run, every unit a shard of the same key finished is read, the others computed.
/// In a listing, every unit is named and none computed.
pub struct Units {
    root: PathBuf,
    key: Option<String>,
    shard: Option<Shard>,
    /// A listing ([`Units::listing`]): every unit named, none computed.
    listed: Option<Vec<ListedUnit>>,
    next: usize,
    computed: usize,
    read: usize,
    files: BTreeMap<String, String>,
    started: Instant,
}

/// A unit as a listing names it: its stable id `k` (its place in the stage's order, so shard
/// `k mod N` of `--shard I/N` runs it), its name, and the shard whose partition holds it finished
/// under the listing's cache key, if one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedUnit {
    pub id: usize,
    pub name: String,
    pub done_in: Option<Shard>,
}

/// A stored unit: its key, name and result.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredUnit<T> {
    key: String,
    name: String,
    value: T,
}

/// The file of unit `k`.
fn unit_file(k: usize) -> String {
    format!("unit-{k:06}.json")
}

/// The most bytes of a unit file read.
const UNIT_MAX_BYTES: u64 = 256 << 20;

fn read_unit<T: serde::de::DeserializeOwned>(dir: &Path, k: usize, key: &str, name: &str) -> Option<(T, String)> {
    let path = dir.join(unit_file(k));
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > UNIT_MAX_BYTES {
        return None;
    }
    let bytes = std::fs::read(&path).ok()?;
    let u: StoredUnit<T> = serde_json::from_slice(&bytes).ok()?;
    (u.key == key && u.name == name).then(|| {
        use sha2::Digest;
        (u.value, io::hex(&sha2::Sha256::digest(&bytes)))
    })
}

impl Units {
    /// The units of a stage run: `root` its partitions' folder, `key` its cache key (none: every
    /// unit computed, nothing stored), `shard` in a shard run.
    pub fn new(root: PathBuf, key: Option<&str>, shard: Option<Shard>) -> Units {
        Units {
            root,
            key: key.map(str::to_string),
            shard,
            listed: None,
            next: 0,
            computed: 0,
            read: 0,
            files: BTreeMap::new(),
            started: Instant::now(),
        }
    }

    /// A listing of a stage's units under cache key `key`: each is named and none computed (the
    /// stage meets them as in a shard run, doing nothing else); [`Units::finish_listing`] hands
    /// them back, with the shard that finished each.
    pub fn listing(root: PathBuf, key: Option<&str>) -> Units {
        Units { listed: Some(Vec::new()), ..Units::new(root, key, None) }
    }

    /// Whether this is a shard run or a listing: the stage then meets its units and does nothing
    /// else (a listing computes none of them either).
    pub fn in_shard(&self) -> bool {
        self.shard.is_some() || self.listed.is_some()
    }

    /// Whether this is a listing.
    pub fn is_listing(&self) -> bool {
        self.listed.is_some()
    }

    /// The units a listing named, in order.
    pub fn finish_listing(self) -> Vec<ListedUnit> {
        self.listed.unwrap_or_default()
    }

    /// The next unit, named `name` (unique in the stage run: `gretriever explagraphs lora seed 1`):
    /// its result, or `None` when it is another shard's.
    pub fn unit<T: Serialize + serde::de::DeserializeOwned>(
        &mut self,
        name: &str,
        compute: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        let k = self.next;
        self.next += 1;
        if let Some(listed) = &mut self.listed {
            // Finished as the full run would read it: the same partitions, key, name and type.
            let done_in = self.key.as_deref().and_then(|key| {
                present(&self.root).into_iter().find(|&s| read_unit::<T>(&part_dir(&self.root, s), k, key, name).is_some())
            });
            listed.push(ListedUnit { id: k, name: name.to_string(), done_in });
            return Ok(None);
        }
        let Some(key) = self.key.clone() else {
            self.computed += 1;
            return compute().map(Some);
        };
        match self.shard {
            Some(s) if k % s.count() as usize != s.index() as usize => Ok(None),
            Some(s) => {
                let dir = make_part_dir(&self.root, s)?;
                if let Some((v, sha)) = read_unit(&dir, k, &key, name) {
                    self.files.insert(unit_file(k), sha);
                    self.read += 1;
                    return Ok(Some(v));
                }
                let v = compute()?;
                let bytes = serde_json::to_vec(&StoredUnit { key, name: name.to_string(), value: &v })
                    .map_err(|e| StageError::Internal(format!("unit `{name}`: {e}")))?;
                io::write_bytes_atomic(&dir.join(unit_file(k)), &bytes)?;
                use sha2::Digest;
                self.files.insert(unit_file(k), io::hex(&sha2::Sha256::digest(&bytes)));
                self.computed += 1;
                Ok(Some(v))
            }
            None => {
                for s in present(&self.root) {
                    if let Some((v, _)) = read_unit(&part_dir(&self.root, s), k, &key, name) {
                        self.read += 1;
                        return Ok(Some(v));
                    }
                }
                self.computed += 1;
                compute().map(Some)
            }
        }
    }

    /// After the stage's last unit: in a shard run, its record (the units it holds) written last;
    /// otherwise the note of what was read, if anything.
    pub fn finish(self) -> Result<(Option<PartRecord>, Option<String>)> {
        if self.listed.is_some() {
            return Ok((None, None));
        }
        let (Some(key), Some(s)) = (&self.key, self.shard) else {
            let note = (self.read > 0).then(|| format!("{} of {} units read from shard partitions", self.read, self.read + self.computed));
            return Ok((None, note));
        };
        let dir = make_part_dir(&self.root, s)?;
        let rec = PartRecord {
            key: key.clone(),
            encoder: String::new(),
            shard: s.to_string(),
            rows: None,
            units: self.files.len(),
            width: 0,
            files: self.files,
            seconds: self.started.elapsed().as_secs_f64(),
        };
        write_record(&dir, &rec)?;
        Ok((Some(rec), None))
    }
}

/// A `FixedSizeList<f32, width>` column of row-major values.
fn vectors(flat: Vec<f32>, width: usize) -> Result<ArrayRef> {
    let width = i32::try_from(width).map_err(|_| StageError::Internal(format!("embedding width {width}")))?;
    let field = Arc::new(Field::new("item", DataType::Float32, true));
    FixedSizeListArray::try_new(field, width, Arc::new(Float32Array::from(flat)), None)
        .map(|a| Arc::new(a) as ArrayRef)
        .map_err(|e| StageError::Internal(format!("embedding column: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ranges_are_contiguous_cover_the_list_and_differ_by_at_most_one() {
        for len in [0usize, 1, 2, 7, 100, 101, 1_000_003] {
            for count in [1u32, 2, 3, 7, 64] {
                let ranges: Vec<Range<usize>> = Shard::all(count).map(|s| s.rows(len)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges.last().map(|r| r.end), Some(len));
                for w in ranges.windows(2) {
                    assert_eq!(w[0].end, w[1].start, "len {len}, count {count}");
                }
                let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
                let (lo, hi) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
                assert!(hi - lo <= 1, "len {len}, count {count}: {sizes:?}");
            }
        }
    }

    #[test]
    fn shard_syntax_is_checked_and_round_trips() {
        let s: Shard = "2/8".parse().expect("2/8");
        assert_eq!((s.index(), s.count(), s.to_string(), s.folder()), (2, 8, "2/8".into(), "00002-of-00008".into()));
        assert_eq!(Shard::from_folder(&s.folder()), Some(s));
        for bad in ["8/8", "1/0", "a/3", "3", "-1/4", "1/100001"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert!("8/8".parse::<Shard>().err().is_some_and(|e| e.contains("0 ≤ I < N")));
    }

    /// A deterministic "encoder": row `r`'s vector is `[r, r + 0.5]`, counting calls per row.
    fn fake(texts: &[&str]) -> Vec<f32> {
        texts
            .iter()
            .flat_map(|t| {
                let r: f32 = t.parse().expect("number");
                [r, r + 0.5]
            })
            .collect()
    }

    /// Five units `u0`…`u4` whose value is `10 k`, met by `units`; which ones were computed.
    fn meet(units: &mut Units) -> (Vec<Option<u64>>, Vec<usize>) {
        let mut computed = Vec::new();
        let got = (0..5)
            .map(|k| {
                units
                    .unit(&format!("u{k}"), || {
                        computed.push(k);
                        Ok(10 * k as u64)
                    })
                    .expect("unit")
            })
            .collect();
        (got, computed)
    }

    #[test]
    fn units_go_round_robin_to_shards_a_full_run_reads_them_and_a_listing_computes_none() {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path().join(SHARDS_DIR);
        let listing = |key: &str| -> Vec<(usize, String, Option<Shard>)> {
            let mut u = Units::listing(root.clone(), Some(key));
            let (got, computed) = meet(&mut u);
            assert!(got.iter().all(Option::is_none) && computed.is_empty(), "a listing computes nothing");
            assert!(u.in_shard() && u.is_listing());
            u.finish_listing().into_iter().map(|l| (l.id, l.name, l.done_in)).collect()
        };
        let names: Vec<String> = (0..5).map(|k| format!("u{k}")).collect();
        let expect = |done: &dyn Fn(usize) -> Option<Shard>| -> Vec<(usize, String, Option<Shard>)> {
            (0..5).map(|k| (k, names[k].clone(), done(k))).collect()
        };
        assert_eq!(listing("k"), expect(&|_| None));
        assert!(!root.exists(), "a listing writes nothing");
        // Shard 1 of 2 computes units 1 and 3 and leaves the others.
        let s = Shard::new(1, 2).expect("shard");
        let mut u = Units::new(root.clone(), Some("k"), Some(s));
        let (got, computed) = meet(&mut u);
        assert_eq!((got, computed), (vec![None, Some(10), None, Some(30), None], vec![1, 3]));
        let (rec, _) = u.finish().expect("finish");
        assert_eq!(rec.map(|r| r.units), Some(2));
        assert_eq!(listing("k"), expect(&|k| (k % 2 == 1).then_some(s)));
        // Under another key nothing is finished.
        assert_eq!(listing("other"), expect(&|_| None));
        // The full run reads units 1 and 3 and computes the rest: the values of a run without shards.
        let mut full = Units::new(root.clone(), Some("k"), None);
        let (got, computed) = meet(&mut full);
        assert_eq!((got, computed), ((0..5).map(|k| Some(10 * k)).collect(), vec![0, 2, 4]));
        assert_eq!(full.finish().expect("finish").1.as_deref(), Some("2 of 5 units read from shard partitions"));
    }

    #[test]
    fn partitions_are_read_in_row_order_and_missing_or_foreign_ones_embedded_again() {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path().join("dense").join(SHARDS_DIR);
        let texts: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let whole = fake(&refs);
        // No partition: one call over everything.
        let mut calls = Vec::new();
        let (emb, how) = assemble(&root, ("k", "fake"), 10, 2, |r| {
            calls.push(r.clone());
            Ok(fake(&refs[r]))
        })
        .expect("assemble");
        assert_eq!((emb, how.describe()), (whole.clone(), None));
        assert!(calls.len() == 1 && calls[0] == (0..10), "{calls:?}");
        // Shards 0 and 2 of 3 done; shard 1 by another encoder; a partition of another key.
        for (i, enc) in [(0, "fake"), (1, "other"), (2, "fake")] {
            let s = Shard::new(i, 3).expect("shard");
            run_shard(&root, s, ("k", enc), &refs, 2, None, |t| Ok(fake(t))).expect("shard");
        }
        run_shard(&root, Shard::new(0, 2).expect("shard"), ("old", "fake"), &refs, 2, None, |t| Ok(fake(t))).expect("shard");
        let mut calls = Vec::new();
        let (emb, how) = assemble(&root, ("k", "fake"), 10, 2, |r| {
            calls.push(r.clone());
            Ok(fake(&refs[r]))
        })
        .expect("assemble");
        assert_eq!(emb, whole);
        assert_eq!(calls, vec![Shard::new(1, 3).expect("shard").rows(10)]);
        assert_eq!((how.count, how.read, how.rows_read, how.rows_embedded), (3, 2, 7, 3));
        assert_eq!(how.describe().as_deref(), Some("2 of 3 shard partitions read, embedded again here (another encoder): 1/3 by `other`"));
        // A killed shard (table written, record never) and a changed table are no partitions.
        let s0 = Shard::new(0, 3).expect("shard");
        std::fs::remove_file(part_dir(&root, s0).join(RECORD_FILE)).expect("rm record");
        assert!(valid(&root, s0, "k").is_none());
        let s2 = Shard::new(2, 3).expect("shard");
        assert!(valid(&root, s2, "k").is_some());
        std::fs::write(part_dir(&root, s2).join(PART_FILE), b"changed").expect("overwrite");
        assert!(valid(&root, s2, "k").is_none());
        assert_eq!(present(&root).len(), 4);
        // A link in the partitions' place is no partition folder.
        let link = d.path().join("linked");
        std::os::unix::fs::symlink(&root, &link).expect("link");
        assert!(present(&link).is_empty());
    }
}
