//! `ingest`: the dataset's canonical tables, validated and written as Parquet. Loading (generation,
//! raw-file parsing) happens in the `datasets` crate; this stage validates and persists.

use serde::{Deserialize, Serialize};

use crate::{Result, StageContext, StageInfo, StageSpec};

/// Ingest has no options of its own: the dataset's own options (size, seed, files) are its input.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {}

pub struct Ingest;

static INFO: StageInfo = StageInfo {
    name: "ingest",
    module: module_path!(),
    version: 2,
    about: "load or generate the dataset, validate it, write canonical tables",
    deps: &[],
    needs: &[],
    excludes: &[],
    collects: &[],
    outputs: &[
        "nodes",
        "edges",
        "queries",
        "answers",
        "candidate_types",
        "graph_nodes",
        "graph_edges",
        "qa",
        "tag_nodes",
        "tag_edges",
        "emails",
    ],
    files: &[],
    shards: None,
};

impl StageSpec for Ingest {
    type Config = IngestConfig;
    const INFO: &'static StageInfo = &INFO;
    fn execute(&self, ctx: &mut StageContext<'_>, _config: IngestConfig) -> Result<()> {
        let dataset = ctx.dataset;
        let tables = ctx.timed("load+validate", |_| Ok(tgrag_datasets::load(dataset)?))?;
        ctx.timed("write", |ctx| {
            for t in &tables.tables {
                ctx.write(t.spec.name, &t.batch)?;
            }
            Ok(())
        })?;
        let rows: usize = tables.tables.iter().map(|t| t.batch.num_rows()).sum();
        ctx.set_items(rows as u64);
        Ok(())
    }
}
