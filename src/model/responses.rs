//! The OpenAI Responses API client: `POST {base_url}/responses` with
//! `store: false` (the server keeps nothing; every request carries the
//! whole conversation) and `include: ["reasoning.encrypted_content"]`, so a
//! reasoning model's reasoning comes back as `reasoning` items whose
//! `encrypted_content` is sent back, as received, before the
//! `function_call` items it preceded (see [`crate::event::Native`]).
//!
//! Plain JSON or SSE: a stream's text deltas are shown as they come, and its
//! `response.completed` (or `response.incomplete`) event carries the whole
//! response, read like a plain one.

use super::error::ModelError;
use super::http::{Endpoint, build_client, native_attempt, with_retries};
use super::http::{bearer_endpoint, stream_events};
use super::{Encoded, ModelReply, ModelRequest, ProviderConfig, Purpose};
use crate::event::{Message, Native, NativeItems, Role, StopReason, ToolCall, Usage};
use serde_json::{Value, json};

/// Client for `POST {base_url}/responses`.
#[derive(Debug)]
pub struct ResponsesProvider {
    cfg: ProviderConfig,
    endpoint: Endpoint,
    client: reqwest::Client,
}

impl ResponsesProvider {
    /// Asks another model from the next request on (a chat's `/model`).
    pub fn set_model(&mut self, model: &str) {
        self.cfg.model = model.to_string();
    }

    pub fn new(cfg: ProviderConfig) -> Result<Self, ModelError> {
        let endpoint = bearer_endpoint(&cfg, "responses")?;
        let client = build_client(&cfg)?;
        Ok(ResponsesProvider {
            cfg,
            endpoint,
            client,
        })
    }

    pub(crate) fn encode(&self, req: &ModelRequest) -> Encoded {
        super::native::encode(&request_body(&self.cfg, req), &req.messages)
    }

    pub(crate) async fn complete(
        &self,
        req: &ModelRequest,
        body: &Encoded,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        with_retries(&self.cfg, async || {
            if self.cfg.stream {
                self.streamed(body, req.step, on_text).await
            } else {
                native_attempt(
                    &self.cfg,
                    self.endpoint.post(&self.client, body),
                    "output",
                    |v| parse_response(v, req.step),
                    on_text,
                )
                .await
            }
        })
        .await
    }

    async fn streamed(
        &self,
        body: &Encoded,
        step: u64,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        stream_events(&self.cfg, self.endpoint.post(&self.client, body), |data| {
            stream_event(data, step, on_text)
        })
        .await?
        .ok_or_else(|| {
            ModelError::Transport("the stream ended before the response was complete".into())
        })
    }
}

/// One stream event: text shown, the reply at the end, an error as one.
fn stream_event(
    data: &str,
    step: u64,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<Option<ModelReply>, ModelError> {
    let data = data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    let v: Value = serde_json::from_str(data)
        .map_err(|e| ModelError::BadResponse(format!("stream event is not JSON ({e})")))?;
    match v["type"].as_str() {
        Some("response.output_text.delta") => {
            if let Some(d) = v["delta"].as_str().filter(|d| !d.is_empty()) {
                on_text(d);
            }
            Ok(None)
        }
        Some("response.completed" | "response.incomplete") => {
            let mut reply = parse_response(&v["response"], step)?;
            super::native::keep_server_order(&mut reply, data.as_bytes(), &["response", "output"]);
            Ok(Some(reply))
        }
        Some("response.failed") => Err(stream_error(&v["response"]["error"])),
        Some("error") => Err(stream_error(&v)),
        _ => Ok(None),
    }
}

/// An error event: a server error (retried) unless it says the request
/// itself is wrong.
fn stream_error(e: &Value) -> ModelError {
    let code = e["code"].as_str().unwrap_or_default();
    let message = e["message"].as_str().unwrap_or("(no message)");
    let status = if code.contains("context_length") || code.contains("invalid") {
        400
    } else if code.contains("rate_limit") {
        429
    } else {
        500
    };
    ModelError::Status {
        status,
        body: json!({"error": {"message": message, "code": code}}).to_string(),
        retry_after: None,
    }
}

/// The request body.
pub(crate) fn request_body(cfg: &ProviderConfig, req: &ModelRequest) -> Value {
    let mut input = Vec::new();
    for m in &req.messages {
        items_of(m, &mut input);
    }
    let mut body = json!({
        "model": cfg.model,
        "input": input,
        "store": false,
        "include": ["reasoning.encrypted_content"],
    });
    if cfg.stream {
        body["stream"] = json!(true);
    }
    if let Some(max) = cfg.max_output_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if let Some(effort) = cfg.reasoning_effort {
        body["reasoning"] = json!({"effort": effort.as_str()});
    }
    if let Some(key) = &req.cache_key {
        body["prompt_cache_key"] = json!(key);
    }
    // The summarizer sees the run's tools too (its prefix is the run's) and
    // may call none of them.
    if req.purpose == Purpose::Summary && !req.tools.is_empty() {
        body["tool_choice"] = json!("none");
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                    "parameters": t.parameters})
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The input items of one message.
fn items_of(m: &Message, out: &mut Vec<Value>) {
    let text = |role: &str| json!({"type": "message", "role": role, "content": m.content});
    match m.role {
        Role::System => out.push(text("system")),
        Role::User => out.push(text("user")),
        Role::Tool => out.push(json!({
            "type": "function_call_output",
            "call_id": m.tool_call_id.clone().unwrap_or_default(),
            "output": m.content,
        })),
        Role::Assistant => assistant_items(m, out),
    }
}

/// An assistant turn: its native output items in their order when it has
/// them (reasoning items as received; the text and the calls as the log
/// has them, so the call ids match their outputs), else its text then its
/// calls.
fn assistant_items(m: &Message, out: &mut Vec<Value>) {
    let text = json!({"type": "message", "role": "assistant", "content": m.content});
    let call = |c: &ToolCall| {
        json!({"type": "function_call", "call_id": c.id, "name": c.name,
            "arguments": c.arguments})
    };
    let mut calls = m.tool_calls.iter();
    let mut text_sent = m.content.is_empty();
    if let Some(native) = Native::of(m, Native::RESPONSES) {
        for item in native["output"].as_array().into_iter().flatten() {
            match item["type"].as_str() {
                Some("reasoning") => out.push(item.clone()),
                Some("message") if !text_sent => {
                    out.push(text.clone());
                    text_sent = true;
                }
                Some("function_call") => {
                    if let Some(c) = calls.next() {
                        out.push(call(c));
                    }
                }
                _ => {}
            }
        }
    }
    if !text_sent {
        out.push(text);
    }
    out.extend(calls.map(call));
}

/// Reads a response object.
pub(crate) fn parse_response(v: &Value, step: u64) -> Result<ModelReply, ModelError> {
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(ModelError::BadResponse(format!(
            "server reported an error: {err}"
        )));
    }
    let output = v["output"]
        .as_array()
        .ok_or_else(|| ModelError::BadResponse("no output array in the response".into()))?;
    let mut text = String::new();
    let mut refusal = String::new();
    let mut calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("output_text") => text.push_str(part["text"].as_str().unwrap_or("")),
                        Some("refusal") => {
                            refusal.push_str(part["refusal"].as_str().unwrap_or(""));
                        }
                        _ => {}
                    }
                }
            }
            Some("function_call") => {
                let name = item["name"].as_str().ok_or_else(|| {
                    ModelError::BadResponse(format!("output[{i}] function_call has no name"))
                })?;
                let id = match item["call_id"].as_str() {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => ToolCall::fallback_id(step, calls.len()),
                };
                let arguments = match &item["arguments"] {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                calls.push(ToolCall {
                    id,
                    name: name.to_string(),
                    arguments,
                });
            }
            _ => {}
        }
    }
    let status = v["status"].as_str();
    let incomplete = v["incomplete_details"]["reason"].as_str();
    let mut message = Message::assistant(text, calls);
    let stop = if refusal.is_empty() {
        match (status, incomplete) {
            (Some("incomplete"), Some("content_filter")) => StopReason::ContentFilter,
            (Some("incomplete"), _) => StopReason::MaxTokens,
            _ => super::natural_stop(&message),
        }
    } else {
        if message.content.is_empty() {
            message.content.clone_from(&refusal);
        }
        StopReason::Refusal
    };
    if output.iter().any(|i| i["type"] == "reasoning") {
        message.native = Some(NativeItems::from_value(
            &json!({"api": Native::RESPONSES, "output": output}),
        ));
    }
    let u = &v["usage"];
    let input = u["input_tokens"].as_u64().unwrap_or(0);
    let cached = u["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
        .min(input);
    let usage = Usage {
        input_tokens: input - cached,
        output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
        cached_input_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: u["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap_or(0),
    };
    Ok(ModelReply {
        message,
        usage,
        stop_reason: stop,
        stop_reason_raw: incomplete.or(status).map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_items_go_back_before_the_calls_they_preceded() {
        let output = json!([
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA=="},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "bash",
             "arguments": "{\"command\":\"ls\"}"}
        ]);
        let reply = parse_response(
            &json!({"status": "completed", "output": output,
                "usage": {"input_tokens": 9, "output_tokens": 4}}),
            1,
        )
        .unwrap();
        assert_eq!(reply.stop_reason, StopReason::ToolCalls);
        assert_eq!(reply.message.tool_calls[0].id, "call_a");
        let mut items = Vec::new();
        items_of(&reply.message, &mut items);
        assert_eq!(
            items,
            vec![
                output[0].clone(),
                json!({"type": "function_call", "call_id": "call_a", "name": "bash",
                    "arguments": "{\"command\":\"ls\"}"}),
            ]
        );
    }

    #[test]
    fn an_incomplete_response_is_cut_and_a_refusal_refused() {
        let cut = parse_response(
            &json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                "output": [{"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Half"}]}]}),
            1,
        )
        .unwrap();
        assert_eq!(cut.stop_reason, StopReason::MaxTokens);
        assert_eq!(cut.stop_reason_raw.as_deref(), Some("max_output_tokens"));
        let refused = parse_response(
            &json!({"status": "completed", "output": [{"type": "message", "role": "assistant",
                "content": [{"type": "refusal", "refusal": "No."}]}]}),
            1,
        )
        .unwrap();
        assert_eq!(refused.stop_reason, StopReason::Refusal);
        assert_eq!(refused.message.content, "No.");
    }
}
