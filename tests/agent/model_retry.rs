//! Retries against the loopback mock server: 429 with Retry-After, 5xx,
//! dropped connections, timeouts, and the error once retries run out.

use crate::support::mock::{MockReply, MockServer};
use std::time::{Duration, Instant};
use tinyagent::event::Message;
use tinyagent::model::{ModelError, ModelRequest, Provider, ProviderConfig, ProviderKind, Purpose};

fn config(server: &MockServer, stream: bool) -> ProviderConfig {
    ProviderConfig {
        base_url: Some(server.base_url()),
        retry_base: Duration::from_millis(2),
        request_timeout: Duration::from_secs(20),
        max_retries: 3,
        stream,
        ..ProviderConfig::new(ProviderKind::OpenAi, "test-model")
    }
}

fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![Message::system("s"), Message::user("go")].into(),
        tools: std::sync::Arc::default(),
        purpose: Purpose::Step,
        step: 1,
        cache_key: None,
    }
}

async fn run(provider: &Provider) -> Result<String, ModelError> {
    provider
        .complete(&request(), &mut |_: &str| {})
        .await
        .map(|r| r.message.content)
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let server = MockServer::start(vec![MockReply::rate_limited("1"), MockReply::text("ok")]);
    let provider = Provider::new(config(&server, false)).unwrap();
    let started = Instant::now();
    assert_eq!(run(&provider).await.unwrap(), "ok");
    // The backoff alone would be a few ms: waiting a second means Retry-After was used.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.request_count(), 2);
    // The retried request is the same request.
    let bodies = server.requests();
    assert_eq!(bodies[0], bodies[1]);
    server.assert_no_violations();
}

#[tokio::test]
async fn server_errors_twice_then_success() {
    for stream in [false, true] {
        let server = MockServer::start(vec![
            MockReply::status(500),
            MockReply::status(503),
            MockReply::text("recovered"),
        ]);
        let provider = Provider::new(config(&server, stream)).unwrap();
        assert_eq!(
            run(&provider).await.unwrap(),
            "recovered",
            "stream={stream}"
        );
        assert_eq!(server.request_count(), 3);
    }
}

#[tokio::test]
async fn dropped_connection_is_retried() {
    for stream in [false, true] {
        let server = MockServer::start(vec![
            MockReply::drop_connection(),
            MockReply::drop_connection(),
            MockReply::text("after drops"),
        ]);
        let provider = Provider::new(config(&server, stream)).unwrap();
        assert_eq!(
            run(&provider).await.unwrap(),
            "after drops",
            "stream={stream}"
        );
        assert_eq!(server.request_count(), 3);
    }
}

#[tokio::test]
async fn reply_cut_halfway_is_retried() {
    for stream in [false, true] {
        let server = MockServer::start(vec![
            MockReply::tool_call("bash", serde_json::json!({"command": "echo one two three"}))
                .with_content("a longer text so that half of it is a real prefix")
                .cut(),
            MockReply::text("whole"),
        ]);
        let provider = Provider::new(config(&server, stream)).unwrap();
        assert_eq!(run(&provider).await.unwrap(), "whole", "stream={stream}");
        assert_eq!(server.request_count(), 2);
    }
}

#[tokio::test]
async fn timeout_is_retried() {
    let server = MockServer::start(vec![
        MockReply::text("too late").delayed(Duration::from_secs(3)),
        MockReply::text("in time"),
    ]);
    let cfg = ProviderConfig {
        request_timeout: Duration::from_millis(300),
        ..config(&server, false)
    };
    let provider = Provider::new(cfg).unwrap();
    assert_eq!(run(&provider).await.unwrap(), "in time");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn exhausted_retries_name_the_attempts_not_the_key() {
    let secret = "sk-test-DO-NOT-SHOW-42";
    let server = MockServer::start_with(vec![], move |_| MockReply::Status {
        code: 502,
        retry_after: None,
        body: format!("upstream rejected key {secret}"),
    });
    let cfg = ProviderConfig {
        api_key: Some(secret.into()),
        max_retries: 2,
        ..config(&server, false)
    };
    let provider = Provider::new(cfg).unwrap();
    let err = run(&provider).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "gave up after 3 attempts: the model server answered HTTP 502 Bad Gateway"
        ),
        "{text}"
    );
    assert!(!text.contains(secret), "{text}");
    assert!(!format!("{err:?}").contains(secret));
    assert!(matches!(err, ModelError::Exhausted { attempts: 3, .. }));
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn unreachable_server_fails_with_a_clear_error() {
    // Bind then close a port so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = ProviderConfig {
        base_url: Some(format!("http://127.0.0.1:{port}/v1")),
        retry_base: Duration::from_millis(1),
        max_retries: 1,
        ..ProviderConfig::new(ProviderKind::OpenAi, "m")
    };
    let provider = Provider::new(cfg).unwrap();
    let err = run(&provider).await.unwrap_err().to_string();
    assert!(
        err.starts_with("gave up after 2 attempts: could not reach the model server"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let server = MockServer::start(vec![MockReply::status(400), MockReply::text("never")]);
    let provider = Provider::new(config(&server, false)).unwrap();
    let err = run(&provider).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Status { status: 400, .. }),
        "{err}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn empty_choices_is_a_bad_response_not_retried() {
    let server = MockServer::start(vec![MockReply::json(serde_json::json!({"choices": []}))]);
    let provider = Provider::new(config(&server, false)).unwrap();
    let err = run(&provider).await.unwrap_err();
    assert!(matches!(err, ModelError::BadResponse(_)), "{err}");
    assert_eq!(server.request_count(), 1);
}

/// A refused connection is retried for at most 5 s in all, whatever the
/// retry settings say (here 10 retries from 1 s: over a minute).
#[tokio::test]
async fn a_refused_connection_is_given_up_on_within_five_seconds() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let provider = Provider::new(ProviderConfig {
        base_url: Some(format!("http://127.0.0.1:{port}/v1")),
        retry_base: Duration::from_secs(1),
        max_retries: 10,
        ..ProviderConfig::new(ProviderKind::OpenAi, "test-model")
    })
    .unwrap();
    let started = Instant::now();
    let e = run(&provider).await.unwrap_err();
    let took = started.elapsed();
    assert!(e.is_refused(), "{e}");
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_millis(6500),
        "{took:?}: {e}"
    );
}

/// Anthropic's 529 (overloaded) is waited for and retried; an `error`
/// event inside an OpenAI stream is retried as the server error it is.
#[tokio::test]
async fn anthropic_529_and_an_error_event_in_a_stream_are_retried() {
    let overloaded = MockReply::Status {
        code: 529,
        retry_after: Some("1".into()),
        body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            .into(),
    };
    let server = MockServer::start(vec![
        overloaded,
        MockReply::json(serde_json::json!({
            "id": "m", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}})),
    ]);
    let provider = Provider::new(ProviderConfig {
        base_url: Some(server.root_url()),
        api_key: Some("sk-ant-test".into()),
        retry_base: Duration::from_millis(2),
        max_retries: 3,
        ..ProviderConfig::new(ProviderKind::Anthropic, "claude")
    })
    .unwrap();
    let started = Instant::now();
    assert_eq!(run(&provider).await.unwrap(), "ok");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After honoured"
    );
    assert_eq!(server.request_count(), 2);

    let e: serde_json::Value = serde_json::json!({"error": {"type": "server_error",
        "message": "The server had an error while processing your request."}});
    let server = MockServer::start(vec![
        MockReply::Func(std::sync::Arc::new(move |_| MockReply::Status {
            code: 200,
            retry_after: None,
            body: format!("data: {e}\n\n"),
        })),
        MockReply::text("ok"),
    ]);
    let provider = Provider::new(config(&server, true)).unwrap();
    assert_eq!(run(&provider).await.unwrap(), "ok");
    assert_eq!(server.request_count(), 2);
}
