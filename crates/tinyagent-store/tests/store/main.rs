//! The storage crate on its own: each module has a record and a fold of its
//! own (none of the application's), so these tests show the crate works for
//! any `Record`/`Fold` pair.
//!
//! - `store_api`: append, open, replay, torn tails, corruption, snapshots,
//!   faults;
//! - `snapshot_trust`: snapshots are believed only once checked (FIFOs,
//!   symlinks, directories, forged headers);
//! - `bounded_memory`: multi-gigabyte junk beside a log costs bounded memory;
//! - `hostile_tail`: megabytes of `{"seq":` after a log are classified as
//!   before, in linear time;
//! - `writer`: the writer's framing, create, lock and mode, and fail-stop
//!   under injected write, short-write and sync failures;
//! - `reader`: torn tails at every byte, bit flips and byte deletions, seq
//!   gaps, duplicated and spliced lines, random truncation;
//! - `open`: refusals, and corruption found after a snapshot;
//! - `snapshots`: cadence, the atomic swap with a `.bak`, every fallback,
//!   stray temp files, a slow snapshot that does not hold up appends.
//!
//! `kit` (a counter) and `notes` (records shaped like a tool call's, and a
//! framing check apart from the crate's reader) are what they share.

mod bounded_memory;
mod hostile_tail;
mod kit;
mod notes;
mod open;
mod reader;
mod snapshot_trust;
mod snapshots;
mod store_api;
mod writer;
