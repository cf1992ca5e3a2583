//! The persistent plan, end to end: the real binary against the loopback
//! mock server. The pinned `[Current plan]` block in every request, the plan
//! history in the log, the rules, the `--plan-file` mirror, read-only mode,
//! the default run without any of it, and the plan across a crash and resume.

use crate::support::e2e;
use crate::support::e2e::{Sandbox, events, output, stderr};
use crate::support::mock::MockReply;
use crate::support::plan::*;
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use tinyagent::tools::{ToolSet, ToolSetOptions};

fn block(body: &str) -> String {
    format!("{PLAN_HEADER}\n{body}")
}

fn run_ok(mut cmd: std::process::Command, extra: &[&str]) -> std::process::Output {
    cmd.args(extra);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "run failed: {}", stderr(&out));
    out
}

fn crash(cmd: std::process::Command, point: &str) {
    e2e::crash_after(cmd, point);
}

const V1: &str = "[>] 1 look around\n[ ] 2 write the fix\nnote: starting";
const V2: &str = "[x] 1 look around\n[>] 2 write the fix and test\n[ ] 3 ship";
const V3: &str = "[x] 2 write the fix and test\n[!] 3 ship";

fn v1_args() -> Value {
    plan_args(
        &[
            ("1", "look around", "in_progress"),
            ("2", "write the fix", "pending"),
        ],
        Some("starting"),
    )
}

#[test]
fn the_last_plan_message_of_every_request_is_the_current_plan_and_the_history_diffs() {
    let sb = Sandbox::new();
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::tool_call("bash", json!({"command": "echo hi"})),
            MockReply::tool_call(
                "update_plan",
                plan_args(
                    &[
                        ("1", "look around", "done"),
                        ("2", "write the fix and test", "in_progress"),
                        ("3", "ship", "pending"),
                    ],
                    None,
                ),
            ),
            MockReply::tool_call(
                "update_plan",
                plan_args(
                    &[
                        ("2", "write the fix and test", "done"),
                        ("3", "ship", "blocked"),
                    ],
                    None,
                ),
            ),
            MockReply::text("finished"),
        ],
        vec![],
    );
    let out = run_ok(
        sb.run_cmd(&server.base_url(), "plan things"),
        &["--plan", "--json"],
    );
    server.assert_no_violations();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5, "no summarizer call, five steps");
    let expected = [NO_PLAN, V1, V1, V2, V3];
    for (n, (req, body)) in reqs.iter().zip(expected).enumerate() {
        assert_eq!(messages(req)[0]["role"], "system");
        assert_eq!(current_plan(req), block(body), "request {}", n + 1);
        assert_eq!(
            content(&messages(req)[2]),
            "plan things",
            "the task follows the block"
        );
        assert!(tool_names(req).contains(&"update_plan".to_string()));
    }

    let recs = read_log(&sb.wal());
    check_plan_order(&recs);
    assert_eq!(
        records_of(&recs, "run.started")[0].data["plan_enabled"],
        true
    );
    let updates = records_of(&recs, "plan.updated");
    let got: Vec<(u64, u64)> = updates
        .iter()
        .map(|r| {
            (
                r.data["step"].as_u64().unwrap(),
                r.data["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, vec![(1, 1), (3, 2), (4, 3)]);
    assert_eq!(updates[0].data["note"], "starting");
    assert_eq!(
        updates[0].data["diff"],
        "+ [>] 1 look around\n+ [ ] 2 write the fix"
    );
    assert_eq!(
        updates[1].data["diff"],
        "~ 1 status: in_progress -> done\n\
         ~ 2 status: pending -> in_progress\n\
         ~ 2 text: \"write the fix\" -> \"write the fix and test\"\n\
         + [ ] 3 ship"
    );
    assert_eq!(
        updates[2].data["diff"],
        "~ 2 status: in_progress -> done\n~ 3 status: pending -> blocked\n- [x] 1 look around"
    );
    assert_eq!(
        updates[2].data["items"],
        json!([
            {"id": "2", "text": "write the fix and test", "status": "done"},
            {"id": "3", "text": "ship", "status": "blocked"}
        ])
    );
    // The tool returns the rendered plan.
    let first = records_of(&recs, "tool.result")[0];
    assert_eq!(
        first.data["content"],
        format!("Plan updated to version 1:\n{V1}")
    );

    // --json: plan.updated {step, version, items}, after its tool.finished.
    let evs = events(&out);
    let plan_events: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"] == "plan.updated")
        .collect();
    assert_eq!(plan_events.len(), 3);
    for (e, r) in plan_events.iter().zip(&updates) {
        assert_eq!(e["step"], r.data["step"]);
        assert_eq!(e["version"], r.data["version"]);
        assert_eq!(e["items"], r.data["items"]);
    }

    // log inspect: the current plan and the number of versions.
    let report = inspect(&sb.wal());
    assert_eq!(report["plan"]["version"], 3);
    assert_eq!(report["plan"]["versions"], 3);
    assert_eq!(report["plan"]["items"], updates[2].data["items"]);
    let human = log_cmd("inspect", &sb.wal(), &[]);
    let text = String::from_utf8_lossy(&human.stdout).to_string() + &stderr(&human);
    assert!(
        text.contains("ship"),
        "human inspect shows the plan: {text}"
    );
}

#[test]
fn default_run_has_no_plan_anywhere() {
    let sb = Sandbox::new();
    let server = split_server(
        vec![
            MockReply::tool_call("bash", json!({"command": "echo hi"})),
            // A model that calls the tool anyway gets an error, not a plan.
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::text("finished"),
        ],
        vec![],
    );
    run_ok(sb.run_cmd(&server.base_url(), "no plan"), &["--json"]);
    server.assert_no_violations();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    for req in &reqs {
        let names = tool_names(req);
        assert!(!names.is_empty());
        assert!(!names.contains(&"update_plan".to_string()), "{names:?}");
        assert!(plan_blocks(req).is_empty(), "no plan block");
        assert!(
            !req.to_string().contains(PLAN_HEADER),
            "no plan block text anywhere"
        );
        assert_eq!(content(&messages(req)[1]), "no plan", "task follows system");
    }
    let recs = read_log(&sb.wal());
    assert!(records_of(&recs, "plan.updated").is_empty());
    let started = &records_of(&recs, "run.started")[0].data;
    assert_eq!(started["plan_enabled"], false);
    let plain = ToolSet::new(ToolSetOptions {
        read_only: false,
        plan: false,
    });
    assert_eq!(started["tool_signature"], plain.signature());
    assert_eq!(started["tools"], json!(plain.names()));
    let with_plan = ToolSet::new(ToolSetOptions {
        read_only: false,
        plan: true,
    });
    assert_ne!(plain.signature(), with_plan.signature());
    let refused = records_of(&recs, "tool.result")[1];
    assert_eq!(refused.data["name"], "update_plan");
    assert_eq!(refused.data["is_error"], true);
    assert!(inspect(&sb.wal())["plan"].is_null());
}

#[test]
fn each_plan_rule_violation_is_an_error_naming_the_rule() {
    let sb = Sandbox::new();
    let many: Vec<(String, String)> = (0..51).map(|n| (n.to_string(), "t".into())).collect();
    let many_items: Vec<Value> = many
        .iter()
        .map(|(id, t)| json!({"id": id, "text": t, "status": "pending"}))
        .collect();
    let fifty: Vec<Value> = many_items[..50].to_vec();
    let long = "x".repeat(501);
    let longest = "y".repeat(500);
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::tool_call(
                "update_plan",
                plan_args(
                    &[("a", "x", "in_progress"), ("b", "y", "in_progress")],
                    None,
                ),
            ),
            MockReply::tool_call("update_plan", json!({"items": many_items})),
            MockReply::tool_call("update_plan", plan_args(&[("a", &long, "pending")], None)),
            MockReply::tool_call(
                "update_plan",
                plan_args(&[("a", "x", "pending"), ("", "y", "pending")], None),
            ),
            MockReply::tool_call(
                "update_plan",
                plan_args(&[("a", "x", "pending"), ("a", "y", "done")], None),
            ),
            // The limits themselves are allowed: 50 items, 500 characters.
            MockReply::tool_call("update_plan", json!({"items": fifty})),
            MockReply::tool_call(
                "update_plan",
                plan_args(&[("only", &longest, "in_progress")], None),
            ),
            MockReply::text("finished"),
        ],
        vec![],
    );
    run_ok(sb.run_cmd(&server.base_url(), "rules"), &["--plan"]);
    server.assert_no_violations();
    let recs = read_log(&sb.wal());
    check_plan_order(&recs);
    let results = records_of(&recs, "tool.result");
    let rules = [
        "plan rule: at most one item may be in_progress",
        "plan rule: at most 50 items",
        "plan rule: each text is at most 500 characters",
        "plan rule: ids must be non-empty",
        "plan rule: ids must be unique",
    ];
    for (r, rule) in results[1..6].iter().zip(rules) {
        assert_eq!(r.data["is_error"], true, "{}", r.data);
        let text = r.data["content"].as_str().unwrap();
        assert!(text.contains(rule), "{text:?} names {rule:?}");
        assert!(text.contains("not changed"), "{text}");
    }
    let versions: Vec<u64> = records_of(&recs, "plan.updated")
        .iter()
        .map(|r| r.data["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, vec![1, 2, 3], "only the valid updates count");
    // While the violations came in, every request still carried version 1.
    let reqs = server.requests();
    for req in &reqs[1..7] {
        assert_eq!(current_plan(req), block(V1));
    }
    assert_eq!(
        current_plan(&reqs[8]),
        block(&format!("[>] only {longest}"))
    );
}

#[test]
fn plan_file_is_an_atomic_mirror_that_is_never_read_back() {
    let sb = Sandbox::new();
    let file = sb.path("PLAN.md");
    let seen: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let hand_edit = "# Plan\n\n- [ ] **99** injected by hand\n";
    let edit = |file: std::path::PathBuf, seen: Arc<Mutex<Vec<(String, u64)>>>, then: MockReply| {
        MockReply::from_fn(move |_| {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let ino = std::fs::metadata(&file).map(|m| m.ino()).unwrap_or(0);
            seen.lock().unwrap().push((text, ino));
            std::fs::write(&file, hand_edit).unwrap();
            then.clone()
        })
    };
    let v2 = plan_args(
        &[
            ("1", "look around", "done"),
            ("2", "write the fix and test", "in_progress"),
            ("3", "ship", "pending"),
        ],
        None,
    );
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            edit(
                file.clone(),
                seen.clone(),
                MockReply::tool_call("update_plan", v2),
            ),
            edit(
                file.clone(),
                seen.clone(),
                MockReply::tool_call("bash", json!({"command": "echo hi"})),
            ),
            MockReply::text("finished"),
        ],
        vec![],
    );
    run_ok(
        sb.run_cmd(&server.base_url(), "mirror"),
        &["--plan", "--plan-file", file.to_str().unwrap()],
    );
    server.assert_no_violations();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let (md1, ino1) = &seen[0];
    assert!(
        md1.starts_with("# Plan\n\n_Version 1, updated at step 1."),
        "{md1}"
    );
    assert!(
        md1.contains("- [ ] **1** look around _(in progress)_\n"),
        "{md1}"
    );
    assert!(md1.contains("- [ ] **2** write the fix\n"), "{md1}");
    assert!(md1.ends_with("\n> starting\n"), "{md1}");
    // The hand edit was replaced by a new file (rename), not written into.
    let (md2, ino2) = &seen[1];
    assert!(md2.contains("_Version 2, updated at step 2."), "{md2}");
    assert!(md2.contains("- [x] **1** look around\n"), "{md2}");
    assert!(!md2.contains("injected"), "{md2}");
    assert_ne!(
        ino1, ino2,
        "the mirror is replaced atomically (a new inode)"
    );
    // Never read back: the edits reached neither the requests nor the log.
    for req in server.requests() {
        assert!(!req.to_string().contains("injected"));
    }
    let reqs = server.requests();
    assert_eq!(current_plan(&reqs[3]), block(V2));
    let wal = std::fs::read_to_string(sb.wal()).unwrap();
    assert!(!wal.contains("injected"));
    // No update after the last edit: the file is left as it is, and no
    // temporary file is left beside it.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), hand_edit);
    let strays: Vec<_> = std::fs::read_dir(sb.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("PLAN.md") && n != "PLAN.md")
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

#[test]
fn plan_file_without_plan_is_refused() {
    let sb = Sandbox::new();
    let server = split_server(vec![], vec![]);
    let mut cmd = sb.run_cmd(&server.base_url(), "mirror");
    cmd.args(["--plan-file", "PLAN.md"]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--plan-file requires --plan"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.request_count(), 0);
    assert!(!sb.wal().exists(), "nothing was written");
    assert!(!sb.path("PLAN.md").exists());
}

#[test]
fn plan_is_allowed_in_read_only_mode() {
    let sb = Sandbox::new();
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::text("finished"),
        ],
        vec![],
    );
    // Enabled through the config key this time.
    let cmd = sb.run_cmd_cfg(&server.base_url(), "look only", "[plan]\nenabled = true\n");
    run_ok(cmd, &["--read-only"]);
    server.assert_no_violations();
    let reqs = server.requests();
    for req in &reqs {
        let mut names = tool_names(req);
        names.sort();
        assert_eq!(names, vec!["glob", "grep", "read", "update_plan"]);
    }
    assert_eq!(current_plan(&reqs[1]), block(V1));
    let recs = read_log(&sb.wal());
    let started = &records_of(&recs, "run.started")[0].data;
    assert_eq!(started["read_only"], true);
    assert_eq!(started["plan_enabled"], true);
    let expected = ToolSet::new(ToolSetOptions {
        read_only: true,
        plan: true,
    });
    assert_eq!(started["tool_signature"], expected.signature());
    assert_eq!(records_of(&recs, "plan.updated").len(), 1);
}

#[test]
fn plan_survives_a_crash_and_is_shown_after_the_resume_notice() {
    let sb = Sandbox::new();
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::tool_calls(vec![
                ("bash", json!({"command": "echo one"})),
                ("bash", json!({"command": "echo two"})),
            ])
            .with_ids(&["b1", "b2"]),
            MockReply::text("finished"),
        ],
        vec![],
    );
    let mut cmd = sb.run_cmd(&server.base_url(), "crash with a plan");
    cmd.arg("--plan");
    crash(cmd, "tool.result:2");
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    // The resume pins the current plan after the system prompt, alone.
    assert_eq!(plan_block_at(&reqs[2], 1), block(V1));
    let notice = check_resumed_request(&reqs[1], &reqs[2], &[("b1", ""), ("b2", NOT_RUN)]);
    let at = notice
        .find("Current plan:\n")
        .expect("the notice shows the plan");
    assert!(notice[at..].contains(V1), "{notice}");
    assert!(
        notice.trim_end().ends_with(V1),
        "the plan comes last: {notice}"
    );
    assert!(stderr(&out).contains("look around"), "{}", stderr(&out));
    let recs = read_log(&sb.wal());
    assert_eq!(records_of(&recs, "plan.updated").len(), 1);
    assert_eq!(records_of(&recs, "resume").len(), 1);
}

#[test]
fn a_crash_between_the_plan_result_and_its_record_keeps_the_plan() {
    // The update_plan result is durable, plan.updated is not: the model was
    // told "Plan updated", so the resumed run must have that plan.
    let sb = Sandbox::new();
    let file = sb.path("PLAN.md");
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::text("finished"),
        ],
        vec![],
    );
    let mut cmd = sb.run_cmd(&server.base_url(), "crash in the plan");
    cmd.args(["--plan", "--plan-file", file.to_str().unwrap()]);
    crash(cmd, "tool.result:1");
    assert!(!file.exists());
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(current_plan(&reqs[1]), block(V1));
    let recs = read_log(&sb.wal());
    check_plan_order(&recs);
    let updates = records_of(&recs, "plan.updated");
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].data["version"], 1);
    assert_eq!(updates[0].data["step"], 1);
    let md = std::fs::read_to_string(&file).expect("the mirror is written on resume");
    assert!(md.contains("_Version 1, updated at step 1."), "{md}");
}

#[test]
fn a_crash_before_the_mirror_is_written_rewrites_it_on_resume() {
    let sb = Sandbox::new();
    let file = sb.path("PLAN.md");
    let server = split_server(
        vec![
            MockReply::tool_call("update_plan", v1_args()),
            MockReply::text("finished"),
        ],
        vec![],
    );
    let mut cmd = sb.run_cmd(&server.base_url(), "crash before the mirror");
    cmd.args(["--plan", "--plan-file", file.to_str().unwrap()]);
    crash(cmd, "plan.updated:1");
    assert!(
        !file.exists(),
        "the seam kills before the mirror is written"
    );
    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = std::fs::read_to_string(&file).expect("the mirror is written on resume");
    assert!(md.contains("- [ ] **2** write the fix\n"), "{md}");
    let recs = read_log(&sb.wal());
    assert_eq!(records_of(&recs, "plan.updated").len(), 1);
}

#[test]
fn resuming_with_the_plan_setting_changed_is_refused_saying_plan_on() {
    let sb = Sandbox::new();
    let server = split_server(vec![MockReply::tool_call("update_plan", v1_args())], vec![]);
    let mut cmd = sb.run_cmd(&server.base_url(), "plan on");
    cmd.arg("--plan");
    crash(cmd, "plan.updated:1");
    // A log whose recorded tool set is not what `--plan` offers today.
    let out = log_cmd(
        "export",
        &sb.wal(),
        &["-o", sb.path("t.json").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path("t.json")).unwrap()).unwrap();
    assert_eq!(doc["plan_enabled"], true);
    doc["tool_signature"] = json!("feedfacefeedface");
    std::fs::write(sb.path("t2.json"), doc.to_string()).unwrap();
    let mut c = std::process::Command::new(e2e::bin());
    c.arg("resume").arg(sb.path("t2.json"));
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("feedfacefeedface") && err.contains("plan on"),
        "{err}"
    );
    assert_eq!(server.request_count(), 1, "nothing was sent");
}
