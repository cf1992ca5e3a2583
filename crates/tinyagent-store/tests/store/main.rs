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
//!   before, in linear time.

mod bounded_memory;
mod hostile_tail;
mod kit;
mod snapshot_trust;
mod store_api;
