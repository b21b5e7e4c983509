//! `tgrag`: the command-line entry point. `main` is thin: parse, validate every argument and stage
//! config before any work starts, dispatch to one command, print the whole error chain on failure.

mod cli;
mod eval_tool;
mod plan_tool;
mod runner;
mod sql;
mod tools;
mod topo_tools;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
