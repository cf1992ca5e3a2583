//! The mock model server (`support::mock`).
//!
//! The main piece is [`MockServer`]: a real OpenAI-compatible Chat
//! Completions server on 127.0.0.1 (axum on its own thread and runtime, so
//! blocking tests that run the binary can use it) that answers with scripted
//! [`MockReply`]s and checks every request it receives (see [`checks`]).
//!
//! ```ignore
//! use crate::support::mock::{MockReply, MockServer};
//!
//! let server = MockServer::start(vec![
//!     MockReply::tool_call("bash", serde_json::json!({"command": "ls"})),
//!     MockReply::rate_limited("1"),            // 429, Retry-After: 1
//!     MockReply::status(500),
//!     MockReply::drop_connection(),
//!     MockReply::text("all done").with_usage(120, 30),
//! ]); // afterwards: plain "done" replies (or `start_with(replies, fallback_fn)`)
//! // run the binary with --provider openai --base-url <server.base_url()> ...
//! server.assert_no_violations();           // every call answered once, in order
//!                                          // (dropping the server checks it too)
//! let bodies = server.requests();          // Vec<serde_json::Value>, in order
//! ```

// benches/step.rs mounts this module on its own and uses a part of it.
#![allow(dead_code, unused_imports)]

pub mod checks;
pub mod reply;
pub mod server;
pub mod timed;

pub use reply::{MockCall, MockReply};
pub use server::{MockServer, RecordedRequest, is_summary};
