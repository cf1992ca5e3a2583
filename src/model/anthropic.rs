//! The Anthropic Messages API client (plain JSON, or SSE with `--stream`,
//! see [`super::anthropic_stream`]): the system prompt goes
//! top-level, tool calls become `tool_use` blocks and results `tool_result`
//! blocks in user messages, consecutive same-role messages are merged.

use super::anthropic_stream::MessageStream;
use super::error::ModelError;
use super::http::stream_events;
use super::http::{Endpoint, build_client, checked_base_url, native_attempt, with_retries};
use super::{Encoded, ModelReply, ModelRequest, ProviderConfig, Purpose};
use crate::event::{Message, Native, NativeItems, Role, StopReason, ToolCall, Usage};
use serde_json::{Value, json};

/// API version header value.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` sent when neither the config nor the model table gives one
/// (the API requires the member).
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 8192;

/// Client for `POST {base_url}/v1/messages`.
#[derive(Debug)]
pub struct AnthropicProvider {
    cfg: ProviderConfig,
    endpoint: Endpoint,
    client: reqwest::Client,
}

impl AnthropicProvider {
    /// The model asked from the next request on.
    pub fn set_model(&mut self, model: &str) {
        self.cfg.model = model.to_string();
    }

    pub fn new(cfg: ProviderConfig) -> Result<Self, ModelError> {
        let url = format!("{}/v1/messages", checked_base_url(&cfg)?);
        let mut headers = vec![
            (
                reqwest::header::HeaderName::from_static("anthropic-version"),
                ANTHROPIC_VERSION,
                false,
            ),
            (reqwest::header::CONTENT_TYPE, "application/json", false),
        ];
        if let Some(key) = &cfg.api_key {
            headers.push((
                reqwest::header::HeaderName::from_static("x-api-key"),
                key,
                true,
            ));
        }
        let endpoint = Endpoint::new(&cfg, &url, &headers)?;
        let client = build_client(&cfg)?;
        Ok(AnthropicProvider {
            cfg,
            endpoint,
            client,
        })
    }

    pub(crate) fn encode(&self, req: &ModelRequest) -> Encoded {
        let budget = self.cfg.thinking_budget;
        // The reply's limit counts the thinking: without one given, room
        // for the budget and an answer.
        let max = self.cfg.max_output_tokens.unwrap_or_else(|| {
            budget.map_or(ANTHROPIC_DEFAULT_MAX_TOKENS, |b| {
                b.saturating_add(ANTHROPIC_DEFAULT_MAX_TOKENS)
            })
        });
        let mut body = request_body(&self.cfg.model, req, max);
        if self.cfg.stream {
            body["stream"] = json!(true);
        }
        if let Some(b) = budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": b});
        }
        // The documented form: `output_config.effort` (low, medium, high;
        // the config refuses the OpenAI-only none and minimal).
        if let Some(e) = self.cfg.reasoning_effort {
            body["output_config"] = json!({"effort": e.as_str()});
        }
        super::native::encode(&body, &req.messages)
    }

    pub(crate) async fn complete(
        &self,
        req: &ModelRequest,
        body: &Encoded,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        with_retries(&self.cfg, async || {
            if self.cfg.stream {
                match self.streamed(body, on_text).await {
                    Ok(v) => parse_response(&v, req.step),
                    Err(e) => Err(e),
                }
            } else {
                native_attempt(
                    &self.cfg,
                    self.endpoint.post(&self.client, body),
                    "content",
                    |v| parse_response(v, req.step),
                    on_text,
                )
                .await
            }
        })
        .await
    }

    /// One streamed attempt: the message as a non-streaming body.
    async fn streamed(
        &self,
        body: &Encoded,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Value, ModelError> {
        let mut message = MessageStream::default();
        stream_events(&self.cfg, self.endpoint.post(&self.client, body), |data| {
            message.push(data, on_text).map(|whole| whole.then_some(()))
        })
        .await?;
        message.finish()
    }
}

/// The request body.
pub(crate) fn request_body(model: &str, req: &ModelRequest, max_tokens: u32) -> Value {
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in req.messages.iter().filter(|m| m.role != Role::System) {
        let (role, blocks) = blocks_of(m);
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    mark_cache_points(&mut messages);
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": messages,
    });
    // The first breakpoint: the tools and the system prompt, which come
    // first in the prompt and never change within a run.
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    if !system.is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": system.join("\n\n"),
            "cache_control": cache_point(),
        }]);
    } else if let Some(last) = tools.last_mut() {
        last["cache_control"] = cache_point();
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(std::mem::take(&mut tools));
        if req.purpose == Purpose::Summary {
            // The run's tools, so the prefix is the run's; none may be called.
            body["tool_choice"] = json!({"type": "none"});
        }
    }
    body
}

/// `cache_control` of a prompt-cache breakpoint (the default five-minute
/// lifetime).
fn cache_point() -> Value {
    json!({"type": "ephemeral"})
}

/// Marks the request's breakpoints in its messages: the last message (the
/// prefix the next request reads from the cache) and the last user message
/// before the latest assistant turn, which ended the previous request, so
/// that prefix is found however many blocks the step added (the API looks
/// back only about 20 blocks from a breakpoint). With the system prompt's,
/// at most three of the four the API allows.
fn mark_cache_points(messages: &mut [(&'static str, Vec<Value>)]) {
    let Some(last) = messages.len().checked_sub(1) else {
        return;
    };
    let previous = messages[..last]
        .iter()
        .rposition(|(role, _)| *role == "assistant")
        .and_then(|a| messages[..a].iter().rposition(|(role, _)| *role == "user"));
    for i in std::iter::once(last).chain(previous) {
        // A thinking block takes no breakpoint (and goes back unchanged):
        // the turn's last other block does.
        if let Some(block) = messages[i].1.iter_mut().rev().find(|b| !is_thinking(b)) {
            block["cache_control"] = cache_point();
        }
    }
}

fn blocks_of(m: &Message) -> (&'static str, Vec<Value>) {
    let mut blocks = Vec::new();
    match m.role {
        Role::System | Role::User => {
            if !m.content.is_empty() {
                blocks.push(json!({"type": "text", "text": m.content}));
            }
            ("user", blocks)
        }
        Role::Tool => {
            blocks.push(json!({
                "type": "tool_result",
                "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                "content": m.content,
                "is_error": m.is_error,
            }));
            ("user", blocks)
        }
        Role::Assistant => {
            // Thinking first, as received: the API checks its signature.
            if let Some(native) = Native::of(m, Native::ANTHROPIC) {
                blocks.extend(
                    native["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|b| is_thinking(b))
                        .cloned(),
                );
            }
            if !m.content.is_empty() {
                blocks.push(json!({"type": "text", "text": m.content}));
            }
            for c in &m.tool_calls {
                blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name,
                    "input": input_of(&c.arguments)}));
            }
            ("assistant", blocks)
        }
    }
}

/// A `thinking` or `redacted_thinking` block.
fn is_thinking(block: &Value) -> bool {
    matches!(
        block.get("type").and_then(Value::as_str),
        Some("thinking" | "redacted_thinking")
    )
}

/// `tool_use.input` must be an object: malformed arguments are carried as
/// `{"raw_arguments": "..."}` so the model still sees what it sent.
fn input_of(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({"raw_arguments": arguments}),
    }
}

/// Reads a Messages API response.
pub(crate) fn parse_response(v: &Value, step: u64) -> Result<ModelReply, ModelError> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(ModelError::BadResponse(format!(
            "server reported an error: {}",
            v.get("error").unwrap_or(v)
        )));
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::BadResponse("no content array in the response".into()))?;
    let mut text = String::new();
    let mut calls = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ModelError::BadResponse(format!("content[{i}] tool_use has no name"))
                })?;
                let id = match b.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => ToolCall::fallback_id(step, calls.len()),
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(ToolCall {
                    id,
                    name: name.to_string(),
                    arguments: input.to_string(),
                });
            }
            _ => {}
        }
    }
    let n = |k: &str| {
        v.get("usage")
            .and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let raw = v.get("stop_reason").and_then(Value::as_str);
    let mut message = Message::assistant(text, calls);
    if blocks.iter().any(is_thinking) {
        message.native = Some(NativeItems::from_value(
            &json!({"api": Native::ANTHROPIC, "content": blocks}),
        ));
    }
    let stop = match raw {
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("refusal") => StopReason::Refusal,
        Some("pause_turn") => StopReason::Pause,
        Some("tool_use") => StopReason::ToolCalls,
        _ => super::natural_stop(&message),
    };
    Ok(ModelReply {
        message,
        usage: Usage {
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            cached_input_tokens: n("cache_read_input_tokens"),
            cache_write_tokens: n("cache_creation_input_tokens"),
            reasoning_tokens: 0,
        },
        stop_reason: stop,
        stop_reason_raw: raw.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolSpec;

    #[test]
    fn tool_results_merge_and_system_goes_top_level() {
        let calls = vec![
            ToolCall {
                id: "a".into(),
                name: "bash".into(),
                arguments: "{\"command\":\"ls\"}".into(),
            },
            ToolCall {
                id: "b".into(),
                name: "read".into(),
                arguments: "not json".into(),
            },
        ];
        let req = ModelRequest {
            messages: vec![
                Message::system("sys"),
                Message::user("task"),
                Message::user("more"),
                Message::assistant("thinking", calls),
                Message::tool("a", "bash", "files", false),
                Message::tool("b", "read", "bad args", true),
                Message::user("[Resumed] notice"),
            ]
            .into(),
            tools: vec![ToolSpec {
                name: "bash".into(),
                description: "run".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            purpose: Purpose::Step,
            step: 3,
            cache_key: None,
        };
        let body = request_body("claude", &req, 1234);
        assert_eq!(
            body,
            json!({
                "model": "claude",
                "max_tokens": 1234,
                "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
                "tools": [{"name": "bash", "description": "run", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "task"},
                        {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "thinking"},
                        {"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "ls"}},
                        {"type": "tool_use", "id": "b", "name": "read",
                         "input": {"raw_arguments": "not json"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "files", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "b", "content": "bad args", "is_error": true},
                        {"type": "text", "text": "[Resumed] notice",
                         "cache_control": {"type": "ephemeral"}}]}
                ]
            })
        );
        // The summarizer: the same prefix, the same tools, none callable.
        let summary = ModelRequest {
            purpose: Purpose::Summary,
            ..req.clone()
        };
        let s = request_body("claude", &summary, 1234);
        assert_eq!(s["tool_choice"], json!({"type": "none"}));
        assert_eq!(s["tools"], body["tools"]);
        assert_eq!(s["messages"], body["messages"]);
        assert_eq!(s["system"], body["system"]);
    }

    #[test]
    fn breakpoints_are_at_most_four_and_skip_assistant_turns() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        let mut messages = vec![Message::system("sys"), Message::user("task")];
        for i in 0..5 {
            let id = format!("c{i}");
            messages.push(Message::assistant("", vec![call(&id)]));
            messages.push(Message::tool(&id, "bash", "out", false));
        }
        let req = ModelRequest {
            messages: messages.into(),
            tools: std::sync::Arc::default(),
            purpose: Purpose::Step,
            step: 6,
            cache_key: None,
        };
        let body = request_body("claude", &req, 10);
        let text = body.to_string();
        assert_eq!(text.matches("cache_control").count(), 3, "{text}");
        let marked: Vec<usize> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.to_string().contains("cache_control"))
            .map(|(i, _)| i)
            .collect();
        // The last message and the one that ended the previous request.
        assert_eq!(marked, vec![8, 10]);
        assert!(body.get("tools").is_none(), "no tools, no tool list");
    }

    #[test]
    fn parses_text_and_tool_use() {
        let v = json!({"id": "msg", "type": "message", "role": "assistant", "content": [
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}],
            "usage": {"input_tokens": 10, "output_tokens": 4}, "stop_reason": "tool_use"});
        let reply = parse_response(&v, 1).unwrap();
        assert_eq!(
            reply.message,
            Message::assistant(
                "ok",
                vec![ToolCall {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"ls\"}".into()
                }]
            )
        );
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 4,
                ..Usage::default()
            }
        );
    }
}
