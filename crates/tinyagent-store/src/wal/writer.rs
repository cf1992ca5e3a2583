//! The fail-stop log writer.
//!
//! Records are staged ([`WalWriter::stage`]: framed, seq and position given)
//! and made durable together by [`WalWriter::flush`]: one `write(2)` of all
//! the staged lines on an `O_APPEND` file, then one `fdatasync(2)`. Only when
//! both succeed does a staged record count as saved. [`WalWriter::append`]
//! is one record staged and flushed. Any failure (an
//! error, a short write, a failed sync) poisons the writer: the sync is never
//! retried (after a failed fsync the kernel may have dropped the dirty pages,
//! so a retry that "succeeds" proves nothing) and every later append returns
//! [`WalError::Poisoned`] with the first error's message.
//!
//! The file is created with `O_CREAT|O_EXCL`, mode 0600
//! ([`crate::fsutil::create_private`]), and its directory is fsync'd so the
//! new name survives a crash. An exclusive lock
//! ([`std::fs::File::try_lock`], `flock(2)` on Linux) is held for as long as
//! the writer lives; a second writer gets [`WalError::Locked`] at once.

use super::WalError;
use super::frame::encode;
use super::fs::{FaultPlan, FaultyFile, LogFile};
use super::reader::RecordPos;
use crate::Record;
use crate::fsutil::{create_private, sync_parent_dir};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub crc: u32,
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Length of the line including its newline.
    pub len: u64,
}

impl From<Appended> for RecordPos {
    fn from(a: Appended) -> RecordPos {
        RecordPos {
            seq: a.seq,
            crc: a.crc,
            offset: a.offset,
            len: a.len,
        }
    }
}

/// The current time as the log writes it: RFC 3339 UTC with milliseconds.
#[must_use]
fn now_ts() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A duration in nanoseconds, saturating (585 years fit).
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn try_lock(file: &File, path: &Path) -> Result<(), WalError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(WalError::Locked {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(WalError::io(
            format!("could not lock {}", path.display()),
            e,
        )),
    }
}

/// An existing log, opened for appending and exclusively locked, before it
/// becomes a [`WalWriter`]. Recovery uses it to cut a torn tail under the lock.
pub struct LockedLog {
    file: File,
    path: PathBuf,
}

impl LockedLog {
    /// Opens an existing log (read + append) and takes its lock without
    /// waiting.
    pub fn open(path: &Path) -> Result<LockedLog, WalError> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => WalError::NotFound {
                    path: path.to_path_buf(),
                },
                _ => WalError::io(format!("could not open {}", path.display()), e),
            })?;
        try_lock(&file, path)?;
        Ok(LockedLog {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Cuts the file to `len` bytes and makes the new size durable.
    pub fn truncate(&mut self, len: u64) -> Result<(), WalError> {
        let ctx = || format!("could not cut {} to {len} bytes", self.path.display());
        self.file.set_len(len).map_err(|e| WalError::io(ctx(), e))?;
        self.file.sync_all().map_err(|e| WalError::io(ctx(), e))
    }

    /// Turns the locked file into a writer that continues after `last` (the
    /// last valid record, `None` for an empty log); the file must be exactly
    /// `len` bytes long.
    pub fn into_writer(
        self,
        last: Option<&RecordPos>,
        len: u64,
        faults: Option<FaultPlan>,
    ) -> WalWriter {
        WalWriter::from_file(self.file, self.path, last, len, faults)
    }
}

/// What the writer has done so far, for the run's own overhead report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    pub appends: u64,
    pub bytes: u64,
    /// Time in `write`, in nanoseconds.
    pub write_nanos: u64,
    /// Time in `fdatasync`, in nanoseconds.
    pub sync_nanos: u64,
    /// `fdatasync` calls (one per flush of staged records).
    pub syncs: u64,
}

/// The append-only, fail-stop writer of one log file.
pub struct WalWriter {
    io: IoStats,
    file: Box<dyn LogFile>,
    path: PathBuf,
    next_seq: u64,
    prev: u32,
    offset: u64,
    poisoned: Option<String>,
    /// Framed records staged and not yet written.
    buf: Vec<u8>,
    /// How many records `buf` holds.
    staged: u64,
    /// The lines of the last successful flush (the buffer swapped out).
    last_batch: Vec<u8>,
}

impl WalWriter {
    /// Creates a new log; refuses an existing file ([`WalError::Exists`]).
    pub fn create(path: &Path) -> Result<WalWriter, WalError> {
        WalWriter::create_with(path, None)
    }

    /// [`WalWriter::create`] with faults injected into the file's writes and
    /// syncs (tests, `TINYAGENT_FAULTS`).
    pub(crate) fn create_with(
        path: &Path,
        faults: Option<FaultPlan>,
    ) -> Result<WalWriter, WalError> {
        let file = create_private(path, true).map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => WalError::Exists {
                path: path.to_path_buf(),
            },
            _ => WalError::io(format!("could not create {}", path.display()), e),
        })?;
        try_lock(&file, path)?;
        sync_parent_dir(path).map_err(|e| {
            WalError::io(
                format!("could not fsync the directory of {}", path.display()),
                e,
            )
        })?;
        Ok(WalWriter::from_file(
            file,
            path.to_path_buf(),
            None,
            0,
            faults,
        ))
    }

    fn from_file(
        file: File,
        path: PathBuf,
        last: Option<&RecordPos>,
        len: u64,
        faults: Option<FaultPlan>,
    ) -> WalWriter {
        let file: Box<dyn LogFile> = match faults {
            Some(plan) => Box::new(FaultyFile::new(file, plan)),
            None => Box::new(file),
        };
        WalWriter {
            io: IoStats::default(),
            file,
            path,
            next_seq: last.map_or(1, |p| p.seq + 1),
            prev: last.map_or(0, |p| p.crc),
            offset: len,
            poisoned: None,
            buf: Vec::with_capacity(4096),
            staged: 0,
            last_batch: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The seq the next record will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Byte offset after the last staged record (after the last durable one
    /// when nothing is staged).
    pub fn end(&self) -> u64 {
        self.offset
    }

    /// The lines the last successful [`WalWriter::flush`] made durable.
    pub fn last_batch(&self) -> &[u8] {
        &self.last_batch
    }

    /// Appends one record stamped with the current time (`ts`, see
    /// [`now_ts`]) and makes it durable: [`WalWriter::stage`] then
    /// [`WalWriter::flush`]. Every record is stamped when it is appended,
    /// imported ones too: a trajectory file has no per-record times to keep.
    ///
    /// # Errors
    /// As [`WalWriter::stage`] and [`WalWriter::flush`].
    pub fn append<R: Record>(&mut self, event: &R) -> Result<Appended, WalError> {
        let done = self.stage(event)?;
        self.flush()?;
        Ok(done)
    }

    /// Frames one record after those staged before it, without writing it:
    /// it becomes durable, with everything staged, at the next
    /// [`WalWriter::flush`]. Its position is final once that returns.
    ///
    /// # Errors
    /// [`WalError::Poisoned`] after an earlier failure; [`WalError::Encode`]
    /// when the record does not serialise or is too long (that does not
    /// poison the writer: nothing of it is staged).
    pub fn stage<R: Record>(&mut self, event: &R) -> Result<Appended, WalError> {
        if let Some(msg) = &self.poisoned {
            return Err(WalError::Poisoned(msg.clone()));
        }
        let start = self.buf.len();
        let crc = match encode(self.next_seq, self.prev, &now_ts(), event, &mut self.buf) {
            Ok(crc) => crc,
            Err(e) => {
                self.buf.truncate(start);
                return Err(e.into());
            }
        };
        let len = (self.buf.len() - start) as u64;
        let done = Appended {
            seq: self.next_seq,
            crc,
            offset: self.offset,
            len,
        };
        self.next_seq += 1;
        self.prev = crc;
        self.offset += len;
        self.staged += 1;
        Ok(done)
    }

    /// Makes every staged record durable: one `write` of all of them, one
    /// `fdatasync`. Nothing staged: nothing to do.
    ///
    /// # Errors
    /// [`WalError::Poisoned`] after an earlier failure; the write or sync
    /// error, which poisons the writer (the staged records are lost, and
    /// were never acknowledged).
    pub fn flush(&mut self) -> Result<(), WalError> {
        if let Some(msg) = &self.poisoned {
            return Err(WalError::Poisoned(msg.clone()));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let expected = self.buf.len();
        let t0 = std::time::Instant::now();
        let written = self.file.write(&self.buf);
        let t1 = std::time::Instant::now();
        let outcome = match written {
            Ok(n) if n == expected => {
                let synced = self.file.sync_data().map_err(|source| WalError::Sync {
                    path: self.path.clone(),
                    source,
                });
                self.io.sync_nanos += nanos(t1.elapsed());
                self.io.syncs += 1;
                synced
            }
            Ok(written) => Err(WalError::ShortWrite {
                path: self.path.clone(),
                written,
                expected,
            }),
            Err(source) => Err(WalError::Write {
                path: self.path.clone(),
                source,
            }),
        };
        if let Err(e) = outcome {
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        self.io.write_nanos += nanos(t1 - t0);
        self.io.appends += self.staged;
        self.io.bytes += expected as u64;
        self.staged = 0;
        std::mem::swap(&mut self.buf, &mut self.last_batch);
        self.buf.clear();
        Ok(())
    }

    /// Writes and syncs only the first `len` bytes of what is staged: the
    /// crash seam's way to leave a prefix of a batch durable before it kills
    /// the process. Never used otherwise.
    pub(crate) fn flush_prefix(&mut self, len: u64) -> Result<(), WalError> {
        let len = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        let written = self
            .file
            .write(&self.buf[..len])
            .map_err(|source| WalError::Write {
                path: self.path.clone(),
                source,
            })?;
        if written != len {
            return Err(WalError::ShortWrite {
                path: self.path.clone(),
                written,
                expected: len,
            });
        }
        self.file.sync_data().map_err(|source| WalError::Sync {
            path: self.path.clone(),
            source,
        })
    }

    /// Counters of what this writer did.
    pub fn stats(&self) -> IoStats {
        self.io
    }
}
