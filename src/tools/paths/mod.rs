//! Confinement of tool paths to the workspace.
//!
//! Two steps. [`resolve`] checks a path as the model wrote it and gives the
//! clear refusals: it is taken relative to the workspace (an absolute path is
//! accepted only when it lies inside it), normalised lexically (`.` and
//! `..`), then every symbolic link along the part that exists is resolved
//! with `canonicalize`; the result must lie inside the canonical workspace, or
//! the call is refused with "path escapes the workspace". A dangling symbolic
//! link is refused too (writing through it could create a file anywhere).
//!
//! That check alone is racy: a symbolic link swapped in after it would be
//! followed by a plain `open`. So the file is then opened through
//! [`Beneath`], the workspace held open as a directory: the kernel resolves
//! the path relative to it with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`, which fails (`EXDEV`) rather than leave the
//! directory, whatever the path's links point to at that instant. Where
//! `openat2` is missing (`ENOSYS`: Linux before 5.6, some seccomp filters),
//! the path is walked one component at a time with `openat(O_NOFOLLOW)` from
//! directory descriptors, symbolic links expanded by hand and refused when
//! absolute or when `..` would climb above the workspace.

mod beneath;

pub use beneath::{Beneath, escaped, fd_path};

use std::io;
use std::path::{Component, Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path escapes the workspace: `{0}` resolves outside {1}")]
    Escapes(String, String),
    #[error("path `{0}` is a dangling symbolic link")]
    DanglingLink(String),
    #[error("cannot resolve the workspace {0}: {1}")]
    Workspace(String, io::Error),
    #[error("cannot resolve `{0}`: {1}")]
    Io(String, io::Error),
}

/// Resolves `input` (as the model wrote it) to a real path inside `workspace`.
/// The file itself need not exist (write creates it), but no existing part of
/// the path may lead outside.
pub fn resolve(workspace: &Path, input: &str) -> Result<PathBuf, PathError> {
    if input.is_empty() {
        return Err(PathError::Empty);
    }
    let ws = workspace
        .canonicalize()
        .map_err(|e| PathError::Workspace(workspace.display().to_string(), e))?;
    let given = Path::new(input);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        workspace.join(given)
    };
    let lexical = normalize(&joined);
    let real = resolve_existing(&lexical, input)?;
    if real.starts_with(&ws) {
        Ok(real)
    } else {
        Err(PathError::Escapes(
            input.to_string(),
            workspace.display().to_string(),
        ))
    }
}

/// `input` (as the model wrote it) relative to the workspace, when that can
/// be told from the text alone: a relative path, or an absolute one under
/// the workspace as given or as resolved, made of plain names and `.` only
/// (no `..`). `.` for the workspace itself. `None` otherwise: the full
/// resolution ([`resolve`]) then decides.
pub fn plain_relative(canonical_ws: &Path, workspace: &Path, input: &str) -> Option<PathBuf> {
    let given = Path::new(input);
    let rel = if given.is_absolute() {
        given
            .strip_prefix(canonical_ws)
            .or_else(|_| given.strip_prefix(workspace))
            .ok()?
    } else {
        given
    };
    let mut out = PathBuf::new();
    for comp in rel.components() {
        match comp {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    Some(out)
}

/// `path` relative to `canonical_ws` (already canonicalized), `.` for the
/// workspace itself, the whole path when it is not inside.
pub fn relative_to(canonical_ws: &Path, path: &Path) -> String {
    match path.strip_prefix(canonical_ws) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// Removes `.` and resolves `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(c) => out.push(c),
        }
    }
    out
}

/// Canonicalizes the longest existing prefix of `path` and appends the rest.
fn resolve_existing(path: &Path, input: &str) -> Result<PathBuf, PathError> {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        match std::fs::symlink_metadata(&existing) {
            Ok(meta) => {
                return match existing.canonicalize() {
                    Ok(mut real) => {
                        for part in rest.iter().rev() {
                            real.push(part);
                        }
                        Ok(real)
                    }
                    Err(e)
                        if meta.file_type().is_symlink() && e.kind() == io::ErrorKind::NotFound =>
                    {
                        Err(PathError::DanglingLink(input.to_string()))
                    }
                    Err(e) => Err(PathError::Io(input.to_string(), e)),
                };
            }
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.kind() == io::ErrorKind::NotADirectory =>
            {
                match existing.file_name() {
                    Some(name) => {
                        rest.push(name.to_os_string());
                        existing.pop();
                    }
                    None => return Err(PathError::Io(input.to_string(), e)),
                }
            }
            Err(e) => return Err(PathError::Io(input.to_string(), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_handles_dots() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../../x")), PathBuf::from("/x"));
    }

    #[test]
    fn inside_paths_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir(ws.join("sub")).unwrap();
        let real = ws.canonicalize().unwrap();
        assert_eq!(
            resolve(ws, "sub/new.txt").unwrap(),
            real.join("sub/new.txt")
        );
        assert_eq!(resolve(ws, "a/b/../c").unwrap(), real.join("a/c"));
        assert_eq!(resolve(ws, "sub/../sub").unwrap(), real.join("sub"));
        let abs = ws.join("sub/x").display().to_string();
        assert_eq!(resolve(ws, &abs).unwrap(), real.join("sub/x"));
        assert_eq!(resolve(ws, ".").unwrap(), real);
    }

    #[test]
    fn escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        for bad in ["../x", "a/../../x", "/etc/passwd", "/"] {
            let err = resolve(&ws, bad).unwrap_err();
            assert!(
                err.to_string().contains("path escapes the workspace"),
                "{bad}: {err}"
            );
        }
        assert!(matches!(resolve(&ws, ""), Err(PathError::Empty)));
    }

    #[test]
    fn symlinks_outside_are_refused_and_dangling_links_too() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.join("out")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("nope"), ws.join("dangling")).unwrap();
        std::os::unix::fs::symlink("inner.txt", ws.join("ok-link")).unwrap();
        std::fs::write(ws.join("inner.txt"), "i").unwrap();
        assert!(matches!(
            resolve(&ws, "out/secret"),
            Err(PathError::Escapes(..))
        ));
        assert!(matches!(
            resolve(&ws, "out/new/file"),
            Err(PathError::Escapes(..))
        ));
        assert!(matches!(
            resolve(&ws, "dangling"),
            Err(PathError::DanglingLink(_))
        ));
        let real = ws.canonicalize().unwrap();
        assert_eq!(resolve(&ws, "ok-link").unwrap(), real.join("inner.txt"));
    }
}
