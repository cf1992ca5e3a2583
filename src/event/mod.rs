//! The record vocabulary: one serde-tagged enum shared by the agent loop, the
//! log writer and reader, the inspector and the `--json` event stream.
//!
//! Each variant serialises (adjacently tagged) as `{"type": "<name>", "data": {...}}`;
//! the log framing in [`tinyagent_store::wal::frame`] wraps that with `seq`, `prev`, `ts`
//! and `crc`. Members beyond the contract's required ones carry `#[serde(default)]`
//! so that older logs keep reading.

use serde::{Deserialize, Serialize};

mod approval;
mod chat;
mod message;
mod native;
mod plan;
mod response;
mod run;
mod tool;
mod workspace;

pub use approval::{ApprovalDecided, ApprovalRequested, Decision};
pub use chat::{
    ChatWaiting, CompactionRequested, SettingsChanged, UserMessage, chat_interrupted_text,
};
pub use message::{Message, Native, Role, ToolCall};
pub use native::{NativeItems, items_at, normalised, send_exact};
pub use plan::{PlanItem, PlanStatus, PlanUpdated};
pub use response::{Compaction, ModelResponse, StopReason, Usage};
pub use run::{
    ForkedFrom, Limits, McpToolRecord, Resume, RunFinished, RunSettings, RunStarted, RunStatus,
    StepSaved,
};
pub use tool::{
    CallProcess, HookBlocked, HookRun, INTERRUPTED_TEXT, NOT_RUN_TEXT, ProcessExited,
    ProcessStarted, StoppedProcess, TRUNCATED_CALL_TEXT, TRUNCATED_NOTICE, TRUNCATED_SOURCE,
    ToolResult, ToolStarted,
};
pub use workspace::{Oversized, WorkspaceCheckpoint, WorkspaceRestored};

/// Schema version written into `run.started`.
pub const SCHEMA_VERSION: u32 = 2;

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_false(b: &bool) -> bool {
    !*b
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One log record's payload.
///
/// `run.started` is much larger than the other variants, but it appears once
/// per log and events live briefly (appended, applied, dropped), so boxing it
/// would only add noise to every construction site.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Event {
    #[serde(rename = "run.started")]
    RunStarted(RunStarted),
    #[serde(rename = "model.response")]
    ModelResponse(ModelResponse),
    #[serde(rename = "tool.started")]
    ToolStarted(ToolStarted),
    #[serde(rename = "tool.result")]
    ToolResult(ToolResult),
    #[serde(rename = "plan.updated")]
    PlanUpdated(PlanUpdated),
    #[serde(rename = "compaction")]
    Compaction(Compaction),
    #[serde(rename = "hook.blocked")]
    HookBlocked(HookBlocked),
    #[serde(rename = "process.started")]
    ProcessStarted(ProcessStarted),
    #[serde(rename = "process.exited")]
    ProcessExited(ProcessExited),
    #[serde(rename = "step.saved")]
    StepSaved(StepSaved),
    #[serde(rename = "resume")]
    Resume(Resume),
    #[serde(rename = "run.finished")]
    RunFinished(RunFinished),
    #[serde(rename = "workspace.checkpoint")]
    WorkspaceCheckpoint(WorkspaceCheckpoint),
    #[serde(rename = "workspace.restored")]
    WorkspaceRestored(WorkspaceRestored),
    #[serde(rename = "user.message")]
    UserMessage(UserMessage),
    #[serde(rename = "chat.waiting")]
    ChatWaiting(ChatWaiting),
    #[serde(rename = "approval.requested")]
    ApprovalRequested(ApprovalRequested),
    #[serde(rename = "approval.decided")]
    ApprovalDecided(ApprovalDecided),
    #[serde(rename = "settings.changed")]
    SettingsChanged(SettingsChanged),
    #[serde(rename = "compaction.requested")]
    CompactionRequested(CompactionRequested),
}

impl Event {
    /// The record's `type` string.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted(_) => "run.started",
            Event::ModelResponse(_) => "model.response",
            Event::ToolStarted(_) => "tool.started",
            Event::ToolResult(_) => "tool.result",
            Event::PlanUpdated(_) => "plan.updated",
            Event::Compaction(_) => "compaction",
            Event::HookBlocked(_) => "hook.blocked",
            Event::ProcessStarted(_) => "process.started",
            Event::ProcessExited(_) => "process.exited",
            Event::StepSaved(_) => "step.saved",
            Event::Resume(_) => "resume",
            Event::RunFinished(_) => "run.finished",
            Event::WorkspaceCheckpoint(_) => "workspace.checkpoint",
            Event::WorkspaceRestored(_) => "workspace.restored",
            Event::UserMessage(_) => "user.message",
            Event::ChatWaiting(_) => "chat.waiting",
            Event::ApprovalRequested(_) => "approval.requested",
            Event::ApprovalDecided(_) => "approval.decided",
            Event::SettingsChanged(_) => "settings.changed",
            Event::CompactionRequested(_) => "compaction.requested",
        }
    }
}

/// The store frames an event as its `type`/`data` pair (adjacent tagging).
impl tinyagent_store::Record for Event {
    fn kind(&self) -> &str {
        Event::kind(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_adjacently_tagged_with_kind_first() {
        let ev = Event::ToolStarted(ToolStarted {
            step: 3,
            call_id: "c1".into(),
            name: "bash".into(),
            process: None,
        });
        let s = serde_json::to_string(&ev).unwrap();
        assert_eq!(
            s,
            r#"{"type":"tool.started","data":{"step":3,"call_id":"c1","name":"bash"}}"#
        );
        let back: Event = serde_json::from_str(&s).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn run_status_names_are_the_serde_names() {
        for s in [
            RunStatus::Completed,
            RunStatus::MaxSteps,
            RunStatus::MaxCost,
            RunStatus::FormatErrors,
            RunStatus::Error,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
