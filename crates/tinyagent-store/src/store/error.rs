//! The store's errors: one enum, and whether each is the input's fault.

use crate::wal::WalError;
use std::path::PathBuf;

/// Storage errors. [`StoreError::is_refusal`] tells the input's fault from a
/// failure at run time; the application decides what each means to it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: the log is in use by another process", path.display())]
    Locked { path: PathBuf },
    #[error("{}: already exists; refusing to overwrite it", path.display())]
    Exists { path: PathBuf },
    #[error("{}: no such log", path.display())]
    NotFound { path: PathBuf },
    #[error("{}: corrupt log at seq {seq}, byte offset {offset}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        seq: u64,
        offset: u64,
        reason: String,
    },
    #[error("{}: the log holds no complete record", path.display())]
    Empty { path: PathBuf },
    #[error("{}: not a log: {reason}", path.display())]
    BadLog { path: PathBuf, reason: String },
    #[error("the log writer stopped after an earlier failure: {0}")]
    Poisoned(String),
    /// The sync hook (replication) refused a sync point: its error, shared
    /// by every later append or flush.
    #[error("{0}")]
    Hook(std::sync::Arc<dyn std::error::Error + Send + Sync>),
    /// A failed write, short write, failed sync or unreadable file.
    #[error(transparent)]
    Wal(WalError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The snapshot writer thread panicked.
    #[error("snapshot compactor failed: {0}")]
    SnapshotWriter(String),
}

impl StoreError {
    /// Whether the error is the input's fault (locked, exists, missing,
    /// corrupt, empty, not a log) rather than a failure at run time (I/O, a
    /// failed write or sync, poisoned). The command line decides what each
    /// means for its exit code.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        match self {
            StoreError::Locked { .. }
            | StoreError::Exists { .. }
            | StoreError::NotFound { .. }
            | StoreError::Corrupt { .. }
            | StoreError::Empty { .. }
            | StoreError::BadLog { .. } => true,
            StoreError::Poisoned(_)
            | StoreError::Hook(_)
            | StoreError::Wal(_)
            | StoreError::Io { .. }
            | StoreError::SnapshotWriter(_) => false,
        }
    }
}

impl From<WalError> for StoreError {
    fn from(e: WalError) -> StoreError {
        match e {
            WalError::Locked { path } => StoreError::Locked { path },
            WalError::Exists { path } => StoreError::Exists { path },
            WalError::NotFound { path } => StoreError::NotFound { path },
            WalError::Poisoned(msg) => StoreError::Poisoned(msg),
            other => StoreError::Wal(other),
        }
    }
}

pub(super) fn io_err(context: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io { context, source }
}
