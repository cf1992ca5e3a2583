//! Store::open / load refusals and their exit codes, and corruption found
//! after a snapshot.

use crate::notes::*;
use tinyagent_store::snapshot;
use tinyagent_store::{StoreError, StoreOptions};

#[test]
fn refusals_map_to_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.wal");
    let e = Store::open(&missing, no_snapshots()).err().unwrap();
    assert!(
        matches!(e, StoreError::NotFound { .. }) && e.is_refusal(),
        "{e}"
    );
    assert!(matches!(load(&missing), Err(StoreError::NotFound { .. })));
    let e = Store::open(dir.path(), no_snapshots()).err().unwrap();
    assert!(
        matches!(e, StoreError::BadLog { .. }) && e.is_refusal(),
        "{e}"
    );
    // Only a torn first record: nothing to open, and nothing is cut.
    let torn = dir.path().join("torn.wal");
    std::fs::write(&torn, b"{\"seq\":1,\"prev\":\"0000").unwrap();
    let e = Store::open(&torn, no_snapshots()).err().unwrap();
    assert!(matches!(e, StoreError::Empty { .. }), "{e}");
    assert_eq!(std::fs::read(&torn).unwrap(), b"{\"seq\":1,\"prev\":\"0000");
    let l = load(&torn).unwrap();
    assert_eq!(
        (l.scan.records, l.scan.torn_tail.map(|t| t.bytes)),
        (0, Some(21))
    );
}

#[test]
fn load_stops_at_corruption_and_returns_what_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.wal");
    let pos = write_log(&p, 6);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[pos[3].offset as usize + 3] ^= 0x04;
    std::fs::write(&p, &bytes).unwrap();
    let l = load(&p).unwrap();
    assert_eq!(l.state.records, 3);
    let c = l.scan.corruption.unwrap();
    assert_eq!((c.seq, c.offset), (4, pos[3].offset));
    assert!(c.reason.contains("crc mismatch"), "{}", c.reason);
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
}

#[test]
fn corruption_after_the_snapshot_is_refused_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.wal");
    let mut store = Store::create(&p, StoreOptions::default()).unwrap();
    for i in 1..=9 {
        store.append(ev(i)).unwrap();
    }
    store.close().unwrap(); // final snapshot covers seq 9
    let (covered, _) = snapshot::read::<Count>(&snapshot::snapshot_path(&p)).unwrap();
    assert_eq!(covered.seq, 9);
    // Duplicate record 9 at the end: the only line a snapshot-based open reads.
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.extend_from_within(covered.offset as usize..);
    std::fs::write(&p, &bytes).unwrap();
    let e = reopen(|| Store::open(&p, StoreOptions::default()))
        .err()
        .unwrap();
    match &e {
        StoreError::Corrupt {
            seq,
            offset,
            reason,
            ..
        } => {
            assert_eq!((*seq, *offset), (10, covered.end()));
            assert!(reason.contains("duplicated"), "{reason}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
    assert!(files_with(dir.path(), ".torn-").is_empty());
}
