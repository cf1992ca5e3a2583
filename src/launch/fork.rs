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
//! With `--restore` a restore intent is written beside the new log before
//! the log is renamed into place; then the workspace is put back to the
//! step's last checkpoint and the intent removed. A rerun (or `resume` of
//! the fork) finishes a restore a kill cut short.

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
    state: State,
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
    Ok(Prefix { frames, state })
}

/// The fork's log: the prefix re-framed, its first record the new
/// `run.started`.
fn fork_bytes(prefix: &Prefix, started: &Event) -> Result<Vec<u8>, LaunchError> {
    let mut out = Vec::new();
    let mut prev = 0u32;
    for (i, f) in prefix.frames.iter().enumerate() {
        let event = if i == 0 { started } else { &f.event };
        prev = frame::encode(i as u64 + 1, prev, &f.ts, event, &mut out)
            .map_err(|e| LaunchError::failed(format!("cannot frame record {}: {e}", i + 1)))?;
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

/// `tinyagent fork <WAL> --at <STEP> [-o <NEW.wal>] [--restore]`.
pub fn fork(args: &ForkArgs) -> Result<i32, LaunchError> {
    super::parts::configure_checkpoints(&crate::config::Config::load(None)?);
    let target = make_fork(args)?;
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

/// Makes the fork (and the restore) `args` ask for; gives the new log.
pub fn make_fork(args: &ForkArgs) -> Result<PathBuf, LaunchError> {
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
    let target_tree = prefix
        .state
        .last_checkpoint
        .as_ref()
        .map(|c| c.tree.clone());
    let workspace = PathBuf::from(&original.settings.cwd);
    if args.restore {
        if target_tree.is_none() {
            return Err(LaunchError::refused(format!(
                "{}: no workspace checkpoint up to step {}: nothing to restore to",
                wal.display(),
                args.at
            )));
        }
        if !workspace.is_absolute() || !workspace.is_dir() {
            return Err(LaunchError::refused(format!(
                "the run's workspace {:?} is not an absolute directory",
                workspace.display().to_string()
            )));
        }
        // A restore removes files: never across a whole system or home,
        // whatever a log says its workspace was.
        let real = std::fs::canonicalize(&workspace)
            .map_err(|e| LaunchError::refused(format!("{}: {e}", workspace.display())))?;
        let home = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok());
        if real.parent().is_none() || home.as_deref() == Some(real.as_path()) {
            return Err(LaunchError::refused(format!(
                "the run's workspace is {}: a restore there is refused",
                real.display()
            )));
        }
    }
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
    let new_store = checkpoint::store_dir(&target);
    let old_store = checkpoint::store_dir(&wal);
    if target.exists() {
        if !is_this_fork(&target, &from, prefix.frames.len()) {
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
        if old_store.join("objects").is_dir() {
            checkpoint::copy_store(&old_store, &new_store, &workspace)
                .map_err(|e| super::parts::checkpoint_error("", &e))?;
        }
        // The intent goes before the log: once the fork's log exists, a
        // restore it asked for is never lost (resume finishes it).
        if let (true, Some(tree)) = (args.restore, &target_tree) {
            restore::write_intent(&target, &intent_for(tree, args.at, &workspace))
                .map_err(|e| LaunchError::failed(e.to_string()))?;
        }
        let bytes = fork_bytes(&prefix, &Event::RunStarted(started))?;
        tinyagent_store::fsutil::atomic_write(&target, &bytes)
            .map_err(|e| LaunchError::failed(format!("writing {}: {e}", target.display())))?;
    }
    if args.restore
        && let Some(tree) = target_tree
    {
        let intent = intent_for(&tree, args.at, &workspace);
        restore::write_intent(&target, &intent).map_err(|e| LaunchError::failed(e.to_string()))?;
        finish_restore(&target, &wal, &intent)?;
    }
    Ok(target)
}

fn intent_for(tree: &str, step: u64, workspace: &Path) -> restore::RestoreIntent {
    restore::RestoreIntent {
        tree: tree.to_string(),
        step,
        workspace: workspace.display().to_string(),
    }
}

/// Carries out a restore intent of the log `wal` and removes it. `other` is
/// another log whose files are kept out of reach too (the original).
pub fn finish_restore(
    wal: &Path,
    other: &Path,
    intent: &restore::RestoreIntent,
) -> Result<(), LaunchError> {
    let workspace = PathBuf::from(&intent.workspace);
    let mut protected = crate::exec::protected::Protected::none();
    protected.add_log(wal);
    protected.add_log(other);
    let done = restore::restore(
        &checkpoint::store_dir(wal),
        &workspace,
        &intent.tree,
        &protected,
    )
    .map_err(|e| super::parts::checkpoint_error("restoring the workspace", &e))?;
    restore::clear_intent(wal).map_err(|e| LaunchError::failed(e.to_string()))?;
    crate::report::err_line(&format!(
        "restored {} to step {} ({} paths put back; the state before is kept as tree {})",
        workspace.display(),
        intent.step,
        done.changed,
        done.before
    ));
    Ok(())
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
