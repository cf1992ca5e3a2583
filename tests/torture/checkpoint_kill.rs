//! `fork --restore` killed with SIGKILL at random moments (contract section
//! 10): each kill is followed by running the same command again, which must
//! finish the fork and the restore; the original log and its checkpoint
//! store never change. Every tenth time the fork's `resume` is what finishes
//! a restore the kill cut short.

use crate::support::checkpoints::tree_of;
use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Kills per layout (the log outside, then inside the workspace).
const KILLS: usize = 60;

/// Whether a workspace entry is the runs' own (a log inside it, its
/// siblings, the forks'): left alone by [`put_back`] and not compared.
fn runs_own(rel: &Path) -> bool {
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.starts_with("run.wal") || first.starts_with("fork-") || first.starts_with("probe.wal")
}

/// The original run's files beside its log (`run.wal*`, its `.d`).
fn originals(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut t = tree_of(dir);
    t.retain(|k, _| k.to_string_lossy().starts_with("run.wal"));
    assert!(!t.is_empty());
    t
}

/// The workspace's files but the runs' own.
fn files_of(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut t = tree_of(dir);
    t.retain(|k, _| !runs_own(k));
    t
}

/// Puts `dir` back to exactly `tree` (a [`tree_of`] map), leaving the
/// runs' own files as they are.
fn put_back(dir: &Path, tree: &BTreeMap<PathBuf, (u32, Vec<u8>)>) {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if runs_own(Path::new(&e.file_name())) {
            continue;
        }
        let p = e.path();
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    for (rel, (mode, bytes)) in tree {
        let p = dir.join(rel);
        if *mode == 0o120_000 {
            let target = std::ffi::OsStr::from_encoded_bytes_unchecked_safe(bytes);
            std::os::unix::fs::symlink(target, &p).unwrap();
        } else if mode & 0o040_000 != 0 {
            std::fs::create_dir_all(&p).unwrap();
        } else {
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&p, bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
    }
}

trait FromBytes {
    fn from_encoded_bytes_unchecked_safe(b: &[u8]) -> &std::ffi::OsStr;
}

impl FromBytes for std::ffi::OsStr {
    fn from_encoded_bytes_unchecked_safe(b: &[u8]) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}

fn fork_cmd(sb: &Sandbox, wal: &Path, to: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.ws())
        .arg("fork")
        .arg(wal)
        .args(["--at", "1", "--restore", "-o"])
        .arg(to)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn fork_and_restore_killed_at_random_moments_finish_when_run_again() {
    if require("git", "checkpoint_kill", require::git()).is_none() {
        return;
    }
    kill_forks(false);
}

/// The same with the log (and the forks) inside the workspace: the
/// original log, its snapshot and its store are never touched (the restore
/// a resume finishes used to remove them).
#[test]
fn with_the_log_inside_the_workspace_killed_forks_never_touch_the_original() {
    if require("git", "checkpoint_kill_inside", require::git()).is_none() {
        return;
    }
    kill_forks(true);
}

/// Kills of `fork --restore` and of its resume, each followed by a rerun
/// (or a resume); the person's own files (a new file, an edit of a file
/// the run never touched, an ignored file) survive every one.
fn kill_forks(inside: bool) {
    let sb = Sandbox::new();
    let ws = sb.ws();
    let dir = if inside {
        ws.clone()
    } else {
        sb.dir.path().to_path_buf()
    };
    let wal = dir.join("run.wal");
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    // Step 1 makes 100 files in 10 directories; step 2 changes a third,
    // deletes a third, adds 30 and touches the ignored file.
    let make = "for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p d$d; for f in $(seq 0 9); do echo \"$d $f\" > d$d/f$f.txt; done; done; echo one > run.log";
    let change = "for d in 0 1 2; do for f in $(seq 0 9); do echo changed >> d$d/f$f.txt; done; done; rm -r d3 d4 d5; mkdir -p new; for f in $(seq 0 29); do echo n$f > new/n$f; done; echo two > run.log";
    let server = MockServer::start(vec![
        MockReply::tool_call("bash", json!({"command": make})),
        MockReply::tool_call("bash", json!({"command": change})),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd_wal(&server.base_url(), "many files", "", &wal));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The person's own work since the run.
    std::fs::write(ws.join("MYNOTES.txt"), "mine\n").unwrap();
    std::fs::write(ws.join("d9/f9.txt"), "9 9, edited by me\n").unwrap();
    let recs = contract::read(&wal);
    let step1 = recs
        .iter()
        .rev()
        .find(|r| r.kind == "workspace.checkpoint" && r.data["step"] == 1)
        .unwrap()
        .data["tree"]
        .as_str()
        .unwrap()
        .to_string();
    let wal_bytes = std::fs::read(&wal).unwrap();
    let store = dir.join("run.wal.d");
    let store_tree = tree_of(&store);
    let after_run = files_of(&ws);
    let originals_before = originals(&dir);

    // How long an uninterrupted fork --restore takes: kills land in [0, that].
    let probe = dir.join("probe.wal");
    let t = Instant::now();
    let o = fork_cmd(&sb, &wal, &probe).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let span = t.elapsed().as_micros() as u64;
    // The restored workspace: the run's changes after step 1 undone, the
    // person's files as they were.
    let restored = files_of(&ws);
    assert_eq!(
        restored
            .get(Path::new("MYNOTES.txt"))
            .map(|f| f.1.as_slice()),
        Some(&b"mine\n"[..])
    );
    assert_eq!(
        restored.get(Path::new("d9/f9.txt")).map(|f| f.1.as_slice()),
        Some(&b"9 9, edited by me\n"[..])
    );
    assert!(!restored.contains_key(Path::new("new/n0")));
    assert_eq!(
        restored.get(Path::new("d3/f0.txt")).map(|f| f.1.as_slice()),
        Some(&b"3 0\n"[..])
    );

    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("probe.wal") {
            let p = e.path();
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
    let (mut before_log, mut mid_restore, mut after_all) = (0, 0, 0);
    for i in 0..KILLS {
        put_back(&ws, &after_run);
        let target = dir.join(format!("fork-{i}.wal"));
        let mut child = fork_cmd(&sb, &wal, &target).spawn().unwrap();
        // Most of an uninterrupted run is start-up and the restore: aim there.
        std::thread::sleep(Duration::from_micros(fastrand::u64(0..span * 3 / 4)));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        let intent = dir.join(format!("fork-{i}.wal.d/restore.json"));
        match (target.exists(), intent.exists()) {
            (false, _) => before_log += 1,
            (true, true) => mid_restore += 1,
            (true, false) => after_all += 1,
        }
        if i % 10 == 9 && target.exists() {
            // resume finishes a pending restore before anything else; it
            // is killed too, then resumed again.
            let server = MockServer::start(vec![MockReply::text("ok"), MockReply::text("ok")]);
            let resume = || {
                let mut c = Command::new(bin());
                c.current_dir(sb.dir.path())
                    .arg("resume")
                    .arg(&target)
                    .args(["--message", "go on", "--base-url", &server.base_url()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped());
                c
            };
            let mut child = resume().spawn().unwrap();
            std::thread::sleep(Duration::from_micros(fastrand::u64(0..span)));
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            let o = resume().output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(0),
                "kill {i}: resume: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        } else {
            let o = fork_cmd(&sb, &wal, &target).output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(0),
                "kill {i} ({status:?}): the rerun: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(!intent.exists(), "kill {i}: the restore was finished");
        // Exactly the restore's changes: nothing else touched (the ignored
        // run.log and the person's files among them).
        assert!(
            files_of(&ws) == restored,
            "kill {i}: the workspace is not the restored one"
        );
        assert_eq!(
            std::fs::read(ws.join("run.log")).unwrap(),
            b"two\n",
            "ignored file"
        );
        let frecs = contract::read(&target);
        contract::check_write_order(&frecs);
        assert_eq!(frecs[0].data["forked_from"]["step"], 1);
        let rec = frecs
            .iter()
            .find(|r| r.kind == "workspace.restored")
            .expect("the restore's record");
        assert_eq!(rec.data["tree"].as_str(), Some(step1.as_str()));
        assert_eq!(
            originals(&dir),
            originals_before,
            "kill {i}: the original's files"
        );
        assert_eq!(
            std::fs::read(&wal).unwrap(),
            wal_bytes,
            "kill {i}: original log"
        );
        let now = tree_of(&store);
        let differ: Vec<&PathBuf> = now
            .keys()
            .chain(store_tree.keys())
            .filter(|k| now.get(*k) != store_tree.get(*k))
            .collect();
        assert!(
            differ.is_empty(),
            "kill {i}: the original store changed: {differ:?}"
        );
        // Done with this fork: its files go (inside the workspace, each
        // fork's store would be stored again by the next restore's
        // checkpoint of the workspace as it is).
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("fork-{i}.wal")) {
                let p = e.path();
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).unwrap();
                } else {
                    std::fs::remove_file(&p).unwrap();
                }
            }
        }
    }
    eprintln!(
        "{KILLS} kills: {before_log} before the fork's log was in place, {mid_restore} during the restore, {after_all} after it"
    );
    assert!(
        before_log > 0 && mid_restore > 0,
        "kills landed in both phases"
    );
}
