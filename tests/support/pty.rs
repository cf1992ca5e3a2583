//! The real binary on a real pseudo-terminal (rexpect): what the person
//! types and sees in `tinyagent chat` and at an approval question.

use super::e2e::{Sandbox, bin};
use rexpect::session::PtySession;
use std::path::Path;
use std::process::{Command, Stdio};

/// How long one expectation waits.
pub const TIMEOUT_MS: u64 = 30_000;

/// Starts `cmd` with the pty as its stdin, stdout and stderr and as its
/// controlling terminal (a session of its own), so Ctrl-C typed there is
/// a SIGINT to it.
pub fn spawn(mut cmd: Command) -> PtySession {
    cmd.stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .env("TERM", "xterm")
        .env("NO_COLOR", "1");
    rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawn on a pty")
}

/// `tinyagent chat` in the sandbox against `base_url`, writing `sb.wal()`.
pub fn chat_cmd(sb: &Sandbox, base_url: &str, toml: &str) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.dir.path())
        .arg("chat")
        .arg("--base-url")
        .arg(base_url)
        .arg("--model")
        .arg("test-model")
        .arg("--wal")
        .arg(sb.wal())
        .arg("--cwd")
        .arg(sb.ws())
        .arg("--config")
        .arg(sb.fast_config(toml))
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    c
}

/// `tinyagent resume <wal>` with the sandbox's config (hooks, approvals).
pub fn resume_cmd(sb: &Sandbox, wal: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.dir.path())
        .arg("resume")
        .arg(wal)
        .arg("--config")
        .arg(sb.path("tinyagent.toml"))
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    c
}

/// SIGKILLs the session's process and waits for it.
pub fn kill9(s: &mut PtySession) {
    s.process_mut()
        .kill(rexpect::process::Signal::SIGKILL)
        .expect("kill -9");
}

/// Waits for the session's process to exit; its exit code (`None`: a signal).
pub fn exit_code(s: &mut PtySession) -> Option<i32> {
    match s.process_mut().wait().expect("wait") {
        rexpect::process::WaitStatus::Exited(_, code) => Some(code),
        _ => None,
    }
}
