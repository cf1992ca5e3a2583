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
use crate::support::torture::driver::torture;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Mutating calls in the task.
const TURNS: usize = 8;
/// Kills before the run may finish.
const KILLS: u64 = 12;

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
    let toml = format!(
        "[mcp.servers.fs]\ncommand = \"node\"\nargs = [{}, {}]\nenv = {{ MCP_TEST_MARKER = {} }}\n",
        Value::String(script.display().to_string()),
        Value::String(ws.display().to_string()),
        Value::String(marker.clone()),
    );
    let base = server.base_url();
    let tally = torture(
        &sb,
        || sb.run_cmd_cfg(&base, "write the files", &toml),
        KILLS,
        &mut rng,
    );
    assert!(tally.kills >= KILLS, "{tally:?}");
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
