//! Datasets of tgrag: where canonical tables come from.
//!
//! * [`registry`] names every dataset the pipeline knows and how it is obtained.
//! * [`synthetic`] is the built-in, seeded generator (`make run` needs no download).
//! * [`folder`] reads a folder of canonical tables given as Parquet, CSV or TSV (raw-file wrangling
//!   with polars stays inside this module; the result is arrow-rs).
//! * [`rng`] is the seeded random generator shared by generators and stages.
//!
//! Every loader returns [`DatasetTables`]: canonical batches plus the file each came from, so that
//! validation errors name the file, row and column.

pub mod archive;
pub mod error;
pub mod folder;
pub mod hub;
pub mod pickle;
pub mod pyrepr;
pub mod registry;
pub mod rng;
pub mod stark;
pub mod synthetic;

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
        }
        let need = |have: &str, want: &str| -> Result<()> {
            match (self.get(have), self.get(want)) {
                (Some(h), None) => Err(DatasetError::Incomplete {
                    source_path: h.source.clone(),
                    missing: want.to_string(),
                }),
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
        ] {
            need(a, b)?;
        }
        if let (Some(n), Some(e)) = (self.located("nodes"), self.located("edges")) {
            validate::check_kb(n, e, self.located("queries"), self.located("answers"))?;
        }
        if let (Some(n), Some(e), Some(q)) =
            (self.located("graph_nodes"), self.located("graph_edges"), self.located("qa"))
        {
            validate::check_graph_qa(n, e, q)?;
        }
        if let (Some(n), Some(e)) = (self.located("tag_nodes"), self.located("tag_edges")) {
            validate::check_tag(n, e)?;
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
        Source::NotYetAvailable { reason } => {
            return Err(DatasetError::NotAvailable { name: spec.name.clone(), reason: reason.clone() });
        }
    };
    tables.validate()?;
    Ok(tables)
}

/// Path-like label for generated tables, used in error messages.
pub fn generated_source(label: &str, table: &str) -> PathBuf {
    Path::new(label).join(table)
}
