//! The sandbox environment: every command under bubblewrap, with the
//! workspace the only writable place, no capability, no network unless
//! asked, no host unix socket, the run's own files out of reach, and the
//! command detached from the agent (see `docs/environments.md` for each
//! flag and why).

use super::env::{EnvError, ExecEnv, canonical, find_on_path, resolved, scrub_keys};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs commands under bubblewrap.
#[derive(Debug, Clone)]
pub struct SandboxEnv {
    bwrap: PathBuf,
    network: bool,
    /// The run's own files: hidden or read-only inside the sandbox.
    protected: super::protected::Protected,
    /// Host unix sockets shown to the commands (`env.sockets`).
    sockets: Vec<PathBuf>,
    /// Paths of the host shown read-only to the command (see `showing`).
    shown: Vec<PathBuf>,
}

impl SandboxEnv {
    /// Finds `bwrap` on PATH; a clear error saying how to install it if absent.
    pub fn new(network: bool) -> Result<Self, EnvError> {
        let bwrap = find_on_path("bwrap").ok_or(EnvError::BwrapMissing)?;
        Ok(SandboxEnv {
            bwrap,
            network,
            protected: super::protected::Protected::none(),
            sockets: Vec::new(),
            shown: Vec::new(),
        })
    }

    /// The same sandbox, letting its commands connect to these host unix
    /// sockets (and to no other).
    #[must_use]
    pub fn exposing(mut self, sockets: Vec<PathBuf>) -> Self {
        self.sockets = sockets;
        self
    }

    /// The same sandbox, showing the command `read_only` paths of the host,
    /// read-only: an MCP server's own program and files, which may lie
    /// where the sandbox shows nothing (its private `/tmp`). Of these, only
    /// absolute paths that exist are shown, resolved; never `/` or a whole
    /// directory the sandbox replaces or that holds the host's sockets
    /// ([`NEVER_SHOWN`]), never a socket, never a path that is, holds or
    /// lies in a protected one (the run's own files stay as hidden as they
    /// were), and never one in the workspace (it is there already,
    /// writable).
    #[must_use]
    pub fn showing(mut self, read_only: Vec<PathBuf>) -> Self {
        self.shown = read_only;
        self
    }

    /// The same sandbox, keeping `protected` out of the commands' reach.
    #[must_use]
    pub fn protecting(mut self, protected: super::protected::Protected) -> Self {
        self.protected = protected;
        self
    }

    /// Checks that the protected files can be kept out of reach (see
    /// `covers`), then runs `true` in a sandbox on `workspace`
    /// to check that bubblewrap can create namespaces here (it cannot in
    /// some containers). The log need not exist yet.
    pub fn check(&self, workspace: &Path) -> Result<(), EnvError> {
        let ws = canonical(workspace);
        let covers = self.covers(&ws, true).map_err(EnvError::Unprotectable)?;
        let out = self
            .bwrap_command("true", &ws, &covers)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| EnvError::BwrapBroken(e.to_string()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(EnvError::BwrapBroken(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ))
        }
    }
}

impl ExecEnv for SandboxEnv {
    fn kind(&self) -> &'static str {
        "sandbox"
    }

    fn check(&self, workspace: &Path) -> Result<(), EnvError> {
        SandboxEnv::check(self, workspace)
    }

    fn command(&self, script: &str, workspace: &Path) -> Command {
        let ws = canonical(workspace);
        match self.covers(&ws, false) {
            Ok(covers) => self.bwrap_command(script, &ws, &covers),
            // Fails closed: nothing runs with the run's files in reach.
            Err(why) => refusal(&EnvError::Unprotectable(why).to_string(), &ws),
        }
    }
}

/// A mount over a protected path under the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cover {
    /// A directory between the workspace and a protected path, bound
    /// writable onto itself: a mount point cannot be renamed or removed,
    /// so the protected path cannot be moved away and replaced.
    Pin(PathBuf),
    /// A protected file or directory, bound read-only onto itself.
    ReadOnly(PathBuf),
}

/// A command that runs nothing and says why on stderr (exit 126).
fn refusal(why: &str, ws: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        "printf 'tinyagent: %s\\n' \"$1\" >&2; exit 126",
        "bash",
        why,
    ])
    .current_dir(ws);
    super::host::detach(&mut cmd);
    cmd
}

/// Directories [`SandboxEnv::showing`] never shows as a whole.
pub const NEVER_SHOWN: &[&str] = &[
    "/", "/tmp", "/var/tmp", "/run", "/var/run", "/dev", "/dev/shm", "/proc",
];

impl SandboxEnv {
    /// The paths of `showing` to bind on `ws` (resolved): as it says there,
    /// parents before their children, each once.
    fn shown(&self, ws: &Path) -> Vec<PathBuf> {
        use std::os::unix::fs::FileTypeExt;
        let mut out: Vec<PathBuf> = Vec::new();
        for path in self.shown.iter().filter(|p| p.is_absolute()) {
            let Ok(real) = path.canonicalize() else {
                continue;
            };
            let shows_protected = self.protected.covers(&real)
                || self.protected.paths().iter().any(|q| q.starts_with(&real));
            if NEVER_SHOWN.iter().any(|n| real == Path::new(n))
                || real.starts_with(ws)
                || shows_protected
                || std::fs::metadata(&real).is_ok_and(|m| m.file_type().is_socket())
            {
                continue;
            }
            out.push(real);
        }
        out.sort();
        out.dedup();
        // What lies in another shown path is shown with it.
        let all = out.clone();
        out.retain(|p| !all.iter().any(|o| o != p && p.starts_with(o)));
        out
    }

    /// The mounts that keep the protected paths out of reach of commands
    /// in the sandbox on `ws` (resolved). Outside the workspace everything
    /// is read-only already (or, under `/tmp`, not there at all), so only
    /// what lies inside it needs covering:
    ///
    /// - a log's directory inside the workspace is bound read-only as a
    ///   whole: its snapshots, torn tails and `<wal>.d/` appear during the
    ///   run, and a mount can only cover what exists. A log directly in the
    ///   workspace is refused: covering its directory would make the whole
    ///   workspace read-only;
    /// - any other protected file or directory is bound read-only onto
    ///   itself, and each directory between it and the workspace is pinned
    ///   (bound onto itself, writable), so that neither it nor a parent can
    ///   be renamed away and replaced;
    /// - a protected path inside the workspace that is a symbolic link is
    ///   refused (a mount covers the target, not the link), and so is one
    ///   that does not exist, unless `missing_ok` (the check at start, before
    ///   the log is created).
    fn covers(&self, ws: &Path, missing_ok: bool) -> Result<Vec<Cover>, String> {
        let inside = |p: &Path| p != ws && p.starts_with(ws);
        let mut units: Vec<PathBuf> = Vec::new();
        for log in self.protected.logs() {
            let log = resolved(log);
            let Some(dir) = log.parent() else { continue };
            if dir == ws {
                return Err(format!(
                    "the log {} lies directly in the workspace, where the files the run \
                     writes beside it would be open to every command; give --wal a path \
                     outside the workspace or in a directory of its own",
                    log.display()
                ));
            }
            if inside(dir) {
                units.push(dir.to_path_buf());
            }
        }
        for path in self.protected.paths() {
            let path = resolved(path);
            if ws.starts_with(&path) {
                return Err(format!(
                    "{} is protected and holds the workspace",
                    path.display()
                ));
            }
            if inside(&path) {
                units.push(path);
            }
        }
        // What lies inside another covered path is covered with it.
        let mut units: Vec<PathBuf> = units
            .iter()
            .filter(|u| !units.iter().any(|o| o != *u && u.starts_with(o)))
            .cloned()
            .collect();
        units.sort();
        units.dedup();
        let mut pins = std::collections::BTreeSet::new();
        let mut read_only = Vec::new();
        for unit in units {
            match std::fs::symlink_metadata(&unit) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(format!(
                        "{} is a symbolic link inside the workspace, which a command could replace",
                        unit.display()
                    ));
                }
                Ok(_) => {}
                Err(_) if missing_ok => continue,
                Err(e) => return Err(format!("{}: {e}", unit.display())),
            }
            let mut up = unit.parent();
            while let Some(dir) = up.filter(|d| inside(d)) {
                pins.insert(dir.to_path_buf());
                up = dir.parent();
            }
            read_only.push(unit);
        }
        // Parents sort before their children: each pin is made before the
        // mounts beneath it.
        Ok(pins
            .into_iter()
            .map(Cover::Pin)
            .chain(read_only.into_iter().map(Cover::ReadOnly))
            .collect())
    }

    /// The bubblewrap command line for `script` on `ws` (resolved).
    ///
    /// bubblewrap itself is started in a session of its own with no
    /// controlling terminal and none of the agent's descriptors but 0, 1
    /// and 2 ([`super::host::detach`]); the command inside stays in that
    /// session and in bubblewrap's process group, so a signal to the group
    /// reaches it (`--new-session` would put it beyond the group's reach;
    /// the pid namespace and `--die-with-parent` take the rest with
    /// bubblewrap on SIGKILL).
    fn bwrap_command(&self, script: &str, ws: &Path, covers: &[Cover]) -> Command {
        let mut cmd = Command::new(&self.bwrap);
        super::host::detach(&mut cmd);
        // No capabilities, also for root: a user namespace of its own (uid
        // mapped to itself) that may not make further ones, and every
        // capability dropped from all sets, the bounding set included, so
        // no mount, remount, chroot, raw socket or setuid program gives one
        // back. bubblewrap sets no_new_privs itself.
        cmd.args(["--unshare-user", "--disable-userns", "--cap-drop", "ALL"])
            .args(["--ro-bind", "/", "/"])
            .args(["--dev", "/dev", "--proc", "/proc"])
            // uid 0 without capabilities may still write sysctls that only
            // check file modes; bubblewrap covers /proc/irq and /proc/bus.
            .args(["--ro-bind", "/proc/sys", "/proc/sys"])
            .args([
                "--ro-bind-try",
                "/proc/sysrq-trigger",
                "/proc/sysrq-trigger",
            ])
            .args(["--tmpfs", "/tmp"]);
        // No host unix socket is in reach (connect() needs no write access,
        // so a read-only view is not enough): the directories that hold
        // them are empty here, and every other socket the host's network
        // namespace has bound to a path is covered by /dev/null. Abstract
        // sockets belong to a network namespace: `--unshare-net` below.
        for dir in SOCKET_DIRS {
            if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
                cmd.args(["--tmpfs", dir]);
            }
        }
        // Files of /etc that link into an emptied directory (a resolver's
        // `resolv.conf` under /run) are shown again, read-only: regular
        // files only, never a socket.
        for file in kept_from_emptied(ETC_LINKED, SOCKET_DIRS) {
            cmd.arg("--ro-bind-try").arg(&file).arg(&file);
        }
        // After the tmpfs mounts so that a workspace beneath one is visible.
        cmd.arg("--bind")
            .arg(ws)
            .arg(ws)
            .arg("--chdir")
            .arg(ws)
            .args(["--unshare-pid", "--unshare-ipc", "--unshare-uts"])
            .arg("--die-with-parent");
        // After /tmp: what `showing` lets the command see; the workspace
        // stays writable beneath a shown ancestor of it.
        let shown = self.shown(ws);
        for path in &shown {
            cmd.arg("--ro-bind").arg(path).arg(path);
            if ws.starts_with(path) {
                cmd.arg("--bind").arg(ws).arg(ws);
            }
        }
        // After what is shown, so that a socket inside a shown directory is
        // covered too.
        for sock in host_sockets(ws, &self.sockets, &shown) {
            cmd.args(["--ro-bind", "/dev/null"]).arg(&sock);
        }
        for sock in &self.sockets {
            // One the person named: in reach again, at its own path.
            cmd.arg("--bind-try").arg(sock).arg(sock);
        }
        for cover in covers {
            let (flag, path) = match cover {
                Cover::Pin(p) => ("--bind", p),
                Cover::ReadOnly(p) => ("--ro-bind", p),
            };
            cmd.arg(flag).arg(path).arg(path);
        }
        if !self.network {
            cmd.arg("--unshare-net");
        }
        cmd.args(["--", "bash", "-c", script]).current_dir(ws);
        scrub_keys(&mut cmd);
        cmd
    }
}

/// Directories that hold the host's unix sockets, each replaced by an
/// empty tmpfs in the sandbox when it is a directory (`/var/run` is usually
/// a link to `/run`). `/tmp` is private already and `/dev` is bubblewrap's
/// own.
const SOCKET_DIRS: &[&str] = &["/run", "/var/run", "/var/tmp"];

/// Files of /etc that may be links into /run (systemd-resolved,
/// resolvconf): name resolution keeps working in a sandbox given the
/// network.
const ETC_LINKED: &[&str] = &["/etc/resolv.conf", "/etc/hosts"];

/// Of `paths`, the regular files they resolve to that lie in one of the
/// `emptied` directories ([`SOCKET_DIRS`]).
fn kept_from_emptied<P: AsRef<Path>>(paths: &[P], emptied: &[&str]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .filter(|real| {
            emptied.iter().any(|d| real.starts_with(d))
                && std::fs::symlink_metadata(real).is_ok_and(|m| m.file_type().is_file())
        })
        .collect()
}

/// The unix sockets bound to a path in the agent's network namespace
/// (`/proc/net/unix`) that the sandbox would show: outside the directories
/// emptied by [`SOCKET_DIRS`] and `/tmp` or inside a `shown` path, outside
/// the workspace `ws`, not `named` in `env.sockets`, and sockets now: each
/// is covered in the sandbox. A socket
/// bound in another network namespace is not listed there; the emptied
/// directories are where such sockets live.
fn host_sockets(ws: &Path, named: &[PathBuf], shown: &[PathBuf]) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(table) = std::fs::read("/proc/net/unix") else {
        return Vec::new();
    };
    let emptied = |p: &Path| {
        p.starts_with("/tmp")
            || SOCKET_DIRS.iter().any(|d| p.starts_with(d))
            || p.starts_with("/dev")
    };
    let mut found = std::collections::BTreeSet::new();
    for line in table.split(|&b| b == b'\n').skip(1) {
        let Some(path) = socket_path(line) else {
            continue;
        };
        let visible = !emptied(&path) || shown.iter().any(|d| path.starts_with(d));
        if !visible || path.starts_with(ws) || named.contains(&path) {
            continue;
        }
        // A socket that is gone cannot be covered (bubblewrap would have to
        // create a file in a read-only tree); nothing can connect to it.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
            found.insert(path);
        }
    }
    found.into_iter().collect()
}

/// The path of one line of `/proc/net/unix` (`Num RefCount Protocol Flags
/// Type St Inode Path`), when the socket is bound to an absolute one.
fn socket_path(line: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut rest = line;
    for _ in 0..7 {
        rest = rest.trim_ascii_start();
        let end = rest.iter().position(u8::is_ascii_whitespace)?;
        rest = &rest[end..];
    }
    let path = rest.strip_prefix(b" ")?;
    path.starts_with(b"/")
        .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_pin_the_way_down_and_cover_each_protected_path_once() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        for d in ["runs", "a/b"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        for f in ["runs/r.wal", "a/b/hook.sh", "tinyagent.toml"] {
            std::fs::write(ws.join(f), "x").unwrap();
        }
        let mut protected = super::super::protected::Protected::none();
        protected.add_log(&ws.join("runs/r.wal"));
        protected.add(&ws.join("a/b/hook.sh"));
        protected.add(&ws.join("tinyagent.toml"));
        // Outside the workspace: read-only already, nothing to cover.
        protected.add(&dir.path().join("elsewhere.toml"));
        let env = SandboxEnv {
            bwrap: PathBuf::from("bwrap"),
            network: false,
            protected,
            sockets: Vec::new(),
            shown: Vec::new(),
        };
        assert_eq!(
            env.covers(&ws, false).unwrap(),
            vec![
                Cover::Pin(ws.join("a")),
                Cover::Pin(ws.join("a/b")),
                Cover::ReadOnly(ws.join("a/b/hook.sh")),
                Cover::ReadOnly(ws.join("runs")),
                Cover::ReadOnly(ws.join("tinyagent.toml")),
            ]
        );
    }

    #[test]
    fn shown_paths_exist_resolved_and_never_reveal_the_runs_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        for d in ["ws/inner", "pkg/node_modules/m", "runs/r.wal.d", "other"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "pkg/node_modules/m/index.js",
            "runs/r.wal",
            "other/server.py",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(root.join("other/server.py"), root.join("link.py")).unwrap();
        let mut protected = super::super::protected::Protected::none();
        protected.add_log(&root.join("runs/r.wal"));
        let env = SandboxEnv {
            bwrap: PathBuf::from("bwrap"),
            network: false,
            protected,
            sockets: Vec::new(),
            shown: Vec::new(),
        }
        .showing(
            [
                "pkg",
                "pkg/node_modules/m/index.js",
                "link.py",
                "missing.js",
                "ws/inner",
                "runs",
                "runs/r.wal.d",
            ]
            .iter()
            .map(|p| root.join(p))
            .chain(["/", "/tmp", "relative/path"].map(PathBuf::from))
            .collect(),
        );
        assert_eq!(
            env.shown(&ws),
            vec![root.join("other/server.py"), root.join("pkg")]
        );
        // A directory holding the log is not shown at all.
        let holds = env.clone().showing(vec![root.clone()]);
        assert!(holds.shown(&ws).is_empty());
        // A shown ancestor of the workspace leaves the workspace writable.
        let mut env = env.showing(vec![root.join("pkg")]);
        env.protected = super::super::protected::Protected::none();
        let args: Vec<String> = env
            .bwrap_command("true", &root.join("pkg/node_modules"), &[])
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        let pkg = root.join("pkg").display().to_string();
        let ws = root.join("pkg/node_modules").display().to_string();
        assert!(
            line.contains(&format!("--ro-bind {pkg} {pkg} --bind {ws} {ws}")),
            "{line}"
        );
        assert!(line.find("--tmpfs /tmp").unwrap() < line.find(&pkg).unwrap());
    }

    #[test]
    fn files_of_etc_that_link_into_an_emptied_directory_are_shown_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let emptied = root.join("run");
        std::fs::create_dir_all(emptied.join("resolve")).unwrap();
        std::fs::write(emptied.join("resolve/stub.conf"), "nameserver 127.0.0.53\n").unwrap();
        std::os::unix::net::UnixListener::bind(emptied.join("sock")).unwrap();
        let etc = root.join("etc");
        std::fs::create_dir(&etc).unwrap();
        std::os::unix::fs::symlink(emptied.join("resolve/stub.conf"), etc.join("resolv.conf"))
            .unwrap();
        std::os::unix::fs::symlink(emptied.join("sock"), etc.join("a-socket")).unwrap();
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        let paths = [
            etc.join("resolv.conf"),
            etc.join("a-socket"),
            etc.join("hosts"),
        ];
        let emptied_str = emptied.to_str().unwrap();
        assert_eq!(
            kept_from_emptied(&paths, &[emptied_str]),
            vec![emptied.join("resolve/stub.conf")]
        );
    }
}
