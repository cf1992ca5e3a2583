//! Compacted runs that stop and resume, end to end: killed with SIGKILL
//! (the crash seam or a kill from outside) and resumed from a full replay or
//! from a snapshot, the first request after the resume is the last one before
//! the stop plus the stopped step's results and the notice, with the plan
//! block still pinned after the summary. A kill during the summarizer call,
//! or right after the compaction record, loses nothing.

use crate::support::e2e::{self, Sandbox, output, stderr};
use crate::support::mock::MockReply;
use crate::support::plan::compact::*;
use crate::support::plan::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;
use tinyagent::event::Event;

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
        |sb, cmd| {
            e2e::crash_after(cmd, "plan.updated:2");
            assert!(
                !tinyagent_store::snapshot::snapshot_path(&sb.wal()).exists(),
                "no snapshot: resume replays the whole log"
            );
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
    crash_resume_after_compaction(
        &["--snapshot-every", "1"],
        fifth,
        |sb, mut cmd| {
            let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
            let wal = sb.wal();
            let snap = tinyagent_store::snapshot::snapshot_path(&wal);
            // Wait until the snapshot covers the long call's tool.started,
            // so that resume rebuilds the compacted view from it.
            wait_until("a snapshot covering the long call", || {
                let started = frames(&wal).iter().find_map(|(seq, e)| match e {
                    Event::ToolStarted(t) if t.call_id == "long" => Some(*seq),
                    _ => None,
                });
                let covered = tinyagent_store::snapshot::read_header(&snap).map(|p| p.seq);
                matches!((started, covered), (Some(s), Ok(c)) if c >= s)
            });
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            if let Ok(pid) = std::fs::read_to_string(sb.ws().join("long.pid")) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
            let (_, state) =
                tinyagent_store::snapshot::read::<tinyagent::session::State>(&snap).unwrap();
            assert_eq!(
                state.compactions, 1,
                "the snapshot holds the compacted view"
            );
            assert!(state.compacted());
            assert!(state.view[1].content.starts_with(SUMMARY_PREFIX));
        },
        &[("long", INTERRUPTED), ("after", NOT_RUN)],
        V1,
    );
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
        server.recorded().iter().any(|r| r.is_summary())
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
    // The compaction was redone on the resumed view: the same conversation
    // and instruction, with the notice before the instruction (the
    // summarizer's request is the step's own, then its instruction).
    let strip = |r: &Value| -> Vec<Value> {
        without_plans(r)
            .into_iter()
            .filter(|m| !content(m).starts_with("[Resumed]"))
            .collect()
    };
    assert_eq!(strip(&sums[1].1), strip(&sums[0].1));
    let redone_msgs = messages(&sums[1].1);
    assert!(content(&redone_msgs[redone_msgs.len() - 2]).starts_with("[Resumed]"));
    assert!(content(redone_msgs.last().unwrap()).starts_with("[Compaction]"));
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
    let cmd = run_cmd(&sb, &server.base_url(), &[]);
    e2e::crash_after(cmd, "compaction:1");
    sb.resume_ok();
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
