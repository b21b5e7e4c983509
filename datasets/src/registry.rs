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
            // RoG-cwq has RoG-webqsp's layout: the WebQSP loader reads it as is.
            "cwq" => (RawKind::WebQsp, "cwq"),
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
/// else `../shared/datasets/<folder>` (the project's shared data), else `data/<folder>` (where
/// `tgrag fetch` puts a dataset without `TGRAG_DATA_ROOT`) when it exists.
pub fn default_raw_dir(folder: &str) -> Option<PathBuf> {
    let roots: Vec<PathBuf> = std::env::var_os("TGRAG_DATA_ROOT")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("../shared/datasets"), PathBuf::from(crate::sources::DEFAULT_ROOT)])
        .collect();
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
    ("cwq", "GraphQA ComplexWebQuestions (RoG-cwq, the WebQSP layout)"),
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
                        "no local copy found; {}pass --data-dir with {}, or set TGRAG_DATA_ROOT to a folder holding `{folder}/`",
                        crate::sources::fetch_hint(name).map(|h| format!("{h}, or ")).unwrap_or_default(),
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
                // Anything by the name (a FIFO, a folder, a dangling link too): loading names what it is.
                .filter(|t| {
                    ["parquet", "csv", "tsv"].iter().any(|e| std::fs::symlink_metadata(dir.join(format!("{}.{e}", t.name))).is_ok())
                })
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
        self.content_key_excluding(None)
    }

    /// [`Self::content_key`], leaving out `exclude` (the outputs folder, when a user puts it inside
    /// the raw data folder: its files change with every run and are not the dataset's). Only regular
    /// files inside the data folder are hashed; a symbolic link that leads out of it is refused with
    /// its path (never followed: `ln -s / data/root` must not walk `/`).
    pub fn content_key_excluding(&self, exclude: Option<&Path>) -> Result<String> {
        match &self.source {
            Source::Synthetic(cfg) => {
                Ok(format!("synthetic generator v{} size={} seed={}", crate::synthetic::GENERATOR_VERSION, cfg.size, cfg.seed))
            }
            Source::Folder(dir) => {
                let mut parts = Vec::new();
                let base = dir.canonicalize().map_err(|e| DatasetError::io(dir, e))?;
                for spec in crate::INPUT_TABLES {
                    for ext in ["parquet", "csv", "tsv"] {
                        let p = dir.join(format!("{}.{ext}", spec.name));
                        if inside_file(&base, &p)? {
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
                let base = dir.canonicalize().map_err(|e| DatasetError::io(dir, e))?;
                let exclude = exclude.and_then(|e| e.canonicalize().ok());
                collect_files(dir, &base, exclude.as_deref(), &mut files)?;
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

/// Every regular file under `dir`, recursively (the content key of a raw dataset), `exclude` and
/// hidden entries (`.git`, editors' files) left out. Folders are entered only as themselves, never
/// through a link; a link to a file inside `base` (the canonical data folder) counts as that file, a
/// link leading out of it is refused.
fn collect_files(dir: &Path, base: &Path, exclude: Option<&Path>, out: &mut Vec<PathBuf>) -> Result<()> {
    if exclude.is_some_and(|x| dir.canonicalize().is_ok_and(|c| c == x)) {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))?;
    for e in rd {
        let e = e.map_err(|e| DatasetError::io(dir, e))?;
        let p = e.path();
        let t = e.file_type().map_err(|err| DatasetError::io(&p, err))?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if t.is_dir() {
            collect_files(&p, base, exclude, out)?;
        } else if t.is_file() || (t.is_symlink() && inside_file(base, &p)?) {
            out.push(p);
        }
    }
    Ok(())
}

/// Whether `p` is a file tgrag may read as part of the data folder `base` (canonical): a regular
/// file, or a symbolic link to a regular file inside `base`. A link out of `base` is an error naming it (the
/// user's data folder must not make tgrag read elsewhere); a missing path or a link to a folder is
/// not a file.
fn inside_file(base: &Path, p: &Path) -> Result<bool> {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return Ok(false) };
    if !meta.file_type().is_symlink() {
        return Ok(meta.is_file());
    }
    match p.canonicalize() {
        Ok(target) if target.starts_with(base) => Ok(target.is_file()),
        Ok(target) => Err(DatasetError::Malformed {
            path: p.to_path_buf(),
            at: "symbolic link".into(),
            reason: format!("leads out of the data folder (to {}); tgrag reads only files inside {}", target.display(), base.display()),
        }),
        // A dangling link: not a file (the loader names it when it needs it).
        Err(_) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_content_key_hashes_only_files_inside_the_data_folder_and_leaves_outputs_out() {
        let d = tempfile::tempdir().expect("tmp");
        let data = d.path().join("data");
        std::fs::create_dir_all(data.join("sub")).expect("dir");
        std::fs::write(data.join("a.json"), b"[1]").expect("a");
        std::fs::write(data.join("sub/b.csv"), b"x\n").expect("b");
        let raw = DatasetSpec { name: "x".into(), source: Source::Raw { kind: RawKind::ExplaGraphs, dir: data.clone() } };
        let key = raw.content_key().expect("key");
        assert!(key.contains("a.json:") && key.contains("sub/b.csv:"), "{key}");
        // An outputs folder inside the data folder changes with every run: it is left out.
        let outputs = data.join("outputs");
        std::fs::create_dir_all(outputs.join("x/ingest")).expect("outputs");
        std::fs::write(outputs.join("x/ingest/nodes.parquet"), b"new every run").expect("out");
        assert_eq!(raw.content_key_excluding(Some(&outputs)).expect("key"), key);
        std::fs::remove_dir_all(&outputs).expect("rm");
        // A link to a file inside counts as that file; a link to a folder is not walked twice.
        std::os::unix::fs::symlink(data.join("a.json"), data.join("alias.json")).expect("link");
        std::os::unix::fs::symlink(data.join("sub"), data.join("sub2")).expect("link");
        let with_alias = raw.content_key().expect("key");
        assert!(with_alias.contains("alias.json:") && !with_alias.contains("sub2/"), "{with_alias}");
        // A link out of the folder (here to `/`) is refused with its path, never walked.
        std::os::unix::fs::symlink("/", data.join("root")).expect("link");
        let e = raw.content_key().expect_err("link out").to_string();
        assert!(e.contains("data/root") && e.contains("leads out of the data folder"), "{e}");
        std::fs::remove_file(data.join("root")).expect("rm");
        let outside = d.path().join("secret.csv");
        std::fs::write(&outside, b"x").expect("outside");
        std::fs::create_dir_all(d.path().join("folder")).expect("folder");
        std::os::unix::fs::symlink(&outside, d.path().join("folder/nodes.csv")).expect("link");
        let folder = DatasetSpec { name: "f".into(), source: Source::Folder(d.path().join("folder")) };
        let e = folder.content_key().expect_err("link out").to_string();
        assert!(e.contains("folder/nodes.csv") && e.contains("leads out of the data folder"), "{e}");
    }
}
