//! Tests of the Chat Completions client: the typed reply read agrees with the
//! JSON tree, calls and tool messages on the wire, ids made for a response
//! without them, and stream fragments assembled by index.

use super::super::Purpose;
use super::*;
use serde_json::json;

/// Every body the typed read takes, the tree reads the same; the
/// usual ones it takes, and anything unusual it leaves to the tree.
#[test]
fn the_typed_read_of_a_reply_agrees_with_the_tree_or_leaves_it_the_body() {
    let call = r#"{"id":"c9","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}"#;
    let usual = [
            format!(
                r#"{{"id":"x","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":null,"tool_calls":[{call},{call}]}},"finish_reason":"tool_calls"}}],"usage":{{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}}}"#
            ),
            r#"{"choices":[{"message":{"content":"hi \u00e9"}}]}"#.to_string(),
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"text":"b"},{"x":1}]}}],"usage":null,"error":null}"#.to_string(),
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":5,"function":{"name":"grep","arguments":{"pattern":"x"}}},{"function":{"name":"glob"}}]}}],"usage":{"prompt_tokens":null}}"#.to_string(),
            r#"{"choices":[{"message":{"tool_calls":null}}],"usage":{"prompt_tokens":3}}"#.to_string(),
        ];
    let unusual = [
        r#"{"error":{"message":"overloaded"},"choices":[{"message":{"content":"x"}}]}"#,
        r#"{"choices":[]}"#,
        r#"{"choices":[{"message":{"content":"x"}},{"message":7}]}"#,
        r#"{"choices":{"0":{"message":{"content":"x"}}}}"#,
        r#"{"choices":[{"message":null}]}"#,
        r#"{"choices":[[{"content":"by position"}]]}"#,
        r#"[null,[{"message":{"content":"by position"}}],null]"#,
        r#"{"choices":[{"message":{"content":"x"}}],"usage":[1,2]}"#,
        r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":1.5}}"#,
        r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":-1}}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"choices":[{"message":{"content":"b"}}]}"#,
        r#"{"choices":[{"message":{"content":7}}]}"#,
        r#"{"choices":[{"message":{"tool_calls":{"id":"c"}}}]}"#,
        r#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":3}}]}}]}"#,
        r#"{"choices":[{"message":{"tool_calls":[{"id":"c"}]}}]}"#,
        r#"{"choices":[{"message":{"content":"x"}}]} trailing"#,
        "not json",
    ];
    let tree = |body: &str| {
        serde_json::from_str::<Value>(body)
            .ok()
            .map(|v| parse_response(&v, 3))
    };
    for body in &usual {
        let typed = typed_reply(body.as_bytes(), 3);
        assert!(typed.is_some(), "{body}");
        let read = tree(body).and_then(Result::ok);
        assert!(read.is_some(), "{body}");
        assert_eq!(typed, read, "{body}");
    }
    for body in unusual {
        assert_eq!(typed_reply(body.as_bytes(), 3), None, "{body}");
    }
    // The tree refuses what is written by position, as it always did.
    for body in unusual.iter().filter(|b| b.contains("by position")) {
        assert!(matches!(tree(body), Some(Err(_))), "{body}");
    }
}

#[test]
fn assistant_with_calls_has_null_content_and_tool_messages_their_id() {
    let call = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: "{\"command\":\"ls\"}".into(),
    };
    let req = ModelRequest {
        messages: vec![
            Message::system("s"),
            Message::user("u"),
            Message::assistant("", vec![call]),
            Message::tool("c1", "bash", "out", false),
        ]
        .into(),
        tools: std::sync::Arc::default(),
        purpose: Purpose::Step,
        step: 2,
        cache_key: None,
    };
    let body = request_body("m", &req, false);
    assert_eq!(
        body,
        json!({"model": "m", "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "out"}]})
    );
}

#[test]
fn response_without_ids_gets_deterministic_ones() {
    let v = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"function": {"name": "read", "arguments": {"path": "a"}}}]}}]});
    let reply = parse_response(&v, 4).unwrap();
    assert_eq!(reply.message.tool_calls[0].id, "call_4_0");
    assert_eq!(reply.message.tool_calls[0].arguments, "{\"path\":\"a\"}");
    assert_eq!(reply.usage, Usage::default());
}

#[test]
fn stream_fragments_assemble_by_index() {
    let mut acc = StreamAssembler::default();
    let mut seen = String::new();
    let mut on_text = |s: &str| seen.push_str(s);
    let chunks = [
        r#"{"choices":[{"delta":{"role":"assistant","content":"Hel"}}]}"#,
        r#"{"choices":[{"delta":{"content":"lo"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"read","arguments":"{\"pa"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"bash","arguments":""}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"th\":1}"}}]}}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
    ];
    for c in chunks {
        assert!(!acc.push(c, &mut on_text).unwrap());
    }
    assert!(acc.push("[DONE]", &mut on_text).unwrap());
    let reply = acc.finish(1).unwrap();
    assert_eq!(seen, "Hello");
    assert_eq!(reply.message.content, "Hello");
    let calls: Vec<_> = reply
        .message
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![("a", "bash", ""), ("b", "read", "{\"path\":1}")]
    );
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 7,
            output_tokens: 3,
            ..Usage::default()
        }
    );
}
