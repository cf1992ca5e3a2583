//! The one independent reader of the log, for checking what the project
//! writes. It implements section 2 of the contract on its own and shares no
//! code with tinyagent's reader (nor crc32fast: [`crc32`] is written out bit
//! by bit): every line is complete JSON ending in `,"crc":"hhhhhhhh"}`, the
//! crc covers `line[..len-18]`, seq counts from 1, prev links to the previous
//! crc, `ts` is RFC 3339 UTC, required members are present.
//!
//! - [`read`] / [`read_bytes`]: a whole log that must be sound, as records;
//! - [`check_write_order`]: the write order of section 2 over those records;
//! - [`assert_intact`]: acknowledged records are intact in a log whose tail
//!   may be torn (after a fault or a power cut);
//! - [`frame`] / [`crc_ok`] and [`oracle`]: the framing of one line, and the
//!   verdict (clean, torn tail, corruption) a reader must reach on any bytes.

use serde_json::Value;
use std::path::Path;

/// One validated record.
#[derive(Debug, Clone)]
pub struct Rec {
    pub seq: u64,
    pub kind: String,
    pub data: Value,
    /// The whole line as JSON (`seq`, `prev`, `type`, `ts`, `data`, `crc`).
    pub line: Value,
}

/// Bitwise CRC-32 (IEEE 802.3, as zlib computes it: reflected, polynomial
/// 0xEDB88320, initial value and final xor 0xFFFFFFFF), one bit at a time
/// and with no table, so it shares nothing with the code under test.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
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

/// The framing of one line (without its `\n`): the crc it carries, or what
/// is wrong. A line ends with `,"crc":"hhhhhhhh"}` (8 lowercase hex digits)
/// whose value is the CRC-32 of `line[..len-18]`; like the writer's reader,
/// it needs at least two bytes before the suffix to carry a record.
pub fn frame(line: &[u8]) -> Result<u32, &'static str> {
    if line.len() < 20 {
        return Err("too short");
    }
    let (body, tail) = line.split_at(line.len() - 18);
    if !tail.starts_with(b",\"crc\":\"") || !tail.ends_with(b"\"}") {
        return Err("no crc suffix");
    }
    let hex = &tail[8..16];
    if !hex
        .iter()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    {
        return Err("crc not lowercase hex");
    }
    let stored = std::str::from_utf8(hex)
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or("crc not lowercase hex")?;
    if stored != crc32(body) {
        return Err("crc mismatch");
    }
    Ok(stored)
}

/// [`frame`] as an option: the crc of a line whose framing is right.
pub fn crc_ok(line: &[u8]) -> Option<u32> {
    frame(line).ok()
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
        "workspace.checkpoint" => &["step", "call_id", "tree", "changed"],
        "workspace.restored" => &["step", "tree", "last", "before", "workspace", "paths"],
        "user.message" => &["step", "content", "source"],
        "chat.waiting" => &["step"],
        "settings.changed" | "compaction.requested" => &["step", "by"],
        "approval.requested" => &["step", "call_id"],
        "approval.decided" => &["step", "call_id", "decision", "by", "reason"],
        _ => &[],
    }
}

/// Reads and validates a whole log; panics with the line number on any
/// violation (these are test helpers).
pub fn read(path: &Path) -> Vec<Rec> {
    read_bytes(&std::fs::read(path).expect("read log"))
}

/// [`read`] of a log's bytes.
pub fn read_bytes(bytes: &[u8]) -> Vec<Rec> {
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
        let text = std::str::from_utf8(line).unwrap_or_else(|_| panic!("line {n}: not UTF-8"));
        let crc = frame(line).unwrap_or_else(|why| panic!("line {n}: {why}"));
        let crc = format!("{crc:08x}");
        let v: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("line {n}: bad JSON {e}"));
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("line {n}: not an object"));
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
            ts.ends_with('Z') && ts.contains('T') && humantime::parse_rfc3339(ts).is_ok(),
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
        prev = crc;
        out.push(Rec {
            seq,
            kind,
            data,
            line: v,
        });
    }
    out
}

/// The records of the log at `wal`, after checking their write order.
pub fn read_checked(wal: &Path) -> Vec<Rec> {
    let recs = read(wal);
    check_write_order(&recs);
    recs
}

/// The content of `call_id`'s first `tool.result` (the test fails when
/// there is none).
pub fn result_content(recs: &[Rec], call_id: &str) -> String {
    recs.iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == call_id)
        .and_then(|r| r.data["content"].as_str())
        .unwrap_or_else(|| panic!("no result for {call_id}"))
        .to_string()
}

/// The records of one kind, in log order.
pub fn of_kind<'a>(recs: &'a [Rec], kind: &str) -> Vec<&'a Rec> {
    recs.iter().filter(|r| r.kind == kind).collect()
}

/// Checks the write order of the contract on a validated log: each step's
/// `model.response` is followed, per pending call in order, by `tool.started`
/// (unless blocked by a hook or synthesized on resume) and `tool.result`, then
/// `step.saved`; totals in `step.saved` equal the sums of all usages so far.
pub fn check_write_order(recs: &[Rec]) {
    assert_eq!(recs.first().map(|r| r.kind.as_str()), Some("run.started"));
    let mut pending: Vec<String> = Vec::new();
    let mut started: Vec<(String, String)> = Vec::new();
    let (mut tin, mut tout, mut cost) = (0u64, 0u64, 0f64);
    let mut answered = std::collections::HashSet::new();
    // MCP tools marked read-only count as read-only (section 13).
    let mcp_read_only: Vec<String> = recs[0].data["mcp_tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter(|t| t["effect"] == "read-only")
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    // The calls of the last response, when it was cut or refused (section
    // 15): never run, so never started.
    let mut unrun = false;
    for r in recs {
        match r.kind.as_str() {
            "model.response" => {
                unrun = matches!(
                    r.data["stop_reason"].as_str(),
                    Some("max_tokens" | "refusal" | "content_filter")
                );
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
                let name = r.data["name"].as_str().unwrap_or("").to_string();
                assert!(
                    !unrun,
                    "seq {}: a call of a cut or refused reply started",
                    r.seq
                );
                // A pending call after every call already started, in call
                // order (a hook-blocked call in between never starts).
                let at = pending.iter().position(|p| *p == id);
                let last_started = started
                    .iter()
                    .filter_map(|(s, _)| pending.iter().position(|p| p == s))
                    .max();
                assert!(
                    at.is_some() && (last_started.is_none() || at > last_started),
                    "seq {}: tool.started out of order",
                    r.seq
                );
                // Only read-only calls of one response run at once (section 9);
                // any other call starts when every earlier one is answered.
                let read_only = |n: &str| {
                    matches!(n, "read" | "grep" | "glob") || mcp_read_only.iter().any(|m| m == n)
                };
                assert!(
                    read_only(&name) || pending.first() == Some(&id),
                    "seq {}: {name} started before the calls before it were answered",
                    r.seq
                );
                assert!(
                    started.iter().all(|(_, n)| read_only(n))
                        && (started.is_empty() || read_only(&name)),
                    "seq {}: two calls started at once",
                    r.seq
                );
                started.push((id, name));
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
                if !started.iter().any(|(s, _)| *s == id) && !synthesized && !unrun {
                    // Only a hook-blocked call has a real result without tool.started.
                    assert!(
                        recs.iter().any(|h| (h.kind == "hook.blocked"
                            || (h.kind == "approval.decided" && h.data["decision"] == "deny"))
                            && h.data["call_id"] == id.as_str())
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
                started.retain(|(s, _)| *s != id);
            }
            "workspace.checkpoint" => {
                let tree = r.data["tree"].as_str().unwrap_or("");
                assert!(
                    tree.len() == 40 && tree.bytes().all(|b| b.is_ascii_hexdigit()),
                    "seq {}: checkpoint tree {tree:?} is not an object id",
                    r.seq
                );
                assert!(r.data["changed"].is_array(), "seq {}: changed", r.seq);
                // A call's checkpoint follows its result (section 10).
                if let Some(id) = r.data["call_id"].as_str() {
                    assert!(
                        answered.contains(id),
                        "seq {}: checkpoint of {id} before its result",
                        r.seq
                    );
                } else {
                    assert!(r.data["call_id"].is_null(), "seq {}: call_id", r.seq);
                }
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

/// What [`check_approvals`] counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalCounts {
    pub requested: usize,
    pub allowed: usize,
    pub denied: usize,
    /// Mutating calls that started.
    pub started: usize,
}

/// The approval rules of section 12 on a validated log of a run with
/// approvals on: every mutating call that starts has an `allow` decision
/// before its `tool.started`; a call is decided at most once and never
/// asked again after its decision; a denied call never starts.
pub fn check_approvals(recs: &[Rec]) -> ApprovalCounts {
    use std::collections::HashMap;
    // MCP tools not marked read-only are mutating too (section 13).
    let mcp_mutating: Vec<String> = recs
        .first()
        .and_then(|r| r.data["mcp_tools"].as_array())
        .map(|tools| {
            tools
                .iter()
                .filter(|t| t["effect"] == "mutating")
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mutating = |n: &str| {
        matches!(n, "bash" | "write" | "edit" | "process") || mcp_mutating.iter().any(|m| m == n)
    };
    let mut decided: HashMap<(u64, String), String> = HashMap::new();
    let mut counts = ApprovalCounts::default();
    let key = |r: &Rec| {
        (
            r.data["step"].as_u64().unwrap_or(0),
            r.data["call_id"].as_str().unwrap_or("").to_string(),
        )
    };
    for r in recs {
        match r.kind.as_str() {
            "approval.requested" => {
                counts.requested += 1;
                assert!(
                    !decided.contains_key(&key(r)),
                    "seq {}: {:?} asked again after its decision",
                    r.seq,
                    key(r)
                );
            }
            "approval.decided" => {
                let d = r.data["decision"].as_str().unwrap_or("").to_string();
                assert!(d == "allow" || d == "deny", "seq {}: decision {d:?}", r.seq);
                if d == "allow" {
                    counts.allowed += 1;
                } else {
                    counts.denied += 1;
                }
                assert!(
                    decided.insert(key(r), d).is_none(),
                    "seq {}: {:?} decided twice",
                    r.seq,
                    key(r)
                );
            }
            "tool.started" if mutating(r.data["name"].as_str().unwrap_or("")) => {
                counts.started += 1;
                assert_eq!(
                    decided.get(&key(r)).map(String::as_str),
                    Some("allow"),
                    "seq {}: {:?} started without an allow decision",
                    r.seq,
                    key(r)
                );
            }
            _ => {}
        }
    }
    counts
}

/// Every acknowledged record is line `seq` of the log, complete, crc-valid
/// and of the reported type (whatever follows it may be torn).
pub fn assert_intact(wal: &Path, acked: &[(u64, String)]) {
    let bytes = std::fs::read(wal).expect("read log");
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    for (seq, kind) in acked {
        let i = (*seq - 1) as usize;
        assert!(
            i + 1 < lines.len(),
            "acknowledged seq {seq} is not complete in the log: {} bytes, {} complete lines, \
             {} zero bytes, last line starts {:?}",
            bytes.len(),
            lines.len() - 1,
            bytes.iter().filter(|b| **b == 0).count(),
            lines
                .get(lines.len().saturating_sub(2))
                .map(|l| String::from_utf8_lossy(&l[..l.len().min(80)]).into_owned())
        );
        let line = lines[i];
        let text = std::str::from_utf8(line).expect("utf-8 line");
        if let Err(why) = frame(line) {
            panic!("seq {seq}: {why}");
        }
        let v: Value = serde_json::from_str(text).expect("record JSON");
        assert_eq!(v["seq"].as_u64(), Some(*seq));
        assert_eq!(v["type"].as_str(), Some(kind.as_str()), "seq {seq}: type");
    }
}

/// What a reader must conclude about a log's bytes (docs/format.md,
/// "Reading: every way a line can be bad"); rule 2 is [`frame`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Clean,
    Torn { offset: u64 },
    Corrupt { offset: u64, seq: u64 },
}

/// Rule 3: the JSON decodes into a record: (seq, prev).
pub fn decodes(line: &[u8]) -> Option<(u64, u32)> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let seq = v["seq"].as_u64()?;
    let prev = v["prev"].as_str()?;
    if prev.len() != 8
        || !prev
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return None;
    }
    v["ts"].as_str()?;
    let event = serde_json::json!({"type": v["type"], "data": v["data"]});
    serde_json::from_value::<tinyagent::event::Event>(event).ok()?;
    Some((seq, u32::from_str_radix(prev, 16).ok()?))
}

/// A crc-valid record starting with `{"seq":` after byte 0 of `piece`,
/// running to its end (a damaged newline merged it with what came before).
pub fn embedded(piece: &[u8]) -> bool {
    let body = piece.strip_suffix(b"\n").unwrap_or(piece);
    (1..body.len()).any(|p| body[p..].starts_with(b"{\"seq\":") && crc_ok(&body[p..]).is_some())
}

/// The oracle: (good records as (offset, len), verdict).
pub fn oracle(bytes: &[u8]) -> (Vec<(u64, u64)>, Verdict) {
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |p| start + p + 1);
        pieces.push((start, &bytes[start..end]));
        start = end;
    }
    let mut good = Vec::new();
    let (mut want_seq, mut want_prev) = (1u64, 0u32);
    for (i, (off, piece)) in pieces.iter().enumerate() {
        let record = piece.strip_suffix(b"\n").and_then(|line| {
            let crc = crc_ok(line)?;
            Some((decodes(line)?, crc))
        });
        match record {
            Some(((seq, prev), crc)) => {
                if seq != want_seq || prev != want_prev {
                    let seq = want_seq;
                    return (
                        good,
                        Verdict::Corrupt {
                            offset: *off as u64,
                            seq,
                        },
                    );
                }
                good.push((*off as u64, piece.len() as u64));
                want_seq += 1;
                want_prev = crc;
            }
            None => {
                let later_valid = pieces[i + 1..]
                    .iter()
                    .any(|(_, p)| crc_ok(p.strip_suffix(b"\n").unwrap_or(p)).is_some());
                let merged = pieces[i..].iter().any(|(_, p)| embedded(p));
                let verdict = if later_valid || merged {
                    Verdict::Corrupt {
                        offset: *off as u64,
                        seq: want_seq,
                    }
                } else {
                    Verdict::Torn {
                        offset: *off as u64,
                    }
                };
                return (good, verdict);
            }
        }
    }
    (good, Verdict::Clean)
}
