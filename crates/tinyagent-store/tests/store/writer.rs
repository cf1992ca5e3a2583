//! The writer on real files: contract framing, create/lock/mode, and
//! fail-stop under injected write, short-write and sync failures.

use crate::notes::*;
use tinyagent_store::wal::WalError;
use tinyagent_store::wal::fs::FaultPlan;
use tinyagent_store::wal::writer::{LockedLog, WalWriter};
use tinyagent_store::{StoreError, StoreOptions, TestSeams};

#[test]
fn create_refuses_an_existing_file_and_makes_it_0600() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.wal");
    let mut w = WalWriter::create(&p).unwrap();
    assert_eq!(mode(&p), 0o600);
    let a = w.append(&ev(1)).unwrap();
    assert_eq!((a.seq, a.offset), (1, 0));
    assert!(matches!(
        WalWriter::create(&p),
        Err(WalError::Exists { .. })
    ));
    let e = Store::create(&p, no_snapshots()).err().unwrap();
    assert!(
        matches!(e, StoreError::Exists { .. }) && e.is_refusal(),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&p).unwrap().len() as u64,
        a.len,
        "existing file untouched"
    );
}

#[test]
fn a_second_writer_is_refused_while_the_first_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.wal");
    let mut store = Store::create(&p, no_snapshots()).unwrap();
    store.append(ev(1)).unwrap();
    assert!(matches!(LockedLog::open(&p), Err(WalError::Locked { .. })));
    let e = Store::open(&p, no_snapshots()).err().unwrap();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    assert!(e.is_refusal(), "{e}");
    assert!(e.to_string().contains("in use"), "{e}");
    // A reader is not a writer: load works while the lock is held.
    assert_eq!(load(&p).unwrap().scan.records, 1);
    store.close().unwrap();
    let (store, _) = reopen(|| Store::open(&p, no_snapshots())).unwrap();
    assert_eq!(store.state().records, 1);
}

#[test]
fn appends_are_contract_framed_and_continue_the_chain_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("runs").join("deep").join("a.wal");
    let mut store = Store::create(&p, no_snapshots()).unwrap();
    for i in 1..=3 {
        assert_eq!(store.append(ev(i)).unwrap(), i);
    }
    store.close().unwrap();
    let (mut store, report) = reopen(|| Store::open(&p, no_snapshots())).unwrap();
    assert_eq!(
        (report.replayed, report.torn_tail, report.snapshot),
        (3, None, None)
    );
    assert_eq!(store.append(ev(4)).unwrap(), 4);
    store.close().unwrap();
    let lines = framing_check(&std::fs::read(&p).unwrap());
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[3]["type"], "call.result");
    assert_eq!(lines[3]["data"]["call_id"], "c4");
    let ts = lines[0]["ts"].as_str().unwrap();
    assert_eq!(ts.len(), "2026-01-01T00:00:00.000Z".len(), "{ts}");
}

fn faulty(spec: &str) -> StoreOptions {
    StoreOptions {
        seams: TestSeams {
            faults: Some(FaultPlan::parse(spec).unwrap()),
            ..TestSeams::default()
        },
        ..no_snapshots()
    }
}

/// Appends until the third append, which must fail with an error whose text
/// contains `expect`; then checks fail-stop. Returns the log bytes.
fn third_append_fails(spec: &str, expect: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.wal");
    let mut store = Store::create(&p, faulty(spec)).unwrap();
    store.append(ev(1)).unwrap();
    store.append(ev(2)).unwrap();
    let e = store.append(ev(3)).unwrap_err();
    assert!(e.to_string().contains(expect), "{spec}: {e}");
    assert!(!e.is_refusal(), "{e}");
    let len_after_failure = std::fs::metadata(&p).unwrap().len();
    for i in 4..6 {
        match store.append(ev(i)) {
            Err(StoreError::Poisoned(msg)) => assert!(msg.contains(expect), "{msg}"),
            other => panic!("{spec}: append after failure: {other:?}"),
        }
    }
    assert_eq!(store.state().records, 2, "a failed append is not applied");
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        len_after_failure,
        "no I/O after poisoning"
    );
    store.close().unwrap();
    (dir, p)
}

#[test]
fn a_failed_write_stops_the_writer_and_keeps_what_was_saved() {
    let (_d, p) = third_append_fails("write:3:EIO", "Input/output error");
    let (r, frames) = scan_all(&p);
    assert!(r.is_clean());
    assert_eq!(
        frames.iter().map(|f| f.event.clone()).collect::<Vec<_>>(),
        vec![ev(1), ev(2)]
    );
    let (_d, p) = third_append_fails("write:3:ENOSPC", "No space left on device");
    assert_eq!(scan_all(&p).0.records, 2);
}

#[test]
fn a_short_write_stops_the_writer_and_leaves_a_torn_tail_that_open_cuts() {
    let (_d, p) = third_append_fails("write:3:short", "short write");
    let (r, _) = scan_all(&p);
    assert_eq!((r.records, r.corruption.is_none()), (2, true));
    let tail = r.torn_tail.expect("half a record on disk");
    let (mut store, report) = reopen(|| Store::open(&p, no_snapshots())).unwrap();
    assert_eq!(report.torn_tail.map(|t| t.0), Some(tail));
    assert_eq!(store.append(ev(3)).unwrap(), 3);
    store.close().unwrap();
    assert_eq!(framing_check(&std::fs::read(&p).unwrap()).len(), 3);
}

#[test]
fn a_failed_fdatasync_is_never_retried_and_stops_the_writer() {
    // sync:3 fails; a retry would hit sync 4, which would succeed: the append
    // must still fail.
    let (_d, p) = third_append_fails("sync:3:EIO", "fdatasync");
    let (r, frames) = scan_all(&p);
    assert!(r.corruption.is_none());
    // The record whose sync failed may or may not be there; earlier ones are.
    assert!(r.records >= 2);
    assert_eq!(frames[1].event, ev(2));
}

#[test]
fn fault_plans_reject_nonsense() {
    assert!(FaultPlan::parse("fsync:1:EIO").is_err());
    assert_eq!(FaultPlan::parse("").unwrap().faults.len(), 0);
}
