//! The prompt as an inline viewport (ratatui over crossterm): a few rows at
//! the cursor holding the input, a hint and the status line. The
//! conversation itself is printed above it, into the terminal's own
//! scrollback; when a message is sent the viewport is cleared and the
//! message is left in its place, so the scrollback reads as the chat went.

use super::editor::Input;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::{Terminal, TerminalOptions, Viewport};
use std::path::PathBuf;

/// The input's first line starts with this; later lines are indented to it.
pub const PROMPT: &str = "you> ";
const GO_ON: &str = "   … ";
/// Input rows shown at most (a longer input scrolls with the cursor).
const MAX_ROWS: usize = 12;

/// What the person did at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Text(String),
    /// Ctrl-C: the input was cleared.
    Cleared,
    /// Ctrl-D on an empty input.
    End,
    /// Ctrl-O: unfold the newest folded tool result. The input is kept
    /// for the next read.
    Unfold,
    Failed(String),
    /// The terminal cannot hold an inline viewport (it does not answer
    /// where its cursor is): the caller falls back to a plain line editor.
    Unavailable(String),
}

/// The prompt and what it keeps between messages: the input's history
/// (also in `history_file`).
pub struct Prompt {
    input: Input,
    history_file: Option<PathBuf>,
    plain: bool,
}

type Term = Terminal<CrosstermBackend<std::io::Stderr>>;

/// Clears the viewport and leaves the cursor at its first row's start,
/// where what follows is printed.
fn close(term: &mut Term) {
    let top = term.get_frame().area().y;
    let _ = term.clear();
    let _ = term.set_cursor_position((0, top));
}

impl Prompt {
    pub fn new(history_file: Option<PathBuf>) -> Prompt {
        let history = history_file
            .as_deref()
            .map(super::history::load)
            .unwrap_or_default();
        Prompt {
            input: Input::new(history),
            history_file,
            plain: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        }
    }

    /// Asks for one message, showing `status` under the input.
    pub fn read(&mut self, status: &str) -> Read {
        use ratatui::crossterm::terminal::{disable_raw_mode, enable_raw_mode};
        if let Err(e) = enable_raw_mode() {
            return Read::Unavailable(e.to_string());
        }
        let read = self.edit(status);
        let _ = disable_raw_mode();
        if let Read::Text(text) = &read {
            // The message stays where it was typed, in the scrollback.
            let mut shown = String::new();
            for (i, line) in text.split('\n').enumerate() {
                shown.push_str(if i == 0 { PROMPT } else { GO_ON });
                shown.push_str(line);
                shown.push('\n');
            }
            crate::report::err_text(&shown);
            if !text.trim().is_empty()
                && let Some(file) = &self.history_file
            {
                super::history::append(file, text);
            }
        }
        read
    }

    fn open(&self) -> Result<Term, String> {
        let rows = self.input.line_count().min(MAX_ROWS) as u16 + 2;
        Terminal::with_options(
            CrosstermBackend::new(std::io::stderr()),
            TerminalOptions {
                viewport: Viewport::Inline(rows),
            },
        )
        .map_err(|e| e.to_string())
    }

    fn edit(&mut self, status: &str) -> Read {
        let mut term = match self.open() {
            Ok(t) => t,
            Err(e) => return Read::Unavailable(e),
        };
        let mut hint = String::new();
        loop {
            let rows = self.input.line_count().min(MAX_ROWS) as u16 + 2;
            if term.get_frame().area().height != rows {
                // The input grew or shrank: a viewport of the new height
                // where the old one began.
                close(&mut term);
                drop(term);
                term = match self.open() {
                    Ok(t) => t,
                    Err(e) => return Read::Failed(e),
                };
            }
            if let Err(e) = term.draw(|f| self.render(f, status, &hint)) {
                return Read::Failed(e.to_string());
            }
            let key = match event::read() {
                Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => k,
                Ok(_) => continue,
                Err(e) => return Read::Failed(e.to_string()),
            };
            hint.clear();
            if let Some(done) = self.key(key, &mut hint) {
                close(&mut term);
                return done;
            }
        }
    }

    /// One key; `Some` when the prompt is done.
    fn key(&mut self, key: KeyEvent, hint: &mut String) -> Option<Read> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let input = &mut self.input;
        match key.code {
            KeyCode::Char('c') if ctrl => {
                input.clear();
                return Some(Read::Cleared);
            }
            KeyCode::Char('d') if ctrl => {
                if input.is_empty() {
                    return Some(Read::End);
                }
                input.delete();
            }
            KeyCode::Char('o') if ctrl => return Some(Read::Unfold),
            KeyCode::Char('j') if ctrl => input.insert('\n'),
            KeyCode::Char('a') if ctrl => input.home(),
            KeyCode::Char('e') if ctrl => input.end(),
            KeyCode::Char('u') if ctrl => input.clear(),
            KeyCode::Enter if alt || key.modifiers.contains(KeyModifiers::SHIFT) => {
                input.insert('\n');
            }
            KeyCode::Enter if input.text().ends_with('\\') => {
                input.end();
                input.backspace();
                input.insert('\n');
            }
            KeyCode::Enter => return Some(Read::Text(input.submit())),
            KeyCode::Char(c) if !ctrl => input.insert(c),
            KeyCode::Backspace => input.backspace(),
            KeyCode::Delete => input.delete(),
            KeyCode::Left => input.left(),
            KeyCode::Right => input.right(),
            KeyCode::Home => input.home(),
            KeyCode::End => input.end(),
            KeyCode::Up => input.up(),
            KeyCode::Down => input.down(),
            KeyCode::Tab => {
                let names = input.complete();
                if !names.is_empty() {
                    *hint = names
                        .iter()
                        .map(|n| format!("/{n}"))
                        .collect::<Vec<_>>()
                        .join("  ");
                }
            }
            _ => {}
        }
        None
    }

    fn render(&self, f: &mut ratatui::Frame, status: &str, hint: &str) {
        let area = f.area();
        let (line, col) = self.input.cursor_at();
        let first = (line + 1).saturating_sub(MAX_ROWS);
        let mut rows: Vec<Line> = self
            .input
            .text()
            .split('\n')
            .enumerate()
            .skip(first)
            .take(MAX_ROWS)
            .map(|(i, l)| {
                let lead = if i == 0 { PROMPT } else { GO_ON };
                Line::from(vec![
                    Span::styled(lead, self.style(Modifier::BOLD)),
                    Span::raw(l.to_string()),
                ])
            })
            .collect();
        let hint = if hint.is_empty() {
            self.command_hint()
        } else {
            hint.to_string()
        };
        rows.push(Line::from(Span::styled(hint, self.style(Modifier::DIM))));
        rows.push(Line::from(Span::styled(
            status.to_string(),
            self.style(Modifier::REVERSED),
        )));
        f.render_widget(Paragraph::new(rows), area);
        let x = (PROMPT.len() + col).min(area.width.saturating_sub(1) as usize) as u16;
        f.set_cursor_position((area.x + x, area.y + (line - first) as u16));
    }

    /// Under a `/` being typed: the commands it can still become.
    fn command_hint(&self) -> String {
        let text = self.input.text();
        if let Some(typed) = text.strip_prefix('/')
            && !typed.contains(char::is_whitespace)
        {
            let names = super::commands::complete(typed);
            if names.is_empty() {
                return format!("no command starts with /{typed} (/help lists them)");
            }
            return names
                .iter()
                .map(|n| format!("/{n}"))
                .collect::<Vec<_>>()
                .join("  ");
        }
        "Enter sends · \\ then Enter for a new line · /help · Tab completes · Ctrl-O unfolds a result · \
         Ctrl-D ends"
            .into()
    }

    fn style(&self, m: Modifier) -> Style {
        if self.plain {
            Style::default()
        } else {
            Style::default().add_modifier(m)
        }
    }
}
