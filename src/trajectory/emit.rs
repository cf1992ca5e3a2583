//! Building the record list of an import: running totals for `step.saved`,
//! plan and process records held until their step comes.

use super::file::FileCompaction;
use crate::event::{
    Compaction, Event, Message, ModelResponse, Resume, StepSaved, ToolResult, ToolStarted, Usage,
};

/// One message after the task, turned into what its record needs.
pub(super) enum Item {
    Response {
        step: u64,
        message: Message,
        usage: Usage,
        cost: f64,
    },
    Result {
        result: ToolResult,
        closes_step: bool,
    },
    Notice(String),
}

/// Builds the record list, keeping running totals for `step.saved` and
/// holding plan and process records until the step they belong to is saved.
#[derive(Default)]
pub(super) struct Emitter {
    pub(super) events: Vec<Event>,
    usage: Usage,
    cost: f64,
    plan_version: u64,
    pub(super) deferred: Vec<(u64, Event)>,
}

impl Emitter {
    pub(super) fn item(&mut self, item: Item) {
        match item {
            Item::Response {
                step,
                message,
                usage,
                cost,
            } => {
                self.usage.add(&usage);
                self.cost += cost;
                let pending = message.tool_calls.iter().map(|c| c.id.clone()).collect();
                let closes = message.tool_calls.is_empty();
                self.events.push(Event::ModelResponse(ModelResponse {
                    context_tokens: 0,
                    request_bytes: 0,
                    stop_reason: None,
                    stop_reason_raw: None,
                    step,
                    message,
                    usage,
                    cost_usd: cost,
                    pending,
                }));
                if closes {
                    self.step_saved(step);
                }
            }
            Item::Result {
                result,
                closes_step,
            } => {
                let step = result.step;
                // Keep the log's write order: a call that has a result was
                // started, so its `tool.started` comes first.
                self.events.push(Event::ToolStarted(ToolStarted {
                    step,
                    call_id: result.call_id.clone(),
                    name: result.name.clone(),
                    process: None,
                }));
                self.events.push(Event::ToolResult(result));
                // An update_plan result is followed by its plan record, a
                // background bash call's by its process record.
                self.flush_upto(step);
                if closes_step {
                    self.step_saved(step);
                }
            }
            Item::Notice(notice) => self.events.push(Event::Resume(Resume {
                interrupted: Vec::new(),
                lost_processes: Vec::new(),
                reattached_processes: Vec::new(),
                notice,
                limits: None,
                message: None,
                stopped_processes: Vec::new(),
                compact_at: None,
                api_key_env: None,
            })),
        }
    }

    pub(super) fn step_saved(&mut self, step: u64) {
        self.flush_upto(step);
        self.events.push(Event::StepSaved(StepSaved {
            step,
            usage_total: self.usage,
            cost_usd_total: self.cost,
        }));
    }

    pub(super) fn flush_upto(&mut self, step: u64) {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|(s, _)| *s <= step);
        self.deferred = later;
        for (_, event) in now {
            if let Event::PlanUpdated(p) = &event {
                self.plan_version = p.version;
            }
            self.events.push(event);
        }
    }

    /// The compaction record. It carries the file's totals only when no
    /// assistant message took them (see `attribute_usage`).
    pub(super) fn compaction(&mut self, c: FileCompaction) {
        let (usage, cost_usd) = c.carried.unwrap_or_default();
        self.usage.add(&usage);
        self.cost += cost_usd;
        self.events.push(Event::Compaction(Compaction {
            context_tokens: 0,
            step: c.step,
            summary: c.summary,
            view: c.view,
            plan_version: c.plan_version.unwrap_or(self.plan_version),
            usage,
            cost_usd,
            replaced: 0,
            failed: false,
        }));
    }
}
