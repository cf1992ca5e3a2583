//! The mock server's request checks catch what they are meant to catch
//! (a checker that never fails would prove nothing).

use crate::support::mock::checks::{check_anthropic, check_chat};
use crate::support::mock::{MockReply, MockServer};
use serde_json::{Value, json};

fn call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}})
}

fn chat(messages: Value) -> Value {
    json!({"model": "m", "messages": messages})
}

#[test]
fn good_history_passes() {
    let body = chat(json!([
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "user", "content": "[Resumed] ..."},
        {"role": "assistant", "content": "done"}
    ]));
    assert_eq!(check_chat(&body), Vec::<String>::new());
}

#[test]
fn broken_histories_are_reported() {
    let cases = [
        // A call never answered.
        json!([{"role": "user", "content": "u"},
               {"role": "assistant", "content": null, "tool_calls": [call("a")]},
               {"role": "user", "content": "next"}]),
        // Answers out of order.
        json!([{"role": "user", "content": "u"},
               {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
               {"role": "tool", "tool_call_id": "b", "content": "2"},
               {"role": "tool", "tool_call_id": "a", "content": "1"}]),
        // Answered twice.
        json!([{"role": "user", "content": "u"},
               {"role": "assistant", "content": null, "tool_calls": [call("a")]},
               {"role": "tool", "tool_call_id": "a", "content": "1"},
               {"role": "tool", "tool_call_id": "a", "content": "1"}]),
        // A result without its call.
        json!([{"role": "user", "content": "u"},
               {"role": "tool", "tool_call_id": "zz", "content": "?"}]),
        // Same id used by two calls.
        json!([{"role": "user", "content": "u"},
               {"role": "assistant", "content": null, "tool_calls": [call("a")]},
               {"role": "tool", "tool_call_id": "a", "content": "1"},
               {"role": "assistant", "content": null, "tool_calls": [call("a")]},
               {"role": "tool", "tool_call_id": "a", "content": "1"}]),
        // A non-standard message field.
        json!([{"role": "user", "content": "u", "is_error": false}]),
    ];
    for (i, messages) in cases.into_iter().enumerate() {
        assert!(
            !check_chat(&chat(messages)).is_empty(),
            "case {i} passed the checks"
        );
    }
    let empty_tools =
        json!({"model": "m", "messages": [{"role": "user", "content": "u"}], "tools": []});
    assert!(!check_chat(&empty_tools).is_empty());
    let odd_field =
        json!({"model": "m", "messages": [{"role": "user", "content": "u"}], "think": true});
    assert!(!check_chat(&odd_field).is_empty());
}

#[test]
fn anthropic_pairing_is_checked() {
    let good = json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "u"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]}]});
    assert_eq!(check_anthropic(&good), Vec::<String>::new());
    let bad = json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "u"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "no result"}]}]});
    assert!(!check_anthropic(&bad).is_empty());
}

#[test]
fn server_records_violations_of_real_requests_and_answers_in_order() {
    let server = MockServer::start_with(vec![MockReply::text("first"), MockReply::echo()], |req| {
        MockReply::text(&format!("fallback {}", req.index))
    });
    // Not an agent bug: this test sends the bad request itself, to see it
    // recorded (and dropping the server then checks there was one).
    server.expect_violations("this test sends a bad request on purpose");
    let post = |body: Value| -> Value {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        rt.block_on(async {
            reqwest::Client::new()
                .post(format!("{}/chat/completions", server.base_url()))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let content = |v: &Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let good = chat(json!([{"role": "user", "content": "hello"}]));
    let bad = chat(
        json!([{"role": "user", "content": "u"}, {"role": "tool", "tool_call_id": "x", "content": "?"}]),
    );
    assert_eq!(content(&post(good.clone())), "first");
    assert_eq!(content(&post(good)), "hello");
    assert_eq!(content(&post(bad.clone())), "fallback 3");
    assert_eq!(server.requests()[2], bad);
    let violations = server.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].starts_with("request 3: messages[1]: tool message"),
        "{violations:?}"
    );
}

/// Posts one Chat Completions body to `server` and waits for the answer.
fn post_once(server: &MockServer, body: &Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", server.base_url()))
            .json(body)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
    });
}

#[test]
#[should_panic(expected = "the mock server saw bad requests")]
fn dropping_a_server_that_saw_a_bad_request_fails_the_test() {
    let server = MockServer::start(vec![]);
    post_once(
        &server,
        &chat(json!([{"role": "tool", "tool_call_id": "x", "content": "?"}])),
    );
    // No assert_no_violations: the drop at the end of the scope checks.
}

#[test]
#[should_panic(expected = "expected bad requests (a known bug) but saw none")]
fn an_expected_violation_that_does_not_happen_fails_the_test() {
    let server = MockServer::start(vec![]);
    server.expect_violations("a known bug");
    post_once(&server, &chat(json!([{"role": "user", "content": "fine"}])));
}

/// One request on `conn` and its whole answer; the answer's status line.
fn exchange(conn: &mut std::net::TcpStream, body: &str) -> String {
    use std::io::{Read, Write};
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        conn.read_exact(&mut byte).unwrap();
        got.push(byte[0]);
    }
    let head = String::from_utf8(got).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a content-length");
    let mut rest = vec![0u8; len];
    conn.read_exact(&mut rest).unwrap();
    head.lines().next().unwrap_or_default().to_string()
}

/// The server's busy time (what the step bench takes off the agent's) is
/// its own work on each request, a delayed answer's wait included, and not
/// the client's pause before its next request on the same connection.
#[test]
fn the_servers_busy_time_is_its_work_on_requests_not_the_clients_pauses() {
    use std::time::Duration;
    let delay = Duration::from_millis(150);
    let pause = Duration::from_millis(400);
    let server = MockServer::start(vec![
        MockReply::text("a").delayed(delay),
        MockReply::text("b"),
    ]);
    let addr = server.root_url().trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let body = chat(json!([{"role": "user", "content": "u"}])).to_string();
    // The server adds a request's time once its last write returns, a
    // moment after the client may have read the answer.
    let settled = |above: Duration| {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while server.busy() <= above && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        server.busy()
    };
    assert_eq!(exchange(&mut conn, &body), "HTTP/1.1 200 OK");
    let first = settled(Duration::ZERO);
    assert!(first >= delay, "the delayed answer counts: {first:?}");
    std::thread::sleep(pause);
    assert_eq!(exchange(&mut conn, &body), "HTTP/1.1 200 OK");
    let both = settled(first);
    assert!(
        both > first,
        "the second request counts too: {first:?} then {both:?}"
    );
    assert!(
        both < delay + pause,
        "the client's pause is not the server's: {both:?}"
    );
    assert_eq!(server.request_count(), 2);
}

/// The server answers before it parses a request, so it tells a streamed
/// request from a plain one by the body's bytes: its answer is a stream
/// exactly when the parsed body asks for one, however the key is written,
/// and the word in a message's text is not the key.
#[test]
fn the_answer_is_streamed_exactly_when_the_parsed_body_asks_for_it() {
    let server = MockServer::start(vec![]);
    let user = r#""messages":[{"role":"user","content":"u"}]"#;
    let cases = [
        (format!(r#"{{"model":"m",{user}}}"#), false),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"a \"stream\": true"}]}"#
                .to_string(),
            false,
        ),
        (format!(r#"{{"model":"m","stream":false,{user}}}"#), false),
        (format!(r#"{{"model":"m","stream":true,{user}}}"#), true),
        (
            format!(r#"{{"model":"m","str\u0065am":true,{user}}}"#),
            true,
        ),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    for (body, streamed) in &cases {
        let kind = rt.block_on(async {
            let answer = client
                .post(format!("{}/chat/completions", server.base_url()))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let kind = answer.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            answer.bytes().await.unwrap();
            kind
        });
        assert_eq!(kind == "text/event-stream", *streamed, "{body}: {kind}");
    }
    let recorded = server.recorded();
    assert_eq!(recorded.len(), cases.len());
    for (r, (body, streamed)) in recorded.iter().zip(&cases) {
        assert_eq!(r.is_stream(), *streamed, "{body}");
    }
    server.assert_no_violations();
}
