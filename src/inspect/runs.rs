//! The runs under `$TINYAGENT_HOME` (its `runs/` and the runs indexed
//! from elsewhere), newest first: what `tinyagent sessions` lists, what a
//! run id or `--last` names, and the newest run of a workspace.
//!
//! Each log is read the way `log inspect` reads it (snapshot, then the
//! records after it, in bounded memory) and probed for a live writer with a
//! shared lock. A log that cannot be read is listed as `unreadable` with
//! the reason, never skipped in silence and never an error for the list.

use super::{Report, read_report};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One row of the list.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    pub run_id: Option<String>,
    pub started_at: Option<String>,
    pub task: Option<String>,
    /// `running` (a process holds the lock), `stopped` (the last record is
    /// not `run.finished`), the finished status, or `unreadable`.
    pub status: String,
    pub steps: u64,
    pub cost_usd: f64,
    /// False when no price is known: `cost_usd` is then no cost (`$?`).
    pub cost_known: bool,
    pub workspace: Option<String>,
    pub log: String,
    /// The run's container (container environment) and whether it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::inspect::ContainerJson>,
    /// Why the log could not be read (status `unreadable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the run waits for from the person (an approval, with the call;
    /// a chat's next message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<crate::inspect::WaitingJson>,
    /// A run that ended in an error before its first model response: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_to_start: Option<String>,
    /// A fork (newer than a run that started at the same time).
    #[serde(skip)]
    forked: bool,
}

impl Session {
    fn of(log: &Path, report: &Report) -> Session {
        let status = if report.live {
            "running"
        } else if report.status == "running" {
            "stopped"
        } else {
            report.status
        };
        // A fork's first record keeps its original's time; the fork itself
        // started when it was made, which its run id says.
        // (Made within the second its original started, it keeps the
        // original's time and sorts after it: see `list`.)
        let started_at = match (&report.forked_from, &report.run_id) {
            (Some(_), Some(id)) => made_at(id).max(report.started_at.clone()),
            _ => report.started_at.clone(),
        };
        Session {
            run_id: report.run_id.clone(),
            started_at,
            task: report.task.clone(),
            status: status.to_string(),
            steps: report.steps,
            cost_usd: report.usage.cost_usd,
            cost_known: report.usage.cost_known,
            workspace: report.workspace.clone(),
            log: log.display().to_string(),
            container: report.container.clone(),
            error: None,
            waiting: report.waiting.clone(),
            forked: report.forked_from.is_some(),
            failed_to_start: (report.status == "error" && report.steps == 0).then(|| {
                report
                    .reason
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into())
            }),
        }
    }

    fn unreadable(log: &Path, why: String) -> Session {
        Session {
            run_id: None,
            started_at: None,
            task: None,
            status: "unreadable".into(),
            steps: 0,
            cost_usd: 0.0,
            cost_known: false,
            workspace: None,
            log: log.display().to_string(),
            container: None,
            error: Some(why),
            waiting: None,
            failed_to_start: None,
            forked: false,
        }
    }
}

/// When a run was made, from its id (`r20261207034408-8bd9`, UTC to the
/// second, as `launch::new` makes them), in the records' time format.
fn made_at(run_id: &str) -> Option<String> {
    let digits = run_id.strip_prefix('r')?.split('-').next()?;
    if digits.len() != 14 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let d = |a: usize, b: usize| &digits[a..b];
    Some(format!(
        "{}-{}-{}T{}:{}:{}.000Z",
        d(0, 4),
        d(4, 6),
        d(6, 8),
        d(8, 10),
        d(10, 12),
        d(12, 14)
    ))
}

/// Fills in whether each run's container runs: one question to each
/// engine, not one a run.
fn container_states(rows: &mut [Session]) {
    use crate::exec::container;
    let mut by_engine: std::collections::BTreeMap<Option<String>, Vec<String>> =
        std::collections::BTreeMap::new();
    for c in rows.iter().filter_map(|r| r.container.as_ref()) {
        by_engine
            .entry(c.engine.clone())
            .or_default()
            .push(c.name.clone());
    }
    for (engine, names) in by_engine {
        let kind = engine.as_deref().and_then(|e| {
            crate::config::parse_enum::<crate::config::EngineKind>("env.engine", e).ok()
        });
        let states = container::find_engine(kind)
            .ok()
            .and_then(|(_, binary)| container::states_of(&binary, &names).ok());
        for c in rows
            .iter_mut()
            .filter_map(|r| r.container.as_mut())
            .filter(|c| c.engine == engine)
        {
            c.state = states
                .as_ref()
                .and_then(|s| s.get(&c.name))
                .map_or_else(|| "unknown".to_string(), |s| s.as_str().to_string());
        }
    }
}

/// Every run under `home`, newest first; only those of `workspace` when
/// given (compared as canonical paths).
pub fn list(home: &Path, workspace: Option<&Path>) -> Vec<Session> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(home.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal") && p.is_file())
        .collect();
    // Runs whose log is elsewhere (`--wal`), as the index names them.
    for log in indexed(home) {
        if !logs.contains(&log) {
            logs.push(log);
        }
    }
    logs.sort();
    let want = workspace.map(canonical);
    let mut rows: Vec<Session> = logs
        .iter()
        .map(|log| match read_report(log) {
            Ok(r) => Session::of(log, &r),
            Err(e) => Session::unreadable(log, e.to_string()),
        })
        .filter(|s| match (&want, &s.workspace) {
            (None, _) => true,
            (Some(w), Some(ws)) => canonical(Path::new(ws)) == *w,
            // An unreadable log belongs to no workspace we can tell: it is
            // shown with --all only.
            (Some(_), None) => false,
        })
        .collect();
    container_states(&mut rows);
    // Newest first: the start time (a fork's: when it was made), a fork
    // before a run of the same time, then the log's name (run ids sort by
    // time too).
    rows.sort_by(|a, b| {
        (b.started_at.as_deref(), b.forked, b.log.as_str()).cmp(&(
            a.started_at.as_deref(),
            a.forked,
            a.log.as_str(),
        ))
    });
    rows
}

/// Where the index of runs whose log is outside `$TINYAGENT_HOME/runs`
/// lives: one file per run, named by its id, holding the log's path.
fn index_dir(home: &Path) -> PathBuf {
    home.join("index")
}

/// Notes a run whose log is not under `home/runs` (started with `--wal`
/// elsewhere), so that `sessions` lists it and its id names it. Best
/// effort: the run goes on without it.
pub fn index(home: &Path, wal: &Path, run_id: &str) {
    if wal.parent() == Some(home.join("runs").as_path()) || run_id.contains(['/', '\\']) {
        return;
    }
    let dir = index_dir(home);
    if tinyagent_store::fsutil::create_dir_all_durable(&dir).is_err() {
        return;
    }
    // Replaced whole (temp file, fsync, rename): never a half-written
    // entry, never written through a link planted at its name.
    let path = canonical(wal);
    let _ = tinyagent_store::fsutil::atomic_write(
        &dir.join(run_id),
        path.as_os_str().as_encoded_bytes(),
    );
}

/// The logs the index names that are still there.
fn indexed(home: &Path) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(index_dir(home)) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|p| PathBuf::from(p.trim_end()))
        .filter(|p| p.is_file())
        .collect()
}

/// The log a run id (or a unique start of one) names, among every run
/// `sessions --all` lists.
///
/// # Errors
/// Exit 2 when no run or more than one matches.
pub fn by_id(home: &Path, id: &str) -> Result<PathBuf, String> {
    let rows = list(home, None);
    let hits: Vec<&Session> = rows
        .iter()
        .filter(|s| s.run_id.as_deref().is_some_and(|r| r.starts_with(id)))
        .collect();
    match hits.as_slice() {
        [one] => Ok(PathBuf::from(&one.log)),
        [] => Err(format!(
            "{id}: no such log, and no run id starts with it (`tinyagent sessions --all` lists \
             them)"
        )),
        many => Err(format!(
            "{id} names {} runs ({}); give more of the id",
            many.len(),
            many.iter()
                .filter_map(|s| s.run_id.as_deref())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The log of the newest run of `workspace`, for `resume --last`.
///
/// # Errors
/// The workspace has no run under `home` (a refusal).
pub fn last(home: &Path, workspace: &Path) -> Result<PathBuf, String> {
    list(home, Some(workspace))
        .into_iter()
        .find(|s| s.status != "unreadable")
        .map(|s| PathBuf::from(s.log))
        .ok_or_else(|| {
            format!(
                "no run of {} under {}: start one with `tinyagent run`, or list them all with \
                 `tinyagent sessions --all`",
                workspace.display(),
                home.join("runs").display()
            )
        })
}

#[cfg(test)]
mod made_at_tests {
    #[test]
    fn a_run_id_names_when_the_run_was_made() {
        assert_eq!(
            super::made_at("r20261207034408-8bd9").as_deref(),
            Some("2026-12-07T03:44:08.000Z")
        );
        assert_eq!(super::made_at("imported-run"), None);
        assert_eq!(super::made_at("r2026-1"), None);
    }
}
