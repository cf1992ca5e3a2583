//! Every provider against a real model server: llama.cpp's `llama-server`
//! with SmolLM2-135M-Instruct on loopback (tests/support/llama.rs), which
//! serves Chat Completions, Responses and Anthropic Messages itself. Each completes a
//! run with exit 0, the answer on stdout and the server's usage in the log,
//! streaming and not; a server with a small context answers a real
//! context-overflow 400.
//!
//! The prerequisite is `llama` (`.ci/llama-server` builds the server).

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::llama::{self, Llama};
use crate::support::require::require;
use std::process::Command;

/// A task a 135M model answers in a few words, without a tool.
const TASK: &str = "Reply with one short sentence saying hello. Do not use any tool.";

/// `tinyagent run` against `server` with `provider` (`openai`,
/// `anthropic`), read-only and at most `steps` steps.
fn run_cmd(sb: &Sandbox, server: &Llama, provider: &str, stream: bool) -> Command {
    let url = if provider == "anthropic" {
        server.url()
    } else {
        server.v1()
    };
    let mut c = sb.run_cmd_cfg(&url, TASK, "max_output_tokens = 48\n");
    c.args(["--provider", provider, "--read-only", "--max-steps", "4"]);
    if stream {
        c.arg("--stream");
    }
    // A 135M model on two shared cores: seconds per reply, more when the
    // machine is busy.
    c.args(["--timeout", "120"]);
    // The local server takes any key; Anthropic's client wants one.
    c.env("ANTHROPIC_API_KEY", "sk-ant-local");
    c
}

/// Runs `provider` against the shared server and checks the run: exit 0,
/// the answer on stdout, usage the server counted in the log.
fn completes(test: &str, provider: &str, stream: bool) {
    let Some(server) = require("llama", test, llama::shared()) else {
        return;
    };
    let _turn = llama::one_at_a_time();
    let sb = Sandbox::new();
    let out = output(run_cmd(&sb, server, provider, stream));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\nserver log:\n{}",
        stderr(&out),
        server.log()
    );
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!answer.is_empty(), "no answer on stdout: {}", stderr(&out));
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    // The window is what the server says of itself (GET /props), and the
    // compaction threshold 80% of it.
    let settings = &recs[0].data["settings"];
    assert_eq!(settings["context_window"], llama::SHARED_CONTEXT);
    assert_eq!(
        settings["compact_at"],
        u64::from(llama::SHARED_CONTEXT) * 4 / 5
    );
    let responses = of_kind(&recs, "model.response");
    let last = responses.last().expect("a model.response");
    assert_eq!(
        last.data["message"]["content"].as_str().map(str::trim),
        Some(answer.as_str())
    );
    assert!(
        matches!(last.data["stop_reason"].as_str(), Some("end_turn")),
        "{}",
        last.data
    );
    for r in &responses {
        let usage = &r.data["usage"];
        // The server's prompt cache may serve most of the input.
        let input = usage["input_tokens"].as_u64().unwrap()
            + usage["cached_input_tokens"].as_u64().unwrap_or(0);
        assert!(input > 20, "{usage}");
        assert!(usage["output_tokens"].as_u64().unwrap() > 0, "{usage}");
    }
    assert_eq!(
        of_kind(&recs, "run.finished")[0].data["status"],
        "completed"
    );
}

#[test]
fn openai_chat_completions_completes_a_run_against_llama_cpp() {
    completes(
        "openai_chat_completions_completes_a_run_against_llama_cpp",
        "openai",
        false,
    );
}

#[test]
fn openai_chat_completions_streamed_completes_a_run_against_llama_cpp() {
    completes(
        "openai_chat_completions_streamed_completes_a_run_against_llama_cpp",
        "openai",
        true,
    );
}

#[test]
fn anthropic_messages_completes_a_run_against_llama_cpp() {
    completes(
        "anthropic_messages_completes_a_run_against_llama_cpp",
        "anthropic",
        false,
    );
}

/// A request larger than the server's context (a task of some 600 tokens
/// against `-c 256`): llama.cpp answers 400 "exceeds the available context
/// size"; nothing can be compacted, so the run fails with exit 1 and a line
/// naming the request's tokens, the window and the server's words.
#[test]
fn a_request_larger_than_a_small_context_is_a_real_400() {
    let test = "a_request_larger_than_a_small_context_is_a_real_400";
    let Some(server) = require("llama", test, Llama::start(256)) else {
        return;
    };
    let sb = Sandbox::new();
    let long = "Count the words of this sentence and say how many there are. ".repeat(50);
    let mut c = sb.run_cmd_cfg(&server.v1(), &long, "max_output_tokens = 48\n");
    c.args(["--read-only", "--max-steps", "4", "--context-window", "256"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Compacting could not help (the task alone is too long): the run
    // says so, with the request's size, the window and the server's words.
    assert!(
        stderr(&out).contains("does not fit the model's context window (256 tokens)")
            && stderr(&out).contains("exceeds the available context size"),
        "{}\nserver log:\n{}",
        stderr(&out),
        server.log()
    );
    let recs = contract::read(&sb.wal());
    assert_eq!(of_kind(&recs, "run.finished")[0].data["status"], "error");
}

#[test]
fn openai_responses_completes_a_run_against_llama_cpp() {
    completes(
        "openai_responses_completes_a_run_against_llama_cpp",
        "responses",
        false,
    );
}

#[test]
fn openai_responses_streamed_completes_a_run_against_llama_cpp() {
    completes(
        "openai_responses_streamed_completes_a_run_against_llama_cpp",
        "responses",
        true,
    );
}
#[test]
fn anthropic_messages_streamed_completes_a_run_against_llama_cpp() {
    completes(
        "anthropic_messages_streamed_completes_a_run_against_llama_cpp",
        "anthropic",
        true,
    );
}
