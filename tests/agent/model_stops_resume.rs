//! The count of replies cut at the output limit in a row is the log's, not
//! the process's (contract section 15: "at most twice in a row"): a run
//! killed after two cut replies and resumed stops `truncated` at the next
//! cut one, and a person's `--message` starts the count anew.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;
use std::time::{Duration, Instant};

/// A reply cut at the output limit, with a half-written call.
fn cut() -> MockReply {
    MockReply::json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "length", "message": {
            "role": "assistant", "content": "Writing the file",
            "tool_calls": [{"id": "call_cut", "type": "function", "function": {
                "name": "write", "arguments": "{\"path\":\"a.txt\",\"content\":\"hal"}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}
    }))
}

/// Starts `run` against `server`, waits until the log holds two
/// `[Truncated]` notices and the third request is at the server, and
/// kills the process with SIGKILL.
fn run_and_kill_after_two_cuts(sb: &Sandbox, server: &MockServer) {
    let mut c = sb.run_cmd(&server.base_url(), "write a.txt");
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let notices = std::fs::read_to_string(sb.wal())
            .map(|l| l.matches("\"source\":\"truncated\"").count())
            .unwrap_or(0);
        if notices == 2 && server.request_count() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "never saw two cut replies");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

#[test]
fn a_resume_goes_on_counting_cut_replies_and_stops_truncated_at_the_third() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        cut(),
        cut(),
        // Never answered in time: the run is killed while it waits.
        MockReply::text("too late").delayed(Duration::from_secs(6)),
        cut(),
        MockReply::text("not asked"),
    ]);
    run_and_kill_after_two_cuts(&sb, &server);

    let out = output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cut at the output limit 3 times in a row"),
        "{}",
        stderr(&out)
    );
    // The resume asked once more, and stopped at that cut reply.
    assert_eq!(server.request_count(), 4);
    server.assert_no_violations();
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let stops: Vec<_> = of_kind(&recs, "model.response")
        .iter()
        .map(|r| r.data["stop_reason"].clone())
        .collect();
    assert_eq!(stops, vec![json!("max_tokens"); 3]);
    assert_eq!(of_kind(&recs, "user.message").len(), 2);
    assert!(of_kind(&recs, "tool.started").is_empty());
    assert!(!sb.ws().join("a.txt").exists());
    let finished = of_kind(&recs, "run.finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].data["status"], "truncated");
}

#[test]
fn a_persons_message_on_resume_starts_the_count_anew() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        cut(),
        cut(),
        MockReply::text("too late").delayed(Duration::from_secs(6)),
        cut(),
        MockReply::text("The whole answer."),
    ]);
    run_and_kill_after_two_cuts(&sb, &server);

    let mut c = sb.resume_cmd();
    c.args(["--message", "write it in two calls"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "The whole answer."
    );
    assert_eq!(server.request_count(), 5);
    server.assert_no_violations();
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(
        of_kind(&recs, "run.finished").last().unwrap().data["status"],
        "completed"
    );
}
