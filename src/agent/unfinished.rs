//! A reply that did not end its turn normally: cut at the output limit (its
//! calls are not run and the model is told, a bounded number of times in a
//! row), refused, or paused with nothing to run.

use super::{Agent, AgentError, Turn};
use crate::event::{Event, RunStatus, StopReason, ToolCall, ToolResult, UserMessage};

/// What the loop does with a reply that did not end its turn normally.
pub(super) enum Unfinished {
    /// Ask the model again (it was told why).
    Again,
    /// The turn is over.
    Stop(Turn),
}

/// Replies cut at the output limit the model is told of in a row before
/// the run stops `truncated`.
pub const MAX_TRUNCATED_IN_ROW: u32 = 2;

/// The result of a call in a refused reply.
const REFUSED_CALL_TEXT: &str = "[not run: the response that made this call ended in a refusal]";

impl Agent {
    /// A reply that did not end its turn normally: cut at the output limit
    /// (its calls are not run; the model is told, at most
    /// [`MAX_TRUNCATED_IN_ROW`] times in a row, then the run stops
    /// `truncated`), refused (the run stops `refused`) or paused with no
    /// calls (asked again as it is). `None` for a reply the loop goes on
    /// with as usual.
    pub(super) fn unfinished_reply(
        &mut self,
        step: u64,
        stop: StopReason,
        calls: &[ToolCall],
    ) -> Result<Option<Unfinished>, AgentError> {
        match stop {
            StopReason::MaxTokens => {}
            StopReason::Refusal | StopReason::ContentFilter => {
                self.settle_unrun(step, calls, REFUSED_CALL_TEXT)?;
                self.save_step(step)?;
                let reason = format!("the model's answer ended with {}", stop.as_str());
                return self
                    .finish(RunStatus::Refused, Some(reason))
                    .map(|s| Some(Unfinished::Stop(Turn::Finished(s))));
            }
            // A paused turn (Anthropic `pause_turn`) with nothing to run is
            // no answer: it goes back as it is and the model is asked to go
            // on. With calls, they run first, as after any reply.
            StopReason::Pause if calls.is_empty() => {
                self.save_step(step)?;
                if let Some(sig) = self.stop.signal() {
                    return self.stop_turn(sig).map(|t| Some(Unfinished::Stop(t)));
                }
                return Ok(Some(Unfinished::Again));
            }
            StopReason::EndTurn | StopReason::ToolCalls | StopReason::Pause => {
                return Ok(None);
            }
        }
        // Counted by the fold from the staged `model.response` (and the
        // ones before it in the log, so a resume goes on counting).
        let in_row = self.state().truncated_in_row;
        self.settle_unrun(step, calls, crate::event::TRUNCATED_CALL_TEXT)?;
        if in_row > MAX_TRUNCATED_IN_ROW {
            self.save_step(step)?;
            let reason =
                format!("the model's answer was cut at the output limit {in_row} times in a row");
            return self
                .finish(RunStatus::Truncated, Some(reason))
                .map(|s| Some(Unfinished::Stop(Turn::Finished(s))));
        }
        self.stage(Event::UserMessage(UserMessage {
            step,
            content: crate::event::TRUNCATED_NOTICE.to_string(),
            source: crate::event::TRUNCATED_SOURCE.to_string(),
        }))?;
        self.save_step(step)?;
        if let Some(sig) = self.stop.signal() {
            return self.stop_turn(sig).map(|t| Some(Unfinished::Stop(t)));
        }
        Ok(Some(Unfinished::Again))
    }

    /// Results for calls that are never run (their reply was cut or
    /// refused): an error saying why, with no `tool.started`.
    pub(super) fn settle_unrun(
        &mut self,
        step: u64,
        calls: &[ToolCall],
        text: &str,
    ) -> Result<(), AgentError> {
        for c in calls {
            self.stage(Event::ToolResult(ToolResult::new(
                step, &c.id, &c.name, text, true,
            )))?;
        }
        Ok(())
    }
}
