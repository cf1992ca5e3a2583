//! Tests of the reader's line scan: an embedded record found by its anchor
//! (checked against rehashing every candidate), and overlong lines read in
//! bounded memory whether they end in a record or in a torn tail.

use super::*;
use crate::testkit::Rec;
use crate::wal::frame::encode;

fn log(n: u64) -> (Vec<u8>, Vec<RecordPos>) {
    let mut out = Vec::new();
    let mut pos = Vec::new();
    let mut prev = 0;
    for seq in 1..=n {
        let offset = out.len() as u64;
        prev = encode(seq, prev, "t", &Rec::Add { n: seq }, &mut out).unwrap();
        pos.push(RecordPos {
            seq,
            crc: prev,
            offset,
            len: out.len() as u64 - offset,
        });
    }
    (out, pos)
}

fn scan_bytes(bytes: &[u8]) -> ScanReport {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.wal");
    std::fs::write(&p, bytes).unwrap();
    scan::<Rec>(&p, None, |_, _| {}).unwrap()
}

/// The search [`embedded_record`] replaced, kept as its reference:
/// hash the rest of the piece at every `{"seq":` (quadratic).
fn embedded_record_by_rehashing(piece: &[u8], from: usize) -> Option<usize> {
    const START: &[u8] = b"{\"seq\":";
    (from..piece.len().saturating_sub(START.len() - 1))
        .filter(|&p| piece[p..].starts_with(START))
        .find(|&p| {
            let rest = &piece[p..];
            let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
            check_crc(rest).is_ok()
        })
}

#[test]
fn the_one_pass_search_finds_what_rehashing_every_candidate_finds() {
    use crate::wal::crc_back::crc_zeroing_bytes;
    let (good, pos) = log(3);
    let records: Vec<&[u8]> = pos
        .iter()
        .map(|p| &good[p.offset as usize..(p.end() - 1) as usize])
        .collect();
    let mut rng = 0x1234_5678_9abc_def1_u64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let (mut found, mut several) = (0, 0);
    for round in 0..3000 {
        let mut piece = Vec::new();
        for _ in 0..next(8) {
            match next(7) {
                0 | 1 => piece.extend_from_slice(b"{\"seq\":"),
                2 => {
                    let n = next(6);
                    piece.extend((0..n).map(|_| b"{\"seq:,}0a\n"[next(10)]));
                }
                // A block of crc 0 starting with {"seq": (every
                // candidate before a hit hits too).
                3 => {
                    let mut z = b"{\"seq\":".to_vec();
                    z.extend((0..next(4)).map(|_| b"xy"[next(2)]));
                    z.extend_from_slice(&crc_zeroing_bytes(&z));
                    piece.extend_from_slice(&z);
                }
                4 => piece.extend_from_slice(records[next(records.len())]),
                5 => piece.extend_from_slice(b",\"crc\":\"0000000"),
                _ => piece.extend_from_slice(b"}"),
            }
        }
        // End it: the crc of the bytes from some {"seq": on (a hit),
        // a wrong crc, a truncated suffix, or as it is.
        let starts: Vec<usize> = (0..piece.len())
            .filter(|&p| piece[p..].starts_with(b"{\"seq\":"))
            .collect();
        match next(4) {
            0 | 1 if !starts.is_empty() => {
                let at = starts[next(starts.len())];
                let crc = crc32fast::hash(&piece[at..]);
                piece.extend_from_slice(format!(",\"crc\":\"{crc:08x}\"}}").as_bytes());
            }
            2 => piece.extend_from_slice(b",\"crc\":\"1a2b3c4d\"}"),
            _ => piece.extend_from_slice(&b",\"crc\":\"1a2b3c4d\"}"[..next(18)]),
        }
        if next(2) == 0 {
            piece.push(b'\n');
        }
        for from in [0, 1, next(piece.len() + 2)] {
            let want = embedded_record_by_rehashing(&piece, from);
            found += usize::from(want.is_some());
            // Another hit after the first: the first must win.
            several += usize::from(
                want.is_some_and(|p| embedded_record_by_rehashing(&piece, p + 1).is_some()),
            );
            assert_eq!(
                embedded_record(&piece, from),
                want,
                "round {round}, from {from}: {:?}",
                String::from_utf8_lossy(&piece)
            );
        }
    }
    // The generator does reach the interesting cases.
    assert!(
        found > 1000 && several > 100,
        "{found} hits, {several} with more"
    );
}

#[test]
fn read_line_keeps_the_end_of_an_overlong_line_only() {
    let mut bytes = vec![b'a'; 2 * MAX_LINE_LEN + 5];
    bytes.extend_from_slice(b"zz\nshort\nend");
    let mut r = std::io::Cursor::new(bytes);
    let mut line = Vec::new();
    let got = read_line(&mut r, &mut line).unwrap();
    assert_eq!(got.len, 2 * MAX_LINE_LEN as u64 + 8);
    assert_eq!(got.dropped, got.len - MAX_LINE_LEN as u64);
    assert_eq!(line.len(), MAX_LINE_LEN);
    assert!(line.ends_with(b"azz\n"));
    let got = read_line(&mut r, &mut line).unwrap();
    assert_eq!(
        (got.len, got.dropped, line.as_slice()),
        (6, 0, &b"short\n"[..])
    );
    let got = read_line(&mut r, &mut line).unwrap();
    assert_eq!((got.len, line.as_slice()), (3, &b"end"[..]));
    assert_eq!(read_line(&mut r, &mut line).unwrap().len, 0);
}

#[test]
fn an_overlong_last_line_is_a_torn_tail_of_its_full_length() {
    let (good, _) = log(3);
    let mut bytes = good.clone();
    bytes.extend_from_slice(b"{\"seq\":4,");
    bytes.resize(bytes.len() + MAX_LINE_LEN + 100, b' ');
    let report = scan_bytes(&bytes);
    assert_eq!(report.records, 3);
    assert_eq!(report.corruption, None);
    assert_eq!(
        report.torn_tail,
        Some(TornTail {
            offset: good.len() as u64,
            bytes: (bytes.len() - good.len()) as u64
        })
    );
}

#[test]
fn a_record_at_the_end_of_an_overlong_line_is_still_found() {
    // Junk longer than any record, then a valid record 2 glued to its
    // end (a lost newline): corruption at the junk, naming the record.
    let (good, pos) = log(2);
    let split = usize::try_from(pos[1].offset).unwrap();
    let (first, second) = good.split_at(split);
    let mut bytes = first.to_vec();
    bytes.resize(first.len() + MAX_LINE_LEN + 10, b'#');
    let at = bytes.len() as u64;
    bytes.extend_from_slice(second);
    let report = scan_bytes(&bytes);
    assert_eq!(report.records, 1);
    let c = report.corruption.expect("corruption");
    assert_eq!((c.seq, c.offset), (2, pos[1].offset));
    assert!(c.reason.contains(&format!("byte {at}")), "{}", c.reason);

    // The same on a later line than the bad one.
    let mut bytes = first.to_vec();
    bytes.extend_from_slice(b"{\"seq\":2,\n");
    let junk_at = bytes.len();
    bytes.resize(junk_at + MAX_LINE_LEN + 10, b'#');
    let at = bytes.len() as u64;
    bytes.extend_from_slice(second);
    let c = scan_bytes(&bytes).corruption.expect("corruption");
    assert!(c.reason.contains(&format!("byte {at}")), "{}", c.reason);
}

#[test]
fn an_anchor_claiming_a_huge_line_reads_no_further_than_the_limit() {
    let (good, pos) = log(2);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.wal");
    std::fs::write(&p, &good).unwrap();
    check_record_at::<Rec>(&p, &pos[1]).unwrap();
    let huge = RecordPos {
        len: 1 << 40,
        ..pos[1]
    };
    let e = check_record_at::<Rec>(&p, &huge).unwrap_err();
    assert!(matches!(e, WalError::Anchor { .. }), "{e}");
    let longer = RecordPos {
        len: pos[0].len + 1,
        ..pos[0]
    };
    assert!(matches!(
        check_record_at::<Rec>(&p, &longer),
        Err(WalError::Anchor { .. })
    ));
}
