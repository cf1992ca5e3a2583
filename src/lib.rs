//! tinyagent: a command-line coding agent whose runs survive crashes.
//!
//! # Layout
//!
//! - [`event`]: the record vocabulary, one serde-tagged enum shared by the
//!   loop, the log, the inspector and the `--json` stream.
//! - [`wal`]: the append-only, CRC-framed JSONL write-ahead log: pure framing,
//!   the fail-stop writer, the streaming reader that tells a torn tail from
//!   corruption.
//! - [`snapshot`]: atomic snapshots and the background compactor.
//! - [`store`]: the one door to the disk: open = snapshot + replay of the tail.
//! - [`session`]: `State::apply`, the pure fold used live and on replay.
//! - [`model`]: model providers (OpenAI-compatible, Anthropic, script).
//! - [`tools`]: the tools the model can call and their registry.
//! - [`agent`]: the loop (persist intent, act, persist result), compaction,
//!   resume notices.
//! - [`cli`]: argument parsing, commands and human output.

#![forbid(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod event;
pub mod model;
pub mod session;
pub mod snapshot;
pub mod store;
pub mod tools;
pub mod trajectory;
pub mod wal;
