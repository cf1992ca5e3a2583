//! Anthropic Messages streaming (SSE): the events of one message are put
//! back together into the body a non-streaming request would have had
//! (content blocks in order, `stop_reason`, `usage`), which is then read like
//! one. Text is shown as it comes; `thinking_delta` and `signature_delta`
//! build the thinking blocks that are sent back, `input_json_delta` the tool
//! inputs; `ping` is ignored and a mid-stream `error` event is an error (an
//! `overloaded_error` is retried as the 529 it stands for).

use super::error::ModelError;
use serde_json::{Map, Value, json};

/// One message being received.
#[derive(Debug, Default)]
pub(crate) struct MessageStream {
    blocks: Vec<Value>,
    /// The raw JSON of each tool_use block's input, by block index.
    inputs: Vec<String>,
    usage: Map<String, Value>,
    stop_reason: Value,
    done: bool,
}

impl MessageStream {
    /// Takes one event's data; returns true at `message_stop`.
    pub(crate) fn push(
        &mut self,
        data: &str,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| ModelError::BadResponse(format!("stream event is not JSON ({e})")))?;
        match v["type"].as_str() {
            Some("message_start") => self.add_usage(&v["message"]["usage"]),
            Some("content_block_start") => {
                let at = index(&v)?;
                if self.blocks.len() <= at {
                    self.blocks.resize(at + 1, Value::Null);
                    self.inputs.resize(at + 1, String::new());
                }
                self.blocks[at] = v["content_block"].clone();
            }
            Some("content_block_delta") => self.delta(index(&v)?, &v["delta"], on_text)?,
            Some("content_block_stop") => self.stop_block(index(&v)?),
            Some("message_delta") => {
                if let Some(stop) = v["delta"].get("stop_reason") {
                    self.stop_reason = stop.clone();
                }
                self.add_usage(&v["usage"]);
            }
            Some("message_stop") => {
                self.done = true;
                return Ok(true);
            }
            Some("error") => return Err(stream_error(&v["error"])),
            // `ping`, and event types added later.
            _ => {}
        }
        Ok(false)
    }

    fn add_usage(&mut self, usage: &Value) {
        if let Some(u) = usage.as_object() {
            for (k, n) in u {
                if !n.is_null() {
                    self.usage.insert(k.clone(), n.clone());
                }
            }
        }
    }

    fn delta(
        &mut self,
        at: usize,
        delta: &Value,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), ModelError> {
        let block = self
            .blocks
            .get_mut(at)
            .filter(|b| b.is_object())
            .ok_or_else(|| ModelError::BadResponse(format!("delta for unknown block {at}")))?;
        let append = |block: &mut Value, key: &str, piece: &str| {
            let now = block[key].as_str().unwrap_or_default().to_string();
            block[key] = Value::String(now + piece);
        };
        let piece = |k: &str| delta[k].as_str().unwrap_or_default();
        match delta["type"].as_str() {
            Some("text_delta") => {
                if !piece("text").is_empty() {
                    on_text(piece("text"));
                }
                append(block, "text", piece("text"));
            }
            Some("thinking_delta") => append(block, "thinking", piece("thinking")),
            Some("signature_delta") => append(block, "signature", piece("signature")),
            Some("input_json_delta") => self.inputs[at].push_str(piece("partial_json")),
            _ => {}
        }
        Ok(())
    }

    /// A tool_use block's input is whole once its block stops.
    fn stop_block(&mut self, at: usize) {
        let (Some(block), Some(raw)) = (self.blocks.get_mut(at), self.inputs.get(at)) else {
            return;
        };
        if block["type"] == "tool_use" && !raw.trim().is_empty() {
            block["input"] =
                serde_json::from_str(raw).unwrap_or_else(|_| json!({"raw_arguments": raw}));
        }
    }

    /// The message as a non-streaming response body.
    pub(crate) fn finish(mut self) -> Result<Value, ModelError> {
        if !self.done {
            return Err(ModelError::Transport(
                "the stream ended before the message was complete".into(),
            ));
        }
        for at in 0..self.blocks.len() {
            self.stop_block(at);
        }
        let blocks: Vec<Value> = self.blocks.into_iter().filter(|b| !b.is_null()).collect();
        Ok(json!({
            "type": "message",
            "content": blocks,
            "stop_reason": self.stop_reason,
            "usage": self.usage,
        }))
    }
}

fn index(v: &Value) -> Result<usize, ModelError> {
    v["index"]
        .as_u64()
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < 1024)
        .ok_or_else(|| ModelError::BadResponse(format!("stream event without an index: {v}")))
}

/// A mid-stream error: `overloaded_error` is the 529 it stands for
/// (retried), `invalid_request_error` a 400, anything else a 500.
fn stream_error(e: &Value) -> ModelError {
    let status = match e["type"].as_str() {
        Some("overloaded_error") => 529,
        Some("rate_limit_error") => 429,
        Some("invalid_request_error") => 400,
        _ => 500,
    };
    ModelError::Status {
        status,
        body: json!({"type": "error", "error": e}).to_string(),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinking_signature_text_and_tool_input_are_put_back_together() {
        let events = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":12,"cache_read_input_tokens":3,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look."}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB=="}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Listing."}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"and\":\"ls\"}"}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let mut s = MessageStream::default();
        let mut shown = String::new();
        let mut on_text = |t: &str| shown.push_str(t);
        let mut ended = false;
        for e in events {
            ended = s.push(e, &mut on_text).unwrap();
        }
        assert!(ended);
        assert_eq!(shown, "Listing.");
        assert_eq!(
            s.finish().unwrap(),
            json!({"type": "message", "stop_reason": "tool_use",
                "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 30},
                "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "EqQB=="},
                    {"type": "text", "text": "Listing."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash",
                     "input": {"command": "ls"}}]})
        );
    }

    #[test]
    fn an_overloaded_error_mid_stream_is_a_retried_529() {
        let mut s = MessageStream::default();
        let e = s
            .push(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                &mut |_: &str| {},
            )
            .unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(matches!(e, ModelError::Status { status: 529, .. }), "{e:?}");
        let cut = MessageStream::default().finish().unwrap_err();
        assert!(cut.is_retryable());
    }
}
