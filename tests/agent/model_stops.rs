//! Why a reply ended (contract section 15): a reply cut at the output limit
//! is never a final answer and its half-written calls never run; the model
//! is told, at most twice in a row, then the run stops `truncated`; a
//! refusal stops the run `refused` with its text on stdout. A 135M model
//! cannot be made to refuse or to stop at a chosen point, so these are the
//! scripted server, which checks every request.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};

/// A Chat Completions body with `finish_reason` and the message given.
fn completion(message: Value, finish: &str) -> MockReply {
    MockReply::json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}
    }))
}

/// A cut reply: text and a call whose arguments stop mid-string.
fn cut() -> MockReply {
    completion(
        json!({"role": "assistant", "content": "Writing the file",
            "tool_calls": [{"id": "call_cut", "type": "function",
                "function": {"name": "write", "arguments": "{\"path\":\"a.txt\",\"content\":\"hal"}}]}),
        "length",
    )
}

fn anthropic(content: Value, stop: &str) -> MockReply {
    MockReply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 4}
    }))
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_cut_reply_is_no_answer_its_calls_never_run_and_the_model_is_told() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        cut(),
        completion(
            json!({"role": "assistant", "content": "Half an ans"}),
            "length",
        ),
        MockReply::text("The whole answer."),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "write a.txt"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    assert_eq!(stdout(&out).trim(), "The whole answer.");
    assert!(!sb.ws().join("a.txt").exists(), "a cut call ran");

    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let responses = of_kind(&recs, "model.response");
    let stops: Vec<(&Value, &Value)> = responses
        .iter()
        .map(|r| (&r.data["stop_reason"], &r.data["stop_reason_raw"]))
        .collect();
    assert_eq!(
        stops,
        [
            (&json!("max_tokens"), &json!("length")),
            (&json!("max_tokens"), &json!("length")),
            (&json!("end_turn"), &json!("stop")),
        ]
    );
    assert!(of_kind(&recs, "tool.started").is_empty());
    let results = of_kind(&recs, "tool.result");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].data["call_id"], "call_cut");
    assert_eq!(results[0].data["is_error"], true);
    assert!(
        results[0].data["content"]
            .as_str()
            .unwrap()
            .starts_with("[not run: the response was cut off at the output limit"),
        "{}",
        results[0].data
    );
    let told = of_kind(&recs, "user.message");
    assert_eq!(told.len(), 2);
    assert!(told.iter().all(|m| {
        m.data["source"] == "truncated"
            && m.data["content"]
                .as_str()
                .unwrap()
                .starts_with("[Truncated]")
    }));
    let finished = of_kind(&recs, "run.finished");
    assert_eq!(finished[0].data["status"], "completed");

    // The model was sent its cut reply, the call's result and the notice.
    let requests = server.requests();
    let second = requests[1]["messages"].as_array().unwrap();
    let n = second.len();
    assert_eq!(second[n - 3]["role"], "assistant");
    assert_eq!(second[n - 3]["content"], "Writing the file");
    assert_eq!(second[n - 2]["role"], "tool");
    assert_eq!(second[n - 2]["tool_call_id"], "call_cut");
    assert_eq!(second[n - 1]["role"], "user");
    assert!(
        second[n - 1]["content"]
            .as_str()
            .unwrap()
            .starts_with("[Truncated]")
    );
}

#[test]
fn a_third_cut_reply_in_a_row_stops_the_run_truncated_exit_1() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![cut(), cut(), cut()]);
    let out = output(sb.run_cmd(&server.base_url(), "write a.txt"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    server.assert_no_violations();
    assert_eq!(server.request_count(), 3);
    assert!(
        stderr(&out).contains("cut at the output limit"),
        "{}",
        stderr(&out)
    );
    assert!(!sb.ws().join("a.txt").exists());
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(of_kind(&recs, "tool.result").len(), 3);
    assert!(of_kind(&recs, "tool.started").is_empty());
    assert_eq!(of_kind(&recs, "user.message").len(), 2);
    assert_eq!(
        of_kind(&recs, "run.finished")[0].data["status"],
        "truncated"
    );
}

#[test]
fn a_refusal_ends_the_run_refused_with_its_text_on_stdout_exit_1() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![completion(
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
        "stop",
    )]);
    let out = output(sb.run_cmd(&server.base_url(), "do something"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    server.assert_no_violations();
    assert_eq!(stdout(&out).trim(), "I can't help with that.");
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let r = &of_kind(&recs, "model.response")[0].data;
    assert_eq!(r["stop_reason"], "refusal");
    assert_eq!(r["message"]["content"], "I can't help with that.");
    assert_eq!(of_kind(&recs, "run.finished")[0].data["status"], "refused");
}

/// Anthropic's words: `max_tokens` is cut, `refusal` refused; the cut
/// `tool_use` never runs and its `tool_result` answers it.
#[test]
fn anthropic_max_tokens_and_refusal_are_read_the_same_way() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        anthropic(
            json!([{"type": "text", "text": "Writing"},
                {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"path": "a.txt"}}]),
            "max_tokens",
        ),
        anthropic(json!([{"type": "text", "text": "No."}]), "refusal"),
    ]);
    let mut c = sb.run_cmd(&server.root_url(), "write a.txt");
    c.args(["--provider", "anthropic"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    server.assert_no_violations();
    assert_eq!(stdout(&out).trim(), "No.");
    assert!(!sb.ws().join("a.txt").exists());
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let stops: Vec<&Value> = of_kind(&recs, "model.response")
        .iter()
        .map(|r| &r.data["stop_reason"])
        .collect();
    assert_eq!(stops, [&json!("max_tokens"), &json!("refusal")]);
    assert_eq!(of_kind(&recs, "run.finished")[0].data["status"], "refused");
    let second = &server.requests()[1];
    let last = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_1");
    assert!(
        last["content"][1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Truncated]")
    );
}
