//! The crate's layers, checked: which top-level module may name which.
//!
//! Each module under `src/` is a layer; a module may import the ones below
//! it and never one above, so the modules form no circle. The record
//! vocabulary ([`crate::event`]) sits right above [`crate::kinds`] and names
//! nothing else of the crate. The test reads the sources (comments and unit
//! test modules left out) for `crate::<module>` paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every file under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Module -> the top-level modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let tops: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|n| n != "lib" && n != "main")
        .collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in files_under(&src) {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        // Test-only files (and directories of them).
        if p.extension().is_none_or(|x| x != "rs")
            || ["tests.rs", "proptests.rs", "testkit.rs"].contains(&name.as_str())
            || p.strip_prefix(&src)
                .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == "tests"))
        {
            continue;
        }
        let rel = p.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if !tops.contains(&top) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let edges = g.entry(top.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for named in names(line) {
                if named != top && tops.contains(&named) {
                    edges.insert(named);
                }
            }
        }
    }
    g
}

/// The top-level modules a line names: `crate::x`, and each first name of
/// a `crate::{x, y::z}` group.
fn names(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in line.match_indices("crate::") {
        let rest = &line[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = group.split('}').next().unwrap_or_default();
            out.extend(body.split(',').map(|p| ident(p.trim())));
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// A circle through `from`, if there is one.
fn circle(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn walk(
        g: &BTreeMap<String, BTreeSet<String>>,
        goal: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        let here = path.last().unwrap().clone();
        for next in g.get(&here).into_iter().flatten() {
            if next == goal {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(g, goal, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_string()];
    walk(g, from, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn the_record_vocabulary_names_only_the_kinds() {
    let g = graph();
    assert_eq!(g.get("kinds").cloned().unwrap_or_default(), BTreeSet::new());
    let event: Vec<&String> = g["event"].iter().collect();
    assert_eq!(event, ["kinds"], "event imports more than kinds");
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let g = graph();
    for module in g.keys() {
        if let Some(c) = circle(&g, module) {
            panic!("an import circle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_scanner_sees_paths_and_groups() {
    assert_eq!(names("use crate::event::Event;"), ["event"]);
    assert_eq!(
        names("use crate::{kinds::EnvKind, text};"),
        ["kinds", "text"]
    );
    assert_eq!(
        names("let x = crate::exec::host::detach(&mut c);"),
        ["exec"]
    );
}

#[test]
fn a_circle_is_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let edge = |g: &mut BTreeMap<String, BTreeSet<String>>, a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
    };
    edge(&mut g, "event", "kinds");
    edge(&mut g, "config", "event");
    assert_eq!(circle(&g, "config"), None);
    edge(&mut g, "event", "config");
    assert_eq!(
        circle(&g, "config"),
        Some(vec!["config".into(), "event".into(), "config".into()])
    );
}

/// No command of the command line imports another (they share only the
/// parent's helpers and the parsed flags, `args`).
#[test]
fn no_command_imports_a_sibling() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let modules: BTreeSet<String> = std::fs::read_dir(&cli)
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|n| n != "mod" && n != "args")
        .collect();
    for name in &modules {
        let file = if cli.join(name).is_dir() {
            cli.join(name).join("mod.rs")
        } else {
            cli.join(format!("{name}.rs"))
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, _) in text.match_indices("super::") {
            let named: String = text[i + "super::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                !(modules.contains(&named) && &named != name),
                "cli/{name} imports its sibling cli/{named}"
            );
        }
    }
}

/// The agent never touches the terminal: its approval questions go to the
/// asker the command line gives it (`crate::agent::approval::Asker`).
#[test]
fn the_agent_leaves_the_terminal_to_the_command_line() {
    let files = files_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent"));
    assert!(!files.is_empty(), "no source of src/agent was read");
    for p in files {
        let text = std::fs::read_to_string(&p).unwrap();
        for word in ["termios", "tcflush", "crossterm", "io::stdin", "IsTerminal"] {
            assert!(
                !text.contains(word),
                "{} names {word}: the terminal belongs to the command line",
                p.display()
            );
        }
    }
}
