//! Workspace checkpoints, `log diff`, `fork` and `fork --restore` on the real
//! binary (contract section 10): a run whose steps change files through the
//! file tools and through bash, then going back to a step, with the original
//! log and store checked byte for byte.

use crate::support::checkpoints::{git_tree_of, tree_of};
use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, ok, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::{self, require};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

fn tinyagent(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.current_dir(dir).args(args).stdin(Stdio::null());
    output(c)
}

fn checkpoints(wal: &Path) -> Vec<Value> {
    contract::read(wal)
        .into_iter()
        .filter(|r| r.kind == "workspace.checkpoint")
        .map(|r| r.data)
        .collect()
}

/// The last checkpoint tree recorded up to the end of `step`.
fn tree_after_step(wal: &Path, step: u64) -> String {
    checkpoints(wal)
        .iter()
        .rev()
        .find(|c| c["step"].as_u64().unwrap() <= step)
        .expect("a checkpoint")["tree"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The starting workspace: a tracked file, ignore rules, an ignored file,
/// a `.git` directory of the workspace's own.
fn seed(ws: &Path) {
    std::fs::write(ws.join(".gitignore"), "ignored.txt\nbuild/\n").unwrap();
    std::fs::write(ws.join(".ignore"), "scratch/\n").unwrap();
    std::fs::write(ws.join("keep.txt"), "hello\n").unwrap();
    std::fs::write(ws.join("ignored.txt"), "ig0\n").unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(ws.join("scratch")).unwrap();
    std::fs::write(ws.join("scratch/notes"), "mine\n").unwrap();
}

const STEP2: &str = "mkdir -p sub/deep && printf '\\000\\001\\002\\377bin' > sub/deep/b.bin && echo ig1 > ignored.txt && rm keep.txt && ln -s a.txt link";
const STEP4: &str = "echo new > sub/c.txt && rm sub/deep/b.bin && echo ig2 > ignored.txt && mkdir -p build && echo x > build/out && echo more >> scratch/notes";

/// Runs the four steps and gives the server (its requests recorded).
fn four_steps(sb: &Sandbox) -> MockServer {
    seed(&sb.ws());
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"})),
        MockReply::tool_call("bash", json!({"command": STEP2})),
        MockReply::tool_call(
            "edit",
            json!({"path": "a.txt", "old_string": "one", "new_string": "two"}),
        ),
        MockReply::tool_calls(vec![
            ("bash", json!({"command": STEP4})),
            ("read", json!({"path": "a.txt"})),
        ]),
        MockReply::text("done"),
    ]);
    let out = output(sb.run_cmd(&server.base_url(), "change some files"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server
}

#[test]
fn fork_restore_puts_the_files_of_a_step_back_and_leaves_the_original_alone() {
    if require(
        "git",
        "fork_restore_puts_the_files_of_a_step_back_and_leaves_the_original_alone",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    let server = four_steps(&sb);
    let wal = sb.wal();
    let recs = contract::read(&wal);
    contract::check_write_order(&recs);

    // The starting state right after run.started, then one per mutating call
    // (write, bash, edit, bash), none for the read.
    let cps = checkpoints(&wal);
    assert_eq!(recs[1].kind, "workspace.checkpoint");
    assert_eq!(recs[1].data["step"], 0);
    assert!(recs[1].data["call_id"].is_null());
    assert_eq!(cps.len(), 5, "{cps:#?}");
    let steps: Vec<u64> = cps.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [0, 1, 2, 3, 4]);
    let changed = |i: usize| -> Vec<String> {
        cps[i]["changed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    // Ignored files and .git never appear.
    assert_eq!(changed(0), [".gitignore", ".ignore", "keep.txt"]);
    assert_eq!(changed(1), ["a.txt"]);
    assert_eq!(changed(2), ["keep.txt", "link", "sub/deep/b.bin"]);
    assert_eq!(changed(4), ["sub/c.txt", "sub/deep/b.bin"]);
    // The final checkpoint is the workspace as git sees it.
    assert_eq!(cps[4]["tree"].as_str().unwrap(), git_tree_of(&ws));

    let wal_before = std::fs::read(&wal).unwrap();
    let store = sb.path("run.wal.d");
    let store_before = tree_of(&store);
    let step2_tree = tree_after_step(&wal, 2);

    // fork --at 2 --restore
    let fork = sb.path("fork.wal");
    // Run where the workspace is: a log's workspace is not taken on its word.
    let o = tinyagent(
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
    );
    let printed = ok(&o);
    assert_eq!(printed.trim(), fork.display().to_string());

    // The workspace is step 2's, to the tree id.
    assert_eq!(git_tree_of(&ws), step2_tree);
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\n");
    assert_eq!(
        std::fs::read(ws.join("sub/deep/b.bin")).unwrap(),
        b"\x00\x01\x02\xffbin"
    );
    assert!(
        !ws.join("keep.txt").exists(),
        "deleted in step 2, stays deleted"
    );
    assert!(!ws.join("sub/c.txt").exists(), "created in step 4: removed");
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        Path::new("a.txt")
    );
    // Ignored files untouched (their step-4 content), the .git untouched.
    assert_eq!(std::fs::read(ws.join("ignored.txt")).unwrap(), b"ig2\n");
    assert_eq!(std::fs::read(ws.join("build/out")).unwrap(), b"x\n");
    assert_eq!(
        std::fs::read(ws.join("scratch/notes")).unwrap(),
        b"mine\nmore\n"
    );
    assert_eq!(
        std::fs::read(ws.join(".git/HEAD")).unwrap(),
        b"ref: refs/heads/main\n"
    );

    // The original log and its store are byte-identical.
    assert_eq!(std::fs::read(&wal).unwrap(), wal_before);
    assert_eq!(tree_of(&store), store_before);

    // The fork: the original's records up to step 2's step.saved, a new
    // run_id and forked_from.
    let frecs = contract::read(&fork);
    contract::check_write_order(&frecs);
    let cut = recs
        .iter()
        .position(|r| r.kind == "step.saved" && r.data["step"] == 2)
        .unwrap();
    // ... then the restore's record: what it put back and how to undo it.
    assert_eq!(frecs.len(), cut + 2);
    let restored = &frecs[cut + 1];
    assert_eq!(restored.kind, "workspace.restored");
    assert_eq!(restored.data["step"], 2);
    assert_eq!(restored.data["tree"].as_str().unwrap(), step2_tree);
    assert_eq!(
        restored.data["last"].as_str().unwrap(),
        cps[4]["tree"].as_str().unwrap()
    );
    assert_eq!(
        restored.data["paths"],
        json!(["a.txt", "sub/c.txt", "sub/deep/b.bin"])
    );
    for (a, b) in recs.iter().zip(&frecs[..=cut]).skip(1) {
        assert_eq!(a.kind, b.kind);
        assert_eq!(a.data, b.data);
        assert_eq!(a.line["ts"], b.line["ts"]);
    }
    let from = &frecs[0].data["forked_from"];
    assert_eq!(from["run_id"], recs[0].data["run_id"]);
    assert_eq!(from["step"], 2);
    assert_eq!(from["seq"], frecs[cut].seq);
    assert_ne!(frecs[0].data["run_id"], recs[0].data["run_id"]);
    // Its store is its own: the original can go and the fork still diffs.
    assert!(sb.path("fork.wal.d/checkpoints.git/objects").is_dir());

    // resume of the fork: the view after step 2, the notice, the message.
    let step3_request = server.requests()[2].clone();
    let server2 = MockServer::start(vec![MockReply::text("again")]);
    let mut resume = Command::new(bin());
    resume
        .current_dir(sb.dir.path())
        .args([
            "resume",
            fork.to_str().unwrap(),
            "--message",
            "try another way",
        ])
        .args(["--base-url", &server2.base_url()])
        .stdin(Stdio::null());
    ok(&output(resume));
    let sent = server2.requests();
    let before = step3_request["messages"].as_array().unwrap();
    let after = sent[0]["messages"].as_array().unwrap();
    assert_eq!(&after[..before.len()], &before[..], "the view after step 2");
    assert_eq!(after.len(), before.len() + 2, "{after:#?}");
    assert!(
        after[before.len()]["content"]
            .as_str()
            .unwrap()
            .starts_with("[Resumed]")
    );
    assert_eq!(after[before.len() + 1]["content"], "try another way");
    // The restored workspace matched the fork's last checkpoint: resume found
    // nothing to record.
    let fcps = checkpoints(&fork);
    assert_eq!(fcps.last().unwrap()["tree"].as_str().unwrap(), step2_tree);
    assert_eq!(std::fs::read(&wal).unwrap(), wal_before);
    assert_eq!(tree_of(&store), store_before);
}

#[test]
fn log_diff_shows_what_a_step_or_a_call_changed() {
    if require(
        "git",
        "log_diff_shows_what_a_step_or_a_call_changed",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    four_steps(&sb);
    let wal = sb.wal();
    let w = wal.to_str().unwrap();
    let step3 = ok(&tinyagent(
        sb.dir.path(),
        &["log", "diff", w, "--step", "3"],
    ));
    assert!(
        step3.contains("--- a/a.txt") && step3.contains("+++ b/a.txt"),
        "{step3}"
    );
    assert!(step3.contains("\n-one\n+two\n"), "{step3}");
    assert!(!step3.contains("b.bin"), "{step3}");

    let bash2 = checkpoints(&wal)
        .into_iter()
        .find(|c| c["step"] == 2)
        .unwrap()["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = ok(&tinyagent(
        sb.dir.path(),
        &["log", "diff", w, "--call", &bash2],
    ));
    assert!(
        call.contains("deleted file mode 100644") && call.contains("-hello"),
        "{call}"
    );
    assert!(
        call.contains("Binary files /dev/null and b/sub/deep/b.bin differ"),
        "{call}"
    );
    assert!(call.contains("new file mode 120000"), "{call}");
    assert!(!call.contains("ignored.txt"), "{call}");

    // A step with a read only (no checkpoint) and a call with none.
    let whole = ok(&tinyagent(sb.dir.path(), &["log", "diff", w]));
    assert!(
        whole.contains("sub/c.txt") && whole.contains("+two"),
        "{whole}"
    );
    let o = tinyagent(sb.dir.path(), &["log", "diff", w, "--call", "no-such-call"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no checkpoint after call no-such-call"));
    // A step the log does not have: exit 2 naming it, nothing printed
    // (it used to print nothing and exit 0).
    let o = tinyagent(sb.dir.path(), &["log", "diff", w, "--step", "99"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let err = stderr(&o);
    assert!(err.contains("no step 99 in the log"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn inspect_and_export_list_the_checkpoints() {
    if require(
        "git",
        "inspect_and_export_list_the_checkpoints",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    four_steps(&sb);
    let w = sb.wal();
    let w = w.to_str().unwrap();
    let report: Value = serde_json::from_str(&ok(&tinyagent(
        sb.dir.path(),
        &["log", "inspect", w, "--json"],
    )))
    .unwrap();
    let cps = &report["checkpoints"];
    assert_eq!(cps["count"], 5);
    let steps: Vec<u64> = cps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [0, 1, 2, 3, 4]);
    assert_eq!(cps["steps"][2]["checkpoints"][0]["changed_count"], 3);
    let human = ok(&tinyagent(sb.dir.path(), &["log", "inspect", w]));
    assert!(human.contains("checkpoints (5)"), "{human}");
    let exported: Value =
        serde_json::from_str(&ok(&tinyagent(sb.dir.path(), &["log", "export", w]))).unwrap();
    assert_eq!(exported["checkpoints"].as_array().unwrap().len(), 5);
    assert_eq!(
        exported["checkpoints"][4]["tree"],
        cps["steps"][4]["checkpoints"][0]["tree"]
    );
}

#[test]
fn a_fork_of_a_fork_resumes_and_a_rerun_fork_is_the_same_fork() {
    if require(
        "git",
        "a_fork_of_a_fork_resumes_and_a_rerun_fork_is_the_same_fork",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    four_steps(&sb);
    let wal = sb.wal();
    let f1 = sb.path("f1.wal");
    let f2 = sb.path("f2.wal");
    let fork = |from: &Path, at: &str, to: &Path| {
        tinyagent(
            &sb.ws(),
            &[
                "fork",
                from.to_str().unwrap(),
                "--at",
                at,
                "-o",
                to.to_str().unwrap(),
                "--restore",
            ],
        )
    };
    ok(&fork(&wal, "3", &f1));
    let f1_bytes = std::fs::read(&f1).unwrap();
    // Run again: the same fork, nothing rewritten.
    ok(&fork(&wal, "3", &f1));
    assert_eq!(std::fs::read(&f1).unwrap(), f1_bytes);
    // A different fork at the same place is refused.
    let o = fork(&wal, "2", &f1);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // Resume f1 one step (a write), then fork it at 1: a fork of a fork.
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "f1.txt", "content": "f1\n"})),
        MockReply::text("done"),
    ]);
    let mut resume = Command::new(bin());
    resume
        .current_dir(sb.dir.path())
        .args(["resume", f1.to_str().unwrap(), "--message", "go on"])
        .args(["--base-url", &server.base_url()])
        .stdin(Stdio::null());
    ok(&output(resume));
    assert!(sb.ws().join("f1.txt").exists());
    let f1_recs = contract::read(&f1);
    let f1_run = f1_recs[0].data["run_id"].clone();
    let f1_step = f1_recs
        .iter()
        .filter(|r| r.kind == "step.saved")
        .map(|r| r.data["step"].as_u64().unwrap())
        .max()
        .unwrap();
    ok(&fork(&f1, "1", &f2));
    let f2_recs = contract::read(&f2);
    assert_eq!(f2_recs[0].data["forked_from"]["run_id"], f1_run);
    assert!(
        !sb.ws().join("f1.txt").exists(),
        "step 1 of f1 had no f1.txt"
    );
    assert_eq!(git_tree_of(&sb.ws()), tree_after_step(&f2, 1));
    // ...and the fork's fork resumes.
    let server = MockServer::start(vec![MockReply::text("fine")]);
    let mut resume = Command::new(bin());
    resume
        .current_dir(sb.dir.path())
        .args(["resume", f2.to_str().unwrap(), "--message", "from here"])
        .args(["--base-url", &server.base_url()])
        .stdin(Stdio::null());
    ok(&output(resume));
    assert!(f1_step >= 4);
    let last = contract::read(&f2);
    assert_eq!(last.last().unwrap().kind, "run.finished");
    // Step 5 of the fork is not complete in f2.
    let o = fork(&f2, "7", &sb.path("f3.wal"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("step 7 is not complete"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_checkpoint_a_stop_left_missing_is_made_on_resume() {
    if require(
        "git",
        "a_checkpoint_a_stop_left_missing_is_made_on_resume",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    four_steps(&sb);
    let wal = sb.wal();
    // Cut the log right after the last bash call's result, as a kill in
    // the middle of that sync point's write would: the checkpoint that
    // went with it is gone.
    let bytes = std::fs::read(&wal).unwrap();
    let recs = contract::read(&wal);
    let result = recs
        .iter()
        .rposition(|r| r.kind == "tool.result" && r.data["name"] == "bash")
        .unwrap();
    let call_id = recs[result].data["call_id"].as_str().unwrap().to_string();
    assert_eq!(recs[result + 1].kind, "workspace.checkpoint");
    let end: usize = bytes
        .split_inclusive(|b| *b == b'\n')
        .take(result + 1)
        .map(<[u8]>::len)
        .sum();
    std::fs::write(&wal, &bytes[..end]).unwrap();
    let server = MockServer::start(vec![MockReply::text("done")]);
    let mut resume = sb.resume_cmd();
    resume.args(["--base-url", &server.base_url()]);
    ok(&output(resume));
    let after = contract::read(&wal);
    contract::check_write_order(&after);
    let made: Vec<&contract::Rec> = after[result + 1..]
        .iter()
        .filter(|r| r.kind == "workspace.checkpoint")
        .collect();
    assert_eq!(made.len(), 1, "one checkpoint made on resume");
    assert_eq!(made[0].data["call_id"], call_id.as_str());
    assert_eq!(
        made[0].data["tree"].as_str().unwrap(),
        git_tree_of(&sb.ws())
    );
    let resume_at = after.iter().position(|r| r.kind == "resume").unwrap();
    assert!(
        made[0].seq < after[resume_at].seq,
        "before the resume notice"
    );
}

#[test]
fn files_over_the_size_cap_are_named_with_their_hash_and_not_stored() {
    if require(
        "git",
        "files_over_the_size_cap_are_named_with_their_hash_and_not_stored",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": "head -c 5000 /dev/zero > big.bin && echo small > small.txt"}),
        ),
        MockReply::text("done"),
    ]);
    let mut run = sb.run_cmd(&server.base_url(), "make a big file");
    run.env("TINYAGENT_CHECKPOINT_MAX_FILE_BYTES", "4096");
    let out = output(run);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("big.bin (5000 bytes) is over the size cap"),
        "{}",
        stderr(&out)
    );
    let cps = checkpoints(&sb.wal());
    let last = cps.last().unwrap();
    assert_eq!(last["changed"], json!(["small.txt"]));
    let big = &last["oversized"][0];
    assert_eq!(big["path"], "big.bin");
    assert_eq!(big["size"], 5000);
    // sha256 of 5000 zero bytes
    let mut hasher = std::process::Command::new("sha256sum")
        .arg(sb.ws().join("big.bin"))
        .output()
        .unwrap();
    hasher.stdout.truncate(64);
    assert_eq!(
        big["sha256"].as_str().unwrap().as_bytes(),
        hasher.stdout.as_slice()
    );
}

/// The workspace is untrusted: its own `.git` (config with an fsmonitor
/// and a filter, hooks) and its `.gitattributes` never make the checkpoint
/// store run anything, and `GIT_*` variables of the agent's environment do
/// not redirect it.
#[test]
fn the_workspace_git_config_hooks_and_attributes_are_never_used() {
    if require("git", "checkpoints_untrusted_git", require::git()).is_none() {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    let marker = sb.path("pwned");
    let m = marker.display();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(
        ws.join(".git/config"),
        format!(
            "[core]\n\tfsmonitor = \"touch {m}.fsmonitor\"\n\thooksPath = .git/hooks\n\
             [filter \"evil\"]\n\tclean = \"touch {m}.filter; cat\"\n\tsmudge = \"touch {m}.smudge; cat\"\n"
        ),
    )
    .unwrap();
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    for hook in ["post-index-change", "pre-commit", "post-checkout"] {
        let p = ws.join(".git/hooks").join(hook);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {m}.{hook}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        ws.join(".gitattributes"),
        "* filter=evil text eol=crlf ident\n",
    )
    .unwrap();
    std::fs::write(ws.join("a.txt"), "$Id$\nline\n").unwrap();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "b.txt", "content": "b\n"})),
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "changed\n"})),
        MockReply::text("done"),
    ]);
    let mut run = sb.run_cmd(&server.base_url(), "touch files");
    run.env("GIT_DIR", ws.join(".git"))
        .env(
            "GIT_CONFIG_PARAMETERS",
            format!("'core.fsmonitor'='touch {m}.env'"),
        )
        .env("GIT_CONFIG_GLOBAL", ws.join(".git/config"));
    let out = output(run);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let cps = checkpoints(&sb.wal());
    assert_eq!(cps.len(), 3, "the start and the writes were checkpointed");
    assert_eq!(cps[1]["changed"], json!(["b.txt"]));
    assert_eq!(cps[2]["changed"], json!(["a.txt"]));
    // Fork and restore too (a write back is where filters and hooks would
    // run): the run's write of a.txt is undone.
    let fork = sb.path("fork.wal");
    let mut c = Command::new(bin());
    c.current_dir(&ws)
        .args([
            "fork",
            sb.wal().to_str().unwrap(),
            "--at",
            "1",
            "--restore",
            "-o",
        ])
        .arg(&fork)
        .env("GIT_DIR", ws.join(".git"))
        .stdin(Stdio::null());
    ok(&output(c));
    let left: Vec<_> = std::fs::read_dir(sb.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect();
    assert!(
        left.is_empty(),
        "the workspace's git ran something: {left:?}"
    );
    // Bytes stored as they are: no eol conversion, no ident expansion.
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"$Id$\nline\n");
    // The workspace's .git is not touched (no index was written there).
    assert!(!ws.join(".git/index").exists());
}

/// The bash steps of the watched run: new directories, a directory renamed
/// and then removed, a mode change, a link, an ignore rule added, ignored
/// and protected writes, a same-size rewrite, a touch.
const WATCHED: &[&str] = &[
    "mkdir -p src/a && echo one > src/a/x.txt && echo keep > keep2.txt",
    "mv src/a src/b && echo two >> src/b/x.txt && chmod +x src/b/x.txt && ln -s b/x.txt src/l",
    "echo 'same' > keep2.txt && touch keep.txt && mkdir -p n/e/w && echo deep > n/e/w/f && echo ig > ignored.txt && mkdir -p build && echo o > build/o",
    "printf '*.tmp\\n' >> .gitignore && echo t > a.tmp && rm -r src/b && echo more >> n/e/w/f",
    "rm -rf n && mv keep2.txt renamed.txt && echo x > scratch/more && printf 'ab\\n' > s.txt",
    "printf 'ba\\n' > s.txt && chmod -x keep.txt && mkdir m && mv renamed.txt m/",
];

#[test]
fn with_the_watch_on_every_checkpoint_is_the_tree_a_full_walk_gives() {
    if require(
        "git",
        "with_the_watch_on_every_checkpoint_is_the_tree_a_full_walk_gives",
        require::git(),
    )
    .is_none()
    {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    seed(&ws);
    // The same start in a copy the steps are replayed in, outside the run.
    let replica = sb.path("replica");
    std::fs::create_dir_all(&replica).unwrap();
    seed(&replica);
    let mut replies: Vec<MockReply> = WATCHED
        .iter()
        .map(|c| MockReply::tool_call("bash", json!({ "command": c })))
        .collect();
    replies.push(MockReply::text("done"));
    let server = MockServer::start(replies);
    let out = output(sb.run_cmd_cfg(
        &server.base_url(),
        "change files, watched",
        "[checkpoints]\nwatch = true\n",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let wal = sb.wal();
    // Recorded, so a resume keeps watching.
    let started = contract::read(&wal).into_iter().next().unwrap();
    assert_eq!(
        started.data["settings"]["checkpoint_watch"], true,
        "{:#?}",
        started.data
    );
    let cps = checkpoints(&wal);
    assert_eq!(cps.len(), WATCHED.len() + 1, "{cps:#?}");
    let walk = |i: usize| cps[i]["walk"].as_str().unwrap_or("").to_string();
    assert_eq!(walk(0), "full: the starting state");
    assert_eq!(walk(1), "full: the watch is set up");
    assert_eq!(walk(4), "full: an ignore file changed");
    for i in [2, 3, 5, 6] {
        assert_eq!(walk(i), "watch", "{:#?}", cps[i]);
    }
    assert_eq!(cps[0]["tree"].as_str().unwrap(), git_tree_of(&replica));
    // Each step replayed on the copy: the recorded tree is the one an
    // independent git and a fresh full walk of the checkpointer give.
    for (i, command) in WATCHED.iter().enumerate() {
        let st = Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(&replica)
            .status()
            .unwrap();
        assert!(st.success(), "{command}");
        let recorded = cps[i + 1]["tree"].as_str().unwrap();
        assert_eq!(recorded, git_tree_of(&replica), "step {}: {command}", i + 1);
        let fresh = tinyagent::checkpoint::Checkpointer::new(
            &sb.path(&format!("fresh{i}.wal")),
            &replica,
            tinyagent::exec::protected::Protected::none(),
        )
        .take(None)
        .unwrap();
        assert_eq!(recorded, fresh.tree, "step {}", i + 1);
        assert_eq!(fresh.walk, None);
    }
    // The workspace at the end too (nothing the run left unrecorded).
    assert_eq!(
        cps[WATCHED.len()]["tree"].as_str().unwrap(),
        git_tree_of(&ws)
    );
    // `log inspect` says how each checkpoint looked at the workspace.
    let w = wal.to_str().unwrap();
    let human = ok(&tinyagent(sb.dir.path(), &["log", "inspect", w]));
    assert!(human.contains("[watch]"), "{human}");
    assert!(human.contains("[full: the watch is set up]"), "{human}");
    // No warning: the watch was never lost.
    assert!(
        !stderr(&out).contains("file-system watch"),
        "{}",
        stderr(&out)
    );
}
