//! Every origin of a run checks everything before its first side effect
//! (contract sections 7 and 20): a refused command leaves every file it
//! could touch (the log, the files beside it, `$TINYAGENT_HOME`, the
//! workspace) byte for byte and mode for mode as it was. One test per
//! origin: a new run (bad config), a log (a changed tool set), a trajectory
//! (bad config), a fork with restore (a step the log does not hold). A run
//! from a bucket is in `replication.rs`
//! (`a_resume_from_the_bucket_the_local_config_refuses_takes_nothing_over`).

use crate::support::e2e::{self, Sandbox, forge_run_started, output, stderr, tree_state};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;
use std::process::Command;

/// `cmd` is refused (exit 2, a reason on stderr naming `why`) and nothing
/// under the sandbox changed.
fn refused_with_nothing_changed(sb: &Sandbox, cmd: Command, why: &str) {
    let before = tree_state(sb.dir.path());
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(why), "{}", stderr(&out));
    let after = tree_state(sb.dir.path());
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(changed.is_empty(), "a refused command changed {changed:?}");
}

/// A run killed right after its first model response (a call pending).
fn crashed_run(sb: &Sandbox, server: &MockServer) {
    e2e::crash_after(
        sb.run_cmd_cfg(&server.base_url(), "refusals", ""),
        "model.response:1",
    );
}

#[test]
fn a_new_run_refused_by_its_config_writes_nothing() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![]);
    let cmd = sb.run_cmd_cfg(
        &server.base_url(),
        "never starts",
        "[env]\nkind = \"elsewhere\"\n",
    );
    refused_with_nothing_changed(&sb, cmd, "elsewhere");
    assert!(!sb.wal().exists());
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_log_whose_tool_set_changed_is_left_as_it_was() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo hi > made.txt"})),
        MockReply::text("done"),
    ]);
    crashed_run(&sb, &server);
    forge_run_started(&sb.wal(), |r| r.tool_signature = "0000000000000000".into());
    let mut resume = sb.resume_cmd();
    resume.args(["--base-url", &server.base_url()]);
    refused_with_nothing_changed(&sb, resume, "tool set mismatch");
}

#[test]
fn a_trajectory_refused_by_the_local_config_imports_nothing() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "true"})),
        MockReply::text("done"),
    ]);
    crashed_run(&sb, &server);
    let json_path = sb.path("run.json");
    let mut export = Command::new(e2e::bin());
    export
        .args(["log", "export"])
        .arg(sb.wal())
        .arg("-o")
        .arg(&json_path);
    assert_eq!(output(export).status.code(), Some(0));
    let bad = sb.path("bad.toml");
    std::fs::write(&bad, "[env]\nkind = \"elsewhere\"\n").unwrap();
    let mut resume = Command::new(e2e::bin());
    resume
        .current_dir(sb.dir.path())
        .arg("resume")
        .arg(&json_path)
        .arg("--cwd")
        .arg(sb.ws())
        .arg("--config")
        .arg(&bad)
        .args(["--base-url", &server.base_url()])
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home());
    refused_with_nothing_changed(&sb, resume, "elsewhere");
    assert!(!sb.path("run.json.wal").exists());
}

#[test]
fn a_fork_with_restore_of_a_step_the_log_lacks_changes_nothing() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo one > one.txt"})),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd_cfg(&server.base_url(), "one step", ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::write(sb.ws().join("mine.txt"), "the person's\n").unwrap();
    let mut fork = Command::new(e2e::bin());
    fork.current_dir(sb.dir.path())
        .arg("fork")
        .arg(sb.wal())
        .args(["--at", "7", "--restore", "-o"])
        .arg(sb.path("fork.wal"))
        .env("TINYAGENT_HOME", sb.home());
    refused_with_nothing_changed(&sb, fork, "step 7");
}
