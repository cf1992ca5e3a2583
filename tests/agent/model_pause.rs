//! Contract section 15: `stop_reason` `pause` (Anthropic `pause_turn`) is
//! acted on: a paused turn is not a final answer. It is sent back as it is
//! (the last message of the next request) and the model is asked again,
//! with nothing added; the run completes with the answer that follows.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;

fn message(text: &str, stop: &str) -> MockReply {
    MockReply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": text}], "stop_reason": stop,
        "usage": {"input_tokens": 12, "output_tokens": 4}
    }))
}

#[test]
fn a_paused_turn_is_sent_back_and_the_model_asked_again() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        message("Still searching the docs", "pause_turn"),
        message("Found it.", "end_turn"),
    ]);
    let mut c = sb.run_cmd(&server.root_url(), "find it");
    c.args(["--provider", "anthropic"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim_end()
            .ends_with("Found it."),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    server.assert_no_violations();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    // As it was, the provider's cache breakpoint aside.
    assert_eq!(last["role"], "assistant", "{last}");
    let content = last["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{last}");
    assert_eq!(content[0]["type"], "text");
    assert_eq!(content[0]["text"], "Still searching the docs");
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let stops: Vec<_> = of_kind(&recs, "model.response")
        .iter()
        .map(|r| {
            (
                r.data["stop_reason"].clone(),
                r.data["stop_reason_raw"].clone(),
            )
        })
        .collect();
    assert_eq!(
        stops,
        [
            (json!("pause"), json!("pause_turn")),
            (json!("end_turn"), json!("end_turn"))
        ]
    );
    assert!(of_kind(&recs, "user.message").is_empty());
    assert_eq!(of_kind(&recs, "step.saved").len(), 2);
    assert_eq!(
        of_kind(&recs, "run.finished")[0].data["status"],
        "completed"
    );
}

/// A paused turn of thinking only (no text yet) goes back as the last
/// message with its blocks unchanged: no cache breakpoint is put on a
/// thinking block (the API takes none there), the turn's last other block
/// or none carries it.
#[test]
fn a_paused_thinking_turn_goes_back_unchanged() {
    let sb = Sandbox::new();
    let thinking = json!({"type": "thinking", "thinking": "Searching.",
        "signature": "EqQBCgIYAhIM1gb=="});
    let server = MockServer::start(vec![
        MockReply::json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [thinking.clone()], "stop_reason": "pause_turn",
            "usage": {"input_tokens": 12, "output_tokens": 4}
        })),
        message("Found it.", "end_turn"),
    ]);
    let mut c = sb.run_cmd(&server.root_url(), "find it");
    c.args(["--provider", "anthropic", "--thinking-budget", "1024"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last, json!({"role": "assistant", "content": [thinking]}));
}
