//! The OpenAI-compatible provider against the loopback mock server: request
//! shape, plain and streamed replies, auth header, summary requests.

use crate::support::mock::{MockReply, MockServer};
use serde_json::json;
use std::time::Duration;
use tinyagent::event::{Message, StopReason, ToolCall, Usage};
use tinyagent::model::{ModelReply, ModelRequest, Provider, ProviderConfig, ProviderKind, Purpose};
use tinyagent::tools::ToolSpec;

fn config(server: &MockServer) -> ProviderConfig {
    ProviderConfig {
        base_url: Some(format!("{}/", server.base_url())),
        retry_base: Duration::from_millis(2),
        request_timeout: Duration::from_secs(20),
        ..ProviderConfig::new(ProviderKind::OpenAi, "test-model")
    }
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "bash".into(),
        description: "Run a command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }]
}

/// A request in the middle of a run: one earlier call, answered.
fn request(purpose: Purpose) -> ModelRequest {
    ModelRequest {
        messages: vec![
            Message::system("You are a test."),
            Message::user("list files"),
            Message::assistant(
                "",
                vec![ToolCall {
                    id: "call_a".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"ls\"}".into(),
                }],
            ),
            Message::tool("call_a", "bash", "a.txt\n", false),
        ]
        .into(),
        tools: tools().into(),
        purpose,
        step: 2,
        cache_key: None,
    }
}

async fn complete(provider: &Provider, req: &ModelRequest) -> (ModelReply, Vec<String>) {
    let mut pieces = Vec::new();
    let reply = provider
        .complete(req, &mut |s: &str| pieces.push(s.to_string()))
        .await
        .expect("completion");
    (reply, pieces)
}

#[tokio::test]
async fn plain_reply_with_tool_calls_and_unknown_fields() {
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("bash", json!({"command": "cat a.txt"})),
            ("read", json!({"path": "b.txt", "limit": 5})),
        ])
        .with_content("Looking.")
        .with_ids(&["x1", "x2"])
        .with_usage(123, 45),
    ]);
    let provider = Provider::new(config(&server)).unwrap();
    let (reply, pieces) = complete(&provider, &request(Purpose::Step)).await;

    assert_eq!(
        reply,
        ModelReply {
            message: Message::assistant(
                "Looking.",
                vec![
                    ToolCall {
                        id: "x1".into(),
                        name: "bash".into(),
                        arguments: "{\"command\":\"cat a.txt\"}".into()
                    },
                    ToolCall {
                        id: "x2".into(),
                        name: "read".into(),
                        arguments: "{\"limit\":5,\"path\":\"b.txt\"}".into()
                    },
                ]
            ),
            usage: Usage {
                input_tokens: 123,
                output_tokens: 45,
                ..Usage::default()
            },
            stop_reason: StopReason::ToolCalls,
            stop_reason_raw: Some("tool_calls".into()),
        }
    );
    assert_eq!(pieces, vec!["Looking."]);

    let recorded = server.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path, "/v1/chat/completions");
    assert_eq!(
        recorded[0].body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "list files"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_a",
                    "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
                {"role": "tool", "tool_call_id": "call_a", "content": "a.txt\n"}
            ],
            "tools": [{"type": "function", "function": {"name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
        })
    );
    server.assert_no_violations();
}

#[tokio::test]
async fn streamed_reply_assembles_text_and_argument_fragments() {
    let long_args = json!({"command": "grep -rn 'needle' src/ | head -n 20", "timeout_ms": 5000});
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            ("bash", long_args.clone()),
            ("glob", json!({"pattern": "**/*.rs"})),
        ])
        .with_content("Searching the tree — ünïcode too.")
        .with_usage(900, 80),
    ]);
    let provider = Provider::new(ProviderConfig {
        stream: true,
        ..config(&server)
    })
    .unwrap();
    let (reply, pieces) = complete(&provider, &request(Purpose::Step)).await;

    assert!(
        pieces.len() > 1,
        "text should arrive in several pieces: {pieces:?}"
    );
    assert_eq!(pieces.concat(), "Searching the tree — ünïcode too.");
    assert_eq!(reply.message.content, "Searching the tree — ünïcode too.");
    assert_eq!(
        reply.message.tool_calls,
        vec![
            ToolCall {
                id: "call_1_0".into(),
                name: "bash".into(),
                arguments: long_args.to_string()
            },
            ToolCall {
                id: "call_1_1".into(),
                name: "glob".into(),
                arguments: "{\"pattern\":\"**/*.rs\"}".into()
            },
        ]
    );
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 900,
            output_tokens: 80,
            ..Usage::default()
        }
    );

    let body = &server.requests()[0];
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    server.assert_no_violations();
}

#[tokio::test]
async fn missing_usage_counts_as_zero() {
    let server = MockServer::start(vec![MockReply::text("hi").without_usage()]);
    let provider = Provider::new(config(&server)).unwrap();
    let (reply, _) = complete(&provider, &request(Purpose::Step)).await;
    assert_eq!(reply.message, Message::assistant("hi", vec![]));
    assert_eq!(reply.usage, Usage::default());
}

#[tokio::test]
async fn summary_request_keeps_the_tools_and_calls_none() {
    let server = MockServer::start(vec![MockReply::text("the summary")]);
    let provider = Provider::new(config(&server)).unwrap();
    let (reply, _) = complete(&provider, &request(Purpose::Summary)).await;
    assert_eq!(reply.message.content, "the summary");
    let body = &server.requests()[0];
    // The run's tools, so the prefix is the step's; none may be called.
    assert!(body["tools"].is_array(), "{body}");
    assert_eq!(body["tool_choice"], "none", "{body}");
    server.assert_no_violations();
}

#[tokio::test]
async fn authorization_only_with_a_key_and_key_never_shown() {
    let secret = "sk-test-VERYSECRET-0123456789";
    let server = MockServer::start(vec![
        MockReply::text("no key"),
        MockReply::text("with key"),
        MockReply::Status {
            code: 401,
            retry_after: None,
            body: format!("{{\"error\":{{\"message\":\"Incorrect API key provided: {secret}\"}}}}"),
        },
    ]);
    let req = request(Purpose::Step);

    let keyless = Provider::new(config(&server)).unwrap();
    complete(&keyless, &req).await;

    let cfg = ProviderConfig {
        api_key: Some(secret.into()),
        ..config(&server)
    };
    assert!(!format!("{cfg:?}").contains(secret));
    let keyed = Provider::new(cfg).unwrap();
    assert!(!format!("{keyed:?}").contains(secret));
    complete(&keyed, &req).await;

    let err = keyed.complete(&req, &mut |_: &str| {}).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("401"), "{shown}");
    assert!(!shown.contains(secret), "the key leaked: {shown}");
    assert!(!err.is_retryable());
    assert_eq!(server.request_count(), 3, "a 401 must not be retried");

    let recorded = server.recorded();
    assert_eq!(recorded[0].header("authorization"), None);
    assert_eq!(
        recorded[1].header("authorization").map(str::to_string),
        Some(format!("Bearer {secret}"))
    );
}

#[tokio::test]
async fn bad_settings_are_refused_up_front() {
    let mut cfg = ProviderConfig::new(ProviderKind::OpenAi, "");
    let err = Provider::new(cfg.clone()).unwrap_err().to_string();
    assert!(err.contains("model name is required"), "{err}");
    cfg.model = "m".into();
    cfg.base_url = Some("localhost:8080".into());
    let err = Provider::new(cfg).unwrap_err().to_string();
    assert!(err.contains("http://"), "{err}");
}
