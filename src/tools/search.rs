//! `grep` and `glob`, on ripgrep's crates: the `ignore` walker (respects
//! `.gitignore`, `.ignore` and git excludes, even outside a git repository;
//! shows hidden files but never descends into `.git` or `.tinyagent`; does not
//! follow symbolic links, so a search cannot leave the workspace), `grep-regex`
//! and `grep-searcher` (skips binary files) and `globset`. Both answer in
//! sorted order, with bounded output that says when it was cut.

use super::output::truncate_str;
use super::paths;
use super::{ToolContext, ToolOutcome};
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcher;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::{DirEntry, WalkBuilder};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Most matching lines grep reports.
pub const MAX_MATCHES: usize = 200;
/// Most paths glob lists.
pub const MAX_PATHS: usize = 500;
/// Longest matching line shown (bytes).
const MAX_MATCH_LINE: usize = 500;
/// Files larger than this are not searched.
const MAX_FILE_SIZE: u64 = 20 * 1024 * 1024;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
}

/// A glob over paths relative to the search root. A pattern without `/` also
/// matches a file's bare name at any depth (like `rg -g`) when `basename` is set.
struct PathGlob {
    matcher: GlobMatcher,
    basename: bool,
}

impl PathGlob {
    fn new(pattern: &str, basename_if_plain: bool) -> Result<Self, String> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob `{pattern}`: {e}"))?;
        Ok(PathGlob {
            matcher: glob.compile_matcher(),
            basename: basename_if_plain && !pattern.contains('/'),
        })
    }

    fn is_match(&self, rel: &Path) -> bool {
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
struct Root {
    /// The real directory or file to search.
    real: PathBuf,
    /// The canonical workspace, to show paths relative to it.
    ws: PathBuf,
    /// The path as the model gave it.
    given: String,
}

/// Resolves the optional search root (the workspace by default).
fn root(ctx: &ToolContext, path: Option<&str>) -> Result<Root, ToolOutcome> {
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
fn walk(root: &Path) -> impl Iterator<Item = DirEntry> {
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
fn relative(root: &Path, entry: &Path) -> PathBuf {
    match entry.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => entry.file_name().map(PathBuf::from).unwrap_or_default(),
    }
}

pub(crate) fn grep(ctx: &ToolContext, args: GrepArgs) -> ToolOutcome {
    let matcher = match RegexMatcher::new_line_matcher(&args.pattern) {
        Ok(m) => m,
        Err(e) => return ToolOutcome::error(format!("invalid regex `{}`: {e}", args.pattern)),
    };
    let filter = match args
        .glob
        .as_deref()
        .map(|g| PathGlob::new(g, true))
        .transpose()
    {
        Ok(f) => f,
        Err(e) => return ToolOutcome::error(e),
    };
    let Root {
        real: root,
        ws,
        given,
    } = match root(ctx, args.path.as_deref()) {
        Ok(r) => r,
        Err(out) => return out,
    };
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut lines: Vec<String> = Vec::new();
    let mut truncated = false;
    for entry in walk(&root) {
        if filter
            .as_ref()
            .is_some_and(|f| !f.is_match(&relative(&root, entry.path())))
        {
            continue;
        }
        let shown = paths::relative_to(&ws, entry.path());
        let sink = Lossy(|number, text| {
            if lines.len() >= MAX_MATCHES {
                truncated = true;
                return Ok(false);
            }
            let text = text.trim_end_matches(['\n', '\r']);
            lines.push(format!(
                "{shown}:{number}:{}",
                truncate_str(text, MAX_MATCH_LINE)
            ));
            Ok(true)
        });
        // Unreadable files are skipped, like rg does with a message.
        let _ = searcher.search_path(&matcher, entry.path(), sink);
        if truncated {
            break;
        }
    }
    if lines.is_empty() {
        return ToolOutcome::ok(format!("No matches for `{}` in {given}.", args.pattern));
    }
    let mut out = lines.join("\n");
    if truncated {
        out.push_str(&format!(
            "\n[stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob to see the rest]"
        ));
    }
    ToolOutcome::ok(out)
}

pub(crate) fn glob(ctx: &ToolContext, args: GlobArgs) -> ToolOutcome {
    let pattern = args.pattern.trim_start_matches("./");
    let glob = match PathGlob::new(pattern, false) {
        Ok(g) => g,
        Err(e) => return ToolOutcome::error(e),
    };
    let Root {
        real: root,
        ws,
        given,
    } = match root(ctx, args.path.as_deref()) {
        Ok(r) => r,
        Err(out) => return out,
    };
    let mut found: Vec<String> = walk(&root)
        .filter(|e| glob.is_match(&relative(&root, e.path())))
        .map(|e| paths::relative_to(&ws, e.path()))
        .collect();
    found.sort();
    if found.is_empty() {
        let hint = if pattern.contains('/') {
            String::new()
        } else {
            format!(
                " (`{pattern}` matches only directly inside it; use `**/{pattern}` for every depth)"
            )
        };
        return ToolOutcome::ok(format!("No files match `{pattern}` in {given}{hint}."));
    }
    let total = found.len();
    found.truncate(MAX_PATHS);
    let mut out = found.join("\n");
    if total > MAX_PATHS {
        out.push_str(&format!(
            "\n[{} more paths not shown; narrow the pattern or path]",
            total - MAX_PATHS
        ));
    }
    ToolOutcome::ok(out)
}
