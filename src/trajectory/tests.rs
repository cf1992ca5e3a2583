//! Import and export tests: the fixtures, round trips through the fold, and
//! every error a bad file gets.

use super::*;
use crate::event::{Message, PlanStatus, Role, RunStatus, Usage};
use crate::session::testkit::{fold, item};
use crate::session::{PendingCall, ProcessExit, State, Status};
use proptest::prelude::*;
use serde_json::{Value, json};

const V1: &str = include_str!("../../tests/fixtures/trajectory_v1.json");
const V2: &str = include_str!("../../tests/fixtures/trajectory_v2.json");

fn file_messages(text: &str) -> Vec<Message> {
    let v: Value = serde_json::from_str(text).unwrap();
    serde_json::from_value(v["messages"].clone()).unwrap()
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::kind).collect()
}

/// Export without the members that count records rather than describe the
/// run (an import cannot know how many resumes or compactions there were).
fn export_core(state: &State) -> Value {
    let mut v = export_v2(state);
    if let Some(o) = v.as_object_mut() {
        o.remove("compactions");
        o.remove("resumes");
    }
    v
}

#[test]
fn v1_fixture_imports_to_the_same_conversation() {
    let imported = import(V1).unwrap();
    assert_eq!(imported.schema_version, 1);
    assert_eq!(
        imported.background.as_deref(),
        Some("a file watcher (inotifywait -m .) was started in step 1 and may still be running")
    );
    assert_eq!(imported.tool_signature, None);
    assert_eq!(
        kinds(&imported.events),
        [
            "run.started",
            "model.response",
            "tool.started",
            "tool.result",
            "step.saved",
            "model.response",
            "tool.started",
            "tool.result",
            "tool.started",
            "tool.result",
            "step.saved",
        ]
    );
    let s = fold(&imported.events);
    // Tool messages gain their tool's name (taken from the call); nothing
    // else changes.
    let mut expected = file_messages(V1);
    expected[3].name = Some("bash".into());
    expected[5].name = Some("write".into());
    expected[6].name = Some("bash".into());
    assert_eq!(s.messages, expected);
    assert_eq!(s.view, expected);
    assert_eq!(
        s.usage,
        Usage {
            input_tokens: 1830,
            output_tokens: 142,
            ..Usage::default()
        }
    );
    assert_eq!(s.cost_usd, 0.000_359);
    assert_eq!((s.step, s.saved_step, s.format_errors), (2, 2, 0));
    assert_eq!(s.limits.max_steps, Some(50));
    assert!(s.pending.is_empty());
    assert!(!s.plan_enabled());
    assert_eq!(s.status, Status::Running);
    let run = s.run.unwrap();
    assert_eq!(
        run.task,
        "Count the text files and write the number to count.txt"
    );
    assert_eq!(run.system_prompt, expected[0].content);
    assert_eq!(run.tool_signature, "");
}

#[test]
fn v2_fixture_imports_plan_processes_compaction_and_pending_call() {
    let imported = import(V2).unwrap();
    assert_eq!(imported.schema_version, 2);
    assert_eq!(imported.background, None);
    assert_eq!(
        imported.tool_signature.as_deref(),
        Some("tools-v1:bash,edit,glob,grep,read,update_plan,write")
    );
    let s = fold(&imported.events);
    let messages = file_messages(V2);
    assert_eq!(s.messages, messages);
    // The view: system prompt, the compaction's view, then what came after.
    let v: Value = serde_json::from_str(V2).unwrap();
    let cview: Vec<Message> = serde_json::from_value(v["compaction"]["view"].clone()).unwrap();
    let mut view = vec![messages[0].clone()];
    view.extend(cview);
    view.extend(messages[8..].iter().cloned());
    assert_eq!(s.view, view);
    assert!(s.compacted());
    assert_eq!(
        s.pending,
        vec![PendingCall {
            id: "c4".into(),
            name: "bash".into(),
            step: 4,
            started: true,
            process: None,
            approval: None,
        }]
    );
    assert_eq!(
        s.usage,
        Usage {
            input_tokens: 5200,
            output_tokens: 640,
            ..Usage::default()
        }
    );
    assert_eq!(s.cost_usd, 0.0194);
    assert_eq!((s.step, s.saved_step), (4, 3));
    let plan = s.plan.clone().unwrap();
    assert_eq!((plan.version, plan.updated_step), (2, 4));
    assert_eq!(
        plan.items[1],
        item("2", "add the flag", PlanStatus::InProgress)
    );
    assert_eq!(s.plan_history.len(), 2);
    assert_eq!(s.plan_history[0].diff.lines().count(), 3);
    assert_eq!(s.processes.len(), 2);
    assert_eq!(s.processes["bg1"].exited, None);
    assert_eq!(s.processes["bg1"].start_time, Some(981_234));
    assert_eq!(
        s.processes["bg0"].exited,
        Some(ProcessExit {
            exit_code: None,
            signal: Some(15)
        })
    );
    assert_eq!(s.limits.max_cost_usd, Some(1.0));
    // The model is sent the plan right after the summary.
    let sent = s.model_messages();
    assert!(sent[1].content.starts_with("[Summary]"));
    assert_eq!(
        sent[2].content,
        "[Current plan]\n[x] 1 read the CLI code\n[>] 2 add the flag\n[ ] 3 run the tests"
    );
    // Step 4's plan update follows its update_plan result; nothing is saved
    // for step 4 (its bash call is still pending, and counts as started).
    let p4 = imported
        .events
        .iter()
        .position(|e| matches!(e, Event::ToolResult(r) if r.call_id == "p4"))
        .unwrap();
    assert!(matches!(&imported.events[p4 + 1], Event::PlanUpdated(p) if p.version == 2));
    let last_saved = imported
        .events
        .iter()
        .rposition(|e| e.kind() == "step.saved")
        .unwrap();
    assert!(matches!(&imported.events[last_saved], Event::StepSaved(x) if x.step == 3));
    assert_eq!(imported.events.last().unwrap().kind(), "tool.started");
}

#[test]
fn fixtures_round_trip_through_fold_and_export() {
    for text in [V1, V2] {
        let first = fold(&import(text).unwrap().events);
        let exported = export_v2(&first);
        let again = fold(&import(&exported.to_string()).unwrap().events);
        assert_eq!(again.messages, first.messages);
        assert_eq!(again.view, first.view);
        assert_eq!(again.pending, first.pending);
        assert_eq!(again.plan, first.plan);
        assert_eq!(again.plan_history, first.plan_history);
        assert_eq!(again.processes, first.processes);
        assert_eq!((again.usage, again.cost_usd), (first.usage, first.cost_usd));
        assert_eq!(
            (again.step, again.format_errors),
            (first.step, first.format_errors)
        );
        assert_eq!(export_v2(&again), exported);
    }
}

#[test]
fn export_has_the_v2_members() {
    let s = fold(&import(V2).unwrap().events);
    let v = export_v2(&s);
    assert_eq!(v["schema_version"], 2);
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 5200, "output_tokens": 640, "cost_usd": 0.0194})
    );
    assert_eq!(
        v["pending_calls"],
        json!([{"id": "c4", "name": "bash", "step": 4, "started": true}])
    );
    assert_eq!(v["plan_enabled"], true);
    assert_eq!(v["plan"]["version"], 2);
    assert_eq!(v["plan"]["updated_step"], 4);
    assert_eq!(v["plan_history"][1]["step"], 4);
    assert_eq!(v["processes"][1]["id"], "bg1");
    assert_eq!(
        v["tool_signature"],
        "tools-v1:bash,edit,glob,grep,read,update_plan,write"
    );
    assert_eq!(v["compaction"]["messages_before"], 8);
    assert_eq!(v["compaction"]["step"], 3);
    assert_eq!(v["steps"], 4);
    assert_eq!(v["status"], "running");
}

#[test]
fn format_errors_mark_the_last_results_and_finished_status_is_kept() {
    let mut v: Value = serde_json::from_str(V1).unwrap();
    v["format_errors"] = json!(2);
    v["schema_version"] = json!(2);
    v["status"] = json!("max_steps");
    let s = fold(&import(&v.to_string()).unwrap().events);
    assert_eq!(s.format_errors, 2);
    assert_eq!(s.status, Status::Finished(RunStatus::MaxSteps));
    // More than there are results: capped, not refused.
    v["format_errors"] = json!(10);
    assert_eq!(
        fold(&import(&v.to_string()).unwrap().events).format_errors,
        3
    );
}

#[test]
fn unanswered_calls_stay_pending_and_count_as_started_in_v1() {
    let mut v: Value = serde_json::from_str(V1).unwrap();
    let msgs = v["messages"].as_array_mut().unwrap();
    msgs.pop(); // the answer to c3
    let s = fold(&import(&v.to_string()).unwrap().events);
    assert_eq!(
        s.pending,
        vec![PendingCall {
            id: "c3".into(),
            name: "bash".into(),
            step: 2,
            started: true,
            process: None,
            approval: None,
        }]
    );
    assert_eq!(s.saved_step, 1);
    assert_eq!(s.cost_usd, 0.000_359);
}

#[test]
fn v1_compaction_without_position_goes_after_its_step() {
    let mut v: Value = serde_json::from_str(V1).unwrap();
    v["compaction"] =
        json!({"summary": "s", "step": 1, "view": [{"role": "user", "content": "s"}]});
    let s = fold(&import(&v.to_string()).unwrap().events);
    assert_eq!(s.view.len(), 5);
    assert_eq!(s.view[1], Message::user("s"));
    assert_eq!(s.view[2].role, Role::Assistant);
    assert_eq!(s.messages.len(), 7);
}

#[test]
fn older_message_shapes_are_accepted() {
    let text = r#"{"schema_version":1,"run_id":"r","task":"t","model":"m","steps":1,
      "usage":{"input_tokens":1,"output_tokens":2,"cost_usd":0.5},
      "messages":[{"role":"system","content":"s"},{"role":"user","content":"t"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
          "function":{"name":"read","arguments":{"path":"a"}}}]},
        {"role":"tool","tool_call_id":"c1","content":"x"}]}"#;
    let s = fold(&import(text).unwrap().events);
    assert_eq!(s.messages[2].content, "");
    assert_eq!(s.messages[2].tool_calls[0].name, "read");
    assert_eq!(s.messages[2].tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!(s.messages[3].name.as_deref(), Some("read"));
}

fn err(text: &str) -> String {
    import(text).unwrap_err().to_string()
}

fn v1_with(edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(V1).unwrap();
    edit(&mut v);
    v.to_string()
}

#[test]
fn truncated_and_non_json_files_are_refused() {
    let cut = &V2[..V2.len() / 2];
    let e = import(cut).unwrap_err();
    assert!(
        matches!(e, TrajectoryError::Truncated { line, .. } if line > 10),
        "{e}"
    );
    assert!(e.to_string().starts_with("the file ends early: line "));
    assert_eq!(
        import("").unwrap_err().to_string(),
        "the file ends early: line 1 column 0 (truncated or partly written?)"
    );
    assert!(err("hello").starts_with("not JSON: "));
    assert!(err("{\"a\": 1} trailing").starts_with("not JSON: "));
    assert_eq!(
        err("[1, 2]"),
        "not a trajectory: the top level is not a JSON object"
    );
}

#[test]
fn missing_fields_and_unknown_versions_are_named() {
    assert_eq!(
        err(&v1_with(|v| {
            v.as_object_mut().unwrap().remove("messages");
        })),
        "missing field `messages`"
    );
    assert_eq!(
        err(&v1_with(|v| {
            v.as_object_mut().unwrap().remove("schema_version");
        })),
        "missing field `schema_version`"
    );
    assert_eq!(
        err(&v1_with(|v| {
            v.as_object_mut().unwrap().remove("usage");
        })),
        "missing field `usage`"
    );
    assert_eq!(
        err(&v1_with(|v| v["schema_version"] = json!(3))),
        "unknown schema_version 3: supported versions are 1 and 2"
    );
    assert_eq!(
        err(&v1_with(|v| v["schema_version"] = json!("2"))),
        "unknown schema_version \"2\": supported versions are 1 and 2"
    );
    let e = err(&v1_with(|v| v["steps"] = json!("three")));
    assert!(e.starts_with("field `steps`: invalid type"), "{e}");
    let e = err(&v1_with(|v| {
        v["messages"][3].as_object_mut().unwrap().remove("role");
    }));
    assert_eq!(e, "field `messages[3]`: missing field `role`");
    let e = err(&v1_with(|v| v["messages"][0]["role"] = json!("user")));
    assert!(
        e.starts_with("field `messages`: must start with the system prompt"),
        "{e}"
    );
}

#[test]
fn inconsistent_conversations_are_refused() {
    let e = err(&v1_with(|v| v["messages"][3]["tool_call_id"] = json!("c9")));
    assert_eq!(
        e,
        "messages[3] answers tool call `c9`, which no assistant message made"
    );
    let e = err(&v1_with(|v| v["messages"][6]["tool_call_id"] = json!("c2")));
    assert_eq!(
        e,
        "messages[6] answers tool call `c2`, which was already answered"
    );
    let e = err(&v1_with(|v| {
        v["messages"].as_array_mut().unwrap().remove(3);
    }));
    assert_eq!(
        e,
        "messages[3]: an assistant message while call(s) c1 of step 1 have no result"
    );
    let e = err(&v1_with(|v| v["messages"][3]["role"] = json!("system")));
    assert_eq!(e, "messages[3]: a system message may only come first");
    let e = err(&v1_with(|v| {
        v["messages"][3]
            .as_object_mut()
            .unwrap()
            .remove("tool_call_id");
    }));
    assert_eq!(e, "messages[3]: a tool message without tool_call_id");
    let e = err(&v1_with(|v| {
        v["messages"][4]["tool_calls"][1]["id"] = json!("c1")
    }));
    assert_eq!(e, "messages[4]: tool call id `c1` is used twice");
}

#[test]
fn bad_v2_members_are_refused() {
    let mut v: Value = serde_json::from_str(V2).unwrap();
    v["pending_calls"] = json!([{"id": "c3", "name": "read", "step": 3, "started": true}]);
    assert_eq!(
        import(&v.to_string()).unwrap_err().to_string(),
        "field `pending_calls`: call `c3` is not an unanswered call of the last assistant message"
    );
    let mut v: Value = serde_json::from_str(V2).unwrap();
    v["compaction"]["messages_before"] = json!(99);
    assert_eq!(
        import(&v.to_string()).unwrap_err().to_string(),
        "field `compaction.messages_before`: 99 is not between 2 and 10 (the number of messages)"
    );
    let mut v: Value = serde_json::from_str(V2).unwrap();
    v["status"] = json!("exploded");
    assert!(
        import(&v.to_string())
            .unwrap_err()
            .to_string()
            .starts_with("field `status`: unknown variant")
    );
    let mut v: Value = serde_json::from_str(V1).unwrap();
    v["messages"] = json!([{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]);
    assert_eq!(
        import(&v.to_string()).unwrap_err().to_string(),
        "field `usage`: not zero, but the file has no assistant message to attribute it to"
    );
}

#[test]
fn a_not_started_pending_call_in_v2_stays_not_started() {
    let mut v: Value = serde_json::from_str(V2).unwrap();
    v["pending_calls"][0]["started"] = json!(false);
    let s = fold(&import(&v.to_string()).unwrap().events);
    assert!(!s.pending[0].started);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Any run the agent could log: export, import and fold give back the
    /// same conversation, view, accounting, plan, processes and status.
    #[test]
    fn export_then_import_restores_the_run(events in crate::session::proptests::run()) {
        let live = fold(&events);
        let exported = export_v2(&live);
        let imported = import(&exported.to_string()).unwrap();
        prop_assert_eq!(imported.tool_signature.as_deref(), Some("sig"));
        let back = fold(&imported.events);
        prop_assert_eq!(&back.messages, &live.messages);
        // A file does not say where the run's plan messages sat among the
        // others (the resume that follows an import pins the plan anew):
        // the rest of the view is the same, and so is the plan it ends with.
        let strip = |v: &[crate::event::Message]| -> Vec<crate::event::Message> {
            v.iter().filter(|m| !crate::session::is_plan_message(m)).cloned().collect()
        };
        let last_plan = |v: &[crate::event::Message]| {
            v.iter().rev().find(|m| crate::session::is_plan_message(m)).cloned()
        };
        prop_assert_eq!(strip(&back.view), strip(&live.view));
        prop_assert_eq!(last_plan(&back.model_messages()), last_plan(&live.model_messages()));
        prop_assert_eq!(back.compacted(), live.compacted());
        prop_assert_eq!(&back.pending, &live.pending);
        prop_assert_eq!(&back.plan, &live.plan);
        prop_assert_eq!(&back.plan_history, &live.plan_history);
        prop_assert_eq!(&back.processes, &live.processes);
        prop_assert_eq!(back.usage, live.usage);
        prop_assert_eq!(back.cost_usd, live.cost_usd);
        prop_assert_eq!(back.step, live.step);
        prop_assert_eq!(back.format_errors, live.format_errors);
        prop_assert_eq!(&back.limits, &live.limits);
        prop_assert_eq!(back.status, live.status);
        prop_assert_eq!(strip(&back.model_messages()), strip(&live.model_messages()));
        if !live.plan_appended() {
            prop_assert_eq!(&back.view, &live.view);
            prop_assert_eq!(back.model_messages(), live.model_messages());
        }
        prop_assert_eq!(export_core(&back), export_core(&live));
    }
}
