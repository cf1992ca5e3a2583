//! The run's state as a pure fold over log records.
//!
//! `State::apply(&Event)` is the only way state changes, live and on replay:
//! the agent appends a record, then applies it; resume replays the same records
//! through the same function. There is no second path that could drift.
//!
//! [`State::model_messages`] is what the model is sent for a step: the view,
//! which only grows between compactions and resumes, so each request is the
//! last one plus what was added (section 16). With the plan enabled, a
//! `[Current plan]` message is appended after every step that changed the
//! plan, and pinned after the system prompt (or the summary) when the view
//! is rebuilt; `plan.pin = "head"` instead re-pins one block per request.
//! [`plan`] holds the pure plan rules and renderings.

mod fold;
pub(crate) mod plan;
#[cfg(test)]
pub(crate) mod proptests;
#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;
mod view;

use crate::event::{Event, Limits, Message, PlanItem, RunStarted, RunStatus, Usage};
pub(crate) use fold::is_plan_message;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
pub use view::View;

/// A call the model asked for that has no result yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    pub id: String,
    pub name: String,
    pub step: u64,
    /// A `tool.started` record exists for it.
    pub started: bool,
    /// The process group a foreground command of the call ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<crate::event::CallProcess>,
    /// Where the call stands with the person's approval (`None`: it was
    /// never asked about).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMark>,
}

/// A pending call's approval: asked (waiting for the answer), or decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMark {
    Requested {
        tool: String,
        preview: String,
    },
    Decided {
        decision: crate::event::Decision,
        by: String,
        reason: Option<String>,
    },
}

impl PendingCall {
    /// The call waits for the person's answer (`approval.requested`, no
    /// `approval.decided` yet).
    pub fn awaiting_approval(&self) -> bool {
        matches!(self.approval, Some(ApprovalMark::Requested { .. }))
    }
}

/// The current plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub version: u64,
    pub items: Vec<PlanItem>,
    pub note: Option<String>,
    pub updated_step: u64,
}

/// One entry of the plan history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRevision {
    pub step: u64,
    pub version: u64,
    pub diff: String,
}

/// A background process registered by `process.started`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub id: String,
    pub pid: u32,
    pub command: String,
    pub step: u64,
    pub env: String,
    pub start_time: Option<u64>,
    pub output: Option<String>,
    /// `None` while running (as far as the log knows).
    pub exited: Option<ProcessExit>,
    /// A resume reported it lost: the agent that started it stopped without
    /// seeing it exit, and it is not tracked any more.
    #[serde(default)]
    pub lost: bool,
    /// The container it runs in (container environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl ProcessInfo {
    /// Still tracked as running by this run.
    pub fn is_tracked_running(&self) -> bool {
        self.exited.is_none() && !self.lost
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessExit {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// Whether the run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Finished(RunStatus),
}

impl Status {
    /// `running`, or the finished run's [`RunStatus::as_str`].
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Finished(s) => s.as_str(),
        }
    }
}

/// Everything the log says about a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts the records set, each its own member"
)]
pub struct State {
    /// The `run.started` record (None before it is applied).
    pub run: Option<RunStarted>,
    /// The whole conversation, never compacted: system prompt, task, and every
    /// message since (assistant turns, tool results, notices). Kept only when
    /// `keep_history` is set (inspect and export replay the whole log with
    /// it); the running agent does not keep it, so its state and snapshots
    /// stay bounded by the compacted view instead of growing with the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// Whether `messages` is maintained.
    #[serde(default = "yes")]
    pub keep_history: bool,
    /// What the model is sent: the system prompt first; after a compaction,
    /// the compaction's view follows it. With `plan.pin = "append"` the
    /// `[Current plan]` messages are part of it; with `head` the pinned
    /// block is added per request ([`State::model_messages`]).
    pub view: View,
    /// Calls of the latest model response that have no result yet, in order.
    pub pending: Vec<PendingCall>,
    pub plan: Option<Plan>,
    pub plan_history: Vec<PlanRevision>,
    pub processes: BTreeMap<String, ProcessInfo>,
    /// Sum over every model call (summarizer calls included).
    pub usage: Usage,
    pub cost_usd: f64,
    /// Latest step with a `model.response`.
    pub step: u64,
    /// Latest step with a `step.saved`.
    pub saved_step: u64,
    /// Consecutive malformed tool calls.
    pub format_errors: u32,
    /// Model replies cut at the output limit in a row (`stop_reason:
    /// max_tokens`); a reply that stopped otherwise, or a person's message,
    /// ends the row. Derived from the log, so a resume goes on counting.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub truncated_in_row: u32,
    pub limits: Limits,
    /// The compaction threshold the last `resume --compact-at` set.
    pub compact_at: Option<u64>,
    pub status: Status,
    /// The `reason` of `run.finished` (the signal of an interrupted run).
    #[serde(default)]
    pub finished_reason: Option<String>,
    pub compactions: u64,
    pub hooks_blocked: u64,
    pub resumes: u64,
    /// Records applied.
    pub records: u64,
    /// Where the latest compaction happened (for export); `None` when the
    /// view was never compacted. Set and cleared together with the view's
    /// summary, so it also says whether `view[1]` is one ([`State::compacted`]).
    #[serde(default)]
    pub last_compaction: Option<CompactionMark>,
    /// A successful `update_plan` result whose `plan.updated` record is not
    /// in the log: set by that `tool.result`, cleared by the next record.
    /// Only a crash between the two leaves it set; resume then writes the
    /// missing record (the model was already told the plan changed).
    #[serde(default)]
    pub plan_update_due: Option<PlanUpdateDue>,
    /// The plan changed while calls of its step still had no result: its
    /// `[Current plan]` message goes after the step's last result (between
    /// results it would split calls from their answers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan_message_due: bool,
    /// The latest step request whose size the server reported (its body's
    /// length and prompt tokens): the base of the next compaction decision.
    /// Cleared by a compaction, which makes the count stale.
    #[serde(default)]
    pub last_request: Option<MeasuredRequest>,
    /// The latest `workspace.checkpoint`.
    #[serde(default)]
    pub last_checkpoint: Option<CheckpointMark>,
    /// The latest call that started and got its result, while no
    /// checkpoint followed it: resume makes the missing checkpoint when the
    /// call's tool can change files.
    #[serde(default)]
    pub checkpoint_due: Option<CheckpointDue>,
    /// Every checkpoint, in order; kept only with `keep_history` (inspect,
    /// export, fork).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<CheckpointMark>,
    /// Tools the person allowed for the rest of the run ("always").
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub always_allowed: std::collections::BTreeSet<String>,
    /// A chat waits at its prompt for the person's next message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat_waiting: bool,
    /// The model a chat's `/model` chose (`settings.changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_set: Option<String>,
    /// The approval mode a chat's `/approvals` chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_set: Option<crate::kinds::ApproveMode>,
    /// A chat's `/compact` waits for the next request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compaction_requested: bool,
}

impl State {
    /// The pending call waiting for the person's answer, if any.
    pub fn awaiting_approval(&self) -> Option<&PendingCall> {
        self.pending.iter().find(|c| c.awaiting_approval())
    }

    /// Whether the run is a chat (`tinyagent chat`).
    pub fn is_chat(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.settings.chat)
    }
}

/// A request's body length and the prompt tokens the server counted for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasuredRequest {
    pub bytes: u64,
    pub tokens: u64,
}

/// One `workspace.checkpoint`, as state keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMark {
    pub step: u64,
    pub call_id: Option<String>,
    pub tree: String,
    pub changed_count: u64,
    #[serde(default)]
    pub oversized: u64,
    /// How the workspace was looked at (`[checkpoints] watch` only):
    /// `watch`, or `full: <why>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk: Option<String>,
}

/// A call whose checkpoint may be missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointDue {
    pub step: u64,
    pub call_id: String,
    pub name: String,
}

/// The `update_plan` call whose `plan.updated` record is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanUpdateDue {
    pub call_id: String,
    pub step: u64,
}

/// Where the latest compaction sits in the history, so that a whole-file
/// export can say which messages its view replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionMark {
    pub step: u64,
    pub summary: String,
    /// `messages.len()` when the compaction was applied.
    pub messages_before: usize,
    /// Length of the view the compaction left, after the system prompt
    /// (`view[1..=view_len]` is it: the record's `view`, with the plan
    /// pinned after the summary when the plan's messages are appended).
    pub view_len: usize,
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl State {
    /// `view[1]` is a compaction summary (the plan block goes after it).
    /// Snapshots written before this was derived carry a `compacted` member;
    /// deserializing ignores it.
    pub fn compacted(&self) -> bool {
        self.last_compaction.is_some()
    }
}

/// The store folds records with [`State::apply`]. A writer starts without
/// the full history (see [`State::messages`]); readers keep it.
impl tinyagent_store::Fold<Event> for State {
    fn apply(&mut self, record: &Event) {
        State::apply(self, record);
    }

    fn empty_for_writing() -> State {
        State {
            keep_history: false,
            ..State::default()
        }
    }
}

impl Default for State {
    fn default() -> Self {
        State {
            run: None,
            messages: Vec::new(),
            keep_history: true,
            view: View::default(),
            pending: Vec::new(),
            plan: None,
            plan_history: Vec::new(),
            processes: BTreeMap::new(),
            usage: Usage::default(),
            cost_usd: 0.0,
            step: 0,
            saved_step: 0,
            format_errors: 0,
            truncated_in_row: 0,
            limits: Limits::default(),
            compact_at: None,
            status: Status::Running,
            finished_reason: None,
            compactions: 0,
            hooks_blocked: 0,
            resumes: 0,
            records: 0,
            last_compaction: None,
            plan_update_due: None,
            plan_message_due: false,
            last_request: None,
            last_checkpoint: None,
            checkpoint_due: None,
            checkpoints: Vec::new(),
            always_allowed: std::collections::BTreeSet::new(),
            chat_waiting: false,
            model_set: None,
            approvals_set: None,
            compaction_requested: false,
        }
    }
}
