//! The scripted session of section 16 ("Pay only for new tokens"), shared by
//! the tests (tests/agent/prompt_cache.rs) and the benchmark
//! (benches/prompt_cache.rs): a server that plays each provider through a
//! run whose plan changes every few steps, and the measure of what a prompt
//! cache could not have served, computed from the captured requests.
//!
//! For each request after the first, its parts (the tools, the system
//! prompt, each message or input item, with Anthropic's `cache_control`
//! markers taken out) are compared with the previous request's: the bytes
//! from the first part that differs are *uncached*, and the bytes the
//! request grew by are the *floor*. Their ratio is 1.00 when every request
//! only appends.

use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The run's length, in model requests.
pub const STEPS: u64 = 60;
/// The plan changes on every step `n` with `n % PLAN_EVERY == 1`.
pub const PLAN_EVERY: u64 = 4;
/// The plan's items: enough that a plan message is a real share of a step.
pub const ITEMS: u64 = 16;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Api {
    Chat,
    Responses,
    Anthropic,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::Chat, Api::Responses, Api::Anthropic];

    pub fn provider(self) -> &'static str {
        match self {
            Api::Chat => "openai",
            Api::Responses => "responses",
            Api::Anthropic => "anthropic",
        }
    }

    /// The usage a provider that caches the prefix reports for a request
    /// of `prompt` tokens: all but the newest 150 read from the cache.
    pub fn usage(self, prompt: u64) -> Value {
        let prompt = prompt.max(200);
        match self {
            Api::Chat => json!({"prompt_tokens": prompt, "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": prompt - 150}}),
            Api::Responses => json!({"input_tokens": prompt, "output_tokens": 20,
                "input_tokens_details": {"cached_tokens": prompt - 150},
                "output_tokens_details": {"reasoning_tokens": 0}}),
            Api::Anthropic => json!({"input_tokens": 150, "output_tokens": 20,
                "cache_read_input_tokens": prompt - 150, "cache_creation_input_tokens": 150}),
        }
    }

    /// A reply making `calls` (name, arguments), or answering `text`, with
    /// `usage` in the provider's own form.
    pub fn reply(self, n: u64, calls: &[(&str, Value)], text: &str, usage: Value) -> MockReply {
        let id = |i: usize| format!("call_{n}_{i}");
        let body = match self {
            Api::Chat => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"id": id(i), "type": "function",
                            "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
                let mut message = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    message =
                        json!({"role": "assistant", "content": null, "tool_calls": tool_calls});
                }
                json!({"id": format!("cc_{n}"), "object": "chat.completion", "model": "test-model",
                    "choices": [{"index": 0, "message": message,
                        "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                    "usage": usage})
            }
            Api::Responses => {
                let mut output: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"type": "function_call", "id": format!("fc_{n}_{i}"),
                            "call_id": id(i), "name": name, "arguments": args.to_string(),
                            "status": "completed"})
                    })
                    .collect();
                if calls.is_empty() {
                    output.push(json!({"type": "message", "id": format!("msg_{n}"),
                        "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}));
                }
                json!({
                    "id": format!("resp_{n}"), "object": "response", "status": "completed",
                    "model": "test-model", "output": output, "incomplete_details": null,
                    "usage": usage
                })
            }
            Api::Anthropic => {
                let mut content: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"type": "tool_use", "id": id(i), "name": name, "input": args})
                    })
                    .collect();
                if calls.is_empty() {
                    content.push(json!({"type": "text", "text": text}));
                }
                json!({
                    "id": format!("msg_{n}"), "type": "message", "role": "assistant",
                    "model": "test-model", "content": content,
                    "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" },
                    "usage": usage
                })
            }
        };
        MockReply::json(body)
    }

    /// The request's parts, in prompt order, as the cache sees them: the
    /// tools, the system prompt, then each message (or input item), with
    /// the cache breakpoint markers taken out (they mark the prefix, they
    /// are not part of it).
    pub fn parts(self, body: &Value) -> Vec<String> {
        let mut body = body.clone();
        strip_cache_control(&mut body);
        let mut parts = vec![body["tools"].to_string()];
        match self {
            Api::Chat => parts.extend(array(&body["messages"]).iter().map(Value::to_string)),
            Api::Responses => parts.extend(array(&body["input"]).iter().map(Value::to_string)),
            Api::Anthropic => {
                parts.push(body["system"].to_string());
                parts.extend(array(&body["messages"]).iter().map(Value::to_string));
            }
        }
        parts
    }

    /// The text of the request's last `[Current plan]` message.
    pub fn last_plan(self, body: &Value) -> Option<String> {
        let texts: Vec<String> = match self {
            Api::Chat => array(&body["messages"])
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str().map(str::to_string))
                .collect(),
            Api::Responses => array(&body["input"])
                .iter()
                .filter(|m| m["type"] == "message" && m["role"] == "user")
                .filter_map(|m| m["content"].as_str().map(str::to_string))
                .collect(),
            Api::Anthropic => array(&body["messages"])
                .iter()
                .filter(|m| m["role"] == "user")
                .flat_map(|m| array(&m["content"]))
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect(),
        };
        texts
            .into_iter()
            .rev()
            .find(|t| t.starts_with("[Current plan]"))
    }
}

pub fn array(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

pub fn strip_cache_control(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("cache_control");
            m.values_mut().for_each(strip_cache_control);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

/// Uncached bytes and floor bytes over a sequence of requests (each given
/// as its parts), skipping the first request and each `fresh` one (the
/// first after a compaction or a resume, which may differ).
pub fn uncached_and_floor(requests: &[Vec<String>], fresh: &[usize]) -> (u64, u64) {
    let bytes = |parts: &[String]| parts.iter().map(|p| p.len() as u64).sum::<u64>();
    let (mut uncached, mut floor) = (0, 0);
    for i in 1..requests.len() {
        if fresh.contains(&i) {
            continue;
        }
        let (prev, cur) = (&requests[i - 1], &requests[i]);
        let same = prev.iter().zip(cur).take_while(|(a, b)| a == b).count();
        uncached += bytes(&cur[same..]);
        floor += bytes(cur).saturating_sub(bytes(prev));
    }
    (uncached, floor)
}

/// The plan of step group `k`, of `items` items: those before `k` done,
/// `k` in progress.
pub fn plan_args(k: u64, items: u64) -> Value {
    let items: Vec<Value> = (1..=items)
        .map(|i| {
            let status = match i.cmp(&k) {
                std::cmp::Ordering::Less => "done",
                std::cmp::Ordering::Equal => "in_progress",
                std::cmp::Ordering::Greater => "pending",
            };
            json!({"id": i.to_string(), "text": format!("part {i} of the work, with its checks"),
                "status": status})
        })
        .collect();
    json!({"items": items})
}

/// The scripted run: on step `n`, a bash call, and on every fourth step an
/// update_plan call before it; the last step answers. `usage` says what
/// the server reports for a request.
pub fn script(
    api: Api,
    usage: impl Fn(&RecordedRequest) -> Value + Send + Sync + 'static,
) -> MockServer {
    script_with(api, ITEMS, usage)
}

/// [`script`] with plans of `items` items (a small model's context holds a
/// 60-step run with short plans only).
pub fn script_with(
    api: Api,
    items: u64,
    usage: impl Fn(&RecordedRequest) -> Value + Send + Sync + 'static,
) -> MockServer {
    let n = Arc::new(AtomicU64::new(0));
    MockServer::start_with(Vec::new(), move |req| {
        // The summarizer's request is answered with a summary.
        if req.is_summary() {
            return api.reply(
                0,
                &[],
                "Summary: parts done so far, checks pass.",
                usage(req),
            );
        }
        let n = n.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= STEPS {
            return api.reply(n, &[], "All parts done.", usage(req));
        }
        let mut calls = Vec::new();
        if n % PLAN_EVERY == 1 {
            calls.push(("update_plan", plan_args(n / PLAN_EVERY + 1, items)));
        }
        calls.push((
            "bash",
            json!({"command": format!("echo step {n}; seq 1 5")}),
        ));
        api.reply(n, &calls, "", usage(req))
    })
}

/// About four bytes a token, all but the newest read from the cache.
pub fn estimated(api: Api) -> impl Fn(&RecordedRequest) -> Value + Send + Sync + 'static {
    move |req| api.usage(req.body.to_string().len() as u64 / 4)
}

/// The request a proxy sends llama.cpp for `req`: the same prompt, one
/// token of answer (what is measured is the prompt), no stream.
pub fn one_token(api: Api, req: &RecordedRequest) -> (String, Value) {
    let mut body = req.body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("stream");
        obj.remove("stream_options");
        match api {
            Api::Responses => obj.insert("max_output_tokens".into(), json!(16)),
            _ => obj.insert("max_tokens".into(), json!(1)),
        };
    }
    (req.path.clone(), body)
}
