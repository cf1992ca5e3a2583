//! Snapshots and the compactor on real files: cadence, atomic swap with a
//! .bak, every fallback (missing, damaged, stale, pointing elsewhere), stray
//! temp files, and a slow snapshot that must not hold up appends.

use crate::notes::*;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use tinyagent_store::StoreOptions;
use tinyagent_store::snapshot::{self, SnapshotHeader};

fn every(n: u64) -> StoreOptions {
    StoreOptions {
        snapshot_every: n,
        ..StoreOptions::default()
    }
}

/// A log of `n` records written with snapshots every 5 records (and a final
/// one on close).
fn log_with_snapshots(dir: &Path, n: u64) -> (PathBuf, Vec<u64>) {
    let p = dir.join("s.wal");
    let mut store = Store::create(&p, every(5)).unwrap();
    for i in 1..=n {
        store.append(ev(i)).unwrap();
    }
    let mut seqs: Vec<u64> = store
        .take_snapshot_notices()
        .iter()
        .map(|s| s.seq)
        .collect();
    let (saved, warnings) = store.close_reporting().unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    seqs.extend(saved.iter().map(|s| s.seq));
    (p, seqs)
}

fn header(path: &Path) -> (SnapshotHeader, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let nl = bytes.iter().position(|b| *b == b'\n').unwrap();
    (
        serde_json::from_slice(&bytes[..nl]).unwrap(),
        bytes[nl + 1..].to_vec(),
    )
}

fn write_snapshot_file(path: &Path, h: &SnapshotHeader, body: &[u8]) {
    let mut bytes = serde_json::to_vec(h).unwrap();
    bytes.push(b'\n');
    bytes.extend_from_slice(body);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn snapshots_follow_the_cadence_and_open_replays_only_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let (p, seqs) = log_with_snapshots(dir.path(), 12);
    assert_eq!(seqs, vec![5, 10, 12]);
    let snap = snapshot::snapshot_path(&p);
    let bak = snapshot::backup_path(&p);
    assert_eq!((mode(&snap), mode(&bak)), (0o600, 0o600));
    let (h, body) = header(&snap);
    assert_eq!(
        (h.format.as_str(), h.version, h.seq),
        ("tinyagent-snapshot", 1, 12)
    );
    assert_eq!(h.offset, std::fs::metadata(&p).unwrap().len());
    assert_eq!(h.body_len, body.len() as u64);
    assert_eq!(h.body_crc, format!("{:08x}", crc32(&body)));
    assert_eq!(header(&bak).0.seq, 10);

    let (mut store, report) = reopen(|| Store::open(&p, every(5))).unwrap();
    assert_eq!(
        report.snapshot.as_ref().map(|s| (s.seq, s.path.clone())),
        Some((12, snap.clone()))
    );
    assert_eq!((report.replayed, report.warnings.len()), (0, 0));
    assert_eq!(store.state().records, 12);
    store.append(ev(13)).unwrap();
    let live = store.state().clone();
    store.close().unwrap();
    // The compactor's mirror state equals the live one.
    let (pos, mirrored) = snapshot::read::<Count>(&snap).unwrap();
    assert_eq!(pos.seq, 13);
    assert_eq!(mirrored, live);
    // Read-only load: full replay, but it names the valid snapshot.
    let l = load(&p).unwrap();
    assert_eq!((l.scan.records, l.state.records), (13, 13));
    assert_eq!(l.snapshot.map(|s| s.seq), Some(13));
    let l = load_with(&p, true).unwrap();
    assert_eq!((l.scan.records, l.state.records), (0, 13));
}

/// Opens the log and returns (snapshot seq used, replayed, warnings).
fn open_report(p: &Path) -> (Option<u64>, u64, Vec<String>) {
    let bytes = std::fs::read(p).unwrap();
    let (store, report) = reopen(|| Store::open(p, every(0))).unwrap();
    let total = scan_all(p).0.records;
    assert_eq!(store.state().records, total);
    store.close().unwrap();
    assert_eq!(
        std::fs::read(p).unwrap(),
        bytes,
        "open of a clean log changes nothing"
    );
    (
        report.snapshot.map(|s| s.seq),
        report.replayed,
        report.warnings,
    )
}

#[test]
fn a_missing_snapshot_falls_back_to_the_bak_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = log_with_snapshots(dir.path(), 12);
    std::fs::remove_file(snapshot::snapshot_path(&p)).unwrap();
    let (seq, replayed, warnings) = open_report(&p);
    assert_eq!((seq, replayed), (Some(10), 2));
    assert!(
        warnings.len() == 1 && warnings[0].contains("missing"),
        "{warnings:?}"
    );
    std::fs::remove_file(snapshot::backup_path(&p)).unwrap();
    assert_eq!(open_report(&p), (None, 12, vec![]));
}

#[test]
fn a_damaged_snapshot_falls_back_to_the_bak_then_to_a_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = log_with_snapshots(dir.path(), 12);
    let snap = snapshot::snapshot_path(&p);
    let mut bytes = std::fs::read(&snap).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x20;
    std::fs::write(&snap, &bytes).unwrap();
    let (seq, replayed, warnings) = open_report(&p);
    assert_eq!((seq, replayed), (Some(10), 2));
    assert!(warnings[0].contains("body crc"), "{warnings:?}");
    std::fs::write(snapshot::backup_path(&p), b"{\"format\":").unwrap();
    let (seq, replayed, warnings) = open_report(&p);
    assert_eq!(
        (seq, replayed, warnings.len()),
        (None, 12, 2),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("full replay"), "{warnings:?}");
}

#[test]
fn a_snapshot_pointing_elsewhere_or_from_another_log_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = log_with_snapshots(dir.path(), 12);
    let snap = snapshot::snapshot_path(&p);
    let (mut h, body) = header(&snap);
    h.record_offset -= 1;
    h.offset -= 1;
    write_snapshot_file(&snap, &h, &body);
    let (seq, _, warnings) = open_report(&p);
    assert_eq!(seq, Some(10));
    assert!(warnings[0].contains("stale"), "{warnings:?}");

    // Same seq, offset and length, another log's crc.
    let other = tempfile::tempdir().unwrap();
    let (q, _) = log_with_snapshots(other.path(), 12);
    std::fs::copy(snapshot::snapshot_path(&q), &snap).unwrap();
    let (seq, _, warnings) = open_report(&p);
    assert_eq!(seq, Some(10));
    assert!(warnings[0].contains("crc"), "{warnings:?}");
}

#[test]
fn a_snapshot_beyond_the_end_of_a_cut_log_is_stale() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = log_with_snapshots(dir.path(), 12);
    // Keep 8 records plus half of the 9th: both snapshots (12, 10) are stale.
    let pos: Vec<_> = {
        let mut v = Vec::new();
        tinyagent_store::wal::reader::scan::<Note>(&p, None, |_, q| v.push(*q)).unwrap();
        v
    };
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(pos[8].offset + 5).unwrap();
    drop(f);
    let (store, report) = reopen(|| Store::open(&p, every(0))).unwrap();
    assert_eq!((report.snapshot, report.replayed), (None, 8));
    assert_eq!(report.warnings.len(), 2, "{:?}", report.warnings);
    assert!(report.torn_tail.is_some());
    assert_eq!(store.state().records, 8);
}

#[test]
fn stray_temp_files_are_deleted_on_open_and_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = log_with_snapshots(dir.path(), 6);
    let stray = [
        dir.path().join("s.wal.snapshot.tmp-4242-0"),
        dir.path().join("s.wal.snapshot.tmp-4242-1.bak"),
    ];
    let keep = dir.path().join("other.wal.snapshot.tmp-1-0");
    for f in stray.iter().chain([&keep]) {
        std::fs::write(f, b"half a snapshot").unwrap();
    }
    // A read-only load deletes nothing.
    load(&p).unwrap();
    assert!(stray.iter().all(|f| f.exists()));
    let (store, report) = reopen(|| Store::open(&p, every(0))).unwrap();
    assert!(stray.iter().all(|f| !f.exists()));
    assert!(keep.exists());
    assert_eq!(
        report
            .warnings
            .iter()
            .filter(|w| w.contains("stray"))
            .count(),
        2
    );
    store.close().unwrap();
}

#[test]
fn a_slow_snapshot_does_not_hold_up_appends() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("slow.wal");
    let (entered_tx, entered) = mpsc::channel::<u64>();
    let (release, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let entered_tx = Mutex::new(entered_tx);
    let hook = move |seq: u64| {
        let _ = entered_tx.lock().unwrap().send(seq);
        // Blocks until the test releases it (or drops the sender).
        let _ = gate.lock().unwrap().recv();
    };
    let opts = StoreOptions {
        snapshot_every: 2,
        snapshot_hook: Some(Arc::new(hook)),
        ..StoreOptions::default()
    };
    let mut store = Store::create(&p, opts).unwrap();
    store.append(ev(1)).unwrap();
    store.append(ev(2)).unwrap();
    // The compactor is now stuck inside the snapshot of seq 2.
    assert_eq!(entered.recv().unwrap(), 2);
    for i in 3..=30 {
        assert_eq!(store.append(ev(i)).unwrap(), i);
    }
    assert!(
        store.take_snapshot_notices().is_empty(),
        "the snapshot is still blocked"
    );
    drop(release);
    let (saved, warnings) = store.close_reporting().unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        saved.iter().map(|s| s.seq).collect::<Vec<_>>(),
        (1..=15).map(|i| i * 2).collect::<Vec<_>>()
    );
    let (pos, state) = snapshot::read::<Count>(&snapshot::snapshot_path(&p)).unwrap();
    assert_eq!((pos.seq, state.records), (30, 30));
}

#[test]
fn create_removes_snapshots_left_by_an_older_log_of_the_same_name() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = log_with_snapshots(dir.path(), 6);
    std::fs::remove_file(&p).unwrap();
    let mut store = Store::create(&p, every(0)).unwrap();
    assert_eq!(store.take_warnings().len(), 2);
    assert!(!snapshot::snapshot_path(&p).exists() && !snapshot::backup_path(&p).exists());
    store.append(ev(1)).unwrap();
    store.close().unwrap();
    assert_eq!(open_report(&p), (None, 1, vec![]));
}
