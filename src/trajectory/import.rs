//! Trajectory JSON (v1 or v2) to log records.

use super::{Imported, SUPPORTED_VERSIONS, TrajectoryError};
use crate::event::{
    Compaction, Event, Limits, Message, ModelResponse, PlanItem, PlanUpdated, ProcessExited,
    ProcessStarted, Resume, Role, RunFinished, RunSettings, RunStarted, RunStatus, SCHEMA_VERSION,
    StepSaved, ToolResult, ToolStarted, Usage,
};
use crate::session::{ProcessExit, plan};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

type Obj = Map<String, Value>;

#[derive(Debug, Default, Deserialize)]
struct FileUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cost_usd: f64,
}

#[derive(Debug, Deserialize)]
struct FileCompaction {
    view: Vec<Message>,
    summary: String,
    step: u64,
    /// v2 extension: how many messages of `messages` came before it.
    #[serde(default)]
    messages_before: Option<usize>,
    #[serde(default)]
    plan_version: Option<u64>,
    /// The file's totals, when no assistant message took them.
    #[serde(skip)]
    carried: Option<(Usage, f64)>,
}

#[derive(Debug, Deserialize)]
struct FilePending {
    id: String,
    #[serde(default)]
    started: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct FilePlan {
    version: u64,
    items: Vec<PlanItem>,
    #[serde(default)]
    updated_step: u64,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Debug, Deserialize)]
struct FileRevision {
    step: u64,
    diff: String,
    #[serde(default)]
    version: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct FileProcess {
    id: String,
    pid: u32,
    command: String,
    #[serde(default)]
    step: u64,
    #[serde(default)]
    env: String,
    #[serde(default)]
    start_time: Option<u64>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    exited: Option<ProcessExit>,
}

/// One message after the task, turned into what its record needs.
enum Item {
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
        provider: optional(obj, "provider")?.unwrap_or_else(|| "openai".to_string()),
        base_url: optional(obj, "base_url")?,
        plan_enabled: v2 && optional(obj, "plan_enabled")?.unwrap_or(false),
        read_only: optional(obj, "read_only")?.unwrap_or(false),
        tool_signature: tool_signature.clone().unwrap_or_default(),
        tools: optional(obj, "tools")?.unwrap_or_default(),
        limits,
        system_prompt: system.content.clone(),
        settings: optional::<RunSettings>(obj, "settings")?.unwrap_or_default(),
    };

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

fn schema_version(obj: &Obj) -> Result<u32, TrajectoryError> {
    let v = obj
        .get("schema_version")
        .ok_or_else(|| TrajectoryError::MissingField {
            field: "schema_version".into(),
        })?;
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| SUPPORTED_VERSIONS.contains(n))
        .ok_or_else(|| TrajectoryError::UnknownSchema {
            found: v.to_string(),
        })
}

fn decode<T: DeserializeOwned>(v: &Value, field: &str) -> Result<T, TrajectoryError> {
    T::deserialize(v).map_err(|e| TrajectoryError::BadField {
        field: field.to_string(),
        reason: e.to_string(),
    })
}

fn required<T: DeserializeOwned>(obj: &Obj, field: &str) -> Result<T, TrajectoryError> {
    match obj.get(field) {
        None | Some(Value::Null) => Err(TrajectoryError::MissingField {
            field: field.to_string(),
        }),
        Some(v) => decode(v, field),
    }
}

fn optional<T: DeserializeOwned>(obj: &Obj, field: &str) -> Result<Option<T>, TrajectoryError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => decode(v, field).map(Some),
    }
}

/// One message, accepting the shapes older writers used: `content: null`,
/// and OpenAI-style calls (`{"id", "function": {"name", "arguments"}}`,
/// arguments as an object).
fn message(index: usize, v: &Value) -> Result<Message, TrajectoryError> {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        if m.get("content").is_some_and(Value::is_null) {
            m.insert("content".into(), Value::String(String::new()));
        }
        if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
            for call in calls.iter_mut().filter_map(Value::as_object_mut) {
                if let Some(Value::Object(f)) = call.remove("function") {
                    for (k, val) in f {
                        call.entry(k).or_insert(val);
                    }
                }
                if let Some(args) = call.get_mut("arguments")
                    && !args.is_string()
                {
                    *args = Value::String(args.to_string());
                }
            }
        }
    }
    decode(&v, &format!("messages[{index}]"))
}

/// Checks the conversation and turns each message after the task into an
/// item (with its index in `messages`). Returns the calls left unanswered at
/// the end as (id, name, step).
#[allow(clippy::type_complexity)]
fn walk(
    messages: &[Message],
    steps: u64,
) -> Result<(Vec<(usize, Item)>, Vec<(String, String, u64)>), TrajectoryError> {
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
                let result = ToolResult {
                    step: call_step,
                    call_id: id,
                    name: m.name.clone().unwrap_or(call_name),
                    content: m.content.clone(),
                    is_error: m.is_error,
                    interrupted: false,
                    format_error: false,
                    rerun: false,
                };
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
    obj: &Obj,
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

fn plan_events(obj: &Obj) -> Result<Vec<(u64, Event)>, TrajectoryError> {
    let history: Vec<FileRevision> = optional(obj, "plan_history")?.unwrap_or_default();
    let current: Option<FilePlan> = optional(obj, "plan")?;
    let mut out = Vec::new();
    let last = history.len().checked_sub(1);
    for (n, rev) in history.into_iter().enumerate() {
        let version = rev.version.unwrap_or(n as u64 + 1);
        let mut record = PlanUpdated {
            step: rev.step,
            version,
            items: Vec::new(),
            note: None,
            diff: rev.diff,
        };
        if Some(n) == last
            && let Some(p) = &current
        {
            record.step = p.updated_step;
            record.version = p.version;
            record.items = p.items.clone();
            record.note = p.note.clone();
        }
        out.push((record.step, Event::PlanUpdated(record)));
    }
    if let (None, Some(p)) = (last, current) {
        let diff = plan::diff(None, &p.items);
        let record = PlanUpdated {
            step: p.updated_step,
            version: p.version,
            items: p.items,
            note: p.note,
            diff,
        };
        out.push((record.step, Event::PlanUpdated(record)));
    }
    Ok(out)
}

fn process_events(obj: &Obj) -> Result<Vec<(u64, Event)>, TrajectoryError> {
    let procs: Vec<FileProcess> = optional(obj, "processes")?.unwrap_or_default();
    let mut out = Vec::new();
    for p in procs {
        let started = ProcessStarted {
            id: p.id.clone(),
            pid: p.pid,
            command: p.command,
            step: p.step,
            env: p.env,
            start_time: p.start_time,
            output: p.output,
        };
        out.push((p.step, Event::ProcessStarted(started)));
        if let Some(exit) = p.exited {
            let exited = ProcessExited {
                id: p.id,
                exit_code: exit.exit_code,
                signal: exit.signal,
            };
            out.push((p.step, Event::ProcessExited(exited)));
        }
    }
    Ok(out)
}

fn run_status(obj: &Obj) -> Result<Option<RunStatus>, TrajectoryError> {
    match obj.get("status") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "running" => Ok(None),
        Some(v) => decode(v, "status").map(Some),
    }
}

/// Builds the record list, keeping running totals for `step.saved` and
/// holding plan and process records until the step they belong to is saved.
#[derive(Default)]
struct Emitter {
    events: Vec<Event>,
    usage: Usage,
    cost: f64,
    plan_version: u64,
    deferred: Vec<(u64, Event)>,
}

impl Emitter {
    fn item(&mut self, item: Item) {
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
                notice,
                limits: None,
                message: None,
            })),
        }
    }

    fn step_saved(&mut self, step: u64) {
        self.flush_upto(step);
        self.events.push(Event::StepSaved(StepSaved {
            step,
            usage_total: self.usage,
            cost_usd_total: self.cost,
        }));
    }

    fn flush_upto(&mut self, step: u64) {
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
    fn compaction(&mut self, c: FileCompaction) {
        let (usage, cost_usd) = c.carried.unwrap_or_default();
        self.usage.add(&usage);
        self.cost += cost_usd;
        self.events.push(Event::Compaction(Compaction {
            step: c.step,
            summary: c.summary,
            view: c.view,
            plan_version: c.plan_version.unwrap_or(self.plan_version),
            usage,
            cost_usd,
            replaced: 0,
        }));
    }
}
