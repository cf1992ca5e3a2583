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

mod commands;
pub use commands::Next;

use super::CliError;
use super::args::{ChatArgs, ResumeArgs, RunArgs, RunOptions, SessionFlags};
use crate::agent::{Agent, AgentError, Turn};
use crate::event::RunStatus;
use crate::session::Status;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// The prompt.
const PROMPT: &str = crate::tui::prompt::PROMPT;

/// `tinyagent chat`.
pub async fn chat(args: &ChatArgs, stop: &crate::signals::StopToken) -> Result<i32, CliError> {
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
        return super::resume(&resume, true, stop).await;
    }
    let first = args.words.join(" ");
    if !first.trim().is_empty()
        && let Ok(mut m) = FIRST_MESSAGE.lock()
    {
        *m = Some(first);
    }
    let mut opts = args.opts.clone();
    safe_defaults(&mut opts)?;
    let run = RunArgs {
        task: String::new(),
        opts,
    };
    super::run(&run, true, stop).await
}

/// Where a person watches: calls that change files or run commands are
/// asked about unless the flags or the config say otherwise, and model
/// text streams as it comes (unless the config turns streaming off).
fn safe_defaults(opts: &mut RunOptions) -> Result<(), CliError> {
    let file = crate::config::Config::load(opts.session.config.as_deref())?;
    if opts.session.approve.is_none() && file.approvals.mode.is_none() {
        opts.session.approve = Some(crate::config::ApproveMode::Mutating);
    }
    if file.model.stream.is_none() && std::io::stderr().is_terminal() {
        opts.stream = true;
    }
    Ok(())
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
    /// Ctrl-O: unfold the newest folded tool result (what was typed stays).
    Unfold,
    Failed(String),
}

/// One request to the editor's thread, with where its answer goes: a line
/// (under the status line given), or a pick from a list (its title and
/// rows; the answer is the row picked, `None` when cancelled, or why the
/// terminal cannot show a pick).
enum Ask {
    Line(String, tokio::sync::oneshot::Sender<Line>),
    Pick(
        String,
        Vec<String>,
        tokio::sync::oneshot::Sender<Result<Option<usize>, String>>,
    ),
}

/// The line editor's thread: one line (or pick) per request. The prompt
/// is the terminal interface's inline viewport ([`crate::tui::prompt`]); a
/// terminal that cannot hold one (it never says where its cursor is) gets
/// a plain line editor instead.
struct Editor {
    ask: std::sync::mpsc::Sender<Ask>,
}

impl Editor {
    fn start(history: Option<PathBuf>) -> Editor {
        let (ask, requests) = std::sync::mpsc::channel::<Ask>();
        std::thread::spawn(move || {
            if let Some(h) = &history {
                prepare_history(h);
            }
            let mut tui = Some(crate::tui::prompt::Prompt::new(history.clone()));
            let mut plain: Option<rustyline::DefaultEditor> = None;
            for request in requests {
                let (status, reply) = match request {
                    Ask::Pick(title, rows, reply) => {
                        use crate::tui::pick::Picked;
                        let answer = if tui.is_none() {
                            Err("this terminal cannot show a pick".to_string())
                        } else {
                            match crate::tui::pick::pick(&title, &rows) {
                                Picked::Chosen(i) => Ok(Some(i)),
                                Picked::Cancelled => Ok(None),
                                Picked::Unavailable(e) | Picked::Failed(e) => Err(e),
                            }
                        };
                        let _ = reply.send(answer);
                        continue;
                    }
                    Ask::Line(status, reply) => (status, reply),
                };
                if let Some(prompt) = tui.as_mut() {
                    let line = match prompt.read(&status) {
                        crate::tui::prompt::Read::Text(t) => Line::Text(t),
                        crate::tui::prompt::Read::Cleared => Line::Cleared,
                        crate::tui::prompt::Read::End => Line::End,
                        crate::tui::prompt::Read::Unfold => Line::Unfold,
                        crate::tui::prompt::Read::Failed(e) => Line::Failed(e),
                        crate::tui::prompt::Read::Unavailable(_) => {
                            tui = None;
                            let _ = reply.send(plain_line(&mut plain, history.as_deref()));
                            continue;
                        }
                    };
                    let _ = reply.send(line);
                    continue;
                }
                let _ = reply.send(plain_line(&mut plain, history.as_deref()));
            }
        });
        Editor { ask }
    }

    /// The next line, or the stopping signal (`stop` set) that came first.
    async fn line(
        &self,
        status: String,
        stop: &crate::signals::StopToken,
    ) -> Result<Line, nix::sys::signal::Signal> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.ask.send(Ask::Line(status, tx)).is_err() {
            return Ok(Line::Failed("the line editor stopped".into()));
        }
        tokio::select! {
            line = rx => Ok(line.unwrap_or_else(|_| Line::Failed("the line editor stopped".into()))),
            () = stop.wait() => {
                Err(stop.signal().unwrap_or(nix::sys::signal::Signal::SIGTERM))
            }
        }
    }

    /// A row picked from `rows` (`Ok(None)`: cancelled), or the stopping
    /// signal that came first.
    async fn pick(
        &self,
        title: String,
        rows: Vec<String>,
        stop: &crate::signals::StopToken,
    ) -> Result<Result<Option<usize>, String>, nix::sys::signal::Signal> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.ask.send(Ask::Pick(title, rows, tx)).is_err() {
            return Ok(Err("the line editor stopped".into()));
        }
        tokio::select! {
            picked = rx => Ok(picked.unwrap_or_else(|_| Err("the line editor stopped".into()))),
            () = stop.wait() => {
                Err(stop.signal().unwrap_or(nix::sys::signal::Signal::SIGTERM))
            }
        }
    }
}

/// One line from the plain line editor (made on first use).
fn plain_line(editor: &mut Option<rustyline::DefaultEditor>, history: Option<&Path>) -> Line {
    if editor.is_none() {
        match rustyline::DefaultEditor::new() {
            Ok(mut e) => {
                if let Some(h) = history {
                    let _ = e.load_history(h);
                }
                *editor = Some(e);
            }
            Err(e) => return Line::Failed(format!("no line editor: {e}")),
        }
    }
    let Some(editor) = editor.as_mut() else {
        return Line::Failed("no line editor".into());
    };
    match editor.readline(PROMPT) {
        Ok(text) => {
            if !text.trim().is_empty() {
                let _ = editor.add_history_entry(text.as_str());
                if let Some(h) = history {
                    let _ = editor.append_history(h);
                }
            }
            Line::Text(text)
        }
        Err(rustyline::error::ReadlineError::Interrupted) => Line::Cleared,
        Err(rustyline::error::ReadlineError::Eof) => Line::End,
        Err(e) => Line::Failed(e.to_string()),
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
/// stopping signal at the prompt, a limit or an error ends it. A line that
/// starts with `/` is a command ([`commands`]), never a message.
pub async fn converse(agent: &mut Agent) -> Result<RunStatus, AgentError> {
    let terminal = Terminal::save();
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::stderr().is_terminal();
    agent
        .output()
        .set_text_view(Box::new(crate::tui::markdown::Stream::new(color)));
    let history = history_file(agent.workspace());
    let editor = Editor::start(history);
    // A chat that comes back shows where it was.
    let so_far = crate::tui::replay::conversation(&agent.state().view, color);
    if !so_far.is_empty() {
        crate::report::err_text(&so_far);
    }
    agent.output().say(
        "chat: type a message (/help for commands); Ctrl-C stops a turn, Ctrl-D ends the chat",
    );
    if agent.state().chat_waiting
        && let Some(first) = take_first_message()
    {
        crate::report::err_line(&format!("{PROMPT}{first}"));
        agent.add_user_message(&first, "chat")?;
    }
    // A chat a command went back to (`/rewind`, `/resume`) waits for the
    // person first, wherever its log stopped.
    let mut prompt_first = take_prompt_first();
    // The results Ctrl-O unfolded since the last message.
    let mut unfolded = std::collections::HashSet::new();
    loop {
        if let Status::Finished(status) = agent.state().status {
            return Ok(status);
        }
        if agent.state().chat_waiting || prompt_first {
            let asked = std::time::Instant::now();
            let width = ratatui::crossterm::terminal::size().map_or(80, |(w, _)| w);
            let status = crate::tui::status::Status::of(agent).line_in(usize::from(width));
            let stop = agent.stop_token().clone();
            let line = editor.line(status, &stop).await;
            agent.add_waiting(asked.elapsed());
            match line {
                Err(sig) => {
                    terminal.restore();
                    crate::report::err_text("\n");
                    return agent.stop_at_prompt(sig);
                }
                Ok(Line::Text(text)) if text.trim().is_empty() => continue,
                Ok(Line::Text(text)) if text.trim_start().starts_with('/') => {
                    match commands::run(agent, text.trim())? {
                        commands::Done::Stay => continue,
                        commands::Done::End(next) => {
                            set_next(next);
                            return agent.end_chat();
                        }
                        commands::Done::Pick(runs) => {
                            let rows = runs.iter().map(|r| r.shown.clone()).collect();
                            let title = "resume which run of this workspace? (newest first)";
                            match editor.pick(title.into(), rows, &stop).await {
                                Err(sig) => {
                                    terminal.restore();
                                    crate::report::err_text("\n");
                                    return agent.stop_at_prompt(sig);
                                }
                                Ok(Ok(Some(i))) => {
                                    let run = &runs[i];
                                    if let Some(why) = &run.refused {
                                        crate::report::err_line(&format!(
                                            "{why}; this chat goes on"
                                        ));
                                        continue;
                                    }
                                    crate::report::err_line(&format!("resuming {}", run.shown));
                                    set_next(Some(commands::Next::Resume(run.log.clone())));
                                    return agent.end_chat();
                                }
                                Ok(Ok(None)) => {
                                    crate::report::err_line("no run picked: this chat goes on")
                                }
                                // No pick on this terminal: the list, to
                                // answer with /resume N.
                                Ok(Err(_)) => crate::report::err_line(&commands::numbered(&runs)),
                            }
                            continue;
                        }
                    }
                }
                Ok(Line::Text(text)) => {
                    agent.add_user_message(&text, "chat")?;
                    unfolded.clear();
                    prompt_first = false;
                }
                Ok(Line::Unfold) => {
                    crate::report::err_line(&commands::unfold(agent, &mut unfolded));
                    continue;
                }
                Ok(Line::Cleared) => continue,
                Ok(Line::End) => {
                    let status = agent.end_chat()?;
                    say_come_back(agent);
                    return Ok(status);
                }
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

/// After Ctrl-D: the command that goes back to this chat.
fn say_come_back(agent: &Agent) {
    let id = agent
        .state()
        .run
        .as_ref()
        .map(|r| r.run_id.clone())
        .unwrap_or_default();
    crate::report::err_line(&format!(
        "chat ended; come back to it with: tinyagent chat --resume {id}"
    ));
}

/// The first message of a chat started with words (`tinyagent "fix the
/// bug"`), sent as soon as its prompt would show.
static FIRST_MESSAGE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn take_first_message() -> Option<String> {
    FIRST_MESSAGE.lock().ok()?.take()
}

/// Set when a command ends this chat for another that is to wait at its
/// prompt first.
static PROMPT_FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn take_prompt_first() -> bool {
    PROMPT_FIRST.swap(false, std::sync::atomic::Ordering::SeqCst)
}

/// What a chat's command asked for once the chat ended: another chat.
static NEXT: std::sync::Mutex<Option<commands::Next>> = std::sync::Mutex::new(None);

fn set_next(next: Option<commands::Next>) {
    if matches!(next, Some(commands::Next::Resume(_))) {
        PROMPT_FIRST.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    if let Ok(mut n) = NEXT.lock() {
        *n = next;
    }
}

/// Takes what the ended chat asked for next (`/rewind`, `/resume`, `/new`).
pub fn take_next() -> Option<commands::Next> {
    NEXT.lock().ok()?.take()
}
