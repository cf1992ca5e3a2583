//! The model's view as the state holds it: shared, not copied, with each
//! request.
//!
//! Every step hands the provider the whole view (100 KB to the compaction
//! threshold), and the state appends to it a moment later. A [`View`] is a
//! reference-counted vector: a request takes a second reference instead
//! of a deep copy of every message, and a change (through `DerefMut`) copies
//! the messages only while another reference is still alive, so the loop
//! lets go of its request before the next record is applied.
//!
//! Each view also carries a *line*: a number no other view of the process
//! was given, kept by clones and by [`View::push`] on messages nobody else
//! holds, and replaced by any other change (a copy, or a change through
//! `DerefMut`). So two views of one line hold the same messages up to the
//! shorter one's length, and the request encoder reuses the JSON of a
//! previous request of the same line without comparing its messages.

use crate::event::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next line a view is given.
static NEXT_LINE: AtomicU64 = AtomicU64::new(1);

fn new_line() -> u64 {
    NEXT_LINE.fetch_add(1, Ordering::Relaxed)
}

/// Messages shared between the state and the requests made from it.
#[derive(Clone)]
pub struct View {
    messages: Arc<Vec<Message>>,
    line: u64,
}

impl View {
    /// Whether `self` and `other` are the same shared messages (not only
    /// equal ones).
    pub fn shares(&self, other: &View) -> bool {
        Arc::ptr_eq(&self.messages, &other.messages)
    }

    /// The view's line (see the module's documentation): views of one line
    /// agree on every message both hold.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Appends a message. The line is kept when nobody else holds the
    /// messages; otherwise they are copied first, and the copy is a line of
    /// its own (the other holder may append something else).
    pub fn push(&mut self, message: Message) {
        if Arc::get_mut(&mut self.messages).is_none() {
            self.line = new_line();
        }
        Arc::make_mut(&mut self.messages).push(message);
    }
}

impl Default for View {
    fn default() -> View {
        View::from(Vec::new())
    }
}

impl PartialEq for View {
    fn eq(&self, other: &View) -> bool {
        self.messages == other.messages
    }
}

impl std::ops::Deref for View {
    type Target = Vec<Message>;
    fn deref(&self) -> &Vec<Message> {
        &self.messages
    }
}

impl std::ops::DerefMut for View {
    /// Copies the messages first when a request still holds them. Any
    /// change through here may rewrite messages, so the view starts a new
    /// line.
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        self.line = new_line();
        Arc::make_mut(&mut self.messages)
    }
}

impl From<Vec<Message>> for View {
    fn from(messages: Vec<Message>) -> View {
        View {
            messages: Arc::new(messages),
            line: new_line(),
        }
    }
}

impl FromIterator<Message> for View {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> View {
        View::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl<'a> IntoIterator for &'a View {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.messages.iter()
    }
}

impl PartialEq<Vec<Message>> for View {
    fn eq(&self, other: &Vec<Message>) -> bool {
        *self.messages == *other
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.messages.fmt(f)
    }
}

impl Serialize for View {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.messages.serialize(s)
    }
}

impl<'de> Deserialize<'de> for View {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<View, D::Error> {
        Vec::<Message>::deserialize(d).map(View::from)
    }
}
