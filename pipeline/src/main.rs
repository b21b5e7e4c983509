//! `tgrag`: the command-line entry point. `main` is thin: parse, validate every argument and stage
//! config before any work starts, dispatch to one command, print the whole error chain on failure.

#[macro_use]
mod fault;
mod cli;
#[cfg(test)]
mod code_digest;
mod commands;
mod lock;
mod nightly;
mod runner;

use std::process::ExitCode;

use clap::Parser;

/// Gives libwayland-client, which a Vulkan layer loads while wgpu lists the adapters, a runtime
/// folder when the environment has none, so that its "XDG_RUNTIME_DIR is invalid or not set"
/// line never reaches the user (it is harmless: no display is used).
#[allow(unsafe_code)]
fn quiet_wayland() {
    let valid = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_absolute());
    if valid {
        return;
    }
    // One folder per user, reused by every run (what the process owns is its uid's).
    let uid = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
    };
    let dir = std::env::temp_dir().join(format!("tgrag-runtime-{uid}"));
    let made = {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).is_ok()
    };
    let target = if made { dir } else { std::env::temp_dir() };
    // SAFETY: called first thing in `main`, before any thread exists, so no other thread reads
    // the environment while it changes.
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", target) };
}

fn main() -> ExitCode {
    quiet_wayland();
    // Every Parquet file this process writes names the commit it was built from.
    tgrag_schemas::io::set_build_commit(runner::BUILD_COMMIT);
    let args = cli::Args::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            fault::exit_code(&err)
        }
    }
}
