//! Tests of the request bytes: they are the JSON tree printed, a warm cache
//! sends what a cold one would, and only the messages that changed are written
//! again.

use super::*;
use crate::event::ToolCall;
use crate::session::View;
use serde_json::json;

fn calls() -> Vec<ToolCall> {
    vec![
        ToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: "{\"path\":\"a \\\"b\\\"\"}".into(),
        },
        ToolCall {
            id: "c2".into(),
            name: "grep".into(),
            arguments: "not json".into(),
        },
    ]
}

fn request(messages: Vec<Message>, purpose: Purpose) -> ModelRequest {
    let tool = crate::tools::ToolSpec {
        name: "read".into(),
        description: "Reads a file.\nLines are numbered.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]}),
    };
    ModelRequest {
        messages: messages.into(),
        tools: vec![tool].into(),
        purpose,
        step: 3,
        cache_key: None,
    }
}

/// A step request of `view`.
fn of(view: &View) -> ModelRequest {
    ModelRequest {
        messages: view.clone(),
        ..request(Vec::new(), Purpose::Step)
    }
}

fn view() -> Vec<Message> {
    vec![
        Message::system("sys \u{1} tab\t"),
        Message::user("é ✓ \"quoted\""),
        Message::assistant("thinking", calls()),
        Message::tool("c1", "read", "line\r\nnext", false),
        Message::tool("c2", "grep", "", true),
        Message::assistant("", vec![]),
        Message::assistant("", calls()),
    ]
}

/// What is sent, parsed, and the tree printed: the same bytes.
fn check(cache: &mut WireCache, req: &ModelRequest, stream: bool) -> Value {
    let tree = request_tree("m", req, stream, None);
    let bytes = cache.request_bytes("m", req, stream, None);
    assert_eq!(String::from_utf8(bytes.to_vec()).unwrap(), tree.to_string());
    tree
}

#[test]
fn bytes_are_the_tree_printed_with_tools_stream_and_escapes() {
    for purpose in [Purpose::Step, Purpose::Summary] {
        for stream in [false, true] {
            let tree = check(&mut WireCache::default(), &request(view(), purpose), stream);
            assert_eq!(tree["stream"].as_bool(), stream.then_some(true));
            // The summarizer sees the run's tools and may call none.
            assert!(tree["tools"].is_array());
            assert_eq!(
                tree["tool_choice"].as_str(),
                (purpose == Purpose::Summary).then_some("none")
            );
            assert_eq!(tree["messages"][2]["content"], "thinking");
            assert_eq!(tree["messages"][5]["content"], "");
            assert!(tree["messages"][6]["content"].is_null());
            assert!(tree["messages"][5].get("tool_calls").is_none());
            assert_eq!(tree["messages"][4]["tool_call_id"], "c2");
        }
    }
}

#[test]
fn a_warm_cache_sends_the_same_bytes_as_a_cold_one_whatever_changed() {
    let mut cache = WireCache::default();
    let mut messages = view();
    check(&mut cache, &request(messages.clone(), Purpose::Step), false);
    // The view grows.
    messages.push(Message::user("more"));
    check(&mut cache, &request(messages.clone(), Purpose::Step), false);
    // A plan block appears after the system prompt, then changes.
    messages.insert(1, Message::user("[plan] one"));
    check(&mut cache, &request(messages.clone(), Purpose::Step), true);
    messages[1] = Message::user("[plan] two");
    check(&mut cache, &request(messages.clone(), Purpose::Step), false);
    // A message changes in place (same length, one byte).
    messages[2].content = "é ✓ \"quotes\"".into();
    let tree = check(&mut cache, &request(messages.clone(), Purpose::Step), false);
    assert_eq!(tree["messages"][2]["content"], "é ✓ \"quotes\"");
    // A message's calls change, its text not.
    messages[3].tool_calls[1].arguments = "{}".into();
    check(&mut cache, &request(messages.clone(), Purpose::Step), false);
    // Compaction: a new, shorter view; then an empty one.
    let compacted = vec![
        messages[0].clone(),
        Message::user("summary"),
        messages[8].clone(),
    ];
    check(&mut cache, &request(compacted, Purpose::Step), false);
    check(&mut cache, &request(Vec::new(), Purpose::Summary), false);
    check(&mut cache, &request(messages, Purpose::Step), false);
}

#[test]
fn a_view_of_the_same_line_reuses_its_bytes_and_every_other_change_is_sent() {
    let mut cache = WireCache::default();
    let mut view = View::from(view());
    check(&mut cache, &of(&view), false);
    // Appended to while nobody else holds it: the same line.
    let line = view.line();
    view.push(Message::user("more"));
    assert_eq!(view.line(), line);
    let tree = check(&mut cache, &of(&view), false);
    assert_eq!(tree["messages"][7]["content"], "more");
    // A change in place starts a new line, and is what is sent.
    view[1].content = "changed".into();
    assert_ne!(view.line(), line);
    let tree = check(&mut cache, &of(&view), false);
    assert_eq!(tree["messages"][1]["content"], "changed");
    // Two holders append different messages: the one that had to copy
    // is a line of its own; each is sent with its own message.
    let mut other = view.clone();
    check(&mut cache, &of(&view), false);
    view.push(Message::user("mine"));
    other.push(Message::user("theirs"));
    assert_ne!(view.line(), other.line());
    let tree = check(&mut cache, &of(&other), false);
    assert_eq!(tree["messages"][8]["content"], "theirs");
    let tree = check(&mut cache, &of(&view), false);
    assert_eq!(tree["messages"][8]["content"], "mine");
    let tree = check(&mut cache, &of(&other), false);
    assert_eq!(tree["messages"][8]["content"], "theirs");
    // Shorter than what was kept (a clone taken before the pushes).
    let short = View::from(view[..3].to_vec());
    check(&mut cache, &of(&short), false);
}

/// The body sent last is written on in place once nobody holds it (the
/// same buffer, only the new messages written), never while somebody
/// does (that body keeps its bytes), and every body is still exactly
/// the tree printed.
#[test]
fn a_body_nobody_holds_is_written_on_in_place_and_a_held_one_is_left_alone() {
    let mut cache = WireCache::default();
    let same = |bytes: &bytes::Bytes, v: &View| {
        let tree = request_tree("m", &of(v), false, None);
        assert_eq!(String::from_utf8(bytes.to_vec()).unwrap(), tree.to_string());
    };
    let mut view = View::from(view());
    let first = cache.request_bytes("m", &of(&view), false, None);
    same(&first, &view);
    let before = first.to_vec();
    // Still held: a new buffer, and the held body is untouched.
    view.push(Message::user("more"));
    let second = cache.request_bytes("m", &of(&view), false, None);
    same(&second, &view);
    assert_ne!(second.as_ptr(), first.as_ptr());
    assert_eq!(first.to_vec(), before);
    drop(first);
    // Let go of: the next body is the same buffer, grown.
    let at = second.as_ptr();
    drop(second);
    view.push(Message::user("again"));
    let third = cache.request_bytes("m", &of(&view), false, None);
    same(&third, &view);
    assert_eq!(third.as_ptr(), at);
    drop(third);
    // A change in place (a new line) is written out whole, and the
    // buffer is not reused for a view it no longer starts.
    view[1].content = "changed".into();
    let fourth = cache.request_bytes("m", &of(&view), false, None);
    same(&fourth, &view);
    drop(fourth);
    // Shorter than what was sent: written out whole too.
    let short = View::from(view[..2].to_vec());
    let fifth = cache.request_bytes("m", &of(&short), false, None);
    same(&fifth, &short);
}

#[test]
fn the_kept_rest_is_made_again_when_the_model_or_the_tools_change() {
    let mut cache = WireCache::default();
    let first = request(view(), Purpose::Step);
    check(&mut cache, &first, true);
    // The same shared tools: the kept bytes; then equal tools in a new list.
    let again = ModelRequest {
        tools: std::sync::Arc::clone(&first.tools),
        ..request(view(), Purpose::Step)
    };
    check(&mut cache, &again, true);
    check(&mut cache, &request(view(), Purpose::Step), true);
    // A tool's schema changes: what is sent says so.
    let mut tools = (*first.tools).clone();
    tools[0].parameters = json!({"type": "object", "required": ["changed"]});
    let changed = ModelRequest {
        tools: tools.into(),
        ..request(view(), Purpose::Step)
    };
    let tree = check(&mut cache, &changed, true);
    assert_eq!(
        tree["tools"][0]["function"]["parameters"]["required"][0],
        "changed"
    );
    // Another model name.
    let tree = request_tree("other", &changed, true, None);
    let bytes = cache.request_bytes("other", &changed, true, None);
    assert_eq!(String::from_utf8(bytes.to_vec()).unwrap(), tree.to_string());
    assert_eq!(tree["model"], "other");
}
