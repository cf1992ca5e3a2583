//! The OpenAI-compatible Chat Completions client (OpenAI, vLLM, llama.cpp,
//! Ollama, LM Studio, OpenRouter, ...): only standard request fields are
//! sent, unknown response fields are ignored; plain JSON or SSE streaming
//! with tool-call arguments assembled from fragments.

use super::error::ModelError;
use super::http::{Endpoint, build_client, exchange, json_of, with_retries};
use super::http::{bearer_endpoint, stream_events};
use super::wire::WireCache;
use super::{Encoded, ModelReply, ModelRequest, ProviderConfig};
use crate::event::{Message, StopReason, ToolCall, Usage};
use serde_json::Value;
use std::collections::BTreeMap;

/// Client for `POST {base_url}/chat/completions`.
#[derive(Debug)]
pub struct OpenAiProvider {
    cfg: ProviderConfig,
    endpoint: Endpoint,
    client: reqwest::Client,
    /// The messages of the last request as serialized, for the next one.
    wire: std::sync::Mutex<WireCache>,
}

impl OpenAiProvider {
    /// The model asked from the next request on.
    pub fn set_model(&mut self, model: &str) {
        self.cfg.model = model.to_string();
    }

    pub fn new(cfg: ProviderConfig) -> Result<Self, ModelError> {
        let endpoint = bearer_endpoint(&cfg, "chat/completions")?;
        let client = build_client(&cfg)?;
        Ok(OpenAiProvider {
            cfg,
            endpoint,
            client,
            wire: std::sync::Mutex::default(),
        })
    }

    /// The request's bytes, from the cache of the last request's messages
    /// (see [`WireCache`]).
    pub(crate) fn encode(&self, req: &ModelRequest) -> Encoded {
        Encoded::from_shared(
            self.wire
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .request_bytes(&self.cfg.model, req, self.cfg.stream, self.effort()),
        )
    }

    /// `reasoning_effort` as sent.
    fn effort(&self) -> Option<&'static str> {
        self.cfg
            .reasoning_effort
            .map(crate::kinds::ReasoningEffort::as_str)
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
                self.plain(body, req.step, on_text).await
            }
        })
        .await
    }

    fn request(&self, body: &Encoded) -> reqwest::RequestBuilder {
        self.endpoint.post(&self.client, body)
    }

    async fn plain(
        &self,
        body: &Encoded,
        step: u64,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let bytes = exchange(&self.cfg, self.request(body)).await?;
        let reply = match typed_reply(&bytes, step) {
            Some(reply) => reply,
            None => parse_response(&json_of(&self.cfg, &bytes)?, step)?,
        };
        if !reply.message.content.is_empty() {
            on_text(&reply.message.content);
        }
        Ok(reply)
    }

    async fn streamed(
        &self,
        body: &Encoded,
        step: u64,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let mut acc = StreamAssembler::default();
        let done = stream_events(&self.cfg, self.request(body), |data| {
            acc.push(data, on_text).map(|whole| whole.then_some(()))
        })
        .await?;
        if done.is_none() && !acc.saw_finish_reason() {
            return Err(ModelError::Transport(
                "the stream ended before the reply was complete".into(),
            ));
        }
        acc.finish(step)
    }
}

/// The request body: standard fields only; `tools` omitted when empty.
/// The same JSON as [`WireCache::request_bytes`] sends, as a tree.
#[cfg(test)]
pub(crate) fn request_body(model: &str, req: &ModelRequest, stream: bool) -> Value {
    super::wire::request_tree(model, req, stream, None)
}

/// A struct read from a JSON object only. serde would also read one from
/// an array, by position; [`parse_response`] finds nothing in an array, and
/// the typed read must not take a body the tree would refuse.
struct Obj<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(ObjectOnly(d)).map(Obj)
    }
}

/// A deserializer that reads a struct only as a map ([`Obj`]).
struct ObjectOnly<D>(D);

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(v)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(v)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A completion of the usual shape, read straight into types: every field
/// the reply needs where [`parse_response`] looks for it and of the type it
/// expects there, and no `error`. Unknown fields are skipped unread.
#[derive(serde::Deserialize)]
struct Completion {
    #[serde(default)]
    error: Option<Value>,
    choices: Vec<Obj<Choice>>,
    #[serde(default)]
    usage: Option<Obj<CompletionUsage>>,
}

#[derive(serde::Deserialize)]
struct Choice {
    message: Obj<ChoiceMessage>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(serde::Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<Obj<CompletionCall>>>,
    #[serde(default)]
    refusal: Option<Value>,
    #[serde(default)]
    reasoning_content: Option<Value>,
}

#[derive(serde::Deserialize)]
struct CompletionCall {
    #[serde(default)]
    id: Option<Value>,
    function: Obj<CompletionFunction>,
}

#[derive(serde::Deserialize)]
struct CompletionFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(serde::Deserialize)]
struct CompletionUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Value>,
    #[serde(default)]
    completion_tokens_details: Option<Value>,
}

/// A non-streaming response of the usual shape ([`Completion`]) read with
/// no JSON tree: the reply [`parse_response`] gives for it. `None` for any
/// other body, which [`parse_response`] then reads (and words the error
/// of); every body it can read either way, it reads the same.
fn typed_reply(body: &[u8], step: u64) -> Option<ModelReply> {
    let Obj(c) = serde_json::from_slice::<Obj<Completion>>(body).ok()?;
    if c.error.is_some() {
        return None;
    }
    let choice = c.choices.into_iter().next()?.0;
    let finish = choice.finish_reason;
    let msg = choice.message.0;
    let content = text_of(msg.content.as_ref()).ok()?;
    let refusal = msg
        .refusal
        .as_ref()
        .and_then(Value::as_str)
        .map(str::to_string);
    let reasoning = msg
        .reasoning_content
        .as_ref()
        .and_then(Value::as_str)
        .map(str::to_string);
    let tool_calls = msg
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, Obj(call))| ToolCall {
            id: call_id(
                call.id.as_ref().and_then(Value::as_str).unwrap_or_default(),
                step,
                i,
            ),
            name: call.function.0.name,
            arguments: arguments_text(call.function.0.arguments.as_ref()),
        })
        .collect();
    let usage = c.usage.map_or(Usage::default(), |Obj(u)| {
        let detail = |d: &Option<Value>, k: &str| {
            d.as_ref()
                .and_then(|d| d.get(k))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        kinds(
            u.prompt_tokens.unwrap_or(0),
            u.completion_tokens.unwrap_or(0),
            detail(&u.prompt_tokens_details, "cached_tokens"),
            detail(&u.completion_tokens_details, "reasoning_tokens"),
        )
    });
    Some(reply_of(
        with_reasoning(Message::assistant(content, tool_calls), reasoning),
        usage,
        finish.as_ref().and_then(Value::as_str),
        refusal,
    ))
}

/// `message` with the server's `reasoning_content` kept as its native
/// items (sent back on the assistant message), when there was any.
fn with_reasoning(mut message: Message, reasoning: Option<String>) -> Message {
    if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
        message.native = Some(crate::event::NativeItems::from_value(&serde_json::json!({
            "api": crate::event::Native::CHAT,
            "reasoning_content": r,
        })));
    }
    message
}

/// The reply, with its stop reason read from `finish_reason` (`stop`,
/// `tool_calls`, `length`, `content_filter`) and `refusal` (the text of a
/// refusal, which then stands for the content).
fn reply_of(
    mut message: Message,
    usage: Usage,
    finish: Option<&str>,
    refusal: Option<String>,
) -> ModelReply {
    let mut stop = match finish {
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        Some("tool_calls" | "function_call") => StopReason::ToolCalls,
        _ => super::natural_stop(&message),
    };
    if let Some(text) = refusal.filter(|r| !r.is_empty()) {
        if message.content.is_empty() {
            message.content = text;
        }
        stop = StopReason::Refusal;
    }
    ModelReply {
        stop_reason: stop,
        stop_reason_raw: finish.map(str::to_string),
        message,
        usage,
    }
}

/// Reads a non-streaming response.
pub(crate) fn parse_response(v: &Value, step: u64) -> Result<ModelReply, ModelError> {
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(ModelError::BadResponse(format!(
            "server reported an error: {err}"
        )));
    }
    let choice = v.get("choices").and_then(|c| c.get(0));
    let finish = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    let msg = choice
        .and_then(|c| c.get("message"))
        .ok_or_else(|| ModelError::BadResponse("no choices[0].message in the response".into()))?;
    let refusal = msg
        .get("refusal")
        .and_then(Value::as_str)
        .map(str::to_string);
    let reasoning = msg
        .get("reasoning_content")
        .and_then(Value::as_str)
        .map(str::to_string);
    let content = text_of(msg.get("content"))?;
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").filter(|c| !c.is_null()) {
        let calls = calls
            .as_array()
            .ok_or_else(|| ModelError::BadResponse("tool_calls is not an array".into()))?;
        for (i, call) in calls.iter().enumerate() {
            let f = call.get("function").ok_or_else(|| {
                ModelError::BadResponse(format!("tool_calls[{i}] has no function"))
            })?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ModelError::BadResponse(format!("tool_calls[{i}].function has no name"))
            })?;
            let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
            tool_calls.push(ToolCall {
                id: call_id(id, step, i),
                name: name.to_string(),
                arguments: arguments_text(f.get("arguments")),
            });
        }
    }
    Ok(reply_of(
        with_reasoning(Message::assistant(content, tool_calls), reasoning),
        usage_of(v.get("usage")),
        finish,
        refusal,
    ))
}

fn call_id(given: &str, step: u64, index: usize) -> String {
    if given.is_empty() {
        ToolCall::fallback_id(step, index)
    } else {
        given.to_string()
    }
}

/// Arguments as the raw string sent (some servers send an object instead).
fn arguments_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Message content: a string, null, or an array of text parts.
fn text_of(v: Option<&Value>) -> Result<String, ModelError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect()),
        Some(other) => Err(ModelError::BadResponse(format!(
            "message content is neither text nor null: {other}"
        ))),
    }
}

fn usage_of(v: Option<&Value>) -> Usage {
    let n = |k: &str, d: Option<&str>| {
        v.and_then(|u| u.get(k))
            .and_then(|x| d.map_or(Some(x), |d| x.get(d)))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    kinds(
        n("prompt_tokens", None),
        n("completion_tokens", None),
        n("prompt_tokens_details", Some("cached_tokens")),
        n("completion_tokens_details", Some("reasoning_tokens")),
    )
}

/// Usage from Chat Completions' counts: `prompt_tokens` includes the
/// cached ones, which are counted apart.
fn kinds(prompt: u64, completion: u64, cached: u64, reasoning: u64) -> Usage {
    let cached = cached.min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: completion,
        cached_input_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: reasoning,
    }
}

/// An `error` event inside a stream, as the status it stands for: a
/// server error or overload is retried (with its own wait, if it names
/// one), a rate limit waited for, a request error (a context overflow
/// among them) is not.
fn stream_error(err: &Value) -> ModelError {
    let word = |k: &str| err.get(k).and_then(Value::as_str).unwrap_or_default();
    let kind = format!("{} {}", word("type"), word("code")).to_ascii_lowercase();
    let status = if kind.contains("rate_limit") {
        429
    } else if kind.contains("invalid_request")
        || kind.contains("context_length")
        || kind.contains("invalid")
    {
        400
    } else {
        500
    };
    ModelError::Status {
        status,
        body: serde_json::json!({ "error": err }).to_string(),
        retry_after: None,
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Builds one reply from stream chunks.
#[derive(Debug, Default)]
pub(crate) struct StreamAssembler {
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Usage,
    chunks: usize,
    finished: bool,
    /// The `finish_reason` a chunk carried.
    finish_reason: Option<String>,
    /// Refusal text (`delta.refusal`).
    refusal: String,
    /// Reasoning (`delta.reasoning_content`).
    reasoning: String,
}

impl StreamAssembler {
    /// Takes one event's data; returns true at `[DONE]`.
    pub(crate) fn push(
        &mut self,
        data: &str,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| ModelError::BadResponse(format!("stream chunk is not JSON ({e})")))?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(err));
        }
        self.chunks += 1;
        if v.get("usage").is_some_and(|u| !u.is_null()) {
            self.usage = usage_of(v.get("usage"));
        }
        let choice = v.get("choices").and_then(|c| c.get(0));
        if let Some(f) = choice
            .and_then(|c| c.get("finish_reason"))
            .filter(|f| !f.is_null())
        {
            self.finished = true;
            self.finish_reason = f.as_str().map(str::to_string);
        }
        let Some(delta) = choice.and_then(|c| c.get("delta")) else {
            return Ok(false);
        };
        if let Some(r) = delta.get("refusal").and_then(Value::as_str) {
            self.refusal.push_str(r);
        }
        if let Some(r) = delta.get("reasoning_content").and_then(Value::as_str) {
            self.reasoning.push_str(r);
        }
        let piece = text_of(delta.get("content"))?;
        if !piece.is_empty() {
            on_text(&piece);
            self.content.push_str(&piece);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, frag) in calls.iter().enumerate() {
                let index = frag
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let call = self.calls.entry(index).or_default();
                if let Some(id) = frag.get("id").and_then(Value::as_str)
                    && call.id.is_empty()
                {
                    call.id = id.to_string();
                }
                if let Some(f) = frag.get("function") {
                    if let Some(name) = f.get("name").and_then(Value::as_str)
                        && call.name.is_empty()
                    {
                        call.name = name.to_string();
                    }
                    call.arguments.push_str(&arguments_text(f.get("arguments")));
                }
            }
        }
        Ok(false)
    }

    /// True once a chunk carried a `finish_reason`: a stream that ends
    /// without `[DONE]` is complete only then.
    pub(crate) fn saw_finish_reason(&self) -> bool {
        self.finished
    }

    /// The assembled reply.
    pub(crate) fn finish(self, step: u64) -> Result<ModelReply, ModelError> {
        if self.chunks == 0 {
            return Err(ModelError::BadResponse(
                "the stream ended without any data".into(),
            ));
        }
        let cut = self.finish_reason.as_deref() == Some("length");
        let mut tool_calls = Vec::new();
        for (i, call) in self.calls.into_values().enumerate() {
            if call.name.is_empty() && cut {
                // Cut before its name came: nothing of it can be shown.
                continue;
            }
            if call.name.is_empty() {
                return Err(ModelError::BadResponse(format!(
                    "streamed tool call {i} never got a name"
                )));
            }
            tool_calls.push(ToolCall {
                id: call_id(&call.id, step, i),
                name: call.name,
                arguments: call.arguments,
            });
        }
        Ok(reply_of(
            with_reasoning(
                Message::assistant(self.content, tool_calls),
                Some(self.reasoning),
            ),
            self.usage,
            self.finish_reason.as_deref(),
            Some(self.refusal),
        ))
    }
}

#[cfg(test)]
mod tests;
