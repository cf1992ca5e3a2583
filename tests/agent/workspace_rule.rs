//! One workspace resolution (contract sections 17 and 20), on the real
//! binary: `resume`, `fork`, `fork --restore`, `restore --undo` and
//! `resume s3://…` all take the run's workspace by the same rule. A path a
//! log names is used only when the person vouches for it (being there,
//! `--cwd`) or this machine recorded it for the run (its own `run`, a
//! fork of it, a resume from a bucket's sidecar); never `/`, `$HOME` or an
//! ancestor of either. Every refusal is exit 2 with nothing changed on disk.

use crate::restore::two_steps;
use crate::support::e2e::{Sandbox, forge_run_started, output, stderr, tree_state};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use std::path::Path;
use std::process::{Command, Output};

/// `tinyagent ARGS` in `dir` with `home` as `$TINYAGENT_HOME` (a home
/// other than the run's stands for a machine that never ran it).
fn cmd(sb: &Sandbox, home: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = sb.command(dir, args);
    c.env("TINYAGENT_HOME", home);
    c
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

/// Runs `c`, expects a refusal naming `why`, and that nothing under the
/// sandbox changed.
fn refused(sb: &Sandbox, c: Command, why: &str) {
    let before = tree_state(sb.dir.path());
    let o = output(c);
    assert_eq!(code(&o), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(why), "wanted {why:?}: {}", stderr(&o));
    assert_eq!(
        tree_state(sb.dir.path()),
        before,
        "a refusal changed something"
    );
}

fn accepted(c: Command) -> String {
    let o = output(c);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    stderr(&o)
}

/// `resume WAL --message go --base-url URL` plus `extra`.
fn resume_args<'a>(wal: &'a str, url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["resume", wal, "--message", "go on", "--base-url", url];
    v.extend_from_slice(extra);
    v
}

#[test]
fn resume_takes_a_workspace_only_the_log_names_on_the_persons_word() {
    if require("git", "workspace_rule_resume", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    let server = MockServer::start(vec![
        MockReply::text("one"),
        MockReply::text("two"),
        MockReply::text("three"),
        MockReply::text("four"),
    ]);
    let url = server.base_url();
    let wal = sb.wal();
    let (wal, ws_s) = (wal.to_str().unwrap(), ws.to_str().unwrap());
    let elsewhere = sb.dir.path();
    // A machine that never ran it: from elsewhere the log's word is not
    // enough (and nothing, not even that home, is created).
    let stranger = sb.path("stranger-home");
    refused(
        &sb,
        cmd(&sb, &stranger, elsewhere, &resume_args(wal, &url, &[])),
        "not taken on its word",
    );
    // --cwd that is not the log's workspace is refused too.
    refused(
        &sb,
        cmd(
            &sb,
            &stranger,
            elsewhere,
            &resume_args(wal, &url, &["--cwd", elsewhere.to_str().unwrap()]),
        ),
        "is not the log's workspace",
    );
    // The person's word: --cwd from elsewhere...
    accepted(cmd(
        &sb,
        &stranger,
        elsewhere,
        &resume_args(wal, &url, &["--cwd", ws_s]),
    ));
    // ...or being there.
    let there = sb.path("there-home");
    accepted(cmd(&sb, &there, &ws, &resume_args(wal, &url, &[])));
    // Once vouched for, this machine knows the run's workspace: a resume
    // from elsewhere takes it, as it does on the machine that ran it.
    accepted(cmd(&sb, &there, elsewhere, &resume_args(wal, &url, &[])));
    accepted(cmd(
        &sb,
        &sb.home(),
        elsewhere,
        &resume_args(wal, &url, &[]),
    ));
    server.assert_no_violations();
}

#[test]
fn resume_and_fork_never_work_in_the_root_home_or_its_ancestors() {
    if require("git", "workspace_rule_wide", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    two_steps(&sb);
    let top = sb.path("top");
    let home = top.join("me");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("precious"), "keep\n").unwrap();
    let wal = sb.wal();
    let fork = sb.path("fork.wal");
    let url = "http://127.0.0.1:9";
    for place in [Path::new("/"), home.as_path(), top.as_path()] {
        forge_run_started(&wal, |r| r.settings.cwd = place.display().to_string());
        let (w, p) = (wal.to_str().unwrap(), place.to_str().unwrap());
        let f = fork.to_str().unwrap();
        let runs: [Vec<&str>; 5] = [
            resume_args(w, url, &[]),
            resume_args(w, url, &["--cwd", p]),
            vec!["fork", w, "--at", "1", "-o", f, "--restore"],
            vec!["fork", w, "--at", "1", "-o", f, "--restore", "--cwd", p],
            vec!["fork", w, "--at", "1", "-o", f, "--restore", "--dry-run"],
        ];
        for args in runs {
            // Even from there, with the run's own home.
            let mut c = cmd(&sb, &sb.home(), place, &args);
            c.env("HOME", &home);
            refused(&sb, c, "never works in /, $HOME or an ancestor");
        }
    }
}

#[test]
fn fork_and_undo_take_the_workspace_by_the_same_rule() {
    if require("git", "workspace_rule_fork_undo", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    two_steps(&sb);
    std::fs::write(ws.join("MYNOTES.txt"), "mine\n").unwrap();
    let wal = sb.wal();
    let (w, ws_s) = (wal.to_str().unwrap(), ws.to_str().unwrap());
    let elsewhere = sb.dir.path();
    let stranger = sb.path("stranger-home");
    let fork = |n: &str| sb.path(n).display().to_string();
    let (f1, f2, f3) = (fork("f1.wal"), fork("f2.wal"), fork("f3.wal"));
    // fork --restore on a machine that never ran it, from elsewhere:
    // refused, nothing written (no fork, no store, no home).
    refused(
        &sb,
        cmd(
            &sb,
            &stranger,
            elsewhere,
            &["fork", w, "--at", "1", "-o", &f1, "--restore"],
        ),
        "not taken on its word",
    );
    refused(
        &sb,
        cmd(
            &sb,
            &stranger,
            elsewhere,
            &[
                "fork",
                w,
                "--at",
                "1",
                "-o",
                &f1,
                "--restore",
                "--cwd",
                elsewhere.to_str().unwrap(),
            ],
        ),
        "is not the log's workspace",
    );
    // --cwd vouches for it.
    let before = tree_state(&ws);
    accepted(cmd(
        &sb,
        &stranger,
        elsewhere,
        &[
            "fork",
            w,
            "--at",
            "1",
            "-o",
            &f1,
            "--restore",
            "--cwd",
            ws_s,
        ],
    ));
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(ws.join("MYNOTES.txt")).unwrap(), b"mine\n");
    // Its undo on a third machine, from elsewhere: refused; --cwd: done.
    let third = sb.path("third-home");
    refused(
        &sb,
        cmd(&sb, &third, elsewhere, &["restore", "--undo", &f1]),
        "not taken on its word",
    );
    accepted(cmd(
        &sb,
        &third,
        elsewhere,
        &["restore", "--undo", &f1, "--cwd", ws_s],
    ));
    assert_eq!(tree_state(&ws), before, "the undo is byte for byte");
    // The machine that ran it knows the workspace: fork --restore from
    // elsewhere, then its undo from elsewhere (the fork was recorded too).
    accepted(cmd(
        &sb,
        &sb.home(),
        elsewhere,
        &["fork", w, "--at", "1", "-o", &f2, "--restore"],
    ));
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
    accepted(cmd(&sb, &sb.home(), elsewhere, &["restore", "--undo", &f2]));
    assert_eq!(tree_state(&ws), before);
    // Being there is the person's word too.
    accepted(cmd(
        &sb,
        &stranger,
        &ws,
        &["fork", w, "--at", "1", "-o", &f3, "--restore"],
    ));
    accepted(cmd(&sb, &stranger, &ws, &["restore", "--undo", &f3]));
    assert_eq!(tree_state(&ws), before);
    // A fork without --restore of a log this machine does not know is
    // made (it changes no file), but its resume from elsewhere asks for
    // the person's word.
    let plain = fork("plain.wal");
    let fresh = sb.path("fresh-home");
    accepted(cmd(
        &sb,
        &fresh,
        elsewhere,
        &["fork", w, "--at", "1", "-o", &plain],
    ));
    refused(
        &sb,
        cmd(
            &sb,
            &fresh,
            elsewhere,
            &resume_args(&plain, "http://127.0.0.1:9", &[]),
        ),
        "not taken on its word",
    );
}

/// A run resumed from a bucket into another directory, then restored to a
/// step (`fork --restore`, what a chat's `/rewind` does) and undone: the
/// restore acts in the directory the run was resumed into (the sidecar of
/// the resume names it, from elsewhere too), changes only what the run
/// changed there, keeps the person's files, and never touches the first
/// machine's workspace; the undo is recorded in the fork's log.
#[test]
fn a_restore_after_a_resume_from_a_bucket_acts_where_the_run_was_resumed() {
    if require("git", "workspace_rule_bucket_restore", require::git()).is_none() {
        return;
    }
    let Some(w) = crate::replication::weed("workspace_rule_bucket_restore") else {
        return;
    };
    use crate::replication::{long_call, resume_cmd, run_cmd, stop_in_long_call};
    use serde_json::json;
    let url = format!("{}/runs", w.bucket("restore-elsewhere"));
    let one = Sandbox::new();
    std::fs::write(one.ws().join("README.md"), "readme\n").unwrap();
    std::fs::write(one.ws().join("old.txt"), "old\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"})),
        MockReply::tool_calls(vec![
            ("write", json!({"path": "a.txt", "content": "two\n"})),
            (
                "bash",
                json!({"command": "mkdir -p new && echo made > new/made.txt && rm old.txt"}),
            ),
        ]),
        long_call("30"),
        MockReply::text("finished on the second machine"),
    ]);
    let id = stop_in_long_call(&one, run_cmd(&one, w, &server.base_url(), &url, ""));
    // The first machine's workspace is still there (same file system),
    // with a file the run never saw: nothing done on the second touches it.
    std::fs::write(one.ws().join("unrelated.txt"), "not the run's\n").unwrap();
    let first = tree_state(&one.ws());

    let two = Sandbox::new();
    let ws = two.ws();
    let out = output(resume_cmd(&two, w, &format!("{url}/{id}"), ""));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"two\n");
    assert!(ws.join("new/made.txt").is_file() && !ws.join("old.txt").exists());
    // The person works there now.
    std::fs::write(ws.join("MYNOTES.txt"), "mine\n").unwrap();
    std::fs::write(ws.join("README.md"), "readme, edited by me\n").unwrap();
    let before = tree_state(&ws);
    let wal = two.home().join("runs").join(format!("{id}.wal"));
    let fork = two.path("fork.wal");
    let (wal, fork) = (wal.to_str().unwrap(), fork.to_str().unwrap());
    // From elsewhere: the sidecar this machine wrote names the workspace.
    let elsewhere = two.dir.path();
    let home = two.home();
    accepted(cmd(
        &two,
        &home,
        elsewhere,
        &["fork", wal, "--at", "1", "-o", fork, "--restore"],
    ));
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
    assert_eq!(std::fs::read(ws.join("old.txt")).unwrap(), b"old\n");
    assert!(!ws.join("new").exists(), "the run's new directory is gone");
    assert_eq!(std::fs::read(ws.join("MYNOTES.txt")).unwrap(), b"mine\n");
    assert_eq!(
        std::fs::read(ws.join("README.md")).unwrap(),
        b"readme, edited by me\n"
    );
    assert_eq!(tree_state(&one.ws()), first, "the first machine's path");
    accepted(cmd(&two, &home, elsewhere, &["restore", "--undo", fork]));
    assert_eq!(tree_state(&ws), before, "the undo is byte for byte");
    assert_eq!(tree_state(&one.ws()), first, "the first machine's path");
    let recs = crate::support::contract::read(Path::new(fork));
    let last = recs.last().unwrap();
    assert_eq!(last.kind, "workspace.restored");
    assert_eq!(last.data["undo"], true);
    server.assert_no_violations();
}

/// A new run may start in `$HOME` (the person is there), but it could not
/// be resumed there: it says so before anything runs, and still runs.
#[test]
fn a_run_started_in_home_is_told_it_cannot_be_resumed_there() {
    let sb = Sandbox::new();
    let server = MockServer::start(vec![MockReply::text("done"), MockReply::text("done")]);
    // The workspace is the home directory itself.
    let mut c = sb.run_cmd(&server.base_url(), "hello");
    c.env("HOME", sb.ws());
    let err = accepted(c);
    let warning = err
        .lines()
        .find(|l| l.starts_with("warning: this run works in"))
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(warning.contains("cannot be resumed"), "{warning}");
    // A project directory under the home gets no such warning.
    std::fs::remove_file(sb.wal()).unwrap();
    let mut c = sb.run_cmd(&server.base_url(), "hello");
    c.env("HOME", sb.dir.path());
    let err = accepted(c);
    assert!(!err.contains("warning: this run works in"), "{err}");
}
