//! A log's `.d` directory is data, never configuration (contract sections 8
//! and 20), on the real binary with the real git: a filter driver that
//! would leave a marker file is planted in every place git could read one
//! (the store's `config` and `info/attributes`, the workspace's
//! `.gitattributes`, the global and system config, `GIT_CONFIG_*`), and it
//! never runs in `run`, `resume`, `fork --restore` (also into a log whose
//! `.d` someone made first) or `log diff`. A `.d` or store that holds what
//! tinyagent did not write, or that belongs to another user, is refused with
//! exit 2 and the whole directory is byte for byte as it was.

use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, stderr};
use crate::support::require::{self, require};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Step 1 writes a.txt, step 2 changes it and adds b.txt (a resumed fork
/// at step 1 runs step 2 again), step 3 answers.
const SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "one\n"}}]},
  {"tool_calls": [{"name": "bash", "arguments": {"command": "echo two > a.txt; echo b > b.txt"}}]},
  {"content": "done"}
]}"#;

/// A sandbox with a script, a marker path, and hostile git settings
/// everywhere git looks for them outside the store.
struct Scene {
    sb: Sandbox,
    marker: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let sb = Sandbox::new();
        std::fs::write(sb.path("script.json"), SCRIPT).unwrap();
        let marker = sb.path("MARKER");
        let scene = Scene { sb, marker };
        let evil = scene.evil_config();
        let home = scene.sb.path("evil-home");
        std::fs::create_dir_all(home.join("hooks")).unwrap();
        std::fs::write(home.join(".gitconfig"), &evil).unwrap();
        std::fs::write(home.join("attributes"), "* filter=evil diff=evil\n").unwrap();
        for hook in [
            "post-checkout",
            "reference-transaction",
            "post-index-change",
        ] {
            let p = home.join("hooks").join(hook);
            std::fs::write(&p, format!("#!/bin/sh\ntouch {}\n", scene.marker.display())).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let xdg_git = scene.sb.config_home().join("git");
        std::fs::create_dir_all(&xdg_git).unwrap();
        std::fs::write(xdg_git.join("config"), &evil).unwrap();
        std::fs::write(xdg_git.join("attributes"), "* filter=evil diff=evil\n").unwrap();
        // The workspace's own attributes name the driver too (they are the
        // person's files: stored, never obeyed).
        std::fs::write(
            scene.sb.ws().join(".gitattributes"),
            "* filter=evil diff=evil\n",
        )
        .unwrap();
        scene
    }

    /// A git config whose every command would leave the marker.
    fn evil_config(&self) -> String {
        let touch = format!("touch {}", self.marker.display());
        let home = self.sb.path("evil-home");
        format!(
            "[filter \"evil\"]\n\tclean = {touch}; cat\n\tsmudge = {touch}; cat\n\trequired = true\n\
             [diff \"evil\"]\n\ttextconv = {touch}; cat\n\tcommand = {touch}\n\
             [diff]\n\texternal = {touch}\n\
             [core]\n\thooksPath = {hooks}\n\tfsmonitor = {touch}\n\tattributesFile = {attrs}\n",
            hooks = home.join("hooks").display(),
            attrs = home.join("attributes").display(),
        )
    }

    /// `tinyagent ARGS` in the sandbox, with the hostile settings in the
    /// environment.
    fn ta<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        let home = self.sb.path("evil-home");
        let gitconfig = home.join(".gitconfig");
        let touch = format!("touch {}; cat", self.marker.display());
        // A fork restores where the person is: in the workspace.
        let fork = args.first().is_some_and(|a| a.as_ref() == "fork");
        let dir = if fork {
            self.sb.ws()
        } else {
            self.sb.dir.path().to_path_buf()
        };
        let mut c = self.sb.command(&dir, args);
        c.env("HOME", &home)
            .env("GIT_CONFIG_GLOBAL", &gitconfig)
            .env("GIT_CONFIG_SYSTEM", &gitconfig)
            .env("GIT_CONFIG_COUNT", "2")
            .env("GIT_CONFIG_KEY_0", "filter.evil.clean")
            .env("GIT_CONFIG_VALUE_0", &touch)
            .env("GIT_CONFIG_KEY_1", "filter.evil.smudge")
            .env("GIT_CONFIG_VALUE_1", &touch);
        c.output().expect("run tinyagent")
    }

    fn run(&self, wal: &Path) -> Output {
        let (script, ws) = (self.sb.path("script.json"), self.sb.ws());
        self.ta(&[
            OsStr::new("run"),
            OsStr::new("--provider"),
            OsStr::new("script"),
            OsStr::new("--script"),
            script.as_os_str(),
            OsStr::new("--wal"),
            wal.as_os_str(),
            OsStr::new("--cwd"),
            ws.as_os_str(),
            OsStr::new("change two files"),
        ])
    }

    /// `resume WAL --message "go on"`.
    fn resume(&self, wal: &Path) -> Output {
        self.ta(&[
            OsStr::new("resume"),
            wal.as_os_str(),
            OsStr::new("--message"),
            OsStr::new("go on"),
        ])
    }

    /// `log diff WAL`.
    fn diff(&self, wal: &Path) -> Output {
        self.ta(&[OsStr::new("log"), OsStr::new("diff"), wal.as_os_str()])
    }

    /// `fork WAL --at 1 --restore`, into the log `out` when given.
    fn fork_restore(&self, wal: &Path, out: Option<&Path>) -> Output {
        let mut args = vec![
            OsStr::new("fork"),
            wal.as_os_str(),
            OsStr::new("--at"),
            OsStr::new("1"),
            OsStr::new("--restore"),
        ];
        if let Some(out) = out {
            args.extend([OsStr::new("-o"), out.as_os_str()]);
        }
        self.ta(&args)
    }

    fn assert_no_marker(&self, what: &str) {
        assert!(
            !self.marker.exists(),
            "{what}: a filter, hook or driver git was not meant to obey ran"
        );
    }
}

fn ok(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
}

/// Exit 2 with one line naming `path`.
fn refused(o: &Output, what: &str, path: &Path) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
    assert!(
        err.contains(&path.display().to_string()) && err.contains("refused"),
        "{what}: the refusal does not name {}: {err}",
        path.display()
    );
}

/// Everything under `dir`: kind and mode, owner, bytes (a symlink's
/// target). Equal maps mean nothing changed.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let bytes = if m.is_dir() {
                stack.push(p.clone());
                Vec::new()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                std::fs::read(&p).unwrap()
            };
            out.insert(p, (m.mode(), m.uid(), bytes));
        }
    }
    out
}

fn cp_a(from: &Path, to: &Path) {
    let st = Command::new("cp").arg("-a").arg(from).arg(to).status();
    assert!(st.unwrap().success(), "cp -a {}", from.display());
}

fn chown_nobody(p: &Path) {
    let st = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(p)
        .status();
    assert!(st.unwrap().success(), "chown {}", p.display());
}

fn dot_d(wal: &Path) -> PathBuf {
    let mut s = wal.as_os_str().to_owned();
    s.push(".d");
    PathBuf::from(s)
}

/// The tree of the last checkpoint up to the end of `step`.
fn tree_at(wal: &Path, step: u64) -> String {
    contract::read(wal)
        .into_iter()
        .rfind(|r| r.kind == "workspace.checkpoint" && r.data["step"].as_u64().unwrap() <= step)
        .expect("a checkpoint")
        .data["tree"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Plants a filter in a store's `config` and `info/attributes`, and a
/// restore intent beside it (what `resume` would carry out).
fn plant(scene: &Scene, dot_d: &Path, tree: &str) {
    let git = dot_d.join("checkpoints.git");
    let mut config = std::fs::read_to_string(git.join("config")).unwrap();
    config.push_str(&scene.evil_config());
    std::fs::write(git.join("config"), config).unwrap();
    std::fs::write(git.join("info/attributes"), "* filter=evil diff=evil\n").unwrap();
    let intent = serde_json::json!({
        "tree": tree,
        "step": 1,
        "workspace": scene.sb.ws().display().to_string(),
    });
    std::fs::write(dot_d.join("restore.json"), intent.to_string()).unwrap();
}

fn git_ok(test: &str) -> bool {
    require("git", test, require::git()).is_some()
}

/// With hostile settings in every place outside the store git reads them,
/// the whole life of a run works and no filter, driver or hook runs: the
/// run's checkpoints, `log diff`, `fork --restore -o` (git's `read-tree`
/// and `update-index --refresh` on the workspace) and the fork's resume.
#[test]
fn outside_git_settings_and_workspace_attributes_never_run_a_filter() {
    if !git_ok("outside_git_settings_and_workspace_attributes_never_run_a_filter") {
        return;
    }
    let s = Scene::new();
    let wal = s.sb.wal();
    ok(&s.run(&wal), "run");
    s.assert_no_marker("run");
    assert_eq!(std::fs::read(s.sb.ws().join("a.txt")).unwrap(), b"two\n");
    let diff = s.diff(&wal);
    ok(&diff, "log diff");
    assert!(String::from_utf8_lossy(&diff.stdout).contains("+two"));
    s.assert_no_marker("log diff");
    let fork = s.sb.path("f.wal");
    let out = s.fork_restore(&wal, Some(&fork));
    ok(&out, "fork --restore");
    s.assert_no_marker("fork --restore");
    // The restore really ran git on the workspace.
    assert_eq!(std::fs::read(s.sb.ws().join("a.txt")).unwrap(), b"one\n");
    assert!(!s.sb.ws().join("b.txt").exists());
    let out = s.resume(&fork);
    ok(&out, "resume");
    s.assert_no_marker("resume of the fork");
    assert_eq!(std::fs::read(s.sb.ws().join("b.txt")).unwrap(), b"b\n");
}

/// A log handed over with a `.d` whose store names a filter (in `config`
/// and `info/attributes`) and asks for a restore, a fork into a log whose
/// `.d` someone planted first, a run into one, and a `.d` others can write:
/// each command is refused with exit 2 naming the path, no filter runs,
/// and nothing in the sandbox changes.
#[test]
fn a_planted_store_is_refused_by_every_command_and_nothing_changes() {
    if !git_ok("a_planted_store_is_refused_by_every_command_and_nothing_changes") {
        return;
    }
    let s = Scene::new();
    let wal = s.sb.wal();
    ok(&s.run(&wal), "run");
    let tree1 = tree_at(&wal, 1);
    // The handed-over log: a copy with a planted `.d`.
    let handed = s.sb.path("handed.wal");
    std::fs::copy(&wal, &handed).unwrap();
    cp_a(&dot_d(&wal), &dot_d(&handed));
    plant(&s, &dot_d(&handed), &tree1);
    // `.d`s someone made first for a fork and for a run.
    let (fork_wal, run_wal) = (s.sb.path("x.wal"), s.sb.path("y.wal"));
    cp_a(&dot_d(&handed), &dot_d(&fork_wal));
    cp_a(&dot_d(&handed), &dot_d(&run_wal));
    // A `.d` of this user that others can write.
    let open_wal = s.sb.path("z.wal");
    std::fs::create_dir(dot_d(&open_wal)).unwrap();
    std::fs::set_permissions(dot_d(&open_wal), std::fs::Permissions::from_mode(0o777)).unwrap();

    let before = snapshot(s.sb.dir.path());
    let config = |w: &Path| dot_d(w).join("checkpoints.git/config");
    let cases: Vec<(&str, Output, PathBuf)> = vec![
        (
            "resume of the handed-over log",
            s.resume(&handed),
            config(&handed),
        ),
        (
            "fork --restore of the handed-over log",
            s.fork_restore(&handed, None),
            config(&handed),
        ),
        (
            "log diff of the handed-over log",
            s.diff(&handed),
            config(&handed),
        ),
        (
            "fork --restore -o X.wal with X.wal.d planted",
            s.fork_restore(&wal, Some(&fork_wal)),
            config(&fork_wal),
        ),
        ("run into a planted .d", s.run(&run_wal), config(&run_wal)),
        (
            "run into a .d others can write",
            s.run(&open_wal),
            dot_d(&open_wal),
        ),
    ];
    for (what, out, path) in &cases {
        s.assert_no_marker(what);
        refused(out, what, path);
    }
    assert_eq!(
        snapshot(s.sb.dir.path()),
        before,
        "a refused command changed something"
    );
    assert!(!fork_wal.exists() && !run_wal.exists() && !open_wal.exists());
}

/// As root, a `.d` (or one file in it) that belongs to another user is
/// refused whatever it holds: the red team's case, where `nobody` made
/// `<wal>.d/` in a shared directory and root's command would have run
/// nobody's filter.
#[test]
fn as_root_a_run_directory_another_user_owns_is_refused() {
    let test = "as_root_a_run_directory_another_user_owns_is_refused";
    if !git_ok(test) || require("root", test, require::root()).is_none() {
        return;
    }
    let s = Scene::new();
    let wal = s.sb.wal();
    ok(&s.run(&wal), "run");
    let tree1 = tree_at(&wal, 1);
    // Nobody's copy of the log's `.d`, as it is (nothing planted).
    let handed = s.sb.path("handed.wal");
    std::fs::copy(&wal, &handed).unwrap();
    cp_a(&dot_d(&wal), &dot_d(&handed));
    chown_nobody(&dot_d(&handed));
    // One file of nobody's in a `.d` of root's.
    let one = s.sb.path("one.wal");
    std::fs::copy(&wal, &one).unwrap();
    cp_a(&dot_d(&wal), &dot_d(&one));
    chown_nobody(&dot_d(&one).join("checkpoints.git/config"));
    // Nobody made the fork's and the run's `.d` first, with a filter.
    let (fork_wal, run_wal) = (s.sb.path("x.wal"), s.sb.path("y.wal"));
    for w in [&fork_wal, &run_wal] {
        cp_a(&dot_d(&wal), &dot_d(w));
        plant(&s, &dot_d(w), &tree1);
        chown_nobody(&dot_d(w));
    }

    let before = snapshot(s.sb.dir.path());
    let cases: Vec<(&str, Output, PathBuf)> = vec![
        (
            "resume of a log whose .d is nobody's",
            s.resume(&handed),
            dot_d(&handed),
        ),
        (
            "log diff of a log whose .d is nobody's",
            s.diff(&handed),
            dot_d(&handed),
        ),
        (
            "fork --restore of a log whose .d is nobody's",
            s.fork_restore(&handed, None),
            dot_d(&handed),
        ),
        (
            "log diff with the store's config nobody's",
            s.diff(&one),
            dot_d(&one).join("checkpoints.git/config"),
        ),
        (
            "fork --restore -o X.wal, X.wal.d nobody's",
            s.fork_restore(&wal, Some(&fork_wal)),
            dot_d(&fork_wal),
        ),
        (
            "run into a .d nobody made",
            s.run(&run_wal),
            dot_d(&run_wal),
        ),
    ];
    for (what, out, path) in &cases {
        s.assert_no_marker(what);
        refused(out, what, path);
    }
    assert_eq!(
        snapshot(s.sb.dir.path()),
        before,
        "a refused command changed something"
    );
    assert!(!fork_wal.exists() && !run_wal.exists());
}

/// Under umask 0, every file the run and a fork make under their `.d` is
/// private: no group or other bit anywhere, the stat cache 0600.
#[test]
fn under_umask_0_every_file_of_a_run_directory_is_private() {
    if !git_ok("under_umask_0_every_file_of_a_run_directory_is_private") {
        return;
    }
    let s = Scene::new();
    let wal = s.sb.wal();
    let fork = s.sb.path("f.wal");
    let script = s.sb.path("script.json");
    let binary = bin();
    let umask0 = |args: &[&OsStr]| {
        let mut all: Vec<&OsStr> = vec![
            OsStr::new("-c"),
            OsStr::new("umask 0; exec \"$0\" \"$@\""),
            binary.as_os_str(),
        ];
        all.extend_from_slice(args);
        let mut c = Command::new("sh");
        c.current_dir(s.sb.dir.path())
            .args(all)
            .env_remove("OPENAI_API_KEY")
            .env("TINYAGENT_HOME", s.sb.home())
            .stdin(Stdio::null());
        c.output().unwrap()
    };
    let ws = s.sb.ws();
    let out = umask0(&[
        OsStr::new("run"),
        OsStr::new("--provider"),
        OsStr::new("script"),
        OsStr::new("--script"),
        script.as_os_str(),
        OsStr::new("--wal"),
        wal.as_os_str(),
        OsStr::new("--cwd"),
        ws.as_os_str(),
        OsStr::new("change two files"),
    ]);
    ok(&out, "run under umask 0");
    let out = umask0(&[
        OsStr::new("fork"),
        wal.as_os_str(),
        OsStr::new("--at"),
        OsStr::new("1"),
        OsStr::new("--restore"),
        OsStr::new("--cwd"),
        ws.as_os_str(),
        OsStr::new("-o"),
        fork.as_os_str(),
    ]);
    ok(&out, "fork under umask 0");
    for w in [&wal, &fork] {
        let d = dot_d(w);
        let stat = d.join("checkpoints.git/tinyagent-stat");
        assert_eq!(
            std::fs::metadata(&stat).unwrap().mode() & 0o7777,
            0o600,
            "{}",
            stat.display()
        );
        let mut files = 0;
        for (p, (mode, _, _)) in snapshot(&d) {
            assert_eq!(
                mode & 0o077,
                0,
                "{} is mode {:o}",
                p.display(),
                mode & 0o7777
            );
            files += 1;
        }
        assert!(files > 5, "{}: {files} entries", d.display());
    }
}
