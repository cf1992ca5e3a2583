//! A full context window (contract section 15): a request refused for its
//! size is compacted at once and asked again, once; a request that still
//! does not fit ends the run with exit 1 naming its tokens and the window;
//! `resume --compact-at` sets the threshold for the rest of the run.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;

fn too_long() -> MockReply {
    MockReply::Status {
        code: 400,
        retry_after: None,
        body: json!({"error": {"message": "This model's maximum context length is 128000 \
            tokens. However, your messages resulted in 131072 tokens.",
            "type": "invalid_request_error", "code": "context_length_exceeded"}})
        .to_string(),
    }
}

#[test]
fn a_context_overflow_compacts_at_once_and_asks_the_same_step_again() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo one"})),
        MockReply::tool_call("bash", json!({"command": "echo two"})),
        MockReply::tool_call("bash", json!({"command": "echo three"})),
        too_long(),
        MockReply::text("Ran echo three times."),
        MockReply::text("All three ran."),
    ]);
    let out = output(sb.run_cmd_cfg(
        &server.base_url(),
        "run three echos",
        "[compaction]\nkeep_recent = 2\n",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "All three ran."
    );
    let requests = server.recorded();
    assert_eq!(requests.len(), 6);
    // The summarizer call may call no tool; the step asked again after it
    // is shorter than the one refused.
    assert!(requests[4].is_summary());
    assert!(!requests[5].is_summary());
    assert!(requests[5].messages().len() < requests[3].messages().len());
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(of_kind(&recs, "compaction").len(), 1);
    assert_eq!(of_kind(&recs, "model.response").len(), 4);
    assert_eq!(
        of_kind(&recs, "run.finished")[0].data["status"],
        "completed"
    );
}

/// The summarizer's request is the run's own, so after an overflow it
/// does not fit either: the part to be summarized is then sent alone.
#[test]
fn a_summarizer_refused_for_its_size_after_an_overflow_asks_with_the_older_part_alone() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo one"})),
        MockReply::tool_call("bash", json!({"command": "echo two"})),
        MockReply::tool_call("bash", json!({"command": "echo three"})),
        too_long(),
        too_long(),
        MockReply::text("Ran echo three times."),
        MockReply::text("All three ran."),
    ]);
    let out = output(sb.run_cmd_cfg(
        &server.base_url(),
        "run three echos",
        "[compaction]\nkeep_recent = 2\n",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let requests = server.recorded();
    assert_eq!(requests.len(), 7);
    // First the run's whole request and the instruction, then the older
    // part alone: the same start, fewer messages, the instruction last.
    let (full, older) = (&requests[4], &requests[5]);
    assert!(full.is_summary() && older.is_summary());
    assert_eq!(full.messages().len(), requests[3].messages().len() + 1);
    assert!(older.messages().len() < full.messages().len());
    let n = older.messages().len() - 1;
    assert_eq!(&older.messages()[..n], &full.messages()[..n]);
    let last = older.messages().last().unwrap();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("[Compaction]")
    );
    assert!(!requests[6].is_summary());
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let comps = of_kind(&recs, "compaction");
    assert_eq!(comps.len(), 1);
    assert_eq!(comps[0].data["summary"], "Ran echo three times.");
    assert_eq!(
        of_kind(&recs, "run.finished")[0].data["status"],
        "completed"
    );
}

#[test]
fn a_task_too_long_for_the_window_ends_exit_1_naming_tokens_and_window() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![too_long()]);
    let mut c = sb.run_cmd(&server.base_url(), "a task");
    c.args(["--context-window", "4096"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("does not fit the model's context window (4096 tokens)")
            && err.contains("the request (about "),
        "{err}"
    );
    // Asked once: nothing could be compacted, and no retry of a 400.
    assert_eq!(server.request_count(), 1);
    let recs = contract::read(&sb.wal());
    assert_eq!(recs[0].data["settings"]["context_window"], 4096);
    // 80% of the window.
    assert_eq!(recs[0].data["settings"]["compact_at"], 3276);
    assert_eq!(of_kind(&recs, "run.finished")[0].data["status"], "error");
}

#[test]
fn resume_compact_at_sets_the_threshold_for_the_rest_of_the_run() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": "echo one"})),
        MockReply::tool_call("bash", json!({"command": "echo two"})),
        MockReply::text("summary of the echos"),
        MockReply::text("done"),
    ]);
    let mut c = sb.run_cmd_cfg(
        &server.base_url(),
        "echo",
        "[compaction]\nkeep_recent = 2\n",
    );
    c.args(["--max-steps", "2"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let mut c = sb.resume_cmd();
    c.args(["--max-steps", "5", "--compact-at", "100"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let recs = contract::read(&sb.wal());
    assert_eq!(of_kind(&recs, "resume")[0].data["compact_at"], 100);
    assert_eq!(of_kind(&recs, "compaction").len(), 1);
}

/// `run` at the public OpenAI endpoint with no key is refused before the
/// log is made: exit 2, naming the variable, nothing sent anywhere.
#[test]
fn no_key_for_the_public_endpoint_is_refused_before_the_log() {
    let sb = Sandbox::new();
    let mut c = std::process::Command::new(crate::support::e2e::bin());
    c.current_dir(sb.dir.path())
        .args(["run", "--cwd"])
        .arg(sb.ws())
        .args(["--wal", "k.wal", "hello"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .stdin(std::process::Stdio::null());
    let started = std::time::Instant::now();
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("$OPENAI_API_KEY"), "{}", stderr(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(!sb.path("k.wal").exists());
    assert!(
        !sb.home().join("runs").exists()
            || std::fs::read_dir(sb.home().join("runs"))
                .unwrap()
                .next()
                .is_none()
    );
}
