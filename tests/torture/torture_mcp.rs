//! Random SIGKILL torture of a run whose every step is a mutating MCP call
//! to the real filesystem server from npm (installed by `.ci/run`, see
//! tests/agent/mcp.rs): the agent is killed at seeded random moments (while
//! the server starts, during its handshake, during calls) and resumed until
//! the run completes. Then: every call started once at most and none was
//! sent twice (a completed write's file exists; an interrupted one was
//! never repeated), the log keeps the write order, and no server process
//! outlived any of the killed agents.

use crate::support::contract;
use crate::support::e2e::Sandbox;
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{mcp_server, require};
use crate::support::torture;
use crate::support::torture::driver::{
    Ending, Tally, attempt_stderr, clear_log, has_record, kill_at, to_files,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Mutating calls in the task.
const TURNS: usize = 40;
/// Kills before the run may finish.
const KILLS: u64 = 10;

/// Like the torture driver, with kills spread over the first 1.5 s of an
/// attempt: the servers' start takes a few hundred milliseconds, and the
/// kills are meant to land in calls too.
fn kill_and_resume(
    sb: &Sandbox,
    make_run: impl Fn() -> std::process::Command,
    rng: &mut fastrand::Rng,
) -> Tally {
    let mut t = Tally::default();
    let mut started = false;
    loop {
        t.attempts += 1;
        let mut cmd = if started {
            sb.resume_cmd()
        } else {
            clear_log(sb);
            make_run()
        };
        to_files(sb, &mut cmd, t.attempts);
        let mut child = cmd.spawn().expect("spawn tinyagent");
        let ending = if t.kills < KILLS {
            kill_at(&mut child, Duration::from_millis(rng.u64(100..1500)))
        } else {
            Ending::Exited(child.wait().expect("wait"))
        };
        let err = attempt_stderr(sb, t.attempts);
        assert!(
            !torture::panicked(&err),
            "attempt {} panicked:\n{err}",
            t.attempts
        );
        match ending {
            Ending::Killed => {
                t.kills += 1;
                started = started || has_record(sb);
            }
            Ending::Exited(status) => {
                assert_eq!(status.code(), Some(0), "attempt {}: {err}", t.attempts);
                return t;
            }
        }
    }
}

/// Pids of live processes whose environment holds `MCP_TEST_MARKER=<marker>`.
fn marked(marker: &str) -> Vec<u32> {
    let needle = format!("MCP_TEST_MARKER={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            env.split(|b| *b == 0)
                .any(|v| v == needle.as_bytes())
                .then_some(pid)
        })
        .collect()
}

#[test]
fn random_sigkill_during_mcp_calls_then_resume_until_done() {
    let test = "random_sigkill_during_mcp_calls_then_resume_until_done";
    let Some(script) = require("mcp", test, mcp_server("server-filesystem")) else {
        return;
    };
    let seed = torture::seed(test);
    let mut rng = fastrand::Rng::with_seed(seed);
    let sb = Sandbox::new();
    let ws = sb.ws();
    // The n-th request (counted by the tool results it carries) asks for
    // the n-th file; after TURNS files, the answer.
    let dir = ws.clone();
    let server = MockServer::start_with(vec![], move |req| {
        let done = req.tool_results().len();
        if done >= TURNS {
            return MockReply::text("all written");
        }
        let path = dir.join(format!("f{done}.txt"));
        MockReply::tool_call(
            "fs__write_file",
            json!({"path": path.display().to_string(), "content": format!("file {done}\n")}),
        )
        .with_ids(&[&format!("c{done}")])
    });
    let marker = format!("torture-mcp-{}", sb.dir.path().display());
    // The post hook widens the window between a call's effect and its
    // durable result, where a kill leaves the call interrupted.
    let toml = format!(
        "[hooks]\npost_tool = \"sleep 0.1\"\n\
         [mcp.servers.fs]\ncommand = \"node\"\nargs = [{}, {}]\nenv = {{ MCP_TEST_MARKER = {} }}\n",
        Value::String(script.display().to_string()),
        Value::String(ws.display().to_string()),
        Value::String(marker.clone()),
    );
    let base = server.base_url();
    let tally = kill_and_resume(
        &sb,
        || sb.run_cmd_cfg(&base, "write the files", &toml),
        &mut rng,
    );
    assert!(tally.kills >= 3, "{tally:?}");
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    let mut interrupted = 0;
    for n in 0..TURNS {
        let id = format!("c{n}");
        let of = |kind: &str| {
            recs.iter()
                .filter(|r| r.kind == kind && r.data["call_id"] == id.as_str())
                .collect::<Vec<_>>()
        };
        // Ids repeat only when a response was lost to a kill before its
        // calls started; a call that started has exactly one result.
        let started = of("tool.started");
        assert!(
            started.len() <= 1,
            "seed {seed}: {id} started {} times",
            started.len()
        );
        let results = of("tool.result");
        let file = ws.join(format!("f{n}.txt"));
        if let Some(r) = results.last() {
            if r.data["interrupted"] == true {
                interrupted += 1;
            } else {
                assert_eq!(r.data["is_error"], false, "seed {seed}: {id}: {}", r.data);
                assert_eq!(
                    std::fs::read_to_string(&file).unwrap(),
                    format!("file {n}\n"),
                    "seed {seed}: {id} completed without its effect"
                );
            }
        }
    }
    eprintln!(
        "torture_mcp: seed {seed}, {} attempts, {} kills, {interrupted} interrupted MCP calls",
        tally.attempts, tally.kills
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marked(&marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: MCP server processes outlived the agent: {:?}",
            marked(&marker)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server.assert_no_violations();
}
