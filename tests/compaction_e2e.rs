//! Compaction, end to end: the real binary against the loopback mock server.
//! When the view outgrows `--compact-at`, a summarizer call (no tools, the
//! plan included) replaces the older history; the next request is system,
//! summary, plan block, kept messages. A failing summarizer leaves the run
//! uncompacted. A compacted run killed and resumed (from a snapshot or by a
//! full replay) continues from the same view, and a kill during the
//! summarizer call loses nothing.
//!
//! Sizes: the estimate is characters / 4. Steps 2 to 4 each add a 2000-letter
//! output (about 520 tokens), so with the threshold at "system prompt + 1400"
//! the view first crosses it after step 4, and after the compaction (and a
//! resume notice) it stays well under it: exactly one compaction.

mod common;
mod contract_reader;
mod e2e;
mod plan_support;

use common::MockReply;
use e2e::{Sandbox, events, output, stderr};
use plan_support::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tinyagent::event::Event;
use tinyagent::session::State;

const TASK: &str = "compact me";
const SUMMARY: &str = "SUMMARY: looked around, produced big outputs, plan item 1 under way";
const V1: &str = "[>] 1 look around\n[ ] 2 write the fix\nnote: starting";
const KEEP: &str = "[compaction]\nkeep_recent = 2\n";

/// The threshold for this workspace: the system prompt's share plus 1400.
fn threshold(sb: &Sandbox) -> u64 {
    let ws = std::fs::canonicalize(sb.ws()).unwrap();
    let prompt = tinyagent::agent::prompt::system_prompt(&ws.display().to_string(), false, true);
    (prompt.chars().count() as u64).div_ceil(4) + 1400
}

/// Steps 1 to 4: a plan, two big outputs, then one big and two small
/// outputs in one step (the kept tail would start at a tool result if the
/// split were not moved back to its call).
fn first_steps() -> Vec<MockReply> {
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

fn run_cmd(sb: &Sandbox, base_url: &str, extra: &[&str]) -> Command {
    let mut cmd = sb.run_cmd_cfg(base_url, TASK, KEEP);
    cmd.args(["--plan", "--compact-at", &threshold(sb).to_string()])
        .args(extra);
    cmd
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn frames(wal: &std::path::Path) -> Vec<(u64, Event)> {
    let mut out = Vec::new();
    let _ = tinyagent::wal::reader::scan(wal, None, |f, _| out.push((f.seq, f.event.clone())));
    out
}

/// Replays the log through the library's fold and checks the trigger rule:
/// every compaction happened with the estimate over the threshold, and every
/// step request was built from a view at or under it (when compaction
/// succeeded). Returns the state before each `model.response`.
fn check_estimates(wal: &std::path::Path, threshold: u64, compaction_works: bool) -> Vec<State> {
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
fn sent_estimate(req: &Value) -> u64 {
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
fn same_as_fold(req: &Value, state: &State) {
    assert_eq!(sent_estimate(req), state.estimate_tokens());
    let sent = messages(req);
    let fold = state.model_messages();
    assert_eq!(sent.len(), fold.len(), "{:#}", req["messages"]);
    for (s, f) in sent.iter().zip(&fold) {
        assert_eq!(content(s), f.content);
    }
}

#[test]
fn compaction_summarizes_without_tools_and_the_next_request_is_pinned() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::tool_call("bash", json!({"command": "echo five"})).with_usage(500, 50));
    steps.push(MockReply::text("finished").with_usage(600, 60));
    let server = split_server(steps, vec![MockReply::text(SUMMARY).with_usage(1000, 100)]);
    let out = output(run_cmd(
        &sb,
        &server.base_url(),
        &["--json", "--price-in", "1", "--price-out", "2"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(steps.len(), 6);
    assert_eq!(sums.len(), 1, "exactly one summarizer call");
    assert_eq!(sums[0].0, 4, "it came right before the fifth step");

    // The summarizer: no tools, the task, the history and the current plan.
    let sum = &sums[0].1;
    assert!(sum.get("tools").is_none() && sum.get("tool_choice").is_none());
    let text: String = messages(sum).iter().map(content).collect();
    assert!(text.contains(TASK));
    // The plan itself, not only the update_plan result in the history.
    let beyond_history = text.replace(&format!("Plan updated to version 1:\n{V1}"), "");
    assert!(
        beyond_history.contains(V1),
        "the plan is given to it: {text}"
    );
    assert!(text.contains("aaaaaaaa"), "the history is given to it");
    assert!(text.contains("\"look around\""), "the update_plan call too");
    assert!(!text.contains("echo k2"), "the kept tail is not summarized");

    // The record.
    let recs = read_log(&sb.wal());
    check_plan_order(&recs);
    let comps = records_of(&recs, "compaction");
    assert_eq!(comps.len(), 1);
    let c = &comps[0].data;
    assert_eq!(c["step"], 4);
    assert_eq!(c["summary"], SUMMARY);
    assert_eq!(c["plan_version"], 1);
    assert_eq!(
        c["usage"],
        json!({"input_tokens": 1000, "output_tokens": 100})
    );
    assert!((c["cost_usd"].as_f64().unwrap() - 1200.0 / 1e6).abs() < 1e-12);
    let view = c["view"].as_array().unwrap();
    assert_eq!(
        view.len(),
        5,
        "summary + the last step (call and 3 results)"
    );
    assert_eq!(view[0]["content"], format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(view[1]["role"], "assistant", "the tail starts at the call");
    // Totals count the summarizer call.
    let last = records_of(&recs, "step.saved").pop().unwrap();
    assert_eq!(
        last.data["usage_total"],
        json!({"input_tokens": 3100, "output_tokens": 310})
    );
    let results = records_of(&recs, "tool.result");

    // The next request: system, summary, plan block, kept messages.
    let before = &steps[3].1;
    let next = &steps[4].1;
    let m = messages(next);
    assert_eq!(m[0], messages(before)[0], "the same system prompt");
    assert_eq!(m[1]["role"], "user");
    assert_eq!(content(&m[1]), format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(plan_block_at(next, 2), format!("{PLAN_HEADER}\n{V1}"));
    assert_eq!(m[3]["role"], "assistant");
    let ids: Vec<&str> = m[3]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["k1", "k2", "k3"]);
    for (k, id) in ids.iter().enumerate() {
        let r = results.iter().find(|r| r.data["call_id"] == *id).unwrap();
        assert_eq!(m[4 + k]["tool_call_id"], *id);
        assert_eq!(m[4 + k]["content"], r.data["content"]);
    }
    assert_eq!(m.len(), 7);
    assert!(
        !next.to_string().contains(TASK),
        "the task went into the summary"
    );
    // Then what came after: the last request extends the compacted one.
    let fin = messages(&steps[5].1);
    assert_eq!(&fin[..7], &m[..]);
    assert_eq!(fin.len(), 9);
    assert_eq!(fin[7]["role"], "assistant");
    assert_eq!(fin[8]["role"], "tool");

    // The estimate rule, and the fold sends what the server saw.
    let states = check_estimates(&sb.wal(), threshold(&sb), true);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }

    // --json reports it; inspect counts it; the full history keeps everything.
    let evs = events(&out);
    let ev = evs.iter().find(|e| e["event"] == "compaction").unwrap();
    assert_eq!(ev["step"], 4);
    assert_eq!(inspect(&sb.wal())["compactions"], 1);
    let doc = export(&sb.wal());
    let msgs = doc["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], TASK);
    let tool_ids: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["tool_call_id"])
        .collect();
    let logged: Vec<&Value> = results.iter().map(|r| &r.data["call_id"]).collect();
    assert_eq!(tool_ids, logged, "every result is in the full history");
    assert_eq!(
        msgs.len(),
        2 + 6 + results.len(),
        "system, task, 6 replies, results"
    );
    assert_eq!(doc["compaction"]["summary"], SUMMARY);
}

#[test]
fn a_failing_summarizer_leaves_the_run_uncompacted() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::tool_call(
        "bash",
        json!({"command": "echo five"}),
    ));
    steps.push(MockReply::text("finished"));
    // An error that is not retried, then an empty answer.
    let server = split_server(steps, vec![MockReply::status(400), MockReply::text("")]);
    let out = output(run_cmd(&sb, &server.base_url(), &[]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let err = stderr(&out);
    assert_eq!(
        err.matches("compaction failed").count(),
        2,
        "each failure is reported: {err}"
    );
    assert!(err.contains("empty summary"), "{err}");
    assert!(err.contains("uncompacted"), "{err}");
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(sums.len(), 2, "the 400 was not retried");
    assert_eq!(steps.len(), 6);
    for (_, req) in &steps {
        assert_eq!(plan_blocks(req).len(), 1);
        assert_eq!(content(&messages(req)[2]), TASK, "uncompacted view");
        assert!(!req.to_string().contains(SUMMARY_PREFIX));
    }
    // Each step request extends the one before: nothing was dropped.
    for w in steps.windows(2) {
        let (a, b) = (messages(&w[0].1), messages(&w[1].1));
        assert_eq!(&b[2..a.len()], &a[2..], "history kept");
    }
    let recs = read_log(&sb.wal());
    assert!(records_of(&recs, "compaction").is_empty());
    assert_eq!(
        records_of(&recs, "run.finished")[0].data["status"],
        "completed"
    );
    let states = check_estimates(&sb.wal(), threshold(&sb), false);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }
    assert_eq!(inspect(&sb.wal())["compactions"], 0);
}

/// Runs the first four steps, a compaction and a fifth step with `calls`,
/// and stops the run in the fifth step (the caller's `stop`); then resumes
/// and checks the first request after the resume.
fn crash_resume_after_compaction(
    extra: &[&str],
    fifth: MockReply,
    stop: impl FnOnce(&Sandbox, Command),
    results: &[(&str, &str)],
    plan_after: &str,
) -> Sandbox {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(fifth);
    steps.push(MockReply::text("finished"));
    let server = split_server(steps, vec![MockReply::text(SUMMARY)]);
    stop(&sb, run_cmd(&sb, &server.base_url(), extra));
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(sums.len(), 1, "no second compaction after the resume");
    assert_eq!(steps.len(), 6);
    let (before, after) = (&steps[4].1, &steps[5].1);
    assert_eq!(
        content(&messages(before)[1]),
        format!("{SUMMARY_PREFIX}\n{SUMMARY}")
    );
    // The plan block is pinned after the summary, before and after the
    // resume, with the latest plan; the rest of the view is compared whole.
    assert_eq!(plan_block_at(before, 2), format!("{PLAN_HEADER}\n{V1}"));
    assert_eq!(
        plan_block_at(after, 2),
        format!("{PLAN_HEADER}\n{plan_after}")
    );
    let without_block = |r: &Value| {
        let mut r = r.clone();
        r["messages"].as_array_mut().unwrap().remove(2);
        r
    };
    let notice = check_resumed_request(&without_block(before), &without_block(after), results);
    assert!(notice.trim_end().ends_with(plan_after), "{notice}");
    let recs = read_log(&sb.wal());
    assert_eq!(records_of(&recs, "compaction").len(), 1);
    assert_eq!(records_of(&recs, "resume").len(), 1);
    let states = check_estimates(&sb.wal(), threshold(&sb), true);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }
    let doc = export(&sb.wal());
    assert_eq!(doc["messages"][1]["content"], TASK, "full history kept");
    sb
}

#[test]
fn a_compacted_run_killed_and_resumed_by_replay_continues_from_the_same_view() {
    // The crashed step changes the plan, then would run a command.
    let fifth = MockReply::tool_calls(vec![
        (
            "update_plan",
            plan_args(
                &[
                    ("1", "look around", "done"),
                    ("2", "write the fix", "in_progress"),
                ],
                None,
            ),
        ),
        ("bash", json!({"command": "echo two > two.txt"})),
    ])
    .with_ids(&["c1", "c2"]);
    let v2 = "[x] 1 look around\n[>] 2 write the fix";
    let sb = crash_resume_after_compaction(
        &[],
        fifth,
        |_, mut cmd| {
            cmd.env("TINYAGENT_CRASH_AFTER", "plan.updated:2");
            let out = output(cmd);
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
        },
        &[
            ("c1", &format!("Plan updated to version 2:\n{v2}")),
            ("c2", NOT_RUN),
        ],
        v2,
    );
    assert!(
        !sb.ws().join("two.txt").exists(),
        "a call that never started is not run"
    );
    assert!(
        !tinyagent::snapshot::snapshot_path(&sb.wal()).exists(),
        "no snapshot: resume replayed the whole log"
    );
}

#[test]
fn a_compacted_run_killed_and_resumed_from_a_snapshot_continues_from_the_same_view() {
    let fifth = MockReply::tool_calls(vec![
        (
            "bash",
            json!({"command": "echo $$ > long.pid; exec sleep 30"}),
        ),
        ("bash", json!({"command": "echo after"})),
    ])
    .with_ids(&["long", "after"]);
    let sb = crash_resume_after_compaction(
        &["--snapshot-every", "1"],
        fifth,
        |sb, mut cmd| {
            let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
            let wal = sb.wal();
            let snap = tinyagent::snapshot::snapshot_path(&wal);
            // Wait until the snapshot covers the long call's tool.started,
            // so that resume rebuilds the compacted view from it.
            wait_until("a snapshot covering the long call", || {
                let started = frames(&wal).iter().find_map(|(seq, e)| match e {
                    Event::ToolStarted(t) if t.call_id == "long" => Some(*seq),
                    _ => None,
                });
                let covered = tinyagent::snapshot::read_header(&snap).map(|p| p.seq);
                matches!((started, covered), (Some(s), Ok(c)) if c >= s)
            });
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            if let Ok(pid) = std::fs::read_to_string(sb.ws().join("long.pid")) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
            let (_, state) = tinyagent::snapshot::read(&snap).unwrap();
            assert_eq!(
                state.compactions, 1,
                "the snapshot holds the compacted view"
            );
            assert!(state.compacted);
            assert!(state.view[1].content.starts_with(SUMMARY_PREFIX));
        },
        &[("long", INTERRUPTED), ("after", NOT_RUN)],
        V1,
    );
    assert!(tinyagent::snapshot::snapshot_path(&sb.wal()).exists());
}

#[test]
fn a_kill_during_the_summarizer_call_redoes_the_compaction() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::text("finished"));
    let redone = "SUMMARY made after the resume";
    let server = split_server(
        steps,
        vec![
            MockReply::text("too late").delayed(Duration::from_secs(30)),
            MockReply::text(redone),
        ],
    );
    let mut child = run_cmd(&sb, &server.base_url(), &[])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the summarizer call", || {
        server.recorded().iter().any(|r| !r.has_tools())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(sums.len(), 2, "asked again after the resume");
    assert_eq!(steps.len(), 5);
    let recs = read_log(&sb.wal());
    let comps = records_of(&recs, "compaction");
    assert_eq!(comps.len(), 1);
    assert_eq!(comps[0].data["summary"], redone);
    assert!(
        !std::fs::read_to_string(sb.wal())
            .unwrap()
            .contains("too late")
    );
    // The notice is kept after the summary; the last step is kept whole.
    let last = &steps[4].1;
    let m = messages(last);
    assert_eq!(content(&m[1]), format!("{SUMMARY_PREFIX}\n{redone}"));
    assert_eq!(plan_block_at(last, 2), format!("{PLAN_HEADER}\n{V1}"));
    assert_eq!(m[3]["role"], "assistant");
    let notice = content(m.last().unwrap());
    assert!(notice.starts_with("[Resumed]"), "{notice}");
    assert!(notice.contains("No tool call was in flight"), "{notice}");
    // The compaction was redone exactly: the same request (the notice is in
    // the kept tail, not in what is summarized).
    assert_eq!(sums[1].1, sums[0].1);
    let states = check_estimates(&sb.wal(), threshold(&sb), true);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }
    let doc = export(&sb.wal());
    let msgs = doc["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], TASK);
    assert_eq!(
        msgs.iter().filter(|m| m["role"] == "tool").count(),
        6,
        "every result is in the full history"
    );
}

#[test]
fn a_crash_right_after_the_compaction_record_resumes_compacted() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::text("finished"));
    let server = split_server(steps, vec![MockReply::text(SUMMARY)]);
    let mut cmd = run_cmd(&sb, &server.base_url(), &[]);
    cmd.env("TINYAGENT_CRASH_AFTER", "compaction:1");
    let out = output(cmd);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(sums.len(), 1, "the durable compaction is not redone");
    assert_eq!(steps.len(), 5);
    let m = messages(&steps[4].1);
    assert_eq!(content(&m[1]), format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(
        plan_block_at(&steps[4].1, 2),
        format!("{PLAN_HEADER}\n{V1}")
    );
    assert_eq!(
        m.len(),
        3 + 4 + 1,
        "system, summary, plan, kept step, notice"
    );
    assert!(content(m.last().unwrap()).starts_with("[Resumed]"));
    let recs = read_log(&sb.wal());
    assert_eq!(records_of(&recs, "compaction").len(), 1);
}

#[test]
fn without_the_plan_the_compacted_view_has_no_plan_block() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps[0] = MockReply::tool_call("bash", json!({"command": "echo one"}));
    steps.push(MockReply::text("finished"));
    let server = split_server(steps, vec![MockReply::text(SUMMARY)]);
    let ws = std::fs::canonicalize(sb.ws()).unwrap();
    let prompt = tinyagent::agent::prompt::system_prompt(&ws.display().to_string(), false, false);
    let at = (prompt.chars().count() as u64).div_ceil(4) + 1400;
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), TASK, KEEP);
    cmd.args(["--compact-at", &at.to_string()]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!((steps.len(), sums.len()), (5, 1));
    assert!(!sums[0].1.to_string().contains("plan"), "no plan to give");
    for (_, req) in &steps {
        assert!(plan_blocks(req).is_empty());
    }
    let m = messages(&steps[4].1);
    assert_eq!(m[0]["role"], "system");
    assert_eq!(content(&m[1]), format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(
        m[2]["role"], "assistant",
        "the kept step follows the summary"
    );
    assert_eq!(m.len(), 2 + 4);
    let recs = read_log(&sb.wal());
    let comps = records_of(&recs, "compaction");
    assert_eq!(comps.len(), 1);
    assert_eq!(comps[0].data["plan_version"], 0);
    assert!(records_of(&recs, "plan.updated").is_empty());
    let states = check_estimates(&sb.wal(), at, true);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }
}
