//! The write-ahead log: framing, writer and reader.
//!
//! - [`frame`]: pure encode/decode of one line (no I/O).
//! - [`fs`]: the file-access seam ([`fs::LogFile`]) and fault injection.
//! - [`writer`]: the fail-stop appender (one `write` + `fdatasync` per record).
//! - [`reader`]: the streaming scanner that tells a torn tail from corruption.
//!
//! The on-disk format and the reader's rules are written down in
//! `docs/format.md`.

pub mod frame;
pub mod fs;
pub mod reader;
pub mod writer;

use std::path::{Path, PathBuf};

/// Errors of the log writer and reader.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("{}: the log is in use by another process (locked)", path.display())]
    Locked { path: PathBuf },
    #[error("{}: already exists; refusing to overwrite it", path.display())]
    Exists { path: PathBuf },
    #[error("{}: no such log", path.display())]
    NotFound { path: PathBuf },
    #[error("write to {} failed: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("short write to {}: {written} of {expected} bytes written", path.display())]
    ShortWrite {
        path: PathBuf,
        written: usize,
        expected: usize,
    },
    #[error("fdatasync of {} failed: {source}", path.display())]
    Sync {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the log writer stopped after an earlier failure: {0}")]
    Poisoned(String),
    #[error("could not serialise a record: {0}")]
    Encode(#[from] serde_json::Error),
    /// The record a scan was asked to start after is not in the log.
    #[error("{}: no record seq {seq} at byte {offset}: {reason}", path.display())]
    Anchor {
        path: PathBuf,
        seq: u64,
        offset: u64,
        reason: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl WalError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> WalError {
        WalError::Io {
            context: context.into(),
            source,
        }
    }
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsyncs the directory holding `path`, making a create, rename or unlink in
/// it durable.
pub fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(parent_dir(path))?.sync_all()
}

/// Creates `dir` and any missing ancestors, fsyncing the parent of each
/// directory it creates, so that the new names (and so a log created inside)
/// survive a crash. Existing directories are left alone.
pub fn create_dir_all_durable(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_all_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => sync_parent_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// `path` with `suffix` appended to its file name (`a.wal` -> `a.wal.snapshot`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_dir_creation_makes_every_missing_level_and_tolerates_existing_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        create_dir_all_durable(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_all_durable(&deep).unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(create_dir_all_durable(&file.join("d")).is_err());
    }
}
