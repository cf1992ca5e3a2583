//! The `edit` tool: replaces an exact, unique match (every match with
//! `replace_all`) and answers with a short unified diff.

use super::files::{OpenError, io_error, resolve};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use crate::text::cut_bytes;
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::{Value, json};
use similar::TextDiff;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// Longest diff returned by edit.
const DIFF_CAP: usize = 4000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// The `edit` tool.
pub struct EditTool;

impl TypedTool for EditTool {
    const NAME: &'static str = "edit";
    const DESCRIPTION: &'static str = "Replace text in a file of the workspace. old_string must \
        match the file exactly (whitespace and indentation included) and only once, unless \
        replace_all is true; include enough surrounding lines to make it unique. Returns a short \
        diff.";
    const USAGE: &'static str =
        r#"{"path": string, "old_string": string, "new_string": string, "replace_all"?: boolean}"#;
    const EFFECT: Effect = Effect::Mutating;
    type Args = EditArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The text to put in its place (must differ)."},
                "replace_all": {"type": "boolean", "description": "Replace every match (default false)."}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: EditArgs) -> ToolOutcome {
        edit_file(ctx, &args).unwrap_or_else(|out| out)
    }
}

fn edit_file(ctx: &ToolContext, args: &EditArgs) -> Result<ToolOutcome, ToolOutcome> {
    let path = args.path.as_str();
    if args.old_string.is_empty() {
        return Err(ToolOutcome::error(
            "old_string is empty; give the exact text to replace (use write to create a file)",
        ));
    }
    if args.old_string == args.new_string {
        return Err(ToolOutcome::error(
            "old_string and new_string are the same; nothing would change",
        ));
    }
    let target = resolve(ctx, path)?;
    let is_dir = || ToolOutcome::error(format!("{path} is a directory, not a file"));
    if target.real.is_dir() {
        return Err(is_dir());
    }
    // The file is read and rewritten through one descriptor: what was
    // matched is what is changed.
    let (mut file, meta) = target.open(ctx, path, OFlag::O_RDWR).map_err(|e| match e {
        OpenError::Io(e) if e.kind() == io::ErrorKind::NotFound => {
            ToolOutcome::error(format!("file not found: {path} (use write to create it)"))
        }
        OpenError::Io(e) if e.raw_os_error() == Some(nix::errno::Errno::EISDIR as i32) => is_dir(),
        e => e.outcome("write", path),
    })?;
    if meta.is_dir() {
        return Err(is_dir());
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_error("read", path, &e))?;
    let before = String::from_utf8(bytes).map_err(|_| {
        ToolOutcome::error(format!(
            "{path} is not UTF-8 text; edit changes text files only"
        ))
    })?;
    let count = before.matches(args.old_string.as_str()).count();
    let replace_all = args.replace_all.unwrap_or(false);
    if count == 0 {
        return Err(ToolOutcome::error(format!(
            "old_string was not found in {path}; it must match exactly, whitespace and \
             indentation included (read the file to copy the text)"
        )));
    }
    if count > 1 && !replace_all {
        return Err(ToolOutcome::error(format!(
            "old_string matches {count} places in {path}; include more surrounding lines to \
             make it unique, or set replace_all to true to replace all {count}"
        )));
    }
    let after = if replace_all {
        before.replace(&args.old_string, &args.new_string)
    } else {
        before.replacen(&args.old_string, &args.new_string, 1)
    };
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(after.as_bytes()))
        .map_err(|e| io_error("write", path, &e))?;
    let diff = TextDiff::from_lines(&before, &after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    Ok(ToolOutcome::ok(format!(
        "Edited {path}: {count} replacement{}.\n{}",
        if count == 1 { "" } else { "s" },
        cut_bytes(&diff, DIFF_CAP)
    )))
}
