//! `tgrag fetch <dataset>` and `tgrag fetch <hub model id>` against a mirror on
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
    /// A `Range` request is answered 206 with the whole file and `Content-Range: bytes 0-…`.
    WrongRange,
    /// A `Range` request is answered 206 with a `Content-Length` near 2^64 (and a matching
    /// `Content-Range`), then a few bytes.
    HugeResume,
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
                        "{{\"type\":\"file\",\"oid\":\"x\",\"size\":{},\"path\":\"{p}\",\"lfs\":{{\"oid\":\"{sha}\",\"size\":{},\"pointerSize\":134}}}}",
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
                    match (mode, range) {
                        (Mode::WrongRange, Some(_)) => {
                            let head = format!(
                                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes 0-{}/{}\r\n\r\n",
                                b.len(),
                                b.len() - 1,
                                b.len()
                            );
                            let mut r = head.into_bytes();
                            r.extend_from_slice(b);
                            r
                        }
                        (Mode::HugeResume, Some(from)) => {
                            let head = format!(
                                "HTTP/1.1 206 Partial Content\r\nContent-Length: 18446744073709551000\r\nContent-Range: bytes {from}-18446744073709551614/18446744073709551615\r\n\r\n"
                            );
                            let _ = out.write_all(head.as_bytes());
                            let _ = out.write_all(&[0u8; 64]);
                            let _ = out.flush();
                            return;
                        }
                        (_, Some(from)) if (from as usize) < b.len() => {
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

/// The catalogue's URLs of `name`, as the mirror's keys (`<host>/<path>`).
fn remote_keys(name: &str) -> Vec<String> {
    match tgrag_datasets::sources::find(name).map(|d| d.origin) {
        Some(tgrag_datasets::sources::Origin::Http(remotes)) => {
            remotes.iter().map(|r| r.url.split_once("://").map_or(r.url, |(_, k)| k).to_string()).collect()
        }
        other => panic!("{name} is not a plain-HTTP entry: {other:?}"),
    }
}

/// The real ExplaGraphs files (the catalogue pins their sha256), from the shared data.
fn explagraphs_files() -> Option<Files> {
    let dir = super::shared_or_skip("datasets/explagraphs", "train.tsv")?;
    let keys = remote_keys("explagraphs");
    let mut f = Files::new();
    for (key, file) in keys.iter().zip(["train.tsv", "dev.tsv"]) {
        assert!(key.ends_with(file), "{key}");
        f.insert(key.clone(), std::fs::read(dir.join(file)).expect("read"));
    }
    Some(f)
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
    // Every stage a GraphQA dataset runs, on the fetched files (the hashing encoder: no model
    // in the case's folder), and the end-of-run GraphQA table.
    let run = ok(tgrag_at(&c, &m.endpoint, &["run", "--dataset", "webqsp", "--set", "textgraphs.encoder=hash"]));
    for stage in ["textgraphs", "subgraphs", "gretriever", "mixrag"] {
        assert!(run.lines().any(|l| l.split_whitespace().take(2).eq([stage, "ran"])), "{stage} did not run:\n{run}");
        assert!(c.outputs.join("webqsp").join(stage).is_dir(), "{stage}");
    }
    assert!(run.contains("webqsp hit@1") && run.contains("gretriever-gt") && run.contains("mixrag "), "{run}");
}

#[test]
fn fetch_explagraphs_over_http_resumes_a_cut_download() {
    let Some(files) = explagraphs_files() else { return };
    let c = case();
    let m = mirror(files.clone(), Mode::CutFirst);
    // The first body ends half way: a clear error, the part kept for resuming, no dataset folder.
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "explagraphs"]);
    super::hostile::failed_cleanly(&o, &["train.tsv", "run the same command again to resume"]);
    no_partial(&c, "explagraphs", false);
    let parts: Vec<_> = std::fs::read_dir(c.data.join(".tgrag-downloads/explagraphs"))
        .expect("downloads")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != ".lock")
        .collect();
    assert_eq!(parts.len(), 1, "{parts:?}");

    // Run again: the download resumes with a Range request, the bytes match the catalogue's pin,
    // and the dataset loads (G-Retriever's 2,766 rows of train + dev).
    let out = ok(tgrag_at(&c, &m.endpoint, &["fetch", "explagraphs"]));
    assert!(out.contains("resumed from byte"), "{out}");
    let log = m.log.lock().expect("log").join("\n");
    assert!(log.contains("train.tsv HTTP/1.1 range=Some("), "{log}");
    no_partial(&c, "explagraphs", true);
    assert!(!c.data.join(".tgrag-downloads").exists(), "downloads folder left");
    let key = &remote_keys("explagraphs")[0];
    assert!(out.contains(&sha256_hex(&files[key])), "the sha256 of the bytes is printed: {out}");
    let run = ok(tgrag_at(&c, &m.endpoint, &["run", "--dataset", "explagraphs", "--stages", "ingest"]));
    assert!(c.outputs.join("explagraphs/ingest/qa.parquet").is_file(), "{run}");
    let n = ok(tgrag_at(&c, &m.endpoint, &["sql", "SELECT count(*) AS n FROM explagraphs_ingest_qa"]));
    assert!(n.contains("| 2766 "), "{n}");

    // Bytes that are not the pinned ones (a changed upstream file): refused, nothing kept.
    let mut changed = files;
    changed.get_mut(key).expect("train").extend_from_slice(b"x\ty\tsupport\t(a; is a; b)\n");
    let c2 = case();
    let m2 = mirror(changed, Mode::Honest);
    let o = tgrag_at(&c2, &m2.endpoint, &["fetch", "explagraphs"]);
    super::hostile::failed_cleanly(&o, &["train.tsv", "differs from the pinned", "nothing was kept"]);
    no_partial(&c2, "explagraphs", false);
}

/// A zip archive of `(name, bytes)` entries.
fn zip_of(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    use std::io::Write as _;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (n, b) in entries {
        w.start_file(*n, zip::write::SimpleFileOptions::default()).expect("zip entry");
        w.write_all(b).expect("zip write");
    }
    w.finish().expect("zip").into_inner()
}

/// A `.tar.gz` of `(name, bytes)` regular files.
fn tgz_of(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (n, body) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, n, body.as_slice()).expect("tar entry");
    }
    b.into_inner().expect("tar").finish().expect("gzip")
}

fn gz(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).expect("gzip");
    e.finish().expect("gzip")
}

/// An OGB node-property zip (`<name>/raw/*.csv.gz`, `<name>/mapping/*.csv.gz`) of a 12-node ring
/// with chords, plus a README the catalogue's filter leaves out.
fn ogb_zip(name: &str, mapping: &str, key: &dyn Fn(usize) -> String) -> Vec<u8> {
    let n = 12;
    let edges: String = (0..n).flat_map(|i| [format!("{i},{}\n", (i + 1) % n), format!("{i},{}\n", (i + 5) % n)]).collect();
    let labels: String = (0..n).map(|i| format!("{}\n", i % 3)).collect();
    let years: String = (0..n).map(|i| format!("{}\n", 2010 + i % 5)).collect();
    let map: String = std::iter::once("node idx,id\n".to_string()).chain((0..n).map(|i| format!("{i},{}\n", key(i)))).collect();
    zip_of(&[
        (&format!("{name}/raw/edge.csv.gz"), gz(&edges)),
        (&format!("{name}/raw/node-label.csv.gz"), gz(&labels)),
        (&format!("{name}/raw/node_year.csv.gz"), gz(&years)),
        (&format!("{name}/mapping/{mapping}.csv.gz"), gz(&map)),
        (&format!("{name}/README.md"), b"OGB".to_vec()),
    ])
}

/// Small samples, in the official archive layouts, of every plain-HTTP dataset whose upstream is
/// not in the shared data: the archives the catalogue names, at its URLs.
fn official_samples(name: &str) -> Files {
    let keys = remote_keys(name);
    let bodies: Vec<Vec<u8>> = match name {
        "scenegraphs" => {
            let scene = |img: usize| {
                format!(
                    r#""{img}": {{"width": 500, "height": 333, "objects": {{
  "o{img}": {{"name": "man", "x": 10, "y": 20, "w": 30, "h": 40, "attributes": ["tall"], "relations": [{{"name": "left of", "object": "p{img}"}}]}},
  "p{img}": {{"name": "bench", "x": 1, "y": 0, "w": 3, "h": 4, "attributes": [], "relations": []}}}}}}"#
                )
            };
            let questions = |from: usize, to: usize| {
                let qs: Vec<String> = (from..to)
                    .map(|i| {
                        format!(r#""q{i}": {{"imageId": "{}", "question": "Who is left of the bench {i}?", "answer": "man"}}"#, 100 + i % 4)
                    })
                    .collect();
                format!("{{{}}}", qs.join(","))
            };
            vec![
                zip_of(&[
                    ("train_sceneGraphs.json", format!("{{{},{}}}", scene(100), scene(101)).into_bytes()),
                    ("val_sceneGraphs.json", format!("{{{},{}}}", scene(102), scene(103)).into_bytes()),
                ]),
                zip_of(&[
                    ("train_balanced_questions.json", questions(0, 8).into_bytes()),
                    ("val_balanced_questions.json", questions(8, 12).into_bytes()),
                    ("testdev_all_questions.json", b"{not kept".to_vec()),
                ]),
            ]
        }
        "arxiv" => {
            let titles: String = (0..12).map(|i| format!("{}\tPaper {i}\tAbout graphs, part {i}.\n", 9000 + i)).collect();
            vec![ogb_zip("arxiv", "nodeidx2paperid", &|i| (9000 + i).to_string()), gz(&format!("paper id\ttitle\tabstract\n{titles}"))]
        }
        "products" => vec![ogb_zip("products", "nodeidx2asin", &|i| format!("B00{i:05}"))],
        "cora" => {
            let content: String = (0..6).map(|i| format!("{}\t0\t1\t0\tTheory{}\n", 31 + i, i % 2)).collect();
            let cites: String = (0..6).map(|i| format!("{}\t{}\n", 31 + i, 31 + (i + 1) % 6)).collect();
            let papers: String = (0..6).map(|i| format!("{}\tpaper{i}.txt\tx\n", 31 + i)).collect();
            let mut mcc = vec![("cora/papers".to_string(), papers.into_bytes())];
            for i in 0..6 {
                mcc.push((
                    format!("cora/extractions/paper{i}.txt"),
                    format!("Title: Paper {i}\nAbstract: Learning, part {i}.\n").into_bytes(),
                ));
            }
            let mcc: Vec<(&str, Vec<u8>)> = mcc.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
            vec![tgz_of(&[("cora/cora.content", content.into_bytes()), ("cora/cora.cites", cites.into_bytes())]), tgz_of(&mcc)]
        }
        "enron" => {
            let people = ["allen-p", "lay-k", "skilling-j"];
            let mut files = Vec::new();
            for (i, p) in people.iter().enumerate() {
                for j in 0..3 {
                    let to = people[(i + j + 1) % 3];
                    let msg = format!(
                        "Message-ID: <{i}.{j}>\r\nDate: Mon, 14 May 2001 16:39:00 -0700 (PDT)\r\nFrom: {p}@enron.com\r\nTo: {to}@enron.com\r\nSubject: note {j}\r\n\r\nbody {i} {j}\r\n"
                    );
                    files.push((format!("maildir/{p}/sent/{}.", j + 1), msg.into_bytes()));
                }
            }
            let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
            vec![tgz_of(&files)]
        }
        other => panic!("no sample for {other}"),
    };
    assert_eq!(keys.len(), bodies.len(), "{name}: one sample per catalogue URL");
    keys.into_iter().zip(bodies).collect()
}

/// The real files of the datasets the shared data holds (the catalogue pins their sha256).
fn shared_files(name: &str, rel: &str) -> Option<Files> {
    let keys = remote_keys(name);
    let dir = super::shared_or_skip(rel, keys[0].rsplit('/').next().unwrap_or(""))?;
    Some(keys.into_iter().map(|k| (k.clone(), std::fs::read(dir.join(k.rsplit('/').next().unwrap_or(""))).expect("read"))).collect())
}

#[test]
fn fetch_every_plain_http_dataset_from_its_official_layout_then_it_ingests() {
    let mut cases: Vec<(&str, Files)> =
        ["scenegraphs", "arxiv", "products", "cora", "enron"].into_iter().map(|n| (n, official_samples(n))).collect();
    for (name, rel) in [("citeseer", "datasets/citeseer-text"), ("primekg-paths", "datasets/primekg-drugmechdb-paths")] {
        if let Some(f) = shared_files(name, rel) {
            cases.push((name, f));
        }
    }
    for (name, files) in cases {
        let c = case();
        let m = mirror(files, Mode::Honest);
        let out = ok(tgrag_at(&c, &m.endpoint, &["fetch", name]));
        let folder = tgrag_datasets::fetch::default_dest(Path::new(""), name).expect("a folder");
        let folder = folder.to_str().expect("utf-8");
        no_partial(&c, folder, true);
        assert!(!c.data.join(".tgrag-downloads").exists(), "{name}: downloads folder left");
        // Only what the loader reads is kept out of the archives.
        assert!(!walk(&c.data.join(folder)).iter().any(|p| p.ends_with("README.md") || p.contains("testdev")), "{name}: {out}");
        if name == "products" {
            // The graph only: ingest names the texts it lacks and where they are; with them it runs.
            let o = tgrag_at(&c, &m.endpoint, &["run", "--dataset", name, "--stages", "ingest"]);
            super::hostile::failed_cleanly(&o, &["trn.json", "Google Drive", "tgrag fetch products"]);
            let texts: String =
                (0..12).map(|i| format!("{{\"uid\": \"B00{i:05}\", \"title\": \"Item {i}\", \"content\": \"A thing.\"}}\n")).collect();
            std::fs::write(c.data.join(folder).join("trn.json"), texts).expect("trn.json");
        }
        let run = ok(tgrag_at(&c, &m.endpoint, &["run", "--dataset", name, "--stages", "ingest"]));
        let ingest = c.outputs.join(name).join("ingest");
        let tables = walk(&ingest).into_iter().filter(|p| p.ends_with(".parquet")).count();
        assert!(tables >= 2, "{name}: {tables} tables in {}: {run}", ingest.display());
        // Fetched again: found, nothing downloaded.
        assert!(ok(tgrag_at(&c, &m.endpoint, &["fetch", name])).contains("already in"), "{name}");
    }
}

/// Every file under `dir`, relative, `/`-separated.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out
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
    let out = ok(tgrag_at(&c, &m.endpoint, &["fetch", "someone/small-mpnet", "--dest", dest.to_str().expect("utf-8")]));
    assert!(out.contains(&format!("commit {COMMIT}")), "{out}");
    for f in files.keys() {
        assert_eq!(std::fs::read(dest.join(f)).ok().as_ref(), files.get(f), "{f}");
    }
    // all-mpnet-base-v2 is held to tgrag's own pins: the same (honestly served) files are refused
    // under its id, naming the file, and nothing reaches the destination.
    let pinned = c.data.join("all-mpnet-base-v2");
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "sentence-transformers/all-mpnet-base-v2", "--dest", pinned.to_str().expect("utf-8")]);
    super::hostile::failed_cleanly(&o, &["config.json", "not the pinned d46a3e04"]);
    assert!(!pinned.exists(), "nothing placed");
    // A repository without safetensors weights is refused; an id that is a path is refused.
    files.remove("model.safetensors");
    let m = mirror(files, Mode::Honest);
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "someone/bin-only", "--dest", c.data.join("bin").to_str().expect("utf-8")]);
    super::hostile::failed_cleanly(&o, &["model.safetensors"]);
    assert!(!c.data.join("bin").exists());
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "../etc"]);
    super::hostile::failed_cleanly(&o, &["not a hub model id"]);
}

/// The `.part` path `tgrag fetch products` downloads its one file into, and that file's name.
fn products_part(c: &Case) -> (PathBuf, String) {
    let key = remote_keys("products").remove(0);
    let name = key.rsplit('/').next().expect("name").to_string();
    let dir = c.data.join(".tgrag-downloads/ogbn_products");
    std::fs::create_dir_all(&dir).expect("downloads folder");
    (dir.join(format!("{name}.part")), name)
}

/// Whatever is planted in a download's `.part` place (a symlink or a hard link to a file outside
/// the data folder, a FIFO, a folder) is refused, never written through: the outside file keeps
/// its bytes, no dataset folder appears, and after the plant is removed the same fetch succeeds.
#[test]
fn fetch_hostile_never_writes_through_a_planted_part() {
    let m = mirror(official_samples("products"), Mode::Honest);
    for plant in ["symlink", "hardlink", "fifo", "folder"] {
        let c = case();
        let (part, _) = products_part(&c);
        let victim = c.outputs.parent().expect("root").join("victim.txt");
        std::fs::write(&victim, b"keep me").expect("victim");
        match plant {
            "symlink" => std::os::unix::fs::symlink(&victim, &part).expect("symlink"),
            "hardlink" => std::fs::hard_link(&victim, &part).expect("hard link"),
            "fifo" => assert!(Command::new("mkfifo").arg(&part).status().expect("mkfifo").success()),
            _ => std::fs::create_dir(&part).expect("folder"),
        }
        let o = tgrag_at(&c, &m.endpoint, &["fetch", "products"]);
        super::hostile::failed_cleanly(&o, &[".part", "is not a plain file of its own", "remove it"]);
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me", "{plant}: the outside file was written");
        no_partial(&c, "ogbn_products", false);
        if plant == "folder" {
            std::fs::remove_dir(&part).expect("remove");
        } else {
            std::fs::remove_file(&part).expect("remove");
        }
        ok(tgrag_at(&c, &m.endpoint, &["fetch", "products"]));
        no_partial(&c, "ogbn_products", true);
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
    }
}

/// A resume answered with a length near 2^64 is refused (checked arithmetic, no overflow panic);
/// one answered with the wrong `Content-Range` removes the stuck `.part` and says so, and the next
/// fetch downloads from the start.
#[test]
fn fetch_hostile_resume_answers_are_refused_and_a_stuck_part_removed() {
    let m = mirror(official_samples("products"), Mode::HugeResume);
    let c = case();
    let (part, name) = products_part(&c);
    std::fs::write(&part, vec![7u8; 1000]).expect("part");
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "products"]);
    super::hostile::failed_cleanly(&o, &[&name, "more than any file can hold"]);
    no_partial(&c, "ogbn_products", false);

    *m.mode.lock().expect("mode") = Mode::WrongRange;
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "products"]);
    let err = super::hostile::failed_cleanly(&o, &["Content-Range: bytes 0-", "was removed", "run the same command again"]);
    assert!(err.contains(&part.display().to_string()), "the message names the partial file: {err}");
    assert!(!part.exists(), "the stuck .part is still there");
    ok(tgrag_at(&c, &m.endpoint, &["fetch", "products"]));
    no_partial(&c, "ogbn_products", true);
}

/// Two downloads into one folder cannot share a `.part`: while the folder's lock is held, a fetch
/// is refused with a message that says why; once it is released the fetch succeeds.
#[test]
fn fetch_hostile_a_second_download_into_a_locked_folder_is_refused() {
    let m = mirror(official_samples("products"), Mode::Honest);
    let c = case();
    let (part, _) = products_part(&c);
    let lock_path = part.parent().expect("folder").join(".lock");
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).expect("lock file");
    lock.lock().expect("lock");
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "products"]);
    super::hostile::failed_cleanly(&o, &["another download is writing into", "wait for it to end"]);
    assert!(!part.exists(), "a .part was written beside a held lock");
    lock.unlock().expect("unlock");
    drop(lock);
    ok(tgrag_at(&c, &m.endpoint, &["fetch", "products"]));
    no_partial(&c, "ogbn_products", true);
}

/// A served Enron tarball whose one message unpacks to more than the per-message bound (65 MiB of
/// zeros, about 65 KiB compressed): refused naming the entry, before the message is held whole,
/// and no staging folder or dataset folder is left.
#[test]
fn fetch_hostile_an_enron_message_above_its_bound_is_refused() {
    let key = remote_keys("enron").remove(0);
    let huge = vec![0u8; 65 << 20];
    let m = mirror([(key, tgz_of(&[("maildir/lay-k/inbox/1.", huge)]))].into_iter().collect(), Mode::Honest);
    let c = case();
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "enron"]);
    let err = super::hostile::failed_cleanly(&o, &["entry maildir/lay-k/inbox/1."]);
    assert!(err.contains("64 MiB") || err.contains("decompression bomb"), "{err}");
    no_partial(&c, "enron-sample", false);
}

/// Served archives that are damaged: a zip entry whose bytes were changed in transit (its
/// checksum or its deflate stream fails) and a tarball holding one file twice. Each is refused
/// naming the downloaded archive and the entry as the archive has it, once, and no dataset or
/// staging folder is left.
#[test]
fn fetch_hostile_a_damaged_zip_and_a_repeated_tar_entry_name_archive_and_entry() {
    let key = remote_keys("products").remove(0);
    let mut files = official_samples("products");
    let zip = files.get_mut(&key).expect("products zip");
    let (name_len, extra) = (u16::from_le_bytes([zip[26], zip[27]]) as usize, u16::from_le_bytes([zip[28], zip[29]]) as usize);
    let first = String::from_utf8_lossy(&zip[30..30 + name_len]).into_owned();
    zip[30 + name_len + extra + 2] ^= 0x5a;
    let m = mirror(files, Mode::Honest);
    let c = case();
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "products"]);
    let err = super::hostile::failed_cleanly(&o, &["products.zip", &format!("entry {first}"), "cannot be unpacked"]);
    assert!(err.matches("os error").count() <= 1, "a cause printed twice: {err}");
    no_partial(&c, "ogbn_products", false);

    let keys = remote_keys("cora");
    let mut files = official_samples("cora");
    let twice = tgz_of(&[("cora/cora.cites", b"31\t32\n".to_vec()), ("cora/cora.cites", b"32\t33\n".to_vec())]);
    files.insert(keys[0].clone(), twice);
    let m = mirror(files, Mode::Honest);
    let c = case();
    let o = tgrag_at(&c, &m.endpoint, &["fetch", "cora"]);
    super::hostile::failed_cleanly(&o, &["entry cora/cora.cites", "appears twice"]);
    for e in std::fs::read_dir(&c.data).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        assert!(!n.contains("tgrag-fetch"), "staging folder left: {n}");
    }
}
