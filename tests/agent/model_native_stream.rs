//! Native items of streamed replies (contract section 15): an Anthropic
//! stream's `thinking_delta` and `signature_delta` events (with `ping`s and
//! `input_json_delta` pieces between) become the thinking block that goes
//! back first in that turn; a Responses stream's `response.completed`
//! carries the reasoning item, which goes back as the server wrote it; a
//! Chat Completions stream's `reasoning_content` deltas are joined and sent
//! back on their assistant message.

use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;

/// A 200 answer whose body is these server-sent events.
fn sse(events: &[(&str, String)]) -> MockReply {
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    MockReply::Status {
        code: 200,
        retry_after: None,
        body,
    }
}

#[test]
fn a_streamed_thinking_block_goes_back_first_in_its_turn() {
    let delta = |i: u32, d: serde_json::Value| {
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": d}).to_string(),
        )
    };
    let first = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "model": "claude",
                "usage": {"input_tokens": 40, "output_tokens": 1}}})
            .to_string(),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            .to_string(),
        ),
        delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
        ("ping", json!({"type": "ping"}).to_string()),
        delta(0, json!({"type": "thinking_delta", "thinking": "look."})),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCg/+=="}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}).to_string(),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block":
                {"type": "tool_use", "id": "toolu_s1", "name": "bash", "input": {}}})
            .to_string(),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "{\"comm"}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "and\":\"true\"}"}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}).to_string(),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 30}})
            .to_string(),
        ),
        ("message_stop", json!({"type": "message_stop"}).to_string()),
    ]);
    let done = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_2", "type": "message",
                "role": "assistant", "content": [], "model": "claude",
                "usage": {"input_tokens": 60, "output_tokens": 1}}})
            .to_string(),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})
            .to_string(),
        ),
        delta(0, json!({"type": "text_delta", "text": "Done."})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3}})
            .to_string(),
        ),
        ("message_stop", json!({"type": "message_stop"}).to_string()),
    ]);
    let server = MockServer::start(vec![first, done]);
    let sb = Sandbox::new();
    let mut c = sb.run_cmd(&server.root_url(), "run true");
    c.args([
        "--provider",
        "anthropic",
        "--stream",
        "--thinking-budget",
        "2048",
    ])
    .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Done.");
    server.assert_no_violations();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r["stream"] == true));
    let assistant = &requests[1]["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"][0],
        json!({"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCg/+=="})
    );
    assert_eq!(
        assistant["content"][1],
        json!({"type": "tool_use", "id": "toolu_s1", "name": "bash",
            "input": {"command": "true"}})
    );
}

#[test]
fn a_streamed_reasoning_item_goes_back_as_the_server_wrote_it() {
    let reasoning =
        r#"{"type":"reasoning","id":"rs_9","summary":[],"encrypted_content":"gAAA/+b=="}"#;
    let call = r#"{"type":"function_call","id":"fc_9","call_id":"call_s","name":"bash","arguments":"{\"command\":\"true\"}","status":"completed"}"#;
    let completed = |output: &str, id: &str| {
        format!(
            r#"{{"type":"response.completed","sequence_number":9,"response":{{"id":"{id}","object":"response","status":"completed","model":"o4-mini","output":[{output}],"usage":{{"input_tokens":50,"output_tokens":10}}}}}}"#
        )
    };
    let first = sse(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": "resp_1",
                "status": "in_progress", "output": []}})
            .to_string(),
        ),
        (
            "response.output_item.done",
            format!(
                r#"{{"type":"response.output_item.done","output_index":0,"item":{reasoning}}}"#
            ),
        ),
        (
            "response.completed",
            completed(&format!("{reasoning},{call}"), "resp_1"),
        ),
    ]);
    let text = r#"{"type":"message","id":"m","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Listed.","annotations":[]}]}"#;
    let second = sse(&[
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "delta": "Listed."}).to_string(),
        ),
        ("response.completed", completed(text, "resp_2")),
    ]);
    let server = MockServer::start(vec![first, second]);
    let sb = Sandbox::new();
    let mut c = sb.run_cmd(&server.base_url(), "run true");
    c.args(["--provider", "responses", "--stream"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Listed.");
    server.assert_no_violations();
    let requests = server.recorded();
    assert_eq!(requests.len(), 2);
    // Right before its call, members in the server's order.
    let expected = format!(
        "{reasoning},{{\"arguments\":\"{{\\\"command\\\":\\\"true\\\"}}\",\"call_id\":\"call_s\""
    );
    assert!(
        requests[1].raw.contains(&expected),
        "{}\nexpected: {expected}",
        requests[1].raw
    );
    let log = std::fs::read_to_string(sb.wal()).unwrap();
    assert!(log.contains(&format!("{reasoning},{call}")), "{log}");
}

#[test]
fn streamed_reasoning_content_is_joined_and_sent_back_on_its_message() {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        json!({"id": "c1", "object": "chat.completion.chunk", "model": "deepseek-reasoner",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut body = String::new();
    for data in [
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": "The user "}),
            None,
        ),
        chunk(
            json!({"reasoning_content": "wants \"true\" run — é."}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_r", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"true\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        "[DONE]".to_string(),
    ] {
        body.push_str(&format!("data: {data}\n\n"));
    }
    let server = MockServer::start(vec![
        MockReply::Status {
            code: 200,
            retry_after: None,
            body,
        },
        MockReply::text("Done."),
    ]);
    let sb = Sandbox::new();
    let mut c = sb.run_cmd(&server.base_url(), "run true");
    c.args(["--stream", "--reasoning-effort", "high"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let assistant = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    assert_eq!(
        assistant["reasoning_content"],
        "The user wants \"true\" run — é."
    );
    assert_eq!(assistant["tool_calls"][0]["id"], "call_r");
    let recs = crate::support::contract::read(&sb.wal());
    assert_eq!(
        crate::support::contract::of_kind(&recs, "model.response")[0].data["message"]["native"],
        json!({"api": "chat", "reasoning_content": "The user wants \"true\" run — é."})
    );
}
