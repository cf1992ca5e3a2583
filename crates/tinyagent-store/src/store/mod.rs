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
//!
//! The parts: `recover` (what an open finds and mends: the snapshot or a
//! replay, a torn tail saved), `load` (the read-only view) and `error`
//! ([`StoreError`]).

mod error;
mod load;
mod recover;

pub use error::StoreError;
use error::io_err;
pub use load::{Loaded, load, load_observed, load_observed_frames, load_with};
use recover::{check_regular, from_snapshot, full_replay, save_torn};

use crate::fsutil::{create_dir_all_durable, parent_dir};
use crate::seams::{CrashCounter, TestSeams, crash_now};
use crate::snapshot::{self, SnapshotHook, SnapshotSaved, SnapshotWriter, WriterConfig};
use crate::wal::reader::{RecordPos, TornTail};
use crate::wal::writer::{Appended, IoStats, LockedLog, WalWriter};
use crate::{Fold, Record};
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
    /// Refusals ([`StoreError::is_refusal`]: missing, locked, not a log,
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
