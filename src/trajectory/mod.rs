//! Whole-file trajectory JSON (contract section 6): the format older
//! versions checkpointed a run into, kept for import and export.
//!
//! - [`export_v2`] turns a [`State`](crate::session::State) into a schema v2
//!   document: everything of v1 (messages, compaction, usage, steps,
//!   format errors, limits) plus `pending_calls`, `plan_enabled`, `plan`,
//!   `plan_history`, structured `processes` and `tool_signature`.
//! - [`import`] reads a v1 or v2 document and turns it into the log records
//!   that, folded with `State::apply`, give back its messages, view, usage
//!   and cost totals, steps, format errors, pending calls, plan and
//!   processes. See [`import`] for exactly how each part is mapped.
//!
//! Both directions are pure: no file is read or written here.

mod emit;
mod export;
mod file;
mod import;
#[cfg(test)]
mod tests;

pub use export::export_v2;
pub use import::import;

use crate::event::Event;

/// Schema versions [`import`] reads.
pub const SUPPORTED_VERSIONS: [u32; 2] = [1, 2];

/// A trajectory file turned into log records.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The file's `schema_version` (1 or 2).
    pub schema_version: u32,
    /// The records to append to a fresh log, in order, `run.started` first.
    pub events: Vec<Event>,
    /// v1's free-text summary of background processes (untracked: resume
    /// shows it as "processes from the earlier run (not tracked)").
    pub background: Option<String>,
    /// The file's `tool_signature`, when it has one. It is also put in
    /// `run.started.tool_signature`, and that is what resume compares with
    /// the current tool set, once the log is written, as for any log. When
    /// the file has none, `run.started.tool_signature` is empty and the
    /// caller fills in the signature of the tool set for the run's settings
    /// (plan, read-only).
    pub tool_signature: Option<String>,
}

/// Why a trajectory file cannot be imported. Each message names what is
/// wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrajectoryError {
    #[error("the file ends early: line {line} column {column} (truncated or partly written?)")]
    Truncated { line: usize, column: usize },
    #[error("not JSON: {reason}")]
    NotJson { reason: String },
    #[error("not a trajectory: the top level is not a JSON object")]
    NotObject,
    #[error("missing field `{field}`")]
    MissingField { field: String },
    #[error("field `{field}`: {reason}")]
    BadField { field: String, reason: String },
    #[error("unknown schema_version {found}: supported versions are 1 and 2")]
    UnknownSchema { found: String },
    #[error("messages[{index}] answers tool call `{call_id}`, which no assistant message made")]
    UnknownCall { index: usize, call_id: String },
    #[error("messages[{index}] answers tool call `{call_id}`, which was already answered")]
    DuplicateAnswer { index: usize, call_id: String },
    #[error("messages[{index}]: {reason}")]
    BadMessage { index: usize, reason: String },
}
