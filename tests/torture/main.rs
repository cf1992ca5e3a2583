//! The log under stress: the writer, reader, snapshots and store on real
//! files with injected faults and crashes, and the torture suite (random
//! SIGKILL and resume, fault injection, power cut, hostile input, a mutated
//! log against the reader). See docs/reliability.md.
//!
//! One test binary; a group of tests is one module (`cargo test --test
//! torture torture_kill::` runs one group).

#[path = "../support/mod.rs"]
mod support;

mod checkpoint_kill;
mod store_open;
mod store_snapshot;
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
mod wal_reader;
mod wal_writer;
