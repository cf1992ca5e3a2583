//! One MCP server: its connection (process and client session, made in
//! [`super::conn`]), its tools, and the calls sent to it.
//!
//! The client session runs on a small tokio runtime owned by the server;
//! calls come from the agent's (synchronous) tool threads, which wait for
//! the answer while watching the run's stop token (given at start).
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
use super::conn::{Conn, Shared, connect, limit_text, lock, stderr_tail, stop_conn};
use super::render::render;
use crate::signals::StopToken;
use crate::tools::ToolOutcome;
use rmcp::model::{CallToolRequestParams, JsonObject, Tool as McpToolInfo};
use rmcp::service::{RoleClient, ServiceError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// One started server. Dropping it stops the server.
pub struct Server {
    spec: ServerSpec,
    rt: Option<tokio::runtime::Runtime>,
    /// The tools the server listed at start.
    tools: Vec<McpToolInfo>,
    live: Mutex<Live>,
    /// The run's stop token: a start or a call waiting on the server gives
    /// up when it is set.
    stop: StopToken,
}

impl Server {
    /// Starts the server and lists its tools, within its startup timeout.
    /// The error names the server and says why (with the end of its stderr).
    /// `stop` (the run's) cuts the start, and later calls, short.
    pub fn start(spec: ServerSpec, stop: StopToken) -> Result<Server, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("mcp-{}", spec.name))
            .enable_all()
            .build()
            .map_err(|e| format!("MCP server `{}`: cannot start a runtime: {e}", spec.name))?;
        let (conn, tools) = connect(&rt, &spec, &stop)?;
        Ok(Server {
            spec,
            rt: Some(rt),
            tools,
            live: Mutex::new(Live {
                conn: Some(conn),
                ..Live::default()
            }),
            stop,
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
            if let Some(sig) = self.stop.signal() {
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
        match connect(rt, &self.spec, &self.stop) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = Server::start(spec, StopToken::new()).err().unwrap();
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
        let e = Server::start(spec, StopToken::new()).err().unwrap();
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
        let e = Server::start(spec, StopToken::new()).err().unwrap();
        assert!(
            e.contains("`flood` failed to start") && e.contains("larger than 16 MiB"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(15), "{e}");
    }
}
