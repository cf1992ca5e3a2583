//! Tests of the `--json` stream's lines (see [`super::json`]): a record line is
//! what printing the JSON tree gave, floats rounded as the tree rounded them.

use super::json::{event_name, json_event, record_line, round_floats};
use crate::event::{
    CallProcess, Event, HookRun, RunStatus, StepSaved, ToolResult, ToolStarted, Usage,
};
use crate::session::testkit as kit;
use serde_json::Value;

/// What the tree path prints for a record, as a tree, without `ts`.
fn through_a_tree(seq: u64, event: &Event) -> Value {
    let (name, mut body) = json_event(seq, event).unwrap();
    body["event"] = Value::String(name.into());
    round_floats(&mut body);
    body
}

fn records() -> Vec<Event> {
    let mut all = vec![
        kit::run_started(true),
        kit::response(
            2,
            "text \"quoted\" é\n",
            vec![kit::call("c1", "bash"), kit::call("c2", "read")],
            (10, 5),
            0.1 + 0.2,
        ),
        kit::response(3, "", vec![], (0, 0), 125.559_020_999_999_99),
        kit::started(2, "c1", "bash"),
        Event::ToolStarted(ToolStarted {
            process: Some(CallProcess {
                pid: 7,
                pgid: 7,
                start_time: Some(99),
                ..serde_json::from_value(serde_json::json!({"pid": 1, "pgid": 1})).unwrap()
            }),
            ..ToolStarted::new(2, &kit::call("c2", "bash"))
        }),
        kit::result(2, "c1", "bash", "out\tput \u{1}", false),
        kit::result(2, "c2", "read", "", true),
        Event::ToolResult(ToolResult {
            rerun: true,
            signal: Some("SIGINT".into()),
            hooks: vec![HookRun {
                hook: "pre_tool".into(),
                outcome: "allow".into(),
                detail: Some("ok".into()),
            }],
            ..ToolResult::interrupted(2, "c3", "grep")
        }),
        kit::saved(2),
        Event::StepSaved(StepSaved {
            step: 3,
            usage_total: Usage {
                input_tokens: u64::MAX,
                output_tokens: 3,
                ..Usage::default()
            },
            cost_usd_total: 1.0 / 3.0,
        }),
        kit::plan_updated(
            4,
            2,
            vec![kit::item("a", "do it", crate::event::PlanStatus::Done)],
            "+ a",
        ),
        kit::process_started("p1", 42, "sleep 9", 4),
        kit::process_exited("p1", Some(0)),
        kit::resume("[Resumed] ...", Some("go on"), None),
    ];
    // Every record of a real run's log too.
    let wal = include_str!("../../tests/fixtures/previous-format/fixture.wal");
    for line in wal.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let record = serde_json::json!({"type": v["type"], "data": v["data"]});
        all.push(serde_json::from_value(record).unwrap());
    }
    all
}

#[test]
fn a_record_line_is_what_the_tree_printed_event_and_seq_first() {
    for (i, event) in records().iter().enumerate() {
        let seq = i as u64 + 1;
        let line = record_line(seq, event, None).unwrap();
        let text = std::str::from_utf8(&line).unwrap();
        assert!(text.ends_with("\"}\n"), "{text}");
        let head = format!("{{\"event\":\"{}\",\"seq\":{seq},", event_name(event));
        assert!(text.starts_with(&head), "{text}");
        let mut parsed: Value = serde_json::from_str(text).unwrap();
        let ts = parsed.as_object_mut().unwrap().remove("ts").unwrap();
        assert!(humantime::parse_rfc3339(ts.as_str().unwrap()).is_ok());
        assert_eq!(parsed, through_a_tree(seq, event), "{text}");
    }
}

/// An event made from the record's line in the log is the event made
/// from the record: byte for byte but the time stamp, for every kind,
/// with floats that round and floats that do not, and with a line that
/// is not a log line.
#[test]
fn an_event_from_the_records_log_line_is_the_event_from_the_record() {
    let without_ts = |line: &[u8]| {
        let text = std::str::from_utf8(line).unwrap();
        let at = text.rfind(",\"ts\":\"").unwrap();
        text[..at].to_string()
    };
    let mut more = records();
    more.push(kit::response(5, "x", vec![], (1, 1), 0.25));
    more.push(kit::saved(5));
    for (i, event) in more.iter().enumerate() {
        let seq = i as u64 + 1;
        let mut framed = Vec::new();
        tinyagent_store::wal::frame::encode(seq, 0, "2026-12-02T00:00:00.000Z", event, &mut framed)
            .unwrap();
        let plain = record_line(seq, event, None);
        for logged in [&framed[..], b"not a log line\n"] {
            let got = record_line(seq, event, Some(logged));
            assert_eq!(
                got.as_deref().map(without_ts),
                plain.as_deref().map(without_ts),
                "{event:?}"
            );
        }
    }
    // And the members are the line's: not serialised again.
    let mut framed = Vec::new();
    let other = kit::result(2, "c1", "bash", "what the log holds", false);
    tinyagent_store::wal::frame::encode(1, 0, "t", &other, &mut framed).unwrap();
    let asked = kit::result(2, "c1", "bash", "something else", false);
    let line = record_line(1, &asked, Some(&framed)).unwrap();
    assert!(
        String::from_utf8(line)
            .unwrap()
            .contains("what the log holds")
    );
}

/// Numbers inside strings are text; integers always print the same;
/// a float only when rounding leaves it as it is.
#[test]
fn only_floats_that_rounding_changes_keep_a_line_from_being_reused() {
    for same in [
        r#"{}"#,
        r#"{"a":1,"b":-20,"c":18446744073709551615,"d":[0,1]}"#,
        r#"{"cost":0.25,"t":1e-6,"u":-3.5,"v":125.559021}"#,
        r#"{"s":"0.30000000000000004 \" 1.0000001 \\","n":null}"#,
        r#"{"s":"\"","x":2.5E3}"#,
        r#"{"s":"unterminated 0.1"#,
    ] {
        assert!(super::json::prints_as_rounded(same.as_bytes()), "{same}");
    }
    for changed in [
        r#"{"cost":0.30000000000000004}"#,
        r#"{"s":"x","v":[1,0.3333333333333333]}"#,
        r#"{"s":"\\","t":1e-7}"#,
        r#"{"t":-125.5590209999}"#,
    ] {
        assert!(
            !super::json::prints_as_rounded(changed.as_bytes()),
            "{changed}"
        );
    }
}

#[test]
fn floats_are_rounded_as_the_tree_rounded_them() {
    let line = record_line(1, &kit::response(1, "", vec![], (1, 1), 0.1 + 0.2), None).unwrap();
    assert!(
        String::from_utf8(line)
            .unwrap()
            .contains("\"cost_usd\":0.3,")
    );
}

#[test]
fn run_finished_goes_through_the_tree_for_its_totals() {
    assert!(record_line(9, &kit::finished(RunStatus::Completed), None).is_none());
}
