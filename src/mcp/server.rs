//! One MCP server: its process, its client session, its tools.
//!
//! The process is spawned by a thread of its own, which then waits for it
//! (the parent-death signal fires when the spawning thread ends, so that
//! thread must live as long as the child). It runs in a new process group,
//! in the workspace, with the key variables scrubbed from its environment.
//! Its stderr is kept, the last few KiB, for error messages.
//!
//! The client session runs on a small tokio runtime owned by the server;
//! calls come from the agent's (synchronous) tool threads, which wait for
//! the answer while watching for a stopping signal.
//!
//! A server that exits while the run goes on is started again once, and
//! only if it offers the same tools; after that its calls are errors.
//!
//! A call that gets no answer within the server's `timeout_s`, or whose
//! answer is longer than [`super::MAX_MESSAGE`] (its stdout is read through
//! [`super::limit::LineLimit`], which refuses such a line before it is held
//! whole), is given up: the call gets an error result saying which, and the
//! server is stopped. The next call to it starts it again, within the same
//! once-per-run budget as a server that died; once that is spent the server
//! is marked failed and every later call to it is an error at once.

use super::ServerSpec;
use crate::exec::host;
use crate::tools::ToolOutcome;
use nix::sys::signal::Signal;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool as McpToolInfo};
use rmcp::service::{RoleClient, RunningService, ServiceError, ServiceExt};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How much of a server's stderr is kept.
const STDERR_TAIL: usize = 4096;

/// The most of a result's text the model is shown.
const RESULT_CAP: usize = 100 * 1024;

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running server process and the client session on its stdio.
struct Conn {
    service: RunningService<RoleClient, ()>,
    /// The process's pid, which is its process group's id.
    pgid: u32,
    /// How the process ended, once it has.
    exited: Shared<Option<String>>,
    stderr: Shared<StderrTail>,
    /// Set once the server sent a line longer than [`super::MAX_MESSAGE`]
    /// (the session has ended then).
    oversized: Arc<AtomicBool>,
}

impl Conn {
    fn exit(&self) -> Option<String> {
        lock(&self.exited).clone()
    }

    /// Why this connection cannot take a call, if it cannot: a clause
    /// following "MCP server `x`".
    fn broken(&self) -> Option<String> {
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

#[derive(Default)]
struct Live {
    conn: Option<Conn>,
    /// Counts the connections made: which one a call was sent on.
    generation: u64,
    /// Times the server was started again after it died or was stopped.
    restarts: u32,
    /// Why the server was stopped by a call that gave up on it (a clause
    /// following "MCP server `x`"), until it is started again.
    stopped: Option<String>,
    /// Why the server no longer runs, once it will not be started again.
    dead: Option<String>,
}

/// What a call is sent on.
struct Session {
    peer: rmcp::Peer<RoleClient>,
    exited: Shared<Option<String>>,
    oversized: Arc<AtomicBool>,
    generation: u64,
}

/// The largest message, as the messages say it.
fn limit_text() -> String {
    format!("{} MiB", super::MAX_MESSAGE / (1024 * 1024))
}

/// One started server. Dropping it stops the server.
pub struct Server {
    spec: ServerSpec,
    rt: Option<tokio::runtime::Runtime>,
    /// The tools the server listed at start.
    tools: Vec<McpToolInfo>,
    live: Mutex<Live>,
}

impl Server {
    /// Starts the server and lists its tools, within its startup timeout.
    /// The error names the server and says why (with the end of its stderr).
    pub fn start(spec: ServerSpec) -> Result<Server, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("mcp-{}", spec.name))
            .enable_all()
            .build()
            .map_err(|e| format!("MCP server `{}`: cannot start a runtime: {e}", spec.name))?;
        let (conn, tools) = connect(&rt, &spec)?;
        Ok(Server {
            spec,
            rt: Some(rt),
            tools,
            live: Mutex::new(Live {
                conn: Some(conn),
                ..Live::default()
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The command line, for `mcp list`.
    pub fn command_line(&self) -> String {
        std::iter::once(self.spec.command.as_str())
            .chain(self.spec.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The tools the server listed when it started.
    pub fn tools(&self) -> &[McpToolInfo] {
        &self.tools
    }

    /// The pid (= process group) of the running server process, if any.
    pub fn pid(&self) -> Option<u32> {
        lock(&self.live).conn.as_ref().map(|c| c.pgid)
    }

    /// Calls `tool` with `args` and waits for the answer; a stopping signal
    /// abandons the call. Never panics.
    pub fn call(&self, tool: &str, args: JsonObject) -> ToolOutcome {
        let Some(rt) = &self.rt else {
            return ToolOutcome::error(format!("MCP server `{}` was stopped", self.spec.name));
        };
        let session = match self.session() {
            Ok(s) => s,
            Err(why) => return ToolOutcome::error(why),
        };
        // The timeout counts from the call's sending: a start the call had
        // to wait for is bounded by the startup timeout.
        let started = Instant::now();
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(args);
        let (tx, rx) = sync_channel(1);
        let peer = session.peer.clone();
        let task = rt.spawn(async move {
            let _ = tx.send(peer.call_tool(params).await);
        });
        let mut exit_seen: Option<Instant> = None;
        loop {
            if session.oversized.load(Ordering::SeqCst) {
                task.abort();
                return self.refused(tool, &session);
            }
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(Ok(result)) => return render(&result),
                Ok(Err(ServiceError::McpError(e))) => {
                    return ToolOutcome::error(format!(
                        "MCP server `{}` answered the call with an error (code {}): {}",
                        self.spec.name, e.code.0, e.message
                    ));
                }
                Ok(Err(
                    ServiceError::TransportClosed
                    | ServiceError::TransportSend(_)
                    | ServiceError::Cancelled { .. },
                ))
                | Err(RecvTimeoutError::Disconnected) => {
                    if session.oversized.load(Ordering::SeqCst) {
                        return self.refused(tool, &session);
                    }
                    return self.died_during(tool, &session);
                }
                Ok(Err(e)) => {
                    return ToolOutcome::error(format!(
                        "the call to MCP server `{}` failed: {e}",
                        self.spec.name
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Some(sig) = crate::signals::received() {
                task.abort();
                let name = crate::signals::name(sig);
                let mut outcome = ToolOutcome::error(format!(
                    "[interrupted by {name}: the command was stopped after {:.1} s]\n\
                     the call to MCP server `{}` was abandoned; the server may have acted on it",
                    started.elapsed().as_secs_f64(),
                    self.spec.name
                ));
                outcome.signal = Some(name);
                return outcome;
            }
            if started.elapsed() >= self.spec.call_timeout {
                task.abort();
                return self.timed_out(tool, &session);
            }
            // The process is gone: an answer it wrote before it died has a
            // moment to arrive, then the call is given up.
            if lock(&session.exited).is_some() {
                let seen = *exit_seen.get_or_insert_with(Instant::now);
                if seen.elapsed() > Duration::from_millis(500) {
                    task.abort();
                    return self.died_during(tool, &session);
                }
            }
        }
    }

    /// The call got no answer within the timeout: an error result saying
    /// so, and the server is stopped.
    fn timed_out(&self, tool: &str, session: &Session) -> ToolOutcome {
        let secs = self.spec.call_timeout.as_secs();
        let name = &self.spec.name;
        let next = self.give_up(
            session,
            format!("was stopped after a call got no answer within {secs} s"),
        );
        ToolOutcome::error(format!(
            "The call to `{tool}` of MCP server `{name}` timed out after {secs} s \
             (mcp.servers.{name}.timeout_s): it was abandoned and the server stopped; \
             whether the call had any effect is unknown. {next}"
        ))
    }

    /// The server's answer was longer than a message may be: an error
    /// result saying so, and the server is stopped.
    fn refused(&self, tool: &str, session: &Session) -> ToolOutcome {
        let limit = limit_text();
        let next = self.give_up(
            session,
            format!("was stopped after it sent a message larger than {limit}"),
        );
        ToolOutcome::error(format!(
            "The reply of MCP server `{}` to the call to `{tool}` exceeded {limit}, the largest \
             message a server may send: it was refused unread and the server stopped; \
             whether the call had any effect is unknown. {next}",
            self.spec.name
        ))
    }

    /// Stops the connection `session` was sent on (if it is still the
    /// current one) because of `cause`, and says what becomes of the
    /// server: started again by the next call, or, when it already was
    /// once, failed for the rest of the run.
    fn give_up(&self, session: &Session, cause: String) -> String {
        let mut live = lock(&self.live);
        if live.generation == session.generation
            && let Some(conn) = live.conn.take()
        {
            stop_conn(self.rt.as_ref(), conn);
            live.stopped = Some(cause.clone());
        }
        if live.dead.is_some() {
            return "It is not started again in this run.".into();
        }
        if live.conn.is_some() {
            return "It was started again meanwhile for the calls that follow.".into();
        }
        if live.restarts >= 1 {
            live.dead = Some(format!(
                "MCP server `{}` {cause}; it had been started again once already and is not \
                 started again in this run",
                self.spec.name
            ));
            return "It had been started again once already, so it is not started again: \
                    later calls to it fail at once."
                .into();
        }
        "It is started again for the next call to it.".into()
    }

    /// The client session to send a call on. A server found dead before the
    /// call is sent is started again first (once per run).
    fn session(&self) -> Result<Session, String> {
        let mut live = lock(&self.live);
        if let Some(why) = &live.dead {
            return Err(why.clone());
        }
        let cause = match &live.conn {
            Some(conn) => conn.broken(),
            None => Some(
                live.stopped
                    .clone()
                    .unwrap_or_else(|| "was not running".into()),
            ),
        };
        if let Some(cause) = cause {
            self.restart(&mut live, &cause)?;
        }
        let generation = live.generation;
        match live.conn.as_ref() {
            Some(conn) => Ok(Session {
                peer: conn.service.peer().clone(),
                exited: conn.exited.clone(),
                oversized: conn.oversized.clone(),
                generation,
            }),
            None => Err(format!("MCP server `{}` did not start again", self.name())),
        }
    }

    /// The server died while a call was in flight: an error result saying
    /// so, and the server is started again (once).
    fn died_during(&self, tool: &str, session: &Session) -> ToolOutcome {
        let mut live = lock(&self.live);
        if live.generation != session.generation || live.conn.is_none() {
            // Another call stopped the server (or started it again) while
            // this one waited.
            let why = live
                .dead
                .clone()
                .or_else(|| {
                    live.stopped
                        .as_ref()
                        .map(|c| format!("MCP server `{}` {c}", self.spec.name))
                })
                .unwrap_or_else(|| format!("MCP server `{}` was started again", self.spec.name));
            return ToolOutcome::error(format!(
                "The connection to MCP server `{}` closed during the call to `{tool}`: {why}; \
                 whether the call had any effect is unknown.",
                self.spec.name
            ));
        }
        // The connection can close a moment before the waiter thread has
        // the exit status: give it that moment, so the result says how the
        // server ended.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let exit = loop {
            if let Some(e) = live.conn.as_ref().and_then(Conn::exit) {
                break e;
            }
            if live.conn.is_none() || std::time::Instant::now() >= deadline {
                break "its connection closed".to_string();
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let tail = live.conn.as_ref().map(|c| stderr_tail(&c.stderr));
        let next = match &live.dead {
            Some(_) => "It is not started again.".to_string(),
            None => match self.restart(&mut live, &format!("exited ({exit})")) {
                Ok(()) => "It was started again for the calls that follow.".to_string(),
                Err(why) => format!("It could not be started again: {why}"),
            },
        };
        let mut text = format!(
            "MCP server `{}` exited during the call to `{tool}` ({exit}); whether the call had \
             any effect is unknown. {next}",
            self.spec.name
        );
        if let Some(tail) = tail.filter(|t| !t.is_empty()) {
            text.push_str(&format!("\nIts stderr ended with:\n{tail}"));
        }
        ToolOutcome::error(text)
    }

    /// Starts the server again in place of a dead or stopped one (`cause`
    /// says which: a clause following "MCP server `x`"), if it has not been
    /// already and it offers the same tools; otherwise marks it dead.
    fn restart(&self, live: &mut Live, cause: &str) -> Result<(), String> {
        let name = &self.spec.name;
        if let Some(old) = live.conn.take() {
            stop_conn(self.rt.as_ref(), old);
        }
        if live.restarts >= 1 {
            let why = format!(
                "MCP server `{name}` {cause} after it had been started again once; \
                 it is not started again in this run"
            );
            live.dead = Some(why.clone());
            return Err(why);
        }
        live.restarts += 1;
        let Some(rt) = &self.rt else {
            return Err(format!("MCP server `{name}` was stopped"));
        };
        let fail = |live: &mut Live, why: String| {
            live.dead = Some(why.clone());
            Err(why)
        };
        match connect(rt, &self.spec) {
            Ok((conn, tools)) if same_tools(&tools, &self.tools) => {
                live.conn = Some(conn);
                live.generation += 1;
                live.stopped = None;
                Ok(())
            }
            Ok((conn, _)) => {
                stop_conn(Some(rt), conn);
                fail(
                    live,
                    format!(
                        "MCP server `{name}` {cause} and, started again, offered other \
                         tools than at the run's start; it is not used again in this run"
                    ),
                )
            }
            Err(why) => fail(live, format!("{why} (after it {cause})")),
        }
    }

    /// Stops the server process (and its group).
    pub fn stop(&self) {
        let conn = lock(&self.live).conn.take();
        if let Some(conn) = conn {
            stop_conn(self.rt.as_ref(), conn);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Closes the session, asks the process group to stop and kills it when it
/// has not within a second.
fn stop_conn(rt: Option<&tokio::runtime::Runtime>, conn: Conn) {
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

/// Whether a restarted server lists the tools it listed at first.
fn same_tools(a: &[McpToolInfo], b: &[McpToolInfo]) -> bool {
    let key = |t: &McpToolInfo| {
        (
            t.name.to_string(),
            t.description.as_deref().map(str::to_string),
            serde_json::Value::Object((*t.input_schema).clone()),
            serde_json::to_value(&t.annotations).ok(),
        )
    };
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| key(x) == key(y))
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
struct StderrTail {
    bytes: Vec<u8>,
    closed: bool,
}

fn stderr_tail(tail: &Shared<StderrTail>) -> String {
    String::from_utf8_lossy(&lock(tail).bytes)
        .trim()
        .to_string()
}

/// Spawns the server, initializes the session and lists the tools, within
/// the startup timeout; on any failure the process group is killed.
fn connect(
    rt: &tokio::runtime::Runtime,
    spec: &ServerSpec,
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
                if let Some(sig) = crate::signals::received() {
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

/// A tool's answer as the model is shown it: text blocks as they are, any
/// other content as its type and what describes it; `isError` makes it an
/// error result.
fn render(result: &CallToolResult) -> ToolOutcome {
    let mut parts = Vec::new();
    for block in &result.content {
        let value = serde_json::to_value(block).unwrap_or_default();
        parts.push(render_block(&value));
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let mut text = parts.join("\n");
    if text.is_empty() {
        text = "(no content)".into();
    }
    if text.len() > RESULT_CAP {
        let mut cut = RESULT_CAP;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = text.len();
        text.truncate(cut);
        text.push_str(&format!("\n[output cut at {cut} of {total} bytes]"));
    }
    if result.is_error == Some(true) {
        ToolOutcome::error(text)
    } else {
        ToolOutcome::ok(text)
    }
}

fn render_block(v: &serde_json::Value) -> String {
    let kind = v.get("type").and_then(|t| t.as_str()).unwrap_or("unknown");
    let s = |k: &str| v.get(k).and_then(|x| x.as_str());
    match kind {
        "text" => s("text").unwrap_or_default().to_string(),
        "image" | "audio" => format!(
            "[{kind} content, {}, {} bytes of base64 data]",
            s("mimeType").unwrap_or("no MIME type"),
            s("data").map_or(0, str::len)
        ),
        "resource" => {
            let r = v.get("resource").cloned().unwrap_or_default();
            let uri = r.get("uri").and_then(|x| x.as_str()).unwrap_or("?");
            match r.get("text").and_then(|x| x.as_str()) {
                Some(text) => format!("[resource content {uri}]\n{text}"),
                None => format!(
                    "[resource content {uri}, {} bytes of base64 data]",
                    r.get("blob").and_then(|x| x.as_str()).map_or(0, str::len)
                ),
            }
        }
        "resource_link" => format!(
            "[resource_link content {}{}]",
            s("uri").unwrap_or("?"),
            s("name").map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        other => format!("[{other} content] {v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_render_as_text_with_their_type() {
        assert_eq!(render_block(&json!({"type": "text", "text": "hi"})), "hi");
        let img = render_block(&json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}));
        assert_eq!(img, "[image content, image/png, 4 bytes of base64 data]");
        let res = render_block(
            &json!({"type": "resource", "resource": {"uri": "file:///a", "text": "body"}}),
        );
        assert_eq!(res, "[resource content file:///a]\nbody");
        let link = render_block(&json!({"type": "resource_link", "uri": "u", "name": "n"}));
        assert_eq!(link, "[resource_link content u (n)]");
        assert!(render_block(&json!({"type": "weird", "x": 1})).starts_with("[weird content]"));
    }

    #[test]
    fn is_error_makes_an_error_result() {
        let r: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "no such file"}],
            "isError": true
        }))
        .unwrap();
        let o = render(&r);
        assert!(o.is_error && !o.format_error);
        assert_eq!(o.content, "no such file");
        let empty: CallToolResult = serde_json::from_value(json!({"content": []})).unwrap();
        assert_eq!(render(&empty).content, "(no content)");
    }

    #[test]
    fn a_missing_program_is_named() {
        let spec = ServerSpec {
            name: "nope".into(),
            command: "/nonexistent/mcp-server".into(),
            args: vec![],
            env: std::collections::BTreeMap::new(),
            startup_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(5),
            cwd: std::env::temp_dir(),
            hide: vec![],
            confine: None,
        };
        let e = Server::start(spec).err().unwrap();
        assert!(
            e.contains("`nope`") && e.contains("could not be started"),
            "{e}"
        );
    }

    #[test]
    fn a_program_that_is_no_server_fails_to_start() {
        let spec = ServerSpec {
            name: "echoer".into(),
            command: "sh".into(),
            args: vec!["-c".into(), "echo not json; echo oops >&2; exit 3".into()],
            env: std::collections::BTreeMap::new(),
            startup_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(5),
            cwd: std::env::temp_dir(),
            hide: vec![],
            confine: None,
        };
        let e = Server::start(spec).err().unwrap();
        assert!(e.contains("`echoer` failed to start"), "{e}");
    }

    #[test]
    fn a_message_over_the_limit_at_start_is_named() {
        let spec = ServerSpec {
            name: "flood".into(),
            command: "sh".into(),
            args: vec![
                "-c".into(),
                "read -r _; head -c 17000000 /dev/zero | tr '\\0' x; echo; sleep 30".into(),
            ],
            env: std::collections::BTreeMap::new(),
            startup_timeout: Duration::from_secs(20),
            call_timeout: Duration::from_secs(5),
            cwd: std::env::temp_dir(),
            hide: vec![],
            confine: None,
        };
        let started = Instant::now();
        let e = Server::start(spec).err().unwrap();
        assert!(
            e.contains("`flood` failed to start") && e.contains("larger than 16 MiB"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(15), "{e}");
    }
}
