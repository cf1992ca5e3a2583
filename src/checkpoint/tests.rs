//! The checkpointer on real files with the real git: only what changed is
//! reported, rapid same-size rewrites are never missed, odd files are left
//! out, links are stored as links.

use super::{Checkpointer, EMPTY_TREE, check_version};
use crate::tools::protected::Protected;

/// git is there; else the test says SKIPPED (and fails when
/// `TINYAGENT_REQUIRE` names git, as CI sets it).
fn git_ok() -> bool {
    match check_version() {
        Ok(()) => true,
        Err(e) => {
            let required = std::env::var("TINYAGENT_REQUIRE")
                .unwrap_or_default()
                .split(',')
                .any(|n| n.trim() == "git");
            assert!(!required, "git is required (TINYAGENT_REQUIRE) but: {e}");
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: checkpoint unit test: {e}");
            false
        }
    }
}

#[test]
fn rapid_same_size_rewrites_are_each_seen() {
    if !git_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("f.txt"), "v00\n").unwrap();
    let mut cp = Checkpointer::new(&dir.path().join("r.wal"), &ws, Protected::none());
    let mut prev = cp.take(None).unwrap().tree;
    // Within the file system's timestamp granularity, size unchanged: the
    // stat data may not move, the content does.
    for i in 1..20 {
        std::fs::write(ws.join("f.txt"), format!("v{i:02}\n")).unwrap();
        let t = cp.take(Some(&prev)).unwrap();
        assert_eq!(t.changed, ["f.txt"], "rewrite {i}");
        assert_ne!(t.tree, prev);
        prev = t.tree;
    }
    // Nothing changed: the same tree, nothing listed.
    let t = cp.take(Some(&prev)).unwrap();
    assert_eq!((t.tree.as_str(), t.changed_count), (prev.as_str(), 0));
}

#[test]
fn links_are_stored_as_links_and_odd_files_and_dot_git_are_left_out() {
    if !git_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
    std::fs::write(ws.join("sub/.git/config"), "x").unwrap();
    std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), ws.join("out")).unwrap();
    nix::unistd::mkfifo(&ws.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(ws.join("sub/kept.txt"), "kept").unwrap();
    let wal = dir.path().join("r.wal");
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let t = cp.take(None).unwrap();
    assert_ne!(t.tree, EMPTY_TREE);
    assert_eq!(t.changed, ["out", "sub/kept.txt"]);
    // The link is a link (mode 120000) whose target is the path, not the
    // outside file's content.
    let ls = cp.git().text(&["ls-tree", "-r", &t.tree], None).unwrap();
    assert!(
        ls.lines()
            .any(|l| l.starts_with("120000") && l.ends_with("\tout")),
        "{ls}"
    );
    let blob = ls
        .lines()
        .find(|l| l.ends_with("\tout"))
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_string();
    let target = cp.git().text(&["cat-file", "-p", &blob], None).unwrap();
    assert_eq!(target, dir.path().join("outside.txt").display().to_string());
}

#[test]
fn the_runs_own_files_in_the_workspace_are_not_stored() {
    if !git_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let wal = ws.join("run.wal");
    std::fs::write(&wal, "log").unwrap();
    std::fs::write(ws.join("code.rs"), "fn main() {}").unwrap();
    let mut protected = Protected::none();
    protected.add_log(&wal);
    let mut cp = Checkpointer::new(&wal, &ws, protected);
    let t = cp.take(None).unwrap();
    // Neither the log nor its store (<wal>.d/checkpoints.git, inside ws).
    assert_eq!(t.changed, ["code.rs"]);
    let t = cp.take(Some(&t.tree)).unwrap();
    assert_eq!(t.changed_count, 0, "{:?}", t.changed);
}
