//! Turning downloads into a dataset folder, safely: every archive entry name is checked as
//! `archive::ZipFiles` checks it (no absolute path, no `..`, no backslash), only regular files are
//! written (tar links, devices and FIFOs are skipped), a total size bound applies to what is
//! unpacked, and everything goes into a staging folder the caller renames into place only when the
//! whole dataset is there.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{DatasetError, Result};
use crate::sources::Unpack;

/// A relative path from an archive, checked: plain components only. `None` when it escapes.
fn safe_rel(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') || name.contains('\\') || name.contains('\0') {
        return None;
    }
    let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.is_empty() || parts.contains(&"..") {
        return None;
    }
    Some(parts.iter().collect())
}

/// How many times its compressed size an archive may unpack to (plus [`RATIO_SLACK`]): text
/// compresses 3-20 times, deflate at most about 1,030 times, so only a bomb comes near.
const MAX_RATIO: u64 = 100;
/// Bytes allowed beyond [`MAX_RATIO`] (tiny entries compress badly either way).
const RATIO_SLACK: u64 = 1 << 20;
/// The largest Enron message kept (the corpus's largest is a few MB).
const MAX_MESSAGE_BYTES: u64 = 64 << 20;

/// The most `compressed` bytes may unpack to under the ratio bound.
fn ratio_bound(compressed: u64) -> u64 {
    compressed.saturating_mul(MAX_RATIO).saturating_add(RATIO_SLACK)
}

/// The error for an archive that unpacks to more than the dataset's size bound.
fn over_bound(archive: &Path, entry: &str) -> DatasetError {
    DatasetError::malformed(archive, format!("entry {entry}"), "unpacks to more than the size bound of this dataset")
}

/// The error for an archive that unpacks to more than its ratio bound.
fn bomb(archive: &Path, entry: &str) -> DatasetError {
    DatasetError::malformed(
        archive,
        format!("entry {entry}"),
        format!("unpacks to more than {MAX_RATIO} times its compressed size (a decompression bomb, not a dataset); nothing was kept"),
    )
}

/// Copies at most `left` bytes of `r` into a new file `to` (its folders made inside `root`);
/// returns the bytes written. What the archive gets wrong (the entry `name` appearing twice, bytes
/// that fail their checksum or do not inflate, more than `left`: a bomb when `ratio`, the ratio
/// bound being the tighter one) is named by the archive and entry; only a failing write is the
/// staging folder's.
fn write_entry(root: &Path, rel: &Path, r: &mut dyn Read, (left, ratio): (u64, bool), archive: &Path, name: &str) -> Result<u64> {
    let to = root.join(rel);
    let entry = || format!("entry {name}");
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p).map_err(|e| DatasetError::io(p, e))?;
    }
    let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).open(&to) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(DatasetError::malformed(archive, entry(), "appears twice in the archive (a dataset has one file per name)"));
        }
        Err(e) => return Err(DatasetError::io(&to, e)),
    };
    let (mut n, mut buf) = (0u64, vec![0u8; 1 << 16]);
    loop {
        let got = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DatasetError::malformed(archive, entry(), format!("cannot be unpacked: {e}"))),
        };
        n += got as u64;
        if n > left {
            return Err(if ratio { bomb(archive, name) } else { over_bound(archive, name) });
        }
        f.write_all(&buf[..got]).map_err(|e| DatasetError::io(&to, e))?;
    }
    f.flush().map_err(|e| DatasetError::io(&to, e))?;
    Ok(n)
}

/// Unpacks the downloaded `file` into `staging` as `how` says; `max_bytes` bounds what is written.
/// Returns the relative paths written.
pub fn unpack(file: &Path, how: Unpack, staging: &Path, max_bytes: u64) -> Result<Vec<String>> {
    match how {
        Unpack::File(rel) => keep_file(file, rel, staging),
        Unpack::Zip { strip, keep, into } => unpack_zip(file, Filter { strip, keep, into }, staging, max_bytes),
        Unpack::TarGz { strip, into } => unpack_tar_gz(file, Filter { strip, keep: &[], into }, staging, max_bytes),
        Unpack::EnronMaildir => unpack_enron(file, staging, max_bytes),
    }
}

/// Which archive entries go where: `strip` removed from the front, kept when the rest ends with
/// one of `keep` (all when empty), written to `into/<rest>`.
#[derive(Clone, Copy)]
struct Filter {
    strip: &'static str,
    keep: &'static [&'static str],
    into: &'static str,
}

/// `Unpack::File`: the download moved to `staging/rel`.
fn keep_file(file: &Path, rel: &str, staging: &Path) -> Result<Vec<String>> {
    let rel_path = safe_rel(rel).ok_or_else(|| DatasetError::Config(format!("catalogue path `{rel}` is not plain")))?;
    let to = staging.join(&rel_path);
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p).map_err(|e| DatasetError::io(p, e))?;
    }
    std::fs::rename(file, &to).map_err(|e| DatasetError::io(&to, e))?;
    Ok(vec![rel.to_string()])
}

/// The error for an archive entry whose name escapes its folder.
fn escapes(file: &Path, name: &str) -> DatasetError {
    DatasetError::malformed(file, format!("entry `{name}`"), "escapes its folder (absolute path or `..`)")
}

/// The error for an unreadable `.tar.gz`.
fn bad_tar_gz(file: &Path, e: &std::io::Error) -> DatasetError {
    DatasetError::malformed(file, "archive", format!("not a readable .tar.gz: {e}"))
}

/// `Unpack::Zip`: the file entries `filter` keeps.
fn unpack_zip(file: &Path, filter: Filter, staging: &Path, max_bytes: u64) -> Result<Vec<String>> {
    let mut written = Vec::new();
    let opened = std::fs::File::open(file).map_err(|e| DatasetError::io(file, e))?;
    let mut zip =
        zip::ZipArchive::new(opened).map_err(|e| DatasetError::malformed(file, "archive", format!("not a readable zip file: {e}")))?;
    let mut left = max_bytes;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| DatasetError::malformed(file, format!("entry #{i}"), e.to_string()))?;
        let name = entry.name().map(|n| n.into_owned()).unwrap_or_default();
        if entry.is_dir() {
            continue;
        }
        let checked = safe_rel(&name).filter(|_| entry.enclosed_name().is_some());
        let Some(_) = checked else {
            return Err(escapes(file, &name));
        };
        let Some(rest) = name.strip_prefix(filter.strip) else { continue };
        if !filter.keep.is_empty() && !filter.keep.iter().any(|k| rest.ends_with(k)) {
            continue;
        }
        let Some(rel) = safe_rel(&joined(filter.into, rest)) else { continue };
        let bound = ratio_bound(entry.compressed_size());
        let n = write_entry(staging, &rel, &mut entry, (left.min(bound), left > bound), file, &name)?;
        left -= n;
        written.push(rel.display().to_string());
    }
    Ok(written)
}

/// `Unpack::TarGz`: the regular-file entries, `filter.strip` removed, under `filter.into`.
fn unpack_tar_gz(file: &Path, filter: Filter, staging: &Path, max_bytes: u64) -> Result<Vec<String>> {
    let mut written = Vec::new();
    let opened = std::fs::File::open(file).map_err(|e| DatasetError::io(file, e))?;
    let bound = ratio_bound(opened.metadata().map_err(|e| DatasetError::io(file, e))?.len());
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(opened));
    // The whole tarball is one gzip stream: the ratio bound applies to everything it unpacks to.
    let mut left = max_bytes.min(bound);
    let entries = tar.entries().map_err(|e| bad_tar_gz(file, &e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad_tar_gz(file, &e))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(_) = safe_rel(&name) else {
            return Err(escapes(file, &name));
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Some(rest) = name.strip_prefix(filter.strip) else { continue };
        let Some(rel) = safe_rel(&joined(filter.into, rest)) else { continue };
        let n = write_entry(staging, &rel, &mut entry, (left, max_bytes > bound), file, &name)?;
        left -= n;
        written.push(rel.display().to_string());
    }
    Ok(written)
}

/// `Unpack::EnronMaildir`: one `emails.csv` row per message file under `maildir/`.
fn unpack_enron(file: &Path, staging: &Path, max_bytes: u64) -> Result<Vec<String>> {
    let opened = std::fs::File::open(file).map_err(|e| DatasetError::io(file, e))?;
    let bound = ratio_bound(opened.metadata().map_err(|e| DatasetError::io(file, e))?.len());
    let (bombed, max_bytes) = (max_bytes > bound, max_bytes.min(bound));
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(opened));
    let out_path = staging.join("emails.csv");
    let out = std::fs::OpenOptions::new().write(true).create_new(true).open(&out_path).map_err(|e| DatasetError::io(&out_path, e))?;
    let mut out = std::io::BufWriter::new(out);
    out.write_all(b"file,message\n").map_err(|e| DatasetError::io(&out_path, e))?;
    let (mut left, mut rows) = (max_bytes, 0usize);
    let entries = tar.entries().map_err(|e| bad_tar_gz(file, &e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad_tar_gz(file, &e))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(rel) = name.split_once("maildir/").map(|(_, r)| r.to_string()).filter(|r| safe_rel(r).is_some()) else {
            continue;
        };
        let row = message_row(file, &name, &rel, &mut entry, (&mut left, bombed))?;
        out.write_all(row.as_bytes()).map_err(|e| DatasetError::io(&out_path, e))?;
        rows += 1;
    }
    out.flush().map_err(|e| DatasetError::io(&out_path, e))?;
    if rows == 0 {
        return Err(DatasetError::malformed(file, "archive", "no message under maildir/ (not CMU's Enron tarball)"));
    }
    Ok(vec!["emails.csv".into()])
}

/// One message's `emails.csv` row (`rel`, the message as text); reads at most `left` bytes of it
/// and takes them off `left`.
fn message_row(file: &Path, name: &str, rel: &str, entry: &mut dyn Read, (left, ratio): (&mut u64, bool)) -> Result<String> {
    let mut body = Vec::new();
    let cap = (*left).min(MAX_MESSAGE_BYTES);
    let n = entry.take(cap.saturating_add(1)).read_to_end(&mut body).map_err(|e| DatasetError::io(file, e))?;
    if n as u64 > MAX_MESSAGE_BYTES {
        return Err(DatasetError::malformed(
            file,
            format!("entry {name}"),
            format!(
                "a message of more than {} MiB (not CMU's Enron corpus, whose largest is a few MB); nothing was kept",
                MAX_MESSAGE_BYTES >> 20
            ),
        ));
    }
    if n as u64 > *left {
        return Err(if ratio { bomb(file, name) } else { over_bound(file, name) });
    }
    *left -= n as u64;
    // The messages are Latin-1 in places: kept as text, invalid bytes replaced.
    let message = String::from_utf8_lossy(&body).replace("\r\n", "\n");
    Ok(format!("{},{}\n", csv_field(rel), csv_field(&message)))
}

/// `into/rest`, or `rest` when `into` is empty.
fn joined(into: &str, rest: &str) -> String {
    if into.is_empty() { rest.to_string() } else { format!("{into}/{rest}") }
}

/// An RFC 4180 field: quoted, `"` doubled.
fn csv_field(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enron_maildir_tarball_becomes_emails_csv() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let d = tempfile::tempdir()?;
        let tgz = d.path().join("enron.tar.gz");
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(std::fs::File::create(&tgz)?, flate2::Compression::fast()));
        let msg = b"Message-ID: <1>\r\nFrom: a@enron.com\r\nTo: b@enron.com\r\nSubject: \"hi\"\r\n\r\nbody, with a comma\r\n";
        for (name, body) in [("maildir/allen-p/sent/1.", &msg[..]), ("README", b"x")] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, body)?;
        }
        b.into_inner()?.finish()?;
        let staging = d.path().join("s");
        std::fs::create_dir(&staging)?;
        assert_eq!(unpack(&tgz, Unpack::EnronMaildir, &staging, 1 << 20)?, vec!["emails.csv".to_string()]);
        let emails = crate::enron::read_csv(&staging.join("emails.csv"))?;
        assert_eq!(emails.len(), 1);
        assert_eq!((emails[0].file.as_str(), emails[0].from.as_str()), ("allen-p/sent/1.", "a@enron.com"));
        assert!(emails[0].body.contains("body, with a comma"), "{:?}", emails[0].body);
        Ok(())
    }

    /// An Enron message above the per-message bound is refused naming the entry, inside the total
    /// bound and before it is held in memory; a zip entry and a tarball that unpack to more than
    /// the ratio bound are refused as bombs, each inside a total bound they would fit.
    #[test]
    fn an_oversized_message_and_decompression_bombs_are_refused() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let d = tempfile::tempdir()?;
        let zeros = vec![0u8; (MAX_MESSAGE_BYTES + 4096) as usize];
        let tgz = d.path().join("enron.tar.gz");
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(std::fs::File::create(&tgz)?, flate2::Compression::fast()));
        let mut h = tar::Header::new_gnu();
        h.set_size(zeros.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "maildir/lay-k/inbox/1.", &zeros[..])?;
        b.into_inner()?.finish()?;
        let staging = d.path().join("s");
        std::fs::create_dir(&staging)?;
        let e = unpack(&tgz, Unpack::EnronMaildir, &staging, 1 << 40).err().ok_or("accepted")?.to_string();
        assert!(e.contains("maildir/lay-k/inbox/1.") && (e.contains("64 MiB") || e.contains("decompression bomb")), "{e}");
        // A tarball of zeros (1,000 times smaller compressed) is a bomb under any total bound.
        let e = unpack(&tgz, Unpack::TarGz { strip: "", into: "" }, &staging, 1 << 40).err().ok_or("accepted")?.to_string();
        assert!(e.contains("decompression bomb") && e.contains("enron.tar.gz"), "{e}");
        let z = d.path().join("bomb.zip");
        let mut w = zip::ZipWriter::new(std::fs::File::create(&z)?);
        w.start_file("zeros.json", zip::write::SimpleFileOptions::default())?;
        w.write_all(&zeros)?;
        w.finish()?;
        let staging = d.path().join("z");
        std::fs::create_dir(&staging)?;
        let e = unpack(&z, Unpack::Zip { strip: "", keep: &[], into: "" }, &staging, 1 << 40).err().ok_or("accepted")?.to_string();
        assert!(e.contains("zeros.json") && e.contains("decompression bomb"), "{e}");
        Ok(())
    }

    /// A tar entry that appears twice and a zip entry whose bytes fail their checksum are named by
    /// the archive and the entry (the staging folder is never what the message blames).
    #[test]
    fn a_repeated_entry_and_a_bad_checksum_name_the_archive_and_entry() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let d = tempfile::tempdir()?;
        let tgz = d.path().join("twice.tar.gz");
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(std::fs::File::create(&tgz)?, flate2::Compression::fast()));
        for body in [&b"first"[..], b"second"] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, "cora/cora.cites", body)?;
        }
        b.into_inner()?.finish()?;
        let staging = d.path().join("s");
        std::fs::create_dir(&staging)?;
        let e = unpack(&tgz, Unpack::TarGz { strip: "", into: "" }, &staging, 1 << 20).err().ok_or("accepted")?.to_string();
        assert!(e.contains("twice.tar.gz") && e.contains("entry cora/cora.cites") && e.contains("appears twice"), "{e}");
        assert!(!e.contains(&staging.display().to_string()), "{e}");

        let z = d.path().join("crc.zip");
        let mut w = zip::ZipWriter::new(std::fs::File::create(&z)?);
        let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        w.start_file("data/graph.json", stored)?;
        w.write_all(b"{\"nodes\": [1, 2, 3], \"edges\": []}")?;
        w.finish()?;
        let mut bytes = std::fs::read(&z)?;
        let at = bytes.windows(7).position(|w| w == b"\"nodes\"").ok_or("no body")?;
        bytes[at + 1] = b'N';
        std::fs::write(&z, &bytes)?;
        let staging = d.path().join("z");
        std::fs::create_dir(&staging)?;
        let e = unpack(&z, Unpack::Zip { strip: "", keep: &[], into: "" }, &staging, 1 << 20).err().ok_or("accepted")?.to_string();
        assert!(e.contains("crc.zip") && e.contains("entry data/graph.json") && e.contains("cannot be unpacked"), "{e}");
        assert!(!e.contains(&staging.display().to_string()), "{e}");
        Ok(())
    }

    #[test]
    fn archive_names_that_escape_are_not_paths() {
        for bad in ["/etc/passwd", "../x", "a/../../x", "a\\..\\x", ""] {
            assert_eq!(safe_rel(bad), None, "{bad}");
        }
        assert_eq!(safe_rel("./a//b/c.json"), Some(PathBuf::from("a/b/c.json")));
    }

    #[test]
    fn a_zip_is_filtered_and_an_escaping_entry_refused() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let d = tempfile::tempdir()?;
        let write_zip = |path: &Path, entries: &[(&str, &[u8])]| -> std::result::Result<(), Box<dyn std::error::Error>> {
            let mut w = zip::ZipWriter::new(std::fs::File::create(path)?);
            for (n, b) in entries {
                w.start_file(*n, zip::write::SimpleFileOptions::default())?;
                w.write_all(b)?;
            }
            w.finish()?;
            Ok(())
        };
        let z = d.path().join("a.zip");
        write_zip(&z, &[("arxiv/raw/edge.csv.gz", b"x"), ("arxiv/README.md", b"y")])?;
        let staging = d.path().join("s");
        std::fs::create_dir(&staging)?;
        let w = unpack(&z, Unpack::Zip { strip: "arxiv/", keep: &[".csv.gz"], into: "" }, &staging, 100)?;
        assert_eq!(w, vec!["raw/edge.csv.gz".to_string()]);
        assert!(!staging.join("README.md").exists());
        let bad = d.path().join("b.zip");
        write_zip(&bad, &[("../evil.csv.gz", b"x")])?;
        let e = unpack(&bad, Unpack::Zip { strip: "", keep: &[], into: "" }, &staging, 100).err().ok_or("accepted")?;
        assert!(e.to_string().contains("escapes its folder"), "{e}");
        assert!(!d.path().join("evil.csv.gz").exists());
        let e = unpack(&z, Unpack::Zip { strip: "", keep: &[], into: "x" }, &staging, 0).err().ok_or("unbounded")?;
        assert!(e.to_string().contains("size bound"), "{e}");
        Ok(())
    }
}
