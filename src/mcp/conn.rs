//! One MCP server's connection: its process, spawned in its own process
//! group by a thread that then waits for it, the end of its stderr, and the
//! client session on its stdio. [`connect`] makes one (killing the group on
//! any failure), [`stop_conn`] ends one.
//!
//! The process is spawned by a thread of its own, which then waits for it
//! (the parent-death signal fires when the spawning thread ends, so that
//! thread must live as long as the child). It runs in the workspace, with
//! the key variables scrubbed from its environment. Its stderr is kept, the
//! last few KiB, for error messages.

use super::ServerSpec;
use crate::exec::host;
use nix::sys::signal::Signal;
use rmcp::model::Tool as McpToolInfo;
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How much of a server's stderr is kept.
const STDERR_TAIL: usize = 4096;

pub(super) type Shared<T> = Arc<Mutex<T>>;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running server process and the client session on its stdio.
pub(super) struct Conn {
    pub(super) service: RunningService<RoleClient, ()>,
    /// The process's pid, which is its process group's id.
    pub(super) pgid: u32,
    /// How the process ended, once it has.
    pub(super) exited: Shared<Option<String>>,
    pub(super) stderr: Shared<StderrTail>,
    /// Set once the server sent a line longer than [`super::MAX_MESSAGE`]
    /// (the session has ended then).
    pub(super) oversized: Arc<AtomicBool>,
}

impl Conn {
    pub(super) fn exit(&self) -> Option<String> {
        lock(&self.exited).clone()
    }

    /// Why this connection cannot take a call, if it cannot: a clause
    /// following "MCP server `x`".
    pub(super) fn broken(&self) -> Option<String> {
        if let Some(exit) = self.exit() {
            Some(format!("exited ({exit})"))
        } else if self.oversized.load(Ordering::SeqCst) {
            Some(format!("sent a message larger than {}", limit_text()))
        } else if self.service.is_closed() || self.service.peer().is_transport_closed() {
            Some("closed its connection".into())
        } else {
            None
        }
    }
}

/// The largest message, as the messages say it.
pub(super) fn limit_text() -> String {
    format!("{} MiB", super::MAX_MESSAGE / (1024 * 1024))
}

/// Closes the session, asks the process group to stop and kills it when it
/// has not within a second.
pub(super) fn stop_conn(rt: Option<&tokio::runtime::Runtime>, conn: Conn) {
    let Conn {
        service,
        pgid,
        exited,
        ..
    } = conn;
    {
        let _guard = rt.map(tokio::runtime::Runtime::enter);
        drop(service);
    }
    if lock(&exited).is_none() {
        host::signal_group(pgid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(1);
        while lock(&exited).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Whatever is left of the group (the leader, or what it started).
    host::kill_group(pgid);
}

/// The process's pipes, as handed over by its spawning thread.
struct Spawned {
    stdin: std::process::ChildStdin,
    stdout: std::process::ChildStdout,
    pid: u32,
    exited: Shared<Option<String>>,
    stderr: Shared<StderrTail>,
}

/// Spawns the server process on a thread that then waits for it.
fn spawn(spec: &ServerSpec) -> Result<Spawned, String> {
    let mut cmd = match &spec.confine {
        Some(sandbox) => {
            let words: Vec<String> = std::iter::once(&spec.command)
                .chain(&spec.args)
                .map(|w| sh_quote(w))
                .collect();
            // The server's own program and files may lie where the sandbox
            // shows nothing (its private /tmp): they are shown, read-only.
            let sandbox = sandbox.clone().showing(spec.own_files());
            crate::exec::env::ExecEnv::command(
                &sandbox,
                &format!("exec {}", words.join(" ")),
                &spec.cwd,
            )
        }
        None => {
            let mut cmd = Command::new(&spec.command);
            cmd.args(&spec.args).current_dir(&spec.cwd);
            cmd
        }
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::exec::env::scrub_keys(&mut cmd);
    for var in &spec.hide {
        cmd.env_remove(var);
    }
    cmd.envs(&spec.env);
    crate::exec::host::detach(&mut cmd);
    crate::exec::group::die_with_agent(&mut cmd);
    let exited: Shared<Option<String>> = Arc::default();
    let stderr: Shared<StderrTail> = Arc::default();
    let (tx, rx) = sync_channel(1);
    let (exited2, stderr2) = (exited.clone(), stderr.clone());
    std::thread::Builder::new()
        .name(format!("mcp-{}-wait", spec.name))
        .spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
            let (Some(stdin), Some(stdout), Some(err)) = pipes else {
                let _ = child.kill();
                let _ = child.wait();
                let _ = tx.send(Err(std::io::Error::other("no pipes to the server")));
                return;
            };
            let _ = tx.send(Ok((stdin, stdout, child.id())));
            keep_stderr(err, stderr2);
            let status = match child.wait() {
                Ok(s) => describe_exit(s),
                Err(e) => format!("cannot wait for it: {e}"),
            };
            *lock(&exited2) = Some(status);
        })
        .map_err(|e| format!("MCP server `{}`: cannot start a thread: {e}", spec.name))?;
    match rx.recv() {
        Ok(Ok((stdin, stdout, pid))) => Ok(Spawned {
            stdin,
            stdout,
            pid,
            exited,
            stderr,
        }),
        Ok(Err(e)) => Err(format!(
            "MCP server `{}` could not be started: `{}`: {e}",
            spec.name, spec.command
        )),
        Err(_) => Err(format!("MCP server `{}` could not be started", spec.name)),
    }
}

/// `word` quoted for `bash`.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("killed by {}", s.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        _ => "ended".into(),
    }
}

/// Reads the server's stderr on a thread, keeping its last bytes.
fn keep_stderr(mut err: std::process::ChildStderr, tail: Shared<StderrTail>) {
    let _ = std::thread::Builder::new()
        .name("mcp-stderr".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut t = lock(&tail);
                t.bytes.extend_from_slice(&buf[..n]);
                let excess = t.bytes.len().saturating_sub(STDERR_TAIL);
                t.bytes.drain(..excess);
            }
            lock(&tail).closed = true;
        });
}

/// The end of a server's stderr, and whether the pipe has been read to its
/// end (everything the process wrote is in).
#[derive(Default)]
pub(super) struct StderrTail {
    bytes: Vec<u8>,
    closed: bool,
}

pub(super) fn stderr_tail(tail: &Shared<StderrTail>) -> String {
    String::from_utf8_lossy(&lock(tail).bytes)
        .trim()
        .to_string()
}

/// Spawns the server, initializes the session and lists the tools, within
/// the startup timeout (cut short when `stop` is set); on any failure the
/// process group is killed.
pub(super) fn connect(
    rt: &tokio::runtime::Runtime,
    spec: &ServerSpec,
    stop: &crate::signals::StopToken,
) -> Result<(Conn, Vec<McpToolInfo>), String> {
    let spawned = spawn(spec)?;
    let Spawned {
        stdin,
        stdout,
        pid,
        exited,
        stderr,
    } = spawned;
    let timeout = spec.startup_timeout;
    let oversized = Arc::new(AtomicBool::new(false));
    let tripped = oversized.clone();
    let (tx, rx) = sync_channel(1);
    rt.spawn(async move {
        let session = async move {
            let stdin = tokio::process::ChildStdin::from_std(stdin)
                .map_err(|e| format!("its stdin: {e}"))?;
            let stdout = tokio::process::ChildStdout::from_std(stdout)
                .map_err(|e| format!("its stdout: {e}"))?;
            let stdout = super::limit::LineLimit::new(stdout, super::MAX_MESSAGE, tripped);
            let service = ().serve((stdout, stdin)).await.map_err(|e| e.to_string())?;
            let tools = service
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| format!("listing its tools failed: {e}"))?;
            Ok::<_, String>((service, tools))
        };
        let result = match tokio::time::timeout(timeout, session).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "it did not start and list its tools within {} ms (mcp.servers.<name>.startup_timeout_ms)",
                timeout.as_millis()
            )),
        };
        let _ = tx.send(result);
    });
    // A stopping signal cuts the wait short (nothing has been written yet).
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(r) => break r,
            Err(RecvTimeoutError::Disconnected) => {
                break Err("its session ended unexpectedly".into());
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(sig) = stop.signal() {
                    break Err(format!(
                        "interrupted by {} while it started",
                        crate::signals::name(sig)
                    ));
                }
            }
        }
    };
    match result {
        Ok((service, tools)) => Ok((
            Conn {
                service,
                pgid: pid,
                exited,
                stderr,
                oversized,
            },
            tools,
        )),
        Err(why) => {
            let why = if oversized.load(Ordering::SeqCst) {
                format!(
                    "it sent a message larger than {}, the largest a server may send ({why})",
                    limit_text()
                )
            } else {
                why
            };
            host::kill_group(pid);
            // Give it a moment to be reaped and its stderr to be read to
            // the end (the two happen on different threads).
            let deadline = Instant::now() + Duration::from_millis(500);
            while (lock(&exited).is_none() || !lock(&stderr).closed) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let exit = lock(&exited).clone();
            let mut text = format!("MCP server `{}` failed to start: {why}", spec.name);
            if let Some(exit) =
                exit.filter(|_| why.contains("closed") || why.contains("connection"))
            {
                text.push_str(&format!(" ({exit})"));
            }
            let tail = stderr_tail(&stderr);
            if !tail.is_empty() {
                text.push_str(&format!("; its stderr ended with: {}", one_line(&tail)));
            }
            Err(text)
        }
    }
}

fn one_line(s: &str) -> String {
    let joined = s.lines().map(str::trim).collect::<Vec<_>>().join(" | ");
    crate::text::cut_chars(&joined, 600, "…")
}
