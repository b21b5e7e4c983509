//! Where a night's numbers came from: the code (git commit and dirty flag, tgrag version, the code
//! digest of the cache key), every stage's configuration (and its hash), every dataset's source,
//! revision and file digests, the host (CPU, cores, memory, GPU and driver) and the start and end
//! times.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use anyhow::{Context, Result};
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

/// The most bytes of a `provenance.json` read (a night's has dataset file lists; a planted link to
/// `/dev/zero` must not be read forever).
pub const MAX_BYTES: u64 = 64 << 20;

/// What a reader of a night's `provenance.json` relies on, checked: the night's stamp, when it ran,
/// the code digest and the previous night.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The night's folder name (`YYYY-MM-DDTHHMMSS.mmmZ`).
    pub stamp: String,
    /// When the night started and finished (`YYYY-MM-DDTHH:MM:SSZ`).
    pub started_at: String,
    pub finished_at: String,
    /// The night it was compared with (a folder name beside it), if any.
    pub previous: Option<String>,
}

/// At most 60 characters of a value from a file, escaped, for an error message.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    // Invisible and control characters escaped; the JSON quotes and escapes kept as they are.
    let cut: String =
        s.chars().take(60).map(|c| if matches!(c, '"' | '\\') { c.to_string() } else { c.escape_debug().to_string() }).collect();
    if s.chars().count() > 60 { format!("{cut}…") } else { cut }
}

/// Whether `s` is `YYYY-MM-DDTHH:MM:SSZ` (the format [`crate::lock::utc`] writes).
pub fn is_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Checks the fields of a parsed `provenance.json` (`file` names it in errors).
pub fn check(v: &Value, file: &Path) -> Result<Checked> {
    let bad =
        |field: &str, want: &str, got: &Value| crate::input!("{}: field `{field}`: expected {want}, got {}", file.display(), shown(got));
    if !v.is_object() {
        bail_input!("{}: expected a JSON object, got {}", file.display(), shown(v));
    }
    let string = |field: &str, want: &str, ok: &dyn Fn(&str) -> bool| -> Result<String> {
        let got = field.split('.').fold(v, |v, k| &v[k]);
        got.as_str().filter(|s| ok(s)).map(str::to_string).ok_or_else(|| bad(field, want, got))
    };
    let hex = |s: &str| !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let stamp = string("stamp", "a night's stamp (YYYY-MM-DDTHHMMSS.mmmZ)", &super::is_stamp)?;
    let started_at = string("started_at", "a UTC time (YYYY-MM-DDTHH:MM:SSZ)", &is_utc)?;
    let finished_at = string("finished_at", "a UTC time (YYYY-MM-DDTHH:MM:SSZ)", &is_utc)?;
    string("code.code_digest", "hexadecimal digits", &hex)?;
    let commit = &v["code"]["git_commit"];
    if !(commit.is_null() || commit.as_str().is_some_and(hex)) {
        return Err(bad("code.git_commit", "null or hexadecimal digits", commit));
    }
    let previous = match &v["previous"] {
        Value::Null => None,
        p => Some(
            p.as_str().filter(|s| super::is_stamp(s)).map(str::to_string).ok_or_else(|| bad("previous", "null or a night's stamp", p))?,
        ),
    };
    Ok(Checked { stamp, started_at, finished_at, previous })
}

/// Reads and checks `<dir>/provenance.json`: a regular file (not a link) of at most [`MAX_BYTES`],
/// JSON, with the fields of [`check`].
pub fn read(dir: &Path) -> Result<(Value, Checked)> {
    let file = dir.join("provenance.json");
    let meta = std::fs::symlink_metadata(&file).with_context(|| format!("{}", file.display()))?;
    if !meta.file_type().is_file() {
        bail_input!("{}: not a regular file", file.display());
    }
    if meta.len() > MAX_BYTES {
        bail_input!("{}: {} bytes, more than a provenance record has ({MAX_BYTES} at most)", file.display(), meta.len());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&file)
        .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
        .with_context(|| format!("{}", file.display()))?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| crate::input!("{}: not JSON: {e}", file.display()))?;
    let checked = check(&v, &file)?;
    Ok((v, checked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_fields_are_checked_and_errors_name_the_field() {
        let f = Path::new("n/provenance.json");
        let good = json!({
            "stamp": "2026-11-30T010101.007Z", "started_at": "2026-11-30T01:01:01Z", "finished_at": "2026-11-30T01:02:00Z",
            "code": { "code_digest": "0a1B", "git_commit": "deadbeef" }, "previous": "2026-11-29T010101.007Z",
        });
        let c = check(&good, f).expect("valid");
        assert_eq!((c.stamp.as_str(), c.previous.as_deref()), ("2026-11-30T010101.007Z", Some("2026-11-29T010101.007Z")));
        let bad = |path: &[&str], v: Value| {
            let mut p = good.clone();
            let last = path.len() - 1;
            let slot = path[..last].iter().fold(&mut p, |p, k| &mut p[*k]);
            slot[path[last]] = v;
            format!("{:#}", check(&p, f).expect_err("invalid"))
        };
        let e = bad(&["code", "code_digest"], json!("ééééééé\u{1F600}"));
        assert!(e.contains("n/provenance.json: field `code.code_digest`: expected hexadecimal digits"), "{e}");
        assert!(bad(&["previous"], json!("../../etc")).contains("field `previous`"));
        assert!(bad(&["stamp"], json!(7)).contains("field `stamp`"));
        assert!(bad(&["started_at"], json!("yesterday")).contains("field `started_at`"));
        assert!(bad(&["code", "git_commit"], json!("main; rm")).contains("field `code.git_commit`"));
        // Long values are cut in the message.
        let e = bad(&["code", "code_digest"], json!("x".repeat(10_000)));
        assert!(e.len() < 300, "{e}");
        assert!(check(&json!([1]), f).is_err());
    }
}
