//! The log under stress: a writer process killed at random and faults
//! injected from outside it (wal_crash), and the torture suite (random
//! SIGKILL and resume, fault injection, power cut, hostile input, a mutated
//! log against the reader). The store's own tests of its writer, reader and
//! snapshots are in crates/tinyagent-store/tests. See docs/reliability.md.
//!
//! One test binary; a group of tests is one module (`cargo test --test
//! torture torture_kill::` runs one group).

#[path = "../support/mod.rs"]
mod support;

mod checkpoint_kill;
mod sync_points;
mod torture_approvals;
mod torture_container;
mod torture_faults;
mod torture_input;
mod torture_kill;
mod torture_leftovers;
mod torture_mcp;
mod torture_powercut;
mod torture_reader;
mod torture_replicate;
mod torture_replicate_restore;
mod wal_crash;
