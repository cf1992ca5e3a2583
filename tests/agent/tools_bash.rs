//! bash in the foreground and the background, with real processes: exit codes,
//! merged output, capping, timeouts that kill the whole group, and the
//! process table's start/list/output/kill/poll_exited.

use crate::support::tools::*;
use serde_json::json;
use tinyagent::event::Event;
use tinyagent::exec::LocalEnv;
use tinyagent::tools::ProcessStatus;
use tinyagent::tools::process::proc_start_time;

#[test]
fn runs_in_the_workspace_with_merged_output_and_exit_code() {
    let fx = Fixture::new();
    fx.write("here.txt", "");
    let out = fx.call(
        "bash",
        r#"{"command":"ls; echo out; echo err >&2; echo out2"}"#,
    );
    assert_ok(&out);
    assert_eq!(out.content, "here.txt\nout\nerr\nout2\n[exit code: 0]");
    let out = fx.call("bash", r#"{"command":"echo failing; exit 4"}"#);
    assert_tool_error(&out, "failing\n[exit code: 4]");
    let out = fx.call("bash", r#"{"command":"true"}"#);
    assert_eq!(out.content, "(no output)\n[exit code: 0]");
    assert_tool_error(&fx.call("bash", r#"{"command":"  "}"#), "command is empty");
}

#[test]
fn stdin_is_closed() {
    let fx = Fixture::new();
    // With an open stdin, `cat` would wait for ever; with /dev/null it ends at once.
    let out = fx.call("bash", r#"{"command":"cat; echo done"}"#);
    assert_eq!(out.content, "done\n[exit code: 0]");
}

#[test]
fn killed_by_a_signal_is_reported() {
    let fx = Fixture::new();
    let out = fx.call("bash", r#"{"command":"kill -TERM $$"}"#);
    assert_tool_error(&out, "[killed by signal 15]");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let fx = Fixture::new();
    // The child sleep would outlive the shell if only the shell were killed.
    let out = fx.call_json(
        "bash",
        json!({"command": "sleep 60 & echo $! > child.pid; echo started; wait", "timeout_ms": 300}),
    );
    assert_tool_error(
        &out,
        "[timed out after 300 ms: the command and its whole process group were killed]",
    );
    assert!(out.content.starts_with("started\n"), "{}", out.content);
    let pid: u32 = fx.read("child.pid").trim().parse().unwrap();
    assert!(wait_dead(pid), "the child sleep {pid} survived the timeout");
}

#[test]
fn leftovers_of_a_finished_command_are_killed_and_do_not_hold_the_call() {
    let fx = Fixture::new();
    // `sleep` keeps the output pipe open; the call must still return.
    let out = fx.call(
        "bash",
        r#"{"command":"sleep 60 & echo $! > child.pid; echo bye"}"#,
    );
    assert_eq!(out.content, "bye\n[exit code: 0]");
    let pid: u32 = fx.read("child.pid").trim().parse().unwrap();
    assert!(wait_dead(pid), "the leftover sleep {pid} is still running");
}

#[test]
fn output_is_capped_keeping_head_and_tail() {
    let fx = Fixture::new();
    let out = fx.call(
        "bash",
        r#"{"command":"echo FIRST; head -c 200000 /dev/zero | tr '\\0' a; echo; echo LAST"}"#,
    );
    assert_ok(&out);
    assert!(out.content.starts_with("FIRST\naaaa"));
    assert!(out.content.ends_with("aaaa\nLAST\n[exit code: 0]"));
    // 6 + 200000 + 1 + 5 bytes printed, 30000 kept.
    assert!(
        out.content
            .contains("[... 170012 bytes of output cut; 200012 bytes in total ...]"),
        "{}",
        &out.content[14_990..15_100]
    );
    assert!(out.content.len() < 30_200);
}

#[test]
fn background_start_list_output_kill_and_exit_records() {
    let fx = Fixture::new();
    let out = fx.call_json(
        "bash",
        json!({"command": "echo ready; echo oops >&2; exec sleep 60", "background": true}),
    );
    assert_ok(&out);
    assert!(
        out.content
            .starts_with("Started background process p1 (pid "),
        "{}",
        out.content
    );
    let [Event::ProcessStarted(rec)] = out.records.as_slice() else {
        panic!("expected one process.started record: {:?}", out.records)
    };
    assert_eq!(rec.id, "p1");
    assert_eq!(rec.command, "echo ready; echo oops >&2; exec sleep 60");
    assert_eq!(rec.env, "local");
    assert_eq!(rec.step, 7);
    assert!(rec.start_time.is_some());
    assert_eq!(rec.start_time, proc_start_time(rec.pid));
    let output_path = rec.output.clone().unwrap();
    assert!(output_path.ends_with("procs/p1.log"), "{output_path}");
    assert!(alive(rec.pid));

    // Wait (bounded) for the output to appear.
    for _ in 0..500 {
        if std::fs::read_to_string(&output_path)
            .unwrap()
            .contains("oops")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = fx.call("process", r#"{"action":"output","id":"p1"}"#);
    assert_eq!(out.content, "ready\noops\n[p1: running]");
    let out = fx.call("process", r#"{"action":"output","id":"p1","tail_bytes":5}"#);
    assert_eq!(
        out.content,
        "[... 6 earlier bytes not shown ...]\noops\n[p1: running]"
    );
    let out = fx.call("process", r#"{"action":"list"}"#);
    assert!(out.content.starts_with(&format!(
        "p1  pid {}  running  [local]  echo ready",
        rec.pid
    )));
    assert!(fx.table.poll_exited().is_empty(), "still running");

    let out = fx.call("process", r#"{"action":"kill","id":"p1"}"#);
    assert_eq!(
        out.content,
        "Killed p1 and its process group (killed by signal 9)."
    );
    assert!(wait_dead(rec.pid));
    let exited = fx.table.poll_exited();
    assert_eq!(exited.len(), 1);
    assert_eq!(
        (exited[0].id.as_str(), exited[0].exit_code, exited[0].signal),
        ("p1", None, Some(9))
    );
    assert!(fx.table.poll_exited().is_empty(), "reported once");
    let out = fx.call("process", r#"{"action":"kill","id":"p1"}"#);
    assert_eq!(
        out.content,
        "p1 was not running any more (killed by signal 9)."
    );
}

#[test]
fn poll_exited_reports_natural_exits_with_their_code() {
    let fx = Fixture::new();
    let rec = fx
        .table
        .start(&LocalEnv, &fx.ws, "echo done > marker; exit 3", 2)
        .unwrap();
    assert_eq!(rec.id, "p1");
    let mut exited = Vec::new();
    for _ in 0..1000 {
        exited = fx.table.poll_exited();
        if !exited.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(exited.len(), 1);
    assert_eq!((exited[0].exit_code, exited[0].signal), (Some(3), None));
    assert_eq!(fx.read("marker"), "done\n");
    let list = fx.table.list();
    assert_eq!(
        list[0].status,
        ProcessStatus::Exited {
            code: Some(3),
            signal: None
        }
    );
    let out = fx.call("process", r#"{"action":"list"}"#);
    assert!(
        out.content.contains("exited with code 3"),
        "{}",
        out.content
    );
}

#[test]
fn kill_takes_the_whole_group_and_kill_all_stops_everything() {
    let fx = Fixture::new();
    let a = fx
        .table
        .start(&LocalEnv, &fx.ws, "sleep 60 & echo $! > a.pid; wait", 1)
        .unwrap();
    let b = fx.table.start(&LocalEnv, &fx.ws, "sleep 61", 1).unwrap();
    assert_eq!((a.id.as_str(), b.id.as_str()), ("p1", "p2"));
    let mut child = None;
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(fx.ws.join("a.pid"))
            && let Ok(pid) = s.trim().parse::<u32>()
        {
            child = Some(pid);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let child = child.expect("a.pid written");
    assert!(alive(child));
    fx.table.kill(&a.id).unwrap();
    assert!(wait_dead(child), "the grandchild survived kill");
    assert!(alive(b.pid));
    fx.table.kill_all();
    assert!(wait_dead(b.pid));
    let ids: Vec<String> = fx.table.poll_exited().into_iter().map(|e| e.id).collect();
    assert_eq!(ids, ["p1", "p2"]);
}

#[test]
fn process_tool_errors() {
    let fx = Fixture::new();
    assert_eq!(
        fx.call("process", r#"{"action":"list"}"#).content,
        "No background processes."
    );
    assert_tool_error(
        &fx.call("process", r#"{"action":"output","id":"p9"}"#),
        "no background process `p9`",
    );
    assert_tool_error(
        &fx.call("process", r#"{"action":"kill","id":"p9"}"#),
        "no background process `p9`",
    );
    assert_tool_error(&fx.call("process", r#"{"action":"output"}"#), "needs an id");
}

#[test]
fn ids_continue_after_earlier_ones_and_never_reuse_an_output_file() {
    let fx = Fixture::new();
    fx.table.continue_after(["p1", "p4", "x9", "p2"]);
    let rec = fx.table.start(&LocalEnv, &fx.ws, "true", 1).unwrap();
    assert_eq!(rec.id, "p5");
    std::fs::write(fx.outside().join("procs/p6.log"), "old output").unwrap();
    let rec = fx.table.start(&LocalEnv, &fx.ws, "true", 1).unwrap();
    assert_eq!(rec.id, "p7");
    assert_eq!(
        std::fs::read_to_string(fx.outside().join("procs/p6.log")).unwrap(),
        "old output"
    );
}

#[test]
fn hidden_variables_do_not_reach_commands() {
    let fx = Fixture::new();
    assert!(
        std::env::var_os("HOME").is_some(),
        "the test needs HOME set"
    );
    let env = tinyagent::exec::HideVars {
        inner: LocalEnv,
        vars: vec!["HOME".to_string()],
    };
    let out = fx.call_in(&env, "bash", r#"{"command":"echo ${HOME-unset}"}"#);
    assert_eq!(out.content, "unset\n[exit code: 0]");
    let out = fx.call("bash", r#"{"command":"echo ${HOME-unset}"}"#);
    assert_ne!(out.content, "unset\n[exit code: 0]");
    assert!(tinyagent::exec::env::is_key_var("OPENAI_API_KEY"));
    assert!(tinyagent::exec::env::is_key_var("ANTHROPIC_API_KEY"));
    assert!(!tinyagent::exec::env::is_key_var("PATH"));
}

#[test]
fn key_variables_of_the_agent_are_scrubbed() {
    // Re-run this test binary with a key in its environment; the probe below
    // checks that a bash command cannot see it.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tools_bash::key_scrub_probe", "--nocapture"])
        .env("TINYAGENT_KEY_PROBE", "1")
        .env("FAKE_API_KEY", "sekrit-value")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("probe-checked") && text.contains("1 passed"),
        "{text}"
    );
}

#[test]
fn key_scrub_probe() {
    if std::env::var_os("TINYAGENT_KEY_PROBE").is_none() {
        return;
    }
    assert_eq!(std::env::var("FAKE_API_KEY").unwrap(), "sekrit-value");
    let fx = Fixture::new();
    let out = fx.call(
        "bash",
        r#"{"command":"echo ${FAKE_API_KEY-unset}; env | grep -c sekrit"}"#,
    );
    assert_eq!(out.content, "unset\n0\n[exit code: 1]");
    println!("probe-checked");
}
