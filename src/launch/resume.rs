//! `tinyagent resume`: open the log under its lock, cut a torn tail, load the
//! newest snapshot, replay the rest, close every open end, carry on.

use super::LaunchError;
use super::bucket::is_bucket;
use super::new::{exec_env, hook_settings, process_dir, provider_for, store_options, test_seams};
use super::request::ResumeArgs;
use crate::agent::resume::StopInfo;
use crate::agent::{Agent, AgentParts};
use crate::config::{Config, EnvKind, HookSettings, RunConfig};
use crate::event::{Limits, RunStarted, RunStatus};
use crate::mcp::McpServers;
use crate::report::Output;
use crate::session::Status;
use crate::store::{OpenReport, Store, StoreOptions};
use crate::tools::{ProcessTable, ToolSet, ToolSetOptions};
use std::path::{Path, PathBuf};

/// A whole-file trajectory rather than a log?
fn is_trajectory(path: &Path) -> bool {
    if path.extension().is_some_and(|e| e == "json") {
        return true;
    }
    // Sniff: a log's first line ends with its crc member.
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    let mut r = std::io::BufReader::new(f);
    use std::io::BufRead;
    if r.read_until(b'\n', &mut first).is_err() {
        return false;
    }
    let line = first.strip_suffix(b"\n").unwrap_or(&first);
    // A log's first line starts with its seq, even when it is torn.
    first.first() == Some(&b'{')
        && !first.starts_with(b"{\"seq\":")
        && tinyagent_store::wal::frame::check_crc(line).is_err()
}

/// A trajectory read into memory, not yet written as a log.
pub struct Trajectory {
    pub json: PathBuf,
    pub wal: PathBuf,
    pub imported: crate::trajectory::Imported,
}

/// Reads a trajectory JSON for import into `<path>.wal` (refused if that
/// exists). Nothing is written.
pub fn read_trajectory(json: &Path, wal: &Path) -> Result<Trajectory, LaunchError> {
    if wal.exists() {
        return Err(LaunchError::refused(format!(
            "{} exists: refusing to overwrite it (resume that log instead)",
            wal.display()
        )));
    }
    let text = std::fs::read_to_string(json)
        .map_err(|e| LaunchError::refused(format!("cannot read {}: {e}", json.display())))?;
    let mut imported = crate::trajectory::import(&text)
        .map_err(|e| LaunchError::refused(format!("{}: {e}", json.display())))?;
    // A file without a tool signature was written for the tool set of its
    // settings: record the one this tinyagent offers for them.
    for ev in &mut imported.events {
        if let crate::event::Event::RunStarted(r) = ev
            && r.tool_signature.is_empty()
        {
            let tools = ToolSet::new(ToolSetOptions {
                read_only: r.read_only,
                plan: r.plan_enabled,
            });
            r.tool_signature = tools.signature();
            r.tools = tools.names();
        }
    }
    Ok(Trajectory {
        json: json.to_path_buf(),
        wal: wal.to_path_buf(),
        imported,
    })
}

impl Trajectory {
    /// The run's first record.
    fn run_started(&self) -> Option<&RunStarted> {
        match self.imported.events.first() {
            Some(crate::event::Event::RunStarted(r)) => Some(r),
            _ => None,
        }
    }

    /// Writes the log. Returns the v1 free-text process summary. A
    /// half-written log is removed when the import fails, so a retry is not
    /// refused.
    pub fn write(self) -> Result<Option<String>, LaunchError> {
        let wal = self.wal;
        let mut store = Store::create(&wal, StoreOptions::default())?;
        let written = self
            .imported
            .events
            .into_iter()
            .try_for_each(|ev| store.append(ev).map(drop))
            .and_then(|()| store.close());
        if let Err(e) = written {
            // Nothing depends on a half-imported log: remove it so a retry works.
            let _ = std::fs::remove_file(&wal);
            return Err(e.into());
        }
        Ok(self.imported.background)
    }
}

/// Imports a trajectory JSON into `<path>.wal` (refused if that exists).
/// Returns the v1 free-text process summary.
pub fn import_trajectory(json: &Path, wal: &Path) -> Result<Option<String>, LaunchError> {
    read_trajectory(json, wal)?.write()
}

/// The log's first record, read without replaying anything (it carries the
/// run's snapshot interval, needed before the store is opened).
fn run_started(wal: &Path) -> Option<RunStarted> {
    use std::io::BufRead;
    let mut first = Vec::new();
    std::io::BufReader::new(std::fs::File::open(wal).ok()?)
        .read_until(b'\n', &mut first)
        .ok()?;
    let frame: tinyagent_store::wal::frame::Frame<crate::event::Event> =
        tinyagent_store::wal::frame::decode(first.strip_suffix(b"\n")?).ok()?;
    match frame.event {
        crate::event::Event::RunStarted(r) => Some(r),
        _ => None,
    }
}

fn wal_for_json(json: &Path) -> PathBuf {
    let mut s = json.as_os_str().to_owned();
    s.push(".wal");
    PathBuf::from(s)
}

fn mtime(path: &Path) -> Option<String> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(humantime::format_rfc3339_seconds(t).to_string())
}

/// What `resume` was pointed at.
enum Source {
    Log(PathBuf),
    Trajectory(Trajectory),
}

/// Stage 1: what to resume (a trajectory is read, not yet imported) and its
/// `run.started`. Nothing is written.
fn locate(args: &ResumeArgs) -> Result<(Source, RunStarted), LaunchError> {
    let path = args.log();
    if is_trajectory(path) {
        let t = read_trajectory(path, &wal_for_json(path))?;
        let run = t
            .run_started()
            .cloned()
            .ok_or_else(|| LaunchError::refused(format!("{}: no run.started", path.display())))?;
        return Ok((Source::Trajectory(t), run));
    }
    let wal = path.to_path_buf();
    if !wal.exists() {
        return Err(LaunchError::refused(format!(
            "{}: no such log",
            wal.display()
        )));
    }
    let run = run_started(&wal).ok_or_else(|| {
        LaunchError::refused(format!(
            "{}: the log holds no complete run.started record, so the run never started \
             (nothing ran); remove the file and start over with `tinyagent run`",
            wal.display()
        ))
    })?;
    Ok((Source::Log(wal), run))
}

/// A trajectory comes from elsewhere: the workspace it names is not taken on
/// its word, `--cwd` says where the resumed run works (and is recorded in
/// the imported `run.started`). One that names no workspace (schema v1 has
/// no member for it) works where `run` would: `--cwd`, else the current
/// directory. A log's workspace is its own; `--cwd` may only repeat it.
fn confirm_workspace(
    source: &mut Source,
    first: &mut RunStarted,
    args: &ResumeArgs,
) -> Result<(), LaunchError> {
    let given = match &args.cwd {
        Some(dir) => Some(
            std::fs::canonicalize(dir)
                .map_err(|e| LaunchError::refused(format!("--cwd {}: {e}", dir.display())))?,
        ),
        None => None,
    };
    if let Some(dir) = &given
        && !dir.is_dir()
    {
        return Err(LaunchError::refused(format!(
            "--cwd {} is not a directory",
            dir.display()
        )));
    }
    match source {
        Source::Trajectory(t) => {
            let dir = match given {
                Some(dir) => dir,
                None if first.settings.cwd.is_empty() => std::env::current_dir()
                    .map_err(|e| LaunchError::refused(format!("no current directory: {e}")))?,
                None => {
                    return Err(LaunchError::refused(format!(
                        "{}: a trajectory from elsewhere names its workspace ({}), which is not \
                         taken on its word; say where the resumed run works with --cwd DIR",
                        t.json.display(),
                        first.settings.cwd
                    )));
                }
            };
            let cwd = dir.display().to_string();
            first.settings.cwd.clone_from(&cwd);
            if let Some(crate::event::Event::RunStarted(r)) = t.imported.events.first_mut() {
                r.settings.cwd = cwd;
            }
        }
        Source::Log(_) => {
            if let Some(dir) = given
                && std::fs::canonicalize(&first.settings.cwd).ok().as_ref() != Some(&dir)
            {
                return Err(LaunchError::refused(format!(
                    "--cwd {} is not the log's workspace ({}); a log resumes where it ran",
                    dir.display(),
                    first.settings.cwd
                )));
            }
        }
    }
    Ok(())
}

/// The variable the log says holds the run's API key, if it can be read
/// (see [`super::secrets::named_key_vars`]).
pub(super) fn recorded_key_env(args: &ResumeArgs) -> Option<String> {
    // A name that does not look like a key variable is refused later
    // (`config_for`); it is not taken out of the environment here.
    locate(args)
        .ok()?
        .1
        .settings
        .api_key_env
        .filter(|v| crate::config::plausible_key_var(v))
}

/// Every variable the run has named as holding its API key: `run.started`'s
/// and each earlier `resume`'s (`--api-key-env` given then). Names only,
/// and only names that look like a key variable: a log can make tinyagent
/// keep more variables from its children, nothing else. The log is read a
/// line at a time and only `resume` lines are parsed.
pub(super) fn recorded_key_envs(args: &ResumeArgs) -> Vec<String> {
    use std::io::BufRead;
    let mut names: Vec<String> = recorded_key_env(args).into_iter().collect();
    let path = args.log();
    if is_trajectory(path) {
        return names;
    }
    let Ok(file) = std::fs::File::open(path) else {
        return names;
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let needle = memchr::memmem::Finder::new(b"\"type\":\"resume\"");
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if needle.find(&line).is_none() {
            continue;
        }
        let Ok(rec) = serde_json::from_slice::<serde_json::Value>(&line) else {
            continue;
        };
        if rec["type"] == "resume"
            && let Some(var) = rec["data"]["api_key_env"].as_str()
            && crate::config::plausible_key_var(var)
            && !names.iter().any(|n| n == var)
        {
            names.push(var.to_string());
        }
    }
    names
}

/// Opens the log under its lock. A run killed a moment ago may still be
/// letting go of it (a command it forked and held before exec shares the
/// lock until the kernel has killed it too), so a lock is waited for up to a
/// second before the log counts as in use by another process.
fn open_when_free(
    wal: &Path,
    options: StoreOptions,
) -> Result<(Store, OpenReport), crate::store::StoreError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match Store::open(wal, options.clone()) {
            Err(crate::store::StoreError::Locked { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            other => return other,
        }
    }
}

/// The flags that need no log to check.
fn check_flags(args: &ResumeArgs) -> Result<(), LaunchError> {
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
fn config_for(
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
    if let Some(url) = &flags.base_url {
        m.base_url = Some(url.clone());
    } else if let Some(url) = m.base_url.as_deref()
        && local.model.base_url.as_deref() != Some(url)
        && m.provider.base_url_from_env().as_deref() != Some(url)
        && super::new::api_key(m.provider, m.api_key_env.as_deref()).is_some()
    {
        // A key would go to a server only the log names.
        let var = m
            .api_key_env
            .as_deref()
            .unwrap_or(m.provider.default_key_env());
        super::endpoints::check_recorded(&super::new::home()?, url, var)?;
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
    config.validate()?;
    config.hooks.check_commands(&config.workspace)?;
    super::new::resolve_engine(&mut config)?;
    Ok(config)
}

/// The hooks a resumed run uses: the local config's. Every hook the log
/// recorded must be configured the same locally, else the resume is refused
/// (naming them) unless `no_hooks`, which runs none.
fn local_hooks(
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
fn tools_for(run: &RunStarted, mcp: &McpServers) -> Result<ToolSet, LaunchError> {
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
    let tools = super::new::tool_set(opts, mcp)?;
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
fn new_limits(current: &Limits, args: &ResumeArgs) -> Option<Limits> {
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
fn may_continue(state: &crate::session::State, args: &ResumeArgs) -> Result<(), (bool, String)> {
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

fn report_open(out: &Output, report: &OpenReport) {
    for w in &report.warnings {
        out.warn(w);
    }
    if let Some((torn, kept)) = &report.torn_tail {
        out.warn(&format!(
            "cut a torn last record ({} bytes at offset {}); the bytes are kept in {}",
            torn.bytes,
            torn.offset,
            kept.display()
        ));
    }
}

/// The checks a resume makes of a run, made of one fetched from a bucket
/// before it is taken over: whether it may be resumed here (a chat's log
/// needs a terminal), its config with the local one (hooks, environment,
/// endpoint, key variable), and its tool set with the local MCP servers. A
/// refusal leaves the bucket and this machine as they were.
fn check_staged(
    staged: &super::bucket::Staged,
    args: &ResumeArgs,
    chat: bool,
    local: &Config,
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
    let protected = super::new::protected_for(&staged.wal, args.config.as_deref(), &config);
    let mcp = super::new::start_mcp(&local.mcp, &config, &protected)?;
    tools_for(&first, &mcp)?;
    Ok(())
}

/// `tinyagent resume`, or `chat --resume` (`chat`: the log must be a chat's).
/// A chat's log goes back to its prompt (after finishing a turn a stop cut
/// short), on a terminal only.
pub fn open(args: &ResumeArgs, chat: bool) -> Result<super::Opened, LaunchError> {
    // Every check of flags, config and tool set comes before the log is
    // locked, a torn tail cut or a trajectory imported.
    check_flags(args)?;
    // The local config, read once: hooks, environment, MCP servers and
    // replication come from it, never from the log.
    let local = Config::load(args.config.as_deref())?;
    // A run in a bucket is fetched, checked and taken over first; from then
    // on it is resumed like a local log, in the workspace it was restored to.
    let (fetched, local_args);
    let args = if is_bucket(args.log()) {
        let spec = args.log().to_string_lossy().to_string();
        let wal = match super::bucket::stage_for_resume(args, &spec, &local)? {
            super::bucket::Stage::Fetched(staged) => {
                check_staged(&staged, args, chat, &local)?;
                let f = staged.take_over()?;
                let wal = f.wal.clone();
                fetched = Some(f);
                wal
            }
            super::bucket::Stage::Here(wal) => {
                fetched = None;
                wal
            }
        };
        local_args = ResumeArgs {
            path: Some(wal),
            session: super::request::SessionFlags {
                cwd: None,
                ..args.session.clone()
            },
            ..args.clone()
        };
        &local_args
    } else {
        fetched = None;
        args
    };
    let (mut source, mut first) = locate(args)?;
    // The log's `.d` (restore intent, replication sidecar, checkpoint
    // store) is this user's own, or nothing is done.
    super::new::check_run_dir(match &source {
        Source::Log(wal) => wal,
        Source::Trajectory(t) => &t.wal,
    })?;
    // A replicated log says where its bucket is, and where the run works
    // when a resume from the bucket put it somewhere else.
    let sidecar = match (&fetched, &source) {
        (None, Source::Log(wal)) => super::bucket::read_sidecar(wal, &first.run_id)?,
        _ => None,
    };
    let moved_to = fetched
        .as_ref()
        .map(|f| f.workspace.display().to_string())
        .or_else(|| sidecar.as_ref().and_then(|s| s.workspace.clone()));
    if let Some(cwd) = &moved_to {
        first.settings.cwd.clone_from(cwd);
    }
    if chat && !first.settings.chat {
        return Err(LaunchError::refused(format!(
            "{}: not a chat's log; continue it with `tinyagent resume`",
            args.log().display()
        )));
    }
    if first.settings.chat {
        super::need_terminal("resuming a chat")?;
    }
    // With no MCP server on either side the tool set is known before the
    // workspace is: it is checked first.
    if first.mcp_tools.is_empty() && local.mcp.servers.values().all(|s| s.enabled == Some(false)) {
        tools_for(&first, &McpServers::default())?;
    }
    confirm_workspace(&mut source, &mut first, args)?;
    let config = config_for(&first, args, &local)?;
    // The servers run (in the workspace) from here until the run ends.
    let wal = match &source {
        Source::Log(wal) => wal,
        Source::Trajectory(t) => &t.wal,
    };
    let protected = super::new::protected_for(wal, args.config.as_deref(), &config);
    let mcp = super::new::start_mcp(&local.mcp, &config, &protected)?;
    let tools = tools_for(&first, &mcp)?;
    drop(mcp);
    let mut options = store_options(&config);
    options.seams = test_seams()?;
    let replicator = match (fetched, &sidecar, &source) {
        (Some(f), _, _) => Some(crate::replicate::Replicator::resume(f.taken, &f.wal)),
        (None, Some(sc), Source::Log(wal)) => Some(super::bucket::reattach(
            wal,
            sc,
            &first.run_id,
            args,
            &local,
        )?),
        _ => None,
    };
    options.on_sync = replicator.as_ref().map(crate::replicate::Replicator::hook);
    let (wal, untracked) = match source {
        Source::Log(wal) => (wal, None),
        Source::Trajectory(t) => {
            let (json, wal) = (t.json.clone(), t.wal.clone());
            let bg = t.write()?;
            crate::report::err_line(&format!(
                "imported {} into {}",
                json.display(),
                wal.display()
            ));
            (wal, bg)
        }
    };
    let stopped_at = mtime(&wal);
    let (store, report) = open_when_free(&wal, options)?;
    if let Some(r) = &replicator {
        r.catch_up(store.end()).map_err(LaunchError::failed)?;
    }
    // The record the checks were made of is the one the log holds (read
    // again under its lock).
    let mut run = store.state().run.clone().ok_or_else(|| {
        LaunchError::refused(format!(
            "{}: the log has no run.started record",
            wal.display()
        ))
    })?;
    if let Some(cwd) = &moved_to {
        run.settings.cwd.clone_from(cwd);
    }
    if run != first {
        return Err(LaunchError::refused(format!(
            "{}: the log's first record changed while it was being opened; nothing was \
             resumed",
            wal.display()
        )));
    }
    let stopped = crate::agent::resume::stop_leftovers(store.state(), None);
    let mut out = Output::new(args.json);
    out.set_color(args.color.on());
    report_open(&out, &report);
    if let Err((limit, why)) = may_continue(store.state(), args) {
        return Ok(super::Opened::NotContinued {
            limit,
            why: format!("{}: {why}", wal.display()),
        });
    }
    let signal = match (&store.state().status, &store.state().finished_reason) {
        (Status::Finished(RunStatus::Interrupted), reason) => {
            Some(reason.clone().unwrap_or_else(|| "a signal".into()))
        }
        _ => None,
    };
    let limits = new_limits(&store.state().limits, args);
    let provider = provider_for(&config)?;
    if args.max_cost.is_some() {
        let mut limited = config.clone();
        limited.limits.max_cost_usd = args.max_cost;
        if let Some(w) = limited.cost_warning() {
            crate::report::err_line(&w);
        }
    }
    let key_var = super::new::key_var(&config).to_string();
    if let (Some(url), Ok(home)) = (&args.provider.base_url, super::new::home())
        && let Err(e) = super::endpoints::remember(&home, url)
    {
        crate::report::err_line(&format!("warning: {e}"));
    }
    let protected = super::new::protected_for(&wal, args.config.as_deref(), &config);
    let env = exec_env(&config, &protected, &run.run_id, &wal)?;
    // Resumed elsewhere (the local config asked for the sandbox), the
    // run's container still goes when the run finishes.
    let container = env
        .container()
        .cloned()
        .or_else(|| crate::agent::resume::recorded_container(store.state()));
    crate::report::err_line(&format!("log: {}", wal.display()));
    // A `fork --restore` a kill cut short is finished before anything else.
    if let Some(intent) = crate::checkpoint::restore::read_intent(&wal)
        .map_err(|e| super::new::checkpoint_error("", &e))?
    {
        super::fork::finish_restore(&wal, &wal, &intent)?;
    }
    let processes = ProcessTable::new(process_dir(&wal));
    processes.continue_after(store.state().processes.keys().map(String::as_str));
    let mut agent = Agent::new(AgentParts {
        config,
        protected,
        store,
        tools,
        provider,
        env,
        processes,
        out,
    })?;
    agent.recover(StopInfo {
        stopped_at,
        torn_bytes: report.torn_tail.as_ref().map(|(t, _)| t.bytes),
        untracked_processes: untracked,
        limits,
        message: args.message.clone(),
        signal,
        stopped,
    })?;
    Ok(super::Opened::Running(Box::new(super::Running {
        agent,
        replicator,
        container,
        wal,
        key_var,
    })))
}
