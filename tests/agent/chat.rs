//! `tinyagent chat` on a real pseudo-terminal (contract section 12): two
//! turns; a chat killed (SIGKILL) at its prompt and resumed back to the
//! prompt; Ctrl-C during a turn stops the turn, not the chat; Ctrl-C at the
//! prompt clears the line; Ctrl-D ends the chat; no terminal, no chat.

use crate::support::contract::{self, Rec};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::pty;
use serde_json::json;
use std::process::Stdio;
use std::time::Duration;

const PROMPT: &str = "you> ";

/// These chats are about turns and signals, not approvals: a chat asks
/// before mutating calls by default (see `tui.rs`), so the config says not
/// to.
const NO_QUESTIONS: &str = "[approvals]\nmode = \"never\"\n";

fn records(sb: &Sandbox) -> Vec<Rec> {
    contract::read_checked(&sb.wal())
}

use contract::of_kind as kinds;

#[test]
fn a_two_turn_chat_records_each_message_before_the_model_sees_it() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::text("hello back"),
        MockReply::tool_call("bash", json!({ "command": "echo two > t.txt" })),
        MockReply::text("done two"),
    ]);
    let mut s = pty::spawn(pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS));
    s.exp_string(PROMPT).expect("the first prompt");
    // Ctrl-C at the prompt clears the line: nothing is sent.
    s.send("never sent").expect("type");
    s.send_control('c').expect("ctrl-c");
    s.exp_string(PROMPT).expect("a new prompt");
    s.send_line("first message").expect("type");
    s.exp_string("hello back").expect("the first answer");
    s.exp_string(PROMPT).expect("the second prompt");
    s.send_line("second message").expect("type");
    s.exp_string("done two").expect("the second answer");
    s.exp_string(PROMPT).expect("the third prompt");
    s.send_control('d').expect("ctrl-d");
    assert_eq!(pty::exit_code(&mut s), Some(0));
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("t.txt")).unwrap(),
        "two\n"
    );
    let recs = records(&sb);
    assert_eq!(recs[0].data["settings"]["chat"], true);
    let msgs = kinds(&recs, "user.message");
    let texts: Vec<&str> = msgs
        .iter()
        .map(|r| r.data["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["first message", "second message"]);
    assert!(msgs.iter().all(|r| r.data["source"] == "chat"));
    assert_eq!(kinds(&recs, "chat.waiting").len(), 2);
    assert_eq!(recs.last().unwrap().kind, "run.finished");
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    // Each message is durable before the request that carries it.
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].to_string().contains("first message"));
    assert!(!reqs[0].to_string().contains("never sent"));
    let second = reqs[1].to_string();
    assert!(second.contains("hello back") && second.contains("second message"));
    // The history is the person's, outside the workspace.
    let hist = std::fs::read_dir(sb.home().join("history"))
        .unwrap()
        .flatten()
        .next()
        .unwrap();
    let text = std::fs::read_to_string(hist.path()).unwrap();
    assert!(text.contains("second message"), "{text}");
    assert!(
        !crate::support::e2e::all_files(&sb.ws())
            .iter()
            .any(|p| p.ends_with(hist.file_name()))
    );
    mock.assert_no_violations();
}

#[test]
fn a_chat_killed_at_its_prompt_resumes_at_its_prompt() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::text("hello back"),
        MockReply::text("welcome back"),
    ]);
    let mut s = pty::spawn(pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS));
    s.exp_string(PROMPT).expect("the first prompt");
    s.send_line("first message").expect("type");
    s.exp_string("hello back").expect("the answer");
    s.exp_string(PROMPT).expect("the prompt");
    // chat.waiting is durable before the prompt shows.
    assert_eq!(
        contract::read(&sb.wal()).last().unwrap().kind,
        "chat.waiting"
    );
    pty::kill9(&mut s);
    let mut r = pty::spawn(pty::resume_cmd(&sb, &sb.wal()));
    // The conversation so far, then the prompt.
    r.exp_string("you> first message")
        .expect("the conversation so far");
    r.exp_string("Ctrl-D ends the chat")
        .expect("the greeting after it");
    r.exp_string(PROMPT).expect("back at the prompt");
    // Nothing was sent to the model on the way back.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(mock.request_count(), 1);
    r.send_line("after the kill").expect("type");
    r.exp_string("welcome back").expect("the answer");
    r.exp_string(PROMPT).expect("the prompt again");
    r.send_control('d').expect("ctrl-d");
    assert_eq!(pty::exit_code(&mut r), Some(0));
    let recs = records(&sb);
    assert_eq!(kinds(&recs, "resume").len(), 1);
    let last = mock.requests().pop().unwrap().to_string();
    assert!(
        last.contains("[Resumed]") && last.contains("after the kill"),
        "{last}"
    );
    // `chat --resume` of a finished chat goes back to its prompt too.
    let mut cmd = pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS);
    cmd.arg("--resume").arg(sb.wal());
    let mut again = pty::spawn(cmd);
    // The conversation so far comes first (its lines start with the
    // prompt's text too), then the prompt.
    again
        .exp_string("Ctrl-D ends the chat")
        .expect("the greeting after the conversation");
    again
        .exp_string(PROMPT)
        .expect("the prompt of the ended chat");
    again.send_control('d').expect("ctrl-d");
    assert_eq!(pty::exit_code(&mut again), Some(0));
    mock.assert_no_violations();
}

/// Waits (up to 20 s) until the log holds a `tool.started`: the call runs.
fn wait_for_started(sb: &Sandbox) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(sb.wal())
        .unwrap_or_default()
        .contains("tool.started")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_during_a_turn_stops_the_turn_not_the_chat() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({ "command": "echo started; sleep 20; echo late > late.txt" }),
        )
        .with_ids(&["slow"]),
        MockReply::text("understood"),
    ]);
    let mut s = pty::spawn(pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS));
    s.exp_string(PROMPT).expect("the prompt");
    s.send_line("run the slow thing").expect("type");
    s.exp_string("bash").expect("the call");
    // The command runs (its tool.started is durable).
    wait_for_started(&sb);
    std::thread::sleep(Duration::from_millis(300));
    s.send_control('c').expect("ctrl-c");
    s.exp_string("turn interrupted").expect("the turn stops");
    s.exp_string(PROMPT).expect("the prompt comes back");
    s.send_line("never mind").expect("type");
    s.exp_string("understood").expect("the next turn");
    s.exp_string(PROMPT).expect("the prompt");
    s.send_control('d').expect("ctrl-d");
    assert_eq!(pty::exit_code(&mut s), Some(0));
    let recs = records(&sb);
    let result = recs
        .iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == "slow")
        .unwrap();
    assert_eq!(result.data["interrupted"], true);
    assert_eq!(result.data["signal"], "SIGINT");
    let waiting = kinds(&recs, "chat.waiting");
    assert_eq!(waiting[0].data["interrupted"], "SIGINT");
    let told = mock.requests().pop().unwrap().to_string();
    assert!(told.contains("interrupted this turn"), "{told}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !sb.ws().join("late.txt").exists(),
        "the stopped command went on"
    );
    mock.assert_no_violations();
}

#[test]
fn chat_without_a_terminal_is_refused_and_writes_nothing() {
    let sb = Sandbox::new();
    let mut cmd = pty::chat_cmd(&sb, "http://127.0.0.1:9/v1", NO_QUESTIONS);
    cmd.stdin(Stdio::null());
    let o = output(cmd);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("needs a terminal"), "{}", stderr(&o));
    assert!(!sb.wal().exists());
}

#[test]
fn a_chat_killed_mid_turn_finishes_the_turn_on_resume_then_prompts() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({ "command": "sleep 20; echo late > late.txt" }),
        )
        .with_ids(&["long"]),
        MockReply::text("carried on after the kill"),
    ]);
    let mut s = pty::spawn(pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS));
    s.exp_string(PROMPT).expect("the prompt");
    s.send_line("start the long thing").expect("type");
    wait_for_started(&sb);
    pty::kill9(&mut s);
    let mut r = pty::spawn(pty::resume_cmd(&sb, &sb.wal()));
    // The turn goes on (the model hears of the interrupted call), then the
    // prompt comes back.
    r.exp_string("carried on after the kill")
        .expect("the turn finishes");
    r.exp_string(PROMPT).expect("then the prompt");
    r.send_control('d').expect("ctrl-d");
    assert_eq!(pty::exit_code(&mut r), Some(0));
    let recs = records(&sb);
    let result = recs
        .iter()
        .find(|r| r.kind == "tool.result" && r.data["call_id"] == "long")
        .unwrap();
    assert_eq!(result.data["interrupted"], true);
    assert_eq!(kinds(&recs, "chat.waiting").len(), 1);
    assert!(!sb.ws().join("late.txt").exists());
    mock.assert_no_violations();
}

#[test]
fn sigterm_at_the_prompt_ends_the_chat_as_it_ends_a_run() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![]);
    let mut s = pty::spawn(pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS));
    s.exp_string(PROMPT).expect("the prompt");
    s.process_mut()
        .signal(rexpect::process::Signal::SIGTERM)
        .expect("SIGTERM");
    s.exp_string("interrupted (SIGTERM)")
        .expect("the resume hint");
    assert_eq!(pty::exit_code(&mut s), Some(143));
    let recs = records(&sb);
    let last = recs.last().unwrap();
    assert_eq!(last.kind, "run.finished");
    assert_eq!(last.data["status"], "interrupted");
    assert_eq!(last.data["reason"], "SIGTERM");
    assert_eq!(mock.request_count(), 0);
}

/// `chat --resume LOG` takes every flag `resume` takes, the same way:
/// `--cwd` that is not the log's workspace is refused as `resume` refuses
/// it (it used to be dropped on the way), and a flag only a new chat has is
/// refused rather than ignored.
#[test]
fn chat_resume_passes_its_flags_to_resume_whole() {
    let sb = Sandbox::new();
    let mock = MockServer::start(vec![MockReply::text("hello back")]);
    let mut s = pty::spawn(pty::chat_cmd(&sb, &mock.base_url(), NO_QUESTIONS));
    s.exp_string(PROMPT).expect("the first prompt");
    s.send_line("first message").expect("type");
    s.exp_string(PROMPT).expect("the prompt");
    s.send_control('d').expect("ctrl-d");
    assert_eq!(pty::exit_code(&mut s), Some(0));
    let before = std::fs::read(sb.wal()).unwrap();
    let other = sb.path("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let chat_resume = |extra: &[&std::ffi::OsStr]| {
        let mut c = std::process::Command::new(crate::support::e2e::bin());
        c.current_dir(sb.dir.path())
            .arg("chat")
            .arg("--resume")
            .arg(sb.wal())
            .args(extra)
            .env_remove("OPENAI_API_KEY")
            .env("TINYAGENT_HOME", sb.home())
            .env("XDG_CONFIG_HOME", sb.config_home());
        c
    };
    let mut r = pty::spawn(chat_resume(&["--cwd".as_ref(), other.as_os_str()]));
    r.exp_string("is not the log's workspace")
        .expect("--cwd reaches resume");
    assert_eq!(pty::exit_code(&mut r), Some(2));
    // `resume` says the same of the same flag.
    let mut plain = std::process::Command::new(crate::support::e2e::bin());
    plain
        .current_dir(sb.dir.path())
        .arg("resume")
        .arg(sb.wal())
        .arg("--cwd")
        .arg(&other)
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home());
    let mut r = pty::spawn(plain);
    r.exp_string("is not the log's workspace")
        .expect("resume refuses it");
    assert_eq!(pty::exit_code(&mut r), Some(2));
    let mut r = pty::spawn(chat_resume(&["--plan".as_ref()]));
    r.exp_string("apply to a new chat only")
        .expect("a new chat's flag is refused");
    assert_eq!(pty::exit_code(&mut r), Some(2));
    assert_eq!(std::fs::read(sb.wal()).unwrap(), before, "a refusal wrote");
}
