//! The process group of a foreground command: started held, recorded, then
//! released; stopped by a signal with a grace period; found again after a
//! hard kill of the agent.
//!
//! A foreground command is started as `bash -c` of a two-line preamble and
//! the script: the preamble reads one line from stdin before anything of the
//! script runs. The agent first makes the group's identity (leader pid =
//! group id, and the leader's start time) durable through [`Launch`], then
//! writes that line. If the agent dies before, the read sees end-of-file and
//! the command exits without running. The leader also gets SIGKILL as its
//! parent-death signal, so while the agent lives its foreground tools die
//! with it (the sandbox adds bubblewrap's `--die-with-parent` and its pid
//! namespace, which take the whole tree).

use super::host::{self, ProcStat, proc_stat};
use nix::sys::signal::Signal;
use std::io::{self, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Exit code of a held command released by end-of-file (the agent died).
pub const NOT_RELEASED_EXIT: i32 = 97;

/// What is recorded of a foreground command's group before it may act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessGroup {
    /// The leader's pid, which is also the group id.
    pub pid: u32,
    /// The leader's start time (clock ticks since boot).
    pub start_time: Option<u64>,
}

/// Makes a group's identity durable before its command runs.
pub trait Launch {
    /// `Err` stops the call before the command runs.
    fn record(&self, group: &ProcessGroup) -> Result<(), String>;
}

/// For tools run outside an agent (tests, benchmarks): nothing is recorded.
pub struct Unrecorded;

impl Launch for Unrecorded {
    fn record(&self, _: &ProcessGroup) -> Result<(), String> {
        Ok(())
    }
}

/// The script with the preamble that holds it until it is released.
pub fn held_script(script: &str) -> String {
    format!("read -r _ || exit {NOT_RELEASED_EXIT}\nexec </dev/null\n{script}")
}

/// A spawned command waiting for [`Held::release`].
pub struct Held {
    pub child: Child,
    go: Option<ChildStdin>,
    pub group: ProcessGroup,
}

impl Held {
    /// Takes the release pipe without releasing: dropping it makes the
    /// command exit unrun.
    pub fn release_pipe(&mut self) -> Option<ChildStdin> {
        self.go.take()
    }

    /// Lets the command run.
    pub fn release(&mut self) -> io::Result<()> {
        let mut go = self
            .go
            .take()
            .ok_or_else(|| io::Error::other("released twice"))?;
        go.write_all(b"go\n")
    }
}

/// Spawns `cmd` (built from [`held_script`]) in a new process group with the
/// parent-death signal set, its stdin the release pipe.
pub fn spawn_held(mut cmd: Command) -> io::Result<Held> {
    cmd.stdin(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    die_with_agent(&mut cmd);
    let mut child = cmd.spawn()?;
    let go = child.stdin.take();
    let pid = child.id();
    Ok(Held {
        child,
        go,
        group: ProcessGroup {
            pid,
            start_time: host::proc_start_time(pid),
        },
    })
}

/// Asks the kernel to SIGKILL the child when the thread that spawned it
/// exits (the agent's tool thread waits for the command, so this is when
/// the agent dies). If the agent is already gone, the child exits at once.
#[allow(unsafe_code)]
pub fn die_with_agent(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid); it allocates
    // nothing and touches no lock.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            if nix::unistd::getppid() != parent {
                return Err(io::Error::other("the agent is gone"));
            }
            Ok(())
        });
    }
}

/// Sends `sig` to the group, then SIGKILL once `grace` has passed or
/// `cut_short` says so, whichever comes first; `gone` waits up to the given
/// time and says whether the group leader has been reaped.
pub fn stop(
    pgid: u32,
    sig: Signal,
    grace: Duration,
    mut gone: impl FnMut(Duration) -> bool,
    cut_short: impl Fn() -> bool,
) {
    host::signal_group(pgid, sig);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !cut_short() {
        if gone(Duration::from_millis(20)) {
            break;
        }
    }
    host::kill_group(pgid);
}

/// The live (not zombie) processes in the recorded group of a foreground
/// command: members of group `g.pid` started no earlier than its leader. A
/// group id is not reused while any member of the group lives, and a new
/// group with the same id has a leader started later: when such a leader is
/// alive, the group found is not the recorded one and nothing is returned.
pub fn survivors(g: &ProcessGroup) -> Vec<ProcStat> {
    let Some(start) = g.start_time else {
        // Without a start time a recycled pid cannot be told apart: never
        // touch it.
        return Vec::new();
    };
    if let Some(leader) = proc_stat(g.pid)
        && leader.pgid == g.pid
        && leader.start_time != Some(start)
        && !leader.exited
    {
        return Vec::new();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .filter(|p| p.pgid == g.pid && p.start_time.is_some_and(|t| t >= start) && !p.exited)
        .collect()
}

/// SIGKILLs the recorded group's survivors (see [`survivors`]); gives the
/// ones that were running.
pub fn kill_survivors(g: &ProcessGroup) -> Vec<ProcStat> {
    let found = survivors(g);
    if !found.is_empty() {
        host::kill_group(g.pid);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_command_does_not_run_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let script = held_script(&format!("touch '{}'", marker.display()));
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script);
        let mut held = spawn_held(cmd).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists(), "ran before it was released");
        held.release().unwrap();
        assert!(held.child.wait().unwrap().success());
        assert!(marker.exists());
    }

    #[test]
    fn a_held_command_whose_release_pipe_closes_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let script = held_script(&format!("touch '{}'", marker.display()));
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script);
        let mut held = spawn_held(cmd).unwrap();
        drop(held.release_pipe());
        let status = held.child.wait().unwrap();
        assert_eq!(status.code(), Some(NOT_RELEASED_EXIT));
        assert!(!marker.exists());
    }

    #[test]
    fn survivors_are_found_by_group_and_start_time() {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(held_script("sleep 30 & sleep 30"));
        let mut held = spawn_held(cmd).unwrap();
        held.release().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let g = held.group;
        assert!(survivors(&g).len() >= 2, "{:?}", survivors(&g));
        // A different start time is another process: never touched.
        let other = ProcessGroup {
            pid: g.pid,
            start_time: g.start_time.map(|t| t + 1),
        };
        assert!(survivors(&other).is_empty());
        assert!(kill_survivors(&g).len() >= 2);
        let _ = held.child.wait();
        std::thread::sleep(Duration::from_millis(100));
        assert!(survivors(&g).is_empty());
    }
}
