//! The file tools: `read` (numbered lines, offset/limit, refuses binary and
//! oversized reads), `write` (creates parent directories) and `edit` (exact,
//! unique match unless `replace_all`, answers with a short unified diff).
//! Every path goes through [`super::paths::resolve`] first.

use super::output::truncate_str;
use super::paths;
use super::{ToolContext, ToolOutcome};
use serde::Deserialize;
use similar::TextDiff;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Lines shown when no limit is given.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut (bytes).
pub const MAX_LINE_BYTES: usize = 2000;
/// A file larger than this is read only with offset or limit.
pub const WHOLE_FILE_CAP: u64 = 256 * 1024;
/// Output of one read stops after this many bytes.
pub const READ_OUTPUT_CAP: usize = 128 * 1024;
/// Bytes looked at for a NUL to call a file binary.
const BINARY_SNIFF: usize = 8192;
/// Longest diff returned by edit.
const DIFF_CAP: usize = 4000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    pub path: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// Resolves a path, turning a refusal into an error outcome.
fn resolve(ctx: &ToolContext, path: &str) -> Result<PathBuf, ToolOutcome> {
    paths::resolve(ctx.workspace, path).map_err(|e| ToolOutcome::error(e.to_string()))
}

fn io_error(what: &str, path: &str, e: &io::Error) -> ToolOutcome {
    match e.kind() {
        io::ErrorKind::NotFound => ToolOutcome::error(format!("file not found: {path}")),
        io::ErrorKind::PermissionDenied => {
            ToolOutcome::error(format!("permission denied: cannot {what} {path}"))
        }
        _ => ToolOutcome::error(format!("cannot {what} {path}: {e}")),
    }
}

pub(crate) fn read(ctx: &ToolContext, args: ReadArgs) -> ToolOutcome {
    let real = match resolve(ctx, &args.path) {
        Ok(p) => p,
        Err(out) => return out,
    };
    read_file(&real, &args).unwrap_or_else(|out| out)
}

fn read_file(real: &Path, args: &ReadArgs) -> Result<ToolOutcome, ToolOutcome> {
    let path = args.path.as_str();
    let meta = std::fs::metadata(real).map_err(|e| io_error("read", path, &e))?;
    if meta.is_dir() {
        return Err(ToolOutcome::error(format!(
            "{path} is a directory, not a file; use glob to list its files"
        )));
    }
    let mut file = File::open(real).map_err(|e| io_error("read", path, &e))?;
    let mut head = Vec::with_capacity(BINARY_SNIFF);
    (&mut file)
        .take(BINARY_SNIFF as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_error("read", path, &e))?;
    if head.contains(&0) {
        return Err(ToolOutcome::error(format!(
            "{path} looks like a binary file ({} bytes); read shows text files only",
            meta.len()
        )));
    }
    if meta.len() > WHOLE_FILE_CAP && args.offset.is_none() && args.limit.is_none() {
        return Err(ToolOutcome::error(format!(
            "{path} is {} bytes, more than the {WHOLE_FILE_CAP} bytes read shows at once; read it \
             in parts with offset and limit, or search it with grep",
            meta.len()
        )));
    }
    if meta.len() == 0 {
        return Ok(ToolOutcome::ok(format!("({path} is empty)")));
    }
    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).max(1);
    let mut reader = BufReader::new(std::io::Cursor::new(head).chain(file));
    let mut out = String::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut shown = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_error("read", path, &e))?;
        if n == 0 {
            break;
        }
        number += 1;
        if number < offset {
            continue;
        }
        if shown == limit || out.len() >= READ_OUTPUT_CAP {
            out.push_str(&format!(
                "[more lines follow; continue with offset={number}]\n"
            ));
            return Ok(ToolOutcome::ok(out));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        out.push_str(&format!(
            "{number:>6}\t{}\n",
            truncate_str(text, MAX_LINE_BYTES)
        ));
        shown += 1;
    }
    if shown == 0 {
        return Err(ToolOutcome::error(format!(
            "offset {offset} is past the end of {path}, which has {number} lines"
        )));
    }
    Ok(ToolOutcome::ok(out))
}

pub(crate) fn write(ctx: &ToolContext, args: WriteArgs) -> ToolOutcome {
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

pub(crate) fn edit(ctx: &ToolContext, args: EditArgs) -> ToolOutcome {
    let real = match resolve(ctx, &args.path) {
        Ok(p) => p,
        Err(out) => return out,
    };
    edit_file(&real, &args).unwrap_or_else(|out| out)
}

fn edit_file(real: &Path, args: &EditArgs) -> Result<ToolOutcome, ToolOutcome> {
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
    if real.is_dir() {
        return Err(ToolOutcome::error(format!(
            "{path} is a directory, not a file"
        )));
    }
    let bytes = std::fs::read(real).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => {
            ToolOutcome::error(format!("file not found: {path} (use write to create it)"))
        }
        _ => io_error("read", path, &e),
    })?;
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
    std::fs::write(real, after.as_bytes()).map_err(|e| io_error("write", path, &e))?;
    let diff = TextDiff::from_lines(&before, &after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    Ok(ToolOutcome::ok(format!(
        "Edited {path}: {count} replacement{}.\n{}",
        if count == 1 { "" } else { "s" },
        truncate_str(&diff, DIFF_CAP)
    )))
}
