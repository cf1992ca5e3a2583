//! The `read` tool: numbered lines with offset and limit; binary files,
//! directories and oversized whole-file reads are refused.

use super::files::{io_error, open_plain, resolve};
use super::{Effect, ToolContext, ToolOutcome, TypedTool};
use crate::text::cut_bytes;
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};

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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    pub path: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// The `read` tool.
pub struct ReadTool;

impl TypedTool for ReadTool {
    const NAME: &'static str = "read";
    const DESCRIPTION: &'static str = "Read a text file of the workspace. Lines are numbered \
        from 1 like `cat -n`. offset is the first line to show (1-based), limit the number of \
        lines (default 2000); very long lines are cut. Large files must be read in parts with \
        offset and limit. Binary files and directories are refused (use glob to list a \
        directory).";
    const USAGE: &'static str =
        r#"{"path": string, "offset"?: integer (first line, 1-based), "limit"?: integer}"#;
    const EFFECT: Effect = Effect::ReadOnly;
    type Args = ReadArgs;

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show (default 2000)."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn run(&self, ctx: &ToolContext, args: ReadArgs) -> ToolOutcome {
        read_file(ctx, &args).unwrap_or_else(|out| out)
    }
}

fn read_file(ctx: &ToolContext, args: &ReadArgs) -> Result<ToolOutcome, ToolOutcome> {
    let path = args.path.as_str();
    let (mut file, meta) = match open_plain(ctx, path, OFlag::O_RDONLY) {
        Some(opened) => opened,
        None => resolve(ctx, path)?
            .open(ctx, path, OFlag::O_RDONLY)
            .map_err(|e| e.outcome("read", path))?,
    };
    if meta.is_dir() {
        return Err(ToolOutcome::error(format!(
            "{path} is a directory, not a file; use glob to list its files"
        )));
    }
    // No more than the size the file had when opened: a file read whole
    // takes no second `read` to find its end.
    let mut head = Vec::with_capacity(BINARY_SNIFF);
    (&mut file)
        .take(meta.len().min(BINARY_SNIFF as u64))
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
    // A file the sniff read to its end is not read again (each line's
    // refill would ask the kernel once more for what is not there).
    let rest: Box<dyn Read> = if head.len() < BINARY_SNIFF {
        Box::new(std::io::empty())
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::new(std::io::Cursor::new(head).chain(rest));
    let mut out = String::new();
    let mut lines = Lines::default();
    let mut number = 0u64;
    let mut shown = 0u64;
    loop {
        // Lines before the offset are only counted, never kept.
        let more = if number + 1 < offset {
            lines.skip(&mut reader)
        } else {
            lines.next(&mut reader)
        }
        .map_err(|e| io_error("read", path, &e))?;
        if !more {
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
        out.push_str(&format!("{number:>6}\t{}\n", lines.shown()));
        shown += 1;
    }
    if shown == 0 {
        return Err(ToolOutcome::error(format!(
            "offset {offset} is past the end of {path}, which has {number} lines"
        )));
    }
    Ok(ToolOutcome::ok(out))
}

/// Bytes of a line kept to show it: the cut at [`MAX_LINE_BYTES`] falls on a
/// character boundary at most 3 bytes back, and a character cut at the end
/// of what is kept lies wholly past it.
const KEEP: usize = MAX_LINE_BYTES + 4;
/// A line is read in pieces of at most this many bytes.
const PIECE: u64 = 64 * 1024;

/// One line at a time with memory bounded by [`KEEP`] and [`PIECE`], however
/// long the line: the rest of a long line is counted, not kept.
#[derive(Default)]
struct Lines {
    /// The line's first bytes (at most `KEEP`).
    kept: Vec<u8>,
    /// Its length without the trailing `\r`/`\n` run.
    len: u64,
    piece: Vec<u8>,
}

impl Lines {
    /// Reads the next line; false at the end of the file.
    fn next(&mut self, reader: &mut impl BufRead) -> std::io::Result<bool> {
        self.kept.clear();
        self.read(reader, true)
    }

    /// Reads past the next line, keeping nothing of it.
    fn skip(&mut self, reader: &mut impl BufRead) -> std::io::Result<bool> {
        self.kept.clear();
        self.read(reader, false)
    }

    fn read(&mut self, reader: &mut impl BufRead, keep: bool) -> std::io::Result<bool> {
        let mut total = 0u64;
        let mut trail = 0u64;
        loop {
            self.piece.clear();
            let n = reader.take(PIECE).read_until(b'\n', &mut self.piece)?;
            if n == 0 {
                break;
            }
            total += n as u64;
            let ends = self
                .piece
                .iter()
                .rev()
                .take_while(|b| matches!(b, b'\n' | b'\r'));
            let ends = ends.count() as u64;
            trail = if ends == n as u64 { trail + ends } else { ends };
            if keep {
                let room = KEEP.saturating_sub(self.kept.len()).min(n);
                self.kept.extend_from_slice(&self.piece[..room]);
            }
            if self.piece.last() == Some(&b'\n') {
                break;
            }
        }
        self.len = total - trail;
        Ok(total > 0)
    }

    /// The line as shown: lossy UTF-8, cut at [`MAX_LINE_BYTES`].
    fn shown(&self) -> String {
        let len = self.len as usize;
        if len <= self.kept.len() {
            return cut_bytes(&String::from_utf8_lossy(&self.kept[..len]), MAX_LINE_BYTES);
        }
        let text = String::from_utf8_lossy(&self.kept);
        let mut end = MAX_LINE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}... [{} more bytes]", &text[..end], self.len - end as u64)
    }
}
