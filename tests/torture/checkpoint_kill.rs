//! `fork --restore` killed with SIGKILL at random moments (contract section
//! 10): each kill is followed by running the same command again, which must
//! finish the fork and the restore; the original log and its checkpoint
//! store never change. Every tenth time the fork's `resume` is what finishes
//! a restore the kill cut short.

use crate::support::checkpoints::{git_tree_of, tree_of};
use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KILLS: usize = 100;

/// Puts `dir` back to exactly `tree` (a [`tree_of`] map).
fn put_back(dir: &Path, tree: &BTreeMap<PathBuf, (u32, Vec<u8>)>) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir(dir).unwrap();
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

fn fork_cmd(sb: &Sandbox, to: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.ws())
        .arg("fork")
        .arg(sb.wal())
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
    let sb = Sandbox::new();
    let ws = sb.ws();
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
    let out = output(sb.run_cmd(&server.base_url(), "many files"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let wal = sb.wal();
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
    let store = sb.path("run.wal.d");
    let store_tree = tree_of(&store);
    let after_run = tree_of(&ws);

    // How long an uninterrupted fork --restore takes: kills land in [0, that].
    let probe = sb.path("probe.wal");
    let t = Instant::now();
    let o = fork_cmd(&sb, &probe).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let span = t.elapsed().as_micros() as u64;
    assert_eq!(git_tree_of(&ws), step1);

    let (mut before_log, mut mid_restore, mut after_all) = (0, 0, 0);
    for i in 0..KILLS {
        put_back(&ws, &after_run);
        let target = sb.path(&format!("fork-{i}.wal"));
        let mut child = fork_cmd(&sb, &target).spawn().unwrap();
        // Most of an uninterrupted run is start-up and the restore: aim there.
        std::thread::sleep(Duration::from_micros(fastrand::u64(0..span * 3 / 4)));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        let intent = sb.path(&format!("fork-{i}.wal.d/restore.json"));
        match (target.exists(), intent.exists()) {
            (false, _) => before_log += 1,
            (true, true) => mid_restore += 1,
            (true, false) => after_all += 1,
        }
        if i % 10 == 9 && target.exists() {
            // resume finishes a pending restore before anything else.
            let server = MockServer::start(vec![MockReply::text("ok")]);
            let mut resume = Command::new(bin());
            resume
                .current_dir(sb.dir.path())
                .arg("resume")
                .arg(&target)
                .args(["--message", "go on", "--base-url", &server.base_url()])
                .stdin(Stdio::null());
            let o = output(resume);
            assert_eq!(o.status.code(), Some(0), "kill {i}: resume: {}", stderr(&o));
        } else {
            let o = fork_cmd(&sb, &target).output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(0),
                "kill {i} ({status:?}): the rerun: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(!intent.exists(), "kill {i}: the restore was finished");
        assert_eq!(
            git_tree_of(&ws),
            step1,
            "kill {i}: the workspace is step 1's"
        );
        assert_eq!(
            std::fs::read(ws.join("run.log")).unwrap(),
            b"two\n",
            "ignored file"
        );
        let frecs = contract::read(&target);
        contract::check_write_order(&frecs);
        assert_eq!(frecs[0].data["forked_from"]["step"], 1);
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
    }
    eprintln!(
        "{KILLS} kills: {before_log} before the fork's log was in place, {mid_restore} during the restore, {after_all} after it"
    );
    assert!(
        before_log > 0 && mid_restore > 0,
        "kills landed in both phases"
    );
}
