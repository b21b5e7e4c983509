//! Datasets of tgrag: where canonical tables come from.
//!
//! * [`registry`] names every dataset the pipeline knows and how it is obtained.
//! * [`synthetic`] is the built-in, seeded generator (`make run` needs no download).
//! * [`folder`] reads a folder of canonical tables given as Parquet, CSV or TSV (CSV/TSV with the
//!   raw loaders' RFC 4180 reader, errors located by line and byte; the result is arrow-rs).
//! * [`rng`] is the seeded random generator shared by generators and stages.
//!
//! Every loader returns [`DatasetTables`]: canonical batches plus the file each came from, so that
//! validation errors name the file, row and column.
//!
//! ```
//! use tgrag_datasets::registry::{self, DatasetOptions};
//! use tgrag_datasets::synthetic::Size;
//!
//! // The built-in dataset, generated and validated as `tgrag run --dataset synthetic --size tiny`.
//! let spec = registry::resolve("synthetic", None, DatasetOptions { size: Size::Tiny, seed: 42 })?;
//! let tables = tgrag_datasets::load(&spec)?;
//! assert!(tables.get("nodes").is_some_and(|t| t.batch.num_rows() > 0));
//! assert!(tables.get("qa").is_some(), "a graph-QA part too");
//! # Ok::<(), tgrag_datasets::DatasetError>(())
//! ```

// A library reports through its return values and `Progress`, never by printing to stdout.
#![warn(clippy::print_stdout)]

pub mod archive;
pub mod download;
pub mod enron;
pub mod error;
pub mod fetch;
pub mod folder;
pub mod graphqa;
pub mod hub;
pub mod mor_plans;
pub mod pickle;
pub mod primekg_paths;
pub mod pyliteral;
pub mod pyrepr;
pub mod raw;
pub mod registry;
pub mod rng;
pub mod sources;
pub mod stark;
pub mod synthetic;
pub mod tag;
pub mod tape;
pub mod unpack;

#[cfg(test)]
mod real_tests;
#[cfg(test)]
mod test_support;

use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatch;
use tgrag_schemas::validate::{self, Located};
use tgrag_schemas::{TableSpec, tables};

pub use error::{DatasetError, Result};
pub use registry::{DatasetSpec, Source};

/// A canonical table and the file (or generator) it came from.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub spec: &'static TableSpec,
    pub source: PathBuf,
    pub batch: RecordBatch,
}

/// The canonical tables of one dataset.
#[derive(Debug, Clone, Default)]
pub struct DatasetTables {
    pub tables: Vec<LoadedTable>,
}

impl DatasetTables {
    /// The table named `name`, if the dataset has it.
    pub fn get(&self, name: &str) -> Option<&LoadedTable> {
        self.tables.iter().find(|t| t.spec.name == name)
    }

    fn located(&self, name: &str) -> Option<Located<'_>> {
        self.get(name).map(|t| Located { file: t.source.as_path(), batch: &t.batch })
    }

    /// Checks every table against its spec and the cross-table rules of its family; the first
    /// violation names the file, row and column.
    pub fn validate(&self) -> Result<()> {
        for t in &self.tables {
            validate::check_required(t.spec, &t.source, &t.batch)?;
            validate::check_values(t.spec, &t.source, &t.batch)?;
            // A graph without nodes, or questions without any: every stage would run on nothing
            // and report nothing, so it is refused here, naming the file.
            if matches!(t.spec.name, "nodes" | "graph_nodes" | "tag_nodes" | "qa") {
                validate::check_not_empty(&t.source, t.spec.name, &t.batch)?;
            }
        }
        let need = |have: &str, want: &str| -> Result<()> {
            match (self.get(have), self.get(want)) {
                (Some(h), None) => Err(DatasetError::Incomplete { source_path: h.source.clone(), missing: want.to_string() }),
                _ => Ok(()),
            }
        };
        for (a, b) in [
            ("nodes", "edges"),
            ("edges", "nodes"),
            ("answers", "queries"),
            ("queries", "nodes"),
            ("graph_nodes", "graph_edges"),
            ("graph_edges", "graph_nodes"),
            ("graph_nodes", "qa"),
            ("qa", "graph_nodes"),
            ("tag_nodes", "tag_edges"),
            ("tag_edges", "tag_nodes"),
            ("emails", "tag_nodes"),
        ] {
            need(a, b)?;
        }
        if let (Some(n), Some(e)) = (self.located("nodes"), self.located("edges")) {
            validate::check_kb(n, e, self.located("queries"), self.located("answers"))?;
        }
        if let (Some(n), Some(e), Some(q)) = (self.located("graph_nodes"), self.located("graph_edges"), self.located("qa")) {
            validate::check_graph_qa(n, e, q)?;
        }
        if let (Some(n), Some(e)) = (self.located("tag_nodes"), self.located("tag_edges")) {
            validate::check_tag(n, e)?;
        }
        if let (Some(n), Some(m)) = (self.located("tag_nodes"), self.located("emails")) {
            validate::check_emails(n, m)?;
        }
        if self.tables.is_empty() {
            return Err(DatasetError::Empty);
        }
        Ok(())
    }
}

/// The canonical tables a dataset may provide (inputs of the `ingest` stage).
pub const INPUT_TABLES: &[&TableSpec] = &[
    &tables::NODES,
    &tables::EDGES,
    &tables::QUERIES,
    &tables::ANSWERS,
    &tables::CANDIDATE_TYPES,
    &tables::GRAPH_NODES,
    &tables::GRAPH_EDGES,
    &tables::QA,
    &tables::TAG_NODES,
    &tables::TAG_EDGES,
    &tables::EMAILS,
];

/// Loads the tables of a dataset (generating or reading them) and validates them.
pub fn load(spec: &DatasetSpec) -> Result<DatasetTables> {
    let tables = match &spec.source {
        Source::Synthetic(cfg) => synthetic::generate(cfg)?,
        Source::Folder(dir) => folder::load(dir)?,
        Source::Stark { kb, .. } => {
            let kb = stark::Kb::parse(kb).ok_or_else(|| DatasetError::Config(format!("unknown STaRK KB `{kb}`")))?;
            let (root, _) = spec.stark_root(&|_| {})?;
            let skb = stark::Skb::load(kb, &root)?;
            let qa = stark::Qa::load(kb, &root, false)?;
            stark::to_tables(&skb, &qa, &root)?
        }
        Source::Raw { kind, dir } => load_raw(*kind, dir, spec)?,
        Source::NotYetAvailable { reason } => {
            return Err(DatasetError::NotAvailable { name: spec.name.clone(), reason: reason.clone() });
        }
    };
    tables.validate()?;
    Ok(tables)
}

/// Reads a raw-format dataset from its folder.
fn load_raw(kind: registry::RawKind, dir: &Path, spec: &DatasetSpec) -> Result<DatasetTables> {
    use registry::RawKind;
    let seed = 42;
    match kind {
        RawKind::ExplaGraphs => {
            let (items, src) = graphqa::explagraphs::load(dir, seed)?;
            graphqa::to_tables(&items, &src)
        }
        RawKind::SceneGraphs => {
            let items = graphqa::scenegraphs::load_dir(dir, seed)?;
            graphqa::to_tables(&items, dir)
        }
        RawKind::WebQsp => {
            let items = graphqa::webqsp::load_rog_dir(dir)?;
            if items.is_empty() {
                return Err(DatasetError::NotAvailable {
                    name: spec.name.clone(),
                    reason: format!(
                        "{} holds WebQSP questions but no per-question subgraphs; add RoG-webqsp Parquet files (data/{{train,validation,test}}-*.parquet)",
                        dir.display()
                    ),
                });
            }
            graphqa::to_tables(&items, dir)
        }
        RawKind::Tape => tape::load(dir)?.to_tables(),
        RawKind::Enron => {
            let rd = std::fs::read_dir(dir).map_err(|e| DatasetError::io(dir, e))?;
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("emails") && n.ends_with(".csv")))
                .collect();
            files.sort();
            let mut emails = Vec::new();
            for f in &files {
                emails.extend(enron::read_csv(f)?);
            }
            let src = files.first().cloned().unwrap_or_else(|| dir.to_path_buf());
            enron::PeopleGraph::build(emails, &src).to_tables()
        }
        RawKind::PrimekgPaths => primekg_paths::Pathways::load(dir)?.to_tables(),
        RawKind::Cora => tag::planetoid::load_cora(dir)?.to_tables(),
        RawKind::Pubmed => tag::planetoid::load_pubmed(dir)?.to_tables(),
        RawKind::OgbArxiv => tag::ogb::load(dir, tag::ogb::OgbGraph::Arxiv)?.to_tables(),
        RawKind::OgbProducts => tag::ogb::load(dir, tag::ogb::OgbGraph::Products)?.to_tables(),
        RawKind::Reviews { latest_percent } => tag::reviews::load(dir, f64::from(latest_percent) / 100.0)?.to_tables(),
    }
}

/// Path-like label for generated tables, used in error messages.
pub fn generated_source(label: &str, table: &str) -> PathBuf {
    Path::new(label).join(table)
}
