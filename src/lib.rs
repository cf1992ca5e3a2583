//! tinyagent: a command-line coding agent whose runs survive crashes.
//!
//! # Layout
//!
//! - [`event`]: the record vocabulary, one serde-tagged enum shared by the
//!   loop, the log, the inspector and the `--json` stream.
//! - [`store`]: the run's log: the `tinyagent-store` crate (CRC-framed JSONL
//!   write-ahead log, atomic snapshots, open = snapshot + replay of the tail)
//!   instantiated with [`event::Event`] and [`session::State`].
//! - [`session`]: `State::apply`, the pure fold used live and on replay.
//! - [`model`]: model providers (OpenAI-compatible, Anthropic, script).
//! - [`tools`]: the tools the model can call and their registry.
//! - [`agent`]: the loop (persist intent, act, persist result), compaction,
//!   resume notices.
//! - [`cli`]: argument parsing, commands and human output.

// One audited exception: setting the parent-death signal of a foreground
// command's process before it execs (src/tools/group.rs).
#![deny(unsafe_code)]

pub mod agent;
pub mod bench;
pub mod cli;
pub mod config;
pub mod event;
pub mod model;
pub mod session;
pub mod signals;
pub mod store;
pub(crate) mod text;
pub mod tools;
pub(crate) mod trajectory;
