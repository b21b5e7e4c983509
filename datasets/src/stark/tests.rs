//! The STaRK loader against `tests/fixtures/stark-hf-mirror/expected` (what stark_qa's own loader
//! returns for the mirror's files), loaded both from the folder and through hf-hub from a mirror
//! served on 127.0.0.1; and malformed variants of every format.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use arrow::record_batch::RecordBatch;

use super::*;
use crate::pickle::Value;

/// The committed mirror `<repo>/tests/fixtures/stark-hf-mirror` (its `make.py` regenerates
/// `expected/` with stark_qa); a missing one fails the test.
fn mirror() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/stark-hf-mirror");
    assert!(p.join("expected").is_dir(), "{} not found: the fixtures are committed under tests/fixtures", p.display());
    p
}

use crate::test_support::TestResult;

fn col<'a>(b: &'a RecordBatch, c: &str) -> TestResult<&'a arrow::array::ArrayRef> {
    b.column_by_name(c).ok_or_else(|| format!("expected file has no column `{c}`").into())
}

fn read(p: &Path) -> TestResult<RecordBatch> {
    Ok(tgrag_schemas::io::read_parquet(p)?)
}

fn ints(b: &RecordBatch, c: &str) -> TestResult<Vec<i64>> {
    let a = arrow::compute::cast(col(b, c)?, &DataType::Int64)?;
    Ok(a.as_primitive::<Int64Type>().values().to_vec())
}

fn strs(b: &RecordBatch, c: &str) -> TestResult<Vec<String>> {
    let a = arrow::compute::cast(col(b, c)?, &DataType::Utf8)?;
    let s = a.as_string::<i32>();
    Ok((0..s.len()).map(|i| s.value(i).to_string()).collect())
}

fn int_lists(b: &RecordBatch, c: &str) -> TestResult<Vec<Vec<i64>>> {
    let l = col(b, c)?.as_list::<i32>().clone();
    (0..l.len())
        .map(|i| {
            let v = arrow::compute::cast(&l.value(i), &DataType::Int64)?;
            Ok(v.as_primitive::<Int64Type>().values().to_vec())
        })
        .collect()
}

/// The fixture's tagged JSON for an unpickled value.
fn tagged(v: &Value) -> serde_json::Value {
    use serde_json::json;
    match v {
        Value::None => serde_json::Value::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Float(f) if f.is_nan() => json!({"$float": "nan"}),
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(s),
        Value::Bytes(b) => json!(String::from_utf8_lossy(b)),
        Value::List(l) | Value::Tuple(l) | Value::Set(l) => serde_json::Value::Array(l.iter().map(tagged).collect()),
        Value::Dict(p) => json!({"$dict": p.iter().map(|(k, v)| json!([tagged(k), tagged(v)])).collect::<Vec<_>>()}),
        Value::Numpy(inner) => {
            let kind = match **inner {
                Value::Str(_) => "str_",
                Value::Float(_) => "float64",
                Value::Bool(_) => "bool",
                _ => "int64",
            };
            json!({"$numpy": kind, "value": tagged(inner)})
        }
        Value::Tensor(_) => json!("tensor"),
    }
}

fn strip_dtype(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if m.contains_key("$numpy") {
                m.remove("dtype");
            }
            m.values_mut().for_each(strip_dtype);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_dtype),
        _ => {}
    }
}

fn check_kb(kb: Kb, root: &Path, expected: &Path) -> TestResult {
    let name = kb.name();
    let skb = Skb::load(kb, root).map_err(|e| format!("{name}: {e}"))?;
    let exp = expected.join(name);

    // The raw pickle, key by key (before clean_dict for prime).
    let z = crate::archive::ZipFiles::read(Path::new("processed.zip"), std::fs::read(root.join(format!("skb/{name}/processed.zip")))?)?;
    let raw = crate::pickle::load(z.get(&format!("{}node_info.pkl", kb.processed_dir()))?)?;
    let Value::Dict(pairs) = raw else { panic!("node_info is not a dict") };
    let mut lines = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(exp.join("node_info_pickle.jsonl.gz"))?).read_to_string(&mut lines)?;
    let mut n_lines = 0;
    for (line, (k, v)) in lines.lines().zip(&pairs) {
        let mut want: serde_json::Value = serde_json::from_str(line)?;
        strip_dtype(&mut want);
        assert_eq!(tagged(k), want["key"], "{name}: key order");
        assert_eq!(tagged(v), want["value"], "{name}: node_info[{k:?}]");
        n_lines += 1;
    }
    assert_eq!(n_lines, pairs.len(), "{name}: node_info length");

    let nodes = read(&exp.join("nodes.parquet"))?;
    let (ids, types, docs) = (ints(&nodes, "node_id")?, strs(&nodes, "node_type")?, strs(&nodes, "doc")?);
    assert_eq!(ids.len(), skb.num_nodes(), "{name}: node count");
    let mut wrong = Vec::new();
    for (r, &i) in ids.iter().enumerate() {
        assert_eq!(skb.node_type(i as usize), types[r], "{name}: type of node {i}");
        let got = skb.doc(i as usize);
        if got != docs[r] {
            wrong.push(format!("node {i}:\n--- got\n{got:?}\n--- want\n{:?}", docs[r]));
        }
    }
    assert!(wrong.is_empty(), "{name}: {} docs differ; first: {}", wrong.len(), wrong[0]);

    let stored = read(&exp.join("stored_edges.parquet"))?;
    assert_eq!(
        skb.stored,
        Edges { src: ints(&stored, "src")?, dst: ints(&stored, "dst")?, etype: ints(&stored, "edge_type_id")? },
        "{name}: stored edges"
    );
    let edges = read(&exp.join("edges.parquet"))?;
    assert_eq!(
        skb.edges,
        Edges { src: ints(&edges, "src")?, dst: ints(&edges, "dst")?, etype: ints(&edges, "edge_type_id")? },
        "{name}: loaded edges"
    );
    let names = strs(&edges, "edge_type")?;
    for (i, &t) in skb.edges.etype.iter().enumerate() {
        assert_eq!(skb.edge_type_name(t), names[i]);
    }
    let cands = read(&exp.join("candidates.parquet"))?;
    assert_eq!(skb.candidate_ids.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), ints(&cands, "candidate_ids")?, "{name}: candidates");
    let nb = read(&exp.join("neighbors.parquet"))?;
    let (nid, ntype, nlists) = (ints(&nb, "node_id")?, strs(&nb, "edge_type")?, int_lists(&nb, "neighbors")?);
    for r in 0..nid.len() {
        let got: Vec<i64> = skb.neighbors(nid[r] as usize, &ntype[r]).iter().map(|&x| i64::from(x)).collect();
        assert_eq!(got, nlists[r], "{name}: neighbours of {} by {}", nid[r], ntype[r]);
    }
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(exp.join("meta.json"))?)?;
    assert_eq!(meta["to_undirected_applied"].as_bool(), Some(skb.to_undirected_applied), "{name}: conversion");
    assert_eq!(serde_json::json!(skb.rel_types()), meta["rel_type_lst"], "{name}: relation list");

    let qa = Qa::load(kb, root, false)?;
    let want = read(&exp.join("qa.parquet"))?;
    let (pos, qid, query, ans) = (ints(&want, "position")?, ints(&want, "q_id")?, strs(&want, "query")?, int_lists(&want, "answer_ids")?);
    assert_eq!(qa.rows.len(), pos.len());
    for r in 0..pos.len() {
        let row = &qa.rows[pos[r] as usize];
        assert_eq!((row.id, &row.query, &row.answer_ids), (qid[r], &query[r], &ans[r]), "{name}: qa position {}", pos[r]);
    }
    let sp = read(&exp.join("qa_splits.parquet"))?;
    let (sname, spos) = (strs(&sp, "split")?, int_lists(&sp, "positions")?);
    for (r, s) in sname.iter().enumerate() {
        let got = qa.splits.iter().find(|(n, _)| n == s).map(|(_, p)| p.iter().map(|&x| x as i64).collect::<Vec<_>>());
        assert_eq!(got.as_ref(), Some(&spos[r]), "{name}: split {s}");
    }
    let human = Qa::load(kb, root, true)?;
    let want = read(&exp.join("qa_human.parquet"))?;
    let (qid, src) = (ints(&want, "q_id")?, int_lists(&want, "answer_ids_source")?);
    assert_eq!(human.rows.iter().map(|r| r.id).collect::<Vec<_>>(), qid);
    assert_eq!(human.rows.iter().map(|r| r.source_ids.clone().unwrap_or_default()).collect::<Vec<_>>(), src);

    // Canonical tables validate.
    let t = to_tables(&skb, &qa, root)?;
    t.validate()?;
    Ok(())
}

#[test]
fn stark_loader_reproduces_expected_for_all_kbs() -> TestResult {
    let m = mirror();
    for kb in [Kb::Amazon, Kb::Mag, Kb::Prime] {
        check_kb(kb, &m, &m.join("expected"))?;
    }
    Ok(())
}

/// A minimal Hugging Face mirror: `HEAD`/`GET /datasets/<repo>/resolve/<rev>/<file>` from `dir`,
/// with the headers hf-hub needs (ETag, X-Repo-Commit, Content-Length), and the repository API's
/// `GET /api/datasets/<repo>/revision/<rev>` (the commit).
fn serve(dir: PathBuf) -> TestResult<(String, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = format!("http://{}", listener.local_addr()?);
    let gets = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let g2 = gets.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let dir = dir.clone();
            let gets = g2.clone();
            std::thread::spawn(move || {
                let Ok(read_half) = stream.try_clone() else { return };
                let mut reader = BufReader::new(read_half);
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut inm = None;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if h.to_ascii_lowercase().starts_with("if-none-match:") {
                            inm = Some(h[14..].trim().to_string());
                        }
                    }
                    let mut parts = request.split_whitespace();
                    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    let prefix = "/datasets/snap-stanford/stark/resolve/";
                    let file = path
                        .strip_prefix(prefix)
                        .and_then(|r| r.split_once('/'))
                        .map(|(_, f)| f.split('?').next().unwrap_or(f).to_string());
                    let body = file.as_ref().and_then(|f| std::fs::read(dir.join(f)).ok());
                    let commit = "0123456789abcdef0123456789abcdef01234567";
                    // The repository API: the commit a revision resolves to.
                    let info = format!("{{\"id\":\"snap-stanford/stark\",\"sha\":\"{commit}\"}}");
                    let resp = match body {
                        _ if path.starts_with("/api/datasets/snap-stanford/stark/revision/") => format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/json\r\n\r\n{}",
                            info.len(),
                            if method == "GET" { info.as_str() } else { "" }
                        )
                        .into_bytes(),
                        Some(b) => {
                            let etag =
                                format!("\"{}\"", crate::hub::sha256_file(&dir.join(file.as_deref().unwrap_or(""))).unwrap_or_default());
                            if method == "GET" {
                                gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            let status =
                                if method == "HEAD" && inm.as_deref() == Some(etag.as_str()) { "304 Not Modified" } else { "200 OK" };
                            let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nETag: {etag}\r\nX-Repo-Commit: {commit}\r\nContent-Type: application/octet-stream\r\n\r\n", b.len()).into_bytes();
                            if method == "GET" {
                                head.extend_from_slice(&b);
                            }
                            head
                        }
                        None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nX-Error-Code: EntryNotFound\r\n\r\n".to_vec(),
                    };
                    if stream.write_all(&resp).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((addr, gets))
}

#[test]
fn hub_download_through_a_local_mirror_then_offline_cache() -> TestResult {
    let m = mirror();
    let (endpoint, gets) = serve(m.clone())?;
    let home = tempfile::tempdir()?;
    // SAFETY-free: tests in this module that touch HF_* run in this one test only.
    let run = |offline: bool| -> TestResult<String> {
        let out = std::process::Command::new(std::env::current_exe()?)
            .args(["--exact", "stark::tests::hub_child", "--nocapture", "--include-ignored"])
            .env("HF_ENDPOINT", &endpoint)
            .env("HF_HOME", home.path())
            .env("HF_HUB_OFFLINE", if offline { "1" } else { "0" })
            .env("TGRAG_MIRROR", &m)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("hub_child ok"), "child failed:\n{text}");
        Ok(text)
    };
    run(false)?;
    let after_first = gets.load(std::sync::atomic::Ordering::SeqCst);
    assert!(after_first >= Kb::Mag.hub_files().len(), "expected downloads, saw {after_first} GETs");
    // Offline: everything from the cache, no request at all.
    run(true)?;
    assert_eq!(gets.load(std::sync::atomic::Ordering::SeqCst), after_first, "offline run downloaded");
    Ok(())
}

/// Runs in a child process (environment variables of its own): fetch MAG through hf-hub and
/// compare with the expected files.
#[test]
#[ignore = "driven by hub_download_through_a_local_mirror_then_offline_cache"]
fn hub_child() -> TestResult {
    let Some(m) = std::env::var_os("TGRAG_MIRROR").map(PathBuf::from) else { return Ok(()) };
    let spec = crate::registry::resolve("stark-mag", None, Default::default())?;
    let (root, fetched) = spec.stark_root(&|_| {})?;
    let fetched = fetched.ok_or("a hub dataset must report its fetched files")?;
    let sums = std::fs::read_to_string(m.join("SHA256SUMS"))?;
    for f in &fetched {
        let want = sums.lines().find(|l| l.ends_with(&format!("  {}", f.file))).map(|l| &l[..64]);
        assert_eq!(Some(f.sha256.as_str()), want, "sha256 of {}", f.file);
    }
    assert_eq!(crate::hub::snapshot_commit(&root).as_deref(), Some("0123456789abcdef0123456789abcdef01234567"));
    check_kb(Kb::Mag, &root, &m.join("expected"))?;
    let tables = crate::load(&spec)?;
    assert!(tables.get("nodes").is_some());
    println!("hub_child ok");
    Ok(())
}

fn copy_mirror(m: &Path, kb: &str) -> TestResult<tempfile::TempDir> {
    let t = tempfile::tempdir()?;
    for f in Kb::parse(kb).ok_or("unknown kb")?.hub_files() {
        let to = t.path().join(&f);
        std::fs::create_dir_all(to.parent().ok_or("no parent folder")?)?;
        std::fs::copy(m.join(&f), &to)?;
    }
    Ok(t)
}

/// Rewrite processed.zip with one entry replaced (or added).
fn rezip(path: &Path, replace: &str, data: &[u8]) -> TestResult {
    let bytes = std::fs::read(path)?;
    let mut src = zip::ZipArchive::new(std::io::Cursor::new(bytes))?;
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut replaced = false;
    for i in 0..src.len() {
        let mut e = src.by_index(i)?;
        if e.is_dir() {
            continue;
        }
        let name = e.name()?.into_owned();
        let mut buf = Vec::new();
        e.read_to_end(&mut buf)?;
        out.start_file(name.as_str(), opts)?;
        if name == replace {
            out.write_all(data)?;
            replaced = true;
        } else {
            out.write_all(&buf)?;
        }
    }
    if !replaced {
        out.start_file(replace, opts)?;
        out.write_all(data)?;
    }
    std::fs::write(path, out.finish()?.into_inner())?;
    Ok(())
}

/// One way to break a copy of the Prime mirror, and what the error must say.
enum Break {
    /// Keep only the first half of processed.zip.
    TruncateZip,
    /// Replace (or add) one entry of processed.zip.
    Entry(&'static str, &'static [u8]),
    /// Append a row to stark_qa.csv.
    QaRow(&'static [u8]),
}

#[test]
fn malformed_stark_files_give_clear_errors() -> TestResult {
    let m = mirror();
    // A pickle calling os.system("touch"): it must be refused, never run.
    const EVIL: &[u8] =
        b"\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c\x05touch\x94\x85\x94R\x94.";
    const TRUNCATED_PICKLE: &[u8] = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(K\x01";
    let cases: [(Break, &[&str]); 8] = [
        (Break::TruncateZip, &["processed.zip", "not a readable zip"]),
        (Break::Entry("processed/node_info.pkl", EVIL), &["node_info.pkl", "`os.system` is not allowed"]),
        (Break::Entry("processed/node_info.pkl", TRUNCATED_PICKLE), &["node_info.pkl", "truncated"]),
        (Break::Entry("../../evil.txt", b"x"), &["`../../evil.txt`", "escapes its folder"]),
        (Break::Entry("processed/edge_types.pt", b"not a zip"), &["edge_types.pt", "not a readable zip"]),
        (Break::QaRow(b"99,caf\xe9,[1]\n"), &["stark_qa.csv", "not valid UTF-8"]),
        (Break::QaRow(b"x7,query,[1]\n"), &["stark_qa.csv", "column id", "not an integer"]),
        (Break::QaRow(b"77,\"unterminated,[1]\n"), &["stark_qa.csv", "never closed"]),
    ];
    for (how, want) in cases {
        let t = copy_mirror(&m, "prime")?;
        let zp = t.path().join("skb/prime/processed.zip");
        let qp = t.path().join("qa/prime/stark_qa/stark_qa.csv");
        let err = match how {
            Break::TruncateZip => {
                let b = std::fs::read(&zp)?;
                std::fs::write(&zp, &b[..b.len() / 2])?;
                Skb::load(Kb::Prime, t.path()).err()
            }
            Break::Entry(name, data) => {
                rezip(&zp, name, data)?;
                Skb::load(Kb::Prime, t.path()).err()
            }
            Break::QaRow(row) => {
                let mut q = std::fs::read(&qp)?;
                q.extend_from_slice(row);
                std::fs::write(&qp, &q)?;
                Qa::load(Kb::Prime, t.path(), false).err()
            }
        };
        let e = err.ok_or_else(|| format!("a malformed file loaded without error (expected {want:?})"))?.to_string();
        for w in want {
            assert!(e.contains(w), "error `{e}` should mention `{w}`");
        }
    }
    Ok(())
}

#[test]
fn undirected_conversion_matches_hand_computed_cases() {
    // view,view vs buy (mean 2/3 -> 0), a self loop, a one-way edge.
    let e = Edges { src: vec![0, 0, 1, 2, 3], dst: vec![1, 1, 0, 2, 4], etype: vec![1, 1, 0, 1, 2] };
    assert!(!is_undirected(&e));
    let u = to_undirected_mean(&e);
    assert_eq!(u.src, vec![0, 1, 2, 3, 4]);
    assert_eq!(u.dst, vec![1, 0, 2, 4, 3]);
    assert_eq!(u.etype, vec![0, 0, 1, 2, 2]);
    assert!(is_undirected(&u));
}
