//! `State::apply`, the one fold from log records to state, and the views
//! derived from state: what the model is sent and how big that is.

use super::{
    ApprovalMark, CheckpointDue, CheckpointMark, CompactionMark, PendingCall, Plan, PlanRevision,
    PlanUpdateDue, ProcessExit, ProcessInfo, State,
};
use super::{Status, plan};
use crate::event::{Event, Message, Role};
use crate::kinds::PlanPin;

impl State {
    /// Adds a message to the full history when it is kept.
    fn remember(&mut self, m: &Message) {
        if self.keep_history {
            self.messages.push(m.clone());
        }
    }

    /// Folds one record into the state. Never panics, whatever the record or
    /// the order records come in (an out-of-place record is applied as far as
    /// it makes sense and otherwise ignored).
    pub fn apply(&mut self, event: &Event) {
        self.records = self.records.saturating_add(1);
        // `plan.updated` directly follows its result; any record clears it.
        self.plan_update_due = None;
        match event {
            Event::RunStarted(r) => {
                let mut start = vec![Message::system(&r.system_prompt)];
                // The plan (none yet) is pinned after the system prompt.
                let appended = r.plan_enabled && r.settings.plan_pin() == PlanPin::Append;
                if appended {
                    start.push(plan_message(None));
                }
                // A chat starts with no task: its first message is a
                // `user.message`, and the run waits for it.
                if !(r.settings.chat && r.task.is_empty()) {
                    start.push(Message::user(&r.task));
                }
                self.chat_waiting = r.settings.chat && r.task.is_empty();
                self.messages = if self.keep_history {
                    // The history is the conversation: no plan message.
                    start
                        .iter()
                        .filter(|m| !is_plan_message(m))
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                self.view = start.into();
                self.last_compaction = None;
                self.last_request = None;
                self.plan_message_due = false;
                self.limits = r.limits.clone();
                self.run = Some(r.clone());
            }
            Event::ModelResponse(r) => {
                self.append_due_plan();
                self.step = r.step;
                self.last_request = (r.usage.all_input() > 0 && r.request_bytes > 0).then_some(
                    super::MeasuredRequest {
                        bytes: r.request_bytes,
                        tokens: r.usage.all_input(),
                    },
                );
                self.usage.add(&r.usage);
                self.cost_usd += r.cost_usd;
                self.truncated_in_row =
                    if r.stop_reason == Some(crate::event::StopReason::MaxTokens) {
                        self.truncated_in_row.saturating_add(1)
                    } else {
                        0
                    };
                self.remember(&r.message);
                self.view.push(r.message.clone());
                self.pending = r
                    .message
                    .tool_calls
                    .iter()
                    .map(|c| PendingCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        step: r.step,
                        started: false,
                        process: None,
                        approval: None,
                    })
                    .collect();
            }
            Event::ToolStarted(t) => {
                if let Some(call) = self.pending.iter_mut().find(|c| c.id == t.call_id) {
                    call.started = true;
                    if t.process.is_some() {
                        call.process.clone_from(&t.process);
                    }
                }
            }
            Event::ToolResult(t) => {
                if self.pending.iter().any(|c| c.id == t.call_id && c.started) {
                    self.checkpoint_due = Some(CheckpointDue {
                        step: t.step,
                        call_id: t.call_id.clone(),
                        name: t.name.clone(),
                    });
                }
                self.pending.retain(|c| c.id != t.call_id);
                let msg = Message::tool(&t.call_id, &t.name, &t.content, t.is_error);
                self.remember(&msg);
                self.view.push(msg);
                if self.pending.is_empty() {
                    self.append_due_plan();
                }
                if t.name == plan::TOOL_NAME && !t.is_error && !t.interrupted {
                    self.plan_update_due = Some(PlanUpdateDue {
                        call_id: t.call_id.clone(),
                        step: t.step,
                    });
                }
                self.format_errors = if t.format_error {
                    self.format_errors.saturating_add(1)
                } else {
                    0
                };
            }
            Event::PlanUpdated(p) => {
                self.plan = Some(Plan {
                    version: p.version,
                    items: p.items.clone(),
                    note: p.note.clone(),
                    updated_step: p.step,
                });
                self.plan_history.push(PlanRevision {
                    step: p.step,
                    version: p.version,
                    diff: p.diff.clone(),
                });
                if self.plan_appended() {
                    self.plan_message_due = true;
                    if self.pending.is_empty() {
                        self.append_due_plan();
                    }
                }
            }
            Event::Compaction(c) => {
                self.compaction_requested = false;
                self.usage.add(&c.usage);
                self.cost_usd += c.cost_usd;
                if c.failed {
                    // Only the summarizer's cost: the view is unchanged.
                    return;
                }
                let mut view = Vec::with_capacity(c.view.len() + 2);
                view.push(self.system_message());
                view.extend(c.view.iter().cloned());
                self.view = view.into();
                if self.plan_appended() {
                    // The summary, then the current plan, then the kept
                    // messages without the plan messages they carried.
                    self.pin_plan(2);
                }
                self.compactions = self.compactions.saturating_add(1);
                self.last_request = None;
                self.last_compaction = Some(CompactionMark {
                    step: c.step,
                    summary: c.summary.clone(),
                    messages_before: self.messages.len(),
                    // With the plan pinned in it, the view the compaction
                    // left is one longer than its record's.
                    view_len: self.view.len() - 1,
                });
            }
            Event::HookBlocked(_) => {
                self.hooks_blocked = self.hooks_blocked.saturating_add(1);
            }
            Event::ProcessStarted(p) => {
                self.processes.insert(
                    p.id.clone(),
                    ProcessInfo {
                        id: p.id.clone(),
                        pid: p.pid,
                        command: p.command.clone(),
                        step: p.step,
                        env: p.env.clone(),
                        start_time: p.start_time,
                        output: p.output.clone(),
                        exited: None,
                        lost: false,
                        container: p.container.clone(),
                    },
                );
            }
            Event::ProcessExited(p) => {
                if let Some(info) = self.processes.get_mut(&p.id) {
                    info.exited = Some(ProcessExit {
                        exit_code: p.exit_code,
                        signal: p.signal,
                    });
                }
            }
            Event::StepSaved(s) => {
                self.saved_step = s.step;
            }
            Event::Resume(r) => {
                self.resumes = self.resumes.saturating_add(1);
                if self.plan_appended() {
                    // The plan after the system prompt (the summary), the
                    // notice appended after what came before.
                    let at = if self.compacted() { 2 } else { 1 };
                    self.pin_plan(at);
                }
                // A resumed run is running again, whatever stopped it.
                self.status = Status::Running;
                self.finished_reason = None;
                for id in &r.lost_processes {
                    if let Some(p) = self.processes.get_mut(id) {
                        p.lost = true;
                    }
                }
                let notice = Message::user(&r.notice);
                self.remember(&notice);
                self.view.push(notice);
                if let Some(text) = &r.message {
                    // The person spoke: malformed calls and cut replies
                    // start counting anew.
                    self.format_errors = 0;
                    self.truncated_in_row = 0;
                    self.chat_waiting = false;
                    let msg = Message::user(text);
                    self.remember(&msg);
                    self.view.push(msg);
                }
                if r.compact_at.is_some() {
                    self.compact_at = r.compact_at;
                }
                if let Some(limits) = &r.limits {
                    self.limits = limits.clone();
                }
            }
            Event::RunFinished(f) => {
                self.status = Status::Finished(f.status);
                self.finished_reason.clone_from(&f.reason);
            }
            Event::UserMessage(m) => {
                self.append_due_plan();
                self.format_errors = 0;
                if m.source != crate::event::TRUNCATED_SOURCE {
                    self.truncated_in_row = 0;
                }
                self.chat_waiting = false;
                let msg = Message::user(&m.content);
                self.remember(&msg);
                self.view.push(msg);
            }
            // What a restore changed is in the workspace and the store; the
            // conversation goes on from the fork's last step.
            Event::WorkspaceRestored(_) => {}
            Event::ChatWaiting(w) => {
                self.append_due_plan();
                self.chat_waiting = true;
                if let Some(sig) = &w.interrupted {
                    let msg = Message::user(crate::event::chat_interrupted_text(sig));
                    self.remember(&msg);
                    self.view.push(msg);
                }
            }
            Event::ApprovalRequested(a) => {
                if let Some(call) = self.pending.iter_mut().find(|c| c.id == a.call_id) {
                    call.approval = Some(ApprovalMark::Requested {
                        tool: a.tool.clone(),
                        preview: a.preview.clone(),
                    });
                }
            }
            Event::SettingsChanged(c) => {
                if let Some(m) = &c.model {
                    self.model_set = Some(m.clone());
                }
                if let Some(a) = c.approvals {
                    self.approvals_set = Some(a);
                }
            }
            Event::CompactionRequested(_) => self.compaction_requested = true,
            Event::ApprovalDecided(d) => {
                if let Some(call) = self.pending.iter_mut().find(|c| c.id == d.call_id) {
                    call.approval = Some(ApprovalMark::Decided {
                        decision: d.decision,
                        by: d.by.clone(),
                        reason: d.reason.clone(),
                    });
                }
                if d.always && d.decision == crate::event::Decision::Allow && !d.tool.is_empty() {
                    // `bash:<prefix>` for a command prefix; the tool's
                    // name for all of it.
                    let key = match &d.scope {
                        Some(prefix) => format!("{}:{prefix}", d.tool),
                        None => d.tool.clone(),
                    };
                    self.always_allowed.insert(key);
                }
            }
            Event::WorkspaceCheckpoint(c) => {
                self.checkpoint_due = None;
                let mark = CheckpointMark {
                    step: c.step,
                    call_id: c.call_id.clone(),
                    tree: c.tree.clone(),
                    changed_count: c.changed_count.max(c.changed.len() as u64),
                    oversized: c.oversized.len() as u64,
                    walk: c.walk.clone(),
                };
                if self.keep_history {
                    self.checkpoints.push(mark.clone());
                }
                self.last_checkpoint = Some(mark);
            }
        }
    }

    /// The system prompt as a message: the run's, or the view's first message
    /// when no `run.started` was applied.
    fn system_message(&self) -> Message {
        match (&self.run, self.view.first()) {
            (Some(run), _) => Message::system(&run.system_prompt),
            (None, Some(first)) if first.role == Role::System => first.clone(),
            (None, _) => Message::system(""),
        }
    }

    /// Whether the run was started with the plan enabled.
    pub fn plan_enabled(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.plan_enabled)
    }

    /// Whether the plan's messages are part of the view (`plan.pin =
    /// "append"`), rather than pinned per request.
    pub fn plan_appended(&self) -> bool {
        self.run
            .as_ref()
            .is_some_and(|r| r.plan_enabled && r.settings.plan_pin() == PlanPin::Append)
    }

    /// The plan message (`[Current plan]` then the rendered plan, or a
    /// line saying there is none yet). `None` when the plan is disabled.
    pub fn plan_block(&self) -> Option<Message> {
        self.plan_enabled()
            .then(|| plan_message(self.plan.as_ref()))
    }

    /// Appends the current plan's message when a plan change is waiting for
    /// its step's last result.
    fn append_due_plan(&mut self) {
        if std::mem::take(&mut self.plan_message_due) {
            let block = plan_message(self.plan.as_ref());
            self.view.push(block);
        }
    }

    /// Rebuilds the view with the current plan at `at` and no other plan
    /// message: earlier ones are stale, and the model reads the last
    /// `[Current plan]` message as the plan.
    fn pin_plan(&mut self, at: usize) {
        self.plan_message_due = false;
        let block = plan_message(self.plan.as_ref());
        let view: &mut Vec<Message> = &mut self.view;
        view.retain(|m| !is_plan_message(m));
        view.insert(at.min(view.len()), block);
    }

    /// What the model is sent for a step: the view. With `plan.pin =
    /// "head"` the plan block is pinned right after the system prompt (right
    /// after the compaction summary when the view is compacted); with
    /// `append` the view carries the plan messages itself.
    pub fn model_messages(&self) -> super::View {
        // Shared with the state; copied only to add a plan message.
        let mut out = self.view.clone();
        if self.plan_appended() {
            if self.plan_message_due {
                // Asked before the step's calls all have results (not the
                // loop's way): the plan still goes last.
                out.push(plan_message(self.plan.as_ref()));
            }
        } else if let Some(block) = self.plan_block() {
            let at = if self.compacted() { 2 } else { 1 };
            let at = at.min(out.len());
            out.insert(at, block);
        }
        out
    }
}

/// The message that carries the plan: `[Current plan]`, then the plan.
fn plan_message(p: Option<&Plan>) -> Message {
    Message::user(format!("{}\n{}", plan::BLOCK_HEADER, plan::render(p)))
}

/// Whether `m` is a plan message (a user message that starts with
/// `[Current plan]`).
pub(crate) fn is_plan_message(m: &Message) -> bool {
    m.role == Role::User && m.content.starts_with(plan::BLOCK_HEADER)
}
