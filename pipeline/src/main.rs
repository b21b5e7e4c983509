//! `tgrag`: the command-line entry point. `main` is thin: parse, validate every argument and stage
//! config before any work starts, dispatch to one command, print the whole error chain on failure.

mod cli;
#[cfg(test)]
mod code_digest;
mod commands;
mod lock;
mod nightly;
mod runner;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            if err.downcast_ref::<lock::Locked>().is_some() { ExitCode::from(lock::EXIT_LOCKED as u8) } else { ExitCode::FAILURE }
        }
    }
}
