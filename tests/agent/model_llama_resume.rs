//! A resume learns the context window the way a new run does (contract
//! section 15): a log that recorded none, resumed against a real llama.cpp
//! server, takes the window the server reports (`GET /props`).
//!
//! The prerequisite is `llama` (`.ci/llama-server` builds the server).

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::llama::Llama;
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::require;
use serde_json::json;

/// A run begun against a scripted server (which answers no `/props`, so
/// the log records no window), one step, then resumed against llama.cpp
/// started with `-c 256`: the resumed request does not fit, nothing can be
/// compacted, and the run fails naming the server's window (256), not the
/// 128,000 tokens assumed for a model nobody gave a window for.
#[test]
fn a_resume_takes_the_window_a_llama_cpp_server_reports() {
    let test = "a_resume_takes_the_window_a_llama_cpp_server_reports";
    let Some(server) = require("llama", test, Llama::start(256)) else {
        return;
    };
    let sb = Sandbox::new();
    let scripted = MockServer::start(vec![MockReply::tool_call(
        "bash",
        json!({"command": "true"}),
    )]);
    let long = "Count the words of this sentence and say how many there are. ".repeat(50);
    let mut c = sb.run_cmd_cfg(&scripted.base_url(), &long, "max_output_tokens = 48\n");
    c.args(["--max-steps", "1"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    scripted.assert_no_violations();
    let recs = contract::read(&sb.wal());
    let settings = &recs[0].data["settings"];
    assert!(settings["context_window"].is_null(), "{settings}");
    assert_eq!(settings["compact_at"], 102_400);

    let mut c = sb.resume_cmd();
    c.arg("--base-url")
        .arg(server.v1())
        .args(["--max-steps", "3", "--timeout", "120"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not fit the model's context window (256 tokens)")
            && stderr(&out).contains("exceeds the available context size"),
        "{}\nserver log:\n{}",
        stderr(&out),
        server.log()
    );
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    // Nothing was recorded of the window: the next resume asks again.
    assert!(recs[0].data["settings"]["context_window"].is_null());
    assert_eq!(
        of_kind(&recs, "run.finished").last().unwrap().data["status"],
        "error"
    );
}
