//! A log written while native items were kept as JSON trees (members
//! sorted: the binary of before `event::NativeItems`) still resumes, from
//! its snapshot and from its records alone, and its thinking blocks go
//! back with the values they were recorded with. The fixture is that
//! binary's own: an Anthropic run with thinking on, stopped by its step
//! limit after a thinking turn whose `bash` call ran.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};

fn thinking_blocks() -> Vec<Value> {
    vec![
        json!({"type": "thinking", "thinking": "List the files first.\n\nThen answer.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxB/+=="}),
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT=="}),
    ]
}

fn resumes(with_snapshot: bool) {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/native-as-tree");
    // The run recorded its workspace as this absolute path.
    std::fs::create_dir_all("/tmp/tinyagent-fixture-native/ws").unwrap();
    let sb = Sandbox::new();
    let wal = sb.path("run.wal");
    std::fs::copy(fixture.join("run.wal"), &wal).unwrap();
    if with_snapshot {
        std::fs::copy(
            fixture.join("run.wal.snapshot"),
            sb.path("run.wal.snapshot"),
        )
        .unwrap();
    }
    let before = std::fs::read(&wal).unwrap();
    let server = MockServer::start(vec![MockReply::json(json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Listed."}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 60, "output_tokens": 3}
    }))]);
    let mut c = std::process::Command::new(bin());
    c.current_dir(sb.dir.path())
        .args(["resume", "run.wal", "--max-steps", "3", "--base-url"])
        .arg(server.root_url())
        .args(["--cwd", "/tmp/tinyagent-fixture-native/ws"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .stdin(std::process::Stdio::null());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Listed.");
    // The snapshot was read (one that could not be is named in a warning).
    assert!(!stderr(&out).contains("snapshot"), "{}", stderr(&out));
    server.assert_no_violations();
    let after = std::fs::read(&wal).unwrap();
    assert_eq!(&after[..before.len()], &before[..]);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(
        r["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    let assistant = &r["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0], thinking_blocks()[0], "{r}");
    assert_eq!(assistant["content"][1], thinking_blocks()[1], "{r}");
    assert_eq!(assistant["content"][2]["id"], "toolu_f1");
    let recs = contract::read(&wal);
    contract::check_write_order(&recs);
    assert_eq!(
        of_kind(&recs, "run.finished").last().unwrap().data["status"],
        "completed"
    );
}

#[test]
fn a_log_with_native_items_as_trees_resumes_from_its_records() {
    resumes(false);
}

#[test]
fn a_log_with_native_items_as_trees_resumes_from_its_snapshot() {
    resumes(true);
}
