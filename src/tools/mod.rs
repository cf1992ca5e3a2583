//! The tools the model can call, and the registry that advertises them.
//!
//! Every tool implements [`Tool`]: its name, description, JSON Schema, a
//! one-line usage string for format errors, its [`Effect`] and `call`. The
//! built-in tools implement [`TypedTool`] instead, which parses the raw
//! arguments into the tool's own argument type. [`ToolSet`] is built once per
//! run from [`ToolSetOptions`] (more tools can be added with
//! [`ToolSet::register`]); it advertises its [`ToolSpec`]s in a fixed order
//! and hashes them into a [`ToolSet::signature`] that `run.started` records.
//! [`ToolSet::call`] runs one call synchronously (the agent calls it on a
//! blocking thread) and never panics: every problem becomes a [`ToolOutcome`].
//!
//! Two kinds of failure are kept apart:
//! - a *format error*: the call itself is malformed (arguments that are not
//!   JSON, an unknown tool, arguments that fail the schema). The result says
//!   exactly what was wrong and what the arguments should be; the loop counts
//!   these and stops the run after too many in a row.
//! - an ordinary tool error (file missing, command failed): `is_error` only.
//!
//! Modules: [`tool`] (the traits, [`ToolSpec`], argument parsing),
//! [`registry`] ([`ToolSet`]). One module per tool, holding its description,
//! schema, argument type, effect and code: [`bash`] (foreground commands),
//! [`process`] (background processes: the [`ProcessTable`] and the `process`
//! tool), [`read`], [`write`](mod@write), [`edit`], [`grep`], [`glob`](mod@glob),
//! [`update_plan`]. Helpers: `files` (what read, write and edit share),
//! `search` (the walker and globs of grep and glob), [`paths`] (workspace
//! confinement), [`output`] (bounded output buffers). Where commands run
//! (local, sandbox, container), their process groups and the run's
//! protected files are [`crate::exec`]'s.

pub(crate) mod bash;
pub(crate) mod edit;
mod files;
pub(crate) mod glob;
pub(crate) mod grep;
pub(crate) mod output;
pub(crate) mod paths;
pub mod process;
pub(crate) mod read;
pub(crate) mod registry;
mod search;
pub(crate) mod tool;
pub(crate) mod update_plan;
pub(crate) mod write;

#[cfg(test)]
mod tests;

pub use process::{ProcessStatus, ProcessTable, proc_start_time};
pub use registry::{DuplicateTool, ToolSet, ToolSetOptions};
pub use tool::{Effect, Tool, ToolSpec, TypedTool, parse_args};

use crate::event::{Event, PlanItem};
use std::path::Path;

/// Everything a tool call may act on.
pub struct ToolContext<'a> {
    /// The workspace directory; every path is confined to it.
    pub workspace: &'a Path,
    /// The step the call belongs to (recorded in `process.started`).
    pub step: u64,
    /// Where commands run.
    pub env: &'a dyn crate::exec::ExecEnv,
    /// Background processes of this run.
    pub processes: &'a ProcessTable,
    /// The current plan, if any.
    pub plan: Option<&'a crate::session::Plan>,
    /// Records a foreground command's process group before it may act.
    pub launch: &'a dyn crate::exec::group::Launch,
    /// The run's own files, which no tool may read or change.
    pub protected: &'a crate::exec::protected::Protected,
    /// Set when a stopping signal arrives: a running command is stopped.
    pub stop: &'a crate::signals::StopToken,
}

/// What one call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// The text the model is shown.
    pub content: String,
    pub is_error: bool,
    /// The call itself was malformed: bad JSON arguments, unknown tool,
    /// arguments that fail the schema.
    pub format_error: bool,
    /// Records to append before the `tool.result` (e.g. `process.started`).
    pub records: Vec<Event>,
    /// A validated new plan (items, note) from `update_plan`; the loop writes
    /// `plan.updated` after the `tool.result`.
    pub plan_update: Option<(Vec<PlanItem>, Option<String>)>,
    /// The signal that stopped the call (`SIGINT`...), when one did.
    pub signal: Option<&'static str>,
}

impl ToolOutcome {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: false,
            format_error: false,
            records: Vec::new(),
            plan_update: None,
            signal: None,
        }
    }

    /// An ordinary tool failure (not a format error).
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutcome {
            is_error: true,
            ..Self::ok(content)
        }
    }

    /// A malformed call.
    pub fn format_error(content: impl Into<String>) -> Self {
        ToolOutcome {
            is_error: true,
            format_error: true,
            ..Self::ok(content)
        }
    }
}
