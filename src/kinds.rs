//! The small enums every layer names: which model API, where commands run,
//! which container engine, which calls are asked about, what a failed hook
//! means. They sit below the record vocabulary ([`crate::event`]), which
//! records them, and import nothing of the crate.

use serde::{Deserialize, Serialize};

/// Which kind of model backend to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any OpenAI-compatible Chat Completions server.
    #[default]
    #[value(name = "openai")]
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
    /// The OpenAI Responses API (`store: false`, encrypted reasoning).
    Responses,
    /// Offline scripted turns from a JSON file.
    Script,
}

/// How hard a reasoning model thinks before it answers
/// (`--reasoning-effort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    /// The word the OpenAI APIs take, and the log's.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// Where the current plan goes in each model request (`[plan] pin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanPin {
    /// A `[Current plan]` message is appended after the step whose
    /// `update_plan` changed it, so every request extends the previous one
    /// and its prefix stays in the provider's prompt cache.
    #[default]
    Append,
    /// The plan is re-pinned right after the system prompt (after the
    /// compaction summary) in every request: the earlier layout, which
    /// invalidates the cached prompt after it on every plan change.
    Head,
}

/// Where commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EnvKind {
    /// Directly on the host.
    #[default]
    Local,
    /// Inside a bubblewrap sandbox confined to the workspace.
    Sandbox,
    /// Inside one OCI container per run (podman or docker), which outlives
    /// a crash of the agent.
    Container,
}

/// The OCI engine of the container environment (its command line is the
/// interface).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Podman,
    Docker,
}

impl EngineKind {
    /// The engine's binary and the name used in config and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Podman => "podman",
            EngineKind::Docker => "docker",
        }
    }
}

/// Which calls the person is asked about before they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ApproveMode {
    /// No call is asked about (today's behaviour).
    #[default]
    Never,
    /// Every call that can change files or run commands.
    Mutating,
}

/// What a hook that fails (crash, timeout, garbage) means for a pre hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum HookFailure {
    /// The call is blocked (the default: a broken guard guards).
    #[default]
    Block,
    /// The call runs.
    Allow,
}

impl ProviderKind {
    /// The name used on the command line, in config and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Responses => "responses",
            ProviderKind::Script => "script",
        }
    }

    /// The model a run uses when none is named.
    pub fn default_model(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "gpt-4o-mini",
            ProviderKind::Responses => "o4-mini",
            ProviderKind::Anthropic => "claude-sonnet-4-5",
            ProviderKind::Script => "script",
        }
    }

    /// The variable a base URL is taken from when neither a flag nor the
    /// config names one (`None` for the script provider).
    pub fn base_url_env(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi | ProviderKind::Responses => Some("OPENAI_BASE_URL"),
            ProviderKind::Anthropic => Some("ANTHROPIC_BASE_URL"),
            ProviderKind::Script => None,
        }
    }

    /// The base URL from [`ProviderKind::base_url_env`], if set.
    pub fn base_url_from_env(self) -> Option<String> {
        std::env::var(self.base_url_env()?)
            .ok()
            .filter(|v| !v.trim().is_empty())
    }

    /// The variable the API key is read from when none is named.
    pub fn default_key_env(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::OpenAi | ProviderKind::Responses | ProviderKind::Script => {
                "OPENAI_API_KEY"
            }
        }
    }
}

impl EnvKind {
    /// The name used in config and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvKind::Local => "local",
            EnvKind::Sandbox => "sandbox",
            EnvKind::Container => "container",
        }
    }
}

impl HookFailure {
    /// The name used in config and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            HookFailure::Block => "block",
            HookFailure::Allow => "allow",
        }
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(ProviderKind, EnvKind, EngineKind, HookFailure);
