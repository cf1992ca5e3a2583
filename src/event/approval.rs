//! The approval question and its answer ([`ApprovalRequested`],
//! [`ApprovalDecided`] with its [`Decision`]).

use super::is_false;
use serde::{Deserialize, Serialize};

/// A call that needs the person's yes before it starts: durable before the
/// question is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    pub step: u64,
    pub call_id: String,
    /// The call's tool.
    #[serde(default)]
    pub tool: String,
    /// What the call would do, shortened (the command, the path).
    #[serde(default)]
    pub preview: String,
}

/// The answer to an approval question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }

    /// The mark and the word human output shows for it: `✓ allowed`.
    pub fn shown(self) -> &'static str {
        match self {
            Decision::Allow => "✓ allowed",
            Decision::Deny => "✗ denied",
        }
    }
}

/// The decision about a call: durable before the call starts (or, denied,
/// before its error result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    pub step: u64,
    pub call_id: String,
    #[serde(default)]
    pub tool: String,
    pub decision: Decision,
    /// Who decided: `tty` (the person at the terminal), `approve` (`tinyagent
    /// approve` from another process), `rule` (an allow rule of the config)
    /// or `always` (an earlier "always allow this tool" answer).
    pub by: String,
    #[serde(default)]
    pub reason: Option<String>,
    /// The person answered "always": every later call of `tool` in this run
    /// is allowed without a question (for bash: every command that starts
    /// with `scope`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub always: bool,
    /// What an "always" for bash covers: a command prefix (`cargo test`).
    /// Absent in older logs, where "always" covered all of bash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}
