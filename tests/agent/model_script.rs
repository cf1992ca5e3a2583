//! The offline script provider: turn choice by step, raw-string arguments,
//! summaries, the final message past the last turn, and bad script files.

use serde_json::json;
use std::path::Path;
use tinyagent::event::{Message, StopReason, ToolCall, Usage};
use tinyagent::model::{ModelReply, ModelRequest, Provider, ProviderConfig, ProviderKind, Purpose};

fn provider_for(dir: &Path, script: &str) -> Result<Provider, tinyagent::model::ModelError> {
    let path = dir.join("script.json");
    std::fs::write(&path, script).unwrap();
    Provider::new(ProviderConfig {
        script: Some(path),
        ..ProviderConfig::new(ProviderKind::Script, "script")
    })
}

fn request(step: u64, purpose: Purpose) -> ModelRequest {
    ModelRequest {
        messages: vec![Message::system("sys"), Message::user("do the task please")].into(),
        tools: std::sync::Arc::default(),
        purpose,
        step,
        cache_key: None,
    }
}

async fn ask(p: &Provider, step: u64, purpose: Purpose) -> ModelReply {
    p.complete(&request(step, purpose), &mut |_: &str| {})
        .await
        .unwrap()
}

const SCRIPT: &str = r#"{
  "turns": [
    {"content": "first", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
     "usage": {"input_tokens": 100, "output_tokens": 7}},
    {"tool_calls": [{"name": "write", "arguments": "{\"path\": \"a.txt\", broken"},
                    {"name": "read", "arguments": {"path": "a.txt"}}]}
  ],
  "summary": "scripted summary"
}"#;

#[tokio::test]
async fn turns_are_chosen_by_step() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider_for(dir.path(), SCRIPT).unwrap();

    // Asking for step 2 first (as a resumed run would) gives the second turn.
    let second = ask(&p, 2, Purpose::Step).await;
    assert_eq!(
        second.message,
        Message::assistant(
            "",
            vec![
                ToolCall {
                    id: "call_2_0".into(),
                    name: "write".into(),
                    arguments: "{\"path\": \"a.txt\", broken".into()
                },
                ToolCall {
                    id: "call_2_1".into(),
                    name: "read".into(),
                    arguments: "{\"path\":\"a.txt\"}".into()
                },
            ]
        )
    );
    // No usage in the turn: chars/4 estimates, never zero.
    let input_chars = "sys".len() + "do the task please".len();
    assert_eq!(second.usage.input_tokens, (input_chars as u64).div_ceil(4));
    assert!(second.usage.output_tokens > 0);

    let first = ask(&p, 1, Purpose::Step).await;
    assert_eq!(
        first,
        ModelReply {
            message: Message::assistant(
                "first",
                vec![ToolCall {
                    id: "call_1_0".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"ls\"}".into()
                }]
            ),
            usage: Usage {
                input_tokens: 100,
                output_tokens: 7,
                ..Usage::default()
            },
            stop_reason: StopReason::ToolCalls,
            stop_reason_raw: None,
        }
    );

    let past = ask(&p, 3, Purpose::Step).await;
    assert!(past.message.tool_calls.is_empty());
    assert!(!past.message.content.is_empty());

    let summary = ask(&p, 3, Purpose::Summary).await;
    assert_eq!(
        summary.message,
        Message::assistant("scripted summary", vec![])
    );
}

#[tokio::test]
async fn default_summary_is_built_from_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider_for(dir.path(), r#"{"turns": []}"#).unwrap();
    let summary = ask(&p, 1, Purpose::Summary).await;
    assert!(
        summary.message.content.contains("do the task please"),
        "{}",
        summary.message.content
    );
    assert!(summary.message.tool_calls.is_empty());
}

#[tokio::test]
async fn text_is_passed_to_on_text() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider_for(dir.path(), SCRIPT).unwrap();
    let mut seen = String::new();
    p.complete(&request(1, Purpose::Step), &mut |s: &str| seen.push_str(s))
        .await
        .unwrap();
    assert_eq!(seen, "first");
}

#[test]
fn bad_scripts_are_named_precisely() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("{\"turns\": [", vec!["EOF", "line 1"]),
        (
            "{\"turns\": [{\"tool_calls\": [{\"arguments\": {}}]}]}",
            vec!["missing field `name`", "line 1 column"],
        ),
        (
            "{\"turns\": [],\n \"sumary\": \"x\"}",
            vec!["unknown field `sumary`", "line 2"],
        ),
        (
            &json!({"turns": [{}, {"tool_calls": [{"name": "bash", "arguments": [1]}]}]})
                .to_string(),
            vec!["turns[1].tool_calls[0].arguments"],
        ),
        (
            "{\"turns\": [{\"tool_calls\": [{\"name\": \" \"}]}]}",
            vec!["turns[0].tool_calls[0].name"],
        ),
    ];
    for (text, wanted) in cases {
        let err = provider_for(dir.path(), text).unwrap_err().to_string();
        assert!(err.contains("script.json"), "{err}");
        for w in wanted {
            assert!(err.contains(w), "{err:?} should mention {w:?}");
        }
    }

    let missing = Provider::new(ProviderConfig {
        script: Some(dir.path().join("nope.json")),
        ..ProviderConfig::new(ProviderKind::Script, "script")
    })
    .unwrap_err()
    .to_string();
    assert!(
        missing.contains("nope.json") && missing.contains("cannot read"),
        "{missing}"
    );

    let none = Provider::new(ProviderConfig::new(ProviderKind::Script, "script")).unwrap_err();
    assert!(none.to_string().contains("--script"), "{none}");
}
