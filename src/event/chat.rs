//! What a chat adds to a run: the person's messages ([`UserMessage`]), the
//! wait at the prompt ([`ChatWaiting`]), and the `/model`, `/approvals` and
//! `/compact` commands ([`SettingsChanged`], [`CompactionRequested`]).

use serde::{Deserialize, Serialize};

/// A message the person added to the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The last step before it.
    pub step: u64,
    pub content: String,
    /// Where it was typed: `chat` (the chat prompt) or `resume`
    /// (`resume --message`).
    #[serde(default = "chat_source")]
    pub source: String,
}

fn chat_source() -> String {
    "chat".to_string()
}

/// A chat turn ended: the run waits at the prompt for the person's next
/// message. Durable before the prompt is shown, so a chat killed there
/// resumes there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatWaiting {
    pub step: u64,
    /// The signal that cut the turn short (`SIGINT`: Ctrl-C during a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
}

/// A chat's `/model` or `/approvals`: the run's settings from here on.
/// Durable before the next model request; folded into the state, so a
/// resumed run keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsChanged {
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<crate::kinds::ApproveMode>,
    /// Who changed them (`chat`).
    #[serde(default)]
    pub by: String,
}

impl SettingsChanged {
    /// What changed, for a person: `model gpt-x · approvals never`.
    pub fn shown(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("model {m}"));
        }
        if let Some(a) = self.approvals {
            let mode = match a {
                crate::kinds::ApproveMode::Never => "never",
                crate::kinds::ApproveMode::Mutating => "mutating",
            };
            parts.push(format!("approvals {mode}"));
        }
        parts.join(" · ")
    }
}

/// A chat's `/compact`: the history is compacted before the next request,
/// whatever its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionRequested {
    pub step: u64,
    #[serde(default)]
    pub by: String,
}

/// Text the model is shown after a turn the person cut short.
pub fn chat_interrupted_text(signal: &str) -> String {
    format!(
        "[The person interrupted this turn ({signal}); anything still running was stopped. \
         Wait for their next message.]"
    )
}
