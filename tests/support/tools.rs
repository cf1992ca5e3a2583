//! Shared fixture for the tools tests: a temporary workspace, a process table
//! whose output files live beside it, and a helper to make calls.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use tinyagent::event::ToolCall;
use tinyagent::exec::protected::Protected;
use tinyagent::exec::{ExecEnv, LocalEnv};
use tinyagent::tools::{ProcessTable, ToolContext, ToolOutcome, ToolSet, ToolSetOptions};

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub table: ProcessTable,
    pub set: ToolSet,
    /// The run's files the tools must leave alone (none by default).
    pub protected: Protected,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with(ToolSetOptions {
            read_only: false,
            plan: true,
        })
    }

    pub fn with(opts: ToolSetOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let table = ProcessTable::new(dir.path().join("procs"));
        Fixture {
            ws,
            table,
            dir,
            set: ToolSet::new(opts),
            protected: Protected::none(),
        }
    }

    /// The directory holding the workspace (outside it).
    pub fn outside(&self) -> &Path {
        self.dir.path()
    }

    pub fn call(&self, name: &str, args: &str) -> ToolOutcome {
        self.call_in(&LocalEnv, name, args)
    }

    pub fn call_json(&self, name: &str, args: serde_json::Value) -> ToolOutcome {
        self.call(name, &args.to_string())
    }

    pub fn call_in(&self, env: &dyn ExecEnv, name: &str, args: &str) -> ToolOutcome {
        let ctx = ToolContext {
            workspace: &self.ws,
            step: 7,
            env,
            processes: &self.table,
            plan: None,
            launch: &tinyagent::exec::group::Unrecorded,
            protected: &self.protected,
            stop: &tinyagent::signals::StopToken::new(),
        };
        let call = ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args.into(),
        };
        self.set.call(&ctx, &call)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.ws.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.ws.join(rel)).unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.table.kill_all();
    }
}

/// A successful, non-format-error outcome (with the content on failure).
#[track_caller]
pub fn assert_ok(out: &ToolOutcome) {
    assert!(
        !out.is_error && !out.format_error,
        "expected success: {}",
        out.content
    );
}

/// An ordinary (not format) error whose content contains `needle`.
#[track_caller]
pub fn assert_tool_error(out: &ToolOutcome, needle: &str) {
    assert!(out.is_error, "expected an error: {}", out.content);
    assert!(!out.format_error, "not a format error: {}", out.content);
    assert!(
        out.content.contains(needle),
        "`{needle}` not in: {}",
        out.content
    );
}

/// A format error whose content contains `needle`.
#[track_caller]
pub fn assert_format_error(out: &ToolOutcome, needle: &str) {
    assert!(
        out.is_error && out.format_error,
        "expected a format error: {}",
        out.content
    );
    assert!(
        out.content.contains(needle),
        "`{needle}` not in: {}",
        out.content
    );
}

/// Waits (bounded) until `pid` is gone or a zombie; false if still alive after 10 s.
pub fn wait_dead(pid: u32) -> bool {
    for _ in 0..1000 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat[stat.rfind(')').unwrap() + 2..].chars().next();
                if state == Some('Z') || state == Some('X') {
                    return true;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Whether `pid` runs (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 2..].chars().next();
            !matches!(state, Some('Z') | Some('X'))
        }
    }
}

/// Swaps `ws/x` `swaps` times between a hard link of `ws/inside.txt` (a
/// regular file inside) and a symbolic link to `outside`, each swap one
/// atomic rename, while `attempt` runs again and again on this thread.
/// Returns how many attempts ran.
pub fn race_swaps(
    ws: &Path,
    outside: &Path,
    swaps: usize,
    mut attempt: impl FnMut(usize),
) -> usize {
    let done = AtomicBool::new(false);
    let mut attempts = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let (f, l, x) = (ws.join(".f"), ws.join(".l"), ws.join("x"));
            for _ in 0..swaps {
                let _ = std::fs::remove_file(&f);
                std::fs::hard_link(ws.join("inside.txt"), &f).unwrap();
                std::fs::rename(&f, &x).unwrap();
                let _ = std::fs::remove_file(&l);
                std::os::unix::fs::symlink(outside, &l).unwrap();
                std::fs::rename(&l, &x).unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        while !done.load(Ordering::SeqCst) {
            attempt(attempts);
            attempts += 1;
        }
    });
    attempts
}
