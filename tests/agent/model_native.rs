//! What a model produced that its provider needs back (contract section 15):
//! Chat Completions `reasoning_content` and Anthropic `thinking` /
//! `redacted_thinking` blocks are recorded in `model.response.message.native`
//! and sent back unchanged on every later request, live and after a resume.
//!
//! A 135M model produces none of these, so a scripted server plays the
//! provider. Like the real APIs it refuses (400) a request that drops or
//! alters an item it produced, and every such refusal is also kept as a
//! violation the test asserts there is none of.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The provider's rule, checked on one request: what is wrong with it.
type Rule = Box<dyn Fn(&RecordedRequest) -> Option<String> + Send + Sync>;

/// A scripted server that answers `replies` in order after checking each
/// request against `rule`; a request that breaks it gets the 400 the real
/// API sends, and the violation is kept.
struct Strict {
    server: MockServer,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Strict {
    fn start(replies: Vec<MockReply>, rule: Rule) -> Strict {
        let violations = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&violations);
        let queue = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
        let server = MockServer::start_with(Vec::new(), move |req| {
            if let Some(v) = rule(req) {
                kept.lock()
                    .unwrap()
                    .push(format!("request {}: {v}", req.index));
                return MockReply::Status {
                    code: 400,
                    retry_after: None,
                    body: json!({"error": {"message": v, "type": "invalid_request_error"}})
                        .to_string(),
                };
            }
            queue
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| MockReply::text("done"))
        });
        Strict { server, violations }
    }

    fn assert_clean(&self) {
        assert_eq!(*self.violations.lock().unwrap(), Vec::<String>::new());
        self.server.assert_no_violations();
    }
}

const REASONING: &str = "The user wants the files listed.\nI will run `ls` first — \"quoted\" é.";

/// DeepSeek's thinking mode: an assistant message with tool calls must
/// carry the `reasoning_content` it came with.
fn chat_rule() -> Rule {
    Box::new(|req| {
        for m in req.messages() {
            if m["role"] == "assistant"
                && m["tool_calls"][0]["id"] == "call_r1"
                && m["reasoning_content"] != REASONING
            {
                return Some(format!(
                    "Missing `reasoning_content` field in the assistant message (got {})",
                    m["reasoning_content"]
                ));
            }
        }
        None
    })
}

fn chat_replies() -> Vec<MockReply> {
    vec![
        MockReply::json(json!({
            "id": "c1", "object": "chat.completion", "model": "deepseek-reasoner",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "", "reasoning_content": REASONING,
                "tool_calls": [{"id": "call_r1", "type": "function",
                    "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12}
        })),
        MockReply::tool_call("bash", json!({"command": "true"})),
        MockReply::text("Listed."),
    ]
}

#[test]
fn chat_reasoning_content_is_recorded_and_sent_back_live_and_after_resume() {
    let sb = Sandbox::new();
    let strict = Strict::start(chat_replies(), chat_rule());
    // One step, then a resume for the rest.
    let mut c = sb.run_cmd(&strict.server.base_url(), "list files");
    c.args(["--reasoning-effort", "high", "--max-steps", "1"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let mut c = sb.resume_cmd();
    c.args(["--max-steps", "4"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    strict.assert_clean();

    let requests = strict.server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(r["reasoning_effort"], "high", "{r}");
    }
    for r in &requests[1..] {
        let assistant = r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "assistant")
            .unwrap();
        assert_eq!(assistant["reasoning_content"], REASONING);
    }
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(recs[0].data["settings"]["reasoning_effort"], "high");
    let first = &of_kind(&recs, "model.response")[0].data;
    assert_eq!(
        first["message"]["native"],
        json!({"api": "chat", "reasoning_content": REASONING})
    );
    // A response without reasoning has no native items.
    let second = &of_kind(&recs, "model.response")[1].data;
    assert!(second["message"].get("native").is_none(), "{second}");
}

fn thinking_blocks() -> Vec<Value> {
    vec![
        json!({"type": "thinking", "thinking": "Let me list the files.\n\nThen read.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}),
        json!({"type": "redacted_thinking",
            "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}),
    ]
}

/// Anthropic with thinking on: the assistant turn that carries a
/// `tool_use` must start with the thinking blocks it came with, unchanged
/// and in order.
fn anthropic_rule() -> Rule {
    Box::new(|req| {
        for m in req.messages() {
            let content = m["content"].as_array().cloned().unwrap_or_default();
            if m["role"] == "assistant"
                && content.iter().any(|b| b["id"] == "toolu_t1")
                && content[..content.len().min(2)] != thinking_blocks()[..]
            {
                return Some(
                    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, \
                     but found `tool_use`. When `thinking` is enabled, a final `assistant` \
                     message must start with a thinking block"
                        .into(),
                );
            }
        }
        if req.body["thinking"] != json!({"type": "enabled", "budget_tokens": 2048}) {
            return Some(format!("thinking is {}", req.body["thinking"]));
        }
        if req.body["max_tokens"].as_u64() != Some(2048 + 8192) {
            return Some(format!("max_tokens is {}", req.body["max_tokens"]));
        }
        None
    })
}

#[test]
fn anthropic_thinking_blocks_go_back_unchanged_before_the_tool_use() {
    let sb = Sandbox::new();
    let mut content = thinking_blocks();
    content.push(json!({"type": "tool_use", "id": "toolu_t1", "name": "bash",
        "input": {"command": "ls"}}));
    let strict = Strict::start(
        vec![
            MockReply::json(json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                "content": content, "stop_reason": "tool_use",
                "usage": {"input_tokens": 40, "output_tokens": 20}
            })),
            MockReply::json(json!({
                "id": "msg_2", "type": "message", "role": "assistant", "model": "claude",
                "content": [{"type": "text", "text": "Listed."}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 60, "output_tokens": 3}
            })),
        ],
        anthropic_rule(),
    );
    let mut c = sb.run_cmd(&strict.server.root_url(), "list files");
    c.args(["--provider", "anthropic", "--thinking-budget", "2048"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    strict.assert_clean();
    assert_eq!(strict.server.request_count(), 2);
    let recs = contract::read(&sb.wal());
    assert_eq!(recs[0].data["settings"]["thinking_budget"], 2048);
    let first = &of_kind(&recs, "model.response")[0].data;
    assert_eq!(first["message"]["native"]["api"], "anthropic");
    assert_eq!(
        first["message"]["native"]["content"][0],
        thinking_blocks()[0]
    );
    assert_eq!(
        first["message"]["native"]["content"][1],
        thinking_blocks()[1]
    );
    let second = &strict.server.requests()[1];
    let assistant = &second["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0], thinking_blocks()[0]);
    assert_eq!(assistant["content"][1], thinking_blocks()[1]);
    assert_eq!(assistant["content"][2]["type"], "tool_use");
}

/// A log written by the tinyagent of before issue 34 (no `stop_reason`, no
/// `native`, no reasoning settings; a script run stopped by its step
/// limit), checked in as it was written, resumes today against an
/// OpenAI-compatible server: its records are kept byte for byte and the
/// new ones carry the new members.
#[test]
fn a_v2_log_from_before_native_items_resumes() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2-before-34");
    // The run recorded its workspace as this absolute path.
    let ws = std::path::Path::new("/tmp/tinyagent-fixture-34/ws");
    std::fs::create_dir_all(ws).unwrap();
    let sb = Sandbox::new();
    let wal = sb.path("v2.wal");
    std::fs::copy(fixture.join("v2.wal"), &wal).unwrap();
    std::fs::set_permissions(&wal, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let before = std::fs::read(&wal).unwrap();
    let server = MockServer::start(vec![MockReply::text("resumed from the old log")]);
    let mut c = std::process::Command::new(crate::support::e2e::bin());
    c.current_dir(sb.dir.path())
        .args([
            "resume",
            "v2.wal",
            "--max-steps",
            "3",
            "--provider",
            "openai",
        ])
        // A log from elsewhere: the person says where it works.
        .arg("--cwd")
        .arg(ws)
        .arg("--base-url")
        .arg(server.base_url())
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home())
        .stdin(std::process::Stdio::null());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let after = std::fs::read(&wal).unwrap();
    assert_eq!(&after[..before.len()], &before[..]);
    let recs = contract::read(&wal);
    contract::check_write_order(&recs);
    let responses = of_kind(&recs, "model.response");
    assert!(responses[0].data.get("stop_reason").is_none());
    assert_eq!(responses[1].data["stop_reason"], "end_turn");
    assert_eq!(responses[1].data["stop_reason_raw"], "stop");
    // The old step's call and result are what the model is sent.
    let msgs = server.requests()[0]["messages"].clone();
    assert!(
        msgs.as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1_0")
    );
    assert_eq!(recs.last().unwrap().data["status"], "completed");
}

fn reasoning_item() -> Value {
    json!({"type": "reasoning", "id": "rs_1", "summary": [],
        "encrypted_content": "gAAAAABoVx1qZ3Jd-encrypted/reasoning+blob=="})
}

/// A Responses API response object.
fn response(output: Value, status: &str) -> MockReply {
    MockReply::json(json!({
        "id": "resp_1", "object": "response", "status": status, "model": "o4-mini",
        "output": output, "incomplete_details": null,
        "usage": {"input_tokens": 50, "output_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 6}}
    }))
}

/// With `store: false` the server keeps nothing: a request that goes on
/// after a reasoning model's call must carry the reasoning item, as it was
/// sent, right before that call.
fn responses_rule() -> Rule {
    Box::new(|req| {
        let input = req.body["input"].as_array().cloned().unwrap_or_default();
        let at = input
            .iter()
            .position(|i| i["call_id"] == "call_x" && i["type"] == "function_call");
        if let Some(at) = at
            && (at == 0 || input[at - 1] != reasoning_item())
        {
            let before = at.checked_sub(1).map_or(Value::Null, |b| input[b].clone());
            return Some(format!(
                "function_call call_x was provided without its reasoning item (got {before})"
            ));
        }
        if req.body["reasoning"] != json!({"effort": "low"}) {
            return Some(format!("reasoning is {}", req.body["reasoning"]));
        }
        None
    })
}

#[test]
fn responses_reasoning_items_go_back_before_their_calls_live_and_after_resume() {
    let sb = Sandbox::new();
    let strict = Strict::start(
        vec![
            response(
                json!([reasoning_item(), {"type": "function_call", "id": "fc_1",
                    "call_id": "call_x", "name": "bash", "arguments": "{\"command\":\"ls\"}",
                    "status": "completed"}]),
                "completed",
            ),
            response(
                json!([{"type": "function_call", "id": "fc_2", "call_id": "call_y",
                    "name": "bash", "arguments": "{\"command\":\"true\"}"}]),
                "completed",
            ),
            response(
                json!([{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Listed.", "annotations": []}]}]),
                "completed",
            ),
        ],
        responses_rule(),
    );
    let mut c = sb.run_cmd(&strict.server.base_url(), "list files");
    c.args([
        "--provider",
        "responses",
        "--reasoning-effort",
        "low",
        "--max-steps",
        "2",
    ]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let mut c = sb.resume_cmd();
    c.args(["--max-steps", "4"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    strict.assert_clean();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Listed.");
    let requests = strict.server.recorded();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    for r in &requests[1..] {
        let input = r.body["input"].as_array().unwrap();
        let at = input.iter().position(|i| i["call_id"] == "call_x").unwrap();
        assert_eq!(input[at - 1], reasoning_item());
    }
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(recs[0].data["provider"], "responses");
    let first = &of_kind(&recs, "model.response")[0].data;
    assert_eq!(first["message"]["native"]["api"], "responses");
    assert_eq!(first["message"]["native"]["output"][0], reasoning_item());
    assert_eq!(first["stop_reason"], "tool_calls");
}

/// The acceptance path for Anthropic with thinking on: `kill -9` during a
/// long bash call of a thinking turn, `resume`, then a fork of the log
/// resumed: every request after the first carries the thinking blocks
/// unchanged before that turn's `tool_use` (the strict server refuses any
/// request that does not).
#[test]
fn anthropic_thinking_survives_kill_9_resume_and_fork() {
    let sb = Sandbox::new();
    let mut content = thinking_blocks();
    content.push(json!({"type": "tool_use", "id": "toolu_t1", "name": "bash",
        "input": {"command": "sleep 41.25"}}));
    let text = |t: &str| {
        MockReply::json(json!({
            "id": "msg", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": t}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 60, "output_tokens": 3}
        }))
    };
    let strict = Strict::start(
        vec![
            MockReply::json(json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                "content": content, "stop_reason": "tool_use",
                "usage": {"input_tokens": 40, "output_tokens": 20}
            })),
            text("Resumed."),
            text("Forked."),
        ],
        anthropic_rule(),
    );
    let mut c = sb.run_cmd(&strict.server.root_url(), "list files");
    c.args(["--provider", "anthropic", "--thinking-budget", "2048"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(sb.wal()).is_ok_and(|l| l.contains("\"tool.started\"")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let mut c = sb.resume_cmd();
    c.env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Resumed.");

    let fork = sb.path("fork.wal");
    let mut c = std::process::Command::new(crate::support::e2e::bin());
    c.current_dir(sb.dir.path())
        .args(["fork"])
        .arg(sb.wal())
        .args(["--at", "1", "-o"])
        .arg(&fork)
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut c = std::process::Command::new(crate::support::e2e::bin());
    c.current_dir(sb.dir.path())
        .arg("resume")
        .arg(&fork)
        .args(["--message", "go on"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .stdin(std::process::Stdio::null());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Forked.");

    strict.assert_clean();
    let requests = strict.server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests[1..] {
        let assistant = &r["messages"][1];
        assert_eq!(assistant["content"][0], thinking_blocks()[0], "{r}");
        assert_eq!(assistant["content"][1], thinking_blocks()[1], "{r}");
        assert_eq!(assistant["content"][2]["id"], "toolu_t1");
    }
    for wal in [sb.wal(), fork] {
        contract::check_write_order(&contract::read(&wal));
    }
}
