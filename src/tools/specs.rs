//! What the model is told about each tool: name, description and the exact
//! JSON Schema of its arguments, plus a one-line usage string that format-error
//! messages quote back to the model.
//!
//! Everything here feeds the tool signature, so any change to a description or
//! schema changes the signature recorded in `run.started` (and a resumed run
//! with a different tool set is refused).

use super::ToolSpec;
use serde_json::json;

/// The tools in the fixed order they are advertised in.
pub(crate) const ALL_TOOLS: [&str; 8] = [
    "bash",
    "process",
    "read",
    "write",
    "edit",
    "grep",
    "glob",
    "update_plan",
];

/// Tools that change files or run commands (not offered in read-only mode).
pub(crate) const MUTATING_TOOLS: [&str; 4] = ["bash", "process", "write", "edit"];

/// The argument shape of a tool in one line, for format-error messages.
pub(crate) fn usage(name: &str) -> &'static str {
    match name {
        "bash" => r#"{"command": string, "timeout_ms"?: integer, "background"?: boolean}"#,
        "process" => {
            r#"{"action": "list" | "output" | "kill", "id"?: string (required for output and kill), "tail_bytes"?: integer}"#
        }
        "read" => {
            r#"{"path": string, "offset"?: integer (first line, 1-based), "limit"?: integer}"#
        }
        "write" => r#"{"path": string, "content": string}"#,
        "edit" => {
            r#"{"path": string, "old_string": string, "new_string": string, "replace_all"?: boolean}"#
        }
        "grep" => r#"{"pattern": string (regex), "path"?: string, "glob"?: string}"#,
        "glob" => r#"{"pattern": string, "path"?: string}"#,
        "update_plan" => {
            r#"{"items": [{"id": string, "text": string, "status": "pending" | "in_progress" | "done" | "blocked"}], "note"?: string}"#
        }
        _ => "(unknown tool)",
    }
}

/// The spec of one tool by name (`None` for a name that is not a tool).
pub(crate) fn spec(name: &str) -> Option<ToolSpec> {
    let (description, parameters) = match name {
        "bash" => (
            "Run a shell command with `bash -c` in the workspace directory. stdout and stderr are \
             merged and returned with the exit code. The command runs in its own process group \
             with stdin closed; when it exceeds timeout_ms (default 120000) the whole group is \
             killed, and processes it leaves behind are killed when it ends. Long output keeps its head and tail and marks how much was cut. For servers \
             and other long-running commands set background: true: the call returns at once with \
             a process id, and the `process` tool lists, reads the output of, or kills it. \
             Prefer read/grep/glob/edit over cat/grep/find/sed for files.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash script to run."},
                    "timeout_ms": {"type": "integer", "minimum": 1,
                        "description": "Kill the command after this many milliseconds (default 120000)."},
                    "background": {"type": "boolean",
                        "description": "Start the command in the background and return its process id at once."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        "process" => (
            "Manage background processes started with bash background: true. action \"list\" \
             shows every process with its status; \"output\" returns the tail of a process's \
             output (tail_bytes, default 10000); \"kill\" kills the process and its whole group.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["list", "output", "kill"]},
                    "id": {"type": "string", "description": "Process id such as \"p1\" (for output and kill)."},
                    "tail_bytes": {"type": "integer", "minimum": 1,
                        "description": "How many bytes of the end of the output to return (default 10000)."}
                },
                "required": ["action"],
                "additionalProperties": false
            }),
        ),
        "read" => (
            "Read a text file of the workspace. Lines are numbered from 1 like `cat -n`. offset is \
             the first line to show (1-based), limit the number of lines (default 2000); very long \
             lines are cut. Large files must be read in parts with offset and limit. Binary files \
             and directories are refused (use glob to list a directory).",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show (default 2000)."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        ),
        "write" => (
            "Write a file in the workspace, replacing it if it exists. Parent directories are \
             created. Use edit for small changes to an existing file.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace."},
                    "content": {"type": "string", "description": "The whole new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        ),
        "edit" => (
            "Replace text in a file of the workspace. old_string must match the file exactly \
             (whitespace and indentation included) and only once, unless replace_all is true; \
             include enough surrounding lines to make it unique. Returns a short diff.",
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
            }),
        ),
        "grep" => (
            "Search file contents with a regular expression (Rust regex syntax) under a directory \
             or in one file of the workspace, skipping files ignored by .gitignore and binary \
             files. Prints `path:line:text` for each matching line, at most 200 matches. glob \
             restricts the files searched, e.g. \"*.rs\" or \"src/**/*.py\".",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression to search for."},
                    "path": {"type": "string", "description": "Directory or file to search (default: the workspace)."},
                    "glob": {"type": "string", "description": "Only search files whose path matches this glob."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        "glob" => (
            "List the files of the workspace whose path matches a glob pattern such as \
             \"**/*.rs\" or \"src/*.toml\", sorted, skipping files ignored by .gitignore. The \
             pattern is matched against paths relative to `path` (default: the workspace); at \
             most 500 paths are listed.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern."},
                    "path": {"type": "string", "description": "Directory to search in (default: the workspace)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        "update_plan" => (
            "Replace the task plan with a new version. Give every item each time (the full list, \
             not a change): a short stable id, the text, and a status (pending, in_progress, done, \
             blocked). At most one item may be in_progress, at most 50 items. Use note to say why \
             the plan changed. The current plan is always shown to you in the [Current plan] \
             message.",
            json!({
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "maxItems": 50,
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "text": {"type": "string", "maxLength": 500},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "done", "blocked"]}
                            },
                            "required": ["id", "text", "status"],
                            "additionalProperties": false
                        }
                    },
                    "note": {"type": "string", "description": "Why the plan changed."}
                },
                "required": ["items"],
                "additionalProperties": false
            }),
        ),
        _ => return None,
    };
    Some(ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
    })
}
