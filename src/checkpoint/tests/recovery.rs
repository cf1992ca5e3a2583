//! What a checkpointer finds when it starts: the saved stat index (used,
//! or passed over when damaged or stale), and what a kill or a power loss
//! left in the store (a half-written pack, a pack without its index).

use super::*;

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
    let store = crate::checkpoint::store_dir(&wal);
    assert!(crate::checkpoint::index::cache_path(&store).is_file());
    // A later process: the index is the cache's; what changed since the
    // checkpoint it is of is found without git.
    std::fs::write(ws.join("a/b"), "changed\n").unwrap();
    let t = Checkpointer::new(&wal, &ws, Protected::none())
        .take(Some(&first.tree))
        .unwrap();
    assert_eq!(t.changed, ["a/b"]);
    // A cache damaged: everything is hashed again, the same trees come out.
    let cache = crate::checkpoint::index::cache_path(&store);
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
    crate::checkpoint::Taken,
)> {
    let (dir, ws) = scratch()?;
    for (name, bytes) in files {
        std::fs::write(ws.join(name), bytes).unwrap();
    }
    let wal = dir.path().join("r.wal");
    let store = crate::checkpoint::store_dir(&wal);
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
    std::fs::remove_file(crate::checkpoint::index::cache_path(&store)).unwrap();
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
    std::fs::remove_file(crate::checkpoint::index::cache_path(&store)).unwrap();
    let mut cp = Checkpointer::new(&wal, &ws, Protected::none());
    let t = cp.take(None).unwrap();
    assert_eq!(t.tree, first.tree);
    // The whole pack was indexed again by git (the same index git makes),
    // so nothing was written again; the torn one is gone.
    assert_eq!(files("pack"), vec![pack.clone()]);
    assert_eq!(std::fs::read(&idx).unwrap(), idx_bytes);
    assert!(!torn.exists());
    assert!(crate::checkpoint::objects::pack_is_whole(&pack));
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
