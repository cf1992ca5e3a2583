//! What a model answer records: the response itself ([`ModelResponse`]), its
//! token counts ([`Usage`]), why it ended ([`StopReason`]), and the
//! [`Compaction`] record a summarizer call leaves.

use super::{Message, is_false, is_zero};
use serde::{Deserialize, Serialize};

/// Token counts of one model call, or a running total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to the provider's prompt
    /// cache (Anthropic's `input_tokens`; OpenAI's `prompt_tokens` less its
    /// `cached_tokens`).
    pub input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache (OpenAI
    /// `prompt_tokens_details.cached_tokens`, Anthropic
    /// `cache_read_input_tokens`), when reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Input tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`), when reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Output tokens spent reasoning (part of `output_tokens`), when
    /// reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds `other`; a total that would overflow stays at the maximum (a
    /// server may report any count).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// Every input token of the request, cached or not.
    pub fn all_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cached_input_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Only input and output counts (the rest zero).
    pub fn of(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub step: u64,
    pub message: Message,
    pub usage: Usage,
    pub cost_usd: f64,
    /// Ids of the calls in `message.tool_calls`, in order.
    pub pending: Vec<String>,
    /// The context size the compaction decision saw for this request, in
    /// tokens (see docs/design.md, "Compaction"); 0 in logs written before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_tokens: u64,
    /// The length in bytes of the request body this answered (0 in logs
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub request_bytes: u64,
    /// Why the model stopped (`None` in logs written before it was
    /// recorded, read as `end_turn` or `tool_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// The server's own word for it (`stop`, `length`, `tool_use`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason_raw: Option<String>,
}

/// Why a model response ended, in one vocabulary for every provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its turn (a final answer when it made no call).
    #[default]
    EndTurn,
    /// The model stopped to have its tool calls run.
    ToolCalls,
    /// Cut at the output limit: the text and any call in it are incomplete.
    MaxTokens,
    /// The model declined to answer.
    Refusal,
    /// The server's content filter cut or withheld the answer.
    ContentFilter,
    /// The server paused a long turn; asking again continues it.
    Pause,
}

impl StopReason {
    /// The name in the log and in `--json` (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolCalls => "tool_calls",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Refusal => "refusal",
            StopReason::ContentFilter => "content_filter",
            StopReason::Pause => "pause",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub step: u64,
    pub summary: String,
    /// The messages that replace the history after the system prompt: the
    /// summary message first, then the kept recent messages.
    pub view: Vec<Message>,
    /// Plan version current when the summary was made (0 when no plan).
    pub plan_version: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    /// How many view messages (after the system prompt) this replaced.
    #[serde(default)]
    pub replaced: u64,
    /// The summarizer answered but gave no summary: the record only carries
    /// that call's usage and cost (so no cost is lost), and `view` is the
    /// unchanged view.
    #[serde(default, skip_serializing_if = "is_false")]
    pub failed: bool,
    /// The context size, in tokens, that went over the threshold and made
    /// this compaction (0 in logs written before it was recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_tokens: u64,
}
