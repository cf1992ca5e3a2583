//! tinyagent-store: a crash-safe, append-only log of records and the state
//! they fold to, with atomic snapshots of that state.
//!
//! The crate knows nothing about what the records mean. An application names
//! its record type (a [`Record`]) and the state those records fold to (a
//! [`Fold`]); [`Store`] then keeps both on disk: every record durable before
//! [`Store::append`] returns, the state rebuilt on open from the newest
//! snapshot plus the records after it.
//!
//! # Module tour
//!
//! [`wal`] is the write-ahead log itself. [`wal::frame`] is pure encoding and
//! decoding of one line (`seq`, `prev`, `type`, `ts`, `data`, `crc`), with no
//! I/O. [`wal::writer`] is the fail-stop appender: one `write` and one
//! `fdatasync` per record, an exclusive lock while it lives, and no second
//! chance after a failure. [`wal::reader`] streams a log line by line and
//! tells a torn tail (what an interrupted append leaves) from corruption
//! (anything a crash cannot explain). [`wal::fs`] is the seam between the
//! writer and its file, where tests inject failed and short writes and failed
//! syncs ([`wal::fs::FaultPlan`]).
//!
//! [`snapshot`] writes the state beside the log atomically, keeps the
//! previous snapshot as `.bak`, reads snapshots back only when they are
//! regular files of bounded size whose checksums (body, and header bound to
//! body) hold, and runs the background [`snapshot::SnapshotWriter`]
//! thread that keeps a mirror of the state and snapshots it every N records.
//!
//! [`store`] is the one door to the disk: [`Store::create`],
//! [`Store::open`] (lock, clean stray temp files, load the newest usable
//! snapshot, check it against the log, replay the rest, cut a torn tail while
//! keeping its bytes) and the read-only [`load`] family used to inspect a log
//! without locking or changing it.
//!
//! [`fsutil`] holds the filesystem helpers every other module uses, each
//! implemented once: the directory of a path, durable directory creation,
//! directory fsync, creating a new private (0600) file, and atomic
//! replacement of a whole file.
//!
//! [`seams`] holds the test-only switches ([`TestSeams`]) that crash tests
//! set through environment variables; the application reads them once at
//! start and hands them to the store in [`StoreOptions`].
//!
//! The on-disk format is described in tinyagent's `docs/format.md`.

#![forbid(unsafe_code)]

pub mod fsutil;
pub mod seams;
pub mod snapshot;
pub mod store;
pub mod wal;

pub use seams::TestSeams;
pub use snapshot::SnapshotSaved;
pub use store::{
    DEFAULT_SNAPSHOT_EVERY, HookError, Loaded, OpenReport, Store, StoreError, StoreOptions,
    SyncHook, SyncPoint, load, load_observed, load_observed_frames, load_with,
};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// What the store needs of a record (one line's payload).
///
/// A record serialises to a JSON object with exactly two members, `type`
/// (equal to [`Record::kind`]) first and then `data`, and deserialises from
/// the same; serde's adjacent tagging
/// (`#[serde(tag = "type", content = "data")]` on an enum) does exactly
/// that. The log line is that pair with `seq`, `prev` and `ts` spliced in
/// after `type` and `crc` appended, so a record is serialised once per
/// append.
pub trait Record: Serialize + DeserializeOwned + Clone + Send + 'static {
    /// The record's `type` member.
    fn kind(&self) -> &str;
}

/// The state a sequence of records folds to.
///
/// `apply` must be a pure function of the state and the record: the store
/// uses it live (after each append), on replay (after a snapshot, or from an
/// empty state) and on the snapshot writer's own copy, and all three must
/// agree. The state is serialised as a snapshot's body and cloned once when
/// the snapshot writer thread starts.
pub trait Fold<R>: Default + Clone + Serialize + DeserializeOwned + Send + 'static {
    /// Folds one record into the state.
    fn apply(&mut self, record: &R);

    /// The empty state a [`Store`] starts from when it writes (a new log, or
    /// an open without a usable snapshot). Readers ([`load`]) start from
    /// `Default::default()`. The two are the same unless the state keeps
    /// something only readers need.
    #[must_use]
    fn empty_for_writing() -> Self {
        Self::default()
    }
}

/// A tiny record and fold for the crate's own unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(tag = "type", content = "data")]
    pub enum Rec {
        #[serde(rename = "add")]
        Add { n: u64 },
        #[serde(rename = "note")]
        Note { text: String },
    }

    impl crate::Record for Rec {
        fn kind(&self) -> &'static str {
            match self {
                Rec::Add { .. } => "add",
                Rec::Note { .. } => "note",
            }
        }
    }

    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Sum {
        pub total: u64,
        pub records: u64,
    }

    impl crate::Fold<Rec> for Sum {
        fn apply(&mut self, record: &Rec) {
            self.records += 1;
            if let Rec::Add { n } = record {
                self.total += n;
            }
        }
    }
}
