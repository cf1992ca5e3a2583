//! Runs that outlive the machine (contract section 11), against a real
//! S3-compatible server (SeaweedFS, tests/support/s3.rs): a machine lost
//! in the middle of a call and its run resumed from the bucket elsewhere,
//! fencing between writers, the bucket going away in sync and async mode,
//! `sessions s3://…`, and a forged bucket refused.

use crate::support::checkpoints::tree_of;
use crate::support::contract;
use crate::support::e2e::{Sandbox, bin, output, stderr};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::require;
use crate::support::s3::{self, Weed};
pub(crate) use crate::support::wait_for as wait_until;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn weed(test: &str) -> Option<&'static Weed> {
    require("s3", test, s3::shared())
}

/// The call the tests stop a run in: `bash` sleeping `secs`, id `long`.
pub(crate) fn long_call(secs: &str) -> MockReply {
    MockReply::tool_call("bash", json!({"command": format!("sleep {secs}")})).with_ids(&["long"])
}

/// The seq of the `tool.started` of `call_id` in the log at `wal`.
pub(crate) fn started_seq(wal: &Path, call_id: &str) -> Option<u64> {
    let mut found = None;
    let _ = tinyagent_store::wal::reader::scan::<tinyagent::event::Event>(wal, None, |f, _| {
        if let tinyagent::event::Event::ToolStarted(t) = &f.event
            && t.call_id == call_id
        {
            found = Some(f.seq);
        }
    });
    found
}

/// The lease the tests' writers hold (`replicate.lease_s`), unless a test
/// sets its own: short, so that a killed writer's runs out soon.
pub(crate) const LEASE_S: u64 = 2;

/// `toml` with `replicate.lease_s` set to [`LEASE_S`] unless it sets it.
pub(crate) fn with_lease(toml: &str) -> String {
    if toml.contains("lease_s") {
        toml.to_string()
    } else if toml.contains("[replicate]\n") {
        toml.replacen(
            "[replicate]\n",
            &format!("[replicate]\nlease_s = {LEASE_S}\n"),
            1,
        )
    } else {
        format!("{toml}[replicate]\nlease_s = {LEASE_S}\n")
    }
}

/// Waits until the lease of run `id` in `url` is no longer live (its
/// writer was killed or stopped).
pub(crate) fn wait_lapsed(w: &Weed, url: &str, id: &str) {
    let c = client(w, url);
    wait_until("the writer's lease to run out", 60, || {
        let (l, _) = tinyagent::replicate::lease::read(&c, id)
            .unwrap()
            .expect("a lease is stored");
        !matches!(
            l.held(std::time::SystemTime::now()),
            tinyagent::replicate::lease::Held::Live(_)
        )
    });
}

/// `tinyagent run` replicating to `url` (sync unless the toml says), with
/// a lease of [`LEASE_S`] unless the toml says.
pub(crate) fn run_cmd(sb: &Sandbox, w: &Weed, base_url: &str, url: &str, toml: &str) -> Command {
    let mut c = sb.run_cmd_cfg(base_url, "outlive the machine", &with_lease(toml));
    c.arg("--replicate").arg(url).arg("--json");
    w.env(&mut c);
    c
}

/// `tinyagent resume s3://…` on a "new machine": `sb`'s home and workspace.
pub(crate) fn resume_cmd(sb: &Sandbox, w: &Weed, run_url: &str, toml: &str) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(sb.dir.path())
        .arg("resume")
        .arg(run_url)
        .arg("--cwd")
        .arg(sb.ws())
        .arg("--config")
        .arg(sb.fast_config(&with_lease(toml)))
        .arg("--json")
        .env_remove("OPENAI_API_KEY")
        .env("TINYAGENT_HOME", sb.home())
        .env("XDG_CONFIG_HOME", sb.config_home())
        .stdin(Stdio::null());
    w.env(&mut c);
    c
}

pub(crate) fn run_id(wal: &Path) -> String {
    contract::read(wal)[0].data["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A client of the bucket of `url` on `w`, as tinyagent makes it.
pub(crate) fn client(w: &Weed, url: &str) -> tinyagent::replicate::bucket::Bucket {
    let parsed = tinyagent::replicate::bucket::Url::parse(url).unwrap();
    let creds = tinyagent::replicate::bucket::Credentials {
        key_id: Some(s3::ACCESS_KEY.into()),
        secret: Some(s3::SECRET_KEY.into()),
        token: None,
    };
    tinyagent::replicate::bucket::Bucket::connect_to(
        &parsed,
        &creds,
        Duration::from_secs(20),
        Some(w.endpoint()),
    )
    .expect("bucket client")
}

/// The log a bucket holds for `run_id` (fetched and checked by the
/// library's own reader of the bucket).
pub(crate) fn bucket_log(w: &Weed, url: &str, run_id: &str) -> Vec<u8> {
    let scratch = tempfile::tempdir().unwrap();
    tinyagent::replicate::fetch::fetch(&client(w, url), run_id, scratch.path())
        .unwrap_or_else(|e| panic!("fetch: {e}"))
        .log
}

/// The seqs of the events a `--json` run printed (each printed event is
/// acknowledged).
pub(crate) fn printed(stdout: &[u8]) -> Vec<(u64, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            Some((
                v["seq"].as_u64()?,
                v["event"].as_str().unwrap_or("").to_string(),
            ))
        })
        .collect()
}

/// Copies a file keeping its modification time.
fn copy_keeping_time(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
    let t = std::fs::metadata(from).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(to)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

pub(crate) fn wal_d(wal: &Path) -> PathBuf {
    let mut s = wal.as_os_str().to_owned();
    s.push(".d");
    PathBuf::from(s)
}

/// Starts `cmd` (a run in `one`) with its stdout in `one`'s `stdout.jsonl`
/// and its stderr in `stderr.txt`, and waits until its call `long` has
/// started; gives the process and the stdout file.
pub(crate) fn start_until_long(one: &Sandbox, mut cmd: Command) -> (std::process::Child, PathBuf) {
    let out_path = one.path("stdout.jsonl");
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(one.path("stderr.txt")).unwrap())
        .spawn()
        .unwrap();
    wait_until("the long call to start", 60, || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the run ended ({status}) before its long call started: {}",
                std::fs::read_to_string(one.path("stderr.txt")).unwrap_or_default()
            );
        }
        started_seq(&one.wal(), "long").is_some()
    });
    (child, out_path)
}

#[test]
fn lose_the_machine_and_resume_from_the_bucket_elsewhere() {
    let Some(w) = weed("lose_the_machine_and_resume_from_the_bucket_elsewhere") else {
        return;
    };
    let url = format!("{}/runs", w.bucket("lose-the-machine"));
    let one = Sandbox::new();
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "one\n"}))
            .with_usage(100, 10),
        MockReply::tool_call("write", json!({"path": "sub/b.txt", "content": "two\n"}))
            .with_usage(100, 10),
        long_call("4.25").with_usage(200, 20),
        MockReply::text("finished elsewhere").with_usage(300, 30),
        MockReply::text("finished here").with_usage(300, 30),
    ]);
    let (mut child, out_path) =
        start_until_long(&one, run_cmd(&one, w, &server.base_url(), &url, ""));
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL, in the middle of the call
    child.wait().unwrap();
    let acked_seq = started_seq(&one.wal(), "long").unwrap();
    let before = contract::read(&one.wal());
    let id = run_id(&one.wal());
    wait_lapsed(w, &url, &id);
    let shown = printed(&std::fs::read(&out_path).unwrap());
    assert!(shown.iter().any(|(s, _)| *s == acked_seq), "{shown:?}");
    // Keep a copy of the machine as it was, for the local resume to compare.
    let side = Sandbox::new();
    copy_keeping_time(&one.wal(), &side.path("run.wal"));
    copy_tree(&wal_d(&one.wal()), &side.path("run.wal.d"));
    copy_tree(&one.ws(), &side.path("ws-copy"));
    // The machine is lost: log, <wal>.d, home and workspace.
    std::fs::remove_file(one.wal()).unwrap();
    std::fs::remove_dir_all(wal_d(&one.wal())).unwrap();
    let _ = std::fs::remove_dir_all(one.home());
    std::fs::remove_dir_all(one.ws()).unwrap();

    // A new machine: fresh home, empty workspace.
    let two = Sandbox::new();
    let out = output(resume_cmd(&two, w, &format!("{url}/{id}"), ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let new_wal = two.home().join("runs").join(format!("{id}.wal"));
    let after = contract::read(&new_wal);
    contract::check_write_order(&after);
    // Every record acknowledged before the kill is there, byte for byte.
    for r in before.iter().filter(|r| r.seq <= acked_seq) {
        assert_eq!(after[(r.seq - 1) as usize].line, r.line, "seq {}", r.seq);
    }
    // And so is every record whose event was printed (the `--json` names
    // are the display's, e.g. tool.finished for a tool.result record).
    for (seq, kind) in &shown {
        let i = (*seq - 1) as usize;
        assert_eq!(after[i].line, before[i].line, "printed {kind} (seq {seq})");
    }
    assert_eq!(after.last().unwrap().kind, "run.finished");
    assert_eq!(
        std::fs::read_to_string(two.ws().join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(two.ws().join("sub/b.txt")).unwrap(),
        "two\n"
    );
    // The bucket holds the new machine's log, whole.
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(&new_wal).unwrap());

    // The same kill resumed locally on the first machine (from the copy):
    // its first request equals the one the new machine sent.
    std::fs::rename(side.path("run.wal"), one.wal()).unwrap();
    std::fs::rename(side.path("run.wal.d"), wal_d(&one.wal())).unwrap();
    // Without replication: this copy is only there to compare with.
    std::fs::remove_file(wal_d(&one.wal()).join("replicate.json")).unwrap();
    std::fs::rename(side.path("ws-copy"), one.ws()).unwrap();
    // Its home went with the machine: the person says where it works.
    let mut local = one.resume_cmd();
    local.arg("--cwd").arg(one.ws());
    let local = output(local);
    assert_eq!(local.status.code(), Some(0), "{}", stderr(&local));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5, "three before the kill, one per resume");
    assert_eq!(
        reqs[3], reqs[4],
        "the first request after a resume from the bucket is the one a local resume sends"
    );
    server.assert_no_violations();
}

/// A run stopped in the middle of a long call, stored in the bucket.
fn stopped_run(w: &Weed, url: &str, server: &MockServer) -> (Sandbox, String) {
    let one = Sandbox::new();
    let id = stop_in_long_call(&one, run_cmd(&one, w, &server.base_url(), url, ""));
    (one, id)
}

/// Runs `cmd` (a run in `sb`), kills it once its call `long` has started,
/// and gives its run id once the killed writer's lease has run out.
pub(crate) fn stop_in_long_call(sb: &Sandbox, mut cmd: Command) -> String {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the long call to start", 60, || {
        started_seq(&sb.wal(), "long").is_some()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    // The lease the writer renewed last runs out at most LEASE_S after it.
    std::thread::sleep(Duration::from_millis(LEASE_S * 1000 + 300));
    run_id(&sb.wal())
}

#[test]
fn two_resumers_at_once_one_wins_the_other_is_told_who_holds_the_run() {
    let Some(w) = weed("two_resumers_at_once_one_wins_the_other_is_told_who_holds_the_run") else {
        return;
    };
    let url = format!("{}/runs", w.bucket("two-resumers"));
    let server = MockServer::start(vec![
        long_call("4.5"),
        // The resumed runs: slow answers, so the two overlap.
        MockReply::tool_call("bash", json!({"command": "sleep 1"}))
            .with_ids(&["r1"])
            .delayed(Duration::from_millis(1500)),
        MockReply::tool_call("bash", json!({"command": "sleep 1"}))
            .with_ids(&["r2"])
            .delayed(Duration::from_millis(1500)),
        MockReply::text("done"),
        MockReply::text("done"),
    ]);
    let (_one, id) = stopped_run(w, &url, &server);
    let (a, b) = (Sandbox::new(), Sandbox::new());
    let run_url = format!("{url}/{id}");
    let ca = resume_cmd(&a, w, &run_url, "")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cb = resume_cmd(&b, w, &run_url, "")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let oa = ca.wait_with_output().unwrap();
    let ob = cb.wait_with_output().unwrap();
    let codes = (oa.status.code(), ob.status.code());
    let (winner, loser, wsb) = match codes {
        (Some(0), Some(1)) => (&oa, &ob, &a),
        (Some(1), Some(0)) => (&ob, &oa, &b),
        other => panic!(
            "expected one winner and one loser, got {other:?}:\nA: {}\nB: {}",
            stderr(&oa),
            stderr(&ob)
        ),
    };
    assert!(
        stderr(loser).contains("held by writer"),
        "the loser says who holds the run: {}",
        stderr(loser)
    );
    let _ = winner;
    // The bucket holds exactly the winner's log: nothing the loser wrote
    // after it lost is in it.
    let wal = wsb.home().join("runs").join(format!("{id}.wal"));
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(&wal).unwrap());
    assert_eq!(contract::read(&wal).last().unwrap().kind, "run.finished");
}

#[test]
fn a_writer_paused_past_its_lease_is_taken_over_and_stops_on_sigcont_without_acknowledging() {
    let Some(w) = weed(
        "a_writer_paused_past_its_lease_is_taken_over_and_stops_on_sigcont_without_acknowledging",
    ) else {
        return;
    };
    let url = format!("{}/runs", w.bucket("paused-writer"));
    let server = MockServer::start(vec![
        long_call("2"),
        MockReply::text("finished on the other machine"),
    ]);
    let one = Sandbox::new();
    let (mut child, out_path) =
        start_until_long(&one, run_cmd(&one, w, &server.base_url(), &url, ""));
    let seq = started_seq(&one.wal(), "long").unwrap();
    wait_until("the call's start to be printed", 30, || {
        printed(&std::fs::read(&out_path).unwrap())
            .iter()
            .any(|(s, _)| *s == seq)
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let id = run_id(&one.wal());
    let shown_before = std::fs::read(&out_path).unwrap();
    let local_before = std::fs::read(one.wal()).unwrap();
    // Paused past its lease: a plain resume takes the run over.
    wait_lapsed(w, &url, &id);
    // Taken over elsewhere, and finished there.
    let two = Sandbox::new();
    let out = output(resume_cmd(&two, w, &format!("{url}/{id}"), ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The paused writer goes on: its call ends, and the result it would
    // record is refused by the bucket.
    std::thread::sleep(Duration::from_millis(2200));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let err = std::fs::read_to_string(one.path("stderr.txt")).unwrap();
    assert!(err.contains("held by writer"), "{err}");
    // No event of a record was printed after SIGCONT (a notice that the
    // closing snapshot of what was there is saved is no acknowledgement).
    let records = |b: &[u8]| -> Vec<(u64, String)> {
        printed(b)
            .into_iter()
            .filter(|(_, k)| k != "snapshot.saved")
            .collect()
    };
    assert_eq!(
        records(&std::fs::read(&out_path).unwrap()),
        records(&shown_before),
        "nothing was acknowledged after SIGCONT"
    );
    // The refused sync point reached its own disk only: not the model,
    // not the bucket, and the log stays a valid log.
    assert_eq!(server.request_count(), 2, "no request after SIGCONT");
    let local_after = contract::read(&one.wal());
    assert!(local_after.len() > contract::read_bytes(&local_before).len());
    let wal2 = two.home().join("runs").join(format!("{id}.wal"));
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(&wal2).unwrap());
}

#[test]
fn sync_mode_stops_when_the_bucket_goes_away_with_nothing_unreplicated_acknowledged() {
    let Some(own) = require(
        "s3",
        "sync_mode_stops_when_the_bucket_goes_away_with_nothing_unreplicated_acknowledged",
        Weed::start(),
    ) else {
        return;
    };
    let url = format!("{}/runs", own.bucket("sync-fault"));
    let server = MockServer::start(vec![
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "1"})),
        long_call("1.5"),
        MockReply::text("never reached"),
    ]);
    let one = Sandbox::new();
    let (mut child, out_path) = start_until_long(
        &one,
        run_cmd(
            &one,
            &own,
            &server.base_url(),
            &url,
            // Long enough for a fresh server's first writes (it makes its
            // volumes then) on a loaded machine.
            "[replicate]\ntimeout_s = 10\n",
        ),
    );
    own.stop();
    let stopped = Instant::now();
    let status = child.wait().unwrap();
    let took = stopped.elapsed();
    assert_eq!(status.code(), Some(1));
    // The call ends 1.5 s in, then 10 s of retries; a generous bound.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let err = std::fs::read_to_string(one.path("stderr.txt")).unwrap();
    assert!(err.contains("gave up after"), "{err}");
    own.restart().unwrap();
    let id = run_id(&one.wal());
    let stored = contract::read_bytes(&bucket_log(&own, &url, &id));
    let last_stored = stored.last().unwrap().seq;
    let shown = printed(&std::fs::read(&out_path).unwrap());
    assert!(!shown.is_empty());
    for (seq, kind) in &shown {
        assert!(
            *seq <= last_stored,
            "{kind} (seq {seq}) was printed but is not in the bucket (last {last_stored})"
        );
    }
    assert_eq!(
        server.request_count(),
        2,
        "no request after the bucket went away"
    );
    no_aws_setting_in(&own, &url, &one);
}

/// Neither the endpoint nor the region is in any file of `sb` (its log,
/// `<wal>.d`, home) or in any object under `url`: the errors of a bucket
/// that went away name neither.
pub(crate) fn no_aws_setting_in(w: &Weed, url: &str, sb: &Sandbox) {
    let endpoint = w.endpoint();
    let host_port = endpoint.trim_start_matches("http://").to_string();
    let needles = [host_port.as_str(), "us-east-1"];
    for f in crate::support::e2e::all_files(sb.dir.path()) {
        if f.starts_with(sb.ws()) || f.ends_with("stderr.txt") || f.ends_with("tinyagent.toml") {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap_or_default()).to_string();
        for n in needles {
            assert!(!text.contains(n), "{n} in {}", f.display());
        }
    }
    let c = client(w, url);
    let (bucket, prefix) = url.trim_start_matches("s3://").split_once('/').unwrap();
    for (key, _) in w.objects(&format!("s3://{bucket}"), prefix) {
        let (bytes, _) = c.get(&key).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for n in needles {
            assert!(!text.contains(n), "{n} in {key}");
        }
    }
}

#[test]
fn async_mode_finishes_while_the_bucket_is_away_and_catches_up() {
    let Some(own) = require(
        "s3",
        "async_mode_finishes_while_the_bucket_is_away_and_catches_up",
        Weed::start(),
    ) else {
        return;
    };
    let url = format!("{}/runs", own.bucket("async-fault"));
    let server = MockServer::start(vec![
        long_call("0.5"),
        MockReply::tool_call("write", json!({"path": "a.txt", "content": "1"})),
        MockReply::tool_call("write", json!({"path": "b.txt", "content": "2"})),
        MockReply::text("finished"),
    ]);
    let one = Sandbox::new();
    let (mut child, out_path) = start_until_long(
        &one,
        run_cmd(
            &one,
            &own,
            &server.base_url(),
            &url,
            "[replicate]\nmode = \"async\"\nmax_lag_ms = 200\ntimeout_s = 120\n",
        ),
    );
    own.stop();
    // The run goes on and records its end while the bucket is away.
    wait_until("the run to finish", 90, || {
        printed(&std::fs::read(&out_path).unwrap())
            .iter()
            .any(|(_, k)| k == "run.finished")
    });
    assert!(child.try_wait().unwrap().is_none(), "it waits to catch up");
    own.restart().unwrap();
    let status = child.wait().unwrap();
    let err = std::fs::read_to_string(one.path("stderr.txt")).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("catches up when the bucket is back"), "{err}");
    assert!(err.contains("caught up"), "{err}");
    let id = run_id(&one.wal());
    assert_eq!(
        bucket_log(&own, &url, &id),
        std::fs::read(one.wal()).unwrap()
    );
    no_aws_setting_in(&own, &url, &one);
}

#[test]
fn sessions_lists_the_runs_in_a_bucket_and_a_forged_segment_is_refused() {
    let Some(w) = weed("sessions_lists_the_runs_in_a_bucket_and_a_forged_segment_is_refused")
    else {
        return;
    };
    let url = format!("{}/team", w.bucket("sessions"));
    let server = MockServer::start(vec![
        MockReply::tool_call(
            "bash",
            json!({"command": "env; echo AWS=$AWS_SECRET_ACCESS_KEY"}),
        ),
        MockReply::text("done"),
    ]);
    let one = Sandbox::new();
    // A region no other text holds, to look for.
    let region = "tinyagent-test-region-7";
    let mut c = run_cmd(&one, w, &server.base_url(), &url, "");
    c.env("AWS_REGION", region);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = run_id(&one.wal());
    // No AWS setting (keys, endpoint, region) reached a tool, a file or an
    // object.
    let endpoint = w.endpoint();
    let port = endpoint.rsplit(':').next().unwrap();
    let settings = [
        s3::SECRET_KEY,
        s3::ACCESS_KEY,
        endpoint.as_str(),
        &format!("127.0.0.1:{port}"),
        region,
    ];
    let log = std::fs::read_to_string(one.wal()).unwrap();
    assert!(
        log.contains("AWS=\\n") || log.contains("AWS="),
        "the tool ran"
    );
    for f in crate::support::e2e::all_files(one.dir.path()) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        for v in settings {
            assert!(!text.contains(v), "{v} in {}", f.display());
        }
    }
    let c = client(w, &url);
    for (key, _) in w.objects(&url.replace("/team", ""), "team") {
        let (bytes, _) = c.get(&key).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for v in settings {
            assert!(!text.contains(v), "{v} in {key}");
        }
    }
    let mut c = Command::new(bin());
    c.arg("sessions").arg(&url).arg("--json");
    w.env(&mut c);
    let listed = output(c);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let rows: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(rows[0]["run_id"], id.as_str());
    assert_eq!(rows[0]["status"], "completed");
    assert_eq!(rows[0]["steps"], 2);
    // The run's log segment is replaced by one whose bytes differ: a resume
    // from the bucket refuses it (exit 2) and writes nothing.
    let name = url.trim_start_matches("s3://").split('/').next().unwrap();
    let objects = w.objects(&format!("s3://{name}"), &format!("team/{id}/log"));
    assert!(!objects.is_empty());
    let bucket = client(w, &url);
    let (key, _) = &objects[0];
    let (mut bytes, _) = bucket.get(key).unwrap();
    bytes[10] ^= 1;
    bucket
        .put(key, bytes, object_store::PutMode::Overwrite)
        .unwrap();
    let two = Sandbox::new();
    let refused = output(resume_cmd(&two, w, &format!("{url}/{id}"), ""));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("does not match the manifest"),
        "{}",
        stderr(&refused)
    );
    let runs = two.home().join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing written: {left:?}");
    assert!(std::fs::read_dir(two.ws()).unwrap().next().is_none());
}

#[test]
fn a_local_resume_goes_on_replicating_and_a_machine_left_behind_is_refused() {
    let Some(w) = weed("a_local_resume_goes_on_replicating_and_a_machine_left_behind_is_refused")
    else {
        return;
    };
    let url = format!("{}/runs", w.bucket("local-resume"));
    let server = MockServer::start(vec![
        long_call("3.5"),
        MockReply::text("done here"),
        MockReply::text("more, elsewhere"),
    ]);
    let (one, id) = stopped_run(w, &url, &server);
    // A plain local resume takes the run over and ships what it adds.
    let mut c = one.resume_cmd();
    w.env(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("taken over at epoch 2"),
        "{}",
        stderr(&out)
    );
    assert_eq!(bucket_log(w, &url, &id), std::fs::read(one.wal()).unwrap());
    // The run goes on on another machine...
    let two = Sandbox::new();
    let mut c = resume_cmd(&two, w, &format!("{url}/{id}"), "");
    c.args(["--message", "one more thing"]);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // ...so the first machine's log is behind the bucket: refused, unchanged.
    let before = std::fs::read(one.wal()).unwrap();
    let mut c = one.resume_cmd();
    c.args(["--message", "stale"]);
    w.env(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("went on elsewhere"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(one.wal()).unwrap(), before);
    assert_eq!(server.request_count(), 3);
}

#[test]
fn small_segments_are_merged_as_the_run_goes() {
    let Some(w) = weed("small_segments_are_merged_as_the_run_goes") else {
        return;
    };
    use tinyagent::replicate::{FAN_IN, Manifest, Mode, Replicator, Settings};
    let bucket_url = w.bucket("merge");
    let url = format!("{bucket_url}/m");
    let dir = tempfile::tempdir().unwrap();
    // The synthetic run's own run.started (run id "bench") first.
    let started = tinyagent::bench::run::SyntheticRun::new(2, 10).events[0].clone();
    let wal = dir.path().join("bench.wal");
    let settings = Settings {
        url: tinyagent::replicate::bucket::Url::parse(&url).unwrap(),
        mode: Mode::Sync,
        max_lag: Duration::from_secs(1),
        timeout: Duration::from_secs(20),
        lease: Duration::from_secs(30),
    };
    let rep = Replicator::create_in(
        client(w, &url),
        settings,
        &wal,
        Manifest::new("bench", "test", None, "merge"),
    )
    .unwrap();
    let opts = tinyagent::store::StoreOptions {
        snapshot_every: 0,
        on_sync: Some(rep.hook()),
        ..tinyagent::store::StoreOptions::default()
    };
    let mut s = tinyagent::store::Store::create(&wal, opts).unwrap();
    s.append(started).unwrap();
    let n = 600u64;
    for step in 1..=n {
        s.append(tinyagent::event::Event::StepSaved(
            tinyagent::event::StepSaved {
                step,
                usage_total: tinyagent::event::Usage::default(),
                cost_usd_total: 0.0,
            },
        ))
        .unwrap();
    }
    drop(s);
    drop(rep);
    let segments: Vec<_> = w.objects(&bucket_url, "m/bench/log").into_iter().collect();
    // 601 sync points = 2*256 + 5*16 + 9: two level-2 segments, five
    // level-1, nine level-0; every merged part deleted.
    assert_eq!(FAN_IN, 16);
    assert_eq!(segments.len(), 2 + 5 + 9, "{segments:?}");
    assert_eq!(bucket_log(w, &url, "bench"), std::fs::read(&wal).unwrap());
}

#[test]
fn replication_settings_beside_a_log_that_this_machine_did_not_write_are_refused() {
    let Some(w) =
        weed("replication_settings_beside_a_log_that_this_machine_did_not_write_are_refused")
    else {
        return;
    };
    let url = format!("{}/runs", w.bucket("forged-sidecar"));
    let server = MockServer::start(vec![long_call("3.5"), MockReply::text("never")]);
    let (one, _id) = stopped_run(w, &url, &server);
    // Someone (a tool in the local environment, or whoever handed the log
    // over) points the run at another bucket and another workspace.
    let sidecar = wal_d(&one.wal()).join("replicate.json");
    let mut sc: Value = serde_json::from_slice(&std::fs::read(&sidecar).unwrap()).unwrap();
    sc["url"] = Value::String(format!("{}/elsewhere", w.bucket("forged-sidecar-other")));
    sc["workspace"] = Value::String("/".into());
    std::fs::write(&sidecar, serde_json::to_vec(&sc).unwrap()).unwrap();
    let before = std::fs::read(one.wal()).unwrap();
    let requests = server.request_count();
    let mut c = one.resume_cmd();
    w.env(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("this machine did not write"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(one.wal()).unwrap(), before);
    assert_eq!(server.request_count(), requests);
}

#[test]
fn replication_settings_of_another_run_copied_beside_a_log_are_refused() {
    let Some(w) = weed("replication_settings_of_another_run_copied_beside_a_log_are_refused")
    else {
        return;
    };
    let url = format!("{}/runs", w.bucket("copied-sidecar"));
    let server = MockServer::start(vec![
        long_call("3.5"),
        MockReply::text("a is done"),
        long_call("3.5"),
        MockReply::text("b is done"),
    ]);
    // Run a is lost with its machine and resumed from the bucket on machine
    // `two`, into two's workspace: its settings there name that workspace.
    let (_one, a) = stopped_run(w, &url, &server);
    let two = Sandbox::new();
    let out = output(resume_cmd(&two, w, &format!("{url}/{a}"), ""));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let a_settings =
        wal_d(&two.home().join("runs").join(format!("{a}.wal"))).join("replicate.json");
    let a_text = std::fs::read_to_string(&a_settings).unwrap();
    let ws = std::fs::canonicalize(two.ws()).unwrap();
    assert!(a_text.contains(ws.to_str().unwrap()), "{a_text}");
    // Run b, on the same machine (the same home) in another workspace,
    // replicated to the same bucket, stopped in the middle of a call.
    let three = Sandbox::new();
    let mut c = run_cmd(&three, w, &server.base_url(), &url, "");
    c.env("TINYAGENT_HOME", two.home());
    let b = stop_in_long_call(&three, c);
    assert_ne!(a, b);
    // Someone puts a's settings beside b's log: followed, they would move b
    // into a's workspace.
    let b_settings = wal_d(&three.wal()).join("replicate.json");
    let b_own = std::fs::read(&b_settings).unwrap();
    std::fs::copy(&a_settings, &b_settings).unwrap();
    std::fs::write(two.ws().join("a.txt"), "a's work\n").unwrap();
    let a_files = tree_of(&two.ws());
    let before = std::fs::read(three.wal()).unwrap();
    let in_bucket = bucket_log(w, &url, &b);
    let requests = server.request_count();
    let mut c = three.resume_cmd();
    c.env("TINYAGENT_HOME", two.home());
    w.env(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("this machine did not write for run {b}")),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(three.wal()).unwrap(), before);
    assert_eq!(bucket_log(w, &url, &b), in_bucket);
    assert_eq!(server.request_count(), requests);
    assert_eq!(tree_of(&two.ws()), a_files);
    // Its own settings put back, b resumes where it works.
    std::fs::write(&b_settings, b_own).unwrap();
    let mut c = three.resume_cmd();
    c.env("TINYAGENT_HOME", two.home());
    w.env(&mut c);
    let out = output(c);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(bucket_log(w, &url, &b), std::fs::read(three.wal()).unwrap());
}

/// A resume from the bucket that the local config refuses (the run was
/// written with a hook this machine does not configure) is refused before
/// the run is taken over: the bucket's manifest (writer, epoch) is as it
/// was, no log or staging directory is left under $TINYAGENT_HOME, and the
/// workspace is untouched. The same resume with the hook configured goes
/// on (the refusal was the config's, not the bucket's).
#[test]
fn a_resume_from_the_bucket_the_local_config_refuses_takes_nothing_over() {
    let Some(w) = weed("a_resume_from_the_bucket_the_local_config_refuses_takes_nothing_over")
    else {
        return;
    };
    let url = format!("{}/runs", w.bucket("refused-resume"));
    let server = MockServer::start(vec![long_call("30"), MockReply::text("done")]);
    let hooked = "[hooks]\npre_tool = \"true\"\n";
    let one = Sandbox::new();
    let id = stop_in_long_call(&one, run_cmd(&one, w, &server.base_url(), &url, hooked));
    let bucket = client(w, &url);
    let (before, _) = tinyagent::replicate::fetch::manifest(&bucket, &id)
        .unwrap_or_else(|e| panic!("manifest: {e}"));
    let two = Sandbox::new();
    std::fs::write(two.ws().join("mine.txt"), "the person's\n").unwrap();
    std::fs::remove_file(two.ws().join("mine.txt")).unwrap();
    let run_url = format!("{url}/{id}");
    let out = output(resume_cmd(&two, w, &run_url, ""));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hooks.pre_tool"),
        "the refusal names the hook: {}",
        stderr(&out)
    );
    let (after, _) = tinyagent::replicate::fetch::manifest(&bucket, &id)
        .unwrap_or_else(|e| panic!("manifest: {e}"));
    assert_eq!(
        (&after.writer, after.epoch),
        (&before.writer, before.epoch),
        "a refused resume took the run over"
    );
    let runs = two.home().join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "a refused resume left {left:?} in {}",
        runs.display()
    );
    assert_eq!(
        std::fs::read_dir(two.ws()).unwrap().count(),
        0,
        "a refused resume wrote into the workspace"
    );
    // With the hook configured the same resume goes on.
    let out = output(resume_cmd(&two, w, &run_url, hooked));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (taken, _) = tinyagent::replicate::fetch::manifest(&bucket, &id)
        .unwrap_or_else(|e| panic!("manifest: {e}"));
    assert_eq!(taken.epoch, before.epoch + 1);
}
