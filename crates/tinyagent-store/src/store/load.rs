//! The read-only view of a log for inspect and export: no lock, no cut.

use super::StoreError;
use super::recover::{check_regular, from_snapshot};
use crate::snapshot::{self, SnapshotSaved};
use crate::wal::frame::Frame;
use crate::wal::reader::{RecordPos, ScanReport, scan};
use crate::{Fold, Record};
use std::path::{Path, PathBuf};

/// What [`load`] read.
#[derive(Debug, Clone)]
pub struct Loaded<S> {
    pub state: S,
    /// The scan (after the snapshot's record when one was used).
    pub scan: ScanReport,
    /// A valid snapshot of this log (used or merely present).
    pub snapshot: Option<SnapshotSaved>,
    pub warnings: Vec<String>,
}

/// Read-only load for inspect and export: no lock, no cut, a full replay
/// from the start onto `S::default()`. Stops at corruption and returns what
/// it read.
///
/// # Errors
/// When the file is missing, not a regular file, or cannot be read.
pub fn load<R: Record, S: Fold<R>>(path: &Path) -> Result<Loaded<S>, StoreError> {
    load_with::<R, S>(path, false)
}

/// [`load`], starting from the newest usable snapshot when `use_snapshot`
/// (then `scan` covers only the records after it).
///
/// # Errors
/// As [`load`].
pub fn load_with<R: Record, S: Fold<R>>(
    path: &Path,
    use_snapshot: bool,
) -> Result<Loaded<S>, StoreError> {
    check_regular(path)?;
    let mut warnings = Vec::new();
    if use_snapshot && let Some((state, scan, saved)) = from_snapshot::<R, S>(path, &mut warnings)?
    {
        return Ok(Loaded {
            state,
            scan,
            snapshot: Some(saved),
            warnings,
        });
    }
    full_load(path, warnings, |_: &Frame<R>| {})
}

/// [`load`], also showing every record read to `observe` (one pass over the
/// file for what the fold does not keep, such as per-call hook runs).
///
/// # Errors
/// As [`load`].
pub fn load_observed<R: Record, S: Fold<R>>(
    path: &Path,
    mut observe: impl FnMut(&R),
) -> Result<Loaded<S>, StoreError> {
    check_regular(path)?;
    full_load(path, Vec::new(), |f: &Frame<R>| observe(&f.event))
}

/// [`load_observed`], shown each whole frame (its `seq` and `ts` too).
///
/// # Errors
/// As [`load_observed`].
pub fn load_observed_frames<R: Record, S: Fold<R>>(
    path: &Path,
    observe: impl FnMut(&Frame<R>),
) -> Result<Loaded<S>, StoreError> {
    check_regular(path)?;
    full_load(path, Vec::new(), observe)
}

fn full_load<R: Record, S: Fold<R>>(
    path: &Path,
    warnings: Vec<String>,
    mut observe: impl FnMut(&Frame<R>),
) -> Result<Loaded<S>, StoreError> {
    // Note which snapshot (if any) matches a record of this log.
    let cands: Vec<(PathBuf, RecordPos)> =
        [snapshot::snapshot_path(path), snapshot::backup_path(path)]
            .into_iter()
            .filter_map(|p| snapshot::read_header(&p).ok().map(|pos| (p, pos)))
            .collect();
    let mut matched: Option<SnapshotSaved> = None;
    let mut state = S::default();
    let scan = scan::<R>(path, None, |f, pos| {
        state.apply(&f.event);
        observe(f);
        if let Some((p, _)) = cands.iter().find(|(_, c)| c == pos)
            && matched.as_ref().is_none_or(|m| m.seq < pos.seq)
        {
            matched = Some(SnapshotSaved {
                seq: pos.seq,
                path: p.clone(),
            });
        }
    })?;
    Ok(Loaded {
        state,
        scan,
        snapshot: matched,
        warnings,
    })
}
