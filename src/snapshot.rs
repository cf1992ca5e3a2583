//! Atomic state snapshots and the background compactor that writes them.
//!
//! `<wal>.snapshot` is one header line of JSON, then the body:
//!
//! ```text
//! {"format":"tinyagent-snapshot","version":1,"seq":1000,"offset":123456,"record_offset":123300,"crc":"1c291ca3","body_len":98765,"body_crc":"9f0e1d2c"}\n
//! <body_len bytes: serde_json of session::State>
//! ```
//!
//! `seq`, `crc`, `record_offset` and `offset` name the last record the state
//! covers (its seq, crc, first byte and the byte just past its newline);
//! `body_crc` is the CRC-32 of the body. A snapshot is written to a temp file
//! in the same directory (`<wal>.snapshot.tmp-<pid>-<n>`), fsync'd, the
//! current `.snapshot` is hard-linked to `.snapshot.bak`, the temp file is
//! renamed over `.snapshot` and the directory is fsync'd. There is a valid
//! `.snapshot` at every instant; a crash leaves at worst a stray temp file,
//! which [`clean_stray`] deletes when the log is next opened for writing.
//!
//! The [`Compactor`] is a thread with its own mirror [`State`]: the store
//! sends it every appended event after it is durable (a move, no clone, no
//! serialisation on the append path) and it writes a snapshot every
//! `snapshot_every` records. The channel is unbounded, so a slow snapshot
//! never delays an append.

use crate::event::Event;
use crate::session::State;
use crate::wal::reader::RecordPos;
use crate::wal::{parent_dir, sibling, sync_parent_dir};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

pub const SNAPSHOT_FORMAT: &str = "tinyagent-snapshot";
pub const SNAPSHOT_VERSION: u32 = 1;
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
}

impl SnapshotHeader {
    /// The covered record, if the header is self-consistent.
    pub fn covered(&self) -> Result<RecordPos, SnapshotError> {
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
/// `covered`, atomically (see the module docs).
pub fn write(
    wal: &Path,
    state: &State,
    covered: &RecordPos,
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
    };
    let mut bytes = serde_json::to_vec(&header)?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    drop(body);
    let tmp = temp_path(wal, "");
    let result = write_and_swap(wal, &tmp, &bytes);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|path| SnapshotSaved {
        seq: covered.seq,
        path,
    })
}

fn write_and_swap(wal: &Path, tmp: &Path, bytes: &[u8]) -> Result<PathBuf, SnapshotError> {
    let ctx = |what: &str, p: &Path| format!("could not {what} {}", p.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .map_err(io_err(ctx("create", tmp)))?;
    f.write_all(bytes).map_err(io_err(ctx("write", tmp)))?;
    f.sync_all().map_err(io_err(ctx("fsync", tmp)))?;
    drop(f);
    crash_seam();
    let snap = snapshot_path(wal);
    if snap.exists() {
        // Keep the current one as .bak without ever leaving no .snapshot.
        let bak_tmp = temp_path(wal, ".bak");
        std::fs::hard_link(&snap, &bak_tmp).map_err(io_err(ctx("link", &snap)))?;
        let bak = backup_path(wal);
        if let Err(e) = std::fs::rename(&bak_tmp, &bak) {
            let _ = std::fs::remove_file(&bak_tmp);
            return Err(io_err(ctx("rename to", &bak))(e));
        }
    }
    std::fs::rename(tmp, &snap).map_err(io_err(ctx("rename to", &snap)))?;
    sync_parent_dir(wal).map_err(io_err(ctx("fsync the directory of", wal)))?;
    Ok(snap)
}

/// Test seam for crash tests of the real binary: with
/// `TINYAGENT_CRASH_IN_SNAPSHOT=<n>` the process kills itself with SIGKILL
/// in the middle of its n-th snapshot write (temp file written and synced,
/// not yet renamed), exactly as `kill -9` at that moment would.
fn crash_seam() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let Some(n) = std::env::var("TINYAGENT_CRASH_IN_SNAPSHOT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    if WRITES.fetch_add(1, Ordering::SeqCst) + 1 == n {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

fn read_checked(path: &Path) -> Result<(SnapshotHeader, Vec<u8>), SnapshotError> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => SnapshotError::Missing {
            path: path.to_path_buf(),
        },
        _ => io_err(format!("could not read {}", path.display()))(e),
    })?;
    let damaged = |why: String| SnapshotError::Damaged(why);
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| damaged("no header line".to_string()))?;
    let header: SnapshotHeader =
        serde_json::from_slice(&bytes[..nl]).map_err(|e| damaged(format!("bad header: {e}")))?;
    header.covered()?;
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
    let body = body.to_vec();
    Ok((header, body))
}

/// Reads and checks a snapshot file: the covered record and the state.
pub fn read(path: &Path) -> Result<(RecordPos, State), SnapshotError> {
    let (header, body) = read_checked(path)?;
    let state: State = serde_json::from_slice(&body)
        .map_err(|e| SnapshotError::Damaged(format!("bad body: {e}")))?;
    Ok((header.covered()?, state))
}

/// Reads and checks a snapshot file (header and body crc) without decoding
/// the state: what inspect needs.
pub fn read_header(path: &Path) -> Result<RecordPos, SnapshotError> {
    read_checked(path)?.0.covered()
}

/// Called on the compactor thread with the seq about to be snapshotted, just
/// before each snapshot is written (tests use it to make snapshots slow).
pub type SnapshotHook = Arc<dyn Fn(u64) + Send + Sync>;

enum Msg {
    Record(RecordPos, Box<Event>),
    Stop { final_snapshot: bool },
}

/// What the compactor reports: a snapshot written, or why one failed.
pub type Notice = Result<SnapshotSaved, String>;

/// The background snapshot writer (see the module docs).
pub struct Compactor {
    tx: Sender<Msg>,
    notices: Receiver<Notice>,
    handle: Option<JoinHandle<()>>,
}

impl Compactor {
    /// Starts the thread with the state as of `last` (the last durable
    /// record). `every` = records between snapshots (0: only on stop).
    pub fn spawn(
        wal: PathBuf,
        state: State,
        last: Option<RecordPos>,
        every: u64,
        hook: Option<SnapshotHook>,
    ) -> std::io::Result<Compactor> {
        let (tx, rx) = channel();
        let (ntx, notices) = channel();
        let handle = std::thread::Builder::new()
            .name("tinyagent-compactor".to_string())
            .spawn(move || run(wal, state, last, every, hook, rx, ntx))?;
        Ok(Compactor {
            tx,
            notices,
            handle: Some(handle),
        })
    }

    /// Hands over one durable record. Never blocks.
    pub fn record(&self, pos: RecordPos, event: Event) {
        // A send fails only when the thread is gone; snapshots then stop, appends go on.
        let _ = self.tx.send(Msg::Record(pos, Box::new(event)));
    }

    /// Notices so far, without waiting.
    pub fn try_notices(&self) -> Vec<Notice> {
        self.notices.try_iter().collect()
    }

    /// Stops the thread after it has applied everything sent so far (with a
    /// final snapshot when asked and anything is uncovered); returns the
    /// notices not yet taken. `Err` when the thread panicked.
    pub fn stop(mut self, final_snapshot: bool) -> Result<Vec<Notice>, String> {
        let _ = self.tx.send(Msg::Stop { final_snapshot });
        if let Some(h) = self.handle.take()
            && h.join().is_err()
        {
            return Err("the compactor thread panicked".to_string());
        }
        Ok(self.notices.try_iter().collect())
    }
}

impl Drop for Compactor {
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

fn run(
    wal: PathBuf,
    mut state: State,
    mut last: Option<RecordPos>,
    every: u64,
    hook: Option<SnapshotHook>,
    rx: Receiver<Msg>,
    ntx: Sender<Notice>,
) {
    let mut since = 0u64;
    let snap = |state: &State, pos: &RecordPos| {
        if let Some(h) = &hook {
            h(pos.seq);
        }
        let _ = ntx.send(write(&wal, state, pos).map_err(|e| e.to_string()));
    };
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Record(pos, event) => {
                state.apply(&event);
                last = Some(pos);
                since += 1;
                if every > 0 && since >= every {
                    snap(&state, &pos);
                    since = 0;
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
