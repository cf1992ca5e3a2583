//! Peak memory of opening a log beside multi-gigabyte junk: a 3 GiB torn tail
//! (a valid log extended with `set_len`, so the tail is a hole of zeros and
//! costs no disk) and a 3 GiB sparse `.snapshot`.
//!
//! Each case runs in a fresh child process (this test binary run again with
//! `MEM_CHILD` set) that reports its peak resident set (`VmHWM` in
//! `/proc/self/status`); the parent asserts it. The contract bounds a reader
//! by the state plus 64 MB; the state here is a few bytes.

use super::kit::{Op, Sum, opts};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tinyagent_store::snapshot::{backup_path, snapshot_path};
use tinyagent_store::{Store, load, load_with};

const GIB: u64 = 1 << 30;
const JUNK: u64 = 3 * GIB;
/// Peak RSS allowed for a whole child process (its own baseline included).
const PEAK_LIMIT_KIB: u64 = 80 * 1024;

fn log_with(dir: &Path, every: u64) -> PathBuf {
    let p = dir.join("m.wal");
    let mut s = Store::<Op, Sum>::create(&p, opts(every)).unwrap();
    for n in 1..=6 {
        s.append(Op::Add { n }).unwrap();
    }
    s.close().unwrap();
    p
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `case` in a child process; returns its peak RSS in KiB.
fn peak_of(case: &str) -> u64 {
    let started = std::time::Instant::now();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "bounded_memory::child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MEM_CHILD", case)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{case}: child ran {:?}: {stdout}", started.elapsed());
    assert!(
        out.status.success(),
        "child {case} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = stdout
        .split("VmHWM_KIB=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no VmHWM from the child: {stdout}"));
    value.parse().unwrap()
}

/// A valid log of six records followed by 3 GiB of zeros (a hole): open cuts
/// it, keeps the bytes in `.torn-<offset>` (sparse, byte for byte), and a
/// read-only load reports the same torn tail.
fn torn_tail_case() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), 0);
    let good = std::fs::metadata(&p).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(good + JUNK)
        .unwrap();
    let loaded = load::<Op, Sum>(&p).unwrap();
    let tail = loaded.scan.torn_tail.expect("a torn tail");
    assert_eq!((tail.offset, tail.bytes), (good, JUNK));
    assert_eq!(loaded.state.total, 21);

    let (s, report) = Store::<Op, Sum>::open(&p, opts(0)).unwrap();
    assert_eq!(s.state().total, 21);
    let (tail, kept) = report.torn_tail.expect("the tail is cut");
    assert_eq!((tail.offset, tail.bytes), (good, JUNK));
    drop(s);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), good);
    // Measured before the checks below, so a failing run still reports it.
    println!("VmHWM_KIB={}", vm_hwm_kib());
    let meta = std::fs::metadata(&kept).unwrap();
    assert_eq!(meta.len(), JUNK);
    assert!(
        meta.blocks() * 512 < 16 << 20,
        "the kept tail is a hole and stays one ({} blocks)",
        meta.blocks()
    );
}

/// `.snapshot` is a valid snapshot extended to 3 GiB: it is refused before
/// it is read (the `.bak` is used), in bounded memory.
fn huge_snapshot_case() {
    let dir = tempfile::tempdir().unwrap();
    let p = log_with(dir.path(), 2);
    let snap = snapshot_path(&p);
    assert!(backup_path(&p).exists());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&snap)
        .unwrap()
        .set_len(JUNK)
        .unwrap();
    let (s, report) = Store::<Op, Sum>::open(&p, opts(0)).unwrap();
    assert_eq!(s.state().total, 21);
    assert_eq!(report.snapshot.map(|s| s.path), Some(backup_path(&p)));
    assert!(
        report.warnings.iter().any(|w| w.contains(".snapshot")),
        "{:?}",
        report.warnings
    );
    drop(s);
    let l = load_with::<Op, Sum>(&p, true).unwrap();
    assert_eq!(l.state.total, 21);
    let l = load::<Op, Sum>(&p).unwrap();
    assert_eq!(l.state.total, 21);
    println!("VmHWM_KIB={}", vm_hwm_kib());
}

/// The child's side: runs the case `MEM_CHILD` names (and nothing when it is
/// unset, as in a normal test run).
#[test]
fn child_entry() {
    match std::env::var("MEM_CHILD").as_deref() {
        Ok("torn-tail") => torn_tail_case(),
        Ok("huge-snapshot") => huge_snapshot_case(),
        _ => {}
    }
}

#[test]
fn a_3_gib_torn_tail_is_cut_and_kept_in_bounded_memory() {
    let peak = peak_of("torn-tail");
    eprintln!("torn tail: peak RSS {peak} KiB");
    assert!(peak < PEAK_LIMIT_KIB, "peak RSS {peak} KiB");
}

#[test]
fn a_3_gib_sparse_snapshot_is_refused_in_bounded_memory() {
    let peak = peak_of("huge-snapshot");
    eprintln!("huge snapshot: peak RSS {peak} KiB");
    assert!(peak < PEAK_LIMIT_KIB, "peak RSS {peak} KiB");
}
