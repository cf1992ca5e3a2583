//! The checkpointer on real files with the real git: only what changed is
//! reported, rapid same-size rewrites are never missed, odd files are left
//! out, links are stored as links.

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

#[test]
fn a_new_checkpointer_uses_the_saved_index_and_survives_a_damaged_or_stale_one() {
    let Some((dir, ws)) = scratch() else {
        return;
    };
    awkward_workspace(&ws);
    let wal = dir.path().join("r.wal");
    let first = Checkpointer::new(&wal, &ws, Protected::none())
        .take(None)
        .unwrap();
    let store = super::store_dir(&wal);
    assert!(super::index::cache_path(&store).is_file());
    // A later process: the index is the cache's; what changed since the
    // checkpoint it is of is found without git.
    std::fs::write(ws.join("a/b"), "changed\n").unwrap();
    let t = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&first.tree))
        .unwrap();
    assert_eq!(t.changed, ["a/b"]);
    // A cache damaged: everything is hashed again, the same trees come out.
    let cache = super::index::cache_path(&store);
    let mut bytes = std::fs::read(&cache).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&cache, &bytes).unwrap();
    let again = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&first.tree))
        .unwrap();
    assert_eq!(
        (again.tree.as_str(), again.changed.clone()),
        (t.tree.as_str(), vec!["a/b".to_string()])
    );
    // A cache of another checkpoint than the previous one (a stale one) and
    // a cache naming a blob the store lost (its packs gone): the changes
    // come from git, lost objects are written again, git finds all.
    std::fs::write(ws.join("a.txt"), "changed too\n").unwrap();
    let cached = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&t.tree))
        .unwrap();
    std::fs::write(ws.join("a.txt"), "changed back\n").unwrap();
    let stale_prev = cached.tree.clone();
    let t4 = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&t.tree))
        .unwrap();
    assert_eq!(t4.changed, ["a.txt"]);
    assert_ne!(t4.tree, stale_prev);
    for e in std::fs::read_dir(store.join("objects/pack"))
        .unwrap()
        .flatten()
    {
        std::fs::remove_file(e.path()).unwrap();
    }
    let t5 = Checkpointer::new(&wal, &ws, Protected::none())
        .take(None)
        .unwrap();
    assert_eq!(t5.tree, t4.tree);
    assert_eq!(t5.changed_count, 8);
    let fsck = Checkpointer::new(&wal, &ws, Protected::none())
        .git()
        .command(["fsck", "--full", "--strict", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let ls = Checkpointer::new(&wal, &ws, Protected::none())
        .git()
        .text(&["ls-tree", "-r", &t5.tree], None)
        .unwrap();
    assert_eq!(ls.lines().count(), 8, "{ls}");
}

/// A scratch workspace holding `files`, checkpointed once into the store of
/// `r.wal`: (scratch, workspace, log, store, the checkpoint).
fn stored_once(
    files: &[(&str, &[u8])],
) -> Option<(
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
    super::Taken,
)> {
    let (dir, ws) = scratch()?;
    for (name, bytes) in files {
        std::fs::write(ws.join(name), bytes).unwrap();
    }
    let wal = dir.path().join("r.wal");
    let store = super::store_dir(&wal);
    let first = Checkpointer::new(&wal, &ws, Protected::none())
        .take(None)
        .unwrap();
    Some((dir, ws, wal, store, first))
}

#[test]
fn what_a_kill_in_the_middle_of_a_pack_leaves_is_ignored_and_cleared() {
    let Some((_dir, ws, wal, store, first)) = stored_once(&[("f.txt", b"one\n")]) else {
        return;
    };
    // A kill between the pack's rename and its index's: the pack is there
    // without an index (the next process indexes it again), and a temp file
    // is left in the store's root.
    let packs = store.join("objects/pack");
    for e in std::fs::read_dir(&packs).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "idx") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let tmp = store.join("tmp-tinyagent-1-0.pack");
    std::fs::write(&tmp, "PACK torn").unwrap();
    std::fs::remove_file(super::index::cache_path(&store)).unwrap();
    // The next process finds everything, and so does git.
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let t = cp.take(None).unwrap();
    assert_eq!((t.tree.as_str(), t.changed_count), (first.tree.as_str(), 1));
    assert!(!tmp.exists());
    let blob = cp
        .git()
        .run(&["cat-file", "blob", &format!("{}:f.txt", t.tree)], None)
        .unwrap();
    assert_eq!(blob, b"one\n");
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
}

#[test]
fn a_pack_that_lost_its_index_is_indexed_again_and_a_torn_one_is_removed() {
    let Some((_dir, ws, wal, store, first)) =
        stored_once(&[("f.txt", b"one\n"), ("g.bin", &[0u8, 1, 2, 255])])
    else {
        return;
    };
    let packs = store.join("objects/pack");
    let files = |ext: &str| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(&packs)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        v.sort();
        v
    };
    let [pack] = files("pack").try_into().unwrap();
    let [idx] = files("idx").try_into().unwrap();
    let idx_bytes = std::fs::read(&idx).unwrap();
    // A power loss after the pack's sync: its unsynced index is torn.
    std::fs::write(&idx, &idx_bytes[..idx_bytes.len() / 2]).unwrap();
    // And a pack a power loss cut short, with no index (never named by a
    // record: records follow a pack's sync).
    let torn = packs.join(format!("pack-{}.pack", "ab".repeat(20)));
    std::fs::write(&torn, b"PACK\0\0\0\x02\0\0\0\x01 torn").unwrap();
    std::fs::remove_file(super::index::cache_path(&store)).unwrap();
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let t = cp.take(None).unwrap();
    assert_eq!(t.tree, first.tree);
    // The whole pack was indexed again by git (the same index git makes),
    // so nothing was written again; the torn one is gone.
    assert_eq!(files("pack"), vec![pack.clone()]);
    assert_eq!(std::fs::read(&idx).unwrap(), idx_bytes);
    assert!(!torn.exists());
    assert!(super::objects::pack_is_whole(&pack));
    let blob = cp
        .git()
        .run(&["cat-file", "blob", &format!("{}:f.txt", t.tree)], None)
        .unwrap();
    assert_eq!(blob, b"one\n");
    // No temporary file or spare is left once the checkpointer is gone.
    drop(cp);
    let left: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The tree real git makes of `ws` without the paths `except` (fresh index).
fn git_write_tree_except(dir: &std::path::Path, ws: &std::path::Path, except: &[&str]) -> String {
    let _ = std::fs::remove_file(dir.join("other.index"));
    let other = super::Git {
        git_dir: dir.join("other.git"),
        work_tree: ws.to_path_buf(),
        index: Some(dir.join("other.index")),
    };
    other.init().unwrap();
    let mut args = vec!["add".to_string(), "-A".into(), "--".into(), ".".into()];
    args.extend(except.iter().map(|e| format!(":(exclude){e}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    other.run(&args, None).unwrap();
    other.text(&["write-tree"], None).unwrap()
}

/// Every file and directory of `ws` (relative), links not followed,
/// `.git` and the protected `own.wal*` left out.
fn listing(ws: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut todo = vec![ws.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == ".git" || name.starts_with("own.wal") {
                continue;
            }
            let rel = e
                .path()
                .strip_prefix(ws)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                dirs.push(rel);
                todo.push(e.path());
            } else {
                files.push(rel);
            }
        }
    }
    files.sort();
    dirs.sort();
    (files, dirs)
}

/// One random change to `ws`; gives whether it touched an ignore file.
#[allow(clippy::too_many_lines)]
fn random_change(
    rng: &mut fastrand::Rng,
    ws: &std::path::Path,
    outside: &std::path::Path,
    n: usize,
) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let (files, dirs) = listing(ws);
    let pick_dir = |rng: &mut fastrand::Rng| -> std::path::PathBuf {
        if dirs.is_empty() || rng.bool() {
            ws.to_path_buf()
        } else {
            ws.join(&dirs[rng.usize(..dirs.len())])
        }
    };
    let regular: Vec<&String> = files
        .iter()
        .filter(|f| {
            std::fs::symlink_metadata(ws.join(f)).is_ok_and(|m| m.is_file())
                && !f.ends_with(".gitignore")
        })
        .collect();
    match rng.u8(..14) {
        0 | 1 => {
            let ext = if rng.u8(..4) == 0 { "log" } else { "txt" };
            let p = pick_dir(rng).join(format!("new{n}.{ext}"));
            std::fs::write(p, format!("new file {n}\n")).unwrap();
        }
        2 | 3 if !regular.is_empty() => {
            // Rewritten: same size half the time.
            let p = ws.join(regular[rng.usize(..regular.len())]);
            let old = std::fs::read(&p).unwrap();
            let mut new = old.clone();
            if rng.bool() && !new.is_empty() {
                let i = rng.usize(..new.len());
                new[i] = new[i].wrapping_add(1);
            } else {
                new.extend_from_slice(format!("more {n}\n").as_bytes());
            }
            std::fs::write(&p, new).unwrap();
        }
        4 if !regular.is_empty() => {
            std::fs::remove_file(ws.join(regular[rng.usize(..regular.len())])).unwrap();
        }
        5 if !regular.is_empty() => {
            let from = ws.join(regular[rng.usize(..regular.len())]);
            let to = pick_dir(rng).join(format!("moved{n}"));
            std::fs::rename(from, to).unwrap();
        }
        6 if !dirs.is_empty() => {
            let d = &dirs[rng.usize(..dirs.len())];
            let from = ws.join(d);
            let to = ws.join(format!("dir{n}"));
            if !to.starts_with(&from) {
                std::fs::rename(from, to).unwrap();
            }
        }
        7 if !dirs.is_empty() => {
            std::fs::remove_dir_all(ws.join(&dirs[rng.usize(..dirs.len())])).unwrap();
        }
        8 if !regular.is_empty() => {
            let p = ws.join(regular[rng.usize(..regular.len())]);
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode ^ 0o111)).unwrap();
        }
        9 => {
            let target = if regular.is_empty() || rng.bool() {
                "nowhere".to_string()
            } else {
                regular[rng.usize(..regular.len())].clone()
            };
            std::os::unix::fs::symlink(target, pick_dir(rng).join(format!("link{n}"))).unwrap();
        }
        10 => {
            let name = if rng.u8(..3) == 0 { "build" } else { "fresh" };
            let d = pick_dir(rng).join(format!("{name}{n}/deep/er"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("inside.txt"), format!("{n}\n")).unwrap();
            std::fs::write(d.join("../up.bin"), [0u8, 1, 2, n as u8]).unwrap();
        }
        11 => {
            // A directory out of the workspace and back in under another
            // name, changed while it was out.
            if let Some(d) = dirs.first() {
                let away = outside.join(format!("away{n}"));
                std::fs::rename(ws.join(d), &away).unwrap();
                std::fs::write(away.join(format!("while_out{n}")), "x").unwrap();
                std::fs::rename(&away, ws.join(format!("back{n}"))).unwrap();
            }
        }
        12 => {
            // Ignore rules change: what is stored changes where no file did.
            let p = pick_dir(rng).join(".gitignore");
            let rules = ["*.log\n", "build*/\n", "", "*.txt\n!keep*.txt\n"];
            std::fs::write(p, rules[rng.usize(..rules.len())]).unwrap();
            return true;
        }
        _ => {
            // Touched only, or the protected log appended to.
            if !regular.is_empty() && rng.bool() {
                let p = ws.join(regular[rng.usize(..regular.len())]);
                let f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
                f.set_modified(std::time::SystemTime::now()).unwrap();
            } else {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(ws.join("own.wal"))
                    .unwrap();
                writeln!(f, "record {n}").unwrap();
                std::fs::create_dir_all(ws.join("own.wal.d")).unwrap();
                std::fs::write(ws.join(format!("own.wal.d/obj{n}")), "x").unwrap();
            }
        }
    }
    false
}

#[test]
fn the_watch_gives_the_trees_a_full_walk_and_git_give_through_random_changes() {
    let Some((dir, ws)) = scratch() else {
        return;
    };
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    awkward_workspace(&ws);
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    let mut protected = Protected::none();
    protected.add_log(&ws.join("own.wal"));
    let mut watched = Checkpointer::new(&dir.path().join("w.wal"), &ws, protected.clone());
    watched.set_watch(true);
    let mut walked = Checkpointer::new(&dir.path().join("f.wal"), &ws, protected);
    let first = watched.take(None).unwrap();
    assert!(watched.watching());
    assert_eq!(first.walk.as_deref(), Some("full: the watch is set up"));
    assert_eq!(walked.take(None).unwrap().tree, first.tree);
    let except = ["own.wal", "own.wal.d"];
    assert_eq!(first.tree, git_write_tree_except(dir.path(), &ws, &except));
    let seed = std::env::var("TINYAGENT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut prev = first.tree;
    let mut n = 0;
    let (mut by_watch, mut by_rules, mut rules_written) = (0, 0, 0);
    for round in 0..80 {
        let mut ignore_changed = false;
        for _ in 0..rng.usize(1..4) {
            n += 1;
            ignore_changed |= random_change(&mut rng, &ws, &outside, n);
        }
        let w = watched.take(Some(&prev)).unwrap();
        let f = walked.take(Some(&prev)).unwrap();
        let ctx = format!("seed {seed}, round {round}: {:?}", listing(&ws).0);
        assert_eq!(w.tree, f.tree, "{ctx}");
        assert_eq!(
            w.tree,
            git_write_tree_except(dir.path(), &ws, &except),
            "{ctx}"
        );
        assert_eq!(
            (&w.changed, w.changed_count, w.files),
            (&f.changed, f.changed_count, f.files),
            "{ctx}"
        );
        assert_eq!(w.oversized, f.oversized, "{ctx}");
        // A directory deleted with its `.gitignore` changes rules too; one
        // written in an ignored directory changes nothing (and is not
        // watched).
        match w.walk.as_deref() {
            Some("watch") => by_watch += 1,
            Some("full: an ignore file changed") => by_rules += 1,
            other => panic!("{other:?} (ignore file written: {ignore_changed}), {ctx}"),
        }
        rules_written += u32::from(ignore_changed);
        assert!(watched.watching(), "{ctx}");
        assert_eq!(f.walk, None);
        prev = w.tree;
    }
    assert!(by_watch > 40, "{by_watch} of 80 checkpoints used the watch");
    assert!(
        rules_written == 0 || by_rules > 0,
        "ignore files were written {rules_written} times, never a full walk"
    );
    assert_eq!(watched.take_warning(), None);
}

#[test]
fn an_overflowed_watch_queue_means_a_full_walk_a_warning_and_a_new_watch() {
    let Some((dir, ws)) = scratch() else {
        return;
    };
    awkward_workspace(&ws);
    let mut cp = Checkpointer::new(&dir.path().join("r.wal"), &ws, Protected::none());
    cp.set_watch(true);
    let first = cp.take(None).unwrap();
    assert!(cp.watching());
    // More events than the kernel queues (fs.inotify.max_queued_events,
    // 16384 by default): two files touched in turn, so none merge.
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(16384);
    let (a, b) = (
        std::fs::File::open(ws.join("a.txt")).unwrap(),
        std::fs::File::open(ws.join("a/b")).unwrap(),
    );
    let t0 = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    for i in 0..=limit / 2 + 8 {
        let t = t0 + std::time::Duration::from_secs(i as u64);
        a.set_modified(t).unwrap();
        b.set_modified(t).unwrap();
    }
    // A change among the lost events.
    std::fs::write(ws.join("a/deep/er/x"), "changed under the flood\n").unwrap();
    let t = cp.take(Some(&first.tree)).unwrap();
    assert_eq!(
        t.walk.as_deref(),
        Some("full: the inotify event queue overflowed")
    );
    assert_eq!(t.changed, ["a/deep/er/x"]);
    std::fs::remove_file(dir.path().join("other.index")).ok();
    assert_eq!(t.tree, git_write_tree(dir.path(), &ws));
    let warning = cp.take_warning().expect("a warning");
    assert!(warning.contains("overflowed"), "{warning}");
    // A new watch: the next change is found through it.
    assert!(cp.watching());
    std::fs::write(ws.join("z/new"), "after\n").unwrap();
    let t2 = cp.take(Some(&t.tree)).unwrap();
    assert_eq!(t2.walk.as_deref(), Some("watch"));
    assert_eq!(t2.changed, ["z/new"]);
    std::fs::remove_file(dir.path().join("other.index")).ok();
    assert_eq!(t2.tree, git_write_tree(dir.path(), &ws));
}

/// Everything under `dir`: path, mode, owner and bytes (a symlink's target).
fn tree_bytes(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u32, u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let bytes = if m.is_dir() {
                stack.push(p.clone());
                Vec::new()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                std::fs::read(&p).unwrap()
            };
            out.push((p, m.mode(), m.uid(), bytes));
        }
    }
    out.sort();
    out
}

/// A store the checkpointer made, with something planted in it that would
/// make git obey someone else, is refused before any git runs (a filter
/// that would leave a marker never runs) and is left exactly as it was.
#[test]
fn a_store_holding_what_tinyagent_did_not_write_is_refused_and_left_alone() {
    let Some((dir, ws)) = scratch() else {
        return;
    };
    let marker = dir.path().join("marker");
    let filter = format!(
        "[filter \"evil\"]\n\tclean = touch {m}; cat\n\tsmudge = touch {m}; cat\n\trequired = true\n",
        m = marker.display()
    );
    type Plant = Box<dyn Fn(&std::path::Path)>;
    let plants: Vec<(&str, Plant)> = vec![
        (
            "a filter in config",
            Box::new({
                let filter = filter.clone();
                move |g| {
                    let mut c = std::fs::read_to_string(g.join("config")).unwrap();
                    c.push_str(&filter);
                    std::fs::write(g.join("config"), c).unwrap();
                }
            }),
        ),
        (
            "a filter in info/attributes",
            Box::new(|g| std::fs::write(g.join("info/attributes"), "* filter=evil\n").unwrap()),
        ),
        (
            "hooks",
            Box::new(|g| std::fs::create_dir(g.join("hooks")).unwrap()),
        ),
        (
            "alternates",
            Box::new(|g| std::fs::write(g.join("objects/info/alternates"), "/tmp\n").unwrap()),
        ),
        (
            "commondir",
            Box::new(|g| std::fs::write(g.join("commondir"), "/tmp\n").unwrap()),
        ),
        (
            "a global config where XDG_CONFIG_HOME points",
            Box::new({
                let filter = filter.clone();
                move |g| {
                    std::fs::create_dir(g.join("git")).unwrap();
                    std::fs::write(g.join("git/config"), &filter).unwrap();
                }
            }),
        ),
        (
            "a symlinked config",
            Box::new(|g| {
                std::fs::rename(g.join("config"), g.join("../config-real")).unwrap();
                std::os::unix::fs::symlink("../config-real", g.join("config")).unwrap();
            }),
        ),
        (
            "a config others can write",
            Box::new(|g| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(g.join("config"), std::fs::Permissions::from_mode(0o666))
                    .unwrap();
            }),
        ),
    ];
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join(".gitattributes"), "* filter=evil\n").unwrap();
    let wal = dir.path().join("r.wal");
    let (first, git_dir) = {
        let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
        (cp.take(None).unwrap().tree, cp.git().git_dir.clone())
    };
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    let second = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&first))
        .unwrap()
        .tree;
    let pristine = dir.path().join("pristine.git");
    assert!(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(&git_dir)
            .arg(&pristine)
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(super::trust::check_run_dir(&wal), Ok(()));
    for (what, plant) in &plants {
        let _ = std::fs::remove_dir_all(&git_dir);
        let _ = std::fs::remove_file(dir.path().join("r.wal.d/config-real"));
        assert!(
            std::process::Command::new("cp")
                .arg("-a")
                .arg(&pristine)
                .arg(&git_dir)
                .status()
                .unwrap()
                .success()
        );
        plant(&git_dir);
        let before = tree_bytes(dir.path());
        let refused = super::trust::check_run_dir(&wal).expect_err(what);
        assert!(refused.path.starts_with(&git_dir), "{what}: {refused}");
        let e = Checkpointer::new(&wal, &ws, Protected::none())
            .take(Some(&second))
            .expect_err(what);
        assert!(e.is_untrusted(), "{what}: {e}");
        let e = super::diff(&git_dir, Some(&first), &second).expect_err(what);
        assert!(e.is_untrusted(), "{what}: {e}");
        let e = super::restore::restore(&git_dir, &ws, &first, &Protected::none()).expect_err(what);
        assert!(e.is_untrusted(), "{what}: {e}");
        let e = super::copy_store(&git_dir, &dir.path().join("copy.git"), &ws);
        // The copy reads the old store's objects only; the new store is
        // ours. Either way nothing of the planted store runs.
        drop(e);
        let _ = std::fs::remove_dir_all(dir.path().join("copy.git"));
        assert_eq!(tree_bytes(dir.path()), before, "{what}: something changed");
        assert!(!marker.exists(), "{what}: the filter ran");
        assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"two\n");
    }
}

/// The stat cache is written 0600 whatever the umask, and one others
/// could write (an older tinyagent made it by the umask) is not read: the
/// store is not refused for it, the files are hashed again.
#[test]
fn the_stat_cache_is_private_and_a_loose_one_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let Some((dir, ws)) = scratch() else {
        return;
    };
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let wal = dir.path().join("r.wal");
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let first = cp.take(None).unwrap().tree;
    let cache = super::index::cache_path(&cp.git().git_dir);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cache), 0o600);
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(super::trust::check_run_dir(&wal), Ok(()));
    assert!(super::index::load(&cp.git().git_dir, &|_| true).is_none());
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(super::index::load(&cp.git().git_dir, &|_| true).is_some());
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::write(ws.join("b.txt"), "two\n").unwrap();
    let t = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&first))
        .unwrap();
    assert_eq!(t.changed, ["b.txt"]);
    assert_eq!(mode(&cache), 0o600);
}
