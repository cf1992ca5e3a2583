//! `tinyagent demo`: an offline run on the real loop with real tools and a
//! built-in scripted model, killed with SIGKILL in the middle of a long bash
//! call and resumed, so a newcomer sees the point in one command.

use super::CliError;
use super::args::DemoArgs;
use crate::event::Event;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The call id the demo kills the agent in (step 4's only call).
const LONG_CALL: &str = "call_4_0";

fn script() -> serde_json::Value {
    let plan = |s: [&str; 4]| {
        json!({"items": [
            {"id": "1", "text": "write notes/hello.txt", "status": s[0]},
            {"id": "2", "text": "count its words and start a helper process", "status": s[1]},
            {"id": "3", "text": "search the workspace", "status": s[2]},
            {"id": "4", "text": "run the slow check", "status": s[3]},
        ]})
    };
    json!({
        "turns": [
            {"content": "I'll plan the work, then write the file.",
             "tool_calls": [
                {"name": "update_plan", "arguments": plan(["in_progress", "pending", "pending", "pending"])},
                {"name": "write", "arguments": {"path": "notes/hello.txt",
                    "content": "hello from tinyagent\nthis file was written by a scripted model\n"}}]},
            {"content": "Counting words and starting a helper in the background.",
             "tool_calls": [
                {"name": "bash", "arguments": {"command": "wc -w notes/hello.txt"}},
                {"name": "bash", "arguments": {"command": "sleep 120", "background": true}},
                {"name": "update_plan", "arguments": plan(["done", "done", "in_progress", "pending"])}]},
            {"content": "Searching.",
             "tool_calls": [{"name": "grep", "arguments": {"pattern": "tinyagent"}}]},
            {"content": "Now the slow check (this is where the demo pulls the plug).",
             "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 15; echo slow check done"}}]},
            {"content": "I was resumed: the slow check was interrupted, so I verify state instead of trusting it.",
             "tool_calls": [
                {"name": "bash", "arguments": {"command": "ls notes && echo verified"}},
                {"name": "update_plan", "arguments": plan(["done", "done", "done", "done"])}]},
            {"content": "Done: the file is written, counted and searched; the run survived a kill -9."}
        ],
        "summary": "Wrote notes/hello.txt, counted its words, searched the workspace, ran a slow check."
    })
}

fn io_err(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::new(1, format!("demo: {what}: {e}"))
}

fn exe() -> Result<PathBuf, CliError> {
    std::env::current_exe().map_err(|e| io_err("cannot find the tinyagent binary", e))
}

/// True once the log holds a `tool.started` for `call_id`.
fn call_started(wal: &Path, call_id: &str) -> bool {
    let mut found = false;
    let _ = tinyagent_store::wal::reader::scan(wal, None, |frame, _| {
        if let Event::ToolStarted(t) = &frame.event {
            found |= t.call_id == call_id;
        }
    });
    found
}

fn wait_for_start(child: &mut Child, wal: &Path) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if call_started(wal, LONG_CALL) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(CliError::new(
                1,
                format!("demo: the run ended early ({status})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(CliError::new(1, "demo: the long call never started"))
}

/// `tinyagent demo`.
pub fn demo(args: &DemoArgs) -> Result<i32, CliError> {
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| io_err("cannot create the directory", e))?;
            d.clone()
        }
        None => tempfile::Builder::new()
            .prefix("tinyagent-demo-")
            .tempdir()
            .map_err(|e| io_err("cannot make a temp directory", e))?
            .keep(),
    };
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(|e| io_err("workspace", e))?;
    let script_path = dir.join("demo-script.json");
    let wal = dir.join("demo.wal");
    if wal.exists() {
        return Err(CliError::new(
            2,
            format!("{} exists: give the demo an empty --dir", wal.display()),
        ));
    }
    let text = serde_json::to_vec_pretty(&script()).map_err(|e| io_err("script", e))?;
    std::fs::write(&script_path, text).map_err(|e| io_err("script", e))?;

    crate::report::err_line("== tinyagent demo: offline, scripted model, real tools");
    crate::report::err_line(&format!("   workspace {}", workspace.display()));
    crate::report::err_line(&format!("   log       {}\n", wal.display()));
    let mut cmd = Command::new(exe()?);
    cmd.args([
        "run",
        "--provider",
        crate::config::ProviderKind::Script.as_str(),
        "--plan",
        "--script",
    ])
    .arg(&script_path)
    .arg("--cwd")
    .arg(&workspace)
    .arg("--wal")
    .arg(&wal)
    .arg("Write a note, count it, search it, then run a slow check")
    .stdin(Stdio::null());
    if args.json {
        cmd.arg("--json");
    }
    let mut child = cmd.spawn().map_err(|e| io_err("cannot start the run", e))?;
    wait_for_start(&mut child, &wal)?;
    std::thread::sleep(Duration::from_millis(700));
    let pid = Pid::from_raw(child.id().cast_signed());
    kill(pid, Signal::SIGKILL).map_err(|e| io_err("kill", e))?;
    let _ = child.wait();
    crate::report::err_line(&format!(
        "\n== kill -9 sent to tinyagent (pid {pid}) while `sleep 15` was running\n== now: tinyagent resume {}\n",
        wal.display()
    ));
    let mut resume = Command::new(exe()?);
    resume.arg("resume").arg(&wal).stdin(Stdio::null());
    if args.json {
        resume.arg("--json");
    }
    let status = resume
        .status()
        .map_err(|e| io_err("cannot start resume", e))?;
    cleanup_orphans(&wal);
    crate::report::err_line(&format!(
        "\n== what the log holds (tinyagent log inspect {}):\n",
        wal.display()
    ));
    let mut stderr = std::io::stderr();
    let _ = crate::inspect::inspect(&wal, false, &mut stderr);
    crate::report::err_line(&format!(
        "\nThe run was killed mid-call and finished after resume: no step, cost or message lost,\n\
         and the command the kill interrupted was stopped before the run went on.\n\
         Nothing the demo started is still running.\n\
         Its files (workspace, log, snapshots, process output, script) are in {dir}\n\
         Look around, then remove them with: rm -rf {dir}",
        dir = dir.display()
    ));
    Ok(status.code().unwrap_or(1))
}

/// Kills background processes the demo's first run left behind (the resume
/// notice reported them as orphans).
fn cleanup_orphans(wal: &Path) {
    if let Ok(loaded) = crate::store::load(wal) {
        for p in loaded.state.processes.values() {
            if crate::agent::resume::process_alive(p) {
                crate::exec::host::kill_group(p.pid);
            }
        }
    }
}
