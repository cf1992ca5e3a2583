//! The store as a whole, apart from taking a checkpoint: a diff between two
//! of its trees, a copy of it for a fork, and a stale lock cleared.

use super::{CheckpointError, EMPTY_TREE, Git, check_version, git};
use std::path::Path;

/// A unified diff between two trees of a store (`from` `None`: the empty
/// tree). Read-only: nothing in the store changes.
pub fn diff(git_dir: &Path, from: Option<&str>, to: &str) -> Result<Vec<u8>, CheckpointError> {
    let git = Git {
        git_dir: git_dir.to_path_buf(),
        work_tree: std::env::temp_dir(),
        index: None,
    };
    check_version()?;
    Ok(git.run(
        &[
            "diff-tree",
            "-r",
            "-p",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            from.unwrap_or(EMPTY_TREE),
            to,
        ],
        None,
    )?)
}

/// Makes `to` (a new store) hold every object of `from`, as one pack
/// written by `git pack-objects` (no delta search: it is a copy, not a
/// compression), so the new store depends on nothing of the old one, and the
/// old one is only read. Durable when it returns (git fsyncs the pack and
/// its index, `core.fsync=pack`; the directory is synced here); safe to run
/// again after a kill (a second identical pack is harmless).
pub fn copy_store(from: &Path, to: &Path, workspace: &Path) -> Result<(), CheckpointError> {
    let io = |what: String, e: std::io::Error| CheckpointError::Io(format!("{what}: {e}"));
    check_version()?;
    // No workspace is needed (or read) to copy objects.
    let _ = workspace;
    let new = Git {
        git_dir: to.to_path_buf(),
        work_tree: to.to_path_buf(),
        index: None,
    };
    new.init()?;
    // The old store is read through an alternate given for these two
    // commands only: git makes its temp files in the new store, so a kill
    // leaves nothing in the old one, and the new one keeps no link to it.
    let alt = from.join("objects");
    let envs = [("GIT_ALTERNATE_OBJECT_DIRECTORIES", alt.as_os_str())];
    let ids = new.run_env(
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ],
        None,
        &envs,
    )?;
    if ids.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let packs = to.join("objects/pack");
    std::fs::create_dir_all(&packs).map_err(|e| io(format!("mkdir {}", packs.display()), e))?;
    let base = packs.join("pack");
    let base = base.to_string_lossy();
    new.run_env(
        &[
            "pack-objects",
            "-q",
            "--window=0",
            "--depth=0",
            "--threads=1",
            "--no-reuse-delta",
            &base,
        ],
        Some(&ids),
        &envs,
    )?;
    git::sync_dir(&packs).map_err(|e| io(format!("fsync {}", packs.display()), e))?;
    Ok(())
}

/// Removes a git lock file a killed process left (`index.lock`). Only
/// called where no other process can be using the store: the run holds the
/// log's lock, a fork's store has no run yet.
pub fn clear_stale_lock(git_dir: &Path) {
    let _ = std::fs::remove_file(git_dir.join("index.lock"));
}
