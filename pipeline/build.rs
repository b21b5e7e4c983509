//! Computes the code digest of the stages' cache key (see `src/code_digest.rs`) at compile time and
//! hands it to the binary as `TGRAG_CODE_DIGEST`. Cargo reruns this script when any file under the
//! code folders or `Cargo.lock` changes.
//!
//! Also hands over `TGRAG_COMMIT`, the commit the binary is built from (written into every Parquet
//! file's metadata): `git rev-parse HEAD`, with `-dirty` when the code folders, the binary's own
//! sources or `Cargo.lock` differ from it; `unknown` outside a git checkout. The script reruns when
//! HEAD or the branch it points to moves (and when the code changes, which is when `-dirty` can
//! change), never on a timer: the same build always writes the same bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/code_digest.rs"]
#[allow(dead_code)]
mod code_digest;

/// The binary's own sources (their edits make the build `-dirty` too).
const OWN: &[&str] = &["pipeline/src", "pipeline/build.rs"];

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit and the git files whose change means another commit (HEAD, the branch, packed refs).
fn commit(root: &Path) -> (String, Vec<PathBuf>) {
    let Some(head) = git(root, &["rev-parse", "--verify", "-q", "HEAD"]).filter(|h| !h.is_empty()) else {
        return ("unknown".into(), Vec::new());
    };
    let mut watch = Vec::new();
    if let Some(dir) = git(root, &["rev-parse", "--absolute-git-dir"]) {
        let dir = PathBuf::from(dir);
        watch.push(dir.join("HEAD"));
        watch.push(dir.join("packed-refs"));
        if let Some(r) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
            watch.push(dir.join(r));
        }
    }
    let mut paths: Vec<&str> = code_digest::CODE_ROOTS.iter().chain(code_digest::CODE_FILES).chain(OWN).copied().collect();
    paths.sort_unstable();
    let mut args = vec!["status", "--porcelain", "--"];
    args.extend(paths);
    let dirty = git(root, &args).is_none_or(|s| !s.is_empty());
    (if dirty { format!("{head}-dirty") } else { head }, watch)
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into())).join("..");
    for dir in code_digest::CODE_ROOTS.iter().chain(code_digest::CODE_FILES).chain(OWN) {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    match code_digest::digest(&root) {
        Ok(d) => println!("cargo:rustc-env=TGRAG_CODE_DIGEST={d}"),
        Err(e) => {
            eprintln!("tgrag build script: cannot read the code folders under {}: {e}", root.display());
            std::process::exit(1);
        }
    }
    let (commit, watch) = commit(&root);
    // Only files that exist: cargo reruns a script on every build while a watched file is missing.
    for f in watch.iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!("cargo:rustc-env=TGRAG_COMMIT={commit}");
}
