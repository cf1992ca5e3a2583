//! `tinyagent run`: validated options -> a new log -> the loop.

use super::CliError;
use super::args::RunArgs;
use crate::agent::output::Output;
use crate::agent::{Agent, AgentParts, prompt};
use crate::config::file::McpSection;
use crate::config::{
    ApprovalSettings, Config, ContainerSettings, DEFAULT_COMPACT_AT, DEFAULT_HOOK_TIMEOUT,
    DEFAULT_KEEP_RECENT, DEFAULT_SNAPSHOT_EVERY, EnvKind, HOST_IMAGE, HookSettings, ModelSettings,
    ProviderKind, RunConfig,
};
use crate::event::{Event, Limits, RunStarted, SCHEMA_VERSION};
use crate::mcp::{McpServers, ServerSpec};
use crate::model::{Provider, ProviderConfig};
use crate::store::{Store, StoreOptions, TestSeams};
use crate::tools::{ContainerEnv, ExecEnv, HideVars, ProcessTable, ToolSet, ToolSetOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything `run` needs, checked before any file is written.
pub struct RunPlan {
    pub wal: PathBuf,
    pub config: RunConfig,
    pub started: RunStarted,
    /// The tool set `started` records the signature of.
    pub tools: ToolSet,
    pub json: bool,
    /// Lines for the person about the run's set-up (instruction files not
    /// read or cut), printed when the run starts.
    pub notes: Vec<String>,
}

pub(super) fn new_run_id() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let compact: String = now.chars().filter(|c| c.is_ascii_digit()).collect();
    format!("r{}-{:04x}", compact, fastrand::u16(..))
}

/// An absolute form of a path the person gave, which must exist.
fn absolute(p: &Path) -> Result<PathBuf, CliError> {
    std::fs::canonicalize(p).map_err(|e| CliError::refused(format!("{}: {e}", p.display())))
}

/// An absolute form of a path that may not exist yet.
pub(super) fn absolute_new(p: PathBuf) -> Result<PathBuf, CliError> {
    if p.is_absolute() {
        return Ok(p);
    }
    Ok(std::env::current_dir()
        .map_err(|e| CliError::refused(e.to_string()))?
        .join(p))
}

/// Where tinyagent keeps its runs: `$TINYAGENT_HOME`, else
/// `$XDG_STATE_HOME/tinyagent`, else `~/.local/state/tinyagent` — outside
/// the workspace, so nothing a tool does there can touch a log.
pub fn home() -> Result<PathBuf, CliError> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = var("TINYAGENT_HOME")
        .or_else(|| var("XDG_STATE_HOME").map(|d| d.join("tinyagent")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/tinyagent")))
        .ok_or_else(|| {
            CliError::refused(
                "no place for the run's log: set TINYAGENT_HOME (or HOME), or give --wal",
            )
        })?;
    absolute_new(home)
}

/// The hooks the local config names.
pub fn hook_settings(file: &Config) -> Result<HookSettings, CliError> {
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

/// Stage 1: flags over the config file over the defaults, validated.
pub fn resolve(args: &RunArgs, file: &Config) -> Result<RunConfig, CliError> {
    let m = &file.model;
    let provider = match args.provider.provider {
        Some(p) => p,
        None => m.provider()?,
    };
    let script = match (provider, args.script.clone().or(m.script.clone())) {
        (ProviderKind::Script, None) => {
            return Err(CliError::refused("provider script needs --script <FILE>"));
        }
        (_, Some(s)) => Some(absolute(&s)?),
        (_, None) => None,
    };
    let workspace = absolute(&args.cwd.clone().unwrap_or_else(|| PathBuf::from(".")))?;
    if !workspace.is_dir() {
        return Err(CliError::refused(format!(
            "--cwd {} is not a directory",
            workspace.display()
        )));
    }
    let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
    let name = (args.provider.model.clone().or(m.name.clone()))
        .unwrap_or_else(|| provider.default_model().into());
    let base_url = args
        .provider
        .base_url
        .clone()
        .or(m.base_url.clone())
        .or_else(|| provider.base_url_from_env());
    // Prices the person did not give, for a known model at its provider.
    let listed = crate::config::prices::known(provider, &name, base_url.as_deref());
    let config = RunConfig {
        model: ModelSettings {
            provider,
            name,
            // Flag, then the config file, then OPENAI_BASE_URL /
            // ANTHROPIC_BASE_URL.
            base_url,
            api_key_env: args.provider.api_key_env.clone().or(m.api_key_env.clone()),
            price_in: args
                .price_in
                .or(m.price_in)
                .or(listed.map(|p| p.0))
                .unwrap_or(0.0),
            price_out: args
                .price_out
                .or(m.price_out)
                .or(listed.map(|p| p.1))
                .unwrap_or(0.0),
            script,
            stream: args.stream || m.stream.unwrap_or(false),
            max_retries: m.max_retries.unwrap_or(5),
            retry_base: ms(m.retry_base_ms, Duration::from_millis(500)),
            request_timeout: Duration::from_secs(
                args.timeout.or(m.request_timeout_s).unwrap_or(300),
            ),
        },
        workspace,
        plan_enabled: args.plan || file.plan.enabled.unwrap_or(false),
        plan_file: match args.plan_file.clone().or(file.plan.file.clone()) {
            Some(p) => Some(absolute_new(p)?),
            None => None,
        },
        read_only: args.read_only,
        limits: Limits {
            max_steps: args.max_steps.or(file.limits.max_steps),
            max_cost_usd: args.max_cost.or(file.limits.max_cost_usd),
            max_format_errors: args
                .max_format_errors
                .or(file.limits.max_format_errors)
                .unwrap_or(3),
        },
        compact_at: args
            .compact_at
            .or(file.compaction.threshold_tokens)
            .unwrap_or(DEFAULT_COMPACT_AT),
        keep_recent: file.compaction.keep_recent.unwrap_or(DEFAULT_KEEP_RECENT),
        snapshot_every: args
            .snapshot_every
            .or(file.wal.snapshot_every)
            .unwrap_or(DEFAULT_SNAPSHOT_EVERY),
        hooks: hook_settings(file)?,
        approvals: ApprovalSettings {
            mode: match args.approve {
                Some(m) => m,
                None => file.approvals.mode()?,
            },
            allow: file.approvals.rules()?,
        },
        chat: false,
        env: file.env.kind()?,
        network: file.env.network.unwrap_or(false),
        sockets: file.env.sockets.clone(),
        container: ContainerSettings {
            engine: file.env.engine()?,
            image: file
                .env
                .image
                .clone()
                .unwrap_or_else(|| HOST_IMAGE.to_string()),
        },
        checkpoint_watch: file.checkpoints.watch.unwrap_or(false),
    };
    let mut config = config;
    resolve_engine(&mut config)?;
    config.validate()?;
    config.hooks.check_commands(&config.workspace)?;
    Ok(config)
}

/// The container environment's engine, resolved to one that is on PATH
/// (the first of podman, docker when none is named); refused (exit 2)
/// when there is none. Nothing to do in the other environments.
pub fn resolve_engine(config: &mut RunConfig) -> Result<(), CliError> {
    if config.env != EnvKind::Container {
        return Ok(());
    }
    let (engine, _) = crate::tools::container::find_engine(config.container.engine)
        .map_err(|e| CliError::refused(format!("env.kind = \"container\": {e}")))?;
    if engine == crate::config::EngineKind::Docker && config.container.image == HOST_IMAGE {
        return Err(CliError::refused(
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
/// once the run's first record (which lists their tools) is written.
pub fn start_mcp(
    servers: &McpSection,
    config: &RunConfig,
    protected: &crate::tools::protected::Protected,
) -> Result<McpServers, CliError> {
    let hide: Vec<String> = config.model.api_key_env.iter().cloned().collect();
    let mut specs = ServerSpec::enabled(&servers.servers, &config.workspace, &hide);
    if specs.is_empty() {
        return Ok(McpServers::default());
    }
    match config.env {
        EnvKind::Local => {}
        EnvKind::Sandbox => {
            let sandbox = crate::tools::env::SandboxEnv::new(config.network)
                .map_err(|e| CliError::new(1, e.to_string()))?
                .protecting(protected.clone())
                .exposing(config.sockets.clone());
            sandbox
                .check(&config.workspace)
                .map_err(|e| CliError::new(1, e.to_string()))?;
            for spec in &mut specs {
                spec.confine = Some(sandbox.clone());
            }
        }
        EnvKind::Container => {
            return Err(CliError::refused(format!(
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
    crate::runtime::blocking(|| McpServers::start(specs)).map_err(|e| {
        match crate::signals::received() {
            // Stopped while the servers started: nothing was written.
            Some(sig) => CliError::new(crate::signals::exit_code(sig), e),
            None => CliError::refused(e),
        }
    })
}

/// The built-in tools `opts` offers, then the MCP servers' tools.
pub fn tool_set(opts: ToolSetOptions, mcp: &McpServers) -> Result<ToolSet, CliError> {
    let mut tools = ToolSet::new(opts);
    for tool in mcp.tools() {
        tools
            .register(tool)
            .map_err(|e| CliError::refused(e.to_string()))?;
    }
    Ok(tools)
}

/// Stage 2: a new run's identity, log path and first record. The MCP
/// servers are started last, once every other check has passed.
pub fn new_run(args: &RunArgs, config: RunConfig, mcp: &McpSection) -> Result<RunPlan, CliError> {
    if args.task.trim().is_empty() && !config.chat {
        return Err(CliError::refused("the task is empty"));
    }
    let run_id = new_run_id();
    let wal = match &args.wal {
        Some(w) => w.clone(),
        None => home()?.join("runs").join(format!("{run_id}.wal")),
    };
    if wal.exists() {
        return Err(CliError::refused(format!(
            "{} exists: a new run needs a new log (use `tinyagent resume` to continue one)",
            wal.display()
        )));
    }
    check_run_dir(&wal)?;
    let opts = ToolSetOptions {
        read_only: config.read_only,
        plan: config.plan_enabled,
    };
    let servers = start_mcp(
        mcp,
        &config,
        &protected_for(&wal, args.config.as_deref(), &config),
    )?;
    let tools = tool_set(opts, &servers)?;
    let workspace = config.workspace.display().to_string();
    let instructions = if args.no_agents_md {
        crate::agent::instructions::Instructions::default()
    } else {
        crate::agent::instructions::load(&config.workspace)
    };
    let mut notes: Vec<String> = instructions
        .skipped
        .iter()
        .map(|why| format!("warning: {why}"))
        .collect();
    if !instructions.cut.is_empty() {
        notes.push(format!(
            "warning: project instructions cut to {} KiB: {}",
            crate::agent::instructions::MAX_BYTES / 1024,
            instructions
                .cut
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.extend(config.cost_warning());
    let mut system_prompt =
        prompt::system_prompt(&workspace, config.read_only, config.plan_enabled);
    system_prompt.push_str(&instructions.prompt_section());
    let mut settings = config.settings();
    settings.instructions = instructions.paths();
    if config.env == EnvKind::Container {
        settings.container = Some(crate::tools::container::container_name(&run_id));
    }
    let started = RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id,
        task: args.task.clone(),
        model: config.model.name.clone(),
        provider: config.model.provider,
        base_url: config.model.base_url.clone(),
        plan_enabled: config.plan_enabled,
        read_only: config.read_only,
        tool_signature: tools.signature(),
        tools: tools.names(),
        mcp_tools: servers.records(opts),
        limits: config.limits.clone(),
        forked_from: None,
        system_prompt,
        settings,
    };
    Ok(RunPlan {
        wal,
        config,
        started,
        tools,
        json: args.json,
        notes,
    })
}

/// Turns flags plus config into a validated plan. No file is written.
pub fn plan_run(args: &RunArgs, chat: bool) -> Result<RunPlan, CliError> {
    let file = Config::load(args.config.as_deref())?;
    let mut config = resolve(args, &file)?;
    config.chat = chat;
    new_run(args, config, &file.mcp)
}

/// The API key from the named variable (or the provider's usual one), as it
/// was when the agent started: [`super::secrets`] has taken it out of the
/// environment by now.
pub fn api_key(provider: ProviderKind, api_key_env: Option<&str>) -> Option<String> {
    let var = api_key_env.unwrap_or(provider.default_key_env());
    super::secrets::key(var).filter(|k| !k.is_empty())
}

/// Builds the model client for a run's config.
pub fn provider_for(config: &RunConfig) -> Result<Provider, CliError> {
    let m = &config.model;
    let key_env = m.api_key_env.as_deref();
    let api_key = api_key(m.provider, key_env);
    if m.provider == ProviderKind::Anthropic && api_key.is_none() {
        return Err(CliError::refused(format!(
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
        request_timeout: m.request_timeout,
        max_retries: m.max_retries,
        retry_base: m.retry_base,
        on_retry: Some(std::sync::Arc::new(|line: &str| {
            crate::agent::output::err_line(&format!("model server: {line}"));
        })),
    })
    .map_err(|e| CliError::refused(e.to_string()))
}

/// The run's own files, out of every tool's reach: the log and its siblings,
/// the config file, the hook programs.
pub fn protected_for(
    wal: &Path,
    config_file: Option<&Path>,
    config: &RunConfig,
) -> crate::tools::protected::Protected {
    let mut p = crate::tools::protected::Protected::none();
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
    protected: &crate::tools::protected::Protected,
    run_id: &str,
    wal: &Path,
) -> Result<Box<dyn ExecEnv>, CliError> {
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
            .map_err(|e| CliError::refused(e.to_string()))?,
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
fn exec_env_checked(
    config: &RunConfig,
    protected: &crate::tools::protected::Protected,
) -> Result<Box<dyn ExecEnv>, CliError> {
    let env = crate::tools::env::from_kind(config.env, config.network, &config.sockets, protected)
        .map_err(|e| CliError::new(1, e.to_string()))?;
    env.check(&config.workspace)
        .map_err(|e| CliError::new(1, e.to_string()))?;
    Ok(env)
}

/// The checkpoint of the workspace a new run starts in (`None`, with a
/// warning, when none can be made: no usable git, a failing store).
fn starting_checkpoint(
    wal: &Path,
    config: &RunConfig,
    protected: &crate::tools::protected::Protected,
) -> Option<Event> {
    let warn = |e: &dyn std::fmt::Display| {
        crate::agent::output::err_line(&format!(
            "warning: no checkpoint of the starting workspace: {e}"
        ));
    };
    if let Err(e) = crate::checkpoint::check_version() {
        warn(&e);
        return None;
    }
    let mut cp = crate::checkpoint::Checkpointer::new(wal, &config.workspace, protected.clone());
    match cp.take(None) {
        Ok(t) => Some(Event::WorkspaceCheckpoint(
            crate::event::WorkspaceCheckpoint {
                step: 0,
                call_id: None,
                tree: t.tree,
                changed: t.changed,
                changed_count: t.changed_count,
                files: t.files,
                oversized: t.oversized,
                // Taken before the run's own checkpointer sets its watch up.
                walk: config
                    .checkpoint_watch
                    .then(|| "full: the starting state".to_string()),
            },
        )),
        Err(e) => {
            warn(&e);
            None
        }
    }
}

/// The log's own directory, `<wal>.d/`, is used only when this process
/// makes it or this user did (checkpoint/trust.rs): checked before a
/// command writes anything, refused with exit 2.
pub fn check_run_dir(wal: &Path) -> Result<(), CliError> {
    crate::checkpoint::trust::check_run_dir(wal).map_err(|e| CliError::refused(e.to_string()))
}

/// A checkpoint store's error as a command's: a refused store is exit 2.
pub fn checkpoint_error(what: &str, e: &crate::checkpoint::CheckpointError) -> CliError {
    let code = if e.is_untrusted() { 2 } else { 1 };
    if what.is_empty() {
        CliError::new(code, e.to_string())
    } else {
        CliError::new(code, format!("{what}: {e}"))
    }
}

/// Directory for background process output beside the log.
pub fn process_dir(wal: &Path) -> PathBuf {
    let mut s = wal.as_os_str().to_owned();
    s.push(".d");
    PathBuf::from(s)
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
pub fn test_seams() -> Result<TestSeams, CliError> {
    TestSeams::from_env().map_err(|e| CliError::refused(e.to_string()))
}

/// `tinyagent run`.
pub async fn run(args: &RunArgs) -> Result<i32, CliError> {
    run_as(args, false).await
}

/// `tinyagent run`, or a new `tinyagent chat` (no task: the chat's prompt).
pub async fn run_as(args: &RunArgs, chat: bool) -> Result<i32, CliError> {
    let plan = plan_run(args, chat)?;
    let provider = provider_for(&plan.config)?;
    for note in &plan.notes {
        crate::agent::output::err_line(note);
    }
    // The person chose this server: a resume may send the key there.
    if let (Some(url), Ok(home)) = (&plan.config.model.base_url, home())
        && let Err(e) = super::endpoints::remember(&home, url)
    {
        crate::agent::output::err_line(&format!(
            "warning: {}; a resume will ask for --base-url",
            e.message
        ));
    }
    let protected = protected_for(&plan.wal, args.config.as_deref(), &plan.config);
    let mut options = store_options(&plan.config);
    options.seams = test_seams()?;
    // The other environments are checked before anything is written.
    let early = if plan.config.env == EnvKind::Container {
        None
    } else {
        Some(exec_env(
            &plan.config,
            &protected,
            &plan.started.run_id,
            &plan.wal,
        )?)
    };
    // The run's manifest is created in the bucket before its log exists:
    // nothing of the run is acknowledged before replication holds it.
    let file = Config::load(args.config.as_deref())?;
    let replicator = super::remote::start_for_run(
        args.replicate.as_deref(),
        args.replicate_mode.as_deref(),
        &file,
        &plan.wal,
        &plan.started,
    )?;
    options.on_sync = replicator.as_ref().map(crate::replicate::Replicator::hook);
    // Store::create makes the log's directory (durably) when it is missing.
    let mut store = Store::create(&plan.wal, options)?;
    let started = Event::RunStarted(plan.started.clone());
    // The starting state's checkpoint goes with run.started: one write,
    // one sync.
    let first = starting_checkpoint(&plan.wal, &plan.config, &protected);
    let flushed = store
        .stage(started.clone())
        .and_then(|_| match &first {
            Some(c) => store.stage(c.clone()).map(|_| ()),
            None => Ok(()),
        })
        .and_then(|()| store.flush());
    let records = match flushed {
        Ok(records) => records,
        Err(e) => {
            // Nothing was acknowledged and nothing ran: the file holds no
            // complete record, so it goes, and the same command can be run
            // again.
            drop(store);
            let _ = std::fs::remove_file(&plan.wal);
            return Err(CliError::new(
                e.exit_code(),
                format!("{e} (the run did not start; the empty log was removed)"),
            ));
        }
    };
    // The container is started once its log names it, so that `env prune`
    // never takes it for the container of a log that is gone, and a kill
    // right after leaves a run whose resume starts it. An engine that
    // cannot start it leaves nothing behind: the log that only says the
    // run was to start goes.
    let env = match early.map_or_else(
        || exec_env(&plan.config, &protected, &plan.started.run_id, &plan.wal),
        Ok,
    ) {
        Ok(env) => env,
        Err(e) => {
            drop(store);
            let _ = std::fs::remove_file(&plan.wal);
            return Err(e);
        }
    };
    let container = env.container().cloned();
    if let Ok(home) = home() {
        super::sessions::index(&home, &plan.wal, &plan.started.run_id);
    }
    let plan_wal = plan.wal.clone();
    let key_var = key_var(&plan.config).to_string();
    let processes = ProcessTable::new(process_dir(&plan.wal));
    let mut agent = Agent::new(AgentParts {
        config: plan.config,
        protected,
        store,
        tools: plan.tools,
        provider,
        env,
        processes,
        out: {
            let mut out = Output::new(plan.json);
            out.set_color(args.color.on());
            out
        },
    })
    .map_err(CliError::from)?;
    for (seq, record) in &records {
        agent.output().record(*seq, record);
    }
    // After run.started's line, which names the workspace, the approval
    // mode and the environment: the first a person reads.
    super::say(&format!("log: {}", plan.wal.display()));
    let result = if chat {
        super::chat::converse(&mut agent).await
    } else {
        agent.run().await
    };
    let finished = matches!(agent.state().status, crate::session::Status::Finished(_));
    let state = agent.state().clone();
    agent.close();
    super::remote::finish(replicator, &state);
    if finished {
        remove_container(container.as_ref());
    }
    super::finished(result, &plan_wal, &key_var)
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
pub fn remove_container(container: Option<&crate::tools::container::Container>) {
    if let Some(c) = container
        && let Err(e) = c.remove()
    {
        super::say(&format!(
            "warning: could not remove the container {}: {e}",
            c.name()
        ));
    }
}
