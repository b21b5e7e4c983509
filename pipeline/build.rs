//! Computes the code digest of the stages' cache key (see `src/code_digest.rs`) at compile time and
//! hands it to the binary as `TGRAG_CODE_DIGEST`. Cargo reruns this script when any file under the
//! code folders or `Cargo.lock` changes.

use std::path::PathBuf;

#[path = "src/code_digest.rs"]
#[allow(dead_code)]
mod code_digest;

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into())).join("..");
    for dir in code_digest::CODE_ROOTS.iter().chain(code_digest::CODE_FILES) {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    match code_digest::digest(&root) {
        Ok(d) => println!("cargo:rustc-env=TGRAG_CODE_DIGEST={d}"),
        Err(e) => {
            eprintln!("tgrag build script: cannot read the code folders under {}: {e}", root.display());
            std::process::exit(1);
        }
    }
}
