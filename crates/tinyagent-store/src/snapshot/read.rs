//! Reading a snapshot is checking it (see the module docs of [`super`]):
//! a regular file within [`size_cap`] of its log, opened without following
//! a link or blocking on a FIFO, read in bounded memory; its header, body
//! length and crcs; and the record it claims to cover.

use super::{SnapshotError, SnapshotHeader, io_err};
use crate::wal::reader::RecordPos;
use std::io::ErrorKind;
use std::path::Path;

/// The smallest [`size_cap`]: 64 MiB.
pub const MIN_SIZE_CAP: u64 = 64 << 20;

/// Longest header line read (a real one is under 300 bytes).
const MAX_HEADER_LEN: usize = 4096;

/// The largest snapshot believed beside a log of `log_len` bytes:
/// `max(64 MiB, 4 × log_len)`.
///
/// A snapshot's body is the state the log's records fold to, serialised as
/// JSON, and the records are in the log as JSON too, so a state is rarely
/// larger than the log it was folded from; four times the log leaves room
/// for a fold that keeps derived copies and re-escapes text, and the 64 MiB
/// floor covers small logs with a large state. A snapshot over the cap is
/// skipped with a warning before one byte of it is read, which costs a
/// replay, never a wrong state; without a cap a sparse multi-gigabyte file
/// planted as `<wal>.snapshot` would be read into memory whole.
#[must_use]
pub fn size_cap(log_len: u64) -> u64 {
    MIN_SIZE_CAP.max(log_len.saturating_mul(4))
}

/// The cap for a snapshot file named `<wal>.snapshot` or
/// `<wal>.snapshot.bak`: [`size_cap`] of that log (64 MiB when the name is
/// neither or the log is gone).
fn cap_beside(path: &Path) -> u64 {
    let log = path.to_str().and_then(|p| {
        p.strip_suffix(".snapshot.bak")
            .or_else(|| p.strip_suffix(".snapshot"))
    });
    let log_len = log
        .and_then(|l| std::fs::metadata(l).ok())
        .filter(std::fs::Metadata::is_file)
        .map_or(0, |m| m.len());
    size_cap(log_len)
}

/// Opens a snapshot only if it is a regular file of at most `cap` bytes
/// (see the module docs) and reads it whole.
fn read_bounded(path: &Path, cap: u64) -> Result<Vec<u8>, SnapshotError> {
    use nix::fcntl::OFlag;
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let damaged = |why: &str| SnapshotError::Damaged(why.to_string());
    let io = |e: std::io::Error| match e.kind() {
        ErrorKind::NotFound => SnapshotError::Missing {
            path: path.to_path_buf(),
        },
        _ if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            damaged("it is a symbolic link; refused")
        }
        _ => io_err(format!("could not read {}", path.display()))(e),
    };
    // lstat first: a FIFO, device or socket is refused without being opened.
    let before = std::fs::symlink_metadata(path).map_err(io)?;
    if before.file_type().is_symlink() {
        return Err(damaged("it is a symbolic link; refused"));
    }
    if !before.is_file() {
        return Err(damaged("not a regular file; refused"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() || meta.dev() != before.dev() || meta.ino() != before.ino() {
        return Err(damaged(
            "replaced by something other than a regular file while opened; refused",
        ));
    }
    if meta.len() > cap {
        return Err(SnapshotError::Damaged(format!(
            "{} bytes, over the {cap}-byte limit for this log; refused unread",
            meta.len()
        )));
    }
    // `take` keeps the bound even if the file grows after the fstat.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(cap).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// A snapshot whose file, header and body length and crc were checked, not
/// yet `header_crc` (see [`Checked::check_binding`]) nor the body's JSON.
pub(crate) struct Checked {
    header: SnapshotHeader,
    covered: RecordPos,
    body: Vec<u8>,
}

impl Checked {
    /// The record the snapshot claims to cover.
    pub(crate) fn covered(&self) -> RecordPos {
        self.covered
    }

    /// Checks `header_crc`. The store checks the covered record against the
    /// log first, so that a snapshot of another log or a stale one is
    /// reported as that.
    pub(crate) fn check_binding(&self) -> Result<(), SnapshotError> {
        self.header.check_binding()
    }

    /// Decodes the body (call after [`Checked::check_binding`]).
    pub(crate) fn decode<S: serde::de::DeserializeOwned>(self) -> Result<S, SnapshotError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| SnapshotError::Damaged(format!("bad body: {e}")))
    }
}

/// Reads a snapshot of at most `cap` bytes and checks its file, header, body
/// length and body crc.
pub(crate) fn read_unbound(path: &Path, cap: u64) -> Result<Checked, SnapshotError> {
    let mut bytes = read_bounded(path, cap)?;
    let damaged = |why: String| SnapshotError::Damaged(why);
    let nl = bytes
        .iter()
        .take(MAX_HEADER_LEN + 1)
        .position(|b| *b == b'\n')
        .ok_or_else(|| damaged("no header line".to_string()))?;
    let header: SnapshotHeader =
        serde_json::from_slice(&bytes[..nl]).map_err(|e| damaged(format!("bad header: {e}")))?;
    let covered = header.covered()?;
    let body = &bytes[nl + 1..];
    if body.len() as u64 != header.body_len {
        return Err(damaged(format!(
            "body is {} bytes, header says {}",
            body.len(),
            header.body_len
        )));
    }
    let crc = format!("{:08x}", crc32fast::hash(body));
    if crc != header.body_crc {
        return Err(damaged(format!(
            "body crc is {crc}, header says {}",
            header.body_crc
        )));
    }
    bytes.drain(..=nl);
    Ok(Checked {
        header,
        covered,
        body: bytes,
    })
}

/// Reads a snapshot of at most `cap` bytes and checks all of it but the
/// log: the file, the header, the body's length and crc, `header_crc`.
///
/// # Errors
/// [`SnapshotError::Missing`], an I/O error, or why it is refused.
pub fn read_within<S: serde::de::DeserializeOwned>(
    path: &Path,
    cap: u64,
) -> Result<(RecordPos, S), SnapshotError> {
    let checked = read_unbound(path, cap)?;
    checked.check_binding()?;
    let covered = checked.covered();
    Ok((covered, checked.decode()?))
}

/// Reads and checks a snapshot file: the covered record and the state
/// ([`read_within`] with the [`size_cap`] of the log it sits beside).
///
/// # Errors
/// [`SnapshotError::Missing`], an I/O error, or why it is damaged.
pub fn read<S: serde::de::DeserializeOwned>(path: &Path) -> Result<(RecordPos, S), SnapshotError> {
    read_within(path, cap_beside(path))
}

/// Reads and checks a snapshot file (everything [`read`] checks) without
/// decoding the state: what inspect needs.
///
/// # Errors
/// As [`read`].
pub fn read_header(path: &Path) -> Result<RecordPos, SnapshotError> {
    read_header_within(path, cap_beside(path))
}

/// [`read_header`] with an explicit size cap.
///
/// # Errors
/// As [`read`].
pub fn read_header_within(path: &Path, cap: u64) -> Result<RecordPos, SnapshotError> {
    let checked = read_unbound(path, cap)?;
    checked.check_binding()?;
    Ok(checked.covered())
}
