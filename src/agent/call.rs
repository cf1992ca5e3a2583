//! The call runner: the one place a tool call goes through
//! pre hook -> approval -> `tool.started` -> run -> post hook -> `tool.result`
//! (-> `plan.updated`). The live loop and resume's re-runs both use it, so a
//! re-run call is hooked and recorded exactly like a live one. What it
//! writes, and which writes are sync points, goes through the call's
//! [`Journal`] (journal.rs).

use super::approval::Approval;
use super::journal::Journal;
use super::{Agent, AgentError};
use crate::event::{
    CallProcess, Event, HookBlocked, HookRun, PlanItem, PlanUpdated, ToolCall, ToolResult,
    ToolStarted,
};
use crate::exec::group::{Launch, ProcessGroup};
use crate::session::plan;
use crate::store::Store;
use crate::tools::{ToolContext, ToolOutcome};
use nix::sys::signal::Signal;
use serde_json::json;
use std::cell::RefCell;

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
        let journal = Journal::of(step, call);
        let mut hooks = Vec::new();
        // Sync point (with a pre hook): what the hook is shown.
        match self.run_pre_hook(&journal, &mut hooks)? {
            Gate::Open => {}
            Gate::Stopped(sig) => return self.stopped_before_start(&journal, sig, hooks),
            Gate::Blocked(reason) => return self.blocked(&journal, &reason, hooks),
        }
        // The person is asked after the pre hook: a call the person's own
        // hook blocks is not worth a question (docs/design.md, "Approvals").
        match self.approve(step, call)? {
            Approval::Allowed => {}
            Approval::Stopped(sig) => return self.stopped_before_start(&journal, sig, hooks),
            Approval::Denied { by, reason } => {
                let mut result = ToolResult::denied(step, call, &by, reason.as_deref());
                result.hooks = hooks;
                journal.result(self, result)?;
                self.checkpoint_event(step);
                return Ok(());
            }
        }
        // Sync point: the intent, before the tool runs. A foreground
        // command's is made by its launch instead, with its process group
        // (`CallLauncher::record`), before the command may act.
        let launches = !rerun && self.tools.launches(call);
        if !launches {
            journal.intent(self, rerun)?;
        }
        let started = std::time::Instant::now();
        let (mut outcome, launched) = self.execute(step, call, launches);
        self.timing.tools += started.elapsed();
        if launches && !launched {
            journal.unlaunched(self)?;
        }
        // Staged: what the tool recorded; then (with a post hook, after a
        // sync point) the result, durable with the next sync point.
        journal.outcome(self, &mut outcome)?;
        self.finish_call(&journal, outcome, hooks, rerun)
    }

    /// The pre hook of the call (its run goes into `hooks`), and what it
    /// means for the call. What the hook is shown is durable before it
    /// runs: it is a command of the person's.
    fn run_pre_hook(
        &mut self,
        journal: &Journal<'_>,
        hooks: &mut Vec<HookRun>,
    ) -> Result<Gate, AgentError> {
        if self.config.hooks.pre_tool.is_some() {
            journal.before_hook(self)?;
        }
        let Some(pre) = self.pre_hook(journal.step, journal.call) else {
            return Ok(Gate::Open);
        };
        hooks.push(pre.run);
        if let Some(sig) = self.stop.signal() {
            return Ok(Gate::Stopped(sig));
        }
        Ok(pre.blocked.map_or(Gate::Open, Gate::Blocked))
    }

    /// A call a signal stopped before it started: it never runs.
    fn stopped_before_start(
        &mut self,
        journal: &Journal<'_>,
        sig: Signal,
        hooks: Vec<HookRun>,
    ) -> Result<(), AgentError> {
        let call = journal.call;
        let mut result = ToolResult::not_run(journal.step, &call.id, &call.name);
        result.signal = Some(crate::signals::name(sig).to_string());
        result.hooks = hooks;
        journal.result(self, result)?;
        self.checkpoint_event(journal.step);
        Ok(())
    }

    /// A call the pre hook blocked: `hook.blocked`, then its error result.
    fn blocked(
        &mut self,
        journal: &Journal<'_>,
        reason: &str,
        hooks: Vec<HookRun>,
    ) -> Result<(), AgentError> {
        let (step, call) = (journal.step, journal.call);
        self.stage(Event::HookBlocked(HookBlocked {
            step,
            call_id: call.id.clone(),
            hook: "pre_tool".into(),
            reason: reason.to_string(),
        }))?;
        journal.result(self, ToolResult::blocked(step, call, reason, hooks))?;
        self.checkpoint_event(step);
        Ok(())
    }

    /// After a call ran: the post hook, then its `tool.result` (staged: it
    /// goes with the next sync point, the next call's tool.started or
    /// step.saved) and the plan update.
    fn finish_call(
        &mut self,
        journal: &Journal<'_>,
        mut outcome: ToolOutcome,
        mut hooks: Vec<HookRun>,
        rerun: bool,
    ) -> Result<(), AgentError> {
        let (step, call) = (journal.step, journal.call);
        if self.config.hooks.post_tool.is_some() {
            journal.before_hook(self)?;
        }
        // A run being stopped runs no more hooks.
        let post = match self.stop.signal() {
            Some(_) => None,
            None => self.post_hook(step, call, &outcome),
        };
        if let Some((run, feedback)) = post {
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
        if outcome.signal.is_some() {
            result.interrupted = true;
            result.signal = outcome.signal.map(str::to_string);
        }
        journal.result(self, result)?;
        if let Some((items, note)) = outcome.plan_update {
            self.update_plan(step, items, note)?;
        }
        // With the result: no sync point of its own.
        self.checkpoint_after(step, &call.name, &call.id)?;
        self.checkpoint_event(step);
        Ok(())
    }

    /// Several read-only calls of one response (read, grep, glob), run at
    /// once on up to as many threads as there are cores. Their pre hooks run
    /// first, in call order; their `tool.started` records are synced together
    /// (one sync point); their results and post hooks follow in call order.
    pub(super) fn run_read_only(
        &mut self,
        step: u64,
        calls: &[ToolCall],
    ) -> Result<(), AgentError> {
        let mut hooks: Vec<Vec<HookRun>> = vec![Vec::new(); calls.len()];
        let mut gates = Vec::with_capacity(calls.len());
        for (call, h) in calls.iter().zip(hooks.iter_mut()) {
            gates.push(self.run_pre_hook(&Journal::of(step, call), h)?);
        }
        let stopping = self.stop.signal();
        let runs: Vec<bool> = gates
            .iter()
            .map(|g| matches!(g, Gate::Open) && stopping.is_none())
            .collect();
        // One sync point: the intents of every call that runs.
        let running = calls.iter().zip(&runs).filter(|(_, r)| **r);
        Journal::intents(self, step, running.map(|(call, _)| call))?;
        let started = std::time::Instant::now();
        let outcomes = self.execute_read_only(step, calls, &runs);
        self.timing.tools += started.elapsed();
        for (((call, gate), outcome), call_hooks) in
            calls.iter().zip(gates).zip(outcomes).zip(hooks)
        {
            let journal = Journal::of(step, call);
            match (gate, outcome) {
                (Gate::Blocked(reason), _) => self.blocked(&journal, &reason, call_hooks)?,
                (_, Some(outcome)) => self.finish_call(&journal, outcome, call_hooks, false)?,
                (Gate::Stopped(sig), None) => {
                    self.stopped_before_start(&journal, sig, call_hooks)?;
                }
                (Gate::Open, None) => {
                    // Not run: a signal came while the pre hooks ran.
                    let sig = stopping.unwrap_or(Signal::SIGINT);
                    self.stopped_before_start(&journal, sig, call_hooks)?;
                }
            }
        }
        Ok(())
    }

    /// Runs the read-only calls marked in `runs` at once; their outcomes in
    /// call order (`None` for those not run).
    fn execute_read_only(
        &self,
        step: u64,
        calls: &[ToolCall],
        runs: &[bool],
    ) -> Vec<Option<ToolOutcome>> {
        let plan = self.store.state().plan.clone();
        let (tools, workspace, env, processes, protected, stop) = (
            &self.tools,
            self.config.workspace.as_path(),
            self.env.as_ref(),
            &self.processes,
            &self.protected,
            &self.stop,
        );
        let todo: Vec<usize> = (0..calls.len()).filter(|&i| runs[i]).collect();
        let workers = std::thread::available_parallelism()
            .map_or(2, std::num::NonZeroUsize::get)
            .min(todo.len())
            .max(1);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<std::sync::Mutex<Option<ToolOutcome>>> =
            calls.iter().map(|_| std::sync::Mutex::new(None)).collect();
        crate::runtime::blocking(|| {
            std::thread::scope(|scope| {
                for _ in 0..workers {
                    scope.spawn(|| {
                        // Read-only tools start no command: nothing to record.
                        let ctx = ToolContext {
                            workspace,
                            step,
                            env,
                            processes,
                            plan: plan.as_ref(),
                            launch: &crate::exec::group::Unrecorded,
                            protected,
                            stop,
                        };
                        loop {
                            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&i) = todo.get(k) else { break };
                            let outcome = tools.call(&ctx, &calls[i]);
                            *results[i]
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome);
                        }
                    });
                }
            });
        });
        results
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect()
    }

    /// `checkpoint.saved`: printed once the call's result is durable.
    fn checkpoint_event(&mut self, step: u64) {
        let pending: Vec<String> = self.state().pending.iter().map(|p| p.id.clone()).collect();
        let about = self.store.next_seq().saturating_sub(1);
        self.after_sync.push((
            about,
            "checkpoint.saved".to_string(),
            json!({
                "step": step,
                "path": self.store.path().display().to_string(),
                "pending": pending,
            }),
        ));
    }

    /// Runs a tool on this thread (tools are synchronous). With `launches`,
    /// the call's `tool.started` (with the command's process group) is made
    /// durable by the launch, before the command may act; the second value
    /// says whether that happened.
    pub(super) fn execute(
        &mut self,
        step: u64,
        call: &ToolCall,
        launches: bool,
    ) -> (ToolOutcome, bool) {
        let plan = self.store.state().plan.clone();
        let live = self.out.live_progress();
        let launcher = CallLauncher {
            store: RefCell::new(&mut self.store),
            out: RefCell::new(&mut self.out),
            after_sync: RefCell::new(&mut self.after_sync),
            step,
            call,
            env: self.env.kind(),
            allowed: launches,
            launched: std::cell::Cell::new(false),
            plan_changed: std::cell::Cell::new(false),
            live,
            showing: std::cell::Cell::new(false),
        };
        let ctx = ToolContext {
            workspace: &self.config.workspace,
            step,
            env: self.env.as_ref(),
            processes: &self.processes,
            plan: plan.as_ref(),
            launch: &launcher,
            protected: &self.protected,
            stop: &self.stop,
        };
        let outcome = crate::runtime::blocking(|| self.tools.call(&ctx, call));
        let launched = launcher.launched.get();
        if launcher.plan_changed.get() {
            self.write_plan_file();
        }
        (outcome, launched)
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
        // With its tool.result; the mirror is rewritten once it is durable.
        self.stage(Event::PlanUpdated(PlanUpdated {
            step,
            version,
            items,
            note,
            diff,
        }))?;
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

/// What a call's pre hook decided.
enum Gate {
    Open,
    Blocked(String),
    /// A stopping signal came while it ran.
    Stopped(Signal),
}

/// Writes a foreground call's `tool.started` with its process group: a sync
/// point like any `tool.started` (it takes what was staged before it), and
/// reports what became durable at once.
struct CallLauncher<'a> {
    store: RefCell<&'a mut Store>,
    out: RefCell<&'a mut crate::report::Output>,
    after_sync: RefCell<&'a mut Vec<(u64, String, serde_json::Value)>>,
    step: u64,
    call: &'a ToolCall,
    env: &'static str,
    /// Whether the runner left `tool.started` to the launch.
    allowed: bool,
    launched: std::cell::Cell<bool>,
    /// A plan update became durable (its mirror is due).
    plan_changed: std::cell::Cell<bool>,
    /// Live progress goes to stderr (human mode on a terminal).
    live: bool,
    /// A progress line is on the screen.
    showing: std::cell::Cell<bool>,
}

impl Launch for CallLauncher<'_> {
    fn progress(&self, elapsed: std::time::Duration, last_line: &str) {
        if !self.live {
            return;
        }
        // One line, rewritten in place: the time, then the last output.
        let line = if last_line.is_empty() {
            format!("      … {:.0} s", elapsed.as_secs_f64())
        } else {
            format!("      … {:.0} s · {last_line}", elapsed.as_secs_f64())
        };
        crate::report::err_text(&format!("\r\x1b[2K{line}"));
        self.showing.set(true);
    }

    fn progress_done(&self) {
        if self.showing.replace(false) {
            crate::report::err_text("\r\x1b[2K");
        }
    }

    fn record(&self, group: &ProcessGroup) -> Result<(), String> {
        if !self.allowed || self.launched.get() {
            return Err("this call may not start a foreground command".into());
        }
        let mut started = ToolStarted::new(self.step, self.call);
        started.process = Some(CallProcess {
            pid: group.pid,
            pgid: group.pid,
            start_time: group.start_time,
            env: self.env.to_string(),
        });
        let flushed = {
            let mut store = self.store.borrow_mut();
            store
                .stage(Event::ToolStarted(started))
                .map_err(|e| e.to_string())?;
            store.flush().map_err(|e| e.to_string())?
        };
        self.launched.set(true);
        let mut waiting = self.after_sync.borrow_mut();
        let store = self.store.borrow();
        if self
            .out
            .borrow_mut()
            .sync_point(&flushed, store.last_lines(), waiting.drain(..))
        {
            self.plan_changed.set(true);
        }
        Ok(())
    }
}
