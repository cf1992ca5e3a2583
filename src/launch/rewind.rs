//! The restore of `fork --restore`, the one a resume finishes, and
//! `tinyagent restore --undo`: the launch side of `checkpoint::rewind`.
//!
//! Order (docs/design.md, "Workspace checkpoints"): every check first (the
//! workspace, `workspace::resolve`; the trees, from the original's own
//! records); then, in the fork's store, the workspace as it is is stored
//! (the tree `before`); the intent (`<fork>.d/restore.json`) and the fork's
//! log with its `workspace.restored` record are written; then the paths are
//! changed and the intent removed. An intent is data: it is carried out
//! only when it matches the record of the log it sits beside and the
//! workspace that log's run uses here; the record alone decides what is
//! done. Only the fork's store and the workspace's planned paths are ever
//! written: the original log and store are protected from every step.

use super::LaunchError;
use super::request::{ForkArgs, RestoreArgs};
use crate::checkpoint::rewind::{self, Change, Plan};
use crate::checkpoint::{self, Git, Oversized, restore};
use crate::event::{Event, RunStarted, WorkspaceCheckpoint, WorkspaceRestored};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tinyagent_store::wal::reader;

/// What a restore to a step is to do, from the original log's records.
#[derive(Debug, Clone)]
pub struct Spec {
    pub step: u64,
    /// The restore point's tree and the run's last checkpoint's.
    pub tree: String,
    pub last: String,
    /// Files over the size cap at the restore point.
    pub oversized: Vec<Oversized>,
    /// The paths the run's own calls changed after the restore point
    /// (`None`: a record did not list all of them; every path that differs
    /// between the two trees counts).
    pub run_changed: Option<BTreeSet<String>>,
    pub workspace: PathBuf,
}

/// What a finished restore did.
#[derive(Debug, Clone)]
pub struct Done {
    pub plan: Plan,
    /// The command that undoes it.
    pub undo: String,
}

/// The `workspace.checkpoint` records of a log, with their seq.
fn checkpoints_of(wal: &Path) -> Result<Vec<(u64, WorkspaceCheckpoint)>, LaunchError> {
    let mut out = Vec::new();
    reader::scan::<Event>(wal, None, |f, _| {
        if let Event::WorkspaceCheckpoint(c) = &f.event {
            out.push((f.seq, c.clone()));
        }
    })
    .map_err(|e| LaunchError::refused(format!("{}: {e}", wal.display())))?;
    Ok(out)
}

/// The checks of a `fork --restore` of `wal` up to seq `upto`: the trees
/// and the workspace. Nothing is written.
pub fn spec_for(
    wal: &Path,
    original: &RunStarted,
    upto: u64,
    args: &ForkArgs,
) -> Result<Spec, LaunchError> {
    let all = checkpoints_of(wal)?;
    let Some(at) = all.iter().rposition(|(seq, _)| *seq <= upto) else {
        return Err(LaunchError::refused(format!(
            "{}: no workspace checkpoint up to step {}: nothing to restore to",
            wal.display(),
            args.at
        )));
    };
    let target = &all[at].1;
    let last = &all[all.len() - 1].1;
    let mut run_changed = Some(BTreeSet::new());
    for (_, c) in &all[at + 1..] {
        if c.call_id.is_none() {
            continue; // found on resume: no call of the run made it
        }
        match &mut run_changed {
            Some(set) if c.changed.len() as u64 >= c.changed_count => {
                set.extend(c.changed.iter().cloned());
            }
            _ => run_changed = None,
        }
    }
    let workspace = super::workspace::resolve(
        super::workspace::Named::Log {
            wal,
            run_id: &original.run_id,
            recorded: &original.settings.cwd,
        },
        args.cwd.as_deref(),
    )?;
    Ok(Spec {
        step: args.at,
        tree: target.tree.clone(),
        last: last.tree.clone(),
        oversized: target.oversized.clone(),
        run_changed,
        workspace,
    })
}

fn git(store: &Path, workspace: &Path) -> Git {
    Git {
        git_dir: store.to_path_buf(),
        work_tree: workspace.to_path_buf(),
        index: None,
    }
}

fn store_error(e: &checkpoint::CheckpointError) -> LaunchError {
    super::parts::checkpoint_error("restoring the workspace", e)
}

/// The restore's plan, read from the store `store` (only read). `extra` is
/// a log kept out of reach besides `wal` (the fork).
pub fn plan_from(
    store: &Path,
    spec: &Spec,
    wal: &Path,
    extra: Option<&Path>,
    force: bool,
) -> Result<Plan, LaunchError> {
    checkpoint::check_version().map_err(|e| store_error(&e.into()))?;
    let git = git(store, &spec.workspace);
    let mut changes =
        rewind::tree_changes(&git, &spec.tree, &spec.last).map_err(|e| store_error(&e))?;
    if let Some(set) = &spec.run_changed {
        changes.retain(|c| set.contains(&c.path));
    }
    let ignored = rewind::ignored_in(&git, &spec.tree).map_err(|e| store_error(&e))?;
    let protected = protect(wal, extra);
    Ok(rewind::plan(
        &spec.workspace,
        &changes,
        &protected,
        &spec.oversized,
        &ignored,
        force,
    ))
}

fn protect(wal: &Path, extra: Option<&Path>) -> crate::exec::protected::Protected {
    let mut p = crate::exec::protected::Protected::none();
    p.add_log(wal);
    if let Some(x) = extra {
        p.add_log(x);
    }
    p
}

/// The plan on stdout, one line a path.
pub fn print_plan(plan: &Plan) {
    for line in plan.lines() {
        crate::report::out_line(&line);
    }
    crate::report::err_line(&format!(
        "{} to restore, {} to delete, {} conflict{}, {} oversized, {} already as they were \
         (nothing was changed)",
        plan.restore.len(),
        plan.delete.len(),
        plan.conflicts.len(),
        if plan.conflicts.len() == 1 { "" } else { "s" },
        plan.oversized.len(),
        plan.done
    ));
}

/// Stores the workspace as it is in the fork's store and gives the intent
/// and the record of the restore (written by the caller before the fork's
/// log is in place).
pub fn prepare(
    store: &Path,
    spec: &Spec,
    wal: &Path,
    fork: &Path,
    run_id: &str,
    args: &ForkArgs,
) -> Result<(restore::RestoreIntent, WorkspaceRestored), LaunchError> {
    let mut plan = plan_from(store, spec, wal, Some(fork), args.force)?;
    let protected = protect(wal, Some(fork));
    let mut cp = checkpoint::Checkpointer::for_store(store, &spec.workspace, protected);
    let before = cp.take(Some(&spec.tree)).map_err(|e| store_error(&e))?.tree;
    // A path whose content could not be stored (ignored now, or over the
    // cap) is not changed: undo could not give it back.
    let stored = rewind::tree_changes(&git(store, &spec.workspace), &spec.tree, &before)
        .map_err(|e| store_error(&e))?;
    plan.keep_only_stored(&spec.workspace, &stored);
    let workspace = spec.workspace.display().to_string();
    let intent = restore::RestoreIntent {
        run_id: run_id.to_string(),
        tree: spec.tree.clone(),
        step: spec.step,
        workspace: workspace.clone(),
        last: spec.last.clone(),
        before: before.clone(),
        fetched: false,
    };
    let record = WorkspaceRestored {
        step: spec.step,
        tree: spec.tree.clone(),
        last: spec.last.clone(),
        before,
        workspace,
        force: args.force,
        paths: plan.touched(),
        conflicts: plan.conflicts.iter().map(|c| c.path.clone()).collect(),
        undo: false,
    };
    Ok((intent, record))
}

/// What a log records of its restore.
struct Recorded {
    first: RunStarted,
    /// The last restore (`workspace.restored` without `undo`).
    restore: Option<WorkspaceRestored>,
    /// Its undo, when `restore --undo` recorded one after it.
    undone: Option<(u64, WorkspaceRestored)>,
}

/// The first record, the last restore and its undo, if any.
fn restore_record(wal: &Path) -> Result<Recorded, LaunchError> {
    let mut first = None;
    let mut restore = None;
    let mut undone = None;
    let scan = reader::scan::<Event>(wal, None, |f, _| match &f.event {
        Event::RunStarted(r) if first.is_none() => first = Some(r.clone()),
        Event::WorkspaceRestored(r) if r.undo => undone = Some((f.seq, r.clone())),
        Event::WorkspaceRestored(r) => {
            restore = Some(r.clone());
            undone = None;
        }
        _ => {}
    })
    .map_err(|e| LaunchError::refused(format!("{}: {e}", wal.display())))?;
    if let Some(c) = scan.corruption {
        return Err(LaunchError::refused(format!(
            "{}: corrupt at seq {}: {}",
            wal.display(),
            c.seq,
            c.reason
        )));
    }
    let first = first.ok_or_else(|| {
        LaunchError::refused(format!(
            "{}: the log has no run.started record",
            wal.display()
        ))
    })?;
    Ok(Recorded {
        first,
        restore,
        undone,
    })
}

/// A restore a kill cut short, checked: the intent beside `wal` matches the
/// log's own `workspace.restored` record and `workspace` is the one that
/// record names. `None`: nothing pending. Nothing is changed.
pub fn pending(wal: &Path, workspace: &Path) -> Result<Option<Pending>, LaunchError> {
    let Some(intent) = restore::read_intent(wal).map_err(|e| {
        LaunchError::refused(format!("{e}; remove it to go on without that restore"))
    })?
    else {
        return Ok(None);
    };
    let path = restore::intent_path(wal);
    if intent.fetched {
        return pending_fetch(wal, workspace, intent).map(|i| Some(Pending::Fetched(i)));
    }
    let Recorded {
        first,
        restore: record,
        undone,
    } = restore_record(wal)?;
    let refuse = |why: &str| {
        LaunchError::refused(format!(
            "{}: {why}; it is not carried out (remove it to go on without it)",
            path.display()
        ))
    };
    let Some(record) = record else {
        return Err(refuse("a restore intent the log records no restore for"));
    };
    if undone.is_some() {
        return Err(refuse(
            "a restore intent for a restore the log records as undone",
        ));
    }
    if intent.run_id != first.run_id
        || intent.tree != record.tree
        || intent.last != record.last
        || intent.before != record.before
        || intent.step != record.step
        || intent.workspace != record.workspace
    {
        return Err(refuse("the restore intent does not match the log's record"));
    }
    let real = std::fs::canonicalize(workspace).ok();
    if real.is_none() || real != std::fs::canonicalize(&record.workspace).ok() {
        return Err(refuse(&format!(
            "the intent is for {}, not this run's workspace {}",
            record.workspace,
            workspace.display()
        )));
    }
    Ok(Some(Pending::Fork(record)))
}

/// A restore a kill cut short, checked against the log.
#[derive(Debug)]
pub enum Pending {
    /// A fork's restore, as its `workspace.restored` record says.
    Fork(WorkspaceRestored),
    /// A run fetched from a bucket: its workspace made equal to its last
    /// checkpoint.
    Fetched(restore::RestoreIntent),
}

/// A fetched run's intent is carried out only for the run of the log it
/// sits beside, for the log's last checkpoint, in the workspace this
/// resume uses (the one this machine's sidecar names).
fn pending_fetch(
    wal: &Path,
    workspace: &Path,
    intent: restore::RestoreIntent,
) -> Result<restore::RestoreIntent, LaunchError> {
    let path = restore::intent_path(wal);
    let refuse = |why: String| {
        LaunchError::refused(format!(
            "{}: {why}; it is not carried out (remove it to go on without it)",
            path.display()
        ))
    };
    let loaded = crate::store::load(wal)?;
    let run_id = loaded.state.run.as_ref().map(|r| r.run_id.clone());
    let last = loaded
        .state
        .last_checkpoint
        .as_ref()
        .map(|c| c.tree.clone());
    if run_id.as_deref() != Some(intent.run_id.as_str()) || last.as_deref() != Some(&intent.tree) {
        return Err(refuse(
            "a restore intent that names neither this run nor its last checkpoint".into(),
        ));
    }
    let real = std::fs::canonicalize(workspace).ok();
    if real.is_none() || real != std::fs::canonicalize(&intent.workspace).ok() {
        return Err(refuse(format!(
            "the intent is for {}, not this run's workspace {}",
            intent.workspace,
            workspace.display()
        )));
    }
    Ok(intent)
}

/// Finishes the restore pending beside `wal` (the fork) in `workspace`, if
/// any: checked ([`pending`]), carried out as its record says, the intent
/// removed.
pub fn finish(wal: &Path, workspace: &Path) -> Result<Option<Done>, LaunchError> {
    match pending(wal, workspace)? {
        None => Ok(None),
        Some(Pending::Fork(record)) => finish_record(wal, workspace, &record).map(Some),
        Some(Pending::Fetched(intent)) => {
            super::bucket::finish_fetched(wal, &intent)?;
            Ok(None)
        }
    }
}

/// Carries out a checked pending restore.
pub fn finish_record(
    wal: &Path,
    workspace: &Path,
    record: &WorkspaceRestored,
) -> Result<Done, LaunchError> {
    let store = checkpoint::store_dir(wal);
    let git = git(&store, workspace);
    let plan = planned(
        &git,
        workspace,
        wal,
        record,
        &record.tree,
        &record.last,
        record.force,
    )?;
    rewind::apply(&git, workspace, &plan).map_err(|e| store_error(&e))?;
    restore::clear_intent(wal).map_err(|e| LaunchError::failed(e.to_string()))?;
    let undo = format!("tinyagent restore --undo {}", wal.display());
    crate::report::err_line(&format!(
        "restored {} to step {}: {} written, {} removed, {} already so{}",
        workspace.display(),
        record.step,
        plan.restore.len(),
        plan.delete.len(),
        plan.done,
        if record.conflicts.is_empty() && plan.conflicts.is_empty() {
            String::new()
        } else {
            "; left as they are (changed since the run's last checkpoint, --force to restore them):"
                .to_string()
        }
    ));
    let mut left: BTreeSet<&str> = record.conflicts.iter().map(String::as_str).collect();
    left.extend(plan.conflicts.iter().map(|c| c.path.as_str()));
    for p in left {
        crate::report::err_line(&format!("  conflict {p}"));
    }
    crate::report::err_line(&format!("undo it with: {undo}"));
    Ok(Done { plan, undo })
}

/// The plan of going from `expect` to `want` for the paths a record
/// changes (a restore: the record's trees; an undo: the other way).
fn planned(
    git: &Git,
    workspace: &Path,
    wal: &Path,
    record: &WorkspaceRestored,
    want: &str,
    expect: &str,
    force: bool,
) -> Result<Plan, LaunchError> {
    let paths: BTreeSet<&str> = record.paths.iter().map(String::as_str).collect();
    let changes: Vec<Change> = rewind::tree_changes(git, want, expect)
        .map_err(|e| store_error(&e))?
        .into_iter()
        .filter(|c| paths.contains(c.path.as_str()))
        .collect();
    let first = restore_record(wal)?.first;
    let original = first.forked_from.and_then(|f| f.wal).map(PathBuf::from);
    let protected = protect(wal, original.as_deref());
    Ok(rewind::plan(
        workspace,
        &changes,
        &protected,
        &[],
        &|_| false,
        force,
    ))
}

/// `tinyagent restore --undo <WAL> [--force] [--dry-run] [--cwd DIR]`:
/// the paths the log's restore changed go back to what they held before
/// it, where they still hold what the restore wrote. The log is held under
/// its lock meanwhile (a live run of it refuses the undo), and once the
/// workspace is back a `workspace.restored` record with `undo` is appended,
/// so that the log tells the restore was undone (and a second undo is
/// refused). A kill before the record leaves an undo that the same command
/// finishes.
pub fn undo(args: &RestoreArgs) -> Result<i32, LaunchError> {
    let wal = std::fs::canonicalize(&args.wal)
        .map_err(|e| LaunchError::refused(format!("{}: {e}", args.wal.display())))?;
    super::parts::check_run_dir(&wal)?;
    let Recorded {
        first,
        restore: record,
        undone,
    } = restore_record(&wal)?;
    let Some(record) = record else {
        return Err(LaunchError::refused(format!(
            "{}: the log records no restore to undo",
            wal.display()
        )));
    };
    if let Some((seq, _)) = undone {
        return Err(LaunchError::refused(format!(
            "{}: its restore to step {} was undone already (the log's record at seq {seq}); \
             nothing was changed",
            wal.display(),
            record.step
        )));
    }
    if restore::read_intent(&wal)
        .map_err(|e| LaunchError::refused(e.to_string()))?
        .is_some()
    {
        return Err(LaunchError::refused(format!(
            "{}: its restore is not finished (run the fork again, or resume it) before it is \
             undone",
            wal.display()
        )));
    }
    let workspace = super::workspace::resolve(
        super::workspace::Named::Log {
            wal: &wal,
            run_id: &first.run_id,
            recorded: &record.workspace,
        },
        args.cwd.as_deref(),
    )?;
    let store = checkpoint::store_dir(&wal);
    let git = git(&store, &workspace);
    checkpoint::check_version().map_err(|e| store_error(&e.into()))?;
    let plan = planned(
        &git,
        &workspace,
        &wal,
        &record,
        &record.before,
        &record.tree,
        args.force,
    )?;
    if args.dry_run {
        print_plan(&plan);
        return Ok(0);
    }
    // The log under its lock before the workspace is touched: a run of it
    // going on now refuses the undo (exit 2, nothing changed).
    let (mut log, _) = crate::store::Store::open(&wal, crate::store::StoreOptions::default())?;
    rewind::apply(&git, &workspace, &plan).map_err(|e| store_error(&e))?;
    let mark = WorkspaceRestored {
        force: args.force,
        paths: plan.touched(),
        conflicts: plan.conflicts.iter().map(|c| c.path.clone()).collect(),
        undo: true,
        ..record.clone()
    };
    log.append(Event::WorkspaceRestored(mark))
        .and_then(|_| log.close())
        .map_err(|e| {
            LaunchError::failed(format!(
                "{}: the workspace is back, but the undo could not be recorded: {e}; run the \
                 same command again to record it",
                wal.display()
            ))
        })?;
    crate::report::err_line(&format!(
        "undid the restore of {} to step {}: {} written back, {} removed, {} already so",
        workspace.display(),
        record.step,
        plan.restore.len(),
        plan.delete.len(),
        plan.done
    ));
    for c in &plan.conflicts {
        crate::report::err_line(&format!("  conflict {} ({}): left as it is", c.path, c.why));
    }
    Ok(0)
}
