//! No import cycle among the files of `protocol/src`, `proxy/src`, `client-native/src`, `bench/src` and
//! `tests/src`, the proxy's map (the `# Layout` table of `proxy/src/lib.rs`) true to its files: every file
//! listed once, in an order where each file uses only files listed above it, each folder's files listed in one
//! run (so no folder uses one listed below it: no arrow back up), no file of `proxy/src`, `client-native/src`
//! or `protocol/src` over 600 lines and none of `bench/src` over 400.
//!
//! Each file is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`). A module depends on another when
//! its code names it: a `use crate::…`/`use super::…` declaration or a `crate::…`/`super::…` path. Re-exports
//! (`pub use …`, `pub(crate) use …`) are aliases that give a module its interface, not uses of code, and a
//! library's root (`lib.rs`, made of module declarations and re-exports) and test modules are left out. A
//! binary's root (`main.rs` of a crate without `lib.rs`: `bench/src/main.rs`) holds code too, so it is the
//! module `` (the root): its uses count, and a `crate::…` path naming no module names an item of the root, a
//! use of it. A module that uses the root is in a cycle with it (the root declares and runs every module), so
//! the root cannot hold what the modules share. A cycle among the modules fails the test, naming it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of a source file relative to `src` (the crate roots `lib.rs` and `main.rs` are ``).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") || parts == ["main"] {
        parts.pop();
    }
    parts.join("::")
}

/// True when `src` is a binary crate's: its root `main.rs` holds code (there is no `lib.rs`).
fn root_holds_code(src: &Path) -> bool {
    src.join("main.rs").is_file() && !src.join("lib.rs").is_file()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code without comments, string and char literals (so their braces and paths do not count).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#')) && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) => {
                let mut hashes = 0;
                let mut j = i + 1;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                let closing: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                while j < b.len() && !b[j..].starts_with(&closing) {
                    j += 1;
                }
                i = j + closing.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former is removed.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..].iter().position(|&c| c == b'\'').map(|p| i + 2 + p)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match end {
                    Some(e) => {
                        out.push_str("' '");
                        i = e + 1;
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            c => {
                out.push(char::from(c));
                i += 1;
            }
        }
    }
    out
}

/// Removes `#[cfg(test)]` items (test modules and test-only functions).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // Skip to the item's body and past its closing brace (or to its semicolon).
        let open = after.find('{');
        let semi = after.find(';');
        match (open, semi) {
            (Some(o), Some(s)) if s < o => rest = &after[s + 1..],
            (Some(o), _) => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, c) in after[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// Expands a use tree (`crate::a::{b, c::d}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else { return vec![tree.to_owned()] };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |q| format!("{prefix}::{q}")))
        .collect()
}

/// The module a referenced path names: `crate::`/`super::` resolved from `from`, then the longest module
/// prefix; with `root_code` (a binary's root holds code), a path resolved to no module names the root ``.
fn target(from: &str, path: &str, modules: &BTreeSet<String>, root_code: bool) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut base: Vec<&str> = if from.is_empty() { vec![] } else { from.split("::").collect() };
    match segs.first() {
        Some(&"crate") => {
            base.clear();
            segs.remove(0);
        }
        Some(&"super") => {
            // `super` in a.rs/a/mod.rs is the parent of `a`.
            while segs.first() == Some(&"super") {
                base.pop();
                segs.remove(0);
            }
        }
        Some(&"self") => {
            segs.remove(0);
        }
        // A path relative to this module: a child module's name (`opening::read` in `session`).
        Some(first)
            if modules.contains(&if from.is_empty() { (*first).to_string() } else { format!("{from}::{first}") }) => {}
        _ => return None,
    }
    let full: Vec<&str> = base.into_iter().chain(segs).collect();
    (1..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| modules.contains(m))
        .or_else(|| root_code.then(String::new))
}

/// The module dependency graph of a crate's `src` (without a library's root, and without `main.rs` files but
/// a binary's root, which is the module ``).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let root_code = root_holds_code(src);
    let bin_root = src.join("main.rs");
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "main.rs") || (root_code && *f == bin_root));
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();

    let mut g = BTreeMap::new();
    for f in &files {
        let m = module_of(src, f);
        if m.is_empty() && !root_code {
            continue;
        }
        let code = without_tests(&strip(&std::fs::read_to_string(f).unwrap()));
        let mut deps = BTreeSet::new();
        let mut rest_of_code = String::new();
        for stmt in code.split_inclusive(';') {
            let trimmed = stmt.trim_start();
            if let Some(tree) = use_tree(trimmed) {
                if !trimmed.starts_with("pub") {
                    for p in expand(tree) {
                        if let Some(t) = target(&m, &p, &modules, root_code) {
                            deps.insert(t);
                        }
                    }
                }
            } else {
                rest_of_code.push_str(stmt);
            }
        }
        // Inline paths: crate::a::b, super::a, self::a, or a child module's name (child::item).
        let bytes = rest_of_code.as_bytes();
        let prefix = if m.is_empty() { String::new() } else { format!("{m}::") };
        let children: Vec<String> = modules
            .iter()
            .filter_map(|k| {
                k.strip_prefix(&prefix).filter(|c| !c.is_empty() && !c.contains("::")).map(|c| format!("{c}::"))
            })
            .collect();
        let roots: Vec<&str> =
            ["crate::", "super::", "self::"].into_iter().chain(children.iter().map(String::as_str)).collect();
        for root in roots {
            let mut from = 0;
            while let Some(at) = rest_of_code[from..].find(root) {
                let start = from + at;
                from = start + root.len();
                let before = if start > 0 { bytes[start - 1] } else { b' ' };
                if before.is_ascii_alphanumeric() || before == b'_' || before == b':' {
                    continue; // part of a longer name or path
                }
                let end = rest_of_code[start..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .map_or(rest_of_code.len(), |e| start + e);
                if let Some(t) = target(&m, rest_of_code[start..end].trim_end_matches(':'), &modules, root_code) {
                    deps.insert(t);
                }
            }
        }
        deps.remove(&m);
        if !root_code {
            deps.remove("");
        }
        g.insert(m, deps);
    }
    g
}

/// The files a crate root's `# Layout` table lists, in order: the first backticked path of each row
/// (`| \`relay/mod.rs\` | what |`), relative to `src`.
fn layout_table(lib_rs: &str) -> Vec<String> {
    let mut in_layout = false;
    let mut files = Vec::new();
    for line in lib_rs.lines() {
        let Some(doc) = line.strip_prefix("//!") else { break };
        let doc = doc.trim();
        if let Some(heading) = doc.strip_prefix("# ") {
            in_layout = heading.trim() == "Layout";
            continue;
        }
        if let Some(row) = doc.strip_prefix("| `").filter(|_| in_layout) {
            if let Some((path, _)) = row.split_once('`') {
                files.push(path.to_owned());
            }
        }
    }
    files
}

/// Every way `src` departs from its `# Layout` table (in `lib.rs`): a file missing from the table or listed
/// twice, a listed file that does not exist, and a file that uses one listed below it.
fn layout_problems(src: &Path) -> Vec<String> {
    let table = layout_table(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let on_disk: BTreeSet<String> = files
        .iter()
        .map(|f| f.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/"))
        .filter(|f| f != "lib.rs")
        .collect();
    let mut problems = Vec::new();
    let mut rank = BTreeMap::new();
    for (i, f) in table.iter().enumerate() {
        if rank.insert(module_of(src, &src.join(f)), (i, f.clone())).is_some() {
            problems.push(format!("{f} is listed twice"));
        }
        if !on_disk.contains(f) {
            problems.push(format!("{f} is listed but does not exist"));
        }
    }
    for f in &on_disk {
        if !table.contains(f) {
            problems.push(format!("{f} is missing from the # Layout table of lib.rs"));
        }
    }
    for (m, deps) in graph(src) {
        let Some((i, file)) = rank.get(&m) else { continue };
        for d in deps {
            if let Some((j, used)) = rank.get(&d) {
                if j > i {
                    problems.push(format!("{file} uses {used}, which is listed below it"));
                }
            }
        }
    }
    problems
}

/// The folders of a `# Layout` table whose files are not listed together: with every file using only files
/// listed above it, folders listed each in one run use only folders above them (no arrow back up). A
/// top-level file (`network.rs`) is its own place, apart from a folder of the same name (`network/`).
fn split_folders(table: &[String]) -> Vec<String> {
    let folder = |f: &str| f.rsplit_once('/').map(|(d, _)| d.to_owned());
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    let mut previous: Option<String> = None;
    for f in table {
        let here = folder(f);
        if here != previous {
            if let Some(d) = &here {
                if !seen.insert(d.clone()) {
                    problems.push(format!("{d}/ is split: {f} is listed apart from the folder's other files"));
                }
            }
        }
        previous = here;
    }
    problems
}

/// `Some(tree)` when `stmt` is a `use` declaration (possibly `pub`): the tree after `use`.
fn use_tree(stmt: &str) -> Option<&str> {
    let s = stmt.trim_start();
    let s = s.strip_prefix("pub").map_or(s, |r| {
        let r = r.trim_start();
        match r.strip_prefix('(') {
            Some(inner) => inner.split_once(')').map_or(r, |(_, after)| after),
            None => r,
        }
    });
    let s = s.trim_start().strip_prefix("use ")?;
    Some(s.trim_end().trim_end_matches(';'))
}

/// A cycle in `g`, if there is one (depth-first search).
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_owned(), 1);
        stack.push(n.to_owned());
        for d in g.get(n).into_iter().flatten() {
            match state.get(d.as_str()).copied() {
                Some(1) => {
                    let at = stack.iter().position(|s| s == d).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(d.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(d, g, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if !state.contains_key(n.as_str()) {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_checker_finds_cycles_and_ignores_re_exports_comments_and_tests() {
    let dir = std::env::temp_dir().join(format!("moonbridge-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/b")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(dir.join("src").join(p), t).unwrap();
    write("lib.rs", "mod a; mod b;\npub use a::X;");
    write(
        "a.rs",
        "use crate::b::c::Y; // crate::b is named in a comment\npub struct X;\nfn f() { let _ = \"super::b\"; }",
    );
    write("b/mod.rs", "pub(crate) mod c;\npub(crate) use c::Y;\n#[cfg(test)]\nmod tests { use crate::a::X; }");
    write("b/c.rs", "pub struct Y;\nfn g() -> super::super::a::X { crate::a::X }");
    let g = graph(&dir.join("src"));
    assert_eq!(g["a"], BTreeSet::from(["b::c".to_string()]));
    assert_eq!(g["b"], BTreeSet::new(), "re-exports and test code do not count");
    assert_eq!(g["b::c"], BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&g), Some(vec!["a".into(), "b::c".into(), "a".into()]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_binary_root_counts_as_a_module_that_uses_what_it_runs() {
    let dir = std::env::temp_dir().join(format!("moonbridge-layout-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/cmd")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(dir.join("src").join(p), t).unwrap();
    write("main.rs", "mod cmd; mod shared;\nuse clap::Parser;\nfn main() { cmd::run(); }\npub fn helper() {}");
    write("cmd/mod.rs", "mod part;\npub fn run() { part::go(); crate::shared::S; }");
    write("cmd/part.rs", "pub fn go() {}");
    write("shared.rs", "pub struct S;");
    let g = graph(&dir.join("src"));
    assert_eq!(g[""], BTreeSet::from(["cmd".to_string()]), "the root's own uses count");
    assert_eq!(g["cmd"], BTreeSet::from(["cmd::part".to_string(), "shared".to_string()]));
    assert_eq!(find_cycle(&g), None);
    // A module that uses an item of the root (`crate::helper`, or `super::helper` from a top-level module) is in
    // a cycle with it.
    write("shared.rs", "pub struct S;\nfn f() { crate::helper() }");
    assert_eq!(find_cycle(&graph(&dir.join("src"))), Some(vec!["".into(), "cmd".into(), "shared".into(), "".into()]));
    write("shared.rs", "use super::helper;\npub struct S;");
    assert!(find_cycle(&graph(&dir.join("src"))).is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_layout_check_finds_missing_files_and_imports_from_below() {
    let dir = std::env::temp_dir().join(format!("moonbridge-layout-table-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/low")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(dir.join("src").join(p), t).unwrap();
    let lib = |rows: &[&str]| {
        let mut t = String::from("//! # Layout\n//!\n//! | file | what |\n//! |---|---|\n");
        for r in rows {
            t.push_str(&format!("//! | `{r}` | x |\n"));
        }
        t + "//!\n//! # Data path\n//! | `not/a/row.rs` | later sections do not count |\n\nmod low; mod top;\n"
    };
    write("low/mod.rs", "pub(crate) mod leaf;\npub(crate) struct L;");
    write("low/leaf.rs", "pub(crate) struct Leaf;");
    write("top.rs", "use crate::low::leaf::Leaf;\nfn f(_: Leaf, _: crate::low::L) {}");
    write("lib.rs", &lib(&["low/leaf.rs", "low/mod.rs", "top.rs"]));
    assert_eq!(layout_problems(&dir.join("src")), Vec::<String>::new());
    // The same tree with the user listed above what it uses.
    write("lib.rs", &lib(&["top.rs", "low/leaf.rs", "low/mod.rs"]));
    assert_eq!(
        layout_problems(&dir.join("src")),
        vec!["top.rs uses low/mod.rs, which is listed below it", "top.rs uses low/leaf.rs, which is listed below it"]
    );
    // A file left out, one listed twice, one that is not there.
    write("lib.rs", &lib(&["low/leaf.rs", "low/leaf.rs", "gone.rs", "top.rs"]));
    assert_eq!(
        layout_problems(&dir.join("src")),
        vec![
            "low/leaf.rs is listed twice",
            "gone.rs is listed but does not exist",
            "low/mod.rs is missing from the # Layout table of lib.rs",
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_proxy_map_lists_every_file_below_what_it_uses() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proxy/src");
    let problems = layout_problems(&src);
    assert!(problems.is_empty(), "proxy/src/lib.rs # Layout is not true to the files:\n{}", problems.join("\n"));
}

#[test]
fn each_proxy_folder_is_listed_in_one_run_so_no_arrow_goes_back_up() {
    let lib = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proxy/src/lib.rs")).unwrap();
    let problems = split_folders(&layout_table(&lib));
    assert!(problems.is_empty(), "proxy/src/lib.rs # Layout:\n{}", problems.join("\n"));
    // The check itself: a folder with a file listed apart is found; a top-level file of a folder's name is not.
    let t = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(split_folders(&t(&["a/x.rs", "b.rs", "a/y.rs"])).len(), 1);
    assert!(split_folders(&t(&["a.rs", "b/x.rs", "b/y.rs", "a/z.rs"])).is_empty());
}

/// Lines a source file of the proxy, the client library or the protocol crate may have at most.
const SOURCE_MAX_LINES: usize = 600;

#[test]
fn no_library_file_over_600_lines() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut long = Vec::new();
    for krate in ["proxy/src", "client-native/src", "protocol/src"] {
        let mut files = Vec::new();
        rust_files(&root.join(krate), &mut files);
        assert!(files.len() >= 5, "{krate}: {files:?}");
        for f in files {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            if n > SOURCE_MAX_LINES {
                long.push(format!("{} has {n} lines", f.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    long.sort();
    assert!(long.is_empty(), "files over {SOURCE_MAX_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn no_import_cycle_in_any_crate() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["protocol", "proxy", "client-native", "bench", "tests"] {
        let g = graph(&root.join(krate).join("src"));
        assert!(g.len() >= 5, "{krate}: {g:?}");
        if let Some(cycle) = find_cycle(&g) {
            panic!("{krate}: import cycle {}\n{g:#?}", cycle.join(" -> "));
        }
    }
}

/// Lines a file of `bench/src` may have at most.
const BENCH_MAX_LINES: usize = 400;

#[test]
fn no_bench_file_over_400_lines() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() >= 5, "{files:?}");
    let mut long: Vec<String> = files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).unwrap().lines().count()))
        .filter(|(_, n)| *n > BENCH_MAX_LINES)
        .map(|(f, n)| format!("{} has {n} lines", f.strip_prefix(&src).unwrap().display()))
        .collect();
    long.sort();
    assert!(long.is_empty(), "bench/src files over {BENCH_MAX_LINES} lines:\n{}", long.join("\n"));
}
