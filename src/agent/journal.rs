//! A call's journal: the records one tool call writes, and which of them
//! are sync points, named in one place. The call runner (`call.rs`) writes
//! through it, so the write order of the contract (section 2) reads off
//! [`Agent::run_call`]:
//!
//! - [`Journal::before_hook`]: a sync point before a pre or post hook runs.
//!   What a hook is shown is durable before it runs: it is a command of the
//!   person's and may act on it.
//! - [`Journal::intent`]: `tool.started`, a sync point with everything
//!   staged before it (the step's `model.response`, the previous call's
//!   result), before the tool runs. A foreground command's intent is
//!   written by its launch instead, with its process group, before the
//!   command may act (`CallLauncher::record` in `call.rs`); a re-run call's
//!   is in the log already, so only the sync point is made.
//! - [`Journal::unlaunched`]: a command that could not be started (nothing
//!   ran) still gets its `tool.started` before its result.
//! - [`Journal::outcome`] and [`Journal::result`]: what the tool recorded
//!   (`process.started`), then `tool.result`: staged, with no sync point of
//!   their own. They become durable with the next one (the next call's
//!   intent, or the step's `step.saved`), before anything depends on them.
//! - [`Journal::intents`]: the `tool.started` records of read-only calls run
//!   at once, made durable together (one sync point).

use super::{Agent, AgentError};
use crate::event::{Event, ToolCall, ToolResult, ToolStarted};
use crate::tools::ToolOutcome;

/// The journal of one call of one step.
pub(super) struct Journal<'c> {
    pub(super) step: u64,
    pub(super) call: &'c ToolCall,
}

impl<'c> Journal<'c> {
    pub(super) fn of(step: u64, call: &'c ToolCall) -> Journal<'c> {
        Journal { step, call }
    }

    /// Sync point: before a hook runs, everything staged is durable.
    // A method of the journal, though it needs none of it: the sync points
    // of a call are all named through its journal.
    #[allow(clippy::unused_self)]
    pub(super) fn before_hook(&self, agent: &mut Agent) -> Result<(), AgentError> {
        agent.flush()?;
        Ok(())
    }

    /// Sync point: the call's `tool.started` (unless `rerun`: a re-run's is
    /// durable already), with everything staged before it, before the tool
    /// runs.
    pub(super) fn intent(&self, agent: &mut Agent, rerun: bool) -> Result<(), AgentError> {
        if !rerun {
            agent.stage(Event::ToolStarted(ToolStarted::new(self.step, self.call)))?;
        }
        agent.flush()?;
        Ok(())
    }

    /// Staged: the `tool.started` of a command that could not be started,
    /// so that its result still follows an intent.
    pub(super) fn unlaunched(&self, agent: &mut Agent) -> Result<(), AgentError> {
        agent.stage(Event::ToolStarted(ToolStarted::new(self.step, self.call)))
    }

    /// Staged: the records the tool made (taken out of `outcome`).
    #[allow(clippy::unused_self)]
    pub(super) fn outcome(
        &self,
        agent: &mut Agent,
        outcome: &mut ToolOutcome,
    ) -> Result<(), AgentError> {
        for record in std::mem::take(&mut outcome.records) {
            agent.stage(record)?;
        }
        Ok(())
    }

    /// Staged: the call's `tool.result`, durable with the next sync point.
    pub(super) fn result(&self, agent: &mut Agent, result: ToolResult) -> Result<(), AgentError> {
        debug_assert_eq!(
            (result.step, result.call_id.as_str()),
            (self.step, self.call.id.as_str()),
            "a call's journal records only its own result"
        );
        agent.stage(Event::ToolResult(result))
    }

    /// Sync point: the `tool.started` of each of `calls` (read-only calls of
    /// `step` run at once), together.
    pub(super) fn intents<'a>(
        agent: &mut Agent,
        step: u64,
        calls: impl IntoIterator<Item = &'a ToolCall>,
    ) -> Result<(), AgentError> {
        for call in calls {
            agent.stage(Event::ToolStarted(ToolStarted::new(step, call)))?;
        }
        agent.flush()?;
        Ok(())
    }
}
