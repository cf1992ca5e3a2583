//! Crash-safe resume of the real binary: SIGKILL at each crash point (a test
//! seam kills the process right after a given record is durable, or the test
//! kills it from outside), then `tinyagent resume`, then the log and the
//! requests the loopback server saw are checked.

use crate::support::contract;
use crate::support::e2e;
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::wait_until;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

const INTERRUPTED: &str = "[interrupted: tool did not complete before the agent stopped; it may have partially run — verify state before retrying]";
const NOT_RUN: &str = "[not run: the agent stopped before this call started; it had no effect]";

fn crash_after(sb: &Sandbox, base_url: &str, point: &str) -> std::process::Output {
    let mut cmd = sb.run_cmd(base_url, "crash me");
    cmd.env("TINYAGENT_CRASH_AFTER", point);
    let out = output(cmd);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(9),
        "expected SIGKILL: {}",
        stderr(&out)
    );
    out
}

/// Invariants after a crashed-and-resumed run: contract framing and order,
/// exactly one result per call, totals equal the sums.
fn check_log(sb: &Sandbox) -> Vec<contract::Rec> {
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let mut calls = Vec::new();
    for r in recs.iter().filter(|r| r.kind == "model.response") {
        for c in r.data["message"]["tool_calls"].as_array().unwrap() {
            calls.push(c["id"].as_str().unwrap().to_string());
        }
    }
    let mut seen = HashSet::new();
    for r in recs.iter().filter(|r| r.kind == "tool.result") {
        assert!(
            seen.insert(r.data["call_id"].as_str().unwrap().to_string()),
            "two results for one call"
        );
    }
    assert_eq!(seen.len(), calls.len(), "every call has exactly one result");
    assert_eq!(recs.last().unwrap().kind, "run.finished");
    recs
}

/// The first request after resume = the last one before the crash + what
/// the crashed step added (assistant message and results) + the notice.
fn check_requests(before: &Value, after: &Value, results: &[(&str, &str)], assistant: bool) {
    let b = before["messages"].as_array().unwrap();
    let a = after["messages"].as_array().unwrap();
    assert_eq!(&a[..b.len()], &b[..], "history before the crash changed");
    let mut i = b.len();
    if assistant {
        assert_eq!(a[i]["role"], "assistant");
        i += 1;
    }
    for (id, content) in results {
        assert_eq!(a[i]["role"], "tool");
        assert_eq!(a[i]["tool_call_id"], *id);
        if !content.is_empty() {
            assert_eq!(a[i]["content"], *content);
        }
        i += 1;
    }
    assert_eq!(a[i]["role"], "user");
    assert!(
        a[i]["content"].as_str().unwrap().starts_with("[Resumed]"),
        "{}",
        a[i]
    );
    assert_eq!(a.len(), i + 1, "nothing else was added");
}

#[test]
fn crash_after_model_response_gives_not_run_results() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo first"})).with_usage(10, 1),
        MockReply::tool_calls(vec![
            ("write", json!({"path": "never.txt", "content": "x"})),
            ("bash", json!({"command": "echo never >> never2.txt"})),
        ])
        .with_ids(&["w1", "b1"])
        .with_usage(20, 2),
        MockReply::text("done").with_usage(30, 3),
    ]);
    crash_after(&sb, &server.base_url(), "model.response:2");
    assert_eq!(server.request_count(), 2);
    let out = sb.resume_ok();
    assert!(stderr(&out).contains("Never started"), "{}", stderr(&out));
    server.assert_no_violations();
    assert!(!sb.ws().join("never.txt").exists() && !sb.ws().join("never2.txt").exists());
    let reqs = server.requests();
    check_requests(
        &reqs[1],
        &reqs[2],
        &[("w1", NOT_RUN), ("b1", NOT_RUN)],
        true,
    );
    let recs = check_log(&sb);
    let resume = recs.iter().find(|r| r.kind == "resume").unwrap();
    assert_eq!(resume.data["interrupted"], json!(["w1", "b1"]));
    let saved = recs.iter().rev().find(|r| r.kind == "step.saved").unwrap();
    assert_eq!(
        saved.data["usage_total"],
        json!({"input_tokens": 60, "output_tokens": 6})
    );
}

#[test]
fn crash_between_results_and_before_step_saved() {
    for (point, first_done) in [("tool.result:1", true), ("tool.result:2", true)] {
        let sb = Sandbox::new();
        let server = MockServer::start(vec![
            MockReply::tool_calls(vec![
                ("bash", json!({"command": "echo a >> side.txt"})),
                ("bash", json!({"command": "echo b >> side.txt"})),
            ])
            .with_ids(&["c1", "c2"]),
            MockReply::text("done"),
        ]);
        crash_after(&sb, &server.base_url(), point);
        sb.resume_ok();
        server.assert_no_violations();
        let reqs = server.requests();
        let side = std::fs::read_to_string(sb.ws().join("side.txt")).unwrap();
        if point == "tool.result:1" {
            assert!(first_done);
            assert_eq!(side, "a\n", "the second call never ran and was not re-run");
            check_requests(&reqs[0], &reqs[1], &[("c1", ""), ("c2", NOT_RUN)], true);
        } else {
            assert_eq!(side, "a\nb\n", "no completed call ran twice");
            check_requests(&reqs[0], &reqs[1], &[("c1", ""), ("c2", "")], true);
        }
        check_log(&sb);
    }
}

fn started(sb: &Sandbox, call_id: &str) -> bool {
    let mut found = false;
    let _ =
        tinyagent_store::wal::reader::scan::<tinyagent::event::Event>(&sb.wal(), None, |f, _| {
            if let tinyagent::event::Event::ToolStarted(t) = &f.event {
                found |= t.call_id == call_id;
            }
        });
    found
}

#[test]
fn kill_9_during_a_long_bash_call_loses_nothing() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "1"})).with_usage(100, 10),
        MockReply::tool_calls(vec![
            (
                "bash",
                json!({"command": "sleep 29.75; echo late > late.txt"}),
            ),
            ("bash", json!({"command": "echo after"})),
        ])
        .with_ids(&["long", "after"])
        .with_usage(200, 20),
        MockReply::text("recovered").with_usage(300, 30),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "long job");
    cmd.args(["--price-in", "1", "--price-out", "2"]);
    let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
    wait_until("the long call to start", || started(&sb, "long"));
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let _ = Command::new("pkill").args(["-f", "sleep 29.75"]).status();
    let out = sb.resume_ok();
    assert!(stderr(&out).contains("long"), "{}", stderr(&out));
    server.assert_no_violations();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    check_requests(
        &reqs[1],
        &reqs[2],
        &[("long", INTERRUPTED), ("after", NOT_RUN)],
        true,
    );
    let recs = check_log(&sb);
    // No step, cost or message lost: both responses and their costs are there.
    let saved = recs.iter().rev().find(|r| r.kind == "step.saved").unwrap();
    assert_eq!(
        saved.data["usage_total"],
        json!({"input_tokens": 600, "output_tokens": 60})
    );
    let cost = saved.data["cost_usd_total"].as_f64().unwrap();
    assert!((cost - (600.0 + 120.0) / 1e6).abs() < 1e-12, "{cost}");
    let interrupted = recs
        .iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == "long")
        .unwrap();
    assert_eq!(interrupted.data["interrupted"], true);
    assert_eq!(interrupted.data["is_error"], true);
}

#[test]
fn crash_during_the_model_call_redoes_the_step() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo one >> once.txt"})),
        MockReply::text("slow").delayed(Duration::from_secs(20)),
        MockReply::text("done"),
    ]);
    let mut child = sb
        .run_cmd(&server.base_url(), "slow model")
        .spawn()
        .unwrap();
    wait_until("the second request", || server.request_count() == 2);
    child.kill().unwrap();
    child.wait().unwrap();
    sb.resume_ok();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    check_requests(&reqs[1], &reqs[2], &[], false);
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("once.txt")).unwrap(),
        "one\n"
    );
    let recs = check_log(&sb);
    assert_eq!(
        recs.iter().filter(|r| r.kind == "model.response").count(),
        2
    );
}

#[test]
fn read_only_calls_are_rerun_on_resume() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("r.txt"), "readable\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("read", json!({"path": "r.txt"})),
            ("bash", json!({"command": "echo x"})),
        ])
        .with_ids(&["rd", "bx"]),
        MockReply::text("done"),
    ]);
    // The read had started (its tool.started is durable) when the agent died.
    crash_after(&sb, &server.base_url(), "tool.started:1");
    let out = sb.resume_ok();
    assert!(stderr(&out).contains("re-run"), "{}", stderr(&out));
    let reqs = server.requests();
    let after = reqs[1]["messages"].as_array().unwrap();
    let rd = after.iter().find(|m| m["tool_call_id"] == "rd").unwrap();
    assert!(rd["content"].as_str().unwrap().contains("readable"));
    let bx = after.iter().find(|m| m["tool_call_id"] == "bx").unwrap();
    assert_eq!(bx["content"], NOT_RUN);
    check_log(&sb);
}

#[test]
fn a_read_that_never_started_is_not_rerun() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("r.txt"), "readable\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![("read", json!({"path": "r.txt"}))]).with_ids(&["rd"]),
        MockReply::text("done"),
    ]);
    crash_after(&sb, &server.base_url(), "model.response:1");
    sb.resume_ok();
    let reqs = server.requests();
    let after = reqs[1]["messages"].as_array().unwrap();
    let rd = after.iter().find(|m| m["tool_call_id"] == "rd").unwrap();
    assert_eq!(rd["content"], NOT_RUN);
    let recs = check_log(&sb);
    let started = recs
        .iter()
        .filter(|r| r.kind == "tool.started" && r.data["call_id"] == "rd")
        .count();
    assert_eq!(
        started, 0,
        "a call that never started is not started on resume"
    );
}

#[test]
fn a_finished_run_is_reported_and_message_continues_it() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::text("first answer"),
        MockReply::text("second answer"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "talk"));
    assert_eq!(out.status.code(), Some(0));
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("already finished"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.request_count(), 1);
    let mut cmd = sb.resume_cmd();
    cmd.args(["--message", "and one more thing"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = reqs[1]["messages"].as_array().unwrap();
    assert_eq!(msgs.last().unwrap()["content"], "and one more thing");
    check_log(&sb);
}

#[test]
fn limits_carry_over_and_resume_flags_change_them() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |_| {
        MockReply::tool_call("bash", json!({"command": "true"}))
    });
    let mut cmd = sb.run_cmd(&server.base_url(), "steps");
    cmd.args(["--max-steps", "5"])
        .env("TINYAGENT_CRASH_AFTER", "step.saved:3");
    let _ = output(cmd);
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let recs = contract::read(&sb.wal());
    assert_eq!(
        recs.iter().filter(|r| r.kind == "model.response").count(),
        5,
        "2 steps were left"
    );
    let mut cmd = sb.resume_cmd();
    cmd.args(["--max-steps", "7"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let recs = check_log(&sb);
    assert_eq!(
        recs.iter().filter(|r| r.kind == "model.response").count(),
        7
    );
}

#[test]
fn a_second_resume_while_one_runs_is_refused() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "sleep 5"})),
        MockReply::text("done"),
    ]);
    let mut child = sb
        .run_cmd(&server.base_url(), "hold the lock")
        .spawn()
        .unwrap();
    wait_until("the call to start", || {
        started(&sb, "call_1_0")
            || server.request_count() >= 1
                && std::fs::metadata(sb.wal())
                    .map(|m| m.len() > 0)
                    .unwrap_or(false)
    });
    let before = std::fs::read(sb.wal()).unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).to_lowercase().contains("in use")
            || stderr(&out).to_lowercase().contains("lock"),
        "{}",
        stderr(&out)
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let after = std::fs::read(sb.wal()).unwrap();
    assert!(
        after.starts_with(&before),
        "the refused resume wrote nothing"
    );
}

#[test]
fn a_corrupt_log_is_refused_and_left_unchanged() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "true"})),
        MockReply::text("done"),
    ]);
    crash_after(&sb, &server.base_url(), "tool.result:1");
    let mut bytes = std::fs::read(sb.wal()).unwrap();
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 10;
    bytes[second_line] ^= 0x20;
    std::fs::write(sb.wal(), &bytes).unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("seq 2") && err.contains("offset"), "{err}");
    assert_eq!(std::fs::read(sb.wal()).unwrap(), bytes);
}

#[test]
fn tool_set_mismatch_is_refused_naming_both() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::tool_call(
        "bash",
        json!({"command": "true"}),
    )]);
    crash_after(&sb, &server.base_url(), "model.response:1");
    // Rewrite the run.started signature through an import of a doctored export.
    let out = output({
        let mut c = Command::new(e2e::bin());
        c.args(["log", "export"])
            .arg(sb.wal())
            .arg("-o")
            .arg(sb.path("t.json"));
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path("t.json")).unwrap()).unwrap();
    doc["tool_signature"] = json!("0000000000000000");
    std::fs::write(sb.path("t2.json"), doc.to_string()).unwrap();
    let mut c = Command::new(e2e::bin());
    c.arg("resume").arg(sb.path("t2.json"));
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("0000000000000000") && stderr(&out).contains("plan off"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn crash_during_a_snapshot_write_falls_back_and_finishes() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |req| {
        let steps = req
            .messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        if steps < 6 {
            MockReply::tool_call(
                "bash",
                json!({"command": format!("echo {steps} >> steps.txt")}),
            )
        } else {
            MockReply::text("done")
        }
    });
    let mut cmd = sb.run_cmd(&server.base_url(), "snapshots");
    cmd.args(["--snapshot-every", "3"])
        .env("TINYAGENT_CRASH_IN_SNAPSHOT", "3");
    e2e::killed(cmd);
    // The interrupted snapshot left its temp file; an older snapshot exists.
    let names: Vec<String> = std::fs::read_dir(sb.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "run.wal.snapshot"), "{names:?}");
    sb.resume_ok();
    server.assert_no_violations();
    let recs = check_log(&sb);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    let lines = std::fs::read_to_string(sb.ws().join("steps.txt")).unwrap();
    let mut seen = HashSet::new();
    for l in lines.lines() {
        assert!(seen.insert(l.to_string()), "step {l} ran twice");
    }
    // Stray temp files were cleaned up on open.
    let stray = std::fs::read_dir(sb.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp")
        })
        .count();
    assert_eq!(stray, 0);
}

/// A log written by the tinyagent of before the house-keeping change (a
/// plan-enabled run killed during a long bash call, with snapshots in the
/// format of the time), checked in as it was written, resumes today: the
/// started call is reported interrupted, the one after it not run, the plan
/// and the background process carry over, and the log ends completed.
#[test]
fn a_log_from_the_previous_binary_resumes() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/previous-format");
    // The run recorded its workspace as this absolute path.
    let ws = std::path::Path::new("/tmp/tinyagent-fixture/ws");
    std::fs::create_dir_all(ws).unwrap();
    std::fs::write(ws.join("note.txt"), "written by the fixture run\n").unwrap();
    let sb = Sandbox::new();
    for name in [
        "fixture.wal",
        "fixture.wal.snapshot",
        "fixture.wal.snapshot.bak",
    ] {
        let to = sb.path(name);
        std::fs::copy(fixture.join(name), &to).unwrap();
        std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let before = std::fs::read(sb.path("fixture.wal")).unwrap();
    let server = MockServer::start(vec![MockReply::text("resumed from the old log")]);
    let out = output({
        let mut c = std::process::Command::new(e2e::bin());
        c.current_dir(sb.dir.path())
            .args([
                "resume",
                "fixture.wal",
                "--provider",
                "openai",
                "--base-url",
            ])
            .arg(server.base_url())
            // A log from elsewhere: the person says where it works.
            .arg("--cwd")
            .arg(ws)
            .env_remove("OPENAI_API_KEY")
            .stdin(std::process::Stdio::null());
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("snapshot"),
        "the old snapshot loads without a warning: {}",
        stderr(&out)
    );
    let after = std::fs::read(sb.path("fixture.wal")).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the old records are kept as they were"
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let msgs = reqs[0]["messages"].as_array().unwrap();
    let content = |id: &str| {
        msgs.iter()
            .find(|m| m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}"))["content"]
            .clone()
    };
    assert_eq!(content("call_3_0"), INTERRUPTED);
    assert_eq!(content("call_3_1"), NOT_RUN);
    assert!(msgs.iter().any(|m| {
        m["content"]
            .as_str()
            .unwrap_or("")
            .starts_with("[Current plan]")
    }));
    let notice = msgs
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("[Resumed]"))
        .expect("a [Resumed] notice");
    assert!(notice.contains("p1"), "{notice}");
    let recs = contract::read(&sb.path("fixture.wal"));
    contract::check_write_order(&recs);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    server.assert_no_violations();
}

/// A server that reuses call ids across steps: the `[Resumed]` notice names
/// the interrupted call of the step that was running, not an older one
/// with the same id.
#[test]
fn the_notice_names_the_running_call_when_ids_repeat_across_steps() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo first-step"})).with_ids(&["c1"]),
        MockReply::tool_call("bash", json!({"command": "echo second-step; sleep 30"}))
            .with_ids(&["c1"]),
        MockReply::text("done"),
    ]);
    // Killed while the second step's call runs.
    let mut child = sb.run_cmd(&server.base_url(), "same ids").spawn().unwrap();
    wait_until("the second call", || {
        std::fs::read_to_string(sb.wal())
            .is_ok_and(|t| t.matches("\"type\":\"tool.started\"").count() == 2)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    sb.resume_ok();
    let reqs = server.requests();
    let notice = reqs.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("[Resumed]"))
        .unwrap()
        .to_string();
    assert!(notice.contains("second-step"), "{notice}");
    assert!(!notice.contains("first-step"), "{notice}");
}
