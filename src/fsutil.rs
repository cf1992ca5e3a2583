//! Atomic replacement of a whole file (the plan mirror, exported
//! trajectories). Directory helpers live with the log in [`crate::wal`].

use crate::wal::{parent_dir, sync_parent_dir};
use std::io::{self, Write};
use std::path::Path;

/// Replaces `path` atomically: temp file in the same directory, write, fsync,
/// rename, fsync the directory. Readers see the old or the new file, never a
/// mix.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".tinyagent-tmp-")
        .tempfile_in(parent_dir(path))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_parent_dir(path)
}
