//! Tool hooks: commands run for each tool call inside the pending window.
//!
//! The pre hook runs after `model.response` is durable and before
//! `tool.started`; it can block the call (exit 2 with the reason on stderr, or
//! `{"decision":"block","reason":"..."}` on stdout). The post hook runs after
//! the tool finished and before its `tool.result` is written; whatever it
//! prints is appended to the result as feedback (its `feedback` member when it
//! prints a JSON object). Each hook gets the call as a JSON object on stdin.
//!
//! A hook that cannot start, crashes (exits other than 0 or 2), runs past its
//! timeout or prints something that is neither empty, a JSON object nor (for
//! post) text is a failure; the run's `hooks.on_failure` says what a failure
//! means for a pre hook: `block` (the default) or `allow`.

use crate::exec::host::kill_group;
use crate::text::cut_chars;
use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a hook run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Exit 0: go on. `feedback` is what a post hook printed.
    Allow { feedback: Option<String> },
    /// The hook asked to block the call.
    Block { reason: String },
    /// The hook itself failed (crash, timeout, garbage).
    Failed { error: String },
}

impl HookOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            HookOutcome::Allow { .. } => "allow",
            HookOutcome::Block { .. } => "block",
            HookOutcome::Failed { .. } => "failed",
        }
    }
}

/// Runs `command` with `input` on stdin, in `cwd`, for at most `timeout`;
/// stopped with the run when `stop` is set.
pub fn run_hook(
    command: &str,
    input: &Value,
    cwd: &std::path::Path,
    timeout: Duration,
    stop: &crate::signals::StopToken,
) -> HookOutcome {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A session of its own: no controlling terminal, no descriptor of ours.
    crate::exec::host::detach(&mut cmd);
    // A hook is a child of the agent like any tool: no key in its
    // environment, so none in what a post hook prints (which is logged).
    crate::exec::env::scrub_keys(&mut cmd);
    crate::exec::group::die_with_agent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return HookOutcome::Failed {
                error: format!("cannot start hook `{command}`: {e}"),
            };
        }
    };
    // Written from a thread: a hook that does not read a large input must not
    // block us past its timeout. A hook that ignores its input is fine (EPIPE).
    let input = input.to_string();
    let stdin = child.stdin.take();
    std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(input.as_bytes());
        }
    });
    let out_rx = read_pipe(child.stdout.take());
    let err_rx = read_pipe(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if let Some(sig) = stop.signal() => {
                // The run is being stopped: the hook goes with it.
                let seen = stop.count();
                crate::exec::group::stop(
                    child.id(),
                    sig,
                    crate::signals::GRACE,
                    |wait| {
                        std::thread::sleep(wait);
                        !matches!(child.try_wait(), Ok(None))
                    },
                    || stop.count() > seen,
                );
                let _ = child.wait();
                return HookOutcome::Failed {
                    error: format!(
                        "hook `{command}` was stopped: the run was interrupted by {}",
                        crate::signals::name(sig)
                    ),
                };
            }
            Ok(None) if Instant::now() >= deadline => {
                kill_group(child.id());
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                kill_group(child.id());
                let _ = child.wait();
                return HookOutcome::Failed {
                    error: format!("hook `{command}`: {e}"),
                };
            }
        }
    };
    // A hook may leave a child behind that holds its output open: wait for
    // the pipes only until the deadline, then kill what is left of its
    // process group and take what was read.
    let out = collect(&out_rx, deadline, &child);
    let err = collect(&err_rx, deadline, &child);
    let Some(status) = status else {
        return HookOutcome::Failed {
            error: format!(
                "hook `{command}` timed out after {} ms",
                timeout.as_millis()
            ),
        };
    };
    match status.code() {
        Some(2) => HookOutcome::Block {
            reason: non_empty(err.trim())
                .unwrap_or("blocked by hook (exit 2)")
                .to_string(),
        },
        Some(0) => parse_stdout(command, out.trim()),
        Some(code) => HookOutcome::Failed {
            error: format!(
                "hook `{command}` exited with {code}{}",
                non_empty(err.trim())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        },
        None => HookOutcome::Failed {
            error: format!("hook `{command}` was killed by a signal"),
        },
    }
}

/// Reads a pipe to its end (at most 1 MiB) on a thread; the text arrives on
/// the returned channel.
fn read_pipe(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = pipe {
            let mut bytes = Vec::new();
            let _ = p.take(1 << 20).read_to_end(&mut bytes);
            s = String::from_utf8_lossy(&bytes).into_owned();
        }
        let _ = tx.send(s);
    });
    rx
}

/// What a reader thread read, waiting for it until `deadline` (then killing
/// the hook's process group and waiting a moment more).
fn collect(rx: &mpsc::Receiver<String>, deadline: Instant, child: &Child) -> String {
    let left = deadline.saturating_duration_since(Instant::now());
    if let Ok(s) = rx.recv_timeout(left) {
        return s;
    }
    kill_group(child.id());
    rx.recv_timeout(Duration::from_millis(200))
        .unwrap_or_default()
}

/// Most of a hook's text kept in a log record.
pub const DETAIL_LIMIT: usize = 2000;

/// `s` cut to [`DETAIL_LIMIT`] characters (with a note when cut).
pub fn clip(s: &str) -> String {
    cut_chars(s, DETAIL_LIMIT, "… [cut]")
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

fn parse_stdout(command: &str, out: &str) -> HookOutcome {
    if out.is_empty() {
        return HookOutcome::Allow { feedback: None };
    }
    if out.starts_with('{') {
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(out) else {
            return HookOutcome::Failed {
                error: format!(
                    "hook `{command}` printed invalid JSON: {}",
                    cut_chars(out, 200, "")
                ),
            };
        };
        return match obj.get("decision").and_then(Value::as_str) {
            Some("block") => HookOutcome::Block {
                reason: obj
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("blocked by hook")
                    .to_string(),
            },
            Some("allow") | None => HookOutcome::Allow {
                feedback: obj
                    .get("feedback")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            },
            Some(other) => HookOutcome::Failed {
                error: format!("hook `{command}` gave an unknown decision {other:?}"),
            },
        };
    }
    HookOutcome::Allow {
        feedback: Some(out.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(cmd: &str) -> HookOutcome {
        run_hook(
            cmd,
            &json!({"tool": "bash"}),
            std::path::Path::new("."),
            Duration::from_secs(5),
            &crate::signals::StopToken::new(),
        )
    }

    #[test]
    fn allow_block_feedback_and_failures() {
        assert_eq!(run("cat >/dev/null"), HookOutcome::Allow { feedback: None });
        assert_eq!(
            run("echo no way >&2; exit 2"),
            HookOutcome::Block {
                reason: "no way".into()
            }
        );
        assert_eq!(
            run(r#"echo '{"decision":"block","reason":"policy"}'"#),
            HookOutcome::Block {
                reason: "policy".into()
            }
        );
        assert_eq!(
            run("echo looks fine"),
            HookOutcome::Allow {
                feedback: Some("looks fine".into())
            }
        );
        assert_eq!(
            run(r#"echo '{"feedback":"lint ok"}'"#),
            HookOutcome::Allow {
                feedback: Some("lint ok".into())
            }
        );
        assert!(matches!(run("exit 7"), HookOutcome::Failed { .. }));
        assert!(matches!(run("echo '{broken'"), HookOutcome::Failed { .. }));
        let t = run_hook(
            "sleep 5",
            &json!({}),
            std::path::Path::new("."),
            Duration::from_millis(100),
            &crate::signals::StopToken::new(),
        );
        assert!(
            matches!(t, HookOutcome::Failed { ref error } if error.contains("timed out")),
            "{t:?}"
        );
    }

    #[test]
    fn hook_reads_the_call_on_stdin() {
        let o = run_hook(
            "grep -q '\"tool\":\"bash\"' && echo saw-it",
            &json!({"tool": "bash"}),
            std::path::Path::new("."),
            Duration::from_secs(5),
            &crate::signals::StopToken::new(),
        );
        assert_eq!(
            o,
            HookOutcome::Allow {
                feedback: Some("saw-it".into())
            }
        );
    }

    #[test]
    fn a_child_left_holding_the_output_does_not_hang_the_hook() {
        // The background sleep keeps stdout open after the hook exits; the
        // hook still ends by its deadline with what it printed. The deadline
        // leaves room for `sh` to start on a loaded machine (300 ms did not,
        // once, in CI); the test still fails if the 60 s child is waited for.
        let o = run_hook(
            "sleep 60 & echo early",
            &json!({}),
            std::path::Path::new("."),
            Duration::from_secs(2),
            &crate::signals::StopToken::new(),
        );
        assert_eq!(
            o,
            HookOutcome::Allow {
                feedback: Some("early".into())
            }
        );
    }

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(DETAIL_LIMIT + 10);
        let cut = clip(&long);
        assert!(cut.ends_with("… [cut]"));
        assert_eq!(
            cut.chars().count(),
            DETAIL_LIMIT + "… [cut]".chars().count()
        );
    }
}
