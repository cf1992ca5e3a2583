//! `tinyagent resume`: open the log under its lock, cut a torn tail, load the
//! newest snapshot, replay the rest, close every open end, carry on.

use super::LaunchError;
use super::bucket::is_bucket;
use super::checks::{check_flags, check_staged, config_for, may_continue, new_limits, tools_for};
use super::parts::{exec_env, process_dir, provider_for, store_options, test_seams};
use super::request::ResumeArgs;
use super::trajectory::{Trajectory, is_trajectory, read_trajectory, wal_for_json};
use crate::agent::resume::StopInfo;
use crate::agent::{Agent, AgentParts};
use crate::config::Config;
use crate::event::{RunStarted, RunStatus};
use crate::mcp::McpServers;
use crate::report::Output;
use crate::session::Status;
use crate::store::{OpenReport, Store, StoreOptions};
use crate::tools::ProcessTable;
use std::path::{Path, PathBuf};

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

/// Where the resumed run works, by the one rule (`super::workspace`). A
/// trajectory comes from elsewhere: the workspace it names is not taken on
/// its word, `--cwd` says where the resumed run works (and is recorded in
/// the imported `run.started`). One that names no workspace (schema v1 has
/// no member for it) works where `run` would: `--cwd`, else the current
/// directory. A log's workspace is its own (or its sidecar's, resumed from
/// a bucket), vouched for by the person or by this machine's record of the
/// run; `--cwd` may only repeat it.
fn confirm_workspace(
    source: &mut Source,
    first: &mut RunStarted,
    args: &ResumeArgs,
) -> Result<PathBuf, LaunchError> {
    use super::workspace::{Named, resolve};
    match source {
        Source::Trajectory(t) => {
            if args.cwd.is_none() && !first.settings.cwd.is_empty() {
                return Err(LaunchError::refused(format!(
                    "{}: a trajectory from elsewhere names its workspace ({}), which is not \
                     taken on its word; say where the resumed run works with --cwd DIR",
                    t.json.display(),
                    first.settings.cwd
                )));
            }
            let dir = resolve(Named::Here, args.cwd.as_deref())?;
            let cwd = dir.display().to_string();
            first.settings.cwd.clone_from(&cwd);
            if let Some(crate::event::Event::RunStarted(r)) = t.imported.events.first_mut() {
                r.settings.cwd = cwd;
            }
            Ok(dir)
        }
        Source::Log(wal) => resolve(
            Named::Log {
                wal,
                run_id: &first.run_id,
                recorded: &first.settings.cwd,
            },
            args.cwd.as_deref(),
        ),
    }
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
/// keep more variables from its children, nothing else. The log is read by
/// the store's reader, in bounded memory whatever its lines.
pub(super) fn recorded_key_envs(args: &ResumeArgs) -> Vec<String> {
    let mut names: Vec<String> = recorded_key_env(args).into_iter().collect();
    let path = args.log();
    if is_trajectory(path) {
        return names;
    }
    // The store's own reader: linear, bounded memory on any input.
    let _ = tinyagent_store::wal::reader::scan::<crate::event::Event>(path, None, |f, _| {
        if let crate::event::Event::Resume(r) = &f.event
            && let Some(var) = r.api_key_env.as_deref()
            && crate::config::plausible_key_var(var)
            && !names.iter().any(|n| n == var)
        {
            names.push(var.to_string());
        }
    });
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

/// `tinyagent resume`, or `chat --resume` (`chat`: the log must be a chat's).
/// A chat's log goes back to its prompt (after finishing a turn a stop cut
/// short), on a terminal only.
pub fn open(
    args: &ResumeArgs,
    chat: bool,
    stop: &crate::signals::StopToken,
    asker: Box<dyn crate::agent::approval::Asker>,
) -> Result<super::Opened, LaunchError> {
    // Every check of flags, config and tool set comes before the log is
    // locked, a torn tail cut or a trajectory imported.
    check_flags(args)?;
    // The local config, read once: hooks, environment, MCP servers and
    // replication come from it, never from the log.
    let local = Config::load(args.config.as_deref())?;
    super::parts::configure_checkpoints(&local);
    // A run in a bucket is fetched, checked and taken over first; from then
    // on it is resumed like a local log, in the workspace it was restored to.
    let (fetched, local_args);
    let args = if is_bucket(args.log()) {
        let spec = args.log().to_string_lossy().to_string();
        let wal = match super::bucket::stage_for_resume(args, &spec, &local)? {
            super::bucket::Stage::Fetched(staged) => {
                check_staged(&staged, args, chat, &local, stop)?;
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
    super::parts::check_run_dir(match &source {
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
    let workspace = confirm_workspace(&mut source, &mut first, args)?;
    let mut config = config_for(&first, args, &local)?;
    // The model client (a key for the endpoint) and a cost limit (a known
    // price) are checked before anything is written too.
    let provider = provider_for(&config)?;
    if args.max_cost.is_some() {
        let mut limited = config.clone();
        limited.limits.max_cost_usd = args.max_cost;
        if let Some(why) = limited.cost_refusal() {
            return Err(LaunchError::refused(why));
        }
    }
    // A restore intent beside the log is checked against the log's record
    // and this workspace before anything is done.
    let pending_restore = match &source {
        Source::Log(wal) => super::rewind::pending(wal, &config.workspace)?,
        Source::Trajectory(_) => None,
    };
    // The servers run (in the workspace) from here until the run ends.
    let wal = match &source {
        Source::Log(wal) => wal,
        Source::Trajectory(t) => &t.wal,
    };
    let protected = super::parts::protected_for(wal, args.config.as_deref(), &config);
    let mcp = super::parts::start_mcp(&local.mcp, &config, &protected, stop)?;
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
        r.catch_up(store.end())
            .map_err(|e| LaunchError::failed(e.to_string()))?;
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
    // `--compact-at` now, else what an earlier resume set.
    if let Some(n) = args.compact_at.or(store.state().compact_at) {
        config.compact_at = n;
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
    let key_var = super::parts::key_var(&config).to_string();
    if let (Some(url), Ok(home)) = (&args.provider.base_url, super::parts::home())
        && let Err(e) = super::endpoints::remember(&home, url)
    {
        crate::report::err_line(&format!("warning: {e}"));
    }
    let protected = super::parts::protected_for(&wal, args.config.as_deref(), &config);
    let env = exec_env(&config, &protected, &run.run_id, &wal)?;
    // Resumed elsewhere (the local config asked for the sandbox), the
    // run's container still goes when the run finishes.
    let container = env
        .container()
        .cloned()
        .or_else(|| crate::agent::resume::recorded_container(store.state()));
    crate::report::err_line(&format!("log: {}", wal.display()));
    // The person vouched for the workspace (or this machine knew it): a
    // later resume, fork or restore of the run from elsewhere finds it.
    super::workspace::remember(&run.run_id, &workspace);
    // A `fork --restore` a kill cut short is finished before anything else.
    match &pending_restore {
        Some(super::rewind::Pending::Fork(record)) => {
            super::rewind::finish_record(&wal, &config.workspace, record)?;
        }
        Some(super::rewind::Pending::Fetched(intent)) => {
            super::bucket::finish_fetched(&wal, intent)?;
        }
        None => {}
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
        stop: stop.clone(),
        asker,
    })?;
    agent.recover(StopInfo {
        stopped_at,
        torn_bytes: report.torn_tail.as_ref().map(|(t, _)| t.bytes),
        untracked_processes: untracked,
        limits,
        message: args.message.clone(),
        signal,
        stopped,
        compact_at: args.compact_at,
    })?;
    Ok(super::Opened::Running(Box::new(super::Running {
        agent,
        replicator,
        container,
        wal,
        key_var,
    })))
}
