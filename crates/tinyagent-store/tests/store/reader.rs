//! The reader's rules on real files: torn tails at every byte, bit flips and
//! byte deletions, seq gaps, duplicated and spliced lines, random truncation.

use crate::notes::*;
use proptest::prelude::*;
use std::path::Path;
use tinyagent_store::StoreError;
use tinyagent_store::wal::reader::{Corruption, TornTail, scan};

fn scan_bytes(dir: &Path, name: &str, bytes: &[u8]) -> tinyagent_store::wal::reader::ScanReport {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    scan_all(&p).0
}

#[test]
fn a_clean_log_passes_the_framing_check() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.wal");
    let pos = write_log(&p, 9);
    let bytes = std::fs::read(&p).unwrap();
    let lines = framing_check(&bytes);
    assert_eq!(lines.len(), 9);
    let (r, frames) = scan_all(&p);
    assert!(r.is_clean());
    assert_eq!(
        (r.records, r.valid_bytes, r.file_len),
        (9, bytes.len() as u64, bytes.len() as u64)
    );
    assert_eq!(r.last, Some(pos[8]));
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.event, ev(i as u64 + 1));
        assert_eq!(lines[i]["data"]["call_id"], call_id(&f.event));
    }
}

#[test]
fn a_torn_tail_at_every_byte_of_the_last_record_drops_exactly_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let orig = dir.path().join("orig.wal");
    let pos = write_log(&orig, 4);
    let bytes = std::fs::read(&orig).unwrap();
    let last = pos[3];
    for cut in last.offset..last.end() {
        let p = dir.path().join(format!("cut{cut}.wal"));
        std::fs::write(&p, &bytes[..cut as usize]).unwrap();
        let (r, frames) = scan_all(&p);
        assert_eq!(r.records, 3, "cut at {cut}");
        assert_eq!(r.corruption, None, "cut at {cut}");
        let torn = (cut > last.offset).then_some(TornTail {
            offset: last.offset,
            bytes: cut - last.offset,
        });
        assert_eq!(r.torn_tail, torn, "cut at {cut}");
        assert_eq!(frames.last().unwrap().event, ev(3));

        let (mut store, report) = reopen(|| Store::open(&p, no_snapshots())).unwrap();
        match (torn, &report.torn_tail) {
            (None, None) => {}
            (Some(t), Some((got, saved))) => {
                assert_eq!(*got, t);
                assert_eq!(
                    std::fs::read(saved).unwrap(),
                    &bytes[last.offset as usize..cut as usize]
                );
                assert_eq!(mode(saved), 0o600);
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
        assert_eq!(std::fs::metadata(&p).unwrap().len(), last.offset);
        assert_eq!(store.state().records, 3);
        assert_eq!(store.append(ev(4)).unwrap(), 4);
        store.close().unwrap();
        let (r, frames) = scan_all(&p);
        assert!(r.is_clean() && r.records == 4);
        assert_eq!(frames[3].event, ev(4));
        framing_check(&std::fs::read(&p).unwrap());
    }
}

/// Checks that damaged `bytes` read as corruption of the record whose line
/// starts at `offset`, that open refuses it and leaves the file unchanged.
fn assert_corrupt_at(dir: &Path, bytes: &[u8], seq: u64, offset: u64, what: &str) {
    let p = dir.join("damaged.wal");
    let _ = std::fs::remove_file(&p);
    std::fs::write(&p, bytes).unwrap();
    let r = scan_all(&p).0;
    let c = r
        .corruption
        .clone()
        .unwrap_or_else(|| panic!("{what}: not corruption: {r:?}"));
    assert_eq!((c.seq, c.offset), (seq, offset), "{what}: {c:?}");
    assert_eq!(r.torn_tail, None, "{what}");
    assert_eq!(r.records, seq - 1, "{what}");
    match reopen(|| Store::open(&p, no_snapshots())) {
        Err(e @ StoreError::Corrupt { .. }) => {
            assert!(e.is_refusal(), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("seq {seq}")) && msg.contains(&format!("offset {offset}")),
                "{msg}"
            );
        }
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("{what}: opened"),
    }
    assert_eq!(std::fs::read(&p).unwrap(), bytes, "{what}: file changed");
    assert!(files_with(dir, "damaged.wal.torn").is_empty(), "{what}");
}

#[test]
fn every_bit_flip_in_an_earlier_record_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let orig = dir.path().join("orig.wal");
    let pos = write_log(&orig, 5);
    let bytes = std::fs::read(&orig).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    for rec in &pos[..4] {
        for at in rec.offset..rec.end() {
            let mut bad = bytes.clone();
            bad[at as usize] ^= 1 << rng.u8(0..8);
            assert_corrupt_at(
                dir.path(),
                &bad,
                rec.seq,
                rec.offset,
                &format!("flip at {at}"),
            );
        }
    }
}

#[test]
fn every_byte_deletion_in_an_earlier_record_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let orig = dir.path().join("orig.wal");
    let pos = write_log(&orig, 5);
    let bytes = std::fs::read(&orig).unwrap();
    for rec in &pos[..4] {
        for at in rec.offset..rec.end() {
            let mut bad = bytes.clone();
            bad.remove(at as usize);
            assert_corrupt_at(
                dir.path(),
                &bad,
                rec.seq,
                rec.offset,
                &format!("deletion at {at}"),
            );
        }
    }
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

#[test]
fn seq_gaps_duplicates_and_spliced_lines_are_corruption_even_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.wal");
    let b = dir.path().join("b.wal");
    let pa = write_log(&a, 5);
    // Records carry their time to the millisecond: b's must differ from
    // a's, or a line spliced from one into the other would be the same line.
    std::thread::sleep(std::time::Duration::from_millis(5));
    write_log(&b, 6);
    let la = lines(&std::fs::read(&a).unwrap());
    let lb = lines(&std::fs::read(&b).unwrap());
    let end = pa[4].end();

    let mut gap = la.clone();
    gap.remove(2);
    let r = scan_bytes(dir.path(), "gap.wal", &gap.concat());
    assert_eq!(
        r.corruption.as_ref().map(|c| (c.seq, c.offset)),
        Some((3, pa[2].offset))
    );
    assert!(r.corruption.unwrap().reason.contains("seq gap"));
    assert_corrupt_at(dir.path(), &gap.concat(), 3, pa[2].offset, "gap");

    let mut dup = la.clone();
    dup.push(la[4].clone());
    let r = scan_bytes(dir.path(), "dup.wal", &dup.concat());
    let c = r.corruption.unwrap();
    assert_eq!((c.seq, c.offset), (6, end));
    assert!(c.reason.contains("duplicated"), "{}", c.reason);
    assert_corrupt_at(dir.path(), &dup.concat(), 6, end, "duplicate at end");

    let mut mid_dup = la.clone();
    mid_dup.insert(2, la[1].clone());
    assert_corrupt_at(
        dir.path(),
        &mid_dup.concat(),
        3,
        pa[2].offset,
        "duplicate in the middle",
    );

    let mut spliced = la.clone();
    spliced[2] = lb[2].clone();
    let r = scan_bytes(dir.path(), "splice.wal", &spliced.concat());
    let c = r.corruption.unwrap();
    assert_eq!((c.seq, c.offset), (3, pa[2].offset));
    assert!(c.reason.contains("prev"), "{}", c.reason);
    assert_corrupt_at(dir.path(), &spliced.concat(), 3, pa[2].offset, "splice");

    let mut spliced_end = la.clone();
    spliced_end.push(lb[5].clone());
    assert_corrupt_at(dir.path(), &spliced_end.concat(), 6, end, "splice at end");

    // The first record must be seq 1 with prev 00000000.
    assert_corrupt_at(dir.path(), &la[1..].concat(), 1, 0, "no first record");
}

#[test]
fn a_bad_line_followed_only_by_garbage_is_a_torn_tail_but_not_before_a_valid_one() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.wal");
    let pa = write_log(&a, 3);
    let la = lines(&std::fs::read(&a).unwrap());
    let mut torn = la[..2].concat();
    torn.extend_from_slice(b"{\"seq\":3,\"pr\n\0\0\0garbage\nmore");
    let r = scan_bytes(dir.path(), "g.wal", &torn);
    assert_eq!(
        r.torn_tail,
        Some(TornTail {
            offset: pa[2].offset,
            bytes: torn.len() as u64 - pa[2].offset
        })
    );
    assert_eq!((r.records, r.corruption), (2, None));

    let mut damaged = torn.clone();
    damaged.extend_from_slice(b"\n");
    damaged.extend_from_slice(&la[2]);
    let r = scan_bytes(dir.path(), "h.wal", &damaged);
    let c: Corruption = r.corruption.unwrap();
    assert_eq!((c.seq, c.offset), (3, pa[2].offset));
    assert!(c.reason.contains("valid record follows"), "{}", c.reason);
}

#[test]
fn an_empty_log_scans_clean_and_open_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.wal");
    std::fs::write(&p, b"").unwrap();
    let r = scan::<Note>(&p, None, |_, _| {}).unwrap();
    assert!(r.is_clean() && r.records == 0 && r.last.is_none());
    let e = reopen(|| Store::open(&p, no_snapshots())).err().unwrap();
    assert!(matches!(e, StoreError::Empty { .. }), "{e}");
    assert!(e.is_refusal(), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_log_truncated_anywhere_opens_or_is_torn(n in 1u64..10, frac in 0.0f64..=1.0, junk in proptest::collection::vec(any::<u8>(), 0..40)) {
        let dir = tempfile::tempdir().unwrap();
        let orig = dir.path().join("o.wal");
        let pos = write_log(&orig, n);
        let bytes = std::fs::read(&orig).unwrap();
        let cut = (bytes.len() as f64 * frac) as usize;
        let mut data = bytes[..cut].to_vec();
        // Garbage with no record start in it, as a crash may leave.
        data.extend(junk.iter().map(|b| if *b == b'{' { b'x' } else { *b }));
        let p = dir.path().join("t.wal");
        std::fs::write(&p, &data).unwrap();
        let r = scan_all(&p).0;
        prop_assert_eq!(&r.corruption, &None);
        let whole = pos.iter().filter(|q| q.end() as usize <= cut).count() as u64;
        prop_assert_eq!(r.records, whole);
        prop_assert_eq!(r.torn_tail.is_some(), data.len() as u64 > r.valid_bytes);
        match reopen(|| Store::open(&p, no_snapshots())) {
            Ok((store, _)) => {
                prop_assert_eq!(store.state().records, whole);
                store.close().unwrap();
                prop_assert_eq!(std::fs::metadata(&p).unwrap().len(), r.valid_bytes);
            }
            Err(StoreError::Empty { .. }) => prop_assert_eq!(whole, 0),
            Err(e) => prop_assert!(false, "{}", e),
        }
    }
}
