//! The agent loop: persist the intent, act, persist the result.
//!
//! Each step: build the model view from state, call the model, append
//! `model.response` (the assistant message with its pending calls), then for
//! each call in order append `tool.started`, run the tool, append
//! `tool.result` (and `plan.updated` for update_plan), and after the last call
//! `step.saved`. Every append is fdatasync'd before the next thing happens, and
//! state changes only through `State::apply` inside `Store::append`.

pub mod approval;
pub mod approval_view;
mod call;
mod chat;
mod checkpoints;
pub(crate) mod compaction;
mod finish;
mod hook_calls;
pub(crate) mod hooks;
pub mod instructions;
mod journal;
mod unfinished;

pub mod prompt;
pub(crate) mod resume;

pub use unfinished::MAX_TRUNCATED_IN_ROW;
use unfinished::Unfinished;

use crate::config::RunConfig;
use crate::event::{
    ChatWaiting, Event, HookRun, Message, ModelResponse, RunStatus, ToolCall, ToolResult,
};
use crate::exec::ExecEnv;
use crate::model::Provider;
use crate::report::Output;
use crate::session::State;
use crate::signals::StopToken;
use crate::store::{Store, StoreError};
use crate::tools::{ProcessTable, ToolSet};
use nix::sys::signal::Signal;
use serde_json::json;

/// Why a run could not go on. Each maps to an exit code of the contract.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The model call failed for good; `auth` when the server refused the
    /// key.
    #[error("{reason}")]
    Model { reason: String, auth: bool },
    /// Input refused before anything ran (exit 2).
    #[error("{0}")]
    Refused(String),
}

impl AgentError {
    /// Whether the run was refused (its input's fault) rather than failed.
    pub fn is_refusal(&self) -> bool {
        match self {
            AgentError::Store(e) => e.is_refusal(),
            AgentError::Model { .. } => false,
            AgentError::Refused(_) => true,
        }
    }
}

/// How a turn of the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// The run finished (or a limit or a signal stopped it).
    Finished(RunStatus),
    /// A chat's turn ended: the person types the next message.
    Waiting,
}

/// What the pre hook said about a call.
struct PreHook {
    run: HookRun,
    /// `Some(reason)` when the call must not run.
    blocked: Option<String>,
}

/// What a run is made of: its validated config, its log and the parts the
/// config chose.
pub struct AgentParts {
    pub config: RunConfig,
    /// The run's own files (log, config, hooks), out of every tool's reach.
    pub protected: crate::exec::protected::Protected,
    pub store: Store,
    pub tools: ToolSet,
    pub provider: Provider,
    pub env: Box<dyn ExecEnv>,
    pub processes: ProcessTable,
    pub out: Output,
    /// Set when a stopping signal arrives ([`crate::signals`]).
    pub stop: StopToken,
    /// Where approval questions are asked (the command line's terminal).
    pub asker: Box<dyn approval::Asker>,
}

/// A run in progress.
pub struct Agent {
    config: RunConfig,
    /// Events that may be printed only once the record (seq) they are about
    /// is durable; printed right after it.
    after_sync: Vec<(u64, String, serde_json::Value)>,
    /// The hook files as checked at start (see [`hook_calls::HookFiles`]).
    hook_files: hook_calls::HookFiles,
    protected: crate::exec::protected::Protected,
    store: Store,
    tools: ToolSet,
    provider: Provider,
    env: Box<dyn ExecEnv>,
    processes: ProcessTable,
    out: Output,
    timing: Timing,
    /// Estimate at which the last compaction attempt failed.
    compaction_backoff: Option<u64>,
    /// The workspace's checkpoint store (`None`: no usable git).
    checkpoints: Option<crate::checkpoint::Checkpointer>,
    /// Set when a stopping signal arrives.
    stop: StopToken,
    asker: Box<dyn approval::Asker>,
}

/// Where the time of this process's part of the run went: the agent's own
/// overhead is the wall time minus the model's and the tools' (and hooks').
#[derive(Debug, Clone, Default)]
struct Timing {
    started: Option<std::time::Instant>,
    io_at_start: tinyagent_store::wal::writer::IoStats,
    model: std::time::Duration,
    tools: std::time::Duration,
    checkpoints: std::time::Duration,
    /// Waiting for the person: approval questions, a chat's prompt.
    waiting: std::time::Duration,
    steps: u64,
}

impl Agent {
    pub fn new(parts: AgentParts) -> Result<Agent, AgentError> {
        if parts.store.state().run.is_none() {
            return Err(AgentError::Refused(
                "the log has no run.started record".into(),
            ));
        }
        if !parts.config.workspace.is_dir() {
            return Err(AgentError::Refused(format!(
                "the run's workspace {} is not a directory any more",
                parts.config.workspace.display()
            )));
        }
        if let Some(mirror) = &parts.config.plan_file {
            // Temp files of a plan-mirror write that a kill interrupted.
            tinyagent_store::fsutil::clean_atomic_temps(mirror);
        }
        let checkpoints = match crate::checkpoint::check_version() {
            Ok(()) => {
                let mut cp = crate::checkpoint::Checkpointer::new(
                    parts.store.path(),
                    &parts.config.workspace,
                    parts.protected.clone(),
                );
                cp.set_watch(parts.config.checkpoint_watch);
                Some(cp)
            }
            Err(e) => {
                parts
                    .out
                    .warn(&format!("workspace checkpoints are off: {e}"));
                None
            }
        };
        let mut out = parts.out;
        out.set_live_text(parts.config.model.stream);
        // What a chat's commands changed (`settings.changed`) holds on
        // resume too.
        let mut config = parts.config;
        let mut provider = parts.provider;
        if let Some(model) = &parts.store.state().model_set {
            config.model.name.clone_from(model);
            provider.set_model(model);
        }
        // A recorded `/approvals mutating` holds on resume; a recorded
        // `never` does not loosen what the log, the local config or a flag
        // ask for now (a run that asked keeps asking; `/approvals never`
        // again says otherwise).
        if parts.store.state().approvals_set == Some(crate::kinds::ApproveMode::Mutating) {
            config.approvals.mode = crate::kinds::ApproveMode::Mutating;
        }
        Ok(Agent {
            checkpoints,
            after_sync: Vec::new(),
            hook_files: hook_calls::HookFiles::of(&config.hooks, &config.workspace),
            timing: Timing::default(),
            compaction_backoff: None,
            config,
            protected: parts.protected,
            store: parts.store,
            tools: parts.tools,
            provider,
            env: parts.env,
            processes: parts.processes,
            out,
            stop: parts.stop,
            asker: parts.asker,
        })
    }

    /// The run's stop token (a chat's prompt waits on it too).
    pub fn stop_token(&self) -> &StopToken {
        &self.stop
    }

    pub fn state(&self) -> &State {
        self.store.state()
    }

    /// The run's settings as they are now.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The run's log.
    pub fn log_path(&self) -> &std::path::Path {
        self.store.path()
    }

    /// The workspace the run's tools act in.
    pub fn workspace(&self) -> &std::path::Path {
        &self.config.workspace
    }

    pub fn output(&mut self) -> &mut Output {
        &mut self.out
    }

    /// Ends the process's use of the log: the compactor finishes (with a
    /// final snapshot when records are uncovered) and the lock is released.
    /// A snapshot problem is only a warning: the log is the truth.
    pub fn close(self) {
        let Agent { store, out, .. } = self;
        match store.close_reporting() {
            Ok((saved, warnings)) => {
                for s in saved {
                    out.event(
                        "snapshot.saved",
                        json!({ "seq": s.seq, "path": s.path.display().to_string() }),
                    );
                }
                for w in warnings {
                    out.warn(&w);
                }
            }
            Err(e) => out.warn(&format!("closing the log: {e}")),
        }
    }

    /// Appends a record (durable once this returns), then reports it.
    fn append(&mut self, event: Event) -> Result<u64, AgentError> {
        self.stage(event)?;
        let flushed = self.flush()?;
        Ok(flushed)
    }

    /// Stages a record: applied to the state now, durable at the next
    /// [`Agent::flush`] (a sync point). Nothing that depends on it may happen
    /// before that: no tool starts, no event is printed, no request is sent.
    fn stage(&mut self, event: Event) -> Result<(), AgentError> {
        self.store.stage(event)?;
        Ok(())
    }

    /// A sync point: every staged record is written in one `write` and one
    /// fdatasync; then what they are about is reported, and the plan mirror
    /// is rewritten if a plan update became durable. Gives the last seq.
    fn flush(&mut self) -> Result<u64, AgentError> {
        let flushed = self.store.flush()?;
        Ok(self.report(flushed))
    }

    /// Prints what durable records are about (and what waited for them).
    fn report(&mut self, flushed: Vec<(u64, Event)>) -> u64 {
        let last = flushed.last().map_or(0, |(seq, _)| *seq);
        let waiting = std::mem::take(&mut self.after_sync);
        let plan_changed = self
            .out
            .sync_point(&flushed, self.store.last_lines(), waiting);
        if plan_changed {
            self.write_plan_file();
        }
        for saved in self.store.take_snapshot_notices() {
            self.out.event(
                "snapshot.saved",
                json!({ "seq": saved.seq, "path": saved.path.display().to_string() }),
            );
        }
        for warning in self.store.take_warnings() {
            self.out.warn(&warning);
        }
        last
    }

    /// Drives the loop until the run finishes or a limit stops it.
    pub async fn run(&mut self) -> Result<RunStatus, AgentError> {
        match self.run_turn().await? {
            Turn::Finished(status) => Ok(status),
            // Only a chat waits between turns; a run that is not one never
            // gets here, and its log says it went on.
            Turn::Waiting => Ok(RunStatus::Completed),
        }
    }

    /// Drives the loop until the model ends its turn (a chat then waits for
    /// the person: `chat.waiting`), the run finishes or a limit stops it.
    pub async fn run_turn(&mut self) -> Result<Turn, AgentError> {
        // A chat's turns are one run: timed from its first.
        if self.timing.started.is_none() {
            self.timing.started = Some(std::time::Instant::now());
            self.timing.io_at_start = self.store.io_stats();
        }
        // Staged: durable with the first sync point of the first step.
        self.checkpoint_start()?;
        // A request that did not fit was compacted and asked again.
        let mut overflowed = false;
        loop {
            self.record_exited_processes()?;
            if let Some(sig) = self.stop.signal() {
                return self.stop_turn(sig);
            }
            if let Some(status) = self.limit_reached() {
                return self.finish(status, None).map(Turn::Finished);
            }
            let step = self.state().step + 1;
            // Compaction is decided on the request as it would be sent.
            let (mut request, mut body) = self.step_request(step);
            let mut context = self.context_tokens(&body);
            if self.maybe_compact(context).await? {
                (request, body) = self.step_request(step);
                context = self.context_tokens(&body);
            }
            if let Some(sig) = self.stop.signal() {
                return self.stop_turn(sig);
            }
            self.out.thinking(step);
            let asked = std::time::Instant::now();
            let reply = {
                let out = &mut self.out;
                let mut on_text = |t: &str| out.text(t);
                // A stopping signal abandons the request: no model.response.
                tokio::select! {
                    r = self.provider.send(&request, &body, &mut on_text) => Some(r),
                    () = self.stop.wait() => None,
                }
            };
            // The request shares the state's view: let go of it before the
            // reply is applied, or that would copy the whole view.
            drop(request);
            self.timing.model += asked.elapsed();
            self.timing.steps += 1;
            self.out.done_thinking();
            let reply = match reply {
                None => {
                    return self.stop_turn(self.stop.signal().unwrap_or(Signal::SIGINT));
                }
                Some(Ok(r)) => {
                    overflowed = false;
                    r
                }
                Some(Err(e)) if e.is_context_overflow() && !overflowed => {
                    // Compact now and ask the same step again, once.
                    overflowed = true;
                    self.out.warn(&format!(
                        "the request did not fit the model's context window; compacting and \
                         asking again: {e}"
                    ));
                    if self.maybe_compact(u64::MAX).await? {
                        continue;
                    }
                    let reason = self.overflow_reason(context, &e);
                    self.finish(RunStatus::Error, Some(reason.clone()))?;
                    return Err(AgentError::Model {
                        reason,
                        auth: false,
                    });
                }
                Some(Err(e)) => {
                    let reason = if e.is_context_overflow() {
                        self.overflow_reason(context, &e)
                    } else {
                        e.to_string()
                    };
                    self.finish(RunStatus::Error, Some(reason.clone()))?;
                    return Err(AgentError::Model {
                        reason,
                        auth: e.is_auth(),
                    });
                }
            };
            let mut message = reply.message;
            normalise_call_ids(&mut message.tool_calls, step, &self.state().view);
            let cost = self.config.cost_of(&reply.usage);
            let calls = message.tool_calls.clone();
            let stop = reply.stop_reason;
            // Durable with the first tool.started (or step.saved).
            self.stage(Event::ModelResponse(ModelResponse {
                step,
                pending: calls.iter().map(|c| c.id.clone()).collect(),
                message,
                usage: reply.usage,
                cost_usd: cost,
                context_tokens: context,
                request_bytes: body.len() as u64,
                stop_reason: Some(stop),
                stop_reason_raw: reply.stop_reason_raw,
            }))?;
            match self.unfinished_reply(step, stop, &calls)? {
                Some(Unfinished::Again) => continue,
                Some(Unfinished::Stop(turn)) => return Ok(turn),
                None => {}
            }
            let mut next = 0;
            while next < calls.len() {
                let call = &calls[next];
                if let Some(sig) = self.stop.signal() {
                    // Stopped before this call started: it never runs.
                    let mut result = ToolResult::not_run(step, &call.id, &call.name);
                    result.signal = Some(crate::signals::name(sig).to_string());
                    self.stage(Event::ToolResult(result))?;
                    next += 1;
                    continue;
                }
                // Consecutive read-only calls run at once; anything else
                // one after another, in call order.
                let run = calls[next..]
                    .iter()
                    .take_while(|c| self.tools.is_rerunnable(&c.name))
                    .count();
                if run >= 2 {
                    self.run_read_only(step, &calls[next..next + run])?;
                    next += run;
                } else {
                    self.run_call(step, call, false)?;
                    next += 1;
                }
            }
            self.save_step(step)?;
            if let Some(sig) = self.stop.signal() {
                return self.stop_turn(sig);
            }
            if calls.is_empty() {
                if self.config.chat {
                    self.append(Event::ChatWaiting(ChatWaiting {
                        step,
                        interrupted: None,
                    }))?;
                    return Ok(Turn::Waiting);
                }
                return self.finish(RunStatus::Completed, None).map(Turn::Finished);
            }
        }
    }

    /// Why a request that does not fit the context window ends the run:
    /// its size and the window, and the server's words.
    fn overflow_reason(&self, context: u64, e: &crate::model::ModelError) -> String {
        format!(
            "the request (about {context} tokens) does not fit the model's context window \
             ({} tokens) even after compaction; shorten the task or use a model with a larger \
             window ({e})",
            self.config.context_window()
        )
    }
}

/// Gives every call a unique, non-empty id (some servers send none, or
/// repeat them within a response or across steps); the log and the model
/// both need ids that name one call. `view` is the model's view, whose
/// calls' ids are taken.
///
/// The ids are looked up by scanning, not collected into a set: a response
/// has a call or a few, and hashing every id of the view each step cost
/// more than comparing them (most differ in length or first bytes).
fn normalise_call_ids(calls: &mut [ToolCall], step: u64, view: &[Message]) {
    let in_view = |id: &str| view.iter().any(|m| m.tool_calls.iter().any(|c| c.id == id));
    for i in 0..calls.len() {
        let (before, rest) = calls.split_at_mut(i);
        let taken = |id: &str| in_view(id) || before.iter().any(|b| b.id == id);
        let Some(call) = rest.first_mut() else { break };
        if call.id.is_empty() || taken(&call.id) {
            let mut id = ToolCall::fallback_id(step, i);
            while taken(&id) {
                id.push('_');
            }
            call.id = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::normalise_call_ids;
    use crate::event::{Message, ToolCall};

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: "{}".into(),
        }
    }

    fn ids(calls: &[ToolCall]) -> Vec<&str> {
        calls.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn every_call_gets_an_id_no_other_call_has() {
        let view = vec![
            Message::user("go"),
            Message::assistant("", vec![call("a"), call("call_3_1")]),
            Message::tool("a", "read", "ok", false),
        ];
        // Unique ids are kept as the server sent them.
        let mut calls = vec![call("x"), call("y")];
        normalise_call_ids(&mut calls, 3, &view);
        assert_eq!(ids(&calls), ["x", "y"]);
        // Empty, repeated within the reply, or already in the view: the
        // fallback, made unique against the view and the reply's own.
        let mut calls = vec![call(""), call("a"), call("z"), call("z"), call("call_3_0")];
        normalise_call_ids(&mut calls, 3, &view);
        assert_eq!(
            ids(&calls),
            ["call_3_0", "call_3_1_", "z", "call_3_3", "call_3_4"]
        );
    }
}
