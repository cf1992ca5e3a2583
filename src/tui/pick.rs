//! A pick from a list, as an inline viewport (ratatui over crossterm): a
//! title, the rows (the chosen one marked and highlighted), and a hint.
//! Up/Down (or k/j), Page Up/Down, Home/End move; Enter picks; Esc, q or
//! Ctrl-C cancel. When done the viewport is cleared and the caller says
//! what was picked.

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::{Terminal, TerminalOptions, Viewport};

/// Rows of the list shown at once (a longer list scrolls).
const SHOWN: usize = 10;
/// The chosen row starts with this; the others with as many blanks.
pub const MARK: &str = "› ";

/// How a pick ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Picked {
    /// The index of the row picked.
    Chosen(usize),
    /// Esc, q or Ctrl-C.
    Cancelled,
    /// The terminal cannot hold an inline viewport (it does not say where
    /// its cursor is): the caller asks another way.
    Unavailable(String),
    Failed(String),
}

/// Asks the person to pick one of `rows` under `title`; the first is
/// chosen to begin with.
pub fn pick(title: &str, rows: &[String]) -> Picked {
    use ratatui::crossterm::terminal::{disable_raw_mode, enable_raw_mode};
    if rows.is_empty() {
        return Picked::Cancelled;
    }
    if let Err(e) = enable_raw_mode() {
        return Picked::Unavailable(e.to_string());
    }
    let picked = run(title, rows);
    let _ = disable_raw_mode();
    picked
}

fn run(title: &str, rows: &[String]) -> Picked {
    let height = rows.len().min(SHOWN) as u16 + 2;
    let mut term = match Terminal::with_options(
        CrosstermBackend::new(std::io::stderr()),
        TerminalOptions {
            viewport: Viewport::Inline(height),
        },
    ) {
        Ok(t) => t,
        Err(e) => return Picked::Unavailable(e.to_string()),
    };
    let plain = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let mut at = 0usize;
    let done = loop {
        if let Err(e) = term.draw(|f| render(f, title, rows, at, plain)) {
            break Picked::Failed(e.to_string());
        }
        let key = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => k,
            Ok(_) => continue,
            Err(e) => break Picked::Failed(e.to_string()),
        };
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Enter => break Picked::Chosen(at),
            KeyCode::Esc | KeyCode::Char('q') => break Picked::Cancelled,
            KeyCode::Char('c' | 'd') if ctrl => break Picked::Cancelled,
            KeyCode::Up | KeyCode::Char('k') => at = at.saturating_sub(1),
            KeyCode::Char('p') if ctrl => at = at.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => at = (at + 1).min(rows.len() - 1),
            KeyCode::Char('n') if ctrl => at = (at + 1).min(rows.len() - 1),
            KeyCode::PageUp => at = at.saturating_sub(SHOWN),
            KeyCode::PageDown => at = (at + SHOWN).min(rows.len() - 1),
            KeyCode::Home => at = 0,
            KeyCode::End => at = rows.len() - 1,
            _ => {}
        }
    };
    // Cleared, the cursor where the viewport began: what follows is
    // printed there.
    let top = term.get_frame().area().y;
    let _ = term.clear();
    let _ = term.set_cursor_position((0, top));
    done
}

fn render(f: &mut ratatui::Frame, title: &str, rows: &[String], at: usize, plain: bool) {
    let style = |m: Modifier| {
        if plain {
            Style::default()
        } else {
            Style::default().add_modifier(m)
        }
    };
    // The window of rows that holds the chosen one.
    let first = (at + 1).saturating_sub(SHOWN);
    let mut lines = vec![Line::from(Span::styled(
        title.to_string(),
        style(Modifier::BOLD),
    ))];
    for (i, row) in rows.iter().enumerate().skip(first).take(SHOWN) {
        if i == at {
            lines.push(Line::from(Span::styled(
                format!("{MARK}{row}"),
                style(Modifier::REVERSED),
            )));
        } else {
            lines.push(Line::from(format!("  {row}")));
        }
    }
    let more = if rows.len() > SHOWN {
        format!(" · {} of {}", at + 1, rows.len())
    } else {
        String::new()
    };
    lines.push(Line::from(Span::styled(
        format!("↑/↓ move · Enter picks · Esc cancels{more}"),
        style(Modifier::DIM),
    )));
    f.render_widget(Paragraph::new(lines), f.area());
}
