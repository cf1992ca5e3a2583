//! The `update_plan` tool: parses and validates a whole new plan and hands it
//! to the loop (which writes `plan.updated` after the `tool.result`). A plan
//! that breaks a rule is an ordinary error result, not a format error, and
//! changes nothing.

use super::{ToolContext, ToolOutcome};
use crate::event::{PlanItem, PlanStatus};
use crate::session::{Plan, plan};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdatePlanArgs {
    pub items: Vec<ItemArg>,
    #[serde(default)]
    pub note: Option<String>,
}

/// One item as the model sends it (unknown members refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemArg {
    pub id: String,
    pub text: String,
    pub status: PlanStatus,
}

pub(crate) fn run(ctx: &ToolContext, args: UpdatePlanArgs) -> ToolOutcome {
    let items: Vec<PlanItem> = args
        .items
        .into_iter()
        .map(|i| PlanItem {
            id: i.id,
            text: i.text,
            status: i.status,
        })
        .collect();
    if let Err(rule) = plan::validate(&items) {
        return ToolOutcome::error(format!("The plan was not changed: {rule}."));
    }
    let next = Plan {
        version: ctx.plan.map_or(0, |p| p.version) + 1,
        items: items.clone(),
        note: args.note.clone(),
        updated_step: ctx.step,
    };
    let content = format!(
        "Plan updated to version {}:\n{}",
        next.version,
        plan::render(Some(&next))
    );
    let mut outcome = ToolOutcome::ok(content.trim_end().to_string());
    outcome.plan_update = Some((items, args.note));
    outcome
}
