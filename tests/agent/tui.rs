//! The chat's terminal interface (contract section 19) on a real
//! pseudo-terminal, read through a terminal emulator (`support::screen`):
//! how it opens, its status line, its slash commands, its safe defaults,
//! and how it ends.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, bin};
use crate::support::mock::{MockReply, MockServer};
use crate::support::screen::Screen;
use serde_json::json;
use std::process::{Command, Stdio};

/// `tinyagent [ARGS…]` in the sandbox, as a person starts it: no
/// subcommand, the server and model from flags.
fn bare(sb: &Sandbox, base_url: &str, words: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.ws())
        .args(["--base-url", base_url, "--model", "test-model"])
        .arg("--wal")
        .arg(sb.wal())
        .arg("--config")
        .arg(sb.fast_config(""))
        .args(words)
        .env_remove("OPENAI_API_KEY")
        .env_remove("NO_COLOR")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    c
}

/// Waits for the prompt and gives its status line (the screen's last
/// non-empty row under `you>`).
fn status_line(s: &Screen) -> String {
    s.wait_until("the status line", |_| {
        s.rows()
            .iter()
            .any(|r| r.starts_with("test-model · ") || r.starts_with("other-model · "))
    });
    s.rows()
        .into_iter()
        .find(|r| r.starts_with("test-model · ") || r.starts_with("other-model · "))
        .unwrap()
}

/// `tinyagent chat` with the sandbox's config plus `toml`.
fn chat(sb: &Sandbox, base_url: &str, toml: &str) -> Command {
    let mut c = crate::support::pty::chat_cmd(sb, base_url, toml);
    c.env_remove("NO_COLOR");
    c
}

#[test]
fn tinyagent_with_words_on_a_terminal_is_a_chat_that_starts_with_them() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![MockReply::text("Here is **the** answer.")]);
    let mut s = Screen::spawn(&bare(&sb, &mock.base_url(), &["fix", "the bug"]));
    let text = s.wait_for("the answer.");
    // Markdown is rendered: the stars are gone.
    assert!(!text.contains("**the**"), "{text}");
    assert!(text.contains("you> fix the bug"), "{text}");
    // Then the prompt, with the status line under it: model, workspace,
    // approvals, environment, tokens, cost (unknown price), context.
    let status = status_line(&s);
    let ws = sb.ws().display().to_string();
    let rest = " · approvals mutating · env local · 10 in / 5 out · $? · context ";
    // A line wider than the terminal keeps the workspace's last part.
    assert!(
        status.starts_with(&format!("test-model · {ws}{rest}"))
            || status.starts_with(&format!("test-model · …/ws{rest}")),
        "{status}"
    );
    assert!(
        status.ends_with("/128.0k (0%, compacts at 80%)"),
        "{status}"
    );
    s.wait_prompt("you>");
    s.send("\x04");
    let text = s.wait_for("come back to it with: tinyagent chat --resume");
    assert_eq!(s.exit_code(), Some(0), "{text}");
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(recs[0].data["settings"]["chat"], true);
    let msgs = of_kind(&recs, "user.message");
    assert_eq!(msgs[0].data["content"], "fix the bug");
    // Streamed by default on a terminal.
    assert!(mock.requests()[0]["stream"] == json!(true));
    mock.assert_no_violations();
}

#[test]
fn tinyagent_alone_on_a_terminal_opens_the_chat_and_off_one_prints_help() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![]);
    let mut s = Screen::spawn(&bare(&sb, &mock.base_url(), &[]));
    s.wait_for("you>");
    s.wait_for("approvals mutating");
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    assert_eq!(mock.request_count(), 0);
    // No terminal: the help, as before (and nothing is started).
    let out = Command::new(bin())
        .env("TINYAGENT_HOME", sb.home())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: tinyagent"));
    // A first word that names a subcommand is that subcommand.
    let out = Command::new(bin())
        .args(["sessions", "--json"])
        .env("TINYAGENT_HOME", sb.home())
        .current_dir(sb.ws())
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn slash_commands_never_reach_the_model_and_unknown_ones_say_so() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::text("first answer"),
        MockReply::text("second"),
    ]);
    let mut s = Screen::spawn(&chat(&sb, &mock.base_url(), ""));
    s.wait_for("approvals mutating");
    s.line("/undo");
    s.wait_for("unknown command /undo");
    s.line("/help");
    s.wait_for("/rewind STEP");
    // Tab completes a command's name.
    s.send("/sta\t");
    s.wait_until("the completed command", |_| {
        s.rows().iter().any(|r| r == "you> /status")
    });
    s.send("\r");
    s.wait_for("environment local");
    s.line("hello");
    s.wait_for("first answer");
    s.wait_for("10 in / 5 out");
    s.line("/cost");
    // The mock's usage has no price: the cost is unknown, not $0.
    let text = s.wait_for("price of this model is unknown");
    assert!(text.contains("$?"), "{text}");
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    assert_eq!(mock.request_count(), 1);
    let body = mock.requests()[0].to_string();
    assert!(!body.contains("/undo") && !body.contains("/help"), "{body}");
    mock.assert_no_violations();
}

#[test]
fn model_approvals_and_compact_are_records_durable_before_the_next_request() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::text("one"),
        MockReply::text("summary of it all"),
        MockReply::text("two"),
    ]);
    let mut s = Screen::spawn(&chat(&sb, &mock.base_url(), ""));
    s.wait_for("approvals mutating");
    s.line("hi");
    s.wait_for("one");
    s.wait_for("10 in / 5 out");
    s.line("/model other-model");
    s.wait_for("settings: model other-model");
    s.line("/approvals never");
    s.wait_for("approvals never");
    s.line("/compact");
    s.wait_for("compacted before the next request");
    // Records now, before any request.
    let recs = contract::read_checked(&sb.wal());
    let changed = of_kind(&recs, "settings.changed");
    assert_eq!(changed.len(), 2);
    assert_eq!(changed[0].data["model"], "other-model");
    assert_eq!(changed[1].data["approvals"], "never");
    assert_eq!(of_kind(&recs, "compaction.requested").len(), 1);
    assert_eq!(mock.request_count(), 1);
    s.line("again");
    s.wait_for("two");
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3, "the summarizer call, then the step");
    assert_eq!(reqs[1]["model"], "other-model");
    assert_eq!(reqs[2]["model"], "other-model");
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(of_kind(&recs, "compaction").len(), 1);
    mock.assert_no_violations();
}

#[test]
fn a_chat_asks_showing_the_diff_and_the_whole_command_then_folds_the_result_to_its_end() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("README.md"), "# proj\n\nOld text.\n").unwrap();
    let command = "for i in $(seq 1 30); do echo PASS $i; done\necho FAIL parse; exit 1";
    let mock = MockServer::start(vec![
        MockReply::tool_call(
            "edit",
            json!({"path": "README.md", "old_string": "Old text.", "new_string": "A greeter."}),
        )
        .with_ids(&["e1"]),
        MockReply::tool_call("bash", json!({ "command": command })).with_ids(&["b1"]),
        MockReply::text("done"),
    ]);
    let mut s = Screen::spawn(&chat(&sb, &mock.base_url(), ""));
    s.wait_for("approvals mutating");
    s.line("fix the readme");
    // The diff, before the question and before anything changed.
    let text = s.wait_for("approve this edit (e1)");
    assert!(
        text.contains("-Old text.") && text.contains("+A greeter."),
        "{text}"
    );
    assert!(!text.contains("new_string"), "no raw JSON: {text}");
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("README.md")).unwrap(),
        "# proj\n\nOld text.\n"
    );
    s.line("y");
    // The whole command, both lines, then the question once.
    let text = s.wait_for("approve this bash (b1)");
    assert!(
        text.contains("$ for i in $(seq 1 30); do echo PASS $i; done")
            && text.contains("> echo FAIL parse; exit 1"),
        "{text}"
    );
    assert_eq!(text.matches("approve this bash").count(), 1, "{text}");
    s.line("y");
    // Folded to head and tail: the failure and the exit code show.
    let text = s.wait_until("the result and the answer", |t| {
        t.contains("· exit 1") && t.lines().any(|l| l == "done")
    });
    let result_line = text
        .lines()
        .find(|l| l.contains("bash b1 · exit 1"))
        .unwrap_or_else(|| panic!("no result line with the exit code:\n{text}"));
    assert!(result_line.contains("31 lines"), "{result_line}");
    assert!(
        text.contains("FAIL parse") && text.contains("PASS 1"),
        "{text}"
    );
    assert!(!text.contains("PASS 15"), "folded: {text}");
    assert!(text.contains("more lines (Ctrl-O or /show b1"), "{text}");
    // /show unfolds it.
    s.wait_for("30 in / 15 out");
    s.line("/show b1");
    s.wait_for("PASS 15");
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("README.md")).unwrap(),
        "# proj\n\nA greeter.\n"
    );
    // `log show` folds as the chat did; `--full` unfolds.
    let show = |full: bool| {
        let mut c = Command::new(bin());
        c.args(["log", "show"]).arg(sb.wal());
        if full {
            c.arg("--full");
        }
        let o = c.env("TINYAGENT_HOME", sb.home()).output().unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let folded = show(false);
    assert!(
        folded.contains("bash b1 · exit 1 (31 lines)") && !folded.contains("PASS 15"),
        "{folded}"
    );
    assert!(folded.contains("FAIL parse"), "{folded}");
    assert!(show(true).contains("PASS 15"));
    mock.assert_no_violations();
}

/// The noise a person saw after every run is gone: no overhead line, no
/// checkpoint line before anything changed; the config error keeps its
/// caret diagram; `sessions | head` says nothing about a pipe; `man` is one
/// complete page.
#[test]
fn the_noise_list_is_gone() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "a\n").unwrap();
    std::fs::write(sb.ws().join("b.txt"), "b\n").unwrap();
    let mock = MockServer::start(vec![MockReply::text("nothing to do")]);
    let out = sb.run_cmd(&mock.base_url(), "look").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("overhead"), "{err}");
    assert!(!err.contains("checkpoint"), "nothing changed: {err}");
    // The first line names what acts where.
    let first = err.lines().next().unwrap();
    assert!(
        first.contains("workspace ")
            && first.contains("approvals never")
            && first.contains("env local"),
        "{first}"
    );

    std::fs::write(sb.path("bad.toml"), "[model]\nname = 3\n").unwrap();
    let out = Command::new(bin())
        .args(["run", "--config"])
        .arg(sb.path("bad.toml"))
        .arg("x")
        .env("TINYAGENT_HOME", sb.home())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.lines()
            .any(|l| l.trim_start().starts_with("2 | name = 3"))
            && err
                .lines()
                .any(|l| l.trim_end().ends_with('|') || l.contains('^')),
        "the caret diagram, on lines of its own: {err}"
    );

    // The reader is gone before the list is written.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "(sleep 0.3; {} sessions --all; echo \"rc=$?\" >&2) | true",
            bin().display()
        ))
        .env("TINYAGENT_HOME", sb.home())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim(), "rc=0", "{err}");

    let out = Command::new(bin()).arg("man").output().unwrap();
    let page = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success());
    for section in [
        "TINYAGENT RUN",
        "TINYAGENT RESUME",
        "TINYAGENT CHAT",
        "TINYAGENT LOG INSPECT",
    ] {
        assert!(page.contains(section), "{section}");
    }
    assert!(!page.contains("(1)"), "no page it lacks is named");
    mock.assert_no_violations();
}

#[test]
fn rewind_forks_restores_the_files_and_goes_on_in_the_fork() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"}))
            .with_ids(&["w1"]),
        MockReply::text("wrote a"),
        MockReply::tool_call("write", json!({"path": "b.txt", "content": "two\n"}))
            .with_ids(&["w2"]),
        MockReply::text("wrote b"),
        MockReply::text("back at step 2"),
    ]);
    let mut s = Screen::spawn(&chat(
        &sb,
        &mock.base_url(),
        "[approvals]\nmode = \"never\"\n",
    ));
    s.wait_prompt("you>");
    s.line("write a");
    s.wait_for("wrote a");
    s.wait_prompt("you>");
    s.line("write b");
    s.wait_for("wrote b");
    s.wait_prompt("you>");
    assert!(sb.ws().join("b.txt").exists());
    s.line("/diff 3");
    s.wait_for("+two");
    s.line("/rewind 2");
    s.wait_for("rewound to step 2");
    s.wait_prompt("you>");
    // The fork comes back showing the conversation it holds.
    let text = s.history();
    let replay = &text[text.find("the conversation so far").expect("a replay")..];
    assert!(
        replay.contains("you> write a") && replay.contains("wrote a"),
        "{replay}"
    );
    assert!(!replay.contains("wrote b"), "{replay}");
    assert!(sb.ws().join("a.txt").exists(), "{text}");
    assert!(!sb.ws().join("b.txt").exists(), "{text}");
    // The fork waits for the person: nothing was asked of the model.
    assert_eq!(mock.request_count(), 4);
    // Its restore can be undone, the fork named by --last (the newest run
    // of this workspace).
    let out = Command::new(bin())
        .args(["restore", "--undo", "--last", "--dry-run"])
        .current_dir(sb.ws())
        .env("TINYAGENT_HOME", sb.home())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(sb.ws().join("a.txt").exists() && !sb.ws().join("b.txt").exists());
    s.line("go on");
    s.wait_for("back at step 2");
    s.wait_prompt("you>");
    s.send("\x04");
    let text = s.wait_for("come back to it with");
    assert_eq!(s.exit_code(), Some(0), "{text}");
    // The original log is as it was; the fork holds the new message, and
    // its model request has the first turn but not the second.
    let last = mock.requests().pop().unwrap().to_string();
    assert!(
        last.contains("write a") && last.contains("go on") && !last.contains("write b"),
        "{last}"
    );
    let original = contract::read_checked(&sb.wal());
    assert!(!original.iter().any(|r| r.data["content"] == "go on"));
    mock.assert_no_violations();
}

/// Runs are named by id: every command that takes a log takes a run id,
/// a unique start of one, or `--last`; runs logged elsewhere (`--wal`)
/// are listed; a run that failed before its first model response says so;
/// `resume` alone on a terminal offers a pick.
#[test]
fn runs_are_named_by_id_prefix_or_last_everywhere() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![MockReply::text("all done")]);
    let mut c = sb.run_cmd(&mock.base_url(), "first task");
    c.current_dir(sb.ws());
    let out = c.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = contract::read_checked(&sb.wal());
    let id = recs[0].data["run_id"].as_str().unwrap().to_string();
    let tiny = |args: &[&str]| {
        let o = Command::new(bin())
            .args(args)
            .current_dir(sb.ws())
            .env("TINYAGENT_HOME", sb.home())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    // Logged with --wal outside $TINYAGENT_HOME, listed all the same.
    let (code, list, err) = tiny(&["sessions"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(list.contains(&id), "{list}");
    // By a prefix of its id, and by --last.
    let prefix = &id[..id.len() - 2];
    let (code, show, err) = tiny(&["log", "show", prefix]);
    assert_eq!(code, Some(0), "{err}");
    assert!(show.contains("first task"), "{show}");
    let (code, inspect, err) = tiny(&["log", "inspect", "--json", "--last"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(inspect.contains(&id), "{inspect}");
    let (code, _, err) = tiny(&["log", "verify", &id]);
    assert_eq!(code, Some(0), "{err}");
    for args in [
        &["log", "show", "zzz-no-such-run"][..],
        &["restore", "--undo", "zzz-no-such-run"],
        &["fork", "zzz-no-such-run", "--at", "1"],
    ] {
        let (code, _, err) = tiny(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("no run id starts with it"), "{args:?}: {err}");
    }
    // A run whose server is not there: failed before its first response.
    let mut c = sb.run_cmd_wal(
        "http://127.0.0.1:9/v1",
        "never answered",
        "",
        &sb.path("dead.wal"),
    );
    c.current_dir(sb.ws());
    assert_eq!(c.output().unwrap().status.code(), Some(1));
    let (_, list, _) = tiny(&["sessions"]);
    assert!(
        list.contains("failed before its first model response"),
        "{list}"
    );
    // The run's price is unknown: its cost is `$?`, not `$0.0000`.
    let row = list.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(row.contains(" $? ") && !row.contains("$0.0000"), "{row}");
    // `resume` alone on a terminal: a pick of this workspace's runs,
    // newest first, the first chosen to begin with.
    let mut resume = Command::new(bin());
    resume
        .arg("resume")
        .current_dir(sb.ws())
        .env("TINYAGENT_HOME", sb.home());
    let mut s = Screen::spawn(&resume);
    s.wait_for("resume which run of this workspace?");
    let chosen = |s: &Screen| {
        s.rows()
            .into_iter()
            .find(|r| r.starts_with("› "))
            .unwrap_or_else(|| panic!("no row chosen:\n{}", s.contents()))
    };
    assert!(chosen(&s).contains("never answered"), "{}", s.contents());
    assert!(
        s.contents().contains(&format!("  {id}")),
        "{}",
        s.contents()
    );
    // Down moves the choice; Esc cancels, nothing resumed.
    s.send("\x1b[B");
    s.wait_until("the choice on the first run", |_| chosen(&s).contains(&id));
    std::thread::sleep(std::time::Duration::from_millis(100));
    s.send("\x1b");
    let text = s.wait_for("no run picked: nothing was resumed");
    assert_eq!(s.exit_code(), Some(1), "{text}");
    assert!(!text.contains("resuming"), "{text}");
    // Again: Down, Up, Down, then Enter resumes the run chosen (a finished
    // run, so resume says it is done).
    let mut s = Screen::spawn(&resume);
    s.wait_for("resume which run of this workspace?");
    s.send("\x1b[B");
    s.wait_until("the choice moved down", |_| chosen(&s).contains(&id));
    s.send("\x1b[A");
    s.wait_until("the choice moved up", |_| {
        chosen(&s).contains("never answered")
    });
    s.send("\x1b[B");
    s.wait_until("the choice moved down", |_| chosen(&s).contains(&id));
    s.send("\r");
    let text = s.wait_for("the run already finished");
    assert!(text.contains(&format!("resuming {id}")), "{text}");
    assert_eq!(s.exit_code(), Some(0), "{text}");
    // Off a terminal it asks for a log.
    let (code, _, err) = tiny(&["resume"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--last"), "{err}");
    mock.assert_no_violations();
}

/// A whole chat session as a person sees it (docs/transcript.md is this
/// screen): a question with its diff, commands, a rewind. With
/// `TINYAGENT_TRANSCRIPT=<file>` the terminal's text is written there.
#[test]
fn a_whole_session_reads_as_the_transcript_shows() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("README.md"), "# proj\n\nTODO\n").unwrap();
    let mock = MockServer::start(vec![
        MockReply::tool_call(
            "edit",
            json!({"path": "README.md", "old_string": "TODO", "new_string": "A greeter for the command line."}),
        )
        .with_content("I'll describe the project in the README.")
        .with_ids(&["call_e1"]),
        MockReply::text("Done: the README now says what the project is.\n\n- **README.md**: one line of description"),
        MockReply::tool_call("bash", json!({"command": "cargo test --quiet 2>&1 | tail -3"}))
            .with_ids(&["call_b1"]),
        MockReply::text("Not run, as you asked: say when."),
        MockReply::tool_call("bash", json!({"command": "seq 1 12"})).with_ids(&["call_b2"]),
        MockReply::text("Twelve lines, as asked."),
        MockReply::text("Back to how it was after step 2."),
    ]);
    let mut s = Screen::spawn(&chat(&sb, &mock.base_url(), ""));
    let status = status_line(&s);
    s.wait_prompt("you>");
    s.line("/help");
    s.wait_for("/rewind STEP");
    s.wait_prompt("you>");
    s.line("describe the project in the README");
    s.wait_for("approve this edit (call_e1)");
    s.line("y");
    s.wait_for("one line of description");
    s.wait_prompt("you>");
    s.line("run the tests");
    s.wait_for("approve this bash (call_b1)");
    s.line("n not now");
    s.wait_for("Not run, as you asked");
    s.wait_prompt("you>");
    s.line("/cost");
    s.wait_for("price of this model is unknown");
    s.wait_prompt("you>");
    s.line("count to twelve");
    s.wait_for("approve this bash (call_b2)");
    s.line("y");
    s.wait_for("Twelve lines, as asked.");
    s.wait_prompt("you>");
    // Folded to its ends; Ctrl-O shows it whole.
    s.send("\x0f");
    s.wait_for("call_b2 (bash), whole:");
    s.wait_prompt("you>");
    s.line("/diff");
    s.wait_for("+A greeter for the command line.");
    s.wait_prompt("you>");
    s.line("/rewind 2");
    s.wait_for("rewound to step 2");
    s.wait_prompt("you>");
    s.line("what changed?");
    s.wait_for("Back to how it was");
    s.wait_prompt("you>");
    s.send("\x04");
    let text = s.wait_for("come back to it with");
    assert_eq!(s.exit_code(), Some(0), "{text}");
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("README.md")).unwrap(),
        "# proj\n\nA greeter for the command line.\n"
    );
    if let Some(out) = std::env::var_os("TINYAGENT_TRANSCRIPT") {
        let tmp = sb.dir.path().display().to_string();
        std::fs::write(&out, s.history().replace(&tmp, "/tmp/demo")).unwrap();
        // The status line under the first prompt (gone from the scrollback).
        let mut status_file = out;
        status_file.push(".status");
        std::fs::write(status_file, status.replace(&tmp, "/tmp/demo")).unwrap();
    }
    mock.assert_no_violations();
}

/// Ctrl-O at the prompt unfolds the newest folded tool result, then the
/// one before it; what was typed stays in the input; `/help` names the key.
#[test]
fn ctrl_o_unfolds_the_newest_folded_result_then_the_one_before() {
    let sb = Sandbox::new();
    let lines = |word: &str| format!("for i in $(seq 1 30); do echo {word} $i; done");
    let mock = MockServer::start(vec![
        MockReply::tool_call("bash", json!({ "command": lines("ALPHA") })).with_ids(&["b1"]),
        MockReply::tool_call("bash", json!({ "command": "echo short" })).with_ids(&["b2"]),
        MockReply::tool_call("bash", json!({ "command": lines("BETA") })).with_ids(&["b3"]),
        MockReply::text("all three ran"),
    ]);
    let mut s = Screen::spawn(&chat(
        &sb,
        &mock.base_url(),
        "[approvals]\nmode = \"never\"\n",
    ));
    s.wait_prompt("you>");
    s.line("/help");
    let text = s.wait_for("unfold the newest folded tool result");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("Ctrl-O") && l.contains("unfold")),
        "{text}"
    );
    s.wait_prompt("you>");
    s.line("run them");
    s.wait_for("all three ran");
    s.wait_prompt("you>");
    let text = s.history();
    // Folded: the middle of each long result is not on the screen.
    assert!(
        text.contains("ALPHA 1") && text.contains("ALPHA 30"),
        "{text}"
    );
    assert!(
        !text.contains("ALPHA 15") && !text.contains("BETA 15"),
        "{text}"
    );
    assert!(text.contains("more lines (Ctrl-O or /show b3"), "{text}");
    // Something typed, then Ctrl-O: the newest folded result, whole.
    s.send("keep this");
    s.wait_until("the typed text", |_| s.cursor_row() == "you> keep this");
    s.send("\x0f");
    let text = s.wait_for("BETA 15");
    assert!(text.contains("b3 (bash), whole:"), "{text}");
    assert!(!text.contains("ALPHA 15"), "only the newest: {text}");
    // The input is as it was.
    s.wait_until("the input kept", |_| s.cursor_row() == "you> keep this");
    // Again: the one before (the short result was never folded).
    s.send("\x0f");
    let text = s.wait_for("ALPHA 15");
    assert!(text.contains("b1 (bash), whole:"), "{text}");
    assert!(!text.contains("b2 (bash), whole:"), "{text}");
    s.send("\x0f");
    s.wait_for("no folded tool result left to unfold");
    s.wait_until("the input kept", |_| s.cursor_row() == "you> keep this");
    // Ctrl-U clears it; Ctrl-D ends the chat. Nothing went to the model.
    s.send("\x15");
    s.wait_until("an empty input", |_| s.cursor_row() == "you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    assert_eq!(mock.request_count(), 4);
    mock.assert_no_violations();
}

/// A price of 0 in the config (a local server declared free) is a known
/// price: `$0.0000`; no price at all is `$?` (the other tests).
#[test]
fn a_price_of_nothing_is_free_and_shown_so() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![MockReply::text("free answer")]);
    let mut s = Screen::spawn(&chat(
        &sb,
        &mock.base_url(),
        "price_in = 0.0\nprice_out = 0.0\n",
    ));
    let status = status_line(&s);
    assert!(status.contains(" · $0.0000 · "), "{status}");
    s.wait_prompt("you>");
    s.line("hi");
    s.wait_for("free answer");
    s.wait_for("10 in / 5 out");
    s.line("/cost");
    let text = s.wait_for("tokens over 1 steps");
    let cost = text
        .lines()
        .rev()
        .find(|l| l.contains("tokens over"))
        .unwrap();
    assert!(cost.ends_with("· $0.0000"), "{cost}");
    assert!(!text.contains("$?"), "{text}");
    s.wait_prompt("you>");
    s.send("\x04");
    let text = s.wait_for("totals:");
    assert_eq!(s.exit_code(), Some(0));
    assert!(text.contains("· $0.0000"), "{text}");
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(recs[0].data["settings"]["price_in"], 0.0);
    mock.assert_no_violations();
}

/// The status line's context is the next request's size as compaction
/// counts it, of the model's window, with where compaction starts: the
/// `context_tokens` each `model.response` records (the size the request
/// was decided on) is what the status line showed before the message,
/// plus the message.
#[test]
fn the_status_lines_context_is_what_the_next_request_carries() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::text("one").with_usage(1_500, 5),
        MockReply::text("two").with_usage(1_600, 5),
        MockReply::text("three").with_usage(1_700, 5),
    ]);
    let mut s = Screen::spawn(&chat(&sb, &mock.base_url(), "context_window = 200000\n"));
    // `context N/200.0k (P%, compacts at 80%)`.
    let context = |status: &str| -> u64 {
        let at = status.find("context ").expect("a context") + "context ".len();
        let rest = &status[at..];
        let (used, tail) = rest.split_once('/').unwrap();
        assert!(
            tail.starts_with("200.0k (") && tail.ends_with("%, compacts at 80%)"),
            "{status}"
        );
        match used.strip_suffix('k') {
            Some(k) => (k.parse::<f64>().unwrap() * 1000.0) as u64,
            None => used.parse().unwrap(),
        }
    };
    let first = context(&status_line(&s));
    assert!(first > 0, "the system prompt and tools count");
    s.wait_prompt("you>");
    s.line("hi");
    s.wait_for("one");
    s.wait_for("1.5k in / 5 out");
    let second = context(&status_line(&s));
    s.wait_prompt("you>");
    s.line("hi again");
    s.wait_for("two");
    s.wait_for("3.1k in / 10 out");
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    let recs = contract::read_checked(&sb.wal());
    let sent: Vec<u64> = of_kind(&recs, "model.response")
        .iter()
        .map(|r| r.data["context_tokens"].as_u64().unwrap())
        .collect();
    // Shown with one decimal above 1,000 tokens: within 100 of it, and the
    // message adds a few tokens.
    for (shown, sent) in [(first, sent[0]), (second, sent[1])] {
        assert!(
            sent + 100 >= shown && sent <= shown + 100,
            "the status showed {shown}, the request carried {sent}"
        );
    }
    // After the first reply the count is the server's: its 1,500 prompt
    // tokens plus what was added since.
    assert!((1_500..1_700).contains(&second), "{second}");

    // `resume --compact-at` moves where compaction starts, and the status
    // line says so.
    let mut c = crate::support::pty::resume_cmd(&sb, &sb.wal());
    c.args(["--compact-at", "50000"]).env_remove("NO_COLOR");
    let mut s = Screen::spawn(&c);
    let status = status_line(&s);
    assert!(
        status.contains("/200.0k (") && status.ends_with("compacts at 25%)"),
        "{status}"
    );
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    mock.assert_no_violations();
}

/// `/resume` in a chat offers a pick of this workspace's other runs: Esc
/// goes back to the chat, Enter goes on in the run chosen, showing its
/// conversation.
#[test]
fn slash_resume_picks_another_run_of_the_workspace() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::text("answer in the first chat"),
        MockReply::text("the headless run's answer"),
        MockReply::text("answer in the second chat"),
    ]);
    let chat_on = |wal: &std::path::Path| {
        let mut c = Command::new(bin());
        c.current_dir(sb.dir.path())
            .args([
                "chat",
                "--base-url",
                &mock.base_url(),
                "--model",
                "test-model",
            ])
            .arg("--wal")
            .arg(wal)
            .arg("--cwd")
            .arg(sb.ws())
            .arg("--config")
            .arg(sb.fast_config("[approvals]\nmode = \"never\"\n"))
            .env_remove("OPENAI_API_KEY")
            .env("TINYAGENT_HOME", sb.home())
            .env("XDG_CONFIG_HOME", sb.config_home());
        c
    };
    let one = sb.path("one.wal");
    let two = sb.path("two.wal");
    let mut s = Screen::spawn(&chat_on(&one));
    s.wait_prompt("you>");
    s.line("the first chat");
    s.wait_for("answer in the first chat");
    s.wait_prompt("you>");
    s.send("\x04");
    assert_eq!(s.exit_code(), Some(0));
    let first_id = contract::read_checked(&one)[0].data["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A headless run of the same workspace, finished.
    let three = sb.path("three.wal");
    let out = sb
        .run_cmd_wal(&mock.base_url(), "a headless task", "", &three)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let headless_id = contract::read_checked(&three)[0].data["run_id"]
        .as_str()
        .unwrap()
        .to_string();

    let mut s = Screen::spawn(&chat_on(&two));
    s.wait_prompt("you>");
    s.line("the second chat");
    s.wait_for("answer in the second chat");
    s.wait_prompt("you>");
    s.line("/resume");
    s.wait_for("resume which run of this workspace?");
    let rows = s.rows();
    let listed: Vec<&String> = rows
        .iter()
        .filter(|r| r.starts_with("› ") || r.starts_with("  r"))
        .collect();
    // The other two runs, newest first: this chat is not offered.
    assert_eq!(listed.len(), 2, "{}", s.contents());
    assert!(
        listed[0].starts_with(&format!("› {headless_id}")) && listed[0].contains("completed"),
        "{}",
        s.contents()
    );
    // A chat is shown by its first message.
    assert!(
        listed[1].starts_with(&format!("  {first_id}"))
            && listed[1].ends_with("(chat) the first chat"),
        "{}",
        s.contents()
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    s.send("\x1b");
    s.wait_for("no run picked: this chat goes on");
    s.wait_prompt("you>");
    // A finished run that was not a chat takes `resume --message`: this
    // chat goes on.
    s.line("/resume");
    s.wait_until("the pick again", |_| {
        s.rows()
            .iter()
            .any(|r| r.starts_with(&format!("› {headless_id}")))
    });
    s.send("\r");
    s.wait_for(&format!(
        "finished (completed); continue it with: tinyagent resume {headless_id} --message"
    ));
    s.wait_prompt("you>");
    // Down to the first chat, and Enter.
    s.line("/resume");
    s.wait_until("the pick again", |_| {
        s.rows()
            .iter()
            .any(|r| r.starts_with(&format!("› {headless_id}")))
    });
    s.send("\x1b[B");
    s.wait_until("the choice on the first chat", |_| {
        s.rows()
            .iter()
            .any(|r| r.starts_with(&format!("› {first_id}")))
    });
    s.send("\r");
    s.wait_for(&format!("resuming {first_id}"));
    // The first chat comes back, showing its conversation, at its prompt.
    let text = s.wait_for("the conversation so far");
    s.wait_prompt("you>");
    let replay = &text[text.rfind("the conversation so far").unwrap()..];
    assert!(replay.contains("you> the first chat"), "{replay}");
    assert!(!replay.contains("the second chat"), "{replay}");
    s.send("\x04");
    let text = s.wait_for(&format!("tinyagent chat --resume {first_id}"));
    assert_eq!(s.exit_code(), Some(0), "{text}");
    assert_eq!(mock.request_count(), 3);
    mock.assert_no_violations();
}

/// Text between tool calls is shown whole, streamed or not, and a streamed
/// step is named once, cost included.
#[test]
fn text_between_calls_is_whole_and_each_step_is_named_once() {
    let long = format!("{} END-OF-TEXT", "word ".repeat(120));
    for stream in [false, true] {
        let sb = Sandbox::new();
        let mock = MockServer::start(vec![
            MockReply::tool_call("bash", json!({"command": "echo looked"})).with_content(&long),
            MockReply::text("the answer"),
        ]);
        let mut c = sb.run_cmd(&mock.base_url(), "look");
        c.args(["--price-in", "1", "--price-out", "2"]);
        if stream {
            c.arg("--stream");
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("END-OF-TEXT"), "stream {stream}: {err}");
        let headers = err.lines().filter(|l| l.starts_with("step 1")).count();
        assert_eq!(headers, 1, "stream {stream}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "the answer\n");
        mock.assert_no_violations();
        // `log show` cuts the long line; `--full` shows it whole.
        let show = |full: &[&str]| {
            let o = Command::new(bin())
                .args(["log", "show"])
                .arg(sb.wal())
                .args(full)
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0));
            String::from_utf8_lossy(&o.stdout).to_string()
        };
        assert!(!show(&[]).contains("END-OF-TEXT"));
        assert!(show(&["--full"]).contains(&long));
    }
}
