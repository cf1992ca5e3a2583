//! Kill torture of `resume s3://…` while it restores a 4,000-file
//! workspace: each round a new machine resumes the run from the bucket and
//! is killed with SIGKILL at a random moment (half the rounds once the log
//! is being put in place, so mostly during the restore), then the same
//! command is run again on that machine and must finish (exit 0).
//!
//! After every rerun the workspace is exactly the run's last checkpoint,
//! and no checkpoint the bucket's log names has fewer files than the one
//! before the kills (a half-restored workspace was never checkpointed and
//! shipped).
//!
//! `TINYAGENT_RESTORE_KILLS` sets the number of rounds (default 6);
//! `TINYAGENT_TORTURE_SEED` replays a run.

use crate::support::checkpoints::tree_of;
use crate::support::e2e::{Sandbox, bin};
use crate::support::mock::{MockReply, MockServer};
use crate::support::require::require;
use crate::support::s3::{self, Weed};
use crate::support::torture;
use crate::support::torture::driver::{Ending, kill_at};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FILES: usize = 4000;

fn client(w: &Weed, url: &str) -> tinyagent::replicate::bucket::Bucket {
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
    .unwrap()
}

fn resume_cmd(machine: &Sandbox, w: &Weed, run_url: &str, round: u64) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(machine.dir.path())
        .arg("resume")
        .arg(run_url)
        .arg("--cwd")
        .arg(machine.ws())
        .arg("--message")
        .arg(format!("round {round}"))
        .arg("--config")
        .arg(machine.fast_config("[replicate]\nlease_s = 5\n"))
        .arg("--json")
        .env("TINYAGENT_HOME", machine.home())
        .env("XDG_CONFIG_HOME", machine.config_home())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(machine.path("err.txt")).unwrap())
        .stdin(Stdio::null());
    w.env(&mut c);
    c
}

/// How many files each checkpoint the bucket's log names holds, in order.
fn checkpoint_sizes(w: &Weed, url: &str, run_id: &str) -> Vec<usize> {
    let scratch = tempfile::tempdir().unwrap();
    let fetched = tinyagent::replicate::fetch::fetch(&client(w, url), run_id, scratch.path())
        .unwrap_or_else(|e| panic!("fetch: {e}"));
    let git_dir = scratch.path().join("store.git");
    tinyagent::replicate::fetch::write_store(&git_dir, &fetched.files).unwrap();
    let recs = crate::support::contract::read_bytes(&fetched.log);
    let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for r in recs.iter().filter(|r| r.kind == "workspace.checkpoint") {
        let tree = r.data["tree"].as_str().unwrap().to_string();
        let n = *sizes.entry(tree.clone()).or_insert_with(|| {
            let o = Command::new("git")
                .arg("--git-dir")
                .arg(&git_dir)
                .args(["ls-tree", "-r", "--name-only", &tree])
                .output()
                .unwrap();
            assert!(o.status.success(), "ls-tree {tree}");
            o.stdout.iter().filter(|&&b| b == b'\n').count()
        });
        out.push(n);
    }
    out
}

fn wait_exit(mut child: std::process::Child, machine: &Sandbox, what: &str) {
    let status = child.wait().unwrap();
    let err = std::fs::read_to_string(machine.path("err.txt")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{what}: {err}");
    assert!(!torture::panicked(&err), "{err}");
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

#[test]
fn kill_9_during_a_restore_from_the_bucket_then_a_rerun_restores_it_whole() {
    let test = "kill_9_during_a_restore_from_the_bucket_then_a_rerun_restores_it_whole";
    let Some(w) = require("s3", test, s3::shared()) else {
        return;
    };
    let rounds = torture::env_u64("TINYAGENT_RESTORE_KILLS", 6);
    let seed = torture::seed(test);
    let mut rng = fastrand::Rng::with_seed(seed);
    let url = format!("{}/restore", w.bucket("restore-torture"));
    let make =
        format!("mkdir -p d && for i in $(seq 1 {FILES}); do echo \"file $i\" > d/f$i.txt; done");
    let mut replies = vec![
        MockReply::tool_call("bash", serde_json::json!({ "command": make })),
        MockReply::text("made them"),
    ];
    replies.extend((0..400).map(|_| MockReply::text("nothing to do")));
    let server = MockServer::start(replies);
    let one = Sandbox::new();
    let mut c = one.run_cmd_cfg(
        &server.base_url(),
        "make files",
        "[replicate]\nlease_s = 5\n",
    );
    c.arg("--replicate").arg(&url);
    w.env(&mut c);
    let out = c.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = tree_of(&one.ws());
    assert!(expected.len() >= FILES, "{} files", expected.len());
    let run_id = crate::support::contract::read(&one.wal())[0].data["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let run_url = format!("{url}/{run_id}");
    let before = *checkpoint_sizes(w, &url, &run_id).last().unwrap();
    assert!(before >= FILES, "the last checkpoint holds {before} files");
    // One whole resume, timed: the kills land within that long.
    let m0 = Sandbox::new();
    let t0 = Instant::now();
    wait_exit(
        resume_cmd(&m0, w, &run_url, 0).spawn().unwrap(),
        &m0,
        "the timed resume",
    );
    let whole = t0.elapsed();
    assert_eq!(tree_of(&m0.ws()), expected);
    let (mut killed, mut in_restore, mut pending) = (0, 0, 0);
    // How long the latest whole resume took: the first one, timed on a
    // cold start, can be several times slower than the next ones on a
    // loaded machine, and kills drawn from its length would all come late.
    let mut recent = whole;
    for round in 1..=rounds {
        let m = Sandbox::new();
        let wal = m.home().join("runs").join(format!("{run_id}.wal"));
        let started = Instant::now();
        let mut child = resume_cmd(&m, w, &run_url, round).spawn().unwrap();
        let ending = if round % 2 == 0 {
            // Once the log's directory is in place: the restore is next.
            let d = Path::new(&format!("{}.d", wal.display())).to_path_buf();
            let deadline = Instant::now() + whole * 3;
            while !exists(&d) && Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            in_restore += 1;
            let ms = u64::try_from(recent.as_millis() / 2).unwrap().clamp(1, 800);
            kill_at(&mut child, Duration::from_millis(rng.u64(0..ms)))
        } else {
            let ms = u64::try_from(recent.as_millis()).unwrap();
            kill_at(&mut child, Duration::from_millis(rng.u64(0..ms.max(1))))
        };
        if matches!(ending, Ending::Killed) {
            killed += 1;
            let intent = Path::new(&format!("{}.d", wal.display())).join("restore.json");
            if exists(&intent) {
                pending += 1;
            }
        } else {
            // It finished before its kill: a whole resume, as long as
            // resumes take now; the next kills are drawn from that.
            recent = started.elapsed().max(Duration::from_millis(50));
        }
        // The same command again, on the same machine, finishes the job.
        let rerun = resume_cmd(&m, w, &run_url, round).spawn().unwrap();
        wait_exit(
            rerun,
            &m,
            &format!("seed {seed}: the rerun of round {round}"),
        );
        assert_eq!(
            tree_of(&m.ws()),
            expected,
            "seed {seed}: round {round}: the workspace is the last checkpoint"
        );
        let intent = Path::new(&format!("{}.d", wal.display())).join("restore.json");
        assert!(
            !exists(&intent),
            "seed {seed}: round {round}: a restore left pending"
        );
        assert!(
            !exists(&m.home().join("runs").join(format!(".incoming-{run_id}"))),
            "seed {seed}: round {round}: the staging directory was left"
        );
        let sizes = checkpoint_sizes(w, &url, &run_id);
        assert!(
            sizes
                .iter()
                .skip_while(|&&n| n < before)
                .all(|&n| n >= before),
            "seed {seed}: round {round}: a checkpoint with fewer files was shipped: {sizes:?}"
        );
    }
    assert!(killed > 0, "seed {seed}: no round was killed");
    eprintln!(
        "restore torture (seed {seed}): {rounds} rounds, {killed} killed ({in_restore} aimed at \
         the restore, {pending} with a restore pending), a whole resume takes {whole:?}"
    );
}
