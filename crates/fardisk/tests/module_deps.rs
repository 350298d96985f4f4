//! Dependencies inside the fardisk crate run one way: `cli` and `daemon` both use `control` (and
//! the shared modules below it), never each other, and `control` uses neither. This reads the
//! sources and fails on a path that crosses the line: `crate::daemon...`, `super::daemon...`, or
//! `daemon` among the items of a `crate::{...}` group (comments are not code).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory").flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The code of a source text without comments or whitespace.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<String>()
        .split_whitespace()
        .collect()
}

/// The first path segment of each top-level item of every `crate::{...}` group in `code`.
fn group_roots(code: &str) -> Vec<String> {
    let mut roots = Vec::new();
    for (start, _) in code.match_indices("crate::{") {
        let (mut depth, mut item) = (0usize, String::new());
        for c in code[start + "crate::{".len()..].chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    roots.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        roots.push(item);
    }
    roots.into_iter().map(|i| i.split("::").next().unwrap_or("").to_string()).collect()
}

/// Whether `code` names module `m` of the crate.
fn names_module(code: &str, m: &str) -> bool {
    let direct = ["crate::", "super::", "super::super::"].iter().any(|p| {
        code.match_indices(&format!("{p}{m}")).any(|(i, s)| {
            let next = code[i + s.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    });
    direct || group_roots(code).iter().any(|r| r == m)
}

/// Files under `src/module` that name one of `forbidden`.
fn crossings(module: &str, forbidden: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(module);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(!files.is_empty(), "no sources under {}", src.display());
    let mut found = Vec::new();
    for f in files {
        let c = code(&std::fs::read_to_string(&f).expect("source file"));
        for m in forbidden {
            if names_module(&c, m) {
                found.push(format!("{} uses {m}", f.display()));
            }
        }
    }
    found
}

#[test]
fn cli_does_not_use_the_daemon() {
    let found = crossings("cli", &["daemon"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_daemon_does_not_use_the_cli() {
    let found = crossings("daemon", &["cli"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn control_uses_neither() {
    let found = crossings("control", &["cli", "daemon"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The check finds what it looks for (a check that cannot fail proves nothing).
#[test]
fn the_check_sees_a_crossing() {
    let uses = |text: &str| names_module(&code(text), "daemon");
    assert!(uses("use crate::daemon::serve::open_store;"));
    assert!(uses("let x = crate::daemon::control::is_alive(&s);"));
    assert!(uses("use super::super::daemon;"));
    assert!(uses("use crate::{\n    config::Config,\n    daemon::{self, DaemonOptions},\n};"));
    assert!(!uses("// crate::daemon in a comment\n/// `daemon::run` in a doc\nuse crate::control::{daemon_options::parse_listen, call};"));
    assert!(!uses("use crate::{control::{daemon_options, call}, config};"));
    assert!(!uses("use crate::daemons_elsewhere;"));
}
