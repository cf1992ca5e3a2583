//! Kill -9 torture of the process lifecycle (contract section 7): every tool
//! command leaves a grandchild that makes a side effect after a sleep (a
//! grandchild does not get the leader's parent-death signal, so only resume
//! can stop it). The agent is SIGKILLed at seeded random moments and resumed
//! until the task completes. Checked:
//!
//! - no side effect of an interrupted call happens after the resumed run
//!   has told the model anything (its first request after the kill; the
//!   contract's bound). How many landed between the resume's start and that
//!   request is counted and printed too: resume stops leftovers as soon as
//!   the log is open, so those are the few milliseconds of its start-up;
//! - every process resume stopped belonged to a recorded process group of
//!   the run, and decoy processes of the machine (started before, checked by
//!   pid and start time) are never touched;
//! - the log's write order holds, every call has exactly one result, and
//!   the run completes.
//!
//! Short mode by default (CI). Long mode:
//! `TINYAGENT_LEFTOVER_KILLS=200 cargo test --release --test torture
//! torture_leftovers -- --nocapture`. `TINYAGENT_TORTURE_SEED` replays a run.

use crate::support::contract;
use crate::support::e2e::Sandbox;
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use crate::support::torture;
use crate::support::torture::driver::{
    Ending, attempt_stderr, clear_log, has_record, kill_at, to_files,
};
use crate::support::torture::host::{self, decoys, effects_after_resumes, started_unfinished};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Kills in short mode.
const SHORT_KILLS: u64 = 30;
/// Turns of one task (one bash call each).
const TURNS: u64 = 40;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

/// The call of turn `n`: its side effect is made by a grandchild after a
/// sleep of 0.1 to 0.6 s.
fn command(n: u64) -> String {
    let sleep = 0.1 + ((n * 37) % 50) as f64 / 100.0;
    format!(
        "echo start lq{n}x0; sh -c 'sleep {sleep:.2}; echo lq{n}x0 $(date +%s%N) >> effects.txt'; echo done lq{n}x0"
    )
}

/// When each request reached the model server (ns since the epoch).
static ASKED: std::sync::Mutex<Vec<u128>> = std::sync::Mutex::new(Vec::new());

fn reply(req: &RecordedRequest) -> MockReply {
    ASKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(now_ns());
    let n = crate::support::torture::host::last_marker(req, "lq") + 1;
    if n > TURNS {
        return MockReply::text("all turns done");
    }
    MockReply::tool_call("bash", json!({"command": command(n)})).with_ids(&[&format!("lq{n}x0")])
}

#[derive(Debug, Default)]
struct Tally {
    kills: u64,
    attempts: u64,
    interrupted_calls: u64,
    stopped: u64,
    late_effects: u64,
    /// Side effects between a resume's start and its first request.
    startup_effects: u64,
}

/// One task from `run` to completion with `kills` kills.
fn round(seed: u64, kills: u64) -> Tally {
    let server = MockServer::start_with(vec![], reply);
    let sb = Sandbox::new();
    let base = server.base_url();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut t = Tally::default();
    let mut started = false;
    // (resume start time, calls the kill before it interrupted)
    let mut resumes: Vec<(u128, BTreeSet<String>)> = Vec::new();
    let mut pending_kill: Option<BTreeSet<String>> = None;
    loop {
        t.attempts += 1;
        let mut cmd = if started {
            sb.resume_cmd()
        } else {
            clear_log(&sb);
            sb.run_cmd(&base, "leftover torture: follow the script")
        };
        to_files(&sb, &mut cmd, t.attempts);
        if let Some(open) = pending_kill.take() {
            resumes.push((now_ns(), open));
        }
        let mut child = cmd.spawn().expect("spawn tinyagent");
        let ending = if t.kills < kills {
            // Mostly while a command sleeps: 60 to 700 ms in.
            kill_at(&mut child, Duration::from_millis(rng.u64(0..700)))
        } else {
            Ending::Exited(child.wait().expect("wait"))
        };
        let err = attempt_stderr(&sb, t.attempts);
        assert!(
            !torture::panicked(&err),
            "attempt {} panicked:\n{err}",
            t.attempts
        );
        match ending {
            Ending::Killed => {
                t.kills += 1;
                if !started && !has_record(&sb) {
                    continue;
                }
                started = true;
                let open = started_unfinished(&sb.wal());
                t.interrupted_calls += open.len() as u64;
                pending_kill = Some(open);
            }
            Ending::Exited(status) => {
                assert_eq!(status.code(), Some(0), "attempt {}:\n{err}", t.attempts);
                break;
            }
        }
    }
    // Past every sleep: a leftover that was not stopped would act now.
    std::thread::sleep(Duration::from_millis(900));
    let effects = std::fs::read_to_string(sb.ws().join("effects.txt")).unwrap_or_default();
    let asked = ASKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    (t.late_effects, t.startup_effects) = effects_after_resumes(&effects, &resumes, &asked);
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    let groups: BTreeSet<u64> = recs
        .iter()
        .filter(|r| r.kind == "tool.started")
        .filter_map(|r| r.data["process"]["pgid"].as_u64())
        .collect();
    for r in recs.iter().filter(|r| r.kind == "resume") {
        for p in r.data["stopped_processes"].as_array().into_iter().flatten() {
            t.stopped += 1;
            let pgid = p["pgid"].as_u64().unwrap();
            assert!(
                groups.contains(&pgid),
                "resume stopped pid {} of group {pgid}, which is no group of the run",
                p["pid"]
            );
        }
    }
    let mut results = BTreeMap::new();
    for r in recs.iter().filter(|r| r.kind == "tool.result") {
        *results
            .entry(r.data["call_id"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert!(results.values().all(|n| *n == 1), "one result per call");
    assert_eq!(results.len() as u64, TURNS);
    server.assert_no_violations();
    t
}

#[test]
fn killed_runs_leave_nothing_that_acts_after_resume() {
    let total = torture::env_u64("TINYAGENT_LEFTOVER_KILLS", SHORT_KILLS);
    let seed = torture::seed("killed_runs_leave_nothing_that_acts_after_resume");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut decoys = decoys();
    let mut sum = Tally::default();
    let mut rounds = 0;
    while sum.kills < total {
        rounds += 1;
        let t = round(rng.u64(..), (total - sum.kills).min(25));
        sum.kills += t.kills;
        sum.attempts += t.attempts;
        sum.interrupted_calls += t.interrupted_calls;
        sum.stopped += t.stopped;
        sum.late_effects += t.late_effects;
        sum.startup_effects += t.startup_effects;
    }
    eprintln!(
        "LEFTOVER TORTURE: seed {seed}, {rounds} rounds, {} attempts, {} kills, {} calls interrupted, \
         {} leftover processes stopped by resume, {} side effects after the model was told, \
         {} during a resume's start-up (before it stopped them)",
        sum.attempts,
        sum.kills,
        sum.interrupted_calls,
        sum.stopped,
        sum.late_effects,
        sum.startup_effects
    );
    host::check_and_end_decoys(&mut decoys);
    assert_eq!(sum.late_effects, 0, "side effects after the model was told");
    assert!(sum.kills >= total);
}
