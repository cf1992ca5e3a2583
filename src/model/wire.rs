//! The Chat Completions request as sent: serialized straight from the
//! request's messages, with no JSON tree built and no text copied in
//! between, and each message serialized once for the run rather than once
//! per step.
//!
//! Between compactions the model's view only grows: a step's request is the
//! previous one plus a few messages. [`WireCache`] keeps the previous
//! request's messages beside their JSON; a message equal to the one kept
//! (compared in full, so a cached fragment is only ever reused for the same
//! message) reuses its bytes. Escaping a 400 KB view costs about ten
//! instructions a byte; comparing it costs a fraction of one. The price is a
//! copy of the view and its JSON in memory, both bounded by the compaction
//! threshold.
//!
//! The members come in alphabetical order, as a `serde_json::Value` tree of
//! the same request prints them, so the bytes are exactly what the tree
//! ([`request_tree`]) would have sent.
//!
//! A request whose view is of the same line as the last one's (see
//! `session::View`: only appended to since) skips even the comparison: its
//! first messages are the kept ones, and only the new ones are serialized.

use super::{ModelRequest, Purpose};
use crate::event::{Message, Role};
use serde::Serialize;
use serde_json::Value;

/// How far ahead of the expected position a kept message is looked for: a
/// plan block appearing, changing or going shifts the rest by one.
const RESYNC_WINDOW: usize = 2;

/// The last request's messages and their serialized JSON, and the rest of
/// the request (model, stream options, the tools' schemas: the same every
/// step) with what it was made from.
#[derive(Default)]
pub(crate) struct WireCache {
    kept: Vec<(Message, Vec<u8>)>,
    /// The line of the view `kept` was made from (`kept` holds its
    /// messages, one entry each, in order).
    line: Option<u64>,
    rest: Option<(RestKey, Vec<u8>)>,
    /// The last body sent, to be written on in place next time.
    sent: Option<Sent>,
}

/// A body as sent: `{"messages":[` and the JSON of its first `messages`
/// kept messages (`prefix` bytes), then the rest of the request.
///
/// Once the request is done with it (the HTTP client and the caller have
/// dropped their handles), the next body of the same line is this one cut
/// back to its prefix, with only the new messages and the rest written
/// after: the view's bytes are neither copied again nor allocated anew each
/// step (at a 400 KB view that is a fresh, page-faulted buffer a step). A
/// body still held elsewhere is left alone and a new one is made.
struct Sent {
    body: bytes::Bytes,
    prefix: usize,
    messages: usize,
}

/// What [`WireRest`] is made of.
struct RestKey {
    model: String,
    cache_key: Option<std::sync::Arc<str>>,
    effort: Option<&'static str>,
    stream: bool,
    summary: bool,
    tools: std::sync::Arc<Vec<crate::tools::ToolSpec>>,
}

impl RestKey {
    /// The same as `other`: the tools compared by identity first (the
    /// registry's shared list), by value only when that differs.
    fn same(&self, other: &RestKey) -> bool {
        self.model == other.model
            && self.cache_key == other.cache_key
            && self.effort == other.effort
            && self.stream == other.stream
            && self.summary == other.summary
            && (std::sync::Arc::ptr_eq(&self.tools, &other.tools) || self.tools == other.tools)
    }
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCache")
            .field("messages", &self.kept.len())
            .field("line", &self.line)
            .field("rest_bytes", &self.rest.as_ref().map(|(_, b)| b.len()))
            .field("sent_bytes", &self.sent.as_ref().map(|s| s.body.len()))
            .finish()
    }
}

impl WireCache {
    /// The request body's bytes; keeps this request's messages for the next.
    pub(crate) fn request_bytes(
        &mut self,
        model: &str,
        req: &ModelRequest,
        stream: bool,
        effort: Option<&'static str>,
    ) -> bytes::Bytes {
        let line = req.messages.line();
        let same_line = self.line == Some(line) && self.kept.len() <= req.messages.len();
        let (mut kept, new) = if same_line {
            // The same line: the kept messages are this view's first ones.
            let kept = std::mem::take(&mut self.kept);
            let n = kept.len();
            (kept, &req.messages[n..])
        } else {
            (self.matched(req), &req.messages[req.messages.len()..])
        };
        let reused = kept.len();
        kept.extend(new.iter().map(entry));
        let key = RestKey {
            model: model.to_string(),
            cache_key: req.cache_key.clone(),
            effort,
            stream,
            summary: req.purpose == Purpose::Summary,
            tools: std::sync::Arc::clone(&req.tools),
        };
        let rest = match self.rest.take() {
            Some((k, bytes)) if k.same(&key) => (k, bytes),
            _ => (
                key,
                serde_json::to_vec(&WireRest::of(model, req, stream, effort)).unwrap_or_default(),
            ),
        };
        let rest_json = &rest.1;
        // The last body, cut back to its messages, when they are this
        // request's first ones and nothing else holds it.
        let last = self
            .sent
            .take()
            .filter(|sent| same_line && sent.messages <= reused)
            .and_then(|sent| {
                let mut body = sent.body.try_into_mut().ok()?;
                body.truncate(sent.prefix);
                Some((body, sent.messages))
            });
        let (mut out, from) = last.unwrap_or_else(|| {
            let size = kept.iter().map(|(_, j)| j.len() + 1).sum::<usize>() + rest_json.len() + 16;
            // Room for the steps to come: a buffer that must grow is copied.
            let mut out = bytes::BytesMut::with_capacity(size + size / 4 + 4096);
            out.extend_from_slice(b"{\"messages\":[");
            (out, 0)
        });
        let added = kept[from..].iter().map(|(_, j)| j.len() + 1).sum::<usize>();
        out.reserve(added + rest_json.len() + 2);
        for (i, (_, json)) in kept.iter().enumerate().skip(from) {
            if i > 0 {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(json);
        }
        let prefix = out.len();
        out.extend_from_slice(b"],");
        // `rest` is `{"model":...}`: its members follow the messages.
        out.extend_from_slice(rest_json.get(1..).unwrap_or(b"}"));
        let body = out.freeze();
        self.sent = Some(Sent {
            body: body.clone(),
            prefix,
            messages: kept.len(),
        });
        self.kept = kept;
        self.line = Some(line);
        self.rest = Some(rest);
        body
    }

    /// Every message of `req` with its JSON: the kept one's bytes where it
    /// equals a kept message (compared in full), serialized anew otherwise.
    fn matched(&mut self, req: &ModelRequest) -> Vec<(Message, Vec<u8>)> {
        let mut old: Vec<Option<(Message, Vec<u8>)>> = std::mem::take(&mut self.kept)
            .into_iter()
            .map(Some)
            .collect();
        let mut at = 0;
        let mut kept = Vec::with_capacity(req.messages.len());
        for m in &req.messages {
            let hit = (at..old.len().min(at + RESYNC_WINDOW + 1))
                .find(|&i| old[i].as_ref().is_some_and(|(kept, _)| kept == m));
            match hit.and_then(|i| old[i].take().map(|k| (i, k))) {
                Some((i, k)) => {
                    at = i + 1;
                    kept.push(k);
                }
                None => kept.push(entry(m)),
            }
        }
        kept
    }
}

/// A message kept with its JSON.
fn entry(m: &Message) -> (Message, Vec<u8>) {
    // Serializing borrowed strings cannot fail.
    let json = serde_json::to_vec(&WireMessage::of(m)).unwrap_or_default();
    (m.clone(), json)
}

/// The request as a JSON tree (what is sent is [`WireCache::request_bytes`],
/// the same JSON).
#[cfg(test)]
pub(crate) fn request_tree(
    model: &str,
    req: &ModelRequest,
    stream: bool,
    effort: Option<&'static str>,
) -> Value {
    let mut tree =
        serde_json::to_value(WireRest::of(model, req, stream, effort)).unwrap_or(Value::Null);
    let messages = req
        .messages
        .iter()
        .map(|m| serde_json::to_value(WireMessage::of(m)).unwrap_or(Value::Null))
        .collect();
    tree["messages"] = Value::Array(messages);
    tree
}

/// Everything but the messages: `{"model", "prompt_cache_key",
/// "reasoning_effort", "stream", "stream_options", "tool_choice", "tools"}`,
/// in that (alphabetical) order.
#[derive(Serialize)]
struct WireRest<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// `none` for the summarizer: it sees the run's tools (so its prefix
    /// is the run's) and may call none of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<WireTool<'a>>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> WireRest<'a> {
    fn of(
        model: &'a str,
        req: &'a ModelRequest,
        stream: bool,
        effort: Option<&'static str>,
    ) -> Self {
        let tools = (!req.tools.is_empty()).then(|| {
            req.tools
                .iter()
                .map(|t| WireTool {
                    function: WireFunction {
                        description: &t.description,
                        name: &t.name,
                        parameters: &t.parameters,
                    },
                    kind: "function",
                })
                .collect()
        });
        WireRest {
            model,
            prompt_cache_key: req.cache_key.as_deref(),
            reasoning_effort: effort,
            stream: stream.then_some(true),
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            tool_choice: (tools.is_some() && req.purpose == Purpose::Summary).then_some("none"),
            tools,
        }
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    function: WireFunction<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

/// One message: `content` is null only for an assistant message with
/// calls and no text; `tool_call_id` only on tool messages, `tool_calls`
/// only on assistant messages that have some.
#[derive(Serialize)]
struct WireMessage<'a> {
    content: Option<&'a str>,
    /// The reasoning the server sent with this assistant message (its
    /// native items), sent back as received.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a serde_json::value::RawValue>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<WireCall<'a>>>,
}

impl<'a> WireMessage<'a> {
    fn of(m: &'a Message) -> Self {
        // The string's JSON text as recorded (see `event::NativeItems`).
        let reasoning = m
            .native
            .as_ref()
            .filter(|n| n.is_from(crate::event::Native::CHAT))
            .and_then(|n| n.member("reasoning_content"));
        let plain = |role: &'static str| WireMessage {
            content: Some(&m.content),
            reasoning_content: None,
            role,
            tool_call_id: None,
            tool_calls: None,
        };
        match m.role {
            Role::System => plain("system"),
            Role::User => plain("user"),
            Role::Tool => WireMessage {
                tool_call_id: Some(m.tool_call_id.as_deref().unwrap_or_default()),
                ..plain("tool")
            },
            Role::Assistant if m.tool_calls.is_empty() => WireMessage {
                reasoning_content: reasoning,
                ..plain("assistant")
            },
            Role::Assistant => WireMessage {
                content: (!m.content.is_empty()).then_some(m.content.as_str()),
                reasoning_content: reasoning,
                role: "assistant",
                tool_call_id: None,
                tool_calls: Some(
                    m.tool_calls
                        .iter()
                        .map(|c| WireCall {
                            function: WireCallFunction {
                                arguments: &c.arguments,
                                name: &c.name,
                            },
                            id: &c.id,
                            kind: "function",
                        })
                        .collect(),
                ),
            },
        }
    }
}

#[derive(Serialize)]
struct WireCall<'a> {
    function: WireCallFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct WireCallFunction<'a> {
    arguments: &'a str,
    name: &'a str,
}

#[cfg(test)]
mod tests;
