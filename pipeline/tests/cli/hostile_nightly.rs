//! Hostile input: nightly, `report --from` and
//! `compare` on tampered nights, planted folders and missing data.
//!
//! One real night (the fast settings of `nightly.rs`) is made once per test process; every test
//! works on its own copy of that outputs folder, so a nightly run in a test skips every stage.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, Float64Array, RecordBatch};

use super::{stderr, stdout};

use super::nightly::FAST;

fn cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tgrag"));
    c.env("TGRAG_MODELS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../weights")).env_remove("TGRAG_DATA_ROOT");
    c
}

fn nightly_cmd(outputs: &Path, data_root: &Path, extra: &[&str]) -> Command {
    let mut c = cmd();
    c.arg("--outputs").arg(outputs).arg("--quiet").arg("nightly").arg("--data-root").arg(data_root).args(FAST).args(extra);
    c
}

fn nightly(outputs: &Path, data_root: &Path, extra: &[&str]) -> Output {
    nightly_cmd(outputs, data_root, extra).output().expect("spawn tgrag nightly")
}

fn tgrag(args: &[&str]) -> Output {
    cmd().args(args).output().expect("spawn tgrag")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

/// A refusal: an error exit with the code of its fault (README, exit codes; not 0, not a panic,
/// not a signal) whose message has every `must`.
fn refused(o: &Output, code: i32, must: &[&str]) {
    let err = super::hostile::failed_cleanly(o, must);
    assert_eq!(o.status.code(), Some(code), "stdout {}\nstderr {err}", stdout(o));
    assert!(!err.contains("panicked"), "{err}");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("type").is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// The nights under `<outputs>/nightly` (visible folders named like a night).
fn night_names(outputs: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(outputs.join("nightly"))
        .expect("nightly folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 22 && n.ends_with('Z') && !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// The outputs folder of one fast night, made once per test process under the target folder
/// (an earlier process's copy is removed once that process is gone).
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = n.strip_prefix("hostile-nightly-")
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = base.join(format!("hostile-nightly-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (o, data) = (dir.join("out"), dir.join("no-data"));
        std::fs::create_dir_all(&data).expect("mkdir");
        let first = nightly(&o, &data, &["--keep", "0"]);
        assert_eq!(first.status.code(), Some(0), "{}\n{}", stdout(&first), stderr(&first));
        assert_eq!(night_names(&o).len(), 1);
        dir
    })
}

/// A copy of the template for one test: (outputs, its night, an empty data root).
fn with_night(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    copy_tree(template(), dir);
    let o = dir.join("out");
    let night = o.join("nightly").join(&night_names(&o)[0]);
    (o, night, dir.join("no-data"))
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json")
}

fn write_json(p: &Path, v: &serde_json::Value) {
    std::fs::write(p, serde_json::to_string_pretty(v).expect("json")).expect("write");
}

/// Copies `night` to `<nightly>/<stamp>` as a night that started at `started_at`.
fn night_copy(night: &Path, stamp: &str, started_at: &str) -> PathBuf {
    let to = night.parent().expect("parent").join(stamp);
    copy_tree(night, &to);
    let mut p = read_json(&to.join("provenance.json"));
    p["stamp"] = stamp.into();
    p["started_at"] = started_at.into();
    p["finished_at"] = started_at.into();
    write_json(&to.join("provenance.json"), &p);
    to
}

fn canary(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let c = dir.join("canary.txt");
    std::fs::write(&c, "do not delete").expect("canary");
    c
}

fn alive(c: &Path) {
    assert_eq!(std::fs::read_to_string(c).ok().as_deref(), Some("do not delete"), "{} was touched", c.display());
}

fn leaderboard(night: &Path) -> RecordBatch {
    tgrag_schemas::io::read_parquet(&night.join("leaderboard.parquet")).expect("leaderboard")
}

fn write_leaderboard(night: &Path, b: &RecordBatch) {
    tgrag_schemas::io::write_parquet_atomic(&night.join("leaderboard.parquet"), b).expect("write")
}

#[test]
fn report_from_a_malformed_provenance_is_an_input_error_naming_file_and_field() {
    let d = tempfile::tempdir().expect("tmp");
    let (_, night, _) = with_night(d.path());
    let prov = night.join("provenance.json");
    let good = read_json(&prov);
    // The untampered night renders (the check can pass).
    std::fs::remove_file(night.join("report.md")).expect("rm");
    let r = tgrag(&["report", "--from", s(&night)]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(night.join("report.md").is_file());
    let outside = canary(&d.path().join("outside"));
    // A non-ASCII code digest whose 12th byte is inside a character (the panic), other bad fields,
    // a previous night outside the folder, non-JSON and a missing file.
    type Tamper = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(Tamper, &[&str])> = vec![
        (Box::new(|p| p["code"]["code_digest"] = format!("a{}", "é".repeat(10)).into()), &["field `code.code_digest`", "hexadecimal"]),
        (Box::new(|p| p["code"]["code_digest"] = 12.into()), &["field `code.code_digest`"]),
        (Box::new(|p| p["previous"] = "../../outside".into()), &["field `previous`", "a night's stamp"]),
        (Box::new(|p| p["stamp"] = serde_json::Value::Null), &["field `stamp`"]),
        (Box::new(|p| p["started_at"] = "tomorrow".into()), &["field `started_at`"]),
        (Box::new(|p| *p = serde_json::json!(["not", "an", "object"])), &["expected a JSON object"]),
    ];
    for (tamper, must) in cases {
        let mut p = good.clone();
        tamper(&mut p);
        write_json(&prov, &p);
        std::fs::remove_file(night.join("report.md")).expect("rm");
        let r = tgrag(&["report", "--from", s(&night)]);
        let mut all = vec!["provenance.json"];
        all.extend_from_slice(must);
        refused(&r, 65, &all);
        assert!(!night.join("report.md").exists(), "a report rendered from a malformed provenance");
        std::fs::write(night.join("report.md"), "old").expect("restore");
    }
    std::fs::write(&prov, "{ \"stamp\": ").expect("truncated");
    refused(&tgrag(&["report", "--from", s(&night)]), 65, &["provenance.json", "not JSON"]);
    std::fs::remove_file(&prov).expect("rm");
    refused(&tgrag(&["report", "--from", s(&night)]), 65, &["provenance.json"]);
    alive(&outside);
}

#[test]
fn compare_refuses_nan_values_and_duplicate_rows_naming_file_row_and_column() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, late, data) = with_night(d.path());
    let early = night_copy(&late, "2000-01-01T000000.000Z", "2000-01-01T00:00:00Z");
    let (e, l) = (s(&early), s(&late));
    let same = tgrag(&["compare", e, l]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    let lb = leaderboard(&late);
    assert!(lb.num_rows() > 5);
    // A NaN at row 3 of the later night.
    let i = lb.schema().index_of("value").expect("value");
    let mut v: Vec<f64> = lb.column(i).as_any().downcast_ref::<Float64Array>().expect("f64").values().to_vec();
    v[3] = f64::NAN;
    let mut cols = lb.columns().to_vec();
    cols[i] = Arc::new(Float64Array::from(v)) as ArrayRef;
    write_leaderboard(&late, &RecordBatch::try_new(lb.schema(), cols).expect("batch"));
    let r = tgrag(&["compare", e, l]);
    refused(&r, 65, &[s(&late.join("leaderboard.parquet")), "row 3", "column `value`", "not a finite number"]);
    assert!(!stdout(&r).contains("improvement"), "{}", stdout(&r));
    // Every row twice (the "749 improvements").
    let doubled = arrow::compute::concat_batches(&lb.schema(), [&lb, &lb]).expect("concat");
    write_leaderboard(&late, &doubled);
    let r = tgrag(&["compare", e, l]);
    let row = format!("row {}", lb.num_rows());
    refused(&r, 65, &[s(&late.join("leaderboard.parquet")), &row, "duplicate", "(first at row 0)"]);
    // The same check where a night reads its baseline: the newest night is skipped with the
    // reason, and the one before it is the baseline.
    let n = nightly(&o, &data, &["--keep", "0"]);
    assert_eq!(n.status.code(), Some(0), "{}\n{}", stdout(&n), stderr(&n));
    assert!(stderr(&n).contains(&format!("{}: skipped as the baseline", late.display())), "{}", stderr(&n));
    assert!(stderr(&n).contains("duplicate"), "{}", stderr(&n));
    assert!(stdout(&n).contains("compared with 2000-01-01T000000.000Z: 0 regression(s)"), "{}", stdout(&n));
}

#[test]
fn compare_takes_outputs_folders_and_refuses_bad_tolerances() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, night, _) = with_night(d.path());
    // An outputs folder holds what the night collected from it: the same leaderboard.
    let r = tgrag(&["compare", s(&night), s(&o), "--all"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let out = stdout(&r);
    assert!(out.contains(" 0 regression(s), 0 improvement(s), ") && out.contains(" 0 new, 0 vanished"), "{out}");
    assert!(out.contains("unchanged   synthetic-tiny metrics/bm25 recall20"), "{out}");
    let r = tgrag(&["compare", s(&o), s(&o)]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    // Neither kind of folder; the nightly folder itself gets a hint.
    let empty = d.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    refused(&tgrag(&["compare", s(&empty), s(&night)]), 78, &["neither a nightly folder", "nor an outputs folder"]);
    refused(&tgrag(&["compare", s(&o.join("nightly")), s(&night)]), 78, &["name one night"]);
    // Bands: a negative default is a range error (not an unknown flag), an unknown metric is named
    // with the known ones.
    for v in ["-1", "NaN", "inf"] {
        let r = tgrag(&["compare", s(&night), s(&o), "--default-tolerance", v]);
        refused(&r, 2, &["--default-tolerance", "must be a finite number ≥ 0"]);
        assert!(!stderr(&r).contains("unexpected argument"), "{}", stderr(&r));
    }
    let r = tgrag(&["compare", s(&night), s(&o), "--tolerance", "hit@1=0.5"]);
    refused(&r, 78, &["no metric `hit@1`", "known metrics:", "recall20"]);
    assert!(stdout(&r).is_empty(), "nothing compared: {}", stdout(&r));
    let r = tgrag(&["compare", s(&night), s(&o), "--tolerance", "recall20=0.5"]);
    assert_eq!(r.status.code(), Some(0), "a known metric is accepted: {}", stderr(&r));
    // A NaN inside an outputs folder's scores table is named there.
    let scores = o.join("synthetic-tiny/metrics/scores.parquet");
    let b = tgrag_schemas::io::read_parquet(&scores).expect("scores");
    let i = b.schema().index_of("value").expect("value");
    let mut v: Vec<f64> = b.column(i).as_any().downcast_ref::<Float64Array>().expect("f64").values().to_vec();
    v[0] = f64::INFINITY;
    let mut cols = b.columns().to_vec();
    cols[i] = Arc::new(Float64Array::from(v)) as ArrayRef;
    tgrag_schemas::io::write_parquet_atomic(&scores, &RecordBatch::try_new(b.schema(), cols).expect("batch")).expect("write");
    refused(&tgrag(&["compare", s(&night), s(&o)]), 65, &[s(&scores), "row 0", "column `value`", "not a finite number"]);
}

#[test]
fn retention_keeps_the_night_it_wrote_and_deletes_only_earlier_nights() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, first, data) = with_night(d.path());
    let nightly_dir = o.join("nightly");
    // An earlier real night, a folder named far in the future (a copy of a night), one whose
    // provenance also claims the future, a folder that is not a night and a partial-looking folder
    // of the user's: each with a canary.
    let older = night_copy(&first, "2020-01-01T000000.000Z", "2020-01-01T00:00:00Z");
    let renamed = nightly_dir.join("2099-12-31T235959.999Z");
    copy_tree(&first, &renamed);
    let future = night_copy(&first, "2098-01-01T000000.000Z", "2098-01-01T00:00:00Z");
    let keep: Vec<PathBuf> =
        [&renamed, &future, &nightly_dir.join("notes"), &nightly_dir.join(".mine.partial")].into_iter().map(|p| canary(p)).collect();
    let old_canaries = [canary(&older), canary(&first)];
    let n = nightly(&o, &data, &["--keep", "1"]);
    assert_eq!(n.status.code(), Some(0), "{}\n{}", stdout(&n), stderr(&n));
    let (out, err) = (stdout(&n), stderr(&n));
    // The night it wrote exists, is the path it printed, and compared with the real previous night.
    let report = out.lines().find_map(|l| l.strip_prefix("report: ")).expect("report line");
    assert!(Path::new(report).is_file(), "printed {report}, which does not exist");
    let written = Path::new(report).parent().expect("night").to_path_buf();
    assert!(out.contains(&format!("compared with {}", first.file_name().expect("n").to_string_lossy())), "{out}");
    // Only the earlier real nights are pruned.
    assert!(!older.exists() && !first.exists(), "{out}");
    for c in &old_canaries {
        assert!(!c.exists());
    }
    assert!(out.contains(&format!("pruned {}", older.display())) && out.contains(&format!("pruned {}", first.display())), "{out}");
    assert!(!out.contains(&format!("pruned {}", written.display())), "{out}");
    for c in &keep {
        alive(c);
    }
    assert!(err.contains(&format!("{}: not a night of this folder", renamed.display())), "{err}");
    assert!(err.contains(&format!("{}: claims to have run after this night", future.display())), "{err}");
    assert!(err.contains(&format!("{}: not a night's folder", nightly_dir.join("notes").display())), "{err}");
    let mut left = night_names(&o);
    left.retain(|n| n.starts_with("20") && !n.starts_with("2098") && !n.starts_with("2099"));
    assert_eq!(left, [written.file_name().expect("n").to_string_lossy().into_owned()]);
}

#[test]
fn an_incomplete_night_is_skipped_and_the_complete_one_before_it_is_the_baseline() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, first, data) = with_night(d.path());
    let nightly_dir = o.join("nightly");
    // Later than `first`: one without its leaderboard, one without provenance, one whose
    // regressions table is not Parquet.
    let no_lb = night_copy(&first, "2000-01-02T000000.000Z", "2000-01-02T00:00:00Z");
    std::fs::remove_file(no_lb.join("leaderboard.parquet")).expect("rm");
    let no_prov = night_copy(&first, "2000-01-03T000000.000Z", "2000-01-03T00:00:00Z");
    std::fs::remove_file(no_prov.join("provenance.json")).expect("rm");
    let bad_table = night_copy(&first, "2000-01-04T000000.000Z", "2000-01-04T00:00:00Z");
    std::fs::write(bad_table.join("regressions.parquet"), "PAR1 not really").expect("write");
    // `first` ran before them (its provenance says so): move it back in time.
    let base = night_copy(&first, "2000-01-01T000000.000Z", "2000-01-01T00:00:00Z");
    std::fs::remove_dir_all(&first).expect("rm");
    let canaries: Vec<PathBuf> = [&no_lb, &no_prov, &bad_table].into_iter().map(|p| canary(p)).collect();
    let n = nightly(&o, &data, &["--keep", "0"]);
    assert_eq!(n.status.code(), Some(0), "{}\n{}", stdout(&n), stderr(&n));
    let (out, err) = (stdout(&n), stderr(&n));
    assert!(out.contains("compared with 2000-01-01T000000.000Z: 0 regression(s)"), "{out}");
    for p in [&no_lb, &bad_table] {
        assert!(err.contains(&format!("warning: {}: skipped as the baseline", p.display())), "{err}");
    }
    assert!(err.contains(&format!("warning: {}: an incomplete night", no_prov.display())), "{err}");
    for c in &canaries {
        alive(c);
    }
    assert!(base.is_dir() && nightly_dir.join("2000-01-02T000000.000Z").is_dir());
    // The new night names its baseline.
    let written =
        nightly_dir.join(out.lines().find_map(|l| l.strip_prefix("report: ")).and_then(|r| Path::new(r).parent()).expect("night"));
    assert_eq!(read_json(&written.join("provenance.json"))["previous"], "2000-01-01T000000.000Z");
}

#[test]
fn a_night_without_any_dataset_fails_and_is_never_a_baseline() {
    let d = tempfile::tempdir().expect("tmp");
    let (o, first, data) = with_night(d.path());
    let first_name = first.file_name().expect("n").to_string_lossy().into_owned();
    // A data root that is not there: refused before anything runs (flag or variable).
    let before = night_names(&o);
    let r = nightly(&o, &d.path().join("unmounted"), &[]);
    refused(&r, 78, &["--data-root", "unmounted", "not a folder"]);
    let mut c = cmd();
    c.arg("--outputs").arg(&o).arg("--quiet").arg("nightly").args(FAST).env("TGRAG_DATA_ROOT", d.path().join("gone"));
    refused(&c.output().expect("spawn"), 78, &["TGRAG_DATA_ROOT=", "gone", "not a folder"]);
    assert_eq!(night_names(&o), before);
    // Every requested dataset unavailable: exit 5, the earlier night kept even with --keep 1.
    let r = nightly(&o, &data, &["--datasets", "enron,citeseer", "--keep", "1"]);
    assert_eq!(r.status.code(), Some(5), "{}\n{}", stdout(&r), stderr(&r));
    assert!(stderr(&r).contains("no dataset ran: every one of the 2 dataset(s)"), "{}", stderr(&r));
    assert!(stdout(&r).contains("unavailable") && !stdout(&r).lines().any(|l| l.starts_with("pruned ")), "{}", stdout(&r));
    assert!(first.is_dir(), "the last real night was pruned by an empty one");
    let names = night_names(&o);
    assert_eq!(names.len(), 2, "{names:?}");
    let empty = names.iter().find(|n| **n != first_name).expect("the empty night").clone();
    // The next night compares with the real one, and says why not with the empty one.
    let n = nightly(&o, &data, &["--keep", "0"]);
    assert_eq!(n.status.code(), Some(0), "{}\n{}", stdout(&n), stderr(&n));
    assert!(stdout(&n).contains(&format!("compared with {first_name}: 0 regression(s)")), "{}", stdout(&n));
    assert!(stderr(&n).contains(&format!("{empty}: no dataset ran that night; not a baseline")), "{}", stderr(&n));
}
