//! One writer per folder: `tgrag run` holds `<outputs>/<dataset>/.tgrag.lock` for its whole life, the
//! file tools hold the lock of the folder they write into. The lock is the operating system's
//! advisory file lock (`flock`), so a process that dies, even by SIGKILL, releases it and the next
//! run takes it over; the file's content names the holder (pid, host, start time, command) so that a
//! refused run can say who holds it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The lock file's name inside the locked folder.
pub const LOCK_FILE: &str = ".tgrag.lock";

/// Exit code of a run refused because another process holds the lock.
pub const EXIT_LOCKED: i32 = 3;

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct FolderLock {
    file: File,
    /// The folder, when this lock created it: released with nothing else in it (a command that
    /// failed before writing), it is removed again, so that a refused command leaves no trace.
    created: Option<PathBuf>,
}

/// Another process holds the lock.
#[derive(Debug)]
pub struct Locked {
    pub folder: String,
    pub holder: String,
}

impl std::fmt::Display for Locked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is in use by another tgrag process ({}); wait for it to finish, or pass --wait", self.folder, self.holder)
    }
}

impl std::error::Error for Locked {}

/// This machine's name (the kernel's, else `$HOSTNAME`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown host".into())
}

fn holder_line() -> String {
    let host = hostname();
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let command: Vec<String> = std::env::args().collect();
    format!("pid {} on {host}, started {} (unix {start}), command `{}`", std::process::id(), utc(start), command.join(" "))
}

/// `YYYY-MM-DDTHH:MM:SSZ` of a unix time (civil-from-days, no time-zone crate needed).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

impl FolderLock {
    /// Takes the lock of `folder` (created if missing). With `wait`, blocks until the holder is done
    /// (printing once who it waits for); otherwise a held lock is a [`Locked`] error.
    pub fn acquire(folder: &Path, wait: bool) -> Result<FolderLock> {
        let created = (!folder.exists()).then(|| folder.to_path_buf());
        std::fs::create_dir_all(folder).with_context(|| format!("creating {}", folder.display()))?;
        let path = folder.join(LOCK_FILE);
        let mut file = open_lock_file(&path)?;
        let mut said = false;
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let holder = read_holder(&mut file);
                    if !wait {
                        return Err(Locked { folder: folder.display().to_string(), holder }.into());
                    }
                    if !said {
                        eprintln!("waiting for {} ({holder})", folder.display());
                        said = true;
                    }
                    std::thread::sleep(Duration::from_millis(if started.elapsed() < Duration::from_secs(5) { 50 } else { 500 }));
                }
                Err(TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
            }
        }
        // A holder line left behind names a process that died without releasing: say so.
        let previous = read_holder(&mut file);
        if !previous.is_empty() && previous != "holder unknown" {
            eprintln!("note: took over the lock of {} left by a process that is gone ({previous})", folder.display());
        }
        file.set_len(0).and_then(|()| file.seek(SeekFrom::Start(0))).with_context(|| format!("writing {}", path.display()))?;
        file.write_all(holder_line().as_bytes()).and_then(|()| file.flush()).with_context(|| format!("writing {}", path.display()))?;
        Ok(FolderLock { file, created })
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // An empty file marks a clean release; the OS lock goes with the handle.
        let _ = self.file.set_len(0);
        if let Some(folder) = &self.created {
            let only_lock = std::fs::read_dir(folder)
                .map(|entries| entries.filter_map(|e| e.ok()).all(|e| e.file_name() == LOCK_FILE))
                .unwrap_or(false);
            if only_lock {
                // Unlinked while still held, so no other process can take a lock on a file that vanishes.
                let _ = std::fs::remove_file(folder.join(LOCK_FILE));
                let _ = std::fs::remove_dir(folder);
            }
        }
        let _ = self.file.unlock();
    }
}

/// Opens (or creates) the lock file without following a symbolic link (`O_NOFOLLOW`: a link planted
/// as the lock file would otherwise be truncated through, and one to `/dev/zero` read forever) and
/// without blocking on a FIFO; anything but a regular file is refused with its path.
fn open_lock_file(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(tgrag_schemas::SchemaError::NotOwned {
                path: path.to_path_buf(),
                reason: "the lock file is a symbolic link".into(),
            }
            .into());
        }
        Err(e) => return Err(e).with_context(|| format!("opening the lock file {}", path.display())),
    };
    let meta = file.metadata().with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        return Err(tgrag_schemas::SchemaError::NotOwned {
            path: path.to_path_buf(),
            reason: "the lock file is not a regular file".into(),
        }
        .into());
    }
    Ok(file)
}

/// The most bytes of a lock file read for its holder line (a real one is under 1 KB).
const HOLDER_MAX_BYTES: u64 = 4096;

fn read_holder(file: &mut File) -> String {
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(0)).is_ok() && Read::by_ref(file).take(HOLDER_MAX_BYTES).read_to_end(&mut bytes).is_ok() {
        let s = String::from_utf8_lossy(&bytes);
        let s: String = s.trim().chars().filter(|c| !c.is_control()).take(400).collect();
        if !s.is_empty() {
            return s;
        }
    }
    "holder unknown".into()
}

/// The folder a file tool writes `out` into (its parent; `.` for a bare file name).
pub fn folder_of(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The folder whose lock guards writes into `folder`: `<outputs>/<dataset>` when `folder` lies
/// inside a dataset folder of `outputs` (where `tgrag run` holds the lock), else `folder` itself.
pub fn owner_folder(outputs: &Path, folder: &Path) -> PathBuf {
    let abs = |p: &Path| -> Option<PathBuf> {
        let p = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().ok()?.join(p) };
        // Canonicalise the longest existing ancestor (the folder itself may not exist yet).
        let mut existing = p.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            rest.push(existing.file_name()?.to_os_string());
            existing = existing.parent()?;
        }
        let mut c = existing.canonicalize().ok()?;
        for r in rest.into_iter().rev() {
            c.push(r);
        }
        Some(c)
    };
    match (abs(outputs), abs(folder)) {
        (Some(o), Some(f)) => match f.strip_prefix(&o).ok().and_then(|r| r.components().next()) {
            Some(std::path::Component::Normal(ds)) => o.join(ds),
            _ => folder.to_path_buf(),
        },
        _ => folder.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_matches_known_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_996_800 + 3_661), "2026-11-30T01:01:01Z");
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holder_then_taken_after_release() {
        let d = tempfile::tempdir().expect("tmp");
        let first = FolderLock::acquire(d.path(), false).expect("first");
        let e = FolderLock::acquire(d.path(), false).expect_err("second must be refused");
        let msg = e.to_string();
        assert!(msg.contains(&format!("pid {}", std::process::id())) && msg.contains("--wait"), "{msg}");
        drop(first);
        let again = FolderLock::acquire(d.path(), false).expect("free after release");
        let holder = std::fs::read_to_string(d.path().join(LOCK_FILE)).expect("lock file");
        assert!(holder.starts_with(&format!("pid {}", std::process::id())), "{holder}");
        drop(again);
        assert_eq!(std::fs::read_to_string(d.path().join(LOCK_FILE)).expect("lock file"), "", "a clean release empties the file");
    }

    #[test]
    fn a_planted_lock_file_is_never_followed_truncated_or_read_unbounded() {
        let d = tempfile::tempdir().expect("tmp");
        let canary = d.path().join("canary");
        std::fs::write(&canary, b"keep me").expect("canary");
        let (a, b, c) = (d.path().join("a"), d.path().join("b"), d.path().join("c"));
        for f in [&a, &b, &c] {
            std::fs::create_dir_all(f).expect("dir");
        }
        std::os::unix::fs::symlink(&canary, a.join(LOCK_FILE)).expect("link");
        let e = FolderLock::acquire(&a, false).expect_err("linked lock").to_string();
        assert!(e.contains("the lock file is a symbolic link") && e.contains(LOCK_FILE), "{e}");
        assert_eq!(std::fs::read(&canary).expect("canary"), b"keep me");
        std::os::unix::fs::symlink("/dev/zero", b.join(LOCK_FILE)).expect("link");
        assert!(FolderLock::acquire(&b, false).expect_err("linked lock").to_string().contains("symbolic link"));
        std::fs::create_dir(c.join(LOCK_FILE)).expect("a folder as lock");
        assert!(FolderLock::acquire(&c, false).is_err());
        // A huge holder line is read up to a bound, without control characters.
        let big = d.path().join("big");
        std::fs::create_dir_all(&big).expect("dir");
        let first = FolderLock::acquire(&big, false).expect("lock");
        let mut f = OpenOptions::new().write(true).open(big.join(LOCK_FILE)).expect("open");
        f.write_all(&vec![b'x'; 10 << 20]).expect("fill");
        let msg = FolderLock::acquire(&big, false).expect_err("held").to_string();
        assert!(msg.len() < 2000, "{} bytes", msg.len());
        drop(first);
    }

    #[test]
    fn a_tool_writing_into_a_dataset_folder_takes_the_dataset_lock() {
        let d = tempfile::tempdir().expect("tmp");
        let outputs = d.path().join("outputs");
        std::fs::create_dir_all(outputs.join("synthetic/bm25")).expect("mkdir");
        assert_eq!(owner_folder(&outputs, &outputs.join("synthetic/bm25")), outputs.canonicalize().expect("c").join("synthetic"));
        assert_eq!(owner_folder(&outputs, &outputs.join("synthetic/new/deeper")), outputs.canonicalize().expect("c").join("synthetic"));
        let elsewhere = d.path().join("elsewhere");
        assert_eq!(owner_folder(&outputs, &elsewhere), elsewhere);
        assert_eq!(owner_folder(&outputs, &outputs), outputs);
    }

    #[test]
    fn a_folder_the_lock_created_goes_away_when_nothing_was_written_into_it() {
        let d = tempfile::tempdir().expect("tmp");
        let (empty, used) = (d.path().join("a/b"), d.path().join("c"));
        drop(FolderLock::acquire(&empty, false).expect("lock"));
        assert!(!empty.exists(), "a refused command must leave no folder behind");
        let l = FolderLock::acquire(&used, false).expect("lock");
        std::fs::write(used.join("out.parquet"), b"x").expect("write");
        drop(l);
        assert!(used.join("out.parquet").exists() && used.join(LOCK_FILE).exists(), "a folder with results stays");
    }
}
