//! The kill-and-resume driver: runs the real binary, SIGKILLs it at a seeded
//! random moment, resumes, and repeats until the run finishes.

use crate::support::e2e::Sandbox;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How one attempt ended.
#[derive(Debug)]
pub enum Ending {
    /// We killed it.
    Killed,
    /// It exited by itself.
    Exited(ExitStatus),
}

/// Counts of one torture round.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub attempts: u64,
    pub kills: u64,
    /// Kills before the first record existed (the run had to start over).
    pub restarts: u64,
    /// Resumes that found a torn tail to cut.
    pub torn_tails: u64,
}

/// Waits for `child` until `deadline`; kills it with SIGKILL if it is still
/// running then.
pub fn kill_at(child: &mut Child, after: Duration) -> Ending {
    let deadline = Instant::now() + after;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Ending::Exited(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let status = child.wait().expect("wait for killed child");
            // It may have exited on its own just before the kill.
            return if status.signal() == Some(9) {
                Ending::Killed
            } else {
                Ending::Exited(status)
            };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Stdout and stderr of an attempt go to numbered files in the sandbox.
pub fn to_files(sb: &Sandbox, cmd: &mut Command, attempt: u64) {
    let out = File::create(sb.path(&format!("attempt-{attempt}.out"))).expect("stdout file");
    let err = File::create(sb.path(&format!("attempt-{attempt}.err"))).expect("stderr file");
    cmd.stdout(out).stderr(err);
}

/// The stderr of an attempt.
pub fn attempt_stderr(sb: &Sandbox, attempt: u64) -> String {
    std::fs::read_to_string(sb.path(&format!("attempt-{attempt}.err"))).unwrap_or_default()
}

/// True when the log holds at least one complete line.
pub fn has_record(sb: &Sandbox) -> bool {
    std::fs::read(sb.wal()).is_ok_and(|b| b.contains(&b'\n'))
}

/// Removes a log that never got its first record, and its side files.
pub fn clear_log(sb: &Sandbox) {
    for e in std::fs::read_dir(sb.dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("run.wal") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A kill delay: a fifth land in the first 40 ms (start-up, open, replay,
/// recovery), the rest anywhere in the next 400 ms.
pub fn kill_delay(rng: &mut fastrand::Rng) -> Duration {
    if rng.u8(0..5) == 0 {
        Duration::from_millis(rng.u64(0..40))
    } else {
        Duration::from_millis(rng.u64(40..440))
    }
}

/// Runs `first` (a `run` command), then `resume` until an attempt exits by
/// itself, killing the first `kills` attempts at random moments. `make_run`
/// builds a fresh `run` command (used again when a kill came before the
/// first record). Panics on any exit but 0 after the kills, with its stderr.
pub fn torture(
    sb: &Sandbox,
    mut make_run: impl FnMut() -> Command,
    kills: u64,
    rng: &mut fastrand::Rng,
) -> Tally {
    let mut t = Tally::default();
    let mut started = false;
    loop {
        t.attempts += 1;
        let mut cmd = if started {
            sb.resume_cmd()
        } else {
            clear_log(sb);
            make_run()
        };
        cmd.arg("--json");
        to_files(sb, &mut cmd, t.attempts);
        let mut child = cmd.spawn().expect("spawn tinyagent");
        let ending = if t.kills < kills {
            kill_at(&mut child, kill_delay(rng))
        } else {
            Ending::Exited(child.wait().expect("wait"))
        };
        let err = attempt_stderr(sb, t.attempts);
        assert!(
            !crate::support::torture::panicked(&err),
            "attempt {} panicked:\n{err}",
            t.attempts
        );
        if err.contains("set aside") || err.contains("torn") {
            t.torn_tails += 1;
        }
        match ending {
            Ending::Killed => {
                t.kills += 1;
                if !started && !has_record(sb) {
                    t.restarts += 1;
                } else {
                    started = true;
                }
            }
            Ending::Exited(status) => {
                assert_eq!(
                    status.code(),
                    Some(0),
                    "attempt {} ({}) exited {status:?}:\n{err}",
                    t.attempts,
                    if started { "resume" } else { "run" }
                );
                return t;
            }
        }
    }
}
