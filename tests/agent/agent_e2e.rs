//! End-to-end runs of the real binary against a real OpenAI-compatible server
//! on loopback; every log is checked by the independent contract reader.

use crate::support::contract;
use crate::support::e2e::{Sandbox, all_files, events, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};

fn call(name: &str, args: serde_json::Value, i: u64) -> MockReply {
    MockReply::tool_call(name, args).with_usage(100 + i, 10 + i)
}

#[test]
fn twenty_steps_of_every_tool_keep_the_write_order_and_totals() {
    let sb = Sandbox::new();
    let mut replies = vec![
        call(
            "write",
            json!({"path": "a.txt", "content": "hello world\n"}),
            1,
        ),
        call("read", json!({"path": "a.txt"}), 2),
        call(
            "edit",
            json!({"path": "a.txt", "old_string": "hello", "new_string": "goodbye"}),
            3,
        ),
        call("bash", json!({"command": "cat a.txt"}), 4),
        call("grep", json!({"pattern": "goodbye"}), 5),
        call("glob", json!({"pattern": "*.txt"}), 6),
    ];
    for i in 7..=20 {
        let r = match i % 6 {
            0 => call(
                "bash",
                json!({"command": format!("echo line{i} >> log.txt")}),
                i,
            ),
            1 => call(
                "write",
                json!({"path": format!("f{i}.txt"), "content": format!("file {i}\n")}),
                i,
            ),
            2 => call("read", json!({"path": "a.txt", "offset": 1, "limit": 1}), i),
            3 => call("grep", json!({"pattern": "file", "glob": "*.txt"}), i),
            4 => call("glob", json!({"pattern": "f*.txt"}), i),
            _ => call(
                "edit",
                json!({"path": format!("f{}.txt", i - 4), "old_string": "file", "new_string": "File"}),
                i,
            ),
        };
        replies.push(r);
    }
    replies.push(MockReply::text("all done").with_usage(500, 50));
    let server = MockServer::start(replies);
    let out = output(sb.run_cmd(&server.base_url(), "exercise every tool"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    assert_eq!(server.request_count(), 21);

    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let responses: Vec<_> = recs.iter().filter(|r| r.kind == "model.response").collect();
    assert_eq!(responses.len(), 21);
    let results = recs.iter().filter(|r| r.kind == "tool.result").count();
    let started = recs.iter().filter(|r| r.kind == "tool.started").count();
    assert_eq!((results, started), (20, 20));
    let last_saved = recs.iter().rev().find(|r| r.kind == "step.saved").unwrap();
    let want_in: u64 = (1..=20).map(|i| 100 + i).sum::<u64>() + 500;
    let want_out: u64 = (1..=20).map(|i| 10 + i).sum::<u64>() + 50;
    assert_eq!(
        last_saved.data["usage_total"],
        json!({"input_tokens": want_in, "output_tokens": want_out})
    );
    assert_eq!(recs.last().unwrap().kind, "run.finished");
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    // The tools really acted.
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("a.txt")).unwrap(),
        "goodbye world\n"
    );
    assert!(
        std::fs::read_to_string(sb.ws().join("log.txt"))
            .unwrap()
            .contains("line12")
    );
    // No tool result was an error.
    for r in recs.iter().filter(|r| r.kind == "tool.result") {
        assert_eq!(r.data["is_error"], false, "{}", r.data);
    }
    // Each request answers every earlier call: the server checked the ids;
    // here the last request carries all 20 results.
    let last = &server.recorded()[20];
    assert_eq!(last.tool_results().len(), 20);
}

#[test]
fn streaming_run_assembles_calls_and_text() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "s.txt", "content": "streamed\n"}))
            .with_content("writing"),
        MockReply::text("finished streaming"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "stream please");
    cmd.arg("--stream");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(server.recorded().iter().all(|r| r.is_stream()));
    server.assert_no_violations();
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("s.txt")).unwrap(),
        "streamed\n"
    );
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let first = recs.iter().find(|r| r.kind == "model.response").unwrap();
    assert_eq!(first.data["message"]["content"], "writing");
}

#[test]
fn json_events_follow_the_records_in_order() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("bash", json!({"command": "echo one"})),
            ("bash", json!({"command": "echo two"})),
        ]),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "events");
    cmd.arg("--json");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Workspace checkpoints (section 10): the starting state's, then one
    // right after each bash call's result; the rest is checked without them.
    let all = events(&out);
    let names: Vec<&str> = all.iter().map(|e| e["event"].as_str().unwrap()).collect();
    let at: Vec<usize> = (0..names.len())
        .filter(|&i| names[i] == "workspace.checkpoint")
        .collect();
    let expected = crate::support::require::checkpoints_expected();
    assert_eq!(at.len(), if expected { 3 } else { 0 }, "{names:?}");
    assert!(!expected || all[at[0]]["step"] == 0);
    assert!(
        at[1..].iter().all(|&i| names[i - 1] == "tool.finished"),
        "{names:?}"
    );
    let evs: Vec<Value> = all
        .into_iter()
        .filter(|e| e["event"] != "workspace.checkpoint")
        .collect();
    let names: Vec<&str> = evs.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec![
            "run.started",
            "model.response",
            "tool.started",
            "tool.finished",
            "checkpoint.saved",
            "tool.started",
            "tool.finished",
            "checkpoint.saved",
            "step.saved",
            "model.response",
            "step.saved",
            "run.stats",
            "run.finished",
            // The final snapshot, written when the log is closed.
            "snapshot.saved",
        ]
    );
    assert!(evs[1].get("tool_calls").is_none(), "said once, in message");
    let ids: Vec<String> = evs[1]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(evs[2]["call_id"], ids[0].as_str());
    assert_eq!(evs[4]["pending"], json!([ids[1]]));
    assert_eq!(evs[7]["pending"], json!([]));
    assert!(evs[3]["content"].as_str().unwrap().contains("one"));
    assert_eq!(evs[12]["status"], "completed");
    // The run's own overhead report: steps, and time split model/tools/rest.
    assert_eq!(evs[11]["steps"], 2);
    let wall = evs[11]["wall_ms"].as_f64().unwrap();
    let parts = evs[11]["model_ms"].as_f64().unwrap()
        + evs[11]["tools_ms"].as_f64().unwrap()
        + evs[11]["overhead_ms"].as_f64().unwrap();
    assert!((wall - parts).abs() < 1e-6 * wall.max(1.0), "{}", evs[11]);
    // run.started and the starting checkpoint are written before the loop;
    // the loop wrote the rest (eight, and the two bash calls' checkpoints).
    assert_eq!(evs[11]["records"], if expected { 8 + 2 } else { 8 });
}

#[test]
fn read_only_offers_no_changing_tools_and_refuses_them() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "x.txt", "content": "no"})),
        MockReply::text("ok"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "look only");
    cmd.arg("--read-only");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let req = &server.requests()[0];
    let mut names: Vec<&str> = req["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["glob", "grep", "read"]);
    assert!(!sb.ws().join("x.txt").exists());
    let recs = contract::read(&sb.wal());
    let res = recs.iter().find(|r| r.kind == "tool.result").unwrap();
    assert_eq!(res.data["is_error"], true);
    assert!(res.data["content"].as_str().unwrap().contains("write"));
    let started = &recs[0].data;
    assert_eq!(started["read_only"], true);
    assert_eq!(started["tools"], json!(["read", "grep", "glob"]));
}

#[test]
fn malformed_calls_stop_the_run_after_the_limit() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::raw_tool_call("bash", "{\"command\": \"ls\""),
        MockReply::tool_call("no_such_tool", json!({})),
        MockReply::tool_call("bash", json!({"cmd": "ls"})),
        MockReply::text("never reached"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "be sloppy"));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("format"), "{}", stderr(&out));
    assert_eq!(server.request_count(), 3);
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let results: Vec<_> = recs.iter().filter(|r| r.kind == "tool.result").collect();
    assert_eq!(results.len(), 3);
    assert!(
        results[0].data["content"]
            .as_str()
            .unwrap()
            .contains("JSON"),
        "{}",
        results[0].data
    );
    assert!(
        results[1].data["content"]
            .as_str()
            .unwrap()
            .contains("no_such_tool")
    );
    assert!(results[2].data["content"].as_str().unwrap().contains("cmd"));
    assert_eq!(recs.last().unwrap().data["status"], "format_errors");
}

#[test]
fn a_good_call_resets_the_format_error_count() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::raw_tool_call("bash", "nope"),
        MockReply::raw_tool_call("bash", "nope"),
        MockReply::tool_call("bash", json!({"command": "true"})),
        MockReply::raw_tool_call("bash", "nope"),
        MockReply::raw_tool_call("bash", "nope"),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "recover"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn max_steps_and_max_cost_stop_with_exit_3() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |_| {
        MockReply::tool_call("bash", json!({"command": "true"})).with_usage(1000, 100)
    });
    let mut cmd = sb.run_cmd(&server.base_url(), "loop forever");
    cmd.args(["--max-steps", "2"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let recs = contract::read(&sb.wal());
    assert_eq!(
        recs.iter().filter(|r| r.kind == "model.response").count(),
        2
    );
    assert_eq!(recs.last().unwrap().data["status"], "max_steps");

    let sb = Sandbox::new();
    let mut cmd = sb.run_cmd(&server.base_url(), "spend");
    cmd.args(["--max-cost", "0.01", "--price-in", "5", "--price-out", "10"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let recs = contract::read(&sb.wal());
    // 1000 in * $5/M + 100 out * $10/M = $0.006 per step: stops after step 2.
    assert_eq!(
        recs.iter().filter(|r| r.kind == "model.response").count(),
        2
    );
    assert_eq!(recs.last().unwrap().data["status"], "max_cost");
    let saved = recs.iter().rev().find(|r| r.kind == "step.saved").unwrap();
    assert!((saved.data["cost_usd_total"].as_f64().unwrap() - 0.012).abs() < 1e-12);
}

#[test]
fn api_key_reaches_the_server_and_no_file() {
    let sb = Sandbox::new();
    let secret = "sk-test-DO-NOT-LEAK-4242";
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "env; echo key=$OPENAI_API_KEY"})),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "leak it");
    cmd.env("OPENAI_API_KEY", secret).arg("--json");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        server.recorded()[0].header("authorization"),
        Some(format!("Bearer {secret}").as_str())
    );
    for f in all_files(sb.dir.path()) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "key found in {}",
            f.display()
        );
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    assert!(!stderr(&out).contains(secret));
}

#[test]
fn model_failure_after_retries_exits_1_with_one_clear_line() {
    let sb = Sandbox::new();
    let server = MockServer::start_with(vec![], |_| MockReply::status(500));
    let out = output(sb.run_cmd(&server.base_url(), "doomed"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("tinyagent: ") && last.contains("attempts"),
        "{err}"
    );
    assert_eq!(server.request_count(), 3);
    let recs = contract::read(&sb.wal());
    assert_eq!(recs.last().unwrap().data["status"], "error");
}

#[test]
fn refused_input_exits_2_with_a_reason() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![]);
    // --plan-file without --plan
    let mut cmd = sb.run_cmd(&server.base_url(), "t");
    cmd.args(["--plan-file", "plan.md"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--plan-file requires --plan"));
    // a config with an unknown key
    let out = output(sb.run_cmd_cfg(&server.base_url(), "t", "[limits]\nmax_stepz = 3\n"));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("max_stepz"), "{}", stderr(&out));
    // an existing log is refused and untouched
    std::fs::write(sb.wal(), b"keep me").unwrap();
    let out = output(sb.run_cmd(&server.base_url(), "t"));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(sb.wal()).unwrap(), b"keep me");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_path_escaping_the_workspace_is_refused() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "../outside.txt", "content": "x"})),
        MockReply::text("ok"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "escape"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!sb.dir.path().join("outside.txt").exists());
    let recs = contract::read(&sb.wal());
    let res = recs.iter().find(|r| r.kind == "tool.result").unwrap();
    assert!(
        res.data["content"]
            .as_str()
            .unwrap()
            .contains("escapes the workspace")
    );
}

/// The read-only calls of one response run at once (contract section 9):
/// their `tool.started` records come together, then their results in call
/// order; a call between them that changes things splits the batch, and a
/// pre hook that blocks one of them leaves the others running.
#[test]
fn read_only_calls_of_one_response_run_at_once_and_answer_in_order() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(sb.ws().join("b.txt"), "beta\n").unwrap();
    let hook = sb.path("pre.sh");
    std::fs::write(
        &hook,
        "input=$(cat)\ncase \"$input\" in *secret*) echo 'no secrets' >&2; exit 2;; esac\nexit 0\n",
    )
    .unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("read", json!({"path": "a.txt"})),
            ("grep", json!({"pattern": "beta"})),
            ("read", json!({"path": "secret.txt"})),
            ("glob", json!({"pattern": "*.txt"})),
            ("bash", json!({"command": "echo changed > c.txt"})),
            ("read", json!({"path": "c.txt"})),
        ])
        .with_ids(&["r1", "g1", "r2", "l1", "b1", "r3"]),
        MockReply::text("done"),
    ]);
    let toml = format!("[hooks]\npre_tool = \"sh '{}'\"\n", hook.display());
    let out = output(sb.run_cmd_cfg(&server.base_url(), "read at once", &toml));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let order: Vec<String> = recs
        .iter()
        .filter(|r| {
            matches!(
                r.kind.as_str(),
                "tool.started" | "tool.result" | "hook.blocked"
            )
        })
        .map(|r| format!("{} {}", r.kind, r.data["call_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        order,
        [
            "tool.started r1",
            "tool.started g1",
            "tool.started l1",
            "tool.result r1",
            "tool.result g1",
            "hook.blocked r2",
            "tool.result r2",
            "tool.result l1",
            "tool.started b1",
            "tool.result b1",
            "tool.started r3",
            "tool.result r3",
        ],
        "{order:#?}"
    );
    let sent = server.recorded();
    let last = sent.last().unwrap().tool_results();
    let content = |id: &str| last.iter().find(|(i, _)| i == id).unwrap().1.clone();
    assert!(content("r1").contains("alpha"));
    assert!(content("g1").contains("b.txt"));
    assert!(content("r2").contains("no secrets"));
    assert!(content("l1").contains("a.txt"));
    assert!(
        content("r3").contains("changed"),
        "the read after bash sees its change"
    );
    server.assert_no_violations();
}
