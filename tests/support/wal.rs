//! Helpers of the log tests that run real processes (tests/torture/wal_crash.rs):
//! sample events, logs built with the real writer, and the independent check
//! of the contract's framing. The store's own tests, over a record of their
//! own, are in crates/tinyagent-store/tests.

use crate::support::contract;
use std::path::{Path, PathBuf};
use tinyagent::event::{Event, ToolResult, ToolStarted};
use tinyagent_store::wal::frame::Frame;
use tinyagent_store::wal::reader::{RecordPos, ScanReport, scan};
use tinyagent_store::wal::writer::WalWriter;

/// Event number `i`: alternately a small `tool.started` and a `tool.result`
/// whose content grows with `i` (with quotes, newlines and non-ASCII text).
pub fn ev(i: u64) -> Event {
    if i % 2 == 1 {
        Event::ToolStarted(ToolStarted {
            step: i,
            call_id: format!("c{i}"),
            name: "bash".into(),
            process: None,
        })
    } else {
        Event::ToolResult(ToolResult {
            step: i,
            call_id: format!("c{i}"),
            name: "bash".into(),
            content: format!("out \"{i}\"\n{}é", "x".repeat((i as usize * 7) % 90)),
            is_error: false,
            interrupted: false,
            format_error: false,
            rerun: false,
            hooks: Vec::new(),
            signal: None,
        })
    }
}

/// Writes `n` records `ev(1..=n)` to a new log at `path`.
pub fn write_log(path: &Path, n: u64) -> Vec<RecordPos> {
    let mut w = WalWriter::create(path).unwrap();
    (1..=n).map(|i| w.append(&ev(i)).unwrap().into()).collect()
}

/// Scans a whole log, collecting the frames.
pub fn scan_all(path: &Path) -> (ScanReport, Vec<Frame<Event>>) {
    let mut frames = Vec::new();
    let r = scan::<Event>(path, None, |f, _| frames.push(f.clone())).unwrap();
    (r, frames)
}

pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Files in `dir` whose name contains `part`.
pub fn files_with(dir: &Path, part: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(part))
        .collect();
    v.sort();
    v
}

/// Checks every line of `bytes` against the contract (section 2) with the
/// independent reader ([`contract::read_bytes`]); returns the parsed lines.
pub fn independent_check(bytes: &[u8]) -> Vec<serde_json::Value> {
    contract::read_bytes(bytes)
        .into_iter()
        .map(|r| r.line)
        .collect()
}
