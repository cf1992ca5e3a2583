//! The call runner: the one place a tool call goes through
//! pre hook -> `tool.started` -> run -> post hook -> `tool.result`
//! (-> `plan.updated`). The live loop and resume's re-runs both use it, so a
//! re-run call is hooked and recorded exactly like a live one.

use super::{Agent, AgentError};
use crate::event::{Event, HookBlocked, PlanItem, PlanUpdated, ToolCall, ToolResult, ToolStarted};
use crate::session::plan;
use crate::tools::{ToolContext, ToolOutcome};
use serde_json::json;

impl Agent {
    /// Runs one call of `step` to its `tool.result`. `rerun` marks a
    /// read-only call run again on resume because its first run was
    /// interrupted (its `tool.started` is in the log already).
    pub(super) fn run_call(
        &mut self,
        step: u64,
        call: &ToolCall,
        rerun: bool,
    ) -> Result<(), AgentError> {
        let mut hooks = Vec::new();
        if let Some(pre) = self.pre_hook(step, call) {
            hooks.push(pre.run);
            if let Some(reason) = pre.blocked {
                self.append(Event::HookBlocked(HookBlocked {
                    step,
                    call_id: call.id.clone(),
                    hook: "pre_tool".into(),
                    reason: reason.clone(),
                }))?;
                self.append(Event::ToolResult(ToolResult::blocked(
                    step, call, &reason, hooks,
                )))?;
                self.checkpoint_event(step);
                return Ok(());
            }
        }
        // A re-run call's `tool.started` is already durable: the intent is
        // the same call's, so it is not written twice.
        if !rerun {
            self.append(Event::ToolStarted(ToolStarted {
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
            }))?;
        }
        let started = std::time::Instant::now();
        let mut outcome = self.execute(step, call);
        self.timing.tools += started.elapsed();
        for record in std::mem::take(&mut outcome.records) {
            self.append(record)?;
        }
        if let Some((run, feedback)) = self.post_hook(step, call, &outcome) {
            hooks.push(run);
            if let Some(feedback) = feedback {
                outcome.content.push_str("\n\n[post_tool hook]\n");
                outcome.content.push_str(&feedback);
            }
        }
        let mut result = ToolResult::completed(
            step,
            call,
            outcome.content,
            outcome.is_error,
            outcome.format_error,
            hooks,
        );
        result.rerun = rerun;
        self.append(Event::ToolResult(result))?;
        if let Some((items, note)) = outcome.plan_update {
            self.update_plan(step, items, note)?;
        }
        self.checkpoint_event(step);
        Ok(())
    }

    fn checkpoint_event(&self, step: u64) {
        let pending: Vec<String> = self.state().pending.iter().map(|p| p.id.clone()).collect();
        self.out.event(
            "checkpoint.saved",
            json!({
                "step": step,
                "path": self.store.path().display().to_string(),
                "pending": pending,
            }),
        );
    }

    /// Runs a tool on this thread (tools are synchronous).
    pub(super) fn execute(&self, step: u64, call: &ToolCall) -> ToolOutcome {
        let ctx = ToolContext {
            workspace: &self.config.workspace,
            step,
            env: self.env.as_ref(),
            processes: &self.processes,
            plan: self.state().plan.as_ref(),
        };
        tokio::task::block_in_place(|| self.tools.call(&ctx, call))
    }

    /// Appends `plan.updated` for a validated `update_plan` call and
    /// rewrites the `--plan-file` mirror.
    pub(super) fn update_plan(
        &mut self,
        step: u64,
        items: Vec<PlanItem>,
        note: Option<String>,
    ) -> Result<(), AgentError> {
        let old = self.state().plan.as_ref();
        let version = old.map_or(0, |p| p.version) + 1;
        let diff = plan::diff(old.map(|p| p.items.as_slice()), &items);
        self.append(Event::PlanUpdated(PlanUpdated {
            step,
            version,
            items,
            note,
            diff,
        }))?;
        self.write_plan_file();
        Ok(())
    }

    /// Rewrites the `--plan-file` mirror (atomically) from the current plan.
    /// A failure is a warning: the mirror is never read back.
    pub(super) fn write_plan_file(&self) {
        if let (Some(path), Some(current)) =
            (self.config.plan_file.as_ref(), self.state().plan.as_ref())
        {
            let text = plan::to_markdown(current);
            if let Err(e) = tinyagent_store::fsutil::atomic_write(path, text.as_bytes()) {
                self.out.warn(&format!(
                    "could not write plan file {}: {e}",
                    path.display()
                ));
            }
        }
    }
}
