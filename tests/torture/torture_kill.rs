//! Random SIGKILL torture of the real binary: a long scripted task (bash
//! calls of varied length, background processes, writes, plan updates,
//! compactions, snapshots) is killed at seeded random moments and resumed
//! each time until it completes; then the log, the side effects, the totals,
//! the plan and every request the model saw are checked.
//!
//! Short mode by default. Long mode: `TINYAGENT_TORTURE_KILLS=500 cargo test
//! --release --test torture_kill -- --nocapture` (kills in total, spread over
//! as many rounds as needed). `TINYAGENT_TORTURE_SEED` replays a run.

use crate::support::contract;
use crate::support::e2e;
use crate::support::e2e::Sandbox;
use crate::support::mock::MockServer;
use crate::support::torture;
use crate::support::torture::checks::{Counts, check_run};
use crate::support::torture::driver::{Tally, torture};
use crate::support::torture::script::Script;
use std::process::Command;

/// Kills per round (a round is one task from `run` to `completed`).
const KILLS_PER_ROUND: u64 = 25;
/// Tool turns per task.
const TURNS: u64 = 40;

fn round(seed: u64, kills: u64) -> (Tally, Counts) {
    let marker = seed ^ 0x5eed;
    let script = Script {
        turns: TURNS,
        marker,
    };
    let server = MockServer::start_with(vec![], move |req| script.reply(req));
    let sb = Sandbox::new();
    let base = server.base_url();
    // A few turns over the first request's size.
    let at = (crate::support::plan::compact::base_tokens(&sb, true) + 1000).to_string();
    let make_run = || -> Command {
        let mut c = sb.run_cmd(&base, "torture: follow the script to the end");
        c.args(["--plan", "--compact-at", &at, "--snapshot-every", "3"])
            .args(["--price-in", "2.5", "--price-out", "10"]);
        c
    };
    let mut rng = fastrand::Rng::with_seed(seed);
    let tally = torture(&sb, make_run, kills, &mut rng);
    // Leftover background processes of this round (lost on a kill).
    let _ = Command::new("pkill")
        .args(["-f", &format!("torture-bg-{marker}")])
        .status();
    let counts = check_run(&sb, &script);
    server.assert_no_violations();
    assert!(server.request_count() > TURNS as usize);
    (tally, counts)
}

#[test]
fn random_sigkill_then_resume_until_done() {
    let total = torture::env_u64("TINYAGENT_TORTURE_KILLS", KILLS_PER_ROUND);
    let seed = torture::seed("random_sigkill_then_resume_until_done");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut sum = Tally::default();
    let mut counts = Vec::new();
    let mut rounds = 0;
    while sum.kills < total {
        rounds += 1;
        let round_seed = rng.u64(..);
        let want = (total - sum.kills).min(KILLS_PER_ROUND);
        let (t, c) = round(round_seed, want);
        eprintln!("round {rounds} (seed {round_seed}): {t:?} {c:?}");
        sum.attempts += t.attempts;
        sum.kills += t.kills;
        sum.restarts += t.restarts;
        sum.torn_tails += t.torn_tails;
        counts.push(c);
    }
    let add = |f: fn(&Counts) -> usize| counts.iter().map(f).sum::<usize>();
    eprintln!(
        "TORTURE SUMMARY: seed {seed}, {rounds} rounds, {} attempts, {} kills ({} before the first record), \
         {} torn tails cut; {} records, {} calls: {} completed, {} interrupted, {} not run; \
         {} compactions, {} resumes, {} plan updates",
        sum.attempts,
        sum.kills,
        sum.restarts,
        sum.torn_tails,
        add(|c| c.records),
        add(|c| c.calls),
        add(|c| c.completed),
        add(|c| c.interrupted),
        add(|c| c.not_run),
        add(|c| c.compactions),
        add(|c| c.resumes),
        add(|c| c.plan_updates),
    );
    assert!(sum.kills >= total);
    assert!(add(|c| c.compactions) > 0, "the task compacted");
    assert!(add(|c| c.plan_updates) > 0, "the task updated its plan");
}

/// Bug: a kill between an update_plan call's `tool.result` and its
/// `plan.updated` lost the plan update on resume, although the model had been
/// told the plan was updated.
#[test]
fn kill_between_update_plan_result_and_plan_updated_keeps_the_plan() {
    use crate::support::mock::MockReply;
    use serde_json::json;
    let sb = Sandbox::new();
    let items = json!([{"id": "a", "text": "write the file", "status": "in_progress"}]);
    let server = MockServer::start(vec![
        MockReply::tool_call("update_plan", json!({"items": items, "note": "first"}))
            .with_ids(&["plan1"]),
        MockReply::text("done"),
    ]);
    let mut cmd = sb.run_cmd(&server.base_url(), "plan then stop");
    cmd.arg("--plan")
        .env("TINYAGENT_CRASH_AFTER", "tool.result:1");
    let out = e2e::output(cmd);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9), "{}", e2e::stderr(&out));
    let out = e2e::output(sb.resume_cmd());
    assert_eq!(out.status.code(), Some(0), "{}", e2e::stderr(&out));
    server.assert_no_violations();
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let plans: Vec<_> = recs.iter().filter(|r| r.kind == "plan.updated").collect();
    assert_eq!(plans.len(), 1, "the plan update is in the log once");
    assert_eq!(plans[0].data["items"], items);
    // The model's next request shows the plan as updated.
    let reqs = server.requests();
    let last = reqs.last().unwrap().to_string();
    assert!(last.contains("write the file"), "{last}");
}
