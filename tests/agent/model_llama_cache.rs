//! Cached prompt tokens from a real server (contract section 15, usage
//! kinds): llama.cpp keeps the last prompt of its slot, so the same task
//! run twice in a row is mostly read from its cache the second time. Each
//! provider records what the server reported in its own words (Chat
//! `prompt_tokens_details.cached_tokens`, Anthropic
//! `cache_read_input_tokens`, Responses `input_tokens_details.cached_tokens`)
//! as `cached_input_tokens`, never counted in `input_tokens`.
//!
//! The prerequisite is `llama` (`.ci/llama-server` builds the server).

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::llama;
use crate::support::require::require;

const TASK: &str = "Reply with one short sentence saying hello. Do not use any tool.";

fn cached_on_the_second_run(test: &str, provider: &str) {
    let Some(server) = require("llama", test, llama::shared()) else {
        return;
    };
    let _turn = llama::one_at_a_time();
    let url = if provider == "anthropic" {
        server.url()
    } else {
        server.v1()
    };
    // One workspace (its path is in the system prompt), two logs.
    let sb = Sandbox::new();
    let mut usages = Vec::new();
    for n in 0..2 {
        let wal = sb.path(&format!("run{n}.wal"));
        let mut c = sb.run_cmd_wal(&url, TASK, "max_output_tokens = 16\n", &wal);
        c.args([
            "--provider",
            provider,
            "--read-only",
            "--max-steps",
            "1",
            "--timeout",
            "120",
        ])
        .env("ANTHROPIC_API_KEY", "sk-ant-local");
        let out = output(c);
        // A 135M model may call a tool anyway: the step limit then stops it.
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{}\nserver log:\n{}",
            stderr(&out),
            server.log()
        );
        let recs = contract::read(&wal);
        contract::check_write_order(&recs);
        let first = of_kind(&recs, "model.response")[0].data["usage"].clone();
        usages.push(first);
    }
    let cached = usages[1]["cached_input_tokens"].as_u64().unwrap_or(0);
    let fresh = usages[1]["input_tokens"].as_u64().unwrap();
    // The same prompt again: most of it is read from the cache, and none
    // of it is counted twice.
    assert!(fresh < cached, "{provider}: {usages:?}");
    let total = |u: &serde_json::Value| {
        u["input_tokens"].as_u64().unwrap() + u["cached_input_tokens"].as_u64().unwrap_or(0)
    };
    assert_eq!(total(&usages[0]), total(&usages[1]), "{usages:?}");
}

#[test]
fn chat_completions_records_llama_cpps_cached_tokens() {
    cached_on_the_second_run(
        "chat_completions_records_llama_cpps_cached_tokens",
        "openai",
    );
}

#[test]
fn anthropic_records_llama_cpps_cache_reads() {
    cached_on_the_second_run("anthropic_records_llama_cpps_cache_reads", "anthropic");
}

#[test]
fn responses_records_llama_cpps_cached_tokens() {
    cached_on_the_second_run("responses_records_llama_cpps_cached_tokens", "responses");
}
