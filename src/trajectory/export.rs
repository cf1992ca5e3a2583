//! State to trajectory JSON, schema v2.

use crate::session::State;
use serde_json::{Value, json};

/// The run as a schema v2 trajectory document.
///
/// Members: everything of v1 (`schema_version` 2, `run_id`, `task`, `model`,
/// `messages` (the whole history), `compaction` (null or {`view`, `summary`,
/// `step`, `messages_before`}), `background` (always null: v2 has
/// `processes`), `usage` {`input_tokens`, `output_tokens`, `cost_usd`},
/// `steps`, `format_errors`, `limits`), then `pending_calls`
/// [{`id`,`name`,`step`,`started`}], `plan_enabled`, `plan` (null or
/// {`version`,`items`,`updated_step`,`note`}), `plan_history`
/// [{`step`,`version`,`diff`}], `processes` [{`id`,`pid`,`command`,`step`,
/// `env`,`start_time`,`output`,`exited`}], `tool_signature`, and, to let a
/// resume carry on the same way, `provider`, `base_url`, `read_only`,
/// `tools`, `settings` (never a secret), `status`, `compactions`, `resumes`,
/// `checkpoints` [{`step`,`call_id`,`tree`,`changed_count`,`oversized`}] (the
/// workspace checkpoints, whose trees are in `<wal>.d/checkpoints.git`) and
/// `forked_from`.
///
/// `compaction.view` is the latest compaction's view (without the system
/// prompt, and without the plan's messages: the plan is pinned anew when
/// the run is imported) and `messages_before` says after how many messages
/// it happened, so that [`import`](super::import) rebuilds the same model
/// view.
pub fn export_v2(state: &State) -> Value {
    let run = state.run.as_ref();
    let compaction = state.last_compaction.as_ref().map(|c| {
        let view: Vec<&crate::event::Message> = state
            .view
            .get(1..=c.view_len)
            .unwrap_or(&[])
            .iter()
            .filter(|m| !crate::session::is_plan_message(m))
            .collect();
        json!({
            "view": view,
            "summary": c.summary,
            "step": c.step,
            "messages_before": c.messages_before,
        })
    });
    let plan = state.plan.as_ref().map(|p| {
        json!({
            "version": p.version,
            "items": p.items,
            "updated_step": p.updated_step,
            "note": p.note,
        })
    });
    let plan_history: Vec<Value> = state
        .plan_history
        .iter()
        .map(|r| json!({"step": r.step, "version": r.version, "diff": r.diff}))
        .collect();
    let processes: Vec<Value> = state
        .processes
        .values()
        .map(|p| {
            json!({
                "id": p.id,
                "pid": p.pid,
                "command": p.command,
                "step": p.step,
                "env": p.env,
                "start_time": p.start_time,
                "output": p.output,
                "exited": p.exited,
            })
        })
        .collect();
    let status = state.status.as_str();
    let signature = run
        .map(|r| r.tool_signature.as_str())
        .filter(|s| !s.is_empty());
    let mut doc = json!({
        "schema_version": 2,
        "run_id": run.map(|r| r.run_id.as_str()).unwrap_or_default(),
        "task": run.map(|r| r.task.as_str()).unwrap_or_default(),
        "model": run.map(|r| r.model.as_str()).unwrap_or_default(),
        "provider": run.map(|r| r.provider.as_str()),
        "base_url": run.and_then(|r| r.base_url.as_deref()),
        "read_only": run.is_some_and(|r| r.read_only),
        "tools": run.map(|r| r.tools.as_slice()).unwrap_or_default(),
        "settings": run.map(|r| &r.settings),
        "messages": state.messages,
        "compaction": compaction,
        "background": Value::Null,
        "usage": {
            "input_tokens": state.usage.input_tokens,
            "output_tokens": state.usage.output_tokens,
            "cost_usd": state.cost_usd,
        },
        "steps": state.step,
        "format_errors": state.format_errors,
        "limits": state.limits,
        "pending_calls": state.pending,
        "plan_enabled": state.plan_enabled(),
        "plan": plan,
        "plan_history": plan_history,
        "processes": processes,
        "checkpoints": state.checkpoints,
        "forked_from": run.and_then(|r| r.forked_from.as_ref()),
        "tool_signature": signature,
        "status": status,
        "compactions": state.compactions,
        "resumes": state.resumes,
    });
    // The MCP tools the run recorded, so an imported copy resumes against
    // the same servers.
    if let Some(r) = run.filter(|r| !r.mcp_tools.is_empty()) {
        doc["mcp_tools"] = json!(r.mcp_tools);
    }
    doc
}
