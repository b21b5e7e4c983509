//! `tgrag fetch <dataset>` and `tgrag fetch <hub model id>` (issue 31 item 1) against a mirror on
//! 127.0.0.1 (std::net only) that speaks the hub protocol (revision and tree APIs, `resolve`) and
//! serves official URLs under `/<host>/<path>` (`TGRAG_DATA_MIRROR`), with `Range` support. Small
//! generated samples of each format: the fetched dataset loads (`tgrag run --stages ingest`), and
//! the failure cases (a wrong checksum, a truncated body, an interrupted download resumed) give a
//! clear error and leave no partial dataset folder.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Honest,
    /// The tree listing gives every file an LFS sha256 that is not its bytes.
    WrongLfsPin,
    /// The first GET of each plain-HTTP file sends half its body (with the full Content-Length)
    /// and closes the connection; later requests are honest (and honour `Range`).
    CutFirst,
}

struct Mirror {
    endpoint: String,
    stop: Arc<AtomicBool>,
    /// Every request line with its Range header.
    log: Arc<Mutex<Vec<String>>>,
    mode: Arc<Mutex<Mode>>,
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Files by repository path (`resolve`) or by `<host>/<path>` (plain URLs).
type Files = BTreeMap<String, Vec<u8>>;

fn mirror(files: Files, mode: Mode) -> Mirror {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mode = Arc::new(Mutex::new(mode));
    let cuts = AtomicUsize::new(0);
    let (log2, mode2) = (log.clone(), mode.clone());
    let (endpoint, stop) = serve_local(move |stream, _, _| serve(stream, &files, &log2, &mode2, &cuts));
    Mirror { endpoint, stop, log, mode }
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

fn serve(stream: TcpStream, files: &Files, log: &Mutex<Vec<String>>, mode: &Mutex<Mode>, cuts: &AtomicUsize) {
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
        let mut range: Option<u64> = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("range:") {
                range = v.trim().strip_prefix("bytes=").and_then(|r| r.trim_end_matches('-').parse().ok());
            }
        }
        let mode = *mode.lock().expect("mode");
        log.lock().expect("log").push(format!("{} range={range:?}", request.trim()));
        let mut parts = request.split_whitespace();
        let (method, full) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = full.split('?').next().unwrap_or("");
        let json = |body: String| {
            let b = if method == "GET" { body.clone() } else { String::new() };
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/json\r\n\r\n{b}", body.len()).into_bytes()
        };
        let resp: Vec<u8> = if path.starts_with("/api/") && path.contains("/revision/") {
            json(format!("{{\"id\":\"x/y\",\"sha\":\"{COMMIT}\"}}"))
        } else if let Some((_, rest)) = path.split_once(&format!("/tree/{COMMIT}")) {
            let under = rest.trim_start_matches('/');
            let entries: Vec<String> = files
                .iter()
                .filter(|(p, _)| !p.contains(".com/") && !p.contains(".edu/") && (under.is_empty() || p.starts_with(&format!("{under}/"))))
                .map(|(p, b)| {
                    let sha = if mode == Mode::WrongLfsPin { "0".repeat(64) } else { sha256_hex(b) };
                    format!(
                        "{{\"type\":\"file\",\"oid\":\"x\",\"size\":{},\"path\":\"{p}\",\"lfs\":{{\"sha256\":\"{sha}\",\"size\":{}}}}}",
                        b.len(),
                        b.len()
                    )
                })
                .collect();
            json(format!("[{}]", entries.join(",")))
        } else if let Some((_, r)) = path.split_once("/resolve/") {
            let file = r.split_once('/').map(|(_, f)| f.to_string()).unwrap_or_default();
            match files.get(&file) {
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nX-Error-Code: EntryNotFound\r\n\r\n".to_vec(),
                Some(b) => {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"{}\"\r\nX-Repo-Commit: {COMMIT}\r\n\r\n",
                        b.len(),
                        &sha256_hex(b)[..16]
                    );
                    let mut r = head.into_bytes();
                    if method == "GET" {
                        r.extend_from_slice(b);
                    }
                    r
                }
            }
        } else {
            match files.get(path.trim_start_matches('/')) {
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                Some(b) => {
                    if mode == Mode::CutFirst && method == "GET" && range.is_none() && cuts.fetch_add(1, Ordering::SeqCst) == 0 {
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", b.len());
                        let _ = out.write_all(head.as_bytes());
                        let _ = out.write_all(&b[..b.len() / 2]);
                        let _ = out.flush();
                        return;
                    }
                    match range {
                        Some(from) if (from as usize) < b.len() => {
                            let body = &b[from as usize..];
                            let mut r = format!(
                                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {from}-{}/{}\r\n\r\n",
                                body.len(),
                                b.len() - 1,
                                b.len()
                            )
                            .into_bytes();
                            r.extend_from_slice(body);
                            r
                        }
                        _ => {
                            let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", b.len()).into_bytes();
                            r.extend_from_slice(b);
                            r
                        }
                    }
                }
            }
        };
        if out.write_all(&resp).is_err() {
            return;
        }
    }
}

/// One RoG-layout Parquet file: `id, question, answer: list<str>, graph: list<list<str>>`.
fn rog_parquet(split: &str, n: usize) -> Vec<u8> {
    use arrow::array::{ListBuilder, StringBuilder};
    let (mut ids, mut qs) = (StringBuilder::new(), StringBuilder::new());
    let mut answers = ListBuilder::new(StringBuilder::new());
    let mut graphs = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
    for i in 0..n {
        ids.append_value(format!("WebQTrn-{split}-{i}"));
        qs.append_value(format!("what language is spoken in country {i}"));
        answers.values().append_value(format!("Language {i}"));
        answers.append(true);
        for (h, r, t) in [
            (format!("Country {i}"), "location.country.languages_spoken", format!("Language {i}")),
            (format!("Country {i}"), "location.location.containedby", "Earth".to_string()),
        ] {
            let triple = graphs.values();
            triple.values().append_value(h);
            triple.values().append_value(r);
            triple.values().append_value(t);
            triple.append(true);
        }
        graphs.append(true);
    }
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(ids.finish()) as ArrayRef),
        ("question", Arc::new(qs.finish()) as ArrayRef),
        ("answer", Arc::new(answers.finish()) as ArrayRef),
        ("graph", Arc::new(graphs.finish()) as ArrayRef),
    ])
    .expect("batch");
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    buf
}

fn webqsp_files() -> Files {
    let mut f = Files::new();
    for (s, n) in [("train", 6), ("validation", 2), ("test", 2)] {
        f.insert(format!("data/{s}-00000-of-00001.parquet"), rog_parquet(s, n));
    }
    f.insert("README.md".into(), b"# RoG-webqsp sample".to_vec());
    f
}

const EXPLA: &str = "raw.githubusercontent.com/swarnaHub/ExplaGraphs/main/data";

fn explagraphs_files() -> Files {
    let row = |i: usize, label: &str| {
        format!(
            "belief {i} is right.\targument {i} says so.\t{label}\t(belief {i}; capable of; being right)(argument {i}; causes; belief {i})\n"
        )
    };
    let train: String = (0..20).map(|i| row(i, if i % 2 == 0 { "support" } else { "counter" })).collect();
    let dev: String = (20..26).map(|i| row(i, if i % 2 == 0 { "support" } else { "counter" })).collect();
    let mut f = Files::new();
    f.insert(format!("{EXPLA}/train.tsv"), train.into_bytes());
    f.insert(format!("{EXPLA}/dev.tsv"), dev.into_bytes());
    f
}

struct Case {
    _root: tempfile::TempDir,
    home: PathBuf,
    data: PathBuf,
    outputs: PathBuf,
}

fn case() -> Case {
    let root = tempfile::tempdir().expect("tempdir");
    let (home, data, outputs) = (root.path().join("hf"), root.path().join("data"), root.path().join("outputs"));
    Case { _root: root, home, data, outputs }
}

/// `tgrag <args>` with the case's hub cache, data root and the mirror.
fn tgrag_at(c: &Case, endpoint: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tgrag"));
    cmd.arg("--outputs").arg(&c.outputs).arg("--quiet").args(args);
    cmd.env("HF_ENDPOINT", endpoint).env("HF_HOME", &c.home).env("HF_HUB_OFFLINE", "0").env_remove("HF_HUB_CACHE").env_remove("HF_TOKEN");
    cmd.env("TGRAG_DATA_ROOT", &c.data).env("TGRAG_DATA_MIRROR", endpoint).env("TGRAG_HUB_TIMEOUT", "10");
    cmd.current_dir(c.outputs.parent().expect("root"));
    cmd.output().expect("spawn tgrag")
}

/// Nothing but finished dataset folders under the data root: no staging folder, no `.part` file
/// outside `.tgrag-downloads`, and `folder` absent unless `present`.
fn no_partial(c: &Case, folder: &str, present: bool) {
    for e in std::fs::read_dir(&c.data).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        assert!(!n.contains("tgrag-fetch"), "staging folder left: {n}");
    }
    assert_eq!(c.data.join(folder).exists(), present, "{folder} present: {}", c.data.join(folder).exists());
}

#[test]
fn fetch_webqsp_from_the_hub_then_it_loads_and_a_wrong_pin_keeps_nothing() {
    let c = case();
    // A missing dataset names the fetch command.
    let r = tgrag_at(&c, "http://127.0.0.1:9", &["run", "--dataset", "webqsp", "--stages", "ingest"]);
    let err = super::hostile::failed_cleanly(&r, &["tgrag fetch webqsp"]);
    assert!(err.contains("webqsp"), "{err}");

    // The listing's LFS sha256 is not the bytes: refused, nothing kept.
    let m = mirror(webqsp_files(), Mode::WrongLfsPin);
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "webqsp"]);
    super::hostile::failed_cleanly(&o, &["data/", "differs from the pinned", "nothing was kept"]);
    no_partial(&c, "webqsp", false);

    // Honest: every split's file, the commit printed, and the dataset loads.
    *m.mode.lock().expect("mode") = Mode::Honest;
    let out = ok(tgrag_at(&c, &m.endpoint, &["fetch", "webqsp"]));
    assert!(out.contains(&format!("commit {COMMIT}")) && out.contains("data/train-00000-of-00001.parquet"), "{out}");
    assert!(!out.contains("README.md"), "{out}");
    no_partial(&c, "webqsp", true);
    let log = m.log.lock().expect("log").join("\n");
    assert!(log.contains("/api/datasets/rmanluo/RoG-webqsp/tree/"), "{log}");
    let run = ok(tgrag_at(&c, &m.endpoint, &["run", "--dataset", "webqsp", "--stages", "ingest"]));
    assert!(c.outputs.join("webqsp/ingest/qa.parquet").is_file(), "{run}");
    // A second fetch finds it there.
    let again = ok(tgrag_at(&c, &m.endpoint, &["fetch", "webqsp"]));
    assert!(again.contains("already in"), "{again}");
}

#[test]
fn fetch_explagraphs_over_http_resumes_a_cut_download() {
    let c = case();
    let m = mirror(explagraphs_files(), Mode::CutFirst);
    // The first body ends half way: a clear error, the part kept for resuming, no dataset folder.
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "explagraphs"]);
    super::hostile::failed_cleanly(&o, &["train.tsv", "run the same command again to resume"]);
    no_partial(&c, "explagraphs", false);
    let parts: Vec<_> =
        std::fs::read_dir(c.data.join(".tgrag-downloads/explagraphs")).expect("downloads").flatten().map(|e| e.file_name()).collect();
    assert_eq!(parts.len(), 1, "{parts:?}");

    // Run again: the download resumes with a Range request and the dataset loads.
    let out = ok(tgrag_at(&c, &m.endpoint, &["fetch", "explagraphs"]));
    assert!(out.contains("resumed from byte"), "{out}");
    let log = m.log.lock().expect("log").join("\n");
    assert!(log.contains("train.tsv HTTP/1.1 range=Some("), "{log}");
    no_partial(&c, "explagraphs", true);
    assert!(!c.data.join(".tgrag-downloads").exists(), "downloads folder left");
    let want = sha256_hex(&explagraphs_files()[&format!("{EXPLA}/train.tsv")]);
    assert!(out.contains(&want), "the sha256 of the bytes is printed: {out}");
    let run = ok(tgrag_at(&c, &m.endpoint, &["run", "--dataset", "explagraphs", "--stages", "ingest"]));
    assert!(c.outputs.join("explagraphs/ingest/qa.parquet").is_file(), "{run}");
}

#[test]
fn fetch_a_hub_model_id_into_weights() {
    let c = case();
    let mut files = Files::new();
    for f in ["config.json", "tokenizer.json", "model.safetensors", "modules.json", "1_Pooling/config.json"] {
        files.insert(f.to_string(), format!("{{\"file\": \"{f}\"}}").into_bytes());
    }
    let m = mirror(files.clone(), Mode::Honest);
    let dest = c.data.join("mpnet");
    let out = ok(tgrag_at(&c, &m.endpoint, &["fetch", "sentence-transformers/all-mpnet-base-v2", "--dest", dest.to_str().expect("utf-8")]));
    assert!(out.contains(&format!("commit {COMMIT}")), "{out}");
    for f in files.keys() {
        assert_eq!(std::fs::read(dest.join(f)).ok().as_ref(), files.get(f), "{f}");
    }
    // A repository without safetensors weights is refused; an id that is a path is refused.
    files.remove("model.safetensors");
    let m = mirror(files, Mode::Honest);
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "someone/bin-only", "--dest", c.data.join("bin").to_str().expect("utf-8")]);
    super::hostile::failed_cleanly(&o, &["model.safetensors"]);
    assert!(!c.data.join("bin").exists());
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "../etc"]);
    super::hostile::failed_cleanly(&o, &["not a hub model id"]);
}
