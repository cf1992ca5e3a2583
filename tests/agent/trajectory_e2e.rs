//! Whole-file trajectories through the binary: v1 and v2 files resume,
//! export/import round trips, and broken files are refused without being
//! touched.

use crate::support::contract;
use crate::support::e2e;
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};
use std::process::Command;
use tinyagent::tools::{ToolSet, ToolSetOptions};

fn fixture(name: &str) -> Value {
    let p = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn resume_json(sb: &Sandbox, json: &std::path::Path, base_url: &str) -> Command {
    let mut c = Command::new(e2e::bin());
    c.current_dir(sb.ws())
        .arg("resume")
        .arg(json)
        .arg("--cwd")
        .arg(sb.ws())
        .args([
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            base_url,
        ])
        .env_remove("OPENAI_API_KEY");
    c
}

#[test]
fn a_v1_trajectory_resumes_and_its_background_reaches_the_notice() {
    let sb = Sandbox::new();
    let path = sb.path("old.json");
    let text = serde_json::to_string_pretty(&fixture("trajectory_v1.json")).unwrap();
    std::fs::write(&path, &text).unwrap();
    let server = MockServer::start(vec![MockReply::text("resumed fine").with_usage(7, 3)]);
    let out = output(resume_json(&sb, &path, &server.base_url()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the JSON file is never modified"
    );
    server.assert_no_violations();
    let req = &server.requests()[0];
    let msgs = req["messages"].as_array().unwrap();
    assert_eq!(
        msgs[1]["content"],
        "Count the text files and write the number to count.txt"
    );
    let notice = msgs.last().unwrap()["content"].as_str().unwrap();
    assert!(notice.starts_with("[Resumed]"), "{notice}");
    assert!(
        notice.contains("processes from the earlier run (not tracked)")
            || notice.contains("Processes from the earlier run (not tracked)"),
        "{notice}"
    );
    assert!(notice.contains("inotifywait"), "{notice}");
    let wal = sb.path("old.json.wal");
    let recs = contract::read(&wal);
    contract::check_write_order(&recs);
    let saved = recs.iter().rev().find(|r| r.kind == "step.saved").unwrap();
    // The file's totals plus the new call.
    assert_eq!(
        saved.data["usage_total"],
        json!({"input_tokens": 1837, "output_tokens": 145})
    );
    // A second resume of the JSON is refused: its log exists.
    let again = output(resume_json(&sb, &path, &server.base_url()));
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("exists"));
}

#[test]
fn a_v2_trajectory_resumes_its_pending_call_and_plan() {
    let sb = Sandbox::new();
    let mut doc = fixture("trajectory_v2.json");
    let stale = doc["tool_signature"].as_str().unwrap().to_string();
    // With its own (stale) signature the tool set does not match: refused.
    let path = sb.path("stale.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let server = MockServer::start(vec![MockReply::text("done").with_usage(1, 1)]);
    let out = output(resume_json(&sb, &path, &server.base_url()));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&stale), "{}", stderr(&out));
    assert_eq!(server.request_count(), 0);

    let plan = doc["plan_enabled"].as_bool().unwrap();
    let ro = doc["read_only"].as_bool().unwrap_or(false);
    doc["tool_signature"] = json!(
        ToolSet::new(ToolSetOptions {
            read_only: ro,
            plan
        })
        .signature()
    );
    let path = sb.path("v2.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let out = output(resume_json(&sb, &path, &server.base_url()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let req = &server.requests()[0];
    let msgs = req["messages"].as_array().unwrap();
    assert!(
        msgs.iter().any(|m| m["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[Current plan]"))),
        "plan block restored"
    );
    let pending = doc["pending_calls"][0]["id"].as_str().unwrap();
    let result = msgs.iter().find(|m| m["tool_call_id"] == pending).unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("[interrupted"),
        "{result}"
    );
    let notice = msgs.last().unwrap()["content"].as_str().unwrap();
    assert!(notice.contains("Current plan"), "{notice}");
}

#[test]
fn broken_trajectory_files_are_refused_untouched() {
    let sb = Sandbox::new();
    let full = serde_json::to_string(&fixture("trajectory_v1.json")).unwrap();
    let mut missing = fixture("trajectory_v1.json");
    missing.as_object_mut().unwrap().remove("messages");
    let mut unknown = fixture("trajectory_v1.json");
    unknown["schema_version"] = json!(7);
    let cases = [
        (
            "truncated.json",
            full[..full.len() / 2].to_string(),
            "ends early",
        ),
        ("missing.json", missing.to_string(), "messages"),
        ("unknown.json", unknown.to_string(), "7"),
        ("garbage.json", "not json at all".to_string(), "JSON"),
    ];
    for (name, text, needle) in cases {
        let path = sb.path(name);
        std::fs::write(&path, &text).unwrap();
        for args in [
            vec!["resume".to_string()],
            vec!["log".into(), "import".into()],
        ] {
            let mut c = Command::new(e2e::bin());
            c.args(&args).arg(&path);
            if args.len() == 2 {
                c.arg("-o").arg(sb.path(&format!("{name}.imported.wal")));
            }
            let out = output(c);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{name} {args:?}: {}",
                stderr(&out)
            );
            let err = stderr(&out);
            assert!(err.contains(needle), "{name}: {err}");
            assert!(!err.contains("panicked"));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
    }
}

#[test]
fn export_then_import_gives_the_same_run() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo hi"})).with_usage(5, 2),
        MockReply::text("bye").with_usage(6, 1),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "round trip"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json = sb.path("run.json");
    let run = |args: &[&str]| {
        let mut c = Command::new(e2e::bin());
        c.args(args);
        output(c)
    };
    let o = run(&[
        "log",
        "export",
        sb.wal().to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 2);
    assert_eq!(doc["usage"]["input_tokens"], 11);
    let copy = sb.path("copy.wal");
    let o = run(&[
        "log",
        "import",
        json.to_str().unwrap(),
        "-o",
        copy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    contract::read(&copy);
    let a = tinyagent::store::load(&sb.wal()).unwrap().state;
    let b = tinyagent::store::load(&copy).unwrap().state;
    assert_eq!(a.messages, b.messages);
    assert_eq!(a.usage, b.usage);
    assert_eq!(a.step, b.step);
    // Importing onto an existing log is refused.
    let o = run(&[
        "log",
        "import",
        json.to_str().unwrap(),
        "-o",
        copy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}
