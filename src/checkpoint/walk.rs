//! The walk of a workspace: which files and links a checkpoint stores
//! (what `.gitignore` and `.ignore` files do not exclude, never a `.git`
//! directory, never the run's own files, links not followed), their `lstat`
//! data taken by a few threads at once, and their content read without
//! following a link or blocking on a FIFO.

use super::{MAX_FILES, watch};
use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Relative paths (bytes) of the files and symlinks to store, in no
/// particular order (at most [`MAX_FILES`]).
pub fn walk(workspace: &Path, protected: &crate::exec::protected::Protected) -> Vec<Vec<u8>> {
    walk_with_stat(workspace, protected)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// [`walk`] with each one's `lstat` data, taken by a few threads at once
/// (the `lstat` of every file is most of a checkpoint's time on a large
/// tree).
pub fn walk_with_stat(
    workspace: &Path,
    protected: &crate::exec::protected::Protected,
) -> Vec<(Vec<u8>, std::fs::Metadata)> {
    walk_scoped(workspace, protected, None, None)
}

/// [`walk_with_stat`] of only what `scope` covers (and the directories on
/// the way to it), adding a watch to each directory it goes into (within
/// the scope) before that directory is read.
pub(super) fn walk_scoped(
    workspace: &Path,
    protected: &crate::exec::protected::Protected,
    scope: Option<&watch::Scope>,
    watch: Option<&watch::Watch>,
) -> Vec<(Vec<u8>, std::fs::Metadata)> {
    let scope = scope.map(|s| std::sync::Arc::new(s.clone()));
    // A few paths: one thread walks them faster than several start.
    let threads = if scope.is_some() {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
    };
    let out = std::sync::Mutex::new(Vec::new());
    let in_scope = scope.clone();
    let visit = |entry: Result<ignore::DirEntry, ignore::Error>| {
        use ignore::WalkState;
        let Ok(entry) = entry else {
            return WalkState::Continue;
        };
        if let Some(w) = watch
            && entry.file_type().is_some_and(|ft| ft.is_dir())
            && let Ok(rel) = entry.path().strip_prefix(workspace)
        {
            let rel = rel.as_os_str().as_bytes();
            if in_scope.as_ref().is_none_or(|s| s.within(rel)) {
                w.add(entry.path(), rel);
            }
        }
        if !entry
            .file_type()
            .is_some_and(|ft| ft.is_file() || ft.is_symlink())
        {
            return WalkState::Continue;
        }
        let Ok(rel) = entry.path().strip_prefix(workspace) else {
            return WalkState::Continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            return WalkState::Continue; // gone since the directory was read
        };
        let rel = rel.as_os_str().as_bytes().to_vec();
        let mut out = out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if out.len() >= MAX_FILES {
            return WalkState::Quit;
        }
        out.push((rel, meta));
        WalkState::Continue
    };
    // Even for one thread, the parallel walk: the sequential one opens
    // every directory before the filter can skip it.
    walker(workspace, protected, scope)
        .threads(threads)
        .build_parallel()
        .run(|| Box::new(visit));
    out.into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The walk of a workspace: files and directories `.gitignore` and
/// `.ignore` files do not exclude, never a `.git` directory, never the
/// run's own files, links not followed.
fn walker(
    workspace: &Path,
    protected: &crate::exec::protected::Protected,
    scope: Option<std::sync::Arc<watch::Scope>>,
) -> ignore::WalkBuilder {
    let protected = protected.clone();
    let root = workspace.to_path_buf();
    let mut b = ignore::WalkBuilder::new(workspace);
    b.hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            e.file_name() != ".git"
                && !protected.covers(e.path())
                && scope.as_ref().is_none_or(|s| {
                    e.path()
                        .strip_prefix(&root)
                        .is_ok_and(|rel| s.admits(rel.as_os_str().as_bytes()))
                })
        });
    b
}

/// The bytes to store of a file or link the walk saw with `meta`: the
/// file's content (opened without following a link, and only if it is
/// still the file that was looked at) or the link's target. `None`: gone,
/// swapped for something else, unreadable, or grown over `max`.
pub(super) fn read_content(full: &Path, meta: &std::fs::Metadata, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if meta.file_type().is_symlink() {
        return std::fs::read_link(full)
            .ok()
            .map(|t| t.into_os_string().into_encoded_bytes());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(full)
        .ok()?;
    let now = f.metadata().ok()?;
    if !now.is_file() || now.ino() != meta.ino() || now.dev() != meta.dev() {
        return None;
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.size()).unwrap_or(0));
    f.take(max + 1).read_to_end(&mut data).ok()?;
    (data.len() as u64 <= max).then_some(data)
}

/// `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`: never through a link, never
/// blocked by a FIFO swapped in.
fn libc_flags() -> i32 {
    use nix::fcntl::OFlag;
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits()
}

/// A relative path from its bytes.
pub(super) struct OsStrPath;

impl OsStrPath {
    pub(super) fn of(bytes: &[u8]) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(bytes))
    }
}

pub(super) fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(format!("{:x}", h.finalize()))
}
