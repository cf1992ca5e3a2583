//! The `write` tool: replaces or creates a file, parent directories included.

use super::files::{OpenError, io_error, resolve};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{self, Write};

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
        write_file(ctx, &args).unwrap_or_else(|out| out)
    }
}

fn write_file(ctx: &ToolContext, args: &WriteArgs) -> Result<ToolOutcome, ToolOutcome> {
    let path = args.path.as_str();
    let target = resolve(ctx, path)?;
    if target.real.is_dir() {
        return Err(ToolOutcome::error(format!(
            "{path} is a directory; give a file path"
        )));
    }
    // Opened without truncating, so nothing changes before the file is
    // known to be a regular one the tools may change.
    let open = |flags| target.open(ctx, path, OFlag::O_WRONLY | flags);
    let (mut file, existed) = match open(OFlag::empty()) {
        Ok((file, _)) => (file, true),
        Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = target.rel.parent() {
                target.ws.create_dirs(parent).map_err(|e| {
                    ToolOutcome::error(format!("cannot create the directories of {path}: {e}"))
                })?;
            }
            match open(OFlag::O_CREAT | OFlag::O_EXCL) {
                Ok((file, _)) => (file, false),
                // Created meanwhile by someone else: replace it as usual.
                Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let (file, _) = open(OFlag::empty()).map_err(|e| e.outcome("write", path))?;
                    (file, true)
                }
                Err(e) => return Err(e.outcome("write", path)),
            }
        }
        Err(e) => return Err(e.outcome("write", path)),
    };
    file.set_len(0)
        .and_then(|()| file.write_all(args.content.as_bytes()))
        .map_err(|e| io_error("write", path, &e))?;
    Ok(ToolOutcome::ok(format!(
        "{} {path}: {} bytes written",
        if existed { "Overwrote" } else { "Created" },
        args.content.len()
    )))
}
