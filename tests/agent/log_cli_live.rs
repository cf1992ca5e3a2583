//! `log inspect` / `verify` / `repair` next to a real writer: a log still held
//! open (and locked) by a `Store`, a log with a snapshot, and a repair refused
//! because another process holds the lock.

use serde_json::{Value, json};
use std::fs;
use tinyagent::event::*;
use tinyagent::inspect::{inspect, repair, verify};
use tinyagent::store::{Store, StoreOptions};
use tinyagent_store::snapshot::snapshot_path;
use tinyagent_store::wal::writer::LockedLog;

fn started() -> Event {
    Event::RunStarted(RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id: "r-live".into(),
        task: "t".into(),
        model: "m".into(),
        provider: tinyagent::config::ProviderKind::Script,
        base_url: None,
        plan_enabled: false,
        read_only: true,
        tool_signature: "sig".into(),
        tools: vec!["read".into()],
        mcp_tools: Vec::new(),
        limits: Limits::default(),
        forked_from: None,
        system_prompt: "sys".into(),
        settings: RunSettings::default(),
    })
}

fn response(step: u64) -> Event {
    let call = ToolCall {
        id: format!("c{step}"),
        name: "read".into(),
        arguments: r#"{"path":"a"}"#.into(),
    };
    Event::ModelResponse(ModelResponse {
        context_tokens: 0,
        request_bytes: 0,
        stop_reason: None,
        stop_reason_raw: None,
        step,
        message: Message::assistant("", vec![call]),
        usage: Usage {
            input_tokens: 10,
            output_tokens: 1,
            ..Usage::default()
        },
        cost_usd: 0.5,
        pending: vec![format!("c{step}")],
    })
}

fn no_snapshots() -> StoreOptions {
    StoreOptions {
        snapshot_every: 0,
        ..StoreOptions::default()
    }
}

fn json_of(path: &std::path::Path) -> Value {
    let mut out = Vec::new();
    assert_eq!(inspect(path, true, &mut out).unwrap(), 0);
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn inspect_and_verify_read_a_log_while_its_writer_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.wal");
    let mut store = Store::create(&path, no_snapshots()).unwrap();
    store.append(started()).unwrap();
    store.append(response(1)).unwrap();
    let v = json_of(&path);
    assert_eq!(
        (&v["records"], &v["status"], &v["pending_calls"]),
        (
            &json!(2),
            &json!("running"),
            &json!([{"id": "c1", "name": "read", "step": 1, "started": false}])
        )
    );
    let mut out = Vec::new();
    assert_eq!(verify(&path, &mut out).unwrap(), 0);
    // The writer goes on after being inspected.
    store
        .append(Event::ToolStarted(ToolStarted {
            step: 1,
            call_id: "c1".into(),
            name: "read".into(),
            process: None,
        }))
        .unwrap();
    assert_eq!(json_of(&path)["pending_calls"][0]["started"], true);
    store.close().unwrap();
}

#[test]
fn inspect_names_the_snapshot_that_covers_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snap.wal");
    let opts = StoreOptions {
        snapshot_every: 1_000,
        ..StoreOptions::default()
    };
    let mut store = Store::create(&path, opts).unwrap();
    store.append(started()).unwrap();
    store.append(response(1)).unwrap();
    store.close().unwrap();
    let v = json_of(&path);
    assert_eq!(
        v["snapshot"],
        json!({"seq": 2, "path": snapshot_path(&path).display().to_string()})
    );
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 10, "output_tokens": 1, "cached_input_tokens": 0,
            "cache_write_tokens": 0, "reasoning_tokens": 0, "cost_usd": 0.5, "cost_known": true,
            "cost_by_kind": null,
            "last_steps": [{"step": 1, "input_tokens": 10, "cached_input_tokens": 0,
                "cache_write_tokens": 0, "output_tokens": 1, "cost_usd": 0.5}]})
    );
}

#[test]
fn a_damaged_snapshot_is_reported_as_a_warning_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snap.wal");
    let opts = StoreOptions {
        snapshot_every: 1_000,
        ..StoreOptions::default()
    };
    let mut store = Store::create(&path, opts).unwrap();
    store.append(started()).unwrap();
    store.close().unwrap();
    let snap = snapshot_path(&path);
    fs::write(&snap, b"garbage").unwrap();
    let v = json_of(&path);
    assert_eq!(v["snapshot"], Value::Null);
    assert_eq!(v["records"], 1);
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains(&snap.display().to_string())
    );
    let mut out = Vec::new();
    inspect(&path, false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("warning ") && l.contains("stale or damaged")),
        "{text}"
    );
}

#[test]
fn repair_refuses_a_log_locked_by_a_writer_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.wal");
    let mut store = Store::create(&path, no_snapshots()).unwrap();
    store.append(started()).unwrap();
    store.close().unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"seq\":2,\"prev\":\"");
    fs::write(&path, &bytes).unwrap();

    let lock = LockedLog::open(&path).unwrap();
    let mut out = Vec::new();
    let code = repair(&path, &mut out).unwrap();
    let line = String::from_utf8(out).unwrap();
    assert_eq!(code, 2, "{line}");
    assert!(
        line.starts_with("refused") && line.contains("in use"),
        "{line}"
    );
    assert_eq!(fs::read(&path).unwrap(), bytes);
    drop(lock);

    let mut out = Vec::new();
    assert_eq!(repair(&path, &mut out).unwrap(), 0);
    assert_eq!(verify(&path, &mut Vec::new()).unwrap(), 0);
}
