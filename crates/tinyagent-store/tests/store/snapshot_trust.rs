//! Snapshots are believed only as far as they are checked: a FIFO, a
//! symlink or a header that is not bound to its body is skipped with a
//! warning, and the state is the one a full replay gives.

use super::kit::{Op, Sum, opts};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use tinyagent_store::snapshot::{backup_path, snapshot_path};
use tinyagent_store::{OpenReport, Store, load, load_with};

/// The state of the six records 1..=6, as a full replay folds them.
const FULL: Sum = Sum {
    total: 21,
    applied: 6,
};

/// Six records, snapshots every 2: `.snapshot` covers seq 6, `.bak` seq 4.
fn log_with_snapshots(dir: &Path) -> PathBuf {
    let p = dir.join("t.wal");
    let mut s = Store::<Op, Sum>::create(&p, opts(2)).unwrap();
    for n in 1..=6 {
        s.append(Op::Add { n }).unwrap();
    }
    s.close().unwrap();
    assert!(snapshot_path(&p).exists() && backup_path(&p).exists());
    p
}

/// Opens the log on another thread and gives up after 30 s (a FIFO would
/// otherwise hang the test forever).
fn open_within_30s(p: &Path) -> (Sum, OpenReport) {
    let (tx, rx) = mpsc::channel();
    let path = p.to_path_buf();
    std::thread::spawn(move || {
        // Another test of this binary may be forking a child at this very
        // moment, which holds every open lock until it execs: wait for it,
        // as `tinyagent resume` does.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let (s, report) = loop {
            match Store::<Op, Sum>::open(&path, opts(0)) {
                Err(tinyagent_store::StoreError::Locked { .. })
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        };
        let _ = tx.send((s.state().clone(), report));
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("open did not finish within 30 s")
}

fn split(bytes: &[u8]) -> (serde_json::Value, Vec<u8>) {
    let nl = bytes.iter().position(|b| *b == b'\n').unwrap();
    (
        serde_json::from_slice(&bytes[..nl]).unwrap(),
        bytes[nl + 1..].to_vec(),
    )
}

fn join(header: &serde_json::Value, body: &[u8]) -> Vec<u8> {
    let mut out = serde_json::to_vec(header).unwrap();
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

fn assert_warned(report: &OpenReport, path: &Path) {
    let name = path.display().to_string();
    assert!(
        report.warnings.iter().any(|w| w.contains(&name)),
        "no warning names {name}: {:?}",
        report.warnings
    );
}

#[test]
fn a_fifo_as_the_snapshot_never_hangs_and_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with_snapshots(dir.path());
    let snap = snapshot_path(&p);
    std::fs::remove_file(&snap).unwrap();
    nix::unistd::mkfifo(&snap, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(state, FULL);
    assert_eq!(
        report.snapshot.clone().map(|s| s.path),
        Some(backup_path(&p))
    );
    assert_eq!(report.replayed, 2);
    assert_warned(&report, &snap);

    // Both a FIFO: a full replay; the read-only load does not hang either.
    let bak = backup_path(&p);
    std::fs::remove_file(&bak).unwrap();
    nix::unistd::mkfifo(&bak, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(
        (state, report.snapshot.clone(), report.replayed),
        (FULL, None, 6)
    );
    assert_warned(&report, &bak);
    let l = load_with::<Op, Sum>(&p, true).unwrap();
    assert_eq!((l.state, l.snapshot), (FULL, None));
    assert!(load::<Op, Sum>(&p).unwrap().snapshot.is_none());
}

#[test]
fn a_symlinked_snapshot_is_refused_even_when_it_points_at_a_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with_snapshots(dir.path());
    let snap = snapshot_path(&p);
    let elsewhere = dir.path().join("elsewhere.snapshot");
    std::fs::rename(&snap, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &snap).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(state, FULL);
    assert_eq!(
        report.snapshot.clone().map(|s| s.path),
        Some(backup_path(&p))
    );
    assert_warned(&report, &snap);

    // A symlink to /dev/zero (endless) is refused before anything is read.
    std::fs::remove_file(&snap).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &snap).unwrap();
    let bak = backup_path(&p);
    std::fs::remove_file(&bak).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &bak).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(
        (state, report.snapshot.clone(), report.replayed),
        (FULL, None, 6)
    );
    assert_warned(&report, &snap);
    assert_warned(&report, &bak);
    let l = load_with::<Op, Sum>(&p, true).unwrap();
    assert_eq!((l.state, l.snapshot), (FULL, None));
    assert!(load::<Op, Sum>(&p).unwrap().snapshot.is_none());
}

#[test]
fn a_directory_as_the_snapshot_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with_snapshots(dir.path());
    let snap = snapshot_path(&p);
    std::fs::remove_file(&snap).unwrap();
    std::fs::create_dir(&snap).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(state, FULL);
    assert_eq!(
        report.snapshot.clone().map(|s| s.path),
        Some(backup_path(&p))
    );
    assert_warned(&report, &snap);
}

/// The newer header (seq 6) over the older body (seq 4): with the header's
/// own body length and crc the body check refuses it; with the older body's
/// length and crc copied in too, only a checksum binding the header's
/// seq/offset/crc to the body can.
#[test]
fn a_newer_header_over_an_older_body_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with_snapshots(dir.path());
    let snap = snapshot_path(&p);
    let bak = backup_path(&p);
    let (new_header, _) = split(&std::fs::read(&snap).unwrap());
    let (old_header, old_body) = split(&std::fs::read(&bak).unwrap());
    assert_eq!(
        (new_header["seq"].as_u64(), old_header["seq"].as_u64()),
        (Some(6), Some(4))
    );
    std::fs::remove_file(&bak).unwrap();

    std::fs::write(&snap, join(&new_header, &old_body)).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(
        (state, report.snapshot.clone(), report.replayed),
        (FULL, None, 6)
    );
    assert_warned(&report, &snap);

    let mut forged = new_header.clone();
    forged["body_len"] = old_header["body_len"].clone();
    forged["body_crc"] = old_header["body_crc"].clone();
    std::fs::write(&snap, join(&forged, &old_body)).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(
        (state, report.snapshot.clone(), report.replayed),
        (FULL, None, 6)
    );
    assert_warned(&report, &snap);
    let l = load_with::<Op, Sum>(&p, true).unwrap();
    assert_eq!((l.state, l.snapshot), (FULL, None));
    assert!(load::<Op, Sum>(&p).unwrap().snapshot.is_none());

    // The older header edited to claim the newer record: refused too.
    let mut claimed = old_header.clone();
    for key in ["seq", "offset", "record_offset", "crc"] {
        claimed[key] = new_header[key].clone();
    }
    std::fs::write(&snap, join(&claimed, &old_body)).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(
        (state, report.snapshot.clone(), report.replayed),
        (FULL, None, 6)
    );
    assert_warned(&report, &snap);
}

/// A version-1 header written before the binding existed (no `header_crc`)
/// is still read, with the body check it always had.
#[test]
fn a_snapshot_without_the_binding_from_an_older_binary_is_still_used() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with_snapshots(dir.path());
    let snap = snapshot_path(&p);
    let (mut header, body) = split(&std::fs::read(&snap).unwrap());
    assert!(header.get("header_crc").is_some(), "{header}");
    header.as_object_mut().unwrap().remove("header_crc");
    assert_eq!(header["version"].as_u64(), Some(1));
    std::fs::write(&snap, join(&header, &body)).unwrap();
    let (state, report) = open_within_30s(&p);
    assert_eq!(state, FULL);
    assert_eq!(
        report.snapshot.clone().map(|s| (s.seq, s.path)),
        Some((6, snap))
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn stray_temp_files_go_at_open_but_a_reader_leaves_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with_snapshots(dir.path());
    let strays = [
        dir.path().join("t.wal.snapshot.tmp-4242-0"),
        dir.path().join("t.wal.snapshot.tmp-4242-1.bak"),
    ];
    let other = dir.path().join("u.wal.snapshot.tmp-4242-0");
    for f in strays.iter().chain([&other]) {
        std::fs::write(f, b"half a snapshot").unwrap();
    }
    // A reader takes no lock, so a live writer may own them: they stay.
    load_with::<Op, Sum>(&p, true).unwrap();
    assert!(strays.iter().all(|f| f.exists()));
    let (state, report) = open_within_30s(&p);
    assert_eq!(state, FULL);
    assert!(strays.iter().all(|f| !f.exists()) && other.exists());
    for f in &strays {
        assert_warned(&report, f);
    }
}
