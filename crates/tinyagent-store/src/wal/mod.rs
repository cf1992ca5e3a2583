//! The write-ahead log: framing, writer and reader.
//!
//! - [`frame`]: pure encode/decode of one line (no I/O).
//! - [`fs`]: the file-access seam ([`fs::LogFile`]) and fault injection.
//! - [`writer`]: the fail-stop appender (one `write` + `fdatasync` per record).
//! - [`reader`]: the streaming scanner that tells a torn tail from corruption
//!   (`crc_back` runs CRC-32 backwards for it, to check every candidate
//!   record inside a damaged line in one pass).
//!
//! The on-disk format and the reader's rules are written down in
//! tinyagent's `docs/format.md`. Directory helpers live in
//! [`crate::fsutil`].

mod crc_back;
pub mod frame;
pub mod fs;
pub mod reader;
pub mod writer;

use std::path::PathBuf;

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
