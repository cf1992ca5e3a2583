//! `tinyagent run`: validated options -> a new log -> the loop.

use super::CliError;
use super::args::{ProviderArgs, RunArgs};
use crate::agent::output::Output;
use crate::agent::{Agent, AgentParts, prompt};
use crate::config::Config;
use crate::event::{Event, Limits, RunSettings, RunStarted, SCHEMA_VERSION};
use crate::model::{Provider, ProviderConfig, ProviderKind};
use crate::store::{Store, StoreOptions, TestSeams};
use crate::tools::{ExecEnv, HideVars, ProcessTable, ToolSet, ToolSetOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default snapshot interval, in records.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 1000;

/// Everything `run` needs, checked before any file is written.
pub struct RunPlan {
    pub wal: PathBuf,
    pub started: RunStarted,
    /// The tool set `started` records the signature of.
    pub tools: ToolSet,
    pub json: bool,
}

fn refuse(msg: impl Into<String>) -> CliError {
    CliError::new(2, msg)
}

fn new_run_id() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let compact: String = now.chars().filter(|c| c.is_ascii_digit()).collect();
    format!("r{}-{:04x}", compact, fastrand::u16(..))
}

fn default_model(provider: &str) -> &'static str {
    match provider {
        "anthropic" => "claude-sonnet-4-5",
        "script" => "script",
        _ => "gpt-4o-mini",
    }
}

fn absolute(p: &Path) -> Result<PathBuf, CliError> {
    std::fs::canonicalize(p).map_err(|e| refuse(format!("{}: {e}", p.display())))
}

/// Turns flags plus config into a validated plan. No file is written.
pub fn plan_run(args: &RunArgs) -> Result<RunPlan, CliError> {
    let config = Config::load(args.config.as_deref()).map_err(|e| refuse(e.to_string()))?;
    let plan_enabled = args.plan || config.plan.enabled.unwrap_or(false);
    let plan_file = args.plan_file.clone().or(config.plan.file.clone());
    if plan_file.is_some() && !plan_enabled {
        return Err(refuse(
            "--plan-file requires --plan (or plan.enabled = true in the config)",
        ));
    }
    if args.task.trim().is_empty() {
        return Err(refuse("the task is empty"));
    }
    let provider = args
        .provider
        .provider
        .clone()
        .or(config.model.provider.clone())
        .unwrap_or_else(|| "openai".into());
    if !matches!(provider.as_str(), "openai" | "anthropic" | "script") {
        return Err(refuse(format!(
            "unknown provider {provider:?}: use openai, anthropic or script"
        )));
    }
    let model = args
        .provider
        .model
        .clone()
        .or(config.model.name.clone())
        .unwrap_or_else(|| default_model(&provider).into());
    let base_url = args
        .provider
        .base_url
        .clone()
        .or(config.model.base_url.clone());
    let script = args.script.clone().or(config.model.script.clone());
    let script = match (&provider[..], script) {
        ("script", None) => return Err(refuse("provider script needs --script <FILE>")),
        (_, Some(s)) => Some(absolute(&s)?.display().to_string()),
        (_, None) => None,
    };
    let cwd = absolute(&args.cwd.clone().unwrap_or_else(|| PathBuf::from(".")))?;
    if !cwd.is_dir() {
        return Err(refuse(format!(
            "--cwd {} is not a directory",
            cwd.display()
        )));
    }
    for (flag, v) in [
        ("--price-in", args.price_in),
        ("--price-out", args.price_out),
        ("--max-cost", args.max_cost),
    ] {
        if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
            return Err(refuse(format!("{flag} must be a number >= 0")));
        }
    }
    if args.max_format_errors == Some(0) || args.snapshot_every == Some(0) {
        return Err(refuse(
            "--max-format-errors and --snapshot-every must be at least 1",
        ));
    }
    let limits = Limits {
        max_steps: args.max_steps.or(config.limits.max_steps),
        max_cost_usd: args.max_cost.or(config.limits.max_cost_usd),
        max_format_errors: args
            .max_format_errors
            .or(config.limits.max_format_errors)
            .unwrap_or(3),
    };
    let env_kind = config.env.kind.clone().unwrap_or_else(|| "local".into());
    let read_only = args.read_only;
    let tools = ToolSet::new(ToolSetOptions {
        read_only,
        plan: plan_enabled,
    });
    let run_id = new_run_id();
    let wal = match &args.wal {
        Some(w) => w.clone(),
        None => PathBuf::from(".tinyagent/runs").join(format!("{run_id}.wal")),
    };
    if wal.exists() {
        return Err(refuse(format!(
            "{} exists: a new run needs a new log (use `tinyagent resume` to continue one)",
            wal.display()
        )));
    }
    let plan_file = match plan_file {
        Some(p) if p.is_absolute() => Some(p),
        Some(p) => Some(
            std::env::current_dir()
                .map_err(|e| refuse(e.to_string()))?
                .join(p),
        ),
        None => None,
    };
    let settings = RunSettings {
        api_key_env: args
            .provider
            .api_key_env
            .clone()
            .or(config.model.api_key_env.clone()),
        price_in: args.price_in.or(config.model.price_in),
        price_out: args.price_out.or(config.model.price_out),
        script,
        cwd: cwd.display().to_string(),
        plan_file: plan_file.map(|p| p.display().to_string()),
        compact_at: args.compact_at.or(config.compaction.threshold_tokens),
        keep_recent: config.compaction.keep_recent,
        snapshot_every: args.snapshot_every.or(config.wal.snapshot_every),
        hooks_pre_tool: config.hooks.pre_tool.clone(),
        hooks_post_tool: config.hooks.post_tool.clone(),
        hooks_timeout_ms: config.hooks.timeout_ms,
        hooks_on_failure: config.hooks.on_failure.clone(),
        network: config.env.network.unwrap_or(false),
        env: Some(env_kind),
        stream: args.stream || config.model.stream.unwrap_or(false),
        max_retries: config.model.max_retries,
        retry_base_ms: config.model.retry_base_ms,
        request_timeout_s: config.model.request_timeout_s,
    };
    let started = RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id,
        task: args.task.clone(),
        model,
        provider,
        base_url,
        plan_enabled,
        read_only,
        tool_signature: tools.signature(),
        tools: tools.names(),
        limits,
        system_prompt: prompt::system_prompt(&cwd.display().to_string(), read_only, plan_enabled),
        settings,
    };
    Ok(RunPlan {
        wal,
        started,
        tools,
        json: args.json,
    })
}

/// The API key named by the run's settings (or the provider's usual variable).
pub fn api_key(provider: &str, api_key_env: Option<&str>) -> Option<String> {
    let var = api_key_env.unwrap_or(match provider {
        "anthropic" => "ANTHROPIC_API_KEY",
        _ => "OPENAI_API_KEY",
    });
    std::env::var(var).ok().filter(|k| !k.is_empty())
}

/// Builds the model client for a run's recorded settings, with overrides.
pub fn provider_for(run: &RunStarted, overrides: &ProviderArgs) -> Result<Provider, CliError> {
    let provider = overrides.provider.as_deref().unwrap_or(&run.provider);
    let kind = match provider {
        "openai" => ProviderKind::OpenAi,
        "anthropic" => ProviderKind::Anthropic,
        "script" => ProviderKind::Script,
        other => return Err(refuse(format!("unknown provider {other:?}"))),
    };
    let key_env = overrides
        .api_key_env
        .as_deref()
        .or(run.settings.api_key_env.as_deref());
    let api_key = api_key(provider, key_env);
    if kind == ProviderKind::Anthropic && api_key.is_none() {
        return Err(refuse(format!(
            "provider anthropic needs an API key in ${}",
            key_env.unwrap_or("ANTHROPIC_API_KEY")
        )));
    }
    Provider::new(ProviderConfig {
        provider: kind,
        model: overrides.model.clone().unwrap_or_else(|| run.model.clone()),
        base_url: overrides.base_url.clone().or(run.base_url.clone()),
        api_key,
        script: run.settings.script.as_ref().map(PathBuf::from),
        stream: run.settings.stream,
        request_timeout: Duration::from_secs(run.settings.request_timeout_s.unwrap_or(300)),
        max_retries: run.settings.max_retries.unwrap_or(5),
        retry_base: Duration::from_millis(run.settings.retry_base_ms.unwrap_or(500)),
    })
    .map_err(|e| refuse(e.to_string()))
}

/// The execution environment a run's settings ask for. Variables that hold
/// API keys (`*_API_KEY`, and the run's own `api_key_env`) are hidden from
/// the commands it runs, so a key can never reach a tool result or the log.
pub fn exec_env(run: &RunStarted) -> Result<Box<dyn ExecEnv>, CliError> {
    let kind = run.settings.env.as_deref().unwrap_or("local");
    let env = crate::tools::env::from_kind(kind, run.settings.network).map_err(|e| match e {
        crate::tools::EnvError::UnknownKind(_) => refuse(e.to_string()),
        _ => CliError::new(1, e.to_string()),
    })?;
    env.check(Path::new(&run.settings.cwd))
        .map_err(|e| CliError::new(1, e.to_string()))?;
    Ok(match &run.settings.api_key_env {
        Some(var) => Box::new(HideVars {
            inner: env,
            vars: vec![var.clone()],
        }),
        None => env,
    })
}

/// Directory for background process output beside the log.
pub fn process_dir(wal: &Path) -> PathBuf {
    let mut s = wal.as_os_str().to_owned();
    s.push(".d");
    PathBuf::from(s)
}

pub fn store_options(run: &RunStarted) -> StoreOptions {
    StoreOptions {
        snapshot_every: run
            .settings
            .snapshot_every
            .unwrap_or(DEFAULT_SNAPSHOT_EVERY),
        ..StoreOptions::default()
    }
}

/// The test-only seams (`TINYAGENT_FAULTS`, `TINYAGENT_CRASH_AFTER`,
/// `TINYAGENT_CRASH_IN_SNAPSHOT`; see docs/reliability.md) for the log this
/// process writes, read once before it is opened; a fault plan that does not
/// parse is refused. The only place the application reads them.
pub fn test_seams() -> Result<TestSeams, CliError> {
    TestSeams::from_env().map_err(|e| refuse(e.to_string()))
}

/// `tinyagent run`.
pub async fn run(args: &RunArgs) -> Result<i32, CliError> {
    let plan = plan_run(args)?;
    let provider = provider_for(&plan.started, &args.provider)?;
    let env = exec_env(&plan.started)?;
    // Store::create makes the log's directory (durably) when it is missing.
    let mut options = store_options(&plan.started);
    options.seams = test_seams()?;
    let mut store = Store::create(&plan.wal, options)?;
    let started = Event::RunStarted(plan.started.clone());
    let seq = store.append(started.clone())?;
    eprintln!("log: {}", plan.wal.display());
    let processes = ProcessTable::new(process_dir(&plan.wal));
    let mut agent = Agent::new(AgentParts {
        store,
        tools: plan.tools,
        provider,
        env,
        processes,
        out: Output::new(plan.json),
    })
    .map_err(CliError::from)?;
    agent.output().record(seq, &started);
    let result = agent.run().await;
    agent.close();
    Ok(super::status_exit_code(result?))
}
