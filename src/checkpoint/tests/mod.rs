//! The checkpointer on real files with the real git: only what changed is
//! reported, rapid same-size rewrites are never missed, odd files are left
//! out, links are stored as links, trees are the ones git makes. The
//! helpers here are shared by the other files of this directory.

mod recovery;
mod trust;
mod watch;

use super::{Checkpointer, EMPTY_TREE, check_version};
use crate::exec::protected::Protected;

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

/// A scratch directory with an empty workspace `ws` in it, or `None` (a
/// loud skip) when git is not usable.
fn scratch() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if !git_ok() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    Some((dir, ws))
}

#[test]
fn rapid_same_size_rewrites_are_each_seen() {
    let Some((dir, ws)) = scratch() else {
        return;
    };
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
    let Some((dir, ws)) = scratch() else {
        return;
    };
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
    let Some((_dir, ws)) = scratch() else {
        return;
    };
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

/// A workspace with what tree order and modes make hard: names that sort
/// differently as a directory (`a` before `a.txt`, `a-b`, `a0`), an
/// executable, a link, binary content, an empty directory, a deep path.
fn awkward_workspace(ws: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    for d in ["a", "a/deep/er", "empty", "z"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    std::fs::write(ws.join("a/b"), "in a\n").unwrap();
    std::fs::write(ws.join("a/deep/er/x"), "deep\n").unwrap();
    std::fs::write(ws.join("a.txt"), "a dot txt\n").unwrap();
    std::fs::write(ws.join("a-b"), "dash\n").unwrap();
    std::fs::write(ws.join("a0"), "zero\n").unwrap();
    std::fs::write(ws.join("z/bin"), [0u8, 159, 146, 150, 255, 0, 10]).unwrap();
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a/b", ws.join("link")).unwrap();
}

/// The tree real git makes of `ws` (its own index, in another store).
fn git_write_tree(dir: &std::path::Path, ws: &std::path::Path) -> String {
    let other = super::Git {
        git_dir: dir.join("other.git"),
        work_tree: ws.to_path_buf(),
        index: Some(dir.join("other.index")),
    };
    other.init().unwrap();
    other.run(&["add", "-A", "."], None).unwrap();
    other.text(&["write-tree"], None).unwrap()
}

#[test]
fn trees_are_the_ones_git_makes_and_the_store_passes_fsck() {
    let Some((dir, ws)) = scratch() else {
        return;
    };
    awkward_workspace(&ws);
    let mut cp = Checkpointer::new(&dir.path().join("r.wal"), &ws, Protected::none());
    let t = cp.take(None).unwrap();
    assert_eq!(t.tree, git_write_tree(dir.path(), &ws));
    assert_eq!(t.files, 8);
    assert_eq!(
        t.changed,
        [
            "a-b",
            "a.txt",
            "a/b",
            "a/deep/er/x",
            "a0",
            "link",
            "run.sh",
            "z/bin"
        ]
    );
    // A change deep down, a removal, a mode change, a file made a
    // directory: only the trees on those paths are made again, and they
    // are git's.
    std::fs::write(ws.join("a/deep/er/x"), "deeper\n").unwrap();
    std::fs::remove_file(ws.join("a-b")).unwrap();
    std::fs::remove_file(ws.join("a0")).unwrap();
    std::fs::create_dir(ws.join("a0")).unwrap();
    std::fs::write(ws.join("a0/inside"), "now a dir\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(ws.join("a.txt"), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let t2 = cp.take(Some(&t.tree)).unwrap();
    std::fs::remove_file(dir.path().join("other.index")).unwrap();
    assert_eq!(t2.tree, git_write_tree(dir.path(), &ws));
    assert_eq!(
        t2.changed,
        ["a-b", "a.txt", "a/deep/er/x", "a0", "a0/inside"]
    );
    assert_eq!(t2.changed_count, 5);
    // git reads every object, and finds the store sound.
    let fsck = cp
        .git()
        .command(["fsck", "--full", "--strict", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let blob = cp
        .git()
        .text(&["cat-file", "-p", &format!("{}:z/bin", t2.tree)], None);
    assert!(blob.is_ok());
    let raw = cp
        .git()
        .run(&["cat-file", "blob", &format!("{}:z/bin", t2.tree)], None)
        .unwrap();
    assert_eq!(raw, [0u8, 159, 146, 150, 255, 0, 10]);
    // Each checkpoint that made objects wrote one pack, and nothing else
    // in objects/.
    let packs: Vec<_> = std::fs::read_dir(cp.git().git_dir.join("objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(packs.len(), 4, "{packs:?}");
    // Nothing changed: no new pack.
    let t3 = cp.take(Some(&t2.tree)).unwrap();
    assert_eq!((t3.tree.as_str(), t3.changed_count), (t2.tree.as_str(), 0));
    let n = std::fs::read_dir(cp.git().git_dir.join("objects/pack"))
        .unwrap()
        .count();
    assert_eq!(n, 4);
}
