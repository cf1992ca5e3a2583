//! API keys: read once when `run` or `resume` starts, then out of every
//! child's reach (contract section 8).
//!
//! [`isolate`] runs first thing, before any thread or child exists. When a
//! key variable is in the environment ([`is_key_var`]: `*_API_KEY` and the
//! AWS credentials; or the `--api-key-env` variable the run will use, from
//! the flag, the config file or the log), the process re-executes itself
//! (`/proc/self/exe`, the same arguments, the same pid) with those variables
//! removed from the environment. Their values travel in a pipe written in
//! full before the exec: the new process inherits its read end, named by
//! number in [`KEY_FD_VAR`], reads it to the end and closes it. From then on
//! the keys are only in this process's memory ([`key`]); the environment
//! every child inherits has none of them, and neither has this process's own
//! `/proc/<pid>/environ`, which shows the environment of the last exec.
//!
//! The process then makes itself non-dumpable (`PR_SET_DUMPABLE` 0): its
//! `/proc/<pid>/` files belong to root, so a process of the same user that
//! is not root (a tool, a hook, anything else the user runs) can open
//! neither `environ` nor `mem`, and cannot ptrace it. Root can still read
//! both; a sandboxed tool cannot see the agent's `/proc` at all.
//!
//! Children are scrubbed as well ([`crate::exec::env::scrub_keys`]), for
//! key variables that reach the agent some other way (a library caller that
//! never went through [`isolate`]).

use super::LaunchError;
use crate::exec::env::{KEY_FD_VAR, is_key_var};
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::sync::OnceLock;

/// What the pipe starts with: a descriptor that does not begin so was not
/// handed over by tinyagent.
const HEADER: &[u8] = b"tinyagent keys 1\0";

/// The key variables handed over at start: `(name, value)`.
static KEYS: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// The value a key variable had when the agent started (after [`isolate`]),
/// else the variable itself.
pub fn key(name: &str) -> Option<String> {
    let handed = KEYS
        .get()
        .and_then(|keys| keys.iter().rev().find(|(n, _)| n == name))
        .and_then(|(_, v)| v.to_str())
        .map(str::to_string);
    handed.or_else(|| std::env::var(name).ok())
}

/// The variables a new run names as holding its API key besides the
/// `*_API_KEY` ones: `--api-key-env`, else what the config file names.
/// Best effort: a config that cannot be read is reported by the command
/// itself.
pub fn named_for_run(args: &super::request::RunOptions) -> Vec<String> {
    args.provider
        .api_key_env
        .clone()
        .or_else(|| {
            crate::config::Config::load(args.config.as_deref())
                .ok()
                .and_then(|c| c.model.api_key_env)
        })
        .into_iter()
        .filter(|n| !n.is_empty())
        .collect()
}

/// The variables a resume names as holding its API key: `--api-key-env`,
/// and every one the log recorded ([`with_recorded`]).
pub fn named_for_resume(args: &super::request::ResumeArgs) -> Vec<String> {
    with_recorded(args.provider.api_key_env.clone(), args)
}

/// A resume's key variables: the one it names now (`--api-key-env`) and
/// every one the run named before (`run`, each earlier `resume`), so that a
/// key given to an earlier part of the run is kept from this part's children
/// as well.
fn with_recorded(flag: Option<String>, args: &super::request::ResumeArgs) -> Vec<String> {
    let mut names: Vec<String> = flag.into_iter().filter(|n| !n.is_empty()).collect();
    for var in super::resume::recorded_key_envs(args) {
        if !names.contains(&var) {
            names.push(var);
        }
    }
    names
}

/// Takes the key variables out of the environment (re-executing when one
/// is there; see the module doc) and makes the process non-dumpable. On
/// success it returns in the process that goes on with the command.
pub fn isolate(named: &[String]) -> Result<(), LaunchError> {
    let fail = |what: &str, e: io::Error| {
        LaunchError::failed(format!(
            "cannot keep the API keys from the tools: {what}: {e}"
        ))
    };
    let mut keys = match std::env::var_os(KEY_FD_VAR) {
        Some(fd) => receive(&fd).map_err(|e| {
            fail(
                &format!(
                    "reading the keys handed over ({KEY_FD_VAR} is tinyagent's own: unset it)"
                ),
                e,
            )
        })?,
        None => Vec::new(),
    };
    let left: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| {
            is_key_var(&name.to_string_lossy()) || named.iter().any(|n| OsStr::new(n) == name)
        })
        .collect();
    if !left.is_empty() {
        keys.extend(left);
        let e = reexec(&keys);
        return Err(fail("re-executing without them", e));
    }
    nix::sys::prctl::set_dumpable(false).map_err(|e| fail("PR_SET_DUMPABLE", e.into()))?;
    let _ = KEYS.set(keys);
    Ok(())
}

/// `NAME=VALUE\0` for each key, after the header.
fn encode(keys: &[(OsString, OsString)]) -> Vec<u8> {
    let mut out = HEADER.to_vec();
    for (name, value) in keys {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out
}

fn decode(bytes: &[u8]) -> io::Result<Vec<(OsString, OsString)>> {
    let body = bytes
        .strip_prefix(HEADER)
        .ok_or_else(|| io::Error::other("not a key handover from tinyagent"))?;
    let mut keys = Vec::new();
    for entry in body.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let eq = entry
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| io::Error::other("a malformed entry"))?;
        keys.push((
            OsString::from_vec(entry[..eq].to_vec()),
            OsString::from_vec(entry[eq + 1..].to_vec()),
        ));
    }
    Ok(keys)
}

/// Execs this program again, the keys removed from its environment and
/// written into a pipe it inherits. Returns only when that failed.
fn reexec(keys: &[(OsString, OsString)]) -> io::Error {
    use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
    let payload = encode(keys);
    // Non-blocking: keys too large for the pipe's buffer are an error, never
    // a hang (nothing reads the pipe before the exec).
    let (read, write) = match nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
        Ok(ends) => ends,
        Err(e) => return e.into(),
    };
    if let Err(e) = std::fs::File::from(write).write_all(&payload) {
        return if e.kind() == io::ErrorKind::WouldBlock {
            io::Error::other(format!(
                "the key variables hold {} bytes, more than a pipe takes",
                payload.len()
            ))
        } else {
            e
        };
    }
    // The write end is closed now; the read end must survive the exec.
    if let Err(e) = fcntl(&read, FcntlArg::F_SETFD(FdFlag::empty())) {
        return e.into();
    }
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new("/proc/self/exe");
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    cmd.args(args);
    for (name, _) in keys {
        cmd.env_remove(name);
    }
    cmd.env(KEY_FD_VAR, read.as_raw_fd().to_string());
    cmd.exec()
}

/// Reads the keys from the descriptor `fd` names (a pipe whose writer is
/// gone), then closes it.
fn receive(fd: &OsStr) -> io::Result<Vec<(OsString, OsString)>> {
    let n: i32 = fd
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 2)
        .ok_or_else(|| {
            io::Error::other(format!("{KEY_FD_VAR}={} is not a descriptor", fd.display()))
        })?;
    let path = format!("/proc/self/fd/{n}");
    if !std::fs::metadata(&path)?.file_type().is_fifo() {
        return Err(io::Error::other(format!(
            "descriptor {n} ({KEY_FD_VAR}) is not a pipe"
        )));
    }
    // A pipe of our own is complete and closed for writing: reading it
    // without blocking gets all of it. Anything else fails, never hangs.
    let mut bytes = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&path)?
        .read_to_end(&mut bytes)
        .map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => io::Error::other(format!(
                "descriptor {n} ({KEY_FD_VAR}) is a pipe still open for writing, \
                 not a key handover from tinyagent"
            )),
            _ => e,
        })?;
    nix::unistd::close(n)?;
    decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_the_encoding() {
        let keys = vec![
            (OsString::from("OPENAI_API_KEY"), OsString::from("sk-a=b")),
            (OsString::from("EMPTY_API_KEY"), OsString::new()),
            (OsString::from("RAW"), OsString::from_vec(vec![0xff, b'x'])),
        ];
        assert_eq!(decode(&encode(&keys)).unwrap(), keys);
        assert!(decode(b"OPENAI_API_KEY=x\0").is_err());
        assert!(decode(&[HEADER, b"novalue\0"].concat()).is_err());
    }
}
