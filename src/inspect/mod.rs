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
pub mod runs;
#[cfg(test)]
mod tests;

use crate::event::{Event, Limits, PlanItem};
use crate::session::{PendingCall, State};
use crate::store::{Store, StoreOptions};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use tinyagent_store::snapshot;
use tinyagent_store::wal::reader::{self, Corruption, ScanReport, TornTail};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanJson {
    pub version: u64,
    pub items: Vec<PlanItem>,
    pub note: Option<String>,
    pub updated_step: u64,
    /// Number of plan updates in the log.
    pub versions: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessJson {
    pub id: String,
    pub pid: u32,
    pub command: String,
    pub step: u64,
    /// No `process.exited` record for it (yet) and no resume reported it lost.
    pub running: bool,
    /// A resume reported it lost (its agent stopped without seeing it exit).
    pub lost: bool,
    /// Execution environment (`local`, `sandbox`).
    pub env: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageJson {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_usd: f64,
    /// False when the run has no price and counted no cost: `cost_usd` is
    /// then no cost (shown as `$?`).
    pub cost_known: bool,
    /// `cost_usd` kind by kind (null when the price is unknown).
    pub cost_by_kind: Option<crate::config::CostByKind>,
    /// The latest steps (at most 10, oldest first): what each step's model
    /// requests read from the prompt cache and what they did not.
    pub last_steps: Vec<StepUsageJson>,
}

/// One step's model usage (its compaction's included), per kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepUsageJson {
    pub step: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// Collects the latest steps' [`StepUsageJson`] while the log is read:
/// (step, usage, cost) of each.
#[derive(Debug, Default)]
struct StepUsage {
    last: std::collections::VecDeque<(u64, crate::event::Usage, f64)>,
}

impl StepUsage {
    /// How many steps are kept.
    const KEPT: usize = 10;

    fn add(&mut self, event: &Event) {
        let (step, usage, cost) = match event {
            Event::ModelResponse(r) => (r.step, &r.usage, r.cost_usd),
            Event::Compaction(c) => (c.step, &c.usage, c.cost_usd),
            _ => return,
        };
        if self.last.back().is_none_or(|s| s.0 != step) {
            self.last
                .push_back((step, crate::event::Usage::default(), 0.0));
            if self.last.len() > Self::KEPT {
                self.last.pop_front();
            }
        }
        if let Some(s) = self.last.back_mut() {
            s.1.add(usage);
            s.2 += cost;
        }
    }

    fn json(self) -> Vec<StepUsageJson> {
        self.last
            .into_iter()
            .map(|(step, u, cost_usd)| StepUsageJson {
                step,
                input_tokens: u.input_tokens,
                cached_input_tokens: u.cached_input_tokens,
                cache_write_tokens: u.cache_write_tokens,
                output_tokens: u.output_tokens,
                cost_usd,
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotJson {
    pub seq: u64,
    pub path: String,
}

/// One hook run, from the `hooks` member of a `tool.result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookRunJson {
    pub step: u64,
    pub call_id: String,
    pub tool: String,
    pub hook: String,
    pub outcome: String,
    pub detail: Option<String>,
}

/// Hook runs over the whole log: counts by outcome and the latest runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HooksJson {
    pub runs: u64,
    pub allow: u64,
    pub block: u64,
    pub failed: u64,
    /// The last [`HooksJson::RECENT`] runs, oldest first.
    pub recent: Vec<HookRunJson>,
}

impl HooksJson {
    pub const RECENT: usize = 5;

    /// Counts the hook runs a record lists.
    pub fn add(&mut self, event: &crate::event::Event) {
        let crate::event::Event::ToolResult(r) = event else {
            return;
        };
        for run in &r.hooks {
            self.runs += 1;
            match run.outcome.as_str() {
                "allow" => self.allow += 1,
                "block" => self.block += 1,
                _ => self.failed += 1,
            }
            if self.recent.len() == Self::RECENT {
                self.recent.remove(0);
            }
            self.recent.push(HookRunJson {
                step: r.step,
                call_id: r.call_id.clone(),
                tool: r.name.clone(),
                hook: run.hook.clone(),
                outcome: run.outcome.clone(),
                detail: run.detail.clone(),
            });
        }
    }
}

/// What `log inspect` reports (serialised as is for `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub path: String,
    pub run_id: Option<String>,
    pub schema_version: Option<u32>,
    pub task: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub tool_signature: Option<String>,
    pub plan_enabled: bool,
    pub read_only: bool,
    pub records: u64,
    pub bytes: u64,
    pub valid_bytes: u64,
    pub last_seq: Option<u64>,
    /// Where a torn tail starts and how long it is.
    pub torn_tail: Option<TornTail>,
    /// The first record that failed its checks with valid records after it.
    pub corruption: Option<Corruption>,
    pub steps: u64,
    pub saved_step: u64,
    pub status: &'static str,
    pub pending_calls: Vec<PendingCall>,
    pub plan: Option<PlanJson>,
    pub compactions: u64,
    /// The latest step request's context size in tokens (see
    /// docs/design.md, "Compaction"); 0 when the log does not record it.
    pub context_tokens: u64,
    pub processes: Vec<ProcessJson>,
    pub usage: UsageJson,
    pub snapshot: Option<SnapshotJson>,
    pub messages: usize,
    pub format_errors: u32,
    pub hooks_blocked: u64,
    /// Hook runs recorded in `tool.result` records.
    pub hooks: HooksJson,
    pub resumes: u64,
    pub limits: Limits,
    /// Workspace checkpoints: how many, and the latest
    /// [`Summary::MAX_CHECKPOINTS`] of them grouped by step.
    pub checkpoints: CheckpointsJson,
    /// `run.started`'s `forked_from`, when the run is a fork.
    pub forked_from: Option<crate::event::ForkedFrom>,
    /// What the reader noticed beside the log (a damaged snapshot, ...).
    pub warnings: Vec<String>,
    /// The workspace the run works in.
    pub workspace: Option<String>,
    /// When the run started (its first record's `ts`).
    pub started_at: Option<String>,
    /// When the log was last written (its modification time), UTC.
    pub last_write_at: Option<String>,
    /// Seconds from the start to the last write.
    pub duration_s: Option<f64>,
    /// A process holds the log's lock: the run is going on now.
    pub live: bool,
    /// The run's container (container environment), null otherwise.
    pub container: Option<ContainerJson>,
    /// How long the steps took (null before the first step is saved).
    pub step_times: Option<StepTimesJson>,
    /// What the run waits for from the person: an approval (with the
    /// call), or a chat's next message. Null otherwise.
    pub waiting: Option<WaitingJson>,
    /// Why the run ended, when `run.finished` said (an error's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a run waits for from the person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingJson {
    /// `approval` or `message` (a chat at its prompt).
    #[serde(rename = "for")]
    pub what: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
}

impl WaitingJson {
    /// What `state` waits for, if anything.
    pub fn of(state: &State) -> Option<WaitingJson> {
        if let Some(call) = state.awaiting_approval() {
            let (tool, preview) = match &call.approval {
                Some(crate::session::ApprovalMark::Requested { tool, preview }) => {
                    (tool.clone(), preview.clone())
                }
                _ => (call.name.clone(), String::new()),
            };
            return Some(WaitingJson {
                what: "approval",
                call_id: Some(call.id.clone()),
                tool: Some(tool),
                preview: Some(preview),
                step: Some(call.step),
            });
        }
        (state.chat_waiting && state.status == crate::session::Status::Running).then_some(
            WaitingJson {
                what: "message",
                call_id: None,
                tool: None,
                preview: None,
                step: None,
            },
        )
    }

    /// One line for the person.
    pub fn line(&self, wal: &str) -> String {
        match (self.what, &self.call_id) {
            ("approval", Some(id)) => format!(
                "approval of {id} ({}): answer with `tinyagent approve {wal} {id}` (or --deny --reason TEXT)",
                crate::text::first_line(self.preview.as_deref().unwrap_or(""), 100)
            ),
            _ => "the person's next message (a chat at its prompt)".to_string(),
        }
    }
}

/// Step durations: from the end of the step before (or the start, or a
/// resume) to the step's `step.saved`, so the time a stopped run lay dead
/// is not counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepTimesJson {
    pub steps: u64,
    pub median_s: f64,
    pub p90_s: f64,
    pub max_s: f64,
    /// The slowest step.
    pub slowest_step: u64,
    /// The latest steps, oldest first: (step, seconds).
    pub last: Vec<(u64, f64)>,
}

/// Collects [`StepTimesJson`] while the log is read: one number a step.
#[derive(Debug, Default)]
struct StepTimes {
    since: Option<std::time::SystemTime>,
    seconds: Vec<(u64, f64)>,
}

impl StepTimes {
    fn add(&mut self, ts: &str, event: &Event) {
        let Ok(at) = humantime::parse_rfc3339(ts) else {
            return;
        };
        match event {
            Event::RunStarted(_) | Event::Resume(_) => self.since = Some(at),
            Event::StepSaved(s) => {
                if let Some(d) = self.since.and_then(|from| at.duration_since(from).ok()) {
                    self.seconds.push((s.step, d.as_secs_f64()));
                }
                self.since = Some(at);
            }
            _ => {}
        }
    }

    fn json(&self) -> Option<StepTimesJson> {
        if self.seconds.is_empty() {
            return None;
        }
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        let mut sorted: Vec<f64> = self.seconds.iter().map(|(_, s)| *s).collect();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let (slowest_step, max) = self
            .seconds
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0));
        Some(StepTimesJson {
            steps: self.seconds.len() as u64,
            median_s: round(at(0.5)),
            p90_s: round(at(0.9)),
            max_s: round(max),
            slowest_step,
            last: self.seconds[self.seconds.len().saturating_sub(10)..]
                .iter()
                .map(|&(step, secs)| (step, round(secs)))
                .collect(),
        })
    }
}

/// The container of a run in the container environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerJson {
    pub name: String,
    pub engine: Option<String>,
    pub image: Option<String>,
    /// `running`, `stopped`, `gone`, or `unknown` (the engine could not be asked).
    pub state: String,
}

/// Asks the engine whether the report's container runs.
pub fn container_state(c: &mut ContainerJson) {
    let engine = c
        .engine
        .as_deref()
        .and_then(|e| crate::config::parse_enum::<crate::config::EngineKind>("env.engine", e).ok());
    c.state = match crate::exec::container::find_engine(engine) {
        Ok((_, binary)) => crate::exec::container::state_of(&binary, &c.name)
            .map_or_else(|_| "unknown".to_string(), |s| s.as_str().to_string()),
        Err(_) => "unknown".to_string(),
    };
}

/// The checkpoints of a log (section 10).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckpointsJson {
    pub count: u64,
    /// The store (`<wal>.d/checkpoints.git`).
    pub store: String,
    pub steps: Vec<StepCheckpoints>,
}

/// The checkpoints taken in one step, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepCheckpoints {
    pub step: u64,
    pub checkpoints: Vec<crate::session::CheckpointMark>,
}

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

impl Report {
    /// Builds the report from a summary, the reader's scan and the snapshot
    /// used.
    pub fn new(
        path: &Path,
        summary: &Summary,
        scan: &ScanReport,
        snapshot: Option<SnapshotJson>,
    ) -> Report {
        let state = &summary.state;
        let run = state.run.as_ref();
        Report {
            path: path.display().to_string(),
            run_id: run.map(|r| r.run_id.clone()),
            schema_version: run.map(|r| r.schema_version),
            task: run.map(|r| r.task.clone()),
            model: run.map(|r| r.model.clone()),
            provider: run.map(|r| r.provider.to_string()),
            base_url: run.and_then(|r| r.base_url.clone()),
            tool_signature: run.map(|r| r.tool_signature.clone()),
            plan_enabled: run.is_some_and(|r| r.plan_enabled),
            read_only: run.is_some_and(|r| r.read_only),
            records: state.records.max(scan.records),
            bytes: scan.file_len,
            valid_bytes: scan.valid_bytes,
            last_seq: scan.last.as_ref().map(|p| p.seq),
            torn_tail: scan.torn_tail,
            corruption: scan.corruption.clone(),
            steps: state.step,
            saved_step: state.saved_step,
            status: state.status.as_str(),
            pending_calls: state.pending.clone(),
            plan: state.plan.as_ref().map(|p| PlanJson {
                version: p.version,
                items: p.items.clone(),
                note: p.note.clone(),
                updated_step: p.updated_step,
                versions: summary.plan_versions,
            }),
            compactions: state.compactions,
            context_tokens: summary.context_tokens,
            processes: state
                .processes
                .values()
                .map(|p| ProcessJson {
                    id: p.id.clone(),
                    pid: p.pid,
                    command: p.command.clone(),
                    step: p.step,
                    running: p.is_tracked_running(),
                    lost: p.lost,
                    env: p.env.clone(),
                    exit_code: p.exited.as_ref().and_then(|e| e.exit_code),
                    signal: p.exited.as_ref().and_then(|e| e.signal),
                })
                .collect(),
            usage: UsageJson {
                input_tokens: state.usage.input_tokens,
                output_tokens: state.usage.output_tokens,
                cached_input_tokens: state.usage.cached_input_tokens,
                cache_write_tokens: state.usage.cache_write_tokens,
                reasoning_tokens: state.usage.reasoning_tokens,
                cost_usd: state.cost_usd,
                // A cost was counted, or a price given (a log of before
                // unknown prices always recorded one).
                cost_known: state.cost_usd > 0.0
                    || run.is_none_or(|r| {
                        r.settings.price_in.is_some() || r.settings.price_out.is_some()
                    }),
                cost_by_kind: run
                    .filter(|r| r.settings.price_in.is_some() || r.settings.price_out.is_some())
                    .and_then(|r| crate::config::RunConfig::from_started(r, Path::new("/")).ok())
                    .map(|c| c.model.cost_by_kind(&state.usage)),
                last_steps: Vec::new(),
            },
            snapshot,
            messages: summary.messages,
            format_errors: state.format_errors,
            hooks_blocked: state.hooks_blocked,
            hooks: HooksJson::default(),
            resumes: state.resumes,
            limits: state.limits.clone(),
            workspace: run
                .map(|r| r.settings.cwd.clone())
                .filter(|c| !c.is_empty()),
            started_at: None,
            last_write_at: None,
            duration_s: None,
            live: false,
            step_times: None,
            waiting: WaitingJson::of(state),
            reason: state.finished_reason.clone(),
            checkpoints: CheckpointsJson {
                count: summary.checkpoint_count,
                store: crate::checkpoint::store_dir(path).display().to_string(),
                steps: by_step(&summary.checkpoints),
            },
            forked_from: run.and_then(|r| r.forked_from.clone()),
            warnings: Vec::new(),
            container: run.and_then(|r| {
                Some(ContainerJson {
                    name: r.settings.container.clone()?,
                    engine: r.settings.engine.map(|e| e.to_string()),
                    image: r.settings.image.clone(),
                    state: "unknown".to_string(),
                })
            }),
        }
    }
}

/// Checkpoints grouped by step, in log order.
fn by_step<'a>(
    marks: impl IntoIterator<Item = &'a crate::session::CheckpointMark>,
) -> Vec<StepCheckpoints> {
    let mut steps: Vec<StepCheckpoints> = Vec::new();
    for m in marks {
        match steps.last_mut() {
            Some(s) if s.step == m.step => s.checkpoints.push(m.clone()),
            _ => steps.push(StepCheckpoints {
                step: m.step,
                checkpoints: vec![m.clone()],
            }),
        }
    }
    steps
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
