//! Compaction: when the request for the next step would be too large, ask
//! the model for a hand-off summary and replace the older history with it.
//!
//! The size is measured on what is really sent (see [`Agent::context_tokens`]):
//! the serialized request body in bytes / 4, or, when the server reported the
//! previous request's prompt tokens, that count plus bytes / 4 of what the
//! body grew by since (kept in the state, so a resume goes on from it). The summarizer call
//! is the run's own request (the same tools, system prompt and messages,
//! the current plan among them) with `tool_choice` none and an instruction
//! last, so its prefix is read from the provider's cache. The most recent
//! `keep_recent` messages are kept verbatim, never splitting an assistant tool
//! call from its results. The `compaction` record carries the new view, so a
//! replay reaches exactly the same view. A summarizer that fails or answers
//! nothing leaves the run uncompacted; no message is ever lost (the full
//! history stays in the log). A summarizer that answered without a summary is
//! still recorded (a `compaction` record marked `failed`, view unchanged) so
//! its cost is counted; after a failure the next attempt waits until the view
//! has grown by a quarter.

use super::{Agent, AgentError};
use crate::event::{Compaction, Event, Message, Role};
use crate::model::{Encoded, ModelRequest, Purpose};

/// Prefix of the summary message that heads a compacted view.
pub const SUMMARY_PREFIX: &str = "[Summary of earlier work]";

/// The summarizer's instruction, sent after the run's own messages.
const SUMMARIZER_INSTRUCTION: &str = "[Compaction] Your context is being compacted: the \
conversation above, except its most recent messages, will be replaced by a hand-off summary that \
you write now. Another instance of you continues from that summary plus those recent messages \
alone, so be concrete. Do not call any tool. Write the summary: the task, progress so far, \
decisions made and why, open work, and key facts (file paths, commands, results, errors).";

/// Added to the instruction when the run has a plan: the plan is pinned
/// again after the summary, so the summary refers to it.
const SUMMARIZER_PLAN_NOTE: &str = " The current plan (the last [Current plan] message above) \
stays pinned after the summary: refer to its item ids rather than copying it.";

/// Where the kept tail of `view` starts: at most `keep` messages, moved
/// earlier so it never starts with a tool result (its call stays with it).
/// Returns None when there is nothing older to summarize.
pub fn split_point(view: &[Message], keep: usize) -> Option<usize> {
    // view[0] is the system prompt; it is never summarized.
    if view.len() <= 1 {
        return None;
    }
    let mut split = view.len().saturating_sub(keep).max(1);
    while split > 1 && view[split].role == Role::Tool {
        split -= 1;
    }
    (split > 1).then_some(split)
}

/// Bytes / 4, rounded up: the size in tokens assumed for bytes no server
/// has counted. JSON punctuation and escapes count too, so it errs towards
/// compacting early.
fn tokens_of(bytes: u64) -> u64 {
    bytes.div_ceil(4)
}

impl Agent {
    /// The request for `step` and its body as the provider will send it.
    pub(super) fn step_request(&self, step: u64) -> (ModelRequest, Encoded) {
        let request = ModelRequest {
            messages: self.state().model_messages(),
            tools: self.tools.shared_specs(),
            purpose: Purpose::Step,
            step,
            cache_key: self.cache_key(),
        };
        let body = self.provider.encode(&request);
        (request, body)
    }

    /// Asks the summarizer with `messages` (the run's tools, none of them
    /// callable); `None` when a stop came first.
    async fn ask_summary(
        &self,
        messages: crate::session::View,
    ) -> Option<Result<crate::model::ModelReply, crate::model::ModelError>> {
        let request = ModelRequest {
            messages,
            tools: self.tools.shared_specs(),
            purpose: Purpose::Summary,
            step: self.state().step,
            cache_key: self.cache_key(),
        };
        let mut ignore = |_: &str| {};
        tokio::select! {
            r = self.provider.complete(&request, &mut ignore) => Some(r),
            () = self.stop.wait() => None,
        }
    }

    /// The run's id, as the prompt cache's key.
    fn cache_key(&self) -> Option<std::sync::Arc<str>> {
        self.state()
            .run
            .as_ref()
            .map(|r| std::sync::Arc::from(r.run_id.as_str()))
    }

    /// The context size of sending `body`, in tokens: the previous
    /// request's prompt tokens as the server counted them plus bytes / 4 of
    /// what the body grew by since, or bytes / 4 of the whole body when no
    /// count is known (first request of a process, after a compaction, a
    /// server that reports no usage).
    pub(super) fn context_tokens(&self, body: &Encoded) -> u64 {
        match self.state().last_request {
            Some(sent) => sent
                .tokens
                .saturating_add(tokens_of((body.len() as u64).saturating_sub(sent.bytes))),
            None => tokens_of(body.len() as u64),
        }
    }

    /// Compacts when `context` (the next request's size, from
    /// [`Agent::context_tokens`]) is over the threshold; returns whether the
    /// view changed. Never fails the run for a summarizer problem: it warns
    /// and carries on uncompacted.
    pub(super) async fn maybe_compact(&mut self, context: u64) -> Result<bool, AgentError> {
        let threshold = self.config.compact_at;
        let estimate = context;
        // The person asked for it (a chat's `/compact`): whatever the size.
        let asked = self.state().compaction_requested;
        if estimate <= threshold && !asked {
            return Ok(false);
        }
        // After a failed attempt, try again only once the context has grown
        // by a quarter, not on every step.
        if !asked
            && let Some(failed_at) = self.compaction_backoff
            && estimate < failed_at + failed_at / 4
        {
            return Ok(false);
        }
        // Asked for, everything before the newest message is summarized.
        let keep = if asked { 1 } else { self.config.keep_recent };
        let view = self.state().view.clone();
        let Some(split) = split_point(&view, keep) else {
            return Ok(false);
        };
        // The run's own request (tools, system prompt, messages, the plan
        // among them), so the provider serves it from the prompt cache,
        // then the instruction.
        let sent = self.state().model_messages();
        let mut instruction = String::from(SUMMARIZER_INSTRUCTION);
        if self.config.plan_enabled {
            instruction.push_str(SUMMARIZER_PLAN_NOTE);
        }
        let mut messages = sent.clone();
        messages.push(Message::user(&instruction));
        let Some(mut reply) = self.ask_summary(messages).await else {
            // Abandoned: the loop sees the signal and ends the run.
            return Ok(false);
        };
        if reply
            .as_ref()
            .is_err_and(crate::model::ModelError::is_context_overflow)
        {
            // The run's request no longer fits the window (the overflow that
            // brought it here): the part to be summarized alone, still the
            // start of the run's request, with the plan in the instruction.
            let cut = sent.len() - (view.len() - split);
            let mut older: Vec<Message> = sent[..cut].to_vec();
            if self.config.plan_enabled {
                instruction.push_str(&format!(
                    "\n\n[Current plan]\n{}",
                    crate::session::plan::render(self.state().plan.as_ref())
                ));
            }
            older.push(Message::user(instruction));
            match self.ask_summary(older.into()).await {
                Some(r) => reply = r,
                None => return Ok(false),
            }
        }
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                self.out
                    .warn(&format!("compaction failed ({e}); continuing uncompacted"));
                self.compaction_backoff = Some(estimate);
                return Ok(false);
            }
        };
        let summary = reply.message.content.trim().to_string();
        let cost = self.config.cost_of(&reply.usage);
        if summary.is_empty() {
            self.out
                .warn("compaction failed (empty summary); continuing uncompacted");
            self.compaction_backoff = Some(estimate);
            // The call still cost something: record it without changing the view.
            let ev = Event::Compaction(Compaction {
                step: self.state().step,
                summary,
                view: view[1..].to_vec(),
                plan_version: self.state().plan.as_ref().map_or(0, |p| p.version),
                usage: reply.usage,
                cost_usd: cost,
                replaced: 0,
                failed: true,
                context_tokens: estimate,
            });
            self.append(ev)?;
            return Ok(false);
        }
        let mut new_view = vec![Message::user(format!("{SUMMARY_PREFIX}\n{summary}"))];
        new_view.extend_from_slice(&view[split..]);
        let ev = Event::Compaction(Compaction {
            step: self.state().step,
            summary,
            view: new_view,
            plan_version: self.state().plan.as_ref().map_or(0, |p| p.version),
            usage: reply.usage,
            cost_usd: cost,
            replaced: (split - 1) as u64,
            failed: false,
            context_tokens: estimate,
        });
        self.append(ev)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ToolCall;

    fn call(id: &str) -> Message {
        Message::assistant(
            "",
            vec![ToolCall {
                id: id.into(),
                name: "bash".into(),
                arguments: "{}".into(),
            }],
        )
    }

    #[test]
    fn split_never_separates_a_call_from_its_result() {
        let view = vec![
            Message::system("s"),
            Message::user("task"),
            call("a"),
            Message::tool("a", "bash", "out", false),
            call("b"),
            Message::tool("b", "bash", "out", false),
        ];
        // keep 1 would start the tail at a tool result: move back to its call.
        assert_eq!(split_point(&view, 1), Some(4));
        assert_eq!(split_point(&view, 2), Some(4));
        assert_eq!(split_point(&view, 3), Some(2));
        // Nothing older than the task to summarize.
        assert_eq!(split_point(&view, 5), None);
        assert_eq!(split_point(&view[..1], 1), None);
    }
}
