//! Tool hooks end to end: the real binary, a loopback model server and real
//! hook scripts written into the test's temp dir. Hooks that allow, block (by
//! exit 2 and by JSON), give feedback, crash, print garbage, hang past their
//! timeout, and kill the agent mid-call (then resume). Every log is checked by
//! the independent contract reader.

use crate::support::contract;
use crate::support::contract::Rec;
use crate::support::e2e;
use crate::support::e2e::{Sandbox, events, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

const INTERRUPTED: &str = "[interrupted: tool did not complete before the agent stopped; it may have partially run — verify state before retrying]";
const NOT_RUN: &str = "[not run: the agent stopped before this call started; it had no effect]";

/// Writes a hook script into the temp dir; gives the command that runs it.
fn hook(sb: &Sandbox, name: &str, body: &str) -> String {
    let p = sb.path(name);
    std::fs::write(&p, body).unwrap();
    format!("sh '{}'", p.display())
}

/// `[hooks]` TOML for the given pre/post commands and extra lines.
fn hooks_toml(pre: Option<&str>, post: Option<&str>, extra: &str) -> String {
    let mut t = String::from("[hooks]\n");
    for (k, v) in [("pre_tool", pre), ("post_tool", post)] {
        if let Some(v) = v {
            t.push_str(&format!("{k} = {}\n", toml_str(v)));
        }
    }
    t.push_str(extra);
    t
}

fn toml_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Runs the agent with `--json` and the given config; expects exit 0.
fn run_ok(sb: &Sandbox, server: &MockServer, toml: &str) -> std::process::Output {
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), "hooked task", toml);
    cmd.arg("--json");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "run failed: {}", stderr(&out));
    out
}

fn find<'a>(recs: &'a [Rec], kind: &str, call_id: &str) -> Option<&'a Rec> {
    recs.iter()
        .find(|r| r.kind == kind && r.data["call_id"] == call_id)
}

fn result<'a>(recs: &'a [Rec], call_id: &str) -> &'a Value {
    &find(recs, "tool.result", call_id)
        .unwrap_or_else(|| panic!("no tool.result for {call_id}"))
        .data
}

fn inspect_json(sb: &Sandbox) -> Value {
    let out = Command::new(e2e::bin())
        .args(["log", "inspect", "--json"])
        .arg(sb.wal())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn inspect_human(sb: &Sandbox) -> String {
    let out = Command::new(e2e::bin())
        .args(["log", "inspect"])
        .arg(sb.wal())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Blocks calls whose input mentions `forbidden`, by exit 2 with a reason.
const BLOCK_BY_EXIT: &str = r#"input=$(cat)
case "$input" in
  *forbidden*) echo "forbidden word in the call" >&2; exit 2 ;;
esac
exit 0
"#;

#[test]
fn allowing_hooks_get_the_call_and_the_result_on_stdin() {
    let sb = Sandbox::new();
    let pre_in = sb.path("pre.json");
    let post_in = sb.path("post.json");
    let pre = hook(&sb, "pre.sh", &format!("cat > '{}'\n", pre_in.display()));
    let post = hook(&sb, "post.sh", &format!("cat > '{}'\n", post_in.display()));
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": "echo ran > side.txt; echo printed"}),
        )
        .with_ids(&["c1"]),
        MockReply::text("done"),
    ]);
    let out = run_ok(&sb, &server, &hooks_toml(Some(&pre), Some(&post), ""));
    server.assert_no_violations();
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("side.txt")).unwrap(),
        "ran\n"
    );
    let recs = contract::read_checked(&sb.wal());
    let run_id = recs[0].data["run_id"].clone();
    let pre_json: Value = serde_json::from_slice(&std::fs::read(&pre_in).unwrap()).unwrap();
    assert_eq!(pre_json["run_id"], run_id);
    assert_eq!(pre_json["step"], 1);
    assert_eq!(pre_json["call_id"], "c1");
    assert_eq!(pre_json["tool"], "bash");
    assert_eq!(pre_json["hook"], "pre_tool");
    assert_eq!(
        pre_json["arguments"]["command"],
        "echo ran > side.txt; echo printed"
    );
    assert!(pre_json.get("result").is_none(), "{pre_json}");
    let post_json: Value = serde_json::from_slice(&std::fs::read(&post_in).unwrap()).unwrap();
    assert_eq!(post_json["run_id"], run_id);
    assert_eq!(post_json["call_id"], "c1");
    assert_eq!(post_json["hook"], "post_tool");
    assert_eq!(post_json["result"]["is_error"], false);
    assert!(
        post_json["result"]["content"]
            .as_str()
            .unwrap()
            .contains("printed"),
        "{post_json}"
    );
    // Both runs are in the log, in the call's result, and on --json.
    let r = result(&recs, "c1");
    assert_eq!(
        r["hooks"],
        json!([{"hook": "pre_tool", "outcome": "allow"}, {"hook": "post_tool", "outcome": "allow"}])
    );
    assert!(!r["content"].as_str().unwrap().contains("[post_tool hook]"));
    let ran: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "hook.ran")
        .collect();
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert_eq!(ran[0]["hook"], "pre_tool");
    assert_eq!(ran[1]["hook"], "post_tool");
    // The pre hook ran before tool.started: its event comes first.
    let evs = events(&out);
    let pos = |name: &str| evs.iter().position(|e| e["event"] == name).unwrap();
    assert!(pos("hook.ran") < pos("tool.started"));
    let report = inspect_json(&sb);
    assert_eq!(report["hooks"]["runs"], 2);
    assert_eq!(report["hooks"]["allow"], 2);
    assert_eq!(report["hooks_blocked"], 0);
}

#[test]
fn exit_2_blocks_the_call_and_the_model_gets_the_reason() {
    let sb = Sandbox::new();
    let pre = hook(&sb, "pre.sh", BLOCK_BY_EXIT);
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("bash", json!({"command": "echo forbidden > blocked.txt"})),
            ("bash", json!({"command": "echo fine > allowed.txt"})),
        ])
        .with_ids(&["b1", "a1"]),
        MockReply::text("done"),
    ]);
    let out = run_ok(&sb, &server, &hooks_toml(Some(&pre), None, ""));
    server.assert_no_violations();
    assert!(
        !sb.ws().join("blocked.txt").exists(),
        "the blocked call ran"
    );
    assert!(
        sb.ws().join("allowed.txt").exists(),
        "the allowed call did not run"
    );
    let recs = contract::read_checked(&sb.wal());
    let blocked = find(&recs, "hook.blocked", "b1").expect("hook.blocked record");
    assert_eq!(blocked.data["hook"], "pre_tool");
    assert_eq!(blocked.data["reason"], "forbidden word in the call");
    assert!(find(&recs, "tool.started", "b1").is_none());
    assert!(find(&recs, "tool.started", "a1").is_some());
    let r = result(&recs, "b1");
    assert_eq!(r["is_error"], true);
    assert_eq!(r["interrupted"], false);
    assert_eq!(
        r["hooks"],
        json!([{"hook": "pre_tool", "outcome": "block", "detail": "forbidden word in the call"}])
    );
    // Order: hook.blocked, then the result, both before the next call starts.
    assert!(blocked.seq < find(&recs, "tool.result", "b1").unwrap().seq);
    assert!(
        server
            .sent_result("b1")
            .contains("forbidden word in the call"),
        "{}",
        server.sent_result("b1")
    );
    let evs = events(&out);
    assert!(
        evs.iter()
            .any(|e| e["event"] == "hook.ran" && e["outcome"] == "block" && e["call_id"] == "b1")
    );
    let report = inspect_json(&sb);
    assert_eq!(report["hooks_blocked"], 1);
    assert_eq!(report["hooks"]["runs"], 2);
    assert_eq!(report["hooks"]["block"], 1);
    assert_eq!(report["hooks"]["allow"], 1);
    assert_eq!(report["hooks"]["recent"][0]["call_id"], "b1");
    let human = inspect_human(&sb);
    assert!(
        human.contains("2 runs: 1 allowed, 1 blocked, 0 failed"),
        "{human}"
    );
    assert!(human.contains("forbidden word in the call"), "{human}");
}

#[test]
fn json_decision_block_blocks_the_call() {
    let sb = Sandbox::new();
    let pre = hook(
        &sb,
        "pre.sh",
        "cat >/dev/null\necho '{\"decision\":\"block\",\"reason\":\"policy says no\"}'\n",
    );
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "w.txt", "content": "x"})).with_ids(&["w1"]),
        MockReply::text("done"),
    ]);
    run_ok(&sb, &server, &hooks_toml(Some(&pre), None, ""));
    assert!(!sb.ws().join("w.txt").exists());
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(
        find(&recs, "hook.blocked", "w1").unwrap().data["reason"],
        "policy says no"
    );
    assert!(find(&recs, "tool.started", "w1").is_none());
    assert!(server.sent_result("w1").contains("policy says no"));
}

#[test]
fn post_hook_feedback_is_appended_plain_and_json() {
    let sb = Sandbox::new();
    let post = hook(
        &sb,
        "post.sh",
        r#"input=$(cat)
case "$input" in
  *'"call_id":"p1"'*) echo "lint: 2 warnings" ;;
  *) echo '{"feedback":"json says fine"}' ;;
esac
"#,
    );
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("bash", json!({"command": "echo one"})),
            ("bash", json!({"command": "echo two"})),
        ])
        .with_ids(&["p1", "p2"]),
        MockReply::text("done"),
    ]);
    run_ok(&sb, &server, &hooks_toml(None, Some(&post), ""));
    server.assert_no_violations();
    let recs = contract::read_checked(&sb.wal());
    let one = result(&recs, "p1")["content"].as_str().unwrap().to_string();
    assert!(one.starts_with("one\n"), "{one}");
    assert!(one.ends_with("[post_tool hook]\nlint: 2 warnings"), "{one}");
    let two = result(&recs, "p2")["content"].as_str().unwrap().to_string();
    assert!(two.ends_with("[post_tool hook]\njson says fine"), "{two}");
    assert!(!two.contains("{\"feedback\""), "{two}");
    assert_eq!(server.sent_result("p1"), one);
    assert_eq!(server.sent_result("p2"), two);
    assert_eq!(
        result(&recs, "p2")["hooks"][0],
        json!({"hook": "post_tool", "outcome": "allow", "detail": "json says fine"})
    );
}

/// A pre hook that fails (crash, garbage) with `hooks.on_failure` set to
/// `on_failure` (None: the default): returns the log and whether the call ran.
fn failing_pre_hook(body: &str, on_failure: Option<&str>) -> (Vec<Rec>, bool, String) {
    let sb = Sandbox::new();
    let pre = hook(&sb, "pre.sh", body);
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo x > side.txt"})).with_ids(&["c1"]),
        MockReply::text("done"),
    ]);
    let extra = on_failure
        .map(|f| format!("on_failure = {}\n", toml_str(f)))
        .unwrap_or_default();
    let out = run_ok(&sb, &server, &hooks_toml(Some(&pre), None, &extra));
    server.assert_no_violations();
    let ran = sb.ws().join("side.txt").exists();
    (contract::read_checked(&sb.wal()), ran, stderr(&out))
}

#[test]
fn crashing_hook_blocks_by_default_and_allows_when_configured() {
    let crash = "cat >/dev/null\necho 'hook blew up' >&2\nexit 1\n";
    for on_failure in [None, Some("block")] {
        let (recs, ran, err) = failing_pre_hook(crash, on_failure);
        assert!(
            !ran,
            "a failed hook must block with on_failure {on_failure:?}"
        );
        let reason = find(&recs, "hook.blocked", "c1").unwrap().data["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.contains("exited with 1"), "{reason}");
        assert!(reason.contains("hook blew up"), "{reason}");
        assert!(find(&recs, "tool.started", "c1").is_none());
        assert_eq!(result(&recs, "c1")["hooks"][0]["outcome"], "failed");
        assert!(err.contains("hook blew up"), "reported on stderr: {err}");
    }
    let (recs, ran, err) = failing_pre_hook(crash, Some("allow"));
    assert!(ran, "on_failure = allow lets the call run");
    assert!(find(&recs, "hook.blocked", "c1").is_none());
    assert!(find(&recs, "tool.started", "c1").is_some());
    let r = result(&recs, "c1");
    assert_eq!(r["is_error"], false);
    assert_eq!(r["hooks"][0]["outcome"], "failed");
    assert!(err.contains("exited with 1"), "reported on stderr: {err}");
}

#[test]
fn garbage_json_is_a_failure() {
    let (recs, ran, _) = failing_pre_hook("cat >/dev/null\necho '{\"decision\": blo'\n", None);
    assert!(!ran);
    let reason = find(&recs, "hook.blocked", "c1").unwrap().data["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("invalid JSON"), "{reason}");
    let (recs, ran, _) = failing_pre_hook(
        "cat >/dev/null\necho '{\"decision\":\"maybe\"}'\n",
        Some("allow"),
    );
    assert!(ran);
    assert_eq!(result(&recs, "c1")["hooks"][0]["outcome"], "failed");
}

fn gone_or_zombie(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn hanging_hook_is_killed_at_its_timeout_and_the_run_goes_on() {
    let sb = Sandbox::new();
    let pid_file = sb.path("hook.pid");
    let pre = hook(
        &sb,
        "pre.sh",
        &format!("echo $$ > '{}'\nexec sleep 120\n", pid_file.display()),
    );
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo x > side.txt"})).with_ids(&["c1"]),
        MockReply::text("done"),
    ]);
    let began = Instant::now();
    let out = run_ok(
        &sb,
        &server,
        &hooks_toml(Some(&pre), None, "timeout_ms = 300\n"),
    );
    // An upper bound only: far below the hook's own 120 s.
    assert!(began.elapsed() < Duration::from_secs(60));
    assert!(!sb.ws().join("side.txt").exists());
    let recs = contract::read_checked(&sb.wal());
    let reason = find(&recs, "hook.blocked", "c1").unwrap().data["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("timed out after 300 ms"), "{reason}");
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(gone_or_zombie(pid.trim()), "the hung hook still runs");
    assert_eq!(recs.last().unwrap().data["status"], "completed");
}

fn crash_in_hook(pre: bool) -> (Sandbox, MockServer) {
    let sb = Sandbox::new();
    let killer = sb.kill_agent_hook();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo x > side.txt"})).with_ids(&["c1"]),
        MockReply::text("recovered"),
    ]);
    let toml = if pre {
        hooks_toml(Some(&killer), None, "")
    } else {
        hooks_toml(None, Some(&killer), "")
    };
    e2e::killed(sb.run_cmd_cfg(&server.base_url(), "crash in a hook", &toml));
    assert!(sb.path("killed").exists());
    (sb, server)
}

#[test]
fn agent_killed_in_the_pre_hook_resumes_the_call_as_not_run() {
    let (sb, server) = crash_in_hook(true);
    let before = contract::read(&sb.wal());
    assert_eq!(before.last().unwrap().kind, "model.response");
    assert!(find(&before, "tool.started", "c1").is_none());
    let out = sb.resume_ok();
    assert!(stderr(&out).contains("Never started"), "{}", stderr(&out));
    assert!(!sb.ws().join("side.txt").exists(), "the call ran");
    let recs = contract::read_checked(&sb.wal());
    assert!(find(&recs, "tool.started", "c1").is_none());
    let r = result(&recs, "c1");
    assert_eq!(r["content"], NOT_RUN);
    assert_eq!(r["interrupted"], true);
    assert_eq!(server.sent_result("c1"), NOT_RUN);
    let resume_rec = recs.iter().find(|r| r.kind == "resume").unwrap();
    assert_eq!(resume_rec.data["interrupted"], json!(["c1"]));
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    server.assert_no_violations();
}

#[test]
fn agent_killed_in_the_post_hook_resumes_the_call_as_interrupted() {
    let (sb, server) = crash_in_hook(false);
    let before = contract::read(&sb.wal());
    assert!(find(&before, "tool.started", "c1").is_some());
    assert!(find(&before, "tool.result", "c1").is_none());
    assert!(
        sb.ws().join("side.txt").exists(),
        "the tool ran before the hook"
    );
    let out = sb.resume_ok();
    assert!(stderr(&out).contains("Interrupted"), "{}", stderr(&out));
    let recs = contract::read_checked(&sb.wal());
    let r = result(&recs, "c1");
    assert_eq!(r["content"], INTERRUPTED);
    assert_eq!(r["interrupted"], true);
    assert_eq!(server.sent_result("c1"), INTERRUPTED);
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("side.txt")).unwrap(),
        "x\n",
        "not re-run"
    );
    server.assert_no_violations();
}

/// A read whose first run was interrupted is re-run on resume through the
/// same hooks as a live call: here the pre hook blocks it the second time.
#[test]
fn a_read_rerun_on_resume_goes_through_the_pre_hook() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("r.txt"), "readable\n").unwrap();
    let flag = sb.path("block-now");
    let pre = hook(
        &sb,
        "pre.sh",
        &format!(
            "cat >/dev/null\n[ -e '{}' ] && {{ echo 'reads are blocked now' >&2; exit 2; }}\nexit 0\n",
            flag.display()
        ),
    );
    let server = MockServer::start(vec![
        MockReply::tool_call("read", json!({"path": "r.txt"})).with_ids(&["rd"]),
        MockReply::text("done"),
    ]);
    let toml = hooks_toml(Some(&pre), None, "");
    e2e::crash_after(
        sb.run_cmd_cfg(&server.base_url(), "read it", &toml),
        "tool.started:1",
    );
    std::fs::write(&flag, "").unwrap();
    sb.resume_ok();
    let recs = contract::read_checked(&sb.wal());
    let blocked = find(&recs, "hook.blocked", "rd").expect("the re-run was blocked");
    assert!(
        blocked.data["reason"]
            .as_str()
            .unwrap()
            .contains("reads are blocked now")
    );
    let r = result(&recs, "rd");
    assert_eq!(r["is_error"], true);
    assert!(
        r["content"]
            .as_str()
            .unwrap()
            .contains("blocked by the pre_tool hook")
    );
    assert!(!server.sent_result("rd").contains("readable"));
    server.assert_no_violations();
}

/// A re-run read gets its post hook's feedback, like a live one.
#[test]
fn a_read_rerun_on_resume_goes_through_the_post_hook() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("r.txt"), "readable\n").unwrap();
    let post = hook(&sb, "post.sh", "cat >/dev/null\necho 'post saw it'\n");
    let server = MockServer::start(vec![
        MockReply::tool_call("read", json!({"path": "r.txt"})).with_ids(&["rd"]),
        MockReply::text("done"),
    ]);
    let toml = hooks_toml(None, Some(&post), "");
    e2e::crash_after(
        sb.run_cmd_cfg(&server.base_url(), "read it", &toml),
        "tool.started:1",
    );
    sb.resume_ok();
    let recs = contract::read_checked(&sb.wal());
    let r = result(&recs, "rd");
    assert_eq!(r["rerun"], true);
    assert_eq!(r["hooks"][0]["hook"], "post_tool");
    let sent = server.sent_result("rd");
    assert!(
        sent.contains("readable") && sent.contains("post saw it"),
        "{sent}"
    );
    server.assert_no_violations();
}
