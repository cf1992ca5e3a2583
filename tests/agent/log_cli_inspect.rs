//! `log inspect`, `log verify` and `log repair` on real log files: clean,
//! torn, corrupt and not a log at all. The logs are framed with the crate's
//! pure `frame::encode`, exactly as the writer lays them out.

use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use tinyagent::event::*;
use tinyagent::inspect::{inspect, repair, verify};
use tinyagent_store::wal::frame;

fn run_started() -> Event {
    Event::RunStarted(RunStarted {
        schema_version: SCHEMA_VERSION,
        run_id: "r-inspect".into(),
        task: "count the files".into(),
        model: "m1".into(),
        provider: tinyagent::config::ProviderKind::Script,
        base_url: None,
        plan_enabled: true,
        read_only: false,
        tool_signature: "sig".into(),
        tools: vec!["bash".into(), "read".into(), "update_plan".into()],
        mcp_tools: Vec::new(),
        limits: Limits {
            max_steps: Some(10),
            ..Limits::default()
        },
        forked_from: None,
        system_prompt: "sys".into(),
        settings: RunSettings::default(),
    })
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

fn response(step: u64, calls: Vec<ToolCall>, input: u64, output: u64, cost: f64) -> Event {
    let pending = calls.iter().map(|c| c.id.clone()).collect();
    Event::ModelResponse(ModelResponse {
        context_tokens: 0,
        request_bytes: 0,
        stop_reason: None,
        stop_reason_raw: None,
        step,
        message: Message::assistant("", calls),
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        },
        cost_usd: cost,
        pending,
    })
}

fn started(step: u64, id: &str, name: &str) -> Event {
    Event::ToolStarted(ToolStarted {
        step,
        call_id: id.into(),
        name: name.into(),
        process: None,
    })
}

fn result(step: u64, id: &str, name: &str, content: &str) -> Event {
    Event::ToolResult(ToolResult {
        step,
        call_id: id.into(),
        name: name.into(),
        content: content.into(),
        is_error: false,
        interrupted: false,
        format_error: false,
        rerun: false,
        hooks: Vec::new(),
        signal: None,
    })
}

fn item(id: &str, text: &str, status: PlanStatus) -> PlanItem {
    PlanItem {
        id: id.into(),
        text: text.into(),
        status,
    }
}

/// A run that crashed in step 2 while its second call (`c3`, read) ran.
fn crashed_run() -> Vec<Event> {
    vec![
        run_started(),
        response(
            1,
            vec![call("c1", "update_plan", r#"{"items":[]}"#)],
            100,
            20,
            0.25,
        ),
        started(1, "c1", "update_plan"),
        result(1, "c1", "update_plan", "plan updated"),
        Event::PlanUpdated(PlanUpdated {
            step: 1,
            version: 1,
            items: vec![
                item("a", "look around", PlanStatus::Done),
                item("b", "count", PlanStatus::InProgress),
            ],
            note: None,
            diff: "+ a\n+ b".into(),
        }),
        Event::StepSaved(StepSaved {
            step: 1,
            usage_total: Usage {
                input_tokens: 100,
                output_tokens: 20,
                ..Usage::default()
            },
            cost_usd_total: 0.25,
        }),
        response(
            2,
            vec![
                call("c2", "bash", r#"{"command":"sleep 100","background":true}"#),
                call("c3", "read", r#"{"path":"a.txt"}"#),
            ],
            200,
            30,
            0.5,
        ),
        started(2, "c2", "bash"),
        Event::ProcessStarted(ProcessStarted {
            id: "p1".into(),
            pid: 4242,
            command: "sleep 100".into(),
            step: 2,
            env: "local".into(),
            start_time: None,
            output: None,
            container: None,
            engine: None,
        }),
        result(2, "c2", "bash", "started p1"),
        started(2, "c3", "read"),
    ]
}

/// Frames `events` as records 1..n; returns the bytes and each line's offset.
fn frame_all(events: &[Event]) -> (Vec<u8>, Vec<u64>) {
    let mut out = Vec::new();
    let mut offsets = Vec::new();
    let mut prev = 0;
    for (i, ev) in events.iter().enumerate() {
        offsets.push(out.len() as u64);
        prev = frame::encode(i as u64 + 1, prev, "2026-01-01T00:00:00Z", ev, &mut out).unwrap();
    }
    (out, offsets)
}

fn write_log(dir: &Path, bytes: &[u8]) -> PathBuf {
    let path = dir.join("run.wal");
    fs::write(&path, bytes).unwrap();
    path
}

fn inspect_json(path: &Path) -> Value {
    let mut out = Vec::new();
    assert_eq!(inspect(path, true, &mut out).unwrap(), 0);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1, "exactly one JSON object: {text}");
    serde_json::from_str(&text).unwrap()
}

fn pick(v: &Value, keys: &[&str]) -> Value {
    Value::Object(
        keys.iter()
            .map(|k| (k.to_string(), v[*k].clone()))
            .collect(),
    )
}

const CONTRACT_KEYS: &[&str] = &[
    "run_id",
    "schema_version",
    "records",
    "bytes",
    "torn_tail",
    "corruption",
    "steps",
    "status",
    "pending_calls",
    "plan",
    "compactions",
    "processes",
    "usage",
    "snapshot",
];

fn verify_of(path: &Path) -> (i32, String) {
    let mut out = Vec::new();
    let code = verify(path, &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

fn repair_of(path: &Path) -> (i32, String) {
    let mut out = Vec::new();
    let code = repair(path, &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

#[test]
fn inspect_json_on_a_clean_crashed_log_reports_the_contract_members() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = frame_all(&crashed_run());
    let path = write_log(dir.path(), &bytes);
    let v = inspect_json(&path);
    for key in CONTRACT_KEYS {
        assert!(v.get(*key).is_some(), "member {key} missing in {v}");
    }
    assert_eq!(
        pick(&v, CONTRACT_KEYS),
        json!({
            "run_id": "r-inspect",
            "schema_version": 2,
            "records": 11,
            "bytes": bytes.len(),
            "torn_tail": null,
            "corruption": null,
            "steps": 2,
            "status": "running",
            "pending_calls": [{"id": "c3", "name": "read", "step": 2, "started": true}],
            "plan": {
                "version": 1,
                "items": [
                    {"id": "a", "text": "look around", "status": "done"},
                    {"id": "b", "text": "count", "status": "in_progress"}
                ],
                "note": null,
                "updated_step": 1,
                "versions": 1
            },
            "compactions": 0,
            "processes": [{
                "id": "p1", "pid": 4242, "command": "sleep 100", "step": 2,
                "running": true, "lost": false, "env": "local",
                "exit_code": null, "signal": null
            }],
            "usage": {"input_tokens": 300, "output_tokens": 50, "cached_input_tokens": 0,
                "cache_write_tokens": 0, "reasoning_tokens": 0, "cost_usd": 0.75, "cost_known": true,
                // The log names no price: the cost came with its records.
                "cost_by_kind": null,
                "last_steps": [
                    {"step": 1, "input_tokens": 100, "cached_input_tokens": 0,
                        "cache_write_tokens": 0, "output_tokens": 20, "cost_usd": 0.25},
                    {"step": 2, "input_tokens": 200, "cached_input_tokens": 0,
                        "cache_write_tokens": 0, "output_tokens": 30, "cost_usd": 0.5}
                ]},
            "snapshot": null
        })
    );
    assert_eq!(v["task"], "count the files");
    assert_eq!(v["valid_bytes"], bytes.len());
    assert_eq!(v["last_seq"], 11);
    assert_eq!(v["limits"]["max_steps"], 10);
}

#[test]
fn inspect_reports_the_finished_status() {
    let dir = tempfile::tempdir().unwrap();
    let mut events = crashed_run();
    events.push(result(2, "c3", "read", "hello"));
    events.push(Event::RunFinished(RunFinished {
        status: RunStatus::MaxSteps,
        reason: None,
    }));
    let (bytes, _) = frame_all(&events);
    let path = write_log(dir.path(), &bytes);
    let v = inspect_json(&path);
    assert_eq!(v["status"], "max_steps");
    assert_eq!(v["pending_calls"], json!([]));
    assert_eq!(v["records"], 13);
}

#[test]
fn inspect_human_form_shows_header_tables_and_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = frame_all(&crashed_run());
    let path = write_log(dir.path(), &bytes);
    let mut out = Vec::new();
    assert_eq!(inspect(&path, false, &mut out).unwrap(), 0);
    let text = String::from_utf8(out).unwrap();
    let has_line = |pred: &dyn Fn(&str) -> bool| text.lines().any(pred);
    assert!(
        has_line(&|l| l.starts_with("run ") && l.contains("r-inspect")),
        "{text}"
    );
    assert!(
        has_line(&|l| l.starts_with("status ") && l.contains("running")),
        "{text}"
    );
    assert!(
        has_line(&|l| l.starts_with("integrity ")
            && l.contains("11 records")
            && l.ends_with("clean")),
        "{text}"
    );
    assert!(
        has_line(&|l| l.contains("c3") && l.contains("read") && l.trim_end().ends_with("yes")),
        "{text}"
    );
    assert!(has_line(&|l| l.trim() == "[x] a  look around"), "{text}");
    assert!(has_line(&|l| l.trim() == "[>] b  count"), "{text}");
    assert!(
        has_line(&|l| l.contains("p1") && l.contains("4242") && l.contains("running")),
        "{text}"
    );
    assert!(
        has_line(&|l| l.starts_with("usage ")
            && l.contains("300 in / 50 out")
            && l.contains("$0.7500")),
        "{text}"
    );
}

#[test]
fn torn_tail_is_reported_verified_as_1_and_repaired_keeping_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (clean, _) = frame_all(&crashed_run());
    let (longer, _) = frame_all(&[crashed_run(), vec![result(2, "c3", "read", "abc")]].concat());
    let torn_len = (longer.len() - clean.len()) / 2;
    let mut bytes = clean.clone();
    bytes.extend_from_slice(&longer[clean.len()..clean.len() + torn_len]);
    let path = write_log(dir.path(), &bytes);

    let v = inspect_json(&path);
    assert_eq!(
        v["torn_tail"],
        json!({"offset": clean.len(), "bytes": torn_len})
    );
    assert_eq!(v["corruption"], Value::Null);
    assert_eq!(
        (v["records"].clone(), v["bytes"].clone()),
        (json!(11), json!(bytes.len()))
    );
    assert_eq!(v["valid_bytes"], clean.len());

    let (code, line) = verify_of(&path);
    assert_eq!(code, 1, "{line}");
    assert!(
        line.starts_with("torn tail") && line.contains(&clean.len().to_string()),
        "{line}"
    );
    assert_eq!(fs::read(&path).unwrap(), bytes, "verify changed the file");

    let (code, line) = repair_of(&path);
    assert_eq!(code, 0, "{line}");
    assert_eq!(fs::read(&path).unwrap(), clean);
    let kept = dir.path().join(format!("run.wal.torn-{}", clean.len()));
    assert_eq!(fs::read(&kept).unwrap(), &bytes[clean.len()..]);
    assert!(line.contains(&kept.display().to_string()), "{line}");

    assert_eq!(verify_of(&path).0, 0);
    let (code, line) = repair_of(&path);
    assert_eq!(code, 0);
    assert!(line.starts_with("clean: nothing to repair"), "{line}");
}

#[test]
fn corruption_is_reported_with_seq_and_offset_and_nothing_is_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut bytes, offsets) = frame_all(&crashed_run());
    // Flip a byte inside record 5 (`plan.updated`); valid records follow it.
    let at = offsets[4] as usize + 40;
    bytes[at] ^= 0x04;
    let path = write_log(dir.path(), &bytes);

    let v = inspect_json(&path);
    assert_eq!(v["corruption"]["seq"], 5);
    assert_eq!(v["corruption"]["offset"], offsets[4]);
    assert!(
        v["corruption"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );
    assert_eq!(v["torn_tail"], Value::Null);
    assert_eq!(v["records"], 4);
    assert_eq!(
        v["plan"],
        Value::Null,
        "nothing after the corruption is applied"
    );

    let (code, line) = verify_of(&path);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("seq 5") && line.contains(&offsets[4].to_string()),
        "{line}"
    );

    let (code, line) = repair_of(&path);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.starts_with("refused") && line.contains("seq 5"),
        "{line}"
    );
    assert!(line.contains(&offsets[4].to_string()), "{line}");
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the file must be unchanged"
    );
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("run.wal")],
        "no file was written beside it"
    );
}

#[test]
fn clean_log_verifies_0_with_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = frame_all(&crashed_run());
    let path = write_log(dir.path(), &bytes);
    let (code, line) = verify_of(&path);
    assert_eq!(code, 0);
    assert_eq!(line, format!("clean: 11 records, {} bytes\n", bytes.len()));
}

#[test]
fn a_file_that_is_not_a_log_is_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trajectory.json");
    let body = b"{\n  \"schema_version\": 1,\n  \"messages\": []\n}\n";
    fs::write(&path, body).unwrap();
    let err = inspect(&path, true, &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("not a tinyagent log"), "{err:#}");
    let (code, line) = verify_of(&path);
    assert_eq!(code, 2);
    assert!(line.contains("not a tinyagent log"), "{line}");
    assert_eq!(repair_of(&path).0, 2);
    assert_eq!(fs::read(&path).unwrap(), body);

    let empty = dir.path().join("empty.wal");
    fs::write(&empty, b"").unwrap();
    let (code, line) = verify_of(&empty);
    assert_eq!(code, 2);
    assert!(line.contains("empty"), "{line}");
    assert!(inspect(&empty, true, &mut Vec::new()).is_err());

    let missing = dir.path().join("missing.wal");
    let (code, line) = verify_of(&missing);
    assert_eq!(code, 2);
    assert!(line.starts_with("unreadable"), "{line}");
    assert!(inspect(&missing, false, &mut Vec::new()).is_err());
}

#[test]
fn a_log_cut_at_any_byte_is_reported_never_refused_once_it_has_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, offsets) = frame_all(&crashed_run());
    let path = dir.path().join("cut.wal");
    // Every byte of the last two records, every 13th byte before them.
    let last_two = offsets[offsets.len() - 2] as usize;
    let cuts = (1..last_two).step_by(13).chain(last_two..bytes.len());
    for cut in cuts {
        fs::write(&path, &bytes[..cut]).unwrap();
        let whole = offsets
            .iter()
            .filter(|&&o| o > 0 && o <= cut as u64)
            .count() as u64;
        let at_boundary = offsets.contains(&(cut as u64));
        let (code, line) = verify_of(&path);
        match (whole, at_boundary) {
            (0, _) => assert_eq!(code, 2, "cut {cut}: {line}"),
            (_, true) => assert_eq!(code, 0, "cut {cut}: {line}"),
            (_, false) => assert_eq!(code, 1, "cut {cut}: {line}"),
        }
        if whole > 0 {
            let v = inspect_json(&path);
            assert_eq!(v["records"], whole, "cut {cut}");
            assert_eq!(v["torn_tail"].is_null(), at_boundary, "cut {cut}: {v}");
            assert_eq!(v["corruption"], Value::Null, "cut {cut}");
        }
    }
}
