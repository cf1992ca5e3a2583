//! The agent's own time per step (`cargo bench --bench step`): real runs of
//! the binary against a loopback OpenAI-compatible server that answers at
//! once. A run reports (event `run.stats` in `--json`) its wall time and the
//! time spent in tools and in fdatasync; the server measures the time it
//! spent on each request at its socket, from the last read of the request
//! to the last write of the answer (`support::mock::timed`). The agent's
//! own time is the wall time minus the tools' and the server's: building
//! and sending the request, reading the reply, the log, events. (`run.stats`' own `overhead_ms` counts the whole model
//! request, serialization and HTTP client included, as the model's; the
//! summary prints it too.)
//!
//! - `step_100k/*` and `step_400k/*`: steps of one `read` of a 500-byte file
//!   at a model view held near 100 KB and near 400 KB. Each measured run
//!   first reads a 72 KB file once (100 KB) or five times (400 KB), then
//!   makes [`MEASURED`] small steps; a run of the fill steps alone, measured
//!   alongside, is subtracted, so only the small steps count. Criterion is
//!   given the agent's own time per step (`with_fdatasync`), the same minus
//!   the time the same runs spent in fdatasync (`without_fdatasync`), and
//!   `raw_fdatasync`: one appending `write` of a 1 KB line and `fdatasync`
//!   on a plain file in the same scratch directory (the floor a durable step
//!   is compared with; a one-call step makes two sync points). The summary
//!   also gives the same ratio against a raw fdatasync that follows
//!   [`SPACED`] of busy work, as the agent's syncs follow other work.
//! - `read_only_calls/*`: three `grep`s over a 12 MB tree, asked for in one
//!   response (`one_step`: they run at once where the binary supports it)
//!   and one per step (`three_steps`); the time is the wall time minus the
//!   server's, per three calls.
//!
//! After the groups, a summary pass makes seven rounds, each measuring the
//! raw fdatasync and both views in the same minute, and prints the medians
//! of the per-round values and ratios (what docs/performance.md quotes),
//! with the agent process's CPU time per step (getrusage of the finished
//! run: all its threads, kernel time included), which the neighbours on a
//! shared machine disturb far less than wall time.
//!
//! `TINYAGENT_BENCH_BIN` runs another build of the binary (an older commit,
//! for before/after numbers); the default is the one cargo built. Scratch
//! files go to cargo's target tmp dir (a real file system: fdatasync must
//! cost what it costs). Under `cargo test --benches` everything shrinks to a
//! quick check.

#[path = "../tests/support/mock/mod.rs"]
mod common;

use common::{MockReply, MockServer};
use criterion::{Criterion, SamplingMode};
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Small steps in each measured run.
const MEASURED: u64 = 40;

/// The work before each sync of the spaced raw fdatasync: about the time
/// between two of a step's syncs here (0.2 ms of the agent's own and the
/// server's answer a step, over two syncs).
const SPACED: Duration = Duration::from_micros(150);

/// The binary under test.
fn binary() -> PathBuf {
    std::env::var_os("TINYAGENT_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tinyagent")))
}

/// The workspace every run uses: `small.txt` (500 bytes), `fill.txt`
/// (72 KB of text, what holds the view near its size) and `tree/` (the
/// grep calls' 12 MB).
fn workspace(quick: bool) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("tinyagent-step-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir in the target tmp dir");
    let line = "the quick brown fox jumps over the lazy dog, then reads the log again\n";
    let small: String = line.repeat(8);
    std::fs::write(dir.path().join("small.txt"), &small.as_bytes()[..500]).expect("small file");
    std::fs::write(
        dir.path().join("fill.txt"),
        line.repeat(72_000 / line.len()),
    )
    .expect("fill");
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).expect("tree");
    let files = if quick { 4 } else { 400 };
    let body = line.repeat(30_000 / line.len());
    for i in 0..files {
        std::fs::write(tree.join(format!("f{i:03}.txt")), &body).expect("tree file");
    }
    dir
}

/// What one run reported.
#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    wall: f64,
    tools: f64,
    /// The server's time answering.
    server: f64,
    /// `overhead_ms`: wall minus model (the whole request) minus tools.
    overhead: f64,
    fsync: f64,
    /// The run's CPU time (user and system, all its threads).
    cpu: f64,
    /// Size of the last request body the server received, in bytes.
    last_request: usize,
}

/// Runs the binary once: `replies` then a final text answer.
fn run(ws: &Path, replies: Vec<MockReply>) -> Stats {
    let server = MockServer::start(replies);
    let wal = ws.join("run.wal");
    let _ = std::fs::remove_file(&wal);
    let cpu_before = children_cpu_ms();
    let out = Command::new(binary())
        .args([
            "run",
            "--json",
            "--model",
            "m",
            "--base-url",
            &server.base_url(),
        ])
        .arg("--cwd")
        .arg(ws)
        .arg("--wal")
        .arg(&wal)
        .arg("bench a step")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("run tinyagent");
    let cpu = children_cpu_ms() - cpu_before;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "run.stats")
        .expect("run.stats event");
    let last_request = server.requests().last().map_or(0, |b| b.to_string().len());
    let _ = std::fs::remove_file(&wal);
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Stats {
        wall: f("wall_ms"),
        tools: f("tools_ms"),
        server: server.busy().as_secs_f64() * 1000.0,
        overhead: f("overhead_ms"),
        fsync: f("fsync_ms"),
        cpu,
        last_request,
    }
}

/// CPU time of every child this process has waited for, in ms.
fn children_cpu_ms() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
    ms(u.user_time()) + ms(u.system_time())
}

fn read(path: &str) -> MockReply {
    MockReply::tool_call("read", json!({ "path": path }))
}

/// `fills` reads of fill.txt, then `small` reads of small.txt.
fn step_run(ws: &Path, fills: usize, small: u64) -> Stats {
    let mut replies: Vec<MockReply> = (0..fills).map(|_| read("fill.txt")).collect();
    replies.extend((0..small).map(|_| read("small.txt")));
    run(ws, replies)
}

impl Stats {
    /// The agent's own time: wall minus tools minus the server.
    fn own(&self) -> f64 {
        self.wall - self.tools - self.server
    }
}

/// Per small step, in ms: the agent's own time with and without the time in
/// fdatasync, `run.stats`' overhead, and the mean size of the last request.
#[derive(Debug, Clone, Copy, Default)]
struct PerStep {
    with: f64,
    without: f64,
    overhead: f64,
    /// CPU time of the agent process (all threads, kernel included).
    cpu: f64,
    /// The server's time answering (taken off `with` and `without`).
    server: f64,
    last_request: usize,
}

/// [`PerStep`] at a view held by `fills` fill reads, over `runs` measured
/// runs of `small` steps, less a run of the fill steps alone.
fn per_small_step(ws: &Path, fills: usize, runs: u64, small: u64) -> PerStep {
    let base = step_run(ws, fills, 0);
    let mut sum = PerStep::default();
    for _ in 0..runs {
        let s = step_run(ws, fills, small);
        sum.with += s.own() - base.own();
        sum.without += (s.own() - s.fsync) - (base.own() - base.fsync);
        sum.overhead += s.overhead - base.overhead;
        sum.cpu += s.cpu - base.cpu;
        sum.server += s.server - base.server;
        sum.last_request += s.last_request;
    }
    let steps = (runs * small) as f64;
    PerStep {
        with: (sum.with / steps).max(0.0),
        without: (sum.without / steps).max(0.0),
        overhead: (sum.overhead / steps).max(0.0),
        cpu: (sum.cpu / steps).max(0.0),
        server: (sum.server / steps).max(0.0),
        last_request: sum.last_request / runs.max(1) as usize,
    }
}

/// One appending write of a 1 KB line and fdatasync, `n` times; the
/// durations.
fn raw_fdatasync(dir: &Path, n: u64) -> Vec<Duration> {
    raw_fdatasync_after(dir, n, Duration::ZERO)
}

/// The same appends and syncs, each after `work` of busy CPU (timed
/// separately): a sync in the agent's rhythm follows other work, and one
/// that does costs more than one in a tight loop.
fn raw_fdatasync_after(dir: &Path, n: u64, work: Duration) -> Vec<Duration> {
    let path = dir.join("raw.log");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .expect("raw log");
    let mut line = vec![b'x'; 1023];
    line.push(b'\n');
    let times = (0..n)
        .map(|_| {
            let busy = Instant::now();
            while busy.elapsed() < work {
                std::hint::spin_loop();
            }
            let t = Instant::now();
            f.write_all(&line).expect("raw write");
            f.sync_data().expect("raw fdatasync");
            t.elapsed()
        })
        .collect();
    drop(f);
    let _ = std::fs::remove_file(&path);
    times
}

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x.max(0.0) / 1000.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn step_groups(c: &mut Criterion, ws: &Path, small: u64) {
    for (name, fills) in [("step_100k", 1), ("step_400k", 5)] {
        let mut g = c.benchmark_group(name);
        g.sampling_mode(SamplingMode::Flat);
        g.bench_function("raw_fdatasync", |b| {
            b.iter_custom(|iters| raw_fdatasync(ws, iters).iter().sum())
        });
        // Each iteration is one small step; runs of `small` steps each.
        g.bench_function("with_fdatasync", |b| {
            b.iter_custom(|iters| {
                let runs = iters.div_ceil(small);
                ms(per_small_step(ws, fills, runs, small).with * iters as f64)
            })
        });
        g.bench_function("without_fdatasync", |b| {
            b.iter_custom(|iters| {
                let runs = iters.div_ceil(small);
                ms(per_small_step(ws, fills, runs, small).without * iters as f64)
            })
        });
        g.finish();
    }
}

fn greps() -> Vec<(&'static str, Value)> {
    ["lazy cat", "quick [0-9]+ fox", "dog, then writes"]
        .into_iter()
        .map(|p| ("grep", json!({ "pattern": p, "path": "tree" })))
        .collect()
}

/// Wall time minus the server's per three grep calls, with `steps` steps
/// of three calls at once (`together`) or `3 * steps` steps of one.
fn grep_run(ws: &Path, steps: u64, together: bool) -> f64 {
    let replies: Vec<MockReply> = if together {
        (0..steps).map(|_| MockReply::tool_calls(greps())).collect()
    } else {
        (0..steps)
            .flat_map(|_| greps().into_iter().map(|(n, a)| MockReply::tool_call(n, a)))
            .collect()
    };
    let s = run(ws, replies);
    (s.wall - s.server) / steps as f64
}

fn read_only_group(c: &mut Criterion, ws: &Path, steps: u64) {
    let mut g = c.benchmark_group("read_only_calls");
    g.sampling_mode(SamplingMode::Flat);
    for (name, together) in [("one_step", true), ("three_steps", false)] {
        // Each iteration is three calls.
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let runs = iters.div_ceil(steps);
                let total: f64 = (0..runs).map(|_| grep_run(ws, steps, together)).sum();
                ms(total / runs as f64 * iters as f64)
            })
        });
    }
    g.finish();
}

/// `rounds` rounds; each measures the raw fdatasync (median of 50), then
/// one measured run at each view, then one grep run of each kind; prints
/// the medians of the rounds.
fn summary(ws: &Path, rounds: usize, small: u64) {
    let (mut raw, mut spaced) = (Vec::new(), Vec::new());
    let mut views: [Vec<PerStep>; 2] = [Vec::new(), Vec::new()];
    let (mut together, mut apart) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut r: Vec<f64> = raw_fdatasync(ws, 50)
            .iter()
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        raw.push(median(&mut r));
        let mut r: Vec<f64> = raw_fdatasync_after(ws, 50, SPACED)
            .iter()
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        spaced.push(median(&mut r));
        for (k, fills) in [1usize, 5].into_iter().enumerate() {
            views[k].push(per_small_step(ws, fills, 1, small));
        }
        together.push(grep_run(ws, 5, true));
        apart.push(grep_run(ws, 5, false));
    }
    println!(
        "step summary, {} ({rounds} rounds, medians):",
        binary().display()
    );
    println!(
        "  raw fdatasync (1 KB append)   {:.3} ms",
        median(&mut raw.clone())
    );
    println!(
        "  raw fdatasync, each after {} us of work   {:.3} ms",
        SPACED.as_micros(),
        median(&mut spaced.clone())
    );
    for (k, name) in ["100k", "400k"].iter().enumerate() {
        let col = |f: &dyn Fn(usize, &PerStep) -> f64| {
            let mut v: Vec<f64> = views[k].iter().enumerate().map(|(i, p)| f(i, p)).collect();
            median(&mut v)
        };
        println!(
            "  view {name} (last request {} bytes): own time with fdatasync {:.3} ms/step \
             = {:.2}x raw ({:.2}x the spaced one), without {:.3} ms/step; \
             run.stats overhead {:.3} ms/step; CPU {:.3} ms/step; server {:.3} ms/step",
            views[k].last().map_or(0, |p| p.last_request),
            col(&|_, p| p.with),
            col(&|i, p| p.with / raw[i]),
            col(&|i, p| p.with / spaced[i]),
            col(&|_, p| p.without),
            col(&|_, p| p.overhead),
            col(&|_, p| p.cpu),
            col(&|_, p| p.server),
        );
    }
    let (t, a) = (median(&mut together), median(&mut apart));
    println!(
        "  3 greps: in one step {t:.2} ms, one per step {a:.2} ms ({:.2}x)",
        if t > 0.0 { a / t } else { 0.0 }
    );
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let ws = workspace(quick);
    let small = if quick { 2 } else { MEASURED };
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(if quick { 1 } else { 3 }))
        .warm_up_time(Duration::from_millis(if quick { 100 } else { 500 }))
        .configure_from_args();
    step_groups(&mut c, ws.path(), small);
    read_only_group(&mut c, ws.path(), if quick { 1 } else { 3 });
    c.final_summary();
    summary(ws.path(), if quick { 1 } else { 7 }, small);
}
