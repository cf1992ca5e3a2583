//! What an approval question shows before it asks: the whole command of a
//! bash call, the diff an edit or a write would make; and the prefix an
//! "always" for bash allows (`cargo test`, not all of bash).

use crate::event::ToolCall;
use std::path::Path;

/// The lines shown above the question for `call` (indented, ending in a
/// newline), or nothing to add for other tools.
pub(super) fn details(call: &ToolCall, workspace: &Path) -> String {
    let Ok(args) = serde_json::from_str::<serde_json::Value>(&call.arguments) else {
        return String::new();
    };
    let text = |k: &str| args.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let body = match call.name.as_str() {
        "bash" => text("command")
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{} {l}\n", if i == 0 { "$" } else { ">" }))
            .collect(),
        "edit" => {
            let path = text("path");
            let (old, new) = (text("old_string"), text("new_string"));
            let all = args.get("replace_all").and_then(serde_json::Value::as_bool) == Some(true);
            match current(workspace, path) {
                Some(before) if before.contains(old) && !old.is_empty() => {
                    let after = if all {
                        before.replace(old, new)
                    } else {
                        before.replacen(old, new, 1)
                    };
                    unified(path, &before, &after)
                }
                // The edit will fail, or the file is out of sight: what
                // the model asked to replace, with what.
                _ => unified(path, old, new),
            }
        }
        "write" => {
            let path = text("path");
            let before = current(workspace, path).unwrap_or_default();
            unified(path, &before, text("content"))
        }
        _ => return String::new(),
    };
    body.lines()
        .map(|l| format!("      {}\n", printable(l)))
        .collect()
}

/// The file `path` names inside the workspace, when it is a readable text
/// file there (nothing outside the workspace is read for a preview).
fn current(workspace: &Path, path: &str) -> Option<String> {
    let rel = Path::new(path);
    let full = if rel.is_absolute() {
        rel.to_path_buf()
    } else {
        workspace.join(rel)
    };
    let real = std::fs::canonicalize(&full).ok()?;
    let root = std::fs::canonicalize(workspace).ok()?;
    if !real.starts_with(&root) || !real.is_file() {
        return None;
    }
    let meta = std::fs::metadata(&real).ok()?;
    if meta.len() > 4 * 1024 * 1024 {
        return None;
    }
    std::fs::read_to_string(real).ok()
}

fn unified(path: &str, before: &str, after: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// Control characters shown as `�` (the text comes from the model).
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '�' } else { c })
        .collect()
}

/// The prefix of `command` that an "always" answer allows from then on:
/// its program and, when the next word looks like a subcommand, that word
/// too (`cargo test`, `git status`, `ls`). `None` when the command chains,
/// pipes, redirects or substitutes anything: such a command is asked about
/// every time.
pub fn bash_prefix(command: &str) -> Option<String> {
    let command = command.trim();
    if command.is_empty()
        || command.contains([';', '&', '|', '$', '`', '>', '<', '\n', '(', ')', '\\'])
    {
        return None;
    }
    let mut words = command.split_whitespace();
    let program = words.next()?;
    if program.contains('=') {
        // An environment assignment first: the command is not its program.
        return None;
    }
    match words.next() {
        Some(sub)
            if sub
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
                && !sub.starts_with('-') =>
        {
            Some(format!("{program} {sub}"))
        }
        _ => Some(program.to_string()),
    }
}

/// Whether `command` is covered by an "always" given for `prefix`.
pub fn prefix_covers(prefix: &str, command: &str) -> bool {
    bash_prefix(command).is_some_and(|p| {
        p == prefix || (command.trim().starts_with(prefix) && p.split(' ').next() == Some(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::{bash_prefix, prefix_covers};

    #[test]
    fn always_for_bash_is_the_commands_prefix_and_never_a_chain() {
        assert_eq!(
            bash_prefix("cargo test --lib x").as_deref(),
            Some("cargo test")
        );
        assert_eq!(bash_prefix("ls -la").as_deref(), Some("ls"));
        assert_eq!(bash_prefix("cargo test && rm -rf /"), None);
        assert_eq!(bash_prefix("echo $(id)"), None);
        assert_eq!(bash_prefix("X=1 make"), None);
        assert!(prefix_covers("cargo test", "cargo test parse::"));
        assert!(!prefix_covers("cargo test", "cargo build"));
        assert!(!prefix_covers("cargo test", "cargo test; rm x"));
        assert!(prefix_covers("ls", "ls src"));
        assert!(!prefix_covers("ls", "lsblk"));
    }
}
