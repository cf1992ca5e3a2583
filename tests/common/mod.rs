//! Shared test helpers. Use from any integration test with `mod common;`.
//!
//! The main piece is [`MockServer`]: a real OpenAI-compatible Chat
//! Completions server on 127.0.0.1 (axum on its own thread and runtime, so
//! blocking tests that run the binary can use it) that answers with scripted
//! [`MockReply`]s and checks every request it receives (see [`checks`]).
#![allow(dead_code, unused_imports)]

pub mod checks;
pub mod reply;
pub mod server;

pub use reply::{MockCall, MockReply};
pub use server::{MockServer, RecordedRequest};
