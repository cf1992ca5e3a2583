//! [`NativeItems`]: what a provider produced that it needs back, kept as the
//! JSON text it arrived as, not as a tree.
//!
//! A `serde_json::Value` object sorts its members, so a tree would send a
//! `thinking` block or a `reasoning` item back with its members in another
//! order than the server's. The text keeps the server's member order and
//! values; what is normalised is only what JSON does not distinguish: the
//! whitespace between tokens is dropped (a record stays one line) and
//! strings are written with serde_json's escapes (`"\u00e9"` comes back as
//! `"é"`, the same string).
//!
//! Reading a log goes through serde's buffered content (the record's
//! `data` is a flattened member), so the items are read by a visitor that
//! writes JSON text as it is given the value ([`transcode`]): maps in the
//! order they were written, never through a sorted tree.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt::{self, Write as _};

/// A `message.native` object as JSON text, members in the order received
/// (see the module's text). Compared by its text.
#[derive(Clone)]
pub struct NativeItems(Box<RawValue>);

impl NativeItems {
    /// From a tree (members in the tree's order): for what tinyagent
    /// assembled itself, such as a streamed reply's blocks.
    pub fn from_value(v: &Value) -> NativeItems {
        let mut text = String::new();
        // Writing a tree's text cannot fail.
        let _ = transcode(v, &mut text);
        NativeItems::from_text(text)
    }

    /// `{"api": <api>, <key>: [<items>...]}` with each item's text as given
    /// (as [`normalised`] made it).
    pub fn from_items(api: &str, key: &str, items: &[Box<RawValue>]) -> NativeItems {
        let mut text = String::from("{\"api\":");
        push_str_json(&mut text, api);
        text.push(',');
        push_str_json(&mut text, key);
        text.push_str(":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(item.get());
        }
        text.push_str("]}");
        NativeItems::from_text(text)
    }

    /// Text [`transcode`] wrote, which is JSON.
    fn from_text(text: String) -> NativeItems {
        // Always JSON (written from a parsed value); `null` otherwise.
        NativeItems(RawValue::from_string(text).unwrap_or_default())
    }

    /// The JSON text, as recorded and as sent back.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The items as a tree (members sorted): for reading them, not for
    /// sending them.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.get()).unwrap_or(Value::Null)
    }

    /// Whether the items came from `api` (their `api` member).
    pub fn is_from(&self, api: &str) -> bool {
        self.member("api")
            .and_then(|a| serde_json::from_str::<String>(a.get()).ok())
            .is_some_and(|a| a == api)
    }

    /// The text of member `key`, when the items are an object that has it.
    pub fn member(&self, key: &str) -> Option<&RawValue> {
        let members: std::collections::BTreeMap<String, &RawValue> =
            serde_json::from_str(self.get()).ok()?;
        members.get(key).copied()
    }

    /// Every element of the object's array members (`content`, `output`),
    /// in order, each with its tree: what [`send_exact`] sends as received.
    pub fn items(&self) -> Vec<(Value, &RawValue)> {
        let Ok(members) =
            serde_json::from_str::<std::collections::BTreeMap<String, &RawValue>>(self.get())
        else {
            return Vec::new();
        };
        members
            .values()
            .filter_map(|m| serde_json::from_str::<Vec<&RawValue>>(m.get()).ok())
            .flatten()
            .filter_map(|raw| Some((serde_json::from_str(raw.get()).ok()?, raw)))
            .collect()
    }
}

impl PartialEq for NativeItems {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for NativeItems {}

impl fmt::Debug for NativeItems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for NativeItems {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // serde_json writes a raw value's text as it is.
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for NativeItems {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut text = String::new();
        Transcode(&mut text).deserialize(d)?;
        Ok(NativeItems::from_text(text))
    }
}

/// `text` as [`NativeItems`] keep it: the same members in the same order,
/// whitespace between tokens dropped, strings with serde_json's escapes.
/// `None` when it is not JSON.
pub fn normalised(text: &str) -> Option<Box<RawValue>> {
    let mut out = String::new();
    let mut de = serde_json::Deserializer::from_str(text);
    Transcode(&mut out).deserialize(&mut de).ok()?;
    de.end().ok()?;
    RawValue::from_string(out).ok()
}

/// The elements of the array at `path` (object members, outermost first)
/// in the JSON document `text`, each as [`normalised`] keeps it: a
/// response's `content` or `output` items in the server's order.
pub fn items_at(text: &str, path: &[&str]) -> Option<Vec<Box<RawValue>>> {
    let mut here: &RawValue = serde_json::from_str(text).ok()?;
    for key in path {
        let members: std::collections::BTreeMap<String, &RawValue> =
            serde_json::from_str(here.get()).ok()?;
        here = members.get(*key).copied()?;
    }
    serde_json::from_str::<Vec<&RawValue>>(here.get())
        .ok()?
        .into_iter()
        .map(|raw| normalised(raw.get()))
        .collect()
}

/// `v` serialized as serde_json would, except that an object equal to one
/// of `items` (the native items of the request's messages) is written as
/// that item's text: the server's members in the server's order.
pub fn send_exact(v: &Value, items: &[(Value, &RawValue)]) -> Vec<u8> {
    if items.is_empty() {
        return serde_json::to_vec(v).unwrap_or_default();
    }
    serde_json::to_vec(&Exact { value: v, items }).unwrap_or_default()
}

struct Exact<'a> {
    value: &'a Value,
    items: &'a [(Value, &'a RawValue)],
}

impl Serialize for Exact<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        let at = |value| Exact {
            value,
            items: self.items,
        };
        match self.value {
            Value::Object(map) => {
                // Only an object of an item's `type` can be that item.
                let kind = map.get("type");
                if let Some((_, raw)) = self
                    .items
                    .iter()
                    .find(|(v, _)| kind.is_some() && v.get("type") == kind && v == self.value)
                {
                    return raw.serialize(s);
                }
                let mut out = s.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    out.serialize_entry(k, &at(v))?;
                }
                out.end()
            }
            Value::Array(list) => {
                let mut out = s.serialize_seq(Some(list.len()))?;
                for v in list {
                    out.serialize_element(&at(v))?;
                }
                out.end()
            }
            other => other.serialize(s),
        }
    }
}

/// Writes `v`'s JSON text into `out` through the same visitor the log is
/// read with.
fn transcode(v: &Value, out: &mut String) -> Result<(), serde_json::Error> {
    Transcode(out).deserialize(v)
}

fn push_str_json(out: &mut String, s: &str) {
    // A string always serializes.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Writes the value it is given as compact JSON text, in the order it is
/// given (objects' members included).
struct Transcode<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Transcode<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => self.0.push_str(&n.to_string()),
            None => self.0.push_str("null"),
        }
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        push_str_json(self.0, v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('[');
        let mut first = true;
        loop {
            let mark = out.len();
            if !first {
                out.push(',');
            }
            if seq.next_element_seed(Transcode(&mut *out))?.is_none() {
                out.truncate(mark);
                break;
            }
            first = false;
        }
        out.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if !first {
                out.push(',');
            }
            first = false;
            push_str_json(out, &key);
            out.push(':');
            map.next_value_seed(Transcode(&mut *out))?;
        }
        out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "{ \"type\": \"thinking\",\n  \"thinking\": \"a\\u00e9\\n\\\"q\\\"\",\n  \
        \"signature\": \"s/+=\", \"n\": 1.50, \"big\": 18446744073709551615, \"neg\": -3,\n  \
        \"nested\": {\"z\": [true, null, {}], \"a\": []} }";

    #[test]
    fn the_servers_member_order_and_values_are_kept_whitespace_dropped() {
        let raw = normalised(SERVER).unwrap();
        assert_eq!(
            raw.get(),
            "{\"type\":\"thinking\",\"thinking\":\"aé\\n\\\"q\\\"\",\"signature\":\"s/+=\",\
             \"n\":1.5,\"big\":18446744073709551615,\"neg\":-3,\
             \"nested\":{\"z\":[true,null,{}],\"a\":[]}}"
        );
        let tree: Value = serde_json::from_str(SERVER).unwrap();
        assert_eq!(serde_json::from_str::<Value>(raw.get()).unwrap(), tree);
        // Normalising is idempotent: a log read back writes the same text.
        assert_eq!(normalised(raw.get()).unwrap().get(), raw.get());
    }

    #[test]
    fn a_message_keeps_its_items_text_through_the_log_and_a_flattened_record() {
        let items = items_at(
            &format!("{{\"content\": [{SERVER}, {{\"type\":\"reasoning\",\"b\":1,\"a\":2}}]}}"),
            &["content"],
        )
        .unwrap();
        let native = NativeItems::from_items("anthropic", "content", &items);
        let text = native.get().to_string();
        assert!(text.starts_with("{\"api\":\"anthropic\",\"content\":[{\"type\":\"thinking\""));
        assert!(text.ends_with(",{\"type\":\"reasoning\",\"b\":1,\"a\":2}]}"));
        // Straight from text, and through serde's buffered content (as the
        // log's records are read: `data` is a flattened member).
        let back: NativeItems = serde_json::from_str(&text).unwrap();
        assert_eq!(back, native);
        #[derive(Deserialize)]
        struct Outer {
            #[serde(flatten)]
            inner: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            native: NativeItems,
        }
        let outer: Outer = serde_json::from_str(&format!("{{\"x\":1,\"native\":{text}}}")).unwrap();
        assert_eq!(outer.inner.native, native);
        assert_eq!(serde_json::to_string(&native).unwrap(), text);
        // A tree of the same items sorts them; sending through the items
        // gives the text back (objects with a `type`: the only ones that
        // can be an item).
        let body =
            serde_json::json!({"messages": [{"content": native.value()["content"].clone()}]});
        let sent = String::from_utf8(send_exact(&body, &native.items())).unwrap();
        assert_eq!(
            sent,
            format!(
                "{{\"messages\":[{{\"content\":[{}]}}]}}",
                &text["{\"api\":\"anthropic\",\"content\":[".len()..text.len() - 2]
            )
        );
        assert_eq!(native.member("api").unwrap().get(), "\"anthropic\"");
        // Through a tree (a trajectory's export and import): the values
        // survive, the order is the tree's.
        let tree = serde_json::to_value(&native).unwrap();
        assert_eq!(tree, native.value());
        let back: NativeItems = serde_json::from_value(tree.clone()).unwrap();
        assert_eq!(back.value(), tree);
    }

    #[test]
    fn a_tree_is_written_in_its_own_order() {
        let v = serde_json::json!({"api": "chat", "reasoning_content": "r\u{1}"});
        assert_eq!(
            NativeItems::from_value(&v).get(),
            "{\"api\":\"chat\",\"reasoning_content\":\"r\\u0001\"}"
        );
    }
}
