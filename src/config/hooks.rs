//! Tool hooks: the `pre_tool` and `post_tool` commands of `[hooks]`, the
//! files they run (protected from the run's tools), and the check that
//! their programs and scripts exist before a run starts.

use super::{ConfigError, HookFailure, bad};
use std::time::Duration;

/// Tool hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSettings {
    pub pre_tool: Option<String>,
    pub post_tool: Option<String>,
    pub timeout: Duration,
    pub on_failure: HookFailure,
}

/// Shell words that run without a file on PATH.
const SHELL_BUILTINS: &[&str] = &[
    ":", ".", "[", "alias", "break", "cd", "command", "continue", "echo", "eval", "exec", "exit",
    "export", "false", "getopts", "hash", "kill", "printf", "pwd", "read", "readonly", "return",
    "set", "shift", "source", "test", "times", "trap", "true", "type", "ulimit", "umask",
    "unalias", "unset", "wait", "if", "for", "while", "until", "case", "!",
];

/// Interpreters whose first operand is the script they run.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "python", "python3", "node", "perl", "ruby",
];

/// One shell word from the start of `s` (plain, 'single' or "double"
/// quoted, no expansion), and the rest; `None` when the word uses shell
/// syntax this check does not follow.
fn first_word(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start();
    let mut word = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => return Some((word, &s[i..])),
            '\'' | '"' => {
                let mut closed = false;
                for (_, q) in chars.by_ref() {
                    if q == c {
                        closed = true;
                        break;
                    }
                    word.push(q);
                }
                if !closed {
                    return None;
                }
            }
            '$' | '`' | '\\' | '(' | ')' | '{' | '}' | ';' | '&' | '|' | '<' | '>' | '*' | '?' => {
                return None;
            }
            c => word.push(c),
        }
    }
    Some((word, ""))
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_executable(&dir.join(name))))
}

impl HookSettings {
    /// The files the hook commands run (a program given by path, an
    /// interpreter's script), resolved from `workspace`: the run protects
    /// them from its tools.
    pub fn files(&self, workspace: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for command in [&self.pre_tool, &self.post_tool].into_iter().flatten() {
            let Some((program, rest)) = first_word(command) else {
                continue;
            };
            if program.contains('/') {
                out.push(workspace.join(&program));
            }
            let base = program.rsplit('/').next().unwrap_or(&program);
            if INTERPRETERS.contains(&base)
                && let Some((script, _)) = first_word(rest)
                && !script.is_empty()
                && !script.starts_with('-')
            {
                out.push(workspace.join(script));
            }
        }
        out
    }

    /// Refuses a hook whose program (or, for an interpreter, whose script)
    /// does not exist or cannot be run: a typo would otherwise block every
    /// call (or be ignored) while the run looks fine. Commands whose first
    /// word uses shell syntax are left to the shell. Relative paths are
    /// taken from `workspace`, where hooks run.
    pub fn check_commands(&self, workspace: &std::path::Path) -> Result<(), ConfigError> {
        for (key, command) in [
            ("hooks.pre_tool", &self.pre_tool),
            ("hooks.post_tool", &self.post_tool),
        ] {
            let Some(command) = command else { continue };
            let Some((mut program, mut rest)) = first_word(command) else {
                continue;
            };
            // Leading variable assignments (`FOO=1 cmd`).
            while program.contains('=') && !program.starts_with('=') {
                let Some((next, after)) = first_word(rest) else {
                    break;
                };
                (program, rest) = (next, after);
            }
            if program.is_empty() || SHELL_BUILTINS.contains(&program.as_str()) {
                continue;
            }
            let resolve = |p: &str| workspace.join(p);
            let found = if program.contains('/') {
                is_executable(&resolve(&program))
            } else {
                on_path(&program)
            };
            if !found {
                return Err(bad(
                    key,
                    format!(
                        "`{program}` is not an executable file or a command on PATH (in `{command}`)"
                    ),
                ));
            }
            let base = program.rsplit('/').next().unwrap_or(&program);
            // `sh script.sh`: the script must exist (an option such as
            // `sh -c '...'` means no script file).
            if INTERPRETERS.contains(&base)
                && let Some((script, _)) = first_word(rest)
                && !script.is_empty()
                && !script.starts_with('-')
                && !resolve(&script).is_file()
            {
                return Err(bad(
                    key,
                    format!("the script `{script}` of `{command}` does not exist"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_HOOK_TIMEOUT;

    fn hooks(pre: &str) -> HookSettings {
        HookSettings {
            pre_tool: Some(pre.to_string()),
            post_tool: None,
            timeout: DEFAULT_HOOK_TIMEOUT,
            on_failure: HookFailure::Block,
        }
    }

    #[test]
    fn hook_programs_and_scripts_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("guard.sh"), "exit 0\n").unwrap();
        for ok in [
            "true",
            "exit 7",
            "printf '{}'",
            "sh guard.sh",
            "sh 'guard.sh' --flag",
            "FOO=1 sh guard.sh",
            "sh -c 'anything at all'",
            "$HOME/bin/x",
            "(cd / && ls)",
        ] {
            hooks(ok)
                .check_commands(ws)
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, says) in [
            ("no-such-program-here --x", "no-such-program-here"),
            ("./missing.sh", "./missing.sh"),
            ("sh missing.sh", "missing.sh"),
            ("python3 'nope.py'", "nope.py"),
        ] {
            let e = hooks(bad).check_commands(ws).unwrap_err().to_string();
            assert!(
                e.contains("hooks.pre_tool") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }
}
