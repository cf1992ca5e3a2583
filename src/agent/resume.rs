//! What resume does to a stopped run before the loop carries on: every pending
//! call gets a result (re-run when it is a read-only tool, synthesized
//! otherwise), the interrupted step is saved, lost background processes are
//! checked, and one `resume` record carries the `[Resumed]` notice. A plan
//! update whose `plan.updated` record was lost to the stop is recorded first,
//! and the `--plan-file` mirror is rewritten from the log.

use super::{Agent, AgentError};
use crate::event::{Event, Limits, Resume, StoppedProcess, ToolCall, ToolResult};
use crate::exec::group::{self, ProcessGroup};
use crate::session::{ProcessInfo, plan};
use serde_json::json;

/// What the caller knows about the stop, for the notice.
#[derive(Debug, Default, Clone)]
pub struct StopInfo {
    /// When the log was last written (RFC 3339), if known.
    pub stopped_at: Option<String>,
    /// Bytes of a torn last record that were cut.
    pub torn_bytes: Option<u64>,
    /// Free-text process summary from an imported v1 trajectory.
    pub untracked_processes: Option<String>,
    /// New limits given on the command line.
    pub limits: Option<Limits>,
    /// A new user message (`--message`).
    pub message: Option<String>,
    /// The signal that stopped the run (`SIGINT`...), when one did.
    pub signal: Option<String>,
    /// Processes of interrupted calls already stopped by [`stop_leftovers`].
    pub stopped: Vec<StoppedProcess>,
    /// `--compact-at`: the threshold for the rest of the run.
    pub compact_at: Option<u64>,
}

/// Nothing of an interrupted call may act once the resumed run has told the
/// model anything: SIGKILLs what is left of the process group of every
/// pending call whose `tool.started` recorded one (see
/// [`group::survivors`]: a recycled pid is never hit). Resume calls this as
/// soon as the log is open, before anything else, with no environment:
/// host groups are stopped then; a group recorded in the container
/// environment is stopped through `env` (the run's container, found again)
/// once it is set up, still before anything is sent to the model.
pub fn stop_leftovers(
    state: &crate::session::State,
    env: Option<&dyn crate::exec::ExecEnv>,
) -> Vec<StoppedProcess> {
    let mut stopped = Vec::new();
    for call in &state.pending {
        if let Some(p) = &call.process {
            let group = ProcessGroup {
                pid: p.pid,
                start_time: p.start_time,
            };
            let found = if p.env == "container" {
                // Only the run's own container holds it; a new container
                // (the old one gone) holds nothing of it.
                match env {
                    Some(env) if env.container().is_some_and(|c| c.reattached()) => {
                        env.kill_survivors(&group)
                    }
                    // Resumed in another environment (the local config
                    // asked for the sandbox): the run's container, if it
                    // still runs, is asked directly.
                    Some(env) if env.container().is_none() => recorded_container(state)
                        .map(|c| c.kill_survivors(&group))
                        .unwrap_or_default(),
                    _ => Vec::new(),
                }
            } else {
                group::kill_survivors(&group)
            };
            for found in found {
                stopped.push(StoppedProcess {
                    call_id: call.id.clone(),
                    pid: found.pid,
                    pgid: found.pgid,
                });
            }
        }
    }
    stopped
}

/// The container `run.started` names, when it still runs (for a run of
/// the container environment resumed in another one).
pub fn recorded_container(
    state: &crate::session::State,
) -> Option<crate::exec::container::Container> {
    use crate::exec::container::{Container, ContainerState, find_engine};
    let settings = &state.run.as_ref()?.settings;
    let name = settings.container.clone()?;
    let (engine, binary) = find_engine(settings.engine).ok()?;
    let mut c = Container::new(engine, binary, name, std::path::PathBuf::new());
    c.set_reattached(true);
    matches!(c.state(), Ok(ContainerState::Running)).then_some(c)
}

/// Is `pid` still the process that was recorded (same start time, not a
/// zombie)? The host's view; [`crate::exec::ExecEnv::process_alive`] is the
/// environment's.
pub fn process_alive(info: &ProcessInfo) -> bool {
    crate::exec::host::host_process_alive(info.pid, info.start_time)
}

impl Agent {
    /// Closes every open end of the log and appends the `resume` record.
    pub fn recover(&mut self, mut stop: StopInfo) -> Result<(), AgentError> {
        self.record_missing_plan_update()?;
        // The mirror may be behind the log (a stop before it was written).
        self.write_plan_file();
        let pending = self.state().pending.clone();
        // Stopped already (the caller did it as soon as the log was open);
        // this catches what the caller could not.
        let mut stopped = std::mem::take(&mut stop.stopped);
        stopped.extend(stop_leftovers(self.state(), Some(self.env.as_ref())));
        let mut interrupted = Vec::new();
        let mut not_run = Vec::new();
        let mut rerun = Vec::new();
        let mut carried_on = Vec::new();
        // The stop came at an approval question (asked, or answered but
        // not started): that call and the ones after it had not started,
        // so they go on as in the live loop, through the approval step,
        // which never asks a decided call again (docs/design.md,
        // "Approvals").
        let gated = pending
            .iter()
            .position(|c| !c.started && c.approval.is_some());
        for (i, call) in pending.iter().enumerate() {
            // The model's call itself (its arguments), from the response that
            // made it: the newest one, since ids may repeat across steps.
            let model_call = self.find_call(&call.id);
            match model_call {
                Some(tc) if call.started && self.tools.is_rerunnable(&call.name) => {
                    self.run_call(call.step, &tc, true)?;
                    rerun.push(tc);
                }
                Some(tc) if !call.started && gated.is_some_and(|g| i >= g) => {
                    self.run_call(call.step, &tc, false)?;
                    carried_on.push(tc);
                }
                _ => {
                    let (result, list) = if call.started {
                        let r = ToolResult::interrupted(call.step, &call.id, &call.name);
                        (r, &mut interrupted)
                    } else {
                        let r = ToolResult::not_run(call.step, &call.id, &call.name);
                        (r, &mut not_run)
                    };
                    self.append(Event::ToolResult(result))?;
                    list.push(model_call.unwrap_or_else(|| ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: String::new(),
                    }));
                }
            }
            self.out.event(
                "resume.interrupted_call",
                json!({ "id": call.id, "name": call.name, "started": call.started }),
            );
        }
        // A checkpoint the stop left missing goes before the step is saved.
        self.checkpoint_on_resume()?;
        let s = self.state();
        if s.step > s.saved_step {
            let step = s.step;
            self.save_step(step)?;
        }
        let running: Vec<ProcessInfo> = self
            .state()
            .processes
            .values()
            .filter(|p| p.is_tracked_running())
            .cloned()
            .collect();
        let (reattached, lost) = self.reattach(running);
        let mut notice = self.notice(&stop, &interrupted, &not_run, &rerun, &lost, &stopped);
        if !carried_on.is_empty() {
            notice = notice.replace("No tool call was in flight.\n", "");
            notice.push_str(
                "Calls that were waiting for the person's approval when it stopped went on (their results above):\n",
            );
            for c in &carried_on {
                notice.push_str(&format!(
                    "- {} ({} {})\n",
                    c.id,
                    c.name,
                    short(&c.arguments)
                ));
            }
        }
        let notice = reattached_notice(notice, &reattached);
        let all = interrupted.iter().chain(&not_run).map(|c| c.id.clone());
        self.append(Event::Resume(Resume {
            interrupted: all.collect(),
            lost_processes: lost.iter().map(|p| p.id.clone()).collect(),
            reattached_processes: reattached.iter().map(|p| p.id.clone()).collect(),
            notice,
            limits: stop.limits.clone(),
            // The person's new message is a record of its own, after the
            // notice (older logs carry it here).
            message: None,
            stopped_processes: stopped,
            api_key_env: self.config.model.api_key_env.clone(),
            compact_at: stop.compact_at,
        }))?;
        if let Some(text) = &stop.message {
            self.add_user_message(text, "resume")?;
        }
        for p in &lost {
            self.out.event(
                "resume.process_lost",
                json!({ "id": p.id, "pid": p.pid, "cmd": p.command, "env": p.env,
                        "still_running": self.env.process_alive(p.pid, p.start_time) }),
            );
        }
        for p in &reattached {
            self.out.event(
                "resume.process_reattached",
                json!({ "id": p.id, "pid": p.pid, "cmd": p.command, "env": p.env,
                        "container": p.container }),
            );
        }
        Ok(())
    }

    /// Splits the background processes the log still tracks into those
    /// found running in the run's container (tracked again by the process
    /// table) and the lost ones. Outside the container environment, or when
    /// its container was gone, every one is lost.
    fn reattach(&self, running: Vec<ProcessInfo>) -> (Vec<ProcessInfo>, Vec<ProcessInfo>) {
        let Some(c) = self.env.container() else {
            return (Vec::new(), running);
        };
        let ours: Vec<(u32, Option<u64>)> = running
            .iter()
            .filter(|p| p.container.as_deref() == Some(c.name()))
            .map(|p| (p.pid, p.start_time))
            .collect();
        let alive = if ours.is_empty() || !c.reattached() {
            Vec::new()
        } else {
            c.alive(&ours)
        };
        let (back, lost): (Vec<ProcessInfo>, Vec<ProcessInfo>) = running
            .into_iter()
            .partition(|p| p.container.as_deref() == Some(c.name()) && alive.contains(&p.pid));
        for p in &back {
            self.processes.reattach(p, c);
        }
        (back, lost)
    }

    /// A stop between an `update_plan` result and its `plan.updated` record:
    /// the model was told the plan changed, so the record is written now. The
    /// call is validated again against the plan it saw (pure, no effects).
    fn record_missing_plan_update(&mut self) -> Result<(), AgentError> {
        let Some(due) = self.state().plan_update_due.clone() else {
            return Ok(());
        };
        let Some(call) = self.find_call(&due.call_id) else {
            return Ok(());
        };
        if let Some((items, note)) = self.execute(due.step, &call, false).0.plan_update {
            self.update_plan(due.step, items, note)?;
            self.flush()?;
        }
        Ok(())
    }

    fn find_call(&self, id: &str) -> Option<ToolCall> {
        self.state()
            .view
            .iter()
            .rev()
            .flat_map(|m| m.tool_calls.iter())
            .find(|c| c.id == id)
            .cloned()
    }

    fn notice(
        &self,
        stop: &StopInfo,
        interrupted: &[ToolCall],
        not_run: &[ToolCall],
        rerun: &[ToolCall],
        lost: &[ProcessInfo],
        stopped: &[StoppedProcess],
    ) -> String {
        let s = self.state();
        let mut n = String::from("[Resumed] The agent stopped");
        if let Some(sig) = &stop.signal {
            n.push_str(&format!(" (interrupted by {sig}: the person stopped it)"));
        }
        if let Some(at) = &stop.stopped_at {
            n.push_str(&format!(" (its log was last written at {at})"));
        }
        n.push_str(&format!(
            " after step {} and has been resumed. Nothing was lost from the conversation.\n",
            s.step
        ));
        if let Some(b) = stop.torn_bytes {
            n.push_str(&format!(
                "A record that was being written when it stopped was incomplete ({b} bytes) and was set aside.\n"
            ));
        }
        let list = |calls: &[ToolCall]| {
            calls
                .iter()
                .map(|c| format!("{} ({} {})", c.id, c.name, short(&c.arguments)))
                .collect::<Vec<_>>()
        };
        if interrupted.is_empty() && not_run.is_empty() && rerun.is_empty() {
            n.push_str("No tool call was in flight.\n");
        }
        if !interrupted.is_empty() {
            n.push_str(
                "Interrupted while running (may have partially run; verify before retrying):\n",
            );
            for l in list(interrupted) {
                n.push_str(&format!("- {l}\n"));
            }
        }
        if !stopped.is_empty() {
            n.push_str(
                "Processes of interrupted calls that were still running were stopped now, before anything else:\n",
            );
            for p in stopped {
                n.push_str(&format!(
                    "- pid {} (process group {}) of {}\n",
                    p.pid, p.pgid, p.call_id
                ));
            }
        }
        if !not_run.is_empty() {
            n.push_str("Never started (had no effect):\n");
            for l in list(not_run) {
                n.push_str(&format!("- {l}\n"));
            }
        }
        if !rerun.is_empty() {
            n.push_str("Read-only calls re-run on resume (their results above are fresh):\n");
            for l in list(rerun) {
                n.push_str(&format!("- {l}\n"));
            }
        }
        if !lost.is_empty() {
            n.push_str("Background processes from before the stop are no longer tracked:\n");
            for p in lost {
                let state = if self.env.process_alive(p.pid, p.start_time) {
                    format!(
                        "still running as an orphan (pid {}); kill it with `kill -- -{}` if it is not needed",
                        p.pid, p.pid
                    )
                } else {
                    "no longer running".to_string()
                };
                n.push_str(&format!(
                    "- {} pid {} [{}] `{}`: {state}\n",
                    p.id,
                    p.pid,
                    if p.env.is_empty() { "local" } else { &p.env },
                    short(&p.command)
                ));
            }
        }
        if let Some(bg) = &stop.untracked_processes {
            n.push_str(&format!(
                "Processes from the earlier run (not tracked): {}\n",
                bg.trim()
            ));
        }
        if s.run.as_ref().is_some_and(|r| r.plan_enabled) {
            n.push_str("Current plan:\n");
            n.push_str(&plan::render(s.plan.as_ref()));
            n.push('\n');
        }
        n
    }
}

/// The notice with the reattached background processes listed before its
/// plan (or at its end).
fn reattached_notice(notice: String, reattached: &[ProcessInfo]) -> String {
    if reattached.is_empty() {
        return notice;
    }
    let mut text = String::from(
        "Background processes from before the stop are tracked again (the process tool lists, reads and kills them):\n",
    );
    for p in reattached {
        text.push_str(&format!(
            "- {} pid {} [container] `{}`: still running in container {} (reattached)\n",
            p.id,
            p.pid,
            short(&p.command),
            p.container.as_deref().unwrap_or("?")
        ));
    }
    match notice.find("Current plan:\n") {
        Some(at) => {
            let mut n = notice;
            n.insert_str(at, &text);
            n
        }
        None => notice + &text,
    }
}

fn short(s: &str) -> String {
    crate::text::cut_chars(s, 120, "…")
}
