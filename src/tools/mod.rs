//! The tools the model can call, and the registry that advertises them.
//!
//! [`ToolSet`] is built once per run from [`ToolSetOptions`]; it advertises
//! its [`ToolSpec`]s in a fixed order and hashes them into a
//! [`ToolSet::signature`] that `run.started` records. [`ToolSet::call`] runs
//! one call synchronously (the agent calls it on a blocking thread) and never
//! panics: every problem becomes a [`ToolOutcome`].
//!
//! Two kinds of failure are kept apart:
//! - a *format error*: the call itself is malformed (arguments that are not
//!   JSON, an unknown tool, arguments that fail the schema). The result says
//!   exactly what was wrong and what the arguments should be; the loop counts
//!   these and stops the run after too many in a row.
//! - an ordinary tool error (file missing, command failed): `is_error` only.
//!
//! Modules: [`tool`] (what a tool is: the [`Tool`] trait, [`ToolSpec`],
//! argument parsing), `specs` (descriptions and schemas), [`paths`] (workspace
//! confinement), [`env`](mod@env) (where commands run: local or bubblewrap sandbox),
//! [`bash`] (foreground commands), [`process`] (background processes and the
//! `process` tool), [`files`] (read, write, edit), [`search`] (grep, glob),
//! [`plan_tool`] (update_plan), [`output`] (bounded output buffers).

pub mod bash;
pub mod env;
pub mod files;
pub mod output;
pub mod paths;
pub mod plan_tool;
pub mod process;
pub mod search;
mod specs;
pub mod tool;

pub use env::{EnvError, ExecEnv, HideVars, LocalEnv, SandboxEnv};
pub use process::{ProcessStatus, ProcessSummary, ProcessTable, proc_start_time};
pub use tool::{Effect, Tool, ToolSpec, TypedTool, parse_args};

use crate::event::{Event, PlanItem, ToolCall};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Which tools a run offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolSetOptions {
    /// Offer no tool that changes files or runs commands.
    pub read_only: bool,
    /// Offer `update_plan`.
    pub plan: bool,
}

/// Everything a tool call may act on.
pub struct ToolContext<'a> {
    /// The workspace directory; every path is confined to it.
    pub workspace: &'a Path,
    /// The step the call belongs to (recorded in `process.started`).
    pub step: u64,
    /// Where commands run.
    pub env: &'a dyn ExecEnv,
    /// Background processes of this run.
    pub processes: &'a ProcessTable,
    /// The current plan, if any.
    pub plan: Option<&'a crate::session::Plan>,
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

/// The tools offered to one run.
#[derive(Debug, Clone)]
pub struct ToolSet {
    opts: ToolSetOptions,
    specs: Vec<ToolSpec>,
}

impl ToolSet {
    pub fn new(opts: ToolSetOptions) -> ToolSet {
        let specs = specs::ALL_TOOLS
            .iter()
            .filter(|name| !(opts.read_only && specs::MUTATING_TOOLS.contains(name)))
            .filter(|name| opts.plan || **name != "update_plan")
            .filter_map(|name| specs::spec(name))
            .collect();
        ToolSet { opts, specs }
    }

    pub fn options(&self) -> ToolSetOptions {
        self.opts
    }

    /// The advertised tools, in a fixed order.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// A stable hash of the advertised tools (names, descriptions and schemas,
    /// in order): the first 16 hex digits of a SHA-256.
    pub fn signature(&self) -> String {
        let mut hasher = Sha256::new();
        for spec in &self.specs {
            for part in [
                spec.name.as_str(),
                spec.description.as_str(),
                &spec.parameters.to_string(),
            ] {
                hasher.update((part.len() as u64).to_le_bytes());
                hasher.update(part.as_bytes());
            }
        }
        let digest = hasher.finalize();
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// Tools with no side effects, safe to re-run on resume.
    pub fn is_rerunnable(name: &str) -> bool {
        matches!(name, "read" | "grep" | "glob")
    }

    /// Runs one call. Never panics.
    pub fn call(&self, ctx: &ToolContext, call: &ToolCall) -> ToolOutcome {
        if !self.specs.iter().any(|s| s.name == call.name) {
            return ToolOutcome::format_error(format!(
                "Unknown tool `{}`. Available tools: {}.",
                call.name,
                self.names().join(", ")
            ));
        }
        match catch_unwind(AssertUnwindSafe(|| dispatch(ctx, call))) {
            Ok(outcome) => outcome,
            Err(_) => ToolOutcome::error(format!(
                "internal error: the `{}` tool failed unexpectedly",
                call.name
            )),
        }
    }
}

fn dispatch(ctx: &ToolContext, call: &ToolCall) -> ToolOutcome {
    let name = call.name.as_str();
    let raw = call.arguments.as_str();
    let run = || -> Result<ToolOutcome, ToolOutcome> {
        Ok(match name {
            "bash" => bash::run(ctx, builtin_args(name, raw)?),
            "process" => process::run_tool(ctx, builtin_args(name, raw)?),
            "read" => files::read(ctx, builtin_args(name, raw)?),
            "write" => files::write(ctx, builtin_args(name, raw)?),
            "edit" => files::edit(ctx, builtin_args(name, raw)?),
            "grep" => search::grep(ctx, builtin_args(name, raw)?),
            "glob" => search::glob(ctx, builtin_args(name, raw)?),
            "update_plan" => plan_tool::run(ctx, builtin_args(name, raw)?),
            other => ToolOutcome::format_error(format!("Unknown tool `{other}`.")),
        })
    };
    run().unwrap_or_else(|e| e)
}

/// [`parse_args`] with the usage line of a built-in tool.
fn builtin_args<T: DeserializeOwned>(name: &str, raw: &str) -> Result<T, ToolOutcome> {
    parse_args(name, specs::usage(name), raw)
}
