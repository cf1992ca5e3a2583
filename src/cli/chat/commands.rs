//! What the chat's slash commands do ([`crate::tui::commands`] reads them).
//! Those that change the run (`/model`, `/approvals`, `/compact`) are
//! records, durable before the next request; those that leave this chat
//! for another (`/rewind`, `/resume`, `/new`) end it and say which comes
//! next ([`Next`]).

use crate::agent::{Agent, AgentError};
use crate::cli::CliError;
use crate::report::err_line;
use crate::tui::commands::{self, Command};
use std::path::{Path, PathBuf};

/// What follows a command.
pub enum Done {
    /// Back to the prompt.
    Stay,
    /// The chat ends; `Some`: another begins.
    End(Option<Next>),
    /// `/resume` alone: the person picks one of these runs to go on in.
    Pick(Vec<Pickable>),
}

/// A run `/resume` offers.
pub struct Pickable {
    /// The run as the pick shows it.
    pub shown: String,
    pub log: PathBuf,
    /// Why this chat cannot go on in it, when it cannot.
    pub refused: Option<String>,
}

/// Why a chat cannot go on in `run`: it is live in another process, or
/// it is a finished run that was not a chat (that takes `resume
/// --message`).
fn refusal(run: &crate::inspect::runs::Session) -> Option<String> {
    let id = run.run_id.as_deref().unwrap_or("?");
    let chat = run.task.as_deref() == Some("");
    match run.status.as_str() {
        "running" => Some(format!("run {id} is live in another process")),
        "unreadable" => Some(format!("{}: unreadable", run.log)),
        "stopped" => None,
        _ if chat => None,
        status => Some(format!(
            "run {id} finished ({status}); continue it with: tinyagent resume {id} --message \"…\""
        )),
    }
}

/// The chat that follows one a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Go on in this log (a fork made by `/rewind`, a run `/resume` picked).
    Resume(PathBuf),
    /// A new chat with the same options.
    New,
}

/// Carries out `line` (it starts with `/`). Nothing goes to the model; a
/// command that cannot be done says why and changes nothing.
pub fn run(agent: &mut Agent, line: &str) -> Result<Done, AgentError> {
    let command = match commands::parse(line) {
        Ok(c) => c,
        Err(why) => {
            err_line(&why);
            return Ok(Done::Stay);
        }
    };
    match command {
        Command::Help => err_line(&commands::help()),
        Command::Status => err_line(&status(agent)),
        Command::Cost => err_line(&cost(agent)),
        Command::Model(name) => {
            agent.change_settings(Some(name), None)?;
        }
        Command::Approvals(mode) => {
            agent.change_settings(None, Some(mode))?;
        }
        Command::Compact => agent.request_compaction()?,
        Command::Plan => err_line(&plan(agent)),
        Command::Diff(step) => {
            if let Err(e) = crate::launch::fork::diff(&wal(agent), step, None) {
                err_line(&e.to_string());
            }
        }
        Command::Show(call) => err_line(&show(agent, &call)),
        Command::Fork(step) => match fork(agent, step, false) {
            Ok(log) => err_line(&format!(
                "forked at step {step}: {}\ngo on in it with: tinyagent chat --resume {}",
                log.display(),
                log.display()
            )),
            Err(e) => err_line(&e.message),
        },
        Command::Rewind(step) => match fork(agent, step, true) {
            Ok(log) => {
                err_line(&format!(
                    "rewound to step {step}: the files are back as they were then; going on in \
                     {} (this chat's log stays as it was)",
                    log.display()
                ));
                return Ok(Done::End(Some(Next::Resume(log))));
            }
            Err(e) => err_line(&e.message),
        },
        Command::Resume(None) => {
            let runs = runs_here(agent);
            if runs.is_empty() {
                err_line("no other run of this workspace to resume");
            } else {
                return Ok(Done::Pick(runs));
            }
        }
        Command::Resume(Some(pick)) => match pick_run(agent, &pick) {
            Ok(log) => return Ok(Done::End(Some(Next::Resume(log)))),
            Err(e) => err_line(&e.message),
        },
        Command::New => return Ok(Done::End(Some(Next::New))),
        Command::Exit => return Ok(Done::End(None)),
    }
    Ok(Done::Stay)
}

fn wal(agent: &Agent) -> PathBuf {
    agent.log_path().to_path_buf()
}

fn status(agent: &Agent) -> String {
    let s = crate::tui::status::Status::of(agent);
    let id = agent
        .state()
        .run
        .as_ref()
        .map(|r| r.run_id.clone())
        .unwrap_or_default();
    format!(
        "run {id} · step {}\nmodel {}\nworkspace {}\napprovals {}\nenvironment {}\ntokens {} in{} / {} out\ncost {}\ncontext {} tokens in the next request, of a {}-token window (compacts above {})\nlog {}",
        agent.state().step,
        s.model,
        s.workspace,
        s.approvals,
        s.env,
        s.input,
        s.cached
            .map(|c| format!(" ({c} cached)"))
            .unwrap_or_default(),
        s.output,
        s.cost_text(),
        s.context,
        s.window,
        s.compact_at,
        agent.log_path().display()
    )
}

fn cost(agent: &Agent) -> String {
    let s = crate::tui::status::Status::of(agent);
    let unknown = if s.cost.is_none() {
        " (the price of this model is unknown: give --price-in and --price-out, or model.price_in and model.price_out in the config)"
    } else {
        ""
    };
    format!(
        "{} in{} / {} out tokens over {} steps · {}{unknown}",
        s.input,
        s.cached
            .map(|c| format!(" ({c} cached)"))
            .unwrap_or_default(),
        s.output,
        agent.state().step,
        s.cost_text()
    )
}

fn plan(agent: &Agent) -> String {
    match &agent.state().plan {
        None => "no plan yet (the model keeps one with --plan)".into(),
        Some(p) => crate::session::plan::render(Some(p)),
    }
}

/// The log's tool results, oldest first, as `(call id, tool, content)`
/// for those `keep` wants.
fn results(
    agent: &Agent,
    mut keep: impl FnMut(&crate::event::ToolResult) -> bool,
) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    let _ = tinyagent_store::wal::reader::scan::<crate::event::Event>(
        agent.log_path(),
        None,
        |frame, _| {
            if let crate::event::Event::ToolResult(r) = &frame.event
                && keep(r)
            {
                found.push((r.call_id.clone(), r.name.clone(), r.content.clone()));
            }
        },
    );
    found
}

/// A call's whole result, from the log.
fn show(agent: &Agent, call: &str) -> String {
    match results(agent, |r| r.call_id == call).pop() {
        Some((call, name, content)) => format!("{call} ({name}), whole:\n{content}"),
        None => {
            format!("no result of a call {call} in this run (ids are shown after → on each call)")
        }
    }
}

/// Ctrl-O at the prompt: the whole of the newest result that was shown
/// folded and that the key has not unfolded yet (`unfolded` holds those it
/// did; pressed again, it goes one result further back).
pub fn unfold(agent: &Agent, unfolded: &mut std::collections::HashSet<String>) -> String {
    let folded = results(agent, |r| {
        r.name != "update_plan" && crate::text::result_folded(&r.content)
    });
    let Some((call, name, content)) = folded
        .into_iter()
        .rev()
        .find(|(call, _, _)| !unfolded.contains(call))
    else {
        return if unfolded.is_empty() {
            "no folded tool result to unfold in this run".into()
        } else {
            "no folded tool result left to unfold (/show CALL shows any result again)".into()
        };
    };
    unfolded.insert(call.clone());
    format!("{call} ({name}), whole:\n{content}")
}

fn fork(agent: &Agent, step: u64, restore: bool) -> Result<PathBuf, CliError> {
    if step > agent.state().step {
        return Err(CliError::refused(format!(
            "there is no step {step} yet (the run is at step {})",
            agent.state().step
        )));
    }
    let made = crate::launch::fork::make_fork(&super::super::args::ForkArgs {
        wal: wal(agent),
        at: step,
        output: None,
        restore,
        force: false,
        dry_run: false,
        cwd: Some(agent.workspace().to_path_buf()),
    })?;
    made.map(|f| f.log)
        .ok_or_else(|| CliError::new(1, "the fork made no log"))
}

/// This workspace's other runs, newest first, as a pick shows them.
fn runs_here(agent: &Agent) -> Vec<Pickable> {
    let Ok(home) = crate::launch::parts::home() else {
        return Vec::new();
    };
    let here = agent.log_path();
    crate::inspect::runs::list(&home, Some(agent.workspace()))
        .iter()
        .filter(|r| Path::new(&r.log) != here)
        .map(|r| Pickable {
            shown: crate::cli::runs::shown_run(r),
            log: PathBuf::from(&r.log),
            refused: refusal(r),
        })
        .collect()
}

/// The runs of a pick, numbered for `/resume N` (a terminal that cannot
/// show the pick).
pub fn numbered(runs: &[Pickable]) -> String {
    let mut out =
        String::from("runs of this workspace (go on in one with /resume N or /resume ID):");
    for (i, run) in runs.iter().enumerate().take(20) {
        out.push_str(&format!("\n  {:>2}. {}", i + 1, run.shown));
    }
    out
}

fn pick_run(agent: &Agent, pick: &str) -> Result<PathBuf, CliError> {
    let home = crate::launch::parts::home()?;
    let here = agent.log_path();
    let all = crate::inspect::runs::list(&home, Some(agent.workspace()));
    // Numbered as the pick and `numbered` show them: this chat left out.
    let rows: Vec<_> = all.iter().filter(|r| Path::new(&r.log) != here).collect();
    let chosen = match pick.parse::<usize>() {
        Ok(n) if n >= 1 && n <= rows.len() => Some(rows[n - 1]),
        _ => {
            let hits: Vec<_> = all
                .iter()
                .filter(|r| r.run_id.as_deref().is_some_and(|id| id.starts_with(pick)))
                .collect();
            if hits.len() > 1 {
                return Err(CliError::refused(format!(
                    "{pick} names {} runs; give more of the id",
                    hits.len()
                )));
            }
            hits.first().copied()
        }
    };
    let Some(row) = chosen else {
        return Err(CliError::refused(format!(
            "no run {pick} here (/resume lists them)"
        )));
    };
    let log = PathBuf::from(&row.log);
    if log == here {
        return Err(CliError::refused("that is this chat"));
    }
    if let Some(why) = refusal(row) {
        return Err(CliError::refused(why));
    }
    Ok(log)
}
