//! Pay only for new tokens (contract section 16): each request of a run is
//! the previous one plus what was added, with the plan in it.
//!
//! A scripted server plays each provider through a 60-step run whose plan
//! changes every 4 steps. From the captured requests the test computes what
//! a prompt cache could not have served: for each request, the bytes of its
//! parts (the tools, the system prompt, each message or input item) from the
//! first part that differs from the previous request's, against the floor,
//! the bytes the request grew by. The ratio of the sums must stay within
//! 1.05; the same run with `plan.pin = "head"` (section 3's layout) is far
//! above it, so the measure is not blind to the regression it guards.

use crate::support::cache::*;
use crate::support::contract::{self, of_kind};
use crate::support::e2e::{Sandbox, output, stderr};
use crate::support::llama::{self, Llama};
use crate::support::mock::MockServer;
use crate::support::require::require;
use serde_json::Value;

/// Runs the scripted session against `api` with `toml` added to the
/// config; returns the requests' bodies and the run's log.
fn session(
    api: Api,
    toml: &str,
    max_steps: u64,
) -> (Sandbox, MockServer, std::process::ExitStatus) {
    session_with(api, toml, max_steps, script(api, estimated(api)), "")
}

/// [`session`] against `server`, in a workspace whose `AGENTS.md` says
/// `agents` (none when empty).
fn session_with(
    api: Api,
    toml: &str,
    max_steps: u64,
    server: MockServer,
    agents: &str,
) -> (Sandbox, MockServer, std::process::ExitStatus) {
    let sb = Sandbox::new();
    if !agents.is_empty() {
        std::fs::write(sb.ws().join("AGENTS.md"), agents).unwrap();
    }
    let url = match api {
        Api::Anthropic => server.root_url(),
        _ => server.base_url(),
    };
    let mut c = sb.run_cmd_cfg(&url, "do all the parts", toml);
    c.args(["--provider", api.provider(), "--plan"])
        .args(["--max-steps", &max_steps.to_string()])
        .env("OPENAI_API_KEY", "sk-test")
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    (sb, server, out.status)
}

/// The expected plan text's mark for the step group in progress.
fn in_progress(k: u64) -> String {
    format!("[>] {k} part {k} of the work")
}

#[test]
fn every_request_only_grows_with_the_plan_updated_every_4_steps_for_each_provider() {
    for api in Api::ALL {
        let (sb, server, status) = session(api, "", STEPS);
        assert_eq!(status.code(), Some(0), "{api:?}");
        server.assert_no_violations();
        let bodies = server.requests();
        assert_eq!(bodies.len() as u64, STEPS, "{api:?}: one request a step");
        let parts: Vec<Vec<String>> = bodies.iter().map(|b| api.parts(b)).collect();
        let (uncached, floor) = uncached_and_floor(&parts, &[]);
        let ratio = uncached as f64 / floor as f64;
        eprintln!("{api:?}: uncached {uncached} B / floor {floor} B = {ratio:.3}");
        assert!(
            ratio <= 1.05,
            "{api:?}: uncached {uncached} B / floor {floor} B = {ratio:.3}"
        );
        // The model sees the current plan as the last plan message of
        // every request: none before the first update, then each update's.
        for (i, body) in bodies.iter().enumerate() {
            let n = i as u64 + 1;
            let plan = api.last_plan(body).unwrap_or_default();
            if n == 1 {
                assert!(plan.contains("no plan yet"), "{api:?} request 1: {plan}");
            } else {
                let k = (n - 2) / PLAN_EVERY + 1;
                assert!(
                    plan.contains(&in_progress(k)),
                    "{api:?} request {n}: {plan}"
                );
            }
        }
        let run_id = contract::read(&sb.wal())[0].data["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        for body in &bodies {
            match api {
                // The run's requests go to the servers that cache its prefix.
                Api::Chat | Api::Responses => assert_eq!(body["prompt_cache_key"], run_id.as_str()),
                // A breakpoint after the tools and system prompt and one on
                // the last message; at most four.
                Api::Anthropic => {
                    let text = body.to_string();
                    assert!(text.matches("cache_control").count() <= 4, "{text}");
                    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
                    let last = array(&body["messages"]).last().cloned().unwrap();
                    let block = array(&last["content"]).last().cloned().unwrap();
                    assert_eq!(block["cache_control"]["type"], "ephemeral", "{last}");
                }
            }
        }
        // What the cache did is in the log: the step's cached tokens.
        let recs = contract::read(&sb.wal());
        let responses = of_kind(&recs, "model.response");
        let last = &responses.last().unwrap().data["usage"];
        if api != Api::Chat {
            assert!(last["cached_input_tokens"].as_u64().unwrap() > 0, "{last}");
        }
    }
}

#[test]
fn the_plan_pinned_at_the_head_breaks_the_prefix_as_the_measure_shows() {
    let api = Api::Chat;
    let (_sb, server, status) = session(api, "[plan]\npin = \"head\"\n", 20);
    assert_eq!(status.code(), Some(3), "max steps");
    let bodies = server.requests();
    let parts: Vec<Vec<String>> = bodies.iter().map(|b| api.parts(b)).collect();
    let (uncached, floor) = uncached_and_floor(&parts, &[]);
    let ratio = uncached as f64 / floor as f64;
    eprintln!("head-pinned plan, 20 requests: {uncached} B / {floor} B = {ratio:.3}");
    assert!(ratio > 2.0, "head-pinned plan: {ratio:.3}");
    // Section 3's layout: the plan right after the system prompt.
    for b in &bodies {
        assert!(
            b["messages"][1]["content"]
                .as_str()
                .unwrap()
                .starts_with("[Current plan]")
        );
    }
}

#[test]
fn compaction_and_resume_pin_the_current_plan_and_the_summarizer_reuses_the_prefix() {
    for api in Api::ALL {
        // Compactions on the way (a small threshold), and a stop at step
        // 30 that a resume carries on from.
        let toml = "[compaction]\nthreshold_tokens = 6000\nkeep_recent = 4\n";
        let (sb, server, status) = session(api, toml, 30);
        assert_eq!(status.code(), Some(3), "{api:?} stops at max steps");
        let mut c = sb.resume_cmd();
        c.args(["--max-steps", &STEPS.to_string()])
            .env("OPENAI_API_KEY", "sk-test")
            .env("ANTHROPIC_API_KEY", "sk-ant-test");
        let out = output(c);
        assert_eq!(out.status.code(), Some(0), "{api:?}: {}", stderr(&out));
        server.assert_no_violations();
        let recorded = server.recorded();
        let summary = crate::support::mock::is_summary;
        let summaries: Vec<usize> = (0..recorded.len())
            .filter(|&i| summary(&recorded[i].body))
            .collect();
        assert!(!summaries.is_empty(), "{api:?}: the run compacted");
        let mut steps = Vec::new();
        let mut fresh = Vec::new();
        let mut after_summary = false;
        for (i, r) in recorded.iter().enumerate() {
            if summary(&r.body) {
                // The summarizer sends the run's own prefix: the step
                // request before it, extended, with the same tools.
                let before = steps
                    .last()
                    .map(|s: &usize| api.parts(&recorded[*s].body))
                    .unwrap();
                let parts = api.parts(&r.body);
                let same = before
                    .iter()
                    .zip(&parts)
                    .take_while(|(a, b)| a == b)
                    .count();
                // All of it, but Anthropic's last message, which the
                // instruction joins (consecutive user turns are one).
                let want = before.len() - usize::from(api == Api::Anthropic);
                assert!(
                    same >= want,
                    "{api:?}: summary shares {same} of {} parts",
                    before.len()
                );
                assert!(r.body["tools"].as_array().is_some_and(|t| !t.is_empty()));
                after_summary = true;
                continue;
            }
            if after_summary {
                fresh.push(steps.len());
                after_summary = false;
            }
            steps.push(i);
            // Every request's last plan message is the current plan.
            let plan = api.last_plan(&r.body).unwrap_or_default();
            let n = steps.len() as u64;
            if n > 1 {
                let k = (n - 2) / PLAN_EVERY + 1;
                assert!(
                    plan.contains(&in_progress(k)),
                    "{api:?} request {n}: {plan}"
                );
            }
        }
        // The resume's first request may differ (the plan is pinned anew).
        fresh.push(30);
        let parts: Vec<Vec<String>> = steps
            .iter()
            .map(|&i| api.parts(&recorded[i].body))
            .collect();
        let (uncached, floor) = uncached_and_floor(&parts, &fresh);
        let ratio = uncached as f64 / floor as f64;
        eprintln!(
            "{api:?} with {} compactions and a resume: {uncached} B / {floor} B = {ratio:.3}",
            summaries.len()
        );
        assert!(ratio <= 1.05, "{api:?}: {uncached} / {floor} = {ratio:.3}");
        // After the resume the plan is right after the system prompt.
        let resumed = &recorded[steps[30]].body;
        let plan_at = match api {
            Api::Chat => resumed["messages"][1]["content"]
                .as_str()
                .map(str::to_string),
            Api::Responses => resumed["input"][1]["content"].as_str().map(str::to_string),
            Api::Anthropic => resumed["messages"][0]["content"][0]["text"]
                .as_str()
                .map(str::to_string),
        };
        let pinned = plan_at.unwrap_or_default();
        assert!(
            pinned.starts_with("[Current plan]") || pinned.starts_with("[Summary"),
            "{api:?}: {pinned}"
        );
        let recs = contract::read(&sb.wal());
        assert!(!of_kind(&recs, "compaction").is_empty());
    }
}

/// The steps of the run against llama.cpp: a 135M model on two shared
/// cores evaluates about 30 new prompt tokens a second, so the run is the
/// scripted one's first 24 steps (six plan changes), not all 60; the
/// benchmark runs all of it.
const LLAMA_STEPS: u64 = 24;

/// A project's `AGENTS.md` of about 2,000 tokens. SmolLM2's chat template
/// renders no tools, so without it the prompt that stays the same is a
/// few hundred tokens, where a real agent's (tools, instructions) is
/// thousands; then a step's few hundred new tokens would be most of it.
fn project_guide() -> String {
    let mut s = String::from("# Working on this project\n\n");
    for i in 1..=60 {
        s.push_str(&format!(
            "{i}. Run the checks for module {i} before a change to it is done; keep its \
             public names stable and say in the change note why it moved.\n"
        ));
    }
    s
}

#[test]
fn a_real_llama_server_reads_nine_tenths_of_every_later_prompt_from_its_cache() {
    let Some(server) = require(
        "llama",
        "a_real_llama_server_reads_nine_tenths_of_every_later_prompt_from_its_cache",
        llama::shared(),
    ) else {
        return;
    };
    let _turn = llama::one_at_a_time();
    for api in Api::ALL {
        // The scripted run, each request's prompt evaluated by llama.cpp
        // and its usage (prompt tokens, cached tokens) reported as llama.cpp
        // counted them.
        let llama: &'static Llama = server;
        let proxy = script_with(api, 4, move |req| {
            let (path, body) = one_token(api, req);
            match llama.post(&path, &body) {
                Ok(answer) => answer["usage"].clone(),
                Err(e) => panic!("llama-server refused {path}: {e}"),
            }
        });
        let (sb, proxy, status) = session_with(api, "", LLAMA_STEPS, proxy, &project_guide());
        assert_eq!(
            status.code(),
            Some(3),
            "{api:?} stops at max steps\n{}",
            server.log()
        );
        proxy.assert_no_violations();
        let recs = contract::read(&sb.wal());
        let usages: Vec<Value> = of_kind(&recs, "model.response")
            .iter()
            .map(|r| r.data["usage"].clone())
            .collect();
        assert_eq!(usages.len() as u64, LLAMA_STEPS, "{api:?}");
        let n = |u: &Value, k: &str| u[k].as_u64().unwrap_or(0);
        let mut worst = 1.0f64;
        for (i, u) in usages.iter().enumerate().skip(1) {
            let cached = n(u, "cached_input_tokens");
            let all = n(u, "input_tokens") + cached + n(u, "cache_write_tokens");
            let share = cached as f64 / all as f64;
            worst = worst.min(share);
            assert!(
                share >= 0.9,
                "{api:?} request {}: {cached} of {all} prompt tokens cached",
                i + 1
            );
        }
        eprintln!(
            "{api:?} against llama.cpp: at least {:.1}% of each later prompt cached",
            worst * 100.0
        );
    }
}

#[test]
fn the_live_output_and_inspect_show_what_the_cache_did_priced_per_kind() {
    let api = Api::Anthropic;
    let toml =
        "price_in = 3.0\nprice_out = 15.0\nprice_cached_in = 0.3\nprice_cache_write = 3.75\n";
    let sb = Sandbox::new();
    let server = script(api, estimated(api));
    let mut c = sb.run_cmd_cfg(&server.root_url(), "do all the parts", toml);
    c.args(["--provider", "anthropic", "--plan", "--max-steps", "12"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let out = output(c);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Each step's line: its tokens, the share read from the cache, its cost.
    let err = stderr(&out);
    let steps: Vec<&str> = err.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(steps.len(), 12, "{err}");
    for l in &steps[1..] {
        assert!(l.contains("% cached) / 20 out · $"), "{l}");
    }
    let totals = err
        .lines()
        .find(|l| l.starts_with("totals: "))
        .unwrap_or_default();
    assert!(totals.contains(" cached, "), "{totals}");
    assert!(
        totals.contains("(input $") && totals.contains(", cached $"),
        "{totals}"
    );
    // inspect: the share, the cost of each kind, the latest steps.
    let v = crate::support::plan::inspect(&sb.wal());
    let u = &v["usage"];
    let n = |k: &str| u[k].as_f64().unwrap();
    let by = &u["cost_by_kind"];
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(
        close(
            by["input_usd"].as_f64().unwrap(),
            n("input_tokens") * 3.0 / 1e6
        ),
        "{u}"
    );
    assert!(close(
        by["cached_input_usd"].as_f64().unwrap(),
        n("cached_input_tokens") * 0.3 / 1e6
    ));
    assert!(close(
        by["cache_write_usd"].as_f64().unwrap(),
        n("cache_write_tokens") * 3.75 / 1e6
    ));
    assert!(close(
        by["output_usd"].as_f64().unwrap(),
        n("output_tokens") * 15.0 / 1e6
    ));
    let sum = [
        "input_usd",
        "cached_input_usd",
        "cache_write_usd",
        "output_usd",
    ]
    .iter()
    .map(|k| by[*k].as_f64().unwrap())
    .sum::<f64>();
    assert!((sum - n("cost_usd")).abs() < 1e-6, "{u}");
    let last = u["last_steps"].as_array().unwrap();
    assert_eq!(last.len(), 10, "the latest ten steps");
    assert_eq!(last[9]["step"], 12);
    assert!(last[9]["cached_input_tokens"].as_u64().unwrap() > 0);
    let human = crate::support::plan::log_cmd("inspect", &sb.wal(), &[]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("% of input read from the cache · input $"),
        "{text}"
    );
    assert!(text.contains("step 12: "), "{text}");
}
