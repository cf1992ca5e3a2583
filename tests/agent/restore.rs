//! Going back never loses the person's work (contract section 17), on the
//! real binary: `fork --restore` changes only what the run changed after
//! the step and still holds what the run left there; a conflict is left and
//! listed (`--force` restores it); `--dry-run` changes nothing and lists
//! what the restore then does; `restore --undo` gives the workspace back
//! byte for byte.

use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, output, stderr, tree_state};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};

fn tinyagent(sb: &Sandbox, dir: &Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.current_dir(dir)
        .args(args)
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .stdin(Stdio::null());
    output(c)
}

fn ok(o: &std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A run of two steps: step 1 writes `a.txt`; step 2 rewrites it, creates
/// `new/made.txt` and removes `old.txt`. The workspace starts with
/// `README.md` and `old.txt`.
fn two_steps(sb: &Sandbox) {
    let ws = sb.ws();
    std::fs::write(ws.join("README.md"), "readme\n").unwrap();
    std::fs::write(ws.join("old.txt"), "old\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"})),
        MockReply::tool_calls(vec![
            ("write", json!({"path": "a.txt", "content": "two\n"})),
            (
                "bash",
                json!({"command": "mkdir -p new && echo made > new/made.txt && rm old.txt"}),
            ),
        ]),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "change files"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn fork_args<'a>(wal: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["fork", wal, "--at", "1", "-o", out, "--restore"];
    v.extend_from_slice(extra);
    v
}

#[test]
fn a_restore_keeps_the_persons_untracked_notes_and_uncommitted_edit() {
    if require("git", "restore_keeps_person", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    // The person's own work since: a new file, an edit of a file the run
    // never touched, a config and a hook program.
    std::fs::write(ws.join("MYNOTES.txt"), "my notes\n").unwrap();
    std::fs::write(ws.join("README.md"), "readme, edited by me\n").unwrap();
    std::fs::write(ws.join("tinyagent.toml"), "[limits]\nmax_steps = 9\n").unwrap();
    std::fs::write(ws.join("hook.sh"), "#!/bin/sh\n").unwrap();
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    let o = tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), fork.to_str().unwrap(), &[]),
    );
    ok(&o);
    // What the run did after step 1 is undone...
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(ws.join("old.txt")).unwrap(), b"old\n");
    assert!(!ws.join("new").exists(), "the run's new directory is gone");
    // ...and nothing of the person's.
    assert_eq!(
        std::fs::read(ws.join("MYNOTES.txt")).unwrap(),
        b"my notes\n"
    );
    assert_eq!(
        std::fs::read(ws.join("README.md")).unwrap(),
        b"readme, edited by me\n"
    );
    assert!(ws.join("tinyagent.toml").exists() && ws.join("hook.sh").exists());
    // The one command that undoes it is printed.
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "undo it with: tinyagent restore --undo {}",
            fork.display()
        )),
        "{err}"
    );
}

#[test]
fn a_file_changed_since_the_run_is_a_conflict_left_alone_and_force_restores_it() {
    if require("git", "restore_conflict", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    std::fs::write(ws.join("a.txt"), "two, and my line\n").unwrap();
    let wal = sb.wal();
    let f1 = sb.path("f1.wal");
    let o = tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), f1.to_str().unwrap(), &[]),
    );
    ok(&o);
    assert_eq!(
        std::fs::read(ws.join("a.txt")).unwrap(),
        b"two, and my line\n",
        "a conflict is left as it is"
    );
    assert!(stderr(&o).contains("conflict a.txt"), "{}", stderr(&o));
    // The rest of the run's changes were undone.
    assert_eq!(std::fs::read(ws.join("old.txt")).unwrap(), b"old\n");
    assert!(!ws.join("new/made.txt").exists());
    let recs = contract::read(&f1);
    let rec = recs.last().unwrap();
    assert_eq!(rec.kind, "workspace.restored");
    assert_eq!(rec.data["conflicts"], json!(["a.txt"]));
    assert_eq!(rec.data["paths"], json!(["new/made.txt", "old.txt"]));

    // --force restores it too.
    let f2 = sb.path("f2.wal");
    let o = tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), f2.to_str().unwrap(), &["--force"]),
    );
    ok(&o);
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
}

#[test]
fn dry_run_lists_exactly_what_the_restore_does_and_changes_nothing() {
    if require("git", "restore_dry_run", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    std::fs::write(ws.join("MYNOTES.txt"), "mine\n").unwrap();
    std::fs::write(ws.join("new/made.txt"), "made, then edited by me\n").unwrap();
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    let before = tree_state(sb.dir.path());
    let o = tinyagent(
        &sb,
        &ws,
        &fork_args(
            wal.to_str().unwrap(),
            fork.to_str().unwrap(),
            &["--dry-run"],
        ),
    );
    let plan = ok(&o);
    assert_eq!(
        plan.lines().collect::<Vec<_>>(),
        [
            "restore a.txt",
            "restore old.txt",
            "conflict new/made.txt (changed since the run's last checkpoint)"
        ]
    );
    assert_eq!(
        tree_state(sb.dir.path()),
        before,
        "--dry-run changed something"
    );
    assert!(!fork.exists());

    // The restore then does exactly that.
    ok(&tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), fork.to_str().unwrap(), &[]),
    ));
    let rec = contract::read(&fork).last().unwrap().data.clone();
    assert_eq!(rec["paths"], json!(["a.txt", "old.txt"]));
    assert_eq!(rec["conflicts"], json!(["new/made.txt"]));
}

#[test]
fn undo_gives_the_workspace_back_byte_for_byte() {
    if require("git", "restore_undo", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    std::fs::write(ws.join("MYNOTES.txt"), "mine\n").unwrap();
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    let before = tree_state(&ws);
    ok(&tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), fork.to_str().unwrap(), &[]),
    ));
    assert_ne!(tree_state(&ws), before);
    // --dry-run of the undo lists it and changes nothing.
    let restored = tree_state(&ws);
    let o = tinyagent(
        &sb,
        &ws,
        &["restore", "--undo", fork.to_str().unwrap(), "--dry-run"],
    );
    assert_eq!(
        ok(&o).lines().collect::<Vec<_>>(),
        ["restore a.txt", "restore new/made.txt", "delete old.txt"]
    );
    assert_eq!(tree_state(&ws), restored);
    ok(&tinyagent(
        &sb,
        &ws,
        &["restore", "--undo", fork.to_str().unwrap()],
    ));
    assert_eq!(tree_state(&ws), before, "undo is byte for byte");
    // A log with no restore has nothing to undo: exit 2, one line.
    let o = tinyagent(&sb, &ws, &["restore", "--undo", wal.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("records no restore to undo"));
}
