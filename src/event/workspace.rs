//! Workspace checkpoints: the snapshot taken after a step
//! ([`WorkspaceCheckpoint`]), a rewind back to one ([`WorkspaceRestored`]),
//! and the files too large to store ([`Oversized`]).

use serde::{Deserialize, Serialize};

/// The workspace's state after a call that can change files (or at the
/// start of a run, with no call): the tree id in the run's checkpoint store
/// (`<wal>.d/checkpoints.git`), durable before this record is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceCheckpoint {
    pub step: u64,
    /// The call after which it was taken; `None` for the starting state
    /// and for changes found on resume that no call of the log made.
    pub call_id: Option<String>,
    /// The root tree id of the stored files.
    pub tree: String,
    /// Paths that differ from the previous checkpoint (the first
    /// the checkpoint store's limit).
    pub changed: Vec<String>,
    /// How many paths differ (all of them, also past the listed ones).
    #[serde(default)]
    pub changed_count: u64,
    /// Files stored in the tree.
    #[serde(default)]
    pub files: u64,
    /// Files over the size cap: named with their size and hash, not stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oversized: Vec<Oversized>,
    /// With `[checkpoints] watch = true`: `watch` when only the paths the
    /// watch reported were looked at, else `full: <why>` (the workspace
    /// was walked). Left out when the watch is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk: Option<String>,
}

/// A restore of the workspace (`fork --restore`), written before the
/// workspace is changed: what it puts back and how to undo it. Only paths
/// the run changed after the restore point that still hold what its last
/// checkpoint recorded are changed (all of them with `force`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRestored {
    /// The step restored to.
    pub step: u64,
    /// The restore point's tree (in this log's checkpoint store).
    pub tree: String,
    /// The run's last checkpoint's tree.
    pub last: String,
    /// The workspace as it was before the restore: `restore --undo` puts
    /// the changed paths back to it.
    pub before: String,
    /// The workspace restored.
    pub workspace: String,
    #[serde(default)]
    pub force: bool,
    /// The paths the restore changes.
    #[serde(default)]
    pub paths: Vec<String>,
    /// The paths left as they are (changed since the run's last checkpoint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// Set on the record `restore --undo` appends once it has put the
    /// workspace back: the restore's own fields repeated, `force`, `paths`
    /// and `conflicts` the undo's. Absent (false) on a restore, and in logs
    /// written before undo left a record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undo: bool,
}

/// A file over the checkpoint store's size cap: recorded by size and hash,
/// not stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Oversized {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}
