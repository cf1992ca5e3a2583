//! `--reasoning-effort` for Anthropic (contract section 15: "sent in each
//! provider's documented form"): the Messages API takes it as
//! `output_config: {"effort": "low" | "medium" | "high"}`, on every request
//! of the run and after a resume; `none` and `minimal`, OpenAI's words
//! only, are refused before the log is made.

use crate::support::contract;
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;

fn message(content: serde_json::Value, stop: &str) -> MockReply {
    MockReply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": 12, "output_tokens": 4}
    }))
}

#[test]
fn anthropic_effort_is_sent_as_output_config_effort_live_and_after_resume() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        message(
            json!([{"type": "tool_use", "id": "toolu_1", "name": "bash",
                "input": {"command": "true"}}]),
            "tool_use",
        ),
        message(json!([{"type": "text", "text": "Done."}]), "end_turn"),
    ]);
    let mut c = sb.run_cmd(&server.root_url(), "run true");
    c.args([
        "--provider",
        "anthropic",
        "--reasoning-effort",
        "medium",
        "--max-steps",
        "1",
    ])
    .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let mut c = sb.resume_cmd();
    c.args(["--max-steps", "3"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let requests = server.recorded();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(
            r.body["output_config"],
            json!({"effort": "medium"}),
            "{}",
            r.body
        );
        // Effort is not thinking: none was asked for.
        assert!(r.body.get("thinking").is_none(), "{}", r.body);
        assert!(r.body.get("reasoning_effort").is_none(), "{}", r.body);
    }
    let recs = contract::read(&sb.wal());
    assert_eq!(recs[0].data["settings"]["reasoning_effort"], "medium");
}

#[test]
fn anthropic_refuses_the_openai_only_efforts_before_the_log_is_made() {
    for effort in ["none", "minimal"] {
        let sb = Sandbox::new();
        let server = MockServer::start(Vec::new());
        let mut c = sb.run_cmd(&server.root_url(), "run true");
        c.args(["--provider", "anthropic", "--reasoning-effort", effort])
            .env("ANTHROPIC_API_KEY", "sk-ant-test");
        let out = output(c);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{effort} is not an Anthropic effort: its Messages API takes low, medium or high"
            )),
            "{}",
            stderr(&out)
        );
        assert!(!sb.wal().exists());
        assert_eq!(server.request_count(), 0);
    }
}

/// The run's effort holds on resume unless `resume --reasoning-effort`
/// says otherwise, for that resume (checked like a new run's: `minimal`
/// is refused for Anthropic before anything is written).
#[test]
fn resume_reasoning_effort_overrides_the_runs_for_that_resume() {
    let sb = Sandbox::new();
    let call = |id: &str| {
        message(
            json!([{"type": "tool_use", "id": id, "name": "bash",
                "input": {"command": "true"}}]),
            "tool_use",
        )
    };
    let server = MockServer::start(vec![
        call("toolu_1"),
        call("toolu_2"),
        message(json!([{"type": "text", "text": "Done."}]), "end_turn"),
    ]);
    let mut c = sb.run_cmd(&server.root_url(), "run true");
    c.args([
        "--provider",
        "anthropic",
        "--reasoning-effort",
        "medium",
        "--max-steps",
        "1",
    ])
    .env("ANTHROPIC_API_KEY", "sk-ant-test");
    assert_eq!(output(c).status.code(), Some(3));
    let before = std::fs::read(sb.wal()).unwrap();

    let mut c = sb.resume_cmd();
    c.args(["--reasoning-effort", "minimal"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("minimal is not an Anthropic effort"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(sb.wal()).unwrap(), before);

    let mut c = sb.resume_cmd();
    c.args(["--reasoning-effort", "high", "--max-steps", "2"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let mut c = sb.resume_cmd();
    c.args(["--max-steps", "3"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let efforts: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r["output_config"]["effort"].clone())
        .collect();
    assert_eq!(efforts, [json!("medium"), json!("high"), json!("medium")]);
}
