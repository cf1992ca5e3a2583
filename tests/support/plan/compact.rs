//! Compaction scenario shared by the compaction tests: four steps whose
//! outputs push the view over a threshold computed from the system prompt,
//! and checks that replay the log through the library's fold.
//!
//! Sizes: the estimate is characters / 4. Steps 2 to 4 each add a 2000-letter
//! output (about 520 tokens), so with the threshold at "system prompt + 1400"
//! the view first crosses it after step 4, and after the compaction (and a
//! resume notice) it stays well under it: exactly one compaction.

use super::{big_output, content, messages, plan_args};
use crate::support::e2e::Sandbox;
use crate::support::mock::MockReply;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tinyagent::event::Event;
use tinyagent::session::State;

pub const TASK: &str = "compact me";
pub const SUMMARY: &str = "SUMMARY: looked around, produced big outputs, plan item 1 under way";
pub const V1: &str = "[>] 1 look around\n[ ] 2 write the fix\nnote: starting";
pub const KEEP: &str = "[compaction]\nkeep_recent = 2\n";

/// The threshold for this workspace: the system prompt's share plus 1400.
pub fn threshold(sb: &Sandbox) -> u64 {
    let ws = std::fs::canonicalize(sb.ws()).unwrap();
    let prompt = tinyagent::agent::prompt::system_prompt(&ws.display().to_string(), false, true);
    (prompt.chars().count() as u64).div_ceil(4) + 1400
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
        .with_usage(100, 10),
        MockReply::tool_call("bash", big_output(2000)).with_usage(200, 20),
        MockReply::tool_call("bash", big_output(2000)).with_usage(300, 30),
        MockReply::tool_calls(vec![
            ("bash", big_output(2000)),
            ("bash", json!({"command": "echo k2"})),
            ("bash", json!({"command": "echo k3"})),
        ])
        .with_ids(&["k1", "k2", "k3"])
        .with_usage(400, 40),
    ]
}

pub fn run_cmd(sb: &Sandbox, base_url: &str, extra: &[&str]) -> Command {
    let mut cmd = sb.run_cmd_cfg(base_url, TASK, KEEP);
    cmd.args(["--plan", "--compact-at", &threshold(sb).to_string()])
        .args(extra);
    cmd
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn frames(wal: &std::path::Path) -> Vec<(u64, Event)> {
    let mut out = Vec::new();
    let _ = tinyagent_store::wal::reader::scan::<Event>(wal, None, |f, _| {
        out.push((f.seq, f.event.clone()))
    });
    out
}

/// Replays the log through the library's fold and checks the trigger rule:
/// every compaction happened with the estimate over the threshold, and every
/// step request was built from a view at or under it (when compaction
/// succeeded). Returns the state before each `model.response`.
pub fn check_estimates(
    wal: &std::path::Path,
    threshold: u64,
    compaction_works: bool,
) -> Vec<State> {
    let mut state = State::default();
    let mut before_steps = Vec::new();
    for (seq, event) in frames(wal) {
        match &event {
            Event::Compaction(_) => assert!(
                state.estimate_tokens() > threshold,
                "seq {seq}: compacted at {} <= {threshold}",
                state.estimate_tokens()
            ),
            Event::ModelResponse(_) => {
                if compaction_works {
                    assert!(
                        state.estimate_tokens() <= threshold,
                        "seq {seq}: a request of {} > {threshold} tokens was sent uncompacted",
                        state.estimate_tokens()
                    );
                }
                before_steps.push(state.clone());
            }
            _ => {}
        }
        state.apply(&event);
    }
    before_steps
}

/// Characters / 4 over what a request sends (contents, call names and
/// arguments), computed from the request body alone.
pub fn sent_estimate(req: &Value) -> u64 {
    let chars: usize = messages(req)
        .iter()
        .map(|m| {
            content(m).chars().count()
                + m["tool_calls"].as_array().map_or(0, |calls| {
                    calls
                        .iter()
                        .map(|c| {
                            c["function"]["name"].as_str().unwrap().chars().count()
                                + c["function"]["arguments"].as_str().unwrap().chars().count()
                        })
                        .sum()
                })
        })
        .sum();
    (chars as u64).div_ceil(4)
}

/// The request's messages match what the fold says the model is sent, and
/// the fold's estimate is the size of what was sent.
pub fn same_as_fold(req: &Value, state: &State) {
    assert_eq!(sent_estimate(req), state.estimate_tokens());
    let sent = messages(req);
    let fold = state.model_messages();
    assert_eq!(sent.len(), fold.len(), "{:#}", req["messages"]);
    for (s, f) in sent.iter().zip(&fold) {
        assert_eq!(content(s), f.content);
    }
}
