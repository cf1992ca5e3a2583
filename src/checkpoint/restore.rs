//! Putting a workspace back to a checkpoint's tree.
//!
//! A restore makes the workspace's stored files equal the tree: files that
//! are not in it are removed (with directories that become empty), every
//! file of it is written back. Ignored files, `.git` directories and the
//! run's own files are never looked at, so they stay as they are. It is
//! idempotent: a restore killed at any point is finished by running it
//! again. A restore intent (`<wal>.d/restore.json`, written durably before
//! the workspace is touched, removed when it is done) lets `resume` finish
//! one that `fork --restore` did not.

use super::{CheckpointError, Git, OsStrPath, check_version, walk};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What a pending restore is to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreIntent {
    pub tree: String,
    pub step: u64,
    pub workspace: String,
}

/// The restore intent file of a log.
pub fn intent_path(wal: &Path) -> PathBuf {
    let mut s = wal.as_os_str().to_owned();
    s.push(".d");
    PathBuf::from(s).join("restore.json")
}

/// Writes the intent durably (before the workspace is touched).
pub fn write_intent(wal: &Path, intent: &RestoreIntent) -> Result<(), CheckpointError> {
    let path = intent_path(wal);
    if let Some(dir) = path.parent() {
        tinyagent_store::fsutil::create_dir_all_durable(dir)
            .map_err(|e| CheckpointError::Io(format!("creating {}: {e}", dir.display())))?;
    }
    let bytes = serde_json::to_vec(intent).map_err(|e| CheckpointError::Io(e.to_string()))?;
    tinyagent_store::fsutil::atomic_write(&path, &bytes)
        .map_err(|e| CheckpointError::Io(format!("writing {}: {e}", path.display())))
}

/// The pending restore of a log, if any (a damaged file reads as none and is
/// reported by the caller).
pub fn read_intent(wal: &Path) -> Result<Option<RestoreIntent>, CheckpointError> {
    let path = intent_path(wal);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| CheckpointError::Io(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CheckpointError::Io(format!("{}: {e}", path.display()))),
    }
}

/// Removes the intent (the restore is done), durably.
pub fn clear_intent(wal: &Path) -> Result<(), CheckpointError> {
    let path = intent_path(wal);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CheckpointError::Io(format!("{}: {e}", path.display()))),
    }
    if let Some(dir) = path.parent() {
        super::git::sync_dir(dir).map_err(|e| CheckpointError::Io(e.to_string()))?;
    }
    Ok(())
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    pub removed: u64,
    pub written: u64,
}

/// Makes the workspace's stored files equal `tree` of the store `git_dir`.
pub fn restore(
    git_dir: &Path,
    workspace: &Path,
    tree: &str,
    protected: &crate::tools::protected::Protected,
) -> Result<Restored, CheckpointError> {
    check_version()?;
    let git = Git {
        git_dir: git_dir.to_path_buf(),
        work_tree: workspace.to_path_buf(),
        index: None,
    };
    let listed = git.run(
        &["ls-tree", "-r", "-z", "--full-tree", "--name-only", tree],
        None,
    )?;
    let wanted: BTreeSet<&[u8]> = listed
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .collect();
    let mut report = Restored::default();
    let mut dirs = BTreeSet::new();
    for rel in walk(workspace, protected) {
        if wanted.contains(rel.as_slice()) {
            continue;
        }
        let full = workspace.join(OsStrPath::of(&rel));
        match std::fs::remove_file(&full) {
            Ok(()) => report.removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CheckpointError::Io(format!(
                    "removing {}: {e}",
                    full.display()
                )));
            }
        }
        let mut p = full.parent();
        while let Some(dir) = p {
            if dir == workspace || !dir.starts_with(workspace) {
                break;
            }
            dirs.insert(dir.to_path_buf());
            p = dir.parent();
        }
    }
    // Deepest first: a directory the removals emptied goes too (one that
    // still holds something, ignored files for instance, stays).
    for dir in dirs.iter().rev() {
        let _ = std::fs::remove_dir(dir);
    }
    git.run(&["read-tree", tree], None)?;
    git.run(&["checkout-index", "-a", "-f", "-u", "-q"], None)?;
    report.written = wanted.len() as u64;
    // Written files are made durable before the intent goes.
    if let Ok(dir) = std::fs::File::open(workspace) {
        nix::unistd::syncfs(&dir).map_err(|e| CheckpointError::Io(format!("syncfs: {e}")))?;
    }
    Ok(report)
}
