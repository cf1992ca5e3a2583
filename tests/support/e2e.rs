//! Helpers for end-to-end tests of the real binary.

use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The tinyagent binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tinyagent"))
}

/// A temp dir with a `ws` workspace inside and a log path beside it.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("ws")).expect("ws");
        Sandbox { dir }
    }
    pub fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }
    pub fn wal(&self) -> PathBuf {
        self.dir.path().join("run.wal")
    }
    /// This sandbox's `XDG_CONFIG_HOME`: the global config is
    /// `<it>/tinyagent/config.toml` (the commands it builds set it).
    pub fn config_home(&self) -> PathBuf {
        self.dir.path().join("config-home")
    }
    /// This sandbox's `TINYAGENT_HOME` (the commands it builds set it).
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// A config file with fast retries (tests must not wait seconds).
    pub fn fast_config(&self, extra: &str) -> PathBuf {
        let p = self.path("tinyagent.toml");
        std::fs::write(
            &p,
            format!("[model]\nmax_retries = 2\nretry_base_ms = 5\nrequest_timeout_s = 20\n{extra}"),
        )
        .expect("config");
        p
    }
    /// `tinyagent run` against an OpenAI-compatible base URL.
    pub fn run_cmd(&self, base_url: &str, task: &str) -> Command {
        self.run_cmd_cfg(base_url, task, "")
    }
    /// Like `run_cmd`, with more TOML appended to the config.
    pub fn run_cmd_cfg(&self, base_url: &str, task: &str, toml: &str) -> Command {
        self.run_cmd_wal(base_url, task, toml, &self.wal())
    }
    /// [`Sandbox::run_cmd_cfg`] writing to another log.
    pub fn run_cmd_wal(&self, base_url: &str, task: &str, toml: &str, wal: &Path) -> Command {
        let mut c = self.command(self.dir.path(), ["run", "--base-url", base_url]);
        c.args(["--model", "test-model", "--wal"])
            .arg(wal)
            .arg("--cwd")
            .arg(self.ws())
            .arg("--config")
            .arg(self.fast_config(toml))
            .arg(task);
        c
    }
    pub fn resume_cmd(&self) -> Command {
        let mut c = self.command(self.dir.path(), ["resume"]);
        c.arg(self.wal());
        c
    }
    /// `resume` of this sandbox's log, which must end with exit 0.
    pub fn resume_ok(&self) -> Output {
        let out = output(self.resume_cmd());
        assert_eq!(out.status.code(), Some(0), "resume: {}", stderr(&out));
        out
    }
    /// `tinyagent ARGS` run in `dir`: this sandbox's `TINYAGENT_HOME` and
    /// `XDG_CONFIG_HOME`, no API key from the environment, stdin closed.
    /// Every command of a test that needs no more is built here.
    pub fn command<S: AsRef<OsStr>>(
        &self,
        dir: &Path,
        args: impl IntoIterator<Item = S>,
    ) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(dir)
            .args(args)
            .env_remove("OPENAI_API_KEY")
            .env("TINYAGENT_HOME", self.home())
            .env("XDG_CONFIG_HOME", self.config_home())
            .stdin(Stdio::null());
        c
    }
    /// A hook command (for `pre_tool` or `post_tool`) that SIGKILLs the
    /// tinyagent process it runs under (found by walking up the parent
    /// chain), the first time only: it leaves `killed` in the sandbox,
    /// and does nothing once that is there.
    pub fn kill_agent_hook(&self) -> String {
        let script = self.path("kill.sh");
        std::fs::write(
            &script,
            format!(
                r#"cat >/dev/null
[ -e '{m}' ] && exit 0
touch '{m}'
p=$$
while [ "$p" -gt 1 ]; do
  if [ "$(cat /proc/$p/comm)" = tinyagent ]; then kill -9 "$p"; sleep 1; exit 0; fi
  p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2)
done
exit 0
"#,
                m = self.path("killed").display()
            ),
        )
        .expect("kill hook");
        format!("sh '{}'", script.display())
    }
}

/// Runs `c`, which must die of SIGKILL (a kill hook, a crash seam), and
/// returns its output.
pub fn killed(c: Command) -> Output {
    use std::os::unix::process::ExitStatusExt;
    let out = output(c);
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    out
}

/// Runs `c` with the crash seam `TINYAGENT_CRASH_AFTER` set to `point`
/// (`model.response:1`): it must die of SIGKILL there.
pub fn crash_after(mut c: Command, point: &str) -> Output {
    c.env("TINYAGENT_CRASH_AFTER", point);
    killed(c)
}

/// The exit code 0 of `o` (stderr shown otherwise), and its stdout.
pub fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs and returns the output (never panics on a non-zero exit).
pub fn output(mut c: Command) -> Output {
    c.output().expect("run tinyagent")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `--json` stdout lines as JSON values.
pub fn events(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l}: {e}")))
        .collect()
}

/// Every file under `dir`, recursively (for secret scans).
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A temp directory on the host's real file system, outside any workspace
/// and outside `/tmp` (which a sandbox replaces with a private one): where a
/// write escaping the sandbox would land. A checkout under `/tmp` has its
/// target dir there too, so `~/.cache/tinyagent-tests` is used then.
pub fn host_tempdir() -> tempfile::TempDir {
    let target_tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    // /var/tmp and /run are private in the sandbox too: under a checkout in
    // /tmp, the person's cache directory is the host's real file system.
    let base = if target_tmp.starts_with("/tmp") {
        let home = std::env::var_os("HOME").map_or_else(|| "/root".into(), PathBuf::from);
        let dir = home.join(".cache/tinyagent-tests");
        std::fs::create_dir_all(&dir).expect("host temp base");
        dir
    } else {
        target_tmp
    };
    tempfile::tempdir_in(base).expect("host temp dir")
}

/// Rewrites the log's `run.started` through the store (valid CRCs, as a
/// forger with write access would make), keeping every later record.
pub fn forge_run_started(
    wal: &std::path::Path,
    edit: impl FnOnce(&mut tinyagent::event::RunStarted),
) {
    let loaded = tinyagent::store::load(wal).expect("load");
    let mut events: Vec<tinyagent::event::Event> = Vec::new();
    tinyagent_store::wal::reader::scan::<tinyagent::event::Event>(wal, None, |frame, _| {
        events.push(frame.event.clone())
    })
    .expect("scan");
    drop(loaded);
    if let Some(tinyagent::event::Event::RunStarted(r)) = events.first_mut() {
        edit(r);
    }
    let _ = std::fs::remove_file(wal);
    for f in ["snapshot", "snapshot.bak"] {
        let _ = std::fs::remove_file(format!("{}.{f}", wal.display()));
    }
    let mut store = tinyagent::store::Store::create(wal, tinyagent::store::StoreOptions::default())
        .expect("create");
    for ev in events {
        store.append(ev).expect("append");
    }
    store.close().expect("close");
}

/// Every file and directory under `dir` with its mode and, for a file, its
/// bytes: what "nothing changed" is compared on.
pub fn tree_state(dir: &Path) -> std::collections::BTreeMap<PathBuf, (u32, Option<Vec<u8>>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                stack.push(p.clone());
                out.insert(p, (mode, None));
            } else {
                out.insert(p.clone(), (mode, std::fs::read(&p).ok()));
            }
        }
    }
    out
}
