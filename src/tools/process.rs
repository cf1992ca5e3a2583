//! Background processes: the [`ProcessTable`] and the `process` tool.
//!
//! `bash` with `background: true` starts a script through the table: its own
//! process group, stdin closed, stdout and stderr appended to
//! `<output_dir>/<id>.log`. The table owns the children (a `Mutex` inside, so
//! it is shared by reference between the loop and the tool threads). Ids are
//! `p1`, `p2`, ...; [`ProcessTable::continue_after`] skips ids an earlier
//! part of the run already used. The loop calls [`ProcessTable::poll_exited`]
//! between calls to record `process.exited`, and [`ProcessTable::kill_all`]
//! when it decides to stop them.
//!
//! Children are spawned by one long-lived thread of the table, not by the
//! calling thread: PR_SET_PDEATHSIG (bubblewrap's `--die-with-parent`) fires
//! when the *thread* that forked a process ends, and the agent calls tools on
//! short-lived blocking threads. A bubblewrap that sets it in its first
//! process would otherwise die with the tool thread. Dropping the table ends
//! the spawner thread; processes are not killed by that (call `kill_all`).

use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use crate::event::{Event, ProcessExited, ProcessStarted};
use crate::exec::container::Container;
use crate::exec::env::ExecEnv;
use crate::exec::host::kill_group;
pub use crate::exec::host::proc_start_time;
use crate::text::cut_bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use std::fs::OpenOptions;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, MutexGuard, PoisonError};
use thiserror::Error;

/// Default and largest `tail_bytes` of the `process` tool.
const DEFAULT_TAIL: u64 = 10_000;
const MAX_TAIL: u64 = 100_000;

#[derive(Debug, Error)]
pub enum ProcessError {
    #[error("no background process `{0}` (use action \"list\" to see them)")]
    UnknownId(String),
    #[error("cannot create the output file in {0}: {1}")]
    OutputFile(String, io::Error),
    #[error("failed to start the command: {0}")]
    Spawn(io::Error),
    #[error("cannot read the output of `{0}`: {1}")]
    ReadOutput(String, io::Error),
}

/// Where a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessStatus {
    Running,
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

impl std::fmt::Display for ProcessStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcessStatus::Running => write!(f, "running"),
            ProcessStatus::Exited {
                code: Some(code), ..
            } => write!(f, "exited with code {code}"),
            ProcessStatus::Exited {
                signal: Some(sig), ..
            } => write!(f, "killed by signal {sig}"),
            ProcessStatus::Exited { .. } => write!(f, "exited"),
        }
    }
}

/// One process as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSummary {
    pub id: String,
    pub pid: u32,
    pub command: String,
    pub env: String,
    pub status: ProcessStatus,
    pub output: PathBuf,
    pub start_time: Option<u64>,
}

struct Entry {
    summary: ProcessSummary,
    child: Option<Child>,
    /// A process in the run's container (no child of ours: the exec that
    /// started it has ended).
    inside: Option<Container>,
    reported: bool,
}

impl Entry {
    fn refresh(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.finish(status);
        }
        if let Some(c) = &self.inside
            && let Some(code) = c.exit_code(&self.summary.id)
        {
            self.summary.status = ProcessStatus::Exited {
                code: Some(code),
                signal: None,
            };
            self.inside = None;
        }
    }

    fn finish(&mut self, status: ExitStatus) {
        self.summary.status = ProcessStatus::Exited {
            code: status.code(),
            signal: status.signal(),
        };
        self.child = None;
    }

    fn kill(&mut self) {
        if let Some(c) = self.inside.take() {
            c.signal_group(
                self.summary.pid,
                self.summary.start_time,
                nix::sys::signal::Signal::SIGKILL,
            );
            self.summary.status = ProcessStatus::Exited {
                code: None,
                signal: Some(9),
            };
        }
        if let Some(child) = self.child.as_mut() {
            kill_group(child.id());
            if let Ok(status) = child.wait() {
                self.finish(status);
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    next: u64,
    entries: Vec<Entry>,
}

/// A command to spawn and where to send the child.
type SpawnRequest = (Command, Sender<io::Result<Child>>);

/// The background processes of a run.
pub struct ProcessTable {
    output_dir: PathBuf,
    inner: Mutex<Inner>,
    spawner: Mutex<Option<Sender<SpawnRequest>>>,
}

impl ProcessTable {
    /// Output files go to `output_dir` (created on the first start).
    pub fn new(output_dir: PathBuf) -> Self {
        ProcessTable {
            output_dir,
            inner: Mutex::new(Inner {
                next: 1,
                entries: Vec::new(),
            }),
            spawner: Mutex::new(None),
        }
    }

    /// Spawns `cmd` on the table's spawner thread (started on first use).
    fn spawn(&self, cmd: Command) -> io::Result<Child> {
        let mut slot = self.spawner.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = match slot.as_ref() {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = mpsc::channel::<SpawnRequest>();
                std::thread::Builder::new()
                    .name("tinyagent-spawner".into())
                    .spawn(move || {
                        for (mut cmd, reply) in rx {
                            let _ = reply.send(cmd.spawn());
                        }
                    })?;
                slot.insert(tx).clone()
            }
        };
        drop(slot);
        let (reply_tx, reply_rx) = mpsc::channel();
        let gone = || io::Error::other("the process spawner thread is gone");
        tx.send((cmd, reply_tx)).map_err(|_| gone())?;
        reply_rx.recv().map_err(|_| gone())?
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the next id larger than any `p<N>` among `used` (on resume).
    pub fn continue_after<'a>(&self, used: impl IntoIterator<Item = &'a str>) {
        let mut inner = self.lock();
        for id in used {
            if let Some(n) = id.strip_prefix('p').and_then(|n| n.parse::<u64>().ok()) {
                inner.next = inner.next.max(n.saturating_add(1));
            }
        }
    }

    /// Tracks again a process found still running in the run's container
    /// on resume (as `process.started` recorded it).
    pub fn reattach(&self, info: &crate::session::ProcessInfo, container: &Container) {
        let output = info.output.as_ref().map_or_else(
            || container.output_dir().join(format!("{}.log", info.id)),
            PathBuf::from,
        );
        self.lock().entries.push(Entry {
            summary: ProcessSummary {
                id: info.id.clone(),
                pid: info.pid,
                command: info.command.clone(),
                env: info.env.clone(),
                status: ProcessStatus::Running,
                output,
                start_time: info.start_time,
            },
            child: None,
            inside: Some(container.clone()),
            reported: false,
        });
    }

    /// Starts `command` in the background; the record to log as `process.started`.
    pub fn start(
        &self,
        env: &dyn ExecEnv,
        workspace: &Path,
        command: &str,
        step: u64,
    ) -> Result<ProcessStarted, ProcessError> {
        let container = env.container();
        let output_dir = container.map_or(self.output_dir.as_path(), Container::output_dir);
        let dir_err = |e| ProcessError::OutputFile(output_dir.display().to_string(), e);
        tinyagent_store::fsutil::create_dir_all_durable(output_dir).map_err(dir_err)?;
        let mut inner = self.lock();
        let (id, path, file) = loop {
            let id = format!("p{}", inner.next);
            inner.next += 1;
            let path = output_dir.join(format!("{id}.log"));
            match OpenOptions::new()
                .append(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => break (id, path, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(dir_err(e)),
            }
        };
        if let Some(c) = container {
            drop(file);
            let (pid, start_time) = c
                .start_background(command, workspace, &id)
                .map_err(ProcessError::Spawn)?;
            let summary = ProcessSummary {
                id: id.clone(),
                pid,
                command: command.to_string(),
                env: env.kind().to_string(),
                status: ProcessStatus::Running,
                output: path.clone(),
                start_time,
            };
            inner.entries.push(Entry {
                summary,
                child: None,
                inside: Some(c.clone()),
                reported: false,
            });
            return Ok(ProcessStarted {
                id,
                pid,
                command: command.to_string(),
                step,
                env: env.kind().to_string(),
                start_time,
                output: Some(path.display().to_string()),
                container: Some(c.name().to_string()),
                engine: Some(c.engine().to_string()),
            });
        }
        let stderr = file.try_clone().map_err(dir_err)?;
        let mut cmd = env.command(command, workspace);
        cmd.stdin(Stdio::null()).stdout(file).stderr(stderr);
        crate::exec::host::detach(&mut cmd);
        let child = self.spawn(cmd).map_err(ProcessError::Spawn)?;
        let pid = child.id();
        let summary = ProcessSummary {
            id: id.clone(),
            pid,
            command: command.to_string(),
            env: env.kind().to_string(),
            status: ProcessStatus::Running,
            output: path.clone(),
            start_time: proc_start_time(pid),
        };
        let record = ProcessStarted {
            id,
            pid,
            command: command.to_string(),
            step,
            env: summary.env.clone(),
            start_time: summary.start_time,
            output: Some(path.display().to_string()),
            container: None,
            engine: None,
        };
        inner.entries.push(Entry {
            summary,
            child: Some(child),
            inside: None,
            reported: false,
        });
        Ok(record)
    }

    /// Every process started so far, in start order, statuses refreshed
    /// (processes in a container are looked for inside it: one exec).
    pub fn list(&self) -> Vec<ProcessSummary> {
        let mut inner = self.lock();
        for e in &mut inner.entries {
            e.refresh();
        }
        let inside: Vec<(u32, Option<u64>)> = inner
            .entries
            .iter()
            .filter(|e| e.inside.is_some())
            .map(|e| (e.summary.pid, e.summary.start_time))
            .collect();
        if let Some(c) = inner.entries.iter().find_map(|e| e.inside.clone()) {
            let alive = c.alive(&inside);
            for e in &mut inner.entries {
                if e.inside.is_some() && !alive.contains(&e.summary.pid) {
                    // Gone without its wrapper's exit file: killed (or
                    // its container went). Look once more for the file.
                    e.refresh();
                    if e.inside.take().is_some() {
                        e.summary.status = ProcessStatus::Exited {
                            code: None,
                            signal: None,
                        };
                    }
                }
            }
        }
        inner.entries.iter().map(|e| e.summary.clone()).collect()
    }

    /// The last `tail_bytes` of a process's output, and how many bytes came
    /// before them.
    pub fn output(&self, id: &str, tail_bytes: u64) -> Result<(String, u64), ProcessError> {
        let path = {
            let inner = self.lock();
            let entry = inner.entries.iter().find(|e| e.summary.id == id);
            entry
                .map(|e| e.summary.output.clone())
                .ok_or_else(|| ProcessError::UnknownId(id.to_string()))?
        };
        let read_err = |e| ProcessError::ReadOutput(id.to_string(), e);
        // A container's processes can write their output directory: no
        // link is followed, and only a regular file is read.
        let mut file = crate::exec::container::open_regular(&path).map_err(read_err)?;
        let len = file.metadata().map_err(read_err)?.len();
        let skipped = len.saturating_sub(tail_bytes);
        file.seek(SeekFrom::Start(skipped)).map_err(read_err)?;
        let mut bytes = Vec::new();
        file.take(tail_bytes)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        Ok((String::from_utf8_lossy(&bytes).into_owned(), skipped))
    }

    /// Kills a process and its whole group (if still running); its status after.
    pub fn kill(&self, id: &str) -> Result<ProcessStatus, ProcessError> {
        let mut inner = self.lock();
        let entry = inner
            .entries
            .iter_mut()
            .find(|e| e.summary.id == id)
            .ok_or_else(|| ProcessError::UnknownId(id.to_string()))?;
        entry.refresh();
        entry.kill();
        Ok(entry.summary.status)
    }

    /// Reaps processes that ended and returns each ended process once, for
    /// the loop to record `process.exited`. Never blocks.
    pub fn poll_exited(&self) -> Vec<ProcessExited> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for entry in &mut inner.entries {
            entry.refresh();
            if let (ProcessStatus::Exited { code, signal }, false) =
                (entry.summary.status, entry.reported)
            {
                entry.reported = true;
                out.push(ProcessExited {
                    id: entry.summary.id.clone(),
                    exit_code: code,
                    signal,
                });
            }
        }
        out
    }

    /// Kills every running process (whole groups) and reaps them.
    pub fn kill_all(&self) {
        let mut inner = self.lock();
        for entry in &mut inner.entries {
            entry.refresh();
            entry.kill();
        }
    }
}

/// Arguments of `process`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessArgs {
    pub action: ProcessAction,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub tail_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessAction {
    List,
    Output,
    Kill,
}

/// `bash` with `background: true`.
pub(crate) fn start_from_tool(ctx: &ToolContext, command: &str) -> ToolOutcome {
    match ctx
        .processes
        .start(ctx.env, ctx.workspace, command, ctx.step)
    {
        Ok(rec) => {
            let mut outcome = ToolOutcome::ok(format!(
                "Started background process {} (pid {}). Its output goes to {}. Use the process \
                 tool with {{\"action\": \"output\", \"id\": \"{}\"}} to read it and \
                 {{\"action\": \"kill\", \"id\": \"{}\"}} to stop it.",
                rec.id,
                rec.pid,
                rec.output.as_deref().unwrap_or("?"),
                rec.id,
                rec.id
            ));
            outcome.records.push(Event::ProcessStarted(rec));
            outcome
        }
        Err(e) => ToolOutcome::error(e.to_string()),
    }
}

/// The `process` tool. It can kill processes, so it is `Mutating`: hidden in
/// read-only runs and never re-run on resume.
pub struct ProcessTool;

impl TypedTool for ProcessTool {
    const NAME: &'static str = "process";
    const DESCRIPTION: &'static str = "Manage background processes started with bash \
        background: true. action \"list\" shows every process with its status; \"output\" \
        returns the tail of a process's output (tail_bytes, default 10000); \"kill\" kills the \
        process and its whole group.";
    const USAGE: &'static str = r#"{"action": "list" | "output" | "kill", "id"?: string (required for output and kill), "tail_bytes"?: integer}"#;
    const EFFECT: Effect = Effect::Mutating;
    type Args = ProcessArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "output", "kill"]},
                "id": {"type": "string", "description": "Process id such as \"p1\" (for output and kill)."},
                "tail_bytes": {"type": "integer", "minimum": 1,
                    "description": "How many bytes of the end of the output to return (default 10000)."}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: ProcessArgs) -> ToolOutcome {
        let table = ctx.processes;
        let need_id = |action: &str| {
            ToolOutcome::error(format!(
                "action \"{action}\" needs an id such as \"p1\" (use action \"list\" to see them)"
            ))
        };
        match args.action {
            ProcessAction::List => {
                let all = table.list();
                if all.is_empty() {
                    return ToolOutcome::ok("No background processes.");
                }
                let lines: Vec<String> = all
                    .iter()
                    .map(|p| {
                        format!(
                            "{}  pid {}  {}  [{}]  {}",
                            p.id,
                            p.pid,
                            p.status,
                            p.env,
                            cut_bytes(&p.command, 200)
                        )
                    })
                    .collect();
                ToolOutcome::ok(lines.join("\n"))
            }
            ProcessAction::Output => {
                let Some(id) = args.id else {
                    return need_id("output");
                };
                let tail = args.tail_bytes.unwrap_or(DEFAULT_TAIL).clamp(1, MAX_TAIL);
                let status = table
                    .list()
                    .into_iter()
                    .find(|p| p.id == id)
                    .map(|p| p.status);
                match (table.output(&id, tail), status) {
                    (Ok((text, skipped)), Some(status)) => {
                        let mut out = String::new();
                        if skipped > 0 {
                            out.push_str(&format!("[... {skipped} earlier bytes not shown ...]\n"));
                        }
                        out.push_str(if text.is_empty() {
                            "(no output yet)\n"
                        } else {
                            &text
                        });
                        if !out.ends_with('\n') {
                            out.push('\n');
                        }
                        out.push_str(&format!("[{id}: {status}]"));
                        ToolOutcome::ok(out)
                    }
                    (Err(e), _) => ToolOutcome::error(e.to_string()),
                    (Ok(_), None) => ToolOutcome::error(ProcessError::UnknownId(id).to_string()),
                }
            }
            ProcessAction::Kill => {
                let Some(id) = args.id else {
                    return need_id("kill");
                };
                let before = table.list().into_iter().find(|p| p.id == id);
                match (before, table.kill(&id)) {
                    (Some(p), Ok(status)) if p.status != ProcessStatus::Running => {
                        ToolOutcome::ok(format!("{id} was not running any more ({status})."))
                    }
                    (_, Ok(status)) => {
                        ToolOutcome::ok(format!("Killed {id} and its process group ({status})."))
                    }
                    (_, Err(e)) => ToolOutcome::error(e.to_string()),
                }
            }
        }
    }
}
