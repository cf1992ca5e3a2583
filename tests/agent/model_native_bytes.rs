//! Native items go back as the server wrote them (contract section 15:
//! "recorded byte-exact ... and sent back exactly so"): a server that
//! writes a `thinking` block, a `redacted_thinking` block or a `reasoning`
//! item with its members out of alphabetical order gets them back in its
//! own order, with the same values, on the next request of the same
//! process and after a resume, and the log records that same text. Only
//! the whitespace between tokens is dropped (a record is one line).

use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;

/// A 200 answer with this exact body text.
fn raw(body: &str) -> MockReply {
    MockReply::Status {
        code: 200,
        retry_after: None,
        body: body.to_string(),
    }
}

/// Runs two steps live (the second request is the first to carry the
/// items), then resumes for a third: each of those requests holds
/// `expected` as it is, and the log's first `model.response` `logged`.
fn sent_back_as_written(
    provider: &str,
    url: &str,
    server: &MockServer,
    sb: &Sandbox,
    expected: &str,
    logged: &str,
) {
    let mut c = sb.run_cmd(url, "list files");
    c.args(["--provider", provider, "--max-steps", "2"])
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
    assert_eq!(requests.len(), 3);
    assert!(!requests[0].raw.contains(expected));
    for r in &requests[1..] {
        assert!(
            r.raw.contains(expected),
            "request {} does not carry the items as written:\n{}\nexpected:\n{expected}",
            r.index,
            r.raw
        );
    }
    let log = std::fs::read_to_string(sb.wal()).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("\"model.response\""))
        .unwrap();
    assert!(line.contains(logged), "{line}");
}

#[test]
fn anthropic_thinking_blocks_go_back_with_the_servers_member_order() {
    let thinking = r#"{"type":"thinking","thinking":"Plan: ls.\nThen é, \"quoted\".","signature":"EqQBCgIYAhIM1gb/+=="}"#;
    let redacted = r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3p/zix+=="}"#;
    // Pretty-printed, as a server may send it: the items' whitespace is
    // dropped, nothing else changes.
    let pretty_thinking = thinking.replace("\",\"", "\",\n      \"");
    let first = format!(
        "{{\n  \"type\": \"message\", \"id\": \"msg_1\", \"role\": \"assistant\", \"model\": \"claude\",\n  \
         \"content\": [\n    {pretty_thinking},\n    {redacted},\n    \
         {{\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"bash\", \"input\": {{\"command\": \"true\"}}}}\n  ],\n  \
         \"stop_reason\": \"tool_use\", \"usage\": {{\"input_tokens\": 40, \"output_tokens\": 20}}\n}}"
    );
    let message = |content: serde_json::Value, stop: &str| {
        MockReply::json(
            json!({"type": "message", "id": "msg_2", "role": "assistant",
            "model": "claude", "content": content, "stop_reason": stop,
            "usage": {"input_tokens": 60, "output_tokens": 3}}),
        )
    };
    let server = MockServer::start(vec![
        raw(&first),
        message(
            json!([{"type": "tool_use", "id": "toolu_2", "name": "bash",
                "input": {"command": "true"}}]),
            "tool_use",
        ),
        message(json!([{"type": "text", "text": "Listed."}]), "end_turn"),
    ]);
    let sb = Sandbox::new();
    sent_back_as_written(
        "anthropic",
        &server.root_url(),
        &server,
        &sb,
        &format!("{thinking},{redacted}"),
        &format!("{thinking},{redacted}"),
    );
}

#[test]
fn responses_reasoning_items_go_back_with_the_servers_member_order() {
    let reasoning = r#"{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"ls"}],"encrypted_content":"gAAAAABo/Vx1+qZ3Jd==","n":1.5}"#;
    let first = format!(
        "{{\"id\": \"resp_1\", \"object\": \"response\", \"status\": \"completed\", \
         \"model\": \"o4-mini\", \"output\": [{reasoning}, {{\"type\": \"function_call\", \
         \"id\": \"fc_1\", \"call_id\": \"call_x\", \"name\": \"bash\", \
         \"arguments\": \"{{\\\"command\\\":\\\"true\\\"}}\"}}], \
         \"usage\": {{\"input_tokens\": 50, \"output_tokens\": 10}}}}"
    );
    let response = |output: serde_json::Value| {
        MockReply::json(
            json!({"id": "resp_2", "object": "response", "status": "completed",
            "model": "o4-mini", "output": output,
            "usage": {"input_tokens": 50, "output_tokens": 10}}),
        )
    };
    let server = MockServer::start(vec![
        raw(&first),
        response(
            json!([{"type": "function_call", "id": "fc_2", "call_id": "call_y",
            "name": "bash", "arguments": "{\"command\":\"true\"}"}]),
        ),
        response(json!([{"type": "message", "id": "m", "role": "assistant",
            "content": [{"type": "output_text", "text": "Listed."}]}])),
    ]);
    let sb = Sandbox::new();
    sent_back_as_written(
        "responses",
        &server.base_url(),
        &server,
        &sb,
        // Right before its call (which tinyagent writes from the log).
        &format!(
            "{reasoning},{{\"arguments\":\"{{\\\"command\\\":\\\"true\\\"}}\",\"call_id\":\"call_x\""
        ),
        // The log keeps the whole output as the server wrote it.
        &format!("{reasoning},{{\"type\":\"function_call\",\"id\":\"fc_1\""),
    );
}
