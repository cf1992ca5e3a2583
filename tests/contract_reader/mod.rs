//! An independent reader of the log that implements only section 2 of the
//! contract (it shares no code with tinyagent's own reader): every line is
//! complete JSON ending in `,"crc":"hhhhhhhh"}`, the crc covers `line[..len-18]`,
//! seq counts from 1, prev links to the previous crc, required members are
//! present. Tests use it to validate every log the project writes.

#![allow(dead_code)]

use serde_json::Value;
use std::path::Path;

/// One validated record.
#[derive(Debug, Clone)]
pub struct Rec {
    pub seq: u64,
    pub kind: String,
    pub data: Value,
}

/// Bitwise IEEE CRC-32, independent of crc32fast (shared by the tests that
/// check crcs on their own).
pub fn crc32(bytes: &[u8]) -> u32 {
    // Bitwise IEEE CRC-32 (reflected, poly 0xEDB88320): deliberately not crc32fast.
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn required(kind: &str) -> &'static [&'static str] {
    match kind {
        "run.started" => &[
            "schema_version",
            "run_id",
            "task",
            "model",
            "provider",
            "base_url",
            "plan_enabled",
            "read_only",
            "tool_signature",
            "tools",
            "limits",
        ],
        "model.response" => &["step", "message", "usage", "cost_usd", "pending"],
        "tool.started" => &["step", "call_id", "name"],
        "tool.result" => &[
            "step",
            "call_id",
            "name",
            "content",
            "is_error",
            "interrupted",
        ],
        "plan.updated" => &["step", "version", "items", "note", "diff"],
        "compaction" => &[
            "step",
            "summary",
            "view",
            "plan_version",
            "usage",
            "cost_usd",
        ],
        "hook.blocked" => &["step", "call_id", "hook", "reason"],
        "process.started" => &["id", "pid", "command"],
        "process.exited" => &["id", "exit_code"],
        "step.saved" => &["step", "usage_total", "cost_usd_total"],
        "resume" => &["interrupted", "lost_processes", "notice"],
        "run.finished" => &["status"],
        _ => &[],
    }
}

/// Reads and validates a whole log; panics with the line number on any
/// violation (these are test helpers).
pub fn read(path: &Path) -> Vec<Rec> {
    let bytes = std::fs::read(path).expect("read log");
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "log does not end with a newline"
    );
    let mut out = Vec::new();
    let mut prev = "00000000".to_string();
    if bytes.is_empty() {
        return out;
    }
    let body = &bytes[..bytes.len() - 1];
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        assert!(line.len() > 18, "line {n}: too short");
        let text = std::str::from_utf8(line).unwrap_or_else(|_| panic!("line {n}: not UTF-8"));
        let (body, tail) = text.split_at(text.len() - 18);
        assert!(
            tail.starts_with(",\"crc\":\"") && tail.ends_with("\"}"),
            "line {n}: no crc suffix"
        );
        let crc = &tail[8..16];
        assert!(
            crc.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "line {n}: crc not lowercase hex"
        );
        assert_eq!(
            format!("{:08x}", crc32(body.as_bytes())),
            crc,
            "line {n}: crc mismatch"
        );
        let v: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("line {n}: bad JSON {e}"));
        let obj = v.as_object().expect("object");
        assert!(obj.contains_key("crc"), "line {n}: no crc member");
        // The suffix check above already proves crc is the last member.
        let seq = v["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("line {n}: no seq"));
        assert_eq!(seq, out.len() as u64 + 1, "line {n}: seq");
        assert_eq!(
            v["prev"].as_str(),
            Some(prev.as_str()),
            "line {n}: prev link"
        );
        let ts = v["ts"]
            .as_str()
            .unwrap_or_else(|| panic!("line {n}: no ts"));
        assert!(
            ts.ends_with('Z') && ts.contains('T'),
            "line {n}: ts {ts} is not RFC 3339 UTC"
        );
        let kind = v["type"]
            .as_str()
            .unwrap_or_else(|| panic!("line {n}: no type"))
            .to_string();
        let data = v["data"].clone();
        assert!(data.is_object(), "line {n}: data is not an object");
        for m in required(&kind) {
            assert!(data.get(m).is_some(), "line {n}: {kind} lacks data.{m}");
        }
        assert!(
            !required(&kind).is_empty(),
            "line {n}: unknown record type {kind}"
        );
        prev = crc.to_string();
        out.push(Rec { seq, kind, data });
    }
    out
}

/// Checks the write order of the contract on a validated log: each step's
/// `model.response` is followed, per pending call in order, by `tool.started`
/// (unless blocked by a hook or synthesized on resume) and `tool.result`, then
/// `step.saved`; totals in `step.saved` equal the sums of all usages so far.
pub fn check_write_order(recs: &[Rec]) {
    assert_eq!(recs.first().map(|r| r.kind.as_str()), Some("run.started"));
    let mut pending: Vec<String> = Vec::new();
    let mut started: Option<String> = None;
    let (mut tin, mut tout, mut cost) = (0u64, 0u64, 0f64);
    let mut answered = std::collections::HashSet::new();
    for r in recs {
        match r.kind.as_str() {
            "model.response" => {
                assert!(
                    pending.is_empty(),
                    "seq {}: new response with calls pending {pending:?}",
                    r.seq
                );
                pending = r.data["pending"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                let ids: Vec<String> = r.data["message"]["tool_calls"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|c| c["id"].as_str().unwrap().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                assert_eq!(pending, ids, "seq {}: pending != tool call ids", r.seq);
                tin += r.data["usage"]["input_tokens"].as_u64().unwrap();
                tout += r.data["usage"]["output_tokens"].as_u64().unwrap();
                cost += r.data["cost_usd"].as_f64().unwrap();
            }
            "compaction" => {
                tin += r.data["usage"]["input_tokens"].as_u64().unwrap();
                tout += r.data["usage"]["output_tokens"].as_u64().unwrap();
                cost += r.data["cost_usd"].as_f64().unwrap();
            }
            "tool.started" => {
                let id = r.data["call_id"].as_str().unwrap().to_string();
                assert_eq!(
                    pending.first(),
                    Some(&id),
                    "seq {}: tool.started out of order",
                    r.seq
                );
                assert!(
                    started.is_none(),
                    "seq {}: two calls started at once",
                    r.seq
                );
                started = Some(id);
            }
            "tool.result" => {
                let id = r.data["call_id"].as_str().unwrap().to_string();
                assert_eq!(
                    pending.first(),
                    Some(&id),
                    "seq {}: result out of order",
                    r.seq
                );
                let synthesized = r.data["interrupted"].as_bool().unwrap();
                if started.as_ref() != Some(&id) && !synthesized {
                    // Only a hook-blocked call has a real result without tool.started.
                    assert!(
                        recs.iter()
                            .any(|h| h.kind == "hook.blocked" && h.data["call_id"] == id.as_str())
                            || r.data.get("rerun").is_some(),
                        "seq {}: result for {id} without tool.started",
                        r.seq
                    );
                }
                assert!(
                    answered.insert(id.clone()),
                    "seq {}: second result for {id}",
                    r.seq
                );
                pending.remove(0);
                started = None;
            }
            "step.saved" => {
                assert!(
                    pending.is_empty(),
                    "seq {}: step.saved with calls pending",
                    r.seq
                );
                assert_eq!(
                    r.data["usage_total"]["input_tokens"].as_u64().unwrap(),
                    tin,
                    "seq {}: input total",
                    r.seq
                );
                assert_eq!(
                    r.data["usage_total"]["output_tokens"].as_u64().unwrap(),
                    tout,
                    "seq {}: output total",
                    r.seq
                );
                let c = r.data["cost_usd_total"].as_f64().unwrap();
                assert!(
                    (c - cost).abs() < 1e-9,
                    "seq {}: cost total {c} != {cost}",
                    r.seq
                );
            }
            _ => {}
        }
    }
}
