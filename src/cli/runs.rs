//! Runs named the way `sessions` shows them: every command that takes a
//! log takes its path, its run id or a unique start of one, or `--last`
//! (the newest run of this workspace); `resume` with nothing on a terminal
//! offers a pick of this workspace's runs.

use super::CliError;
use super::args::{Cli, Command, LogCommand};
use std::path::{Path, PathBuf};

/// What `--last` becomes on the command line of the commands that take a
/// log as an argument (`log …`, `fork`, `approve`, `restore`, `chat
/// --resume`).
pub const LAST: &str = "last";

/// `--last` where a log goes, as [`LAST`]: `tinyagent log show --last`.
pub fn spell_last(args: &mut [std::ffi::OsString]) {
    let takes_log = args.get(1).is_some_and(|a| {
        ["log", "fork", "approve", "restore", "chat"]
            .iter()
            .any(|c| a == c)
    });
    if !takes_log {
        return;
    }
    let chat = args[1] == "chat";
    for i in 2..args.len() {
        // `chat --last` would be a first message; only `--resume --last`.
        if args[i] == "--last" && (!chat || args[i - 1] == "--resume") {
            args[i] = LAST.into();
        }
    }
}

/// Puts the log each command names in place of an id, a prefix or `--last`.
pub fn resolve(cli: &mut Cli) -> Result<(), CliError> {
    match &mut cli.command {
        Command::Resume(a) => {
            if let Some(p) = &a.path {
                a.path = Some(log(p, a.cwd.as_deref())?);
            } else if !a.last {
                a.path = Some(pick(a.cwd.as_deref())?);
            }
        }
        Command::Chat(a) => {
            if let Some(p) = &a.resume {
                a.resume = Some(log(p, a.opts.cwd.as_deref())?);
            }
        }
        Command::Approve(a) => a.wal = log(&a.wal, None)?,
        Command::Fork(a) => a.wal = log(&a.wal, None)?,
        Command::Restore(a) => a.wal = log(&a.wal, a.cwd.as_deref())?,
        Command::Log(cmd) => match cmd {
            LogCommand::Inspect { wal, .. }
            | LogCommand::Verify { wal }
            | LogCommand::Repair { wal }
            | LogCommand::Show { wal, .. }
            | LogCommand::Export { wal, .. }
            | LogCommand::Diff { wal, .. } => *wal = log(wal, None)?,
            LogCommand::Import { .. } => {}
        },
        _ => {}
    }
    Ok(())
}

/// The log `given` names: a file that is there, `last`, or a run id (or a
/// unique start of one). Anything else is left for the command to refuse.
fn log(given: &Path, cwd: Option<&Path>) -> Result<PathBuf, CliError> {
    if given.exists() || given.to_str().is_some_and(|s| s.starts_with("s3://")) {
        return Ok(given.to_path_buf());
    }
    if given == Path::new(LAST) {
        return super::newest_run(cwd);
    }
    let Some(text) = given.to_str() else {
        return Ok(given.to_path_buf());
    };
    let looks_like_id = !text.is_empty() && !text.contains('/') && given.extension().is_none();
    if !looks_like_id {
        return Ok(given.to_path_buf());
    }
    crate::inspect::runs::by_id(&crate::launch::parts::home()?, text).map_err(CliError::refused)
}

/// One run as a pick (and the numbered list) shows it: a chat by its
/// first message, when its log says it early.
pub fn shown_run(r: &crate::inspect::runs::Session) -> String {
    let task = match (r.task.as_deref(), first_message(Path::new(&r.log))) {
        (Some(""), Some(m)) => format!("(chat) {}", crate::text::first_line(&m, 60)),
        (task, _) => crate::text::shown_task(task),
    };
    format!(
        "{}  {}  {:<9} {task}",
        r.run_id.as_deref().unwrap_or("?"),
        crate::text::shown_time(r.started_at.as_deref()),
        r.status,
    )
}

/// The first `user.message` of a log, looked for in its first records
/// only (a chat's first message follows its `run.started`).
fn first_message(log: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(log).ok()?;
    std::io::BufReader::new(file.take(256 * 1024))
        .lines()
        .take(8)
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(&line).ok())
        .find(|v| v["type"] == "user.message")
        .and_then(|v| v["data"]["content"].as_str().map(str::to_string))
}

/// `resume` with no log: on a terminal, a pick of this workspace's runs
/// (arrows and Enter; Esc cancels). A terminal that cannot hold the pick
/// gets the list numbered and a line to answer on.
fn pick(cwd: Option<&Path>) -> Result<PathBuf, CliError> {
    use std::io::{BufRead, IsTerminal};
    if !std::io::stdin().is_terminal() {
        return Err(CliError::refused(
            "resume needs a log: its path, its run id (see `tinyagent sessions`), or --last",
        ));
    }
    let here = match cwd {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|e| CliError::new(1, format!("no current directory: {e}")))?,
    };
    let rows = crate::inspect::runs::list(&crate::launch::parts::home()?, Some(&here));
    if rows.is_empty() {
        return Err(CliError::refused(format!(
            "no run of {} to resume (`tinyagent sessions --all` lists every workspace's)",
            here.display()
        )));
    }
    let shown: Vec<String> = rows.iter().map(shown_run).collect();
    match crate::tui::pick::pick("resume which run of this workspace? (newest first)", &shown) {
        crate::tui::pick::Picked::Chosen(i) => {
            crate::report::err_line(&format!("resuming {}", shown[i]));
            return Ok(PathBuf::from(&rows[i].log));
        }
        crate::tui::pick::Picked::Cancelled => {
            return Err(CliError::new(1, "no run picked: nothing was resumed"));
        }
        crate::tui::pick::Picked::Failed(e) => {
            return Err(CliError::new(1, format!("cannot read the terminal: {e}")));
        }
        crate::tui::pick::Picked::Unavailable(_) => {}
    }
    let mut menu = String::from("runs of this workspace, newest first:\n");
    for (i, r) in shown.iter().enumerate().take(20) {
        menu.push_str(&format!("  {:>2}. {r}\n", i + 1));
    }
    menu.push_str("resume which? [1] ");
    crate::report::err_text(&menu);
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::new(1, format!("cannot read the answer: {e}")))?;
    let answer = line.trim();
    if answer.is_empty() {
        return Ok(PathBuf::from(&rows[0].log));
    }
    match answer.parse::<usize>() {
        Ok(n) if (1..=rows.len()).contains(&n) => Ok(PathBuf::from(&rows[n - 1].log)),
        _ => log(Path::new(answer), cwd),
    }
}
