//! Contract section 15, acceptance for each provider: a run whose model
//! produces reasoning items, killed with SIGKILL during a long bash call,
//! resumed, forked and compacted, sends the items back unchanged on every
//! later request that carries their turn, in the provider's own form:
//!
//! - `openai` (Chat Completions): `reasoning_content` on the assistant
//!   message with the calls (DeepSeek's thinking mode answers 400 without);
//! - `responses`: the encrypted `reasoning` item right before the
//!   `function_call` it preceded (`store: false`: the server keeps nothing);
//! - `anthropic`: the `thinking` (with `signature`) and `redacted_thinking`
//!   blocks first in the assistant turn with the `tool_use`.
//!
//! Compaction here keeps the reasoning turn (the kept tail): the requests
//! after it, and the `compaction` record's view, must still carry the items.
//! The scripted server refuses (400) any request that drops or alters them,
//! and every refusal is a violation the test fails on.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a request says of the reasoning turn: absent, or present with its
/// items right (`Ok`) or wrong (`Err`, the server's complaint).
type Carries = fn(&RecordedRequest) -> Option<Result<(), String>>;

/// One provider's side of the journey.
struct Side {
    provider: &'static str,
    /// The server's URL as `--base-url` takes it for this provider.
    url: fn(&MockServer) -> String,
    /// Reasoning flags for `run` (recorded, kept on resume and fork).
    flags: &'static [&'static str],
    /// Step 1: a plain call of `true`.
    plain_call: fn() -> MockReply,
    /// Step 2: reasoning items, then a call of `sleep 41.25`.
    reasoning_call: fn() -> MockReply,
    /// A final answer.
    text: fn(&str) -> MockReply,
    carries: Carries,
    /// The `message.native` the reasoning turn is recorded with.
    native: fn() -> Value,
}

/// A scripted server for `side`: a request that breaks the provider's rule
/// gets the 400 the real API sends, a summarizer request gets a summary,
/// any other the next reply of `replies`.
fn strict(side: &Side, replies: Vec<MockReply>) -> (MockServer, Arc<Mutex<Vec<String>>>) {
    let violations = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&violations);
    let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
    let carries = side.carries;
    let text = side.text;
    let server = MockServer::start_with(Vec::new(), move |req| {
        if let Some(Err(why)) = carries(req) {
            kept.lock()
                .unwrap()
                .push(format!("request {}: {why}", req.index));
            return MockReply::Status {
                code: 400,
                retry_after: None,
                body: json!({"error": {"message": why, "type": "invalid_request_error"}})
                    .to_string(),
            };
        }
        if req.is_summary() {
            return text("Summary: the files were listed; a long sleep was running.");
        }
        queue
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| text("unexpected request"))
    });
    (server, violations)
}

/// The config of every run here: compact whenever there is something
/// older than the last four messages (the reasoning turn is among them).
const COMPACT_EARLY: &str = "[compaction]\nthreshold_tokens = 1\nkeep_recent = 4\n";

fn journey(side: &Side) {
    let sb = Sandbox::new();
    let (server, violations) = strict(
        side,
        vec![
            (side.plain_call)(),
            (side.reasoning_call)(),
            (side.text)("Resumed."),
            (side.text)("Forked."),
        ],
    );
    let url = (side.url)(&server);
    let key = |c: &mut std::process::Command| {
        c.env("ANTHROPIC_API_KEY", "sk-ant-test");
    };

    // 1. The run, killed with SIGKILL while `sleep 41.25` runs.
    let mut c = sb.run_cmd_cfg(&url, "list files", COMPACT_EARLY);
    c.args(["--provider", side.provider]).args(side.flags);
    key(&mut c);
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(sb.wal()).map_or(0, |l| l.matches("\"tool.started\"").count()) < 2
    {
        assert!(Instant::now() < deadline, "the long call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(server.request_count(), 2);

    // 2. Resume: compacted first (the reasoning turn is kept), then asked.
    let mut c = sb.resume_cmd();
    key(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Resumed.");
    let after_resume = server.recorded();

    // 3. A fork at the reasoning turn's step, resumed with a message.
    let fork = sb.path("fork.wal");
    let mut c = std::process::Command::new(bin());
    c.current_dir(sb.dir.path())
        .arg("fork")
        .arg(sb.wal())
        .args(["--at", "2", "-o"])
        .arg(&fork)
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut c = std::process::Command::new(bin());
    c.current_dir(sb.dir.path())
        .arg("resume")
        .arg(&fork)
        .args(["--message", "go on"])
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .stdin(std::process::Stdio::null());
    key(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Forked.");

    assert_eq!(*violations.lock().unwrap(), Vec::<String>::new());
    server.assert_no_violations();
    let requests = server.recorded();
    // run: 2 steps; resume: a summary and a step; the fork's resume: the
    // same.
    assert_eq!(requests.len(), 6, "{requests:#?}");
    let summaries: Vec<usize> = requests
        .iter()
        .filter(|r| r.is_summary())
        .map(|r| r.index)
        .collect();
    assert_eq!(summaries, [3, 5]);
    // The steps after the kill (the resume's and the fork's) carry the
    // reasoning turn, with its items as produced.
    for i in [4, 6] {
        let r = &requests[i - 1];
        assert_eq!((side.carries)(r), Some(Ok(())), "request {i}: {}", r.body);
    }
    assert_eq!(after_resume.len(), 4);

    // Both logs: the reasoning turn recorded with its native items, and a
    // compaction whose kept view holds that message, items included.
    for wal in [sb.wal(), fork] {
        let recs = contract::read(&wal);
        contract::check_write_order(&recs);
        let responses = of_kind(&recs, "model.response");
        assert_eq!(responses[1].data["message"]["native"], (side.native)());
        let compactions = of_kind(&recs, "compaction");
        assert_eq!(compactions.len(), 1, "{}", wal.display());
        let view = compactions[0].data["view"].as_array().unwrap();
        assert!(
            view.iter().any(|m| m["native"] == (side.native)()),
            "the kept view lost the native items: {view:?}"
        );
        assert_eq!(
            of_kind(&recs, "run.finished").last().unwrap().data["status"],
            "completed"
        );
    }
}

// --- Chat Completions ---------------------------------------------------

const REASONING: &str = "The user wants the files listed.\nFirst `true`, then wait — \"é\".";

fn chat_completion(message: Value, finish: &str) -> MockReply {
    MockReply::json(json!({
        "id": "c1", "object": "chat.completion", "model": "deepseek-reasoner",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12}
    }))
}

const CHAT: Side = Side {
    provider: "openai",
    url: MockServer::base_url,
    flags: &["--reasoning-effort", "high"],
    plain_call: || MockReply::tool_call("bash", json!({"command": "true"})),
    reasoning_call: || {
        chat_completion(
            json!({"role": "assistant", "content": "", "reasoning_content": REASONING,
                "tool_calls": [{"id": "call_r1", "type": "function",
                    "function": {"name": "bash", "arguments": "{\"command\":\"sleep 41.25\"}"}}]}),
            "tool_calls",
        )
    },
    text: MockReply::text,
    carries: |req| {
        let m = req
            .messages()
            .iter()
            .find(|m| m["role"] == "assistant" && m["tool_calls"][0]["id"] == "call_r1")?;
        Some(if m["reasoning_content"] == REASONING {
            Ok(())
        } else {
            Err(format!(
                "Missing `reasoning_content` field in the assistant message (got {})",
                m["reasoning_content"]
            ))
        })
    },
    native: || json!({"api": "chat", "reasoning_content": REASONING}),
};

#[test]
fn chat_reasoning_content_survives_kill_9_resume_fork_and_compaction() {
    journey(&CHAT);
}

// --- Responses ------------------------------------------------------------

fn reasoning_item() -> Value {
    json!({"type": "reasoning", "id": "rs_1", "summary": [],
        "encrypted_content": "gAAAAABoVx1qZ3Jd-encrypted/reasoning+blob=="})
}

fn sleep_call() -> Value {
    json!({"type": "function_call", "id": "fc_1", "call_id": "call_x", "name": "bash",
        "arguments": "{\"command\":\"sleep 41.25\"}", "status": "completed"})
}

fn response(output: Value) -> MockReply {
    MockReply::json(json!({
        "id": "resp_1", "object": "response", "status": "completed", "model": "o4-mini",
        "output": output, "incomplete_details": null,
        "usage": {"input_tokens": 50, "output_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 6}}
    }))
}

const RESPONSES: Side = Side {
    provider: "responses",
    url: MockServer::base_url,
    flags: &["--reasoning-effort", "low"],
    plain_call: || {
        response(
            json!([{"type": "function_call", "id": "fc_0", "call_id": "call_0",
            "name": "bash", "arguments": "{\"command\":\"true\"}"}]),
        )
    },
    reasoning_call: || response(json!([reasoning_item(), sleep_call()])),
    text: |t| {
        response(
            json!([{"type": "message", "id": "msg_1", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}]}]),
        )
    },
    carries: |req| {
        let input = req.body["input"].as_array()?;
        let at = input
            .iter()
            .position(|i| i["type"] == "function_call" && i["call_id"] == "call_x")?;
        let before = at.checked_sub(1).map_or(Value::Null, |b| input[b].clone());
        Some(if before == reasoning_item() {
            Ok(())
        } else {
            Err(format!(
                "function_call call_x was provided without its reasoning item (got {before})"
            ))
        })
    },
    native: || json!({"api": "responses", "output": [reasoning_item(), sleep_call()]}),
};

#[test]
fn responses_reasoning_items_survive_kill_9_resume_fork_and_compaction() {
    journey(&RESPONSES);
}

// --- Anthropic --------------------------------------------------------------

fn thinking_blocks() -> Vec<Value> {
    vec![
        json!({"type": "thinking", "thinking": "List them.\n\nThen wait.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}),
        json!({"type": "redacted_thinking",
            "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}),
    ]
}

fn anthropic_content() -> Vec<Value> {
    let mut content = thinking_blocks();
    content.push(json!({"type": "tool_use", "id": "toolu_t1", "name": "bash",
        "input": {"command": "sleep 41.25"}}));
    content
}

fn message(content: Value, stop: &str) -> MockReply {
    MockReply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": 40, "output_tokens": 20}
    }))
}

const ANTHROPIC: Side = Side {
    provider: "anthropic",
    url: MockServer::root_url,
    flags: &["--thinking-budget", "2048"],
    plain_call: || {
        message(
            json!([{"type": "tool_use", "id": "toolu_0", "name": "bash",
                "input": {"command": "true"}}]),
            "tool_use",
        )
    },
    reasoning_call: || message(Value::Array(anthropic_content()), "tool_use"),
    text: |t| message(json!([{"type": "text", "text": t}]), "end_turn"),
    carries: |req| {
        let m = req.messages().iter().find(|m| {
            m["role"] == "assistant"
                && m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["id"] == "toolu_t1"))
        })?;
        let content = m["content"].as_array()?;
        Some(
            if content[..content.len().min(2)] == thinking_blocks()[..] {
                Ok(())
            } else {
                Err(
                    "messages.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found another block. When `thinking` is enabled, a final `assistant` \
                 message must start with a thinking block"
                        .into(),
                )
            },
        )
    },
    native: || json!({"api": "anthropic", "content": anthropic_content()}),
};

#[test]
fn anthropic_thinking_survives_kill_9_resume_fork_and_compaction() {
    journey(&ANTHROPIC);
}
