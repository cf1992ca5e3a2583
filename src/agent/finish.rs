//! How a run ends: the limits that stop it before another model call, the
//! `step.saved` totals after a step, and `run.finished` (background
//! processes stopped and recorded, the `run.stats` overhead event, the totals
//! line).

use super::{Agent, AgentError, approval};
use crate::event::{Event, ProcessExited, RunFinished, RunStatus, StepSaved};
use nix::sys::signal::Signal;
use serde_json::json;

impl Agent {
    /// Reports the agent's own overhead: wall time minus model and tool
    /// time, and how much of it was fdatasync.
    pub(super) fn report_timing(&self) {
        let Some(started) = self.timing.started else {
            return;
        };
        let wall = started.elapsed();
        let io = self.store.io_stats();
        let fsync =
            std::time::Duration::from_nanos(io.sync_nanos - self.timing.io_at_start.sync_nanos);
        let write =
            std::time::Duration::from_nanos(io.write_nanos - self.timing.io_at_start.write_nanos);
        let overhead =
            wall.saturating_sub(self.timing.model + self.timing.tools + self.timing.waiting);
        let steps = self.timing.steps.max(1) as f64;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        self.out.event(
            "run.stats",
            json!({
                "steps": self.timing.steps,
                "wall_ms": ms(wall),
                "model_ms": ms(self.timing.model),
                "tools_ms": ms(self.timing.tools),
                "checkpoints_ms": ms(self.timing.checkpoints),
                "waiting_ms": ms(self.timing.waiting),
                "overhead_ms": ms(overhead),
                "overhead_per_step_ms": ms(overhead) / steps,
                "fsync_ms": ms(fsync),
                "write_ms": ms(write),
                "records": io.appends - self.timing.io_at_start.appends,
                "log_bytes": io.bytes - self.timing.io_at_start.bytes,
            }),
        );
        // For a person the overhead is noise after every run: it is in the
        // `run.stats` event (`--json`) for those who measure it.
    }

    /// Which limit, if any, stops the run before another model call.
    pub(super) fn limit_reached(&self) -> Option<RunStatus> {
        let s = self.state();
        if s.format_errors >= s.limits.max_format_errors.max(1) {
            return Some(RunStatus::FormatErrors);
        }
        if let Some(max) = s.limits.max_steps
            && s.step >= max
        {
            return Some(RunStatus::MaxSteps);
        }
        if let Some(max) = s.limits.max_cost_usd
            && s.cost_usd >= max
        {
            return Some(RunStatus::MaxCost);
        }
        None
    }

    /// Appends `step.saved` with the running totals.
    pub(super) fn save_step(&mut self, step: u64) -> Result<(), AgentError> {
        let s = self.state();
        let ev = Event::StepSaved(StepSaved {
            step,
            usage_total: s.usage,
            cost_usd_total: s.cost_usd,
        });
        self.append(ev)?;
        Ok(())
    }

    /// Ends the run: stops what it left running and appends `run.finished`.
    pub(super) fn finish(
        &mut self,
        status: RunStatus,
        reason: Option<String>,
    ) -> Result<RunStatus, AgentError> {
        self.processes.kill_all();
        self.record_exited_processes()?;
        self.report_timing();
        let s = self.state();
        self.out.set_totals(serde_json::json!({
            "steps": s.step,
            "usage": s.usage,
            "cost_usd": s.cost_usd,
        }));
        self.append(Event::RunFinished(RunFinished { status, reason }))?;
        // No question is open any more: answers left for calls that were
        // settled otherwise (stopped by a signal) go.
        approval::clear_channel(self.store.path());
        let s = self.state();
        // Input counts all of it, as the step lines and the status line
        // do; the parenthesis says how much of it the cache held.
        let cached = if s.usage.cached_input_tokens + s.usage.cache_write_tokens > 0 {
            format!(
                " ({} cached, {} written to the cache)",
                s.usage.cached_input_tokens, s.usage.cache_write_tokens
            )
        } else {
            String::new()
        };
        // With a price and a cache, what each kind of token cost.
        let kinds = if self.config.model.price_known && !cached.is_empty() {
            let c = self.config.model.cost_by_kind(&s.usage);
            format!(
                " (input ${:.4}, cached ${:.4}, written ${:.4}, output ${:.4})",
                c.input_usd, c.cached_input_usd, c.cache_write_usd, c.output_usd
            )
        } else {
            String::new()
        };
        self.out.say(&format!(
            "totals: {} steps · {} in{cached} / {} out tokens · {}{kinds}",
            s.step,
            s.usage.all_input(),
            s.usage.output_tokens,
            self.config.cost_text(s.cost_usd)
        ));
        Ok(status)
    }

    /// Ends a run a signal stopped.
    pub(super) fn interrupted(&mut self, sig: Signal) -> Result<RunStatus, AgentError> {
        self.finish(
            RunStatus::Interrupted,
            Some(crate::signals::name(sig).to_string()),
        )
    }

    /// Records `process.exited` for background processes that ended.
    pub(super) fn record_exited_processes(&mut self) -> Result<(), AgentError> {
        for exited in self.processes.poll_exited() {
            let known = self
                .state()
                .processes
                .get(&exited.id)
                .is_some_and(|p| p.exited.is_none());
            if known {
                self.append(Event::ProcessExited(ProcessExited { ..exited }))?;
            }
        }
        Ok(())
    }
}
