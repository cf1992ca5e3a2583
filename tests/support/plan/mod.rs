//! Helpers shared by the plan and compaction end-to-end tests: a mock server
//! that answers step requests and summarizer requests from separate queues,
//! log readers, and the checks on what the model was sent.

pub mod compact;

use crate::support::contract::{self, Rec};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// First line of the pinned plan message.
pub const PLAN_HEADER: &str = "[Current plan]";
/// What the block says before the first update.
pub const NO_PLAN: &str = "(no plan yet: call update_plan to make one)";
/// Prefix of the summary message that heads a compacted view.
pub const SUMMARY_PREFIX: &str = "[Summary of earlier work]";
pub const NOT_RUN: &str = "[not run: the agent stopped before this call started; it had no effect]";
pub const INTERRUPTED: &str = "[interrupted: tool did not complete before the agent stopped; it may have partially run — verify state before retrying]";

/// A server whose step requests are answered from `steps` and whose
/// summarizer requests (`tool_choice` none) from `summaries`. When
/// a queue runs out: "done" for steps, a fixed summary for summaries.
pub fn split_server(steps: Vec<MockReply>, summaries: Vec<MockReply>) -> MockServer {
    let steps = Arc::new(Mutex::new(VecDeque::from(steps)));
    let summaries = Arc::new(Mutex::new(VecDeque::from(summaries)));
    MockServer::start_with(vec![], move |req| {
        if req.is_summary() {
            summaries
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| MockReply::text("fallback summary"))
        } else {
            steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| MockReply::text("done"))
        }
    })
}

/// `update_plan` arguments from (id, text, status) triples.
pub fn plan_args(items: &[(&str, &str, &str)], note: Option<&str>) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(id, text, status)| json!({"id": id, "text": text, "status": status}))
        .collect();
    match note {
        Some(n) => json!({"items": items, "note": n}),
        None => json!({"items": items}),
    }
}

/// A bash call whose output is `n` letters `a` (and the exit-code line).
pub fn big_output(n: usize) -> Value {
    json!({"command": format!("head -c {n} /dev/zero | tr '\\0' a")})
}

pub fn messages(req: &Value) -> &Vec<Value> {
    req["messages"].as_array().expect("messages array")
}

pub fn content(m: &Value) -> &str {
    m["content"].as_str().unwrap_or("")
}

/// Indexes of the messages that are plan blocks.
pub fn plan_blocks(req: &Value) -> Vec<usize> {
    messages(req)
        .iter()
        .enumerate()
        .filter(|(_, m)| content(m).starts_with(PLAN_HEADER))
        .map(|(i, _)| i)
        .collect()
}

/// The only plan block of a request, checked to sit at `at`.
pub fn plan_block_at(req: &Value, at: usize) -> String {
    let blocks = plan_blocks(req);
    assert_eq!(
        blocks,
        vec![at],
        "exactly one plan block, at {at}: {:#}",
        req["messages"]
    );
    let m = &messages(req)[at];
    assert_eq!(m["role"], "user");
    content(m).to_string()
}

/// The current plan as a request shows it: its last plan message (section
/// 16), checked never to stand between calls and their results.
pub fn current_plan(req: &Value) -> String {
    let blocks = plan_blocks(req);
    let msgs = messages(req);
    for &at in &blocks {
        assert_eq!(msgs[at]["role"], "user");
        assert!(
            msgs.get(at + 1).is_none_or(|m| m["role"] != "tool"),
            "a plan message splits results from their call: {:#}",
            req["messages"]
        );
    }
    let last = *blocks
        .last()
        .unwrap_or_else(|| panic!("no plan message: {:#}", req["messages"]));
    content(&msgs[last]).to_string()
}

/// The request's messages without its plan messages.
pub fn without_plans(req: &Value) -> Vec<Value> {
    messages(req)
        .iter()
        .filter(|m| !content(m).starts_with(PLAN_HEADER))
        .cloned()
        .collect()
}

/// Names of the tools a request advertises.
pub fn tool_names(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Requests with their index among all requests.
pub type Indexed = Vec<(usize, Value)>;

/// Step requests and summarizer requests, in order, each with its index
/// among all requests.
pub fn split_requests(all: &[Value]) -> (Indexed, Indexed) {
    let mut steps = Vec::new();
    let mut sums = Vec::new();
    for (i, r) in all.iter().enumerate() {
        if crate::support::mock::is_summary(r) {
            sums.push((i, r.clone()));
        } else {
            steps.push((i, r.clone()));
        }
    }
    (steps, sums)
}

pub fn records_of<'a>(recs: &'a [Rec], kind: &str) -> Vec<&'a Rec> {
    recs.iter().filter(|r| r.kind == kind).collect()
}

/// The log, read by the independent contract reader, with its write order
/// checked (totals included).
pub fn read_log(wal: &Path) -> Vec<Rec> {
    let recs = contract::read(wal);
    contract::check_write_order(&recs);
    recs
}

/// Every `plan.updated` comes right after the successful `update_plan`
/// result it belongs to.
pub fn check_plan_order(recs: &[Rec]) {
    for (i, r) in recs.iter().enumerate() {
        if r.kind == "plan.updated" {
            let prev = &recs[i - 1];
            assert_eq!(
                prev.kind, "tool.result",
                "seq {}: plan.updated order",
                r.seq
            );
            assert_eq!(prev.data["name"], "update_plan");
            assert_eq!(prev.data["is_error"], false);
        }
    }
}

/// The first request after resume = the last one before the crash + what the
/// crashed step added (assistant message and results) + the notice, the
/// plan messages aside (a resume pins the current plan after the system
/// prompt and drops the earlier ones).
pub fn check_resumed_request(before: &Value, after: &Value, results: &[(&str, &str)]) -> String {
    let b = &without_plans(before);
    let a = &without_plans(after);
    assert!(a.len() > b.len(), "the resumed request is longer");
    assert_eq!(&a[..b.len()], &b[..], "history before the crash changed");
    let mut i = b.len();
    assert_eq!(a[i]["role"], "assistant");
    let ids: Vec<&str> = a[i]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, results.iter().map(|r| r.0).collect::<Vec<_>>());
    i += 1;
    for (id, text) in results {
        assert_eq!(a[i]["role"], "tool");
        assert_eq!(a[i]["tool_call_id"], *id);
        if !text.is_empty() {
            assert_eq!(a[i]["content"], *text);
        }
        i += 1;
    }
    assert_eq!(a[i]["role"], "user");
    let notice = content(&a[i]).to_string();
    assert!(notice.starts_with("[Resumed]"), "{notice}");
    assert_eq!(a.len(), i + 1, "nothing else was added");
    notice
}

/// `tinyagent log <sub> <wal> [extra]` output.
pub fn log_cmd(sub: &str, wal: &Path, extra: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(crate::support::e2e::bin());
    c.arg("log").arg(sub).arg(wal).args(extra);
    crate::support::e2e::output(c)
}

/// `log inspect --json`.
pub fn inspect(wal: &Path) -> Value {
    let out = log_cmd("inspect", wal, &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::e2e::stderr(&out)
    );
    serde_json::from_slice(&out.stdout).expect("inspect json")
}

/// `log export` as JSON.
pub fn export(wal: &Path) -> Value {
    let to = wal.with_extension("export.json");
    let out = log_cmd("export", wal, &["-o", to.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::e2e::stderr(&out)
    );
    serde_json::from_str(&std::fs::read_to_string(&to).unwrap()).unwrap()
}
