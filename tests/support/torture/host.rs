//! Pieces the leftover-process tortures share: reading a log that may end
//! torn, the calls it left open, and decoy processes of the machine that
//! must never be stopped.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The complete records of a log that may end torn.
pub fn complete_records(wal: &std::path::Path) -> Vec<Value> {
    let bytes = std::fs::read(wal).unwrap_or_default();
    bytes
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .collect()
}

/// Calls with `tool.started` and no `tool.result` in the log as it is now.
pub fn started_unfinished(wal: &std::path::Path) -> BTreeSet<String> {
    let mut open = BTreeSet::new();
    for r in complete_records(wal) {
        let id = r["data"]["call_id"].as_str().unwrap_or("").to_string();
        match r["type"].as_str() {
            Some("tool.started") => {
                open.insert(id);
            }
            Some("tool.result") => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    open
}

/// What the side effects of interrupted calls say about each resume:
/// `effects` is the workspace's `effects.txt` (`<call id> <ns>` a line),
/// `resumes` when each resume started and the calls the kill before it
/// left open, `asked` when the model was asked. Returns the effects of an
/// open call after the first request that followed its resume (a leftover
/// that was not stopped: late) and those between the resume's start and
/// that request (startup).
pub fn effects_after_resumes(
    effects: &str,
    resumes: &[(u128, BTreeSet<String>)],
    asked: &[u128],
) -> (u64, u64) {
    let mut at: BTreeMap<String, Vec<u128>> = BTreeMap::new();
    for line in effects.lines() {
        let mut parts = line.split_whitespace();
        if let (Some(id), Some(ts)) = (parts.next(), parts.next().and_then(|s| s.parse().ok())) {
            at.entry(id.to_string()).or_default().push(ts);
        }
    }
    let (mut late, mut startup) = (0, 0);
    for (resumed_at, open) in resumes {
        // The first request of this resume (or of a later one, when this
        // one was killed before it asked).
        let told = asked
            .iter()
            .copied()
            .filter(|a| a > resumed_at)
            .min()
            .unwrap_or(u128::MAX);
        for id in open {
            for &ts in at.get(id).into_iter().flatten() {
                if ts > told {
                    late += 1;
                    eprintln!("late side effect of {id}: {ts} > first request at {told}");
                } else if ts > *resumed_at {
                    startup += 1;
                }
            }
        }
    }
    (late, startup)
}

/// A process of the machine that must never be stopped: its pid and the
/// start time that tells it from a later process with the same pid.
pub struct Decoy {
    child: std::process::Child,
    start_time: u64,
}

/// A process's start time (field 22 of `/proc/<pid>/stat`).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Three decoys, each in a process group of its own.
pub fn decoys() -> Vec<Decoy> {
    (0..3)
        .map(|_| {
            let mut cmd = Command::new("sleep");
            cmd.arg("600");
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let child = cmd.spawn().expect("decoy");
            let start_time = start_time(child.id()).expect("decoy start time");
            Decoy { child, start_time }
        })
        .collect()
}

/// Fails unless every decoy still runs as itself; then ends them.
pub fn check_and_end_decoys(decoys: &mut [Decoy]) {
    for d in decoys {
        assert!(
            d.child.try_wait().expect("decoy").is_none()
                && start_time(d.child.id()) == Some(d.start_time),
            "a decoy process of the machine was stopped"
        );
        let _ = d.child.kill();
        let _ = d.child.wait();
    }
}

/// The largest `<tag><N>x` marker anywhere in the request's messages (0
/// when none): how far a scripted task has got, whatever was resumed.
pub fn last_marker(req: &crate::support::mock::RecordedRequest, tag: &str) -> u64 {
    let text = serde_json::to_string(req.messages()).unwrap_or_default();
    text.match_indices(tag)
        .filter_map(|(at, _)| {
            let rest = &text[at + tag.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            rest[digits.len()..]
                .starts_with('x')
                .then(|| digits.parse::<u64>().ok())
                .flatten()
        })
        .max()
        .unwrap_or(0)
}
