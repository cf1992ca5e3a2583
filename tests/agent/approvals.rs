//! Approvals (contract section 12) on the real binary: answered on a real
//! terminal (y, n, a), by `tinyagent approve` from another process with no
//! terminal (allow, deny with a reason), after a kill while the question
//! waited, and after a kill right after the decision was recorded (no
//! second question, the call runs once). Every log is read back with the
//! independent contract reader.

use crate::support::contract::{self, Rec, check_approvals};
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::pty;
use crate::support::wait_until;
use serde_json::json;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const APPROVE: &str = "[approvals]\nmode = \"mutating\"\n";

fn records(sb: &Sandbox) -> Vec<Rec> {
    contract::read_checked(&sb.wal())
}

use contract::of_kind as kinds;

fn result_of<'a>(recs: &'a [Rec], id: &str) -> &'a Rec {
    recs.iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}"))
}

fn log_has(sb: &Sandbox, needle: &str) -> bool {
    std::fs::read_to_string(sb.wal()).is_ok_and(|t| t.contains(needle))
}

/// A child with its stderr collected as it comes.
struct Running {
    child: Child,
    err: Arc<Mutex<String>>,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn tinyagent");
        let mut pipe = child.stderr.take().expect("stderr");
        let err = Arc::new(Mutex::new(String::new()));
        let sink = err.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Running { child, err }
    }
    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }
    fn wait(mut self) -> (i32, String) {
        let status = self.child.wait().expect("wait");
        // The reader gets the rest once the pipe closes.
        std::thread::sleep(Duration::from_millis(50));
        (status.code().unwrap_or(-1), self.stderr())
    }
    /// Waits up to 30 s for the exit; a run still going then (waiting for
    /// an answer nobody gives) is killed and the test fails.
    fn wait_bounded(mut self) -> (i32, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                self.kill9();
                panic!("the run did not end by itself:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.wait()
    }
    fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
    }
}

/// `tinyagent approve` from another process, with no terminal.
fn approve(sb: &Sandbox, id: &str, deny: Option<&str>) -> std::process::Output {
    let mut c = Command::new(bin());
    c.arg("approve").arg(sb.wal()).arg(id).stdin(Stdio::null());
    if let Some(reason) = deny {
        c.arg("--deny").arg("--reason").arg(reason);
    }
    output(c)
}

fn bash_call(id: &str, command: &str) -> MockReply {
    MockReply::tool_call("bash", json!({ "command": command })).with_ids(&[id])
}

#[test]
fn approve_from_another_process_allows_then_denies_with_a_reason() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        bash_call("c1", "echo one >> out.txt"),
        bash_call("c2", "echo two >> out.txt"),
        MockReply::text("done"),
    ]);
    let run = Running::start(sb.run_cmd_cfg(&mock.base_url(), "write twice", APPROVE));
    wait_until("the first question", || log_has(&sb, "approval.requested"));
    // Nothing ran before the answer.
    assert!(!sb.ws().join("out.txt").exists());
    let a = approve(&sb, "c1", None);
    assert!(a.status.success(), "approve: {}", stderr(&a));
    wait_until("the second question", || {
        contract::read(&sb.wal())
            .iter()
            .filter(|r| r.kind == "approval.requested")
            .count()
            == 2
    });
    // An answer to a call that does not wait is refused, and changes nothing.
    let wrong = approve(&sb, "c1", None);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    let d = approve(&sb, "c2", Some("not twice"));
    assert!(d.status.success(), "approve --deny: {}", stderr(&d));
    let (code, err) = run.wait();
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("tinyagent approve"),
        "the run says how to answer: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("out.txt")).unwrap(),
        "one\n"
    );
    let recs = records(&sb);
    let counts = check_approvals(&recs);
    assert_eq!((counts.requested, counts.allowed, counts.denied), (2, 1, 1));
    let decided = kinds(&recs, "approval.decided");
    assert_eq!(decided[0].data["by"], "approve");
    assert_eq!(decided[1].data["reason"], "not twice");
    let denied = result_of(&recs, "c2");
    assert_eq!(denied.data["is_error"], true);
    let text = denied.data["content"].as_str().unwrap();
    assert!(text.contains("not twice"), "{text}");
    // The requested record came before the decision, the decision before
    // the call started.
    let seq = |kind: &str, id: &str| {
        recs.iter()
            .find(|r| r.kind == kind && r.data["call_id"] == id)
            .map(|r| r.seq)
            .unwrap()
    };
    assert!(seq("approval.requested", "c1") < seq("approval.decided", "c1"));
    assert!(seq("approval.decided", "c1") < seq("tool.started", "c1"));
    // The model was told why.
    let last = mock.requests().pop().unwrap();
    assert!(last.to_string().contains("not twice"));
    // The channel holds no answer any more.
    let dir = sb.path("run.wal.d/approvals");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "answers left behind: {left:?}");
    mock.assert_no_violations();
}

#[test]
fn read_only_calls_and_allow_rules_are_never_asked() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "hello\n").unwrap();
    let mock = MockServer::start(vec![
        MockReply::tool_call("read", json!({ "path": "a.txt" })).with_ids(&["r1"]),
        bash_call("b1", "git status --short"),
        MockReply::text("done"),
    ]);
    let toml = format!("{APPROVE}allow = [\"bash:git status*\"]\n");
    let (code, err) =
        Running::start(sb.run_cmd_cfg(&mock.base_url(), "look", &toml)).wait_bounded();
    assert_eq!(code, 0, "{err}");
    let recs = records(&sb);
    let counts = check_approvals(&recs);
    assert_eq!(counts.requested, 0);
    let decided = kinds(&recs, "approval.decided");
    assert_eq!(decided.len(), 1, "only the bash call is decided");
    assert_eq!(decided[0].data["by"], "rule");
    assert!(
        decided[0].data["reason"]
            .as_str()
            .unwrap()
            .contains("git status*")
    );
}

#[test]
fn a_run_killed_while_waiting_asks_again_on_resume() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        bash_call("c1", "echo ran >> out.txt"),
        MockReply::text("done"),
    ]);
    let mut run = Running::start(sb.run_cmd_cfg(&mock.base_url(), "once", APPROVE));
    wait_until("the question", || log_has(&sb, "approval.requested"));
    run.kill9();
    assert!(!sb.ws().join("out.txt").exists());
    let resume = Running::start(pty::resume_cmd(&sb, &sb.wal()));
    wait_until("the question asked again", || {
        resume.stderr().contains("waiting for approval")
    });
    let a = approve(&sb, "c1", None);
    assert!(a.status.success(), "approve: {}", stderr(&a));
    let (code, err) = resume.wait();
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("out.txt")).unwrap(),
        "ran\n"
    );
    let recs = records(&sb);
    let counts = check_approvals(&recs);
    assert_eq!((counts.allowed, counts.started), (1, 1));
    // The call went on: a real result, before the resume record.
    let result = result_of(&recs, "c1");
    assert_eq!(result.data["interrupted"], false);
    let resume_seq = kinds(&recs, "resume")[0].seq;
    assert!(result.seq < resume_seq);
    mock.assert_no_violations();
}

#[test]
fn a_kill_right_after_the_decision_runs_the_call_once_without_asking_again() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        bash_call("c1", "echo ran >> out.txt"),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd_cfg(&mock.base_url(), "once", APPROVE);
    cmd.env("TINYAGENT_CRASH_AFTER", "approval.decided:1");
    let run = Running::start(cmd);
    wait_until("the question", || log_has(&sb, "approval.requested"));
    let a = approve(&sb, "c1", None);
    assert!(a.status.success(), "approve: {}", stderr(&a));
    let (code, _) = run.wait();
    assert_ne!(code, 0, "the crash seam kills the run");
    let recs = contract::read(&sb.wal());
    assert_eq!(recs.last().unwrap().kind, "approval.decided");
    assert!(!sb.ws().join("out.txt").exists());
    let o = output({
        let mut c = pty::resume_cmd(&sb, &sb.wal());
        c.stdin(Stdio::null());
        c
    });
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("waiting for approval"), "asked twice: {err}");
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("out.txt")).unwrap(),
        "ran\n"
    );
    let recs = records(&sb);
    let counts = check_approvals(&recs);
    assert_eq!(
        (counts.requested, counts.allowed, counts.started),
        (1, 1, 1)
    );
    mock.assert_no_violations();
}

/// A run with approvals on, on a terminal: the question, then `reply`.
fn on_terminal(calls: Vec<MockReply>, replies: &[&str]) -> (Sandbox, MockServer) {
    let sb = Sandbox::new();
    let mut all = calls;
    all.push(MockReply::text("done"));
    let mock = MockServer::start(all);
    let mut cmd = Command::new(bin());
    cmd.current_dir(sb.dir.path())
        .args(["run", "--model", "test-model", "--base-url"])
        .arg(mock.base_url())
        .arg("--wal")
        .arg(sb.wal())
        .arg("--cwd")
        .arg(sb.ws())
        .arg("--config")
        .arg(sb.fast_config(APPROVE))
        .arg("do it")
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    let mut s = pty::spawn(cmd);
    for reply in replies {
        s.exp_string("[n]o").expect("the question");
        s.send_line(reply).expect("answer");
    }
    s.exp_string("totals:").expect("the run ends");
    assert_eq!(pty::exit_code(&mut s), Some(0));
    (sb, mock)
}

#[test]
fn answered_yes_on_the_terminal() {
    let (sb, mock) = on_terminal(vec![bash_call("c1", "echo y >> out.txt")], &["y"]);
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("out.txt")).unwrap(),
        "y\n"
    );
    let recs = records(&sb);
    check_approvals(&recs);
    let d = kinds(&recs, "approval.decided");
    assert_eq!(
        (d[0].data["decision"].as_str(), d[0].data["by"].as_str()),
        (Some("allow"), Some("tty"))
    );
    mock.assert_no_violations();
}

#[test]
fn answered_no_on_the_terminal_with_a_reason() {
    let (sb, mock) = on_terminal(
        vec![bash_call("c1", "echo n >> out.txt")],
        &["n wrong file"],
    );
    assert!(!sb.ws().join("out.txt").exists());
    let recs = records(&sb);
    check_approvals(&recs);
    let d = kinds(&recs, "approval.decided");
    assert_eq!(d[0].data["decision"], "deny");
    assert_eq!(d[0].data["reason"], "wrong file");
    let text = result_of(&recs, "c1").data["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("wrong file"), "{text}");
    mock.assert_no_violations();
}

#[test]
fn answered_always_on_the_terminal_allows_the_commands_prefix_not_all_of_bash() {
    let (sb, mock) = on_terminal(
        vec![
            bash_call("c1", "touch a.txt"),
            bash_call("c2", "touch b.txt"),
            bash_call("c3", "mkdir d"),
        ],
        &["a", "y"],
    );
    assert!(sb.ws().join("a.txt").exists() && sb.ws().join("b.txt").exists());
    assert!(sb.ws().join("d").is_dir());
    let recs = records(&sb);
    let counts = check_approvals(&recs);
    // `touch` once for all touches; `mkdir` asked on its own.
    assert_eq!(
        (counts.requested, counts.allowed, counts.started),
        (2, 3, 3)
    );
    let d = kinds(&recs, "approval.decided");
    assert_eq!(d[0].data["always"], true);
    assert_eq!(d[0].data["scope"], "touch");
    assert_eq!(d[1].data["by"], "always");
    assert_eq!(d[2].data["by"], "tty");
    mock.assert_no_violations();
}

#[test]
fn inspect_and_sessions_show_a_run_waiting_for_approval_with_the_call() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        bash_call("c9", "echo shown >> out.txt"),
        MockReply::text("done"),
    ]);
    let wal = sb.home().join("runs").join("waiting.wal");
    let mut run = Running::start(sb.run_cmd_wal(&mock.base_url(), "wait", APPROVE, &wal));
    let has = || std::fs::read_to_string(&wal).is_ok_and(|t| t.contains("approval.requested"));
    wait_until("the question", has);
    run.kill9();
    let mut c = Command::new(bin());
    c.args(["log", "inspect", "--json"]).arg(&wal);
    let o = output(c);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["waiting"]["for"], "approval");
    assert_eq!(report["waiting"]["call_id"], "c9");
    assert_eq!(report["waiting"]["tool"], "bash");
    assert!(
        report["waiting"]["preview"]
            .as_str()
            .unwrap()
            .contains("echo shown")
    );
    let mut c = Command::new(bin());
    c.args(["log", "inspect"]).arg(&wal);
    let human = String::from_utf8_lossy(&output(c).stdout).into_owned();
    assert!(
        human.contains("waiting for") && human.contains("tinyagent approve"),
        "{human}"
    );
    let mut c = Command::new(bin());
    c.args(["sessions", "--all"])
        .env("TINYAGENT_HOME", sb.home());
    let list = String::from_utf8_lossy(&output(c).stdout).into_owned();
    assert!(list.contains("waiting for approval of c9"), "{list}");
    let mut c = Command::new(bin());
    c.args(["sessions", "--all", "--json"])
        .env("TINYAGENT_HOME", sb.home());
    let rows: serde_json::Value = serde_json::from_slice(&output(c).stdout).unwrap();
    assert_eq!(rows[0]["waiting"]["call_id"], "c9");
    assert_eq!(rows[0]["status"], "stopped");
}

#[test]
fn mcp_calls_go_through_the_same_approval_step() {
    let Some(script) = crate::support::require::require(
        "mcp",
        "mcp_calls_go_through_the_same_approval_step",
        crate::support::require::mcp_server("server-filesystem"),
    ) else {
        return;
    };
    let sb = Sandbox::new();
    let file = sb.ws().join("mcp.txt");
    let mock = MockServer::start(vec![
        MockReply::tool_call(
            "fs__write_file",
            json!({ "path": file.display().to_string(), "content": "via MCP\n" }),
        )
        .with_ids(&["w1"]),
        MockReply::tool_call(
            "fs__read_text_file",
            json!({ "path": file.display().to_string() }),
        )
        .with_ids(&["r1"]),
        MockReply::text("done"),
    ]);
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let toml = format!(
        "{APPROVE}[mcp.servers.fs]\ncommand = \"node\"\nargs = [{}, {}]\n",
        q(&script.display().to_string()),
        q(&sb.ws().display().to_string())
    );
    let run = Running::start(sb.run_cmd_cfg(&mock.base_url(), "mcp", &toml));
    wait_until("the question", || log_has(&sb, "approval.requested"));
    assert!(!file.exists(), "the MCP call ran before its answer");
    let a = approve(&sb, "w1", None);
    assert!(a.status.success(), "approve: {}", stderr(&a));
    let (code, err) = run.wait();
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "via MCP\n");
    let recs = records(&sb);
    let counts = check_approvals(&recs);
    assert_eq!(
        (counts.requested, counts.allowed, counts.started),
        (1, 1, 1)
    );
    let asked = kinds(&recs, "approval.requested");
    assert_eq!(asked[0].data["tool"], "fs__write_file");
    // The read-only MCP call was not asked about.
    assert!(
        kinds(&recs, "approval.decided")
            .iter()
            .all(|r| r.data["call_id"] != "r1")
    );
    mock.assert_no_violations();
}

#[test]
fn the_pre_hook_goes_first_and_a_call_it_blocks_is_never_asked_about() {
    let sb = Sandbox::new();
    let script = sb.path("pre.sh");
    std::fs::write(
        &script,
        "input=$(cat)\ncase \"$input\" in *forbidden*) echo 'no forbidden words' >&2; exit 2;; esac\nexit 0\n",
    )
    .unwrap();
    let mock = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("bash", json!({ "command": "echo forbidden > blocked.txt" })),
            ("bash", json!({ "command": "echo fine > allowed.txt" })),
        ])
        .with_ids(&["b1", "a1"]),
        MockReply::text("done"),
    ]);
    let toml = format!(
        "{APPROVE}[hooks]\npre_tool = {}\n",
        serde_json::Value::String(format!("sh '{}'", script.display()))
    );
    let run = Running::start(sb.run_cmd_cfg(&mock.base_url(), "hooked", &toml));
    wait_until("the question", || log_has(&sb, "approval.requested"));
    let a = approve(&sb, "a1", None);
    assert!(a.status.success(), "approve: {}", stderr(&a));
    let (code, err) = run.wait();
    assert_eq!(code, 0, "{err}");
    assert!(!sb.ws().join("blocked.txt").exists());
    assert!(sb.ws().join("allowed.txt").exists());
    let recs = records(&sb);
    check_approvals(&recs);
    let asked: Vec<&str> = kinds(&recs, "approval.requested")
        .iter()
        .map(|r| r.data["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        asked,
        ["a1"],
        "only the call the hook let through is asked about"
    );
    assert_eq!(kinds(&recs, "hook.blocked")[0].data["call_id"], "b1");
    mock.assert_no_violations();
}
