//! Kill -9 torture of the container environment (contract sections 7 and
//! 14) with the real engine: one run in its container, its agent SIGKILLed
//! at seeded random moments and resumed until the task completes; every
//! resume reattaches to the same container. The first call starts a
//! background ticker; every later call leaves a grandchild inside the
//! container that makes a side effect in the workspace after a sleep (only
//! resume can stop it: the agent that started it is gone). Checked:
//!
//! - no side effect of an interrupted call happens after the resumed run
//!   has told the model anything (its first request after the kill);
//! - every process resume stopped belonged to a recorded process group of
//!   the run, and decoy processes of the host are never touched;
//! - the ticker, once recorded, is reattached by every later resume (never
//!   reported lost: its container never went), and its output went on;
//! - the log's write order holds, every call has exactly one result, the
//!   run completes, and its container is gone after it.
//!
//! Short mode (CI): 100 kills. `TINYAGENT_CONTAINER_KILLS=N` for more;
//! `TINYAGENT_TORTURE_SEED` replays a run.

use crate::support::container::{self, Ctr};
use crate::support::contract;
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use crate::support::require::{self, require};
use crate::support::torture;
use crate::support::torture::driver::{Ending, kill_at};
use crate::support::torture::host::{self, decoys, effects_after_resumes, started_unfinished};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SHORT_KILLS: u64 = 100;
/// Turns of one task (one bash call each; the first starts the ticker).
const TURNS: u64 = 24;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

/// The call of turn `n` (2 and on): a side effect by a grandchild after a
/// sleep of 0.1 to 0.6 s.
fn command(n: u64) -> String {
    let sleep = 0.1 + ((n * 37) % 50) as f64 / 100.0;
    format!(
        "echo start cq{n}x0; sh -c 'sleep {sleep:.2}; echo cq{n}x0 $(date +%s%N) >> effects.txt'; echo done cq{n}x0"
    )
}

/// When each request reached the model server (ns since the epoch).
static ASKED: std::sync::Mutex<Vec<u128>> = std::sync::Mutex::new(Vec::new());

fn reply(req: &RecordedRequest) -> MockReply {
    ASKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(now_ns());
    let n = crate::support::torture::host::last_marker(req, "cq") + 1;
    if n > TURNS {
        return MockReply::text("all turns done");
    }
    let id = format!("cq{n}x0");
    if n == 1 {
        return MockReply::tool_call(
            "bash",
            json!({"command": "while sleep 0.2; do echo tick; done", "background": true}),
        )
        .with_ids(&[&id]);
    }
    MockReply::tool_call("bash", json!({"command": command(n)})).with_ids(&[&id])
}

#[derive(Debug, Default)]
struct Tally {
    kills: u64,
    attempts: u64,
    interrupted_calls: u64,
    stopped: u64,
    reattached: u64,
    late_effects: u64,
}

fn attempt_files(c: &Ctr, cmd: &mut Command, attempt: u64) -> std::path::PathBuf {
    let err = c.sb.path(&format!("attempt-{attempt}.err"));
    cmd.stdout(Stdio::null())
        .stderr(File::create(&err).expect("stderr file"));
    err
}

fn round(seed: u64, kills: u64) -> Tally {
    let server = MockServer::start_with(vec![], reply);
    let c = Ctr::new();
    let base = server.base_url();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut t = Tally::default();
    let mut started = false;
    let mut resumes: Vec<(u128, BTreeSet<String>)> = Vec::new();
    let mut pending_kill: Option<BTreeSet<String>> = None;
    let mut names = BTreeSet::new();
    loop {
        t.attempts += 1;
        let mut cmd = if started {
            c.resume_cmd(&base)
        } else {
            let _ = std::fs::remove_file(c.wal());
            c.run_cmd(&base, "container torture: follow the script")
        };
        let err_path = attempt_files(&c, &mut cmd, t.attempts);
        if let Some(open) = pending_kill.take() {
            resumes.push((now_ns(), open));
        }
        let mut child = cmd.spawn().expect("spawn tinyagent");
        let ending = if t.kills < kills {
            kill_at(&mut child, Duration::from_millis(rng.u64(100..1100)))
        } else {
            Ending::Exited(child.wait().expect("wait"))
        };
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        assert!(
            !torture::panicked(&err),
            "attempt {} panicked:\n{err}",
            t.attempts
        );
        if let Some(name) = c.name() {
            names.insert(name);
        }
        match ending {
            Ending::Killed => {
                t.kills += 1;
                if !started && c.name().is_none() {
                    // Killed before its first record (and so before its
                    // container): start over.
                    continue;
                }
                started = true;
                let open = started_unfinished(&c.wal());
                t.interrupted_calls += open.len() as u64;
                pending_kill = Some(open);
            }
            Ending::Exited(status) => {
                assert_eq!(status.code(), Some(0), "attempt {}:\n{err}", t.attempts);
                break;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(900));
    let effects = std::fs::read_to_string(c.ws().join("effects.txt")).unwrap_or_default();
    let asked = ASKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    t.late_effects = effects_after_resumes(&effects, &resumes, &asked).0;
    let recs = contract::read(&c.wal());
    contract::check_write_order(&recs);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    let groups: BTreeSet<u64> = recs
        .iter()
        .filter(|r| r.kind == "tool.started")
        .filter_map(|r| r.data["process"]["pgid"].as_u64())
        .collect();
    let mut ticker_recorded = false;
    // The model's final answer is recorded: the run is ending, and its end
    // stops the ticker before `run.finished` is written.
    let mut ending = false;
    let mut ticker_gone = false;
    // A list of process ids (a member left out when empty reads as none).
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    };
    for r in &recs {
        match r.kind.as_str() {
            "model.response" => {
                ending = r.data["message"]["tool_calls"]
                    .as_array()
                    .is_none_or(Vec::is_empty);
            }
            "process.started" => {
                assert_eq!(r.data["env"], "container");
                ticker_recorded = true;
            }
            "resume" if ticker_gone => {
                // Reported lost once, then no longer tracked.
                assert!(ids(&r.data["lost_processes"]).is_empty(), "{}", r.data);
                assert!(
                    ids(&r.data["reattached_processes"]).is_empty(),
                    "{}",
                    r.data
                );
            }
            "resume" if ticker_recorded && ending => {
                // Killed between the run's end stopping the ticker and
                // `run.finished`: reattached if the kill came first, else
                // reported as no longer running; never both.
                let lost = ids(&r.data["lost_processes"]);
                let back = ids(&r.data["reattached_processes"]);
                assert!(
                    (lost == ["p1"] && back.is_empty()) || (lost.is_empty() && back == ["p1"]),
                    "{}",
                    r.data
                );
                ticker_gone = lost == ["p1"];
            }
            "resume" if ticker_recorded => {
                // Reattached: it runs until the run ends.
                assert!(
                    r.data["lost_processes"]
                        .as_array()
                        .is_some_and(Vec::is_empty),
                    "a resume lost the ticker though its container ran: {}",
                    r.data
                );
                assert_eq!(r.data["reattached_processes"], json!(["p1"]), "{}", r.data);
                t.reattached += 1;
            }
            "resume" => {
                for p in r.data["stopped_processes"].as_array().into_iter().flatten() {
                    let pgid = p["pgid"].as_u64().unwrap();
                    assert!(
                        groups.contains(&pgid),
                        "stopped group {pgid} is no group of the run"
                    );
                }
            }
            _ => {}
        }
        if r.kind == "resume" {
            t.stopped += r.data["stopped_processes"].as_array().map_or(0, Vec::len) as u64;
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
    if ticker_recorded {
        let ticks = std::fs::read_to_string(c.sb.path("logs/run.wal.out/p1.log")).unwrap();
        assert!(ticks.contains("tick"), "the ticker's output: {ticks:?}");
    }
    for name in &names {
        assert_eq!(
            container::state(name),
            "gone",
            "{name} outlived its finished run"
        );
    }
    assert_eq!(names.len(), 1, "one container for the run: {names:?}");
    server.assert_no_violations();
    t
}

#[test]
fn killed_container_runs_reattach_and_leave_nothing_that_acts_after_resume() {
    let test = "killed_container_runs_reattach_and_leave_nothing_that_acts_after_resume";
    let Some(()) = require("container", test, require::container()) else {
        return;
    };
    let total = torture::env_u64("TINYAGENT_CONTAINER_KILLS", SHORT_KILLS);
    let seed = torture::seed(test);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut decoys = decoys();
    let mut sum = Tally::default();
    let mut rounds = 0;
    while sum.kills < total {
        rounds += 1;
        let t = round(rng.u64(..), (total - sum.kills).min(50));
        sum.kills += t.kills;
        sum.attempts += t.attempts;
        sum.interrupted_calls += t.interrupted_calls;
        sum.stopped += t.stopped;
        sum.reattached += t.reattached;
        sum.late_effects += t.late_effects;
    }
    eprintln!(
        "CONTAINER TORTURE: seed {seed}, {rounds} rounds, {} attempts, {} kills, {} calls \
         interrupted, {} leftover processes stopped inside by resume, {} resumes reattached the \
         ticker, {} side effects after the model was told",
        sum.attempts,
        sum.kills,
        sum.interrupted_calls,
        sum.stopped,
        sum.reattached,
        sum.late_effects
    );
    host::check_and_end_decoys(&mut decoys);
    assert_eq!(sum.late_effects, 0, "side effects after the model was told");
    assert!(sum.kills >= total);
}
