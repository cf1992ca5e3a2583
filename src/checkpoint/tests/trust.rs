//! A store or a stat cache the checkpointer did not write is not obeyed:
//! refused and left alone, or not read.

use super::*;

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
    assert_eq!(crate::checkpoint::trust::check_run_dir(&wal), Ok(()));
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
        let refused = crate::checkpoint::trust::check_run_dir(&wal).expect_err(what);
        assert!(refused.path.starts_with(&git_dir), "{what}: {refused}");
        let e = Checkpointer::new(&wal, &ws, Protected::none())
            .take(Some(&second))
            .expect_err(what);
        assert!(e.is_untrusted(), "{what}: {e}");
        let e = crate::checkpoint::diff(&git_dir, Some(&first), &second).expect_err(what);
        assert!(e.is_untrusted(), "{what}: {e}");
        let e = crate::checkpoint::restore::restore(&git_dir, &ws, &first, &Protected::none())
            .expect_err(what);
        assert!(e.is_untrusted(), "{what}: {e}");
        let e = crate::checkpoint::copy_store(&git_dir, &dir.path().join("copy.git"), &ws);
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
    let cache = crate::checkpoint::index::cache_path(&cp.git().git_dir);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cache), 0o600);
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(crate::checkpoint::trust::check_run_dir(&wal), Ok(()));
    assert!(crate::checkpoint::index::load(&cp.git().git_dir, &|_| true).is_none());
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(crate::checkpoint::index::load(&cp.git().git_dir, &|_| true).is_some());
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::write(ws.join("b.txt"), "two\n").unwrap();
    let t = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&first))
        .unwrap();
    assert_eq!(t.changed, ["b.txt"]);
    assert_eq!(mode(&cache), 0o600);
}
