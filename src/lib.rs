//! tinyagent: a command-line coding agent whose runs survive anything.
//!
//! Every event of a run is appended to a CRC-framed, fdatasync'd JSONL log
//! before anything depends on it; a run killed at any moment resumes from
//! its log with nothing acknowledged lost, and nothing of an interrupted
//! call acts after the model has been told about it.
//!
//! # Module tour
//!
//! The storage core is its own crate, `tinyagent-store` (log framing,
//! fail-stop writer, streaming reader, snapshots, the store), generic over a
//! record and a fold. This crate gives it its record and its fold and builds
//! the agent on top. The layers, bottom to top; each imports only those
//! below it (`layering.rs` checks):
//!
//! - [`kinds`]: the small enums every layer names (provider, environment,
//!   engine, approvals, hook failure), importing nothing of the crate.
//! - [`event`]: the record vocabulary (one serde-tagged enum: `run.started`,
//!   `model.response`, `tool.started`, `tool.result`, ...) shared by the
//!   loop, the log, the inspector and the `--json` stream, with the
//!   constructors of tool results (completed, blocked, interrupted, not run).
//! - [`session`]: the [`session::State`] those records fold to, through one
//!   pure `State::apply` used live and on replay; the plan's rules and
//!   rendering.
//! - [`store`]: the `tinyagent-store` crate instantiated with
//!   [`event::Event`] and [`session::State`]; [`rundir`]: the files beside a
//!   log, named in one place.
//! - [`config`]: one validated [`config::RunConfig`] for the three sources
//!   of a run's settings (flags, `tinyagent.toml`, the log's `run.started`),
//!   and the raw TOML file.
//! - [`exec`]: host execution: the environments (local, bubblewrap sandbox,
//!   a podman/docker container per run that outlives the agent), foreground
//!   process groups (held until recorded, stopped on a signal, found again
//!   after a kill), every child detached from the agent (its own session, no
//!   inherited descriptor), key scrubbing, the run's protected files.
//! - [`tools`]: the [`tools::Tool`] trait, one file per built-in tool, the
//!   registry that advertises them and derives what is mutating and what may
//!   be re-run on resume, background processes, workspace confinement.
//! - [`model`]: the model providers (OpenAI-compatible Chat Completions,
//!   Anthropic Messages, an offline script), retries and SSE.
//! - [`checkpoint`]: workspace checkpoints in a shadow git store beside the
//!   log (`<wal>.d/checkpoints.git`), what such a store may hold before git
//!   is run on it, their diffs, restoring a workspace, copying a store for a
//!   fork.
//! - [`mcp`]: Model Context Protocol servers over stdio as tool sources:
//!   each server tool becomes a [`tools::Tool`] named `<server>__<tool>`,
//!   read-only only when the server says `readOnlyHint`; their list is
//!   recorded in `run.started` and checked again on resume; calls time out
//!   and a message over 16 MiB is refused.
//! - [`replicate`]: the log and checkpoint store shipped to S3-compatible
//!   storage after each sync point (sync or async), a fenced single writer
//!   per run, and a run fetched from a bucket onto a new machine; its errors
//!   are one enum ([`replicate::ReplicateError`]).
//! - [`report`]: everything a run prints: best-effort lines on stdout and
//!   stderr, the `--json` event stream, and the live human view.
//! - [`agent`]: the loop (persist the intent, act, persist the result), the
//!   one call runner every call goes through (pre hook, `tool.started`, run,
//!   post hook, `tool.result`, plan update), compaction of the model's view,
//!   hooks, approvals, what resume does to a stopped run.
//! - [`inspect`]: what a log holds, read in bounded memory, for `log
//!   inspect`, `sessions` and `approve`.
//! - [`launch`]: how a run is assembled, for every origin (a new task, a
//!   log, a trajectory, a bucket, a fork): every check first, then the side
//!   effects in one order, then the shared tail ([`launch::Running`]).
//! - [`cli`]: the command line: thin commands mapping flags to a launch (or
//!   a look at a log: `log inspect/verify/repair/export/import/diff`,
//!   `sessions`, `approve`, `demo`, `bench save`) and the outcome to an exit
//!   code; the terminal, where approval questions are asked, is its alone.
//! - [`signals`]: SIGINT, SIGTERM and SIGHUP, which stop a run cleanly by
//!   setting the command's [`signals::StopToken`], handed down to every part
//!   that stops early;
//!   [`runtime`]: the current-thread tokio runtime commands run on, and
//!   [`runtime::blocking`] for the synchronous work (tools, hooks) in it.
//! - [`mod@bench`]: the save-cost benchmark and the synthetic runs it measures;
//!   `trajectory`: whole-file trajectory JSON (schema v1 and v2) to and from
//!   a log; `text`: the string shorteners every human-facing line uses.

// Audited exceptions, each with its SAFETY note: what a forked child does
// before it execs (src/exec/group.rs, src/exec/host.rs).
#![deny(unsafe_code)]

pub mod agent;
pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod event;
pub mod exec;
pub mod inspect;
pub mod kinds;
pub mod launch;
#[cfg(test)]
mod layering;
pub mod mcp;
pub mod model;
pub mod replicate;
pub mod report;
pub mod rundir;
pub mod runtime;
pub mod session;
pub mod signals;
pub mod store;
pub(crate) mod text;
pub mod tools;
pub(crate) mod trajectory;
pub mod tui;
