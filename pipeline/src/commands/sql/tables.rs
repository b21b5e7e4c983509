//! The tables `tgrag sql` registers: which Parquet files under the outputs folder are visible, and
//! under which names.
//!
//! * `<outputs>/<dataset>/<stage>/<table>.parquet` is the table `<dataset>_<stage>_<table>`, every
//!   character that is not a letter, digit or `_` replaced by `_`, letters lowercased.
//! * A stage folder (one named after a stage, or holding a `manifest.json`) shows only what its
//!   manifest lists, with the size and sha256 the manifest records (and the stage's
//!   `timings.parquet`, written just before the manifest): a stage that failed or was interrupted
//!   has no valid manifest, so none of its files are visible, and a file changed since the stage
//!   wrote it is left out. Other folders (file-tool outputs written with `--out`) show every
//!   Parquet file.
//! * Symbolic links are never followed; a file that is not readable Parquet (its footer and the
//!   byte ranges of its column chunks are checked) is skipped with a warning.
//! * Names are injective: when two files would get the same name (`kb-x` and `kb_x`), neither gets
//!   it and each is registered under its path instead, quoted: `"kb-x/ingest/nodes"`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rayon::prelude::*;

use crate::runner::{self, MANIFEST, TIMINGS};

/// A Parquet file and the name it is registered under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub path: PathBuf,
}

/// What `sql` sees under the outputs folder.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Sorted by name.
    pub tables: Vec<Table>,
    /// One line per file or folder left out, and per name two files would share.
    pub warnings: Vec<String>,
}

/// The SQL name of an artifact (the documented one).
pub fn table_name(dataset: &str, stage: &str, table: &str) -> String {
    format!("{dataset}_{stage}_{table}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c.to_ascii_lowercase() } else { '_' })
        .collect()
}

/// Entries of `p` that are real folders (`dirs`) or real files, never symbolic links, sorted.
fn entries(p: &Path, dirs: bool) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .with_context(|| format!("reading {}", p.display()))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| if dirs { t.is_dir() } else { t.is_file() }))
        .map(|e| e.path())
        .collect();
    v.sort();
    Ok(v)
}

fn utf8_name(p: &Path) -> Option<&str> {
    p.file_name().and_then(|n| n.to_str())
}

/// A candidate file: its path, the three name parts, and what the stage folder's manifest says
/// about it (`None` outside stage folders).
struct Candidate {
    path: PathBuf,
    parts: [String; 3],
    listed: Option<Listed>,
}

/// What a manifest records for a file it lists.
enum Listed {
    /// Size and sha256 to check.
    Output { bytes: u64, sha256: String },
    /// The stage's timings table: written by the runner just before the manifest.
    Timings,
}

/// Every table under `outputs`, and a warning for each file or folder left out.
pub fn discover(outputs: &Path) -> Result<Catalog> {
    let mut catalog = Catalog::default();
    if !outputs.is_dir() {
        return Ok(catalog);
    }
    let candidates = find_candidates(outputs, &mut catalog.warnings)?;
    let by_name = check_candidates(candidates, &mut catalog.warnings);
    register(by_name, &mut catalog);
    catalog.tables.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(catalog)
}

/// The candidate files of every `<dataset>/<stage>` folder, in path order.
fn find_candidates(outputs: &Path, warnings: &mut Vec<String>) -> Result<Vec<Candidate>> {
    let stage_names: Vec<&str> = tgrag_stages::all().iter().map(|s| s.info().name).collect();
    let mut candidates = Vec::new();
    for ds in entries(outputs, true)? {
        let Some(d) = utf8_name(&ds) else { continue };
        for st in entries(&ds, true)? {
            let Some(s) = utf8_name(&st) else { continue };
            folder_candidates(&st, (d, s), &stage_names, warnings, &mut candidates)?;
        }
    }
    Ok(candidates)
}

/// The `<table>.parquet` files of one folder (not hidden, with a name before the suffix).
fn parquet_files(folder: &Path) -> Result<Vec<(PathBuf, String)>> {
    Ok(entries(folder, false)?
        .into_iter()
        .filter_map(|f| {
            let name = utf8_name(&f)?;
            let table = name.strip_suffix(".parquet")?;
            (!name.starts_with('.') && !table.is_empty()).then(|| (f.clone(), table.to_string()))
        })
        .collect())
}

/// The candidates of the folder `st` (dataset `d`, stage `s`): in a stage folder only what its
/// valid manifest lists (and the timings table), elsewhere every Parquet file.
fn folder_candidates(
    st: &Path,
    (d, s): (&str, &str),
    stage_names: &[&str],
    warnings: &mut Vec<String>,
    candidates: &mut Vec<Candidate>,
) -> Result<()> {
    let files = parquet_files(st)?;
    if files.is_empty() {
        return Ok(());
    }
    let is_stage = stage_names.contains(&s) || st.join(MANIFEST).exists();
    let manifest = if is_stage {
        match runner::read_manifest(st).filter(|m| m.stage == s) {
            Some(m) => Some(m),
            None => {
                warnings.push(format!(
                    "skipping {} (a stage folder without a valid {MANIFEST}: the stage failed, was interrupted or is running; \
                     run `tgrag run` to finish it)",
                    st.display()
                ));
                return Ok(());
            }
        }
    } else {
        None
    };
    for (path, table) in files {
        let listed = match &manifest {
            None => None,
            Some(m) => {
                let file = format!("{table}.parquet");
                match m.outputs.get(&file) {
                    Some(info) => Some(Listed::Output { bytes: info.bytes, sha256: info.sha256.clone() }),
                    None if file == TIMINGS => Some(Listed::Timings),
                    None => {
                        warnings.push(format!("skipping {} (not an output listed in {MANIFEST})", path.display()));
                        continue;
                    }
                }
            }
        };
        candidates.push(Candidate { path, parts: [d.to_string(), s.to_string(), table], listed });
    }
    Ok(())
}

/// Checks every candidate (a sha256 each, the Parquet metadata: the slow part, in parallel); the
/// good ones grouped by the name they would get, a warning for each other.
fn check_candidates(candidates: Vec<Candidate>, warnings: &mut Vec<String>) -> BTreeMap<String, Vec<Candidate>> {
    let checked: Vec<(Candidate, Option<String>)> = candidates
        .into_par_iter()
        .map(|c| {
            let p = problem(&c).err();
            (c, p)
        })
        .collect();
    let mut by_name: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
    for (c, p) in checked {
        match p {
            Some(why) => warnings.push(format!("skipping {} ({why})", c.path.display())),
            None => by_name.entry(table_name(&c.parts[0], &c.parts[1], &c.parts[2])).or_default().push(c),
        }
    }
    by_name
}

/// Registers each name held by one file; files that would share a name are registered under their
/// quoted paths instead, with a warning.
fn register(by_name: BTreeMap<String, Vec<Candidate>>, catalog: &mut Catalog) {
    for (name, group) in by_name {
        if group.len() == 1 {
            catalog.tables.extend(group.into_iter().map(|c| Table { name: name.clone(), path: c.path }));
            continue;
        }
        let paths: Vec<String> = group.iter().map(|c| c.path.display().to_string()).collect();
        let quoted: Vec<String> = group.iter().map(|c| format!("\"{}\"", c.parts.join("/"))).collect();
        catalog.warnings.push(format!(
            "`{name}` would name {} files ({}): neither is registered under it; query them as {}",
            group.len(),
            paths.join(" and "),
            quoted.join(" and ")
        ));
        catalog.tables.extend(group.into_iter().map(|c| Table { name: c.parts.join("/"), path: c.path }));
    }
}

/// Why a candidate is left out, if it is.
fn problem(c: &Candidate) -> std::result::Result<(), String> {
    if let Some(Listed::Output { bytes, sha256 }) = &c.listed {
        let len = std::fs::metadata(&c.path).map_err(|e| format!("unreadable: {e}"))?.len();
        let digest =
            if len == *bytes { tgrag_schemas::io::sha256_file(&c.path).map_err(|e| format!("unreadable: {e}"))? } else { String::new() };
        if digest != *sha256 {
            return Err(format!("modified since its stage wrote it: it differs from {MANIFEST}; run `tgrag run` to redo the stage"));
        }
    }
    check_parquet(&c.path)
}

/// Whether `path` is Parquet a query can read: `PAR1` at both ends, a footer that parses, an
/// Arrow schema, and every column chunk inside the file. DataFusion's reader assumes these (a
/// footer longer than the file made it panic), so they are checked before a file is registered.
pub fn check_parquet(path: &Path) -> std::result::Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};

    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let mut f = std::fs::File::open(path).map_err(|e| format!("unreadable: {e}"))?;
    let len = f.metadata().map_err(|e| format!("unreadable: {e}"))?.len();
    let (mut head, mut tail) = ([0u8; 4], [0u8; 4]);
    let magic = len >= 12
        && f.read_exact(&mut head).is_ok()
        && f.seek(SeekFrom::End(-4)).is_ok()
        && f.read_exact(&mut tail).is_ok()
        && &head == b"PAR1"
        && &tail == b"PAR1";
    if !magic {
        return Err("not a Parquet file".into());
    }
    let corrupt = |e: &dyn std::fmt::Display| format!("a corrupt Parquet file: {e}");
    // The sync reader checks the footer against the file's length; should it still panic on some
    // damage, the file is reported like any other damaged file.
    let opened = std::panic::catch_unwind(|| ParquetRecordBatchReaderBuilder::try_new(f));
    let builder = opened.map_err(|_| corrupt(&"the Parquet reader failed on its metadata"))?.map_err(|e| corrupt(&e))?;
    for (g, rg) in builder.metadata().row_groups().iter().enumerate() {
        for (c, col) in rg.columns().iter().enumerate() {
            // `byte_range` asserts on negative offsets: read the fields themselves.
            let start = col.dictionary_page_offset().unwrap_or_else(|| col.data_page_offset());
            let size = col.compressed_size();
            let end = u64::try_from(start).ok().zip(u64::try_from(size).ok()).and_then(|(s, n)| s.checked_add(n));
            if end.is_none_or(|end| end > len) {
                return Err(corrupt(&format!(
                    "row group {g}, column {c}: its {size} bytes at offset {start} do not lie inside the file ({len} bytes)"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_names_are_kept() {
        assert_eq!(table_name("stark-prime", "ingest", "nodes"), "stark_prime_ingest_nodes");
        assert_eq!(table_name("Synthetic", "bm25", "run"), "synthetic_bm25_run");
    }
}
