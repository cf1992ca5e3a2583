//! A restore's intent, and putting a whole workspace back to a tree.
//!
//! `fork --restore` and `restore --undo` are three-way (rewind.rs): they
//! change only what the run changed. [`restore`] here is for a workspace
//! tinyagent fills itself (a resume from a bucket into a new directory):
//! it makes the workspace's stored files equal the tree: files that
//! are not in it are removed (with directories that become empty), every
//! file of it is written back. Ignored files, `.git` directories and the
//! run's own files are never looked at, so they stay as they are. It is
//! idempotent: a restore killed at any point is finished by running it
//! again. A restore intent (`<wal>.d/restore.json`, written durably before
//! the workspace is touched, removed when it is done) lets `resume` finish
//! one that `fork --restore` did not.

use super::{CheckpointError, check_version};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a pending restore is to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreIntent {
    /// The run of the log it sits beside.
    #[serde(default)]
    pub run_id: String,
    pub tree: String,
    pub step: u64,
    pub workspace: String,
    /// The run's last checkpoint and the workspace before the restore (as
    /// the log's `workspace.restored` record names them).
    #[serde(default)]
    pub last: String,
    #[serde(default)]
    pub before: String,
    /// A run fetched from a bucket, whose workspace is made equal to the
    /// log's last checkpoint (`tree`) before anything else is done with
    /// it: there is no `workspace.restored` record, the log's last
    /// checkpoint is what the intent is checked against.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fetched: bool,
}

/// The restore intent file of a log.
pub fn intent_path(wal: &Path) -> PathBuf {
    crate::rundir::RunDir::of(wal).restore_intent()
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
    /// Paths that differed from the tree (written back or removed).
    pub changed: u64,
    /// The workspace's tree before the restore (kept in the store).
    pub before: String,
}

/// Makes the workspace's stored files equal `tree` of the store `git_dir`.
///
/// The workspace as it is is checkpointed into the store first (so the
/// state before the restore is kept, and the files a checkpoint would hold
/// are known exactly); a git index of that checkpoint is made (`read-tree`,
/// then `update-index --refresh` fills in the stat data of files that are
/// as stored, so they are not written again); then `git read-tree --reset
/// -u` moves that index and the files to `tree`: files that differ are
/// written, files the index holds and `tree` lacks are removed (with
/// directories left empty), and nothing the index does not hold (ignored
/// files, `.git`, the run's own files) is touched. git's checkout refuses
/// to write through a symlinked leading directory, so a workspace cannot
/// steer a restore outside itself. Running it again after a kill finishes
/// the job.
pub fn restore(
    git_dir: &Path,
    workspace: &Path,
    tree: &str,
    protected: &crate::exec::protected::Protected,
) -> Result<Restored, CheckpointError> {
    check_version()?;
    let mut cp = super::Checkpointer::for_store(git_dir, workspace, protected.clone());
    let before = cp.take(Some(tree))?;
    let index = git_dir.join("restore-index");
    let _ = std::fs::remove_file(&index);
    let _ = std::fs::remove_file(git_dir.join("restore-index.lock"));
    let mut git = cp.git().clone();
    git.index = Some(index.clone());
    git.run(&["read-tree", &before.tree], None)?;
    git.run(&["update-index", "-q", "--refresh"], None)?;
    git.run(&["read-tree", "--reset", "-u", tree], None)?;
    let _ = std::fs::remove_file(&index);
    // Written files are durable before the intent goes.
    if let Ok(dir) = std::fs::File::open(workspace) {
        nix::unistd::syncfs(&dir).map_err(|e| CheckpointError::Io(format!("syncfs: {e}")))?;
    }
    Ok(Restored {
        changed: before.changed_count,
        before: before.tree,
    })
}
