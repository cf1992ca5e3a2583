//! The `update_plan` tool: parses and validates a whole new plan and hands it
//! to the loop (which writes `plan.updated` after the `tool.result`). A plan
//! that breaks a rule is an ordinary error result, not a format error, and
//! changes nothing.

use super::{ToolContext, ToolOutcome};
use crate::event::{PlanItem, PlanStatus};
use serde::Deserialize;
use std::collections::HashSet;

/// Most items a plan may hold.
pub const MAX_ITEMS: usize = 50;
/// Longest item text, in characters.
pub const MAX_TEXT_CHARS: usize = 500;

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
    // TODO(lead): use session::plan::validate
    if let Err(rule) = validate(&items) {
        return ToolOutcome::error(format!("The plan was not changed: {rule}."));
    }
    let version = ctx.plan.map_or(0, |p| p.version) + 1;
    let mut content = format!("Plan updated to version {version}:\n");
    for item in &items {
        let mark = match item.status {
            PlanStatus::Pending => "[ ]",
            PlanStatus::InProgress => "[~]",
            PlanStatus::Done => "[x]",
            PlanStatus::Blocked => "[!]",
        };
        content.push_str(&format!("{mark} {}: {}\n", item.id, item.text));
    }
    if items.is_empty() {
        content.push_str("(no items)\n");
    }
    let mut outcome = ToolOutcome::ok(content.trim_end().to_string());
    outcome.plan_update = Some((items, args.note));
    outcome
}

/// The plan rules; the error names the rule that was broken.
fn validate(items: &[PlanItem]) -> Result<(), String> {
    if items.len() > MAX_ITEMS {
        return Err(format!(
            "a plan holds at most {MAX_ITEMS} items, this one has {}",
            items.len()
        ));
    }
    let mut seen = HashSet::new();
    for item in items {
        if item.id.trim().is_empty() {
            return Err("every item needs a non-empty id".to_string());
        }
        if !seen.insert(item.id.as_str()) {
            return Err(format!(
                "item ids must be unique, `{}` appears twice",
                item.id
            ));
        }
        let chars = item.text.chars().count();
        if chars > MAX_TEXT_CHARS {
            return Err(format!(
                "item text is at most {MAX_TEXT_CHARS} characters, `{}` has {chars}",
                item.id
            ));
        }
    }
    let in_progress: Vec<&str> = items
        .iter()
        .filter(|i| i.status == PlanStatus::InProgress)
        .map(|i| i.id.as_str())
        .collect();
    if in_progress.len() > 1 {
        return Err(format!(
            "at most one item may be in_progress, these are: {}",
            in_progress.join(", ")
        ));
    }
    Ok(())
}
