//! The store on real files with a record and fold of the tests' own: a
//! counter that adds numbers. Nothing here knows about tinyagent's events.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tinyagent_store::snapshot::{backup_path, snapshot_path};
use tinyagent_store::wal::fs::FaultPlan;
use tinyagent_store::{Fold, Record, Store, StoreError, StoreOptions, TestSeams, load, load_with};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
enum Op {
    #[serde(rename = "add")]
    Add { n: u64 },
    #[serde(rename = "reset")]
    Reset {},
}

impl Record for Op {
    fn kind(&self) -> &'static str {
        match self {
            Op::Add { .. } => "add",
            Op::Reset {} => "reset",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Counter {
    total: u64,
    applied: u64,
    /// Set in the state a writer starts from (`empty_for_writing`).
    writer: bool,
}

impl Fold<Op> for Counter {
    fn apply(&mut self, record: &Op) {
        self.applied += 1;
        match record {
            Op::Add { n } => self.total += n,
            Op::Reset {} => self.total = 0,
        }
    }

    fn empty_for_writing() -> Counter {
        Counter {
            writer: true,
            ..Counter::default()
        }
    }
}

type CounterStore = Store<Op, Counter>;

fn opts(every: u64) -> StoreOptions {
    StoreOptions {
        snapshot_every: every,
        ..StoreOptions::default()
    }
}

fn log_with(dir: &Path, ns: &[u64], every: u64) -> PathBuf {
    let p = dir.join("c.wal");
    let mut s = CounterStore::create(&p, opts(every)).unwrap();
    for n in ns {
        s.append(Op::Add { n: *n }).unwrap();
    }
    s.close().unwrap();
    p
}

#[test]
fn append_then_open_replays_to_the_same_state_and_continues_the_seq() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sub/dir/c.wal");
    let mut s = CounterStore::create(&p, opts(0)).unwrap();
    assert_eq!(s.append(Op::Add { n: 2 }).unwrap(), 1);
    assert_eq!(s.append(Op::Add { n: 3 }).unwrap(), 2);
    assert_eq!(s.state().total, 5);
    s.close().unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.starts_with(r#"{"seq":1,"prev":"00000000","type":"add","ts":""#));
    assert_eq!(text.lines().count(), 2);

    let (mut s, report) = CounterStore::open(&p, opts(0)).unwrap();
    assert_eq!((report.replayed, report.snapshot.clone()), (2, None));
    assert_eq!(s.state().total, 5);
    assert_eq!(s.append(Op::Reset {}).unwrap(), 3);
    s.close().unwrap();
    let loaded = load::<Op, Counter>(&p).unwrap();
    assert_eq!((loaded.state.total, loaded.state.applied), (0, 3));
    assert!(loaded.scan.is_clean());
}

#[test]
fn create_refuses_an_existing_file_and_a_second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), &[1], 0);
    let e = CounterStore::create(&p, opts(0)).err().unwrap();
    assert!(
        matches!(e, StoreError::Exists { .. }) && e.is_refusal(),
        "{e}"
    );
    let (first, _) = CounterStore::open(&p, opts(0)).unwrap();
    let e = CounterStore::open(&p, opts(0)).err().unwrap();
    assert!(
        matches!(e, StoreError::Locked { .. }) && e.is_refusal(),
        "{e}"
    );
    drop(first);
    assert!(CounterStore::open(&p, opts(0)).is_ok());
}

#[test]
fn a_torn_tail_is_cut_and_its_bytes_kept_beside_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), &[1, 2], 0);
    let good = std::fs::read(&p).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(br#"{"seq":3,"prev":"0000"#);
    std::fs::write(&p, &torn).unwrap();

    let (s, report) = CounterStore::open(&p, opts(0)).unwrap();
    let (tail, kept) = report.torn_tail.unwrap();
    assert_eq!((tail.offset, tail.bytes), (good.len() as u64, 21));
    assert_eq!(std::fs::read(&kept).unwrap(), &torn[good.len()..]);
    assert_eq!(std::fs::read(&p).unwrap(), good);
    assert_eq!((s.state().total, s.next_seq()), (3, 3));
}

#[test]
fn corruption_is_refused_with_seq_and_offset_and_the_file_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), &[1, 2, 3], 0);
    let mut bytes = std::fs::read(&p).unwrap();
    let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    // Flip a digit inside the second record's data: its crc no longer holds,
    // and a valid record follows, so this is not a torn tail.
    let at = second
        + bytes[second..]
            .windows(5)
            .position(|w| w == b"\"n\":2")
            .unwrap()
        + 4;
    bytes[at] = b'7';
    std::fs::write(&p, &bytes).unwrap();

    match CounterStore::open(&p, opts(0)) {
        Err(e @ StoreError::Corrupt { .. }) => {
            assert!(e.is_refusal(), "{e}");
            let StoreError::Corrupt { seq, offset, .. } = e else {
                unreachable!()
            };
            assert_eq!((seq, offset), (2, second as u64));
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("a corrupt log was opened"),
    }
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing is written beside a corrupt log");
}

#[test]
fn open_uses_the_snapshot_then_the_bak_then_a_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), &[1, 2, 3, 4, 5], 2);
    let snap = snapshot_path(&p);
    let bak = backup_path(&p);
    assert!(snap.exists() && bak.exists());

    let (s, report) = CounterStore::open(&p, opts(0)).unwrap();
    assert_eq!(report.snapshot.as_ref().map(|s| s.seq), Some(5));
    assert_eq!((report.replayed, s.state().total), (0, 15));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    drop(s);

    std::fs::write(&snap, b"{\"format\":").unwrap();
    let (s, report) = CounterStore::open(&p, opts(0)).unwrap();
    assert_eq!(
        report.snapshot.as_ref().map(|s| s.path.clone()),
        Some(bak.clone())
    );
    assert_eq!(s.state().total, 15);
    assert_eq!(report.replayed, 5 - 4);
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    drop(s);

    std::fs::remove_file(&bak).unwrap();
    let (s, report) = CounterStore::open(&p, opts(0)).unwrap();
    assert_eq!((report.snapshot, report.replayed), (None, 5));
    assert_eq!(s.state().total, 15);
    drop(s);

    // A reader from a snapshot covers only what follows it; a full load
    // starts from Default (the reader's empty state).
    let loaded = load_with::<Op, Counter>(&p, true).unwrap();
    assert_eq!(loaded.state.total, 15);
    assert!(!load::<Op, Counter>(&p).unwrap().state.writer);
    let (s, _) = CounterStore::open(&p, opts(0)).unwrap();
    assert!(
        s.state().writer,
        "a full replay for writing starts from empty_for_writing"
    );
}

#[test]
fn a_snapshot_of_another_log_is_stale_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), &[1, 2, 3, 4], 2);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let q = log_with(&other, &[9, 9, 9, 9], 2);
    std::fs::copy(snapshot_path(&q), snapshot_path(&p)).unwrap();
    std::fs::remove_file(backup_path(&p)).unwrap();
    let (s, report) = CounterStore::open(&p, opts(0)).unwrap();
    assert_eq!((report.snapshot, s.state().total), (None, 10));
    assert!(
        report.warnings.iter().any(|w| w.contains("stale")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn stray_snapshot_temp_files_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), &[1], 0);
    let stray = dir.path().join("c.wal.snapshot.tmp-4242-0");
    std::fs::write(&stray, b"half a snapshot").unwrap();
    let (_s, report) = CounterStore::open(&p, opts(0)).unwrap();
    assert!(!stray.exists());
    assert!(
        report.warnings.iter().any(|w| w.contains("stray")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn an_injected_sync_failure_poisons_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.wal");
    let seams = TestSeams {
        faults: Some(FaultPlan::parse("sync:2:EIO").unwrap()),
        ..TestSeams::default()
    };
    let mut s = CounterStore::create(&p, StoreOptions { seams, ..opts(0) }).unwrap();
    s.append(Op::Add { n: 1 }).unwrap();
    let e = s.append(Op::Add { n: 2 }).unwrap_err();
    assert!(!e.is_refusal(), "{e}");
    assert!(matches!(
        s.append(Op::Add { n: 3 }),
        Err(StoreError::Poisoned(_))
    ));
    assert_eq!(
        s.state().total,
        1,
        "a record that is not durable is not applied"
    );
}

/// Durable records reach the snapshot thread in batches, but each snapshot
/// is still taken at the record it falls on: every `every` records,
/// whatever mix of single appends and sync points of several records led
/// there, and a final one on close for the rest.
#[test]
fn snapshots_fall_on_every_nth_record_however_the_records_were_synced() {
    for (every, batches) in [
        (5u64, vec![1usize, 2, 3, 1, 4, 1, 1, 6, 2, 2]),
        (100, vec![3; 50]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.wal");
        let mut s = CounterStore::create(&p, opts(every)).unwrap();
        let mut total = 0u64;
        for (i, size) in batches.iter().enumerate() {
            if i % 3 == 0 && *size == 1 {
                s.append(Op::Add { n: 1 }).unwrap();
            } else {
                for _ in 0..*size {
                    s.stage(Op::Add { n: 1 }).unwrap();
                }
                s.flush().unwrap();
            }
            total += *size as u64;
        }
        let (saved, warnings) = s.close_reporting().unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let mut want: Vec<u64> = (1..=total / every).map(|k| k * every).collect();
        if !total.is_multiple_of(every) {
            want.push(total);
        }
        let got: Vec<u64> = saved.iter().map(|n| n.seq).collect();
        assert_eq!(got, want, "every {every}");
        // The newest snapshot holds the whole run.
        let (report_state, report) = {
            let (s, report) = CounterStore::open(&p, opts(0)).unwrap();
            (s.state().clone(), report)
        };
        assert_eq!(report.snapshot.map(|n| n.seq), Some(total));
        assert_eq!((report_state.total, report.replayed), (total, 0));
    }
}

/// After each sync point the store hands back the lines it made durable:
/// one a record, in order, each exactly the bytes it added to the file, and
/// each line's data is the record's.
#[test]
fn the_lines_of_a_sync_point_are_the_bytes_it_added_one_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.wal");
    let mut s = CounterStore::create(&p, opts(0)).unwrap();
    assert_eq!(s.last_lines().count(), 0);
    let mut before = 0;
    for batch in [&[4u64][..], &[1, 22, 333], &[]] {
        for n in batch {
            s.stage(Op::Add { n: *n }).unwrap();
        }
        let flushed = s.flush().unwrap();
        let lines: Vec<Vec<u8>> = s.last_lines().map(<[u8]>::to_vec).collect();
        let file = std::fs::read(&p).unwrap();
        assert_eq!(lines.concat(), file[before..], "batch {batch:?}");
        before = file.len();
        assert_eq!(lines.len(), flushed.len());
        for (line, (_, op)) in lines.iter().zip(&flushed) {
            assert!(line.ends_with(b"\n") && line.iter().filter(|b| **b == b'\n').count() == 1);
            let data = tinyagent_store::wal::frame::data_of(line).unwrap();
            let Op::Add { n } = op else { panic!() };
            assert_eq!(data, format!("{{\"n\":{n}}}").as_bytes());
        }
    }
    s.close().unwrap();
}
