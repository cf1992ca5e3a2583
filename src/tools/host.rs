//! The host's processes: what `/proc/PID/stat` says about one, and killing a
//! process group. Commands, background processes and hooks each run in their
//! own group (`process_group(0)`), so the group's id is the leader's pid.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The fields of `/proc/PID/stat` tinyagent reads.
struct ProcStat {
    /// Field 3 is `Z` (zombie) or `X`/`x` (dead).
    exited: bool,
    /// Field 22: start time in clock ticks since boot.
    start_time: Option<u64>,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the name) may hold spaces and parentheses: count from the last
    // ')'. Then field 3 (state) ... field 22 (start time).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let exited = matches!(fields.next()?, "Z" | "X" | "x");
    let start_time = fields.nth(22 - 4).and_then(|f| f.parse().ok());
    Some(ProcStat { exited, start_time })
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
    if let Ok(pid) = i32::try_from(leader) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
