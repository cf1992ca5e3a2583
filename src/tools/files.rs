//! Helpers shared by the file tools [`read`](super::read),
//! [`write`](super::write) and [`edit`](super::edit), and by the walks of
//! grep and glob: every path is checked with [`super::paths::resolve`] first
//! (for clear refusals), then opened through [`Beneath`], so a link swapped
//! in after the check still cannot lead outside. What is opened must be a
//! regular file (opened `O_NONBLOCK`, so a FIFO cannot hang the call) and not
//! one of the run's own files, checked on the path given and again on the
//! file actually opened. I/O errors read the same in all the tools.
//!
//! `read` first tries [`open_plain`]: a path with no symbolic link and no
//! `..` needs neither the check nor the `/proc` lookups, since the kernel is
//! told to follow no link at all; anything else takes the full way.

use super::paths::{self, Beneath, PathError};
use super::{ToolContext, ToolOutcome};
use crate::exec::protected::Protected;
use nix::fcntl::OFlag;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A path the model gave, resolved and checked, with the workspace to open
/// it beneath.
pub(super) struct Target {
    pub(super) ws: Beneath,
    /// The resolved path, absolute.
    pub(super) real: PathBuf,
    /// The same, relative to the workspace.
    pub(super) rel: PathBuf,
}

impl Target {
    /// Opens the target beneath the workspace (`O_NONBLOCK` added): the file
    /// and its metadata, or why not.
    pub(super) fn open(
        &self,
        ctx: &ToolContext,
        path: &str,
        flags: OFlag,
    ) -> Result<(File, Metadata), OpenError> {
        let (file, meta) = open_beneath(&self.ws, &self.rel, flags).map_err(|e| {
            if paths::escaped(&e) {
                return OpenError::Refused(escapes(path, &self.ws));
            }
            // ENXIO: a socket, or a FIFO with no reader opened for writing.
            if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32)
                && let Ok((_, meta)) = open_beneath(&self.ws, &self.rel, OFlag::O_PATH)
                && let Err(out) = regular(path, &meta)
            {
                return OpenError::Refused(out);
            }
            OpenError::Io(e)
        })?;
        check_opened(ctx.protected, path, &file, &meta).map_err(OpenError::Refused)?;
        Ok((file, meta))
    }
}

/// Why [`Target::open`] failed: an I/O error (not found, a directory...) the
/// tool may word its own way, or a refusal to pass on as it is.
pub(super) enum OpenError {
    Io(io::Error),
    Refused(ToolOutcome),
}

impl OpenError {
    /// The error as a tool result, an I/O error worded by [`io_error`].
    pub(super) fn outcome(self, what: &str, path: &str) -> ToolOutcome {
        match self {
            OpenError::Io(e) => io_error(what, path, &e),
            OpenError::Refused(out) => out,
        }
    }
}

/// Resolves a path, turning a refusal (outside the workspace, a protected
/// file) into an error outcome.
pub(super) fn resolve(ctx: &ToolContext, path: &str) -> Result<Target, ToolOutcome> {
    let real =
        paths::resolve(ctx.workspace, path).map_err(|e| ToolOutcome::error(e.to_string()))?;
    if ctx.protected.covers(&real) {
        return Err(protected(path));
    }
    let ws = Beneath::open(ctx.workspace).map_err(|e| ToolOutcome::error(e.to_string()))?;
    let rel = ws.relative(&real);
    Ok(Target { ws, real, rel })
}

/// The quick way to open an existing file, tried first by `read`: the
/// workspace held open for the process ([`Beneath::shared`]), the path taken
/// from its text ([`paths::plain_relative`]) and opened following no
/// symbolic link, so the file opened is known to be the one at that path
/// inside the workspace with no `canonicalize` and no `/proc` lookup. The
/// same refusals hold: the run's own files (by that path and by identity)
/// and anything not a regular file or a directory. `None` on any refusal or
/// failure (a link on the way, `..`, not found, ...): the caller then takes
/// [`resolve`] and [`Target::open`], which decide afresh and word the error.
pub(super) fn open_plain(ctx: &ToolContext, path: &str, flags: OFlag) -> Option<(File, Metadata)> {
    if path.is_empty() {
        return None;
    }
    let ws = Beneath::shared(ctx.workspace).ok()?;
    let rel = paths::plain_relative(ws.canonical(), ctx.workspace, path)?;
    let real = if rel == Path::new(".") {
        ws.canonical().to_path_buf()
    } else {
        ws.canonical().join(&rel)
    };
    if ctx.protected.covers(&real) {
        return None;
    }
    let file = ws.open_plain(&rel, flags | OFlag::O_NONBLOCK).ok()?;
    let meta = file.metadata().ok()?;
    if (!meta.is_dir() && regular(path, &meta).is_err()) || same_as_protected(ctx.protected, &meta)
    {
        return None;
    }
    Some((file, meta))
}

/// Opens `rel` beneath `ws` with `flags` and `O_NONBLOCK`, and reads its metadata.
pub(super) fn open_beneath(ws: &Beneath, rel: &Path, flags: OFlag) -> io::Result<(File, Metadata)> {
    let file = ws.open_file(rel, flags | OFlag::O_NONBLOCK)?;
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// Refuses an opened file that is not regular (directories pass: each tool
/// words that itself) or that is one of the run's own files: by the path the
/// kernel has for it, and by identity with each protected file that exists
/// (a hard link).
pub(super) fn check_opened(
    protected: &Protected,
    path: &str,
    file: &File,
    meta: &Metadata,
) -> Result<(), ToolOutcome> {
    if !meta.is_dir() {
        regular(path, meta)?;
    }
    if paths::fd_path(file).is_some_and(|p| protected.covers(&p))
        || same_as_protected(protected, meta)
    {
        return Err(self::protected(path));
    }
    Ok(())
}

fn same_as_protected(protected: &Protected, meta: &Metadata) -> bool {
    protected.paths().iter().any(|p| {
        std::fs::metadata(p)
            .is_ok_and(|m| m.is_file() && m.dev() == meta.dev() && m.ino() == meta.ino())
    })
}

/// Refuses FIFOs, sockets and devices (and anything else not a regular
/// file or a directory).
pub(super) fn regular(path: &str, meta: &Metadata) -> Result<(), ToolOutcome> {
    let t = meta.file_type();
    let kind = if t.is_file() || t.is_dir() {
        return Ok(());
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    };
    Err(ToolOutcome::error(format!(
        "{path} is {kind}, not a regular file; the file tools read and change regular files only"
    )))
}

/// The refusal for one of the run's own files.
pub(super) fn protected(path: &str) -> ToolOutcome {
    ToolOutcome::error(format!(
        "{path} is one of this run's own files (its log, config or a hook program); no tool may \
         read or change it"
    ))
}

fn escapes(path: &str, ws: &Beneath) -> ToolOutcome {
    ToolOutcome::error(
        PathError::Escapes(path.to_string(), ws.canonical().display().to_string()).to_string(),
    )
}

/// An I/O error while trying to `what` (read, write) `path`, as a tool error.
pub(super) fn io_error(what: &str, path: &str, e: &io::Error) -> ToolOutcome {
    match e.kind() {
        io::ErrorKind::NotFound => ToolOutcome::error(format!("file not found: {path}")),
        io::ErrorKind::PermissionDenied => {
            ToolOutcome::error(format!("permission denied: cannot {what} {path}"))
        }
        _ => ToolOutcome::error(format!("cannot {what} {path}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{LocalEnv, group::Unrecorded};
    use crate::tools::process::ProcessTable;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    /// What [`open_plain`] gives for each path: the file's text, or `None`.
    fn plain(ws: &Path, protected: &Protected, path: &str) -> Option<String> {
        let table = ProcessTable::new(ws.join("procs"));
        let ctx = ToolContext {
            workspace: ws,
            step: 1,
            env: &LocalEnv,
            processes: &table,
            plan: None,
            launch: &Unrecorded,
            protected,
            stop: &crate::signals::StopToken::new(),
        };
        let (mut file, meta) = open_plain(&ctx, path, OFlag::O_RDONLY)?;
        if meta.is_dir() {
            return Some("<dir>".into());
        }
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        Some(text)
    }

    #[test]
    fn the_quick_open_takes_plain_paths_only_and_leaves_the_rest_to_the_full_way() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/f.txt"), "inside").unwrap();
        std::fs::write(dir.path().join("secret"), "secret").unwrap();
        std::fs::write(ws.join("run.wal"), "log").unwrap();
        std::fs::write(ws.join("run.wal.snapshot"), "snap").unwrap();
        std::fs::hard_link(ws.join("run.wal"), ws.join("alias")).unwrap();
        symlink("sub/f.txt", ws.join("link")).unwrap();
        symlink("sub", ws.join("dir-link")).unwrap();
        symlink("../secret", ws.join("up")).unwrap();
        nix::unistd::mkfifo(
            &ws.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let mut protected = Protected::none();
        protected.add_log(&ws.join("run.wal"));
        let none = Protected::none();
        let real = ws.canonicalize().unwrap();
        let abs = real.join("sub/f.txt").display().to_string();
        let given = ws.join("./sub/f.txt").display().to_string();
        for path in ["sub/f.txt", "./sub//f.txt", &abs, &given] {
            assert_eq!(
                plain(&ws, &protected, path).as_deref(),
                Some("inside"),
                "{path}"
            );
        }
        assert_eq!(plain(&ws, &none, ".").as_deref(), Some("<dir>"));
        // A link on the way, even one inside, `..`, or a path outside: the full way decides.
        for path in [
            "link",
            "dir-link/f.txt",
            "up",
            "sub/../sub/f.txt",
            "../secret",
            "/etc/passwd",
            "",
            "nope.txt",
        ] {
            assert_eq!(plain(&ws, &none, path), None, "{path}");
        }
        // The run's own files, by name, by sibling name and by identity; a FIFO.
        for path in ["run.wal", "run.wal.snapshot", "alias", "fifo"] {
            assert_eq!(plain(&ws, &protected, path), None, "{path}");
        }
        assert_eq!(plain(&ws, &none, "alias").as_deref(), Some("log"));
    }

    #[test]
    fn the_held_workspace_follows_the_path_to_a_new_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("f.txt"), "first").unwrap();
        let none = Protected::none();
        assert_eq!(plain(&ws, &none, "f.txt").as_deref(), Some("first"));
        std::fs::rename(&ws, dir.path().join("old")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("f.txt"), "second").unwrap();
        assert_eq!(plain(&ws, &none, "f.txt").as_deref(), Some("second"));
        // Deleted and made again (ext4 often hands the inode number back).
        std::fs::remove_dir_all(&ws).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("f.txt"), "third").unwrap();
        assert_eq!(plain(&ws, &none, "f.txt").as_deref(), Some("third"));
    }
}
