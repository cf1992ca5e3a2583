//! What `log inspect` reports: the [`Report`] (serialised as is for
//! `--json`), the JSON members it is made of, and how it is built from the
//! log's [`Summary`] and the reader's scan.

use super::Summary;
use crate::event::{Event, Limits, PlanItem};
use crate::session::{PendingCall, State};
use serde::Serialize;
use std::path::Path;
use tinyagent_store::wal::reader::{Corruption, ScanReport, TornTail};

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
pub(super) struct StepUsage {
    last: std::collections::VecDeque<(u64, crate::event::Usage, f64)>,
}

impl StepUsage {
    /// How many steps are kept.
    const KEPT: usize = 10;

    pub(super) fn add(&mut self, event: &Event) {
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

    pub(super) fn json(self) -> Vec<StepUsageJson> {
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
pub(super) struct StepTimes {
    since: Option<std::time::SystemTime>,
    seconds: Vec<(u64, f64)>,
}

impl StepTimes {
    pub(super) fn add(&mut self, ts: &str, event: &Event) {
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

    pub(super) fn json(&self) -> Option<StepTimesJson> {
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
