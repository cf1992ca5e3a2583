//! The `write` tool: replaces or creates a file, parent directories included.

use super::files::{io_error, resolve};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
}

/// The `write` tool.
pub struct WriteTool;

impl TypedTool for WriteTool {
    const NAME: &'static str = "write";
    const DESCRIPTION: &'static str = "Write a file in the workspace, replacing it if it exists. \
        Parent directories are created. Use edit for small changes to an existing file.";
    const USAGE: &'static str = r#"{"path": string, "content": string}"#;
    const EFFECT: Effect = Effect::Mutating;
    type Args = WriteArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "content": {"type": "string", "description": "The whole new content of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: WriteArgs) -> ToolOutcome {
        let real = match resolve(ctx, &args.path) {
            Ok(p) => p,
            Err(out) => return out,
        };
        let path = args.path.as_str();
        if real.is_dir() {
            return ToolOutcome::error(format!("{path} is a directory; give a file path"));
        }
        let existed = real.exists();
        if let Some(parent) = real.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return ToolOutcome::error(format!("cannot create the directories of {path}: {e}"));
        }
        match std::fs::write(&real, args.content.as_bytes()) {
            Ok(()) => ToolOutcome::ok(format!(
                "{} {path}: {} bytes written",
                if existed { "Overwrote" } else { "Created" },
                args.content.len()
            )),
            Err(e) => io_error("write", path, &e),
        }
    }
}
