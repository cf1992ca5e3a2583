//! Kill -9 torture with approvals on (contract section 12): every turn's
//! bash call is asked about; a helper process answers each question with
//! `tinyagent approve` (allow, or deny with a reason, seeded) after a random
//! delay, while the agent is SIGKILLed at random moments and resumed until
//! the run completes. The agent is never on a terminal: every answer comes
//! through the channel. Checked on the whole log:
//!
//! - no mutating call starts without an `allow` decision before its
//!   `tool.started`; a call is decided at most once and never asked again
//!   after its decision; read-only calls are never asked about;
//! - a denied call never ran (its side effect never appears) and its result
//!   names the reason; an allowed call's side effect appears at most once;
//! - the write order of the contract holds, and the run completes.
//!
//! Short mode by default (CI). Long mode: `TINYAGENT_APPROVAL_KILLS=200
//! cargo test --release --test torture torture_approvals -- --nocapture`.
//! `TINYAGENT_TORTURE_SEED` replays a run.

use crate::support::contract;
use crate::support::e2e::{Sandbox, bin};
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use crate::support::torture;
use crate::support::torture::driver::{
    Ending, attempt_stderr, clear_log, has_record, kill_at, to_files,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Kills in short mode.
const SHORT_KILLS: u64 = 20;
/// Turns of the task (one bash call each; every third also reads a file).
const TURNS: u64 = 20;

fn reply(req: &RecordedRequest) -> MockReply {
    let n = crate::support::torture::host::last_marker(req, "aq") + 1;
    if n > TURNS {
        return MockReply::text("all turns done");
    }
    let bash = (
        "bash",
        json!({ "command": format!("echo aq{n}x >> effects.txt") }),
    );
    if n.is_multiple_of(3) {
        MockReply::tool_calls(vec![("read", json!({ "path": "seed.txt" })), bash])
            .with_ids(&[&format!("r{n}"), &format!("b{n}")])
    } else {
        MockReply::tool_calls(vec![bash]).with_ids(&[&format!("b{n}")])
    }
}

/// The complete records of a log that may end torn.
fn complete_records(wal: &std::path::Path) -> Vec<Value> {
    std::fs::read(wal)
        .unwrap_or_default()
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .collect()
}

/// Whether the helper denies call `id` (seeded, a third of them).
fn denies(seed: u64, id: &str) -> bool {
    let mut h = seed;
    for b in id.bytes() {
        h = h.wrapping_mul(31).wrapping_add(u64::from(b));
    }
    h.is_multiple_of(3)
}

/// The helper: answers every open question of the log with `tinyagent
/// approve` after a random delay, until `stop`. A question still open
/// 1.5 s after its answer (the run was killed and the answer file taken,
/// or refused) is answered again; `approve` refuses what is decided
/// already, so that changes nothing.
fn answer_questions(
    wal: std::path::PathBuf,
    seed: u64,
    stop: Arc<AtomicBool>,
    answers: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xa99);
        let mut answered: BTreeMap<(u64, String), Instant> = BTreeMap::new();
        while !stop.load(Ordering::SeqCst) {
            let mut open: BTreeSet<(u64, String)> = BTreeSet::new();
            for r in complete_records(&wal) {
                let key = (
                    r["data"]["step"].as_u64().unwrap_or(0),
                    r["data"]["call_id"].as_str().unwrap_or("").to_string(),
                );
                match r["type"].as_str() {
                    Some("approval.requested") => {
                        open.insert(key);
                    }
                    Some("approval.decided") => {
                        open.remove(&key);
                    }
                    _ => {}
                }
            }
            for key in open {
                if answered
                    .get(&key)
                    .is_some_and(|at| at.elapsed() < Duration::from_millis(1500))
                {
                    continue;
                }
                std::thread::sleep(Duration::from_millis(rng.u64(0..300)));
                let mut c = Command::new(bin());
                c.arg("approve")
                    .arg(&wal)
                    .arg(&key.1)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                if denies(seed, &key.1) {
                    c.args(["--deny", "--reason", &format!("no-{}", key.1)]);
                }
                if c.status().is_ok_and(|s| s.success()) {
                    answers.fetch_add(1, Ordering::SeqCst);
                }
                answered.insert(key, Instant::now());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// The last record of the log as each attempt after the first found it.
fn attempt_ends(sb: &Sandbox, attempts: u64) -> Vec<&'static str> {
    (2..=attempts)
        .map(|a| {
            match std::fs::read_to_string(sb.path(&format!("attempt-{a}.last")))
                .unwrap_or_default()
                .as_str()
            {
                "approval.requested" => "approval.requested",
                "approval.decided" => "approval.decided",
                _ => "other",
            }
        })
        .collect()
}

#[test]
fn approvals_hold_through_random_kills_answered_from_another_process() {
    let seed = torture::seed("torture_approvals");
    let kills = torture::env_u64("TINYAGENT_APPROVAL_KILLS", SHORT_KILLS);
    let mut rng = fastrand::Rng::with_seed(seed);
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("seed.txt"), "x\n").unwrap();
    let mock = MockServer::start_with(vec![], reply);
    let toml = "[approvals]\nmode = \"mutating\"\n";
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicU64::new(0));
    let helper = answer_questions(sb.wal(), seed, stop.clone(), answers.clone());
    let (mut attempts, mut killed, mut started) = (0u64, 0u64, false);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        assert!(
            Instant::now() < deadline,
            "the run never completed (seed {seed})"
        );
        attempts += 1;
        let mut cmd = if started {
            sb.resume_cmd()
        } else {
            clear_log(&sb);
            sb.run_cmd_cfg(&mock.base_url(), "append the markers", toml)
        };
        to_files(&sb, &mut cmd, attempts);
        // The log's last record when this attempt starts (where the kill
        // before it landed).
        let last = complete_records(&sb.wal())
            .last()
            .and_then(|r| r["type"].as_str().map(str::to_string))
            .unwrap_or_default();
        std::fs::write(sb.path(&format!("attempt-{attempts}.last")), last).unwrap();
        let mut child = cmd.spawn().expect("spawn tinyagent");
        let ending = if killed < kills {
            kill_at(&mut child, Duration::from_millis(rng.u64(20..700)))
        } else {
            Ending::Exited(child.wait().expect("wait"))
        };
        let err = attempt_stderr(&sb, attempts);
        assert!(
            !torture::panicked(&err),
            "attempt {attempts} panicked:\n{err}"
        );
        match ending {
            Ending::Killed => {
                killed += 1;
                started |= has_record(&sb);
            }
            Ending::Exited(status) => {
                assert_eq!(
                    status.code(),
                    Some(0),
                    "attempt {attempts} exited {status:?} (seed {seed}):\n{err}"
                );
                break;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    helper.join().expect("the helper");
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    let counts = contract::check_approvals(&recs);
    assert_eq!(recs.last().unwrap().data["status"], "completed");
    // Read-only calls are never asked about.
    for r in &recs {
        if r.kind.starts_with("approval.") {
            assert_eq!(
                r.data["tool"], "bash",
                "seq {}: {} asked about",
                r.seq, r.data["tool"]
            );
        }
    }
    // Side effects: only of allowed calls, each at most once.
    let effects = std::fs::read_to_string(sb.ws().join("effects.txt")).unwrap_or_default();
    let mut seen = BTreeSet::new();
    for line in effects.lines() {
        assert!(
            seen.insert(line.to_string()),
            "{line} ran twice (seed {seed})"
        );
    }
    let mut allowed = BTreeSet::new();
    for r in recs.iter().filter(|r| r.kind == "approval.decided") {
        let id = r.data["call_id"].as_str().unwrap();
        let marker = format!("aq{}x", &id[1..]);
        if r.data["decision"] == "allow" {
            allowed.insert(marker);
        } else {
            assert!(!seen.contains(&marker), "denied {id} ran (seed {seed})");
            let result = recs
                .iter()
                .find(|x| x.kind == "tool.result" && x.data["call_id"] == id)
                .expect("a denied call's result");
            let text = result.data["content"].as_str().unwrap();
            assert!(text.contains(&format!("no-{id}")), "{text}");
        }
    }
    assert!(
        seen.is_subset(&allowed),
        "effects of calls never allowed: {seen:?} vs {allowed:?}"
    );
    // Where the kills landed: a resume's first record follows the last
    // record the killed attempt made durable. The records a resume writes
    // before its `resume` record (answers, carried-on calls) are skipped by
    // looking at what precedes the first record of each attempt: a kill
    // while a question waited leaves `approval.requested` last, a kill
    // right after an answer `approval.decided`.
    let ends: Vec<&str> = attempt_ends(&sb, attempts);
    let waiting = ends.iter().filter(|k| **k == "approval.requested").count();
    let decided = ends.iter().filter(|k| **k == "approval.decided").count();
    eprintln!(
        "torture_approvals: seed {seed}, {attempts} attempts, {killed} kills ({waiting} while a \
         question waited, {decided} right after a decision), {} asked, {} allowed, {} denied, {} \
         mutating calls started, {} answers given",
        counts.requested,
        counts.allowed,
        counts.denied,
        counts.started,
        answers.load(Ordering::SeqCst)
    );
    assert!(counts.requested > 0 && counts.allowed > 0);
    mock.assert_no_violations();
}
