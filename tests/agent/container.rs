//! The container environment end to end with the real engine (podman,
//! image `host`; contract section 14): what a command inside can see and
//! reach, reattaching to a container that outlived a SIGKILLed agent, a
//! new container when it was removed, an interrupted foreground call
//! stopped inside before resume talks to the model, the container removed
//! when the run finishes, and `env prune`.

use crate::support::container::{self, Ctr};
use crate::support::contract;
use crate::support::e2e::{bin, host_tempdir, output};
use crate::support::mock::{MockReply, MockServer, RecordedRequest};
use crate::support::require::{self, require};
use crate::support::sockets::{Listening, connect_probe, listen_abstract};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

fn engine(test: &str) -> Option<()> {
    require("container", test, require::container())
}

/// The content of the tool result of call `id` in the last request.
fn result_of(server: &MockServer, id: &str) -> String {
    let reqs = server.recorded();
    reqs.iter()
        .rev()
        .flat_map(RecordedRequest::tool_results)
        .find(|(call, _)| call == id)
        .map(|(_, content)| content)
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// The notice of the first request a resume made.
fn notice(req: &RecordedRequest) -> String {
    req.messages()
        .iter()
        .rev()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("[Resumed]"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_container_run_sees_the_workspace_and_reaches_nothing_else() {
    let Some(()) = engine("a_container_run_sees_the_workspace_and_reaches_nothing_else") else {
        return;
    };
    let c = Ctr::new();
    std::fs::write(c.ws().join("given.txt"), "from the host\n").unwrap();
    let logs = c.sb.path("logs");
    let config = c.sb.path("tinyagent.toml");
    let probe = format!("/etc/tinyagent-probe-{}", std::process::id());
    // The mock server listens on the host's loopback: a container without
    // a network has a loopback of its own, where nothing listens.
    let server = MockServer::start(vec![]);
    let port = server
        .base_url()
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let script = format!(
        "pwd; cat given.txt; echo made > made.txt; \
         touch {probe} && echo etc-in-overlay; \
         (echo x > {logs}/forged) 2>/dev/null && echo LOG-DIR-WRITABLE; \
         echo log-dir-holds: $(ls -A {logs} | wc -l); \
         echo config-bytes: $(cat {config} | wc -c); \
         (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-REACHED; \
         echo interfaces: $(ls /sys/class/net); \
         grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; \
         (mount -t tmpfs none /mnt) 2>/dev/null && echo MOUNTED; \
         env; tr '\\0' '\\n' </proc/1/environ",
        logs = logs.display(),
        config = config.display(),
    );
    server.push(MockReply::tool_call("bash", json!({"command": script})).with_ids(&["c1"]));
    // Host unix sockets: under /run, elsewhere on the host, abstract.
    let tag = format!("{}-{:08x}", std::process::id(), fastrand::u32(..));
    let run_sock = Listening::at(std::path::Path::new(&format!(
        "/run/tinyagent-ctr-test-{tag}.sock"
    )));
    let elsewhere = host_tempdir();
    let host_sock = Listening::at(&elsewhere.path().join("service.sock"));
    let abstract_name = format!("tinyagent-ctr-test-{tag}");
    let _abstract = listen_abstract(&abstract_name);
    let targets = vec![
        run_sock.path.display().to_string(),
        host_sock.path.display().to_string(),
        format!("@{abstract_name}"),
    ];
    server.push(
        MockReply::tool_call("bash", json!({"command": connect_probe(&targets)})).with_ids(&["s1"]),
    );
    server.push(
        MockReply::tool_call(
            "bash",
            json!({"command": "echo bg-said; exit 4", "background": true}),
        )
        .with_ids(&["b1"]),
    );
    server.push(MockReply::tool_call("bash", json!({"command": "sleep 0.5"})).with_ids(&["w1"]));
    server.push(MockReply::tool_call("process", json!({"action": "list"})).with_ids(&["l1"]));
    server.push(MockReply::text("done"));
    let mut cmd = c.run_cmd(&server.base_url(), "look around");
    cmd.env("OPENAI_API_KEY", "sk-container-secret")
        .env("AWS_SECRET_ACCESS_KEY", "aws-container-secret")
        .env("MY_API_KEY", "my-container-secret");
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let result = result_of(&server, "c1");
    let ws = c.ws().canonicalize().unwrap();
    assert!(
        result.starts_with(&format!("{}\n", ws.display())),
        "{result}"
    );
    assert!(result.contains("from the host"), "{result}");
    assert_eq!(
        std::fs::read_to_string(c.ws().join("made.txt")).unwrap(),
        "made\n"
    );
    // Writes outside the workspace stay in the container's overlay.
    assert!(result.contains("etc-in-overlay"), "{result}");
    assert!(
        !std::path::Path::new(&probe).exists(),
        "the host's /etc was written"
    );
    assert!(!result.contains("LOG-DIR-WRITABLE"), "{result}");
    // No capability, no privilege to gain: no mount.
    assert!(result.contains("CapEff:\t0000000000000000"), "{result}");
    assert!(result.contains("NoNewPrivs:\t1"), "{result}");
    assert!(!result.contains("MOUNTED"), "{result}");
    assert!(!logs.join("forged").exists());
    assert!(
        result.contains("log-dir-holds: 0\n"),
        "the log's directory is visible: {result}"
    );
    assert!(
        result.contains("config-bytes: 0\n"),
        "the config is visible: {result}"
    );
    assert!(!result.contains("HOST-REACHED"), "{result}");
    let sockets = result_of(&server, "s1");
    assert!(sockets.contains("probe-done"), "{sockets}");
    for t in &targets {
        assert!(
            sockets.contains(&format!("refused {t}")),
            "the container reached {t}:\n{sockets}"
        );
    }
    assert!(result.contains("interfaces: lo\n"), "{result}");
    for secret in [
        "sk-container-secret",
        "aws-container-secret",
        "my-container-secret",
    ] {
        assert!(
            !result.contains(secret),
            "a key reached the container: {result}"
        );
    }
    // A background process's end is seen through its exit file; its files
    // beside the log are the agent's (0700 directory, 0600 files).
    let list = result_of(&server, "l1");
    assert!(
        list.contains("p1") && list.contains("exited with code 4"),
        "{list}"
    );
    let out_dir = c.sb.path("logs/run.wal.out");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&out_dir), 0o700);
    assert_eq!(mode(&out_dir.join("p1.log")), 0o600);
    assert_eq!(mode(&out_dir.join("p1.exit")), 0o600);
    assert_eq!(
        std::fs::read_to_string(out_dir.join("p1.log")).unwrap(),
        "bg-said\n"
    );
    // Recorded, and gone with the finished run.
    let recs = contract::read(&c.wal());
    let settings = &recs[0].data["settings"];
    assert_eq!(settings["env"], "container");
    assert_eq!(settings["engine"], "podman");
    assert_eq!(settings["image"], "host");
    let name = settings["container"].as_str().unwrap().to_string();
    assert_eq!(
        name,
        format!("tinyagent-{}", recs[0].data["run_id"].as_str().unwrap())
    );
    assert_eq!(
        container::state(&name),
        "gone",
        "a finished run leaves its container"
    );
    server.assert_no_violations();
}

/// A run that starts a background ticker (its output is the proof that it
/// goes on), then sleeps in a foreground call; killed with SIGKILL once the
/// sleep has started. Returns the container's name.
fn crashed_run(c: &Ctr, sleep: &str) -> String {
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": "echo serving; while sleep 0.1; do echo tick; done", "background": true}),
        )
        .with_ids(&["b1"]),
        MockReply::tool_call("bash", json!({"command": sleep})).with_ids(&["f1"]),
    ]);
    let mut child = c
        .run_cmd(&server.base_url(), "serve, then sleep")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = c.wait_for_record(|r| {
        r["type"] == "tool.started"
            && r["data"]["call_id"] == "f1"
            && r["data"]["process"].is_object()
    });
    // Past the wrapper's release: the command runs.
    std::thread::sleep(std::time::Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(started, "the foreground call never started");
    let name = c.name().expect("container recorded");
    assert_eq!(
        container::state(&name),
        "running",
        "the container died with the agent"
    );
    name
}

#[test]
fn resume_reattaches_to_the_running_container_and_its_processes() {
    let Some(()) = engine("resume_reattaches_to_the_running_container_and_its_processes") else {
        return;
    };
    let c = Ctr::new();
    let name = crashed_run(&c, "sleep 300");
    let log = c.sb.path("logs/run.wal.out/p1.log");
    let before = std::fs::metadata(&log).unwrap().len();
    let first_id = container::id(&name);
    let server = MockServer::start(vec![
        MockReply::tool_call("process", json!({"action": "list"})).with_ids(&["l1"]),
        MockReply::tool_call(
            "process",
            json!({"action": "output", "id": "p1", "tail_bytes": 200}),
        )
        .with_ids(&["o1"]),
        MockReply::tool_call("process", json!({"action": "kill", "id": "p1"})).with_ids(&["k1"]),
        MockReply::tool_call("process", json!({"action": "list"})).with_ids(&["l2"]),
        MockReply::text("done"),
    ]);
    let out = output({
        let mut cmd = c.resume_cmd(&server.base_url());
        cmd.arg("--json");
        cmd
    });
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let back = events
        .iter()
        .find(|e| e["event"] == "resume.process_reattached")
        .expect("a resume.process_reattached event");
    assert_eq!(back["id"], "p1");
    assert_eq!(back["container"], name.as_str());
    let reqs = server.recorded();
    let n = notice(&reqs[0]);
    assert!(
        n.contains(&format!("still running in container {name} (reattached)")),
        "{n}"
    );
    assert!(n.contains("p1 pid"), "{n}");
    let list = result_of(&server, "l1");
    assert!(
        list.contains("p1") && list.contains("running") && list.contains("[container]"),
        "{list}"
    );
    let tail = result_of(&server, "o1");
    assert!(
        tail.contains("tick") && tail.contains("[p1: running]"),
        "{tail}"
    );
    // The output went on while no agent ran.
    assert!(std::fs::metadata(&log).unwrap().len() > before);
    let killed = result_of(&server, "k1");
    assert!(killed.starts_with("Killed p1"), "{killed}");
    let after = result_of(&server, "l2");
    assert!(!after.contains("running"), "{after}");
    let recs = contract::read(&c.wal());
    let resume = recs.iter().find(|r| r.kind == "resume").unwrap();
    assert_eq!(resume.data["reattached_processes"], json!(["p1"]));
    assert_eq!(resume.data["lost_processes"], json!([]));
    let started = recs.iter().find(|r| r.kind == "process.started").unwrap();
    assert_eq!(started.data["container"], name.as_str());
    assert_eq!(started.data["engine"], "podman");
    assert_eq!(started.data["env"], "container");
    assert!(!first_id.is_empty());
    assert_eq!(
        container::state(&name),
        "gone",
        "the finished run's container stays"
    );
    server.assert_no_violations();
}

#[test]
fn resume_starts_a_new_container_when_the_old_one_is_gone() {
    let Some(()) = engine("resume_starts_a_new_container_when_the_old_one_is_gone") else {
        return;
    };
    let c = Ctr::new();
    let name = crashed_run(&c, "sleep 300");
    let old = container::id(&name);
    assert!(
        container::podman(&["rm", "-f", "-t", "0", &name])
            .status
            .success()
    );
    let seen = Arc::new(Mutex::new(String::new()));
    let seen_in = Arc::clone(&seen);
    let probe = name.clone();
    let server = MockServer::start(vec![
        MockReply::from_fn(move |_| {
            *seen_in.lock().unwrap() = container::id(&probe);
            MockReply::tool_call("process", json!({"action": "list"})).with_ids(&["l1"])
        }),
        MockReply::tool_call(
            "bash",
            json!({"command": "cat /proc/1/cmdline | tr '\\0' ' '"}),
        )
        .with_ids(&["e1"]),
        MockReply::text("done"),
    ]);
    let out = output(c.resume_cmd(&server.base_url()));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = notice(&server.recorded()[0]);
    assert!(
        n.contains("no longer tracked") && n.contains("p1 pid"),
        "{n}"
    );
    assert!(!n.contains("reattached"), "{n}");
    let new = seen.lock().unwrap().clone();
    assert!(
        !new.is_empty() && new != old,
        "no new container: {old} -> {new}"
    );
    assert_eq!(result_of(&server, "l1"), "No background processes.");
    assert!(result_of(&server, "e1").contains("sleep infinity"));
    let recs = contract::read(&c.wal());
    let resume = recs.iter().find(|r| r.kind == "resume").unwrap();
    assert_eq!(resume.data["lost_processes"], json!(["p1"]));
    assert_eq!(container::state(&name), "gone");
    server.assert_no_violations();
}

#[test]
fn an_interrupted_call_inside_is_stopped_before_the_model_hears_of_it() {
    let Some(()) = engine("an_interrupted_call_inside_is_stopped_before_the_model_hears_of_it")
    else {
        return;
    };
    let c = Ctr::new();
    // A distinctive command line to look for inside.
    let name = crashed_run(&c, "sleep 3007 & sleep 3008; echo late > late.txt");
    let before = container::exec(&name, "pgrep -f '^sleep 300[78]$' | wc -l");
    assert_eq!(before.trim(), "2", "the interrupted call was not running");
    let inside = Arc::new(Mutex::new(None::<String>));
    let inside_in = Arc::clone(&inside);
    let probe = name.clone();
    let server = MockServer::start(vec![MockReply::from_fn(move |_| {
        *inside_in.lock().unwrap() = Some(container::exec(
            &probe,
            "pgrep -f '^sleep 300[78]$' | wc -l",
        ));
        MockReply::text("done")
    })]);
    let out = output(c.resume_cmd(&server.base_url()));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at_first_request = inside.lock().unwrap().clone().expect("the model was asked");
    assert_eq!(
        at_first_request.trim(),
        "0",
        "the interrupted call still ran when the model was asked"
    );
    let n = notice(&server.recorded()[0]);
    assert!(n.contains("were stopped now, before anything else"), "{n}");
    let recs = contract::read(&c.wal());
    let resume = recs.iter().find(|r| r.kind == "resume").unwrap();
    let stopped = resume.data["stopped_processes"].as_array().unwrap();
    assert!(stopped.len() >= 2, "{stopped:?}");
    assert!(stopped.iter().all(|p| p["call_id"] == "f1"));
    assert!(!c.ws().join("late.txt").exists());
    server.assert_no_violations();
}

#[test]
fn env_prune_removes_the_containers_of_finished_runs_and_gone_logs() {
    let Some(()) = engine("env_prune_removes_the_containers_of_finished_runs_and_gone_logs") else {
        return;
    };
    // A crashed run: its container is kept for the resume.
    let crashed = Ctr::new();
    let kept = crashed_run(&crashed, "sleep 300");
    let inspect = output({
        let mut c = Command::new(bin());
        c.args(["log", "inspect", "--json"]).arg(crashed.wal());
        c
    });
    let report: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(report["container"]["name"], kept.as_str());
    assert_eq!(report["container"]["state"], "running");
    assert_eq!(report["container"]["engine"], "podman");
    // `sessions` shows it too (the log linked into a home's runs/).
    let runs = crashed.sb.home().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::os::unix::fs::symlink(crashed.wal(), runs.join("crashed.wal")).unwrap();
    let listed = output({
        let mut c = Command::new(bin());
        c.args(["sessions", "--all", "--json"])
            .env("TINYAGENT_HOME", crashed.sb.home());
        c
    });
    let rows: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(rows[0]["container"]["name"], kept.as_str(), "{rows:#}");
    assert_eq!(rows[0]["container"]["state"], "running");
    assert_eq!(rows[0]["status"], "stopped");
    // A container whose log is gone, and one whose run finished.
    let tag = std::process::id();
    let gone = format!("tinyagent-prune-gone-{tag}");
    let finished = Ctr::new();
    let server = MockServer::start(vec![MockReply::text("done")]);
    assert_eq!(
        output(finished.run_cmd(&server.base_url(), "finish"))
            .status
            .code(),
        Some(0)
    );
    let done = finished.name().unwrap();
    let missing_log = finished.sb.path("logs/never.wal");
    for (name, wal) in [(&gone, missing_log.clone()), (&done, finished.wal())] {
        let label = format!("tinyagent.wal={}", wal.display());
        let out = container::podman(&[
            "run",
            "-d",
            "--name",
            name,
            "--label",
            &label,
            "--network",
            "none",
            "--rootfs",
            "/:O",
            "sleep",
            "infinity",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = output({
        let mut c = Command::new(bin());
        c.args(["env", "prune"]);
        c
    });
    let said = String::from_utf8_lossy(&out.stdout);
    let _ = container::podman(&["rm", "-f", "-t", "0", &gone]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains(&format!("removed {gone}")), "{said}");
    assert!(said.contains(&format!("removed {done}")), "{said}");
    assert_eq!(container::state(&gone), "gone");
    assert_eq!(container::state(&done), "gone");
    assert_eq!(
        container::state(&kept),
        "running",
        "a crashed run's container was pruned"
    );
    let human = output({
        let mut c = Command::new(bin());
        c.args(["log", "inspect"]).arg(crashed.wal());
        c
    });
    assert!(String::from_utf8_lossy(&human.stdout).contains(&format!("{kept} (podman, running)")));
}

#[test]
fn a_missing_engine_is_refused_before_anything_is_written() {
    let c = Ctr::new();
    let server = MockServer::start(vec![]);
    let docker = "[env]\nkind = \"container\"\nengine = \"docker\"\n";
    let mut cmd = c.run_cmd(&server.base_url(), "never starts");
    std::fs::write(c.sb.path("tinyagent.toml"), docker).unwrap();
    // An empty PATH: no engine at all.
    let empty = c.sb.path("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    cmd.env("PATH", &empty);
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`docker` is not on PATH"), "{err}");
    assert!(!c.wal().exists());
    // Docker cannot take the host's root file system as an image.
    let cmd = c.run_cmd(&server.base_url(), "never starts");
    std::fs::write(c.sb.path("tinyagent.toml"), docker).unwrap();
    let out = output(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs podman"), "{err}");
    // A docker client without a daemon (as on this machine) cannot start
    // the container: refused too, and the log it had begun is gone.
    if Command::new("docker").arg("--version").output().is_ok() {
        let cmd = c.run_cmd(&server.base_url(), "never starts");
        std::fs::write(
            c.sb.path("tinyagent.toml"),
            format!("{docker}image = \"debian:12\"\n"),
        )
        .unwrap();
        let out = output(cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("docker:"), "{err}");
        assert!(!c.wal().exists());
    }
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_log_whose_directory_holds_the_workspace_is_refused() {
    let Some(()) = engine("a_log_whose_directory_holds_the_workspace_is_refused") else {
        return;
    };
    let c = Ctr::new();
    let server = MockServer::start(vec![]);
    let cmd = c.run_cmd(&server.base_url(), "never starts");
    // The sandbox's layout: the log beside the workspace, in its parent.
    let beside = c.sb.wal();
    let args: Vec<std::ffi::OsString> = cmd.get_args().map(ToOwned::to_owned).collect();
    let mut fixed = Command::new(bin());
    fixed
        .current_dir(c.sb.dir.path())
        .env_remove("OPENAI_API_KEY");
    let mut next_is_wal = false;
    for a in args {
        if next_is_wal {
            fixed.arg(&beside);
            next_is_wal = false;
        } else {
            next_is_wal = a == "--wal";
            fixed.arg(a);
        }
    }
    let out = output(fixed);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot be hidden from the container"), "{err}");
    assert!(!beside.exists(), "the refused run left its log");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_timeout_and_a_signal_stop_the_command_inside_the_container() {
    let Some(()) = engine("a_timeout_and_a_signal_stop_the_command_inside_the_container") else {
        return;
    };
    let c = Ctr::new();
    let seen = Arc::new(Mutex::new(String::new()));
    let seen_in = Arc::clone(&seen);
    let ctr = Arc::new(Mutex::new(None::<String>));
    let ctr_in = Arc::clone(&ctr);
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": "echo before; sleep 3011; echo after", "timeout_ms": 700}),
        )
        .with_ids(&["t1"]),
        MockReply::from_fn(move |_| {
            // The timed-out command is gone inside by the time its result
            // reaches the model.
            let name = ctr_in.lock().unwrap().clone().unwrap_or_default();
            *seen_in.lock().unwrap() = container::exec(&name, "pgrep -f '^sleep 301[12]$' | wc -l");
            MockReply::tool_call("bash", json!({"command": "echo waiting; sleep 3012"}))
                .with_ids(&["s1"])
        }),
    ]);
    let child = c
        .run_cmd(&server.base_url(), "time out, then wait")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(c.wait_for_record(|r| r["type"] == "run.started"));
    *ctr.lock().unwrap() = c.name();
    let name = c.name().unwrap();
    assert!(c.wait_for_record(|r| {
        r["type"] == "tool.started"
            && r["data"]["call_id"] == "s1"
            && r["data"]["process"].is_object()
    }));
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(
        container::exec(&name, "pgrep -f '^sleep 3012$' | wc -l").trim(),
        "1"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert_eq!(
        seen.lock().unwrap().trim(),
        "0",
        "the timed-out command lived on"
    );
    let recs = contract::read(&c.wal());
    let result = |id: &str| {
        recs.iter()
            .find(|r| r.kind == "tool.result" && r.data["call_id"] == id)
            .unwrap()
            .data
            .clone()
    };
    let timed = result("t1");
    let text = timed["content"].as_str().unwrap();
    assert!(
        text.contains("before") && text.contains("[timed out after 700 ms"),
        "{text}"
    );
    assert!(!text.contains("after\n"), "{text}");
    let stopped = result("s1");
    let text = stopped["content"].as_str().unwrap();
    assert!(text.starts_with("[interrupted by SIGINT"), "{text}");
    assert!(text.contains("waiting"), "{text}");
    assert_eq!(stopped["signal"], "SIGINT");
    assert_eq!(recs.last().unwrap().data["status"], "interrupted");
    // Interrupted is finished: its container went with it.
    assert_eq!(container::state(&name), "gone");
}

#[test]
fn a_container_run_resumed_in_the_sandbox_still_has_its_leftovers_stopped() {
    let test = "a_container_run_resumed_in_the_sandbox_still_has_its_leftovers_stopped";
    let Some(()) = engine(test) else {
        return;
    };
    let c = Ctr::new();
    let Some(_) = require("bwrap", test, require::bwrap(&c.ws(), false)) else {
        return;
    };
    let name = crashed_run(&c, "sleep 3013; echo late > late.txt");
    std::fs::write(
        c.sb.path("tinyagent.toml"),
        "[model]\nmax_retries = 2\nretry_base_ms = 5\n[env]\nkind = \"sandbox\"\n",
    )
    .unwrap();
    let inside = Arc::new(Mutex::new(None::<String>));
    let inside_in = Arc::clone(&inside);
    let probe = name.clone();
    let server = MockServer::start(vec![
        MockReply::from_fn(move |_| {
            *inside_in.lock().unwrap() =
                Some(container::exec(&probe, "pgrep -f '^sleep 3013$' | wc -l"));
            MockReply::tool_call("bash", json!({"command": "echo in-the-sandbox"}))
                .with_ids(&["x1"])
        }),
        MockReply::text("done"),
    ]);
    let out = output(c.resume_cmd(&server.base_url()));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(inside.lock().unwrap().clone().unwrap().trim(), "0");
    let recs = contract::read(&c.wal());
    let resume = recs.iter().find(|r| r.kind == "resume").unwrap();
    assert!(
        !resume.data["stopped_processes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let ran = recs
        .iter()
        .find(|r| r.kind == "tool.started" && r.data["call_id"] == "x1")
        .unwrap();
    assert_eq!(ran.data["process"]["env"], "sandbox");
    assert_eq!(
        container::state(&name),
        "gone",
        "the finished run left its container"
    );
    assert!(!c.ws().join("late.txt").exists());
}
