//! [`ToolSet`]: the tools one run offers, in the order they are advertised.
//!
//! Which tools are offered follows from their [`Effect`] and the run's
//! [`ToolSetOptions`]: a read-only run leaves out every `Mutating` tool, and a
//! `Plan` tool is offered only with the plan enabled. Resume re-runs an
//! interrupted call only when its tool is `ReadOnly`.

use super::bash::BashTool;
use super::edit::EditTool;
use super::glob::GlobTool;
use super::grep::GrepTool;
use super::process::ProcessTool;
use super::read::ReadTool;
use super::update_plan::UpdatePlanTool;
use super::write::WriteTool;
use super::{Effect, Tool, ToolContext, ToolOutcome, ToolSpec};
use crate::event::ToolCall;
use sha2::{Digest, Sha256};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use thiserror::Error;

/// Which tools a run offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolSetOptions {
    /// Offer no tool that changes files or runs commands.
    pub read_only: bool,
    /// Offer `update_plan`.
    pub plan: bool,
}

impl ToolSetOptions {
    /// Does a run with these options offer a tool with `effect`?
    pub fn offers(&self, effect: Effect) -> bool {
        match effect {
            Effect::ReadOnly => true,
            Effect::Mutating => !self.read_only,
            Effect::Plan => self.plan,
        }
    }
}

/// [`ToolSet::register`] was given a name the set already holds.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("a tool named `{0}` is already registered")]
pub struct DuplicateTool(pub String);

/// The built-in tools, in the order they are advertised.
fn builtins() -> Vec<Box<dyn Tool>> {
    vec![
        Box::new(BashTool),
        Box::new(ProcessTool),
        Box::new(ReadTool),
        Box::new(WriteTool),
        Box::new(EditTool),
        Box::new(GrepTool),
        Box::new(GlobTool),
        Box::new(UpdatePlanTool),
    ]
}

/// The tools offered to one run. Cloning shares the tools.
#[derive(Clone)]
pub struct ToolSet {
    opts: ToolSetOptions,
    tools: Vec<Arc<dyn Tool>>,
    /// `tools[i].spec()`, computed once.
    /// Shared with every model request (no copy of the schemas a step).
    specs: Arc<Vec<ToolSpec>>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet")
            .field("opts", &self.opts)
            .field("tools", &self.names())
            .finish_non_exhaustive()
    }
}

impl ToolSet {
    /// The built-in tools these options offer.
    ///
    /// # Panics
    /// Never: the built-in tools have distinct names.
    pub fn new(opts: ToolSetOptions) -> ToolSet {
        let mut set = ToolSet {
            opts,
            tools: Vec::new(),
            specs: Arc::default(),
        };
        for tool in builtins() {
            set.register(tool)
                .expect("the built-in tools have distinct names");
        }
        set
    }

    /// Adds a tool after those already there, if the options offer its
    /// effect; `Ok(false)` when they do not (the tool is dropped). The tool's
    /// spec becomes part of [`ToolSet::specs`] and [`ToolSet::signature`].
    pub fn register(&mut self, tool: Box<dyn Tool>) -> Result<bool, DuplicateTool> {
        if self.specs.iter().any(|s| s.name == tool.name()) {
            return Err(DuplicateTool(tool.name().to_string()));
        }
        if !self.opts.offers(tool.effect()) {
            return Ok(false);
        }
        Arc::make_mut(&mut self.specs).push(tool.spec());
        self.tools.push(Arc::from(tool));
        Ok(true)
    }

    /// The advertised tools, in a fixed order.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The same, shared (what a model request carries).
    pub fn shared_specs(&self) -> Arc<Vec<ToolSpec>> {
        Arc::clone(&self.specs)
    }

    pub fn names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// A stable hash of the advertised tools (names, descriptions and schemas,
    /// in order): the first 16 hex digits of a SHA-256.
    pub fn signature(&self) -> String {
        let mut hasher = Sha256::new();
        for spec in self.specs.iter() {
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

    fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// The effect of an offered tool (`None` for a name the set does not offer).
    pub fn effect(&self, name: &str) -> Option<Effect> {
        self.get(name).map(|t| t.effect())
    }

    /// Tools with no side effects, safe to re-run on resume.
    pub fn is_rerunnable(&self, name: &str) -> bool {
        self.effect(name) == Some(Effect::ReadOnly)
    }

    /// Whether the call starts a foreground command (see [`Tool::launches`]).
    pub fn launches(&self, call: &ToolCall) -> bool {
        self.get(&call.name).is_some_and(|t| {
            catch_unwind(AssertUnwindSafe(|| t.launches(&call.arguments))).unwrap_or(false)
        })
    }

    /// Runs one call. Never panics.
    pub fn call(&self, ctx: &ToolContext, call: &ToolCall) -> ToolOutcome {
        let Some(tool) = self.get(&call.name) else {
            return ToolOutcome::format_error(format!(
                "Unknown tool `{}`. Available tools: {}.",
                call.name,
                self.names().join(", ")
            ));
        };
        match catch_unwind(AssertUnwindSafe(|| tool.call(ctx, &call.arguments))) {
            Ok(outcome) => outcome,
            Err(_) => ToolOutcome::error(format!(
                "internal error: the `{}` tool failed unexpectedly",
                call.name
            )),
        }
    }
}
