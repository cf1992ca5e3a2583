//! The record vocabulary: one serde-tagged enum shared by the agent loop, the
//! log writer and reader, the inspector and the `--json` event stream.
//!
//! Each variant serialises (adjacently tagged) as `{"type": "<name>", "data": {...}}`;
//! the log framing in [`tinyagent_store::wal::frame`] wraps that with `seq`, `prev`, `ts`
//! and `crc`. Members beyond the contract's required ones carry `#[serde(default)]`
//! so that older logs keep reading.

use crate::kinds::{ApproveMode, EngineKind, EnvKind, HookFailure, ProviderKind};
use serde::{Deserialize, Serialize};

mod native;
pub use native::{NativeItems, items_at, normalised, send_exact};

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

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call as the model sent it. `arguments` is the raw string, kept
/// byte-for-byte even when it is not valid JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// The id given to the `index`th call of `step` when the server sent
    /// none (or one that names another call too): `call_<step>_<index>`.
    pub fn fallback_id(step: u64, index: usize) -> String {
        format!("call_{step}_{index}")
    }
}

/// A chat message in provider-neutral form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Always written (empty when none), so readers of `model.response` find
    /// the member the contract names.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// For `role: tool`: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `role: tool`: the tool's name (Anthropic and some servers want it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
    /// For `role: assistant`: what the provider produced that it needs
    /// back, as received (see [`Native`]); absent when it sent nothing of
    /// the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeItems>,
}

/// The members of a [`Message::native`] object: `api` names the wire it came
/// from, and only a request to that wire sends it back.
///
/// - `{"api": "anthropic", "content": [...]}`: the Messages API response's
///   content blocks, as received; its `thinking` (with `signature`) and
///   `redacted_thinking` blocks go back, in order, before the turn's
///   `tool_use` blocks.
/// - `{"api": "chat", "reasoning_content": "..."}`: a Chat Completions
///   message's reasoning, sent back on the assistant message.
/// - `{"api": "responses", "output": [...]}`: a Responses API output's
///   items, as received; its `reasoning` items (with `encrypted_content`)
///   go back before the `function_call` items they preceded.
pub struct Native;

impl Native {
    pub const ANTHROPIC: &'static str = "anthropic";
    pub const CHAT: &'static str = "chat";
    pub const RESPONSES: &'static str = "responses";

    /// The native items of `m` when they came from `api`, as a tree (to
    /// read; their text is what goes back, see [`NativeItems`]).
    pub fn of(m: &Message, api: &str) -> Option<serde_json::Value> {
        m.native
            .as_ref()
            .filter(|n| n.is_from(api))
            .map(NativeItems::value)
    }
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message {
            tool_calls,
            ..Self::plain(Role::Assistant, content)
        }
    }
    pub fn tool(call_id: &str, name: &str, content: impl Into<String>, is_error: bool) -> Self {
        Message {
            tool_call_id: Some(call_id.to_string()),
            name: Some(name.to_string()),
            is_error,
            ..Self::plain(Role::Tool, content)
        }
    }
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            is_error: false,
            native: None,
        }
    }
}

/// Token counts of one model call, or a running total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to the provider's prompt
    /// cache (Anthropic's `input_tokens`; OpenAI's `prompt_tokens` less its
    /// `cached_tokens`).
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache (OpenAI
    /// `prompt_tokens_details.cached_tokens`, Anthropic
    /// `cache_read_input_tokens`), when reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Input tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`), when reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Output tokens spent reasoning (part of `output_tokens`), when
    /// reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds `other`; a total that would overflow stays at the maximum (a
    /// server may report any count).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// Every input token of the request, cached or not.
    pub fn all_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cached_input_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Only input and output counts (the rest zero).
    pub fn of(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }
}

/// Run limits. `None` means unlimited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default)]
    pub max_steps: Option<u64>,
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    #[serde(default = "default_max_format_errors")]
    pub max_format_errors: u32,
}

fn default_max_format_errors() -> u32 {
    3
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: None,
            max_cost_usd: None,
            max_format_errors: default_max_format_errors(),
        }
    }
}

/// Everything a resumed run needs to carry on the way it started, beyond the
/// contract's required `run.started` members. Never holds a secret: only the
/// *name* of the environment variable that holds the API key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "recorded settings, each its own flag and config key"
)]
pub struct RunSettings {
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub price_in: Option<f64>,
    #[serde(default)]
    pub price_out: Option<f64>,
    /// USD per million input tokens read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cached_in: Option<f64>,
    /// USD per million input tokens written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cache_write: Option<f64>,
    /// Script file for the `script` provider (absolute path).
    #[serde(default)]
    pub script: Option<String>,
    /// Workspace the tools act in (absolute path).
    #[serde(default)]
    pub cwd: String,
    #[serde(default)]
    pub plan_file: Option<String>,
    /// Where each request carries the plan (`append`, `head`); absent in
    /// runs without the plan and in logs written before the choice existed
    /// (which used `head`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_pin: Option<crate::kinds::PlanPin>,
    #[serde(default)]
    pub compact_at: Option<u64>,
    #[serde(default)]
    pub keep_recent: Option<usize>,
    #[serde(default)]
    pub snapshot_every: Option<u64>,
    #[serde(default)]
    pub hooks_pre_tool: Option<String>,
    #[serde(default)]
    pub hooks_post_tool: Option<String>,
    /// How long a hook may run, in milliseconds.
    #[serde(default)]
    pub hooks_timeout_ms: Option<u64>,
    /// `block` (default) or `allow`: what a failing hook means.
    #[serde(default)]
    pub hooks_on_failure: Option<HookFailure>,
    /// Network inside the sandbox environment.
    #[serde(default)]
    pub network: bool,
    /// Execution environment kind: `local`, `sandbox` or `container`.
    #[serde(default)]
    pub env: Option<EnvKind>,
    /// The container environment's engine (`podman`, `docker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineKind>,
    /// The container environment's image (`host`: the host's root file system).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The container environment's container (`tinyagent-<run_id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default)]
    pub stream: bool,
    /// Most tokens one reply may have (absent: the server's limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// `--reasoning-effort` (absent: the server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<crate::kinds::ReasoningEffort>,
    /// `--thinking-budget` (absent: Anthropic extended thinking off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u32>,
    /// The model's context window, when known (`--context-window`, config,
    /// the built-in table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Retries of a failed model request (429, 5xx, timeouts).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// First retry delay in milliseconds (doubles each retry, with jitter).
    #[serde(default)]
    pub retry_base_ms: Option<u64>,
    /// Per-request timeout in seconds.
    #[serde(default)]
    pub request_timeout_s: Option<u64>,
    /// The `AGENTS.md` files whose text is in the system prompt, from the
    /// git root down to the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<String>,
    /// An interactive chat (`tinyagent chat`): the run waits for the
    /// person's next message after each turn instead of finishing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub chat: bool,
    /// `mutating`: calls that can change files or run commands are asked
    /// about first (section 12). Absent: never asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<ApproveMode>,
    /// `[checkpoints] watch = true` (left out when off).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checkpoint_watch: bool,
}

impl RunSettings {
    /// Where the run's requests carry the plan: as recorded, else `head`
    /// (the layout of the logs that predate the setting).
    pub fn plan_pin(&self) -> crate::kinds::PlanPin {
        self.plan_pin.unwrap_or(crate::kinds::PlanPin::Head)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub schema_version: u32,
    pub run_id: String,
    pub task: String,
    pub model: String,
    pub provider: ProviderKind,
    pub base_url: Option<String>,
    pub plan_enabled: bool,
    pub read_only: bool,
    pub tool_signature: String,
    pub tools: Vec<String>,
    /// The MCP servers' tools among `tools`, as their servers listed them
    /// (absent in logs of runs without MCP servers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_tools: Vec<McpToolRecord>,
    pub limits: Limits,
    /// The run this one was forked from (`tinyagent fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// The system prompt the run was started with.
    #[serde(default)]
    pub system_prompt: String,
    #[serde(default)]
    pub settings: RunSettings,
}

/// Where a forked run's history came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    pub run_id: String,
    /// The last record of the original that the fork holds.
    pub seq: u64,
    pub step: u64,
    /// The original log's path when the fork was made.
    #[serde(default)]
    pub wal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub step: u64,
    pub message: Message,
    pub usage: Usage,
    pub cost_usd: f64,
    /// Ids of the calls in `message.tool_calls`, in order.
    pub pending: Vec<String>,
    /// The context size the compaction decision saw for this request, in
    /// tokens (see docs/design.md, "Compaction"); 0 in logs written before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_tokens: u64,
    /// The length in bytes of the request body this answered (0 in logs
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub request_bytes: u64,
    /// Why the model stopped (`None` in logs written before it was
    /// recorded, read as `end_turn` or `tool_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// The server's own word for it (`stop`, `length`, `tool_use`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason_raw: Option<String>,
}

/// Why a model response ended, in one vocabulary for every provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its turn (a final answer when it made no call).
    #[default]
    EndTurn,
    /// The model stopped to have its tool calls run.
    ToolCalls,
    /// Cut at the output limit: the text and any call in it are incomplete.
    MaxTokens,
    /// The model declined to answer.
    Refusal,
    /// The server's content filter cut or withheld the answer.
    ContentFilter,
    /// The server paused a long turn; asking again continues it.
    Pause,
}

impl StopReason {
    /// The name in the log and in `--json` (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolCalls => "tool_calls",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Refusal => "refusal",
            StopReason::ContentFilter => "content_filter",
            StopReason::Pause => "pause",
        }
    }
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Done,
    Blocked,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub id: String,
    pub text: String,
    pub status: PlanStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanUpdated {
    pub step: u64,
    pub version: u64,
    pub items: Vec<PlanItem>,
    #[serde(default)]
    pub note: Option<String>,
    /// Human-readable diff against the previous version, one change a line.
    pub diff: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub step: u64,
    pub summary: String,
    /// The messages that replace the history after the system prompt: the
    /// summary message first, then the kept recent messages.
    pub view: Vec<Message>,
    /// Plan version current when the summary was made (0 when no plan).
    pub plan_version: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    /// How many view messages (after the system prompt) this replaced.
    #[serde(default)]
    pub replaced: u64,
    /// The summarizer answered but gave no summary: the record only carries
    /// that call's usage and cost (so no cost is lost), and `view` is the
    /// unchanged view.
    #[serde(default, skip_serializing_if = "is_false")]
    pub failed: bool,
    /// The context size, in tokens, that went over the threshold and made
    /// this compaction (0 in logs written before it was recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_tokens: u64,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSaved {
    pub step: u64,
    pub usage_total: Usage,
    pub cost_usd_total: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// Calls that had no result, in order (interrupted or never started).
    pub interrupted: Vec<String>,
    /// Background process ids that were running and are not tracked any more.
    pub lost_processes: Vec<String>,
    /// Background process ids found still running in the run's container
    /// and tracked again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reattached_processes: Vec<String>,
    /// The text the model is shown (a user message starting with `[Resumed]`).
    pub notice: String,
    /// New limits when the resume changed them.
    #[serde(default)]
    pub limits: Option<Limits>,
    /// A new user message given with `resume --message`, shown after the notice.
    #[serde(default)]
    pub message: Option<String>,
    /// Processes of interrupted calls that were still running and were stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopped_processes: Vec<StoppedProcess>,
    /// The compaction threshold `resume --compact-at` set for the rest of
    /// the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_at: Option<u64>,
    /// The variable this resume read the API key from (its name, never
    /// its value). Every variable a run ever named so is kept from every
    /// child of a later resume too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    MaxSteps,
    MaxCost,
    FormatErrors,
    /// Stopped by SIGINT, SIGTERM or SIGHUP (`reason` names it).
    Interrupted,
    Error,
    /// The model's answers were cut at the output limit too often in a row.
    Truncated,
    /// The model refused (or its server's filter withheld) the answer.
    Refused,
}

impl RunStatus {
    /// The name in the log, in `--json` and in human output (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::MaxSteps => "max_steps",
            RunStatus::MaxCost => "max_cost",
            RunStatus::FormatErrors => "format_errors",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Error => "error",
            RunStatus::Truncated => "truncated",
            RunStatus::Refused => "refused",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFinished {
    pub status: RunStatus,
    #[serde(default)]
    pub reason: Option<String>,
}

/// The workspace's state after a call that can change files (or at the
/// start of a run, with no call): the tree id in the run's checkpoint store
/// (`<wal>.d/checkpoints.git`), durable before this record is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceCheckpoint {
    pub step: u64,
    /// The call after which it was taken; `None` for the starting state
    /// and for changes found on resume that no call of the log made.
    pub call_id: Option<String>,
    /// The root tree id of the stored files.
    pub tree: String,
    /// Paths that differ from the previous checkpoint (the first
    /// the checkpoint store's limit).
    pub changed: Vec<String>,
    /// How many paths differ (all of them, also past the listed ones).
    #[serde(default)]
    pub changed_count: u64,
    /// Files stored in the tree.
    #[serde(default)]
    pub files: u64,
    /// Files over the size cap: named with their size and hash, not stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oversized: Vec<Oversized>,
    /// With `[checkpoints] watch = true`: `watch` when only the paths the
    /// watch reported were looked at, else `full: <why>` (the workspace
    /// was walked). Left out when the watch is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk: Option<String>,
}

/// A restore of the workspace (`fork --restore`), written before the
/// workspace is changed: what it puts back and how to undo it. Only paths
/// the run changed after the restore point that still hold what its last
/// checkpoint recorded are changed (all of them with `force`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRestored {
    /// The step restored to.
    pub step: u64,
    /// The restore point's tree (in this log's checkpoint store).
    pub tree: String,
    /// The run's last checkpoint's tree.
    pub last: String,
    /// The workspace as it was before the restore: `restore --undo` puts
    /// the changed paths back to it.
    pub before: String,
    /// The workspace restored.
    pub workspace: String,
    #[serde(default)]
    pub force: bool,
    /// The paths the restore changes.
    #[serde(default)]
    pub paths: Vec<String>,
    /// The paths left as they are (changed since the run's last checkpoint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// Set on the record `restore --undo` appends once it has put the
    /// workspace back: the restore's own fields repeated, `force`, `paths`
    /// and `conflicts` the undo's. Absent (false) on a restore, and in logs
    /// written before undo left a record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undo: bool,
}

/// A message the person added to the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The last step before it.
    pub step: u64,
    pub content: String,
    /// Where it was typed: `chat` (the chat prompt) or `resume`
    /// (`resume --message`).
    #[serde(default = "chat_source")]
    pub source: String,
}

fn chat_source() -> String {
    "chat".to_string()
}

/// A chat turn ended: the run waits at the prompt for the person's next
/// message. Durable before the prompt is shown, so a chat killed there
/// resumes there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatWaiting {
    pub step: u64,
    /// The signal that cut the turn short (`SIGINT`: Ctrl-C during a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
}

/// A chat's `/model` or `/approvals`: the run's settings from here on.
/// Durable before the next model request; folded into the state, so a
/// resumed run keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsChanged {
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<crate::kinds::ApproveMode>,
    /// Who changed them (`chat`).
    #[serde(default)]
    pub by: String,
}

impl SettingsChanged {
    /// What changed, for a person: `model gpt-x · approvals never`.
    pub fn shown(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("model {m}"));
        }
        if let Some(a) = self.approvals {
            let mode = match a {
                crate::kinds::ApproveMode::Never => "never",
                crate::kinds::ApproveMode::Mutating => "mutating",
            };
            parts.push(format!("approvals {mode}"));
        }
        parts.join(" · ")
    }
}

/// A chat's `/compact`: the history is compacted before the next request,
/// whatever its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionRequested {
    pub step: u64,
    #[serde(default)]
    pub by: String,
}

/// Text the model is shown after a turn the person cut short.
pub fn chat_interrupted_text(signal: &str) -> String {
    format!(
        "[The person interrupted this turn ({signal}); anything still running was stopped. \
         Wait for their next message.]"
    )
}

/// A call that needs the person's yes before it starts: durable before the
/// question is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    pub step: u64,
    pub call_id: String,
    /// The call's tool.
    #[serde(default)]
    pub tool: String,
    /// What the call would do, shortened (the command, the path).
    #[serde(default)]
    pub preview: String,
}

/// The answer to an approval question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }

    /// The mark and the word human output shows for it: `✓ allowed`.
    pub fn shown(self) -> &'static str {
        match self {
            Decision::Allow => "✓ allowed",
            Decision::Deny => "✗ denied",
        }
    }
}

/// The decision about a call: durable before the call starts (or, denied,
/// before its error result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    pub step: u64,
    pub call_id: String,
    #[serde(default)]
    pub tool: String,
    pub decision: Decision,
    /// Who decided: `tty` (the person at the terminal), `approve` (`tinyagent
    /// approve` from another process), `rule` (an allow rule of the config)
    /// or `always` (an earlier "always allow this tool" answer).
    pub by: String,
    #[serde(default)]
    pub reason: Option<String>,
    /// The person answered "always": every later call of `tool` in this run
    /// is allowed without a question (for bash: every command that starts
    /// with `scope`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub always: bool,
    /// What an "always" for bash covers: a command prefix (`cargo test`).
    /// Absent in older logs, where "always" covered all of bash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
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

/// What `run.started` records of one MCP tool (see `crate::mcp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolRecord {
    /// `<server>__<tool>`.
    pub name: String,
    /// `read-only` or `mutating`.
    pub effect: String,
    /// First 16 hex digits of a SHA-256 of the description and the input
    /// schema.
    pub schema: String,
}

/// A file over the checkpoint store's size cap: recorded by size and hash,
/// not stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Oversized {
    pub path: String,
    pub size: u64,
    pub sha256: String,
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
