//! What the writer, reader, open and snapshot modules share: a record shaped
//! like a tool call's start and result (text that grows, with quotes,
//! newlines and non-ASCII), a fold that counts records, logs written with
//! the real writer, and a check of the line framing written apart from the
//! crate's reader.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tinyagent_store::wal::frame::Frame;
use tinyagent_store::wal::reader::{RecordPos, ScanReport, scan};
use tinyagent_store::wal::writer::WalWriter;
use tinyagent_store::{Fold, Record, StoreError, StoreOptions};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Note {
    #[serde(rename = "call.started")]
    Started { step: u64, call_id: String },
    #[serde(rename = "call.result")]
    Result {
        step: u64,
        call_id: String,
        content: String,
    },
}

impl Record for Note {
    fn kind(&self) -> &'static str {
        match self {
            Note::Started { .. } => "call.started",
            Note::Result { .. } => "call.result",
        }
    }
}

/// The records folded so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    pub records: u64,
}

impl Fold<Note> for Count {
    fn apply(&mut self, _: &Note) {
        self.records += 1;
    }
}

pub type Store = tinyagent_store::Store<Note, Count>;

/// Record number `i`: alternately a small `call.started` and a
/// `call.result` whose content grows with `i`.
pub fn ev(i: u64) -> Note {
    if i % 2 == 1 {
        Note::Started {
            step: i,
            call_id: format!("c{i}"),
        }
    } else {
        Note::Result {
            step: i,
            call_id: format!("c{i}"),
            content: format!("out \"{i}\"\n{}é", "x".repeat((i as usize * 7) % 90)),
        }
    }
}

/// The call id a record carries.
pub fn call_id(e: &Note) -> String {
    match e {
        Note::Started { call_id, .. } | Note::Result { call_id, .. } => call_id.clone(),
    }
}

/// Writes `n` records `ev(1..=n)` to a new log at `path`.
pub fn write_log(path: &Path, n: u64) -> Vec<RecordPos> {
    let mut w = WalWriter::create(path).unwrap();
    (1..=n).map(|i| w.append(&ev(i)).unwrap().into()).collect()
}

/// Scans a whole log, collecting the frames.
pub fn scan_all(path: &Path) -> (ScanReport, Vec<Frame<Note>>) {
    let mut frames = Vec::new();
    let r = scan::<Note>(path, None, |f, _| frames.push(f.clone())).unwrap();
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

/// `open`, tried again for up to 2 s while the log is locked: another
/// test's thread may have forked a child that holds a copy of this test's
/// descriptors until its `exec` closes them.
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

/// Bitwise CRC-32 (IEEE, as zlib computes it), one bit at a time: shares
/// nothing with the crate's crc.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Checks every line of a whole log as the framing is written down
/// (`wal::frame`), apart from the crate's reader: complete JSON ending in
/// `,"crc":"hhhhhhhh"}` over `line[..len-18]`, seq from 1, prev the
/// previous crc, `ts` RFC 3339 UTC, a `type` and an object `data`. Returns
/// the parsed lines; panics naming the line on any violation.
pub fn framing_check(bytes: &[u8]) -> Vec<serde_json::Value> {
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "the log does not end with a newline"
    );
    let mut out = Vec::new();
    let mut prev = "00000000".to_string();
    for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        let n = i + 1;
        let line = &line[..line.len() - 1];
        assert!(line.len() > 20, "line {n}: too short");
        let (body, tail) = line.split_at(line.len() - 18);
        assert!(
            tail.starts_with(b",\"crc\":\"") && tail.ends_with(b"\"}"),
            "line {n}: no crc suffix"
        );
        let crc = std::str::from_utf8(&tail[8..16]).unwrap();
        assert_eq!(crc, format!("{:08x}", crc32(body)), "line {n}: crc");
        let v: serde_json::Value =
            serde_json::from_slice(line).unwrap_or_else(|e| panic!("line {n}: not JSON: {e}"));
        assert_eq!(v["seq"].as_u64(), Some(n as u64), "line {n}: seq");
        assert_eq!(v["prev"].as_str(), Some(prev.as_str()), "line {n}: prev");
        let ts = v["ts"].as_str().unwrap_or_default();
        assert!(
            ts.ends_with('Z') && humantime::parse_rfc3339(ts).is_ok(),
            "line {n}: ts {ts:?}"
        );
        assert!(v["type"].is_string(), "line {n}: type");
        assert!(v["data"].is_object(), "line {n}: data");
        prev = crc.to_string();
        out.push(v);
    }
    out
}

/// [`tinyagent_store::load`] of a log of notes.
pub fn load(path: &Path) -> Result<tinyagent_store::Loaded<Count>, StoreError> {
    tinyagent_store::load::<Note, Count>(path)
}

/// [`tinyagent_store::load_with`] of a log of notes.
pub fn load_with(
    path: &Path,
    use_snapshot: bool,
) -> Result<tinyagent_store::Loaded<Count>, StoreError> {
    tinyagent_store::load_with::<Note, Count>(path, use_snapshot)
}
