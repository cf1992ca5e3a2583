//! The checks a resume makes before anything is written: its flags, the
//! config a log's run gets on this machine (the log's settings under the
//! local config's hooks, environment and approvals), the tool set, new
//! limits, whether a finished run goes on, and the same checks of a run
//! staged from a bucket.

use super::LaunchError;
use super::parts::hook_settings;
use super::request::ResumeArgs;
use crate::config::{Config, EnvKind, HookSettings, RunConfig};
use crate::event::{Limits, RunStarted, RunStatus};
use crate::mcp::McpServers;
use crate::session::Status;
use crate::tools::{ToolSet, ToolSetOptions};

/// The flags that need no log to check.
pub(super) fn check_flags(args: &ResumeArgs) -> Result<(), LaunchError> {
    if args.max_cost.is_some_and(|c| !c.is_finite() || c < 0.0) {
        return Err(LaunchError::refused("--max-cost must be a number >= 0"));
    }
    if args.max_format_errors == Some(0) {
        return Err(LaunchError::refused(
            "--max-format-errors must be at least 1",
        ));
    }
    Ok(())
}

/// Stage 2: the run's config as `run.started` recorded it, with the
/// provider flags over it; validated like a new run's. What a log says can
/// never make a command run that the local config does not name, nor tools
/// run less confined than the log recorded: hooks come from the local config
/// only (a log naming hooks it lacks is refused unless `--no-hooks`), and
/// the environment is the more confined of the log's and the local one.
pub(super) fn config_for(
    run: &RunStarted,
    args: &ResumeArgs,
    local: &Config,
) -> Result<RunConfig, LaunchError> {
    let cwd = std::env::current_dir()
        .map_err(|e| LaunchError::failed(format!("no current directory: {e}")))?;
    let mut config = RunConfig::from_started(run, &cwd)?;
    let m = &mut config.model;
    let flags = &args.provider;
    if let Some(p) = flags.provider {
        m.provider = p;
    }
    if let Some(name) = &flags.model {
        m.name.clone_from(name);
    }
    if let Some(secs) = args.timeout {
        m.request_timeout = std::time::Duration::from_secs(secs);
    }
    // The run's reasoning settings hold unless a flag says otherwise (for
    // this resume; validated below like a new run's).
    if let Some(e) = args.reasoning_effort {
        m.reasoning_effort = Some(e);
    }
    if let Some(b) = args.thinking_budget {
        m.thinking_budget = Some(b);
    }
    if let Some(url) = &flags.base_url {
        m.base_url = Some(url.clone());
    } else if let Some(url) = m.base_url.as_deref()
        && local.model.base_url.as_deref() != Some(url)
        && m.provider.base_url_from_env().as_deref() != Some(url)
        && super::parts::api_key(m.provider, m.api_key_env.as_deref()).is_some()
    {
        // A key would go to a server only the log names.
        let var = m
            .api_key_env
            .as_deref()
            .unwrap_or(m.provider.default_key_env());
        super::endpoints::check_recorded(&super::parts::home()?, url, var)?;
    }
    if let Some(var) = &flags.api_key_env {
        m.api_key_env = Some(var.clone());
    } else if let Some(var) = m.api_key_env.as_deref()
        && !crate::config::plausible_key_var(var)
    {
        return Err(LaunchError::refused(format!(
            "the log names {var:?} as the variable holding the API key, which does not look \
             like one (it would be sent to the model server); give --api-key-env to choose"
        )));
    }
    config.hooks = local_hooks(&config.hooks, local, args.no_hooks)?;
    // A run that asked keeps asking; the local config or --approve may
    // start asking. The allow rules are the local config's only: a log's
    // word never lets a call run unasked.
    let asked = [
        config.approvals.mode,
        local.approvals.mode()?,
        args.approve.unwrap_or_default(),
    ];
    config.approvals.mode = asked
        .into_iter()
        .max_by_key(|m| *m == crate::config::ApproveMode::Mutating)
        .unwrap_or_default();
    config.approvals.allow = local.approvals.rules()?;
    if local.env.kind()? == EnvKind::Sandbox {
        config.env = EnvKind::Sandbox;
    }
    config.sockets.clone_from(&local.env.sockets);
    if config.env == EnvKind::Sandbox && local.env.network == Some(false) {
        config.network = false;
    }
    if config.env == EnvKind::Container {
        // The log's engine and image unless the local config names its own.
        if let Some(e) = local.env.engine()? {
            config.container.engine = Some(e);
        }
        if let Some(image) = &local.env.image {
            config.container.image.clone_from(image);
        }
        if local.env.network == Some(false) {
            config.network = false;
        }
    }
    learn_window(&mut config, run.settings.compact_at);
    config.validate()?;
    config.hooks.check_commands(&config.workspace)?;
    super::parts::resolve_engine(&mut config)?;
    Ok(config)
}

/// A log that recorded no context window gets one as a new run would: the
/// built-in table, else what the server says of itself (llama.cpp `GET
/// /props`; asked again on every resume, never recorded). The compaction
/// threshold follows it when `recorded` (the log's `compact_at`) was the
/// default of a run with no window: 80% of 128,000 tokens, or the 96,000 of
/// a log from before windows. A threshold the person chose is kept, and
/// `--compact-at` or an earlier resume's still goes over both.
fn learn_window(config: &mut RunConfig, recorded: Option<u64>) {
    if config.model.context_window.is_some() {
        return;
    }
    let m = &config.model;
    let Some(window) = crate::config::prices::context_window(m.provider, &m.name).or_else(|| {
        m.base_url
            .as_deref()
            .and_then(crate::model::server_context_window)
    }) else {
        return;
    };
    config.model.context_window = Some(window);
    if follows_default(recorded) {
        config.compact_at = crate::config::compact_at_for(window);
    }
}

/// Whether a recorded compaction threshold is the one a run with no known
/// context window got by default.
fn follows_default(recorded: Option<u64>) -> bool {
    recorded.is_none_or(|n| {
        n == crate::config::DEFAULT_COMPACT_AT
            || n == crate::config::compact_at_for(crate::config::DEFAULT_CONTEXT_WINDOW)
    })
}

/// The hooks a resumed run uses: the local config's. Every hook the log
/// recorded must be configured the same locally, else the resume is refused
/// (naming them) unless `no_hooks`, which runs none.
pub(super) fn local_hooks(
    recorded: &HookSettings,
    local: &Config,
    no_hooks: bool,
) -> Result<HookSettings, LaunchError> {
    let mut hooks = hook_settings(local)?;
    if no_hooks {
        hooks.pre_tool = None;
        hooks.post_tool = None;
        return Ok(hooks);
    }
    let mut missing = Vec::new();
    for (key, was, is) in [
        ("hooks.pre_tool", &recorded.pre_tool, &hooks.pre_tool),
        ("hooks.post_tool", &recorded.post_tool, &hooks.post_tool),
    ] {
        if let Some(cmd) = was
            && is.as_ref() != Some(cmd)
        {
            missing.push(format!("{key} = {cmd:?}"));
        }
    }
    if !missing.is_empty() {
        return Err(LaunchError::refused(format!(
            "the log names hooks that the local config does not: {}; configure them in \
             tinyagent.toml to keep them, or resume with --no-hooks to go on without",
            missing.join(", ")
        )));
    }
    Ok(hooks)
}

/// Stage 3: the tool set, which must be the one the log was written with:
/// the built-in tools for its settings and the tools of the MCP servers
/// (started again from the local config), which must be those it recorded.
pub(super) fn tools_for(run: &RunStarted, mcp: &McpServers) -> Result<ToolSet, LaunchError> {
    let opts = ToolSetOptions {
        read_only: run.read_only,
        plan: run.plan_enabled,
    };
    let changed = crate::mcp::differences(&run.mcp_tools, &mcp.records(opts));
    if !changed.is_empty() {
        return Err(LaunchError::refused(format!(
            "tool set mismatch: the MCP tools differ from those the log was written with: {}",
            changed.join("; ")
        )));
    }
    let tools = super::parts::tool_set(opts, mcp)?;
    if tools.signature() != run.tool_signature {
        return Err(LaunchError::refused(format!(
            "tool set mismatch: the log was written with tool signature {} (plan {}, {}), this tinyagent offers {} for those settings",
            run.tool_signature,
            if run.plan_enabled { "on" } else { "off" },
            if run.read_only {
                "read-only"
            } else {
                "read-write"
            },
            tools.signature()
        )));
    }
    Ok(tools)
}

/// Stage 4: the limits given on the command line, over the log's.
pub(super) fn new_limits(current: &Limits, args: &ResumeArgs) -> Option<Limits> {
    if args.max_steps.is_none() && args.max_cost.is_none() && args.max_format_errors.is_none() {
        return None;
    }
    let mut l = current.clone();
    if let Some(n) = args.max_steps {
        l.max_steps = Some(n);
    }
    if let Some(c) = args.max_cost {
        l.max_cost_usd = Some(c);
    }
    if let Some(n) = args.max_format_errors {
        l.max_format_errors = n;
    }
    Some(l)
}

/// Stage 5: whether a finished run goes on. `Err` says of one that does not
/// (nothing is appended then) whether a limit stopped it, and why.
pub(super) fn may_continue(
    state: &crate::session::State,
    args: &ResumeArgs,
) -> Result<(), (bool, String)> {
    let Status::Finished(status) = state.status else {
        return Ok(());
    };
    let l = &state.limits;
    let (raised, flag, at) = match status {
        // A chat that ended goes back to its prompt.
        RunStatus::Completed if args.message.is_none() && !state.is_chat() => {
            return Err((
                false,
                format!(
                    "the run already finished (completed, {} steps); use --message to continue it",
                    state.step
                ),
            ));
        }
        RunStatus::MaxSteps => (
            args.max_steps.is_some_and(|n| n > state.step),
            "--max-steps",
            format!("its step limit ({} steps)", state.step),
        ),
        RunStatus::MaxCost => (
            args.max_cost.is_some_and(|c| c > state.cost_usd),
            "--max-cost",
            format!("its cost limit (${:.4} spent)", state.cost_usd),
        ),
        RunStatus::FormatErrors => (
            args.message.is_some()
                || args
                    .max_format_errors
                    .is_some_and(|n| n > state.format_errors),
            "--max-format-errors (or give --message)",
            format!(
                "{} malformed calls in a row (limit {})",
                state.format_errors, l.max_format_errors
            ),
        ),
        _ => return Ok(()),
    };
    if raised {
        Ok(())
    } else {
        Err((
            true,
            format!("the run stopped at {at}; resume it with a higher {flag} to continue"),
        ))
    }
}

/// The checks a resume makes of a run, made of one fetched from a bucket
/// before it is taken over: whether it may be resumed here (a chat's log
/// needs a terminal), its config with the local one (hooks, environment,
/// endpoint, key variable), and its tool set with the local MCP servers. A
/// refusal leaves the bucket and this machine as they were.
pub(super) fn check_staged(
    staged: &super::bucket::Staged,
    args: &ResumeArgs,
    chat: bool,
    local: &Config,
    stop: &crate::signals::StopToken,
) -> Result<(), LaunchError> {
    let mut first = staged.run.clone();
    first.settings.cwd = staged.workspace.display().to_string();
    if chat && !first.settings.chat {
        return Err(LaunchError::refused(format!(
            "{}: not a chat's log; continue it with `tinyagent resume`",
            args.log().display()
        )));
    }
    if first.settings.chat {
        super::need_terminal("resuming a chat")?;
    }
    let unplaced = ResumeArgs {
        session: super::request::SessionFlags {
            cwd: None,
            ..args.session.clone()
        },
        ..args.clone()
    };
    let config = config_for(&first, &unplaced, local)?;
    let protected = super::parts::protected_for(&staged.wal, args.config.as_deref(), &config);
    let mcp = super::parts::start_mcp(&local.mcp, &config, &protected, stop)?;
    tools_for(&first, &mcp)?;
    Ok(())
}

#[cfg(test)]
mod window_tests {
    use super::follows_default;

    #[test]
    fn only_a_default_threshold_follows_a_learned_window() {
        assert!(follows_default(None));
        assert!(follows_default(Some(96_000)));
        assert!(follows_default(Some(102_400)));
        assert!(!follows_default(Some(5_000)));
        assert!(!follows_default(Some(102_401)));
    }
}
