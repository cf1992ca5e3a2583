//! The `update_plan` tool: parses and validates a whole new plan and hands it
//! to the loop (which writes `plan.updated` after the `tool.result`). A plan
//! that breaks a rule is an ordinary error result, not a format error, and
//! changes nothing.

use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use crate::event::{PlanItem, PlanStatus};
use crate::session::{Plan, plan};
use serde::Deserialize;
use serde_json::{Value, json};

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

/// The `update_plan` tool.
pub struct UpdatePlanTool;

impl TypedTool for UpdatePlanTool {
    const NAME: &'static str = "update_plan";
    const DESCRIPTION: &'static str = "Replace the task plan with a new version. Give every item \
        each time (the full list, not a change): a short stable id, the text, and a status \
        (pending, in_progress, done, blocked). At most one item may be in_progress, at most 50 \
        items. Use note to say why the plan changed. The current plan is always shown to you in \
        the [Current plan] message.";
    const USAGE: &'static str = r#"{"items": [{"id": string, "text": string, "status": "pending" | "in_progress" | "done" | "blocked"}], "note"?: string}"#;
    const EFFECT: Effect = Effect::Plan;
    type Args = UpdatePlanArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "maxItems": 50,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "text": {"type": "string", "maxLength": 500},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "done", "blocked"]}
                        },
                        "required": ["id", "text", "status"],
                        "additionalProperties": false
                    }
                },
                "note": {"type": "string", "description": "Why the plan changed."}
            },
            "required": ["items"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: UpdatePlanArgs) -> ToolOutcome {
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
}
