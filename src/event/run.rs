//! A run's frame: how it starts ([`RunStarted`] with its [`RunSettings`] and
//! [`Limits`]), where a fork came from, the per-step save point
//! ([`StepSaved`]), [`Resume`], and how it ends ([`RunFinished`],
//! [`RunStatus`]).

use super::{StoppedProcess, Usage, is_false};
use crate::kinds::{ApproveMode, EngineKind, EnvKind, HookFailure, ProviderKind};
use serde::{Deserialize, Serialize};

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
