//! `tgrag`: the command-line entry point ([`tgrag_pipeline::main`]: parse, validate every
//! argument and stage config before any work starts, dispatch to one command, print the whole
//! error chain on failure).

fn main() -> std::process::ExitCode {
    tgrag_pipeline::main()
}
