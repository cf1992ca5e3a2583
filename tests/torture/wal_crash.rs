//! Real processes: a writer child killed with SIGKILL at random moments, the
//! lock across processes, and faults injected from outside (TINYAGENT_FAULTS,
//! strace). The child is this test binary re-run with `CHILD_WAL` set.

use crate::support::require::{self, require};
use crate::support::wal::*;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use tinyagent::store::{Store, StoreError, StoreOptions, TestSeams, load};
use tinyagent_store::wal::fs::FaultPlan;

const CHILD_WAL: &str = "TINYAGENT_TEST_CHILD_WAL";
const CHILD_COUNT: &str = "TINYAGENT_TEST_CHILD_COUNT";
const CHILD_SNAP: &str = "TINYAGENT_TEST_CHILD_SNAPSHOT_EVERY";
const CHILD_HOLD: &str = "TINYAGENT_TEST_CHILD_HOLD";

/// The child's body: open (or create) the log and append `ev(seq)` records,
/// printing `SAVED <seq>` after each append returns.
#[test]
fn child_writer() {
    let Ok(path) = std::env::var(CHILD_WAL) else {
        return;
    };
    std::process::exit(child_main(Path::new(&path)));
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn child_main(path: &Path) -> i32 {
    // The harness has printed "test child_writer ... " without a newline.
    println!();
    let opts = StoreOptions {
        snapshot_every: env_u64(CHILD_SNAP, 0),
        snapshot_hook: None,
        seams: TestSeams {
            faults: FaultPlan::from_env().unwrap(),
            ..TestSeams::default()
        },
        on_sync: None,
    };
    let opened = if path.exists() {
        Store::open(path, opts).map(|(s, _)| s)
    } else {
        Store::create(path, opts)
    };
    let mut store = match opened {
        Ok(s) => s,
        Err(e) => {
            let code = if e.is_refusal() { 2 } else { 1 };
            println!("ERROR {code} {e}");
            return code;
        }
    };
    println!("OPENED {}", store.next_seq());
    for _ in 0..env_u64(CHILD_COUNT, u64::MAX) {
        let seq = store.next_seq();
        match store.append(ev(seq)) {
            Ok(s) => println!("SAVED {s}"),
            Err(e) => {
                println!("ERROR {} {e}", if e.is_refusal() { 2 } else { 1 });
                if let Err(again) = store.append(ev(seq)) {
                    println!("AFTER {again}");
                }
                return 1;
            }
        }
    }
    if std::env::var_os(CHILD_HOLD).is_some() {
        println!("READY");
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }
    store.close().unwrap();
    0
}

fn child(path: &Path, envs: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "wal_crash::child_writer",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_WAL, path)
    .env_remove("TINYAGENT_FAULTS")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

fn saved(line: &str) -> Option<u64> {
    line.strip_prefix("SAVED ")
        .and_then(|s| s.trim().parse().ok())
}

/// Checks that the log reads without corruption, that every record is the
/// one the child wrote for its seq and that every reported seq is there.
fn check_log(path: &Path, reported: &[u64]) -> u64 {
    let loaded = load(path).unwrap();
    assert_eq!(loaded.scan.corruption, None);
    let (_, frames) = scan_all(path);
    for f in &frames {
        assert_eq!(f.event, ev(f.seq));
    }
    let last = frames.last().map_or(0, |f| f.seq);
    if let Some(max) = reported.iter().max() {
        assert!(
            *max <= last,
            "seq {max} was reported saved but the log ends at {last}"
        );
    }
    last
}

#[test]
fn a_writer_killed_at_random_moments_loses_nothing_it_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("k.wal");
    write_log(&p, 1);
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut all_reported = Vec::new();
    for round in 0..20 {
        let mut c: Child = child(&p, &[(CHILD_SNAP, "4".into())]).spawn().unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let want = rng.usize(0..25);
        let mut reported = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            assert!(!line.starts_with("ERROR"), "round {round}: {line}");
            if let Some(s) = saved(&line) {
                reported.push(s);
                if reported.len() >= want {
                    break;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(rng.u64(0..3000)));
        c.kill().unwrap();
        c.wait().unwrap();
        // Lines already in the pipe were printed after their append returned.
        reported.extend(lines.map_while(Result::ok).filter_map(|l| saved(&l)));
        let last = check_log(&p, &reported);
        all_reported.extend(reported);
        assert!(last >= 1, "round {round}");
    }
    let (store, _) = Store::open(&p, StoreOptions::default()).unwrap();
    let (_, frames) = scan_all(&p);
    let last = frames.last().unwrap().seq;
    assert_eq!(
        store.state().records,
        last,
        "snapshot + replay = every record"
    );
    for s in &all_reported {
        assert!(*s <= last);
    }
    store.close().unwrap();
    assert!(files_with(dir.path(), ".snapshot.tmp-").is_empty());
    println!(
        "{last} records, {} reported, {} torn tails cut",
        all_reported.len(),
        files_with(dir.path(), ".torn-").len()
    );
    independent_check(&std::fs::read(&p).unwrap());
}

#[test]
fn the_lock_holds_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("l.wal");
    write_log(&p, 1);
    // Parent holds it: the child is refused with exit code 2.
    let (store, _) = Store::open(&p, StoreOptions::default()).unwrap();
    let out = child(&p, &[(CHILD_COUNT, "3".into())]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("ERROR 2") && text.contains("in use"),
        "{text}"
    );
    store.close().unwrap();
    // Child holds it: the parent is refused until the child exits.
    let mut c = child(&p, &[(CHILD_COUNT, "2".into()), (CHILD_HOLD, "1".into())])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l == "READY"));
    let e = Store::open(&p, StoreOptions::default()).err().unwrap();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    drop(c.stdin.take());
    assert!(c.wait().unwrap().success());
    let (store, _) = Store::open(&p, StoreOptions::default()).unwrap();
    assert_eq!(store.state().records, 3);
    assert_eq!(mode(&p), 0o600);
}

fn run_lines(mut cmd: Command) -> (Option<i32>, Vec<String>, String) {
    let out = cmd.output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts the child saved exactly `saved_n` records, then failed stop with
/// an error containing `expect`, and that the log is intact.
fn assert_fail_stop(path: &Path, code: Option<i32>, lines: &[String], saved_n: u64, expect: &str) {
    let got: Vec<u64> = lines.iter().filter_map(|l| saved(l)).collect();
    assert_eq!(got, (1..=saved_n).collect::<Vec<_>>(), "{lines:?}");
    let err = lines
        .iter()
        .find(|l| l.starts_with("ERROR"))
        .expect("an error line");
    assert!(err.starts_with("ERROR 1 ") && err.contains(expect), "{err}");
    let after = lines
        .iter()
        .find(|l| l.starts_with("AFTER"))
        .expect("a second append");
    assert!(
        after.contains("stopped after an earlier failure") && after.contains(expect),
        "{after}"
    );
    assert_eq!(code, Some(1));
    check_log(path, &got);
}

#[test]
fn faults_from_the_environment_stop_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.wal");
    let mut cmd = child(&p, &[(CHILD_COUNT, "6".into())]);
    cmd.env("TINYAGENT_FAULTS", "write:3:ENOSPC");
    let (code, lines, _) = run_lines(cmd);
    assert_fail_stop(&p, code, &lines, 2, "No space left on device");
    assert_eq!(scan_all(&p).0.records, 2);
}

#[test]
fn strace_injected_fdatasync_failure_stops_the_writer() {
    let test = "strace_injected_fdatasync_failure_stops_the_writer";
    if require("strace", test, require::strace()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.wal");
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("strace");
    cmd.args([
        "-f",
        "-o",
        "/dev/null",
        "-e",
        "trace=fdatasync",
        "-e",
        "inject=fdatasync:error=EIO:when=3",
    ])
    .arg(exe)
    .args([
        "wal_crash::child_writer",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_WAL, &p)
    .env(CHILD_COUNT, "6")
    .env_remove("TINYAGENT_FAULTS");
    let (code, lines, stderr) = run_lines(cmd);
    if !lines.iter().any(|l| l.starts_with("OPENED")) {
        let why = format!("strace could not run the child here: {stderr}");
        return require::missing("strace", test, &why);
    }
    assert_fail_stop(&p, code, &lines, 2, "Input/output error");
    assert!(lines.iter().any(|l| l.contains("fdatasync")), "{lines:?}");
}
