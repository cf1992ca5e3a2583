//! Which calls the person is asked about: `--approve` and `[approvals]`,
//! and the `allow` rules that let a tool, or a bash command matching a
//! glob, through without a question.

use super::ApproveMode;

/// One `approvals.allow` rule: a tool name, or `bash:<glob>` on the command.
#[derive(Debug, Clone)]
pub struct AllowRule {
    pub text: String,
    tool: String,
    command: Option<globset::GlobMatcher>,
    /// The glob as written (its shell characters are the only ones a
    /// matching command may hold).
    pattern: String,
}

/// Characters that make one shell command line more than one simple
/// command (a list, a pipe, a substitution, a redirection).
const SHELL_SPECIALS: &[char] = &[';', '&', '|', '`', '$', '(', ')', '<', '>', '\n', '\r'];

impl PartialEq for AllowRule {
    fn eq(&self, other: &AllowRule) -> bool {
        self.text == other.text
    }
}

impl AllowRule {
    /// Parses `tool` or `bash:<glob>`.
    pub fn parse(text: &str) -> Result<AllowRule, String> {
        let text = text.trim();
        let (tool, glob) = match text.split_once(':') {
            Some((t, g)) => (t.trim(), Some(g)),
            None => (text, None),
        };
        if tool.is_empty() {
            return Err(format!(
                "{text:?}: a rule names a tool (`edit`, `bash:git status*`)"
            ));
        }
        let command = match glob {
            None => None,
            Some(g) if tool == "bash" => Some(
                globset::GlobBuilder::new(g)
                    .literal_separator(false)
                    .build()
                    .map_err(|e| format!("{text:?}: {e}"))?
                    .compile_matcher(),
            ),
            Some(_) => {
                return Err(format!(
                    "{text:?}: only bash rules take a pattern (`bash:<command glob>`)"
                ));
            }
        };
        Ok(AllowRule {
            text: text.to_string(),
            tool: tool.to_string(),
            command,
            pattern: glob.unwrap_or("").to_string(),
        })
    }

    /// Whether the rule allows a call of `tool` (for bash, running
    /// `command`). A bash rule's `*` would also match `; anything`, so a
    /// command holding a shell special character (`;`, `&`, `|`, `$`,
    /// backquote, parentheses, redirections, a newline) the glob does not
    /// hold itself is never allowed by it.
    pub fn allows(&self, tool: &str, command: Option<&str>) -> bool {
        if self.tool != tool {
            return false;
        }
        match (&self.command, command) {
            (None, _) => true,
            (Some(m), Some(c)) => {
                !c.chars()
                    .any(|ch| SHELL_SPECIALS.contains(&ch) && !self.pattern.contains(ch))
                    && m.is_match(c)
            }
            (Some(_), None) => false,
        }
    }
}

/// `--approve` and `[approvals]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApprovalSettings {
    pub mode: ApproveMode,
    pub allow: Vec<AllowRule>,
}
