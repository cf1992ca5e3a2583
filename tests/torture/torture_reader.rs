//! The log reader under hostile input (proptest): logs the real binary wrote,
//! mutated (bit flips, deleted / inserted / duplicated bytes and lines,
//! truncation, lines spliced in from another log, garbage and zeros
//! appended), and plain random bytes. The reader never panics, never accepts
//! a line whose crc is wrong, and classifies torn tail vs corruption exactly
//! as docs/format.md says (the independent oracle in
//! `support/contract.rs`); `Store::open` cuts
//! exactly the torn tail and leaves a corrupt file byte-for-byte unchanged.
//!
//! Cases: `PROPTEST_CASES` (default 256; the long mode uses e.g. 100000).

use crate::support::contract::{Verdict, crc_ok, oracle};
use crate::support::e2e;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tinyagent::event::Event;
use tinyagent::store::{Store, StoreOptions};
use tinyagent_store::wal::reader::scan;

// ---------- base logs written by the real binary

struct Bases {
    a: Vec<u8>,
    b: Vec<u8>,
}

fn write_base(dir: &Path, name: &str, turns: u64) -> Vec<u8> {
    let script = dir.join(format!("{name}.json"));
    let list: Vec<Value> = (1..=turns)
        .map(|n| {
            serde_json::json!({"content": format!("turn {n} ✓"), "tool_calls": [{"name": "bash",
            "arguments": {"command": format!("echo {name}{n}")}}]})
        })
        .collect();
    std::fs::write(&script, serde_json::json!({"turns": list}).to_string()).unwrap();
    let wal = dir.join(format!("{name}.wal"));
    let out = std::process::Command::new(e2e::bin())
        .args(["run", "--provider", "script", "--script"])
        .arg(&script)
        .arg("--wal")
        .arg(&wal)
        .arg("--cwd")
        .arg(dir)
        .arg("reader torture")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&wal).unwrap()
}

fn bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let a = write_base(dir.path(), "a", 6);
        let b = write_base(dir.path(), "b", 3);
        let (ra, rb) = (oracle(&a), oracle(&b));
        assert_eq!(ra.1, Verdict::Clean, "base log a is clean");
        assert_eq!(rb.1, Verdict::Clean, "base log b is clean");
        Bases { a, b }
    })
}

// ---------- mutations

#[derive(Debug, Clone)]
enum Op {
    FlipBit(Index, u8),
    DeleteBytes(Index, usize),
    InsertBytes(Index, Vec<u8>),
    DuplicateLine(Index),
    DeleteLine(Index),
    SwapLines(Index, Index),
    Truncate(Index),
    SpliceLine(Index, Index),
    AppendGarbage(Vec<u8>),
    AppendZeros(usize),
    AppendTornRecord(Index),
}

fn op() -> impl Strategy<Value = Op> {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..12),
        Just(b"\n".to_vec()),
        Just(b"{\"seq\":".to_vec()),
        Just(vec![0u8; 8]),
    ];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Op::FlipBit(i, b)),
        (any::<Index>(), 1usize..40).prop_map(|(i, n)| Op::DeleteBytes(i, n)),
        (any::<Index>(), bytes.clone()).prop_map(|(i, b)| Op::InsertBytes(i, b)),
        any::<Index>().prop_map(Op::DuplicateLine),
        any::<Index>().prop_map(Op::DeleteLine),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Op::SwapLines(a, b)),
        any::<Index>().prop_map(Op::Truncate),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Op::SpliceLine(a, b)),
        bytes.prop_map(Op::AppendGarbage),
        (1usize..300).prop_map(Op::AppendZeros),
        any::<Index>().prop_map(Op::AppendTornRecord),
    ]
}

fn lines_of(b: &[u8]) -> Vec<Vec<u8>> {
    b.split_inclusive(|c| *c == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn apply(mut f: Vec<u8>, op: &Op, other: &[u8]) -> Vec<u8> {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len) };
    match op {
        Op::FlipBit(i, bit) if !f.is_empty() => {
            let p = at(i, f.len());
            f[p] ^= 1 << bit;
        }
        Op::DeleteBytes(i, n) if !f.is_empty() => {
            let p = at(i, f.len());
            let end = (p + n).min(f.len());
            f.drain(p..end);
        }
        Op::InsertBytes(i, b) => {
            let p = at(i, f.len() + 1);
            f.splice(p..p, b.iter().copied());
        }
        Op::DuplicateLine(i) | Op::DeleteLine(i) => {
            let mut l = lines_of(&f);
            if !l.is_empty() {
                let k = at(i, l.len());
                if matches!(op, Op::DuplicateLine(_)) {
                    l.insert(k, l[k].clone());
                } else {
                    l.remove(k);
                }
            }
            f = l.concat();
        }
        Op::SwapLines(a, b) => {
            let mut l = lines_of(&f);
            if !l.is_empty() {
                let (x, y) = (at(a, l.len()), at(b, l.len()));
                l.swap(x, y);
            }
            f = l.concat();
        }
        Op::Truncate(i) => f.truncate(at(i, f.len() + 1)),
        Op::SpliceLine(from, to) => {
            let src = lines_of(other);
            let mut l = lines_of(&f);
            let line = src[at(from, src.len())].clone();
            let k = at(to, l.len() + 1);
            l.insert(k, line);
            f = l.concat();
        }
        Op::AppendGarbage(b) => f.extend_from_slice(b),
        Op::AppendZeros(n) => f.extend(std::iter::repeat_n(0u8, *n)),
        Op::AppendTornRecord(i) => {
            // A prefix of a real record, as an interrupted append leaves.
            let src = lines_of(other);
            let line = &src[at(i, src.len())];
            f.extend_from_slice(&line[..at(i, line.len())]);
        }
        _ => {}
    }
    f
}

// ---------- the property

fn check(bytes: &[u8], dir: &Path, open_too: bool) -> Result<(), TestCaseError> {
    let path: PathBuf = dir.join("m.wal");
    std::fs::write(&path, bytes).unwrap();
    let (good, verdict) = oracle(bytes);
    let mut visited = Vec::new();
    let report = scan::<Event>(&path, None, |_, pos| visited.push((pos.offset, pos.len)))
        .map_err(|e| TestCaseError::fail(format!("scan failed: {e}")))?;
    // Never accept a line whose crc is wrong.
    for (off, len) in &visited {
        let line = &bytes[*off as usize..(*off + *len) as usize - 1];
        prop_assert!(crc_ok(line).is_some(), "accepted a bad line at {off}");
    }
    prop_assert_eq!(&visited, &good, "records read");
    let got = match (&report.torn_tail, &report.corruption) {
        (None, None) => Verdict::Clean,
        (Some(t), None) => {
            prop_assert_eq!(t.bytes, bytes.len() as u64 - t.offset, "torn bytes");
            Verdict::Torn { offset: t.offset }
        }
        (None, Some(c)) => Verdict::Corrupt {
            offset: c.offset,
            seq: c.seq,
        },
        (Some(_), Some(_)) => return Err(TestCaseError::fail("both torn and corrupt")),
    };
    prop_assert_eq!(&got, &verdict, "verdict");
    if !open_too {
        return Ok(());
    }
    // Opening for writing: cut exactly the torn tail, never touch corruption.
    let opened = Store::open(
        &path,
        StoreOptions {
            snapshot_every: 0,
            ..StoreOptions::default()
        },
    );
    let after = std::fs::read(&path).unwrap();
    match (&verdict, opened) {
        (Verdict::Corrupt { .. }, Ok(_)) => {
            return Err(TestCaseError::fail("opened a corrupt log"));
        }
        (Verdict::Corrupt { .. }, Err(_)) => {
            prop_assert_eq!(&after[..], bytes, "a corrupt log was changed")
        }
        (_, Err(_)) => {
            prop_assert!(good.is_empty(), "refused a log with good records");
            prop_assert_eq!(&after[..], bytes, "a refused log was changed");
        }
        (Verdict::Torn { offset }, Ok((store, rep))) => {
            prop_assert_eq!(
                &after[..],
                &bytes[..*offset as usize],
                "cut at the torn tail"
            );
            let (torn, saved) = rep.torn_tail.expect("torn tail reported");
            prop_assert_eq!(torn.offset, *offset);
            prop_assert_eq!(std::fs::read(&saved).unwrap(), &bytes[*offset as usize..]);
            drop(store);
        }
        (Verdict::Clean, Ok((store, _))) => {
            prop_assert_eq!(&after[..], bytes, "a clean log was changed");
            drop(store);
        }
    }
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_logs_are_classified_as_the_format_says(
        ops in prop::collection::vec(op(), 1..5),
        swap in any::<bool>(),
        open_too in prop::bool::weighted(0.25),
    ) {
        let b = bases();
        let (base, other) = if swap { (&b.b, &b.a) } else { (&b.a, &b.b) };
        let mut f = base.clone();
        for o in &ops {
            f = apply(f, o, other);
        }
        let dir = tempfile::tempdir().unwrap();
        check(&f, dir.path(), open_too)?;
    }

    #[test]
    fn random_bytes_never_panic_the_reader(
        bytes in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'{')], 0..600),
        prefix in any::<bool>(),
    ) {
        let mut f = if prefix { bases().a[..200].to_vec() } else { Vec::new() };
        f.extend_from_slice(&bytes);
        let dir = tempfile::tempdir().unwrap();
        check(&f, dir.path(), false)?;
    }
}

/// The oracle itself: each rule of the format's table on a hand-made case.
#[test]
fn oracle_follows_the_table() {
    let a = &bases().a;
    let l = lines_of(a);
    let off = |k: usize| l[..k].iter().map(Vec::len).sum::<usize>() as u64;
    // Incomplete last line: torn.
    let mut f = a.clone();
    f.pop();
    assert_eq!(
        oracle(&f).1,
        Verdict::Torn {
            offset: off(l.len() - 1)
        }
    );
    // Bad crc in the middle: corruption.
    let mut f = a.clone();
    f[off(2) as usize + 3] ^= 1;
    assert_eq!(
        oracle(&f).1,
        Verdict::Corrupt {
            offset: off(2),
            seq: 3
        }
    );
    // Duplicated last line: corruption even at the end.
    let mut f = a.clone();
    f.extend_from_slice(l.last().unwrap());
    assert_eq!(
        oracle(&f).1,
        Verdict::Corrupt {
            offset: a.len() as u64,
            seq: l.len() as u64 + 1
        }
    );
    // A bad line, then a later line whose newline was damaged so that a
    // crc-valid record sits inside it: corruption (docs/format.md: "inside
    // the bad piece or a later one").
    let mut f = l[..3].concat();
    f.extend_from_slice(b"garbage\n");
    f.extend_from_slice(b"more garbage");
    f.extend_from_slice(&l[3]);
    assert_eq!(
        oracle(&f).1,
        Verdict::Corrupt {
            offset: off(3),
            seq: 4
        }
    );
    let dir = tempfile::tempdir().unwrap();
    check(&f, dir.path(), true).unwrap();
    // Zeros after the last record: torn.
    let mut f = a.clone();
    f.extend_from_slice(&[0; 64]);
    assert_eq!(
        oracle(&f).1,
        Verdict::Torn {
            offset: a.len() as u64
        }
    );
}
