//! Reading the members of a trajectory document: the file-side shapes of
//! its parts, field access that names the member when something is wrong,
//! and the v2 members (plan, processes, status) turned into records.

use super::{SUPPORTED_VERSIONS, TrajectoryError};
use crate::event::{
    Event, Message, PlanItem, PlanUpdated, ProcessExited, ProcessStarted, RunStatus, Usage,
};
use crate::session::{ProcessExit, Status, plan};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub(super) type Obj = Map<String, Value>;

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileUsage {
    #[serde(default)]
    pub(super) input_tokens: u64,
    #[serde(default)]
    pub(super) output_tokens: u64,
    #[serde(default)]
    pub(super) cost_usd: f64,
}

#[derive(Debug, Deserialize)]
pub(super) struct FileCompaction {
    pub(super) view: Vec<Message>,
    pub(super) summary: String,
    pub(super) step: u64,
    /// v2 extension: how many messages of `messages` came before it.
    #[serde(default)]
    pub(super) messages_before: Option<usize>,
    #[serde(default)]
    pub(super) plan_version: Option<u64>,
    /// The file's totals, when no assistant message took them.
    #[serde(skip)]
    pub(super) carried: Option<(Usage, f64)>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FilePending {
    pub(super) id: String,
    #[serde(default)]
    pub(super) started: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FilePlan {
    pub(super) version: u64,
    pub(super) items: Vec<PlanItem>,
    #[serde(default)]
    pub(super) updated_step: u64,
    #[serde(default)]
    pub(super) note: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FileRevision {
    pub(super) step: u64,
    pub(super) diff: String,
    #[serde(default)]
    pub(super) version: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FileProcess {
    pub(super) id: String,
    pub(super) pid: u32,
    pub(super) command: String,
    #[serde(default)]
    pub(super) step: u64,
    #[serde(default)]
    pub(super) env: String,
    #[serde(default)]
    pub(super) start_time: Option<u64>,
    #[serde(default)]
    pub(super) output: Option<String>,
    #[serde(default)]
    pub(super) exited: Option<ProcessExit>,
}

pub(super) fn schema_version(obj: &Obj) -> Result<u32, TrajectoryError> {
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

pub(super) fn decode<T: DeserializeOwned>(v: &Value, field: &str) -> Result<T, TrajectoryError> {
    T::deserialize(v).map_err(|e| TrajectoryError::BadField {
        field: field.to_string(),
        reason: e.to_string(),
    })
}

pub(super) fn required<T: DeserializeOwned>(obj: &Obj, field: &str) -> Result<T, TrajectoryError> {
    match obj.get(field) {
        None | Some(Value::Null) => Err(TrajectoryError::MissingField {
            field: field.to_string(),
        }),
        Some(v) => decode(v, field),
    }
}

pub(super) fn optional<T: DeserializeOwned>(
    obj: &Obj,
    field: &str,
) -> Result<Option<T>, TrajectoryError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => decode(v, field).map(Some),
    }
}

/// One message, accepting the shapes older writers used: `content: null`,
/// and OpenAI-style calls (`{"id", "function": {"name", "arguments"}}`,
/// arguments as an object).
pub(super) fn message(index: usize, v: &Value) -> Result<Message, TrajectoryError> {
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

pub(super) fn plan_events(obj: &Obj) -> Result<Vec<(u64, Event)>, TrajectoryError> {
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
            record.items.clone_from(&p.items);
            record.note.clone_from(&p.note);
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

pub(super) fn process_events(obj: &Obj) -> Result<Vec<(u64, Event)>, TrajectoryError> {
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
            container: None,
            engine: None,
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

pub(super) fn run_status(obj: &Obj) -> Result<Option<RunStatus>, TrajectoryError> {
    match obj.get("status") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == Status::Running.as_str() => Ok(None),
        Some(v) => decode(v, "status").map(Some),
    }
}
