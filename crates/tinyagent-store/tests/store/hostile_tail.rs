//! Hostile tails of a few MB (issue 14): lines of `{"seq":` repeated,
//! where every 7 bytes could start an embedded record. Each is classified
//! as `docs/format.md` says (torn tail or corruption, with the same offsets
//! and reasons the old candidate-by-candidate search gave), and `Store::open`
//! cuts the torn ones and leaves the corrupt ones untouched. The search is
//! linear now, so these run in well under a second even in a debug build;
//! no time is measured here (`benches/hostile_tail.rs` does that).

use super::kit::{Op, Sum};
use std::path::Path;
use tinyagent_store::wal::frame::encode;
use tinyagent_store::wal::reader::{ScanReport, TornTail, scan};
use tinyagent_store::{Store, StoreError, StoreOptions};

const START: &[u8] = b"{\"seq\":";
const MB: usize = 1 << 20;

/// Records 1..=n, and where each line starts.
fn log(n: u64) -> (Vec<u8>, Vec<usize>) {
    let (mut out, mut starts, mut prev) = (Vec::new(), Vec::new(), 0);
    for seq in 1..=n {
        starts.push(out.len());
        prev = encode(
            seq,
            prev,
            "2026-01-01T00:00:00Z",
            &Op::Add { n: seq },
            &mut out,
        )
        .unwrap();
    }
    (out, starts)
}

/// `{"seq":` repeated over about `len` bytes.
fn hostile(len: usize) -> Vec<u8> {
    START.iter().copied().cycle().take(len / 7 * 7).collect()
}

fn suffix(crc: u32) -> Vec<u8> {
    format!(",\"crc\":\"{crc:08x}\"}}").into_bytes()
}

fn scan_file(p: &Path) -> ScanReport {
    scan::<Op>(p, None, |_, _| {}).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn assert_torn(dir: &Path, name: &str, bytes: &[u8], at: usize) {
    let p = write(dir, name, bytes);
    let r = scan_file(&p);
    assert_eq!(r.corruption, None, "{name}");
    assert_eq!(r.records, 3, "{name}");
    let tail = TornTail {
        offset: at as u64,
        bytes: (bytes.len() - at) as u64,
    };
    assert_eq!(r.torn_tail, Some(tail), "{name}");
    // Opening for writing cuts it and keeps its bytes beside the log.
    let (s, report) = Store::<Op, Sum>::open(&p, StoreOptions::default()).unwrap();
    let (cut, kept) = report.torn_tail.expect("a torn tail cut");
    assert_eq!(cut, tail, "{name}");
    assert_eq!(std::fs::read(&kept).unwrap(), &bytes[at..], "{name}");
    assert_eq!(std::fs::read(&p).unwrap(), &bytes[..at], "{name}");
    assert_eq!((s.state().total, s.next_seq()), (6, 4), "{name}");
    s.close().unwrap();
}

fn assert_corrupt(dir: &Path, name: &str, bytes: &[u8], at: usize, record_at: usize) {
    let p = write(dir, name, bytes);
    let r = scan_file(&p);
    assert_eq!((r.records, r.torn_tail), (3, None), "{name}");
    let c = r.corruption.expect("corruption");
    assert_eq!((c.seq, c.offset), (4, at as u64), "{name}");
    assert!(
        c.reason
            .ends_with(&format!("; a valid record follows at byte {record_at}")),
        "{name}: {}",
        c.reason
    );
    match Store::<Op, Sum>::open(&p, StoreOptions::default()) {
        Err(StoreError::Corrupt { seq, offset, .. }) => {
            assert_eq!((seq, offset), (4, at as u64), "{name}");
        }
        Err(e) => panic!("{name}: expected corruption, got {e}"),
        Ok(_) => panic!("{name}: a corrupt log was opened"),
    }
    assert_eq!(std::fs::read(&p).unwrap(), bytes, "{name}: left unchanged");
}

#[test]
fn hostile_tails_of_a_few_mb_are_torn_tails_when_nothing_valid_follows() {
    let dir = tempfile::tempdir().unwrap();
    let (good4, starts) = log(4);
    let head = &good4[..starts[3]];
    let at = head.len();

    // One 3 MB line ending in a crc suffix no candidate matches, with and
    // without its newline.
    let mut one = head.to_vec();
    one.extend_from_slice(&hostile(3 * MB));
    one.extend_from_slice(&suffix(0));
    assert_torn(dir.path(), "no-newline.wal", &one, at);
    one.push(b'\n');
    assert_torn(dir.path(), "newline.wal", &one, at);

    // The same bytes cut into lines of 64 KiB, each with a crc suffix.
    let mut many = head.to_vec();
    while many.len() < 3 * MB {
        many.extend_from_slice(&hostile(64 << 10));
        many.extend_from_slice(&suffix(0x1a2b_3c4d));
        many.push(b'\n');
    }
    assert_torn(dir.path(), "many-lines.wal", &many, at);

    // Longer than a line may be (16 MiB), so only its end is searched.
    let mut long = head.to_vec();
    long.extend_from_slice(&hostile(17 * MB));
    long.extend_from_slice(&suffix(0));
    long.push(b'\n');
    assert_torn(dir.path(), "overlong.wal", &long, at);
}

#[test]
fn a_record_hidden_in_or_after_a_hostile_tail_is_corruption_at_the_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let (good4, starts) = log(4);
    let (head, fourth) = good4.split_at(starts[3]);
    let at = head.len();

    // Record 4 glued to the end of 3 MB of candidates (a lost newline).
    let mut glued = head.to_vec();
    glued.extend_from_slice(&hostile(3 * MB));
    let record_at = glued.len();
    glued.extend_from_slice(fourth);
    assert_corrupt(dir.path(), "glued.wal", &glued, at, record_at);

    // Record 4 on a line of its own after the hostile line.
    let mut after = head.to_vec();
    after.extend_from_slice(&hostile(3 * MB));
    after.extend_from_slice(&suffix(0));
    after.push(b'\n');
    let record_at = after.len();
    after.extend_from_slice(fourth);
    assert_corrupt(dir.path(), "after.wal", &after, at, record_at);

    // The crc suffix is right for the bytes from the candidate 1 MB in (a
    // crc-valid record, if not a decodable one): found there, and none of
    // the candidates before it passes.
    let mut inside = head.to_vec();
    inside.extend_from_slice(&hostile(3 * MB));
    let record_at = at + MB / 7 * 7;
    let crc = crc32fast::hash(&inside[record_at..]);
    inside.extend_from_slice(&suffix(crc));
    inside.push(b'\n');
    assert_corrupt(dir.path(), "inside.wal", &inside, at, record_at);
}
