//! The repository's own text: no words of the development process in any tracked file, and
//! docs/options.md exactly as `tgrag options --markdown` prints it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Words that date a text to the way it was written rather than to the software: a numbered stop,
/// session or issue (the word, a space, an optional `#` and a number), or a phrase that points at
/// the current or a past one of those ("this …", "the previous …"). An upstream project's issue is cited as `owner/repo#N`,
/// which this does not match.
fn process_words(line: &str) -> bool {
    let l = line.to_lowercase();
    let at_word = |i: usize| i == 0 || !l[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
    for word in ["stop", "session", "issue"] {
        for (i, _) in l.match_indices(word).filter(|&(i, _)| at_word(i)) {
            let rest = &l[i + word.len()..];
            let rest = rest.strip_prefix('s').unwrap_or(rest);
            let gap = rest.len() - rest.trim_start_matches(' ').len();
            let after = rest.trim_start_matches(' ');
            let after = after.strip_prefix('#').unwrap_or(after);
            if gap > 0 && after.starts_with(|c: char| c.is_ascii_digit()) {
                return true;
            }
        }
    }
    for before in ["this", "that", "last", "next", "previous", "earlier", "same"] {
        for after in ["session", "stop"] {
            let phrase = format!("{before} {after}");
            for (i, _) in l.match_indices(&phrase).filter(|&(i, _)| at_word(i)) {
                let rest = &l[i + phrase.len()..];
                let rest = rest.strip_prefix("s").unwrap_or(rest);
                if !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    return true;
                }
            }
        }
    }
    false
}

#[test]
fn the_process_words_check_finds_planted_lines_and_passes_plain_ones() {
    // Built at run time, so this file itself holds none of them.
    let planted = [
        format!("measured in {} {}", "stop", 58),
        format!("(see {} #{})", "Issue", 27),
        format!("{} {} took longer", "this", "session"),
        format!("the {} {}'s figures", "previous", "stop"),
        format!("{}s {} and {}", "stop", 5, 6),
    ];
    for p in &planted {
        assert!(process_words(p), "not caught: {p}");
    }
    for plain in [
        "tracel-ai/burn#1234 has the fix",
        "the DataFusion session holds the tables",
        "a bus stop",
        "nonstop",
        "this stopwatch",
        "an issue with 3 causes",
    ] {
        assert!(!process_words(plain), "caught: {plain}");
    }
    // A sentence about training that reads like a numbered stop is caught too: the check accepts
    // that cost (write "stops after 3 epochs").
    assert!(process_words(&format!("training {}s {} epochs after the best", "stop", 3)));
}

#[test]
fn no_tracked_file_speaks_of_the_development_process() {
    let root = repo_root();
    let out = Command::new("git").arg("-C").arg(&root).args(["ls-files", "-z"]).output();
    let files = match out {
        Ok(o) if o.status.success() => o.stdout,
        _ => {
            assert!(std::env::var_os("CI").is_none(), "CI=true: git ls-files must run in {}", root.display());
            eprintln!("skipped: {} is not a git checkout (git ls-files failed)", root.display());
            return;
        }
    };
    let mut found = Vec::new();
    let mut scanned = 0;
    for name in files.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).to_string();
        let Ok(bytes) = std::fs::read(root.join(&name)) else { continue };
        // Text files only: a NUL byte or invalid UTF-8 marks a binary file.
        let Ok(text) = String::from_utf8(bytes) else { continue };
        if text.contains('\0') {
            continue;
        }
        scanned += 1;
        for (n, line) in text.lines().enumerate() {
            if process_words(line) {
                found.push(format!("{name}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(scanned > 100, "only {scanned} text files scanned");
    assert!(found.is_empty(), "words of the development process (describe the software instead):\n{}", found.join("\n"));
}

#[test]
fn docs_options_md_is_what_tgrag_options_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_tgrag")).args(["options", "--markdown"]).output().expect("tgrag runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let path = repo_root().join("docs/options.md");
    let file = std::fs::read_to_string(&path).unwrap_or_default();
    if printed != file {
        let at = printed.lines().zip(file.lines()).position(|(a, b)| a != b).unwrap_or(printed.lines().count().min(file.lines().count()));
        panic!(
            "docs/options.md is out of date at line {}: run `tgrag options --markdown > docs/options.md`\n  printed: {}\n  file:    {}",
            at + 1,
            printed.lines().nth(at).unwrap_or("<end>"),
            file.lines().nth(at).unwrap_or("<end>")
        );
    }
    // Every stage has its section, and every option of one stage is listed.
    for s in ["bm25", "dense", "mor", "pasemiqa", "toporag", "subgraphs", "gretriever", "mixrag"] {
        assert!(printed.contains(&format!("\n## `{s}`\n")), "{s}");
    }
    let one = Command::new(env!("CARGO_BIN_EXE_tgrag")).args(["options", "bm25"]).output().expect("tgrag runs");
    let one = String::from_utf8_lossy(&one.stdout).to_string();
    for o in ["bm25.k1", "bm25.b", "bm25.top_k", "bm25.variant", "bm25.tokenizer"] {
        assert!(one.contains(o), "{o}: {one}");
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_tgrag")).args(["options", "nope"]).output().expect("tgrag runs");
    assert_eq!(bad.status.code(), Some(78), "a user fault: {}", String::from_utf8_lossy(&bad.stderr));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no stage `nope`"));
}
