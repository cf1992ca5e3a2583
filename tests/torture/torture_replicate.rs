//! Kill torture with replication on: a scripted task replicating in sync
//! mode to a real SeaweedFS is killed with SIGKILL at random moments, and
//! each time resumed from the bucket on a "new machine" (a fresh
//! `$TINYAGENT_HOME` and an empty workspace), until it completes.
//!
//! After each kill: every record the killed process acknowledged (printed
//! with `--json`) is in the bucket's log, and the bucket's log only grows
//! (each one is a byte prefix of the next). At the end the log is valid,
//! finished, and the workspace's ledger holds each scripted step at most
//! once, in order.
//!
//! `TINYAGENT_REPLICATE_KILLS` sets the number of kills (default 100);
//! `TINYAGENT_TORTURE_SEED` replays a run.

use crate::support::contract;
use crate::support::e2e::{Sandbox, bin};
use crate::support::require::require;
use crate::support::s3::{self, Weed};
use crate::support::torture;
use crate::support::torture::driver::{Ending, kill_at};
use crate::support::torture::faults::{acknowledged, run_args, write_script};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const TURNS: u64 = 200;

fn bucket_log(w: &Weed, url: &str, run_id: &str) -> Vec<u8> {
    let parsed = tinyagent::replicate::bucket::Url::parse(url).unwrap();
    let creds = tinyagent::replicate::bucket::Credentials {
        key_id: Some(s3::ACCESS_KEY.into()),
        secret: Some(s3::SECRET_KEY.into()),
        token: None,
    };
    let bucket = tinyagent::replicate::bucket::Bucket::connect_to(
        &parsed,
        &creds,
        Duration::from_secs(20),
        Some(w.endpoint()),
    )
    .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    tinyagent::replicate::fetch::fetch(&bucket, run_id, scratch.path())
        .unwrap_or_else(|e| panic!("fetch: {e}"))
        .log
}

fn resume_cmd(machine: &Sandbox, w: &Weed, run_url: &str) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(machine.dir.path())
        .arg("resume")
        .arg(run_url)
        .arg("--cwd")
        .arg(machine.ws())
        .arg("--json")
        // The killed writer's lease is live still: taken over at once
        // rather than waited out.
        .arg("--take-over")
        .env("TINYAGENT_HOME", machine.home())
        .env("XDG_CONFIG_HOME", machine.config_home())
        .stdin(Stdio::null());
    w.env(&mut c);
    c
}

fn outputs(machine: &Sandbox, cmd: &mut Command) {
    cmd.stdout(std::fs::File::create(machine.path("out.jsonl")).unwrap())
        .stderr(std::fs::File::create(machine.path("err.txt")).unwrap());
}

fn records_in(wal: &Path) -> usize {
    std::fs::read(wal)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

#[test]
fn sigkill_and_resume_from_the_bucket_on_a_new_machine_loses_nothing_acknowledged() {
    let test = "sigkill_and_resume_from_the_bucket_on_a_new_machine_loses_nothing_acknowledged";
    let Some(w) = require("s3", test, s3::shared()) else {
        return;
    };
    let kills = torture::env_u64("TINYAGENT_REPLICATE_KILLS", 100);
    let seed = torture::seed(test);
    let mut rng = fastrand::Rng::with_seed(seed);
    let url = format!("{}/torture", w.bucket("torture"));
    // The first machine; its script file stands in for the model server
    // (every machine reads it at the path the log records).
    let model = Sandbox::new();
    let script = write_script(&model, TURNS);
    let first = Sandbox::new();
    let mut cmd = Command::new(bin());
    cmd.args(run_args(&first, &script))
        .arg("--replicate")
        .arg(&url)
        .current_dir(first.dir.path())
        .env("TINYAGENT_HOME", first.home())
        .stdin(Stdio::null());
    w.env(&mut cmd);
    outputs(&first, &mut cmd);
    let mut child = cmd.spawn().unwrap();
    // Killed once its first records are stored (a run killed before its
    // first record has nothing to resume).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while records_in(&first.wal()) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut ending = kill_at(&mut child, Duration::from_millis(rng.u64(0..300)));
    let run_id = contract::read(&first.wal())[0].data["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let run_url = format!("{url}/{run_id}");
    let mut machine = first;
    let mut stored: Vec<u8> = Vec::new();
    let (mut killed, mut attempts) = (0u64, 1u64);
    loop {
        let acked = acknowledged(&std::fs::read(machine.path("out.jsonl")).unwrap_or_default());
        let now = bucket_log(w, &url, &run_id);
        assert!(
            now.starts_with(&stored),
            "seed {seed}: the bucket's log changed what it held before (attempt {attempts})"
        );
        let recs = contract::read_bytes(&now);
        for (seq, kind) in &acked {
            let r = recs.get((*seq - 1) as usize).unwrap_or_else(|| {
                panic!(
                    "seed {seed}: attempt {attempts} acknowledged {kind} seq {seq}, the bucket \
                     holds {} records",
                    recs.len()
                )
            });
            assert_eq!(&r.kind, kind, "seed {seed}: seq {seq}");
        }
        stored = now;
        match ending {
            Ending::Killed => killed += 1,
            Ending::Exited(status) => {
                let err = std::fs::read_to_string(machine.path("err.txt")).unwrap_or_default();
                assert_eq!(
                    status.code(),
                    Some(0),
                    "seed {seed}: attempt {attempts}: {err}"
                );
                assert!(!torture::panicked(&err), "{err}");
                break;
            }
        }
        // A new machine, and the run resumed there from the bucket.
        let next = Sandbox::new();
        let mut cmd = resume_cmd(&next, w, &run_url);
        outputs(&next, &mut cmd);
        let mut child = cmd.spawn().unwrap();
        attempts += 1;
        ending = if killed < kills {
            kill_at(&mut child, Duration::from_millis(rng.u64(50..600)))
        } else {
            kill_at(&mut child, Duration::from_secs(300))
        };
        // The killed machine is gone with its sandbox.
        machine = next;
    }
    assert!(killed >= kills.min(100), "{killed} kills");
    let wal = machine.home().join("runs").join(format!("{run_id}.wal"));
    let recs = contract::read(&wal);
    contract::check_write_order(&recs);
    assert_eq!(recs.last().unwrap().kind, "run.finished");
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        stored,
        "the bucket holds the whole log"
    );
    let ledger = std::fs::read_to_string(machine.ws().join("ledger.txt")).unwrap_or_default();
    let steps: Vec<u64> = ledger
        .lines()
        .map(|l| l.trim_start_matches('s').parse().unwrap())
        .collect();
    assert!(
        steps.windows(2).all(|p| p[0] < p[1]),
        "seed {seed}: each step at most once, in order: {steps:?}"
    );
    eprintln!(
        "replication torture (seed {seed}): {attempts} attempts, {killed} kills, {} records, \
         {} bytes in the bucket",
        recs.len(),
        stored.len()
    );
}
