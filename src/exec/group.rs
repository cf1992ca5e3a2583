//! The process group of a foreground command: held before it execs,
//! recorded, then released; stopped by a signal with a grace period; found
//! again after a hard kill of the agent.
//!
//! A foreground command's process is forked in a new session and process
//! group of its own ([`host::detach`]) and
//! stops before `exec`: between fork and exec it sets SIGKILL as its
//! parent-death signal, writes its pid on one pipe and waits for one byte on
//! another. The agent makes the group's identity (leader pid = group id, and
//! the leader's start time) durable through [`Launch`], then sends the byte;
//! only then does the command exec. If the agent dies before, the wait sees
//! end-of-file (and the parent-death signal kills it anyway): nothing of the
//! command ever ran. While the agent lives its foreground tools die with it
//! (the sandbox adds bubblewrap's `--die-with-parent` and its pid namespace,
//! which take the whole tree).
//!
//! `Command::spawn` returns only once the child has exec'd, so the spawn
//! runs on a thread of its own, which then waits for the child: the thread
//! that forks a child must outlive it, or the parent-death signal fires.

use super::host::{self, ProcStat, proc_stat};
use nix::sys::signal::Signal;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Command, ExitStatus};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

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
    /// The command has run for `elapsed` and last printed `last_line`
    /// (for a person watching; nothing of it is recorded).
    fn progress(&self, _elapsed: std::time::Duration, _last_line: &str) {}
    /// The command ended: whatever [`Launch::progress`] showed goes.
    fn progress_done(&self) {}
}

/// For tools run outside an agent (tests, benchmarks): nothing is recorded.
pub struct Unrecorded;

impl Launch for Unrecorded {
    fn record(&self, _: &ProcessGroup) -> Result<(), String> {
        Ok(())
    }
}

/// A forked command waiting before its exec for [`Held::release`].
pub struct Held {
    pub group: ProcessGroup,
    go: Option<io::PipeWriter>,
    /// The command's exit (from the thread that spawned it and waits for
    /// it), or why it could not be started.
    pub status: Receiver<io::Result<ExitStatus>>,
}

impl Held {
    /// A command held some other way (the container's wrapper waits for
    /// the byte on its stdin): `go` releases it.
    pub fn new(
        group: ProcessGroup,
        go: io::PipeWriter,
        status: Receiver<io::Result<ExitStatus>>,
    ) -> Held {
        Held {
            group,
            go: Some(go),
            status,
        }
    }

    /// Lets the command exec.
    ///
    /// # Errors
    /// The write to the release pipe (the command is gone).
    pub fn release(&mut self) -> io::Result<()> {
        let mut go = self
            .go
            .take()
            .ok_or_else(|| io::Error::other("released twice"))?;
        go.write_all(b"g")
    }

    /// Never lets it exec: the command exits without having run anything.
    pub fn abandon(&mut self) {
        drop(self.go.take());
    }
}

/// Forks `cmd` in a new process group, held before its exec (see the module
/// docs), and gives its group once the fork is done.
///
/// # Errors
/// The pipes cannot be made, or the command could not be forked.
pub fn spawn_held(mut cmd: Command) -> io::Result<Held> {
    let (mut pid_r, pid_w) = io::pipe()?;
    let (go_r, go_w) = io::pipe()?;
    host::detach(&mut cmd);
    hold_before_exec(
        &mut cmd,
        [pid_w.as_raw_fd(), go_r.as_raw_fd()],
        [pid_r.as_raw_fd(), go_w.as_raw_fd()],
    );
    let (status_tx, status) = channel();
    std::thread::Builder::new()
        .name("tinyagent-command".into())
        .spawn(move || {
            let spawned = cmd.spawn();
            // The child has exec'd (or failed): our copies of its ends go,
            // and so does `cmd` with its copies of the output pipe.
            drop((pid_w, go_r, cmd));
            let _ = status_tx.send(spawned.and_then(|mut child| child.wait()));
        })?;
    let mut pid = [0u8; 4];
    if let Err(e) = io::Read::read_exact(&mut pid_r, &mut pid) {
        // No pid: the fork or the hold failed; the thread says why.
        return Err(match status.recv() {
            Ok(Err(spawn)) => spawn,
            _ => e,
        });
    }
    let pid = u32::from_ne_bytes(pid);
    Ok(Held {
        group: ProcessGroup {
            pid,
            start_time: host::proc_start_time(pid),
        },
        go: Some(go_w),
        status,
    })
}

/// Between fork and exec: the parent-death signal, the pid sent on
/// `child[0]`, the wait for the release byte on `child[1]`; `parent` are the
/// agent's ends, closed in the child so the agent's death shows as
/// end-of-file. Only async-signal-safe calls and no allocation: a forked
/// child of a threaded process may take no lock.
#[allow(unsafe_code)]
fn hold_before_exec(cmd: &mut Command, child: [RawFd; 2], parent: [RawFd; 2]) {
    use nix::errno::Errno;
    let agent = nix::unistd::getpid();
    let os = |e: Errno| io::Error::from_raw_os_error(e as i32);
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid, getpid, close,
    // write, read) on descriptors made for it; it allocates nothing (errors
    // are raw OS errors) and touches no lock.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(os)?;
            if nix::unistd::getppid() != agent {
                return Err(os(Errno::ESRCH));
            }
            nix::libc::close(parent[0]);
            nix::libc::close(parent[1]);
            let pid = nix::unistd::getpid().as_raw().to_ne_bytes();
            if nix::libc::write(child[0], pid.as_ptr().cast(), pid.len()) != 4 {
                return Err(os(Errno::last()));
            }
            let mut byte = 0u8;
            loop {
                match nix::libc::read(child[1], (&raw mut byte).cast(), 1) {
                    1 => return Ok(()),
                    // End of file: abandoned, or the agent died.
                    0 => return Err(os(Errno::ECANCELED)),
                    _ if Errno::last() == Errno::EINTR => {}
                    _ => return Err(os(Errno::last())),
                }
            }
        });
    }
}

/// Asks the kernel to SIGKILL the child when the thread that spawned it
/// exits (the spawning thread waits for the child, so this is when the
/// agent dies). If the agent is already gone, the child exits at once.
#[allow(unsafe_code)]
pub fn die_with_agent(cmd: &mut Command) {
    use nix::errno::Errno;
    let agent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid); it allocates
    // nothing (errors are raw OS errors) and touches no lock.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
            if nix::unistd::getppid() != agent {
                return Err(io::Error::from_raw_os_error(Errno::ESRCH as i32));
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
    gone: impl FnMut(Duration) -> bool,
    cut_short: impl Fn() -> bool,
) {
    stop_with(|s| host::signal_group(pgid, s), sig, grace, gone, cut_short);
}

/// [`stop`] with the signals sent by `send` (a group in a container).
pub fn stop_with(
    send: impl Fn(Signal),
    sig: Signal,
    grace: Duration,
    mut gone: impl FnMut(Duration) -> bool,
    cut_short: impl Fn() -> bool,
) {
    send(sig);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !cut_short() {
        if gone(Duration::from_millis(20)) {
            break;
        }
    }
    send(Signal::SIGKILL);
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

    fn bash(script: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script);
        cmd
    }

    #[test]
    fn a_held_command_does_not_exec_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut held = spawn_held(bash(&format!("touch '{}'", marker.display()))).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists(), "ran before it was released");
        // Not exec'd yet: the process is still a copy of this test binary.
        let exe = std::fs::read_link(format!("/proc/{}/exe", held.group.pid)).unwrap();
        assert_eq!(exe, std::env::current_exe().unwrap());
        held.release().unwrap();
        assert!(held.status.recv().unwrap().unwrap().success());
        assert!(marker.exists());
    }

    #[test]
    fn an_abandoned_command_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut held = spawn_held(bash(&format!("touch '{}'", marker.display()))).unwrap();
        held.abandon();
        assert!(held.status.recv().unwrap().is_err(), "it was never started");
        assert!(!marker.exists());
    }

    #[test]
    fn survivors_are_found_by_group_and_start_time() {
        let mut held = spawn_held(bash("sleep 30 & sleep 30")).unwrap();
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
        let _ = held.status.recv();
        std::thread::sleep(Duration::from_millis(100));
        assert!(survivors(&g).is_empty());
    }
}
