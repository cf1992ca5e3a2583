//! Going back never loses the person's work (contract section 17), on the
//! real binary: `fork --restore` changes only what the run changed after
//! the step and still holds what the run left there; a conflict is left and
//! listed (`--force` restores it); `--dry-run` changes nothing and lists
//! what the restore then does; `restore --undo` gives the workspace back
//! byte for byte.

use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, ok, output, stderr, tree_state};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};

fn tinyagent(sb: &Sandbox, dir: &Path, args: &[&str]) -> std::process::Output {
    output(sb.command(dir, args))
}

/// A run of two steps: step 1 writes `a.txt`; step 2 rewrites it, creates
/// `new/made.txt` and removes `old.txt`. The workspace starts with
/// `README.md` and `old.txt`.
pub(crate) fn two_steps(sb: &Sandbox) {
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
    // The fork's log records the undo after the restore: its record says
    // which paths went back, `log show` tells it, a second undo is refused
    // (exit 2, nothing changed).
    let recs = contract::read(&fork);
    let restores: Vec<_> = recs
        .iter()
        .filter(|r| r.kind == "workspace.restored")
        .collect();
    assert_eq!(restores.len(), 2, "the restore and its undo");
    assert!(
        restores[0].data.get("undo").is_none(),
        "a restore has no marker"
    );
    assert_eq!(restores[1].data["undo"], true);
    assert_eq!(restores[1].data["step"], 1);
    assert_eq!(restores[1].data["before"], restores[0].data["before"]);
    assert_eq!(
        restores[1].data["paths"],
        json!(["a.txt", "new/made.txt", "old.txt"])
    );
    let shown = ok(&tinyagent(
        &sb,
        &ws,
        &["log", "show", fork.to_str().unwrap()],
    ));
    assert!(
        shown.contains("restore to step 1 undone (restore --undo): 3 paths put back"),
        "{shown}"
    );
    let fork_bytes = std::fs::read(&fork).unwrap();
    let o = tinyagent(&sb, &ws, &["restore", "--undo", fork.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("undone already"), "{}", stderr(&o));
    assert_eq!(tree_state(&ws), before);
    assert_eq!(std::fs::read(&fork).unwrap(), fork_bytes);
    // A log with no restore has nothing to undo: exit 2, one line.
    let o = tinyagent(&sb, &ws, &["restore", "--undo", wal.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("records no restore to undo"));
}

/// Regression: `<wal>.d/restore.json` was carried out as written; one naming
/// another directory and git's empty tree emptied it. An intent the log
/// records no restore for is refused (exit 2) and nothing changes.
#[test]
fn a_planted_intent_is_refused_and_changes_nothing() {
    if require("git", "restore_planted_intent", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    let victim = sb.path("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("precious"), "keep me\n").unwrap();
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    ok(&tinyagent(
        &sb,
        &ws,
        &[
            "fork",
            wal.to_str().unwrap(),
            "--at",
            "1",
            "-o",
            fork.to_str().unwrap(),
        ],
    ));
    let run_id = contract::read(&fork)[0].data["run_id"].clone();
    let before = tree_state(sb.dir.path());
    for target in [&victim, &ws] {
        let intent = json!({
            "run_id": run_id,
            "tree": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
            "step": 1,
            "workspace": target.display().to_string(),
        });
        let path = sb.path("fork.wal.d/restore.json");
        std::fs::write(&path, intent.to_string()).unwrap();
        let planted = tree_state(sb.dir.path());
        let o = tinyagent(
            &sb,
            &ws,
            &[
                "resume",
                fork.to_str().unwrap(),
                "--base-url",
                "http://127.0.0.1:9",
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert_eq!(
            tree_state(sb.dir.path()),
            planted,
            "a refusal changed something"
        );
        std::fs::remove_file(&path).unwrap();
    }
    assert_eq!(tree_state(sb.dir.path()), before);
}

/// Regression: a forged log (valid CRCs) whose workspace was the parent of
/// `$HOME` made `fork --restore` delete a file under it. An ancestor of
/// `$HOME` is refused even from there; a workspace named only by a log is
/// refused from elsewhere.
#[test]
fn a_forged_workspace_at_an_ancestor_of_home_or_elsewhere_is_refused() {
    if require("git", "restore_forged_workspace", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    let top = sb.path("top");
    let home = top.join("me");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "secret\n").unwrap();
    let wal = sb.wal();
    crate::support::e2e::forge_run_started(&wal, |r| {
        r.settings.cwd = top.display().to_string();
    });
    let before = tree_state(sb.dir.path());
    let fork = sb.path("fork.wal");
    let args = fork_args(wal.to_str().unwrap(), fork.to_str().unwrap(), &[]);
    let mut c = Command::new(bin());
    c.current_dir(&top)
        .args(&args)
        .env("HOME", &home)
        .env("TINYAGENT_HOME", sb.home())
        .stdin(Stdio::null());
    let o = output(c);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("ancestor"), "{}", stderr(&o));
    assert_eq!(
        tree_state(sb.dir.path()),
        before,
        "a refusal changed something"
    );
    // From elsewhere, a workspace only the log names is not taken.
    std::fs::remove_dir_all(&top).unwrap();
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("file"), "x\n").unwrap();
    let before_top = tree_state(sb.dir.path());
    let o = tinyagent(&sb, &ws, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not taken on its word"),
        "{}",
        stderr(&o)
    );
    assert_eq!(tree_state(sb.dir.path()), before_top);
}

/// Regression: a stale intent from an earlier, killed `fork --restore` was
/// carried out by a later fork made without `--restore`.
#[test]
fn a_fork_without_restore_removes_a_stale_intent_and_changes_nothing() {
    if require("git", "restore_stale_intent", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    let intent = sb.path("fork.wal.d/restore.json");
    std::fs::create_dir_all(intent.parent().unwrap()).unwrap();
    std::fs::write(
        &intent,
        json!({"tree": "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "step": 1,
               "workspace": ws.display().to_string()})
        .to_string(),
    )
    .unwrap();
    let before = tree_state(&ws);
    ok(&tinyagent(
        &sb,
        &ws,
        &[
            "fork",
            wal.to_str().unwrap(),
            "--at",
            "1",
            "-o",
            fork.to_str().unwrap(),
        ],
    ));
    assert!(!intent.exists(), "the stale intent is gone");
    assert_eq!(tree_state(&ws), before);
    // ... and the fork resumes without carrying anything out.
    let server = MockServer::start(vec![MockReply::text("ok")]);
    ok(&tinyagent(
        &sb,
        &ws,
        &[
            "resume",
            fork.to_str().unwrap(),
            "--message",
            "go",
            "--base-url",
            &server.base_url(),
        ],
    ));
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"two\n");
}

/// Regression: a restore to the last step deleted `./tinyagent.toml` and the
/// hook programs; now it changes nothing at all.
#[test]
fn a_restore_to_the_last_step_changes_nothing() {
    if require("git", "restore_last_step", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    std::fs::write(ws.join("tinyagent.toml"), "[limits]\nmax_steps = 9\n").unwrap();
    std::fs::create_dir_all(ws.join("hooks")).unwrap();
    std::fs::write(ws.join("hooks/pre.sh"), "#!/bin/sh\n").unwrap();
    let before = tree_state(&ws);
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    ok(&tinyagent(
        &sb,
        &ws,
        &[
            "fork",
            wal.to_str().unwrap(),
            "--at",
            "2",
            "-o",
            fork.to_str().unwrap(),
            "--restore",
        ],
    ));
    assert_eq!(tree_state(&ws), before);
}

/// Regression: a file over the size cap was silently not brought back, and
/// a file ignored at the step was deleted when the run later removed
/// `.gitignore`. The first is named with its recorded SHA-256; the second
/// is left.
#[test]
fn an_oversized_file_is_named_and_a_file_ignored_at_the_step_is_kept() {
    if require("git", "restore_oversized_ignored", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    std::fs::write(ws.join(".gitignore"), "*.tmp\n").unwrap();
    std::fs::write(ws.join("x.tmp"), "scratch\n").unwrap();
    let big = vec![b'z'; 200];
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"})),
        MockReply::tool_call(
            "bash",
            json!({"command": "echo two > a.txt && rm big.bin .gitignore"}),
        ),
        MockReply::text("done"),
    ]);
    let mut run = sb.run_cmd(&server.base_url(), "go");
    run.env("TINYAGENT_CHECKPOINT_MAX_FILE_BYTES", "100");
    let out = output(run);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sha = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(&big))
    };
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    let args = fork_args(
        wal.to_str().unwrap(),
        fork.to_str().unwrap(),
        &["--dry-run"],
    );
    let plan = ok(&tinyagent(&sb, &ws, &args));
    assert_eq!(
        plan.lines().collect::<Vec<_>>(),
        [
            "restore .gitignore".to_string(),
            "restore a.txt".to_string(),
            "conflict x.tmp (ignored at the restore point: not removed)".to_string(),
            format!("skipped-oversized big.bin (200 bytes, sha256 {sha})"),
        ]
    );
    ok(&tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), fork.to_str().unwrap(), &[]),
    ));
    assert_eq!(std::fs::read(ws.join("x.tmp")).unwrap(), b"scratch\n");
    assert_eq!(std::fs::read(ws.join(".gitignore")).unwrap(), b"*.tmp\n");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
}

/// A directory the run replaced by a file comes back with its files (the
/// file goes first).
#[test]
fn a_directory_the_run_replaced_by_a_file_comes_back() {
    if require("git", "restore_dir_to_file", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/x"), "x\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"})),
        MockReply::tool_call("bash", json!({"command": "rm -r sub && echo file > sub"})),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "go"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    ok(&tinyagent(
        &sb,
        &ws,
        &fork_args(wal.to_str().unwrap(), fork.to_str().unwrap(), &[]),
    ));
    assert_eq!(std::fs::read(ws.join("sub/x")).unwrap(), b"x\n");
    ok(&tinyagent(
        &sb,
        &ws,
        &["restore", "--undo", fork.to_str().unwrap()],
    ));
    assert_eq!(std::fs::read(ws.join("sub")).unwrap(), b"file\n");
}
