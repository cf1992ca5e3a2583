//! Workspace checkpoints in the loop: after every call whose tool can change
//! files, the workspace is stored (durably) and `workspace.checkpoint` is
//! staged with the call's result, so it adds no sync point of its own; the
//! starting state gets one before the first step, and resume makes the one
//! a stop left missing.

use super::{Agent, AgentError};
use crate::event::{Event, WorkspaceCheckpoint};
use crate::tools::Effect;

impl Agent {
    /// Stages the checkpoint of a call that ran, when its tool can change
    /// files. The objects are durable before the record is staged.
    pub(super) fn checkpoint_after(
        &mut self,
        step: u64,
        name: &str,
        call_id: &str,
    ) -> Result<(), AgentError> {
        if self.tools.effect(name) != Some(Effect::Mutating) {
            return Ok(());
        }
        self.checkpoint(step, Some(call_id.to_string()), true)
    }

    /// The starting state's checkpoint, when the log has none yet (a new
    /// run, or a log from before checkpoints).
    pub(super) fn checkpoint_start(&mut self) -> Result<(), AgentError> {
        if self.state().last_checkpoint.is_some() || self.checkpoints.is_none() {
            return Ok(());
        }
        let step = self.state().step;
        self.checkpoint(step, None, true)
    }

    /// On resume: the checkpoint of the last call that changed files when the
    /// stop left it missing; else, when the workspace is not what the last
    /// checkpoint says (changed while the run was stopped), one with no call.
    pub(super) fn checkpoint_on_resume(&mut self) -> Result<(), AgentError> {
        if self.checkpoints.is_none() {
            return Ok(());
        }
        let due = self
            .state()
            .checkpoint_due
            .clone()
            .filter(|d| self.tools.effect(&d.name) == Some(Effect::Mutating));
        match due {
            Some(d) => self.checkpoint(d.step, Some(d.call_id), true),
            None => {
                let step = self.state().step;
                self.checkpoint(step, None, false)
            }
        }
    }

    /// Takes a checkpoint and stages its record (`always`: also when the
    /// tree is the last checkpoint's). A failure (git missing its objects,
    /// a failed fsync, a full disk) is a warning, like a failed snapshot:
    /// the log is the run's truth and the run goes on; that point of the
    /// workspace is then not recorded and cannot be restored.
    fn checkpoint(
        &mut self,
        step: u64,
        call_id: Option<String>,
        always: bool,
    ) -> Result<(), AgentError> {
        let prev = self
            .state()
            .last_checkpoint
            .as_ref()
            .map(|c| c.tree.clone());
        let Some(cp) = self.checkpoints.as_mut() else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let taken = match cp.take(prev.as_deref()) {
            Ok(t) => t,
            Err(e) => {
                let at = call_id
                    .as_deref()
                    .map_or_else(|| format!("step {step}"), |id| format!("call {id}"));
                self.out.warn(&format!(
                    "no workspace checkpoint after {at} (it cannot be restored): {e}"
                ));
                return Ok(());
            }
        };
        self.timing.checkpoints += started.elapsed();
        if let Some(w) = cp.take_warning() {
            self.out.warn(&w);
        }
        if !always && prev.as_deref() == Some(taken.tree.as_str()) {
            return Ok(());
        }
        for o in &taken.oversized {
            self.out.warn(&format!(
                "checkpoint: {} ({} bytes) is over the size cap: recorded by hash only, it cannot be restored",
                o.path, o.size
            ));
        }
        self.stage(Event::WorkspaceCheckpoint(WorkspaceCheckpoint {
            step,
            call_id,
            tree: taken.tree,
            changed: taken.changed,
            changed_count: taken.changed_count,
            files: taken.files,
            oversized: taken.oversized,
            walk: taken.walk,
        }))
    }
}
