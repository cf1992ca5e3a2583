//! The `glob` tool: the paths the shared walker lets through that match a
//! glob, sorted.

use super::paths;
use super::search::{PathGlob, Root, relative, root};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most paths glob lists.
pub const MAX_PATHS: usize = 500;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
}

/// The `glob` tool.
pub struct GlobTool;

impl TypedTool for GlobTool {
    const NAME: &'static str = "glob";
    const DESCRIPTION: &'static str = "List the files of the workspace whose path matches a glob \
        pattern such as \"**/*.rs\" or \"src/*.toml\", sorted, skipping files ignored by \
        .gitignore. The pattern is matched against paths relative to `path` (default: the \
        workspace); at most 500 paths are listed.";
    const USAGE: &'static str = r#"{"pattern": string, "path"?: string}"#;
    const EFFECT: Effect = Effect::ReadOnly;
    type Args = GlobArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern."},
                "path": {"type": "string", "description": "Directory to search in (default: the workspace)."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: GlobArgs) -> ToolOutcome {
        let pattern = args.pattern.trim_start_matches("./");
        let glob = match PathGlob::new(pattern, false) {
            Ok(g) => g,
            Err(e) => return ToolOutcome::error(e),
        };
        let root: Root = match root(ctx, args.path.as_deref()) {
            Ok(r) => r,
            Err(out) => return out,
        };
        // A name match: a file is looked at (O_PATH), never read.
        let mut found: Vec<String> = root
            .walk()
            .filter(|e| glob.is_match(&relative(&root.real, e.path())))
            .filter(|e| root.open(e, OFlag::O_PATH).is_some())
            .map(|e| paths::relative_to(&root.ws, e.path()))
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
            return ToolOutcome::ok(format!(
                "No files match `{pattern}` in {}{hint}.",
                root.given
            ));
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
}
