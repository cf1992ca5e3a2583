//! What `grep` and `glob` share, on ripgrep's crates: the `ignore` walker
//! (respects `.gitignore`, `.ignore` and git excludes, even outside a git
//! repository; shows hidden files but never descends into `.git` or
//! `.tinyagent`, nor into the run's own files; does not follow symbolic
//! links), path globs on `globset`, and the search root. Both tools answer in
//! sorted order, with bounded output that says when it was cut.
//!
//! The walker goes by path, so a directory swapped for a link while it walks
//! could lead it elsewhere. Nothing it yields is taken on trust: each file is
//! opened again beneath the workspace ([`Root::open`], `O_NOFOLLOW`), and only
//! a regular file found there, the same file the walk listed (same inode),
//! not one of the run's own, is listed or read.

use super::files::{self, open_beneath};
use super::paths::{self, Beneath};
use super::{ToolContext, ToolOutcome};
use crate::exec::protected::Protected;
use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, WalkBuilder};
use nix::fcntl::OFlag;
use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};

/// A glob over paths relative to the search root. A pattern without `/` also
/// matches a file's bare name at any depth (like `rg -g`) when `basename` is set.
pub(super) struct PathGlob {
    matcher: GlobMatcher,
    basename: bool,
}

impl PathGlob {
    pub(super) fn new(pattern: &str, basename_if_plain: bool) -> Result<Self, String> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob `{pattern}`: {e}"))?;
        Ok(PathGlob {
            matcher: glob.compile_matcher(),
            basename: basename_if_plain && !pattern.contains('/'),
        })
    }

    pub(super) fn is_match(&self, rel: &Path) -> bool {
        if self.matcher.is_match(rel) {
            return true;
        }
        self.basename
            && rel
                .file_name()
                .is_some_and(|name| self.matcher.is_match(Path::new(name)))
    }
}

/// A resolved search root.
pub(super) struct Root {
    /// The real directory or file to search.
    pub(super) real: PathBuf,
    /// The canonical workspace, to show paths relative to it.
    pub(super) ws: PathBuf,
    /// The path as the model gave it.
    pub(super) given: String,
    beneath: Beneath,
    protected: Protected,
}

/// Resolves the optional search root (the workspace by default).
pub(super) fn root(ctx: &ToolContext, path: Option<&str>) -> Result<Root, ToolOutcome> {
    let given = path.unwrap_or(".");
    let real =
        paths::resolve(ctx.workspace, given).map_err(|e| ToolOutcome::error(e.to_string()))?;
    if !real.exists() {
        return Err(ToolOutcome::error(format!("path not found: {given}")));
    }
    if ctx.protected.covers(&real) {
        return Err(files::protected(given));
    }
    let beneath = Beneath::open(ctx.workspace)
        .map_err(|e| ToolOutcome::error(format!("cannot resolve the workspace: {e}")))?;
    // A root that is a FIFO, a socket or a device is refused, not skipped.
    if let Ok((_, meta)) = open_beneath(&beneath, &beneath.relative(&real), OFlag::O_PATH) {
        files::regular(given, &meta)?;
    }
    Ok(Root {
        real,
        ws: beneath.canonical().to_path_buf(),
        given: given.to_string(),
        beneath,
        protected: ctx.protected.clone(),
    })
}

impl Root {
    /// The regular files under the root the ignore rules let through, in
    /// sorted order (not yet checked: see [`Root::open`]).
    pub(super) fn walk(&self) -> impl Iterator<Item = DirEntry> {
        let protected = self.protected.clone();
        WalkBuilder::new(&self.real)
            .hidden(false)
            .require_git(false)
            .follow_links(false)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| {
                !(e.depth() > 0 && (e.file_name() == ".git" || e.file_name() == ".tinyagent"))
                    && !protected.covers(e.path())
            })
            .build()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
    }

    /// Opens a file the walk yielded, beneath the workspace and without
    /// following a final link, with `flags` (`O_PATH` to look only): None
    /// unless it is a regular file there that no protection covers, and the
    /// very file the walk listed (its inode is the one the directory listing
    /// gave). A directory swapped for a link while the walk read it lists
    /// another directory's names; none of them is shown unless the same file
    /// is found beneath the workspace at that name.
    pub(super) fn open(&self, entry: &DirEntry, flags: OFlag) -> Option<(File, Metadata)> {
        use std::os::unix::fs::MetadataExt;
        let rel = self.beneath.relative(entry.path());
        let (file, meta) = open_beneath(&self.beneath, &rel, flags | OFlag::O_NOFOLLOW).ok()?;
        if entry.ino().is_some_and(|listed| listed != meta.ino()) {
            return None;
        }
        let shown = rel.display().to_string();
        (meta.is_file() && files::check_opened(&self.protected, &shown, &file, &meta).is_ok())
            .then_some((file, meta))
    }
}

/// `entry`'s path relative to `root`; a root that is a file gives its name.
pub(super) fn relative(root: &Path, entry: &Path) -> PathBuf {
    match entry.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => entry.file_name().map(PathBuf::from).unwrap_or_default(),
    }
}
