//! Unit tests of the fold on hand-written record sequences.

use super::testkit::*;
use super::*;
use crate::event::{Event, Limits, Message, PlanStatus, Role, RunStatus, Usage};

#[test]
fn run_started_sets_prompt_task_and_limits() {
    let s = fold(&[run_started(false)]);
    let expected = vec![
        Message::system("you are an agent"),
        Message::user("fix the bug"),
    ];
    assert_eq!(s.messages, expected);
    assert_eq!(s.view, expected);
    assert_eq!(s.limits.max_steps, Some(20));
    assert_eq!(s.status, Status::Running);
    assert_eq!(s.records, 1);
    assert_eq!(s.model_messages(), expected);
}

#[test]
fn a_step_with_two_calls() {
    let events = vec![
        run_started(false),
        response(
            1,
            "looking",
            vec![call("c1", "bash"), call("c2", "read")],
            (100, 20),
            0.25,
        ),
        started(1, "c1", "bash"),
    ];
    let s = fold(&events);
    assert_eq!(s.step, 1);
    assert_eq!(
        s.usage,
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Usage::default()
        }
    );
    assert_eq!(s.cost_usd, 0.25);
    assert_eq!(
        s.pending,
        vec![
            PendingCall {
                id: "c1".into(),
                name: "bash".into(),
                step: 1,
                started: true,
                process: None,
                approval: None,
            },
            PendingCall {
                id: "c2".into(),
                name: "read".into(),
                step: 1,
                started: false,
                process: None,
                approval: None,
            },
        ]
    );
    assert_eq!(s.messages.len(), 3);
    assert_eq!(
        s.messages[2],
        Message::assistant("looking", vec![call("c1", "bash"), call("c2", "read")])
    );

    let mut s = s;
    s.apply(&result(1, "c1", "bash", "a.txt\n", false));
    s.apply(&result(1, "c2", "read", "contents", false));
    s.apply(&saved(1));
    assert!(s.pending.is_empty());
    assert_eq!(s.saved_step, 1);
    assert_eq!(s.messages[3], Message::tool("c1", "bash", "a.txt\n", false));
    assert_eq!(
        s.messages[4],
        Message::tool("c2", "read", "contents", false)
    );
    assert_eq!(s.view, s.messages);
}

#[test]
fn usage_and_cost_add_up_over_responses_and_compactions() {
    let s = fold(&[
        run_started(false),
        response(1, "", vec![], (10, 1), 0.5),
        response(2, "", vec![], (20, 2), 0.25),
        compaction(2, "summary", vec![], (5, 3), 0.125),
    ]);
    assert_eq!(
        s.usage,
        Usage {
            input_tokens: 35,
            output_tokens: 6,
            ..Usage::default()
        }
    );
    assert_eq!(s.cost_usd, 0.875);
}

#[test]
fn format_errors_count_consecutive_bad_calls_and_reset_on_a_good_one() {
    let mut s = fold(&[
        run_started(false),
        response(1, "", vec![call("c1", "bash")], (1, 1), 0.0),
        result(1, "c1", "bash", "bad json", true),
        response(2, "", vec![call("c2", "bash")], (1, 1), 0.0),
        result(2, "c2", "bash", "bad json", true),
    ]);
    assert_eq!(s.format_errors, 2);
    s.apply(&response(3, "", vec![call("c3", "bash")], (1, 1), 0.0));
    s.apply(&result(3, "c3", "bash", "ok", false));
    assert_eq!(s.format_errors, 0);
}

#[test]
fn plan_updates_replace_the_plan_and_grow_the_history() {
    let s = fold(&[
        run_started(true),
        response(1, "", vec![call("p1", "update_plan")], (1, 1), 0.0),
        result(1, "p1", "update_plan", "ok", false),
        plan_updated(
            1,
            1,
            vec![item("1", "a", PlanStatus::InProgress)],
            "+ [>] 1 a",
        ),
        response(2, "", vec![call("p2", "update_plan")], (1, 1), 0.0),
        result(2, "p2", "update_plan", "ok", false),
        plan_updated(
            2,
            2,
            vec![item("1", "a", PlanStatus::Done)],
            "~ 1 status: in_progress -> done",
        ),
    ]);
    let plan = s.plan.clone().unwrap();
    assert_eq!(plan.version, 2);
    assert_eq!(plan.updated_step, 2);
    assert_eq!(plan.items, vec![item("1", "a", PlanStatus::Done)]);
    assert_eq!(
        s.plan_history,
        vec![
            PlanRevision {
                step: 1,
                version: 1,
                diff: "+ [>] 1 a".into()
            },
            PlanRevision {
                step: 2,
                version: 2,
                diff: "~ 1 status: in_progress -> done".into()
            },
        ]
    );
}

#[test]
fn an_update_plan_result_without_its_record_is_due() {
    let mut s = fold(&[
        run_started(true),
        response(1, "", vec![call("p1", "update_plan")], (1, 1), 0.0),
        result(1, "p1", "update_plan", "ok", false),
    ]);
    let due = Some(PlanUpdateDue {
        call_id: "p1".into(),
        step: 1,
    });
    assert_eq!(s.plan_update_due, due);
    s.apply(&plan_updated(
        1,
        1,
        vec![item("1", "a", PlanStatus::Done)],
        "",
    ));
    assert_eq!(s.plan_update_due, None);
    // Any later record clears it too; a rejected plan never sets it.
    let mut t = fold(&[
        run_started(true),
        response(1, "", vec![call("p1", "update_plan")], (1, 1), 0.0),
        result(1, "p1", "update_plan", "ok", false),
        saved(1),
    ]);
    assert_eq!(t.plan_update_due, None);
    t.apply(&response(
        2,
        "",
        vec![call("p2", "update_plan")],
        (1, 1),
        0.0,
    ));
    let mut rejected = result(2, "p2", "update_plan", "plan rule", false);
    if let Event::ToolResult(r) = &mut rejected {
        r.is_error = true;
    }
    t.apply(&rejected);
    assert_eq!(t.plan_update_due, None);
}

#[test]
fn plan_block_is_pinned_after_the_system_prompt() {
    let mut s = fold(&[run_started(true)]);
    let msgs = s.model_messages();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[0].role, Role::System);
    assert_eq!(
        msgs[1].content,
        "[Current plan]\n(no plan yet: call update_plan to make one)"
    );
    assert_eq!(msgs[2], Message::user("fix the bug"));

    s.apply(&plan_updated(
        1,
        1,
        vec![item("1", "a", PlanStatus::InProgress)],
        "",
    ));
    assert_eq!(s.model_messages()[1].content, "[Current plan]\n[>] 1 a");
}

#[test]
fn plan_block_goes_after_the_summary_when_compacted() {
    let s = fold(&[
        run_started(true),
        response(1, "", vec![call("c1", "bash")], (1, 1), 0.0),
        result(1, "c1", "bash", "out", false),
        plan_updated(1, 1, vec![item("1", "a", PlanStatus::Pending)], ""),
        compaction(
            1,
            "the summary",
            vec![Message::tool("c1", "bash", "out", false)],
            (1, 1),
            0.0,
        ),
    ]);
    let msgs = s.model_messages();
    assert_eq!(msgs[0].role, Role::System);
    assert_eq!(msgs[1].content, "the summary");
    assert_eq!(msgs[2].content, "[Current plan]\n[ ] 1 a");
    assert_eq!(msgs[3], Message::tool("c1", "bash", "out", false));
    assert_eq!(msgs.len(), 4);
}

#[test]
fn no_plan_block_when_the_plan_is_disabled() {
    let s = fold(&[
        run_started(false),
        plan_updated(1, 1, vec![item("1", "a", PlanStatus::Pending)], ""),
    ]);
    assert!(
        s.model_messages()
            .iter()
            .all(|m| !m.content.starts_with(plan::BLOCK_HEADER))
    );
    assert_eq!(s.model_messages(), s.view);
}

#[test]
fn compaction_replaces_the_view_but_keeps_the_history() {
    let mut s = fold(&[
        run_started(false),
        response(1, "one", vec![call("c1", "bash")], (1, 1), 0.0),
        result(1, "c1", "bash", "out", false),
        saved(1),
        compaction(1, "sum", vec![], (1, 1), 0.0),
    ]);
    assert_eq!(s.messages.len(), 4);
    assert_eq!(
        s.view,
        vec![Message::system("you are an agent"), Message::user("sum")]
    );
    assert!(s.compacted());
    assert_eq!(s.compactions, 1);
    s.apply(&response(2, "two", vec![], (1, 1), 0.0));
    assert_eq!(s.messages.len(), 5);
    assert_eq!(s.view.len(), 3);
    assert_eq!(
        s.last_compaction,
        Some(CompactionMark {
            step: 1,
            summary: "sum".into(),
            messages_before: 4,
            view_len: 1
        })
    );
}

#[test]
fn processes_hooks_and_saved_steps() {
    let s = fold(&[
        run_started(false),
        process_started("p1", 100, "sleep 100", 1),
        process_started("p2", 101, "make", 1),
        process_exited("p2", Some(0)),
        process_exited("nope", Some(1)),
        saved(4),
        Event::HookBlocked(crate::event::HookBlocked {
            step: 1,
            call_id: "c1".into(),
            hook: "pre".into(),
            reason: "no".into(),
        }),
    ]);
    assert_eq!(s.processes.len(), 2);
    assert_eq!(s.processes["p1"].exited, None);
    assert_eq!(s.processes["p1"].command, "sleep 100");
    assert_eq!(
        s.processes["p2"].exited,
        Some(ProcessExit {
            exit_code: Some(0),
            signal: None
        })
    );
    assert_eq!(s.saved_step, 4);
    assert_eq!(s.hooks_blocked, 1);
}

#[test]
fn resume_pushes_notice_and_message_and_reopens_the_run() {
    let mut s = fold(&[run_started(false), finished(RunStatus::Completed)]);
    assert_eq!(s.status, Status::Finished(RunStatus::Completed));
    s.apply(&resume("[Resumed] nothing lost", None, None));
    // A resume always reopens the run: the loop is about to go on.
    assert_eq!(s.status, Status::Running);
    let limits = Limits {
        max_steps: Some(99),
        max_cost_usd: None,
        max_format_errors: 5,
    };
    s.apply(&resume(
        "[Resumed] again",
        Some("now do more"),
        Some(limits.clone()),
    ));
    assert_eq!(s.status, Status::Running);
    assert_eq!(s.resumes, 2);
    assert_eq!(s.limits, limits);
    let tail: Vec<&str> = s.messages[2..].iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        tail,
        ["[Resumed] nothing lost", "[Resumed] again", "now do more"]
    );
    assert_eq!(s.view, s.messages);
}

#[test]
fn records_out_of_place_do_not_panic() {
    // Everything before run.started, results for unknown calls, exits of
    // unknown processes: applied as far as they make sense.
    let s = fold(&[
        result(3, "ghost", "bash", "x", false),
        started(3, "ghost", "bash"),
        compaction(1, "sum", vec![], (0, 0), 0.0),
        process_exited("p", None),
        finished(RunStatus::Error),
    ]);
    assert_eq!(s.messages.len(), 1);
    assert_eq!(s.view[0], Message::system(""));
    assert_eq!(s.records, 5);
    let _ = s.model_messages();
}

#[test]
fn the_last_measured_request_is_kept_until_a_compaction_or_an_uncounted_reply() {
    let measured = |step, bytes, tokens| {
        let mut e = response(step, "", vec![], (tokens, 1), 0.0);
        if let Event::ModelResponse(r) = &mut e {
            r.request_bytes = bytes;
        }
        e
    };
    let mut s = fold(&[run_started(false)]);
    assert_eq!(s.last_request, None);
    s.apply(&measured(1, 4000, 900));
    assert_eq!(
        s.last_request,
        Some(MeasuredRequest {
            bytes: 4000,
            tokens: 900
        })
    );
    // A server that reports no prompt tokens, or a log that has no body
    // length: nothing is known.
    s.apply(&measured(2, 5000, 0));
    assert_eq!(s.last_request, None);
    s.apply(&measured(3, 5000, 1000));
    s.apply(&measured(4, 0, 1000));
    assert_eq!(s.last_request, None);
    s.apply(&measured(5, 6000, 1200));
    assert!(s.last_request.is_some());
    // The count was of the view a compaction replaced.
    s.apply(&compaction(5, "sum", vec![], (0, 0), 0.0));
    assert_eq!(s.last_request, None);
}

#[test]
fn state_round_trips_through_json() {
    let s = fold(&[
        run_started(true),
        response(1, "", vec![call("c1", "bash")], (3, 4), 0.1),
        started(1, "c1", "bash"),
        plan_updated(1, 1, vec![item("1", "a", PlanStatus::Blocked)], "d"),
        process_started("p1", 9, "sleep 9", 1),
        compaction(1, "s", vec![], (1, 2), 0.2),
        finished(RunStatus::MaxCost),
    ]);
    let text = serde_json::to_string(&s).unwrap();
    let back: State = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
}

#[test]
fn resume_marks_lost_processes_and_only_those() {
    let mut s = fold(&[
        run_started(false),
        process_started("p1", 100, "sleep 100", 1),
        process_started("p2", 101, "make", 1),
    ]);
    assert!(s.processes["p1"].is_tracked_running());
    let Event::Resume(mut r) = resume("[Resumed]", None, None) else {
        unreachable!()
    };
    r.lost_processes = vec!["p1".into(), "unknown".into()];
    s.apply(&Event::Resume(r));
    assert!(s.processes["p1"].lost);
    assert!(!s.processes["p1"].is_tracked_running());
    assert!(s.processes["p2"].is_tracked_running());
}

#[test]
fn a_snapshot_body_with_the_old_compacted_member_still_loads() {
    let s = fold(&[run_started(true), compaction(1, "sum", vec![], (1, 1), 0.0)]);
    let mut body = serde_json::to_value(&s).unwrap();
    assert!(body.get("compacted").is_none(), "derived, not stored");
    body["compacted"] = serde_json::Value::Bool(true);
    let back: State = serde_json::from_value(body).unwrap();
    assert_eq!(back, s);
    assert!(back.compacted());
}

/// `plan.pin = "append"`: the plan's messages are part of the view.
fn appended() -> Event {
    run_started_pinned(Some(crate::kinds::PlanPin::Append))
}

#[test]
fn an_appended_plan_follows_the_steps_last_result_and_requests_only_grow() {
    let mut s = fold(&[appended()]);
    let first = s.model_messages().to_vec();
    assert_eq!(first.len(), 3);
    assert_eq!(
        first[1].content,
        "[Current plan]\n(no plan yet: call update_plan to make one)"
    );
    assert_eq!(first[2], Message::user("fix the bug"));
    // One step: update_plan, then bash. The plan message waits for the
    // bash result: between the results it would split them from the call.
    for e in [
        response(
            1,
            "",
            vec![call("p", "update_plan"), call("b", "bash")],
            (1, 1),
            0.0,
        ),
        started(1, "p", "update_plan"),
        result(1, "p", "update_plan", "plan updated", false),
        plan_updated(1, 1, vec![item("1", "a", PlanStatus::InProgress)], ""),
        started(1, "b", "bash"),
    ] {
        s.apply(&e);
    }
    assert!(s.plan_message_due);
    s.apply(&result(1, "b", "bash", "out", false));
    let second = s.model_messages().to_vec();
    assert_eq!(
        &second[..first.len()],
        &first[..],
        "the first request is a prefix"
    );
    assert_eq!(second.len(), first.len() + 4);
    assert_eq!(second[4].tool_call_id.as_deref(), Some("p"));
    assert_eq!(second[5].tool_call_id.as_deref(), Some("b"));
    assert_eq!(second[6].content, "[Current plan]\n[>] 1 a");
    // A step without a plan change appends only its own messages.
    s.apply(&response(2, "", vec![call("c", "bash")], (1, 1), 0.0));
    s.apply(&result(2, "c", "bash", "out", false));
    let third = s.model_messages().to_vec();
    assert_eq!(&third[..second.len()], &second[..]);
    assert_eq!(third.len(), second.len() + 2);
    // The history (inspect, export) is the conversation alone.
    assert!(!s.messages.iter().any(crate::session::is_plan_message));
}

#[test]
fn compaction_and_resume_pin_the_current_plan_once() {
    let mut s = fold(&[
        appended(),
        response(1, "", vec![call("p", "update_plan")], (1, 1), 0.0),
        result(1, "p", "update_plan", "ok", false),
        plan_updated(1, 1, vec![item("1", "a", PlanStatus::Pending)], ""),
        response(2, "", vec![call("q", "update_plan")], (1, 1), 0.0),
        result(2, "q", "update_plan", "ok", false),
        plan_updated(2, 2, vec![item("1", "a", PlanStatus::Done)], ""),
    ]);
    let plans = |s: &crate::session::State| {
        s.model_messages()
            .iter()
            .enumerate()
            .filter(|(_, m)| crate::session::is_plan_message(m))
            .map(|(i, m)| (i, m.content.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(plans(&s).len(), 3, "none yet, then two changes");
    assert_eq!(plans(&s).last().unwrap().1, "[Current plan]\n[x] 1 a");
    // A resume pins the plan after the system prompt, alone, and appends
    // its notice.
    let mut r = s.clone();
    r.apply(&resume("[Resumed] after a crash", None, None));
    assert_eq!(plans(&r), vec![(1, "[Current plan]\n[x] 1 a".to_string())]);
    assert_eq!(
        r.model_messages().last().unwrap().content,
        "[Resumed] after a crash"
    );
    // A compaction pins it after the summary; the plan messages among the
    // kept messages go.
    let kept = s.view[s.view.len() - 3..].to_vec();
    assert!(kept.iter().any(crate::session::is_plan_message));
    s.apply(&compaction(2, "the summary", kept, (1, 1), 0.0));
    let sent = s.model_messages();
    assert!(sent[1].content.contains("the summary"));
    assert_eq!(plans(&s), vec![(2, "[Current plan]\n[x] 1 a".to_string())]);
    assert_eq!(sent[3].tool_calls[0].id, "q");
}

#[test]
fn a_head_pinned_plan_keeps_the_earlier_layout() {
    let s = fold(&[
        run_started_pinned(Some(crate::kinds::PlanPin::Head)),
        response(1, "", vec![call("p", "update_plan")], (1, 1), 0.0),
        result(1, "p", "update_plan", "ok", false),
        plan_updated(1, 1, vec![item("1", "a", PlanStatus::Pending)], ""),
    ]);
    let sent = s.model_messages();
    assert_eq!(sent[1].content, "[Current plan]\n[ ] 1 a");
    assert_eq!(
        sent.iter()
            .filter(|m| crate::session::is_plan_message(m))
            .count(),
        1
    );
    assert!(!s.view.iter().any(crate::session::is_plan_message));
}
