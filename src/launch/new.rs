//! `tinyagent run`: validated options -> a new log -> the loop.
use super::LaunchError;
use super::parts::{
    absolute, absolute_new, check_run_dir, exec_env, home, hook_settings, key_var, process_dir,
    protected_for, provider_for, resolve_engine, start_mcp, store_options, test_seams, tool_set,
};
use super::request::RunArgs;
use crate::agent::{Agent, AgentParts, prompt};
use crate::config::{
    ApprovalSettings, Config, ContainerSettings, DEFAULT_KEEP_RECENT, DEFAULT_SNAPSHOT_EVERY,
    EnvKind, HOST_IMAGE, ModelSettings, ProviderKind, RunConfig,
};
use crate::event::{Event, Limits, RunStarted, SCHEMA_VERSION};
use crate::exec::ExecEnv;
use crate::report::Output;
use crate::signals::StopToken;
use crate::store::Store;
use crate::tools::{ProcessTable, ToolSet, ToolSetOptions};
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
    /// The local config, read once.
    pub file: Config,
}

pub(super) fn new_run_id() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let compact: String = now.chars().filter(|c| c.is_ascii_digit()).collect();
    format!("r{}-{:04x}", compact, fastrand::u16(..))
}

/// Stage 1: flags over the config file over the defaults, validated.
pub fn resolve(args: &RunArgs, file: &Config) -> Result<RunConfig, LaunchError> {
    let m = &file.model;
    let provider = match args.provider.provider {
        Some(p) => p,
        None => m.provider()?,
    };
    let script = match (provider, args.script.clone().or(m.script.clone())) {
        (ProviderKind::Script, None) => {
            return Err(LaunchError::refused(
                "provider script needs --script <FILE>",
            ));
        }
        (_, Some(s)) => Some(absolute(&s)?),
        (_, None) => None,
    };
    let workspace = absolute(&args.cwd.clone().unwrap_or_else(|| PathBuf::from(".")))?;
    if !workspace.is_dir() {
        return Err(LaunchError::refused(format!(
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
    let listed_name = name.clone();
    // Given, else known, else what a local server says of itself.
    let context_window = args
        .context_window
        .or(m.context_window)
        .or_else(|| crate::config::prices::context_window(provider, &listed_name))
        .or_else(|| {
            base_url
                .as_deref()
                .and_then(crate::model::server_context_window)
        });
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
                .or(listed.map(|p| p.input))
                .unwrap_or(0.0),
            price_out: args
                .price_out
                .or(m.price_out)
                .or(listed.map(|p| p.output))
                .unwrap_or(0.0),
            price_cached_in: args
                .price_cached_in
                .or(m.price_cached_in)
                .or(listed.map(|p| p.cached_input)),
            price_cache_write: args
                .price_cache_write
                .or(m.price_cache_write)
                .or(listed.map(|p| p.cache_write)),
            price_known: listed.is_some()
                || args.price_in.or(m.price_in).is_some()
                || args.price_out.or(m.price_out).is_some(),
            script,
            stream: args.stream || m.stream.unwrap_or(false),
            max_output_tokens: args
                .max_output_tokens
                .or(m.max_output_tokens)
                .or_else(|| crate::config::prices::max_output(provider, &listed_name)),
            reasoning_effort: match args.reasoning_effort {
                Some(e) => Some(e),
                None => m
                    .reasoning_effort
                    .as_deref()
                    .map(|v| crate::config::parse_enum("model.reasoning_effort", v))
                    .transpose()?,
            },
            thinking_budget: args.thinking_budget.or(m.thinking_budget),
            context_window,
            max_retries: m.max_retries.unwrap_or(5),
            retry_base: ms(m.retry_base_ms, Duration::from_millis(500)),
            request_timeout: Duration::from_secs(
                args.timeout.or(m.request_timeout_s).unwrap_or(300),
            ),
        },
        workspace,
        plan_enabled: args.plan || file.plan.enabled.unwrap_or(false),
        plan_pin: file.plan.pin.unwrap_or_default(),
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
            .unwrap_or_else(|| {
                crate::config::compact_at_for(
                    context_window.unwrap_or(crate::config::DEFAULT_CONTEXT_WINDOW),
                )
            }),
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

/// Stage 2: a new run's identity, log path and first record. The MCP
/// servers are started last, once every other check has passed.
pub fn new_run(
    args: &RunArgs,
    config: RunConfig,
    file: Config,
    stop: &StopToken,
) -> Result<RunPlan, LaunchError> {
    let mcp = &file.mcp;
    if args.task.trim().is_empty() && !config.chat {
        return Err(LaunchError::refused("the task is empty"));
    }
    let run_id = new_run_id();
    let wal = match &args.wal {
        Some(w) => w.clone(),
        None => home()?.join("runs").join(format!("{run_id}.wal")),
    };
    if wal.exists() {
        return Err(LaunchError::refused(format!(
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
        stop,
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
    if let Some(why) = config.cost_refusal() {
        return Err(LaunchError::refused(why));
    }
    let mut system_prompt =
        prompt::system_prompt(&workspace, config.read_only, config.plan_enabled);
    system_prompt.push_str(&instructions.prompt_section());
    let mut settings = config.settings();
    settings.instructions = instructions.paths();
    if config.env == EnvKind::Container {
        settings.container = Some(crate::exec::container::container_name(&run_id));
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
        file,
    })
}

/// Turns flags plus config into a validated plan. No file is written.
pub fn plan_run(args: &RunArgs, chat: bool, stop: &StopToken) -> Result<RunPlan, LaunchError> {
    let file = Config::load(args.config.as_deref())?;
    super::parts::configure_checkpoints(&file);
    let mut config = resolve(args, &file)?;
    config.chat = chat;
    new_run(args, config, file, stop)
}

/// The checkpoint of the workspace a new run starts in (`None`, with a
/// warning, when none can be made: no usable git, a failing store).
fn starting_checkpoint(
    wal: &Path,
    config: &RunConfig,
    protected: &crate::exec::protected::Protected,
) -> Option<Event> {
    let warn = |e: &dyn std::fmt::Display| {
        crate::report::err_line(&format!(
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

/// A new run (`tinyagent run`, or a new `tinyagent chat`: no task, the
/// chat's prompt) planned and opened: every check first, then its log
/// created with its first records, its environment and its agent (which
/// asks its approval questions through `asker`). The caller drives it.
pub fn open(
    args: &RunArgs,
    chat: bool,
    stop: &StopToken,
    asker: Box<dyn crate::agent::approval::Asker>,
) -> Result<super::Running, LaunchError> {
    let plan = plan_run(args, chat, stop)?;
    let provider = provider_for(&plan.config)?;
    for note in &plan.notes {
        crate::report::err_line(note);
    }
    if let Some(warning) = super::workspace::wide_warning(&plan.config.workspace) {
        crate::report::err_line(&warning);
    }
    // The person chose this server: a resume may send the key there.
    if let (Some(url), Ok(home)) = (&plan.config.model.base_url, home())
        && let Err(e) = super::endpoints::remember(&home, url)
    {
        crate::report::err_line(&format!("warning: {e}; a resume will ask for --base-url"));
    }
    // The person chose this workspace: a resume, fork or restore of the
    // run from elsewhere may take it from the log. Recorded before the log
    // exists, so a run killed at any point is resumed from anywhere.
    super::workspace::remember(&plan.started.run_id, &plan.config.workspace);
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
    let replicator = super::bucket::start_for_run(
        args.replicate.as_deref(),
        args.replicate_mode.as_deref(),
        &plan.file,
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
            return Err(LaunchError::from(e).map_message(|m| {
                format!("{m} (the run did not start; the empty log was removed)")
            }));
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
        stop: stop.clone(),
        asker,
    })
    .map_err(LaunchError::from)?;
    for (seq, record) in &records {
        agent.output().record(*seq, record);
    }
    // After run.started's line, which names the workspace, the approval
    // mode and the environment: the first a person reads.
    crate::report::err_line(&format!("log: {}", plan.wal.display()));
    Ok(super::Running {
        agent,
        replicator,
        container,
        wal: plan_wal,
        key_var,
    })
}
