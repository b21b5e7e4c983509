//! Hostile input: hub. A mirror on 127.0.0.1 (std::net
//! only) that answers `tgrag fetch` with path-like `ETag` / `X-Repo-Commit` headers and commits,
//! a 12-byte "zip", a body that does not match its pin, silence, a byte a second, and a redirect
//! to an absolute URL. Every case: a clear error (or, for headers tgrag never uses, a checked
//! download), nothing written outside `HF_HOME` / `--dest`, no partial file, and an honest mirror
//! run afterwards still works.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// A valid, empty zip archive (just the end-of-central-directory record).
const EMPTY_ZIP: &[u8] = b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";

/// How the mirror misbehaves.
#[derive(Clone, Debug)]
enum Mode {
    Honest,
    /// Every file's `ETag` (and `X-Linked-Etag`).
    Etag(String),
    /// Every file's `X-Repo-Commit`.
    CommitHeader(String),
    /// The commit the repository API names for the revision.
    InfoCommit(String),
    /// `skb/mag/processed.zip` is 12 bytes.
    ShortZip,
    /// `model.safetensors` is some other bytes.
    WrongBody,
    /// Accepts connections and never answers.
    Silent,
    /// Answers with one byte a second.
    Trickle,
    /// Every resolve URL answers 302 with an absolute `Location` (to `/moved/…` on this server).
    Redirect,
}

/// The STaRK MAG files `fetch stark-mag` asks for, small but well-formed.
fn stark_files() -> BTreeMap<String, Vec<u8>> {
    let mut f = BTreeMap::new();
    f.insert("skb/mag/processed.zip".to_string(), EMPTY_ZIP.to_vec());
    for name in ["skb/mag/schema/mag.json", "skb/mag/schema/reduced_mag.json"] {
        f.insert(name.to_string(), b"{}".to_vec());
    }
    for name in ["qa/mag/stark_qa/stark_qa.csv", "qa/mag/stark_qa/stark_qa_human_generated_eval.csv"] {
        f.insert(name.to_string(), b"id,query,answer_ids\n".to_vec());
    }
    for s in ["train", "val", "test", "test-0.1"] {
        f.insert(format!("qa/mag/split/{s}.index"), b"0\n".to_vec());
    }
    f
}

fn minilm_files() -> BTreeMap<String, Vec<u8>> {
    ["model.safetensors", "tokenizer.json", "config.json"].iter().map(|n| (n.to_string(), b"{\"not\": \"the model\"}".to_vec())).collect()
}

/// A mirror on 127.0.0.1 serving `files` under any repository and revision. It stops by itself
/// when dropped (or after 120 s), every connection after at most 200 requests or 60 s.
struct Mirror {
    endpoint: String,
    stop: Arc<AtomicBool>,
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn mirror(files: BTreeMap<String, Vec<u8>>, mode: Mode) -> Mirror {
    let (endpoint, stop) = serve_local(move |stream, base, stop| serve(stream, &files, &mode, base, stop));
    Mirror { endpoint, stop }
}

fn serve(stream: TcpStream, files: &BTreeMap<String, Vec<u8>>, mode: &Mode, base: &str, stop: &AtomicBool) {
    let start = Instant::now();
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut out = stream;
    for _ in 0..200 {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        let mut body_len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                body_len = v.trim().parse().unwrap_or(0);
            }
        }
        if body_len > 0 {
            let mut skip = vec![0u8; body_len.min(1 << 20)];
            let _ = std::io::Read::read_exact(&mut reader, &mut skip);
        }
        if let Mode::Silent = mode {
            // Accepts, reads the request, never answers (until the test is over, at most 60 s).
            while !stop.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(50));
            }
            return;
        }
        let mut parts = request.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or("").split('?').next().unwrap_or(""));
        let info_sha = match mode {
            Mode::InfoCommit(c) => c.as_str(),
            _ => COMMIT,
        };
        let resp: Vec<u8> = if path.starts_with("/api/") {
            let info = format!("{{\"id\":\"x/y\",\"sha\":\"{info_sha}\"}}");
            let body = if method == "GET" { info.as_str() } else { "" };
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/json\r\n\r\n{body}", info.len()).into_bytes()
        } else if matches!(mode, Mode::Redirect) && !path.starts_with("/moved/") {
            format!("HTTP/1.1 302 Found\r\nLocation: {base}/moved{path}\r\nContent-Length: 0\r\nX-Repo-Commit: {COMMIT}\r\n\r\n")
                .into_bytes()
        } else {
            let file = path.split_once("/resolve/").and_then(|(_, r)| r.split_once('/')).map(|(_, f)| f.to_string());
            match file.as_ref().and_then(|f| files.get(f).map(|b| (f, b))) {
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nX-Error-Code: EntryNotFound\r\n\r\n".to_vec(),
                Some((name, b)) => {
                    let mut b = b.clone();
                    if matches!(mode, Mode::ShortZip) && name.ends_with(".zip") {
                        b = b"PK\x03\x04 not zip".to_vec();
                    }
                    if matches!(mode, Mode::WrongBody) && name == "model.safetensors" {
                        b = b"a tampered model body".to_vec();
                    }
                    let etag = match mode {
                        Mode::Etag(e) => e.clone(),
                        _ => format!("\"{:x}\"", b.len() * 7919 + name.len()),
                    };
                    let commit = match mode {
                        Mode::CommitHeader(c) => c.as_str(),
                        _ => COMMIT,
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: {etag}\r\nX-Linked-Etag: {etag}\r\nX-Repo-Commit: {commit}\r\n\r\n",
                        b.len()
                    );
                    if method != "GET" {
                        head.into_bytes()
                    } else if matches!(mode, Mode::Trickle) {
                        if out.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        for byte in b.iter().take(60) {
                            if stop.load(Ordering::SeqCst) || out.write_all(&[*byte]).is_err() {
                                return;
                            }
                            std::thread::sleep(Duration::from_secs(1));
                        }
                        continue;
                    } else {
                        let mut r = head.into_bytes();
                        r.extend_from_slice(&b);
                        r
                    }
                }
            }
        };
        if out.write_all(&resp).is_err() {
            return;
        }
    }
}

/// The folders of one case: `home` (HF_HOME), `dest` (minilm's --dest), `outside` with a canary.
struct Case {
    _root: tempfile::TempDir,
    home: PathBuf,
    dest: PathBuf,
    outside: PathBuf,
    outputs: PathBuf,
}

fn case() -> Case {
    let root = tempfile::tempdir().expect("tempdir");
    let (home, dest, outside, outputs) =
        (root.path().join("hf"), root.path().join("dest"), root.path().join("outside"), root.path().join("outputs"));
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("canary"), b"canary").expect("canary");
    Case { _root: root, home, dest, outside, outputs }
}

/// `tgrag fetch <what>` against `endpoint`, with the hub timeouts in `env`.
fn fetch(c: &Case, endpoint: &str, what: &str, env: &[(&str, &str)]) -> (Output, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tgrag"));
    cmd.arg("--outputs").arg(&c.outputs).arg("--quiet").args(["fetch", what]);
    if what == "minilm" {
        cmd.arg("--dest").arg(&c.dest);
    }
    cmd.env("HF_ENDPOINT", endpoint).env("HF_HOME", &c.home).env("HF_HUB_OFFLINE", "0").env_remove("HF_HUB_CACHE").env_remove("HF_TOKEN");
    cmd.env_remove("TGRAG_STARK_REVISION");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = cmd.output().expect("spawn tgrag");
    (out, start.elapsed())
}

/// Nothing outside the case's folders changed, and nothing where `planted` points.
fn contained(c: &Case, planted: &[PathBuf]) {
    assert_eq!(std::fs::read(c.outside.join("canary")).ok().as_deref(), Some(&b"canary"[..]), "the canary changed");
    let names: Vec<_> = std::fs::read_dir(&c.outside).expect("outside").flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 1, "files appeared next to the canary: {names:?}");
    for p in planted {
        assert!(std::fs::symlink_metadata(p).is_err(), "{} was written (a header became a path)", p.display());
    }
    // No staging folder or partial download left in the cache, no partial file in --dest.
    let mut stack = vec![c.home.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(!n.starts_with(".tgrag-staging") && !n.ends_with(".incomplete"), "left in the cache: {}", e.path().display());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    let in_dest: Vec<_> = std::fs::read_dir(&c.dest).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
    assert!(in_dest.is_empty(), "partial model in --dest: {in_dest:?}");
}

fn refused_hub(o: &Output, took: Duration, bound: Duration, must: &[&str]) {
    let err = super::hostile::failed_cleanly(o, must);
    assert!(took < bound, "took {took:?}, bound {bound:?}: {err}");
    assert!(!err.contains("missing ETag"), "{err}");
}

/// After a hostile run, the honest mirror still works with the same cache.
fn honest_after(c: &Case) {
    let m = mirror(stark_files(), Mode::Honest);
    let (o, _) = fetch(c, &m.endpoint, "stark-mag", &[]);
    let out = ok(o);
    assert!(out.contains(&format!("commit {COMMIT}")), "{out}");
    contained(c, &[]);
}

/// Where a path-like header would land from hf-hub's `blobs/` or `snapshots/` folder.
fn escape_to(target: &Path) -> String {
    format!("{}{}", "../".repeat(16), target.display().to_string().trim_start_matches('/'))
}

#[test]
fn hub_path_like_etags_and_commits_never_become_paths() {
    for what in ["minilm", "stark-mag"] {
        // ETag `"../../…/<outside>/pwned"`: hf-hub 1.0.0 wrote the body there before any check.
        let c = case();
        let planted = c.outside.join("pwned");
        let files = if what == "minilm" { minilm_files() } else { stark_files() };
        let m = mirror(files.clone(), Mode::Etag(format!("\"{}\"", escape_to(&planted))));
        let (o, _) = fetch(&c, &m.endpoint, what, &[]);
        if what == "minilm" {
            // The body is not the pinned model: refused, and nothing was kept anywhere.
            refused_hub(&o, Duration::ZERO, Duration::from_secs(60), &["model.safetensors", "differs from the pinned"]);
        } else {
            // The ETag is never used as a name: the checked files are kept by their sha256.
            let out = ok(o);
            assert!(out.contains("skb/mag/processed.zip"), "{out}");
        }
        contained(&c, &[planted.clone(), planted.with_extension("incomplete"), planted.with_extension("lock")]);
        honest_after(&c);

        // X-Repo-Commit `../../x`-style and non-hex: never a folder name either.
        for commit in [escape_to(&c.outside.join("snap")), "zzzz-not-a-commit".to_string()] {
            let c = case();
            let planted = c.outside.join("snap");
            let m = mirror(files.clone(), Mode::CommitHeader(commit));
            let (o, _) = fetch(&c, &m.endpoint, what, &[]);
            if what == "minilm" {
                refused_hub(&o, Duration::ZERO, Duration::from_secs(60), &["differs from the pinned"]);
            } else {
                let out = ok(o);
                assert!(out.contains(&format!("commit {COMMIT}")), "{out}");
            }
            contained(&c, &[planted]);
        }
    }
}

#[test]
fn hub_a_commit_that_is_not_40_hex_digits_is_refused() {
    for sha in ["../../x", "0123456789abcdef0123456789abcdef0123456z"] {
        let c = case();
        let m = mirror(stark_files(), Mode::InfoCommit(sha.to_string()));
        let (o, took) = fetch(&c, &m.endpoint, "stark-mag", &[]);
        refused_hub(&o, took, Duration::from_secs(60), &["not 40 hex digits", "/api/datasets/snap-stanford/stark/revision/main", sha]);
        contained(&c, &[c.home.join("x")]);
        honest_after(&c);
    }
}

#[test]
fn hub_a_12_byte_zip_or_a_body_off_its_pin_is_not_kept() {
    let c = case();
    let m = mirror(stark_files(), Mode::ShortZip);
    let (o, took) = fetch(&c, &m.endpoint, "stark-mag", &[]);
    refused_hub(&o, took, Duration::from_secs(60), &["skb/mag/processed.zip", "not a readable zip archive (12 bytes", "nothing was kept"]);
    contained(&c, &[]);
    honest_after(&c);

    let c = case();
    let m = mirror(minilm_files(), Mode::WrongBody);
    let (o, took) = fetch(&c, &m.endpoint, "minilm", &[]);
    refused_hub(&o, took, Duration::from_secs(60), &["model.safetensors", "differs from the pinned", "nothing was kept"]);
    contained(&c, &[]);
    assert!(!c.dest.exists(), "--dest made for a refused model");
    honest_after(&c);
}

#[test]
fn hub_silence_and_a_byte_a_second_fail_within_their_bounds() {
    // A server that accepts and never answers: the stall bound (2 s) ends it.
    let c = case();
    let m = mirror(stark_files(), Mode::Silent);
    let (o, took) = fetch(&c, &m.endpoint, "stark-mag", &[("TGRAG_HUB_TIMEOUT", "2")]);
    refused_hub(&o, took, Duration::from_secs(20), &["no data from", &m.endpoint, "for 2 s (TGRAG_HUB_TIMEOUT)"]);
    drop(m);
    contained(&c, &[]);
    honest_after(&c);

    // A byte a second never stalls: the total bound (4 s) ends it.
    let c = case();
    let m = mirror(stark_files(), Mode::Trickle);
    let (o, took) = fetch(&c, &m.endpoint, "stark-mag", &[("TGRAG_HUB_TIMEOUT", "3"), ("TGRAG_HUB_TOTAL_TIMEOUT", "4")]);
    refused_hub(&o, took, Duration::from_secs(25), &["skb/mag/processed.zip", "did not complete within 4 s (TGRAG_HUB_TOTAL_TIMEOUT)"]);
    drop(m);
    contained(&c, &[]);
    honest_after(&c);

    // Nobody listening: the connect check says so at once.
    let c = case();
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let (o, took) = fetch(&c, &format!("http://{closed}"), "stark-mag", &[]);
    refused_hub(&o, took, Duration::from_secs(20), &["cannot connect to", &closed.to_string()]);

    // A timeout that is not a number of seconds is a configuration error.
    let (o, took) = fetch(&c, "http://127.0.0.1:9", "stark-mag", &[("TGRAG_HUB_TIMEOUT", "soon")]);
    refused_hub(&o, took, Duration::from_secs(20), &["TGRAG_HUB_TIMEOUT", "seconds"]);
}

#[test]
fn hub_a_redirect_to_an_absolute_url_is_followed() {
    let c = case();
    let m = mirror(stark_files(), Mode::Redirect);
    let (o, _) = fetch(&c, &m.endpoint, "stark-mag", &[]);
    let err = stderr(&o);
    assert!(!err.contains("missing ETag"), "{err}");
    let out = ok(o);
    assert!(out.contains("skb/mag/processed.zip") && out.contains(&format!("commit {COMMIT}")), "{out}");
    contained(&c, &[]);
}
