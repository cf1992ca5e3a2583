//! The `bash` tool: runs a script through the [`ExecEnv`] in the workspace.
//!
//! Foreground commands run in their own process group with stdin closed;
//! stdout and stderr go to one pipe (so they stay interleaved as printed) and
//! are kept head-and-tail by [`HeadTail`]. A waiter thread owns the child; the
//! caller waits for it up to the timeout, then kills the whole group with
//! SIGKILL. When the group leader has ended, whatever it left behind in its
//! group is killed too, so that the pipe closes and nothing lingers (long-lived
//! processes belong in the background). `background: true` hands the script to
//! the [`crate::tools::ProcessTable`] instead.

use super::output::{HeadTail, OUTPUT_CAP};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use crate::exec::env::ExecEnv;
use crate::exec::group::{self, Launch};
use nix::sys::signal::Signal;
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Default timeout of a foreground command.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;

/// How long to wait for the output pipe to close once the group is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How often a running command's wait looks for a timeout or a signal.
const POLL: Duration = Duration::from_millis(25);
/// A command running longer than this shows its progress (see
/// [`Launch::progress`]), refreshed this often.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Arguments of `bash`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    pub command: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub background: Option<bool>,
}

/// What a foreground command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// stdout and stderr merged, head and tail kept, the cut marked.
    pub output: String,
    /// Bytes of output cut from the middle.
    pub cut_bytes: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Set when a signal to the agent stopped the command.
    pub stopped: Option<Stopped>,
}

/// The `bash` tool.
pub struct BashTool;

impl TypedTool for BashTool {
    const NAME: &'static str = "bash";
    const DESCRIPTION: &'static str = "Run a shell command with `bash -c` in the workspace \
        directory. stdout and stderr are merged and returned with the exit code. The command runs \
        in its own process group with stdin closed; when it exceeds timeout_ms (default 120000) \
        the whole group is killed, and processes it leaves behind are killed when it ends. Long \
        output keeps its head and tail and marks how much was cut. For servers and other \
        long-running commands set background: true: the call returns at once with a process id, \
        and the `process` tool lists, reads the output of, or kills it. Prefer \
        read/grep/glob/edit over cat/grep/find/sed for files.";
    const USAGE: &'static str =
        r#"{"command": string, "timeout_ms"?: integer, "background"?: boolean}"#;
    const EFFECT: Effect = Effect::Mutating;
    type Args = BashArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash script to run."},
                "timeout_ms": {"type": "integer", "minimum": 1,
                    "description": "Kill the command after this many milliseconds (default 120000)."},
                "background": {"type": "boolean",
                    "description": "Start the command in the background and return its process id at once."}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn launches(&self, args: &BashArgs) -> bool {
        !args.command.trim().is_empty()
            && !args.background.unwrap_or(false)
            && args.timeout_ms != Some(0)
    }

    fn run(&self, ctx: &ToolContext, args: BashArgs) -> ToolOutcome {
        if args.command.trim().is_empty() {
            return ToolOutcome::error("command is empty");
        }
        if args.background.unwrap_or(false) {
            return super::process::start_from_tool(ctx, &args.command);
        }
        let timeout_ms = match args.timeout_ms {
            Some(0) => return ToolOutcome::error("timeout_ms must be at least 1"),
            Some(ms) => ms,
            None => DEFAULT_TIMEOUT_MS,
        };
        let timeout = Duration::from_millis(timeout_ms);
        match run_foreground(
            ctx.env,
            ctx.launch,
            ctx.stop,
            ctx.workspace,
            &args.command,
            timeout,
            OUTPUT_CAP,
        ) {
            Ok(out) => describe(&out, timeout_ms),
            Err(e) => ToolOutcome::error(format!("failed to start the command: {e}")),
        }
    }
}

fn describe(out: &CommandOutput, timeout_ms: u64) -> ToolOutcome {
    if let Some(stopped) = out.stopped {
        let name = crate::signals::name(stopped.signal);
        let mut outcome = ToolOutcome::error(format!(
            "[interrupted by {name}: the command was stopped after {:.1} s]\n{}",
            stopped.after.as_secs_f64(),
            out.output
        ));
        outcome.signal = Some(name);
        return outcome;
    }
    let mut text = if out.output.is_empty() {
        "(no output)\n".to_string()
    } else {
        out.output.clone()
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let (status, failed) = if out.timed_out {
        (
            format!(
                "[timed out after {timeout_ms} ms: the command and its whole process group were killed]"
            ),
            true,
        )
    } else if let Some(code) = out.exit_code {
        (format!("[exit code: {code}]"), code != 0)
    } else if let Some(sig) = out.signal {
        (format!("[killed by signal {sig}]"), true)
    } else {
        ("[exit status unknown]".to_string(), true)
    };
    text.push_str(&status);
    if failed {
        ToolOutcome::error(text)
    } else {
        ToolOutcome::ok(text)
    }
}

/// How a foreground command was stopped by a signal to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub signal: Signal,
    /// From the start of the command to the signal.
    pub after: Duration,
}

/// Runs `script` in `workspace` through `env` and waits for it, at most
/// `timeout`; output is capped at `cap` bytes (head and tail). The command
/// is held until `launch` has recorded its process group. A stopping signal
/// (`stop` set, see [`crate::signals`]) is passed to the group, then SIGKILL
/// after [`crate::signals::GRACE`] or a second signal.
pub fn run_foreground(
    env: &dyn ExecEnv,
    launch: &dyn Launch,
    stop: &crate::signals::StopToken,
    workspace: &Path,
    script: &str,
    timeout: Duration,
    cap: usize,
) -> io::Result<CommandOutput> {
    let (mut reader, writer) = io::pipe()?;
    let mut held = env.spawn_held(script, workspace, writer)?;
    let group = held.group;
    if let Err(e) = launch.record(&held.group) {
        // Never released: the command never execs.
        held.abandon();
        let _ = held.status.recv();
        return Err(io::Error::other(format!(
            "could not record the command's process group, so it was not run: {e}"
        )));
    }
    held.release()?;
    let started = Instant::now();
    let status_rx = held.status;

    let buffer = Arc::new(Mutex::new(HeadTail::new(cap)));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let sink = Arc::clone(&buffer);
    thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => sink
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done_tx.send(());
    });

    let mut timed_out = false;
    let mut stopped = None;
    let mut shown = started;
    let status = loop {
        match status_rx.recv_timeout(POLL) {
            Ok(status) => break status?,
            Err(RecvTimeoutError::Disconnected) => {
                launch.progress_done();
                return Err(io::Error::other("lost the command's exit status"));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        // A person watching sees a long command's time and last line.
        if started.elapsed() >= PROGRESS_AFTER && shown.elapsed() >= PROGRESS_EVERY {
            shown = Instant::now();
            let last = buffer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .last_line(100);
            launch.progress(started.elapsed(), &last);
        }
        if let Some(sig) = stop.signal() {
            let seen = stop.count();
            stopped = Some(Stopped {
                signal: sig,
                after: started.elapsed(),
            });
            let mut status = None;
            group::stop_with(
                |s| env.signal_group(&group, s),
                sig,
                crate::signals::GRACE,
                |wait| match status_rx.recv_timeout(wait) {
                    Ok(s) => {
                        status = Some(s);
                        true
                    }
                    Err(RecvTimeoutError::Timeout) => false,
                    Err(RecvTimeoutError::Disconnected) => true,
                },
                || stop.count() > seen,
            );
            break match status {
                Some(s) => s?,
                None => status_rx
                    .recv()
                    .map_err(|_| io::Error::other("lost the command's exit status"))??,
            };
        }
        if started.elapsed() >= timeout {
            env.signal_group(&group, Signal::SIGKILL);
            timed_out = true;
            break status_rx
                .recv()
                .map_err(|_| io::Error::other("lost the command's exit status"))??;
        }
    };
    launch.progress_done();
    // Whatever the command left running in its group goes with it (in a
    // container the wrapper has done this itself).
    if env.container().is_none() {
        env.signal_group(&group, Signal::SIGKILL);
    }
    let _ = done_rx.recv_timeout(DRAIN_GRACE);

    let buf = buffer.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(CommandOutput {
        output: buf.render(),
        cut_bytes: buf.cut(),
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        stopped,
    })
}
