//! Plain HTTP(S) downloads with the hub module's safety rules: the body goes to a `.part` file in
//! the download folder (never to its final name), a size bound applies before and while bytes
//! arrive, the sha256 is checked before the file is kept, and only then is it renamed into place.
//! An interrupted download keeps its `.part` file and the next call resumes it with a `Range`
//! request (a server that answers 200 instead of 206 restarts it from zero). The bounds are the
//! hub's (`TGRAG_HUB_CONNECT_TIMEOUT`, `TGRAG_HUB_TIMEOUT` without a new byte,
//! `TGRAG_HUB_TOTAL_TIMEOUT`).
//!
//! A wrong sha256 removes the `.part` file (its bytes are not the pinned ones, resuming would
//! not help); a body shorter than its `Content-Length` keeps it, so that the next call resumes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures::StreamExt;

use crate::error::{DatasetError, Result};
use crate::hub::Timeouts;

/// A finished, checked download.
#[derive(Debug, Clone, PartialEq)]
pub struct Downloaded {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    /// Bytes that were already there from an earlier, interrupted call.
    pub resumed_from: u64,
}

/// Progress of one download: bytes so far and the total when the server says it.
pub type OnProgress<'a> = &'a dyn Fn(u64, Option<u64>);

fn fail(url: &str, reason: String) -> DatasetError {
    let (base, file) = url.rsplit_once('/').unwrap_or((url, ""));
    DatasetError::Download { repo: base.to_string(), file: file.to_string(), reason }
}

/// Downloads `url` to `dir/name` (a plain file name), resuming `dir/name.part`; refuses more than
/// `max_bytes` and bytes whose sha256 is not `sha256` (when given).
pub fn download(url: &str, dir: &Path, name: &str, sha256: Option<&str>, max_bytes: u64, progress: OnProgress<'_>) -> Result<Downloaded> {
    if name.is_empty() || name.contains(['/', '\\', '\0']) || name.starts_with('.') {
        return Err(fail(url, format!("`{name}` is not a plain file name")));
    }
    std::fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
    let (part, dest) = (dir.join(format!("{name}.part")), dir.join(name));
    // One download into a folder at a time: a second fetch would write into the same `.part`.
    let _lock = lock_folder(url, dir)?;
    let t = Timeouts::from_env()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(url, format!("cannot start the HTTP runtime: {e}")))?;
    let resumed_from = rt.block_on(fetch_into(url, &part, max_bytes, &t, progress))?;
    let sha = crate::hub::sha256_file(&part)?;
    let bytes = std::fs::metadata(&part).map_err(|e| DatasetError::io(&part, e))?.len();
    if let Some(want) = sha256
        && !want.eq_ignore_ascii_case(&sha)
    {
        let _ = std::fs::remove_file(&part);
        return Err(fail(url, format!("sha256 {sha} differs from the pinned {want} ({bytes} bytes); nothing was kept")));
    }
    std::fs::rename(&part, &dest).map_err(|e| DatasetError::io(&dest, e))?;
    Ok(Downloaded { path: dest, sha256: sha, bytes, resumed_from })
}

/// The HTTP client of every plain request, with the hub's bounds.
fn client(url: &str, t: &Timeouts) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(t.connect)
        .read_timeout(t.stall)
        .timeout(t.total)
        .user_agent(concat!("tgrag/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| fail(url, format!("cannot start the HTTP client: {e}")))
}

/// One JSON document from `url` (at most `max_bytes`), with `Authorization: Bearer <token>` when a
/// token is given, and the `rel="next"` target of its `Link` header (how the hub pages listings).
pub(crate) fn get_json(url: &str, token: Option<&str>, max_bytes: usize) -> Result<(serde_json::Value, Option<String>)> {
    let t = Timeouts::from_env()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(url, format!("cannot start the HTTP runtime: {e}")))?;
    rt.block_on(async {
        let mut req = client(url, &t)?.get(url);
        if let Some(tok) = token {
            req = req.bearer_auth(tok);
        }
        let resp = req.send().await.map_err(|e| fail(url, describe(&e, &t)))?;
        if !resp.status().is_success() {
            return Err(fail(url, format!("HTTP {}", resp.status())));
        }
        let next = resp.headers().get(reqwest::header::LINK).and_then(|v| v.to_str().ok()).and_then(next_link);
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            body.extend_from_slice(&chunk.map_err(|e| fail(url, describe(&e, &t)))?);
            if body.len() > max_bytes {
                return Err(fail(url, format!("an answer of more than {max_bytes} bytes")));
            }
        }
        let json = serde_json::from_slice(&body).map_err(|e| fail(url, format!("not JSON: {e}")))?;
        Ok((json, next))
    })
}

/// The `rel="next"` URL of a `Link` header (`<url>; rel="next", <url>; rel="last"`).
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        is_next.then(|| target.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

/// Streams `url` into `part` (appending from its length when the server honours `Range`).
/// Returns the length the download resumed from.
async fn fetch_into(url: &str, part: &Path, max_bytes: u64, t: &Timeouts, progress: OnProgress<'_>) -> Result<u64> {
    let client = client(url, t)?;
    let have = match std::fs::symlink_metadata(part) {
        Ok(m) if m.is_file() && single_link(&m) => m.len(),
        Ok(_) => return Err(not_ours(url, part)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(DatasetError::io(part, e)),
    };
    let mut req = client.get(url);
    if have > 0 {
        req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
    }
    let resp = req.send().await.map_err(|e| fail(url, describe(&e, t)))?;
    let status = resp.status();
    let resumed = match status.as_u16() {
        206 if have > 0 => {
            let range = resp.headers().get(reqwest::header::CONTENT_RANGE).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !range.starts_with(&format!("bytes {have}-")) {
                // Resuming cannot succeed against this answer: start over next time.
                let _ = std::fs::remove_file(part);
                return Err(fail(
                    url,
                    format!(
                        "asked for bytes from {have}, the server sent `Content-Range: {range}`; the partial download {} was removed: run the same command again to download from the start",
                        part.display()
                    ),
                ));
            }
            have
        }
        200 => 0,
        // The part file already holds everything (or more than the server has): start over.
        416 if have > 0 => {
            let _ = std::fs::remove_file(part);
            return Box::pin(fetch_into(url, part, max_bytes, t, progress)).await;
        }
        _ => return Err(fail(url, format!("HTTP {status}"))),
    };
    let total = match resp.content_length() {
        Some(n) => match n.checked_add(resumed) {
            Some(total) => Some(total),
            None => return Err(fail(url, format!("{n} more bytes announced after {resumed}: more than any file can hold"))),
        },
        None => None,
    };
    if let Some(n) = total
        && n > max_bytes
    {
        return Err(fail(url, format!("{n} bytes announced, more than the {max_bytes} this dataset is allowed")));
    }
    let mut file = open_part(url, part, resumed)?;
    let mut got = resumed;
    progress(got, total);
    let start = Instant::now();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = file.flush();
                return Err(fail(url, format!("{} after {got} bytes; run the same command again to resume", describe(&e, t))));
            }
        };
        got += chunk.len() as u64;
        if got > max_bytes {
            drop(file);
            let _ = std::fs::remove_file(part);
            return Err(fail(url, format!("more than the {max_bytes} bytes this dataset is allowed; nothing was kept")));
        }
        file.write_all(&chunk).map_err(|e| DatasetError::io(part, e))?;
        progress(got, total);
    }
    file.flush().map_err(|e| DatasetError::io(part, e))?;
    if let Some(n) = total
        && got != n
    {
        return Err(fail(
            url,
            format!(
                "the body ended after {got} of {n} bytes ({:.1} s); run the same command again to resume",
                start.elapsed().as_secs_f64()
            ),
        ));
    }
    Ok(resumed)
}

/// Whether a file has no other name (a hard link to a file elsewhere would be written through).
fn single_link(m: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        m.nlink() == 1
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        true
    }
}

/// The error for a `.part` that is not a plain file of this download's own.
fn not_ours(url: &str, part: &Path) -> DatasetError {
    fail(
        url,
        format!(
            "{} is not a plain file of its own (a symlink, a hard link, a FIFO or a folder): it is never written through; remove it and run the same command again",
            part.display()
        ),
    )
}

/// Opens the `.part` file for writing without following anything in its place: a fresh download
/// removes what is there and creates the file anew (`create_new`: never a link's target); a resumed
/// one opens the existing file without following a symlink or blocking on a FIFO, and writes only
/// if it is still one plain file with a single name.
fn open_part(url: &str, part: &Path, resumed: u64) -> Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    if resumed == 0 {
        match std::fs::remove_file(part) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return Err(not_ours(url, part)),
        }
        opts.create_new(true);
    } else {
        opts.append(true);
    }
    let file = match opts.open(part) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(not_ours(url, part)),
        #[cfg(unix)]
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENXIO) | Some(libc::EISDIR)) => {
            return Err(not_ours(url, part));
        }
        Err(e) => return Err(DatasetError::io(part, e)),
    };
    let meta = file.metadata().map_err(|e| DatasetError::io(part, e))?;
    if !meta.is_file() || !single_link(&meta) || meta.len() != resumed {
        return Err(not_ours(url, part));
    }
    Ok(file)
}

/// Holds `dir/.lock` exclusively (an advisory lock, released when the returned file is dropped):
/// a second download into the same folder is refused instead of sharing its `.part` files.
fn lock_folder(url: &str, dir: &Path) -> Result<std::fs::File> {
    let path = dir.join(".lock");
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = opts.open(&path).map_err(|e| DatasetError::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(fail(
            url,
            format!(
                "another download is writing into {} (it holds {}); wait for it to end, then run this command again",
                dir.display(),
                path.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(DatasetError::io(&path, e)),
    }
}

/// A reqwest error in words, naming the bound that ended it.
fn describe(e: &reqwest::Error, t: &Timeouts) -> String {
    if e.is_connect() {
        format!("cannot connect ({e}; TGRAG_HUB_CONNECT_TIMEOUT {} s)", t.connect.as_secs_f64())
    } else if e.is_timeout() {
        format!(
            "timed out ({e}; TGRAG_HUB_TIMEOUT {} s without a byte, TGRAG_HUB_TOTAL_TIMEOUT {} s in all)",
            t.stall.as_secs_f64(),
            t.total.as_secs_f64()
        )
    } else {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(c) = src {
            s.push_str(&format!(": {c}"));
            src = c.source();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::next_link;

    #[test]
    fn next_link_follows_the_hubs_paging_header() {
        let h = "<https://huggingface.co/api/datasets/a/b/tree/c?cursor=xyz&recursive=true>; rel=\"next\"";
        assert_eq!(next_link(h).as_deref(), Some("https://huggingface.co/api/datasets/a/b/tree/c?cursor=xyz&recursive=true"));
        assert_eq!(next_link("<https://x/1>; rel=\"prev\", <https://x/3>; rel=\"next\"").as_deref(), Some("https://x/3"));
        assert_eq!(next_link("<https://x/1>; rel=\"last\""), None);
        assert_eq!(next_link(""), None);
    }
}
