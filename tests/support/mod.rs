//! The helpers every integration test binary shares (`tests/agent`,
//! `tests/torture`), mounted in each with
//! `#[path = "../support/mod.rs"] mod support;`.
//!
//! - [`mock`]: the loopback mock model server, which checks every request;
//! - [`contract`]: the one independent reader of the log (contract section 2),
//!   with its own bitwise CRC-32;
//! - [`e2e`]: running the real binary in a temp sandbox; [`container`]: the
//!   same in the container environment, with podman;
//! - [`require`]: prerequisites (strace, bwrap, root, loop) that skip loudly,
//!   or fail when `TINYAGENT_REQUIRE` names them;
//! - [`plan`], [`tools`], [`torture`], [`wal`]: helpers of one group of tests.

// Each binary uses a different part of these helpers.
#![allow(dead_code, unused_imports)]

pub mod checkpoints;
pub mod container;
pub mod contract;
pub mod e2e;
pub mod mock;
pub mod plan;
pub mod pty;
pub mod require;
pub mod s3;
pub mod screen;
pub mod sockets;
pub mod tools;
pub mod torture;
pub mod wal;
