//! Execution environments: where `bash` commands and background processes run.
//!
//! An [`ExecEnv`] turns a script into a [`std::process::Command`]; the caller
//! (the bash tool, the process table) sets stdio, puts the command in its own
//! process group and owns the child. Three environments exist:
//!
//! - [`LocalEnv`] (`local`): `bash -c SCRIPT` in the workspace directory.
//! - [`SandboxEnv`](super::sandbox::SandboxEnv) (`sandbox`): the same under bubblewrap: the whole file
//!   system read-only (`--ro-bind / /`), the workspace bound writable at its
//!   own path, fresh `/dev` and `/proc` (with `/proc/sys` read-only), a
//!   private `/tmp`, its own user, pid, IPC and UTS namespaces, no
//!   capabilities (also when the agent runs as root), no network unless
//!   allowed, and `--die-with-parent` so nothing outlives the agent. Killing
//!   the process group from outside reaches every process inside too:
//!   bubblewrap does not start a new session.
//! - [`ContainerEnv`] (`container`): `podman`/`docker exec` into the run's
//!   own container, which outlives the agent; see [`super::container`].
//!
//! Local and sandbox remove from the command's environment every variable of the agent's
//! that holds a secret ([`is_key_var`]: a name ending in `_API_KEY`, such as
//! `OPENAI_API_KEY`, and the AWS credentials) and [`KEY_FD_VAR`]: a command
//! that prints its environment must not put the model's key into a tool
//! result, and so into the log. [`HideVars`] wraps any environment to hide
//! more names (e.g. a key variable chosen with `--api-key-env`). The binary
//! takes every such variable out of its own environment when `run` or
//! `resume` starts (`launch::secrets`), so this is the second line, not the
//! first.
//!
//! # The seam
//!
//! Besides building commands, an environment checks at start that commands
//! can run at all ([`ExecEnv::check`]), answers resume's orphan check
//! ([`ExecEnv::process_alive`]), starts a foreground command held until its
//! group is recorded ([`ExecEnv::spawn_held`]), signals that group
//! ([`ExecEnv::signal_group`]) and stops what is left of one after a crash
//! ([`ExecEnv::kill_survivors`]); each has the host's behaviour as default,
//! and the container environment answers each from inside its container.
//! `docs/environments.md` puts the three side by side.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use thiserror::Error;

/// Where commands run.
pub trait ExecEnv: Send + Sync {
    /// `local`, `sandbox`: recorded in `run.started` and `process.started`.
    fn kind(&self) -> &'static str;
    /// The command that runs `script` with bash in `workspace`. The caller sets
    /// stdio and the process group.
    fn command(&self, script: &str, workspace: &Path) -> Command;
    /// Checks, before a run starts, that commands can run here at all.
    fn check(&self, _workspace: &Path) -> Result<(), EnvError> {
        Ok(())
    }
    /// Whether a process this environment started, recorded in
    /// `process.started` with `pid` and `start_time`, is still running. Used
    /// by resume for the orphan check. Local and sandbox processes are host
    /// processes (the sandbox's pid is bubblewrap's, seen from the host).
    fn process_alive(&self, pid: u32, start_time: Option<u64>) -> bool {
        super::host::host_process_alive(pid, start_time)
    }
    /// A foreground command, forked and held before it runs (see
    /// [`super::group`]); its stdout and stderr go to `out`.
    ///
    /// # Errors
    /// The command could not be started.
    fn spawn_held(
        &self,
        script: &str,
        workspace: &Path,
        out: std::io::PipeWriter,
    ) -> std::io::Result<super::group::Held> {
        host_spawn_held(self.command(script, workspace), out)
    }
    /// `sig` to the group of a foreground command this environment started.
    fn signal_group(&self, group: &super::group::ProcessGroup, sig: nix::sys::signal::Signal) {
        super::host::signal_group(group.pid, sig);
    }
    /// SIGKILLs what is left of a recorded foreground group (resume's
    /// leftovers); the processes that were running.
    fn kill_survivors(&self, group: &super::group::ProcessGroup) -> Vec<super::host::ProcStat> {
        super::group::kill_survivors(group)
    }
    /// The run's container, in the container environment.
    fn container(&self) -> Option<&super::container::Container> {
        None
    }
}

/// A host command held before its exec, output to `out`.
fn host_spawn_held(
    mut cmd: Command,
    out: std::io::PipeWriter,
) -> std::io::Result<super::group::Held> {
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    super::group::spawn_held(cmd)
}

#[derive(Debug, Error)]
pub enum EnvError {
    #[error(
        "the sandbox needs bubblewrap (`bwrap`), which is not on PATH; install it \
         (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`) \
         or use env.kind = \"local\""
    )]
    BwrapMissing,
    #[error("bubblewrap is installed but cannot create a sandbox here: {0}")]
    BwrapBroken(String),
    #[error("the sandbox cannot keep the run's own files out of its commands' reach: {0}")]
    Unprotectable(String),
    #[error("the container environment cannot start: {0}")]
    Container(String),
}

/// Runs commands directly on the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalEnv;

impl ExecEnv for LocalEnv {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn command(&self, script: &str, workspace: &Path) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script).current_dir(workspace);
        scrub_keys(&mut cmd);
        super::host::detach(&mut cmd);
        cmd
    }
}

/// Whether a variable holds a secret no child may see: an API key's name
/// (`*_API_KEY`) or an AWS credential (`AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`, and `AWS_ACCESS_KEY_ID`, which goes with them).
pub fn is_key_var(name: &str) -> bool {
    name.ends_with("_API_KEY")
        || matches!(
            name,
            "AWS_SECRET_ACCESS_KEY" | "AWS_SESSION_TOKEN" | "AWS_ACCESS_KEY_ID"
        )
}

/// The variable that names the descriptor a re-executed agent reads its
/// keys from (`launch::secrets`). Meaningless to anything else: no child gets
/// it, so a tinyagent started by a tool does not take it for its own.
pub const KEY_FD_VAR: &str = "TINYAGENT_KEY_FD";

/// Whether a variable holds a setting of the bucket a run replicates to
/// (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`, `AWS_REGION`,
/// `AWS_DEFAULT_REGION`): not secret, but none of them reaches a tool's
/// environment (contract section 11).
pub fn is_bucket_var(name: &str) -> bool {
    name.starts_with("AWS_ENDPOINT_URL") || matches!(name, "AWS_REGION" | "AWS_DEFAULT_REGION")
}

/// Removes the agent's key variables, its bucket settings and
/// [`KEY_FD_VAR`] from `cmd`'s environment. Tools, background processes,
/// hooks and MCP servers all go through here.
pub fn scrub_keys(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if is_key_var(&name_str) || is_bucket_var(&name_str) {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove(KEY_FD_VAR);
}

/// An environment that also hides the named variables from its commands.
#[derive(Debug, Clone)]
pub struct HideVars<E> {
    pub inner: E,
    pub vars: Vec<String>,
}

impl ExecEnv for Box<dyn ExecEnv> {
    fn kind(&self) -> &'static str {
        self.as_ref().kind()
    }
    fn command(&self, script: &str, workspace: &Path) -> Command {
        self.as_ref().command(script, workspace)
    }
    fn check(&self, workspace: &Path) -> Result<(), EnvError> {
        self.as_ref().check(workspace)
    }
    fn process_alive(&self, pid: u32, start_time: Option<u64>) -> bool {
        self.as_ref().process_alive(pid, start_time)
    }
    fn spawn_held(
        &self,
        script: &str,
        workspace: &Path,
        out: std::io::PipeWriter,
    ) -> std::io::Result<super::group::Held> {
        self.as_ref().spawn_held(script, workspace, out)
    }
    fn signal_group(&self, group: &super::group::ProcessGroup, sig: nix::sys::signal::Signal) {
        self.as_ref().signal_group(group, sig);
    }
    fn kill_survivors(&self, group: &super::group::ProcessGroup) -> Vec<super::host::ProcStat> {
        self.as_ref().kill_survivors(group)
    }
    fn container(&self) -> Option<&super::container::Container> {
        self.as_ref().container()
    }
}

impl<E: ExecEnv> ExecEnv for HideVars<E> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn command(&self, script: &str, workspace: &Path) -> Command {
        let mut cmd = self.inner.command(script, workspace);
        for var in &self.vars {
            cmd.env_remove(var);
        }
        cmd
    }

    fn check(&self, workspace: &Path) -> Result<(), EnvError> {
        self.inner.check(workspace)
    }

    fn process_alive(&self, pid: u32, start_time: Option<u64>) -> bool {
        self.inner.process_alive(pid, start_time)
    }

    fn spawn_held(
        &self,
        script: &str,
        workspace: &Path,
        out: std::io::PipeWriter,
    ) -> std::io::Result<super::group::Held> {
        if self.inner.container().is_some() {
            // The engine sees none of the agent's variables but a few.
            self.inner.spawn_held(script, workspace, out)
        } else {
            host_spawn_held(self.command(script, workspace), out)
        }
    }

    fn signal_group(&self, group: &super::group::ProcessGroup, sig: nix::sys::signal::Signal) {
        self.inner.signal_group(group, sig);
    }

    fn kill_survivors(&self, group: &super::group::ProcessGroup) -> Vec<super::host::ProcStat> {
        self.inner.kill_survivors(group)
    }

    fn container(&self) -> Option<&super::container::Container> {
        self.inner.container()
    }
}

/// The workspace as the sandbox binds it.
pub(super) fn canonical(workspace: &Path) -> PathBuf {
    workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf())
}

/// `path` with its directory resolved as far as it exists (the name itself
/// is kept: a log may not exist yet, a link must be seen as a link).
pub(super) fn resolved(path: &Path) -> PathBuf {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return path.to_path_buf();
    };
    let mut base = parent;
    let mut rest = Vec::new();
    loop {
        if let Ok(mut out) = base.canonicalize() {
            out.extend(rest.iter().rev());
            out.push(name);
            return out;
        }
        match (base.parent(), base.file_name()) {
            (Some(up), Some(last)) => {
                rest.push(last);
                base = up;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Builds the environment of a kind (`local` or `sandbox`; the container
/// environment is set up with [`ContainerEnv::attach`]).
pub fn from_kind(
    kind: crate::config::EnvKind,
    network: bool,
    sockets: &[PathBuf],
    protected: &super::protected::Protected,
) -> Result<Box<dyn ExecEnv>, EnvError> {
    match kind {
        crate::config::EnvKind::Local => Ok(Box::new(LocalEnv)),
        crate::config::EnvKind::Sandbox => Ok(Box::new(
            super::sandbox::SandboxEnv::new(network)?
                .protecting(protected.clone())
                .exposing(sockets.to_vec()),
        )),
        crate::config::EnvKind::Container => Err(EnvError::Container(
            "the container environment needs the run's id and log".into(),
        )),
    }
}

/// Runs every command in the run's container (see [`super::container`]).
#[derive(Debug, Clone)]
pub struct ContainerEnv {
    container: super::container::Container,
    attach: super::container::Attach,
}

impl ContainerEnv {
    /// Finds the run's container and reattaches to it when it runs, or
    /// starts it: a stopped one is removed first. `<wal>.out/` is created
    /// for it (0700) when missing.
    ///
    /// # Errors
    /// The engine is missing, or cannot start the container (the message
    /// names the engine and says what it said).
    pub fn attach(
        settings: &crate::config::ContainerSettings,
        network: bool,
        run_id: &str,
        wal: &Path,
        workspace: &Path,
        protected: &super::protected::Protected,
    ) -> Result<ContainerEnv, EnvError> {
        use super::container::{Attach, Container, ContainerState, Create};
        let (engine, binary) =
            super::container::find_engine(settings.engine).map_err(EnvError::Container)?;
        let failed = |e: String| EnvError::Container(format!("{engine}: {e}"));
        let ws = canonical(workspace);
        let out_dir = super::container::output_dir(&resolved(wal));
        let mut container = Container::new(
            engine,
            binary,
            super::container::container_name(run_id),
            out_dir.clone(),
        );
        let state = container.state().map_err(|e| failed(e.to_string()))?;
        let attach = match state {
            ContainerState::Running => Attach::Reattached,
            ContainerState::Stopped => {
                container.remove().map_err(failed)?;
                Attach::Replaced
            }
            ContainerState::Gone => Attach::Started,
        };
        if attach != Attach::Reattached {
            let (dirs, files) = hidden(protected, &ws)?;
            let made = !out_dir.exists();
            tinyagent_store::fsutil::create_dir_all_durable(&out_dir)
                .map_err(|e| failed(format!("{}: {e}", out_dir.display())))?;
            let created = container.create_or_adopt(&Create {
                image: &settings.image,
                network,
                workspace: &ws,
                wal: &resolved(wal),
                hide_dirs: &dirs,
                hide_files: &files,
            });
            if let Err(e) = created {
                if made {
                    let _ = std::fs::remove_dir(&out_dir);
                }
                return Err(failed(format!("cannot start the container: {e}")));
            }
        }
        container.set_reattached(attach == Attach::Reattached);
        Ok(ContainerEnv { container, attach })
    }

    /// Whether the run's container was found running, started anew, or
    /// replaced a stopped one.
    pub fn attached(&self) -> super::container::Attach {
        self.attach
    }

    /// The run's container.
    pub fn handle(&self) -> &super::container::Container {
        &self.container
    }
}

/// What the container must not see: the directory of each log (its
/// snapshots, torn tails, `<wal>.d/` and `<wal>.out/`, which is bound
/// elsewhere) behind an empty tmpfs, every other protected directory the
/// same, protected files behind `/dev/null`. A log directly in the
/// workspace, or a protected path holding the workspace, is refused.
fn hidden(
    protected: &super::protected::Protected,
    ws: &Path,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), EnvError> {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for log in protected.logs() {
        let log = resolved(log);
        let Some(dir) = log.parent() else { continue };
        if dir == ws || ws.starts_with(dir) {
            return Err(EnvError::Container(format!(
                "the run's own files cannot be hidden from the container: the log {} lies in a \
                 directory that holds the workspace, which the container must see while \
                 the log's directory is hidden from it; give --wal a path in a directory \
                 of its own",
                log.display()
            )));
        }
        dirs.push(dir.to_path_buf());
    }
    for path in protected.paths() {
        let path = resolved(path);
        if protected.logs().iter().any(|l| resolved(l) == path) {
            continue;
        }
        if ws.starts_with(&path) {
            return Err(EnvError::Container(format!(
                "the run's own files cannot be hidden from the container: {} is protected \
                 and holds the workspace",
                path.display()
            )));
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => dirs.push(path),
            Ok(_) => files.push(path),
            Err(_) => {}
        }
    }
    dirs.sort();
    dirs.dedup();
    files.sort();
    files.dedup();
    Ok((dirs, files))
}

impl ExecEnv for ContainerEnv {
    fn kind(&self) -> &'static str {
        "container"
    }

    /// A one-shot exec for callers that want a plain command (hooks never
    /// use it: they run on the host).
    fn command(&self, script: &str, workspace: &Path) -> Command {
        let mut cmd = self.container.engine_command();
        cmd.args(["exec", "-w"])
            .arg(workspace)
            .arg(self.container.name())
            .args(["bash", "-c", script]);
        cmd
    }

    fn process_alive(&self, pid: u32, start_time: Option<u64>) -> bool {
        self.container.reattached() && self.container.alive(&[(pid, start_time)]) == [pid]
    }

    fn spawn_held(
        &self,
        script: &str,
        workspace: &Path,
        out: std::io::PipeWriter,
    ) -> std::io::Result<super::group::Held> {
        self.container.spawn_held(script, workspace, out)
    }

    fn signal_group(&self, group: &super::group::ProcessGroup, sig: nix::sys::signal::Signal) {
        self.container
            .signal_group(group.pid, group.start_time, sig);
    }

    fn kill_survivors(&self, group: &super::group::ProcessGroup) -> Vec<super::host::ProcStat> {
        self.container.kill_survivors(group)
    }

    fn container(&self) -> Option<&super::container::Container> {
        Some(&self.container)
    }
}

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
