//! Compaction, end to end: the real binary against the loopback mock server.
//! When the view outgrows `--compact-at`, a summarizer call (no tools, the
//! plan included) replaces the older history; the next request is system,
//! summary, plan block, kept messages. A failing summarizer leaves the run
//! uncompacted; without the plan there is no plan block. (Crash and resume
//! of compacted runs: `compaction_resume_e2e.rs`.)

use crate::support::contract;
use crate::support::e2e::{Sandbox, events, output, stderr};
use crate::support::mock::MockReply;
use crate::support::plan::compact::*;
use crate::support::plan::*;
use serde_json::{Value, json};

#[test]
fn compaction_summarizes_without_tools_and_the_next_request_is_pinned() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::tool_call("bash", json!({"command": "echo five"})).with_usage(0, 50));
    steps.push(MockReply::text("finished").with_usage(0, 60));
    let server = split_server(steps, vec![MockReply::text(SUMMARY).with_usage(1000, 100)]);
    let out = output(run_cmd(
        &sb,
        &server.base_url(),
        &["--json", "--price-in", "1", "--price-out", "2"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(steps.len(), 6);
    assert_eq!(sums.len(), 1, "exactly one summarizer call");
    assert_eq!(sums[0].0, 4, "it came right before the fifth step");

    // The summarizer: the run's own request (the same tools, system prompt
    // and messages, so its prefix is cached), no tool it may call, the
    // current plan among its messages, and its instruction last.
    let sum = &sums[0].1;
    assert_eq!(sum["tool_choice"], "none");
    assert_eq!(sum["tools"], steps[3].1["tools"], "the run's tools");
    let prefix = messages(&steps[3].1);
    assert_eq!(
        &messages(sum)[..prefix.len()],
        &prefix[..],
        "the last step request's prefix"
    );
    assert_eq!(current_plan(sum), format!("{PLAN_HEADER}\n{V1}"));
    let text: String = messages(sum).iter().map(content).collect();
    assert!(text.contains(TASK));
    assert!(text.contains("aaaaaaaa"), "the history is given to it");
    assert!(sum.to_string().contains("echo k2"), "the latest step too");
    let last = messages(sum).last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(content(last).starts_with("[Compaction]"), "{last}");
    assert!(content(last).contains("Do not call any tool"), "{last}");

    // The record.
    let recs = read_log(&sb.wal());
    check_plan_order(&recs);
    let comps = records_of(&recs, "compaction");
    assert_eq!(comps.len(), 1);
    let c = &comps[0].data;
    assert_eq!(c["step"], 4);
    assert_eq!(c["summary"], SUMMARY);
    assert_eq!(c["plan_version"], 1);
    assert_eq!(
        c["usage"],
        json!({"input_tokens": 1000, "output_tokens": 100})
    );
    assert!((c["cost_usd"].as_f64().unwrap() - 1200.0 / 1e6).abs() < 1e-12);
    let view = c["view"].as_array().unwrap();
    assert_eq!(
        view.len(),
        5,
        "summary + the last step (call and 3 results)"
    );
    assert_eq!(view[0]["content"], format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(view[1]["role"], "assistant", "the tail starts at the call");
    // Totals count the summarizer call.
    let last = records_of(&recs, "step.saved").pop().unwrap();
    assert_eq!(
        last.data["usage_total"],
        json!({"input_tokens": 1000, "output_tokens": 310})
    );
    let results = records_of(&recs, "tool.result");

    // The next request: system, summary, plan block, kept messages.
    let before = &steps[3].1;
    let next = &steps[4].1;
    let m = messages(next);
    assert_eq!(m[0], messages(before)[0], "the same system prompt");
    assert_eq!(m[1]["role"], "user");
    assert_eq!(content(&m[1]), format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(plan_block_at(next, 2), format!("{PLAN_HEADER}\n{V1}"));
    assert_eq!(m[3]["role"], "assistant");
    let ids: Vec<&str> = m[3]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["k1", "k2", "k3"]);
    for (k, id) in ids.iter().enumerate() {
        let r = results.iter().find(|r| r.data["call_id"] == *id).unwrap();
        assert_eq!(m[4 + k]["tool_call_id"], *id);
        assert_eq!(m[4 + k]["content"], r.data["content"]);
    }
    assert_eq!(m.len(), 7);
    assert!(
        !next.to_string().contains(TASK),
        "the task went into the summary"
    );
    // Then what came after: the last request extends the compacted one.
    let fin = messages(&steps[5].1);
    assert_eq!(&fin[..7], &m[..]);
    assert_eq!(fin.len(), 9);
    assert_eq!(fin[7]["role"], "assistant");
    assert_eq!(fin[8]["role"], "tool");

    // The estimate rule, and the fold sends what the server saw.
    let states = check_estimates(&sb.wal(), threshold(&sb), true);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }

    // --json reports it; inspect counts it; the full history keeps everything.
    let evs = events(&out);
    let ev = evs.iter().find(|e| e["event"] == "compaction").unwrap();
    assert_eq!(ev["step"], 4);
    assert_eq!(inspect(&sb.wal())["compactions"], 1);
    let doc = export(&sb.wal());
    let msgs = doc["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"], TASK);
    let tool_ids: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["tool_call_id"])
        .collect();
    let logged: Vec<&Value> = results.iter().map(|r| &r.data["call_id"]).collect();
    assert_eq!(tool_ids, logged, "every result is in the full history");
    assert_eq!(
        msgs.len(),
        2 + 6 + results.len(),
        "system, task, 6 replies, results"
    );
    assert_eq!(doc["compaction"]["summary"], SUMMARY);
}

#[test]
fn a_failing_summarizer_leaves_the_run_uncompacted() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::tool_call(
        "bash",
        json!({"command": "echo five"}),
    ));
    steps.push(MockReply::text("finished"));
    // An error that is not retried; the view then does not grow by a quarter,
    // so no second attempt is made.
    let server = split_server(steps, vec![MockReply::status(400)]);
    let out = output(run_cmd(&sb, &server.base_url(), &[]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let err = stderr(&out);
    assert_eq!(
        err.matches("compaction failed").count(),
        1,
        "the failure is reported: {err}"
    );
    assert!(err.contains("uncompacted"), "{err}");
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(
        sums.len(),
        1,
        "the 400 was not retried, and not re-tried every step"
    );
    assert_eq!(steps.len(), 6);
    for (_, req) in &steps {
        assert!(current_plan(req).starts_with(PLAN_HEADER));
        assert_eq!(content(&messages(req)[2]), TASK, "uncompacted view");
        assert!(!req.to_string().contains(SUMMARY_PREFIX));
    }
    // Each step request extends the one before: nothing was dropped.
    for w in steps.windows(2) {
        let (a, b) = (messages(&w[0].1), messages(&w[1].1));
        assert_eq!(&b[2..a.len()], &a[2..], "history kept");
    }
    let recs = read_log(&sb.wal());
    assert!(records_of(&recs, "compaction").is_empty());
    assert_eq!(
        records_of(&recs, "run.finished")[0].data["status"],
        "completed"
    );
    let states = check_estimates(&sb.wal(), threshold(&sb), false);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }
    assert_eq!(inspect(&sb.wal())["compactions"], 0);
}

#[test]
fn an_empty_summary_is_recorded_for_its_cost_and_changes_nothing() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps.push(MockReply::text("finished"));
    let server = split_server(steps, vec![MockReply::text("").with_usage(700, 0)]);
    let out = output(run_cmd(&sb, &server.base_url(), &[]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    assert!(stderr(&out).contains("empty summary"), "{}", stderr(&out));
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!(sums.len(), 1);
    for (_, req) in &steps {
        assert_eq!(content(&messages(req)[2]), TASK, "uncompacted view");
    }
    let recs = read_log(&sb.wal());
    let comp = records_of(&recs, "compaction");
    assert_eq!(comp.len(), 1);
    assert_eq!(comp[0].data["failed"], true);
    assert_eq!(comp[0].data["usage"]["input_tokens"], 700);
    // Its tokens are in the totals (the write-order check sums responses and
    // compactions against every step.saved).
    contract::check_write_order(&recs);
    let saved = records_of(&recs, "step.saved");
    let last = saved.last().unwrap();
    let responses: u64 = records_of(&recs, "model.response")
        .iter()
        .map(|r| r.data["usage"]["input_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(
        last.data["usage_total"]["input_tokens"].as_u64().unwrap(),
        responses + 700
    );
    assert_eq!(inspect(&sb.wal())["compactions"], 0);
}

#[test]
fn without_the_plan_the_compacted_view_has_no_plan_block() {
    let sb = Sandbox::new();
    let mut steps = first_steps();
    steps[0] = MockReply::tool_call("bash", json!({"command": "echo one"}));
    steps.push(MockReply::text("finished"));
    let server = split_server(steps, vec![MockReply::text(SUMMARY)]);
    let at = base_tokens(&sb, false) + 1400;
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), TASK, KEEP);
    cmd.args(["--compact-at", &at.to_string()]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let all = server.requests();
    let (steps, sums) = split_requests(&all);
    assert_eq!((steps.len(), sums.len()), (5, 1));
    assert!(!sums[0].1.to_string().contains("plan"), "no plan to give");
    for (_, req) in &steps {
        assert!(plan_blocks(req).is_empty());
    }
    let m = messages(&steps[4].1);
    assert_eq!(m[0]["role"], "system");
    assert_eq!(content(&m[1]), format!("{SUMMARY_PREFIX}\n{SUMMARY}"));
    assert_eq!(
        m[2]["role"], "assistant",
        "the kept step follows the summary"
    );
    assert_eq!(m.len(), 2 + 4);
    let recs = read_log(&sb.wal());
    let comps = records_of(&recs, "compaction");
    assert_eq!(comps.len(), 1);
    assert_eq!(comps[0].data["plan_version"], 0);
    assert!(records_of(&recs, "plan.updated").is_empty());
    let states = check_estimates(&sb.wal(), at, true);
    for ((_, req), state) in steps.iter().zip(&states) {
        same_as_fold(req, state);
    }
}

/// A run of many small steps against a server built by `reply_usage`: the
/// step replies call `echo x` `steps` times, then finish; summaries answer
/// at once. `prompt_tokens(body_len)` is what the server reports for a
/// request of that many bytes (0: no count).
fn small_steps_run(
    sb: &Sandbox,
    steps: u64,
    at: u64,
    prompt_tokens: fn(u64) -> u64,
) -> (std::process::Output, Vec<Value>) {
    let done = std::sync::atomic::AtomicU64::new(0);
    let server = crate::support::mock::MockServer::start_with(vec![], move |req| {
        let len = serde_json::to_vec(&req.body).unwrap().len() as u64;
        if req.is_summary() {
            return MockReply::text(SUMMARY).with_usage(prompt_tokens(len), 5);
        }
        let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let reply = if n < steps {
            MockReply::tool_call("bash", json!({"command": "echo x"}))
        } else {
            MockReply::text("finished")
        };
        reply.with_usage(prompt_tokens(len), 5)
    });
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), TASK, KEEP);
    cmd.args(["--compact-at", &at.to_string()]);
    let out = output(cmd);
    server.assert_no_violations();
    (out, server.requests())
}

/// Characters / 4 of message text, call names and arguments: what the
/// estimate counted before it measured the request.
fn text_only_tokens(req: &Value) -> u64 {
    let chars: usize = messages(req)
        .iter()
        .map(|m| {
            content(m).chars().count()
                + m["tool_calls"].as_array().map_or(0, |calls| {
                    calls
                        .iter()
                        .map(|c| {
                            c["function"]["name"].as_str().unwrap().len()
                                + c["function"]["arguments"].as_str().unwrap().len()
                        })
                        .sum()
                })
        })
        .sum();
    tokens_of(chars as u64)
}

fn body_len(req: &Value) -> u64 {
    serde_json::to_vec(req).unwrap().len() as u64
}

#[test]
fn many_small_messages_compact_on_the_bytes_sent_when_the_server_counts_nothing() {
    let sb = Sandbox::new();
    let at = base_tokens(&sb, false) + 600;
    let (out, all) = small_steps_run(&sb, 40, at, |_| 0);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (steps, sums) = split_requests(&all);
    assert_eq!(steps.len(), 41);
    assert!(!sums.is_empty(), "the growing request was compacted");
    // What the server got never went over the threshold, measured on the
    // body itself; counting message text only would never have compacted
    // (the JSON around each small message is most of the request).
    let largest = steps.iter().map(|(_, r)| body_len(r)).max().unwrap();
    assert!(tokens_of(largest) <= at, "{largest} bytes sent at {at}");
    // The whole history: the first request, then the call and result each
    // later request ends with.
    let mut history = messages(&steps[0].1).clone();
    for (_, r) in &steps[1..] {
        let m = messages(r);
        history.extend_from_slice(&m[m.len() - 2..]);
    }
    assert_eq!(history.len(), messages(&steps[0].1).len() + 2 * 40);
    let mut uncompacted = steps[0].1.clone();
    uncompacted["messages"] = Value::Array(history);
    assert!(
        text_only_tokens(&uncompacted) < at,
        "the old estimate would have compacted too: {}",
        text_only_tokens(&uncompacted)
    );
    let sent = check_estimates(&sb.wal(), at, true);
    assert_eq!(sent.len(), steps.len());
    for ((_, req), s) in steps.iter().zip(&sent) {
        same_as_fold(req, s);
        assert_eq!(
            s.context_tokens,
            tokens_of(body_len(req)),
            "no server count"
        );
    }
    assert_eq!(
        inspect(&sb.wal())["context_tokens"],
        sent.last().unwrap().context_tokens
    );
}

#[test]
fn a_server_that_counts_more_than_the_bytes_make_the_run_compact_earlier() {
    // A tokenizer that finds two tokens in every four bytes: the server's
    // count is what decides, and growth since its last count is added.
    let count = |len: u64| len / 2;
    let sb = Sandbox::new();
    let base = base_tokens(&sb, false);
    let at = base * 2 + 600;
    let (out, all) = small_steps_run(&sb, 40, at, count);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (steps, sums) = split_requests(&all);
    assert!(!sums.is_empty());
    // On bytes / 4 alone no request comes near the threshold.
    let largest = steps.iter().map(|(_, r)| body_len(r)).max().unwrap();
    assert!(tokens_of(largest) < base + 600, "{largest}");
    let sent = check_estimates(&sb.wal(), at, true);
    assert_eq!(sent.len(), steps.len());
    let mut previous: Option<u64> = None;
    for ((i, req), s) in steps.iter().zip(&sent) {
        same_as_fold(req, s);
        let len = body_len(req);
        // The rule, from the bodies the server got: the previous step
        // request's count plus a quarter of the growth, unless a summary
        // came in between (its count was of another view) or this is the
        // first request.
        let expected = match previous {
            Some(prev) if !sums.iter().any(|(j, _)| j + 1 == *i) => {
                count(prev) + tokens_of(len.saturating_sub(prev))
            }
            _ => tokens_of(len),
        };
        assert_eq!(s.context_tokens, expected, "request {i}");
        previous = Some(len);
    }
}
