//! Atomic state snapshots and the background thread that writes them.
//!
//! `<wal>.snapshot` is one header line of JSON, then the body:
//!
//! ```text
//! {"format":"tinyagent-snapshot","version":1,"seq":1000,"offset":123456,"record_offset":123300,"crc":"1c291ca3","body_len":98765,"body_crc":"9f0e1d2c","header_crc":"4e15aee0"}\n
//! <body_len bytes: serde_json of the state (the Fold)>
//! ```
//!
//! `seq`, `crc`, `record_offset` and `offset` name the last record the state
//! covers (its seq, crc, first byte and the byte just past its newline);
//! `body_crc` is the CRC-32 of the body and `header_crc` the CRC-32 of
//! [`SnapshotHeader::binding`], a line of every other header member
//! (`body_crc` included), which binds the body to the record it claims to
//! cover: a header from one snapshot over the body of another fails one of the
//! two. A snapshot is written to a temp file
//! in the same directory (`<wal>.snapshot.tmp-<pid>-<n>`), fsync'd, the
//! current `.snapshot` is hard-linked to `.snapshot.bak`, the temp file is
//! renamed over `.snapshot` and the directory is fsync'd. There is a valid
//! `.snapshot` at every instant; a crash leaves at worst a stray temp file,
//! which [`clean_stray`] deletes when the log is next opened for writing.
//!
//! # Reading is checking
//!
//! A snapshot is opened with `O_NOFOLLOW|O_NONBLOCK` (a symlink is refused, a
//! FIFO cannot block), must be a regular file (lstat before the open, fstat
//! after it, the same inode both times) no larger than [`size_cap`] of its
//! log, and at most that many bytes are read. Then the header must parse and
//! name a record, the body must have `body_len` bytes and `body_crc`, and
//! `header_crc` must hold. Snapshots written before `header_crc` existed
//! (same format, version 1, no such member) are still read with the body
//! check they always had; see [`SnapshotHeader::header_crc`].
//!
//! The [`SnapshotWriter`] is a thread with its own mirror of the state (a
//! [`Fold`]): the store sends it every appended record after it is durable (a move, no clone, no
//! serialisation on the append path) and it writes a snapshot every
//! `snapshot_every` records. The channel is unbounded, so a slow snapshot
//! never delays an append.

use crate::fsutil::{Step, parent_dir, replace_atomically, sibling, sync_parent_dir};
use crate::seams::crash_now;
use crate::wal::reader::RecordPos;
use crate::{Fold, Record};
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

const SNAPSHOT_FORMAT: &str = "tinyagent-snapshot";
const SNAPSHOT_VERSION: u32 = 1;
const TMP_MARK: &str = ".snapshot.tmp-";

/// A snapshot that was written (or loaded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotSaved {
    /// Seq of the last record it covers.
    pub seq: u64,
    pub path: PathBuf,
}

/// The snapshot's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub format: String,
    pub version: u32,
    pub seq: u64,
    /// Offset just past the covered record's newline.
    pub offset: u64,
    /// Offset of the covered record's first byte.
    pub record_offset: u64,
    /// Crc of the covered record (8 hex digits).
    pub crc: String,
    pub body_len: u64,
    pub body_crc: String,
    /// CRC-32 (8 hex digits) of [`SnapshotHeader::binding`]. Every snapshot
    /// this crate writes has it. `None` only in a snapshot written by an
    /// older binary (the checked-in previous-format fixture is one): the
    /// version stays 1 so that those keep loading and so that an older
    /// binary still reads a newer snapshot (it ignores the member), and such
    /// a header is checked as it always was, body length and crc only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_crc: Option<String>,
}

impl SnapshotHeader {
    /// The text `header_crc` is the CRC-32 of: every other member, in order,
    /// one space between them, numbers in decimal, crcs as written, e.g.
    /// `tinyagent-snapshot 1 1000 123300 123456 1c291ca3 98765 9f0e1d2c`.
    /// `body_crc` is in it, so the crc binds the body to the covered record.
    #[must_use]
    pub fn binding(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {}",
            self.format,
            self.version,
            self.seq,
            self.record_offset,
            self.offset,
            self.crc,
            self.body_len,
            self.body_crc
        )
    }

    /// Whether `header_crc` holds (a header without one passes: see the
    /// member's docs).
    fn check_binding(&self) -> Result<(), SnapshotError> {
        let Some(stored) = &self.header_crc else {
            return Ok(());
        };
        let computed = format!("{:08x}", crc32fast::hash(self.binding().as_bytes()));
        if *stored == computed {
            Ok(())
        } else {
            Err(SnapshotError::Damaged(format!(
                "header crc is {computed}, header says {stored}: the header and body do not belong together"
            )))
        }
    }

    /// The covered record, if the header is self-consistent.
    fn covered(&self) -> Result<RecordPos, SnapshotError> {
        let damaged = |why: &str| Err(SnapshotError::Damaged(why.to_string()));
        if self.format != SNAPSHOT_FORMAT || self.version != SNAPSHOT_VERSION {
            return damaged("unknown snapshot format or version");
        }
        if self.seq == 0 || self.offset <= self.record_offset {
            return damaged("header names no record");
        }
        let crc = u32::from_str_radix(&self.crc, 16)
            .ok()
            .filter(|_| self.crc.len() == 8);
        let Some(crc) = crc else {
            return damaged("header crc is not 8 hex digits");
        };
        Ok(RecordPos {
            seq: self.seq,
            crc,
            offset: self.record_offset,
            len: self.offset - self.record_offset,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("damaged snapshot: {0}")]
    Damaged(String),
    #[error("could not serialise the state: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> SnapshotError {
    move |source| SnapshotError::Io { context, source }
}

/// `<wal>.snapshot`
pub fn snapshot_path(wal: &Path) -> PathBuf {
    sibling(wal, ".snapshot")
}

/// Whether two paths name one file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// `<wal>.snapshot.bak`
pub fn backup_path(wal: &Path) -> PathBuf {
    sibling(wal, ".snapshot.bak")
}

fn temp_path(wal: &Path, suffix: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    sibling(
        wal,
        &format!("{TMP_MARK}{}-{n}{suffix}", std::process::id()),
    )
}

/// Deletes temp files a crashed snapshot write left beside `wal`; returns
/// their paths. Call only while holding the log's lock.
///
/// # Errors
/// When the directory cannot be read or a file cannot be removed.
pub fn clean_stray(wal: &Path) -> std::io::Result<Vec<PathBuf>> {
    let Some(name) = wal.file_name().and_then(|n| n.to_str()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{name}{TMP_MARK}");
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(parent_dir(wal))? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            std::fs::remove_file(entry.path())?;
            removed.push(entry.path());
        }
    }
    if !removed.is_empty() {
        sync_parent_dir(wal)?;
    }
    Ok(removed)
}

/// Writes a snapshot of `state`, which covers the log up to and including
/// `covered`, atomically (see the module docs), calling `before_swap` once
/// the temp file is written and synced (the crash seam).
pub(crate) fn write<S: Serialize>(
    wal: &Path,
    state: &S,
    covered: &RecordPos,
    before_swap: impl FnOnce(),
) -> Result<SnapshotSaved, SnapshotError> {
    let body = serde_json::to_vec(state)?;
    let header = SnapshotHeader {
        format: SNAPSHOT_FORMAT.to_string(),
        version: SNAPSHOT_VERSION,
        seq: covered.seq,
        offset: covered.end(),
        record_offset: covered.offset,
        crc: format!("{:08x}", covered.crc),
        body_len: body.len() as u64,
        body_crc: format!("{:08x}", crc32fast::hash(&body)),
        header_crc: None,
    };
    let header = SnapshotHeader {
        header_crc: Some(format!(
            "{:08x}",
            crc32fast::hash(header.binding().as_bytes())
        )),
        ..header
    };
    let mut bytes = serde_json::to_vec(&header)?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    drop(body);
    let tmp = temp_path(wal, "");
    let snap = snapshot_path(wal);
    let ctx = |what: &str, p: &Path| format!("could not {what} {}", p.display());
    let keep_backup = || {
        before_swap();
        let bak = backup_path(wal);
        // A kill between the two renames of an earlier write can leave
        // `.snapshot` and `.bak` as one file; then `.bak` already holds the
        // current snapshot (and a rename between two names of one file does
        // nothing, which would leave the temp link behind).
        if snap.exists() && !same_file(&snap, &bak) {
            // Keep the current one as .bak without ever leaving no .snapshot.
            let bak_tmp = temp_path(wal, ".bak");
            std::fs::hard_link(&snap, &bak_tmp).map_err(io_err(ctx("link", &snap)))?;
            if let Err(e) = std::fs::rename(&bak_tmp, &bak) {
                let _ = std::fs::remove_file(&bak_tmp);
                return Err(io_err(ctx("rename to", &bak))(e));
            }
        }
        Ok(())
    };
    let fail = |step: Step, e: std::io::Error| {
        let context = match step {
            Step::Create => ctx("create", &tmp),
            Step::Write => ctx("write", &tmp),
            Step::Sync => ctx("fsync", &tmp),
            Step::Rename => ctx("rename to", &snap),
            Step::SyncDir => ctx("fsync the directory of", wal),
        };
        io_err(context)(e)
    };
    replace_atomically(&snap, &tmp, &bytes, keep_backup, fail)?;
    Ok(SnapshotSaved {
        seq: covered.seq,
        path: snap,
    })
}

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

/// Called on the snapshot writer thread with the seq about to be
/// snapshotted, just before each snapshot is written (tests use it to make
/// snapshots slow).
pub type SnapshotHook = Arc<dyn Fn(u64) + Send + Sync>;

enum Msg<R> {
    /// Durable records, in order: one wake of the thread.
    Records(Vec<(RecordPos, R)>),
    Stop {
        final_snapshot: bool,
    },
}

/// What the snapshot writer reports: a snapshot written, or why one failed.
pub type Notice = Result<SnapshotSaved, String>;

/// How the snapshot writer thread runs.
pub(crate) struct WriterConfig {
    /// Records between snapshots (0: only on stop).
    pub every: u64,
    pub hook: Option<SnapshotHook>,
    /// The crash seam: SIGKILL inside this (1-based) snapshot write.
    pub crash_in: Option<u64>,
}

/// The background snapshot writer (see the module docs).
pub struct SnapshotWriter<R> {
    tx: Sender<Msg<R>>,
    notices: Receiver<Notice>,
    handle: Option<JoinHandle<()>>,
    /// Durable records not yet handed over: they go in batches of
    /// [`HANDOFF`], or at once when the thread's next snapshot falls among
    /// them, so a step's sync points do not each wake the thread.
    held: Vec<(RecordPos, R)>,
    /// Records, handed over or held, until the thread's next snapshot.
    due_in: u64,
    every: u64,
}

/// Durable records held back before they are handed to the thread.
const HANDOFF: usize = 64;

impl<R: Record> SnapshotWriter<R> {
    /// Starts the thread with the state as of `last` (the last durable
    /// record).
    pub(crate) fn spawn<S: Fold<R>>(
        wal: PathBuf,
        state: S,
        last: Option<RecordPos>,
        config: WriterConfig,
    ) -> std::io::Result<SnapshotWriter<R>> {
        let (tx, rx) = channel();
        let (ntx, notices) = channel();
        let every = config.every;
        let handle = std::thread::Builder::new()
            .name("tinyagent-snapshot".to_string())
            .spawn(move || run(&wal, state, last, &config, &rx, &ntx))?;
        Ok(SnapshotWriter {
            tx,
            notices,
            handle: Some(handle),
            held: Vec::with_capacity(HANDOFF),
            due_in: every,
            every,
        })
    }

    /// Takes one durable record. Never blocks.
    pub fn record(&mut self, pos: RecordPos, event: R) {
        self.records(std::iter::once((pos, event)));
    }

    /// Takes the durable records of one sync point, in order. They reach
    /// the thread with the ones held before them, as one message, once
    /// [`HANDOFF`] are held or a snapshot is due among them (so every
    /// snapshot is taken at the record it would be taken at were each
    /// handed over at once). Never blocks.
    pub fn records(&mut self, batch: impl IntoIterator<Item = (RecordPos, R)>) {
        let mut due = false;
        for record in batch {
            self.held.push(record);
            if self.every > 0 {
                self.due_in -= 1;
                if self.due_in == 0 {
                    due = true;
                    self.due_in = self.every;
                }
            }
        }
        if due || self.held.len() >= HANDOFF {
            self.hand_over();
        }
    }

    fn hand_over(&mut self) {
        if !self.held.is_empty() {
            let batch = std::mem::replace(&mut self.held, Vec::with_capacity(HANDOFF));
            // A send fails only when the thread is gone; snapshots then stop, appends go on.
            let _ = self.tx.send(Msg::Records(batch));
        }
    }

    /// Notices so far, without waiting.
    pub fn try_notices(&self) -> Vec<Notice> {
        self.notices.try_iter().collect()
    }

    /// Stops the thread after it has applied everything sent so far (with a
    /// final snapshot when asked and anything is uncovered); returns the
    /// notices not yet taken.
    ///
    /// # Errors
    /// When the thread panicked.
    pub fn stop(mut self, final_snapshot: bool) -> Result<Vec<Notice>, String> {
        self.hand_over();
        let _ = self.tx.send(Msg::Stop { final_snapshot });
        if let Some(h) = self.handle.take()
            && h.join().is_err()
        {
            return Err("the compactor thread panicked".to_string());
        }
        Ok(self.notices.try_iter().collect())
    }
}

impl<R> Drop for SnapshotWriter<R> {
    /// A store dropped without `close` (e.g. when the process is about to
    /// exit) still lets a snapshot being written finish, so no temp file is
    /// left behind; it writes no final snapshot.
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = self.tx.send(Msg::Stop {
                final_snapshot: false,
            });
            let _ = h.join();
        }
    }
}

fn run<R, S: Fold<R>>(
    wal: &Path,
    mut state: S,
    mut last: Option<RecordPos>,
    config: &WriterConfig,
    rx: &Receiver<Msg<R>>,
    ntx: &Sender<Notice>,
) {
    let mut since = 0u64;
    let mut written = 0u64;
    let mut snap = |state: &S, pos: &RecordPos| {
        if let Some(h) = &config.hook {
            h(pos.seq);
        }
        // Counted once the temp file is written and synced, as the seam says.
        let seam = || {
            written += 1;
            if config.crash_in == Some(written) {
                crash_now();
            }
        };
        let _ = ntx.send(write(wal, state, pos, seam).map_err(|e| e.to_string()));
    };
    let mut fold = |state: &mut S, pos: RecordPos, event: &R| {
        state.apply(event);
        last = Some(pos);
        since += 1;
        if config.every > 0 && since >= config.every {
            snap(state, &pos);
            since = 0;
        }
    };
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Records(batch) => {
                for (pos, event) in batch {
                    fold(&mut state, pos, &event);
                }
            }
            Msg::Stop { final_snapshot } => {
                if let (true, true, Some(pos)) = (final_snapshot, since > 0, last.as_ref()) {
                    snap(&state, pos);
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{Rec, Sum};

    fn pos(seq: u64) -> RecordPos {
        RecordPos {
            seq,
            crc: 0x1234_abcd,
            offset: 10 * seq,
            len: 10,
        }
    }

    #[test]
    fn write_then_read_round_trips_and_keeps_the_previous_as_bak() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let one = Sum {
            total: 1,
            records: 1,
        };
        let two = Sum {
            total: 3,
            records: 2,
        };
        write(&wal, &one, &pos(1), || {}).unwrap();
        let saved = write(&wal, &two, &pos(2), || {}).unwrap();
        assert_eq!(
            saved,
            SnapshotSaved {
                seq: 2,
                path: snapshot_path(&wal)
            }
        );
        assert_eq!(read::<Sum>(&snapshot_path(&wal)).unwrap(), (pos(2), two));
        assert_eq!(read::<Sum>(&backup_path(&wal)).unwrap(), (pos(1), one));
        assert_eq!(read_header(&snapshot_path(&wal)).unwrap(), pos(2));
    }

    /// A kill between the writer's two renames leaves `.snapshot` and `.bak`
    /// as one file; the next write must leave no temp link behind.
    #[test]
    fn a_snapshot_sharing_its_inode_with_the_backup_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let one = Sum {
            total: 1,
            records: 1,
        };
        write(&wal, &one, &pos(1), || {}).unwrap();
        std::fs::hard_link(snapshot_path(&wal), backup_path(&wal)).unwrap();
        let two = Sum {
            total: 3,
            records: 2,
        };
        write(&wal, &two, &pos(2), || {}).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.contains("tmp")),
            "a temp file was left: {names:?}"
        );
        assert_eq!(read::<Sum>(&snapshot_path(&wal)).unwrap(), (pos(2), two));
        assert_eq!(read::<Sum>(&backup_path(&wal)).unwrap(), (pos(1), one));
    }

    #[test]
    fn a_flipped_body_byte_or_a_short_file_is_damaged_and_a_missing_one_missing() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let snap = snapshot_path(&wal);
        assert!(matches!(
            read::<Sum>(&snap),
            Err(SnapshotError::Missing { .. })
        ));
        write(
            &wal,
            &Sum {
                total: 5,
                records: 1,
            },
            &pos(1),
            || {},
        )
        .unwrap();
        let mut bytes = std::fs::read(&snap).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x01;
        std::fs::write(&snap, &bytes).unwrap();
        assert!(matches!(read::<Sum>(&snap), Err(SnapshotError::Damaged(_))));
        std::fs::write(&snap, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(read::<Sum>(&snap), Err(SnapshotError::Damaged(_))));
    }

    #[test]
    fn stray_temp_files_of_this_log_go_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let stray = sibling(&wal, ".snapshot.tmp-99-0");
        let other = dir.path().join("b.wal.snapshot.tmp-99-0");
        std::fs::write(&stray, b"x").unwrap();
        std::fs::write(&other, b"x").unwrap();
        assert_eq!(clean_stray(&wal).unwrap(), vec![stray.clone()]);
        assert!(!stray.exists() && other.exists());
    }

    #[test]
    fn the_writer_thread_snapshots_every_n_records_and_once_more_on_stop() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("a.wal");
        let config = WriterConfig {
            every: 2,
            hook: None,
            crash_in: None,
        };
        let mut w = SnapshotWriter::spawn(wal.clone(), Sum::default(), None, config).unwrap();
        for seq in 1..=3 {
            w.record(pos(seq), Rec::Add { n: seq });
        }
        let notices = w.stop(true).unwrap();
        let seqs: Vec<u64> = notices.into_iter().map(|n| n.unwrap().seq).collect();
        assert_eq!(seqs, vec![2, 3]);
        let (covered, state) = read::<Sum>(&snapshot_path(&wal)).unwrap();
        assert_eq!(
            (covered, state),
            (
                pos(3),
                Sum {
                    total: 6,
                    records: 3
                }
            )
        );
    }

    /// The example in the module docs and docs/format.md, checked.
    #[test]
    fn the_documented_header_crc_is_the_crc_of_the_documented_binding() {
        let h = SnapshotHeader {
            format: SNAPSHOT_FORMAT.to_string(),
            version: 1,
            seq: 1000,
            offset: 123_456,
            record_offset: 123_300,
            crc: "1c291ca3".to_string(),
            body_len: 98765,
            body_crc: "9f0e1d2c".to_string(),
            header_crc: Some("4e15aee0".to_string()),
        };
        assert_eq!(
            h.binding(),
            "tinyagent-snapshot 1 1000 123300 123456 1c291ca3 98765 9f0e1d2c"
        );
        h.check_binding().unwrap();
        let edited = SnapshotHeader { seq: 999, ..h };
        assert!(matches!(
            edited.check_binding(),
            Err(SnapshotError::Damaged(_))
        ));
    }
}
