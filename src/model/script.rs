//! The offline script provider: assistant turns read from a JSON file and
//! picked by step number (turn index = step - 1), so a resumed run picks up
//! at the right turn. Past the last turn it answers a plain final message;
//! a summary request gets the script's `summary`.
//!
//! ```json
//! {"turns": [{"content": "...",
//!             "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
//!             "usage": {"input_tokens": 10, "output_tokens": 5},
//!             "sleep_ms": 0, "stop_reason": "max_tokens"}],
//!  "summary": "..."}
//! ```
//!
//! `arguments` may be an object (sent serialised) or a string (sent as is,
//! to script malformed calls). Call ids are `call_<step>_<i>` unless a call
//! gives its own `id`. Usage defaults to a chars/4 estimate. `stop_reason`
//! (tinyagent's words: `end_turn`, `tool_calls`, `max_tokens`, `refusal`,
//! ...) defaults to `tool_calls` for a turn with calls, `end_turn` otherwise.

use super::error::ModelError;
use super::{ModelReply, ModelRequest, Purpose};
use crate::event::{Message, ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Content of the final message once the turns are used up.
pub const SCRIPT_FINAL_MESSAGE: &str = "Done: the scripted session has no more turns.";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    turns: Vec<Turn>,
    #[serde(default)]
    summary: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    #[serde(default)]
    content: String,
    #[serde(default)]
    tool_calls: Vec<ScriptCall>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    sleep_ms: Option<u64>,
    #[serde(default)]
    stop_reason: Option<crate::event::StopReason>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Scripted turns, ready to answer.
#[derive(Debug, Clone)]
pub struct ScriptProvider {
    turns: Vec<Turn>,
    summary: Option<String>,
}

impl ScriptProvider {
    /// Reads and checks a script file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Script {
            path: origin.clone(),
            message: format!("cannot read it: {e}"),
        })?;
        Self::from_json(&text, &origin)
    }

    /// Parses a script from JSON text; `origin` names it in errors (a path,
    /// or e.g. "built-in demo script").
    pub fn from_json(text: &str, origin: &str) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::Script {
            path: origin.to_string(),
            message,
        };
        let file: ScriptFile = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        for (t, turn) in file.turns.iter().enumerate() {
            for (c, call) in turn.tool_calls.iter().enumerate() {
                let at = format!("turns[{t}].tool_calls[{c}]");
                if call.name.trim().is_empty() {
                    return Err(bad(format!("{at}.name is empty")));
                }
                match &call.arguments {
                    None | Some(Value::Object(_)) | Some(Value::String(_)) => {}
                    Some(other) => {
                        return Err(bad(format!(
                            "{at}.arguments must be an object or a string, not {other}"
                        )));
                    }
                }
            }
        }
        Ok(ScriptProvider {
            turns: file.turns,
            summary: file.summary,
        })
    }

    pub(crate) async fn complete(
        &self,
        req: &ModelRequest,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let reply = match req.purpose {
            Purpose::Summary => {
                let text = self.summary.clone().unwrap_or_else(|| default_summary(req));
                let usage = estimate(req, &text, &[]);
                ModelReply::finished(Message::assistant(text, Vec::new()), usage)
            }
            Purpose::Step => {
                let index = usize::try_from(req.step.saturating_sub(1)).unwrap_or(usize::MAX);
                match self.turns.get(index) {
                    Some(turn) => {
                        if let Some(ms) = turn.sleep_ms.filter(|ms| *ms > 0) {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        turn_reply(turn, req)
                    }
                    None => {
                        let usage = estimate(req, SCRIPT_FINAL_MESSAGE, &[]);
                        ModelReply::finished(
                            Message::assistant(SCRIPT_FINAL_MESSAGE, Vec::new()),
                            usage,
                        )
                    }
                }
            }
        };
        if !reply.message.content.is_empty() {
            on_text(&reply.message.content);
        }
        Ok(reply)
    }
}

fn turn_reply(turn: &Turn, req: &ModelRequest) -> ModelReply {
    let calls: Vec<ToolCall> = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: c
                .id
                .clone()
                .unwrap_or_else(|| ToolCall::fallback_id(req.step, i)),
            name: c.name.clone(),
            arguments: match &c.arguments {
                None => "{}".to_string(),
                Some(Value::String(raw)) => raw.clone(),
                Some(v) => v.to_string(),
            },
        })
        .collect();
    let usage = turn
        .usage
        .unwrap_or_else(|| estimate(req, &turn.content, &calls));
    let mut reply = ModelReply::finished(Message::assistant(turn.content.clone(), calls), usage);
    if let Some(stop) = turn.stop_reason {
        reply.stop_reason = stop;
    }
    reply
}

/// Token estimates at four characters a token (at least one each way).
fn estimate(req: &ModelRequest, content: &str, calls: &[ToolCall]) -> Usage {
    let input: usize = req
        .messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
        })
        .sum();
    let output = content.len()
        + calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    let tokens = |chars: usize| (chars as u64).div_ceil(4).max(1);
    Usage {
        input_tokens: tokens(input),
        output_tokens: tokens(output),
        ..Usage::default()
    }
}

/// A summary made from the request when the script gives none.
fn default_summary(req: &ModelRequest) -> String {
    use crate::event::Role;
    let task = req
        .messages
        .iter()
        .find(|m| m.role == Role::User && !crate::session::is_plan_message(m))
        .map(|m| crate::text::cut_chars(&m.content, 200, ""))
        .unwrap_or_default();
    let calls: usize = req.messages.iter().map(|m| m.tool_calls.len()).sum();
    let results = req.messages.iter().filter(|m| m.role == Role::Tool).count();
    format!(
        "Summary of the work so far: {} messages, {calls} tool calls, {results} tool results. Task: {task}",
        req.messages.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_named_with_position() {
        let err = ScriptProvider::from_json("{\"turns\": [{\"contnet\": \"x\"}]}", "s.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("s.json"), "{err}");
        assert!(err.contains("contnet"), "{err}");
        assert!(err.contains("line 1 column"), "{err}");
    }

    #[test]
    fn numeric_arguments_are_refused() {
        let err = ScriptProvider::from_json(
            r#"{"turns": [{"tool_calls": [{"name": "bash", "arguments": 3}]}]}"#,
            "s.json",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("turns[0].tool_calls[0].arguments"), "{err}");
    }
}
