//! Native items in the server's order (see `event::NativeItems`): a reply's
//! items are read again from the body's text, and a request's body is
//! written with the recorded items' text in place of their trees.

use super::{Encoded, ModelReply};
use crate::event::{Message, NativeItems, items_at, send_exact};

/// Replaces the reply's native items, which its parser took from a tree
/// (members sorted), with the same items as `body` (the response's JSON
/// text) has them at `path`: the server's member order. Left as it is
/// when the body's items are not the same values (never, for a body the
/// parser read).
pub(crate) fn keep_server_order(reply: &mut ModelReply, body: &[u8], path: &[&str]) {
    let Some(native) = &reply.message.native else {
        return;
    };
    let key = path.last().copied().unwrap_or_default();
    let tree = native.value();
    let (Some(api), Ok(text)) = (tree["api"].as_str(), std::str::from_utf8(body)) else {
        return;
    };
    let Some(items) = items_at(text, path) else {
        return;
    };
    let ordered = NativeItems::from_items(api, key, &items);
    if ordered.value() == tree {
        reply.message.native = Some(ordered);
    }
}

/// The items that go back as they came: Anthropic's thinking blocks and
/// the Responses API's reasoning items.
const SENT_AS_RECEIVED: [&str; 3] = ["thinking", "redacted_thinking", "reasoning"];

/// `body` for a request of `messages`: each thinking block or reasoning
/// item the messages carry is sent as its recorded text, members in the
/// server's order.
pub(crate) fn encode(body: &serde_json::Value, messages: &[Message]) -> Encoded {
    let items: Vec<_> = messages
        .iter()
        .filter_map(|m| m.native.as_ref())
        .flat_map(NativeItems::items)
        .filter(|(v, _)| {
            v["type"]
                .as_str()
                .is_some_and(|t| SENT_AS_RECEIVED.contains(&t))
        })
        .collect();
    if items.is_empty() {
        return Encoded::json(body);
    }
    Encoded::from_bytes(send_exact(body, &items))
}
