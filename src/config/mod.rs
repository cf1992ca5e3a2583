//! One validated value for how a run runs: [`RunConfig`].
//!
//! A run's settings come from three sources: the command line, the TOML
//! config file ([`file::Config`]) and, on resume, what `run.started`
//! recorded (from this tinyagent, an older one, or an imported trajectory).
//! Each source is turned into a `RunConfig` and every one of them goes
//! through [`RunConfig::validate`], so a value that would make the loop
//! misbehave (a zero `keep_recent`, a NaN price) is refused wherever it
//! comes from. The agent holds the `RunConfig`; nothing re-reads the log's
//! settings while the run goes on.
//!
//! Beside it: `approvals` (who is asked about which call, the `allow`
//! rules), `hooks` (the hook commands and their check), [`file`] (the TOML
//! file) and [`prices`].

mod approvals;
pub(crate) mod file;
mod hooks;
pub mod prices;

pub use approvals::{AllowRule, ApprovalSettings};
pub use hooks::HookSettings;

pub use file::{Config, ConfigError, McpServerSection};
// The small enums every layer names live below the record vocabulary; they
// are named here too, where the settings they are part of are.
pub use crate::kinds::{ApproveMode, EngineKind, EnvKind, HookFailure, ProviderKind};

use crate::event::{Limits, RunSettings, RunStarted, Usage};
use std::path::PathBuf;
use std::time::Duration;

/// The names of an enum's values, as the command line and config spell them.
fn names<E: clap::ValueEnum>() -> String {
    let all: Vec<String> = E::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
        .collect();
    match all.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Parses an enum value the way the command line does; the error names `key`.
pub fn parse_enum<E: clap::ValueEnum>(key: &str, value: &str) -> Result<E, ConfigError> {
    E::from_str(value.trim(), true).map_err(|_| ConfigError::Value {
        key: key.to_string(),
        message: format!("unknown value {value:?}: use {}", names::<E>()),
    })
}

/// Default records between background snapshots (the store's default).
pub use tinyagent_store::DEFAULT_SNAPSHOT_EVERY;
/// Default compaction threshold (estimated tokens of what is sent) of a
/// log that recorded none: three quarters of a 128k window, as it was.
pub const DEFAULT_COMPACT_AT: u64 = 96_000;
/// The context window assumed for a model nobody gave one for.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The compaction threshold for a context window: 80% of it.
pub fn compact_at_for(window: u64) -> u64 {
    window.saturating_mul(4) / 5
}
/// Default number of recent messages a compaction keeps verbatim.
pub const DEFAULT_KEEP_RECENT: usize = 6;
/// Default time a hook may take.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest price per million tokens accepted (USD).
pub const MAX_PRICE: f64 = 1e6;

/// The model backend of a run.
/// What usage cost, in USD, for each kind of token.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CostByKind {
    /// Input neither read from nor written to the prompt cache.
    pub input_usd: f64,
    /// Input read from the prompt cache.
    pub cached_input_usd: f64,
    /// Input written to the prompt cache.
    pub cache_write_usd: f64,
    pub output_usd: f64,
}

impl CostByKind {
    pub fn total(&self) -> f64 {
        self.input_usd + self.cached_input_usd + self.cache_write_usd + self.output_usd
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    pub provider: ProviderKind,
    pub name: String,
    /// `None`: the provider's public endpoint.
    pub base_url: Option<String>,
    /// The variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    /// USD per million input / output tokens.
    pub price_in: f64,
    pub price_out: f64,
    /// USD per million input tokens read from the prompt cache (`None`:
    /// `price_in`).
    pub price_cached_in: Option<f64>,
    /// USD per million input tokens written to the prompt cache (`None`:
    /// `price_in`).
    pub price_cache_write: Option<f64>,
    /// Whether the prices are known (given, or in the built-in table): an
    /// unknown cost is shown as `$?` and `--max-cost` is refused.
    pub price_known: bool,
    /// Script file for the script provider (absolute).
    pub script: Option<PathBuf>,
    pub stream: bool,
    /// Most tokens one reply may have (`None`: the server's limit).
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<crate::kinds::ReasoningEffort>,
    /// Anthropic extended thinking's budget (`None`: thinking off).
    pub thinking_budget: Option<u32>,
    /// The model's context window in tokens (`None`: not known; see
    /// [`RunConfig::context_window`]).
    pub context_window: Option<u64>,
    pub max_retries: u32,
    pub retry_base: Duration,
    pub request_timeout: Duration,
}

/// How one run runs: everything but its identity (run id, task) and the
/// tool set derived from it.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent settings, each its own flag and config key"
)]
pub struct RunConfig {
    pub model: ModelSettings,
    /// The workspace the tools act in (absolute).
    pub workspace: PathBuf,
    pub plan_enabled: bool,
    /// Where each request carries the plan (`[plan] pin`).
    pub plan_pin: crate::kinds::PlanPin,
    /// Read-only Markdown mirror of the plan (absolute).
    pub plan_file: Option<PathBuf>,
    pub read_only: bool,
    pub limits: Limits,
    /// Compact when the estimate of what is sent exceeds this many tokens.
    pub compact_at: u64,
    /// Recent messages a compaction keeps verbatim (at least 1).
    pub keep_recent: usize,
    /// Records between background snapshots (at least 1).
    pub snapshot_every: u64,
    pub hooks: HookSettings,
    pub env: EnvKind,
    /// Network inside the sandbox or the container.
    pub network: bool,
    /// Host unix sockets the sandbox shows its commands (`env.sockets`,
    /// local config only; a log never names one).
    pub sockets: Vec<PathBuf>,
    /// The container environment's engine and image (`host`: the host's
    /// root file system under a throw-away overlay).
    pub container: ContainerSettings,
    /// Which calls are asked about first (`--approve`, `[approvals]`).
    pub approvals: ApprovalSettings,
    /// An interactive chat (`tinyagent chat`).
    pub chat: bool,
    /// `[checkpoints] watch`: checkpoints look only at what inotify
    /// reported (off: every checkpoint walks the workspace).
    pub checkpoint_watch: bool,
}

/// `env.engine` and `env.image`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerSettings {
    /// `None`: the first of podman, docker found on PATH.
    pub engine: Option<EngineKind>,
    pub image: String,
}

/// The image that means the host's own root file system.
pub const HOST_IMAGE: &str = "host";

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Value {
        key: key.to_string(),
        message: message.into(),
    }
}

impl ModelSettings {
    /// `usage` at these prices, kind by kind (cached input at the cached
    /// price, else the input price).
    pub fn cost_by_kind(&self, usage: &Usage) -> CostByKind {
        let per = |n: u64, price: f64| n as f64 * price / 1_000_000.0;
        CostByKind {
            input_usd: per(usage.input_tokens, self.price_in),
            cached_input_usd: per(
                usage.cached_input_tokens,
                self.price_cached_in.unwrap_or(self.price_in),
            ),
            cache_write_usd: per(
                usage.cache_write_tokens,
                self.price_cache_write.unwrap_or(self.price_in),
            ),
            output_usd: per(usage.output_tokens, self.price_out),
        }
    }
}

impl RunConfig {
    /// Checks every value, whatever its source. The error names the setting
    /// the way the config file spells it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, v) in [
            ("model.price_in", self.model.price_in),
            ("model.price_out", self.model.price_out),
            (
                "model.price_cached_in",
                self.model.price_cached_in.unwrap_or(0.0),
            ),
            (
                "model.price_cache_write",
                self.model.price_cache_write.unwrap_or(0.0),
            ),
        ] {
            if !v.is_finite() || !(0.0..=MAX_PRICE).contains(&v) {
                return Err(bad(key, format!("must be a number from 0 to {MAX_PRICE}")));
            }
        }
        if self
            .limits
            .max_cost_usd
            .is_some_and(|c| !c.is_finite() || c < 0.0)
        {
            return Err(bad("limits.max_cost_usd", "must be a number >= 0"));
        }
        if self.limits.max_format_errors == 0 {
            return Err(bad("limits.max_format_errors", "must be at least 1"));
        }
        if self.model.provider == ProviderKind::Anthropic
            && let Some(
                e @ (crate::kinds::ReasoningEffort::None | crate::kinds::ReasoningEffort::Minimal),
            ) = self.model.reasoning_effort
        {
            return Err(bad(
                "model.reasoning_effort",
                format!(
                    "{} is not an Anthropic effort: its Messages API takes low, medium or high \
                     (output_config.effort); leave it unset for the model's default",
                    e.as_str()
                ),
            ));
        }
        if let Some(budget) = self.model.thinking_budget {
            if budget < 1024 {
                return Err(bad("model.thinking_budget", "must be at least 1024 tokens"));
            }
            if self
                .model
                .max_output_tokens
                .is_some_and(|max| max <= budget)
            {
                return Err(bad(
                    "model.thinking_budget",
                    "must be less than model.max_output_tokens (the reply's limit counts the \
                     thinking)",
                ));
            }
        }
        if self.model.request_timeout.is_zero() {
            return Err(bad("model.request_timeout_s", "must be at least 1"));
        }
        if self.snapshot_every == 0 {
            return Err(bad("wal.snapshot_every", "must be at least 1"));
        }
        if self.keep_recent == 0 {
            return Err(bad("compaction.keep_recent", "must be at least 1"));
        }
        if self.env == EnvKind::Container
            && (self.container.image.trim().is_empty()
                || self.container.image.starts_with('-')
                || self.container.image.chars().any(char::is_whitespace))
        {
            return Err(bad("env.image", "must name an image (or `host`)"));
        }
        if self.model.name.trim().is_empty() {
            return Err(bad("model.name", "must not be empty"));
        }
        if self.plan_file.is_some() && !self.plan_enabled {
            return Err(bad(
                "plan.file",
                "--plan-file requires --plan (or plan.enabled = true in the config)",
            ));
        }
        if !self.workspace.is_absolute() {
            return Err(bad("cwd", "the workspace must be an absolute path"));
        }
        Ok(())
    }

    /// The config a log's `run.started` records, with today's defaults for
    /// what it left unset; validated like any other source.
    pub fn from_started(
        run: &RunStarted,
        fallback_cwd: &std::path::Path,
    ) -> Result<RunConfig, ConfigError> {
        let s = &run.settings;
        let workspace = if s.cwd.is_empty() {
            // A run imported from a trajectory file may not name its
            // workspace: it then works in the current directory.
            fallback_cwd.to_path_buf()
        } else {
            PathBuf::from(&s.cwd)
        };
        let config = RunConfig {
            model: ModelSettings {
                provider: run.provider,
                name: run.model.clone(),
                base_url: run.base_url.clone(),
                api_key_env: s.api_key_env.clone(),
                price_in: s.price_in.unwrap_or(0.0),
                price_out: s.price_out.unwrap_or(0.0),
                price_cached_in: s.price_cached_in,
                price_cache_write: s.price_cache_write,
                // A log of before unknown prices recorded 0 for them.
                price_known: s.price_in.is_some() || s.price_out.is_some(),
                script: s.script.as_ref().map(PathBuf::from),
                stream: s.stream,
                max_output_tokens: s.max_output_tokens,
                reasoning_effort: s.reasoning_effort,
                thinking_budget: s.thinking_budget,
                context_window: s.context_window,
                max_retries: s.max_retries.unwrap_or(5),
                retry_base: Duration::from_millis(s.retry_base_ms.unwrap_or(500)),
                request_timeout: Duration::from_secs(s.request_timeout_s.unwrap_or(300)),
            },
            workspace,
            plan_enabled: run.plan_enabled,
            plan_pin: s.plan_pin(),
            plan_file: s.plan_file.as_ref().map(PathBuf::from),
            read_only: run.read_only,
            limits: run.limits.clone(),
            compact_at: s.compact_at.unwrap_or(DEFAULT_COMPACT_AT),
            keep_recent: s.keep_recent.unwrap_or(DEFAULT_KEEP_RECENT),
            snapshot_every: s.snapshot_every.unwrap_or(DEFAULT_SNAPSHOT_EVERY),
            hooks: HookSettings {
                pre_tool: s.hooks_pre_tool.clone(),
                post_tool: s.hooks_post_tool.clone(),
                timeout: s
                    .hooks_timeout_ms
                    .map_or(DEFAULT_HOOK_TIMEOUT, Duration::from_millis),
                on_failure: s.hooks_on_failure.unwrap_or_default(),
            },
            env: s.env.unwrap_or_default(),
            network: s.network,
            sockets: Vec::new(),
            container: ContainerSettings {
                engine: s.engine,
                image: s.image.clone().unwrap_or_else(|| HOST_IMAGE.to_string()),
            },
            // The rules come from the local config only (a log's word
            // never widens what runs unasked); resume sets them.
            approvals: ApprovalSettings {
                mode: s.approve.unwrap_or_default(),
                allow: Vec::new(),
            },
            chat: s.chat,
            checkpoint_watch: s.checkpoint_watch,
        };
        config.validate()?;
        Ok(config)
    }

    /// What `run.started` records of this config (never a secret: only the
    /// name of the key's variable).
    /// Why a cost limit is refused: it could never trigger, no price being
    /// known.
    pub fn cost_refusal(&self) -> Option<String> {
        let m = &self.model;
        (self.limits.max_cost_usd.is_some() && !m.price_known).then(|| {
            format!(
                "--max-cost needs a price, and none is known for model {:?}: give --price-in \
                 and --price-out (USD per million tokens; --price-cached-in and \
                 --price-cache-write for cached input)",
                m.name
            )
        })
    }

    /// The cost of `usage` at this run's prices, per kind of token.
    pub fn cost_of(&self, usage: &Usage) -> f64 {
        self.model.cost_by_kind(usage).total()
    }

    /// The model's context window: the one set or known, else
    /// [`DEFAULT_CONTEXT_WINDOW`].
    pub fn context_window(&self) -> u64 {
        self.model.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW)
    }

    /// `$0.0123`, or `$?` when the price is unknown.
    pub fn cost_text(&self, usd: f64) -> String {
        if self.model.price_known {
            format!("${usd:.4}")
        } else {
            "$?".to_string()
        }
    }

    pub fn settings(&self) -> RunSettings {
        let m = &self.model;
        RunSettings {
            api_key_env: m.api_key_env.clone(),
            price_in: m.price_known.then_some(m.price_in),
            price_out: m.price_known.then_some(m.price_out),
            price_cached_in: m.price_cached_in,
            price_cache_write: m.price_cache_write,
            script: m.script.as_ref().map(|p| p.display().to_string()),
            cwd: self.workspace.display().to_string(),
            plan_file: self.plan_file.as_ref().map(|p| p.display().to_string()),
            plan_pin: self.plan_enabled.then_some(self.plan_pin),
            compact_at: Some(self.compact_at),
            keep_recent: Some(self.keep_recent),
            snapshot_every: Some(self.snapshot_every),
            hooks_pre_tool: self.hooks.pre_tool.clone(),
            hooks_post_tool: self.hooks.post_tool.clone(),
            hooks_timeout_ms: Some(
                u64::try_from(self.hooks.timeout.as_millis()).unwrap_or(u64::MAX),
            ),
            hooks_on_failure: Some(self.hooks.on_failure),
            network: self.network,
            env: Some(self.env),
            engine: (self.env == EnvKind::Container)
                .then_some(self.container.engine)
                .flatten(),
            image: (self.env == EnvKind::Container).then(|| self.container.image.clone()),
            container: None,
            stream: m.stream,
            max_output_tokens: m.max_output_tokens,
            reasoning_effort: m.reasoning_effort,
            thinking_budget: m.thinking_budget,
            context_window: m.context_window,
            max_retries: Some(m.max_retries),
            retry_base_ms: Some(u64::try_from(m.retry_base.as_millis()).unwrap_or(u64::MAX)),
            request_timeout_s: Some(m.request_timeout.as_secs()),
            instructions: Vec::new(),
            chat: self.chat,
            approve: (self.approvals.mode != ApproveMode::Never).then_some(self.approvals.mode),
            checkpoint_watch: self.checkpoint_watch,
        }
    }
}

/// Whether a variable name named by a log (not by the person) may be taken
/// as the one holding the API key: upper-case letters, digits and `_`,
/// ending in `KEY` or `TOKEN`. A log from elsewhere could otherwise name
/// `PATH` or `HOME` and have its value sent, as the key, to the server the
/// log names.
pub fn plausible_key_var(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && (name.ends_with("KEY") || name.ends_with("TOKEN"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started() -> RunStarted {
        match crate::session::testkit::run_started(false) {
            crate::event::Event::RunStarted(r) => r,
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_source_is_validated_the_same_way() {
        let mut run = started();
        run.settings.keep_recent = Some(0);
        let e = RunConfig::from_started(&run, std::path::Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("compaction.keep_recent"), "{e}");
        run.settings.keep_recent = None;
        run.settings.price_in = Some(f64::NAN);
        let e = RunConfig::from_started(&run, std::path::Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("model.price_in"), "{e}");
        run.settings.price_in = Some(2e6);
        assert!(RunConfig::from_started(&run, std::path::Path::new("/")).is_err());
        run.settings.price_in = Some(3.0);
        let c = RunConfig::from_started(&run, std::path::Path::new("/")).unwrap();
        assert_eq!(c.model.price_in, 3.0);
        assert_eq!(
            RunConfig::from_started(&started(), std::path::Path::new("/"))
                .unwrap()
                .keep_recent,
            DEFAULT_KEEP_RECENT
        );
    }
}
