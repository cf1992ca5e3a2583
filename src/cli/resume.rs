//! `tinyagent resume`: open the log under its lock, cut a torn tail, load the
//! newest snapshot, replay the rest, close every open end, carry on.

use super::CliError;
use super::args::ResumeArgs;
use super::run::{exec_env, process_dir, provider_for, store_options, test_seams};
use crate::agent::output::Output;
use crate::agent::resume::StopInfo;
use crate::agent::{Agent, AgentParts};
use crate::config::RunConfig;
use crate::event::{Limits, RunStarted, RunStatus};
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
    first.first() == Some(&b'{') && tinyagent_store::wal::frame::check_crc(line).is_err()
}

/// Imports a trajectory JSON into `<path>.wal` (refused if that exists).
/// Returns the v1 free-text process summary. A half-written log is removed
/// when the import fails, so a retry is not refused.
pub fn import_trajectory(json: &Path, wal: &Path) -> Result<Option<String>, CliError> {
    if wal.exists() {
        return Err(CliError::refused(format!(
            "{} exists: refusing to overwrite it (resume that log instead)",
            wal.display()
        )));
    }
    let text = std::fs::read_to_string(json)
        .map_err(|e| CliError::refused(format!("cannot read {}: {e}", json.display())))?;
    let mut imported = crate::trajectory::import(&text)
        .map_err(|e| CliError::refused(format!("{}: {e}", json.display())))?;
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
    let mut store = Store::create(wal, StoreOptions::default())?;
    let written = imported
        .events
        .into_iter()
        .try_for_each(|ev| store.append(ev).map(drop))
        .and_then(|()| store.close());
    if let Err(e) = written {
        // Nothing depends on a half-imported log: remove it so a retry works.
        let _ = std::fs::remove_file(wal);
        return Err(e.into());
    }
    Ok(imported.background)
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

/// Stage 1: the log to resume (a trajectory is imported into one first),
/// and the v1 free-text process summary of an imported trajectory.
fn locate(args: &ResumeArgs) -> Result<(PathBuf, Option<String>), CliError> {
    let (wal, untracked) = if is_trajectory(&args.path) {
        let wal = wal_for_json(&args.path);
        let bg = import_trajectory(&args.path, &wal)?;
        eprintln!("imported {} into {}", args.path.display(), wal.display());
        (wal, bg)
    } else {
        (args.path.clone(), None)
    };
    if !wal.exists() {
        return Err(CliError::refused(format!("{}: no such log", wal.display())));
    }
    Ok((wal, untracked))
}

/// Stage 2: the run's config as `run.started` recorded it, with the
/// provider flags over it; validated like a new run's.
fn config_for(run: &RunStarted, args: &ResumeArgs) -> Result<RunConfig, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(1, format!("no current directory: {e}")))?;
    let mut config = RunConfig::from_started(run, &cwd)?;
    let m = &mut config.model;
    let flags = &args.provider;
    if let Some(p) = flags.provider {
        m.provider = p;
    }
    if let Some(name) = &flags.model {
        m.name.clone_from(name);
    }
    if let Some(url) = &flags.base_url {
        m.base_url = Some(url.clone());
    }
    if let Some(var) = &flags.api_key_env {
        m.api_key_env = Some(var.clone());
    }
    config.validate()?;
    Ok(config)
}

/// Stage 3: the tool set, which must be the one the log was written with.
fn tools_for(run: &RunStarted) -> Result<ToolSet, CliError> {
    let tools = ToolSet::new(ToolSetOptions {
        read_only: run.read_only,
        plan: run.plan_enabled,
    });
    if tools.signature() != run.tool_signature {
        return Err(CliError::refused(format!(
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
fn new_limits(current: &Limits, args: &ResumeArgs) -> Result<Option<Limits>, CliError> {
    if args.max_steps.is_none() && args.max_cost.is_none() {
        return Ok(None);
    }
    let mut l = current.clone();
    if let Some(n) = args.max_steps {
        l.max_steps = Some(n);
    }
    if let Some(c) = args.max_cost {
        if !c.is_finite() || c < 0.0 {
            return Err(CliError::refused("--max-cost must be a number >= 0"));
        }
        l.max_cost_usd = Some(c);
    }
    Ok(Some(l))
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

/// `tinyagent resume`.
pub async fn resume(args: &ResumeArgs) -> Result<i32, CliError> {
    let (wal, untracked) = locate(args)?;
    let stopped_at = mtime(&wal);
    // The snapshot interval is needed before the store is opened.
    let mut options = match run_started(&wal) {
        Some(r) => store_options(&config_for(&r, args)?),
        None => StoreOptions::default(),
    };
    options.seams = test_seams()?;
    let (store, report) = Store::open(&wal, options)?;
    let run = store.state().run.clone().ok_or_else(|| {
        CliError::refused(format!(
            "{}: the log has no run.started record",
            wal.display()
        ))
    })?;
    let config = config_for(&run, args)?;
    let out = Output::new(args.json);
    report_open(&out, &report);
    if store.state().status == Status::Finished(RunStatus::Completed) && args.message.is_none() {
        eprintln!(
            "{}: the run already finished (completed, {} steps); use --message to continue it",
            wal.display(),
            store.state().step
        );
        return Ok(0);
    }
    let tools = tools_for(&run)?;
    let limits = new_limits(&store.state().limits, args)?;
    let provider = provider_for(&config)?;
    let env = exec_env(&config)?;
    eprintln!("log: {}", wal.display());
    let processes = ProcessTable::new(process_dir(&wal));
    processes.continue_after(store.state().processes.keys().map(String::as_str));
    let mut agent = Agent::new(AgentParts {
        config,
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
    })?;
    let result = agent.run().await;
    agent.close();
    Ok(super::status_exit_code(result?))
}
