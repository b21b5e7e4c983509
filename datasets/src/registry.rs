//! Every dataset the pipeline knows, and how each is obtained.

use std::path::{Path, PathBuf};

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
    /// A real dataset in its own raw file format, read from a local folder.
    Raw { kind: RawKind, dir: PathBuf },
    /// Known to the design but not loadable by this build (the reason says what is missing).
    NotYetAvailable { reason: String },
}

/// The raw formats tgrag reads (one loader module each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RawKind {
    /// `crate::graphqa::explagraphs`.
    ExplaGraphs,
    /// `crate::graphqa::scenegraphs`.
    SceneGraphs,
    /// `crate::graphqa::webqsp` (RoG Parquet subgraphs).
    WebQsp,
    /// `crate::tape` (CiteSeer with text).
    Tape,
    /// `crate::enron`.
    Enron,
    /// `crate::primekg_paths`.
    PrimekgPaths,
    /// `crate::tag::planetoid::load_cora` (TAPE's `cora_orig`).
    Cora,
    /// `crate::tag::planetoid::load_pubmed` (TAPE's `PubMed_orig`).
    Pubmed,
    /// `crate::tag::ogb` with ogbn-arxiv.
    OgbArxiv,
    /// `crate::tag::ogb` with ogbn-products.
    OgbProducts,
    /// `crate::tag::reviews`, keeping the latest `latest_percent` % of the reviews.
    Reviews { latest_percent: u32 },
}

impl RawKind {
    /// The kind a dataset name is read as, and the folder name it has under `$TGRAG_DATA_ROOT` (the
    /// layout of the project's shared data).
    pub fn for_name(name: &str) -> Option<(RawKind, &'static str)> {
        Some(match name {
            "explagraphs" => (RawKind::ExplaGraphs, "explagraphs"),
            "scenegraphs" => (RawKind::SceneGraphs, "scenegraphs"),
            "webqsp" => (RawKind::WebQsp, "webqsp"),
            "citeseer" => (RawKind::Tape, "citeseer-text"),
            "enron" => (RawKind::Enron, "enron-sample"),
            "primekg-paths" => (RawKind::PrimekgPaths, "primekg-drugmechdb-paths"),
            "cora" => (RawKind::Cora, "cora_orig"),
            "pubmed" => (RawKind::Pubmed, "PubMed_orig"),
            "arxiv" => (RawKind::OgbArxiv, "ogbn_arxiv"),
            "products" => (RawKind::OgbProducts, "ogbn_products"),
            // The paper keeps the latest 1% of the 27M Book reviews.
            "book" => (RawKind::Reviews { latest_percent: 1 }, "amazon-book"),
            "music" => (RawKind::Reviews { latest_percent: 100 }, "amazon-music"),
            "pantry" => (RawKind::Reviews { latest_percent: 100 }, "amazon-pantry"),
            "epinion" => (RawKind::Reviews { latest_percent: 100 }, "epinions"),
            _ => return None,
        })
    }

    /// Whether `dir` holds this raw format (else a `--data-dir` is read as canonical tables).
    pub fn recognises(self, dir: &Path) -> bool {
        let any = |pred: &dyn Fn(&str) -> bool| {
            std::fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok()).any(|e| e.file_name().to_str().is_some_and(pred))).unwrap_or(false)
        };
        match self {
            RawKind::ExplaGraphs => crate::graphqa::explagraphs::gretriever_file(dir).is_some() || dir.join("train.tsv").is_file(),
            RawKind::SceneGraphs => any(&|n| n.ends_with("sceneGraphs.json")),
            RawKind::WebQsp => any(&|n| n.ends_with(".parquet") || n.starts_with("WebQSP")) || dir.join("data").is_dir(),
            RawKind::Tape => any(&|n| n.ends_with("_texts.txt")),
            RawKind::Enron => any(&|n| n.starts_with("emails") && n.ends_with(".csv")),
            RawKind::PrimekgPaths => dir.join("benchmark_pathways_nodes.csv").is_file(),
            RawKind::Cora => crate::tag::find(dir, &["cora.content", "cora/cora.content"]).is_some(),
            RawKind::Pubmed => crate::tag::find(dir, &["pubmed.json"]).is_some(),
            RawKind::OgbArxiv | RawKind::OgbProducts => crate::tag::find(dir, &["raw/edge.csv"]).is_some(),
            RawKind::Reviews { .. } => crate::tag::reviews::files(dir).is_ok_and(|f| !f.is_empty()),
        }
    }

    /// What a user must provide, for error messages.
    pub fn expects(self) -> &'static str {
        match self {
            RawKind::ExplaGraphs => "G-Retriever's train_dev.tsv, or ExplaGraphs' train.tsv and dev.tsv",
            RawKind::SceneGraphs => "GQA's <split>_sceneGraphs.json and <split>_balanced_questions.json",
            RawKind::WebQsp => "RoG-webqsp Parquet files (data/{train,validation,test}-*.parquet)",
            RawKind::Tape => "TAPE's <name>_texts.txt and <name>.cites",
            RawKind::Enron => "emails*.csv with columns file,message (the Kaggle Enron layout)",
            RawKind::PrimekgPaths => "benchmark_pathways_{nodes,edges,metadata}.csv",
            RawKind::Cora => "TAPE's cora_orig (cora.content, cora.cites, mccallum/cora/papers and extractions/)",
            RawKind::Pubmed => "TAPE's PubMed_orig (data/Pubmed-Diabetes.{NODE.paper,DIRECTED.cites}.tab, pubmed.json)",
            RawKind::OgbArxiv => "OGB's ogbn_arxiv (raw/*.csv.gz, mapping/*.csv.gz) plus titleabs.tsv",
            RawKind::OgbProducts => "OGB's ogbn_products (raw/*.csv.gz, mapping/*.csv.gz) plus Amazon-3M trn.json/tst.json",
            RawKind::Reviews { .. } => "review files (*.json[l][.gz]): Amazon 2018 JSON lines or Epinions Python-literal lines",
        }
    }
}

/// The folder that holds a raw dataset when no `--data-dir` is given: `$TGRAG_DATA_ROOT/<folder>`,
/// else `../shared/datasets/<folder>` (the project's shared data) when it exists.
pub fn default_raw_dir(folder: &str) -> Option<PathBuf> {
    let roots: Vec<PathBuf> =
        std::env::var_os("TGRAG_DATA_ROOT").map(PathBuf::from).into_iter().chain([PathBuf::from("../shared/datasets")]).collect();
    roots.into_iter().map(|r| r.join(folder)).find(|d| d.is_dir())
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
    ("primekg-paths", "PrimeKG x DrugMechDB mechanism paths (a tiny typed KB)"),
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
        return Err(DatasetError::Config(format!("dataset name `{name}`: use letters, digits, `-` and `_` (it names the outputs folder)")));
    }
    let stark_kb = name.strip_prefix("stark-").filter(|k| crate::stark::Kb::parse(k).is_some());
    let source = match (name, data_dir) {
        (_, Some(dir)) if stark_kb.is_some() && dir.join("skb").is_dir() => {
            Source::Stark { kb: stark_kb.unwrap_or_default().to_string(), root: Some(dir) }
        }
        (_, None) if stark_kb.is_some() => Source::Stark { kb: stark_kb.unwrap_or_default().to_string(), root: None },
        (_, Some(dir)) if dir.is_dir() && RawKind::for_name(name).is_some_and(|(k, _)| k.recognises(&dir)) => {
            Source::Raw { kind: RawKind::for_name(name).map(|k| k.0).unwrap_or(RawKind::Tape), dir }
        }
        (_, None) if RawKind::for_name(name).is_some() => {
            let (kind, folder) = RawKind::for_name(name).unwrap_or((RawKind::Tape, ""));
            match default_raw_dir(folder) {
                Some(dir) if kind.recognises(&dir) => Source::Raw { kind, dir },
                _ => Source::NotYetAvailable {
                    reason: format!(
                        "no local copy found; pass --data-dir with {}, or set TGRAG_DATA_ROOT to a folder holding `{folder}/`",
                        kind.expects()
                    ),
                },
            }
        }
        (_, Some(dir)) => {
            if !dir.is_dir() {
                return Err(DatasetError::Io { path: dir, source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a folder") });
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
            return Err(DatasetError::Unknown { name: other.to_string(), known: KNOWN.iter().map(|k| k.0).collect::<Vec<_>>().join(", ") });
        }
    };
    Ok(DatasetSpec { name: name.to_string(), source })
}

impl DatasetSpec {
    /// The canonical tables the dataset will provide, known before it is loaded (what decides which
    /// stages apply, so that their needs are checked before any work); `None` when unknown.
    pub fn provides(&self) -> Option<Vec<&'static str>> {
        const KB: &[&str] = &["nodes", "edges", "queries", "answers", "candidate_types"];
        const QA: &[&str] = &["graph_nodes", "graph_edges", "qa"];
        const TAG: &[&str] = &["tag_nodes", "tag_edges"];
        Some(match &self.source {
            Source::Synthetic(_) => [KB, QA, TAG].concat(),
            Source::Folder(dir) => crate::INPUT_TABLES
                .iter()
                .filter(|t| ["parquet", "csv", "tsv"].iter().any(|e| dir.join(format!("{}.{e}", t.name)).is_file()))
                .map(|t| t.name)
                .collect(),
            Source::Stark { .. } => KB.to_vec(),
            Source::Raw { kind, .. } => match kind {
                RawKind::ExplaGraphs | RawKind::SceneGraphs | RawKind::WebQsp => QA.to_vec(),
                RawKind::Enron => [TAG, &["emails"]].concat(),
                RawKind::PrimekgPaths => vec!["nodes", "edges"],
                RawKind::Tape | RawKind::Cora | RawKind::Pubmed | RawKind::OgbArxiv | RawKind::OgbProducts | RawKind::Reviews { .. } => {
                    TAG.to_vec()
                }
            },
            Source::NotYetAvailable { .. } => return None,
        })
    }

    /// Content key of the dataset's raw inputs (part of the `ingest` stage's cache key): the generator
    /// version and options for `synthetic`, the sha256 of every table file for a folder.
    pub fn content_key(&self) -> Result<String> {
        match &self.source {
            Source::Synthetic(cfg) => {
                Ok(format!("synthetic generator v{} size={} seed={}", crate::synthetic::GENERATOR_VERSION, cfg.size, cfg.seed))
            }
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
            Source::Raw { kind, dir } => {
                let mut files = Vec::new();
                collect_files(dir, &mut files)?;
                files.sort();
                let mut parts = vec![format!("raw {kind:?}")];
                for f in files {
                    let rel = f.strip_prefix(dir).unwrap_or(&f).display().to_string();
                    parts.push(format!("{rel}:{}", tgrag_schemas::io::sha256_file(&f)?));
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

/// Every regular file under `dir`, recursively (the content key of a raw dataset).
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))?;
    for e in rd {
        let e = e.map_err(|e| DatasetError::io(dir, e))?;
        let p = e.path();
        if p.is_dir() {
            collect_files(&p, out)?;
        } else if p.is_file() {
            out.push(p);
        }
    }
    Ok(())
}
