//! Fault injection on the real binary: a failed fdatasync (EIO), ENOSPC and
//! short writes on the log, through the in-process seam (`TINYAGENT_FAULTS`,
//! always available) and through strace's `-e inject=` (skipped with a
//! `SKIPPED:` line where strace is missing or may not trace, failed then
//! under `TINYAGENT_REQUIRE=strace`); faults on the
//! snapshot (strace); and a file-size limit (`ulimit -f`).
//!
//! A fault on the log stops the run with exit 1 and one line on stderr
//! naming it; every record the run reported saved (a `--json` event with a
//! `seq`) is intact in the log; a resume with the fault gone completes, and
//! no call that completed ran twice. A fault on a snapshot is a warning: the
//! log is the truth, the run goes on, and a later resume still works.

use crate::support::contract;
use crate::support::contract::assert_intact;
use crate::support::e2e;
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::require::{self, require};
use crate::support::torture::faults::{
    acknowledged, homes, ledger, run_args, run_cmd, write_script,
};
use crate::support::torture::panicked;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

const TURNS: u64 = 8;

/// Checks a run stopped by a fault on the log, then resumes it and checks
/// the finished run. `names` must appear in the one error line.
fn stopped_then_resumed(sb: &Sandbox, out: &Output, names: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr:\n{err}");
    assert!(!panicked(&err), "{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("tinyagent:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line:\n{err}");
    assert!(
        errors[0].contains(names),
        "{names:?} not in {:?}",
        errors[0]
    );
    assert!(
        errors[0].contains("run.wal"),
        "the line names the log: {}",
        errors[0]
    );
    let acked = acknowledged(&out.stdout);
    assert!(acked.len() >= 2, "the run got going before the fault");
    assert_intact(&sb.wal(), &acked);
    let before = ledger(sb);

    let mut resume = Command::new(bin());
    resume
        .current_dir(sb.dir.path())
        .args(["resume", "--json"])
        .arg(sb.wal())
        .stdin(Stdio::null())
        .env_remove("TINYAGENT_FAULTS");
    homes(&mut resume, sb);
    let out = output(resume);
    assert_eq!(out.status.code(), Some(0), "resume: {}", stderr(&out));
    let recs = contract::read(&sb.wal());
    contract::check_write_order(&recs);
    assert_eq!(
        recs.last().map(|r| r.data["status"].clone()),
        Some("completed".into())
    );
    // Everything acknowledged before the fault is still there, unchanged.
    for (seq, kind) in &acked {
        assert_eq!(&recs[(*seq - 1) as usize].kind, kind);
    }
    // Side effects: completed calls ran once, calls that never started not at
    // all, and nothing ran after the fault before the resume.
    let after = ledger(sb);
    assert_eq!(&after[..before.len()], &before[..]);
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &after {
        *times.entry(l.as_str()).or_default() += 1;
    }
    for r in recs.iter().filter(|r| r.kind == "tool.result") {
        let id = r.data["call_id"].as_str().unwrap();
        let n = times.get(id).copied().unwrap_or(0);
        if r.data["interrupted"] == true {
            assert!(n <= 1, "{id} interrupted but ran {n} times");
        } else {
            assert_eq!(n, 1, "{id} completed but ran {n} times");
        }
    }
    assert!(times.values().all(|n| *n == 1), "{times:?}");
}

/// Bug: the binary ignored `TINYAGENT_FAULTS`; it must reach the log writer.
#[test]
fn tinyagent_faults_env_reaches_the_binary() {
    let sb = Sandbox::new();
    let script = write_script(&sb, TURNS);
    let mut cmd = run_cmd(&sb, &script);
    cmd.env("TINYAGENT_FAULTS", "sync:4:EIO");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let other = Sandbox::new();
    let mut cmd = run_cmd(&other, &script);
    cmd.env("TINYAGENT_FAULTS", "sync:nope");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(2), "a bad plan is refused");
    assert!(stderr(&out).contains("bad fault plan"), "{}", stderr(&out));
}

#[test]
fn seam_faults_on_the_log_stop_cleanly_and_resume_completes() {
    for (spec, names) in [
        ("sync:5:EIO", "Input/output error"),
        ("sync:12:EIO", "Input/output error"),
        ("write:6:ENOSPC", "No space left"),
        ("write:9:short", "short write"),
        ("write:7:EFBIG", "File too large"),
        ("sync:8:EDQUOT", "quota"),
    ] {
        eprintln!("fault {spec}");
        let sb = Sandbox::new();
        let script = write_script(&sb, TURNS);
        let mut cmd = run_cmd(&sb, &script);
        cmd.env("TINYAGENT_FAULTS", spec);
        stopped_then_resumed(&sb, &output(cmd), names);
    }
}

fn strace_cmd(sb: &Sandbox, script: &std::path::Path, filter: &[&str]) -> Command {
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-o", "/dev/null"])
        .args(filter)
        .arg("--")
        .arg(bin())
        .args(run_args(sb, script))
        .current_dir(sb.dir.path())
        .stdin(Stdio::null())
        .env_remove("TINYAGENT_FAULTS");
    homes(&mut c, sb);
    c
}

#[test]
fn strace_faults_on_the_log_stop_cleanly_and_resume_completes() {
    if require("strace", "strace_faults_on_the_log", require::strace()).is_none() {
        return;
    }
    for (inject, names) in [
        ("fdatasync:error=EIO:when=5", "Input/output error"),
        ("write:error=ENOSPC:when=6", "No space left"),
        ("write:error=EIO:when=10", "Input/output error"),
        // The write is skipped and claims 10 bytes: a lying short write.
        ("write:retval=10:when=7", "short write"),
    ] {
        eprintln!("inject {inject}");
        let sb = Sandbox::new();
        let script = write_script(&sb, TURNS);
        let wal = sb.wal().display().to_string();
        let inject = format!("inject={inject}");
        let filter = ["-P", &wal, "-e", "trace=write,fdatasync", "-e", &inject];
        let out = output(strace_cmd(&sb, &script, &filter));
        stopped_then_resumed(&sb, &out, names);
    }
}

#[test]
fn strace_faults_on_the_snapshot_are_warnings_and_resume_works() {
    if require("strace", "strace_faults_on_the_snapshot", require::strace()).is_none() {
        return;
    }
    // fsync: the log uses fdatasync, so after the first (directory) fsync
    // only the snapshot's syncs fail. rename: only snapshots rename.
    for (inject, names) in [
        ("fsync:error=EIO:when=2+", "Input/output error"),
        ("rename:error=ENOSPC", "No space left"),
        ("fsync:error=ENOSPC:when=2+", "No space left"),
    ] {
        eprintln!("inject {inject}");
        let sb = Sandbox::new();
        let script = write_script(&sb, TURNS);
        // A home that exists, as on a machine that ran tinyagent before:
        // recording the run's workspace there then syncs only the file's
        // data (fdatasync), so the fsyncs counted are the log directory's
        // (the first) and the snapshot's.
        {
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(sb.home())
                .unwrap();
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(sb.home().join("endpoints"))
                .unwrap();
        }
        let (trace, inject) = (
            format!("trace={}", inject.split(':').next().unwrap()),
            format!("inject={inject}"),
        );
        let mut cmd = strace_cmd(&sb, &script, &["-e", &trace, "-e", &inject]);
        // Killed after the fifth step: the resume must not trust a broken snapshot.
        cmd.env("TINYAGENT_CRASH_AFTER", "step.saved:5");
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(out.status.signal(), Some(9), "{err}");
        let warning = err.lines().find(|l| l.contains("snapshot failed"));
        assert!(
            warning.is_some_and(|w| w.contains(names)),
            "{names:?}:\n{err}"
        );
        assert_intact(&sb.wal(), &acknowledged(&out.stdout));
        let out = output(sb.resume_cmd());
        assert_eq!(out.status.code(), Some(0), "resume: {}", stderr(&out));
        let recs = contract::read(&sb.wal());
        contract::check_write_order(&recs);
        let want: Vec<String> = (1..=TURNS).map(|n| format!("s{n}")).collect();
        assert_eq!(ledger(&sb), want, "each call ran exactly once");
        let stray = e2e::all_files(sb.dir.path())
            .into_iter()
            .any(|p| p.to_string_lossy().contains(".snapshot.tmp-"));
        assert!(
            !stray,
            "a stray snapshot temp file was left: {:?}",
            e2e::all_files(sb.dir.path())
        );
    }
}

/// Bug: past `ulimit -f` the process died of SIGXFSZ without a word (the
/// snapshot writer usually hit the limit first). Now the write fails with
/// EFBIG: the run stops with exit 1 and a line naming it, and a resume
/// without the limit completes.
#[test]
fn ulimit_f_stops_cleanly_instead_of_dying_of_sigxfsz() {
    // Limits in 512-byte blocks: the first run ends at different records.
    for blocks in [5, 6, 8, 10, 14] {
        eprintln!("ulimit -f {blocks}");
        let sb = Sandbox::new();
        let script = write_script(&sb, TURNS);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -f {blocks} && exec \"$0\" \"$@\""))
            .arg(bin())
            .args(run_args(&sb, &script))
            .current_dir(sb.dir.path())
            .stdin(Stdio::null());
        homes(&mut cmd, &sb);
        let out = output(cmd);
        assert_eq!(
            out.status.signal(),
            None,
            "died of a signal: {}",
            stderr(&out)
        );
        let err = stderr(&out);
        let names = if err.contains("short write") {
            "short write"
        } else {
            "File too large"
        };
        stopped_then_resumed(&sb, &out, names);
    }
}

/// Bug: the process exited while the background compactor was still writing
/// a snapshot, leaving a `.snapshot.tmp-*` file behind after a clean run.
#[test]
fn no_snapshot_temp_file_is_left_after_a_clean_exit() {
    for _ in 0..4 {
        let sb = Sandbox::new();
        let script = write_script(&sb, 4);
        let mut args = run_args(&sb, &script);
        let at = args.iter().position(|a| a == "--snapshot-every").unwrap();
        args[at + 1] = "1".into();
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .current_dir(sb.dir.path())
            .stdin(Stdio::null());
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let files = e2e::all_files(sb.dir.path());
        assert!(
            !files
                .iter()
                .any(|p| p.to_string_lossy().contains(".snapshot.tmp-")),
            "{files:?}"
        );
    }
}
