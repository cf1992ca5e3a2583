//! The sandbox environment end to end: the real binary with `env.kind =
//! "sandbox"` against a loopback model server. A write outside the workspace
//! fails, the network is refused (a loopback port the test opens cannot be
//! reached), the workspace is writable, the environment is recorded in
//! `run.started` and `process.started`, and a background process started in
//! the sandbox is reported on resume after the agent was SIGKILLed, with the
//! environment named. A missing bubblewrap fails `run` at start.
//!
//! Tests that need a working bubblewrap print `SKIPPED: <reason>` and return
//! where it is missing or cannot create namespaces (they fail instead under
//! `TINYAGENT_REQUIRE=bwrap`, see `support/require.rs`).

use crate::support::contract;
use crate::support::contract::Rec;
use crate::support::e2e;
use crate::support::e2e::{Sandbox, events, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use crate::support::wait_until;
use serde_json::{Value, json};
use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

const SANDBOX: &str = "[env]\nkind = \"sandbox\"\n";
const SANDBOX_NET: &str = "[env]\nkind = \"sandbox\"\nnetwork = true\n";

/// True when bubblewrap can run a sandbox on `sb`'s workspace; otherwise
/// skips `test` loudly (or fails it under `TINYAGENT_REQUIRE=bwrap`) and
/// gives false.
fn bwrap_works(sb: &Sandbox, test: &str) -> bool {
    require("bwrap", test, require::bwrap(&sb.ws(), false)).is_some()
}

/// A loopback listener that does not block on accept.
fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn probe(port: u16) -> String {
    format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo net-connected || echo net-refused"
    )
}

#[test]
fn sandbox_keeps_writes_in_the_workspace_and_refuses_the_network() {
    let sb = Sandbox::new();
    if !bwrap_works(
        &sb,
        "sandbox_keeps_writes_in_the_workspace_and_refuses_the_network",
    ) {
        return;
    }
    // On the host's real file system (not under /tmp, which is private in
    // the sandbox), outside the workspace.
    let host_dir = e2e::host_tempdir();
    let escaped = host_dir.path().join("escaped.txt");
    let beside = sb.path("beside.txt");
    let (l, port) = listener();
    let server = MockServer::start(vec![
        MockReply::tool_calls(vec![
            (
                "bash",
                json!({"command": format!(
                    "echo x > '{}' && echo wrote-outside || echo refused-outside; echo y > '{}'",
                    escaped.display(), beside.display())}),
            ),
            ("bash", json!({"command": probe(port)})),
            (
                "bash",
                json!({"command": "echo inside > made.txt && echo wrote-ws"}),
            ),
            ("bash", json!({"command": "sleep 300", "background": true})),
            (
                "write",
                json!({"path": host_dir.path().join("by-write.txt"), "content": "x"}),
            ),
        ])
        .with_ids(&["out", "net", "ws", "bg", "wout"]),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd_cfg(&server.base_url(), "stay inside", SANDBOX));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let recs = contract::read_checked(&sb.wal());
    let outside = contract::result_content(&recs, "out");
    assert!(outside.contains("refused-outside"), "{outside}");
    assert!(
        outside.contains("Read-only file system") || outside.contains("No such file or directory"),
        "{outside}"
    );
    assert!(!escaped.exists(), "a write escaped the sandbox");
    assert!(
        !beside.exists(),
        "a write beside the workspace reached the host"
    );
    let net = contract::result_content(&recs, "net");
    assert!(net.contains("net-refused"), "{net}");
    match l.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the sandbox reached the host's loopback: {other:?}"),
    }
    assert!(contract::result_content(&recs, "ws").contains("wrote-ws"));
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("made.txt")).unwrap(),
        "inside\n"
    );
    // The file tools keep to the same boundary.
    assert!(contract::result_content(&recs, "wout").contains("escapes the workspace"));
    assert!(!host_dir.path().join("by-write.txt").exists());
    let settings = &recs[0].data["settings"];
    assert_eq!(settings["env"], "sandbox");
    assert_eq!(settings["network"], false);
    let started: Vec<&Rec> = recs
        .iter()
        .filter(|r| r.kind == "process.started")
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].data["env"], "sandbox");
    // The run stopped what it left running.
    assert!(recs.iter().any(|r| r.kind == "process.exited"));
}

#[test]
fn network_on_reaches_the_host_loopback() {
    // The control for the test above: the same probe connects when the
    // sandbox is given the network.
    let sb = Sandbox::new();
    if !bwrap_works(&sb, "network_on_reaches_the_host_loopback") {
        return;
    }
    let (l, port) = listener();
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": probe(port)})).with_ids(&["net"]),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd_cfg(&server.base_url(), "reach out", SANDBOX_NET));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = contract::read_checked(&sb.wal());
    assert!(contract::result_content(&recs, "net").contains("net-connected"));
    assert!(l.accept().is_ok(), "the connection arrived");
    assert_eq!(recs[0].data["settings"]["network"], true);
}

/// Live (not zombie) processes whose command line holds `token`: (pid,
/// command line with NULs as spaces).
fn live_with(token: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if !cmdline.contains(token) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with('Z'));
        if !zombie {
            found.push((pid, cmdline));
        }
    }
    found
}

/// True once the command renamed to `token` runs inside its sandbox (so
/// bubblewrap finished setting up, death signal included).
fn running_as(token: &str) -> bool {
    live_with(token).iter().any(|(_, c)| c.starts_with(token))
}

#[test]
fn background_process_in_the_sandbox_is_reported_on_resume() {
    let sb = Sandbox::new();
    if !bwrap_works(
        &sb,
        "background_process_in_the_sandbox_is_reported_on_resume",
    ) {
        return;
    }
    let bg = format!("tinyagent-bg-{}", std::process::id());
    let fg = format!("tinyagent-fg-{}", std::process::id());
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": format!("exec -a {bg} sleep 300"), "background": true}),
        )
        .with_ids(&["bg"]),
        MockReply::tool_call(
            "bash",
            json!({"command": format!("exec -a {fg} sleep 120")}),
        )
        .with_ids(&["long"]),
        MockReply::text("resumed fine"),
    ]);
    let mut child = sb
        .run_cmd_cfg(&server.base_url(), "start a server", SANDBOX)
        .spawn()
        .unwrap();
    wait_until("both sandboxed commands to run", || {
        running_as(&bg) && running_as(&fg)
    });
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9));
    let before = contract::read(&sb.wal());
    let started = before
        .iter()
        .find(|r| r.kind == "process.started")
        .expect("process.started is durable");
    assert_eq!(started.data["env"], "sandbox");
    let pid = started.data["pid"].as_u64().unwrap();
    // --die-with-parent: each sandbox and everything in it go with the agent.
    wait_until("the sandboxed processes to die with the agent", || {
        live_with(&bg).is_empty() && live_with(&fg).is_empty()
    });
    let mut cmd = sb.resume_cmd();
    cmd.arg("--json");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_no_violations();
    let recs = contract::read_checked(&sb.wal());
    assert_eq!(
        contract::result_content(&recs, "long"),
        "[interrupted: tool did not complete before the agent stopped; it may have partially run — verify state before retrying]"
    );
    let resume = recs.iter().find(|r| r.kind == "resume").unwrap();
    assert_eq!(resume.data["lost_processes"], json!(["p1"]));
    let notice = resume.data["notice"].as_str().unwrap();
    let line = notice
        .lines()
        .find(|l| l.contains(&format!("pid {pid}")))
        .unwrap_or_else(|| panic!("the notice does not name pid {pid}: {notice}"));
    assert!(line.contains("[sandbox]"), "{line}");
    assert!(line.contains("no longer running"), "{line}");
    let lost: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "resume.process_lost")
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0]["env"], "sandbox");
    assert_eq!(lost[0]["still_running"], false);
    assert_eq!(lost[0]["pid"], pid);
    // The model is told too.
    let reqs = server.recorded();
    let told = reqs.last().unwrap().messages().iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains("[sandbox]"))
    });
    assert!(told, "the [Resumed] message names the environment");
}

#[test]
fn missing_bubblewrap_fails_run_at_start_saying_how_to_install_it() {
    let sb = Sandbox::new();
    let empty = tempfile::tempdir().unwrap();
    let server = MockServer::start(vec![MockReply::text("never asked")]);
    let mut cmd = sb.run_cmd_cfg(&server.base_url(), "no sandbox here", SANDBOX);
    cmd.env("PATH", empty.path());
    let out = output(cmd);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bubblewrap"), "{err}");
    assert!(err.contains("apt-get install bubblewrap"), "{err}");
    assert_eq!(server.request_count(), 0, "no model call was made");
    assert!(!sb.wal().exists(), "nothing was logged");
}

/// `run` with the log and the config file inside the workspace: the log in
/// `ws/<wal_rel>`, the config in `ws/tinyagent.toml` holding `toml` too.
fn run_with_files_in_ws(sb: &Sandbox, base_url: &str, wal_rel: &str, toml: &str) -> Command {
    let ws = sb.ws();
    let config = ws.join("tinyagent.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nmax_retries = 2\nretry_base_ms = 5\nrequest_timeout_s = 20\n{SANDBOX}{toml}"
        ),
    )
    .unwrap();
    let mut c = Command::new(e2e::bin());
    c.current_dir(sb.dir.path())
        .arg("run")
        .arg("--base-url")
        .arg(base_url)
        .arg("--model")
        .arg("test-model")
        .arg("--wal")
        .arg(ws.join(wal_rel))
        .arg("--cwd")
        .arg(&ws)
        .arg("--config")
        .arg(&config)
        .arg("tamper with the run")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null());
    c
}

#[test]
fn the_runs_own_files_in_the_workspace_are_out_of_the_sandboxs_reach() {
    let sb = Sandbox::new();
    if !bwrap_works(
        &sb,
        "the_runs_own_files_in_the_workspace_are_out_of_the_sandboxs_reach",
    ) {
        return;
    }
    let ws = sb.ws();
    std::fs::create_dir(ws.join("hooks")).unwrap();
    let hook_body = "cat > /dev/null\nexit 0\n";
    std::fs::write(ws.join("hooks/pre.sh"), hook_body).unwrap();
    let wal = ws.join(".tinyagent/run.wal");
    let attacks = [
        ": > .tinyagent/run.wal",
        "echo forged >> .tinyagent/run.wal",
        "cp .tinyagent/run.wal forged && echo forged >> forged && mv -f forged .tinyagent/run.wal",
        "rm -f .tinyagent/run.wal",
        "mv .tinyagent .tinyagent.old && mkdir .tinyagent && echo forged > .tinyagent/run.wal",
        "echo forged > .tinyagent/run.wal.snapshot",
        "echo forged > tinyagent.toml",
        "echo forged > cfg && mv -f cfg tinyagent.toml",
        "rm -f tinyagent.toml",
        "echo 'echo forged >&2; exit 2' > hooks/pre.sh",
        "mv hooks hooks.old && mkdir hooks && echo 'exit 2' > hooks/pre.sh",
    ];
    // One call per attack: snapshots are taken between them (every 2
    // records), so their siblings of the log exist while later ones run.
    let calls: Vec<(&str, Value)> = attacks
        .iter()
        .map(|a| {
            let cmd = format!("({a}) 2>&1 && echo GOT-IN || echo KEPT-OUT; rm -f forged cfg");
            ("bash", json!({ "command": cmd }))
        })
        .collect();
    let ids: Vec<String> = (0..attacks.len()).map(|i| format!("a{i}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let replies: Vec<MockReply> = calls
        .into_iter()
        .zip(&id_refs)
        .map(|((name, args), id)| MockReply::tool_call(name, args).with_ids(&[id]))
        .chain([MockReply::text("done")])
        .collect();
    let server = MockServer::start(replies);
    let config_before = {
        let toml = "[hooks]\npre_tool = \"sh hooks/pre.sh\"\n[wal]\nsnapshot_every = 2\n";
        let cmd = run_with_files_in_ws(&sb, &server.base_url(), ".tinyagent/run.wal", toml);
        let config = std::fs::read_to_string(ws.join("tinyagent.toml")).unwrap();
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        config
    };
    server.assert_no_violations();
    let recs = contract::read(&wal);
    contract::check_write_order(&recs);
    for (i, a) in attacks.iter().enumerate() {
        let got = contract::result_content(&recs, &format!("a{i}"));
        assert!(got.contains("KEPT-OUT"), "{a}: {got}");
        assert!(!got.contains("GOT-IN"), "{a}: {got}");
    }
    // Every hook ran the real script and allowed its call.
    let allowed = recs
        .iter()
        .filter(|r| {
            r.kind == "tool.result" && !r.data["content"].as_str().unwrap_or("").contains("blocked")
        })
        .count();
    assert_eq!(allowed, attacks.len());
    assert_eq!(
        std::fs::read_to_string(ws.join("tinyagent.toml")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("hooks/pre.sh")).unwrap(),
        hook_body
    );
    assert!(!ws.join("hooks.old").exists());
    assert!(!ws.join(".tinyagent.old").exists());
    // Only the agent wrote beside the log, and the log is whole.
    assert!(ws.join(".tinyagent/run.wal.snapshot").exists());
    for f in std::fs::read_dir(ws.join(".tinyagent")).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        assert!(name.starts_with("run.wal"), "{name}");
        // (The log and its snapshot hold the word, in the calls' arguments.)
        if f.path().is_file() {
            let text = std::fs::read(f.path()).unwrap();
            assert!(!text.starts_with(b"forged"), "{name} was replaced");
        }
    }
    let verify = Command::new(e2e::bin())
        .args(["log", "verify"])
        .arg(&wal)
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
}

#[test]
fn a_log_directly_in_the_workspace_is_refused_in_the_sandbox() {
    let sb = Sandbox::new();
    if !bwrap_works(
        &sb,
        "a_log_directly_in_the_workspace_is_refused_in_the_sandbox",
    ) {
        return;
    }
    let server = MockServer::start(vec![MockReply::text("never asked")]);
    let out = output(run_with_files_in_ws(&sb, &server.base_url(), "run.wal", ""));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("directly in the workspace"), "{err}");
    assert_eq!(server.request_count(), 0, "no model call was made");
    assert!(!sb.ws().join("run.wal").exists(), "nothing was logged");
}

/// A script that reports the bash command's parent as seen from where it
/// runs: the parent's pid and program, whether the parent's environment
/// holds `var`, and every process visible whose program is `agent`.
fn parent_probe(var: &str, agent: &std::path::Path) -> String {
    format!(
        "echo \"parent $PPID $(readlink /proc/$PPID/exe)\"\n\
         tr '\\0' '\\n' < /proc/$PPID/environ | grep -q '^{var}=' && echo parent-env-has-mark\n\
         for p in /proc/[0-9]*; do [ \"$(readlink $p/exe)\" = '{agent}' ] && echo \"agent-visible ${{p#/proc/}}\"; done\n\
         true",
        agent = agent.display()
    )
}

#[test]
fn the_agent_is_not_visible_from_the_sandbox() {
    // The control run (local) shows the probe finds the agent where it can
    // be seen: there the bash command's parent is the agent itself.
    let sb = Sandbox::new();
    if !bwrap_works(&sb, "the_agent_is_not_visible_from_the_sandbox") {
        return;
    }
    let var = "TINYAGENT_TEST_AGENT_MARK";
    let agent = e2e::bin().canonicalize().unwrap();
    let probe = parent_probe(var, &agent);
    let run = |toml: &str| {
        let server = MockServer::start(vec![
            MockReply::tool_call("bash", json!({ "command": probe })).with_ids(&["probe"]),
            MockReply::text("done"),
        ]);
        let mut cmd = sb.run_cmd_cfg(&server.base_url(), "look around", toml);
        cmd.env(var, "set-on-the-agent");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let agent_pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let seen = contract::result_content(&contract::read_checked(&sb.wal()), "probe");
        std::fs::remove_file(sb.wal()).unwrap();
        (agent_pid, seen)
    };
    let (pid, local) = run("");
    assert!(
        local.contains(&format!("parent {pid} {}\n", agent.display())),
        "{local}"
    );
    assert!(local.contains("parent-env-has-mark"), "{local}");
    assert!(local.contains(&format!("agent-visible {pid}\n")), "{local}");
    // In the sandbox the parent (bubblewrap's init) holds the mark too: it
    // has the environment the command itself was given, keys removed. What
    // must not be there is the agent's own entry.
    let (pid, sandboxed) = run(SANDBOX);
    let parent = sandboxed
        .lines()
        .find_map(|l| l.strip_prefix("parent "))
        .unwrap_or_else(|| panic!("{sandboxed}"));
    // The parent is bubblewrap's init, pid 1 of the sandbox's namespace.
    assert!(parent.starts_with("1 "), "{sandboxed}");
    assert!(
        !parent.contains(&agent.display().to_string()),
        "{sandboxed}"
    );
    assert_ne!(parent.split(' ').next(), Some(pid.to_string().as_str()));
    assert!(!sandboxed.contains("agent-visible"), "{sandboxed}");
}
