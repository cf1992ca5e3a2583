//! The run's log as tinyagent uses it: [`tinyagent_store`] instantiated with
//! the record vocabulary ([`Event`]) and the fold ([`State`]). The traits are
//! implemented beside the types (`event/mod.rs`, `session/mod.rs`).

use crate::event::Event;
use crate::session::State;
use std::path::Path;

pub use tinyagent_store::{OpenReport, StoreError, StoreOptions, TestSeams};

/// An open log of a run and the state it folds to.
pub type Store = tinyagent_store::Store<Event, State>;

/// What [`load`] read.
pub type Loaded = tinyagent_store::Loaded<State>;

/// Read-only load for inspect and export (see [`tinyagent_store::load`]).
///
/// # Errors
/// When the file is missing, not a regular file, or cannot be read.
pub fn load(path: &Path) -> Result<Loaded, StoreError> {
    tinyagent_store::load::<Event, State>(path)
}

/// [`load`], from the newest usable snapshot when `use_snapshot`.
///
/// # Errors
/// As [`load`].
pub fn load_with(path: &Path, use_snapshot: bool) -> Result<Loaded, StoreError> {
    tinyagent_store::load_with::<Event, State>(path, use_snapshot)
}

/// [`load`], also showing every record read to `observe`.
///
/// # Errors
/// As [`load`].
pub fn load_observed(path: &Path, observe: impl FnMut(&Event)) -> Result<Loaded, StoreError> {
    tinyagent_store::load_observed::<Event, State>(path, observe)
}
