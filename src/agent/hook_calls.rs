//! The agent's side of tool hooks: what a hook is given on stdin, the run's
//! hook settings, and how a hook run becomes a block or feedback (the hook
//! process itself is run by [`super::hooks::run_hook`]).

use super::hooks;
use super::{Agent, PreHook};
use crate::config::HookFailure;
use crate::event::{HookRun, ToolCall};
use crate::tools::ToolOutcome;
use serde_json::json;

impl Agent {
    fn hook_input(&self, step: u64, call: &ToolCall, hook: &str) -> serde_json::Value {
        let run_id = self.state().run.as_ref().map(|r| r.run_id.clone());
        let arguments = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        json!({
            "hook": hook,
            "run_id": run_id,
            "step": step,
            "call_id": call.id,
            "tool": call.name,
            "arguments": arguments,
            "workspace": self.config.workspace.display().to_string(),
        })
    }

    /// Reports a hook run on `--json` (and a failure on stderr) and gives
    /// the record of it that goes into the call's `tool.result`.
    fn report_hook(&self, hook: &str, call: &ToolCall, outcome: &hooks::HookOutcome) -> HookRun {
        let detail = match outcome {
            hooks::HookOutcome::Allow { feedback } => feedback.clone(),
            hooks::HookOutcome::Block { reason } => Some(reason.clone()),
            hooks::HookOutcome::Failed { error } => Some(error.clone()),
        };
        self.out.event(
            "hook.ran",
            json!({ "hook": hook, "call_id": call.id, "tool": call.name,
                    "outcome": outcome.label(), "detail": detail }),
        );
        if let hooks::HookOutcome::Failed { error } = outcome {
            self.out.warn(error);
        }
        HookRun {
            hook: hook.to_string(),
            outcome: outcome.label().to_string(),
            detail: detail.map(|d| hooks::clip(&d)),
        }
    }

    /// Runs a hook command, but only while the files it runs are the ones
    /// checked when the run started: a tool that rewrote a hook script gets
    /// no command of its choosing run (the hook fails instead).
    fn run_checked(&self, command: &str, input: &serde_json::Value) -> hooks::HookOutcome {
        if let Some(changed) = self.hook_files.changed() {
            return hooks::HookOutcome::Failed {
                error: format!(
                    "hook file {} changed since the run started; the hook `{command}` was not run",
                    changed.display()
                ),
            };
        }
        let hooks = &self.config.hooks;
        crate::runtime::blocking(|| {
            hooks::run_hook(
                command,
                input,
                &self.config.workspace,
                hooks.timeout,
                &self.stop,
            )
        })
    }

    /// Runs the pre hook, if one is set.
    pub(super) fn pre_hook(&self, step: u64, call: &ToolCall) -> Option<PreHook> {
        let hooks = &self.config.hooks;
        let command = hooks.pre_tool.as_deref()?;
        let input = self.hook_input(step, call, "pre_tool");
        let outcome = self.run_checked(command, &input);
        let run = self.report_hook("pre_tool", call, &outcome);
        let blocked = match outcome {
            hooks::HookOutcome::Block { reason } => Some(reason),
            hooks::HookOutcome::Failed { error } if hooks.on_failure == HookFailure::Block => Some(
                format!("the hook failed and hooks.on_failure is block: {error}"),
            ),
            hooks::HookOutcome::Allow { .. } | hooks::HookOutcome::Failed { .. } => None,
        };
        Some(PreHook { run, blocked })
    }

    /// Runs the post hook, if one is set; gives its run and the feedback to
    /// append to the result.
    pub(super) fn post_hook(
        &self,
        step: u64,
        call: &ToolCall,
        outcome: &ToolOutcome,
    ) -> Option<(HookRun, Option<String>)> {
        let hooks = &self.config.hooks;
        let command = hooks.post_tool.as_deref()?;
        let mut input = self.hook_input(step, call, "post_tool");
        input["result"] = json!({ "content": outcome.content, "is_error": outcome.is_error });
        let ran = self.run_checked(command, &input);
        let run = self.report_hook("post_tool", call, &ran);
        let feedback = match ran {
            hooks::HookOutcome::Allow { feedback } => feedback,
            hooks::HookOutcome::Block { reason } => Some(format!("objection: {reason}")),
            hooks::HookOutcome::Failed { error } => Some(format!("the hook failed: {error}")),
        };
        Some((run, feedback))
    }
}

/// The hook programs and scripts as they were when the run started.
#[derive(Debug, Default)]
pub(super) struct HookFiles {
    files: Vec<(std::path::PathBuf, Option<[u8; 32]>)>,
}

fn digest(path: &std::path::Path) -> Option<[u8; 32]> {
    use sha2::{Digest, Sha256};
    std::fs::read(path).ok().map(|b| Sha256::digest(&b).into())
}

impl HookFiles {
    /// Fingerprints the files `hooks` runs.
    pub(super) fn of(
        hooks: &crate::config::HookSettings,
        workspace: &std::path::Path,
    ) -> HookFiles {
        HookFiles {
            files: hooks
                .files(workspace)
                .into_iter()
                .map(|p| {
                    let d = digest(&p);
                    (p, d)
                })
                .collect(),
        }
    }

    /// The first file that is not what it was, if any.
    fn changed(&self) -> Option<&std::path::Path> {
        self.files
            .iter()
            .find(|(p, d)| digest(p) != *d)
            .map(|(p, _)| p.as_path())
    }
}
