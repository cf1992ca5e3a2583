//! The registry: which tools are offered, the signature, and every kind of
//! malformed call.

use crate::support::tools::*;
use serde_json::{Value, json};
use tinyagent::tools::{ToolSet, ToolSetOptions};

fn opts(read_only: bool, plan: bool) -> ToolSetOptions {
    ToolSetOptions { read_only, plan }
}

#[test]
fn offered_tools_in_fixed_order() {
    assert_eq!(
        ToolSet::new(opts(false, false)).names(),
        ["bash", "process", "read", "write", "edit", "grep", "glob"]
    );
    assert_eq!(
        ToolSet::new(opts(false, true)).names(),
        [
            "bash",
            "process",
            "read",
            "write",
            "edit",
            "grep",
            "glob",
            "update_plan"
        ]
    );
    assert_eq!(
        ToolSet::new(opts(true, false)).names(),
        ["read", "grep", "glob"]
    );
    assert_eq!(
        ToolSet::new(opts(true, true)).names(),
        ["read", "grep", "glob", "update_plan"]
    );
}

#[test]
fn signature_is_stable_and_differs_across_options() {
    let sigs: Vec<String> = [(false, false), (false, true), (true, false), (true, true)]
        .iter()
        .map(|&(r, p)| ToolSet::new(opts(r, p)).signature())
        .collect();
    for (i, sig) in sigs.iter().enumerate() {
        assert_eq!(sig.len(), 16);
        assert!(
            sig.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        for other in &sigs[i + 1..] {
            assert_ne!(sig, other);
        }
    }
    // Same options, separately built: same signature.
    assert_eq!(ToolSet::new(opts(false, true)).signature(), sigs[1]);
}

/// Today's signatures. Every log records one of them in `run.started`, and a
/// resume compares it with the tool set it builds: a change here strands
/// every existing log.
#[test]
fn signatures_are_pinned() {
    for ((read_only, plan), sig) in [
        ((false, false), "679d90aae454c3d5"),
        ((true, false), "bbdf33960b7a5411"),
        ((false, true), "3b41d57d1716f8cc"),
        ((true, true), "6f81c0681cfa51b2"),
    ] {
        assert_eq!(
            ToolSet::new(opts(read_only, plan)).signature(),
            sig,
            "read_only {read_only}, plan {plan}"
        );
    }
}

/// The full tool set (every other set is a subset of it, in the same order)
/// as it is sent to the model: names, descriptions and schemas.
#[test]
fn specs_match_the_fixture() {
    let specs = ToolSet::new(opts(false, true)).specs().to_vec();
    let mut text = serde_json::to_string_pretty(&specs).unwrap();
    text.push('\n');
    assert_eq!(text, include_str!("../fixtures/tool_specs.json"));
}

#[test]
fn every_schema_is_a_closed_object_and_fits_the_parser() {
    let fx = Fixture::new();
    for spec in fx.set.specs() {
        let p = &spec.parameters;
        assert_eq!(p["type"], "object", "{}", spec.name);
        assert_eq!(p["additionalProperties"], false, "{}", spec.name);
        assert!(!spec.description.is_empty());
        // A call with every declared property, typed as the schema says, is
        // not a format error: schema and parser agree on names and types.
        let mut args = serde_json::Map::new();
        for (key, prop) in p["properties"].as_object().unwrap() {
            args.insert(key.clone(), sample(prop));
        }
        let out = fx.call(&spec.name, &Value::Object(args).to_string());
        assert!(!out.format_error, "{}: {}", spec.name, out.content);
        // Every required property really is required.
        for req in p["required"].as_array().unwrap() {
            let mut args = serde_json::Map::new();
            for (key, prop) in p["properties"].as_object().unwrap() {
                if key != req.as_str().unwrap() {
                    args.insert(key.clone(), sample(prop));
                }
            }
            let out = fx.call(&spec.name, &Value::Object(args).to_string());
            assert_format_error(&out, &format!("missing field `{}`", req.as_str().unwrap()));
        }
    }
}

/// A harmless value of the schema's type.
fn sample(prop: &Value) -> Value {
    if let Some(first) = prop.get("enum").and_then(|e| e.get(0)) {
        return first.clone();
    }
    match prop["type"].as_str().unwrap() {
        "string" => json!("x"),
        "integer" => json!(1),
        "boolean" => json!(false),
        "array" => json!([sample(&prop["items"])]),
        "object" => {
            let mut m = serde_json::Map::new();
            for (k, v) in prop["properties"].as_object().unwrap() {
                m.insert(k.clone(), sample(v));
            }
            Value::Object(m)
        }
        other => panic!("unexpected type {other}"),
    }
}

#[test]
fn unknown_tool_lists_the_available_ones() {
    let fx = Fixture::new();
    let out = fx.call("rm_rf", r#"{"path":"."}"#);
    assert_format_error(&out, "Unknown tool `rm_rf`");
    assert!(
        out.content
            .contains("bash, process, read, write, edit, grep, glob, update_plan")
    );
    assert!(out.records.is_empty() && out.plan_update.is_none());
}

#[test]
fn read_only_mode_refuses_mutating_tools_as_unknown() {
    let fx = Fixture::with(opts(true, false));
    for (name, args) in [
        ("bash", r#"{"command":"touch x"}"#),
        ("process", r#"{"action":"list"}"#),
        ("write", r#"{"path":"x","content":"y"}"#),
        ("edit", r#"{"path":"x","old_string":"a","new_string":"b"}"#),
        ("update_plan", r#"{"items":[]}"#),
    ] {
        let out = fx.call(name, args);
        assert_format_error(&out, &format!("Unknown tool `{name}`"));
        assert!(out.content.contains("read, grep, glob."), "{}", out.content);
    }
    assert!(!fx.ws.join("x").exists());
    fx.write("a.txt", "hello\n");
    assert_ok(&fx.call("read", r#"{"path":"a.txt"}"#));
    assert_ok(&fx.call("grep", r#"{"pattern":"hello"}"#));
    assert_ok(&fx.call("glob", r#"{"pattern":"*.txt"}"#));
}

#[test]
fn read_only_mode_keeps_update_plan_when_enabled() {
    let fx = Fixture::with(opts(true, true));
    let out = fx.call(
        "update_plan",
        r#"{"items":[{"id":"1","text":"t","status":"pending"}]}"#,
    );
    assert_ok(&out);
    assert!(out.plan_update.is_some());
}

#[test]
fn unparseable_arguments_are_format_errors_with_the_expected_shape() {
    let fx = Fixture::new();
    let out = fx.call("bash", r#"{"command": "ls""#);
    assert_format_error(
        &out,
        "Malformed call to `bash`: the arguments are not valid JSON",
    );
    assert!(
        out.content
            .contains(r#"Expected arguments: {"command": string"#),
        "{}",
        out.content
    );
    assert_format_error(&fx.call("read", ""), "the arguments are empty");
    assert_format_error(&fx.call("read", "  "), "the arguments are empty");
    assert_format_error(
        &fx.call("read", r#"["a.txt"]"#),
        "must be a JSON object, not an array",
    );
    assert_format_error(
        &fx.call("read", r#""a.txt""#),
        "must be a JSON object, not a string",
    );
    assert_format_error(&fx.call("read", "null"), "must be a JSON object, not null");
}

#[test]
fn schema_failures_are_format_errors_naming_the_problem() {
    let fx = Fixture::new();
    let cases: &[(&str, &str, &str)] = &[
        ("bash", r#"{"cmd":"ls"}"#, "unknown field `cmd`"),
        ("bash", r#"{}"#, "missing field `command`"),
        (
            "bash",
            r#"{"command":5}"#,
            "invalid type: integer `5`, expected a string",
        ),
        (
            "bash",
            r#"{"command":"ls","timeout_ms":-1}"#,
            "invalid value: integer `-1`",
        ),
        (
            "bash",
            r#"{"command":"ls","background":"yes"}"#,
            "expected a boolean",
        ),
        (
            "read",
            r#"{"path":"a","offset":"3"}"#,
            "invalid type: string \"3\"",
        ),
        ("read", r#"{"file_path":"a"}"#, "unknown field `file_path`"),
        ("write", r#"{"path":"a"}"#, "missing field `content`"),
        (
            "edit",
            r#"{"path":"a","old_string":"x","new_string":"y","replace_all":1}"#,
            "expected a boolean",
        ),
        (
            "grep",
            r#"{"pattern":"x","include":"*.rs"}"#,
            "unknown field `include`",
        ),
        ("glob", r#"{"pattern":["*.rs"]}"#, "invalid type: sequence"),
        (
            "process",
            r#"{"action":"stop","id":"p1"}"#,
            "unknown variant `stop`",
        ),
        (
            "update_plan",
            r#"{"items":[{"id":"1","text":"t","status":"started"}]}"#,
            "unknown variant `started`",
        ),
        (
            "update_plan",
            r#"{"items":[{"id":"1","text":"t"}]}"#,
            "missing field `status`",
        ),
        (
            "update_plan",
            r#"{"items":[{"id":"1","text":"t","status":"done","owner":"me"}]}"#,
            "unknown field `owner`",
        ),
        (
            "update_plan",
            r#"{"items":{"id":"1"}}"#,
            "invalid type: map, expected a sequence",
        ),
    ];
    for (name, args, needle) in cases {
        let out = fx.call(name, args);
        assert_format_error(&out, needle);
        assert!(
            out.content.contains("Expected arguments:"),
            "{}",
            out.content
        );
    }
    assert!(
        !fx.ws.join("a").exists(),
        "a malformed write must not write"
    );
}

#[test]
fn ordinary_failures_are_not_format_errors() {
    let fx = Fixture::new();
    assert_tool_error(
        &fx.call("read", r#"{"path":"missing.txt"}"#),
        "file not found: missing.txt",
    );
    assert_tool_error(
        &fx.call("bash", r#"{"command":"exit 3"}"#),
        "[exit code: 3]",
    );
    assert_tool_error(&fx.call("grep", r#"{"pattern":"("}"#), "invalid regex");
    assert_tool_error(&fx.call("process", r#"{"action":"kill"}"#), "needs an id");
}

#[test]
fn rerunnable_tools() {
    for name in ["read", "grep", "glob"] {
        assert!(ToolSet::new(opts(false, true)).is_rerunnable(name));
    }
    for name in ["bash", "process", "write", "edit", "update_plan", "nope"] {
        assert!(!ToolSet::new(opts(false, true)).is_rerunnable(name));
    }
}

#[test]
fn update_plan_rules_are_ordinary_errors_without_a_plan_update() {
    let fx = Fixture::new();
    let item =
        |id: &str, text: &str, status: &str| json!({"id": id, "text": text, "status": status});
    let long = "x".repeat(501);
    let too_many: Vec<Value> = (0..51)
        .map(|i| item(&i.to_string(), "t", "pending"))
        .collect();
    let cases = [
        (
            json!([item("a", "t", "in_progress"), item("b", "t", "in_progress")]),
            "at most one item may be in_progress",
        ),
        (json!(too_many), "at most 50 items"),
        (
            json!([item("a", &long, "pending")]),
            "at most 500 characters",
        ),
        (json!([item("", "t", "pending")]), "must be non-empty"),
        (
            json!([item("a", "t", "pending"), item("a", "u", "done")]),
            "ids must be unique",
        ),
    ];
    for (items, needle) in cases {
        let out = fx.call_json("update_plan", json!({"items": items}));
        assert_tool_error(&out, needle);
        assert!(out.plan_update.is_none());
    }
    let out = fx.call_json(
        "update_plan",
        json!({"items": [item("a", "write it", "done"), item("b", "test it", "in_progress")], "note": "halfway"}),
    );
    assert_ok(&out);
    let (items, note) = out.plan_update.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].id, "b");
    assert_eq!(items[1].status, tinyagent::event::PlanStatus::InProgress);
    assert_eq!(note.as_deref(), Some("halfway"));
    assert!(
        out.content.contains("[x] a write it") && out.content.contains("[>] b test it"),
        "{}",
        out.content
    );
}

#[test]
fn no_plan_tool_without_the_option() {
    let fx = Fixture::with(opts(false, false));
    assert_format_error(
        &fx.call("update_plan", r#"{"items":[]}"#),
        "Unknown tool `update_plan`",
    );
}
