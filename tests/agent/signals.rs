//! Interruptions stop what they interrupt (contract section 7), on the real
//! binary: SIGINT, SIGTERM and SIGHUP during a long foreground call, during
//! a model request, during a hook and with a background process running; a
//! closed stdout or stderr; resuming runs stopped by a limit. Every side
//! effect a stopped command would have had after its sleep is waited for
//! past that sleep and must never appear.

use crate::support::contract::{self, Rec};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::wait_until;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIGNALS: [(Signal, &str, i32); 3] = [
    (Signal::SIGINT, "SIGINT", 130),
    (Signal::SIGTERM, "SIGTERM", 143),
    (Signal::SIGHUP, "SIGHUP", 129),
];

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn tinyagent")
}

fn log_has(sb: &Sandbox, needle: &str) -> bool {
    std::fs::read_to_string(sb.wal()).is_ok_and(|t| t.contains(needle))
}

fn send(child: &Child, sig: Signal) {
    kill(Pid::from_raw(child.id().cast_signed()), sig).expect("send the signal");
}

fn finish(child: Child) -> std::process::Output {
    child.wait_with_output().expect("wait for tinyagent")
}

fn records(sb: &Sandbox) -> Vec<Rec> {
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    recs
}

fn result_of<'a>(recs: &'a [Rec], call_id: &str) -> &'a Value {
    &recs
        .iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool.result for {call_id}"))
        .data
}

/// The run ended the contract's way for `name`: `run.finished` interrupted
/// with the signal as reason, the exit code, the one stderr line.
fn assert_interrupted(sb: &Sandbox, out: &std::process::Output, name: &str, code: i32) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{name}: {err}");
    let hint = format!(
        "interrupted ({name}); resume with: tinyagent resume {}",
        sb.wal().display()
    );
    assert!(err.contains(&hint), "{name}: no hint line in {err}");
    let recs = records(sb);
    let last = recs.last().expect("records");
    assert_eq!(last.kind, "run.finished", "{name}");
    assert_eq!(last.data["status"], "interrupted", "{name}");
    assert_eq!(last.data["reason"], name, "{name}");
}

/// Resumes against `server` (its next reply) and gives the first request of
/// the resumed run.
fn resume_and_first_request(sb: &Sandbox, server: &MockServer, before: usize) -> Value {
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "resume: {}", stderr(&out));
    let reqs = server.requests();
    assert!(reqs.len() > before, "the resumed run asked the model");
    reqs[before].clone()
}

fn sent_content(req: &Value, call_id: &str) -> String {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no result for {call_id} in {req}"))
        .to_string()
}

fn notice(req: &Value) -> String {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("[Resumed]"))
        .unwrap_or_else(|| panic!("no [Resumed] notice in {req}"))
        .to_string()
}

#[test]
fn each_signal_during_a_long_foreground_call_stops_its_whole_group() {
    let runs: Vec<_> = SIGNALS
        .iter()
        .map(|&(sig, name, code)| {
            std::thread::spawn(move || {
                let sb = Sandbox::new();
                // The side effect is made by a grandchild (same group), after
                // the sleep.
                let cmd =
                    "echo partial-output; sh -c 'sleep 2; touch SIDE_EFFECT_DONE'; echo never";
                let server = MockServer::start(vec![
                    MockReply::tool_calls(vec![
                        ("bash", json!({"command": cmd})),
                        ("read", json!({"path": "x.txt"})),
                    ])
                    .with_ids(&["long", "after"]),
                    MockReply::text("resumed and done"),
                ]);
                let child = spawn(sb.run_cmd(&server.base_url(), "a long call"));
                wait_until("the command to start", || {
                    log_has(&sb, "\"process\":{") && std::fs::read_to_string(sb.wal()).is_ok()
                });
                std::thread::sleep(Duration::from_millis(300));
                let t = Instant::now();
                send(&child, sig);
                let out = finish(child);
                assert!(
                    t.elapsed() < Duration::from_millis(2500),
                    "{name}: the stop took {:?}",
                    t.elapsed()
                );
                assert_interrupted(&sb, &out, name, code);
                let recs = records(&sb);
                let r = result_of(&recs, "long");
                assert_eq!(r["interrupted"], true, "{name}");
                assert_eq!(r["is_error"], true, "{name}");
                assert_eq!(r["signal"], name, "{name}");
                let content = r["content"].as_str().unwrap();
                assert!(
                    content.starts_with(&format!(
                        "[interrupted by {name}: the command was stopped after "
                    )),
                    "{name}: {content}"
                );
                assert!(content.contains("partial-output"), "{name}: {content}");
                assert!(!content.contains("never"), "{name}: {content}");
                // The call after it never started.
                let after = result_of(&recs, "after");
                assert_eq!(after["interrupted"], true);
                assert!(
                    !recs
                        .iter()
                        .any(|r| r.kind == "tool.started" && r.data["call_id"] == "after")
                );
                // Past the sleep: the grandchild was stopped with its group.
                std::thread::sleep(Duration::from_millis(2500));
                assert!(
                    !sb.ws().join("SIDE_EFFECT_DONE").exists(),
                    "{name}: the stopped command acted"
                );
                // Resume carries on without --message; the first request
                // shows the partial output and says the run was interrupted.
                let first = resume_and_first_request(&sb, &server, 1);
                assert!(sent_content(&first, "long").contains("partial-output"));
                let n = notice(&first);
                assert!(n.contains(&format!("interrupted by {name}")), "{name}: {n}");
                server.assert_no_violations();
            })
        })
        .collect();
    for r in runs {
        r.join().expect("a signal case failed");
    }
}

#[test]
fn a_signal_during_a_model_request_abandons_it() {
    for &(sig, name, code) in &SIGNALS {
        let sb = Sandbox::new();
        let server = MockServer::start(vec![
            MockReply::text("too late").delayed(Duration::from_secs(20)),
            MockReply::text("after resume"),
        ]);
        let child = spawn(sb.run_cmd(&server.base_url(), "slow model"));
        wait_until("the request", || server.request_count() == 1);
        let t = Instant::now();
        send(&child, sig);
        let out = finish(child);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            t.elapsed()
        );
        assert_interrupted(&sb, &out, name, code);
        let recs = records(&sb);
        assert!(
            !recs.iter().any(|r| r.kind == "model.response"),
            "{name}: an abandoned request has no model.response"
        );
        let first = resume_and_first_request(&sb, &server, 1);
        assert!(notice(&first).contains(&format!("interrupted by {name}")));
    }
}

#[test]
fn a_signal_during_a_pre_hook_stops_it_and_the_call_never_runs() {
    let runs: Vec<_> = SIGNALS
        .iter()
        .map(|&(sig, name, code)| std::thread::spawn(move || during_a_pre_hook(sig, name, code)))
        .collect();
    for r in runs {
        r.join().expect("a signal case failed");
    }
}

fn during_a_pre_hook(sig: Signal, name: &str, code: i32) {
    let sb = Sandbox::new();
    let hook = sb.path("slow-hook.sh");
    std::fs::write(
        &hook,
        "cat >/dev/null\nsh -c 'sleep 2; touch HOOK_SIDE_EFFECT'\nexit 0\n",
    )
    .unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "touch CALL_RAN"})).with_ids(&["c1"]),
        MockReply::text("done"),
    ]);
    let toml = format!("[hooks]\npre_tool = \"sh '{}'\"\n", hook.display());
    let child = spawn(sb.run_cmd_cfg(&server.base_url(), "hooked", &toml));
    wait_until("the hook to run", || {
        log_has(&sb, "model.response")
            && std::process::Command::new("pgrep")
                .arg("-f")
                .arg(hook.display().to_string())
                .output()
                .is_ok_and(|o| !o.stdout.is_empty())
    });
    std::thread::sleep(Duration::from_millis(200));
    send(&child, sig);
    let out = finish(child);
    assert_interrupted(&sb, &out, name, code);
    let recs = records(&sb);
    let r = result_of(&recs, "c1");
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["signal"], name);
    assert!(
        !recs.iter().any(|r| r.kind == "tool.started"),
        "the call never started"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !sb.ws().join("HOOK_SIDE_EFFECT").exists(),
        "the hook went on"
    );
    assert!(!sb.ws().join("CALL_RAN").exists(), "the call ran");
    server.assert_no_violations();
}

#[test]
fn a_signal_with_a_background_process_running_stops_and_records_it() {
    let runs: Vec<_> = SIGNALS
        .iter()
        .map(|&(sig, name, code)| {
            std::thread::spawn(move || with_a_background_process(sig, name, code))
        })
        .collect();
    for r in runs {
        r.join().expect("a signal case failed");
    }
}

fn with_a_background_process(sig: Signal, name: &str, code: i32) {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            (
                "bash",
                json!({"command": "sleep 2; touch BACKGROUND_SIDE_EFFECT", "background": true}),
            ),
            ("bash", json!({"command": "sleep 30"})),
        ])
        .with_ids(&["bg", "fg"]),
        MockReply::text("done"),
    ]);
    let child = spawn(sb.run_cmd(&server.base_url(), "background"));
    wait_until("the foreground call", || {
        log_has(&sb, "\"call_id\":\"fg\",\"name\":\"bash\",\"process\"")
    });
    send(&child, sig);
    let out = finish(child);
    assert_interrupted(&sb, &out, name, code);
    let recs = records(&sb);
    let started = recs
        .iter()
        .find(|r| r.kind == "process.started")
        .expect("the background process was recorded");
    let id = started.data["id"].clone();
    assert!(
        recs.iter()
            .any(|r| r.kind == "process.exited" && r.data["id"] == id),
        "its end is recorded"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!sb.ws().join("BACKGROUND_SIDE_EFFECT").exists());
}

#[test]
fn a_closed_stdout_or_stderr_never_stops_a_run() {
    for (json, both) in [(false, false), (false, true), (true, false)] {
        let sb = Sandbox::new();
        let server = MockServer::start(vec![
            MockReply::tool_call("bash", json!({"command": "seq 1 2000"})),
            MockReply::tool_call("bash", json!({"command": "echo second"})),
            MockReply::text("final answer"),
        ]);
        let mut run = sb.run_cmd(&server.base_url(), "talk a lot");
        if json {
            run.arg("--json");
        }
        // `tinyagent run … | head -1` (and `2>&1 | head -1`) through a shell.
        let mut args: Vec<String> = vec![format!("'{}'", run.get_program().to_string_lossy())];
        args.extend(run.get_args().map(|a| format!("'{}'", a.to_string_lossy())));
        let redirect = if both { "2>&1" } else { "2>/dev/null" };
        let script = format!(
            "{} {redirect} | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
            args.join(" ")
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(sb.dir.path())
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(code, "0", "json {json}, 2>&1 {both}: exit {code}");
        let recs = records(&sb);
        let last = recs.last().unwrap();
        assert_eq!(last.kind, "run.finished");
        assert_eq!(last.data["status"], "completed");
        assert_eq!(server.request_count(), 3);
    }
}

#[test]
fn resuming_a_run_stopped_by_a_limit_needs_a_raised_limit() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo one"})),
        MockReply::tool_call("bash", json!({"command": "echo two"})),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "limited");
    cmd.args(["--max-steps", "1"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let before = std::fs::read(sb.wal()).unwrap();
    let snapshot_before = std::fs::read(sb.path("run.wal.snapshot")).ok();
    // Without a raised limit: exit 3 at once, nothing appended, the flag named.
    for extra in [vec![], vec!["--max-steps", "1"], vec!["--message", "go on"]] {
        let mut resume = sb.resume_cmd();
        resume.args(&extra);
        let out = output(resume);
        assert_eq!(out.status.code(), Some(3), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--max-steps"), "{}", stderr(&out));
        assert_eq!(
            std::fs::read(sb.wal()).unwrap(),
            before,
            "{extra:?}: the log changed"
        );
        assert_eq!(
            std::fs::read(sb.path("run.wal.snapshot")).ok(),
            snapshot_before
        );
    }
    assert_eq!(server.request_count(), 1);
    // With one, it continues.
    let mut resume = sb.resume_cmd();
    resume.args(["--max-steps", "5"]);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&sb);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    assert_eq!(server.request_count(), 3);
}

#[test]
fn format_errors_resume_with_a_raised_limit_or_a_message() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::raw_tool_call("bash", "{"),
        MockReply::raw_tool_call("bash", "{"),
        MockReply::text("understood"),
        MockReply::raw_tool_call("bash", "{"),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "garbled");
    cmd.args(["--max-format-errors", "2"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let before = std::fs::read(sb.wal()).unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("--max-format-errors"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(sb.wal()).unwrap(), before);
    // A message resets the count of malformed calls in a row.
    let mut resume = sb.resume_cmd();
    resume.args(["--message", "please send valid JSON"]);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // And a raised limit lets the run go on past another one.
    let sb2 = Sandbox::new();
    let server2 = MockServer::start(vec![
        MockReply::raw_tool_call("bash", "{"),
        MockReply::raw_tool_call("bash", "{"),
        MockReply::text("done"),
    ]);
    let mut cmd = sb2.run_cmd(&server2.base_url(), "garbled");
    cmd.args(["--max-format-errors", "1"]);
    assert_eq!(output(cmd).status.code(), Some(3));
    let mut resume = sb2.resume_cmd();
    resume.args(["--max-format-errors", "5"]);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn refused_resume_flags_change_nothing_on_disk() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("first")]);
    let mut cmd = sb.run_cmd(&server.base_url(), "talk");
    cmd.env("TINYAGENT_CRASH_AFTER", "model.response:1");
    let _ = output(cmd);
    // A torn tail the resume would cut.
    let mut bytes = std::fs::read(sb.wal()).unwrap();
    bytes.extend_from_slice(b"{\"seq\":99,\"prev\"");
    std::fs::write(sb.wal(), &bytes).unwrap();
    for bad in [
        vec!["--max-cost", "NaN"],
        vec!["--max-format-errors", "0"],
        vec!["--provider", "nope"],
    ] {
        let mut resume = sb.resume_cmd();
        resume.args(&bad);
        let out = output(resume);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        assert_eq!(
            std::fs::read(sb.wal()).unwrap(),
            bytes,
            "{bad:?}: the log changed"
        );
    }
    // A config naming a hook that does not exist is refused before the cut.
    std::fs::write(
        sb.path("tinyagent.toml"),
        "[hooks]\npre_tool = \"/no/such/hook --x\"\n",
    )
    .unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("/no/such/hook"), "{}", stderr(&out));
    assert_eq!(std::fs::read(sb.wal()).unwrap(), bytes);
}

#[test]
fn a_hook_that_does_not_exist_is_refused_at_start() {
    for (key, cmd) in [
        ("pre_tool", "./hooks/typo.sh"),
        ("post_tool", "sh '/no/such/dir/check.sh'"),
        ("pre_tool", "no-such-program-anywhere"),
    ] {
        let sb = Sandbox::new();
        let server = MockServer::start(vec![]);
        let toml = format!("[hooks]\n{key} = {}\n", Value::String(cmd.into()));
        let out = output(sb.run_cmd_cfg(&server.base_url(), "hooked", &toml));
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("hooks.{key}")),
            "{}",
            stderr(&out)
        );
        assert!(!sb.wal().exists(), "{cmd}: a log was written");
        assert_eq!(server.request_count(), 0);
    }
}

#[test]
fn a_log_without_a_complete_first_record_is_refused_saying_how_to_start_over() {
    let sb = Sandbox::new();
    std::fs::write(
        sb.wal(),
        b"{\"seq\":1,\"prev\":\"00000000\",\"type\":\"run.sta",
    )
    .unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no complete run.started"), "{err}");
    assert!(err.contains("start over"), "{err}");
    // A fault on the very first record leaves no file behind, so the same
    // run can simply be started again.
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("hi"), MockReply::text("hi")]);
    let mut cmd = sb.run_cmd(&server.base_url(), "faulty");
    cmd.env("TINYAGENT_FAULTS", "sync:1:EIO");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!sb.wal().exists(), "the empty log was left behind");
    let out = output(sb.run_cmd(&server.base_url(), "faulty"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
