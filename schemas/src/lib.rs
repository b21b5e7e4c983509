//! Canonical Arrow tables of tgrag: the contract between the `datasets`, `stages` and `pipeline` crates.
//!
//! * [`tables`] declares every table (columns, types, nullability, schema version) as a [`TableSpec`].
//! * [`validate`] checks record batches against a spec and the cross-table rules of a knowledge base
//!   (unique node ids, edges to existing nodes, answers to existing queries); every violation names the
//!   file, the row and the column.
//! * [`io`] reads Parquet with errors that name the file, and writes Parquet deterministically and
//!   atomically (temporary file in the same folder, fsync, rename).
//! * [`rows`] builds a table from row structs (one [`rows::Row`] impl per row type).
//! * [`columns`] gives typed access to columns with errors instead of panics.
//! * [`seed`] holds SplitMix64, the seeded mixer that datasets and models share.
//!
//! This crate deliberately depends on arrow-rs and parquet only (no polars, datafusion or burn).
//!
//! ```
//! use tgrag_schemas::tables;
//!
//! // Every table tgrag writes is declared once: here `scores`, where every evaluation lands.
//! let spec = tables::by_name("scores")?;
//! let schema = spec.schema();
//! assert!(schema.field_with_name("method").is_ok() && schema.field_with_name("value").is_ok());
//! // A name nobody declared is an error, not an empty table.
//! assert!(tables::by_name("no_such_table").is_err());
//! # Ok::<(), tgrag_schemas::SchemaError>(())
//! ```

// A library reports through its return values and `Progress`, never by printing to stdout.
#![warn(clippy::print_stdout)]
#![warn(missing_docs)]

pub mod columns;
pub mod error;
pub mod fault;
pub mod io;
pub mod limits;
pub mod rows;
pub mod seed;
pub mod table;
pub mod tables;
pub mod validate;

pub use error::{QUOTE_CHARS, Result, SchemaError, Violation, quote};
pub use fault::Fault;
pub use table::{ColType, ColumnSpec, TableSpec};
