//! Criterion benchmarks of the storage layer (`cargo bench --bench save`):
//!
//! - `save/<method>/<messages>`: the cost of saving one more event into a run
//!   of 10 .. 10,000 messages with the log, a raw fdatasync append, and a
//!   whole-file checkpoint with and without fsync (the same rig as
//!   `tinyagent bench save`, see `tinyagent::bench::save`).
//! - `replay/*`: a full scan of a ~50 MB log (MB/s), bare and with the state fold.
//! - `resume/*`: `Store::open` of a 1,000-record and a 100,000-record log
//!   (compacting every 50 steps), with a snapshot covering the log and
//!   without one.
//! - `append_during_snapshot/*`: `Store::append` on a large run with no
//!   background snapshots, and with the compactor writing snapshots all the
//!   time; per-append p50/p99 are printed after the group.
//! - `append_latency_split` (printed, not criterion): appends on one store
//!   whose compactor snapshots now and then, split into those that ran while
//!   a snapshot was being written and those that did not, p50/p99 of each.
//!
//! Sample counts are modest (10 samples, 2 s) so the whole file runs in a few
//! minutes on 2 cores. Under `cargo test --benches` (no `--bench` argument)
//! every size shrinks so the check takes seconds. Scratch files go to cargo's
//! target tmp dir, on the project's file system (fsync must be real).

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tinyagent::bench::run::SyntheticRun;
use tinyagent::bench::save::{Method, SaveRig};
use tinyagent::bench::summarize;
use tinyagent::event::{Event, StepSaved, Usage};
use tinyagent::store::{self, Store, StoreOptions};
use tinyagent_store::wal::reader;

/// Sizes for a real run and for the quick check under `cargo test --benches`.
struct Sizes {
    lengths: Vec<u64>,
    replay_messages: u64,
    resume_records: [u64; 2],
    snapshot_run_messages: u64,
    split_every: u64,
    split_appends: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                lengths: vec![10, 100],
                replay_messages: 200,
                resume_records: [100, 1_000],
                snapshot_run_messages: 100,
                split_every: 10,
                split_appends: 40,
            }
        } else {
            Sizes {
                lengths: vec![10, 100, 1_000, 10_000],
                // About 4.1 KB of log per two messages: ~50 MB.
                replay_messages: 24_000,
                resume_records: [1_000, 100_000],
                snapshot_run_messages: 10_000,
                split_every: 500,
                split_appends: 4_000,
            }
        }
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tinyagent-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir in the target tmp dir")
}

/// Writes `run`'s records as a log file and returns its length.
fn write_log(path: &Path, run: &SyntheticRun) -> u64 {
    let bytes = run.log_bytes().expect("framing the run");
    std::fs::write(path, &bytes).expect("writing the log");
    bytes.len() as u64
}

/// A run with about `records` records (four per step) of small tool outputs
/// that compacts every 50 steps, as a long real run does under its
/// threshold: the state a snapshot holds stays bounded however long the run.
fn run_of_records(records: u64) -> SyntheticRun {
    SyntheticRun::compacting(2 + records.saturating_sub(1) / 2, 200, 50)
}

fn save_cost(c: &mut Criterion, sizes: &Sizes, dir: &Path) {
    let mut group = c.benchmark_group("save");
    group.sampling_mode(SamplingMode::Flat);
    for &messages in &sizes.lengths {
        let mut rig = SaveRig::new(dir, messages, 3000).expect("building the rig");
        for method in Method::ALL {
            group.bench_function(BenchmarkId::new(method.name(), messages), |b| {
                b.iter(|| rig.save(method).expect("save"))
            });
            rig.settle(method).expect("settle");
        }
        rig.remove().expect("removing the rig");
    }
    group.finish();
}

fn replay(c: &mut Criterion, sizes: &Sizes, dir: &Path) {
    let path = dir.join("replay.wal");
    let len = write_log(&path, &SyntheticRun::new(sizes.replay_messages, 3000));
    let mut group = c.benchmark_group("replay");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Bytes(len));
    group.bench_function(BenchmarkId::new("full_scan", len), |b| {
        b.iter(|| reader::scan::<Event>(&path, None, |_, _| {}).expect("scan"))
    });
    group.bench_function(BenchmarkId::new("scan_and_fold", len), |b| {
        b.iter(|| store::load(&path).expect("load"))
    });
    group.finish();
    std::fs::remove_file(&path).expect("removing the replay log");
}

fn no_snapshots() -> StoreOptions {
    StoreOptions {
        snapshot_every: 0,
        ..StoreOptions::default()
    }
}

fn step_saved(step: u64) -> Event {
    Event::StepSaved(StepSaved {
        step,
        usage_total: Usage::default(),
        cost_usd_total: 0.0,
    })
}

/// A log of about `records` records with a snapshot covering all of them,
/// and a copy of the same log without one.
fn resume_pair(dir: &Path, records: u64) -> (PathBuf, PathBuf) {
    let run = run_of_records(records);
    let with = dir.join(format!("resume-{records}.wal"));
    let without = dir.join(format!("resume-{records}-nosnap.wal"));
    write_log(&with, &run);
    std::fs::copy(&with, &without).expect("copying the log");
    // One more record through a store with a compactor, then close: the
    // compactor's final snapshot covers the whole log.
    let opts = StoreOptions {
        snapshot_every: u64::MAX,
        ..StoreOptions::default()
    };
    let (mut s, _) = Store::open(&with, opts).expect("opening the log");
    s.append(step_saved(run.steps + 1)).expect("append");
    s.close().expect("closing with a final snapshot");
    let (_, report) = Store::open(&with, no_snapshots()).expect("reopening");
    assert!(report.snapshot.is_some(), "no snapshot was written");
    let (_, report) = Store::open(&without, no_snapshots()).expect("reopening");
    assert!(report.snapshot.is_none());
    (with, without)
}

fn resume(c: &mut Criterion, sizes: &Sizes, dir: &Path) {
    let mut group = c.benchmark_group("resume");
    group.sampling_mode(SamplingMode::Flat);
    for records in sizes.resume_records {
        let (with, without) = resume_pair(dir, records);
        for (name, path) in [("snapshot", &with), ("full_replay", &without)] {
            group.bench_function(BenchmarkId::new(name, records), |b| {
                b.iter(|| Store::open(path, no_snapshots()).expect("open"))
            });
        }
    }
    group.finish();
}

fn append_during_snapshot(c: &mut Criterion, sizes: &Sizes, dir: &Path) {
    let run = SyntheticRun::new(sizes.snapshot_run_messages, 3000);
    let mut group = c.benchmark_group("append_during_snapshot");
    group.sampling_mode(SamplingMode::Flat);
    let mut summaries = Vec::new();
    // `snapshot_every` 20: on a run this size a snapshot takes far longer than
    // 20 appends, so the compactor is writing one nearly all the time.
    for (name, every) in [("no_snapshots", 0), ("snapshot_every_20", 20)] {
        let path = dir.join(format!("append-{name}.wal"));
        write_log(&path, &run);
        let opts = StoreOptions {
            snapshot_every: every,
            ..StoreOptions::default()
        };
        let (mut s, _) = Store::open(&path, opts).expect("opening the log");
        let mut times = Vec::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    s.append(run.next.clone()).expect("append");
                    let d = t.elapsed();
                    times.push(d.as_secs_f64() * 1e6);
                    total += d;
                }
                total
            })
        });
        let snaps = s.take_snapshot_notices().len();
        s.close().expect("close");
        summaries.push((name, summarize(&times), p99(&mut times), times.len(), snaps));
        std::fs::remove_file(&path).expect("removing the log");
    }
    group.finish();
    for (name, s, p99, n, snaps) in summaries {
        println!(
            "append_during_snapshot/{name}: {n} appends, p50 {:.0} us, p99 {p99:.0} us, {snaps} snapshots written meanwhile",
            s.median_us
        );
    }
}

/// Appends on one store whose compactor snapshots every `every` records, each
/// append classed by whether a snapshot was being written while it ran (the
/// snapshot hook marks a start, the notice marks the end). Both classes share
/// the same minutes of the machine, so drift hits them alike.
fn append_latency_split(sizes: &Sizes, dir: &Path) {
    let run = SyntheticRun::new(sizes.snapshot_run_messages, 3000);
    let path = dir.join("append-split.wal");
    write_log(&path, &run);
    let started = Arc::new(AtomicU64::new(0));
    let hook_started = Arc::clone(&started);
    let opts = StoreOptions {
        snapshot_every: sizes.split_every,
        snapshot_hook: Some(Arc::new(move |_seq| {
            hook_started.fetch_add(1, Ordering::SeqCst);
        })),
        ..StoreOptions::default()
    };
    let (mut s, _) = Store::open(&path, opts).expect("opening the log");
    let (mut finished, mut idle, mut during) = (0u64, Vec::new(), Vec::new());
    for _ in 0..sizes.split_appends {
        finished += s.take_snapshot_notices().len() as u64;
        let busy_before = started.load(Ordering::SeqCst) > finished;
        let t = Instant::now();
        s.append(run.next.clone()).expect("append");
        let us = t.elapsed().as_secs_f64() * 1e6;
        finished += s.take_snapshot_notices().len() as u64;
        let busy_after = started.load(Ordering::SeqCst) > finished;
        if busy_before || busy_after {
            during.push(us);
        } else {
            idle.push(us);
        }
    }
    s.close().expect("close");
    for (name, mut times) in [("idle", idle), ("during_snapshot", during)] {
        let sum = summarize(&times);
        println!(
            "append_latency_split/{name}: {} appends, p50 {:.0} us, p99 {:.0} us",
            times.len(),
            sum.median_us,
            p99(&mut times)
        );
    }
    println!(
        "append_latency_split: {} snapshots of a {}-message run, one every {} records",
        finished, sizes.snapshot_run_messages, sizes.split_every
    );
    std::fs::remove_file(&path).expect("removing the log");
}

fn p99(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let rank = ((0.99 * times.len() as f64).ceil() as usize).clamp(1, times.len().max(1));
    times.get(rank - 1).copied().unwrap_or(0.0)
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes = Sizes::new(quick);
    let dir = scratch();
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300))
        .configure_from_args();
    save_cost(&mut c, &sizes, dir.path());
    replay(&mut c, &sizes, dir.path());
    resume(&mut c, &sizes, dir.path());
    append_during_snapshot(&mut c, &sizes, dir.path());
    c.final_summary();
    append_latency_split(&sizes, dir.path());
}
