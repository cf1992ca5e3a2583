//! The reader on a hostile tail vs on a normal log of the same size (issue
//! 14): `wal::reader::scan` of
//!
//! - `normal`: a clean log of 3 KB records, about `HOSTILE_MB` MB;
//! - `torn`: three records, then one line of `{"seq":` repeated up to
//!   `HOSTILE_MB` MB and ending in a crc suffix that matches no candidate
//!   (every `{"seq":` is a candidate record; a torn tail);
//! - `lost-newline`: the same, with the fourth record glued to its end (a
//!   damaged newline; corruption, found at the very end);
//! - `many-lines`: the same bytes cut into 64 KB lines, each ending in a
//!   crc suffix (a torn tail);
//! - `braces`: one line of `{"seq":` then `{` (every byte could start a
//!   record, and each has to be looked at) and
//!   `seq-every-8`: `{"seq":` and one more byte, repeated (a candidate in
//!   every eight bytes, at the offset farthest from where the backward
//!   pass lands), each ending in a crc suffix (torn tails).
//!
//! Samples interleave the cases (normal, torn, lost-newline, many-lines,
//! normal, ...) after one unrecorded round, so drift on a shared machine
//! hits them alike; it prints the median and the min per case and each
//! median's ratio to `normal`'s. The files live under cargo's target tmp
//! dir and are read from the page cache.
//!
//! Run: `cargo bench -p tinyagent-store --bench hostile_tail`
//! (`HOSTILE_MB`, default 6; `SAMPLES`, default 21; `CASES`, a
//! comma-separated subset of the names above, `normal` always included).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tinyagent_store::Record;
use tinyagent_store::wal::frame::encode;
use tinyagent_store::wal::reader::{ScanReport, scan};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
enum Op {
    #[serde(rename = "note")]
    Note { text: String },
}

impl Record for Op {
    fn kind(&self) -> &'static str {
        "note"
    }
}

/// A clean log of `n` records of about `text` bytes each.
fn clean_log(n: u64, text: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = 0;
    let filler: String = "cargo build: compiling crate ok\n"
        .chars()
        .cycle()
        .take(text)
        .collect();
    for seq in 1..=n {
        let note = Op::Note {
            text: format!("{seq} {filler}"),
        };
        prev = encode(seq, prev, "2026-01-01T00:00:00Z", &note, &mut out).unwrap();
    }
    out
}

const START: &[u8] = b"{\"seq\":";
const FAKE_SUFFIX: &[u8] = b",\"crc\":\"00000000\"}";

fn hostile_run(len: usize) -> Vec<u8> {
    START
        .iter()
        .copied()
        .cycle()
        .take(len / START.len() * START.len())
        .collect()
}

fn cases(mb: f64) -> Vec<(&'static str, Vec<u8>)> {
    let len = (mb * 1e6) as usize;
    let normal = clean_log((len / 3_100) as u64, 3_000);
    let four = clean_log(4, 100);
    let third_end = {
        let three = clean_log(3, 100);
        assert!(four.starts_with(&three));
        three.len()
    };
    let (head, fourth) = four.split_at(third_end);

    let mut torn = head.to_vec();
    torn.extend_from_slice(&hostile_run(len));
    torn.extend_from_slice(FAKE_SUFFIX);
    torn.push(b'\n');

    let mut lost = head.to_vec();
    lost.extend_from_slice(&hostile_run(len));
    lost.extend_from_slice(fourth);

    let mut many = head.to_vec();
    while many.len() < len {
        many.extend_from_slice(&hostile_run(64 * 1024));
        many.extend_from_slice(FAKE_SUFFIX);
        many.push(b'\n');
    }
    let line = |first: &[u8], unit: &[u8]| {
        let mut v = head.to_vec();
        v.extend_from_slice(first);
        v.extend(
            unit.iter()
                .copied()
                .cycle()
                .take(len / unit.len() * unit.len()),
        );
        v.extend_from_slice(FAKE_SUFFIX);
        v.push(b'\n');
        v
    };
    vec![
        ("normal", normal),
        ("torn", torn),
        ("lost-newline", lost),
        ("many-lines", many),
        ("braces", line(START, b"{")),
        ("seq-every-8", line(b"", b"{\"seq\":x")),
    ]
}

fn run(path: &Path) -> (Duration, ScanReport) {
    let t = Instant::now();
    let report = scan::<Op>(path, None, |_, _| {}).unwrap();
    (t.elapsed(), report)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let env = |k: &str, d: f64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let mb = env("HOSTILE_MB", 6.0);
    let samples = env("SAMPLES", 21.0) as usize;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let only = std::env::var("CASES").ok();
    let files: Vec<(&str, PathBuf, u64)> = cases(mb)
        .into_iter()
        .filter(|(name, _)| {
            *name == "normal"
                || only
                    .as_deref()
                    .is_none_or(|o| o.split(',').any(|c| c == *name))
        })
        .map(|(name, bytes)| {
            let p = dir.path().join(format!("{name}.wal"));
            std::fs::write(&p, &bytes).unwrap();
            (name, p, bytes.len() as u64)
        })
        .collect();
    let mut times = vec![Vec::new(); files.len()];
    for round in 0..=samples {
        for (i, (name, path, _)) in files.iter().enumerate() {
            let (t, report) = run(path);
            if round == 0 {
                let verdict = match (&report.torn_tail, &report.corruption) {
                    (None, None) => "clean".to_string(),
                    (Some(t), _) => format!("torn tail at {} ({} bytes)", t.offset, t.bytes),
                    (_, Some(c)) => format!("corruption at {}: {}", c.offset, c.reason),
                };
                eprintln!("{name}: {} records, {verdict}", report.records);
            } else {
                times[i].push(t);
            }
        }
    }
    let normal = median(&mut times[0].clone());
    println!(
        "{:<14} {:>10} {:>12} {:>12} {:>9}",
        "case", "bytes", "median", "min", "/normal"
    );
    for ((name, _, len), t) in files.iter().zip(&mut times) {
        let m = median(t);
        println!(
            "{name:<14} {len:>10} {:>9.2} ms {:>9.2} ms {:>8.2}x",
            m.as_secs_f64() * 1e3,
            t[0].as_secs_f64() * 1e3,
            m.as_secs_f64() / normal.as_secs_f64()
        );
    }
}
