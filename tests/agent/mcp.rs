//! MCP tools end to end: the real binary against real third-party MCP
//! servers from npm (`@modelcontextprotocol/server-filesystem`,
//! `server-memory`, `server-everything`, installed by `.ci/run` under
//! `TINYAGENT_MCP_DIR`), scripted by the mock model server. Tools are
//! advertised as the servers list them, calls have their real effects, a
//! kill during a mutating call is interrupted and not re-run on resume, a
//! read-only one is re-run, a changed server is refused on resume, a server
//! that fails to start is refused with nothing written, a server killed in
//! the middle of a call gives an error result and is started again, and no
//! server process outlives the agent.

use crate::support::contract;
use crate::support::contract::Rec;
use crate::support::e2e::{self, Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{mcp_server, require};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INTERRUPTED: &str = "[interrupted: tool did not complete before the agent stopped; it may have partially run — verify state before retrying]";

/// The three servers' entry scripts, or a loud skip (a failure when
/// `TINYAGENT_REQUIRE` names `mcp`).
fn servers(test: &str) -> Option<[PathBuf; 3]> {
    let found = ["server-filesystem", "server-memory", "server-everything"]
        .map(mcp_server)
        .into_iter()
        .collect::<Result<Vec<_>, _>>();
    let found = require("mcp", test, found)?;
    Some([found[0].clone(), found[1].clone(), found[2].clone()])
}

fn toml_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A unique value put in each server's environment, to find its processes
/// in /proc.
fn marker(sb: &Sandbox) -> String {
    format!("tinyagent-mcp-test-{}", sb.dir.path().display())
}

/// `[mcp.servers.*]` for the filesystem server (on the workspace), the
/// memory server (its graph in the temp dir, started by a shell) and the
/// everything server.
fn servers_toml(sb: &Sandbox, s: &[PathBuf; 3]) -> String {
    let m = toml_str(&marker(sb));
    format!(
        "[mcp.servers.fs]\ncommand = \"node\"\nargs = [{}, {}]\nenv = {{ MCP_TEST_MARKER = {m} }}\n\
         [mcp.servers.mem]\ncommand = \"sh\"\nargs = [\"-c\", {}]\n\
         env = {{ MCP_TEST_MARKER = {m}, MEMORY_FILE_PATH = {} }}\n\
         [mcp.servers.every]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n\
         env = {{ MCP_TEST_MARKER = {m}, PLAIN_SETTING = \"from-config\" }}\n",
        toml_str(&s[0].display().to_string()),
        toml_str(&sb.ws().display().to_string()),
        // Through a shell that stays as the server's parent: the server
        // proper is a grandchild of the agent.
        toml_str(&format!("node '{}'; true", s[1].display())),
        toml_str(&sb.path("memory.jsonl").display().to_string()),
        toml_str(&s[2].display().to_string()),
    )
}

/// Pids of live processes whose environment holds `marker`.
fn marked_processes(marker: &str) -> Vec<u32> {
    let needle = format!("MCP_TEST_MARKER={marker}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits (up to 10 s) until no process holds `marker`; panics otherwise.
fn assert_no_server_left(marker: &str, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = marked_processes(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: MCP server processes still run: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn find<'a>(recs: &'a [Rec], kind: &str, call_id: &str) -> Vec<&'a Rec> {
    recs.iter()
        .filter(|r| r.kind == kind && r.data["call_id"] == call_id)
        .collect()
}

fn result<'a>(recs: &'a [Rec], call_id: &str) -> &'a Value {
    &find(recs, "tool.result", call_id)
        .last()
        .unwrap_or_else(|| panic!("no tool.result for {call_id}"))
        .data
}

fn run_ok(sb: &Sandbox, server: &MockServer, toml: &str) -> std::process::Output {
    let out = output(sb.run_cmd_cfg(&server.base_url(), "use the MCP tools", toml));
    assert_eq!(out.status.code(), Some(0), "run failed: {}", stderr(&out));
    out
}

/// The `[hooks]` of a post_tool hook that SIGKILLs the agent once: the
/// call has run, its result is not yet in the log.
fn kill_agent_hook(sb: &Sandbox) -> String {
    format!("[hooks]\npost_tool = {}\n", toml_str(&sb.kill_agent_hook()))
}

#[test]
fn tools_are_advertised_as_the_servers_list_them() {
    let Some(s) = servers("tools_are_advertised_as_the_servers_list_them") else {
        return;
    };
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("done")]);
    run_ok(&sb, &server, &servers_toml(&sb, &s));
    let req = &server.recorded()[0];
    let tools = req.body["tools"].as_array().expect("tools");
    let by_name = |n: &str| {
        tools
            .iter()
            .find(|t| t["function"]["name"] == n)
            .unwrap_or_else(|| panic!("{n} is not advertised"))
    };
    // The built-ins are still there, then the servers' tools, by name.
    by_name("bash");
    let write = &by_name("fs__write_file")["function"];
    assert!(
        write["description"]
            .as_str()
            .unwrap()
            .contains("overwrite an existing file"),
        "{write}"
    );
    let params = &write["parameters"];
    assert_eq!(params["type"], "object");
    assert_eq!(params["properties"]["path"]["type"], "string");
    assert_eq!(params["properties"]["content"]["type"], "string");
    let required: Vec<&str> = params["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        required.contains(&"path") && required.contains(&"content"),
        "{params}"
    );
    let create = &by_name("mem__create_entities")["function"]["parameters"];
    assert_eq!(
        create["properties"]["entities"]["type"], "array",
        "{create}"
    );
    for name in [
        "fs__read_text_file",
        "fs__list_directory",
        "mem__read_graph",
        "every__echo",
        "every__get-env",
    ] {
        by_name(name);
    }
    let count = |prefix: &str| {
        tools
            .iter()
            .filter(|t| t["function"]["name"].as_str().unwrap().starts_with(prefix))
            .count()
    };
    assert_eq!(count("fs__"), 14);
    assert_eq!(count("mem__"), 9);
    // run.started records each tool's effect, from its readOnlyHint.
    let recs = contract::read_checked(&sb.wal());
    let started = &recs[0].data;
    let effect = |n: &str| {
        started["mcp_tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .unwrap_or_else(|| panic!("{n} not recorded"))["effect"]
            .clone()
    };
    assert_eq!(effect("fs__write_file"), "mutating");
    assert_eq!(effect("fs__read_text_file"), "read-only");
    assert_eq!(effect("mem__create_entities"), "mutating");
    assert_eq!(effect("mem__read_graph"), "read-only");
    let listed: Vec<&Value> = started["tools"].as_array().unwrap().iter().collect();
    assert!(listed.contains(&&json!("fs__write_file")));
    assert_no_server_left(&marker(&sb), "after the run");

    // A read-only run offers the read-only MCP tools only.
    let sb2 = Sandbox::new();
    let server2 = MockServer::start(vec![MockReply::text("done")]);
    let mut cmd = sb2.run_cmd_cfg(&server2.base_url(), "look", &servers_toml(&sb2, &s));
    cmd.arg("--read-only");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let names: Vec<String> = server2.recorded()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains(&"fs__read_text_file".to_string()),
        "{names:?}"
    );
    assert!(!names.contains(&"fs__write_file".to_string()), "{names:?}");
    assert!(
        !names.contains(&"mem__create_entities".to_string()),
        "{names:?}"
    );
    assert_no_server_left(&marker(&sb2), "after the read-only run");
}

#[test]
fn calls_have_their_real_effects_through_the_hooks() {
    let Some(s) = servers("calls_have_their_real_effects_through_the_hooks") else {
        return;
    };
    let sb = Sandbox::new();
    let file = sb.ws().join("hello.txt");
    let missing = sb.ws().join("missing.txt");
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "fs__write_file",
            json!({"path": file.display().to_string(), "content": "written by MCP\n"}),
        )
        .with_ids(&["w1"]),
        MockReply::tool_call(
            "mem__create_entities",
            json!({"entities": [{"name": "tinyagent", "entityType": "program",
                                 "observations": ["keeps a write-ahead log"]}]}),
        )
        .with_ids(&["m1"]),
        // Two read-only calls of one response, and a server-side error.
        MockReply::tool_calls(vec![
            ("mem__read_graph", json!({})),
            (
                "fs__read_text_file",
                json!({"path": file.display().to_string()}),
            ),
            (
                "fs__read_text_file",
                json!({"path": missing.display().to_string()}),
            ),
        ])
        .with_ids(&["r1", "r2", "r3"]),
        MockReply::tool_call("every__get-env", json!({})).with_ids(&["e1"]),
        MockReply::text("done"),
    ]);
    let calls = sb.path("calls.log");
    let toml = format!(
        "{}[hooks]\npre_tool = {}\n",
        servers_toml(&sb, &s),
        toml_str(&format!(
            "cat >> '{}'; echo >> '{}'",
            calls.display(),
            calls.display()
        ))
    );
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), "use the MCP tools", &toml);
    // Keys in the agent's environment never reach a server.
    cmd.env("OPENAI_API_KEY", "sk-mcp-test-openai-secret")
        .env("SOME_VENDOR_API_KEY", "vendor-secret-value")
        .env("AWS_SECRET_ACCESS_KEY", "aws-secret-value");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "written by MCP\n",
        "the filesystem server wrote the file"
    );
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(result(&recs, "w1")["is_error"], false);
    assert!(
        result(&recs, "m1")["content"]
            .as_str()
            .unwrap()
            .contains("tinyagent")
    );
    let graph = result(&recs, "r1")["content"].as_str().unwrap();
    assert!(graph.contains("keeps a write-ahead log"), "{graph}");
    assert_eq!(result(&recs, "r1")["is_error"], false);
    assert_eq!(result(&recs, "r2")["content"], "written by MCP\n");
    assert_eq!(
        result(&recs, "r3")["is_error"],
        true,
        "a server error is an error result"
    );
    assert!(
        std::fs::read_to_string(sb.path("memory.jsonl"))
            .unwrap()
            .contains("keeps a write-ahead log"),
        "the memory server stored the entity"
    );
    // The results the model saw are the servers' answers.
    assert_eq!(server.sent_result("r2"), "written by MCP\n");
    let env = result(&recs, "e1")["content"].as_str().unwrap().to_string();
    assert!(
        env.contains("from-config"),
        "the config's env is passed: {env}"
    );
    for secret in [
        "sk-mcp-test-openai-secret",
        "vendor-secret-value",
        "aws-secret-value",
    ] {
        assert!(!env.contains(secret), "a key reached the server: {secret}");
    }
    for var in [
        "OPENAI_API_KEY",
        "SOME_VENDOR_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(!env.contains(var), "{var} reached the server");
    }
    // Every MCP call went through the pre hook.
    let hooked = std::fs::read_to_string(&calls).unwrap();
    for name in [
        "fs__write_file",
        "mem__create_entities",
        "mem__read_graph",
        "every__get-env",
    ] {
        assert!(hooked.contains(name), "{name} skipped the hook: {hooked}");
    }
    server.assert_no_violations();
    assert_no_server_left(&marker(&sb), "after the run");
}

#[test]
fn a_mutating_call_cut_by_a_kill_is_interrupted_and_not_run_again() {
    let Some(s) = servers("a_mutating_call_cut_by_a_kill_is_interrupted_and_not_run_again") else {
        return;
    };
    let sb = Sandbox::new();
    let file = sb.ws().join("once.txt");
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "fs__write_file",
            json!({"path": file.display().to_string(), "content": "once\n"}),
        )
        .with_ids(&["c1"]),
        MockReply::text("recovered"),
    ]);
    let toml = format!("{}{}", servers_toml(&sb, &s), kill_agent_hook(&sb));
    e2e::killed(sb.run_cmd_cfg(&server.base_url(), "write once", &toml));
    // The servers die with the agent.
    assert_no_server_left(&marker(&sb), "after the kill");
    let before = contract::read(&sb.wal());
    assert_eq!(find(&before, "tool.started", "c1").len(), 1);
    assert!(find(&before, "tool.result", "c1").is_empty());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "once\n");
    // Were the call run again, the file would come back.
    std::fs::remove_file(&file).unwrap();
    sb.resume_ok();
    assert!(!file.exists(), "the interrupted MCP call was run again");
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(find(&recs, "tool.started", "c1").len(), 1, "started twice");
    let r = result(&recs, "c1");
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["content"], INTERRUPTED);
    assert_eq!(server.sent_result("c1"), INTERRUPTED);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    server.assert_no_violations();
    assert_no_server_left(&marker(&sb), "after the resume");
}

#[test]
fn a_read_only_call_cut_by_a_kill_is_run_again_on_resume() {
    let Some(s) = servers("a_read_only_call_cut_by_a_kill_is_run_again_on_resume") else {
        return;
    };
    let sb = Sandbox::new();
    let file = sb.ws().join("notes.txt");
    std::fs::write(&file, "first\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "fs__read_text_file",
            json!({"path": file.display().to_string()}),
        )
        .with_ids(&["c1"]),
        MockReply::text("recovered"),
    ]);
    let toml = format!("{}{}", servers_toml(&sb, &s), kill_agent_hook(&sb));
    e2e::killed(sb.run_cmd_cfg(&server.base_url(), "read it", &toml));
    assert_no_server_left(&marker(&sb), "after the kill");
    // What the re-run reads is what the file holds at resume.
    std::fs::write(&file, "second\n").unwrap();
    sb.resume_ok();
    let recs = contract::read_checked(&sb.wal());
    let r = result(&recs, "c1");
    assert_eq!(r["rerun"], true, "{r}");
    assert_eq!(r["content"], "second\n");
    assert_eq!(server.sent_result("c1"), "second\n");
    server.assert_no_violations();
    assert_no_server_left(&marker(&sb), "after the resume");
}

#[test]
fn a_changed_server_is_refused_on_resume() {
    let Some(s) = servers("a_changed_server_is_refused_on_resume") else {
        return;
    };
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("done"), MockReply::text("again")]);
    run_ok(&sb, &server, &servers_toml(&sb, &s));
    let bytes = std::fs::read(sb.wal()).unwrap();
    let config = sb.path("tinyagent.toml");
    let original = std::fs::read_to_string(&config).unwrap();
    let resume = |expect: &[&str]| {
        let mut cmd = sb.resume_cmd();
        cmd.args(["--message", "go on"]);
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        for e in expect {
            assert!(err.contains(e), "{e} not named: {err}");
        }
        assert_eq!(std::fs::read(sb.wal()).unwrap(), bytes, "the log changed");
        assert_no_server_left(&marker(&sb), "after a refused resume");
    };
    // Another server under the same name: its tools are not the recorded ones.
    let fs_args = format!(
        "args = [{}, {}]",
        toml_str(&s[0].display().to_string()),
        toml_str(&sb.ws().display().to_string())
    );
    assert!(original.contains(&fs_args));
    let swapped = original.replacen(
        &fs_args,
        &format!(
            "args = [{}, \"stdio\"]",
            toml_str(&s[2].display().to_string())
        ),
        1,
    );
    std::fs::write(&config, &swapped).unwrap();
    resume(&["`fs__write_file` is gone", "`fs__echo` is new"]);
    // A server left out.
    let disabled = original.replacen(
        "[mcp.servers.mem]\n",
        "[mcp.servers.mem]\nenabled = false\n",
        1,
    );
    std::fs::write(&config, disabled).unwrap();
    resume(&["MCP server `mem`"]);
    // Back as it was: the run goes on.
    std::fs::write(&config, &original).unwrap();
    let mut cmd = sb.resume_cmd();
    cmd.args(["--message", "go on"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_no_server_left(&marker(&sb), "after the resume");
}

#[test]
fn a_server_that_fails_to_start_is_refused_and_nothing_is_written() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("never")]);
    for (toml, named) in [
        (
            "[mcp.servers.broken]\ncommand = \"sh\"\nargs = [\"-c\", \"echo boom >&2; exit 4\"]\n",
            "`broken`",
        ),
        (
            "[mcp.servers.absent]\ncommand = \"/nonexistent/mcp-server\"\n",
            "`absent`",
        ),
        (
            "[mcp.servers.silent]\ncommand = \"sleep\"\nargs = [\"30\"]\nstartup_timeout_ms = 300\n",
            "`silent`",
        ),
        ("[mcp.servers.bad__name]\ncommand = \"x\"\n", "bad__name"),
        ("[mcp.servers.x]\nargs = []\n", "command"),
    ] {
        let out = output(sb.run_cmd_cfg(&server.base_url(), "task", toml));
        assert_eq!(out.status.code(), Some(2), "{toml}: {}", stderr(&out));
        assert!(stderr(&out).contains(named), "{toml}: {}", stderr(&out));
        assert!(!sb.wal().exists(), "{toml}: a log was written");
    }
    assert!(
        stderr(&output(sb.run_cmd_cfg(
            &server.base_url(),
            "task",
            "[mcp.servers.broken]\ncommand = \"sh\"\nargs = [\"-c\", \"echo boom >&2; exit 4\"]\n"
        )))
        .contains("boom")
    );
    assert_eq!(server.request_count(), 0);
}

/// The pid of the live process holding `marker` whose command line has
/// `needle`.
fn server_pid(marker: &str, needle: &str) -> Option<u32> {
    marked_processes(marker).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
    })
}

/// Waits until the log holds the `tool.started` of `call_id`.
fn wait_started(sb: &Sandbox, call_id: &str) {
    let needle = format!("\"call_id\":\"{call_id}\"");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(sb.wal()).is_ok_and(|t| {
        t.lines()
            .any(|l| l.contains("\"tool.started\"") && l.contains(&needle))
    }) {
        assert!(Instant::now() < deadline, "{call_id} never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The request is on its way to the server by now.
    std::thread::sleep(Duration::from_millis(300));
}

fn kill_server(sb: &Sandbox, script: &std::path::Path) {
    let pid = server_pid(&marker(sb), &script.display().to_string()).expect("the server runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

#[test]
fn a_server_killed_during_a_call_gives_an_error_and_is_started_again_once() {
    let Some(s) = servers("a_server_killed_during_a_call_gives_an_error_and_is_started_again_once")
    else {
        return;
    };
    let sb = Sandbox::new();
    let long = || {
        MockReply::tool_call(
            "every__trigger-long-running-operation",
            json!({"duration": 30, "steps": 30}),
        )
    };
    let server = MockServer::start(vec![
        long().with_ids(&["c1"]),
        MockReply::tool_call("every__echo", json!({"message": "still here"})).with_ids(&["c2"]),
        long().with_ids(&["c3"]),
        MockReply::tool_call("every__echo", json!({"message": "gone?"})).with_ids(&["c4"]),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), "long", &servers_toml(&sb, &s));
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_started(&sb, "c1");
    kill_server(&sb, &s[2]);
    wait_started(&sb, "c3");
    kill_server(&sb, &s[2]);
    let status = wait(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
    let recs = contract::read_checked(&sb.wal());
    let r1 = result(&recs, "c1");
    assert_eq!(r1["is_error"], true);
    let text = r1["content"].as_str().unwrap();
    assert!(
        text.contains("MCP server `every` exited during the call"),
        "{text}"
    );
    assert!(text.contains("killed by SIGKILL"), "{text}");
    assert!(text.contains("started again"), "{text}");
    let r2 = result(&recs, "c2");
    assert_eq!(r2["is_error"], false, "{r2}");
    assert!(
        r2["content"].as_str().unwrap().contains("still here"),
        "{r2}"
    );
    // The second death is the last: the server is not started again.
    let r3 = result(&recs, "c3");
    assert_eq!(r3["is_error"], true);
    assert!(
        r3["content"]
            .as_str()
            .unwrap()
            .contains("not started again"),
        "{r3}"
    );
    let r4 = result(&recs, "c4");
    assert_eq!(r4["is_error"], true);
    assert!(
        r4["content"]
            .as_str()
            .unwrap()
            .contains("not started again"),
        "{r4}"
    );
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    assert_no_server_left(&marker(&sb), "after the run");
}

fn wait(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mcp_list_shows_servers_tools_and_effects() {
    let Some(s) = servers("mcp_list_shows_servers_tools_and_effects") else {
        return;
    };
    let sb = Sandbox::new();
    let config = sb.path("list.toml");
    std::fs::write(
        &config,
        format!(
            "{}[mcp.servers.off]\ncommand = \"/nonexistent\"\nenabled = false\n",
            servers_toml(&sb, &s)
        ),
    )
    .unwrap();
    let list = |json: bool| {
        let mut c = Command::new(bin());
        c.args(["mcp", "list", "--config"])
            .arg(&config)
            .arg("--cwd")
            .arg(sb.ws());
        if json {
            c.arg("--json");
        }
        output(c)
    };
    let out = list(false);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not listed: {text}"))
            .to_string()
    };
    assert!(line("fs__write_file").contains("mutating"));
    assert!(line("fs__read_text_file").contains("read-only"));
    assert!(line("mem__delete_entities").contains("mutating"));
    assert!(text.contains("off: disabled"), "{text}");
    let out = list(true);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let fs = v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "fs")
        .unwrap();
    assert_eq!(fs["tools"].as_array().unwrap().len(), 14);
    assert_no_server_left(&marker(&sb), "after mcp list");
}

#[test]
fn sigint_during_an_mcp_call_abandons_it_and_stops_the_servers() {
    let Some(s) = servers("sigint_during_an_mcp_call_abandons_it_and_stops_the_servers") else {
        return;
    };
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "every__trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
        )
        .with_ids(&["c1"]),
        MockReply::text("after the resume"),
    ]);
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), "long", &servers_toml(&sb, &s));
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read(sb.wal())
        .is_ok_and(|b| String::from_utf8_lossy(&b).contains("\"tool.started\""))
    {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let started = Instant::now();
    let status = wait(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the 60 s call was not abandoned"
    );
    let recs = contract::read_checked(&sb.wal());
    let r = result(&recs, "c1");
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["signal"], "SIGINT");
    assert!(
        r["content"]
            .as_str()
            .unwrap()
            .starts_with("[interrupted by SIGINT: the command was stopped after"),
        "{r}"
    );
    assert_eq!(recs.last().unwrap().data["status"], "interrupted");
    assert_no_server_left(&marker(&sb), "after the interrupted run");
    // Resume carries on without running the call again.
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(find(&recs, "tool.started", "c1").len(), 1);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    assert_no_server_left(&marker(&sb), "after the resume");
}

#[test]
fn sigint_while_the_servers_start_stops_with_nothing_written() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("never")]);
    let mut cmd = sb.run_cmd_cfg(
        &server.base_url(),
        "task",
        "[mcp.servers.slow]\ncommand = \"sleep\"\nargs = [\"30\"]\n",
    );
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // The server is up (a `sleep` child of the agent) before the signal.
    let deadline = Instant::now() + Duration::from_secs(20);
    let agent = child.id().to_string();
    while !std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path().join("stat"))
            .is_ok_and(|st| st.contains("(sleep)") && st.split_whitespace().nth(3) == Some(&agent))
    }) {
        assert!(Instant::now() < deadline, "the server never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = wait(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the start was not cut short"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("`slow`") && err.contains("SIGINT"), "{err}");
    assert!(!sb.wal().exists(), "a log was written");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn in_the_sandbox_the_servers_run_confined_like_every_command() {
    let test = "in_the_sandbox_the_servers_run_confined_like_every_command";
    let Some(s) = servers(test) else {
        return;
    };
    let sb = Sandbox::new();
    if require(
        "bwrap",
        test,
        crate::support::require::bwrap(&sb.ws(), false),
    )
    .is_none()
    {
        return;
    }
    let inside = sb.ws().join("inside.txt");
    // Outside the workspace and outside /tmp (the sandbox has a /tmp of
    // its own): where an escaping write would land.
    let host = crate::support::e2e::host_tempdir();
    let outside = host.path().join("memory.jsonl");
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "fs__write_file",
            json!({"path": inside.display().to_string(), "content": "from the sandbox\n"}),
        )
        .with_ids(&["w1"]),
        MockReply::tool_call(
            "mem__create_entities",
            json!({"entities": [{"name": "x", "entityType": "y", "observations": ["z"]}]}),
        )
        .with_ids(&["m1"]),
        MockReply::text("done"),
    ]);
    let toml = format!(
        "[env]\nkind = \"sandbox\"\n{}",
        servers_toml(&sb, &s).replace(
            &toml_str(&sb.path("memory.jsonl").display().to_string()),
            &toml_str(&outside.display().to_string())
        )
    );
    run_ok(&sb, &server, &toml);
    // The workspace is theirs to change...
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap(),
        "from the sandbox\n"
    );
    // ... the rest of the machine is not: the memory server's file lies
    // outside the workspace, so its write fails and nothing appears there.
    let recs = contract::read_checked(&sb.wal());
    let m1 = result(&recs, "m1");
    assert_eq!(m1["is_error"], true, "{m1}");
    assert!(
        !outside.exists(),
        "a confined server wrote outside the workspace"
    );
    assert_no_server_left(&marker(&sb), "after the sandboxed run");

    // The container environment refuses them, naming the servers.
    std::fs::remove_file(sb.wal()).unwrap();
    let out = output(sb.run_cmd_cfg(
        &server.base_url(),
        "task",
        &format!("[env]\nkind = \"container\"\n{}", servers_toml(&sb, &s)),
    ));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("env.kind = \"container\""),
        "{}",
        stderr(&out)
    );
    assert!(!sb.wal().exists());
}

/// A hostile MCP server: a python3 script that completes `initialize` and
/// `tools/list` (tools `answer` and `ping`) and answers `ping` with `pong`,
/// but answers `answer` according to `mode`: `silent` never answers it,
/// `huge` answers it, after a second, with one 40 MB line.
fn hostile_server(sb: &Sandbox) -> PathBuf {
    let script = sb.path("hostile_mcp.py");
    std::fs::write(
        &script,
        r#"import json, sys, time
mode = sys.argv[1]
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()
tool = lambda name: {"name": name, "description": name + " the hostile way",
                     "inputSchema": {"type": "object"}}
while True:
    line = sys.stdin.readline()
    if not line:
        break
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if mid is None:
        continue
    reply = lambda result: send({"jsonrpc": "2.0", "id": mid, "result": result})
    if method == "initialize":
        reply({"protocolVersion": msg["params"]["protocolVersion"],
               "capabilities": {"tools": {}},
               "serverInfo": {"name": "hostile", "version": "1"}})
    elif method == "tools/list":
        reply({"tools": [tool("answer"), tool("ping")]})
    elif method == "tools/call" and msg["params"]["name"] == "ping":
        reply({"content": [{"type": "text", "text": "pong"}]})
    elif method == "tools/call" and mode == "silent":
        pass
    elif method == "tools/call" and mode == "huge":
        time.sleep(1)
        reply({"content": [{"type": "text", "text": "x" * 40_000_000}]})
    else:
        reply({})
"#,
    )
    .unwrap();
    script
}

fn hostile_toml(sb: &Sandbox, mode: &str, extra: &str) -> String {
    format!(
        "[mcp.servers.bad]\ncommand = \"python3\"\nargs = [{}, \"{mode}\"]\n\
         env = {{ MCP_TEST_MARKER = {} }}\n{extra}",
        toml_str(&hostile_server(sb).display().to_string()),
        toml_str(&marker(sb)),
    )
}

fn content(recs: &[Rec], call_id: &str) -> String {
    let r = result(recs, call_id);
    r["content"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_call_the_server_never_answers_times_out_and_the_run_goes_on() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bad__answer", json!({})).with_ids(&["t1"]),
        MockReply::tool_call("bad__ping", json!({})).with_ids(&["t2"]),
        MockReply::tool_call("bad__answer", json!({})).with_ids(&["t3"]),
        MockReply::tool_call("bad__ping", json!({})).with_ids(&["t4"]),
        MockReply::text("done"),
    ]);
    let started = Instant::now();
    let mut cmd = sb.run_cmd_cfg(
        &server.base_url(),
        "ask the hostile server",
        &hostile_toml(&sb, "silent", "timeout_s = 2\n"),
    );
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let status = wait(&mut child, Duration::from_secs(90));
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "the run did not end well");
    // Two calls waited their 2 s each, and nothing waited much longer.
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    let recs = contract::read_checked(&sb.wal());

    // The first silence: an error result naming the timeout; the server
    // is stopped and started again for the next call, which it answers.
    assert_eq!(result(&recs, "t1")["is_error"], true);
    let t1 = content(&recs, "t1");
    assert!(t1.contains("timed out after 2 s"), "{t1}");
    assert!(t1.contains("mcp.servers.bad.timeout_s"), "{t1}");
    assert!(t1.contains("started again for the next call"), "{t1}");
    assert_eq!(server.sent_result("t1"), t1);
    assert_eq!(result(&recs, "t2")["is_error"], false);
    assert_eq!(content(&recs, "t2"), "pong");

    // The second: the server has had its one restart, so it is marked
    // failed and the next call is an error at once.
    assert_eq!(result(&recs, "t3")["is_error"], true);
    let t3 = content(&recs, "t3");
    assert!(t3.contains("timed out after 2 s"), "{t3}");
    assert!(t3.contains("not started again"), "{t3}");
    assert_eq!(result(&recs, "t4")["is_error"], true);
    let t4 = content(&recs, "t4");
    assert!(
        t4.contains("no answer within 2 s") && t4.contains("not started again in this run"),
        "{t4}"
    );

    assert_eq!(server.request_count(), 5);
    assert_eq!(recs.last().unwrap().kind, "run.finished");
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    assert_no_server_left(&marker(&sb), "after the run");
}

/// `VmHWM` (peak resident memory) of a live process, in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_reply_over_16_mib_is_refused_with_memory_bounded_and_the_run_goes_on() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bad__answer", json!({})).with_ids(&["h1"]),
        MockReply::tool_call("bad__ping", json!({})).with_ids(&["h2"]),
        MockReply::text("done"),
    ]);
    let started = Instant::now();
    let mut cmd = sb.run_cmd_cfg(
        &server.base_url(),
        "ask the hostile server",
        &hostile_toml(&sb, "huge", ""),
    );
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    // The server answers a second after the call reaches it: the peak
    // before that is the agent's own.
    wait_started(&sb, "h1");
    let before = peak_rss(pid).expect("the agent runs");
    let mut peak = before;
    let status = loop {
        if let Some(p) = peak_rss(pid) {
            peak = peak.max(p);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the agent did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0), "the run did not end well");
    // Long before the 120 s timeout: the refusal ended the call.
    assert!(started.elapsed() < Duration::from_secs(60));
    // At most one message's worth (16 MiB) and some slack was taken for
    // the 40 MB line; holding it whole would take 40 MB at least.
    let grew = peak.saturating_sub(before);
    assert!(
        grew < 28 * 1024 * 1024,
        "the agent's peak memory grew by {grew} bytes (from {before}) for a 40 MB reply"
    );

    let recs = contract::read_checked(&sb.wal());
    assert_eq!(result(&recs, "h1")["is_error"], true);
    let h1 = content(&recs, "h1");
    assert!(h1.contains("exceeded 16 MiB"), "{h1}");
    assert!(h1.contains("started again for the next call"), "{h1}");
    assert!(h1.len() < 2000, "{} bytes", h1.len());
    assert_eq!(server.sent_result("h1"), h1);
    assert_eq!(result(&recs, "h2")["is_error"], false);
    assert_eq!(content(&recs, "h2"), "pong");
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    assert_no_server_left(&marker(&sb), "after the run");
}

/// Found on a clone under /tmp: the sandbox's private /tmp hid the servers'
/// own files. Here the three packages are copied where `.ci/run` installs
/// them in such a clone (`/tmp/…/target/mcp/node_modules`), and each server
/// is started from the copy in the sandbox, directly or through `sh -c`:
/// every one runs and sees its files, read-only.
#[test]
fn in_the_sandbox_a_server_kept_under_tmp_sees_its_own_files_read_only() {
    let test = "in_the_sandbox_a_server_kept_under_tmp_sees_its_own_files_read_only";
    let Some(s) = servers(test) else {
        return;
    };
    let sb = Sandbox::new();
    if require(
        "bwrap",
        test,
        crate::support::require::bwrap(&sb.ws(), false),
    )
    .is_none()
    {
        return;
    }
    // <prefix>/node_modules/@modelcontextprotocol/<server>/dist/index.js
    let modules = s[0].ancestors().nth(4).unwrap();
    assert!(modules.ends_with("node_modules"), "{}", modules.display());
    let clone = tempfile::tempdir_in("/tmp").unwrap();
    let mcp = clone.path().join("target/mcp");
    std::fs::create_dir_all(&mcp).unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(modules)
        .arg(&mcp)
        .status()
        .unwrap();
    assert!(copied.success());
    let copy = |p: &PathBuf| {
        mcp.join("node_modules")
            .join(p.strip_prefix(modules).unwrap())
    };
    let (fs, mem, every) = (copy(&s[0]), copy(&s[1]), copy(&s[2]));
    assert!(fs.starts_with("/tmp") && fs.is_file());
    // The filesystem server's own package directory, which it is also
    // given as an allowed directory: shown to it, but not writable.
    let pkg = fs.parent().unwrap().parent().unwrap().to_path_buf();
    let planted = pkg.join("planted.txt");
    let inside = sb.ws().join("inside.txt");
    let memory = sb.ws().join("memory.jsonl");
    let m = toml_str(&marker(&sb));
    let toml = format!(
        "[env]\nkind = \"sandbox\"\n\
         [mcp.servers.fs]\ncommand = \"node\"\nargs = [{}, {}, {}]\nenv = {{ MCP_TEST_MARKER = {m} }}\n\
         [mcp.servers.mem]\ncommand = \"sh\"\nargs = [\"-c\", {}]\n\
         env = {{ MCP_TEST_MARKER = {m}, MEMORY_FILE_PATH = {} }}\n\
         [mcp.servers.every]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n\
         env = {{ MCP_TEST_MARKER = {m} }}\n",
        toml_str(&fs.display().to_string()),
        toml_str(&sb.ws().display().to_string()),
        toml_str(&pkg.display().to_string()),
        toml_str(&format!("node '{}'; true", mem.display())),
        toml_str(&memory.display().to_string()),
        toml_str(&every.display().to_string()),
    );
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "fs__write_file",
            json!({"path": inside.display().to_string(), "content": "from the sandbox\n"}),
        )
        .with_ids(&["w1"]),
        MockReply::tool_call(
            "fs__list_directory",
            json!({"path": pkg.display().to_string()}),
        )
        .with_ids(&["l1"]),
        MockReply::tool_call(
            "fs__write_file",
            json!({"path": planted.display().to_string(), "content": "planted\n"}),
        )
        .with_ids(&["w2"]),
        MockReply::tool_call(
            "mem__create_entities",
            json!({"entities": [{"name": "x", "entityType": "y", "observations": ["z"]}]}),
        )
        .with_ids(&["m1"]),
        MockReply::tool_call("every__echo", json!({"message": "from under /tmp"}))
            .with_ids(&["e1"]),
        MockReply::text("done"),
    ]);
    run_ok(&sb, &server, &toml);
    let recs = contract::read_checked(&sb.wal());
    for id in ["w1", "l1", "m1", "e1"] {
        assert_eq!(
            result(&recs, id)["is_error"],
            false,
            "{id}: {}",
            result(&recs, id)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap(),
        "from the sandbox\n"
    );
    // It sees its own package...
    let listing = content(&recs, "l1");
    assert!(listing.contains("package.json"), "{listing}");
    assert!(listing.contains("dist"), "{listing}");
    // ... read-only.
    let w2 = result(&recs, "w2");
    assert_eq!(w2["is_error"], true, "{w2}");
    assert!(
        content(&recs, "w2").contains("read-only file system"),
        "{w2}"
    );
    assert!(
        !planted.exists(),
        "a sandboxed server wrote into its package"
    );
    assert!(
        memory.is_file(),
        "the memory server did not write its graph"
    );
    assert!(content(&recs, "e1").contains("from under /tmp"));
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    assert_no_server_left(&marker(&sb), "after the sandboxed run");
}
