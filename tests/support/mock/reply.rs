//! What the mock server answers: chat replies (rendered as JSON or as SSE,
//! whichever the request asked for), error statuses, dropped connections,
//! delays, raw JSON, and replies computed from the request.

use super::server::RecordedRequest;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// One tool call in a scripted reply.
#[derive(Debug, Clone)]
pub struct MockCall {
    /// `None`: the server makes `call_<request index>_<i>`.
    pub id: Option<String>,
    pub name: String,
    /// Raw argument string, sent as is.
    pub arguments: String,
}

/// A reply computed from the request.
pub type ReplyFn = Arc<dyn Fn(&RecordedRequest) -> MockReply + Send + Sync>;

/// One scripted answer.
#[derive(Clone)]
pub enum MockReply {
    /// An assistant message. Sent as SSE when the request has `"stream": true`
    /// (content in small pieces, each call's arguments in three fragments,
    /// id and name in the first), otherwise as one JSON body. Both carry
    /// extra fields a client must ignore.
    Chat {
        content: Option<String>,
        tool_calls: Vec<MockCall>,
        /// (prompt_tokens, completion_tokens); `None` sends no usage.
        usage: Option<(u64, u64)>,
    },
    /// An HTTP error status.
    Status {
        code: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// 200 with this JSON body, as is (e.g. an Anthropic response).
    Json(Value),
    /// The connection is cut before a complete response arrives.
    Drop,
    /// The first half of the inner reply's body is sent (as a stream when
    /// the request asked for one), then the connection is cut.
    Cut(Box<MockReply>),
    /// Waits, then answers (to test timeouts).
    Delay(Duration, Box<MockReply>),
    /// Decided when the request arrives.
    Func(ReplyFn),
}

impl std::fmt::Debug for MockReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MockReply::Chat {
                content,
                tool_calls,
                usage,
            } => f
                .debug_struct("Chat")
                .field("content", content)
                .field("tool_calls", tool_calls)
                .field("usage", usage)
                .finish(),
            MockReply::Status { code, .. } => write!(f, "Status({code})"),
            MockReply::Json(v) => write!(f, "Json({v})"),
            MockReply::Drop => f.write_str("Drop"),
            MockReply::Cut(r) => write!(f, "Cut({r:?})"),
            MockReply::Delay(d, r) => write!(f, "Delay({d:?}, {r:?})"),
            MockReply::Func(_) => f.write_str("Func"),
        }
    }
}

/// Usage sent when a chat reply does not say otherwise.
pub const DEFAULT_USAGE: (u64, u64) = (10, 5);

impl MockReply {
    /// A final text answer (no tool calls).
    pub fn text(content: &str) -> Self {
        MockReply::Chat {
            content: Some(content.to_string()),
            tool_calls: Vec::new(),
            usage: Some(DEFAULT_USAGE),
        }
    }

    /// One tool call with JSON arguments.
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls(vec![(name, arguments)])
    }

    /// Several tool calls with JSON arguments, in order.
    pub fn tool_calls(calls: Vec<(&str, Value)>) -> Self {
        MockReply::Chat {
            content: None,
            tool_calls: calls
                .into_iter()
                .map(|(name, args)| MockCall {
                    id: None,
                    name: name.to_string(),
                    arguments: args.to_string(),
                })
                .collect(),
            usage: Some(DEFAULT_USAGE),
        }
    }

    /// One tool call whose argument string is sent exactly as given (for
    /// malformed calls).
    pub fn raw_tool_call(name: &str, raw_arguments: &str) -> Self {
        MockReply::Chat {
            content: None,
            tool_calls: vec![MockCall {
                id: None,
                name: name.to_string(),
                arguments: raw_arguments.to_string(),
            }],
            usage: Some(DEFAULT_USAGE),
        }
    }

    /// Sets the text of a chat reply.
    pub fn with_content(mut self, text: &str) -> Self {
        if let MockReply::Chat { content, .. } = &mut self {
            *content = Some(text.to_string());
        } else {
            panic!("with_content applies to chat replies only");
        }
        self
    }

    /// Sets the usage of a chat reply.
    pub fn with_usage(mut self, prompt: u64, completion: u64) -> Self {
        if let MockReply::Chat { usage, .. } = &mut self {
            *usage = Some((prompt, completion));
        } else {
            panic!("with_usage applies to chat replies only");
        }
        self
    }

    /// A chat reply without a `usage` member.
    pub fn without_usage(mut self) -> Self {
        if let MockReply::Chat { usage, .. } = &mut self {
            *usage = None;
        } else {
            panic!("without_usage applies to chat replies only");
        }
        self
    }

    /// Gives the tool calls of a chat reply these ids, in order.
    pub fn with_ids(mut self, ids: &[&str]) -> Self {
        if let MockReply::Chat { tool_calls, .. } = &mut self {
            for (call, id) in tool_calls.iter_mut().zip(ids) {
                call.id = Some(id.to_string());
            }
        } else {
            panic!("with_ids applies to chat replies only");
        }
        self
    }

    /// An error status with a JSON error body.
    pub fn status(code: u16) -> Self {
        MockReply::Status {
            code,
            retry_after: None,
            body: json!({"error": {"message": format!("mock status {code}"), "type": "mock"}})
                .to_string(),
        }
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after: &str) -> Self {
        MockReply::Status {
            code: 429,
            retry_after: Some(retry_after.to_string()),
            body: json!({"error": {"message": "rate limited", "type": "rate_limit"}}).to_string(),
        }
    }

    /// The connection is cut.
    pub fn drop_connection() -> Self {
        MockReply::Drop
    }

    /// Half of this reply, then the connection is cut.
    pub fn cut(self) -> Self {
        MockReply::Cut(Box::new(self))
    }

    /// 200 with this JSON body.
    pub fn json(body: Value) -> Self {
        MockReply::Json(body)
    }

    /// This reply after a wait.
    pub fn delayed(self, wait: Duration) -> Self {
        MockReply::Delay(wait, Box::new(self))
    }

    /// A reply computed from the request.
    pub fn from_fn(f: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static) -> Self {
        MockReply::Func(Arc::new(f))
    }

    /// Answers with the content of the request's last message.
    pub fn echo() -> Self {
        Self::from_fn(|req| {
            let last = req
                .messages()
                .last()
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            MockReply::text(&last)
        })
    }
}

/// Ids given to the calls of a reply to request number `index`.
pub(crate) fn call_ids(calls: &[MockCall], index: usize) -> Vec<String> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| c.id.clone().unwrap_or_else(|| format!("call_{index}_{i}")))
        .collect()
}

/// The plain JSON body of a chat reply.
pub(crate) fn chat_json(
    content: &Option<String>,
    calls: &[MockCall],
    ids: &[String],
    usage: Option<(u64, u64)>,
) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .zip(ids)
        .map(|(c, id)| {
            json!({"id": id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": content, "refusal": null,
        "annotations": []});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut body = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 1_700_000_000,
        "model": "mock-model", "system_fingerprint": "fp_mock", "service_tier": "default",
        "x_mock_vendor": {"nested": [1, 2, 3]},
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
    });
    if let Some((p, c)) = usage {
        body["usage"] = json!({"prompt_tokens": p, "completion_tokens": c,
            "total_tokens": p + c, "prompt_tokens_details": {"cached_tokens": 0}});
    }
    body
}

/// The SSE body of a chat reply, as the list of event payloads.
pub(crate) fn chat_sse(
    content: &Option<String>,
    calls: &[MockCall],
    ids: &[String],
    usage: Option<(u64, u64)>,
    include_usage: bool,
) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": "mock-model", "x_mock_vendor": true,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(text) = content {
        for piece in split_chars(text, 4) {
            events.push(chunk(json!({"content": piece}), Value::Null));
        }
    }
    for (index, (call, id)) in calls.iter().zip(ids).enumerate() {
        let parts = split_in(&call.arguments, 3);
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": call.name, "arguments": parts[0]}}]}),
            Value::Null,
        ));
        for part in &parts[1..] {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(json!({}), json!(finish)));
    if include_usage && let Some((p, c)) = usage {
        events.push(
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
            "choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c,
            "total_tokens": p + c}}),
        );
    }
    let mut out = String::from(": mock stream\n\n");
    for e in events {
        out.push_str(&format!("data: {e}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// Pieces of at most `n` characters (at least one piece).
fn split_chars(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// Exactly `parts` pieces (some may be empty), split on character boundaries.
fn split_in(s: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(parts).max(1);
    let mut out: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    while out.len() < parts {
        out.push(String::new());
    }
    out
}
