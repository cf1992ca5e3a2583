//! Tool calls as they run: [`ToolStarted`], [`ToolResult`] and the fixed texts
//! a result carries when a call did not finish, the hooks around a call
//! ([`HookRun`], [`HookBlocked`]), and background processes
//! ([`ProcessStarted`], [`ProcessExited`]).

use super::{ToolCall, is_false};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolStarted {
    pub step: u64,
    pub call_id: String,
    pub name: String,
    /// The process group of a foreground command: the command is held
    /// before it execs until this record is synced, so that a resume after a
    /// hard kill can find and stop what is left of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<CallProcess>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent flags of the record, each its own JSON member"
)]
pub struct ToolResult {
    pub step: u64,
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
    /// True only for results synthesized on resume.
    pub interrupted: bool,
    /// The call itself was malformed (bad JSON, unknown tool, schema failure).
    #[serde(default, skip_serializing_if = "is_false")]
    pub format_error: bool,
    /// A read-only call re-run on resume (its first run was interrupted).
    #[serde(default, skip_serializing_if = "is_false")]
    pub rerun: bool,
    /// The hooks that ran for this call, in order (empty when none is set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRun>,
    /// The signal that stopped the call (`SIGINT`, `SIGTERM`, `SIGHUP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// Result text for a call whose `tool.started` was durable but no result.
pub const INTERRUPTED_TEXT: &str = "[interrupted: tool did not complete before the agent stopped; it may have partially run — verify state before retrying]";
/// Result text for a call that never started.
pub const NOT_RUN_TEXT: &str =
    "[not run: the agent stopped before this call started; it had no effect]";

impl ToolResult {
    /// A call the person (or `tinyagent approve`) denied: it never ran.
    pub fn denied(step: u64, call: &ToolCall, by: &str, reason: Option<&str>) -> ToolResult {
        let why = reason
            .filter(|r| !r.trim().is_empty())
            .map_or_else(|| "no reason given".to_string(), |r| format!("reason: {r}"));
        ToolResult::new(
            step,
            &call.id,
            &call.name,
            format!("[denied by the person ({by}); {why}] The call was not run."),
            true,
        )
    }

    /// A plain result: not interrupted, not a format error, no hooks.
    pub fn new(
        step: u64,
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> ToolResult {
        ToolResult {
            step,
            call_id: call_id.into(),
            name: name.into(),
            content: content.into(),
            is_error,
            interrupted: false,
            format_error: false,
            rerun: false,
            hooks: Vec::new(),
            signal: None,
        }
    }

    /// The result of a call that ran to its end (`content` is what the tool
    /// and the post hook said).
    pub fn completed(
        step: u64,
        call: &ToolCall,
        content: String,
        is_error: bool,
        format_error: bool,
        hooks: Vec<HookRun>,
    ) -> ToolResult {
        ToolResult {
            format_error,
            hooks,
            ..ToolResult::new(step, &call.id, &call.name, content, is_error)
        }
    }

    /// A call the pre hook blocked: it never ran.
    pub fn blocked(step: u64, call: &ToolCall, reason: &str, hooks: Vec<HookRun>) -> ToolResult {
        ToolResult {
            hooks,
            ..ToolResult::new(
                step,
                &call.id,
                &call.name,
                format!("[blocked by the pre_tool hook: {reason}] The call was not run."),
                true,
            )
        }
    }

    /// Synthesized on resume for a call that started but has no result.
    pub fn interrupted(step: u64, call_id: &str, name: &str) -> ToolResult {
        ToolResult {
            interrupted: true,
            ..ToolResult::new(step, call_id, name, INTERRUPTED_TEXT, true)
        }
    }

    /// Synthesized on resume for a call that never started.
    pub fn not_run(step: u64, call_id: &str, name: &str) -> ToolResult {
        ToolResult {
            interrupted: true,
            ..ToolResult::new(step, call_id, name, NOT_RUN_TEXT, true)
        }
    }
}

/// The result of a call in a reply cut at the output limit: never run.
pub const TRUNCATED_CALL_TEXT: &str = "[not run: the response was cut off at the output limit \
     before this call was complete; it had no effect]";

/// The `source` of the `user.message` that tells the model its reply was
/// cut ([`TRUNCATED_NOTICE`]).
pub const TRUNCATED_SOURCE: &str = "truncated";

/// What the model is told (a `user.message`, source `truncated`) after a
/// reply cut at the output limit.
pub const TRUNCATED_NOTICE: &str = "[Truncated] Your last response was cut off at the output \
     limit, so it is not a final answer and none of its tool calls ran. Continue from where it \
     was cut, in shorter pieces: split long file contents over several calls.";

/// One hook run for a call, as recorded in its `tool.result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRun {
    /// `pre_tool` or `post_tool`.
    pub hook: String,
    /// `allow`, `block` or `failed`.
    pub outcome: String,
    /// The block reason, the failure, or the feedback the hook gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookBlocked {
    pub step: u64,
    pub call_id: String,
    pub hook: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStarted {
    pub id: String,
    pub pid: u32,
    pub command: String,
    #[serde(default)]
    pub step: u64,
    /// Execution environment it runs in (`local`, `sandbox`).
    #[serde(default)]
    pub env: String,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat), to
    /// tell the same process from a reused pid on resume.
    #[serde(default)]
    pub start_time: Option<u64>,
    /// File the process's output goes to.
    #[serde(default)]
    pub output: Option<String>,
    /// The container it runs in (container environment; its pid and start
    /// time are as seen inside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The engine of that container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

impl ToolStarted {
    /// The intent to run `call` (no process group yet).
    pub fn new(step: u64, call: &ToolCall) -> ToolStarted {
        ToolStarted {
            step,
            call_id: call.id.clone(),
            name: call.name.clone(),
            process: None,
        }
    }
}

/// A foreground command's process group, as `tool.started` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallProcess {
    /// The group leader's pid (the group id is the same).
    pub pid: u32,
    pub pgid: u32,
    /// The leader's start time in clock ticks since boot (field 22 of
    /// /proc/PID/stat): a recycled pid has another.
    pub start_time: Option<u64>,
    /// Execution environment (`local`, `sandbox`).
    #[serde(default)]
    pub env: String,
}

/// A process of an interrupted call that resume found still running and stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppedProcess {
    pub call_id: String,
    pub pid: u32,
    pub pgid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessExited {
    pub id: String,
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
}
