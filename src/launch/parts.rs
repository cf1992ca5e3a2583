//! The parts of a run every origin builds the same way: where logs live,
//! the hooks and the model client a config names, the tool set with its MCP
//! servers, the run's protected files, the execution environment, the store's
//! options, and the errors of a checkpoint store as a launch's.

use super::LaunchError;
use crate::config::file::McpSection;
use crate::config::{
    Config, DEFAULT_HOOK_TIMEOUT, EnvKind, HOST_IMAGE, HookSettings, ProviderKind, RunConfig,
};
use crate::exec::{ContainerEnv, ExecEnv, HideVars};
use crate::mcp::{McpServers, ServerSpec};
use crate::model::{Provider, ProviderConfig};
use crate::store::{StoreOptions, TestSeams};
use crate::tools::{ToolSet, ToolSetOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An absolute form of a path the person gave, which must exist.
pub(super) fn absolute(p: &Path) -> Result<PathBuf, LaunchError> {
    std::fs::canonicalize(p).map_err(|e| LaunchError::refused(format!("{}: {e}", p.display())))
}

/// An absolute form of a path that may not exist yet.
pub(super) fn absolute_new(p: PathBuf) -> Result<PathBuf, LaunchError> {
    if p.is_absolute() {
        return Ok(p);
    }
    Ok(std::env::current_dir()
        .map_err(|e| LaunchError::refused(e.to_string()))?
        .join(p))
}

/// Where tinyagent keeps its runs: `$TINYAGENT_HOME`, else
/// `$XDG_STATE_HOME/tinyagent`, else `~/.local/state/tinyagent` — outside
/// the workspace, so nothing a tool does there can touch a log.
pub fn home() -> Result<PathBuf, LaunchError> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = var("TINYAGENT_HOME")
        .or_else(|| var("XDG_STATE_HOME").map(|d| d.join("tinyagent")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/tinyagent")))
        .ok_or_else(|| {
            LaunchError::refused(
                "no place for the run's log: set TINYAGENT_HOME (or HOME), or give --wal",
            )
        })?;
    absolute_new(home)
}

/// The hooks the local config names.
pub fn hook_settings(file: &Config) -> Result<HookSettings, LaunchError> {
    Ok(HookSettings {
        pre_tool: file.hooks.pre_tool.clone(),
        post_tool: file.hooks.post_tool.clone(),
        timeout: file
            .hooks
            .timeout_ms
            .map_or(DEFAULT_HOOK_TIMEOUT, Duration::from_millis),
        on_failure: file.hooks.on_failure()?,
    })
}

/// The container environment's engine, resolved to one that is on PATH
/// (the first of podman, docker when none is named); refused (exit 2)
/// when there is none. Nothing to do in the other environments.
pub fn resolve_engine(config: &mut RunConfig) -> Result<(), LaunchError> {
    if config.env != EnvKind::Container {
        return Ok(());
    }
    let (engine, _) = crate::exec::container::find_engine(config.container.engine)
        .map_err(|e| LaunchError::refused(format!("env.kind = \"container\": {e}")))?;
    if engine == crate::config::EngineKind::Docker && config.container.image == HOST_IMAGE {
        return Err(LaunchError::refused(
            "env.image = \"host\" (the default) needs podman (`--rootfs`); with docker, \
             set env.image to an image that has bash",
        ));
    }
    config.container.engine = Some(engine);
    Ok(())
}

/// Starts the enabled MCP servers of the local config for a run with
/// `config` (a failure is refused, naming the server). Their environment
/// lacks the run's `api_key_env` besides every usual key variable. In the
/// sandbox environment they run inside the same bubblewrap sandbox as the
/// run's commands (the run's own files out of reach, `protected`); the
/// container environment refuses them, since its container is started only
/// once the run's first record (which lists their tools) is written. A
/// stopping signal (`stop`) while they start is [`LaunchError::Stopped`].
pub fn start_mcp(
    servers: &McpSection,
    config: &RunConfig,
    protected: &crate::exec::protected::Protected,
    stop: &crate::signals::StopToken,
) -> Result<McpServers, LaunchError> {
    let hide: Vec<String> = config.model.api_key_env.iter().cloned().collect();
    let mut specs = ServerSpec::enabled(&servers.servers, &config.workspace, &hide);
    if specs.is_empty() {
        return Ok(McpServers::default());
    }
    match config.env {
        EnvKind::Local => {}
        EnvKind::Sandbox => {
            let sandbox = crate::exec::SandboxEnv::new(config.network)
                .map_err(|e| LaunchError::failed(e.to_string()))?
                .protecting(protected.clone())
                .exposing(config.sockets.clone());
            sandbox
                .check(&config.workspace)
                .map_err(|e| LaunchError::failed(e.to_string()))?;
            for spec in &mut specs {
                spec.confine = Some(sandbox.clone());
            }
        }
        EnvKind::Container => {
            return Err(LaunchError::refused(format!(
                "MCP servers ({}) cannot be used with env.kind = \"container\" (they would run \
                 on the host, outside the container; disable them with enabled = false, or use \
                 env.kind = \"sandbox\")",
                specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    crate::runtime::blocking(|| McpServers::start(specs, stop)).map_err(|e| {
        match stop.signal() {
            // Stopped while the servers started: nothing was written.
            Some(sig) => LaunchError::Stopped(sig, e),
            None => LaunchError::refused(e),
        }
    })
}

/// The built-in tools `opts` offers, then the MCP servers' tools.
pub fn tool_set(opts: ToolSetOptions, mcp: &McpServers) -> Result<ToolSet, LaunchError> {
    let mut tools = ToolSet::new(opts);
    for tool in mcp.tools() {
        tools
            .register(tool)
            .map_err(|e| LaunchError::refused(e.to_string()))?;
    }
    Ok(tools)
}

/// The API key from the named variable (or the provider's usual one), as it
/// was when the agent started: [`super::secrets`] has taken it out of the
/// environment by now.
pub fn api_key(provider: ProviderKind, api_key_env: Option<&str>) -> Option<String> {
    let var = api_key_env.unwrap_or(provider.default_key_env());
    super::secrets::key(var).filter(|k| !k.is_empty())
}

/// Builds the model client for a run's config.
pub fn provider_for(config: &RunConfig) -> Result<Provider, LaunchError> {
    let m = &config.model;
    let key_env = m.api_key_env.as_deref();
    let api_key = api_key(m.provider, key_env);
    let public = m.base_url.is_none()
        && matches!(m.provider, ProviderKind::OpenAi | ProviderKind::Responses);
    if public && api_key.is_none() {
        return Err(LaunchError::refused(format!(
            "provider {} at its public endpoint needs an API key in ${} (or name a local \
             server with --base-url)",
            m.provider,
            key_env.unwrap_or(m.provider.default_key_env())
        )));
    }
    if m.provider == ProviderKind::Anthropic && api_key.is_none() {
        return Err(LaunchError::refused(format!(
            "provider anthropic needs an API key in ${}",
            key_env.unwrap_or(m.provider.default_key_env())
        )));
    }
    Provider::new(ProviderConfig {
        provider: m.provider,
        model: m.name.clone(),
        base_url: m.base_url.clone(),
        api_key,
        script: m.script.clone(),
        stream: m.stream,
        max_output_tokens: m.max_output_tokens,
        reasoning_effort: m.reasoning_effort,
        thinking_budget: m.thinking_budget,
        request_timeout: m.request_timeout,
        max_retries: m.max_retries,
        retry_base: m.retry_base,
        on_retry: Some(std::sync::Arc::new(|line: &str| {
            crate::report::err_line(&format!("model server: {line}"));
        })),
    })
    .map_err(|e| LaunchError::refused(e.to_string()))
}

/// The run's own files, out of every tool's reach: the log and its siblings,
/// the config file, the hook programs.
pub fn protected_for(
    wal: &Path,
    config_file: Option<&Path>,
    config: &RunConfig,
) -> crate::exec::protected::Protected {
    let mut p = crate::exec::protected::Protected::none();
    p.add_log(wal);
    let default = Path::new("tinyagent.toml");
    match config_file {
        Some(f) => p.add(f),
        None if default.exists() => p.add(default),
        None => {}
    }
    if let Some(global) = crate::config::file::global_path().filter(|g| g.exists()) {
        p.add(&global);
    }
    for f in config.hooks.files(&config.workspace) {
        p.add(&f);
    }
    p
}

/// The execution environment a run's config asks for. Variables that hold
/// API keys (`*_API_KEY`, the AWS credentials, and the run's own
/// `api_key_env`) are hidden from the commands it runs, so a key can never
/// reach a tool result or the log. (The binary has taken them out of its
/// environment at start already, see [`super::secrets`]; this covers a
/// caller that did not.)
///
/// The container environment finds the run's container (`run_id`) and
/// reattaches to it, or starts it; an engine that cannot is refused (exit 2).
pub fn exec_env(
    config: &RunConfig,
    protected: &crate::exec::protected::Protected,
    run_id: &str,
    wal: &Path,
) -> Result<Box<dyn ExecEnv>, LaunchError> {
    let env: Box<dyn ExecEnv> = if config.env == EnvKind::Container {
        Box::new(
            ContainerEnv::attach(
                &config.container,
                config.network,
                run_id,
                wal,
                &config.workspace,
                protected,
            )
            .map_err(|e| LaunchError::refused(e.to_string()))?,
        )
    } else {
        exec_env_checked(config, protected)?
    };
    Ok(match &config.model.api_key_env {
        Some(var) => Box::new(HideVars {
            inner: env,
            vars: vec![var.clone()],
        }),
        None => env,
    })
}

/// The local or sandbox environment, checked.
pub(super) fn exec_env_checked(
    config: &RunConfig,
    protected: &crate::exec::protected::Protected,
) -> Result<Box<dyn ExecEnv>, LaunchError> {
    let env = crate::exec::env::from_kind(config.env, config.network, &config.sockets, protected)
        .map_err(|e| LaunchError::failed(e.to_string()))?;
    env.check(&config.workspace)
        .map_err(|e| LaunchError::failed(e.to_string()))?;
    Ok(env)
}

/// The log's own directory, `<wal>.d/`, is used only when this process
/// makes it or this user did (checkpoint/trust.rs): checked before a
/// command writes anything, refused with exit 2.
pub fn check_run_dir(wal: &Path) -> Result<(), LaunchError> {
    crate::checkpoint::trust::check_run_dir(wal).map_err(|e| LaunchError::refused(e.to_string()))
}

/// A checkpoint store's error as a command's: a refused store is exit 2.
pub fn checkpoint_error(what: &str, e: &crate::checkpoint::CheckpointError) -> LaunchError {
    let message = if what.is_empty() {
        e.to_string()
    } else {
        format!("{what}: {e}")
    };
    if e.is_untrusted() {
        LaunchError::Refused(message)
    } else {
        LaunchError::Failed(message)
    }
}

/// Directory for background process output beside the log.
pub fn process_dir(wal: &Path) -> PathBuf {
    crate::rundir::RunDir::of(wal).path().to_path_buf()
}

pub fn store_options(config: &RunConfig) -> StoreOptions {
    StoreOptions {
        snapshot_every: config.snapshot_every,
        ..StoreOptions::default()
    }
}

/// The test-only seams (`TINYAGENT_FAULTS`, `TINYAGENT_CRASH_AFTER`,
/// `TINYAGENT_CRASH_IN_SNAPSHOT`; see docs/reliability.md) for the log this
/// process writes, read once before it is opened; a fault plan that does not
/// parse is refused. The only place the application reads them.
pub fn test_seams() -> Result<TestSeams, LaunchError> {
    TestSeams::from_env().map_err(|e| LaunchError::refused(e.to_string()))
}

/// The variable the run's API key is read from.
pub fn key_var(config: &RunConfig) -> &str {
    config
        .model
        .api_key_env
        .as_deref()
        .unwrap_or(config.model.provider.default_key_env())
}

/// A finished run's container goes (its processes were stopped already);
/// a failure to remove it is said, not fatal.
pub fn remove_container(container: Option<&crate::exec::container::Container>) {
    if let Some(c) = container
        && let Err(e) = c.remove()
    {
        crate::report::err_line(&format!(
            "warning: could not remove the container {}: {e}",
            c.name()
        ));
    }
}

/// The checkpoint store's settings for this process, from the local config
/// (`[checkpoints] git`, `max_file_bytes`) under the environment's overrides
/// (`TINYAGENT_GIT`, `TINYAGENT_CHECKPOINT_MAX_FILE_BYTES`, both trusted
/// local settings): read here, once, at the start of a command.
pub fn configure_checkpoints(file: &Config) {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let defaults = crate::checkpoint::StoreSettings::default();
    crate::checkpoint::configure(crate::checkpoint::StoreSettings {
        git: env("TINYAGENT_GIT")
            .map(PathBuf::from)
            .or_else(|| file.checkpoints.git.clone())
            .unwrap_or(defaults.git),
        max_file_bytes: env("TINYAGENT_CHECKPOINT_MAX_FILE_BYTES")
            .and_then(|v| v.trim().parse().ok())
            .or(file.checkpoints.max_file_bytes)
            .unwrap_or(defaults.max_file_bytes),
    });
}
