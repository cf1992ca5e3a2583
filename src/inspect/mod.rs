//! `tinyagent log inspect | verify | repair`: look at a log, check it, cut a
//! torn tail.
//!
//! All three read the file only through the storage reader
//! ([`tinyagent_store::load_observed`] and [`tinyagent_store::wal::reader::scan`]), the same code the
//! agent resumes with, so what they report is what a resume would see.
//!
//! # Memory
//!
//! `inspect` folds the log with [`Summary`]: the run's state as the writer
//! keeps it (no full history), minus the two things that still grow with
//! every record and are only counted here (the model's view and the plan
//! history), plus those counts. Its memory is the run's small state and one
//! record at a time, whatever the log's length (contract section 9); only
//! `log export` replays the whole history.
//!
//! # Exit codes and where the words go
//!
//! - `inspect` never takes the writer's lock, so it works on a log that is still
//!   being written (its last line may then show as a torn tail for a moment)
//!   and on a damaged one: it reports what it could read and where reading
//!   stopped, and returns 0 whenever it could report. It returns an `Err` only
//!   when the file cannot be read as a log at all (missing, unreadable, empty,
//!   or without a single valid record): the caller prints that error on
//!   stderr and exits 2. `--json` prints exactly one JSON object.
//! - `verify` scans every record and writes one line: 0 clean, 1 torn tail
//!   (resume or `log repair` will cut it), 2 corrupt, unreadable, empty or
//!   not a log (nothing a resume could open).
//! - `repair` cuts a torn tail through [`crate::store::Store::open`], which
//!   keeps the cut bytes in a file beside the log and syncs; it returns 0 when
//!   the log is clean afterwards (cut or already clean). Corruption is refused
//!   with its seq and byte offset (exit 2) and the file is left byte-for-byte
//!   unchanged; a log locked by a live writer is refused with the store's code.
//!
//! # JSON members
//!
//! The contract's section 5 members (`run_id`, `schema_version`, `records`,
//! `bytes`, `torn_tail`, `corruption`, `steps`, `status`, `pending_calls`,
//! `plan`, `compactions`, `processes`, `usage`, `snapshot`) plus `path`,
//! `valid_bytes`, `last_seq`, `task`, `model`, `provider`, `base_url`,
//! `tool_signature`, `plan_enabled`, `read_only`, `saved_step`, `messages`,
//! `format_errors`, `hooks_blocked`, `hooks` (counts of hook runs by outcome
//! and the latest runs), `resumes`, `limits` and `warnings`. `bytes` is the
//! file's length; `valid_bytes` the length of its valid prefix (equal on a
//! clean log). `plan` carries `versions`, the number of plan updates seen.

mod human;
mod report;
pub mod runs;
#[cfg(test)]
mod tests;

pub use report::{
    CheckpointsJson, ContainerJson, HookRunJson, HooksJson, PlanJson, ProcessJson, Report,
    SnapshotJson, StepCheckpoints, StepTimesJson, StepUsageJson, UsageJson, WaitingJson,
    container_state,
};
use report::{StepTimes, StepUsage};

use crate::event::Event;
use crate::session::State;
use crate::store::{Store, StoreOptions};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use tinyagent_store::snapshot;
use tinyagent_store::wal::reader::{self, ScanReport};

/// The fold `inspect` reads a log with: what the report shows, in memory
/// that does not grow with the log.
///
/// `state` is folded by [`State::apply`] like everywhere else, started the
/// way the writer starts it (without the full history); after each record
/// its view is cut back to the system prompt and its plan history emptied,
/// the report needing only how long they would be. `messages` is the length
/// the full history would have.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub state: State,
    /// Messages in the full history ([`State::messages`] of a reader's fold).
    pub messages: usize,
    /// Plan updates seen ([`State::plan_history`]'s length).
    pub plan_versions: u64,
    /// The context size of the latest step request, as the compaction
    /// decision measured it (0 when the log does not say).
    #[serde(default)]
    pub context_tokens: u64,
    /// The latest checkpoints (at most [`Summary::MAX_CHECKPOINTS`]).
    #[serde(default)]
    pub checkpoints: std::collections::VecDeque<crate::session::CheckpointMark>,
    #[serde(default)]
    pub checkpoint_count: u64,
}

impl Summary {
    /// How many checkpoints the report lists (the count covers all).
    pub const MAX_CHECKPOINTS: usize = 10_000;
}

#[cfg(test)]
impl Summary {
    /// The summary of a fully folded state (one that kept its history).
    pub fn of_full(state: &State) -> Summary {
        Summary {
            state: state.clone(),
            messages: state.messages.len(),
            plan_versions: state.plan_history.len() as u64,
            context_tokens: 0,
            checkpoints: state.checkpoints.iter().cloned().collect(),
            checkpoint_count: state.checkpoints.len() as u64,
        }
    }
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            state: <State as tinyagent_store::Fold<Event>>::empty_for_writing(),
            messages: 0,
            plan_versions: 0,
            context_tokens: 0,
            checkpoints: std::collections::VecDeque::new(),
            checkpoint_count: 0,
        }
    }
}

impl tinyagent_store::Fold<Event> for Summary {
    fn apply(&mut self, record: &Event) {
        self.state.apply(record);
        // The full history's length, as `State::apply` would grow it.
        match record {
            Event::RunStarted(r) => {
                self.messages = if r.settings.chat && r.task.is_empty() {
                    1
                } else {
                    2
                };
            }
            Event::ModelResponse(r) => {
                self.messages += 1;
                self.context_tokens = r.context_tokens;
            }
            Event::ToolResult(_) | Event::UserMessage(_) => self.messages += 1,
            Event::Resume(r) => self.messages += 1 + usize::from(r.message.is_some()),
            Event::ChatWaiting(w) => self.messages += usize::from(w.interrupted.is_some()),
            Event::PlanUpdated(_) => self.plan_versions += 1,
            Event::WorkspaceCheckpoint(_) => {
                if let Some(mark) = &self.state.last_checkpoint {
                    if self.checkpoints.len() == Self::MAX_CHECKPOINTS {
                        self.checkpoints.pop_front();
                    }
                    self.checkpoints.push_back(mark.clone());
                    self.checkpoint_count += 1;
                }
            }
            _ => {}
        }
        // Keep the system prompt: a compaction without `run.started` takes it
        // from there.
        self.state.view.truncate(1);
        self.state.plan_history.clear();
    }
}

/// Why a file could not be read as a log at all.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{path}: not a tinyagent log (no valid record in its {bytes} bytes)")]
    NotALog { path: String, bytes: u64 },
    #[error("{path}: empty, the log holds no record")]
    Empty { path: String },
}

/// A file without a single valid record is not a log anyone can resume: an
/// empty file, or one whose very first line is bad (a trajectory JSON passed
/// by mistake, say).
fn not_a_log(path: &Path, scan: &ScanReport) -> Option<InspectError> {
    let path = path.display().to_string();
    match (scan.records, scan.file_len) {
        (0, 0) => Some(InspectError::Empty { path }),
        (0, bytes) => Some(InspectError::NotALog { path, bytes }),
        _ => None,
    }
}

/// Reads the log (without a lock) and builds its report.
pub fn read_report(path: &Path) -> anyhow::Result<Report> {
    // The store's errors name the path already.
    // Hook runs are not part of the folded state: they are counted in the
    // same pass that replays the log.
    let mut hooks = HooksJson::default();
    let mut times = StepTimes::default();
    let mut steps = StepUsage::default();
    let loaded = tinyagent_store::load_observed_frames::<Event, Summary>(path, |f| {
        hooks.add(&f.event);
        times.add(&f.ts, &f.event);
        steps.add(&f.event);
    })?;
    if let Some(e) = not_a_log(path, &loaded.scan) {
        return Err(e.into());
    }
    let snapshot = loaded.snapshot.as_ref().map(|s| SnapshotJson {
        seq: s.seq,
        path: s.path.display().to_string(),
    });
    let mut report = Report::new(path, &loaded.state, &loaded.scan, snapshot);
    report.hooks = hooks;
    report.warnings = loaded.warnings;
    report.live = locked(path);
    report.step_times = times.json();
    report.usage.last_steps = steps.json();
    report.started_at = first_ts(path);
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    report.last_write_at = modified.map(|t| humantime::format_rfc3339_millis(t).to_string());
    report.duration_s = match (&report.started_at, modified) {
        (Some(start), Some(end)) => humantime::parse_rfc3339(start)
            .ok()
            .and_then(|start| end.duration_since(start).ok())
            .map(|d| (d.as_secs_f64() * 10.0).round() / 10.0),
        _ => None,
    };
    for file in [snapshot::snapshot_path(path), snapshot::backup_path(path)] {
        if loaded.snapshot.is_none() && file.exists() {
            report.warnings.push(format!(
                "{} matches no record of this log (stale or damaged); resume would replay the log",
                file.display()
            ));
        }
    }
    Ok(report)
}

/// Whether another process holds the log's lock (a live writer). Probed
/// with a shared lock, taken and let go at once; a resume that starts in
/// that instant waits for it (see `open_when_free`).
pub fn locked(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock))
}

/// The first record's `ts`, read from the first line alone.
pub fn first_ts(path: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let f = std::fs::File::open(path).ok()?;
    // A run.started record is a few KB; a line this long is not one.
    let mut line = Vec::new();
    std::io::BufReader::new(f.take(1 << 20))
        .read_until(b'\n', &mut line)
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&line).ok()?;
    v["ts"].as_str().map(str::to_string)
}

/// `tinyagent log inspect <WAL> [--json]`.
pub fn inspect(path: &Path, json: bool, out: &mut dyn Write) -> anyhow::Result<i32> {
    let mut report = read_report(path)?;
    if let Some(c) = report.container.as_mut() {
        container_state(c);
    }
    if json {
        serde_json::to_writer(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        human::render(&report, out)?;
    }
    Ok(0)
}

/// Scans the whole log; the error says why it is not a readable log.
fn scan_log(path: &Path) -> Result<reader::ScanReport, String> {
    let scan = reader::scan::<Event>(path, None, |_, _| {})
        .map_err(|e| format!("unreadable: {}: {e}", path.display()))?;
    match not_a_log(path, &scan) {
        Some(e) => Err(e.to_string()),
        None => Ok(scan),
    }
}

/// `tinyagent log verify <WAL>`: 0 clean, 1 torn tail, 2 corrupt or unreadable.
pub fn verify(path: &Path, out: &mut dyn Write) -> anyhow::Result<i32> {
    let scan = match scan_log(path) {
        Ok(scan) => scan,
        Err(e) => {
            writeln!(out, "{e}")?;
            return Ok(2);
        }
    };
    if let Some(c) = &scan.corruption {
        writeln!(
            out,
            "corrupt: record seq {} at byte offset {}: {} ({} valid records before it)",
            c.seq, c.offset, c.reason, scan.records
        )?;
        return Ok(2);
    }
    if let Some(t) = &scan.torn_tail {
        writeln!(
            out,
            "torn tail: {} bytes at offset {} after {} valid records (resume or `tinyagent log repair` will cut it)",
            t.bytes, t.offset, scan.records
        )?;
        return Ok(1);
    }
    writeln!(
        out,
        "clean: {} records, {} bytes",
        scan.records, scan.file_len
    )?;
    Ok(0)
}

/// `tinyagent log repair <WAL>`: cut a torn tail, keeping the bytes beside the log.
pub fn repair(path: &Path, out: &mut dyn Write) -> anyhow::Result<i32> {
    let scan = match scan_log(path) {
        Ok(scan) => scan,
        Err(e) => {
            writeln!(out, "refused: {e}; nothing was changed")?;
            return Ok(2);
        }
    };
    if let Some(c) = &scan.corruption {
        writeln!(
            out,
            "refused: corrupt record seq {} at byte offset {}: {}; only a torn tail can be cut, nothing was changed",
            c.seq, c.offset, c.reason
        )?;
        return Ok(2);
    }
    let Some(torn) = &scan.torn_tail else {
        writeln!(
            out,
            "clean: nothing to repair ({} records, {} bytes)",
            scan.records, scan.file_len
        )?;
        return Ok(0);
    };
    // No background snapshots: repair only cuts, it adds nothing beside the log.
    let opts = StoreOptions {
        snapshot_every: 0,
        ..StoreOptions::default()
    };
    match Store::open(path, opts) {
        Ok((store, report)) => {
            store.close()?;
            let kept = report
                .torn_tail
                .map(|(_, kept)| kept.display().to_string())
                .unwrap_or_else(|| format!("{}.torn-{}", path.display(), torn.offset));
            writeln!(
                out,
                "repaired: cut {} bytes at offset {} ({} records kept); the cut bytes are in {}",
                torn.bytes, torn.offset, scan.records, kept
            )?;
            Ok(0)
        }
        Err(e) => {
            writeln!(out, "refused: {e}")?;
            Ok(if e.is_refusal() { 2 } else { 1 })
        }
    }
}
