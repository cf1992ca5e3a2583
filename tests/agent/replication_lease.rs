//! One live writer (contract section 18), against a real SeaweedFS: a
//! second resume of a live run is refused and the run finishes; a resume
//! with `--take-over` fences the live writer; a killed writer's lease runs
//! out and a plain resume takes over; `sessions s3://…` tells live runs
//! from lapsed ones.

use super::replication::{
    bucket_log, client, long_call, printed, resume_cmd, run_cmd, run_id, start_until_long,
    wait_lapsed, weed,
};
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::s3::Weed;
use serde_json::Value;
use std::process::Command;

/// The run `id`'s manifest (writer, epoch).
fn holder(w: &Weed, url: &str, id: &str) -> (String, u64) {
    let (m, _) = tinyagent::replicate::fetch::manifest(&client(w, url), id)
        .unwrap_or_else(|e| panic!("manifest: {e}"));
    (m.writer, m.epoch)
}

/// `sessions s3://…` as JSON rows.
fn sessions(w: &Weed, url: &str) -> Value {
    let mut c = Command::new(bin());
    c.arg("sessions").arg(url).arg("--json");
    w.env(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Nothing of a run under the home of `sb`.
fn nothing_written(sb: &Sandbox) {
    let runs = sb.home().join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a refused resume left {left:?}");
    assert_eq!(std::fs::read_dir(sb.ws()).unwrap().count(), 0);
}

#[test]
fn a_second_resume_while_the_writer_lives_is_refused_and_the_live_run_finishes() {
    let Some(w) =
        weed("a_second_resume_while_the_writer_lives_is_refused_and_the_live_run_finishes")
    else {
        return;
    };
    let url = format!("{}/runs", w.bucket("live-lease"));
    let server = MockServer::start(vec![long_call("4"), MockReply::text("done")]);
    let one = Sandbox::new();
    // A lease far longer than the test: only a live writer renews it.
    let (child, _) = start_until_long(
        &one,
        run_cmd(
            &one,
            w,
            &server.base_url(),
            &url,
            "[replicate]\nlease_s = 60\n",
        ),
    );
    let id = run_id(&one.wal());
    let before = holder(w, &url, &id);
    let rows = sessions(w, &url);
    assert_eq!(rows[0]["lease"], "live", "{rows}");
    assert!(
        rows[0]["holder"]
            .as_str()
            .unwrap()
            .ends_with(&format!("pid {}", child.id())),
        "{rows}"
    );
    let two = Sandbox::new();
    let out = output(resume_cmd(&two, w, &format!("{url}/{id}"), ""));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("pid {}", child.id())), "{err}");
    assert!(err.contains("lease runs out at"), "{err}");
    assert!(err.contains("--take-over"), "{err}");
    assert_eq!(
        holder(w, &url, &id),
        before,
        "the refused resume took nothing over"
    );
    nothing_written(&two);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0));
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(one.wal()).unwrap());
    let rows = sessions(w, &url);
    assert_eq!(rows[0]["lease"], "released", "{rows}");
    assert_eq!(rows[0]["status"], "completed", "{rows}");
}

#[test]
fn take_over_fences_the_live_writer_which_acknowledges_nothing_more() {
    let Some(w) = weed("take_over_fences_the_live_writer_which_acknowledges_nothing_more") else {
        return;
    };
    let url = format!("{}/runs", w.bucket("take-over"));
    let server = MockServer::start(vec![
        long_call("3"),
        MockReply::text("finished by the one that took over"),
    ]);
    let one = Sandbox::new();
    let (mut child, out_path) = start_until_long(
        &one,
        run_cmd(
            &one,
            w,
            &server.base_url(),
            &url,
            "[replicate]\nlease_s = 60\n",
        ),
    );
    let id = run_id(&one.wal());
    let seq = super::replication::started_seq(&one.wal(), "long").unwrap();
    super::replication::wait_until("the call's start to be printed", 30, || {
        printed(&std::fs::read(&out_path).unwrap())
            .iter()
            .any(|(s, _)| *s == seq)
    });
    let shown_before = printed(&std::fs::read(&out_path).unwrap());
    let two = Sandbox::new();
    let mut c = resume_cmd(&two, w, &format!("{url}/{id}"), "");
    c.arg("--take-over");
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("taking run"), "{}", stderr(&out));
    // The live writer's call ends; what it would record is refused.
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let err = std::fs::read_to_string(one.path("stderr.txt")).unwrap();
    assert!(err.contains("held by writer"), "{err}");
    // Fenced, not failed: there is nothing here to resume.
    assert!(!err.contains("resume with"), "{err}");
    let records = |v: Vec<(u64, String)>| -> Vec<(u64, String)> {
        v.into_iter()
            .filter(|(_, k)| k != "snapshot.saved")
            .collect()
    };
    assert_eq!(
        records(printed(&std::fs::read(&out_path).unwrap())),
        records(shown_before),
        "nothing was acknowledged after the take-over"
    );
    assert_eq!(
        server.request_count(),
        2,
        "no request from the fenced writer"
    );
    let wal2 = two.home().join("runs").join(format!("{id}.wal"));
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(&wal2).unwrap());
}

#[test]
fn after_kill_9_the_lease_runs_out_and_a_plain_resume_takes_over() {
    let Some(w) = weed("after_kill_9_the_lease_runs_out_and_a_plain_resume_takes_over") else {
        return;
    };
    let url = format!("{}/runs", w.bucket("lease-lapses"));
    let server = MockServer::start(vec![long_call("30"), MockReply::text("done")]);
    let one = Sandbox::new();
    // A lease long enough that the first resume below comes well within it.
    let (mut child, _) = start_until_long(
        &one,
        run_cmd(
            &one,
            w,
            &server.base_url(),
            &url,
            "[replicate]\nlease_s = 6\n",
        ),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let id = run_id(&one.wal());
    let before = holder(w, &url, &id);
    let two = Sandbox::new();
    let run_url = format!("{url}/{id}");
    // Killed a moment ago: its lease is live still (a dead writer cannot be
    // told from a slow one yet).
    let early = output(resume_cmd(&two, w, &run_url, ""));
    assert_eq!(early.status.code(), Some(2), "{}", stderr(&early));
    assert!(stderr(&early).contains("is live"), "{}", stderr(&early));
    assert_eq!(holder(w, &url, &id), before);
    nothing_written(&two);
    let rows = sessions(w, &url);
    assert_eq!(rows[0]["lease"], "live", "{rows}");
    wait_lapsed(w, &url, &id);
    let rows = sessions(w, &url);
    assert_eq!(rows[0]["lease"], "lapsed", "{rows}");
    let out = output(resume_cmd(&two, w, &run_url, ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(holder(w, &url, &id).1, before.1 + 1);
    let wal2 = two.home().join("runs").join(format!("{id}.wal"));
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(&wal2).unwrap());
}
