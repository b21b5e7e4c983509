//! Every dataset the pipeline knows, and how each is obtained.

use std::path::PathBuf;

use serde::Serialize;

use crate::synthetic::{Size, SyntheticConfig};
use crate::{DatasetError, Result};

/// Where a dataset's tables come from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The built-in generator.
    Synthetic(SyntheticConfig),
    /// A folder of canonical tables (`nodes.parquet`, `edges.csv`, ...).
    Folder(PathBuf),
    /// A STaRK KB in the hub layout (`skb/<kb>/processed.zip`, `qa/<kb>/…`): a local folder, or
    /// (`root: None`) fetched from the hub into the hf-hub cache.
    Stark { kb: String, root: Option<PathBuf> },
    /// Known to the design but not loadable by this build (the reason says what is missing).
    NotYetAvailable { reason: String },
}

/// A resolved dataset: its name (the `outputs/<name>/` folder) and source.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetSpec {
    pub name: String,
    pub source: Source,
}

/// Names and one-line descriptions of the datasets of the mission.
pub const KNOWN: &[(&str, &str)] = &[
    ("synthetic", "built-in seeded STaRK-like KB + scene-graph QA + text-attributed graph"),
    ("stark-amazon", "STaRK Amazon (Hugging Face snap-stanford/stark)"),
    ("stark-mag", "STaRK MAG"),
    ("stark-prime", "STaRK Prime"),
    ("explagraphs", "GraphQA ExplaGraphs"),
    ("scenegraphs", "GraphQA SceneGraphs (GQA)"),
    ("webqsp", "GraphQA WebQSP"),
    ("cora", "text-attributed graph"),
    ("citeseer", "text-attributed graph (TAPE text)"),
    ("pubmed", "text-attributed graph"),
    ("arxiv", "text-attributed graph (OGB)"),
    ("products", "text-attributed graph (OGB)"),
    ("book", "Amazon review graph"),
    ("epinion", "review graph"),
    ("music", "Amazon review graph"),
    ("pantry", "Amazon review graph"),
    ("enron", "Enron e-mail people graph"),
];

/// Options that shape a dataset (only the synthetic generator takes them today).
#[derive(Debug, Clone, Copy)]
pub struct DatasetOptions {
    pub size: Size,
    pub seed: u64,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions { size: Size::Small, seed: 42 }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Resolves a dataset name. With `data_dir`, any name is a folder dataset read from that folder.
pub fn resolve(name: &str, data_dir: Option<PathBuf>, opts: DatasetOptions) -> Result<DatasetSpec> {
    if !valid_name(name) {
        return Err(DatasetError::Config(format!(
            "dataset name `{name}`: use letters, digits, `-` and `_` (it names the outputs folder)"
        )));
    }
    let stark_kb = name.strip_prefix("stark-").filter(|k| crate::stark::Kb::parse(k).is_some());
    let source = match (name, data_dir) {
        (_, Some(dir)) if stark_kb.is_some() && dir.join("skb").is_dir() => Source::Stark { kb: stark_kb.unwrap_or_default().to_string(), root: Some(dir) },
        (_, None) if stark_kb.is_some() => Source::Stark { kb: stark_kb.unwrap_or_default().to_string(), root: None },
        (_, Some(dir)) => {
            if !dir.is_dir() {
                return Err(DatasetError::Io {
                    path: dir,
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a folder"),
                });
            }
            Source::Folder(dir)
        }
        ("synthetic", None) => Source::Synthetic(SyntheticConfig { size: opts.size, seed: opts.seed }),
        (other, None) if KNOWN.iter().any(|(k, _)| *k == other) => Source::NotYetAvailable {
            reason: "its loader and download are not in this build yet; convert it to canonical \
                     tables and pass --data-dir"
                .into(),
        },
        (other, None) => {
            return Err(DatasetError::Unknown {
                name: other.to_string(),
                known: KNOWN.iter().map(|k| k.0).collect::<Vec<_>>().join(", "),
            });
        }
    };
    Ok(DatasetSpec { name: name.to_string(), source })
}

impl DatasetSpec {
    /// Content key of the dataset's raw inputs (part of the `ingest` stage's cache key): the generator
    /// version and options for `synthetic`, the sha256 of every table file for a folder.
    pub fn content_key(&self) -> Result<String> {
        match &self.source {
            Source::Synthetic(cfg) => Ok(format!(
                "synthetic generator v{} size={} seed={}",
                crate::synthetic::GENERATOR_VERSION,
                cfg.size,
                cfg.seed
            )),
            Source::Folder(dir) => {
                let mut parts = Vec::new();
                for spec in crate::INPUT_TABLES {
                    for ext in ["parquet", "csv", "tsv"] {
                        let p = dir.join(format!("{}.{ext}", spec.name));
                        if p.is_file() {
                            parts.push(format!("{}.{ext}:{}", spec.name, tgrag_schemas::io::sha256_file(&p)?));
                        }
                    }
                }
                Ok(format!("folder {}", parts.join(" ")))
            }
            Source::Stark { kb, .. } => {
                let (root, fetched) = self.stark_root(&|_| {})?;
                let mut parts = vec![format!("stark {kb}")];
                match fetched {
                    Some(f) => parts.extend(f.iter().map(|f| format!("{}:{}", f.file, f.sha256))),
                    None => {
                        let k = crate::stark::Kb::parse(kb).ok_or_else(|| DatasetError::Config(format!("unknown STaRK KB `{kb}`")))?;
                        for f in k.hub_files() {
                            parts.push(format!("{f}:{}", crate::hub::sha256_file(&root.join(&f))?));
                        }
                    }
                }
                Ok(parts.join(" "))
            }
            Source::NotYetAvailable { reason } => Err(DatasetError::NotAvailable { name: self.name.clone(), reason: reason.clone() }),
        }
    }

    /// The hub-layout folder of a STaRK dataset: the local folder, or the hf-hub snapshot after
    /// fetching what is missing (then also the fetched files with their sha256).
    pub fn stark_root(&self, on_file: &dyn Fn(&str)) -> Result<(PathBuf, Option<Vec<crate::hub::Fetched>>)> {
        match &self.source {
            Source::Stark { root: Some(r), .. } => Ok((r.clone(), None)),
            Source::Stark { kb, root: None } => {
                let k = crate::stark::Kb::parse(kb).ok_or_else(|| DatasetError::Config(format!("unknown STaRK KB `{kb}`")))?;
                let (root, fetched) = crate::hub::fetch(&crate::stark::hub_repo(), &k.hub_files(), on_file)?;
                Ok((root, Some(fetched)))
            }
            _ => Err(DatasetError::Config(format!("dataset `{}` is not a STaRK dataset", self.name))),
        }
    }
}
