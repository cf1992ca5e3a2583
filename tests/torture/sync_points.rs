//! Sync points, not records (contract section 9), checked with strace on
//! the real binary: a step of N calls costs at most N + 1 fdatasyncs on the
//! log, and no tool command is exec'd before the sync that covers its
//! `tool.started`.

use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use serde_json::json;
use std::process::Command;

/// One traced run: a step of 1, then 2, then 3 bash calls, then the answer.
fn traced(sb: &Sandbox, server: &MockServer) -> String {
    let trace = std::env::var_os("SYNC_TRACE")
        .map_or_else(|| sb.path("trace.txt"), std::path::PathBuf::from);
    let mut run = sb.run_cmd(&server.base_url(), "count the syncs");
    // No snapshots: their fsyncs are on other files, but keep the trace small.
    run.args(["--snapshot-every", "1000000"]);
    let mut cmd = Command::new("strace");
    cmd.args([
        "-f",
        "-qq",
        "-s",
        "65536",
        "-e",
        "trace=openat,write,fdatasync,execve",
    ])
    .arg("-o")
    .arg(&trace)
    .arg(run.get_program())
    .args(run.get_args())
    .current_dir(sb.dir.path())
    .env_remove("OPENAI_API_KEY");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::read_to_string(&trace).expect("trace")
}

/// The fd the agent opened the log with (`openat(…, "…/run.wal", …) = N`).
fn log_fds(trace: &str, wal: &str) -> Vec<String> {
    trace
        .lines()
        .filter(|l| l.contains("openat(") && l.contains(&format!("\"{wal}\"")))
        .filter_map(|l| l.rsplit("= ").next().map(|fd| fd.trim().to_string()))
        .filter(|fd| fd.parse::<u32>().is_ok())
        .collect()
}

#[test]
fn a_step_of_n_calls_costs_at_most_n_plus_one_syncs_and_no_command_runs_before_its_sync() {
    if require("strace", "sync_points", require::strace()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let call = |i: u32| {
        (
            "bash",
            json!({"command": format!("echo call{i} > /dev/null")}),
        )
    };
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![call(1)]),
        MockReply::tool_calls(vec![call(2), call(3)]),
        MockReply::tool_calls(vec![call(4), call(5), call(6)]),
        MockReply::text("done"),
    ]);
    let trace = traced(&sb, &server);
    let wal = sb.wal().display().to_string();
    let fds = log_fds(&trace, &wal);
    assert!(
        !fds.is_empty(),
        "the log's open is not in the trace:\n{}",
        &trace[..trace.len().min(3000)]
    );
    let on_log = |l: &str, call: &str| fds.iter().any(|fd| l.contains(&format!("{call}({fd}")));
    // Walk the trace in order: count syncs per step (a step ends with the
    // sync after its step.saved write), and remember which tool.started
    // writes were synced when each command is exec'd.
    let mut syncs_in_step = 0;
    let mut per_step = Vec::new();
    let mut step_saved_written = false;
    let mut unsynced_started: Vec<String> = Vec::new();
    let mut execs_before_sync = Vec::new();
    let mut checkpoint_records = 0;
    let mut lone_checkpoints: Vec<String> = Vec::new();
    // From the log's open on: the same fd number may have named another
    // file before (one the run wrote and synced before its log).
    let opened = trace
        .lines()
        .position(|l| l.contains("openat(") && l.contains(&format!("\"{wal}\"")))
        .unwrap_or(0);
    for line in trace.lines().skip(opened) {
        if on_log(line, "write") {
            let checkpoints = line
                .matches("\\\"type\\\":\\\"workspace.checkpoint\\\"")
                .count();
            checkpoint_records += checkpoints;
            // A checkpoint never costs a write (or a sync) of its own: it
            // goes with its call's result, or the start's with run.started.
            if checkpoints > 0
                && !line.contains("\\\"type\\\":\\\"tool.result\\\"")
                && !line.contains("\\\"type\\\":\\\"run.started\\\"")
            {
                lone_checkpoints.push(line.to_string());
            }
            if line.contains("\\\"type\\\":\\\"tool.started\\\"") {
                unsynced_started.push(line.to_string());
            }
            if line.contains("\\\"type\\\":\\\"step.saved\\\"") {
                step_saved_written = true;
            }
        } else if on_log(line, "fdatasync") {
            syncs_in_step += 1;
            unsynced_started.clear();
            if step_saved_written {
                per_step.push(syncs_in_step);
                syncs_in_step = 0;
                step_saved_written = false;
            }
        } else if line.contains("execve(") && line.contains("echo call") {
            if !unsynced_started.is_empty() {
                execs_before_sync.push(line.to_string());
            }
        } else if line.contains("execve(")
            && line.contains("\"bash\"")
            && !unsynced_started.is_empty()
        {
            execs_before_sync.push(line.to_string());
        }
    }
    // The starting state, then one after each of the six bash calls.
    assert_eq!(
        checkpoint_records, 7,
        "workspace.checkpoint records written"
    );
    assert!(
        lone_checkpoints.is_empty(),
        "checkpoints written on their own: {lone_checkpoints:?}"
    );
    assert!(
        execs_before_sync.is_empty(),
        "commands exec'd before their tool.started was synced: {execs_before_sync:?}"
    );
    // run.started (1 sync) comes before the first step and is not counted:
    // it is the step-1 count's first sync only if it was not synced alone.
    assert_eq!(
        per_step.len(),
        4,
        "four steps: {per_step:?} (log fds {fds:?})"
    );
    let first = per_step[0] - 1; // run.started's own sync
    let got = [first, per_step[1], per_step[2], per_step[3]];
    for (calls, (&n, limit)) in [1, 2, 3, 0].iter().zip(got.iter().zip([2, 3, 4, 1])) {
        assert!(
            n <= limit,
            "a step of {calls} calls took {n} syncs (at most {limit}): {got:?}"
        );
    }
    eprintln!("syncs per step of 1, 2, 3, 0 calls: {got:?}");
}
