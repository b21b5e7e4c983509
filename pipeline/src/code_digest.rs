//! The code part of a stage's cache key: a digest of the code the stages run (the `schemas`,
//! `datasets`, `models` and `stages` crates, and the dependency versions in `Cargo.lock`), so that a
//! stage reruns when that code changes, not only when someone bumps its `version`.
//!
//! Only what can change a result counts: comments (doc comments included), whitespace, test-only
//! items (`#[cfg(test)]` items and the files of `#[cfg(test)] mod x;` modules) and everything
//! outside those folders (READMEs, bench scripts, the binary's own CLI code) are left out. The
//! build script (`pipeline/build.rs`) computes it at compile time with this same file.

use std::path::{Path, PathBuf};

/// Source folders (relative to the workspace root) of the code the stages run.
pub const CODE_ROOTS: &[&str] = &["schemas/src", "datasets/src", "models/src", "stages/src"];

/// Files that decide what that code does beyond its sources (dependency versions).
pub const CODE_FILES: &[&str] = &["Cargo.lock"];

/// 128-bit FNV-1a: enough to tell code versions apart (not a security boundary).
struct Fnv(u128);

impl Fnv {
    fn new() -> Self {
        Fnv(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }

    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u128::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
    }
}

/// The digest of the code under `root` (the workspace root), as 32 hex digits.
pub fn digest(root: &Path) -> std::io::Result<String> {
    let mut h = Fnv::new();
    for dir in CODE_ROOTS {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files)?;
        files.sort();
        let mut texts = Vec::with_capacity(files.len());
        let mut test_only: Vec<PathBuf> = Vec::new();
        for f in &files {
            let (text, tests) = normalise(&std::fs::read_to_string(f)?);
            test_only.extend(tests.iter().flat_map(|m| module_files(f, m)));
            texts.push(text);
        }
        for (f, text) in files.iter().zip(&texts) {
            if test_only.iter().any(|t| f.starts_with(t)) {
                continue;
            }
            let rel = f.strip_prefix(root).unwrap_or(f);
            h.update(rel.to_string_lossy().replace('\\', "/").as_bytes());
            h.update(&[0]);
            h.update(text.as_bytes());
            h.update(&[0]);
        }
    }
    for f in CODE_FILES {
        let p = root.join(f);
        if p.is_file() {
            h.update(f.as_bytes());
            h.update(&[0]);
            h.update(&std::fs::read(&p)?);
        }
    }
    Ok(format!("{:032x}", h.0))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The file and folder a module `name` declared in `parent` lives in (`name.rs` and `name/` next
/// to a `lib.rs`/`main.rs`/`mod.rs`, else inside the parent's own folder).
fn module_files(parent: &Path, name: &str) -> Vec<PathBuf> {
    let dir = parent.parent().unwrap_or(Path::new(""));
    let stem = parent.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let base = if matches!(stem.as_str(), "lib" | "main" | "mod") { dir.to_path_buf() } else { dir.join(stem) };
    vec![base.join(format!("{name}.rs")), base.join(name)]
}

/// A source without comments, with whitespace runs collapsed and `#[cfg(test)]` items removed;
/// and the names of the out-of-line modules those items declared (`#[cfg(test)] mod x;`).
pub fn normalise(src: &str) -> (String, Vec<String>) {
    let (text, lit) = strip_comments(src);
    strip_test_items(&text, &lit)
}

/// Removes comments and collapses whitespace outside literals; `lit[i]` is true for the characters
/// of string and char literals (copied verbatim).
fn strip_comments(src: &str) -> (Vec<char>, Vec<bool>) {
    let c: Vec<char> = src.chars().collect();
    let (mut out, mut lit) = (Vec::with_capacity(c.len()), Vec::with_capacity(c.len()));
    let push = |ch: char, is_lit: bool, out: &mut Vec<char>, lit: &mut Vec<bool>| {
        if !is_lit && ch.is_whitespace() {
            // One space after code or a literal; none at the start or after a space.
            if lit.last() == Some(&true) || out.last().is_some_and(|&l| l != ' ') {
                out.push(' ');
                lit.push(false);
            }
            return;
        }
        out.push(ch);
        lit.push(is_lit);
    };
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            push(' ', false, &mut out, &mut lit);
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0usize;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            push(' ', false, &mut out, &mut lit);
        } else if c[i] == 'r'
            && (at(i + 1) == '"' || (at(i + 1) == '#' && (at(i + 2) == '"' || at(i + 2) == '#')))
            && !is_ident(at(i.wrapping_sub(1)))
        {
            // Raw string r#"…"#: ends at a quote followed by as many hashes.
            let start = i;
            i += 1;
            let mut hashes = 0;
            while at(i) == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            while i < c.len() && !(c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#')) {
                i += 1;
            }
            i = (i + 1 + hashes).min(c.len());
            for &ch in &c[start..i] {
                push(ch, true, &mut out, &mut lit);
            }
        } else if c[i] == '"' {
            let start = i;
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(c.len());
            for &ch in &c[start..i] {
                push(ch, true, &mut out, &mut lit);
            }
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal ('a', '\n', '\''), not a lifetime.
            let start = i;
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(c.len());
            for &ch in &c[start..i] {
                push(ch, true, &mut out, &mut lit);
            }
        } else {
            push(c[i], false, &mut out, &mut lit);
            i += 1;
        }
    }
    (out, lit)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Removes every item carrying `#[cfg(test)]` (with its other attributes): up to the first `;` or
/// through the first `{…}` block at depth 0, outside literals.
fn strip_test_items(c: &[char], lit: &[bool]) -> (String, Vec<String>) {
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let starts_with =
        |i: usize, pat: &[char]| c.len() >= i + pat.len() && c[i..i + pat.len()] == *pat && !lit[i..i + pat.len()].iter().any(|&l| l);
    let mut out = String::with_capacity(c.len());
    let mut modules = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if !starts_with(i, &marker) {
            out.push(c[i]);
            i += 1;
            continue;
        }
        i += marker.len();
        // Further attributes of the same item.
        loop {
            while i < c.len() && c[i] == ' ' {
                i += 1;
            }
            if i + 1 < c.len() && c[i] == '#' && c[i + 1] == '[' && !lit[i] {
                let mut depth = 0;
                while i < c.len() {
                    if !lit[i] && c[i] == '[' {
                        depth += 1;
                    } else if !lit[i] && c[i] == ']' {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    i += 1;
                }
            } else {
                break;
            }
        }
        let body_start = i;
        let mut depth = 0usize;
        while i < c.len() {
            if !lit[i] {
                match c[i] {
                    '{' => depth += 1,
                    '}' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    ';' if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        let item: String = c[body_start..i].iter().collect();
        // The removed item leaves one separating space, not two.
        if (out.is_empty() || out.ends_with(' ')) && c.get(i) == Some(&' ') {
            i += 1;
        }
        let words: Vec<&str> = item.trim_end_matches(';').split_whitespace().collect();
        if item.ends_with(';')
            && let [.., "mod", name] = words.as_slice()
        {
            modules.push((*name).to_string());
        }
    }
    (out, modules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_whitespace_and_test_items_do_not_count() {
        let base = "/// Doc.\nfn f(x: u32) -> u32 {\n    x + 1 // add\n}\n";
        let reformatted = "fn f(x: u32)   -> u32 { x + 1 /* block /* nested */ */ }\n";
        assert_eq!(normalise(base).0, normalise(reformatted).0);
        let with_tests = format!("{base}#[cfg(test)]\nmod tests {{\n    #[test]\n    fn t() {{ assert_eq!(\"}}\", \"}}\"); }}\n}}\n");
        assert_eq!(normalise(base).0, normalise(&with_tests).0);
        let with_test_fn = format!("{base}#[cfg(test)]\n#[allow(dead_code)]\nfn helper() -> Vec<u8> {{ vec![b'{{'] }}\n");
        assert_eq!(normalise(base).0, normalise(&with_test_fn).0);
        // Code changes count, and so do literals (a comment marker inside a string is text).
        assert_ne!(normalise(base).0, normalise(&base.replace("x + 1", "x + 2")).0);
        let s1 = "const A: &str = \"a // b\";";
        let s2 = "const A: &str = \"a // c\";";
        assert_ne!(normalise(s1).0, normalise(s2).0);
        assert_ne!(normalise("const A: &str = r#\"x  y\"#;").0, normalise("const A: &str = r#\"x y\"#;").0);
        assert_ne!(normalise("const C: char = ' ';").0, normalise("const C: char = 'x';").0);
        // Lifetimes are not char literals.
        assert_eq!(normalise("fn f<'a>(x: &'a str) {}").0, "fn f<'a>(x: &'a str) {}");
        // Out-of-line test modules are reported.
        let (_, mods) = normalise("pub mod a;\n#[cfg(test)]\nmod real_tests;\n#[cfg(test)]\npub(crate) mod test_support;\n");
        assert_eq!(mods, vec!["real_tests", "test_support"]);
    }

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tmp");
        for (p, text) in files {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        d
    }

    /// A copy of the workspace's code folders, for editing.
    fn copy_workspace() -> tempfile::TempDir {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let d = tempfile::tempdir().expect("tmp");
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).expect("mkdir");
            for e in std::fs::read_dir(from).expect("read_dir").flatten() {
                let p = e.path();
                if p.is_dir() {
                    copy(&p, &to.join(e.file_name()));
                } else {
                    std::fs::copy(&p, to.join(e.file_name())).expect("copy");
                }
            }
        }
        for r in CODE_ROOTS.iter().chain(&["pipeline/src", "bench"]) {
            copy(&root.join(r), &d.path().join(r));
        }
        for f in CODE_FILES.iter().chain(&["README.md"]) {
            std::fs::copy(root.join(f), d.path().join(f)).expect("copy file");
        }
        d
    }

    fn edit(root: &Path, rel: &str, f: impl Fn(&str) -> String) {
        let p = root.join(rel);
        let text = std::fs::read_to_string(&p).expect("read");
        let new = f(&text);
        assert_ne!(new, text, "the edit of {rel} changed nothing");
        std::fs::write(&p, new).expect("write");
    }

    #[test]
    fn a_code_edit_changes_the_digest_and_tests_docs_and_bench_do_not() {
        let ws = copy_workspace();
        let root = ws.path();
        let d0 = digest(root).expect("digest");
        // Not code: a test in the planner, its doc comments, a test-only file, the README, bench
        // scripts, the binary's own sources.
        edit(root, "models/src/planner.rs", |t| {
            t.replacen("mod tests {\n", "mod tests {\n    #[test]\n    fn extra() { assert_eq!(1 + 1, 2); }\n", 1)
        });
        edit(root, "models/src/planner.rs", |t| t.replacen("//!", "//! An edited doc line.\n//!", 1));
        edit(root, "datasets/src/real_tests.rs", |t| format!("{t}\n// edited\n"));
        edit(root, "README.md", |t| format!("{t}\nMore words.\n"));
        std::fs::write(root.join("bench/new_script.py"), "print('hello')\n").expect("bench");
        edit(root, "pipeline/src/cli.rs", |t| format!("{t}\n// edited\n"));
        assert_eq!(digest(root).expect("digest"), d0, "tests, comments, README, bench and CLI code are not the stages' code");
        // Code: the planner's default learning rate.
        edit(root, "models/src/planner.rs", |t| {
            t.replacen("fn default() -> Self {", "fn default() -> Self {\n        let _edited = 0;", 1)
        });
        let d1 = digest(root).expect("digest");
        assert_ne!(d1, d0, "editing models/src/planner.rs changes the code digest");
        // A dependency version.
        edit(root, "Cargo.lock", |t| t.replacen("version = ", "version = \"0.0.0-edited\"\n#", 1));
        assert_ne!(digest(root).expect("digest"), d1);
    }

    #[test]
    fn files_of_test_only_modules_are_left_out_wherever_they_sit() {
        let a = tree(&[
            ("stages/src/lib.rs", "pub mod x;\n#[cfg(test)]\nmod checks;\n"),
            ("stages/src/x.rs", "pub fn f() {}\n#[cfg(test)]\nmod tests;\n"),
            ("stages/src/checks.rs", "fn a() {}"),
            ("stages/src/x/tests.rs", "fn b() {}"),
            ("schemas/src/lib.rs", ""),
            ("datasets/src/lib.rs", ""),
            ("models/src/lib.rs", ""),
        ]);
        let d0 = digest(a.path()).expect("digest");
        std::fs::write(a.path().join("stages/src/checks.rs"), "fn a2() {}").expect("edit");
        std::fs::write(a.path().join("stages/src/x/tests.rs"), "fn b2() {}").expect("edit");
        assert_eq!(digest(a.path()).expect("digest"), d0);
        std::fs::write(a.path().join("stages/src/x.rs"), "pub fn g() {}\n#[cfg(test)]\nmod tests;\n").expect("edit");
        assert_ne!(digest(a.path()).expect("digest"), d0);
    }
}
