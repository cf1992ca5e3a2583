//! `tinyagent chat`: an interactive session on a terminal.
//!
//! The log starts at once (a `run.started` with no task, `chat` set); every
//! line typed at the prompt is a durable `user.message` (source `chat`)
//! before the model sees it; each turn that ends appends `chat.waiting`
//! before the prompt comes back, so a chat killed at its prompt resumes at
//! its prompt (`tinyagent resume <log>`, or `chat --resume <log>`).
//!
//! Ctrl-C during a turn stops the turn (what runs is stopped as section 7
//! says, the model is told) and the prompt comes back; Ctrl-C at the prompt
//! clears the line; Ctrl-D at the prompt ends the chat (`run.finished`).
//! Without a terminal on stdin the chat is refused (exit 2): a script uses
//! `run` and `resume --message`.
//!
//! The line editor runs on a thread of its own, asked for one line at a
//! time, so that SIGTERM or SIGHUP at the prompt still end the run cleanly.
//! Its history is per workspace, under `$TINYAGENT_HOME/history/` (0600),
//! never in the workspace.

use super::CliError;
use super::args::{ChatArgs, ResumeArgs, RunArgs, RunOptions, SessionFlags};
use crate::agent::{Agent, AgentError, Turn};
use crate::event::RunStatus;
use crate::session::Status;
use std::path::{Path, PathBuf};

/// The prompt.
const PROMPT: &str = "you> ";

/// `tinyagent chat`.
pub async fn chat(args: &ChatArgs) -> Result<i32, CliError> {
    crate::launch::need_terminal("tinyagent chat")?;
    if let Some(log) = &args.resume {
        // The flags a resume shares go over whole; the ones only a new run
        // has would be ignored, so they are refused.
        // (--wal may name the same log.)
        let new_only = RunOptions {
            session: SessionFlags::default(),
            wal: args.opts.wal.clone().filter(|w| w != log),
            ..args.opts.clone()
        };
        if new_only != RunOptions::default() {
            return Err(CliError::refused(
                "--resume goes on with the settings the chat's log recorded: --wal (another \
                 log), --script, \
                 --price-*, --plan, --plan-file, --read-only, --max-output-tokens, \
                 --reasoning-effort, --thinking-budget, --context-window, --snapshot-every, --replicate, \
                 --stream and --no-agents-md apply to a new \
                 chat only",
            ));
        }
        let resume = ResumeArgs {
            path: Some(log.clone()),
            session: args.opts.session.clone(),
            ..ResumeArgs::default()
        };
        return super::resume(&resume, true).await;
    }
    let run = RunArgs {
        task: String::new(),
        opts: args.opts.clone(),
    };
    super::run(&run, true).await
}

/// The history file of a workspace's chats.
fn history_file(workspace: &Path) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let home = crate::launch::parts::home().ok()?;
    let digest = Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Some(home.join("history").join(format!("{hex}.txt")))
}

/// What the line editor gave.
enum Line {
    Text(String),
    /// Ctrl-C at the prompt: the line was cleared.
    Cleared,
    /// Ctrl-D on an empty line.
    End,
    Failed(String),
}

/// The line editor's thread: one line per request.
struct Editor {
    ask: std::sync::mpsc::Sender<tokio::sync::oneshot::Sender<Line>>,
}

impl Editor {
    fn start(history: Option<PathBuf>) -> Editor {
        let (ask, requests) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<Line>>();
        std::thread::spawn(move || {
            let mut editor = match rustyline::DefaultEditor::new() {
                Ok(e) => e,
                Err(e) => {
                    for reply in requests {
                        let _ = reply.send(Line::Failed(format!("no line editor: {e}")));
                    }
                    return;
                }
            };
            if let Some(h) = &history {
                prepare_history(h);
                let _ = editor.load_history(h);
            }
            for reply in requests {
                let line = match editor.readline(PROMPT) {
                    Ok(text) => {
                        if !text.trim().is_empty() {
                            let _ = editor.add_history_entry(text.as_str());
                            if let Some(h) = &history {
                                let _ = editor.append_history(h);
                            }
                        }
                        Line::Text(text)
                    }
                    Err(rustyline::error::ReadlineError::Interrupted) => Line::Cleared,
                    Err(rustyline::error::ReadlineError::Eof) => Line::End,
                    Err(e) => Line::Failed(e.to_string()),
                };
                let _ = reply.send(line);
            }
        });
        Editor { ask }
    }

    /// The next line, or the stopping signal that came first.
    async fn line(&self) -> Result<Line, nix::sys::signal::Signal> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.ask.send(tx).is_err() {
            return Ok(Line::Failed("the line editor stopped".into()));
        }
        tokio::select! {
            line = rx => Ok(line.unwrap_or_else(|_| Line::Failed("the line editor stopped".into()))),
            () = crate::signals::wait() => {
                Err(crate::signals::received().unwrap_or(nix::sys::signal::Signal::SIGTERM))
            }
        }
    }
}

/// The history file and its directory, private to the person.
fn prepare_history(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        let _ = tinyagent_store::fsutil::create_dir_all_durable(dir);
    }
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path);
}

/// The terminal's settings, put back when a signal ends the chat while the
/// editor holds the terminal in raw mode.
struct Terminal(Option<nix::sys::termios::Termios>);

impl Terminal {
    fn save() -> Terminal {
        Terminal(nix::sys::termios::tcgetattr(std::io::stdin()).ok())
    }
    fn restore(&self) {
        if let Some(t) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                t,
            );
        }
    }
}

/// The chat itself, on an agent whose log is open: the prompt whenever the
/// run waits for the person, a turn after each message, until Ctrl-D, a
/// stopping signal at the prompt, a limit or an error ends it.
pub async fn converse(agent: &mut Agent) -> Result<RunStatus, AgentError> {
    let terminal = Terminal::save();
    let history = history_file(agent.workspace());
    let editor = Editor::start(history);
    agent
        .output()
        .say("chat: type a message; Ctrl-C stops a turn, Ctrl-D ends the chat");
    loop {
        if let Status::Finished(status) = agent.state().status {
            return Ok(status);
        }
        if agent.state().chat_waiting {
            let asked = std::time::Instant::now();
            let line = editor.line().await;
            agent.add_waiting(asked.elapsed());
            match line {
                Err(sig) => {
                    terminal.restore();
                    crate::report::err_text("\n");
                    return agent.stop_at_prompt(sig);
                }
                Ok(Line::Text(text)) if text.trim().is_empty() => continue,
                Ok(Line::Text(text)) => agent.add_user_message(&text, "chat")?,
                Ok(Line::Cleared) => continue,
                Ok(Line::End) => return agent.end_chat(),
                Ok(Line::Failed(why)) => {
                    terminal.restore();
                    return Err(AgentError::Refused(format!(
                        "cannot read the terminal: {why}"
                    )));
                }
            }
        }
        match agent.run_turn().await? {
            Turn::Waiting => {}
            Turn::Finished(status) => return Ok(status),
        }
    }
}
