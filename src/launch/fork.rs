//! `tinyagent fork` and `tinyagent log diff`: going back to a step without
//! touching the original.
//!
//! A fork is a new log holding the original's records up to the end of a
//! step (`step.saved`; for step 0, everything before the first model
//! response), re-framed with the same `seq` and `ts` and a new `run.started`
//! (a new `run_id`, `forked_from`), and a checkpoint store of its own whose
//! objects are hard links to the original's (objects never change, so the
//! fork depends on nothing of the original and the original is not
//! modified). The order makes a killed fork safe to run again: the store is
//! filled first (idempotent), the log is written to a temp file, synced and
//! renamed into place last; a log that exists and is this very fork
//! (`forked_from` and its length match) counts as done.
//!
//! With `--restore` (rewind.rs) the workspace as it is is stored in the
//! fork's store, a restore intent is written beside the new log and the log
//! ends in a `workspace.restored` record before it is renamed into place;
//! then the paths the run changed after the step are put back (three-way:
//! a path changed since is a conflict, left) and the intent removed. A
//! rerun (or `resume` of the fork) finishes a restore a kill cut short. A
//! fork without `--restore` removes an intent an earlier kill left.

use super::LaunchError;
use super::request::ForkArgs;
use crate::checkpoint::{self, restore};
use crate::event::{Event, ForkedFrom};
use crate::session::State;
use std::path::{Path, PathBuf};
use tinyagent_store::wal::{frame, reader};

/// The original's records a fork of step `at` keeps, and its last seq.
struct Prefix {
    frames: Vec<frame::Frame<Event>>,
}

/// Reads the records of `wal` up to the end of step `at`.
fn read_prefix(wal: &Path, at: u64) -> Result<Prefix, LaunchError> {
    let meta = std::fs::symlink_metadata(wal)
        .map_err(|e| LaunchError::refused(format!("{}: {e}", wal.display())))?;
    if !meta.file_type().is_file() {
        return Err(LaunchError::refused(format!(
            "{}: not a regular file",
            wal.display()
        )));
    }
    let mut frames = Vec::new();
    let mut state = State::default();
    let mut done = false;
    let mut saved_step = 0;
    let scan = reader::scan::<Event>(wal, None, |f, _| {
        if done {
            return;
        }
        match &f.event {
            Event::ModelResponse(r) if at == 0 || r.step > at => {
                done = true;
                return;
            }
            Event::RunFinished(_) if at == 0 => return,
            _ => {}
        }
        if let Event::StepSaved(s) = &f.event {
            saved_step = s.step;
        }
        state.apply(&f.event);
        let stop = matches!(&f.event, Event::StepSaved(s) if s.step == at);
        frames.push(f.clone());
        if stop {
            done = true;
        }
    })
    .map_err(|e| LaunchError::refused(format!("{}: {e}", wal.display())))?;
    if let Some(c) = &scan.corruption {
        return Err(LaunchError::refused(format!(
            "{}: corrupt at seq {} (byte offset {}): {}; refusing to fork it",
            wal.display(),
            c.seq,
            c.offset,
            c.reason
        )));
    }
    if frames.is_empty() || state.run.is_none() {
        return Err(LaunchError::refused(format!(
            "{}: the log has no run.started record",
            wal.display()
        )));
    }
    if at > 0 && (!done || saved_step != at) {
        return Err(LaunchError::refused(format!(
            "{}: step {at} is not complete in the log (the last saved step is {})",
            wal.display(),
            state.saved_step
        )));
    }
    Ok(Prefix { frames })
}

/// The fork's log: the prefix re-framed, its first record the new
/// `run.started`.
fn fork_bytes(
    prefix: &Prefix,
    started: &Event,
    extra: Option<&Event>,
) -> Result<Vec<u8>, LaunchError> {
    let mut out = Vec::new();
    let mut prev = 0u32;
    for (i, f) in prefix.frames.iter().enumerate() {
        let event = if i == 0 { started } else { &f.event };
        prev = frame::encode(i as u64 + 1, prev, &f.ts, event, &mut out)
            .map_err(|e| LaunchError::failed(format!("cannot frame record {}: {e}", i + 1)))?;
    }
    if let Some(event) = extra {
        let seq = prefix.frames.len() as u64 + 1;
        let ts = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let start = out.len();
        frame::encode(seq, prev, &ts, event, &mut out)
            .map_err(|e| LaunchError::failed(format!("cannot frame record {seq}: {e}")))?;
        if out.len() - start > frame::MAX_LINE_LEN {
            return Err(LaunchError::refused(
                "the restore changes too many paths to record in one log line; restore in \
                 smaller steps (fork at a later step first)",
            ));
        }
    }
    Ok(out)
}

/// Whether `target` is already this fork (a rerun after the log was
/// renamed into place): its `forked_from` and length match.
fn is_this_fork(target: &Path, from: &ForkedFrom, records: usize) -> bool {
    let mut first: Option<ForkedFrom> = None;
    let mut n = 0usize;
    let Ok(scan) = reader::scan::<Event>(target, None, |f, _| {
        if n == 0
            && let Event::RunStarted(r) = &f.event
        {
            first.clone_from(&r.forked_from);
        }
        n += 1;
    }) else {
        return false;
    };
    scan.corruption.is_none()
        && n == records
        && first
            .is_some_and(|f| f.run_id == from.run_id && f.seq == from.seq && f.step == from.step)
}

/// `tinyagent fork <WAL> --at <STEP> [-o <NEW.wal>] [--restore [--force]
/// [--dry-run]] [--cwd DIR]`.
pub fn fork(args: &ForkArgs) -> Result<i32, LaunchError> {
    super::parts::configure_checkpoints(&crate::config::Config::load(None)?);
    let Some(forked) = make_fork(args)? else {
        return Ok(0); // --dry-run: the plan was printed
    };
    let target = forked.log;
    crate::report::err_line(&format!(
        "forked {} at step {} into {}",
        args.wal.display(),
        args.at,
        target.display()
    ));
    crate::report::out_line(&target.display().to_string());
    crate::report::err_line(&format!(
        "continue it with: tinyagent resume {} --message <TEXT>",
        target.display()
    ));
    Ok(0)
}

/// A fork made: its log, and what its restore did (with `--restore`).
#[derive(Debug)]
pub struct Forked {
    pub log: PathBuf,
    pub restored: Option<super::rewind::Done>,
}

/// Makes the fork (and the restore) `args` ask for: the library function
/// behind `tinyagent fork` and a chat's `/rewind`. `None`: a `--dry-run`,
/// whose plan was printed; nothing was made or changed.
pub fn make_fork(args: &ForkArgs) -> Result<Option<Forked>, LaunchError> {
    let wal = std::fs::canonicalize(&args.wal)
        .map_err(|e| LaunchError::refused(format!("{}: {e}", args.wal.display())))?;
    super::parts::check_run_dir(&wal)?;
    let prefix = read_prefix(&wal, args.at)?;
    let Some(Event::RunStarted(original)) = prefix.frames.first().map(|f| &f.event) else {
        return Err(LaunchError::refused(format!(
            "{}: the first record is not run.started",
            wal.display()
        )));
    };
    let last_seq = prefix.frames.last().map_or(0, |f| f.seq);
    let from = ForkedFrom {
        run_id: original.run_id.clone(),
        seq: last_seq,
        step: args.at,
        wal: Some(wal.display().to_string()),
    };
    let mut started = original.clone();
    started.run_id = super::new::new_run_id();
    started.forked_from = Some(from.clone());
    // A fork of a container run gets a container of its own (started when
    // it resumes), never the original's.
    if started.settings.container.is_some() {
        started.settings.container = Some(crate::exec::container::container_name(&started.run_id));
    }
    let target = match &args.output {
        Some(o) => super::parts::absolute_new(o.clone())?,
        None => super::parts::home()?
            .join("runs")
            .join(format!("{}.wal", started.run_id)),
    };
    if target == wal {
        return Err(LaunchError::refused("the fork must not be the log itself"));
    }
    // A fork's `.d` someone else made first (or one holding a store
    // tinyagent did not write) is refused before anything is written.
    super::parts::check_run_dir(&target)?;
    // Every check of a restore (the workspace, the trees) before anything
    // is written.
    let spec = if args.restore {
        Some(super::rewind::spec_for(&wal, original, last_seq, args)?)
    } else {
        None
    };
    if let (true, Some(spec)) = (args.dry_run, &spec) {
        let plan =
            super::rewind::plan_from(&checkpoint::store_dir(&wal), spec, &wal, None, args.force)?;
        super::rewind::print_plan(&plan);
        return Ok(None);
    }
    // The fork works where the original does: when that workspace is
    // vouched for (a restore's, checked above; else by the same rule, but
    // a fork that restores nothing is not refused for it), this machine
    // records it for the fork, so that its resume finds it from elsewhere.
    let vouched = match &spec {
        Some(spec) => Some(spec.workspace.clone()),
        None => super::workspace::resolve(
            super::workspace::Named::Log {
                wal: &wal,
                run_id: &original.run_id,
                recorded: &original.settings.cwd,
            },
            args.cwd.as_deref(),
        )
        .ok(),
    };
    let new_store = checkpoint::store_dir(&target);
    let old_store = checkpoint::store_dir(&wal);
    let records = prefix.frames.len() + usize::from(spec.is_some());
    if target.exists() {
        if !is_this_fork(&target, &from, records) {
            return Err(LaunchError::refused(format!(
                "{} exists: a fork needs a new log",
                target.display()
            )));
        }
        crate::report::err_line(&format!(
            "{} is this fork already (made by an earlier run of the command)",
            target.display()
        ));
    } else {
        if let Some(dir) = target.parent() {
            tinyagent_store::fsutil::create_dir_all_durable(dir)
                .map_err(|e| LaunchError::failed(format!("creating {}: {e}", dir.display())))?;
            tinyagent_store::fsutil::clean_atomic_temps(&target);
        }
        // An intent an earlier, killed `fork --restore` left beside this
        // log is never carried out by a fork that asks for none.
        restore::clear_intent(&target).map_err(|e| LaunchError::failed(e.to_string()))?;
        if old_store.join("objects").is_dir() {
            checkpoint::copy_store(&old_store, &new_store, Path::new("/"))
                .map_err(|e| super::parts::checkpoint_error("", &e))?;
        }
        let mut extra = None;
        let mut intent = None;
        if let Some(spec) = &spec {
            // The workspace as it is is stored first; the intent and the
            // record go before the log: once the fork's log exists, the
            // restore it asked for is never lost (resume finishes it).
            let (i, record) =
                super::rewind::prepare(&new_store, spec, &wal, &target, &started.run_id, args)?;
            intent = Some(i);
            extra = Some(Event::WorkspaceRestored(record));
        }
        if let Some(ws) = &vouched {
            super::workspace::remember(&started.run_id, ws);
        }
        let bytes = fork_bytes(&prefix, &Event::RunStarted(started), extra.as_ref())?;
        if let Some(i) = &intent {
            restore::write_intent(&target, i).map_err(|e| LaunchError::failed(e.to_string()))?;
        }
        tinyagent_store::fsutil::atomic_write(&target, &bytes)
            .map_err(|e| LaunchError::failed(format!("writing {}: {e}", target.display())))?;
    }
    let restored = match &spec {
        Some(spec) => super::rewind::finish(&target, &spec.workspace)?,
        None => None,
    };
    Ok(Some(Forked {
        log: target,
        restored,
    }))
}

/// `tinyagent log diff <WAL> [--step N | --call ID]`.
pub fn diff(wal: &Path, step: Option<u64>, call: Option<&str>) -> Result<i32, LaunchError> {
    super::parts::configure_checkpoints(&crate::config::Config::load(None)?);
    super::parts::check_run_dir(wal)?;
    let loaded = crate::store::load(wal)?;
    let marks = &loaded.state.checkpoints;
    if marks.is_empty() {
        return Err(LaunchError::refused(format!(
            "{}: the log has no workspace checkpoint",
            wal.display()
        )));
    }
    let (from, to) = match (step, call) {
        (_, Some(id)) => {
            let Some(i) = marks.iter().rposition(|m| m.call_id.as_deref() == Some(id)) else {
                return Err(LaunchError::refused(format!(
                    "{}: no checkpoint after call {id} (only calls that can change files have one)",
                    wal.display()
                )));
            };
            (i.checked_sub(1).map(|j| &marks[j]), Some(&marks[i]))
        }
        (Some(n), None) if n > loaded.state.step.max(marks.last().map_or(0, |m| m.step)) => {
            return Err(LaunchError::refused(format!(
                "{}: no step {n} in the log (its last step is {})",
                wal.display(),
                loaded.state.step
            )));
        }
        (Some(n), None) => (
            marks.iter().rev().find(|m| m.step < n),
            marks.iter().rev().find(|m| m.step <= n),
        ),
        (None, None) => (marks.first(), marks.last()),
    };
    let Some(to) = to else {
        return Ok(0);
    };
    let from = from.map(|m| m.tree.as_str());
    if from == Some(to.tree.as_str()) {
        return Ok(0);
    }
    let text = checkpoint::diff(&checkpoint::store_dir(wal), from, &to.tree)
        .map_err(|e| super::parts::checkpoint_error("", &e))?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&text);
    let _ = out.flush();
    Ok(0)
}
