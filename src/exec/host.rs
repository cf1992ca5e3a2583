//! The host's processes: how a child is started apart from the agent
//! ([`detach`]), what `/proc/PID/stat` says about one, and killing a process
//! group. Commands, background processes, hooks and MCP servers each lead a
//! session and a process group of their own, so the group's id is the
//! leader's pid.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Starts `cmd`'s process apart from the agent (contract section 20), for
/// every child tinyagent starts in every environment:
///
/// - **A session of its own** (`setsid`), with no controlling terminal: a
///   command cannot open `/dev/tty`, cannot push input into the person's
///   terminal with `TIOCSTI` (the kernel allows that only on one's own
///   controlling terminal, or with `CAP_SYS_ADMIN`), and gets none of the
///   terminal's signals. Being a session leader also makes it the leader of
///   a new process group whose id is its pid, so a signal to that group
///   reaches it and everything it starts (section 7).
/// - **No descriptor of the agent's but 0, 1 and 2**: every other one is
///   marked close-on-exec (`close_range` with `CLOSE_RANGE_CLOEXEC`), also
///   one the agent inherited from whoever started it. Marked, not closed:
///   the pipes that hold a command before its exec (see [`super::group`])
///   and the one that reports a failed exec still work until then.
///
/// Calling it twice on one command is harmless. A command detached so must
/// not also ask for `process_group`: that makes it a group leader before
/// this runs, and a group leader cannot start a session.
#[allow(unsafe_code)]
pub fn detach(cmd: &mut std::process::Command) {
    use nix::libc;
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (getsid, getpid, setsid,
    // close_range, getrlimit, fcntl); it allocates nothing (errors are raw
    // OS errors) and touches no lock.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            if libc::getsid(0) != libc::getpid() && libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::close_range(
                3,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC.cast_signed(),
            ) != 0
            {
                // Kernels before 5.11: each descriptor in turn.
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) == 0 {
                    lim.rlim_cur.min(1 << 20) as libc::c_int
                } else {
                    1024
                };
                for fd in 3..top {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags >= 0 {
                        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                    }
                }
            }
            Ok(())
        });
    }
}

/// The fields of `/proc/PID/stat` tinyagent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// Field 3 is `Z` (zombie) or `X`/`x` (dead).
    pub exited: bool,
    /// Field 5: the process group.
    pub pgid: u32,
    /// Field 22: start time in clock ticks since boot.
    pub start_time: Option<u64>,
}

/// What `/proc/<pid>/stat` says of `pid`, if it exists.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &stat)
}

fn parse_stat(pid: u32, stat: &str) -> Option<ProcStat> {
    // Field 2 (the name) may hold spaces and parentheses: count from the last
    // ')'. Then field 3 (state) ... field 22 (start time).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    Some(ProcStat {
        pid,
        exited: matches!(field(3)?, "Z" | "X" | "x"),
        pgid: field(5)?.parse().ok()?,
        start_time: field(22).and_then(|f| f.parse().ok()),
    })
}

/// Field 22 of /proc/PID/stat: start time in clock ticks since boot.
pub fn proc_start_time(pid: u32) -> Option<u64> {
    proc_stat(pid)?.start_time
}

/// Whether host process `pid` is running and is the one recorded (same start
/// time, when one was recorded). A zombie (exited, not yet reaped) is not
/// running.
pub fn host_process_alive(pid: u32, start_time: Option<u64>) -> bool {
    let Some(stat) = proc_stat(pid) else {
        return false;
    };
    if stat.exited {
        return false;
    }
    match (start_time, stat.start_time) {
        (Some(recorded), Some(now)) => recorded == now,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// SIGKILL to the process group `leader` leads; a group that is gone (or a
/// pid out of range) is no error.
pub fn kill_group(leader: u32) {
    signal_group(leader, Signal::SIGKILL);
}

/// `sig` to the process group `leader` leads (no error when it is gone).
pub fn signal_group(leader: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(leader) {
        let _ = killpg(Pid::from_raw(pid), sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line = "4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 0 0";
        let s = parse_stat(4242, line).unwrap();
        assert!(!s.exited);
        assert_eq!(s.pgid, 4240);
        assert_eq!(s.start_time, Some(987_654));
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn this_process_is_alive_with_its_start_time() {
        let me = std::process::id();
        let start = proc_start_time(me);
        assert!(start.is_some());
        assert!(host_process_alive(me, start));
        assert!(host_process_alive(me, None));
        assert!(!host_process_alive(me, start.map(|s| s + 1)));
    }
}
