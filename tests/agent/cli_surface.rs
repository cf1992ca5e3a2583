//! The everyday surface of the command line (contract section 12): base
//! URLs from the environment, help texts, completions and the man page.

use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::plan::{read_log, records_of};
use std::process::{Command, Stdio};

fn tinyagent(sb: &Sandbox) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.dir.path())
        .env("TINYAGENT_HOME", sb.home())
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_BASE_URL")
        .stdin(Stdio::null());
    c
}

#[test]
fn openai_and_anthropic_base_url_variables_are_honoured_below_flags_and_config() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("via env")]);
    let mut c = tinyagent(&sb);
    c.args(["run", "--model", "m", "--wal"])
        .arg(sb.wal())
        .arg("--cwd")
        .arg(sb.ws())
        .arg("t")
        .env("OPENAI_BASE_URL", server.base_url());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.request_count(), 1);
    let recs = read_log(&sb.wal());
    assert_eq!(
        records_of(&recs, "run.started")[0].data["base_url"],
        server.base_url().as_str()
    );

    // A flag wins over the variable.
    let flagged = MockServer::start(vec![MockReply::text("via flag")]);
    let mut c = tinyagent(&sb);
    c.args([
        "run",
        "--model",
        "m",
        "--base-url",
        &flagged.base_url(),
        "--wal",
    ])
    .arg(sb.path("two.wal"))
    .arg("--cwd")
    .arg(sb.ws())
    .arg("t")
    .env("OPENAI_BASE_URL", server.base_url());
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((flagged.request_count(), server.request_count()), (1, 1));

    // Anthropic's variable for the anthropic provider.
    let anthropic = MockServer::start(vec![MockReply::json(serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1}
    }))]);
    let mut c = tinyagent(&sb);
    c.args([
        "run",
        "--provider",
        "anthropic",
        "--model",
        "claude",
        "--wal",
    ])
    .arg(sb.path("three.wal"))
    .arg("--cwd")
    .arg(sb.ws())
    .arg("t")
    .env("ANTHROPIC_BASE_URL", anthropic.root_url())
    .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(anthropic.request_count(), 1);
    assert_eq!(anthropic.recorded()[0].path, "/v1/messages");
}
