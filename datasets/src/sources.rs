//! The catalogue of real datasets `tgrag fetch <name>` downloads: for every dataset the raw loaders
//! read, its canonical public source (a Hugging Face hub repository at a revision, or official
//! URLs), what pins its bytes, and how the downloads become the folder layout the loader expects
//! (`registry::RawKind::for_name` names that folder under the data root).
//!
//! Pins: a hub repository is pinned by its revision (the commit it resolves to is printed, and the
//! hub's listing carries each LFS file's sha256, which is then checked); a URL is pinned by a
//! commit in the URL (GitHub raw files) and a sha256. The sha256s filled in were measured on the
//! bytes of those files at those commits (the project's shared copies: ExplaGraphs, CiteSeer,
//! PrimeKG paths); the official servers of the others (GQA, OGB, LINQS/UMass, CMU, the hub) are
//! not reachable from where this table was written, so their sha256 is `None` rather than a
//! guess: every download prints the sha256 of the bytes it got, for a user to pin here.
//!
//! Where fetched data goes: `--dest`, else `$TGRAG_DATA_ROOT/<folder>`, else `data/<folder>` (the
//! registry looks in all three). Plain-HTTP mirrors: `TGRAG_DATA_MIRROR=<base URL>` replaces
//! `https://host/` by `<base URL>/host/` in every URL (how the tests serve samples from 127.0.0.1).

use std::path::PathBuf;

/// A hub dataset repository whose data files are listed at the commit the revision resolves to.
#[derive(Debug, Clone, Copy)]
pub struct HubFiles {
    pub owner: &'static str,
    pub name: &'static str,
    /// A branch or a commit. `main` where no commit was measured (the resolved commit is printed).
    pub revision: &'static str,
    /// Folder listed in the repository.
    pub under: &'static str,
    /// A listed file is kept when its name (after `under/`) starts with one of these and ends with
    /// `suffix`.
    pub prefixes: &'static [&'static str],
    pub suffix: &'static str,
}

/// How a downloaded file becomes part of the dataset folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpack {
    /// Kept as this relative path.
    File(&'static str),
    /// A zip archive: the file entries whose name, after `strip` is removed from the front, ends
    /// with one of `keep` (all when empty) go to `into/<rest>`.
    Zip { strip: &'static str, keep: &'static [&'static str], into: &'static str },
    /// A `.tar.gz`: regular-file entries, `strip` removed from the front, go to `into/<rest>`.
    TarGz { strip: &'static str, into: &'static str },
    /// CMU's Enron maildir tarball → `emails.csv` (`file,message`, the Kaggle layout the loader
    /// reads): one row per message file under `maildir/`, `file` its path below `maildir/`.
    EnronMaildir,
}

/// One file at an official URL.
#[derive(Debug, Clone, Copy)]
pub struct Remote {
    pub url: &'static str,
    /// sha256 of the bytes; `None` where it was not measured (see the module documentation).
    pub sha256: Option<&'static str>,
    /// Largest download accepted (bytes), and, for archives, the largest unpacked total.
    pub max_bytes: u64,
    pub unpack: Unpack,
}

/// Where a dataset comes from.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    Hub(HubFiles),
    Http(&'static [Remote]),
    /// No canonical public download the loader can read as is; the reason says what to do.
    Manual(&'static str),
}

/// One dataset of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct DatasetSource {
    /// The `--dataset` name.
    pub name: &'static str,
    pub origin: Origin,
    /// What a user should know (licence, size, what is left out).
    pub note: &'static str,
}

const GB: u64 = 1 << 30;
const MB: u64 = 1 << 20;

/// Every real dataset `tgrag fetch` knows.
pub const CATALOGUE: &[DatasetSource] = &[
    DatasetSource {
        name: "webqsp",
        // PyG's `WebQSPDataset` loads `datasets.load_dataset("rmanluo/RoG-webqsp")`: these files.
        origin: Origin::Hub(HubFiles {
            owner: "rmanluo",
            name: "RoG-webqsp",
            revision: "main",
            under: "data",
            prefixes: &["train-", "validation-", "test-"],
            suffix: ".parquet",
        }),
        note: "RoG's WebQSP with per-question Freebase subgraphs (as PyG's WebQSPDataset reads it)",
    },
    DatasetSource {
        name: "cwq",
        // The same layout as RoG-webqsp (`id, question, answer, q_entity, a_entity, graph`): the
        // WebQSP loader reads it as is.
        origin: Origin::Hub(HubFiles {
            owner: "rmanluo",
            name: "RoG-cwq",
            revision: "main",
            under: "data",
            prefixes: &["train-", "validation-", "test-"],
            suffix: ".parquet",
        }),
        note: "RoG's ComplexWebQuestions with per-question subgraphs (the WebQSP loader's layout)",
    },
    DatasetSource {
        name: "explagraphs",
        // The ExplaGraphs repository's data files at its HEAD commit (2022-11-05); G-Retriever's
        // `train_dev.tsv` is these two concatenated. The loader reads `train.tsv` + `dev.tsv`.
        origin: Origin::Http(&[
            Remote {
                url: "https://raw.githubusercontent.com/swarnaHub/ExplaGraphs/67ecab19d9a13ab91e09e99bd94e0480b705c1b7/data/train.tsv",
                sha256: Some("83eb96f38b1d91d0299924f6050c3ec173a7c5c5a7a3921908cc7fd46d27bba3"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("train.tsv"),
            },
            Remote {
                url: "https://raw.githubusercontent.com/swarnaHub/ExplaGraphs/67ecab19d9a13ab91e09e99bd94e0480b705c1b7/data/dev.tsv",
                sha256: Some("1b7e069501cf6f2d7f5d98fe6f0950ee8bd9a0f1986054ecb23873854993745a"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("dev.tsv"),
            },
        ]),
        note: "ExplaGraphs (Saha et al. 2021), train and dev with gold graphs (MIT)",
    },
    DatasetSource {
        name: "scenegraphs",
        origin: Origin::Http(&[
            Remote {
                url: "https://downloads.cs.stanford.edu/nlp/data/gqa/sceneGraphs.zip",
                sha256: None,
                max_bytes: 2 * GB,
                unpack: Unpack::Zip { strip: "", keep: &["train_sceneGraphs.json", "val_sceneGraphs.json"], into: "" },
            },
            Remote {
                url: "https://downloads.cs.stanford.edu/nlp/data/gqa/questions1.2.zip",
                sha256: None,
                max_bytes: 8 * GB,
                unpack: Unpack::Zip { strip: "", keep: &["train_balanced_questions.json", "val_balanced_questions.json"], into: "" },
            },
        ]),
        note: "GQA scene graphs and balanced questions (Hudson & Manning 2019); about 1.5 GB of zips",
    },
    DatasetSource {
        name: "arxiv",
        origin: Origin::Http(&[
            Remote {
                url: "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip",
                sha256: None,
                max_bytes: 2 * GB,
                unpack: Unpack::Zip { strip: "arxiv/", keep: &[".csv.gz"], into: "" },
            },
            Remote {
                url: "https://snap.stanford.edu/ogb/data/misc/ogbn_arxiv/titleabs.tsv.gz",
                sha256: None,
                max_bytes: 2 * GB,
                unpack: Unpack::File("titleabs.tsv.gz"),
            },
        ]),
        note: "ogbn-arxiv (OGB) with OGB's titles and abstracts",
    },
    DatasetSource {
        name: "products",
        origin: Origin::Http(&[Remote {
            url: "http://snap.stanford.edu/ogb/data/nodeproppred/products.zip",
            sha256: None,
            max_bytes: 4 * GB,
            unpack: Unpack::Zip { strip: "products/", keep: &[".csv.gz"], into: "" },
        }]),
        note: "ogbn-products (OGB) graph only: its texts (Amazon-3M trn.json / tst.json) are on Google Drive, \
               not fetched; the loader asks for them: put them in the folder",
    },
    DatasetSource {
        name: "cora",
        // TAPE's `cora_orig`: LINQS' cora.tgz (`cora/cora.content`, `cora/cora.cites`) and
        // McCallum's Cora extractions (`cora/papers`, `cora/extractions/`) under `mccallum/`.
        origin: Origin::Http(&[
            Remote {
                url: "https://linqs-data.soe.ucsc.edu/public/lbc/cora.tgz",
                sha256: None,
                max_bytes: 256 * MB,
                unpack: Unpack::TarGz { strip: "", into: "" },
            },
            Remote {
                url: "https://people.cs.umass.edu/~mccallum/data/cora-classify.tar.gz",
                sha256: None,
                max_bytes: 2 * GB,
                unpack: Unpack::TarGz { strip: "", into: "mccallum" },
            },
        ]),
        note: "Cora (LINQS) with McCallum's title/abstract extractions, TAPE's cora_orig layout",
    },
    DatasetSource {
        name: "pubmed",
        origin: Origin::Manual(
            "the graph is LINQS' Pubmed-Diabetes.tgz, but the texts (pubmed.json) exist only in TAPE's \
             Google Drive release; put TAPE's PubMed_orig folder under the data root",
        ),
        note: "PubMed with text (TAPE)",
    },
    DatasetSource {
        name: "citeseer",
        // TAPE's `CiteSeer-Orig` at the commit that added it (the files left TAPE's tree later).
        origin: Origin::Http(&[
            Remote {
                url: "https://raw.githubusercontent.com/XiaoxinHe/TAPE/331e61664be928847af439b27de661eb8f182205/dataset/CiteSeer-Orig/citeseer_texts.txt",
                sha256: Some("9070723640766aaa09875ce72397a4325feecac968ed9fb44152820b651f1f17"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("citeseer_texts.txt"),
            },
            Remote {
                url: "https://raw.githubusercontent.com/XiaoxinHe/TAPE/331e61664be928847af439b27de661eb8f182205/dataset/CiteSeer-Orig/citeseer.cites",
                sha256: Some("cd9730630eaaa745058c2cd2cce6b9afb79ca71278a479aebec55f4cf5eb7f30"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("citeseer.cites"),
            },
        ]),
        note: "CiteSeer with title and abstract texts (TAPE's CiteSeer-Orig; LINQS data, MIT-licensed repository)",
    },
    DatasetSource {
        name: "enron",
        origin: Origin::Http(&[Remote {
            url: "https://www.cs.cmu.edu/~enron/enron_mail_20150507.tar.gz",
            sha256: None,
            max_bytes: 2 * GB,
            unpack: Unpack::EnronMaildir,
        }]),
        note: "CMU's Enron maildir (about 423 MB compressed, 517k messages) as emails.csv",
    },
    DatasetSource {
        name: "primekg-paths",
        // The benchmark repository's data files: edges at its HEAD (2026-03-12), nodes and
        // metadata at the commit of the blobs the project measured.
        origin: Origin::Http(&[
            Remote {
                url: "https://raw.githubusercontent.com/maxxyhc/PrimeKG-Pathfinding-Algorithm-Benchmark-Laboratory/b1750dcddc4eb3da0775d107bbc7d86051bc72a1/data/benchmark_pathways_nodes.csv",
                sha256: Some("013868f5d2b1491cef05c307c7fc352e0f810752745f9672a3f66b17115c3775"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("benchmark_pathways_nodes.csv"),
            },
            Remote {
                url: "https://raw.githubusercontent.com/maxxyhc/PrimeKG-Pathfinding-Algorithm-Benchmark-Laboratory/97f24f7738f2ef9868e59e2a2736cb684dae1a67/data/benchmark_pathways_edges.csv",
                sha256: Some("c45d756e414a28f4b7e02b7dd964c9b12bde620fefcce7e678b91f7c0c600654"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("benchmark_pathways_edges.csv"),
            },
            Remote {
                url: "https://raw.githubusercontent.com/maxxyhc/PrimeKG-Pathfinding-Algorithm-Benchmark-Laboratory/b1750dcddc4eb3da0775d107bbc7d86051bc72a1/data/benchmark_pathways_metadata.csv",
                sha256: Some("1ff0337e6e4d486b5a06292dad38aa37e7a98cf7bab67a2ac60aff0e6e5df0e2"),
                max_bytes: 64 * MB,
                unpack: Unpack::File("benchmark_pathways_metadata.csv"),
            },
        ]),
        note: "PrimeKG x DrugMechDB mechanism paths (PrimeKG CC BY 4.0, DrugMechDB CC0; the repository has no licence file)",
    },
];

/// The catalogue entry of `name`.
pub fn find(name: &str) -> Option<&'static DatasetSource> {
    CATALOGUE.iter().find(|d| d.name == name)
}

/// The folder `tgrag fetch` writes to when neither `--dest` nor `TGRAG_DATA_ROOT` says otherwise.
pub const DEFAULT_ROOT: &str = "data";

/// The data root fetched datasets go to: `$TGRAG_DATA_ROOT`, else `data/`.
pub fn data_root() -> PathBuf {
    std::env::var_os("TGRAG_DATA_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT))
}

/// The command that fetches `name`, for the registry's "missing dataset" message.
pub fn fetch_hint(name: &str) -> Option<String> {
    match find(name)?.origin {
        Origin::Manual(why) => Some(format!("`tgrag fetch {name}` cannot download it: {why}")),
        _ => Some(format!("run `tgrag fetch {name}` to download it")),
    }
}

/// `url` through the mirror `TGRAG_DATA_MIRROR` when set: `scheme://host/path` → `<mirror>/host/path`.
pub fn mirrored(url: &str) -> String {
    match std::env::var("TGRAG_DATA_MIRROR") {
        Ok(m) if !m.trim().is_empty() => {
            let rest = url.split_once("://").map_or(url, |(_, r)| r);
            format!("{}/{rest}", m.trim().trim_end_matches('/'))
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::RawKind;

    #[test]
    fn every_catalogue_name_is_a_raw_dataset_and_pins_are_hex() {
        for d in CATALOGUE {
            assert!(RawKind::for_name(d.name).is_some(), "{} has no loader", d.name);
            if let Origin::Http(remotes) = d.origin {
                for r in remotes {
                    assert!(r.url.starts_with("http"), "{}", r.url);
                    if let Some(s) = r.sha256 {
                        assert!(s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
                    }
                }
            }
        }
        assert!(fetch_hint("webqsp").is_some_and(|h| h.contains("tgrag fetch webqsp")));
        assert!(fetch_hint("synthetic").is_none());
    }
}
