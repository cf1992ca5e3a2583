//! The chat's slash commands: their names, what they take, and the line
//! typed at the prompt read as one. A line that starts with `/` is a
//! command, never a message to the model.

/// One command of the table: its name, its argument, what it does.
pub struct Spec {
    pub name: &'static str,
    pub arg: &'static str,
    pub help: &'static str,
}

/// Every command, in the order `/help` lists them.
pub const COMMANDS: &[Spec] = &[
    Spec {
        name: "help",
        arg: "",
        help: "this list",
    },
    Spec {
        name: "status",
        arg: "",
        help: "model, workspace, approvals, environment, tokens, cost, context",
    },
    Spec {
        name: "cost",
        arg: "",
        help: "tokens and cost so far",
    },
    Spec {
        name: "model",
        arg: "NAME",
        help: "use another model from the next request on (recorded)",
    },
    Spec {
        name: "approvals",
        arg: "MODE",
        help: "never or mutating: ask before calls that change files or run commands (recorded)",
    },
    Spec {
        name: "plan",
        arg: "",
        help: "the current plan",
    },
    Spec {
        name: "compact",
        arg: "",
        help: "compact the history before the next request (recorded)",
    },
    Spec {
        name: "diff",
        arg: "[STEP]",
        help: "what the run (or one step) changed in the workspace",
    },
    Spec {
        name: "rewind",
        arg: "STEP",
        help: "fork at STEP, put the files back to it, and go on in the fork",
    },
    Spec {
        name: "fork",
        arg: "STEP",
        help: "a new log holding the run up to STEP (this chat goes on)",
    },
    Spec {
        name: "resume",
        arg: "[RUN]",
        help: "pick a run of this workspace (arrows, Enter; Esc cancels) and go on in it; \
               or name it: /resume ID",
    },
    Spec {
        name: "new",
        arg: "",
        help: "end this chat and start a new one",
    },
    Spec {
        name: "show",
        arg: "CALL",
        help: "a tool call's whole result (Ctrl-O: the newest folded one)",
    },
    Spec {
        name: "exit",
        arg: "",
        help: "end the chat (as Ctrl-D)",
    },
];

/// The prompt's keys, as `/help` lists them.
pub const KEYS: &[(&str, &str)] = &[
    (
        "Enter",
        "send; a line ending in \\ (or Alt-Enter, Ctrl-J) goes on on the next",
    ),
    ("Up/Down", "earlier messages"),
    ("Tab", "complete a command"),
    (
        "Ctrl-O",
        "unfold the newest folded tool result (again: the one before)",
    ),
    ("Ctrl-C", "clear the line, or stop a turn"),
    ("Ctrl-D", "end the chat"),
];

/// A command line, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Status,
    Cost,
    Model(String),
    Approvals(crate::kinds::ApproveMode),
    Plan,
    Compact,
    Diff(Option<u64>),
    Rewind(u64),
    Fork(u64),
    Resume(Option<String>),
    New,
    Show(String),
    Exit,
}

/// The command names that start with `typed`, in name order.
pub fn complete(typed: &str) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = COMMANDS
        .iter()
        .map(|c| c.name)
        .filter(|n| n.starts_with(typed))
        .collect();
    names.sort_unstable();
    names
}

/// `/help`'s text.
pub fn help() -> String {
    let mut out = String::from("commands (Tab completes):");
    for c in COMMANDS {
        let head = if c.arg.is_empty() {
            format!("/{}", c.name)
        } else {
            format!("/{} {}", c.name, c.arg)
        };
        out.push_str(&format!("\n  {head:<18} {}", c.help));
    }
    out.push_str("\nkeys:");
    for (key, what) in KEYS {
        out.push_str(&format!("\n  {key:<18} {what}"));
    }
    out
}

/// What `chat --help` (and its part of the manual page) says after the
/// options: the commands and the keys.
pub fn chat_help() -> String {
    let mut out = String::from(
        "Examples:\n  tinyagent                       a chat (on a terminal)\n  \
         tinyagent \"fix the bug\"         a chat that starts with that message\n  \
         tinyagent chat --resume --last  back to the newest run of this directory\n\n",
    );
    out.push_str(&help().replace("commands (Tab completes):", "Commands (Tab completes):"));
    out.replace("\nkeys:", "\nKeys:")
}

/// Reads a line that starts with `/`; the error is what to tell the
/// person (nothing is done then).
pub fn parse(line: &str) -> Result<Command, String> {
    let body = line.trim().trim_start_matches('/');
    let (name, arg) = match body.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (body, ""),
    };
    let step = |what: &str| -> Result<u64, String> {
        arg.parse()
            .map_err(|_| format!("/{what} takes a step number (see /status), not {arg:?}"))
    };
    let none = |c: Command| {
        if arg.is_empty() {
            Ok(c)
        } else {
            Err(format!("/{name} takes no argument"))
        }
    };
    match name {
        "help" | "?" => none(Command::Help),
        "status" => none(Command::Status),
        "cost" => none(Command::Cost),
        "plan" => none(Command::Plan),
        "compact" => none(Command::Compact),
        "resume" if arg.is_empty() => Ok(Command::Resume(None)),
        "resume" => Ok(Command::Resume(Some(arg.to_string()))),
        "new" => none(Command::New),
        "exit" | "quit" => none(Command::Exit),
        "model" if arg.is_empty() => Err("/model takes a model name: /model NAME".into()),
        "model" => Ok(Command::Model(arg.to_string())),
        "approvals" => match arg {
            "never" => Ok(Command::Approvals(crate::kinds::ApproveMode::Never)),
            "mutating" => Ok(Command::Approvals(crate::kinds::ApproveMode::Mutating)),
            _ => Err("/approvals takes a mode: never or mutating".into()),
        },
        "diff" if arg.is_empty() => Ok(Command::Diff(None)),
        "diff" => step("diff").map(|s| Command::Diff(Some(s))),
        "rewind" => step("rewind").map(Command::Rewind),
        "fork" => step("fork").map(Command::Fork),
        "show" if arg.is_empty() => Err("/show takes a call id: /show CALL".into()),
        "show" => Ok(Command::Show(arg.to_string())),
        _ => Err(format!(
            "unknown command /{name} (nothing was sent to the model); /help lists the commands"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{Command, parse};

    #[test]
    fn commands_are_read_and_mistakes_said() {
        assert_eq!(parse("/help"), Ok(Command::Help));
        assert_eq!(parse("/model  gpt-x "), Ok(Command::Model("gpt-x".into())));
        assert_eq!(parse("/diff"), Ok(Command::Diff(None)));
        assert_eq!(parse("/diff 3"), Ok(Command::Diff(Some(3))));
        assert_eq!(parse("/rewind 2"), Ok(Command::Rewind(2)));
        assert!(parse("/rewind x").unwrap_err().contains("step number"));
        assert!(
            parse("/undo")
                .unwrap_err()
                .starts_with("unknown command /undo")
        );
        assert!(parse("/approvals sometimes").is_err());
        assert!(parse("/exit now").is_err());
    }
}
