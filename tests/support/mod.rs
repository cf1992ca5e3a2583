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

pub mod cache;
pub mod checkpoints;
pub mod container;
pub mod contract;
pub mod e2e;
pub mod llama;
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

/// Polls `f` every 20 ms until it holds, for at most `secs` seconds (an
/// upper bound only: the tests wait for real events), failing the test
/// with `what` when it never does.
pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// [`wait_for`] with the usual bound, 60 s.
pub fn wait_until(what: &str, f: impl FnMut() -> bool) {
    wait_for(what, 60, f);
}
