//! Downloads from the Hugging Face hub with hf-hub: a pinned revision, the standard cache
//! (`$HF_HOME/hub`, `HF_HUB_CACHE`), `HF_ENDPOINT` for mirrors, and `HF_HUB_OFFLINE=1` for
//! cache-only use. Every fetched file is hashed (sha256) so that the run manifest records exactly
//! which bytes a result came from.
//!
//! # A hostile endpoint (why hf-hub's cache mode is not used for downloads)
//!
//! hf-hub 1.0.0's cache download (`download_file_to_cache_network` in `repository/download.rs`)
//! takes the `ETag` (or `X-Linked-Etag`) and `X-Repo-Commit` response headers as path components:
//! `blobs/<etag>`, `blobs/<etag>.incomplete`, `.locks/…/<etag>.lock`, `snapshots/<commit>/<file>`,
//! `.no_exist/<commit>/<file>` and `refs/<revision>` (content = the commit) (`cache/storage.rs`),
//! and it writes the body there before any checksum is checked. `Path::join` with `../..` or an
//! absolute header walks out of any folder, so a private staging cache would NOT contain it: the
//! header only needs more `..`. Validating the headers with a HEAD of our own first is not enough
//! either: hf-hub sends its own HEAD afterwards, and a hostile server answers the second one
//! differently. (hf-hub's `get_file_metadata` follows absolute redirects and so loses
//! `X-Repo-Commit` on the real hub's LFS redirects.) The repository listing is read with the
//! plain-HTTP client of `download` instead of hf-hub's `list_tree`, because the hub names an LFS
//! file's sha256 `lfs.oid` and hf-hub 1.0.0 reads `lfs.sha256`: through hf-hub every pin was lost.
//!
//! What is safe by construction is hf-hub's `local_dir` download (`download_file_to_local_dir`):
//! it writes `local_dir.join(filename)` with OUR file name and never makes a path out of a header.
//! So every file is downloaded with hf-hub into a fresh private staging folder inside the cache
//! (`<cache>/<repo>/.tgrag-staging-<pid>-<n>/`), checked (sha256 against the pin where tgrag pins
//! one, a `.zip` must open as a zip archive), and only then moved into hf-hub's cache layout
//! (`blobs/<sha256>`, `snapshots/<commit>/<file>` → the blob, `refs/<revision>`), where hf-hub's own
//! offline lookup (`HF_HUB_OFFLINE=1`) finds it. The commit is the pinned revision, or what the
//! hub's repository API answers for the revision, accepted only as 40 hex digits.
//!
//! # Timeouts
//!
//! hf-hub builds its HTTP clients without timeouts (and its redirect-less HEAD client cannot be
//! replaced), so every hub call runs on a worker thread watched from here: a TCP connect bound
//! (`TGRAG_HUB_CONNECT_TIMEOUT`, default 10 s, checked with a connect of our own first), a stall
//! bound (`TGRAG_HUB_TIMEOUT`, default 60 s without a new byte of the file being downloaded) and a
//! total bound per file (`TGRAG_HUB_TOTAL_TIMEOUT`, default 3600 s). hf-hub retries transient
//! failures itself (here at most 3 attempts, exponential backoff from 0.5 s). A worker that is
//! given up on only ever writes into its own staging folder, which is removed.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hf_hub::{HFClientBuilder, HFClientSync, HFError};
use serde::Serialize;

use crate::error::{DatasetError, Result};

/// A repository on the hub at a pinned revision.
#[derive(Debug, Clone, Serialize)]
pub struct HubRepo {
    /// `model` or `dataset`.
    pub kind: &'static str,
    pub owner: &'static str,
    pub name: &'static str,
    pub revision: String,
}

impl HubRepo {
    pub fn id(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
    /// hf-hub's cache folder name: `models--owner--name`.
    fn folder(&self) -> String {
        format!("{}s--{}--{}", self.kind, self.owner, self.name)
    }
    /// The URL a file is resolved from (for messages).
    fn url(&self, endpoint: &str, revision: &str, file: &str) -> String {
        let prefix = if self.kind == "model" { String::new() } else { format!("{}s/", self.kind) };
        format!("{endpoint}/{prefix}{}/resolve/{revision}/{file}", self.id())
    }
}

/// One downloaded (or cached) file.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Fetched {
    /// Path inside the repository.
    pub file: String,
    /// Where the cache keeps it.
    #[serde(skip)]
    pub local: PathBuf,
    pub sha256: String,
    pub bytes: u64,
}

/// Whether the user asked for cache-only operation (`HF_HUB_OFFLINE=1`).
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The hub endpoint: `HF_ENDPOINT` (a mirror) or huggingface.co.
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT").map(|e| e.trim_end_matches('/').to_string()).unwrap_or_else(|_| "https://huggingface.co".into())
}

/// The bounds of every hub request (seconds in the environment; see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    pub connect: Duration,
    pub stall: Duration,
    pub total: Duration,
}

impl Timeouts {
    /// `TGRAG_HUB_CONNECT_TIMEOUT` (10), `TGRAG_HUB_TIMEOUT` (60), `TGRAG_HUB_TOTAL_TIMEOUT` (3600).
    pub fn from_env() -> Result<Self> {
        let read = |var: &str, default: f64| -> Result<Duration> {
            match std::env::var(var) {
                Err(_) => Ok(Duration::from_secs_f64(default)),
                Ok(v) => match v.trim().parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 && s <= 1e6 => Ok(Duration::from_secs_f64(s)),
                    _ => Err(DatasetError::Config(format!("{var}={v:?}: expected a number of seconds above 0 (at most 1000000)"))),
                },
            }
        };
        Ok(Timeouts {
            connect: read("TGRAG_HUB_CONNECT_TIMEOUT", 10.0)?,
            stall: read("TGRAG_HUB_TIMEOUT", 60.0)?,
            total: read("TGRAG_HUB_TOTAL_TIMEOUT", 3600.0)?,
        })
    }
}

/// Whether `endpoint` accepts a TCP connection within `bound`; the name lookup is inside the bound
/// too. `Err` says why not.
pub fn reachable(endpoint: &str, bound: Duration) -> std::result::Result<(), String> {
    use std::net::ToSocketAddrs;
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("https", endpoint));
    let hostport = rest.split('/').next().unwrap_or(rest).to_string();
    let with_port = if hostport.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        hostport
    } else {
        format!("{hostport}:{}", if scheme == "http" { 80 } else { 443 })
    };
    let deadline = Instant::now() + bound;
    let (tx, rx) = mpsc::channel();
    let target = with_port.clone();
    std::thread::spawn(move || {
        let result = match target.to_socket_addrs() {
            Err(e) => Err(format!("cannot resolve {target}: {e}")),
            Ok(addrs) => {
                let mut last = format!("no address for {target}");
                let mut ok = false;
                for a in addrs {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match std::net::TcpStream::connect_timeout(&a, left) {
                        Ok(_) => {
                            ok = true;
                            break;
                        }
                        Err(e) => last = format!("{a}: {e}"),
                    }
                }
                if ok { Ok(()) } else { Err(last) }
            }
        };
        let _ = tx.send(result);
    });
    match rx.recv_timeout(bound) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot connect to {endpoint} ({e})")),
        Err(_) => Err(format!("cannot connect to {endpoint} within {} (TGRAG_HUB_CONNECT_TIMEOUT)", secs(bound))),
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Runs `work` on a worker thread and waits for it within the bounds: `total`, and `stall`
/// without growth of `watch` (the file being downloaded, when there is one). A worker given up on
/// is left to finish on its own (it writes only into its staging folder).
fn bounded<T: Send + 'static>(
    url: &str,
    t: &Timeouts,
    watch: Option<PathBuf>,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    let start = Instant::now();
    let (mut last_len, mut last_change) = (0u64, start);
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(v) => return Ok(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(format!("the download of {url} stopped without an answer")),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        let len = watch.as_deref().and_then(|w| std::fs::metadata(w).ok()).map_or(0, |m| m.len());
        if len != last_len {
            (last_len, last_change) = (len, now);
        }
        if now.duration_since(start) >= t.total {
            return Err(format!("{url} did not complete within {} (TGRAG_HUB_TOTAL_TIMEOUT); {last_len} bytes received", secs(t.total)));
        }
        if now.duration_since(last_change) >= t.stall {
            return Err(format!("no data from {url} for {} (TGRAG_HUB_TIMEOUT); {last_len} bytes received", secs(t.stall)));
        }
    }
}

/// A commit as the hub names it: 40 hex digits (lowercased), never a path.
pub fn valid_commit(s: &str) -> Option<String> {
    (s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_ascii_lowercase())
}

/// At most 80 characters of a server-supplied value, escaped, for a message.
fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(80).collect::<String>().escape_debug().to_string();
    if s.chars().count() > 80 {
        q.push('…');
    }
    format!("`{q}`")
}

/// A hub client with tgrag's retry policy.
fn client_for(repo: &HubRepo) -> Result<HFClientSync> {
    HFClientBuilder::new()
        .retry_max_attempts(2)
        .retry_base_delay(Duration::from_millis(500))
        .build_sync()
        .map_err(|e| DatasetError::Download { repo: repo.id(), file: "*".into(), reason: format!("cannot start the hub client: {e}") })
}

/// The commit `repo.revision` names: the revision itself when it is 40 hex digits, else what the
/// hub's repository API answers, accepted only as 40 hex digits.
fn resolve_commit(client: &HFClientSync, repo: &HubRepo, endpoint: &str, t: &Timeouts) -> Result<String> {
    let fail = |reason: String| DatasetError::Download { repo: repo.id(), file: "*".into(), reason };
    if let Some(c) = valid_commit(&repo.revision) {
        return Ok(c);
    }
    let url = format!("{endpoint}/api/{}s/{}/revision/{}", repo.kind, repo.id(), repo.revision);
    let (c, kind, owner, name, rev) = (client.clone(), repo.kind, repo.owner, repo.name, repo.revision.clone());
    let sha = bounded(&url, t, None, move || match kind {
        "model" => c.model(owner, name).info().revision(rev).send().map(|i| i.sha),
        _ => c.dataset(owner, name).info().revision(rev).send().map(|i| i.sha),
    })
    .map_err(fail)?
    .map_err(|e| fail(format!("{url}: {e}")))?
    .ok_or_else(|| fail(format!("{url} names no commit for revision {}", repo.revision)))?;
    valid_commit(&sha).ok_or_else(|| {
        fail(format!("{url} answered commit {} for revision {}: not 40 hex digits; nothing was written", quote(&sha), repo.revision))
    })
}

/// One file of a repository listing: its path, size and, when the hub gives one, the sha256 of
/// its LFS payload (a pin from the same commit).
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub path: String,
    pub size: u64,
    pub sha256: Option<String>,
}

/// The files of `repo` under the folder `under` ("" for the whole repository), at the commit its
/// revision resolves to (returned). The names are the server's: callers check them (as
/// [`fetch_pinned`] does) before any becomes a path.
pub fn list(repo: &HubRepo, under: &str) -> Result<(String, Vec<Listed>)> {
    let fail = |reason: String| DatasetError::Download { repo: repo.id(), file: format!("{under}/*"), reason };
    if offline() {
        return Err(fail("listing a repository needs the hub and HF_HUB_OFFLINE=1 forbids it".into()));
    }
    let client = client_for(repo)?;
    let t = Timeouts::from_env()?;
    let endpoint = endpoint();
    reachable(&endpoint, t.connect).map_err(fail)?;
    let commit = resolve_commit(&client, repo, &endpoint, &t)?;
    let folder = if under.is_empty() { String::new() } else { format!("/{under}") };
    let mut url = Some(format!("{endpoint}/api/{}s/{}/tree/{commit}{folder}?recursive=true", repo.kind, repo.id()));
    let token = token();
    let mut out = Vec::new();
    // The hub pages long listings (`Link: <…>; rel="next"`); a bound on the pages keeps a hostile
    // server from looping.
    for _ in 0..10_000 {
        let Some(page) = url.take() else { break };
        let (json, next) = crate::download::get_json(&page, token.as_deref(), 64 << 20)?;
        let entries = json.as_array().ok_or_else(|| fail(format!("{page} answered {} instead of a list", json_kind(&json))))?;
        out.extend(entries.iter().filter_map(listed));
        if let Some(n) = &next
            && !n.starts_with(&format!("{endpoint}/"))
        {
            return Err(fail(format!("{page} pages on to {}, outside {endpoint}", quote(n))));
        }
        url = next;
    }
    if url.is_some() {
        return Err(fail("the listing did not end after 10,000 pages".into()));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((commit, out))
}

/// One file entry of the hub's tree API: `{"type": "file", "path", "size", "lfs": {"oid", "size",
/// "pointerSize"}}`. The LFS payload's sha256 is `lfs.oid` in the hub's answer (hf-hub 1.0.0's
/// `BlobLfsInfo` reads `lfs.sha256`, which the hub does not send: that is why the listing is read
/// here); `lfs.sha256` is accepted too. Anything but 64 hex digits is no pin.
fn listed(e: &serde_json::Value) -> Option<Listed> {
    if e.get("type")?.as_str()? != "file" {
        return None;
    }
    let path = e.get("path")?.as_str()?.to_string();
    let size = e.get("size").and_then(|s| s.as_u64()).unwrap_or(0);
    let lfs = e.get("lfs");
    let sha256 = ["oid", "sha256"]
        .iter()
        .find_map(|k| lfs.and_then(|l| l.get(*k)).and_then(|v| v.as_str()))
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|s| s.to_ascii_lowercase());
    Some(Listed { path, size, sha256 })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Object(_) => "an object",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::String(_) => "a string",
        _ => "a scalar",
    }
}

/// The hub token as hf-hub's client resolves it (its resolver is private): none when
/// `HF_HUB_DISABLE_IMPLICIT_TOKEN` is set, else `HF_TOKEN`, else the file `HF_TOKEN_PATH` names, else
/// `token` in hf-hub's own [`hf_hub::hf_home`].
fn token() -> Option<String> {
    if std::env::var("HF_HUB_DISABLE_IMPLICIT_TOKEN").is_ok_and(|v| !v.is_empty()) {
        return None;
    }
    let read = |p: PathBuf| std::fs::read_to_string(p).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    std::env::var("HF_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| std::env::var_os("HF_TOKEN_PATH").map(PathBuf::from).and_then(read))
        .or_else(|| read(hf_hub::hf_home().join("token")))
}

/// Fetch `files` of `repo` into the hf-hub cache. Returns the snapshot folder (the repository
/// layout: `root.join(file)` is each file) and the files with their sha256.
pub fn fetch(repo: &HubRepo, files: &[String], on_file: &dyn Fn(&str)) -> Result<(PathBuf, Vec<Fetched>)> {
    fetch_pinned(repo, files, &[], on_file)
}

/// [`fetch`] with sha256 pins: `(file, sha256)`; a file whose bytes differ is refused (and not
/// kept). Files without a pin are kept when they pass the other checks (a `.zip` must open).
pub fn fetch_pinned(repo: &HubRepo, files: &[String], pins: &[(&str, &str)], on_file: &dyn Fn(&str)) -> Result<(PathBuf, Vec<Fetched>)> {
    let fail = |file: &str, reason: String| DatasetError::Download { repo: repo.id(), file: file.to_string(), reason };
    for f in files {
        if f.is_empty() || f.starts_with('/') || f.split('/').any(|p| p.is_empty() || p == "." || p == "..") || f.contains('\\') {
            return Err(fail(f, "not a plain path inside the repository".into()));
        }
    }
    let pin = |file: &str| pins.iter().find(|(n, s)| *n == file && !s.is_empty()).map(|(_, s)| *s);
    let cache = hf_hub::resolve_cache_dir();
    let repo_dir = cache.join(repo.folder());
    let client = client_for(repo)?;

    if offline() {
        let mut out = Vec::with_capacity(files.len());
        let mut root = None;
        for file in files {
            on_file(file);
            let result = match repo.kind {
                "model" => client
                    .model(repo.owner, repo.name)
                    .download_file()
                    .filename(file.as_str())
                    .revision(repo.revision.as_str())
                    .local_files_only(true)
                    .send(),
                _ => client
                    .dataset(repo.owner, repo.name)
                    .download_file()
                    .filename(file.as_str())
                    .revision(repo.revision.as_str())
                    .local_files_only(true)
                    .send(),
            };
            let local = result.map_err(|e| match e {
                HFError::LocalEntryNotFound { .. } => fail(file, "not in the local cache and HF_HUB_OFFLINE=1 forbids downloading".into()),
                other => fail(file, other.to_string()),
            })?;
            // The cache is ours, but a tampered `refs/<revision>` names the snapshot folder: it
            // must stay a commit.
            let r = snapshot_root(&local, file).ok_or_else(|| fail(file, "could not locate the snapshot folder".into()))?;
            if snapshot_commit(&r).and_then(|c| valid_commit(&c)).is_none() || r.parent() != Some(repo_dir.join("snapshots").as_path()) {
                return Err(fail(
                    file,
                    format!("the cache names snapshot {} for revision {}: not a commit folder", r.display(), repo.revision),
                ));
            }
            let f = checked(&local, file, pin(file)).map_err(|e| fail(file, e))?;
            out.push(f);
            root = Some(r);
        }
        let root = root.ok_or_else(|| fail("*", "no file was asked for".into()))?;
        return Ok((root, out));
    }

    let t = Timeouts::from_env()?;
    let endpoint = endpoint();
    reachable(&endpoint, t.connect).map_err(|e| fail("*", e))?;
    let commit = resolve_commit(&client, repo, &endpoint, &t)?;
    let root = repo_dir.join("snapshots").join(&commit);
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        on_file(file);
        let local = root.join(file);
        // Already in the cache and still right: no download.
        if let Ok(f) = checked(&local, file, pin(file)) {
            out.push(f);
            continue;
        }
        let url = repo.url(&endpoint, &commit, file);
        let staging = staging_dir(&repo_dir).map_err(|e| fail(file, e))?;
        let result = download(&client, repo, &commit, file, &staging, &url, &t)
            .and_then(|got| checked(&got, file, pin(file)).map_err(|e| format!("{e} (from {url}); nothing was kept")))
            .and_then(|f| place(&repo_dir, &commit, &repo.revision, &f).map_err(|e| format!("{e}")));
        let _ = std::fs::remove_dir_all(&staging);
        out.push(result.map_err(|e| fail(file, e))?);
    }
    Ok((root, out))
}

/// A fresh private folder for one download, inside the repository's cache folder.
fn staging_dir(repo_dir: &Path) -> std::result::Result<PathBuf, String> {
    std::fs::create_dir_all(repo_dir).map_err(|e| format!("creating {}: {e}", repo_dir.display()))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for n in 0..100u32 {
        let dir = repo_dir.join(format!(".tgrag-staging-{}-{nanos}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("creating {}: {e}", dir.display())),
        }
    }
    Err(format!("no fresh staging folder could be made in {}", repo_dir.display()))
}

/// One file with hf-hub into `staging` (hf-hub names the file `staging/<file>`; no header becomes
/// a path), within the bounds.
fn download(
    client: &HFClientSync,
    repo: &HubRepo,
    commit: &str,
    file: &str,
    staging: &Path,
    url: &str,
    t: &Timeouts,
) -> std::result::Result<PathBuf, String> {
    let (c, kind, owner, name) = (client.clone(), repo.kind, repo.owner, repo.name);
    let (f, dir, rev) = (file.to_string(), staging.to_path_buf(), commit.to_string());
    let got = bounded(url, t, Some(staging.join(file)), move || match kind {
        "model" => c.model(owner, name).download_file().filename(f).local_dir(dir).revision(rev).send(),
        _ => c.dataset(owner, name).download_file().filename(f).local_dir(dir).revision(rev).send(),
    })?
    .map_err(|e| format!("{url}: {e}"))?;
    if got != staging.join(file) {
        return Err(format!("hf-hub wrote {} instead of {}", got.display(), staging.join(file).display()));
    }
    Ok(got)
}

/// The checks a file must pass before it is used or kept: a regular file, its sha256 the pin
/// when there is one, a `.zip` a readable zip archive.
fn checked(local: &Path, file: &str, pin: Option<&str>) -> std::result::Result<Fetched, String> {
    let meta = std::fs::metadata(local).map_err(|e| format!("{}: {e}", local.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", local.display()));
    }
    let sha256 = sha256_file(local).map_err(|e| e.to_string())?;
    if let Some(want) = pin
        && want != sha256
    {
        return Err(format!("sha256 {sha256} differs from the pinned {want} ({} bytes)", meta.len()));
    }
    if file.ends_with(".zip") {
        let opened = std::fs::File::open(local).map_err(|e| format!("{}: {e}", local.display()))?;
        zip::ZipArchive::new(opened).map_err(|e| format!("not a readable zip archive ({} bytes: {e})", meta.len()))?;
    }
    Ok(Fetched { file: file.to_string(), local: local.to_path_buf(), sha256, bytes: meta.len() })
}

/// Moves a checked download into hf-hub's cache layout: `blobs/<sha256>`, the snapshot link
/// `snapshots/<commit>/<file>` → the blob, and `refs/<revision>` = the commit (a branch name only).
fn place(repo_dir: &Path, commit: &str, revision: &str, f: &Fetched) -> Result<Fetched> {
    let blobs = repo_dir.join("blobs");
    std::fs::create_dir_all(&blobs).map_err(|e| DatasetError::io(&blobs, e))?;
    let blob = blobs.join(&f.sha256);
    std::fs::rename(&f.local, &blob).map_err(|e| DatasetError::io(&blob, e))?;
    let link = repo_dir.join("snapshots").join(commit).join(&f.file);
    let parent = link.parent().ok_or_else(|| DatasetError::Config(format!("no folder for {}", link.display())))?;
    std::fs::create_dir_all(parent).map_err(|e| DatasetError::io(parent, e))?;
    // Relative, as hf-hub makes it: up from `snapshots/<commit>/<dirs of file>` to the repo folder.
    let ups = "../".repeat(f.file.split('/').count() + 1);
    let target = PathBuf::from(format!("{ups}blobs/{}", f.sha256));
    let tmp =
        parent.join(format!(".{}.tgrag-link-{}", link.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&target, &tmp).map_err(|e| DatasetError::io(&tmp, e))?;
    std::fs::rename(&tmp, &link).map_err(|e| DatasetError::io(&link, e))?;
    if valid_commit(revision).is_none() && !revision.is_empty() && !revision.contains(['/', '\\', '\0']) && revision != ".." {
        let refs = repo_dir.join("refs");
        std::fs::create_dir_all(&refs).map_err(|e| DatasetError::io(&refs, e))?;
        tgrag_schemas::io::write_bytes_atomic(&refs.join(revision), commit.as_bytes())?;
    }
    Ok(Fetched { local: link, ..f.clone() })
}

/// `…/snapshots/<commit>/<file>` → `…/snapshots/<commit>`.
fn snapshot_root(local: &Path, file: &str) -> Option<PathBuf> {
    let depth = file.split('/').count();
    let mut p = local.to_path_buf();
    for _ in 0..depth {
        p = p.parent()?.to_path_buf();
    }
    Some(p)
}

/// The commit the snapshot folder is named after (what the hub resolved the revision to).
pub fn snapshot_commit(root: &Path) -> Option<String> {
    root.file_name().map(|s| s.to_string_lossy().into_owned())
}

/// sha256 of a file, hex (the same routine that hashes every pipeline artifact).
pub fn sha256_file(path: &Path) -> Result<String> {
    Ok(tgrag_schemas::io::sha256_file(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_reads_the_hubs_lfs_oid_as_the_pin() {
        // The shape of `GET /api/datasets/<id>/tree/<commit>/data?recursive=true` on the hub.
        let sha = "A3".repeat(32);
        let json: serde_json::Value = serde_json::from_str(&format!(
            r#"[{{"type":"file","oid":"4f1c0e7","size":1048,"path":"data/train-00000-of-00002.parquet",
                 "lfs":{{"oid":"{sha}","size":1048,"pointerSize":134}}}},
               {{"type":"file","oid":"9b2","size":12,"path":"README.md"}},
               {{"type":"directory","oid":"77","size":0,"path":"data/sub"}},
               {{"type":"file","oid":"1","size":5,"path":"x.bin","lfs":{{"sha256":"{}"}}}},
               {{"type":"file","oid":"2","size":5,"path":"y.bin","lfs":{{"oid":"not-a-sha"}}}}]"#,
            "0f".repeat(32)
        ))
        .expect("json");
        let got: Vec<Listed> = json.as_array().expect("list").iter().filter_map(listed).collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0].path, "data/train-00000-of-00002.parquet");
        assert_eq!((got[0].size, got[0].sha256.as_deref()), (1048, Some(sha.to_ascii_lowercase().as_str())));
        assert_eq!(got[1].sha256, None, "a plain git file has no pin");
        assert_eq!(got[2].sha256.as_deref(), Some("0f".repeat(32).as_str()));
        assert_eq!(got[3].sha256, None, "anything but 64 hex digits is no pin");
    }

    #[test]
    fn commits_are_40_hex_digits_never_paths() {
        assert_eq!(valid_commit("0123456789ABCDEF0123456789abcdef01234567").as_deref(), Some("0123456789abcdef0123456789abcdef01234567"));
        for bad in ["../../x", "", "0123456789abcdef0123456789abcdef0123456", "0123456789abcdef0123456789abcdef0123456g", "/etc/passwd"] {
            assert_eq!(valid_commit(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_twelve_byte_zip_and_a_wrong_pin_are_refused() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let d = tempfile::tempdir()?;
        let p = d.path().join("f.zip");
        std::fs::write(&p, b"PK\x03\x04 not zip")?;
        let e = checked(&p, "skb/mag/processed.zip", None).err().ok_or("a 12-byte zip was accepted")?;
        assert!(e.contains("not a readable zip archive"), "{e}");
        let e = checked(&p, "model.safetensors", Some("00")).err().ok_or("a wrong pin was accepted")?;
        assert!(e.contains("differs from the pinned 00"), "{e}");
        Ok(())
    }
}
