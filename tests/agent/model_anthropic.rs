//! The Anthropic provider against the loopback server: headers, request
//! shape (system top-level, tool_use / tool_result blocks, merged roles) and
//! reply parsing.

use crate::support::mock::{MockReply, MockServer};
use serde_json::json;
use std::time::Duration;
use tinyagent::event::{Message, ToolCall, Usage};
use tinyagent::model::{ModelRequest, Provider, ProviderConfig, ProviderKind, Purpose};
use tinyagent::tools::ToolSpec;

fn anthropic_reply() -> MockReply {
    MockReply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "a.txt"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 50, "output_tokens": 12, "cache_read_input_tokens": 8,
                  "service_tier": "standard"}
    }))
}

fn request(purpose: Purpose) -> ModelRequest {
    ModelRequest {
        messages: vec![
            Message::system("sys prompt"),
            Message::user("task"),
            Message::assistant(
                "",
                vec![
                    ToolCall {
                        id: "t1".into(),
                        name: "bash".into(),
                        arguments: "{\"command\":\"ls\"}".into(),
                    },
                    ToolCall {
                        id: "t2".into(),
                        name: "read".into(),
                        arguments: "{oops".into(),
                    },
                ],
            ),
            Message::tool("t1", "bash", "a.txt", false),
            Message::tool("t2", "read", "arguments are not valid JSON", true),
        ]
        .into(),
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]
        .into(),
        purpose,
        step: 2,
        cache_key: None,
    }
}

#[tokio::test]
async fn request_shape_headers_and_reply() {
    let secret = "sk-ant-test-SECRET-777";
    let server = MockServer::start(vec![anthropic_reply(), anthropic_reply()]);
    let cfg = ProviderConfig {
        base_url: Some(server.root_url()),
        api_key: Some(secret.into()),
        retry_base: Duration::from_millis(2),
        ..ProviderConfig::new(ProviderKind::Anthropic, "claude-test")
    };
    let provider = Provider::new(cfg).unwrap();
    assert!(!format!("{provider:?}").contains(secret));
    let mut seen = String::new();
    let reply = provider
        .complete(&request(Purpose::Step), &mut |s: &str| seen.push_str(s))
        .await
        .unwrap();
    assert_eq!(seen, "Reading it.");
    assert_eq!(
        reply.message,
        Message::assistant(
            "Reading it.",
            vec![ToolCall {
                id: "toolu_9".into(),
                name: "read".into(),
                arguments: "{\"path\":\"a.txt\"}".into()
            }]
        )
    );
    assert_eq!(
        reply.usage,
        // Cache reads are counted apart, not added to input.
        Usage {
            input_tokens: 50,
            output_tokens: 12,
            cached_input_tokens: 8,
            ..Usage::default()
        }
    );

    provider
        .complete(&request(Purpose::Summary), &mut |_: &str| {})
        .await
        .unwrap();

    let recorded = server.recorded();
    assert_eq!(recorded[0].path, "/v1/messages");
    assert_eq!(recorded[0].header("x-api-key"), Some(secret));
    assert_eq!(recorded[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded[0].header("authorization"), None);
    assert_eq!(
        recorded[0].body,
        json!({
            "model": "claude-test",
            "max_tokens": 8192,
            "system": [{"type": "text", "text": "sys prompt",
                "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "read", "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "task",
                    "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {"raw_arguments": "{oops"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2",
                     "content": "arguments are not valid JSON", "is_error": true,
                     "cache_control": {"type": "ephemeral"}}]}
            ]
        })
    );
    // The summarizer: the same prefix, the run's tools, none callable.
    assert_eq!(recorded[1].body["tool_choice"], json!({"type": "none"}));
    assert_eq!(recorded[1].body["tools"], recorded[0].body["tools"]);
    assert_eq!(recorded[1].body["messages"], recorded[0].body["messages"]);
    server.assert_no_violations();
}

#[tokio::test]
async fn overloaded_is_retried() {
    let server = MockServer::start(vec![MockReply::status(529), anthropic_reply()]);
    let cfg = ProviderConfig {
        base_url: Some(server.root_url()),
        retry_base: Duration::from_millis(2),
        ..ProviderConfig::new(ProviderKind::Anthropic, "claude-test")
    };
    let provider = Provider::new(cfg).unwrap();
    let reply = provider
        .complete(&request(Purpose::Step), &mut |_: &str| {})
        .await
        .unwrap();
    assert_eq!(reply.message.tool_calls.len(), 1);
    assert_eq!(server.request_count(), 2);
}
