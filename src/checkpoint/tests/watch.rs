//! The file-system watch: through random changes its checkpoints give the
//! trees a full walk and git give, and a lost event queue means a full walk,
//! a warning and a new watch.

use super::*;

/// The tree real git makes of `ws` without the paths `except` (fresh index).
fn git_write_tree_except(dir: &std::path::Path, ws: &std::path::Path, except: &[&str]) -> String {
    let _ = std::fs::remove_file(dir.join("other.index"));
    let other = crate::checkpoint::Git {
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
