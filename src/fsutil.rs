//! Small durable file helpers shared by snapshots and the plan mirror.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Fsyncs a directory, so that a create or rename inside it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)?.sync_all()
}

/// Replaces `path` atomically: temp file in the same directory, write, fsync,
/// rename, fsync the directory. Readers see the old or the new file, never a
/// mix.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".tinyagent-tmp-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}
