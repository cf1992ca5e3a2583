//! Helpers shared by the wal_* and store_* tests: sample events, logs built
//! with the real writer, and the independent check of the contract's framing.

use crate::support::contract;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tinyagent::event::{Event, ToolResult, ToolStarted};
use tinyagent::store::{StoreError, StoreOptions};
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

/// The call id an event carries.
pub fn call_id(e: &Event) -> String {
    match e {
        Event::ToolStarted(t) => t.call_id.clone(),
        Event::ToolResult(t) => t.call_id.clone(),
        other => format!("<{}>", other.kind()),
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

pub fn no_snapshots() -> StoreOptions {
    StoreOptions {
        snapshot_every: 0,
        ..StoreOptions::default()
    }
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

/// `open`, tried again while the log is locked only by a child of this test
/// binary: another test's thread may have forked a child (a command, a
/// pseudo-terminal) that has not reached its `exec` yet. The fork copied
/// every descriptor of the process, this test's log among them, and a
/// `flock` belongs to the open file, so the copy holds the lock until the
/// exec closes it (every descriptor is close-on-exec). Gives up after 2 s
/// with what the last try gave.
pub fn reopen<T>(mut open: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match open() {
            Err(StoreError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}
