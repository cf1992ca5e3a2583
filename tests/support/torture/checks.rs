//! The end checks of the kill torture, over the log, the workspace and the
//! requests the server saw.

use super::script::{Effect, SUMMARY_USAGE, Script};
use crate::support::contract::{self, Rec};
use crate::support::e2e::{Sandbox, bin};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// What the checks counted (for the report).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub records: usize,
    pub calls: usize,
    pub completed: usize,
    pub interrupted: usize,
    pub not_run: usize,
    pub compactions: usize,
    pub resumes: usize,
    pub plan_updates: usize,
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every check of the brief over a finished run; returns what it counted.
pub fn check_run(sb: &Sandbox, script: &Script) -> Counts {
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let mut c = Counts {
        records: recs.len(),
        ..Counts::default()
    };
    let last = recs.last().expect("a record");
    assert_eq!(last.kind, "run.finished");
    assert_eq!(last.data["status"], "completed", "{:?}", last.data);

    // Every call id has exactly one result.
    let mut calls: Vec<String> = Vec::new();
    for r in recs.iter().filter(|r| r.kind == "model.response") {
        for call in r.data["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            calls.push(call["id"].as_str().expect("call id").to_string());
        }
    }
    let mut results: HashMap<String, &Rec> = HashMap::new();
    for r in recs.iter().filter(|r| r.kind == "tool.result") {
        let id = r.data["call_id"].as_str().expect("call_id").to_string();
        assert!(
            results.insert(id.clone(), r).is_none(),
            "two results for {id}"
        );
    }
    let mut sorted = calls.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        calls.len(),
        "a call id appears in two responses"
    );
    assert_eq!(
        results.len(),
        calls.len(),
        "every call has exactly one result"
    );
    c.calls = calls.len();

    // Side effects: a completed call ran exactly once, a call that never
    // started left nothing, an interrupted one at most once.
    let ledger_lines = lines(&sb.ws().join("ledger.txt"));
    let bg_lines = lines(&sb.ws().join("bg-ledger.txt"));
    let ledger = count(&ledger_lines);
    let bg = count(&bg_lines);
    let mut expected_plan: Option<Vec<(String, String, String)>> = None;
    for id in &calls {
        let r = results[id];
        let (_, effect) = script
            .find(id)
            .unwrap_or_else(|| panic!("{id} not in the script"));
        let interrupted = r.data["interrupted"] == true;
        let content = r.data["content"].as_str().unwrap_or("");
        let not_run = interrupted && content.starts_with("[not run");
        let times = match effect {
            Effect::Ledger => *ledger.get(id.as_str()).unwrap_or(&0),
            Effect::BgLedger => *bg.get(id.as_str()).unwrap_or(&0),
            Effect::File => usize::from(
                std::fs::read_to_string(sb.ws().join(format!("w/{id}.txt")))
                    .is_ok_and(|s| s == *id),
            ),
            Effect::Plan(_) => 0,
        };
        if not_run {
            c.not_run += 1;
            assert_eq!(times, 0, "{id} never started but left a side effect");
        } else if interrupted {
            c.interrupted += 1;
            assert!(times <= 1, "{id} (interrupted) ran {times} times");
        } else {
            c.completed += 1;
            assert_eq!(r.data["is_error"], false, "{id} failed: {content}");
            if let Effect::Plan(items) = effect {
                expected_plan = Some(items);
            } else {
                assert_eq!(times, 1, "{id} completed but ran {times} times");
            }
        }
    }
    for (id, n) in ledger.iter().chain(bg.iter()) {
        assert_eq!(*n, 1, "{id} ran {n} times");
        assert!(results.contains_key(*id), "{id} ran but is not in the log");
    }

    // Totals: the last step.saved equals the sums over every model call.
    let (mut tin, mut tout, mut cost) = (0u64, 0u64, 0f64);
    for r in recs
        .iter()
        .filter(|r| r.kind == "model.response" || r.kind == "compaction")
    {
        tin += r.data["usage"]["input_tokens"].as_u64().expect("input");
        tout += r.data["usage"]["output_tokens"].as_u64().expect("output");
        cost += r.data["cost_usd"].as_f64().expect("cost");
        if r.kind == "compaction" {
            c.compactions += 1;
            assert_eq!(
                r.data["usage"],
                serde_json::json!({"input_tokens": SUMMARY_USAGE.0, "output_tokens": SUMMARY_USAGE.1})
            );
        }
    }
    let saved = recs
        .iter()
        .rev()
        .find(|r| r.kind == "step.saved")
        .expect("step.saved");
    assert_eq!(
        saved.data["usage_total"]["input_tokens"].as_u64(),
        Some(tin)
    );
    assert_eq!(
        saved.data["usage_total"]["output_tokens"].as_u64(),
        Some(tout)
    );
    let saved_cost = saved.data["cost_usd_total"].as_f64().expect("cost total");
    assert!(
        (saved_cost - cost).abs() < 1e-9,
        "cost total {saved_cost} != {cost}"
    );
    assert!(cost > 0.0, "prices were set, so the cost is not zero");

    // The plan equals the last update_plan that ran, in the log and as
    // `log inspect --json` reports it.
    c.plan_updates = recs.iter().filter(|r| r.kind == "plan.updated").count();
    c.resumes = recs.iter().filter(|r| r.kind == "resume").count();
    let out = std::process::Command::new(bin())
        .args(["log", "inspect", "--json"])
        .arg(sb.wal())
        .output()
        .expect("log inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("inspect json");
    let got: Option<Vec<(String, String, String)>> = report["plan"]["items"].as_array().map(|a| {
        a.iter()
            .map(|i| {
                let s = |k: &str| i[k].as_str().unwrap_or("").to_string();
                (s("id"), s("text"), s("status"))
            })
            .collect()
    });
    assert_eq!(
        got, expected_plan,
        "final plan != the last update_plan that ran"
    );
    assert_eq!(report["status"], "completed");
    c
}

fn count(lines: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.as_str()).or_insert(0) += 1;
    }
    m
}
