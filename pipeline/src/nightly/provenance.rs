//! Where a night's numbers came from: the code (git commit and dirty flag, tgrag version, the code
//! digest of the cache key), every stage's configuration (and its hash), every dataset's source,
//! revision and file digests, the host (CPU, cores, memory, GPU and driver) and the start and end
//! times.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The git commit of the working directory and whether it has uncommitted changes.
pub fn code() -> Value {
    let commit = git(&["rev-parse", "HEAD"]);
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    json!({
        "git_commit": commit,
        "git_dirty": dirty,
        "tgrag_version": env!("CARGO_PKG_VERSION"),
        "code_digest": crate::runner::CODE_DIGEST,
    })
}

/// Every stage's configuration and the sha256 of its canonical JSON.
pub fn configs(configs: &BTreeMap<String, Value>) -> Value {
    let mut out = serde_json::Map::new();
    for (stage, cfg) in configs {
        let hash = tgrag_schemas::io::hex(&Sha256::digest(cfg.to_string().as_bytes()));
        out.insert(stage.clone(), json!({ "sha256": hash, "config": cfg }));
    }
    Value::Object(out)
}

/// The files under `dir` (recursively, in name order) with their sizes and sha256.
pub fn file_digests(dir: &Path) -> Vec<Value> {
    fn walk(d: &Path, out: &mut Vec<std::path::PathBuf>) {
        let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(d).into_iter().flatten().flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files
        .iter()
        .map(|p| {
            json!({
                "file": p.strip_prefix(dir).unwrap_or(p).display().to_string(),
                "bytes": std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
                "sha256": tgrag_schemas::io::sha256_file(p).ok(),
            })
        })
        .collect()
}

/// A dataset's source: its kind, revision (content key) and, for files on disk, their digests.
pub fn dataset(spec: &tgrag_datasets::DatasetSpec) -> Value {
    use tgrag_datasets::registry::Source;
    let (kind, dir) = match &spec.source {
        Source::Synthetic(c) => (format!("synthetic ({:?}, seed {})", c.size, c.seed), None),
        Source::Folder(d) => ("folder of canonical tables".to_string(), Some(d.clone())),
        Source::Stark { kb, root } => (format!("STaRK {kb}"), root.clone()),
        Source::Raw { kind, dir } => (format!("{kind:?}"), Some(dir.clone())),
        Source::NotYetAvailable { reason } => (format!("not available: {reason}"), None),
    };
    json!({
        "source": kind,
        "folder": dir.as_ref().map(|d| d.display().to_string()),
        "revision": spec.content_key().ok(),
        "files": dir.as_deref().map(file_digests).unwrap_or_default(),
    })
}

fn first_line_with(path: &str, prefix: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(|l| l.split_once(':').map_or("", |x| x.1).trim().to_string())
}

/// The machine: CPU model, cores, memory, OS, and the GPU and driver when there is one.
pub fn host() -> Value {
    let mem_kib: Option<u64> =
        first_line_with("/proc/meminfo", "MemTotal").and_then(|v| v.split_whitespace().next().and_then(|x| x.parse().ok()));
    let gpu = git_free_command("nvidia-smi", &["--query-gpu=name,driver_version", "--format=csv,noheader"]);
    json!({
        "hostname": std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).ok(),
        "cpu": first_line_with("/proc/cpuinfo", "model name"),
        "cores": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "memory_bytes": mem_kib.map(|k| k * 1024),
        "os": format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|h| h.trim().to_string()).ok(),
        "gpu": gpu,
        "wgpu_adapter": tgrag_models::device::hardware_adapter().map(|a| json!({"name": a.name, "driver": a.driver, "kind": a.kind})),
    })
}

fn git_free_command(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}
