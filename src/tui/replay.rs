//! A resumed chat's conversation so far, shown before its prompt: what the
//! person typed, what the model answered (Markdown rendered), the calls it
//! made with their results folded to a line, from the model's view.

use crate::event::{Message, Role};

/// Messages shown at most (the latest).
const LAST: usize = 60;

/// The conversation in `view` as the chat shows it; empty when nothing was
/// said yet.
pub fn conversation(view: &[Message], color: bool) -> String {
    let said: Vec<&Message> = view
        .iter()
        .filter(|m| m.role != Role::System && !is_notice(&m.content))
        .collect();
    if !said.iter().any(|m| m.role == Role::User) {
        return String::new();
    }
    let skipped = said.len().saturating_sub(LAST);
    let mut out = String::from("── the conversation so far ──\n");
    if skipped > 0 {
        out.push_str(&format!(
            "… {skipped} earlier messages (tinyagent log show has them all)\n"
        ));
    }
    for m in &said[skipped..] {
        match m.role {
            Role::User => {
                for (i, line) in m.content.lines().enumerate() {
                    out.push_str(if i == 0 { "you> " } else { "   … " });
                    out.push_str(line);
                    out.push('\n');
                }
            }
            Role::Assistant => {
                let text = m.content.trim();
                if !text.is_empty() {
                    out.push_str(&super::markdown::render(text, color));
                    out.push('\n');
                }
                for c in &m.tool_calls {
                    out.push_str(&format!("  → {} ({})\n", c.name, c.id));
                }
            }
            Role::Tool => {
                let f = crate::text::fold(&m.content, 1, 0);
                let first = f.head.first().copied().unwrap_or("");
                let exit = f
                    .exit_code
                    .map(|c| format!(" · exit {c}"))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "    {} {}{exit}: {}\n",
                    if m.is_error { "✗" } else { "✓" },
                    m.tool_call_id.as_deref().unwrap_or(""),
                    crate::text::cut_chars(first, 100, "…")
                ));
            }
            Role::System => {}
        }
    }
    out.push_str("── ──\n");
    out
}

/// The agent's own notes to the model (the pinned plan, the resume
/// notice, the compaction summary): not part of what was said.
fn is_notice(content: &str) -> bool {
    [
        "[Current plan]",
        "[Resumed]",
        "[The person interrupted",
        "[Summary of earlier work]",
    ]
    .iter()
    .any(|p| content.starts_with(p))
}
