//! The container environment: every command of a run inside one OCI
//! container, `tinyagent-<run_id>`, driven through the engine's command line
//! (`podman` or `docker`; no socket code of ours).
//!
//! The container is started once per run with a do-nothing pid 1 (`sleep
//! infinity` under the engine's init, which reaps orphans), and outlives the
//! agent: a crash leaves it, and its background processes, running, and a
//! resume reattaches to it. Every command is one `exec` into it.
//!
//! # What the container sees
//!
//! Image `host`: the host's root file system under a throw-away overlay
//! (`--rootfs /:O`), so writes outside the workspace land in the overlay and
//! vanish with the container. The workspace is bound read-write at its own
//! path. The run's own files are masked: the log's directory (its
//! snapshots, torn tails, `<wal>.d/`) by an empty read-only tmpfs (without
//! the engine's usual copy-up of what lies beneath), the config and hook
//! files by `/dev/null`. No network unless asked (`--network none`). The
//! container's environment is the engine's default (PATH, HOME, TERM): no
//! variable of the agent's reaches it, and the engine itself is run with a
//! short list of the agent's variables (PATH, HOME...), never a key.
//!
//! # Processes inside
//!
//! Pids, process groups and start times are the container's (its pid
//! namespace; the start time, in clock ticks since boot, reads the same
//! inside and out). A foreground command is exec'd through a small bash
//! wrapper run under `setsid`, so it leads a new session and process group
//! inside. The wrapper prints `tinyagent-group PID PGID START` on the
//! exec's stderr and waits for one byte on its stdin before it runs the
//! command: the agent records the group durably first, as for the host
//! (see [`super::group`]). After the command it prints `tinyagent-exit
//! CODE` and kills its own group, so that nothing the command left behind
//! lingers. Signals and kills go to the group through `exec kill`, after the
//! leader's start time has been checked inside.
//!
//! Background output goes to a directory of the agent's beside the log,
//! `<wal>.out/`, bound into the container at [`OUTPUT_MOUNT`] (nothing else
//! of the log's directory is visible): the process appends to
//! `<id>.log` there itself, so its output goes on after the agent died, and
//! its wrapper writes `<id>.exit` with the exit code when it ends. The
//! agent reads both without following links and only as regular files: the
//! container can write that directory, so it is as untrusted as the
//! workspace.

mod create;
mod engine;

pub use create::Create;
use engine::trimmed;
pub use engine::{
    ContainerState, container_name, engine_command, find_engine, list_containers, remove, state_of,
    states_of,
};

use super::group::{Held, ProcessGroup};
use super::host::ProcStat;
use crate::config::EngineKind;
use nix::sys::signal::Signal;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::channel;

/// Where the run's background output directory appears inside.
pub const OUTPUT_MOUNT: &str = "/run/tinyagent-output";

/// The container label holding the log's path (for `env prune`).
pub const WAL_LABEL: &str = "tinyagent.wal";

/// Runs the command in `$1` as the leader of its own group (the exec runs
/// it under `setsid`), once the agent said so on stdin.
const FOREGROUND: &str = r#"s=$1
st=$(</proc/$$/stat); r=${st##*) }; set -- $r
printf 'tinyagent-group %s %s %s\n' "$$" "$3" "${20}" >&2
IFS= read -r -n 1 go
[ "$go" = g ] || exit 125
bash -c "$s" </dev/null 2>&1
printf 'tinyagent-exit %s\n' "$?" >&2
kill -KILL -- -$$"#;

/// Starts `$1` in the background in a session of its own, its output
/// appended to `$2`, its exit code written to `$3` when it ends (0600, like
/// every file beside the log); prints its pid and start time.
const BACKGROUND: &str = r#"s=$1 out=$2 ex=$3
setsid bash -c 'bash -c "$1"; r=$?; umask 077; echo $r >"$2.tmp" && mv -f "$2.tmp" "$2"' tinyagent-bg "$s" "$ex" </dev/null >>"$out" 2>&1 &
p=$!
st=$(</proc/$p/stat); r=${st##*) }; set -- $r
printf '%s %s\n' "$p" "${20}""#;

/// For each `PID:START` argument that is a live process with that start
/// time, prints the pid.
const ALIVE: &str = r#"for a; do
  p=${a%%:*} t=${a#*:}
  st=$(cat /proc/$p/stat 2>/dev/null) || continue
  r=${st##*) }; set -- $r
  [ "$1" = Z ] || [ "$1" = X ] && continue
  [ "$t" = - ] || [ "${20}" = "$t" ] && echo "$p"
done
exit 0"#;

/// Sends signal `$1` to group `$2` if its leader `$2` still has start time
/// `$3` or is gone (its group is then the recorded one: a group id is not
/// reused while a member lives). With `$4` = `survivors`: prints the live
/// members started no earlier than the leader first, and sends only if
/// there are any.
const SIGNAL: &str = r#"sig=$1 g=$2 t=$3 mode=$4
if st=$(cat /proc/$g/stat 2>/dev/null); then
  r=${st##*) }; set -- $r
  if [ "$3" = "$g" ] && [ "${20}" != "$t" ] && [ "$1" != Z ]; then exit 0; fi
fi
if [ "$mode" = survivors ]; then
  n=0
  for d in /proc/[0-9]*; do
    st=$(cat $d/stat 2>/dev/null) || continue
    r=${st##*) }; set -- $r
    [ "$3" = "$g" ] && [ "$1" != Z ] && [ "${20}" -ge "$t" ] && { echo "${d#/proc/}"; n=1; }
  done
  [ $n = 1 ] || exit 0
fi
kill -s "$sig" -- -"$g" 2>/dev/null
exit 0"#;

/// What happened to the run's container when the environment was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// A new container (none was there).
    Started,
    /// The run's container was running: its processes go on.
    Reattached,
    /// The run's container was there but stopped: removed, a new one started.
    Replaced,
}

/// One run's container, by name, through an engine's command line.
#[derive(Debug, Clone)]
pub struct Container {
    engine: EngineKind,
    binary: PathBuf,
    name: String,
    /// `<wal>.out/` on the host, bound at [`OUTPUT_MOUNT`].
    output_dir: PathBuf,
    /// Found running when the environment was set up (not started anew).
    reattached: bool,
}

/// The directory of a log's background output in the container environment.
pub fn output_dir(wal: &Path) -> PathBuf {
    crate::rundir::container_output(wal)
}

impl Container {
    pub fn new(engine: EngineKind, binary: PathBuf, name: String, output_dir: PathBuf) -> Self {
        Container {
            engine,
            binary,
            name,
            output_dir,
            reattached: false,
        }
    }

    /// Whether this container was found running (its processes from before
    /// the stop may still be there).
    pub fn reattached(&self) -> bool {
        self.reattached
    }

    /// Marks the container as found running (its processes may be there).
    pub fn set_reattached(&mut self, yes: bool) {
        self.reattached = yes;
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// `<wal>.out/` on the host.
    pub fn output_dir(&self) -> &Path {
        &self.output_dir
    }

    /// The engine's command line, with none of the agent's variables but a
    /// short list ([`engine_command`]).
    pub fn engine_command(&self) -> Command {
        engine_command(&self.binary)
    }

    /// `exec` into the container: `args` run as given (no shell).
    fn exec(&self, interactive: bool, workdir: Option<&Path>) -> Command {
        let mut cmd = self.engine_command();
        cmd.arg("exec");
        if interactive {
            cmd.arg("-i");
        }
        if let Some(dir) = workdir {
            cmd.arg("-w").arg(dir);
        }
        cmd.arg(&self.name);
        cmd
    }

    /// Runs one bash `script` with `args` inside and waits for it.
    fn run(&self, script: &str, args: &[&str]) -> io::Result<Output> {
        let mut cmd = self.exec(false, None);
        cmd.args(["bash", "-c", script, "tinyagent"])
            .args(args)
            .stdin(Stdio::null());
        cmd.output()
    }

    /// Whether the container exists and runs.
    pub fn state(&self) -> io::Result<ContainerState> {
        state_of(&self.binary, &self.name)
    }

    /// Removes the container with everything in it (no error when gone).
    pub fn remove(&self) -> Result<(), String> {
        remove(&self.binary, &self.name)
    }

    /// The foreground command `script` in `workspace`, held before it runs
    /// until [`Held::release`] (see the module docs); stdout and stderr of
    /// the command go to `out`.
    pub fn spawn_held(
        &self,
        script: &str,
        workspace: &Path,
        out: io::PipeWriter,
    ) -> io::Result<Held> {
        let (id_r, id_w) = io::pipe()?;
        let (go_r, go_w) = io::pipe()?;
        let mut cmd = self.exec(true, Some(workspace));
        cmd.args(["setsid", "bash", "-c", FOREGROUND, "tinyagent", script])
            .stdin(go_r)
            .stdout(out)
            .stderr(id_w);
        super::host::detach(&mut cmd);
        super::group::die_with_agent(&mut cmd);
        let (status_tx, status) = channel();
        let (spawned_tx, spawned_rx) = channel();
        let (exit_tx, exit_rx) = channel::<Option<i32>>();
        std::thread::Builder::new()
            .name("tinyagent-exec".into())
            .spawn(move || {
                let child = cmd.spawn();
                drop(cmd);
                let mut child = match child {
                    Ok(c) => {
                        let _ = spawned_tx.send(Ok(()));
                        c
                    }
                    Err(e) => {
                        let _ = spawned_tx.send(Err(e));
                        return;
                    }
                };
                let waited = child.wait();
                let code = exit_rx.recv().ok().flatten();
                let _ = status_tx.send(waited.map(|s| command_status(s, code)));
            })?;
        spawned_rx
            .recv()
            .map_err(|_| io::Error::other("the exec thread is gone"))??;
        let mut lines = BufReader::new(id_r);
        let mut first = String::new();
        let mut said = String::new();
        let group = loop {
            first.clear();
            if lines.read_line(&mut first)? == 0 {
                drop(go_w);
                let _ = exit_tx.send(None);
                return Err(io::Error::other(format!(
                    "{} exec into {} failed: {}",
                    self.engine,
                    self.name,
                    said.trim()
                )));
            }
            if let Some(g) = parse_group(&first) {
                break g;
            }
            said.push_str(&first);
        };
        std::thread::Builder::new()
            .name("tinyagent-exec-status".into())
            .spawn(move || {
                let mut code = None;
                let mut line = String::new();
                loop {
                    line.clear();
                    match lines.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if let Some(c) = line
                                .trim()
                                .strip_prefix("tinyagent-exit ")
                                .and_then(|c| c.parse().ok())
                            {
                                code = Some(c);
                            }
                        }
                    }
                }
                let _ = exit_tx.send(code);
                // Read to the end so the exec never blocks on a full pipe.
                let _ = lines.read_to_end(&mut Vec::new());
            })?;
        Ok(Held::new(group, go_w, status))
    }

    /// Sends `sig` to process group `pgid` inside, if its leader is still
    /// the process started at `start_time` (or gone, its group left).
    pub fn signal_group(&self, pgid: u32, start_time: Option<u64>, sig: Signal) {
        let t = start_time.map_or_else(|| "0".to_string(), |t| t.to_string());
        let _ = self.run(SIGNAL, &[sig.as_str(), &pgid.to_string(), &t, "group"]);
    }

    /// SIGKILLs what is left of a recorded group inside; the pids found.
    pub fn kill_survivors(&self, g: &ProcessGroup) -> Vec<ProcStat> {
        let Some(t) = g.start_time else {
            return Vec::new();
        };
        let Ok(out) = self.run(
            SIGNAL,
            &["KILL", &g.pid.to_string(), &t.to_string(), "survivors"],
        ) else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .map(|pid| ProcStat {
                pid,
                exited: false,
                pgid: g.pid,
                start_time: None,
            })
            .collect()
    }

    /// Which of `procs` (pid, start time) run inside; empty when the
    /// container does not run.
    pub fn alive(&self, procs: &[(u32, Option<u64>)]) -> Vec<u32> {
        if procs.is_empty() {
            return Vec::new();
        }
        let args: Vec<String> = procs
            .iter()
            .map(|(p, t)| {
                format!(
                    "{p}:{}",
                    t.map_or_else(|| "-".to_string(), |t| t.to_string())
                )
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match self.run(ALIVE, &args) {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Starts `script` in the background in `workspace`; output appended to
    /// `<output_dir>/<id>.log` (which must exist), exit code to `<id>.exit`.
    /// Gives the pid and start time inside.
    pub fn start_background(
        &self,
        script: &str,
        workspace: &Path,
        id: &str,
    ) -> io::Result<(u32, Option<u64>)> {
        let out = format!("{OUTPUT_MOUNT}/{id}.log");
        let ex = format!("{OUTPUT_MOUNT}/{id}.exit");
        let mut cmd = self.exec(false, Some(workspace));
        cmd.args(["bash", "-c", BACKGROUND, "tinyagent", script, &out, &ex])
            .stdin(Stdio::null());
        let output = cmd.output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let mut words = text.split_whitespace();
        match (words.next().and_then(|p| p.parse().ok()), words.next()) {
            (Some(pid), start) if output.status.success() => {
                Ok((pid, start.and_then(|t| t.parse().ok())))
            }
            _ => Err(io::Error::other(format!(
                "{} exec into {} failed: {}",
                self.engine,
                self.name,
                trimmed(&output.stderr)
            ))),
        }
    }

    /// The exit code a background process's wrapper wrote, if it ended.
    pub fn exit_code(&self, id: &str) -> Option<i32> {
        let path = self.output_dir.join(format!("{id}.exit"));
        let mut text = String::new();
        open_regular(&path)
            .ok()?
            .take(32)
            .read_to_string(&mut text)
            .ok()?;
        text.trim().parse().ok()
    }
}

/// Opens a file the container could have written: no link followed, no
/// blocking on a FIFO, only a regular file.
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)?;
    if file.metadata()?.is_file() {
        Ok(file)
    } else {
        Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )))
    }
}

fn parse_group(line: &str) -> Option<ProcessGroup> {
    let mut w = line.trim().strip_prefix("tinyagent-group ")?.split(' ');
    let pid: u32 = w.next()?.parse().ok()?;
    let _pgid: u32 = w.next()?.parse().ok()?;
    let start = w.next().and_then(|t| t.parse().ok());
    Some(ProcessGroup {
        pid,
        start_time: start,
    })
}

/// The command's own status: the code the wrapper reported, else the
/// exec's (128 + N meaning signal N, as the engine reports it).
fn command_status(exec: ExitStatus, reported: Option<i32>) -> ExitStatus {
    match (reported, exec.code()) {
        (Some(code), _) => ExitStatus::from_raw((code & 0xff) << 8),
        (None, Some(c)) if (129..=192).contains(&c) => ExitStatus::from_raw(c - 128),
        _ => exec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_line_gives_the_group() {
        assert_eq!(
            parse_group("tinyagent-group 7 7 12345\n"),
            Some(ProcessGroup {
                pid: 7,
                start_time: Some(12345)
            })
        );
        assert_eq!(parse_group("Error: no container"), None);
    }

    #[test]
    fn statuses_are_the_commands() {
        let exec = ExitStatus::from_raw(137 << 8);
        assert_eq!(command_status(exec, Some(3)).code(), Some(3));
        assert_eq!(command_status(exec, None).signal(), Some(9));
        let ok = ExitStatus::from_raw(0);
        assert_eq!(command_status(ok, None).code(), Some(0));
    }
}
