//! The bubblewrap sandbox: the workspace is writable, the rest of the file
//! system is not, /tmp is private, the network is refused, and timeouts and
//! background processes work inside it. Skipped (with a printed `SKIPPED:` line) where
//! bubblewrap is missing or cannot create namespaces, or failed then under
//! `TINYAGENT_REQUIRE=bwrap`.

use crate::support::e2e;
use crate::support::require::{self, require};
use crate::support::tools::*;
use serde_json::json;
use tinyagent::event::Event;
use tinyagent::exec::protected::Protected;
use tinyagent::exec::{EnvError, SandboxEnv};

/// The sandbox, or `None` when it cannot run here: then `test` is skipped
/// loudly (or fails under `TINYAGENT_REQUIRE=bwrap`).
fn sandbox(fx: &Fixture, network: bool, test: &str) -> Option<SandboxEnv> {
    require("bwrap", test, require::bwrap(&fx.ws, network))
}

#[test]
fn missing_bwrap_error_says_how_to_install_it() {
    let msg = EnvError::BwrapMissing.to_string();
    assert!(msg.contains("apt-get install bubblewrap"), "{msg}");
}

#[test]
fn workspace_is_writable_and_the_rest_is_read_only() {
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "workspace_is_writable_and_the_rest_is_read_only",
    ) else {
        return;
    };
    // A directory on the host's real file system (not under /tmp, which is
    // private in the sandbox), outside the workspace.
    let host_dir = e2e::host_tempdir();
    let target = host_dir.path().join("escaped.txt");
    // Beside the workspace, under /tmp: lands in the private /tmp at most.
    let beside = fx.outside().join("beside.txt");
    let script = format!(
        "echo inside > made.txt && echo ok; echo x > {} || echo refused-outside; \
         echo x > {}; touch /usr/x 2>/dev/null || echo refused-usr",
        target.display(),
        beside.display()
    );
    let out = fx.call_in(&env, "bash", &json!({"command": script}).to_string());
    assert!(out.content.contains("ok\n"), "{}", out.content);
    assert!(out.content.contains("refused-outside"), "{}", out.content);
    assert!(
        out.content.contains("Read-only file system"),
        "{}",
        out.content
    );
    assert!(out.content.contains("refused-usr"), "{}", out.content);
    assert_eq!(fx.read("made.txt"), "inside\n");
    assert!(!target.exists());
    assert!(!beside.exists());
}

#[test]
fn tmp_is_private() {
    let fx = Fixture::new();
    let Some(env) = sandbox(&fx, false, "tmp_is_private") else {
        return;
    };
    let name = format!("tinyagent-sandbox-test-{}", std::process::id());
    let script = format!("echo hidden > /tmp/{name} && cat /tmp/{name}");
    let out = fx.call_in(&env, "bash", &json!({"command": script}).to_string());
    assert_ok(&out);
    assert_eq!(out.content, "hidden\n[exit code: 0]");
    assert!(!std::path::Path::new("/tmp").join(&name).exists());
}

#[test]
fn network_is_refused_unless_allowed() {
    let fx = Fixture::new();
    let Some(env) = sandbox(&fx, false, "network_is_refused_unless_allowed") else {
        return;
    };
    // A loopback listener outside: reachable from the host, not from the sandbox.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected || echo refused");
    let args = json!({"command": script}).to_string();
    let out = fx.call_in(&env, "bash", &args);
    assert!(out.content.contains("refused"), "{}", out.content);
    assert!(!out.content.contains("connected"), "{}", out.content);
    let open = SandboxEnv::new(true).unwrap();
    let out = fx.call_in(&open, "bash", &args);
    assert!(out.content.contains("connected"), "{}", out.content);
}

#[test]
fn timeout_kills_everything_inside() {
    let fx = Fixture::new();
    let Some(env) = sandbox(&fx, false, "timeout_kills_everything_inside") else {
        return;
    };
    let out = fx.call_in(
        &env,
        "bash",
        &json!({"command": "sleep 60 & echo started; wait", "timeout_ms": 300}).to_string(),
    );
    assert_tool_error(&out, "timed out after 300 ms");
    assert!(out.content.starts_with("started\n"), "{}", out.content);
    // No sleep started from this workspace survives on the host.
    assert!(wait_until_no_sleepers(&fx.ws));
}

#[test]
fn background_process_runs_in_the_sandbox_and_is_killed() {
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "background_process_runs_in_the_sandbox_and_is_killed",
    ) else {
        return;
    };
    let out = fx.call_in(
        &env,
        "bash",
        &json!({"command": "touch /etc/bg-test 2>&1; exec sleep 60", "background": true})
            .to_string(),
    );
    assert_ok(&out);
    let [Event::ProcessStarted(rec)] = out.records.as_slice() else {
        panic!("{:?}", out.records)
    };
    assert_eq!(rec.env, "sandbox");
    let output = rec.output.clone().unwrap();
    let mut text = String::new();
    for _ in 0..1000 {
        text = std::fs::read_to_string(&output).unwrap();
        if !text.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(
        wait_for_sleeper(&fx.ws),
        "the sleep inside the sandbox did not start"
    );
    assert!(alive(rec.pid));
    let out = fx.call_in(&env, "process", r#"{"action":"kill","id":"p1"}"#);
    assert!(out.content.starts_with("Killed p1"), "{}", out.content);
    assert!(wait_dead(rec.pid));
    assert!(wait_until_no_sleepers(&fx.ws));
}

/// Host pids of `sleep` processes whose working directory is `ws`.
fn sleepers_of(ws: &std::path::Path) -> Vec<u32> {
    let ws = ws.canonicalize().unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
        if comm.trim() == "sleep" && cwd.as_deref() == Some(ws.as_path()) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

fn wait_for_sleeper(ws: &std::path::Path) -> bool {
    for _ in 0..1000 {
        if !sleepers_of(ws).is_empty() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

fn wait_until_no_sleepers(ws: &std::path::Path) -> bool {
    for _ in 0..1000 {
        if sleepers_of(ws).is_empty() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn background_process_outlives_the_thread_that_started_it() {
    // PR_SET_PDEATHSIG (bubblewrap's --die-with-parent) follows the spawning
    // *thread*; the agent runs tools on short-lived threads.
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "background_process_outlives_the_thread_that_started_it",
    ) else {
        return;
    };
    let rec = std::thread::scope(|s| {
        s.spawn(|| {
            fx.table
                .start(
                    &env,
                    &fx.ws,
                    "while true; do echo tick >> ticks; sleep 0.02; done",
                    1,
                )
                .unwrap()
        })
        .join()
        .unwrap()
    });
    let count = || {
        std::fs::read_to_string(fx.ws.join("ticks"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let after_join = count();
    let mut grew = false;
    for _ in 0..1000 {
        if count() > after_join + 2 {
            grew = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        grew,
        "the sandboxed process died with the thread that started it"
    );
    fx.table.kill(&rec.id).unwrap();
    assert!(wait_dead(rec.pid));
}

/// The bash tool's output for `script` run in `env` on `fx`'s workspace.
fn run(fx: &Fixture, env: &SandboxEnv, script: &str) -> String {
    fx.call_in(env, "bash", &json!({"command": script}).to_string())
        .content
}

/// Host files a failing sandbox would have written: removed on drop, so a
/// run against a leaky sandbox leaves nothing behind.
struct HostProbes(Vec<std::path::PathBuf>);

impl HostProbes {
    fn new(dirs: &[&std::path::Path]) -> HostProbes {
        let name = format!(
            "tinyagent-sandbox-probe-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        HostProbes(dirs.iter().map(|d| d.join(&name)).collect())
    }
}

impl Drop for HostProbes {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn the_sandbox_holds_no_capabilities_and_cannot_gain_any() {
    // As root (CI) bubblewrap used to keep every capability.
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "the_sandbox_holds_no_capabilities_and_cannot_gain_any",
    ) else {
        return;
    };
    let script = r"
for tool in unshare chroot perl; do command -v $tool >/dev/null || echo missing-$tool; done
grep -E '^(CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
unshare -U true 2>/dev/null && echo userns-made || echo userns-refused
unshare -m true 2>/dev/null && echo mountns-made || echo mountns-refused
chroot / true 2>/dev/null && echo chroot-done || echo chroot-refused
perl -MSocket -e 'socket(my $s, PF_INET, SOCK_RAW, 1) or exit 1' 2>/dev/null \
  && echo raw-socket-made || echo raw-socket-refused
";
    let out = run(&fx, &env, script);
    assert!(!out.contains("missing-"), "{out}");
    for set in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.contains(&format!("{set}:\t0000000000000000\n")),
            "{set}: {out}"
        );
    }
    assert!(out.contains("NoNewPrivs:\t1\n"), "{out}");
    for what in ["userns", "mountns", "chroot", "raw-socket"] {
        assert!(out.contains(&format!("{what}-refused")), "{what}: {out}");
    }
}

#[test]
fn mounts_fail_and_writes_outside_the_workspace_do_not_reach_the_host() {
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "mounts_fail_and_writes_outside_the_workspace_do_not_reach_the_host",
    ) else {
        return;
    };
    let host_dir = e2e::host_tempdir();
    let probes = HostProbes::new(&[
        host_dir.path(),
        std::path::Path::new("/etc"),
        std::path::Path::new("/root"),
    ]);
    // Private in the sandbox, like /tmp (it may hold the host's sockets):
    // a write there lands in the sandbox's own tmpfs, never on the host.
    let private = HostProbes::new(&[std::path::Path::new("/var/tmp")]);
    let mut script = String::from(
        "mount -o remount,rw / 2>/dev/null && echo remounted || echo remount-refused\n\
         mount -t tmpfs x /mnt 2>/dev/null && echo mounted || echo mount-refused\n",
    );
    for p in &probes.0 {
        script.push_str(&format!(
            "echo x > '{}' 2>/dev/null && echo wrote-outside || echo refused-outside\n",
            p.display()
        ));
    }
    for p in &private.0 {
        script.push_str(&format!(
            "echo x > '{}' && test -s '{}' && echo wrote-private\n",
            p.display(),
            p.display()
        ));
    }
    script.push_str("echo inside > inside.txt && echo wrote-inside\n");
    let out = run(&fx, &env, &script);
    assert!(out.contains("remount-refused"), "{out}");
    assert!(out.contains("mount-refused"), "{out}");
    assert!(!out.contains("wrote-outside"), "{out}");
    assert!(out.contains("wrote-private"), "{out}");
    for p in probes.0.iter().chain(&private.0) {
        assert!(!p.exists(), "{} reached the host", p.display());
    }
    assert!(out.contains("wrote-inside"), "{out}");
    assert_eq!(fx.read("inside.txt"), "inside\n");
}

#[test]
fn proc_sys_is_read_only() {
    // kernel.hostname belongs to the sandbox's own UTS namespace, so a leaky
    // sandbox changes nothing on the host here; a file-permission-only
    // sysctl like it is writable by uid 0 even without capabilities.
    let fx = Fixture::new();
    let Some(env) = sandbox(&fx, false, "proc_sys_is_read_only") else {
        return;
    };
    let script = "echo sandboxed > /proc/sys/kernel/hostname && echo sysctl-written; \
                  echo \"now $(cat /proc/sys/kernel/hostname)\"";
    let out = run(&fx, &env, script);
    assert!(!out.contains("sysctl-written"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!out.contains("now sandboxed"), "{out}");
}

/// The run's own files inside `fx`'s workspace: a log with a snapshot and
/// a process-output directory under `runs/`, a config file at the top, a
/// hook script one directory down.
fn protected_files(fx: &Fixture) -> Protected {
    fx.write("runs/r.wal", "LOG\n");
    fx.write("runs/r.wal.snapshot", "SNAP\n");
    fx.write("runs/r.wal.d/p1.log", "OUT\n");
    fx.write("tinyagent.toml", "CFG\n");
    fx.write("hooks/pre.sh", "HOOK\n");
    let mut p = Protected::none();
    p.add_log(&fx.ws.join("runs/r.wal"));
    p.add(&fx.ws.join("tinyagent.toml"));
    p.add(&fx.ws.join("hooks/pre.sh"));
    p
}

/// Every file under `dir` with its content, relative paths sorted.
fn tree(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = e2e::all_files(dir)
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(dir).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&f).unwrap_or_default())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_runs_own_files_in_the_workspace_cannot_be_changed() {
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "the_runs_own_files_in_the_workspace_cannot_be_changed",
    ) else {
        return;
    };
    let env = env.protecting(protected_files(&fx));
    env.check(&fx.ws).unwrap();
    let before = tree(&fx.ws);
    // Each line tries one way in; all are expected to fail.
    let attacks = [
        "echo forged >> runs/r.wal",
        ": > runs/r.wal",
        "echo forged > runs/new && mv -f runs/new runs/r.wal",
        "echo forged > new.wal && mv -f new.wal runs/r.wal",
        "rm -f runs/r.wal",
        "mv runs runs.old",
        "echo forged > runs/r.wal.snapshot",
        "rm -f runs/r.wal.snapshot",
        "echo forged > runs/r.wal.snapshot.tmp-1-1",
        "echo forged > runs/r.wal.torn-5",
        "echo forged > runs/r.wal.d/p1.log",
        "rm -rf runs/r.wal.d",
        "echo forged > tinyagent.toml",
        ": > tinyagent.toml",
        "echo forged > cfg.new && mv -f cfg.new tinyagent.toml",
        "rm -f tinyagent.toml",
        "echo forged > hooks/pre.sh",
        "rm -f hooks/pre.sh",
        "echo forged > hook.new && mv -f hook.new hooks/pre.sh",
        "mv hooks hooks.old && mkdir hooks && echo forged > hooks/pre.sh",
    ];
    let mut script = String::new();
    for (i, a) in attacks.iter().enumerate() {
        script.push_str(&format!(
            "({a}) 2>/dev/null && echo 'got in: {i}' || echo 'kept out: {i}'\n"
        ));
    }
    // The rest of the workspace stays writable, next to the hook too.
    script.push_str("rm -f new.wal cfg.new hook.new\n");
    script.push_str("echo free > hooks/other.sh && echo free > free.txt && echo still-writable\n");
    let out = run(&fx, &env, &script);
    assert!(!out.contains("got in"), "{out}");
    assert!(out.contains("still-writable"), "{out}");
    let mut expected = before;
    expected.push(("free.txt".into(), "free\n".into()));
    expected.push(("hooks/other.sh".into(), "free\n".into()));
    expected.sort();
    assert_eq!(tree(&fx.ws), expected);
}

#[test]
fn a_log_directly_in_the_workspace_is_refused() {
    // Its snapshots and torn tails appear beside it, in the writable
    // workspace, where no mount could cover them before they exist.
    let fx = Fixture::new();
    let Some(env) = sandbox(&fx, false, "a_log_directly_in_the_workspace_is_refused") else {
        return;
    };
    fx.write("r.wal", "LOG\n");
    let mut p = Protected::none();
    p.add_log(&fx.ws.join("r.wal"));
    let env = env.protecting(p);
    let err = env.check(&fx.ws).unwrap_err().to_string();
    assert!(err.contains("directly in the workspace"), "{err}");
    // A command built anyway does not run.
    let out = fx.call_in(
        &env,
        "bash",
        &json!({"command": "echo ran > ran.txt; : > r.wal"}).to_string(),
    );
    assert!(
        out.content.contains("directly in the workspace"),
        "{}",
        out.content
    );
    assert!(!fx.ws.join("ran.txt").exists());
    assert_eq!(fx.read("r.wal"), "LOG\n");
}

#[test]
fn a_protected_symlink_in_the_workspace_is_refused() {
    // A mount covers what a link points to, not the link: the link itself
    // could be replaced.
    let fx = Fixture::new();
    let Some(env) = sandbox(
        &fx,
        false,
        "a_protected_symlink_in_the_workspace_is_refused",
    ) else {
        return;
    };
    fx.write("real.toml", "CFG\n");
    std::os::unix::fs::symlink("real.toml", fx.ws.join("tinyagent.toml")).unwrap();
    let mut p = Protected::none();
    p.add(&fx.ws.join("tinyagent.toml"));
    let err = env.protecting(p).check(&fx.ws).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
}
