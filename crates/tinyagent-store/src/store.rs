//! The one door to the disk: a log, its state and its snapshots together.
//!
//! - [`Store::create`] makes a new log (refusing an existing file).
//! - [`Store::open`] takes the lock, deletes stray snapshot temp files, loads
//!   the newest valid snapshot (`.snapshot`, else `.snapshot.bak`, else a full
//!   replay, each fallback with a warning), checks that the record it covers
//!   is really in the log at that offset with that seq and crc, replays the
//!   records after it through [`Fold::apply`], and cuts a torn tail (keeping
//!   the cut bytes in `<wal>.torn-<offset>`). Corruption in the part read is
//!   an error and the file is left unchanged.
//! - [`Store::append`] makes a record durable, then applies it to the state,
//!   then hands it to the background [`SnapshotWriter`].
//! - [`load`] is the read-only view for inspect and export: no lock, no cut.

use crate::fsutil::{create_dir_all_durable, create_private, parent_dir, sibling, sync_parent_dir};
use crate::seams::{CrashCounter, TestSeams, crash_now};
use crate::snapshot::{
    self, SnapshotError, SnapshotHook, SnapshotSaved, SnapshotWriter, WriterConfig,
};
use crate::wal::WalError;
use crate::wal::frame::Frame;
use crate::wal::reader::{RecordPos, ScanReport, TornTail, check_record_at, scan};
use crate::wal::writer::{Appended, IoStats, LockedLog, WalWriter};
use crate::{Fold, Record};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Default records between background snapshots.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 1000;

/// A batch of records the log has just made durable (written and
/// fdatasync'd): its lines' bytes as they are in the file, from byte offset
/// `start`, and each record's `type`.
#[derive(Debug, Clone, Copy)]
pub struct SyncPoint<'a> {
    pub start: u64,
    pub bytes: &'a [u8],
    pub kinds: &'a [&'a str],
}

/// Called after each sync point, before [`Store::append`] or
/// [`Store::flush`] returns (so before anything that depends on the records
/// can happen). An `Err` fails that append or flush and poisons the store:
/// the records are durable locally but were never acknowledged, and every
/// later append or flush fails with the same error ([`StoreError::Hook`],
/// which keeps the hook's own error type for the caller to look at).
/// Replication ships the log's bytes from here.
pub type SyncHook = std::sync::Arc<dyn Fn(&SyncPoint<'_>) -> Result<(), HookError> + Send + Sync>;

/// What a [`SyncHook`] fails with: its own error, boxed.
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// How a store runs.
#[derive(Clone)]
pub struct StoreOptions {
    /// Records between background snapshots; 0 turns snapshots off.
    pub snapshot_every: u64,
    /// Called on the snapshot writer thread before each snapshot (tests).
    pub snapshot_hook: Option<SnapshotHook>,
    /// Test-only faults and crash points (see [`crate::seams`]).
    pub seams: TestSeams,
    /// Called after every sync point (see [`SyncHook`]).
    pub on_sync: Option<SyncHook>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            snapshot_hook: None,
            seams: TestSeams::default(),
            on_sync: None,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("snapshot_every", &self.snapshot_every)
            .field("snapshot_hook", &self.snapshot_hook.is_some())
            .field("seams", &self.seams)
            .field("on_sync", &self.on_sync.is_some())
            .finish()
    }
}

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

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io { context, source }
}

/// What [`Store::open`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpenReport {
    /// The torn tail that was cut and the file its bytes were saved to.
    pub torn_tail: Option<(TornTail, PathBuf)>,
    /// The snapshot the state was loaded from (None: full replay).
    pub snapshot: Option<SnapshotSaved>,
    /// Records replayed after the snapshot (all of them without one).
    pub replayed: u64,
    pub warnings: Vec<String>,
}

/// An open log: the writer, the state it folds to and the snapshot writer.
pub struct Store<R: Record, S: Fold<R>> {
    writer: WalWriter,
    state: S,
    /// Staged records, in order, not yet flushed.
    unflushed: Vec<(Appended, R)>,
    /// The length of each line the last flush made durable, in order.
    last_lens: Vec<usize>,
    snapshots: Option<SnapshotWriter<R>>,
    crash_after: Option<CrashCounter>,
    warnings: Vec<String>,
    on_sync: Option<SyncHook>,
    /// Set when the sync hook failed: nothing more is appended.
    hook_failed: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

/// What [`load`] read.
#[derive(Debug, Clone)]
pub struct Loaded<S> {
    pub state: S,
    /// The scan (after the snapshot's record when one was used).
    pub scan: ScanReport,
    /// A valid snapshot of this log (used or merely present).
    pub snapshot: Option<SnapshotSaved>,
    pub warnings: Vec<String>,
}

fn check_regular(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(StoreError::BadLog {
            path: path.to_path_buf(),
            reason: "not a regular file".to_string(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::NotFound {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(io_err(format!("could not stat {}", path.display()))(e)),
    }
}

/// A state and scan built from the newest usable snapshot plus the records
/// after it, or `None` when no snapshot is usable (warnings say why).
///
/// A candidate is checked in this order: the file and its own checksums
/// ([`snapshot::read_unbound`]: a regular file within [`snapshot::size_cap`]
/// of the log, header, body length and crc), the record it claims to cover
/// against the log (so a stale snapshot or one of another log is reported as
/// that), `header_crc`, then the body is decoded and the records after it are
/// replayed.
fn from_snapshot<R: Record, S: Fold<R>>(
    path: &Path,
    warnings: &mut Vec<String>,
) -> Result<Option<(S, ScanReport, SnapshotSaved)>, StoreError> {
    let snap = snapshot::snapshot_path(path);
    let bak = snapshot::backup_path(path);
    let log_len = std::fs::metadata(path)
        .map_err(io_err(format!("could not stat {}", path.display())))?
        .len();
    let cap = snapshot::size_cap(log_len);
    for cand in [&snap, &bak] {
        let fallback = if cand == &snap {
            "falling back to the .bak snapshot"
        } else {
            "falling back to a full replay"
        };
        let checked = match snapshot::read_unbound(cand, cap) {
            Ok(x) => x,
            Err(SnapshotError::Missing { .. }) => {
                if cand == &snap && std::fs::symlink_metadata(&bak).is_ok() {
                    warnings.push(format!("{} is missing; {fallback}", cand.display()));
                }
                continue;
            }
            Err(e) => {
                warnings.push(format!("{}: {e}; {fallback}", cand.display()));
                continue;
            }
        };
        let pos = checked.covered();
        match check_record_at::<R>(path, &pos) {
            Ok(()) => {}
            Err(e @ WalError::Anchor { .. }) => {
                warnings.push(format!(
                    "{} is stale or belongs to another log ({e}); {fallback}",
                    cand.display()
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let decoded = checked.check_binding().and_then(|()| checked.decode::<S>());
        let mut state = match decoded {
            Ok(state) => state,
            Err(e) => {
                warnings.push(format!("{}: {e}; {fallback}", cand.display()));
                continue;
            }
        };
        match scan::<R>(path, Some(&pos), |f, _| state.apply(&f.event)) {
            Ok(report) => {
                let saved = SnapshotSaved {
                    seq: pos.seq,
                    path: cand.clone(),
                };
                return Ok(Some((state, report, saved)));
            }
            Err(e @ WalError::Anchor { .. }) => {
                warnings.push(format!(
                    "{} is stale or belongs to another log ({e}); {fallback}",
                    cand.display()
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

fn full_replay<R: Record, S: Fold<R>>(path: &Path) -> Result<(S, ScanReport), StoreError> {
    let mut state = S::empty_for_writing();
    let report = scan::<R>(path, None, |f, _| state.apply(&f.event))?;
    Ok((state, report))
}

/// Copies `[tail.offset, tail.offset + tail.bytes)` of `path` into a new
/// `<wal>.torn-<offset>` file and makes it durable.
///
/// The copy goes through one 64 KiB buffer, so a torn tail of any size costs
/// 64 KiB of memory; a buffer of zeros is skipped with a seek rather than
/// written, so a tail that is a hole (a file extended but never written, as
/// a crash can leave) stays a hole in the copy instead of filling the disk.
/// The copy reads back byte for byte the same.
fn save_torn(path: &Path, tail: &TornTail) -> Result<PathBuf, StoreError> {
    let mut src =
        std::fs::File::open(path).map_err(io_err(format!("could not open {}", path.display())))?;
    src.seek(SeekFrom::Start(tail.offset))
        .map_err(io_err(format!("could not read {}", path.display())))?;
    let base = sibling(path, &format!(".torn-{}", tail.offset));
    let mut n = 0u32;
    let (mut dst, dst_path) = loop {
        let p = if n == 0 {
            base.clone()
        } else {
            sibling(&base, &format!(".{n}"))
        };
        match create_private(&p, false) {
            Ok(f) => break (f, p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(io_err(format!("could not create {}", p.display()))(e)),
        }
    };
    let ctx = format!("could not save the torn tail to {}", dst_path.display());
    copy_keeping_holes(&mut src.take(tail.bytes), &mut dst).map_err(io_err(ctx.clone()))?;
    dst.sync_all().map_err(io_err(ctx.clone()))?;
    sync_parent_dir(&dst_path).map_err(io_err(ctx))?;
    Ok(dst_path)
}

/// Size of the one buffer [`save_torn`] copies through.
const COPY_BUF: usize = 64 << 10;

/// Copies `src` to the start of the empty file `dst` through one
/// [`COPY_BUF`] buffer, seeking over buffers of zeros (see [`save_torn`]);
/// returns the bytes copied.
fn copy_keeping_holes(src: &mut impl Read, dst: &mut std::fs::File) -> std::io::Result<u64> {
    static ZEROS: [u8; COPY_BUF] = [0; COPY_BUF];
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        if buf[..n] == ZEROS[..n] {
            dst.seek(SeekFrom::Start(total))?;
        } else {
            dst.write_all(&buf[..n])?;
        }
    }
    // A trailing hole: the seek alone does not make the file longer.
    dst.set_len(total)?;
    Ok(total)
}

fn spawn_snapshots<R: Record, S: Fold<R>>(
    path: &Path,
    state: &S,
    last: Option<RecordPos>,
    opts: &StoreOptions,
) -> Result<Option<SnapshotWriter<R>>, StoreError> {
    if opts.snapshot_every == 0 {
        return Ok(None);
    }
    let config = WriterConfig {
        every: opts.snapshot_every,
        hook: opts.snapshot_hook.clone(),
        crash_in: opts.seams.crash_in_snapshot,
    };
    SnapshotWriter::spawn(path.to_path_buf(), state.clone(), last, config)
        .map(Some)
        .map_err(io_err("could not start the snapshot compactor".to_string()))
}

impl<R: Record, S: Fold<R>> Store<R, S> {
    /// Creates a new, empty log at `path` (its directory is created when
    /// missing); refuses an existing file.
    ///
    /// # Errors
    /// [`StoreError::Exists`], [`StoreError::Locked`], or an I/O failure.
    pub fn create(path: &Path, mut opts: StoreOptions) -> Result<Self, StoreError> {
        let dir = parent_dir(path);
        create_dir_all_durable(dir)
            .map_err(io_err(format!("could not create {}", dir.display())))?;
        let writer = WalWriter::create_with(path, opts.seams.faults.take())?;
        // Under the lock now: leftovers of an older log of the same name go.
        let mut warnings = Vec::new();
        for old in [snapshot::snapshot_path(path), snapshot::backup_path(path)] {
            if std::fs::remove_file(&old).is_ok() {
                warnings.push(format!("removed {} (left by an older log)", old.display()));
            }
        }
        if let Err(e) = snapshot::clean_stray(path) {
            warnings.push(format!("could not remove stray snapshot files: {e}"));
        }
        let state = S::empty_for_writing();
        let snapshots = spawn_snapshots(path, &state, None, &opts)?;
        Ok(Store {
            writer,
            state,
            unflushed: Vec::new(),
            last_lens: Vec::new(),
            snapshots,
            crash_after: CrashCounter::new(opts.seams.crash_after.as_ref()),
            warnings,
            on_sync: opts.on_sync.clone(),
            hook_failed: None,
        })
    }

    /// Opens an existing log for appending (see the module docs).
    ///
    /// # Errors
    /// Refusals ([`StoreError::exit_code`] 2: missing, locked, not a log,
    /// corrupt, empty) and I/O failures.
    pub fn open(path: &Path, opts: StoreOptions) -> Result<(Self, OpenReport), StoreError> {
        check_regular(path)?;
        let mut locked = LockedLog::open(path)?;
        let mut report = OpenReport::default();
        match snapshot::clean_stray(path) {
            Ok(removed) => report.warnings.extend(
                removed
                    .iter()
                    .map(|p| format!("removed stray snapshot temp file {}", p.display())),
            ),
            Err(e) => report
                .warnings
                .push(format!("could not remove stray snapshot files: {e}")),
        }
        let (state, scanned) = match from_snapshot::<R, S>(path, &mut report.warnings)? {
            Some((state, scanned, saved)) => {
                report.snapshot = Some(saved);
                (state, scanned)
            }
            None => full_replay::<R, S>(path)?,
        };
        if let Some(c) = scanned.corruption {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                seq: c.seq,
                offset: c.offset,
                reason: c.reason,
            });
        }
        if scanned.last.is_none() {
            return Err(StoreError::Empty {
                path: path.to_path_buf(),
            });
        }
        if let Some(tail) = scanned.torn_tail {
            let saved = save_torn(path, &tail)?;
            locked.truncate(tail.offset)?;
            report.torn_tail = Some((tail, saved));
        }
        report.replayed = scanned.records;
        let snapshots = spawn_snapshots(path, &state, scanned.last, &opts)?;
        let crash_after = CrashCounter::new(opts.seams.crash_after.as_ref());
        let writer = locked.into_writer(
            scanned.last.as_ref(),
            scanned.valid_bytes,
            opts.seams.faults,
        );
        let store = Store {
            writer,
            state,
            unflushed: Vec::new(),
            last_lens: Vec::new(),
            snapshots,
            crash_after,
            warnings: Vec::new(),
            on_sync: opts.on_sync.clone(),
            hook_failed: None,
        };
        Ok((store, report))
    }

    /// Makes `event` durable (written and fdatasync'd, after anything
    /// staged before it), then applies it to the state; returns its seq. A
    /// record whose write or sync failed is not applied. After any failure
    /// every later append is refused with [`StoreError::Poisoned`].
    ///
    /// # Errors
    /// The write or sync failure, or [`StoreError::Poisoned`].
    pub fn append(&mut self, event: R) -> Result<u64, StoreError> {
        if !self.unflushed.is_empty() {
            return Err(StoreError::Poisoned(
                "append with records staged and not flushed: flush them first".into(),
            ));
        }
        self.check_hook()?;
        let start = self.writer.end();
        let done = self.writer.append(&event)?;
        self.run_hook(start, &[event.kind()])?;
        if self
            .crash_after
            .as_mut()
            .is_some_and(|c| c.hit(event.kind()))
        {
            crash_now();
        }
        self.state.apply(&event);
        if let Some(w) = &mut self.snapshots {
            w.record(done.into(), event);
        }
        Ok(done.seq)
    }

    /// Stages `event` after those staged before it and applies it to the
    /// state at once (so the caller sees the state it will have), without
    /// writing it: it is durable only once [`Store::flush`] returns, and
    /// nothing that depends on it may happen before. Returns its seq. If the
    /// flush fails, the store is poisoned and its state is ahead of the log:
    /// the caller must stop (as after any failed append).
    ///
    /// # Errors
    /// [`StoreError::Poisoned`] after an earlier failure; an encoding error
    /// (nothing is staged then, and the state is unchanged).
    pub fn stage(&mut self, event: R) -> Result<u64, StoreError> {
        self.check_hook()?;
        let done = self.writer.stage(&event)?;
        self.state.apply(&event);
        let seq = done.seq;
        self.unflushed.push((done, event));
        Ok(seq)
    }

    /// Makes every staged record durable (one `write`, one `fdatasync`) and
    /// gives them back in order, with their seqs, for the caller to report.
    ///
    /// # Errors
    /// The write or sync failure, which poisons the store (the staged
    /// records were never acknowledged), or [`StoreError::Poisoned`].
    pub fn flush(&mut self) -> Result<Vec<(u64, R)>, StoreError> {
        // The crash seam: a kill right after the n-th record of a type is
        // durable. Inside a batch that is the state a kill or power cut in
        // the middle of its one write can leave: a prefix of the batch.
        if let Some(c) = self.crash_after.as_mut() {
            let mut prefix = 0;
            for (done, event) in &self.unflushed {
                prefix += done.len;
                if c.hit(event.kind()) {
                    self.writer.flush_prefix(prefix)?;
                    crash_now();
                }
            }
        }
        self.check_hook()?;
        let start = self.unflushed.first().map(|(done, _)| done.offset);
        self.writer.flush()?;
        let flushed = std::mem::take(&mut self.unflushed);
        self.last_lens.clear();
        self.last_lens.extend(
            flushed
                .iter()
                .map(|(done, _)| usize::try_from(done.len).unwrap_or(usize::MAX)),
        );
        if let Some(start) = start.filter(|_| self.on_sync.is_some()) {
            let kinds: Vec<&str> = flushed.iter().map(|(_, e)| e.kind()).collect();
            self.run_hook(start, &kinds)?;
        }
        if let Some(w) = &mut self.snapshots {
            w.records(
                flushed
                    .iter()
                    .map(|(done, event)| ((*done).into(), event.clone())),
            );
        }
        Ok(flushed
            .into_iter()
            .map(|(done, event)| (done.seq, event))
            .collect())
    }

    pub fn state(&self) -> &S {
        &self.state
    }

    /// The lines the last [`Store::flush`] made durable, newline included:
    /// one a record, in the order it gave them back
    /// ([`crate::wal::frame::data_of`] finds a line's data).
    pub fn last_lines(&self) -> impl Iterator<Item = &[u8]> {
        let batch = self.writer.last_batch();
        self.last_lens.iter().scan(0, move |at: &mut usize, &len| {
            let line = batch.get(*at..at.saturating_add(len));
            *at = at.saturating_add(len);
            line
        })
    }

    fn check_hook(&self) -> Result<(), StoreError> {
        match &self.hook_failed {
            Some(e) => Err(StoreError::Hook(e.clone())),
            None => Ok(()),
        }
    }

    /// Hands the bytes `[start, end)` just made durable to the sync hook.
    fn run_hook(&mut self, start: u64, kinds: &[&str]) -> Result<(), StoreError> {
        let Some(hook) = self.on_sync.clone() else {
            return Ok(());
        };
        let point = SyncPoint {
            start,
            bytes: self.writer.last_batch(),
            kinds,
        };
        debug_assert_eq!(start + point.bytes.len() as u64, self.writer.end());
        if let Err(e) = hook(&point) {
            let e: std::sync::Arc<dyn std::error::Error + Send + Sync> = e.into();
            self.hook_failed = Some(e.clone());
            return Err(StoreError::Hook(e));
        }
        Ok(())
    }

    /// Byte length of the log's durable part.
    pub fn end(&self) -> u64 {
        self.writer.end()
    }

    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    /// The seq the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.writer.next_seq()
    }

    /// Snapshots written since the last call, without waiting. Failed
    /// snapshots become warnings ([`Store::take_warnings`]).
    pub fn take_snapshot_notices(&mut self) -> Vec<SnapshotSaved> {
        let notices = self.snapshots.as_ref().map(SnapshotWriter::try_notices);
        self.sort_notices(notices.unwrap_or_default())
    }

    /// Warnings since the last call (failed background snapshots, ...).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn sort_notices(&mut self, notices: Vec<snapshot::Notice>) -> Vec<SnapshotSaved> {
        let mut saved = Vec::new();
        for n in notices {
            match n {
                Ok(s) => saved.push(s),
                Err(e) => self.warnings.push(format!("snapshot failed: {e}")),
            }
        }
        saved
    }

    /// What the log writer did so far (appends, bytes, time in write and
    /// fdatasync).
    pub fn io_stats(&self) -> IoStats {
        self.writer.stats()
    }

    /// Stops the snapshot writer (it writes a final snapshot when records
    /// are uncovered) and releases the lock.
    ///
    /// # Errors
    /// [`StoreError::SnapshotWriter`] when its thread panicked.
    pub fn close(self) -> Result<(), StoreError> {
        self.close_reporting().map(|_| ())
    }

    /// [`Store::close`], returning the snapshots written and warnings not yet
    /// taken.
    ///
    /// # Errors
    /// As [`Store::close`].
    pub fn close_reporting(mut self) -> Result<(Vec<SnapshotSaved>, Vec<String>), StoreError> {
        let notices = match self.snapshots.take() {
            Some(w) => w.stop(true).map_err(StoreError::SnapshotWriter)?,
            None => Vec::new(),
        };
        let saved = self.sort_notices(notices);
        Ok((saved, std::mem::take(&mut self.warnings)))
    }
}

/// Read-only load for inspect and export: no lock, no cut, a full replay
/// from the start onto `S::default()`. Stops at corruption and returns what
/// it read.
///
/// # Errors
/// When the file is missing, not a regular file, or cannot be read.
pub fn load<R: Record, S: Fold<R>>(path: &Path) -> Result<Loaded<S>, StoreError> {
    load_with::<R, S>(path, false)
}

/// [`load`], starting from the newest usable snapshot when `use_snapshot`
/// (then `scan` covers only the records after it).
///
/// # Errors
/// As [`load`].
pub fn load_with<R: Record, S: Fold<R>>(
    path: &Path,
    use_snapshot: bool,
) -> Result<Loaded<S>, StoreError> {
    check_regular(path)?;
    let mut warnings = Vec::new();
    if use_snapshot && let Some((state, scan, saved)) = from_snapshot::<R, S>(path, &mut warnings)?
    {
        return Ok(Loaded {
            state,
            scan,
            snapshot: Some(saved),
            warnings,
        });
    }
    full_load(path, warnings, |_: &Frame<R>| {})
}

/// [`load`], also showing every record read to `observe` (one pass over the
/// file for what the fold does not keep, such as per-call hook runs).
///
/// # Errors
/// As [`load`].
pub fn load_observed<R: Record, S: Fold<R>>(
    path: &Path,
    mut observe: impl FnMut(&R),
) -> Result<Loaded<S>, StoreError> {
    check_regular(path)?;
    full_load(path, Vec::new(), |f: &Frame<R>| observe(&f.event))
}

/// [`load_observed`], shown each whole frame (its `seq` and `ts` too).
///
/// # Errors
/// As [`load_observed`].
pub fn load_observed_frames<R: Record, S: Fold<R>>(
    path: &Path,
    observe: impl FnMut(&Frame<R>),
) -> Result<Loaded<S>, StoreError> {
    check_regular(path)?;
    full_load(path, Vec::new(), observe)
}

fn full_load<R: Record, S: Fold<R>>(
    path: &Path,
    warnings: Vec<String>,
    mut observe: impl FnMut(&Frame<R>),
) -> Result<Loaded<S>, StoreError> {
    // Note which snapshot (if any) matches a record of this log.
    let cands: Vec<(PathBuf, RecordPos)> =
        [snapshot::snapshot_path(path), snapshot::backup_path(path)]
            .into_iter()
            .filter_map(|p| snapshot::read_header(&p).ok().map(|pos| (p, pos)))
            .collect();
    let mut matched: Option<SnapshotSaved> = None;
    let mut state = S::default();
    let scan = scan::<R>(path, None, |f, pos| {
        state.apply(&f.event);
        observe(f);
        if let Some((p, _)) = cands.iter().find(|(_, c)| c == pos)
            && matched.as_ref().is_none_or(|m| m.seq < pos.seq)
        {
            matched = Some(SnapshotSaved {
                seq: pos.seq,
                path: p.clone(),
            });
        }
    })?;
    Ok(Loaded {
        state,
        scan,
        snapshot: matched,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{Rec, Sum};

    type SumStore = Store<Rec, Sum>;

    fn no_snapshots() -> StoreOptions {
        StoreOptions {
            snapshot_every: 0,
            ..StoreOptions::default()
        }
    }

    /// A log of the records 1..=5 and the position of each.
    fn log(dir: &Path) -> (PathBuf, Vec<RecordPos>) {
        let p = dir.join("s.wal");
        let mut s = SumStore::create(&p, no_snapshots()).unwrap();
        for n in 1..=5 {
            s.append(Rec::Add { n }).unwrap();
        }
        s.close().unwrap();
        let mut pos = Vec::new();
        scan::<Rec>(&p, None, |_, q| pos.push(*q)).unwrap();
        (p, pos)
    }

    /// A well-formed, correctly checksummed snapshot that claims `claim`
    /// and holds a state no replay gives.
    fn plant(wal: &Path, claim: &RecordPos) {
        let bogus = Sum {
            total: 999,
            records: 999,
        };
        snapshot::write(wal, &bogus, claim, || {}).unwrap();
        // Keep the .bak out of it: only the planted snapshot is offered.
        let _ = std::fs::remove_file(snapshot::backup_path(wal));
    }

    #[test]
    fn a_snapshot_claiming_a_record_the_log_does_not_have_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (p, pos) = log(dir.path());
        let full = full_replay::<Rec, Sum>(&p).unwrap().0;
        assert_eq!(full.total, 15);
        let last = pos[4];
        let claims = [
            (
                "another crc",
                RecordPos {
                    crc: last.crc ^ 1,
                    ..last
                },
            ),
            ("another seq", RecordPos { seq: 4, ..last }),
            (
                "another offset",
                RecordPos {
                    offset: last.offset - 1,
                    ..last
                },
            ),
            (
                "another length",
                RecordPos {
                    len: last.len + 1,
                    ..last
                },
            ),
            (
                "past the end",
                RecordPos {
                    seq: 6,
                    offset: last.end(),
                    ..last
                },
            ),
            (
                "the middle of a line",
                RecordPos {
                    offset: pos[2].offset + 3,
                    ..pos[2]
                },
            ),
        ];
        for (what, claim) in claims {
            plant(&p, &claim);
            let (s, report) = SumStore::open(&p, no_snapshots()).unwrap();
            assert_eq!(s.state(), &full, "{what}");
            assert_eq!(
                (report.snapshot.clone(), report.replayed),
                (None, 5),
                "{what}"
            );
            assert!(
                report.warnings.iter().any(|w| w.contains("stale")),
                "{what}: {:?}",
                report.warnings
            );
            drop(s);
            let l = load_with::<Rec, Sum>(&p, true).unwrap();
            assert_eq!((l.state.total, l.snapshot), (15, None), "{what}");
        }
        // The same snapshot claiming the record it does cover is used.
        snapshot::write(&p, &full, &last, || {}).unwrap();
        let (s, report) = SumStore::open(&p, no_snapshots()).unwrap();
        assert_eq!((s.state(), report.replayed), (&full, 0));
        assert_eq!(report.snapshot.map(|s| s.seq), Some(5));
    }

    #[test]
    fn a_torn_tail_copy_keeps_every_byte_and_leaves_holes_holes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.bin");
        let mut bytes = b"head".to_vec();
        bytes.resize(4 + 3 * COPY_BUF + 17, 0);
        bytes.extend_from_slice(b"middle");
        bytes.resize(bytes.len() + 2 * COPY_BUF, 0);
        std::fs::write(&p, &bytes).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(bytes.len() as u64 + (64 << 20)).unwrap();
        drop(f);
        let tail = TornTail {
            offset: 2,
            bytes: std::fs::metadata(&p).unwrap().len() - 2,
        };
        let kept = save_torn(&p, &tail).unwrap();
        let copy = std::fs::read(&kept).unwrap();
        let orig = std::fs::read(&p).unwrap();
        assert_eq!(copy.len() as u64, tail.bytes);
        assert!(copy == orig[2..], "the copy differs");
        let blocks = std::fs::metadata(&kept).unwrap().blocks();
        assert!(
            blocks * 512 < 1 << 20,
            "{blocks} blocks for a mostly empty copy"
        );
    }
}
