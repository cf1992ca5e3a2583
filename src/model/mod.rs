//! Model providers: an OpenAI-compatible Chat Completions client, an
//! Anthropic Messages client and an offline script, behind one enum.

use crate::event::{Message, Usage};
use serde::{Deserialize, Serialize};

/// What a model is told about one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Why a request is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A normal step of the loop.
    Step,
    /// A compaction summary (no tools are advertised).
    Summary,
}

/// One model request, provider-neutral. `messages` is exactly what is sent,
/// system prompt and pinned plan block included.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub purpose: Purpose,
    /// The step this request is for (the script provider picks its turn by it).
    pub step: u64,
}

/// The assistant's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// Role assistant, with content and tool calls (raw argument strings).
    pub message: Message,
    pub usage: Usage,
}
