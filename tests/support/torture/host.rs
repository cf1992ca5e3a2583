//! Pieces the leftover-process tortures share: reading a log that may end
//! torn, the calls it left open, and decoy processes of the machine that
//! must never be stopped.

use serde_json::Value;
use std::collections::BTreeSet;
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
