//! The engine's command line, apart from any one container: which engine
//! runs, its scrubbed environment, and the questions asked of it by name
//! (does a container exist and run, which `tinyagent-*` containers there
//! are) and the removal of one.

use super::WAL_LABEL;
use crate::config::EngineKind;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The agent's variables the engine's command line may see.
const ENGINE_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
];

/// Whether the container exists and runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Running,
    Stopped,
    Gone,
}

impl ContainerState {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Running => "running",
            ContainerState::Stopped => "stopped",
            ContainerState::Gone => "gone",
        }
    }
}

/// The engine asked for, or the first of podman, docker on PATH.
pub fn find_engine(engine: Option<EngineKind>) -> Result<(EngineKind, PathBuf), String> {
    let wanted = match engine {
        Some(e) => vec![e],
        None => vec![EngineKind::Podman, EngineKind::Docker],
    };
    for e in &wanted {
        if let Some(path) = crate::exec::env::find_on_path(e.as_str()) {
            return Ok((*e, path));
        }
    }
    Err(match engine {
        Some(e) => format!("the container engine `{e}` is not on PATH"),
        None => "no container engine: neither `podman` nor `docker` is on PATH".to_string(),
    })
}

/// The container name of a run.
pub fn container_name(run_id: &str) -> String {
    format!("tinyagent-{run_id}")
}

pub(super) fn trimmed(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// The engine's command line with a scrubbed environment: of the agent's
/// variables only a short list (`PATH`, `HOME`, the engine's own settings;
/// never a key).
pub fn engine_command(binary: &Path) -> Command {
    let mut cmd = Command::new(binary);
    crate::exec::host::detach(&mut cmd);
    cmd.env_clear();
    for var in ENGINE_VARS {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd
}

/// Whether container `name` exists and runs.
pub fn state_of(binary: &Path, name: &str) -> io::Result<ContainerState> {
    let out = engine_command(binary)
        .args([
            "container",
            "inspect",
            "--format",
            "{{.State.Running}}",
            name,
        ])
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        let err = trimmed(&out.stderr);
        return if err.contains("no such") || err.contains("No such") {
            Ok(ContainerState::Gone)
        } else {
            Err(io::Error::other(err))
        };
    }
    Ok(if trimmed(&out.stdout) == "true" {
        ContainerState::Running
    } else {
        ContainerState::Stopped
    })
}

/// The states of many containers with two engine calls (whatever their
/// number): `ps` says which exist, one `inspect` whether they run. A name
/// the engine does not know is [`ContainerState::Gone`].
///
/// # Errors
/// When the engine cannot be asked.
pub fn states_of(
    binary: &Path,
    names: &[String],
) -> Result<std::collections::HashMap<String, ContainerState>, String> {
    let existing: std::collections::HashSet<String> = list_containers(binary)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut states: std::collections::HashMap<String, ContainerState> = names
        .iter()
        .map(|n| (n.clone(), ContainerState::Gone))
        .collect();
    let ask: Vec<&String> = names.iter().filter(|n| existing.contains(*n)).collect();
    if ask.is_empty() {
        return Ok(states);
    }
    let out = engine_command(binary)
        .args([
            "container",
            "inspect",
            "--format",
            "{{.Name}}\t{{.State.Running}}",
        ])
        .args(&ask)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    // A container removed between the two calls makes inspect fail for it
    // alone; the others are still printed.
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((name, running)) = line.split_once('\t') {
            let name = name.trim().trim_start_matches('/');
            if let Some(state) = states.get_mut(name) {
                *state = if running.trim() == "true" {
                    ContainerState::Running
                } else {
                    ContainerState::Stopped
                };
            }
        }
    }
    Ok(states)
}

/// Removes container `name` (no error when it is gone).
pub fn remove(binary: &Path, name: &str) -> Result<(), String> {
    let out = engine_command(binary)
        .args(["rm", "-f", "-t", "0", name])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let err = trimmed(&out.stderr);
    if out.status.success() || err.contains("no such") || err.contains("No such") {
        Ok(())
    } else {
        Err(err)
    }
}

/// The containers named `tinyagent-*` and the log each was started for.
pub fn list_containers(binary: &Path) -> Result<Vec<(String, Option<PathBuf>)>, String> {
    let format = format!("{{{{.Names}}}}\t{{{{index .Labels \"{WAL_LABEL}\"}}}}");
    let out = engine_command(binary)
        .args([
            "ps",
            "-a",
            "--filter",
            "name=tinyagent-",
            "--format",
            &format,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(trimmed(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, wal) = l.split_once('\t').unwrap_or((l, ""));
            let name = name.trim();
            let wal = wal.trim();
            name.starts_with("tinyagent-").then(|| {
                (
                    name.to_string(),
                    (!wal.is_empty() && wal != "<no value>").then(|| PathBuf::from(wal)),
                )
            })
        })
        .collect())
}
