//! The `tgrag` command line as a library: the argument parser and the dispatch to one command
//! ([`cli`]), the commands ([`commands`]), the stage runner with its content-addressed cache
//! ([`runner`]), the folder lock ([`lock`]), the nightly job ([`nightly`]) and the mapping of
//! errors to exit codes ([`fault`]). The `tgrag` binary is [`main`]; the benchmark harness
//! (`bench/tgrag-bench`) reuses the commands' helpers.
//!
//! ```
//! use clap::Parser;
//! use tgrag_pipeline::cli::{Args, Command};
//!
//! // The arguments `tgrag run` takes, parsed as the binary parses them.
//! let args = Args::try_parse_from(["tgrag", "run", "--dataset", "synthetic", "--size", "tiny"]).unwrap();
//! assert!(matches!(args.command, Command::Run(_)));
//! // Every stage option, from the stages' config structs (what `tgrag options` prints).
//! let md = tgrag_pipeline::commands::options::markdown(&tgrag_stages::all());
//! assert!(md.contains("| `k1` | number | `1.5` |"));
//! ```

#[macro_use]
pub mod fault;
pub mod cli;
#[cfg(test)]
mod code_digest;
pub mod commands;
pub mod lock;
pub mod nightly;
pub mod runner;

use std::process::ExitCode;

use clap::Parser;

/// Gives libwayland-client, which a Vulkan layer loads while wgpu lists the adapters, a runtime
/// folder when the environment has none, so that its "XDG_RUNTIME_DIR is invalid or not set"
/// line never reaches the user (it is harmless: no display is used).
#[allow(unsafe_code)]
pub fn quiet_wayland() {
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

/// glibc's allocator, set for a process that allocates and frees large tensors in a loop (burn's
/// training steps): its defaults return freed memory to the kernel (`munmap` above a moving mmap
/// threshold, heap trimming above 128 KiB free), so the next step's buffers fault their pages in
/// again. With blocks up to 32 MiB (glibc's ceiling) kept on the heap, freed memory trimmed only
/// beyond 1 GiB and the heap grown 64 MiB at a time, `gretriever` on the default run took 107 s
/// instead of 139 s (4.5 M minor page faults instead of 16.9 M; peak memory 3.9 GB instead of
/// 3.7 GB), same outputs. Where glibc is not the allocator this does nothing.
#[allow(unsafe_code)]
pub fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called first in `main`, before any thread
    // exists. A refused value (return 0) leaves glibc's default, which is harmless.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

/// The process-wide settings read from the environment, checked before any work: `TGRAG_SIMD`
/// (a level this CPU has) and `TGRAG_GPU_BACKEND` (a backend this build and machine can honour).
pub fn check_environment() -> Result<(), String> {
    tgrag_models::simd::configure().map_err(|e| e.to_string())?;
    tgrag_models::device::configure()
}

/// The `tgrag` binary: parse the arguments, check them and `TGRAG_SIMD`, run one command, print
/// the error chain and exit with its fault's code.
pub fn main() -> ExitCode {
    quiet_wayland();
    tune_malloc();
    // Every Parquet file this process writes names the commit it was built from.
    tgrag_schemas::io::set_build_commit(runner::BUILD_COMMIT);
    let args = cli::Args::parse();
    // TGRAG_SIMD caps every kernel dispatch; an unknown level, or one this CPU lacks, stops here,
    // before any work; so does a TGRAG_GPU_BACKEND this build or machine cannot honour.
    if let Err(err) = check_environment() {
        eprintln!("error: {err}");
        return ExitCode::from(tgrag_schemas::Fault::Config.exit_code());
    }
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", fault::describe(&err));
            fault::exit_code(&err)
        }
    }
}
