//! The terminal interface of `tinyagent chat`: the prompt is a ratatui
//! inline viewport (input, hint, status line) drawn under the
//! conversation, which is printed into the terminal's own scrollback;
//! slash commands are read here and carried out by `cli::chat`.
//!
//! - [`editor`]: the input being typed (lines, cursor, history, Tab).
//! - [`commands`]: the slash commands' table and reader.
//! - [`prompt`]: the inline viewport that asks for one message.
//! - [`status`]: the status line.
//! - [`pick`]: a pick from a list (`/resume`, `tinyagent resume`).
//! - [`markdown`]: model text rendered for a terminal.
//! - [`history`]: the input history's file.
//! - [`replay`]: a resumed chat's conversation so far.

pub mod commands;
pub mod editor;
pub mod history;
pub mod markdown;
pub mod pick;
pub mod prompt;
pub mod replay;
pub mod status;
