//! Running the real binary in the container environment (podman, image
//! `host`): a temp dir with the workspace `ws/` and the log in `logs/` (a
//! directory of its own: the container hides the log's directory, so it
//! may not hold the workspace), and the engine asked directly.

use crate::support::e2e::{Sandbox, bin};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The config every container test uses.
pub const CONFIG: &str = "[env]\nkind = \"container\"\nengine = \"podman\"\n";

pub struct Ctr {
    pub sb: Sandbox,
}

impl Ctr {
    pub fn new() -> Ctr {
        let sb = Sandbox::new();
        std::fs::create_dir(sb.path("logs")).expect("logs dir");
        Ctr { sb }
    }
    pub fn ws(&self) -> PathBuf {
        self.sb.ws()
    }
    pub fn wal(&self) -> PathBuf {
        self.sb.path("logs/run.wal")
    }
    /// `tinyagent run` in the container environment against `base_url`.
    pub fn run_cmd(&self, base_url: &str, task: &str) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(self.sb.dir.path())
            .arg("run")
            .arg("--base-url")
            .arg(base_url)
            .arg("--model")
            .arg("test-model")
            .arg("--wal")
            .arg(self.wal())
            .arg("--cwd")
            .arg(self.ws())
            .arg("--config")
            .arg(self.sb.fast_config(CONFIG))
            .arg(task)
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null());
        c
    }
    /// `tinyagent resume` of the log against `base_url`.
    pub fn resume_cmd(&self, base_url: &str) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(self.sb.dir.path())
            .arg("resume")
            .arg(self.wal())
            .arg("--base-url")
            .arg(base_url)
            .arg("--config")
            .arg(self.sb.path("tinyagent.toml"))
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null());
        c
    }
    /// The container `run.started` names (once the log has it).
    pub fn name(&self) -> Option<String> {
        let first = std::fs::read(self.wal()).ok()?;
        let line = first.split(|b| *b == b'\n').next()?;
        let rec: Value = serde_json::from_slice(line).ok()?;
        rec["data"]["settings"]["container"]
            .as_str()
            .map(str::to_string)
    }
    /// Waits (up to 30 s) until the log holds a record for which `pred`
    /// holds.
    pub fn wait_for_record(&self, pred: impl Fn(&Value) -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let bytes = std::fs::read(self.wal()).unwrap_or_default();
            if bytes
                .split(|b| *b == b'\n')
                .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
                .any(|r| pred(&r))
            {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Ctr {
    fn drop(&mut self) {
        // A test never leaves its container behind, also when it fails.
        if let Some(name) = self.name() {
            let _ = podman(&["rm", "-f", "-t", "0", &name]);
        }
    }
}

/// `podman ARGS`.
pub fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run podman")
}

/// `running`, `stopped` or `gone`.
pub fn state(name: &str) -> &'static str {
    let out = podman(&[
        "container",
        "inspect",
        "--format",
        "{{.State.Running}}",
        name,
    ]);
    if !out.status.success() {
        "gone"
    } else if String::from_utf8_lossy(&out.stdout).trim() == "true" {
        "running"
    } else {
        "stopped"
    }
}

/// The container's id (empty when it is gone).
pub fn id(name: &str) -> String {
    let out = podman(&["container", "inspect", "--format", "{{.Id}}", name]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// stdout of `bash -c script` run inside the container.
pub fn exec(name: &str, script: &str) -> String {
    let out = podman(&["exec", name, "bash", "-c", script]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}
