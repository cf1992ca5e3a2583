//! A run's container made: `run -d` with what it sees (see the module docs
//! of [`super`]), or, when an earlier agent was killed while its engine made
//! it, the one that engine finished.

use super::engine::{ContainerState, trimmed};
use super::{Container, OUTPUT_MOUNT, WAL_LABEL};
use crate::config::EngineKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// What the engine's `run` (podman's or docker's) needs to create a run's
/// container.
pub struct Create<'a> {
    pub image: &'a str,
    pub network: bool,
    pub workspace: &'a Path,
    pub wal: &'a Path,
    /// Directories to hide behind an empty read-only tmpfs.
    pub hide_dirs: &'a [PathBuf],
    /// Files to hide behind `/dev/null`.
    pub hide_files: &'a [PathBuf],
}

impl Container {
    /// Creates and starts the container (detached, outliving the agent).
    pub fn create(&self, c: &Create<'_>) -> Result<(), String> {
        let mut cmd = self.engine_command();
        cmd.args(["run", "-d", "--init", "--name", &self.name])
            .arg("--label")
            .arg(format!("{WAL_LABEL}={}", c.wal.display()))
            .args(["--hostname", "tinyagent"])
            // Root inside, but with no capability (no mount, no raw
            // sockets, no ptrace of the engine's helpers) and no way to
            // gain one through a setuid binary, as in the sandbox.
            .args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]);
        if !c.network {
            cmd.args(["--network", "none"]);
        }
        let mut volume = std::ffi::OsString::new();
        volume.push(c.workspace);
        volume.push(":");
        volume.push(c.workspace);
        cmd.arg("-v").arg(volume);
        let mut out = self.output_dir.as_os_str().to_owned();
        out.push(":");
        out.push(OUTPUT_MOUNT);
        cmd.arg("-v").arg(out);
        for dir in c.hide_dirs {
            let opts = match self.engine {
                // Without notmpcopyup podman fills the tmpfs with what it covers.
                EngineKind::Podman => ":ro,notmpcopyup,size=4k",
                EngineKind::Docker => ":ro,size=4k",
            };
            let mut arg = dir.as_os_str().to_owned();
            arg.push(opts);
            cmd.arg("--tmpfs").arg(arg);
        }
        for file in c.hide_files {
            let mut arg = std::ffi::OsString::from("/dev/null:");
            arg.push(file);
            arg.push(":ro");
            cmd.arg("-v").arg(arg);
        }
        cmd.arg("-w").arg(c.workspace);
        if c.image == crate::config::HOST_IMAGE {
            cmd.args(["--rootfs", "/:O"]);
        } else {
            cmd.arg(c.image);
        }
        cmd.args(["sleep", "infinity"]).stdin(Stdio::null());
        let out = cmd.output().map_err(|e| e.to_string())?;
        if out.status.success() {
            return Ok(());
        }
        let err = trimmed(&out.stderr);
        if !in_use(&err) {
            // Nothing half made is left of this attempt.
            let _ = self.remove();
        }
        Err(err)
    }

    /// [`Container::create`], also when an earlier agent of the run was
    /// killed while its engine was creating this very container: that
    /// engine process lives on and finishes it, so a container that comes
    /// up running is taken (it is as new); one that does not is removed,
    /// from the engine's storage too, and created again.
    pub fn create_or_adopt(&self, c: &Create<'_>) -> Result<(), String> {
        match self.create(c) {
            Err(e) if in_use(&e) => {
                for _ in 0..25 {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    if matches!(self.state(), Ok(ContainerState::Running)) {
                        return Ok(());
                    }
                }
                let _ = self.remove();
                if self.engine == EngineKind::Podman {
                    let _ = self
                        .engine_command()
                        .args(["rm", "--storage", &self.name])
                        .stdin(Stdio::null())
                        .output();
                }
                self.create(c)
            }
            other => other,
        }
    }
}

/// The engine says the name is taken.
fn in_use(err: &str) -> bool {
    err.contains("already in use")
}
