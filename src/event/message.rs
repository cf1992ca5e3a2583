//! The conversation: who said what ([`Message`], [`Role`]), the tool calls a
//! model asked for ([`ToolCall`]), and the provider-native items kept beside
//! a message ([`Native`]).

use super::{NativeItems, is_false};
use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call as the model sent it. `arguments` is the raw string, kept
/// byte-for-byte even when it is not valid JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// The id given to the `index`th call of `step` when the server sent
    /// none (or one that names another call too): `call_<step>_<index>`.
    pub fn fallback_id(step: u64, index: usize) -> String {
        format!("call_{step}_{index}")
    }
}

/// A chat message in provider-neutral form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Always written (empty when none), so readers of `model.response` find
    /// the member the contract names.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// For `role: tool`: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `role: tool`: the tool's name (Anthropic and some servers want it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
    /// For `role: assistant`: what the provider produced that it needs
    /// back, as received (see [`Native`]); absent when it sent nothing of
    /// the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeItems>,
}

/// The members of a [`Message::native`] object: `api` names the wire it came
/// from, and only a request to that wire sends it back.
///
/// - `{"api": "anthropic", "content": [...]}`: the Messages API response's
///   content blocks, as received; its `thinking` (with `signature`) and
///   `redacted_thinking` blocks go back, in order, before the turn's
///   `tool_use` blocks.
/// - `{"api": "chat", "reasoning_content": "..."}`: a Chat Completions
///   message's reasoning, sent back on the assistant message.
/// - `{"api": "responses", "output": [...]}`: a Responses API output's
///   items, as received; its `reasoning` items (with `encrypted_content`)
///   go back before the `function_call` items they preceded.
pub struct Native;

impl Native {
    pub const ANTHROPIC: &'static str = "anthropic";
    pub const CHAT: &'static str = "chat";
    pub const RESPONSES: &'static str = "responses";

    /// The native items of `m` when they came from `api`, as a tree (to
    /// read; their text is what goes back, see [`NativeItems`]).
    pub fn of(m: &Message, api: &str) -> Option<serde_json::Value> {
        m.native
            .as_ref()
            .filter(|n| n.is_from(api))
            .map(NativeItems::value)
    }
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message {
            tool_calls,
            ..Self::plain(Role::Assistant, content)
        }
    }
    pub fn tool(call_id: &str, name: &str, content: impl Into<String>, is_error: bool) -> Self {
        Message {
            tool_call_id: Some(call_id.to_string()),
            name: Some(name.to_string()),
            is_error,
            ..Self::plain(Role::Tool, content)
        }
    }
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            is_error: false,
            native: None,
        }
    }
}
