//! Filesystem helpers, each implemented once: the directory of a path, a
//! sibling name, directory fsync, durable directory creation, creating a new
//! private file, and atomic replacement of a whole file (used by snapshots
//! and by the application for the plan mirror and exported trajectories).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The directory holding `path` (`.` for a bare file name).
#[must_use]
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `path` with `suffix` appended to its file name (`a.wal` -> `a.wal.snapshot`).
#[must_use]
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// fsyncs the directory holding `path`, making a create, rename or unlink in
/// it durable.
///
/// # Errors
/// When the directory cannot be opened or synced.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    File::open(parent_dir(path))?.sync_all()
}

/// Creates `dir` and any missing ancestors, fsyncing the parent of each
/// directory it creates, so that the new names (and so a log created inside)
/// survive a crash. Existing directories are left alone.
///
/// # Errors
/// When a level cannot be created (e.g. a file is in the way) or synced.
pub fn create_dir_all_durable(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_all_durable(parent)?;
    }
    // Private to the user: a log's directory may hold secrets of the run.
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => sync_parent_dir(dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates a new file (`O_CREAT|O_EXCL`, mode 0600) for writing; with
/// `read_append` it is opened read + append instead (the log). The caller
/// fsyncs the directory ([`sync_parent_dir`]) once the name must survive a
/// crash.
///
/// # Errors
/// `AlreadyExists` when `path` exists; any other open error.
pub(crate) fn create_private(path: &Path, read_append: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    if read_append {
        opts.read(true).append(true);
    } else {
        opts.write(true);
    }
    opts.create_new(true).mode(0o600).open(path)
}

/// The step of [`replace_atomically`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Creating the temp file.
    Create,
    /// Writing the temp file.
    Write,
    /// fsyncing the temp file.
    Sync,
    /// Renaming the temp file over the target.
    Rename,
    /// fsyncing the directory.
    SyncDir,
}

/// Replaces `path` atomically with `bytes`: a new private temp file `tmp` in
/// the same directory, write, fsync, `before_rename`, rename over `path`,
/// fsync the directory. Readers see the old or the new file, never a mix. On
/// failure the temp file is removed; `fail` turns a failed step into the
/// caller's error.
///
/// # Errors
/// The first failed step (through `fail`) or `before_rename`'s error.
pub(crate) fn replace_atomically<E>(
    path: &Path,
    tmp: &Path,
    bytes: &[u8],
    before_rename: impl FnOnce() -> Result<(), E>,
    fail: impl Fn(Step, io::Error) -> E,
) -> Result<(), E> {
    let mut f = create_private(tmp, false).map_err(|e| fail(Step::Create, e))?;
    let result = (|| {
        f.write_all(bytes).map_err(|e| fail(Step::Write, e))?;
        f.sync_all().map_err(|e| fail(Step::Sync, e))?;
        drop(f);
        before_rename()?;
        std::fs::rename(tmp, path).map_err(|e| fail(Step::Rename, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    result?;
    sync_parent_dir(path).map_err(|e| fail(Step::SyncDir, e))
}

/// The temp-file prefix of [`atomic_write`].
const ATOMIC_TMP_PREFIX: &str = ".tinyagent-tmp-";

/// Removes the temp files [`atomic_write`] left beside `path` when a writer
/// was killed between creating and renaming one: those of processes that no
/// longer run. Gives the files removed.
pub fn clean_atomic_temps(path: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(dir) = std::fs::read_dir(parent_dir(path)) else {
        return removed;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix(ATOMIC_TMP_PREFIX))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !alive && std::fs::remove_file(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// Replaces `path` atomically with `bytes` (temp file, write, fsync, rename,
/// directory fsync), with a temp name of its own
/// (`.tinyagent-tmp-<pid>-<nanos>-<n>` beside `path`) and nothing before the rename.
///
/// # Errors
/// The I/O error of the step that failed.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = parent_dir(path).join(format!(
        "{ATOMIC_TMP_PREFIX}{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    replace_atomically(path, &tmp, bytes, || Ok(()), |_, e| e)
}

#[cfg(test)]
mod tests {

    #[test]
    fn atomic_temps_of_dead_writers_are_cleaned_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("plan.md");
        let dead = dir.path().join(format!("{ATOMIC_TMP_PREFIX}999999999-1-0"));
        let live = dir
            .path()
            .join(format!("{ATOMIC_TMP_PREFIX}{}-1-0", std::process::id()));
        let other = dir.path().join("notes.txt");
        for p in [&dead, &live, &other] {
            std::fs::write(p, "x").unwrap();
        }
        assert_eq!(clean_atomic_temps(&target), vec![dead.clone()]);
        assert!(!dead.exists() && live.exists() && other.exists());
    }

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn durable_dir_creation_makes_every_missing_level_and_tolerates_existing_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        create_dir_all_durable(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_all_durable(&deep).unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(create_dir_all_durable(&file.join("d")).is_err());
    }

    #[test]
    fn atomic_write_replaces_the_file_leaves_no_temp_and_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("out.json");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failure_before_the_rename_keeps_the_old_file_and_removes_the_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, b"old").unwrap();
        let t = tmp.path().join("f.tmp");
        let r = replace_atomically(&p, &t, b"new", || Err("no"), |_, _| "io");
        assert_eq!(r, Err("no"));
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(!t.exists());
        assert!(matches!(
            create_private(&p, false),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists
        ));
    }
}
