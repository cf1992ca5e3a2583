//! Trajectory JSON (v1 or v2) to log records.

use super::emit::{Emitter, Item};
use super::file::{
    FileCompaction, FilePending, FileUsage, message, optional, plan_events, process_events,
    required, run_status, schema_version,
};
use super::{Imported, TrajectoryError};
use crate::event::{
    Event, Limits, Message, Role, RunFinished, RunSettings, RunStarted, SCHEMA_VERSION, ToolResult,
    ToolStarted, Usage,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// Calls left unanswered at the end: (id, name, step).
type Open = Vec<(String, String, u64)>;

/// Reads a trajectory file (schema v1 or v2) and turns it into log records.
///
/// Mapping, in order:
/// - `run.started` from the header; the system prompt is `messages[0]` and
///   the task `messages[1]` (the file must start with those two).
///   `tool_signature` is the file's, or empty when it has none.
/// - each later assistant message becomes a `model.response`, numbered so
///   that the last one has step `max(steps, number of assistant messages)`;
///   each tool message a `tool.result` (named after the call when the
///   message has no `name`); each later user message a `resume` record whose
///   notice is that message.
/// - `step.saved` follows every step whose calls are all answered.
/// - Totals: a file stores only totals, so all of `usage` and `usage.cost_usd`
///   is put on the last `model.response` (on the compaction when there is
///   no assistant message); every other record carries zero, so the fold's
///   sums equal the file's exactly.
/// - `format_errors` = N marks the last N tool results as format errors
///   (capped at the number of tool results).
/// - `compaction` is placed after `messages_before` messages when the file
///   says so (v2 export does), else before the first assistant message of a
///   later step than its `step`.
/// - Calls of the last assistant message with no answer stay pending (no
///   result record). v2 takes `started` from `pending_calls`; v1 (and a v2
///   call not listed there) counts as started, the cautious answer on resume.
/// - v2 `plan_history` and `plan` become `plan.updated` records (only the
///   current version's items are known; earlier versions carry none), and
///   `processes` become `process.started` / `process.exited`, each placed
///   after the first tool result of its step (or before its `step.saved`,
///   or at the end); a v2 `status` other than
///   `running` becomes `run.finished`.
pub fn import(text: &str) -> Result<Imported, TrajectoryError> {
    let value: Value = serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Eof => TrajectoryError::Truncated {
            line: e.line(),
            column: e.column(),
        },
        _ => TrajectoryError::NotJson {
            reason: e.to_string(),
        },
    })?;
    let obj = value.as_object().ok_or(TrajectoryError::NotObject)?;
    let version = schema_version(obj)?;
    let v2 = version == 2;

    let run_id: String = required(obj, "run_id")?;
    let _task: String = required(obj, "task")?;
    let model: String = required(obj, "model")?;
    let raw_messages: Vec<Value> = required(obj, "messages")?;
    let usage: FileUsage = required(obj, "usage")?;
    let steps: u64 = required(obj, "steps")?;
    let format_errors: u32 = optional(obj, "format_errors")?.unwrap_or(0);
    let limits: Limits = optional(obj, "limits")?.unwrap_or_default();
    let mut compaction: Option<FileCompaction> = optional(obj, "compaction")?;
    let background: Option<String> = optional(obj, "background")?;
    let tool_signature: Option<String> = optional(obj, "tool_signature")?;

    let messages = raw_messages
        .iter()
        .enumerate()
        .map(|(i, v)| message(i, v))
        .collect::<Result<Vec<_>, _>>()?;
    let (system, task) = match messages.as_slice() {
        [s, t, ..] if s.role == Role::System && t.role == Role::User => (s, t),
        _ => {
            return Err(TrajectoryError::BadField {
                field: "messages".into(),
                reason: "must start with the system prompt (role system) and the task (role user)"
                    .into(),
            });
        }
    };

    let run = RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id,
        task: task.content.clone(),
        model,
        provider: optional(obj, "provider")?.unwrap_or_default(),
        base_url: optional(obj, "base_url")?,
        plan_enabled: v2 && optional(obj, "plan_enabled")?.unwrap_or(false),
        read_only: optional(obj, "read_only")?.unwrap_or(false),
        tool_signature: tool_signature.clone().unwrap_or_default(),
        tools: optional(obj, "tools")?.unwrap_or_default(),
        mcp_tools: optional(obj, "mcp_tools")?.unwrap_or_default(),
        limits,
        forked_from: None,
        system_prompt: system.content.clone(),
        settings: optional::<RunSettings>(obj, "settings")?.unwrap_or_default(),
    };

    // The file's settings are checked like any other source of a run's
    // config (its workspace, when it names none, is decided on resume).
    crate::config::RunConfig::from_started(&run, std::path::Path::new("/")).map_err(|e| {
        TrajectoryError::BadField {
            field: "settings".into(),
            reason: e.to_string(),
        }
    })?;
    let (mut items, open) = walk(&messages, steps)?;
    mark_format_errors(&mut items, format_errors);
    attribute_usage(&mut items, compaction.as_mut(), &usage)?;
    let at = compaction_position(&items, compaction.as_ref(), messages.len())?;

    let mut out = Emitter::default();
    if v2 {
        out.deferred = plan_events(obj)?;
        out.deferred.extend(process_events(obj)?);
    }
    let started = open_calls_started(obj, v2, &open)?;
    out.events.push(Event::RunStarted(run));
    for (index, item) in items {
        if Some(index) == at
            && let Some(c) = compaction.take()
        {
            out.compaction(c);
        }
        out.item(item);
    }
    for (id, name, step) in &open {
        if started.contains(id) {
            out.events.push(Event::ToolStarted(ToolStarted {
                step: *step,
                call_id: id.clone(),
                name: name.clone(),
                process: None,
            }));
        }
    }
    out.flush_upto(u64::MAX);
    if let Some(c) = compaction.take() {
        out.compaction(c);
    }
    if v2 && let Some(status) = run_status(obj)? {
        out.events.push(Event::RunFinished(RunFinished {
            status,
            reason: None,
        }));
    }
    Ok(Imported {
        schema_version: version,
        events: out.events,
        background,
        tool_signature,
    })
}

/// Checks the conversation and turns each message after the task into an
/// item (with its index in `messages`). Returns the calls left unanswered at
/// the end as (id, name, step).
fn walk(messages: &[Message], steps: u64) -> Result<(Vec<(usize, Item)>, Open), TrajectoryError> {
    let responses = messages
        .iter()
        .skip(2)
        .filter(|m| m.role == Role::Assistant)
        .count() as u64;
    let mut step = steps.max(responses) - responses;
    let mut made: HashMap<String, (String, u64)> = HashMap::new();
    let mut open: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let mut items = Vec::new();
    for (index, m) in messages.iter().enumerate().skip(2) {
        let bad = |reason: String| TrajectoryError::BadMessage { index, reason };
        match m.role {
            Role::System => return Err(bad("a system message may only come first".into())),
            Role::User => items.push((index, Item::Notice(m.content.clone()))),
            Role::Assistant => {
                if !open.is_empty() {
                    return Err(bad(format!(
                        "an assistant message while call(s) {} of step {step} have no result",
                        open.join(", ")
                    )));
                }
                step += 1;
                for c in &m.tool_calls {
                    if made.insert(c.id.clone(), (c.name.clone(), step)).is_some() {
                        return Err(bad(format!("tool call id `{}` is used twice", c.id)));
                    }
                    open.push(c.id.clone());
                }
                let (usage, cost) = (Usage::default(), 0.0);
                let message = m.clone();
                items.push((
                    index,
                    Item::Response {
                        step,
                        message,
                        usage,
                        cost,
                    },
                ));
            }
            Role::Tool => {
                let id = m
                    .tool_call_id
                    .clone()
                    .ok_or_else(|| bad("a tool message without tool_call_id".into()))?;
                if answered.contains(&id) {
                    return Err(TrajectoryError::DuplicateAnswer { index, call_id: id });
                }
                let Some((call_name, call_step)) = made.get(&id).cloned() else {
                    return Err(TrajectoryError::UnknownCall { index, call_id: id });
                };
                open.retain(|o| o != &id);
                answered.insert(id.clone());
                let name = m.name.clone().unwrap_or(call_name);
                let result = ToolResult::new(call_step, id, name, &m.content, m.is_error);
                let closes_step = open.is_empty();
                items.push((
                    index,
                    Item::Result {
                        result,
                        closes_step,
                    },
                ));
            }
        }
    }
    let open = open
        .into_iter()
        .map(|id| {
            let (name, step) = made.get(&id).cloned().unwrap_or_default();
            (id, name, step)
        })
        .collect();
    Ok((items, open))
}

fn mark_format_errors(items: &mut [(usize, Item)], count: u32) {
    let mut left = count;
    for (_, item) in items.iter_mut().rev() {
        if left == 0 {
            break;
        }
        if let Item::Result { result, .. } = item {
            result.format_error = true;
            left -= 1;
        }
    }
}

fn attribute_usage(
    items: &mut [(usize, Item)],
    compaction: Option<&mut FileCompaction>,
    total: &FileUsage,
) -> Result<(), TrajectoryError> {
    let sum = Usage {
        input_tokens: total.input_tokens,
        output_tokens: total.output_tokens,
        ..Usage::default()
    };
    let last = items.iter_mut().rev().find_map(|(_, item)| match item {
        Item::Response { usage, cost, .. } => Some((usage, cost)),
        _ => None,
    });
    if let Some((usage, cost)) = last {
        *usage = sum;
        *cost = total.cost_usd;
        return Ok(());
    }
    if let Some(c) = compaction {
        c.carried = Some((sum, total.cost_usd));
        return Ok(());
    }
    if sum == Usage::default() && total.cost_usd == 0.0 {
        return Ok(());
    }
    Err(TrajectoryError::BadField {
        field: "usage".into(),
        reason: "not zero, but the file has no assistant message to attribute it to".into(),
    })
}

/// Index in `messages` before which the compaction record goes.
fn compaction_position(
    items: &[(usize, Item)],
    compaction: Option<&FileCompaction>,
    len: usize,
) -> Result<Option<usize>, TrajectoryError> {
    let Some(c) = compaction else { return Ok(None) };
    if let Some(before) = c.messages_before {
        if !(2..=len).contains(&before) {
            return Err(TrajectoryError::BadField {
                field: "compaction.messages_before".into(),
                reason: format!("{before} is not between 2 and {len} (the number of messages)"),
            });
        }
        return Ok(Some(before));
    }
    let later = items.iter().find_map(|(index, item)| match item {
        Item::Response { step, .. } if *step > c.step => Some(*index),
        _ => None,
    });
    Ok(Some(later.unwrap_or(len)))
}

fn open_calls_started(
    obj: &super::file::Obj,
    v2: bool,
    open: &[(String, String, u64)],
) -> Result<HashSet<String>, TrajectoryError> {
    let mut started: HashSet<String> = open.iter().map(|(id, ..)| id.clone()).collect();
    if !v2 {
        return Ok(started);
    }
    let listed: Vec<FilePending> = optional(obj, "pending_calls")?.unwrap_or_default();
    for p in listed {
        if !open.iter().any(|(id, ..)| *id == p.id) {
            return Err(TrajectoryError::BadField {
                field: "pending_calls".into(),
                reason: format!(
                    "call `{}` is not an unanswered call of the last assistant message",
                    p.id
                ),
            });
        }
        if p.started == Some(false) {
            started.remove(&p.id);
        }
    }
    Ok(started)
}
