//! The `grep` tool: a regular expression (`grep-regex`) over the files the
//! shared walker lets through, searched with `grep-searcher` (binary files
//! skipped), optionally restricted by a path glob.

use super::paths;
use super::search::{PathGlob, Root, relative, root};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use crate::text::cut_bytes;
use grep_regex::RegexMatcher;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most matching lines grep reports.
pub const MAX_MATCHES: usize = 200;
/// Files larger than this are not searched.
const MAX_FILE_SIZE: u64 = 20 * 1024 * 1024;
/// Longest matching line shown (bytes).
const MAX_MATCH_LINE: usize = 500;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
}

/// The `grep` tool.
pub struct GrepTool;

impl TypedTool for GrepTool {
    const NAME: &'static str = "grep";
    const DESCRIPTION: &'static str = "Search file contents with a regular expression (Rust \
        regex syntax) under a directory or in one file of the workspace, skipping files ignored \
        by .gitignore and binary files. Prints `path:line:text` for each matching line, at most \
        200 matches. glob restricts the files searched, e.g. \"*.rs\" or \"src/**/*.py\".";
    const USAGE: &'static str = r#"{"pattern": string (regex), "path"?: string, "glob"?: string}"#;
    const EFFECT: Effect = Effect::ReadOnly;
    type Args = GrepArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression to search for."},
                "path": {"type": "string", "description": "Directory or file to search (default: the workspace)."},
                "glob": {"type": "string", "description": "Only search files whose path matches this glob."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: GrepArgs) -> ToolOutcome {
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
        let root: Root = match root(ctx, args.path.as_deref()) {
            Ok(r) => r,
            Err(out) => return out,
        };
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .build();
        let mut lines: Vec<String> = Vec::new();
        let mut truncated = false;
        for entry in root.walk() {
            if filter
                .as_ref()
                .is_some_and(|f| !f.is_match(&relative(&root.real, entry.path())))
            {
                continue;
            }
            // Read through the descriptor opened beneath the workspace.
            let Some((file, meta)) = root.open(&entry, OFlag::O_RDONLY) else {
                continue;
            };
            if meta.len() > MAX_FILE_SIZE {
                continue;
            }
            let shown = paths::relative_to(&root.ws, entry.path());
            let sink = Lossy(|number, text| {
                if lines.len() >= MAX_MATCHES {
                    truncated = true;
                    return Ok(false);
                }
                let text = text.trim_end_matches(['\n', '\r']);
                lines.push(format!(
                    "{shown}:{number}:{}",
                    cut_bytes(text, MAX_MATCH_LINE)
                ));
                Ok(true)
            });
            // Unreadable files are skipped, like rg does with a message.
            let _ = searcher.search_file(&matcher, &file, sink);
            if truncated {
                break;
            }
        }
        if lines.is_empty() {
            return ToolOutcome::ok(format!(
                "No matches for `{}` in {}.",
                args.pattern, root.given
            ));
        }
        let mut out = lines.join("\n");
        if truncated {
            out.push_str(&format!(
                "\n[stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob to see the rest]"
            ));
        }
        ToolOutcome::ok(out)
    }
}
