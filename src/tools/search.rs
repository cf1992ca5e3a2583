//! What `grep` and `glob` share, on ripgrep's crates: the `ignore` walker
//! (respects `.gitignore`, `.ignore` and git excludes, even outside a git
//! repository; shows hidden files but never descends into `.git` or
//! `.tinyagent`; does not follow symbolic links, so a search cannot leave the
//! workspace), path globs on `globset`, and the search root. Both tools answer
//! in sorted order, with bounded output that says when it was cut.

use super::paths;
use super::{ToolContext, ToolOutcome};
use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, WalkBuilder};
use std::path::{Path, PathBuf};

/// Files larger than this are not searched.
const MAX_FILE_SIZE: u64 = 20 * 1024 * 1024;

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
}

/// Resolves the optional search root (the workspace by default).
pub(super) fn root(ctx: &ToolContext, path: Option<&str>) -> Result<Root, ToolOutcome> {
    let given = path.unwrap_or(".");
    let real =
        paths::resolve(ctx.workspace, given).map_err(|e| ToolOutcome::error(e.to_string()))?;
    if !real.exists() {
        return Err(ToolOutcome::error(format!("path not found: {given}")));
    }
    let ws = ctx
        .workspace
        .canonicalize()
        .map_err(|e| ToolOutcome::error(format!("cannot resolve the workspace: {e}")))?;
    Ok(Root {
        real,
        ws,
        given: given.to_string(),
    })
}

/// The files under `root` the ignore rules let through, in sorted order.
pub(super) fn walk(root: &Path) -> impl Iterator<Item = DirEntry> {
    WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .max_filesize(Some(MAX_FILE_SIZE))
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| {
            !(e.depth() > 0 && (e.file_name() == ".git" || e.file_name() == ".tinyagent"))
        })
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
}

/// `entry`'s path relative to `root`; a root that is a file gives its name.
pub(super) fn relative(root: &Path, entry: &Path) -> PathBuf {
    match entry.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => entry.file_name().map(PathBuf::from).unwrap_or_default(),
    }
}
