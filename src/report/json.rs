//! The `--json` stream: one object per line, each with an `"event"`
//! member, made from a record's own log line where it can be (floats
//! rounded to 6 decimals either way).

use crate::event::Event;
use serde_json::{Value, json};
use std::io::Write;

/// A float of an event to 6 decimals (a cost of 125.559021, not
/// 125.55902099999999); `None` when that is not a finite number.
pub(super) fn round6(f: f64) -> Option<f64> {
    Some((f * 1e6).round() / 1e6).filter(|r| r.is_finite())
}

/// An event's time stamp: now, UTC, RFC 3339 with milliseconds.
pub(super) fn now_stamp() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Floats in an event to 6 decimals ([`round6`]); integers are untouched.
pub(super) fn round_floats(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(r) = n
                .as_f64()
                .and_then(round6)
                .and_then(serde_json::Number::from_f64)
            {
                *n = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(round_floats),
        Value::Object(map) => map.values_mut().for_each(round_floats),
        _ => {}
    }
}

/// The `--json` event's name for a record: its type, but `tool.result` is
/// reported as `tool.finished`.
pub(super) fn event_name(event: &Event) -> &'static str {
    match event {
        Event::ToolResult(_) => "tool.finished",
        other => other.kind(),
    }
}

/// Writes floats rounded by [`round6`], as [`round_floats`] leaves them in
/// a tree; everything else as the compact formatter does.
struct Rounded;

impl serde_json::ser::Formatter for Rounded {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> std::io::Result<()> {
        serde_json::ser::CompactFormatter.write_f64(writer, round6(value).unwrap_or(value))
    }
}

/// Whether `json` (serde_json's compact output) prints the same with
/// [`Rounded`]: every number in it outside its strings is an integer, or a
/// float that [`round6`] leaves as it is. The log writes floats as serde_json
/// does and events round them, so only then may an event take a record's
/// members from its log line. Decided on the bytes themselves, whatever
/// the record's kind and fields.
pub(super) fn prints_as_rounded(json: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                // To the string's closing quote, past escapes: a string is
                // most of a record's bytes (a tool's output), so it is
                // searched, not walked.
                i += 1;
                loop {
                    let found = json
                        .get(i..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest));
                    let Some(at) = found else {
                        i = json.len();
                        break;
                    };
                    i += at + 1;
                    if json[i - 1] == b'"' {
                        break;
                    }
                    i += 1;
                }
            }
            b'-' | b'0'..=b'9' => {
                let len = json[i..]
                    .iter()
                    .take_while(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .count();
                let token = &json[i..i + len];
                if token.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
                    let value = std::str::from_utf8(token)
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok());
                    match value {
                        Some(f) if round6(f).is_none_or(|r| r == f) => {}
                        _ => return false,
                    }
                }
                i += len;
            }
            _ => i += 1,
        }
    }
    true
}

/// The `--json` line for a record, made from the record itself with no JSON
/// tree in between (four of these a step): `{"event":..,"seq":..,` then the
/// record's data members in the log's order, then `"ts"`. The members are
/// taken from `logged`, the record's line in the log, when it has them as
/// the event prints them ([`prints_as_rounded`]); else the record is
/// serialised. `None` for `run.finished`, which takes the run's totals too
/// and goes through [`Output::event`], and for anything not shaped as
/// expected.
pub(super) fn record_line(seq: u64, event: &Event, logged: Option<&[u8]>) -> Option<Vec<u8>> {
    if matches!(event, Event::RunFinished(_)) {
        return None;
    }
    let from_log = logged
        .and_then(tinyagent_store::wal::frame::data_of)
        .filter(|data| prints_as_rounded(data));
    let record;
    let members = if let Some(data) = from_log {
        &data[1..data.len() - 1]
    } else {
        let mut buf = Vec::with_capacity(512);
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, Rounded);
        serde::Serialize::serialize(event, &mut ser).ok()?;
        record = buf;
        // The record is `{"type":"<kind>","data":{...}}` (adjacently
        // tagged, the type first); its data's members are what the event
        // carries.
        let head = format!("{{\"type\":\"{}\",\"data\":{{", event.kind());
        record.strip_prefix(head.as_bytes())?.strip_suffix(b"}}")?
    };
    let ts = now_stamp();
    let name = event_name(event);
    let mut line = Vec::with_capacity(members.len() + name.len() + ts.len() + 48);
    line.extend_from_slice(b"{\"event\":\"");
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b"\",\"seq\":");
    line.extend_from_slice(seq.to_string().as_bytes());
    line.push(b',');
    if !members.is_empty() {
        line.extend_from_slice(members);
        line.push(b',');
    }
    line.extend_from_slice(b"\"ts\":\"");
    line.extend_from_slice(ts.as_bytes());
    line.extend_from_slice(b"\"}\n");
    Some(line)
}

/// The `--json` event for a record: the record's data plus `event` and `seq`.
/// `tool.result` is reported as `tool.finished`.
pub fn json_event(seq: u64, event: &Event) -> Option<(&'static str, Value)> {
    let mut v = serde_json::to_value(event).ok()?;
    let mut data = v.get_mut("data").map(Value::take).unwrap_or(Value::Null);
    let name = event_name(event);
    if let Value::Object(m) = &mut data {
        m.insert("seq".into(), json!(seq));
    }
    Some((name, data))
}
