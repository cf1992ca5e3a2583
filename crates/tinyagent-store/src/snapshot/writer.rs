//! The background snapshot writer: a thread with its own mirror of the
//! state, sent every durable record, writing a snapshot every
//! `snapshot_every` records (see the module docs of [`super`]).

use super::{SnapshotSaved, write};
use crate::seams::crash_now;
use crate::wal::reader::RecordPos;
use crate::{Fold, Record};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

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
