//! Compaction scenario shared by the compaction tests: four steps whose
//! outputs push the view over a threshold computed from the system prompt,
//! and checks that replay the log through the library's fold.
//!
//! Sizes: the steps report no prompt tokens, so the context size is the
//! request body's bytes / 4. Steps 2 to 4 each add a 2000-letter output
//! (about 520 tokens), so with the threshold at "first request + 1400" the
//! request first crosses it after step 4, and after the compaction (and a
//! resume notice) it stays well under it: exactly one compaction.

use super::{big_output, content, messages, plan_args};
use crate::support::e2e::Sandbox;
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tinyagent::event::Event;
use tinyagent::session::State;

pub const TASK: &str = "compact me";
pub const SUMMARY: &str = "SUMMARY: looked around, produced big outputs, plan item 1 under way";
pub const V1: &str = "[>] 1 look around\n[ ] 2 write the fix\nnote: starting";
pub const KEEP: &str = "[compaction]\nkeep_recent = 2\n";

/// Bytes / 4 of the first request a run in this sandbox sends (system
/// prompt, task, the plan block when `plan`, tool definitions), measured by
/// a probe run against a mock that answers at once, into a log of its own.
pub fn base_tokens(sb: &Sandbox, plan: bool) -> u64 {
    let server = MockServer::start(vec![MockReply::text("probe done")]);
    let probe_wal = sb.path("probe.wal");
    let mut cmd = sb.run_cmd_wal(&server.base_url(), TASK, KEEP, &probe_wal);
    if plan {
        cmd.arg("--plan");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "probe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = server.requests().remove(0);
    std::fs::remove_file(&probe_wal).unwrap();
    tokens_of(serde_json::to_vec(&first).unwrap().len() as u64)
}

/// The threshold for this workspace: the first request's size plus 1400.
pub fn threshold(sb: &Sandbox) -> u64 {
    base_tokens(sb, true) + 1400
}

/// Steps 1 to 4: a plan, two big outputs, then one big and two small
/// outputs in one step (the kept tail would start at a tool result if the
/// split were not moved back to its call).
pub fn first_steps() -> Vec<MockReply> {
    vec![
        MockReply::tool_call(
            "update_plan",
            plan_args(
                &[
                    ("1", "look around", "in_progress"),
                    ("2", "write the fix", "pending"),
                ],
                Some("starting"),
            ),
        )
        .with_usage(0, 10),
        MockReply::tool_call("bash", big_output(2000)).with_usage(0, 20),
        MockReply::tool_call("bash", big_output(2000)).with_usage(0, 30),
        MockReply::tool_calls(vec![
            ("bash", big_output(2000)),
            ("bash", json!({"command": "echo k2"})),
            ("bash", json!({"command": "echo k3"})),
        ])
        .with_ids(&["k1", "k2", "k3"])
        .with_usage(0, 40),
    ]
}

pub fn run_cmd(sb: &Sandbox, base_url: &str, extra: &[&str]) -> Command {
    let mut cmd = sb.run_cmd_cfg(base_url, TASK, KEEP);
    cmd.args(["--plan", "--compact-at", &threshold(sb).to_string()])
        .args(extra);
    cmd
}

pub fn frames(wal: &std::path::Path) -> Vec<(u64, Event)> {
    let mut out = Vec::new();
    let _ = tinyagent_store::wal::reader::scan::<Event>(wal, None, |f, _| {
        out.push((f.seq, f.event.clone()))
    });
    out
}

/// What the log says about one step request: the state it was built from,
/// and the `model.response` members that measured it.
pub struct StepSent {
    pub state: State,
    pub request_bytes: u64,
    pub context_tokens: u64,
}

/// Bytes / 4, rounded up.
pub fn tokens_of(bytes: u64) -> u64 {
    bytes.div_ceil(4)
}

/// Replays the log through the library's fold and checks the trigger rule:
/// each step request's recorded context size follows the rule (the
/// previous measured request's prompt tokens plus bytes / 4 of the growth,
/// or bytes / 4 of the whole body), every compaction happened with it over
/// the threshold, and every step request was sent at or under it (when
/// compaction succeeded). Returns what each `model.response` measured.
pub fn check_estimates(
    wal: &std::path::Path,
    threshold: u64,
    compaction_works: bool,
) -> Vec<StepSent> {
    let mut state = State::default();
    let mut sent = Vec::new();
    for (seq, event) in frames(wal) {
        match &event {
            Event::Compaction(c) => assert!(
                c.context_tokens > threshold,
                "seq {seq}: compacted at {} <= {threshold}",
                c.context_tokens
            ),
            Event::ModelResponse(r) => {
                assert!(r.request_bytes > 0, "seq {seq}: no request size recorded");
                let expected = match state.last_request {
                    Some(m) => m.tokens + tokens_of(r.request_bytes.saturating_sub(m.bytes)),
                    None => tokens_of(r.request_bytes),
                };
                assert_eq!(r.context_tokens, expected, "seq {seq}: the rule");
                if compaction_works {
                    assert!(
                        r.context_tokens <= threshold,
                        "seq {seq}: a request of {} > {threshold} tokens was sent uncompacted",
                        r.context_tokens
                    );
                }
                sent.push(StepSent {
                    state: state.clone(),
                    request_bytes: r.request_bytes,
                    context_tokens: r.context_tokens,
                });
            }
            _ => {}
        }
        state.apply(&event);
    }
    sent
}

/// The request's messages match what the fold says the model is sent, and
/// the size the log recorded is the size of the body the server got.
pub fn same_as_fold(req: &Value, sent: &StepSent) {
    // The mock keeps the parsed body; serializing it again gives the same
    // bytes in another key order, so the same length.
    let len = serde_json::to_vec(req).unwrap().len() as u64;
    assert_eq!(len, sent.request_bytes, "the recorded body length");
    let sent_msgs = messages(req);
    let fold = sent.state.model_messages();
    assert_eq!(sent_msgs.len(), fold.len(), "{:#}", req["messages"]);
    for (s, f) in sent_msgs.iter().zip(&fold) {
        assert_eq!(content(s), f.content);
    }
}

pub use super::super::wait_until;
