//! Usage kinds and prices per kind (contract section 15): cached and
//! cache-written input are counted apart from input and priced at their
//! own price, reasoning tokens are recorded, and `step.saved` totals carry
//! the same kinds.

use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use serde_json::json;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn openai_cached_and_reasoning_tokens_are_recorded_and_priced_apart() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::json(json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 60},
            "completion_tokens_details": {"reasoning_tokens": 5}}
    }))]);
    let mut c = sb.run_cmd(&server.base_url(), "t");
    c.args([
        "--price-in",
        "1",
        "--price-out",
        "2",
        "--price-cached-in",
        "0.1",
    ]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(recs[0].data["settings"]["price_cached_in"], 0.1);
    let r = &of_kind(&recs, "model.response")[0].data;
    let usage = json!({"input_tokens": 40, "output_tokens": 20,
        "cached_input_tokens": 60, "reasoning_tokens": 5});
    assert_eq!(r["usage"], usage);
    // 40 x $1 + 20 x $2 + 60 x $0.1, per million.
    assert!(close(r["cost_usd"].as_f64().unwrap(), 86e-6), "{r}");
    let saved = &of_kind(&recs, "step.saved")[0].data;
    assert_eq!(saved["usage_total"], usage);
    assert!(close(saved["cost_usd_total"].as_f64().unwrap(), 86e-6));
}

#[test]
fn anthropic_cache_reads_and_writes_are_not_added_to_input() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::json(json!({
        "id": "msg", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 80,
            "cache_creation_input_tokens": 30}
    }))]);
    let mut c = sb.run_cmd(&server.root_url(), "t");
    c.args([
        "--provider",
        "anthropic",
        "--price-in",
        "3",
        "--price-out",
        "15",
        "--price-cached-in",
        "0.3",
        "--price-cache-write",
        "3.75",
    ])
    .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let recs = contract::read(&sb.wal());
    let r = &of_kind(&recs, "model.response")[0].data;
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 10, "output_tokens": 5, "cached_input_tokens": 80,
            "cache_write_tokens": 30})
    );
    // 10 x $3 + 5 x $15 + 80 x $0.3 + 30 x $3.75, per million.
    assert!(close(r["cost_usd"].as_f64().unwrap(), 241.5e-6), "{r}");
    assert!(
        stderr(&out).contains("80 cached, 30 written to the cache"),
        "{}",
        stderr(&out)
    );
}
