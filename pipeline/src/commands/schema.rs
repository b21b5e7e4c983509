//! `tgrag schema`: every declared table (name, version, family, run-dependent or not), or one
//! table's columns; `--json` for machines (with the key-value metadata every file of the table
//! carries).

use anyhow::Result;
use tgrag_schemas::{ColType, TableSpec, io, tables};

/// `tgrag schema` arguments.
#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// Table name (`nodes`, `run`, `scores`, ...); omit to list every table.
    pub table: Option<String>,
    /// Print JSON: each table's columns (name, type, nullable, doc, allowed values) and the
    /// key-value metadata its Parquet files carry (`tgrag.*`; docs/outputs.md).
    #[arg(long)]
    pub json: bool,
}

/// A column type as `--json` names it: `uint32`, `float64`, `utf8`, `bool`, `list<uint32>`,
/// `fixed_size_list<float32, 384>`, `fixed_size_list<float32, *>` (any width, one per file),
/// `run<float32>` (one column per dimension: the column's `run` entry gives the names).
pub fn type_name(t: ColType) -> String {
    match t {
        ColType::U8 => "uint8".into(),
        ColType::U32 => "uint32".into(),
        ColType::U64 => "uint64".into(),
        ColType::I32 => "int32".into(),
        ColType::I64 => "int64".into(),
        ColType::F32 => "float32".into(),
        ColType::F64 => "float64".into(),
        ColType::Bool => "bool".into(),
        ColType::Utf8 => "utf8".into(),
        ColType::ListU32 => "list<uint32>".into(),
        ColType::ListF32 => "list<float32>".into(),
        ColType::ListUtf8 => "list<utf8>".into(),
        ColType::Embedding(n) => format!("fixed_size_list<float32, {n}>"),
        ColType::Vector => "fixed_size_list<float32, *>".into(),
        ColType::Id => "integer|utf8".into(),
        ColType::Run { item, .. } => format!("run<{}>", type_name(ColType::from(item))),
    }
}

/// One table as JSON.
pub fn table_json(t: &TableSpec) -> serde_json::Value {
    let columns: Vec<serde_json::Value> = t
        .columns
        .iter()
        .map(|c| {
            let mut col = serde_json::json!({
                "name": c.name,
                "type": type_name(c.ty),
                "nullable": c.nullable,
                "doc": c.doc,
                "values": c.values,
            });
            // A run's file columns are its name and the dimension, zero-padded to `digits`.
            if let (ColType::Run { digits, .. }, Some(obj)) = (c.ty, col.as_object_mut()) {
                obj.insert("run".into(), serde_json::json!({ "prefix": c.name, "digits": digits, "first": c.run_name(0) }));
            }
            col
        })
        .collect();
    let metadata: serde_json::Map<String, serde_json::Value> =
        io::table_metadata(t).into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
    serde_json::json!({
        "name": t.name,
        "version": t.version,
        "family": t.family,
        "doc": t.doc,
        "run_dependent": t.run_dependent,
        "columns": columns,
        "metadata": metadata,
    })
}

/// Every table as JSON, with the metadata keys and this build's commit.
pub fn all_json() -> serde_json::Value {
    serde_json::json!({
        "metadata_keys": io::META_KEYS,
        "commit": crate::runner::BUILD_COMMIT,
        "tables": tables::ALL.iter().map(|t| table_json(t)).collect::<Vec<_>>(),
    })
}

pub fn run(a: SchemaArgs) -> Result<()> {
    match (a.table, a.json) {
        (Some(t), true) => println!("{}", serde_json::to_string_pretty(&table_json(tables::by_name(&t)?))?),
        (None, true) => println!("{}", serde_json::to_string_pretty(&all_json())?),
        (Some(t), false) => print!("{}", tables::by_name(&t)?.describe()),
        (None, false) => {
            println!("tables (tgrag schema <table> for columns; * = run-dependent, left out of determinism checks):");
            for t in tables::ALL {
                println!("  {:<20} v{} {} {:<24} {}", t.name, t.version, if t.run_dependent { "*" } else { " " }, t.family, t.doc);
            }
        }
    }
    Ok(())
}
