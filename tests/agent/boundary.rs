//! The sandbox holds the terminal and the host (contract section 20), on
//! the real binary:
//!
//! - a sandboxed command cannot push input into the person's terminal
//!   (`TIOCSTI`): neither an answer to the next approval question, nor a
//!   line the person's shell would run after tinyagent exits;
//! - a command in any environment has no controlling terminal;
//! - a sandboxed command reaches no host unix socket: one under `/run`,
//!   one elsewhere on the host, an abstract one; a socket the config names
//!   in `env.sockets` is the one it does reach;
//! - a descriptor tinyagent inherited (fd 7) reaches no command, background
//!   process or hook.

use crate::support::contract::{self, Rec};
use crate::support::e2e::{Sandbox, host_tempdir, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::pty;
use crate::support::require::{self, require};
use crate::support::sockets::{Listening, connect_probe, listen_abstract};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const SANDBOX: &str = "[env]\nkind = \"sandbox\"\n";

fn bwrap_works(sb: &Sandbox, test: &str) -> bool {
    require("bwrap", test, require::bwrap(&sb.ws(), false)).is_some()
}

/// A command that tries to push `text` into every terminal it can name:
/// `/dev/tty`, its descriptors 0 to 2 and every `/dev/pts/N`. It prints
/// `INJECTED <where>` for each that took it, `refused <where> <errno>` for
/// the rest.
fn tiocsti(text: &str) -> String {
    let script = format!(
        r#"
import fcntl, glob, os, termios
text = {text:?}.encode()
def push(fd, where):
    try:
        for c in text:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        print("INJECTED", where)
    except OSError as e:
        print("refused", where, e.errno)
for where in ["/dev/tty"] + sorted(glob.glob("/dev/pts/[0-9]*")):
    try:
        fd = os.open(where, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        print("refused", where, "open", e.errno)
        continue
    push(fd, where)
    os.close(fd)
for fd in (0, 1, 2):
    push(fd, "fd%d" % fd)
print("probe-done")
"#
    );
    format!("python3 -c '{}'", script.replace('\'', r"'\''"))
}

/// The run's `tinyagent run` command line on `sb`, in the sandbox, with
/// `toml` added to its config.
fn run_cmd(sb: &Sandbox, mock: &MockServer, toml: &str) -> Command {
    local_run_cmd(sb, mock, &format!("{SANDBOX}{toml}"))
}

/// The same in the local environment (`toml` as given).
fn local_run_cmd(sb: &Sandbox, mock: &MockServer, toml: &str) -> Command {
    sb.run_cmd_cfg(&mock.base_url(), "do it", toml)
}

#[test]
fn a_sandboxed_call_cannot_answer_the_next_approval_question() {
    let sb = Sandbox::new();
    if !bwrap_works(
        &sb,
        "a_sandboxed_call_cannot_answer_the_next_approval_question",
    ) {
        return;
    }
    let mock = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": tiocsti("y\n")})).with_ids(&["inject"]),
        MockReply::tool_call("bash", json!({"command": "echo ran > second.txt"}))
            .with_ids(&["second"]),
        MockReply::text("done"),
    ]);
    let mut s = pty::spawn(run_cmd(&sb, &mock, "[approvals]\nmode = \"mutating\"\n"));
    s.exp_string("[n]o").expect("the first question");
    s.send_line("y").expect("answer");
    // The second question must wait for the person: nothing the first call
    // typed answers it.
    s.exp_string("[n]o").expect("the second question");
    std::thread::sleep(Duration::from_millis(500));
    let recs = contract::read(&sb.wal());
    let decided: Vec<&Rec> = contract::of_kind(&recs, "approval.decided");
    assert_eq!(
        decided.len(),
        1,
        "the second call was decided before the person answered: {decided:?}"
    );
    s.send_line("n not now").expect("answer");
    s.exp_string("totals:").expect("the run ends");
    assert_eq!(pty::exit_code(&mut s), Some(0));
    let recs = contract::read_checked(&sb.wal());
    let probe = contract::result_content(&recs, "inject");
    assert!(probe.contains("probe-done"), "{probe}");
    assert!(!probe.contains("INJECTED"), "{probe}");
    let decided = contract::of_kind(&recs, "approval.decided");
    assert_eq!(decided[1].data["call_id"], "second");
    assert_eq!(decided[1].data["decision"], "deny");
    assert!(!sb.ws().join("second.txt").exists());
    mock.assert_no_violations();
}

/// The person's interactive shell starts tinyagent; a command of the run
/// pushes a line into the terminal. After tinyagent exits the shell must not
/// run it.
fn shell_case(test: &str, toml: &str) {
    shell_case_as(test, toml, false);
}

/// [`shell_case`], the person (the shell, and so tinyagent and its
/// commands) being `nobody` when `as_nobody`.
fn shell_case_as(test: &str, toml: &str, as_nobody: bool) {
    let sb = Sandbox::new();
    if !toml.is_empty() && !bwrap_works(&sb, test) {
        return;
    }
    let outside = host_tempdir();
    let marker = outside.path().join("typed-by-a-tool");
    let mock = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": tiocsti(&format!("touch {}\n", marker.display()))}),
        )
        .with_ids(&["inject"]),
        MockReply::tool_call(
            "bash",
            json!({"command": "(exec 3<>/dev/tty) 2>/dev/null && echo HAS-TTY || echo NO-TTY"}),
        )
        .with_ids(&["tty"]),
        MockReply::text("done"),
    ]);
    let run = if toml.is_empty() {
        local_run_cmd(&sb, &mock, "")
    } else {
        run_cmd(&sb, &mock, "")
    };
    let line: Vec<String> = std::iter::once(run.get_program())
        .chain(run.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''")))
        .collect();
    let mut shell = if as_nobody {
        for dir in [sb.dir.path(), outside.path()] {
            let chown = Command::new("chown")
                .arg("-R")
                .arg("65534:65534")
                .arg(dir)
                .status()
                .unwrap();
            assert!(chown.success());
        }
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "bash",
        ])
        .env("HOME", sb.home());
        c
    } else {
        Command::new("bash")
    };
    shell
        .args(["--norc", "--noprofile", "-i"])
        .current_dir(sb.dir.path())
        .env_remove("OPENAI_API_KEY")
        .env("PS1", "$ ")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home());
    let mut s = pty::spawn(shell);
    s.send_line(&format!("{}; echo run-exit=$?", line.join(" ")))
        .expect("type the command");
    s.exp_string("run-exit=0").expect("the run ends");
    // Give the shell the chance to run whatever was pushed in.
    s.send_line("echo shell-still-here").expect("type");
    s.exp_string("shell-still-here").expect("the shell answers");
    std::thread::sleep(Duration::from_millis(300));
    s.send_line("exit").expect("exit");
    let _ = pty::exit_code(&mut s);
    let recs = contract::read_checked(&sb.wal());
    let probe = contract::result_content(&recs, "inject");
    assert!(probe.contains("probe-done"), "{probe}");
    assert!(
        contract::result_content(&recs, "tty").contains("NO-TTY"),
        "a command has a controlling terminal"
    );
    assert!(
        !marker.exists(),
        "a line typed by a tool ran in the person's shell:\n{probe}"
    );
    if !toml.is_empty() || as_nobody {
        assert!(!probe.contains("INJECTED"), "{probe}");
    }
}

/// The same in the local environment for a person who is not root: with
/// no controlling terminal and no capability, no command can push input
/// into the terminal at all.
#[test]
fn a_local_call_of_a_user_who_is_not_root_cannot_type_into_the_shell() {
    let test = "a_local_call_of_a_user_who_is_not_root_cannot_type_into_the_shell";
    let Some(()) = require(
        "root",
        test,
        require::root().and_then(|()| crate::support::require::nobody()),
    ) else {
        return;
    };
    shell_case_as(test, "", true);
}

#[test]
fn a_sandboxed_call_cannot_type_into_the_persons_shell() {
    shell_case(
        "a_sandboxed_call_cannot_type_into_the_persons_shell",
        SANDBOX,
    );
}

#[test]
fn a_local_call_has_no_controlling_terminal() {
    // As root a local command keeps CAP_SYS_ADMIN, with which the kernel
    // lets it push input into any terminal it can open by name: the local
    // environment promises no controlling terminal, not that.
    if nix::unistd::geteuid().is_root() {
        let sb = Sandbox::new();
        let mock = MockServer::start(vec![
            MockReply::tool_call(
                "bash",
                json!({"command": "(exec 3<>/dev/tty) 2>/dev/null && echo HAS-TTY || echo NO-TTY"}),
            )
            .with_ids(&["tty"]),
            MockReply::text("done"),
        ]);
        let mut s = pty::spawn(local_run_cmd(&sb, &mock, ""));
        s.exp_string("totals:").expect("the run ends");
        assert_eq!(pty::exit_code(&mut s), Some(0));
        let recs = contract::read_checked(&sb.wal());
        assert!(contract::result_content(&recs, "tty").contains("NO-TTY"));
    } else {
        shell_case("a_local_call_has_no_controlling_terminal", "");
    }
}

#[test]
fn the_sandbox_reaches_no_host_unix_socket_but_the_ones_named() {
    let test = "the_sandbox_reaches_no_host_unix_socket_but_the_ones_named";
    let sb = Sandbox::new();
    // Writing under /run takes root.
    let Some(()) = require("root", test, require::root()) else {
        return;
    };
    if !bwrap_works(&sb, test) {
        return;
    }
    let tag = format!("{}-{:08x}", std::process::id(), fastrand::u32(..));
    let run_sock = Listening::at(Path::new(&format!("/run/tinyagent-test-{tag}.sock")));
    let elsewhere = host_tempdir();
    let host_sock = Listening::at(&elsewhere.path().join("service.sock"));
    let named_sock = Listening::at(&elsewhere.path().join("named.sock"));
    let abstract_name = format!("tinyagent-test-{tag}");
    let _abstract = listen_abstract(&abstract_name);
    let targets = vec![
        run_sock.path.display().to_string(),
        host_sock.path.display().to_string(),
        format!("@{abstract_name}"),
        named_sock.path.display().to_string(),
    ];
    let mock = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": connect_probe(&targets)}))
            .with_ids(&["sockets"]),
        MockReply::text("done"),
    ]);
    let toml = format!("sockets = [{:?}]\n", named_sock.path.display().to_string());
    let mut cmd = run_cmd(&sb, &mock, &toml);
    cmd.stdin(std::process::Stdio::null());
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read_checked(&sb.wal());
    let probe = contract::result_content(&recs, "sockets");
    assert!(probe.contains("probe-done"), "{probe}");
    for t in &targets[..3] {
        assert!(
            probe.contains(&format!("refused {t}")),
            "the sandbox reached {t}:\n{probe}"
        );
    }
    assert!(
        probe.contains(&format!("CONNECTED {}", targets[3])),
        "the socket named in env.sockets was not reachable:\n{probe}"
    );
}

#[test]
fn an_inherited_descriptor_reaches_no_child() {
    for (env, toml) in [("local", ""), ("sandbox", SANDBOX)] {
        let sb = Sandbox::new();
        if !toml.is_empty() && !bwrap_works(&sb, "an_inherited_descriptor_reaches_no_child") {
            return;
        }
        let outside = host_tempdir();
        let target = outside.path().join("outside.txt");
        std::fs::write(&target, "").unwrap();
        let leak = "if echo leaked >&7; then echo FD7-OPEN; else echo FD7-CLOSED; fi";
        let mock = MockServer::start(vec![
            MockReply::tool_calls(vec![
                ("bash", json!({"command": leak})),
                (
                    "bash",
                    json!({"command": format!("{leak}; sleep 0.2"), "background": true}),
                ),
            ])
            .with_ids(&["fg", "bg"]),
            MockReply::tool_call("bash", json!({"command": "sleep 0.5"})).with_ids(&["wait"]),
            MockReply::text("done"),
        ]);
        let hook = "cat >/dev/null; echo hook >&7; exit 0".to_string();
        let config = format!(
            "{toml}[hooks]\npre_tool = {}\n",
            serde_json::Value::String(hook)
        );
        let inner = sb.run_cmd_cfg(&mock.base_url(), "do it", &config);
        let line: Vec<String> = std::iter::once(inner.get_program())
            .chain(inner.get_args())
            .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''")))
            .collect();
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!(
                "exec 7>>'{}'; exec {}",
                target.display(),
                line.join(" ")
            ))
            .current_dir(sb.dir.path())
            .env_remove("OPENAI_API_KEY")
            .env("TINYAGENT_HOME", sb.home())
            .env("XDG_CONFIG_HOME", sb.config_home())
            .stdin(std::process::Stdio::null());
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(0), "{env}: {}", stderr(&out));
        let recs = contract::read_checked(&sb.wal());
        assert!(
            contract::result_content(&recs, "fg").contains("FD7-CLOSED"),
            "{env}"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "",
            "{env}: a child wrote through the agent's fd 7"
        );
    }
}
