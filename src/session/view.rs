//! The model's view as the state holds it: shared, not copied, with each
//! request.
//!
//! Every step hands the provider the whole view (100 KB to the compaction
//! threshold), and the state appends to it a moment later. A [`View`] is a
//! reference-counted vector: a request takes a second reference instead
//! of a deep copy of every message, and a change (through `DerefMut`) copies
//! the messages only while another reference is still alive, so the loop
//! lets go of its request before the next record is applied.

use crate::event::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;

/// Messages shared between the state and the requests made from it.
#[derive(Clone, Default, PartialEq)]
pub struct View(Arc<Vec<Message>>);

impl View {
    /// Whether `self` and `other` are the same shared messages (not only
    /// equal ones).
    pub fn shares(&self, other: &View) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for View {
    type Target = Vec<Message>;
    fn deref(&self) -> &Vec<Message> {
        &self.0
    }
}

impl std::ops::DerefMut for View {
    /// Copies the messages first when a request still holds them.
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<Message>> for View {
    fn from(messages: Vec<Message>) -> View {
        View(Arc::new(messages))
    }
}

impl FromIterator<Message> for View {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> View {
        View(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a View {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl PartialEq<Vec<Message>> for View {
    fn eq(&self, other: &Vec<Message>) -> bool {
        *self.0 == *other
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for View {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for View {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<View, D::Error> {
        Vec::<Message>::deserialize(d).map(View::from)
    }
}
