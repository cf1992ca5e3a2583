//! The TOML config file (`tinyagent.toml`): the raw sections as written.
//! `launch::new::resolve` merges them under the flags into a
//! [`super::RunConfig`].
//!
//! Every table refuses unknown keys, and every error names the key it is
//! about, so a typo never passes silently.

use super::{EngineKind, EnvKind, HookFailure, ProviderKind, parse_enum};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Why a config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("bad config value for `{key}`: {message}")]
    Value { key: String, message: String },
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub plan: PlanSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub compaction: CompactionSection,
    #[serde(default)]
    pub wal: WalSection,
    #[serde(default)]
    pub hooks: HooksSection,
    #[serde(default)]
    pub env: EnvSection,
    #[serde(default)]
    pub mcp: McpSection,
    #[serde(default)]
    pub replicate: ReplicateSection,
    #[serde(default)]
    pub approvals: ApprovalsSection,
    #[serde(default)]
    pub checkpoints: CheckpointsSection,
}

/// `[replicate]`: shipping the run to S3-compatible storage
/// (docs/replication.md).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicateSection {
    /// `s3://bucket/prefix`.
    pub url: Option<String>,
    /// `sync` (default) or `async`.
    pub mode: Option<String>,
    pub max_lag_ms: Option<u64>,
    pub timeout_s: Option<u64>,
    /// How long a writer's lease lasts unrenewed (default 30).
    pub lease_s: Option<u64>,
}

/// `[approvals]`: which calls the person is asked about first.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSection {
    /// `never` (the default) or `mutating`.
    pub mode: Option<String>,
    /// Calls allowed without a question: a tool name (`edit`), or
    /// `bash:<glob>` matched against the whole command (`bash:git status*`).
    #[serde(default)]
    pub allow: Vec<String>,
}

impl ApprovalsSection {
    /// `approvals.mode`, default never.
    pub fn mode(&self) -> Result<super::ApproveMode, ConfigError> {
        self.mode
            .as_deref()
            .map_or(Ok(super::ApproveMode::default()), |m| {
                parse_enum("approvals.mode", m)
            })
    }

    /// `approvals.allow`, each rule checked.
    pub fn rules(&self) -> Result<Vec<super::AllowRule>, ConfigError> {
        self.allow
            .iter()
            .map(|r| {
                super::AllowRule::parse(r).map_err(|message| ConfigError::Value {
                    key: "approvals.allow".into(),
                    message,
                })
            })
            .collect()
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    pub provider: Option<String>,
    pub name: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub price_in: Option<f64>,
    pub price_out: Option<f64>,
    pub price_cached_in: Option<f64>,
    pub price_cache_write: Option<f64>,
    pub stream: Option<bool>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
    pub thinking_budget: Option<u32>,
    pub context_window: Option<u64>,
    pub script: Option<PathBuf>,
    pub max_retries: Option<u32>,
    pub retry_base_ms: Option<u64>,
    pub request_timeout_s: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSection {
    pub enabled: Option<bool>,
    pub file: Option<PathBuf>,
    /// `append` (default) or `head`: where requests carry the plan.
    pub pin: Option<crate::kinds::PlanPin>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(
    clippy::struct_field_names,
    reason = "the fields are the [limits] keys of tinyagent.toml"
)]
pub struct LimitsSection {
    pub max_steps: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub max_format_errors: Option<u32>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionSection {
    pub threshold_tokens: Option<u64>,
    pub keep_recent: Option<usize>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsSection {
    /// Watch the workspace (inotify) instead of walking it at every
    /// checkpoint (default off; see docs/design.md).
    pub watch: Option<bool>,
    /// The git binary the store runs (default `git` from `PATH`;
    /// `$TINYAGENT_GIT` overrides it).
    pub git: Option<PathBuf>,
    /// A file larger than this many bytes is recorded by size and hash, not
    /// stored (default 32 MiB; `$TINYAGENT_CHECKPOINT_MAX_FILE_BYTES`
    /// overrides it).
    pub max_file_bytes: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalSection {
    pub snapshot_every: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksSection {
    pub pre_tool: Option<String>,
    pub post_tool: Option<String>,
    pub timeout_ms: Option<u64>,
    /// What a hook that fails (crash, timeout, garbage) means: `block` or `allow`.
    pub on_failure: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    pub kind: Option<String>,
    pub network: Option<bool>,
    /// `podman` or `docker` (container environment).
    pub engine: Option<String>,
    /// The container's image; `host` (the default) is the host's root file
    /// system under a throw-away overlay.
    pub image: Option<String>,
    /// Host unix sockets the sandbox's commands may connect to (every other
    /// one is out of their reach). From the local config only.
    #[serde(default)]
    pub sockets: Vec<PathBuf>,
}

/// The person's own config for every project:
/// `$XDG_CONFIG_HOME/tinyagent/config.toml`, else
/// `~/.config/tinyagent/config.toml`.
pub fn global_path() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CONFIG_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".config")))
        .map(|d| d.join("tinyagent").join("config.toml"))
}

/// Reads one file as a TOML table, checked on its own as a config (so an
/// error names the file it is in). `None` when it is optional and missing.
fn read_table(path: &Path, required: bool) -> Result<Option<toml::Table>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let parse_error = |message| ConfigError::Parse {
        path: path.to_path_buf(),
        message,
    };
    Config::parse(&text).map_err(parse_error)?.check()?;
    toml::from_str::<toml::Table>(&text)
        .map(Some)
        .map_err(|e| parse_error(e.to_string()))
}

/// A TOML error as a person reads it: one line that says what is wrong,
/// where, and the line of the file it is on; then the caret diagram, on
/// lines of its own.
fn one_line_then_diagram(message: &str) -> String {
    let lines: Vec<&str> = message.trim_end().lines().collect();
    let is_diagram = |l: &&str| {
        l.contains('|')
            && l.trim_start()
                .starts_with(|c: char| c == '|' || c.is_ascii_digit())
    };
    let diagram: Vec<&str> = lines.iter().skip(1).copied().filter(is_diagram).collect();
    let reason: Vec<&str> = lines
        .iter()
        .skip(1)
        .copied()
        .filter(|l| !is_diagram(l) && !l.trim().is_empty())
        .collect();
    let at = lines
        .first()
        .map(|l| l.trim_start_matches("TOML parse error ").to_string())
        .unwrap_or_default();
    let source = diagram
        .iter()
        .find_map(|l| {
            let (num, rest) = l.split_once('|')?;
            (!num.trim().is_empty()).then(|| rest.trim().to_string())
        })
        .map(|s| format!(": `{s}`"))
        .unwrap_or_default();
    let mut out = if reason.is_empty() {
        lines.first().map(|l| (*l).to_string()).unwrap_or_default()
    } else {
        format!("{} ({at}{source})", reason.join(" "))
    };
    for l in diagram {
        out.push('\n');
        out.push_str(l);
    }
    out
}

/// `over`'s keys over `base`'s, table by table.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// `[mcp]`: the Model Context Protocol servers whose tools a run offers
/// (see [`crate::mcp`]).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// `[mcp.servers.<name>]`, by name.
    #[serde(default)]
    pub servers: std::collections::BTreeMap<String, McpServerSection>,
}

/// One `[mcp.servers.<name>]` table: a server started over stdio.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerSection {
    /// The program (a path, or a name looked up on PATH).
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the server's environment (trusted local config).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// `false` leaves the server out (default `true`).
    pub enabled: Option<bool>,
    /// How long the server may take to start and list its tools.
    pub startup_timeout_ms: Option<u64>,
    /// How long one call may wait for the server's answer, in seconds
    /// (default 120); past it the call is an error result and the server
    /// is stopped.
    pub timeout_s: Option<u64>,
}

impl McpSection {
    /// Every server's name, command, environment and timeout is well formed.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (name, s) in &self.servers {
            let key = |k: &str| format!("mcp.servers.{name}.{k}");
            let value = |k: &str, message: &str| ConfigError::Value {
                key: key(k),
                message: message.to_string(),
            };
            if name.is_empty()
                || name.len() > 32
                || name.contains("__")
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(ConfigError::Value {
                    key: format!("mcp.servers.{name:?}"),
                    message: "a server name is 1 to 32 letters, digits, `-` or `_`, \
                              without `__` (tools are named <server>__<tool>)"
                        .into(),
                });
            }
            if s.command.trim().is_empty() {
                return Err(value("command", "must name a program"));
            }
            if s.command.contains('\0') || s.args.iter().any(|a| a.contains('\0')) {
                return Err(value("args", "must not hold a NUL byte"));
            }
            for (k, v) in &s.env {
                if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                    return Err(value(
                        "env",
                        &format!("{k:?} is not a variable name (or its value holds a NUL byte)"),
                    ));
                }
            }
            if s.startup_timeout_ms.is_some_and(|t| t == 0 || t > 600_000) {
                return Err(value(
                    "startup_timeout_ms",
                    "must be from 1 to 600000 (10 minutes)",
                ));
            }
            if s.timeout_s.is_some_and(|t| t == 0 || t > 86_400) {
                return Err(value("timeout_s", "must be from 1 to 86400 (a day)"));
            }
        }
        Ok(())
    }
}

impl Config {
    /// The config a run uses: the global file ([`global_path`]) under the
    /// project's (`path`, or `./tinyagent.toml` when `path` is None and that
    /// file exists), key by key; the defaults where neither says.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let global = match global_path() {
            Some(g) => read_table(&g, false)?,
            None => None,
        };
        let project = match path {
            Some(p) => read_table(p, true)?,
            None => read_table(Path::new("tinyagent.toml"), false)?,
        };
        let mut table = global.unwrap_or_default();
        merge(&mut table, project.unwrap_or_default());
        let config =
            Config::deserialize(toml::Value::Table(table)).map_err(|e| ConfigError::Parse {
                path: path.map_or_else(|| PathBuf::from("tinyagent.toml"), Path::to_path_buf),
                message: e.to_string(),
            })?;
        config.check()?;
        Ok(config)
    }

    /// Parses TOML text; the error message names the key and position on
    /// its first line, then shows the line with a caret under the place (a
    /// diagram of several lines, kept as it is).
    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str::<Config>(text).map_err(|e| one_line_then_diagram(&e.to_string()))
    }

    /// Checks the values that name one of a fixed set (the numbers are
    /// checked with every other source by [`super::RunConfig::validate`]).
    pub fn check(&self) -> Result<(), ConfigError> {
        self.model.provider()?;
        self.env.kind()?;
        self.hooks.on_failure()?;
        self.mcp.check()?;
        self.approvals.mode()?;
        self.approvals.rules()?;
        Ok(())
    }
}

impl ModelSection {
    /// `model.provider`, default openai.
    pub fn provider(&self) -> Result<ProviderKind, ConfigError> {
        self.provider
            .as_deref()
            .map_or(Ok(ProviderKind::default()), |p| {
                parse_enum("model.provider", p)
            })
    }
}

impl EnvSection {
    /// `env.kind`, default local.
    pub fn kind(&self) -> Result<EnvKind, ConfigError> {
        self.kind
            .as_deref()
            .map_or(Ok(EnvKind::default()), |k| parse_enum("env.kind", k))
    }

    /// `env.engine`, if set.
    pub fn engine(&self) -> Result<Option<EngineKind>, ConfigError> {
        self.engine
            .as_deref()
            .map(|e| parse_enum("env.engine", e))
            .transpose()
    }
}

impl HooksSection {
    /// `hooks.on_failure`, default block.
    pub fn on_failure(&self) -> Result<HookFailure, ConfigError> {
        self.on_failure
            .as_deref()
            .map_or(Ok(HookFailure::default()), |f| {
                parse_enum("hooks.on_failure", f)
            })
    }
}

#[cfg(test)]
mod tests;
