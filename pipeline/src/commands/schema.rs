//! `tgrag schema`: every declared table (name, version, family, run-dependent or not), or one
//! table's columns.

use anyhow::Result;
use tgrag_schemas::tables;

/// `tgrag schema` arguments.
#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// Table name (`nodes`, `run`, `scores`, ...); omit to list every table.
    pub table: Option<String>,
}

pub fn run(a: SchemaArgs) -> Result<()> {
    match a.table {
        Some(t) => print!("{}", tables::by_name(&t)?.describe()),
        None => {
            println!("tables (tgrag schema <table> for columns; * = run-dependent, left out of determinism checks):");
            for t in tables::ALL {
                println!("  {:<20} v{} {} {:<24} {}", t.name, t.version, if t.run_dependent { "*" } else { " " }, t.family, t.doc);
            }
        }
    }
    Ok(())
}
